//! What the [`crate::sampler::Sampler`] reads counters from: the kernel programs' maps
//! ([`KernelProbe`]), or in tests a scripted stand-in (`fake::FakeCounters`), so interval,
//! attribution and totals code is tested without root.

use crate::{KernelProbe, ProbeError, Snapshot};

/// A source of cumulative per-cgroup counters, destination pairs and loss counts.
pub trait CounterSource: Send {
    /// Reads every counter: totals since the source started, stamped with the time read.
    fn snapshot(&self) -> Result<Snapshot, ProbeError>;
}

impl CounterSource for KernelProbe {
    fn snapshot(&self) -> Result<Snapshot, ProbeError> {
        KernelProbe::snapshot(self)
    }
}
