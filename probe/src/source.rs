//! What the [`crate::sampler::Sampler`] reads counters from: the kernel programs' maps
//! ([`KernelProbe`]), or in tests a scripted stand-in (`fake::FakeCounters`), so interval,
//! attribution and totals code is tested without root.

use std::collections::HashMap;

use probe_common::RunqStats;

use crate::{KernelProbe, ProbeError, Snapshot};

/// A source of cumulative per-cgroup counters, destination pairs and loss counts.
pub trait CounterSource: Send {
    /// Reads every counter: totals since the source started, stamped with the time read.
    fn snapshot(&self) -> Result<Snapshot, ProbeError>;

    /// Run-queue delay totals by cgroup v2 id, read between snapshots (every 100 ms poll) for
    /// the sub-second windows; `None` when the source has none to give.
    fn runq(&self) -> Result<Option<HashMap<u64, RunqStats>>, ProbeError> {
        Ok(None)
    }

    /// Whether a poll should read [`Self::runq`] now: false while reading it would cost more
    /// than its budget (the task walk on a host with many threads), and the poll's windows
    /// then stay open until a poll that reads it (coarser, sums unchanged).
    fn runq_poll_due(&self) -> bool {
        true
    }
}

impl CounterSource for KernelProbe {
    fn snapshot(&self) -> Result<Snapshot, ProbeError> {
        KernelProbe::snapshot(self)
    }

    fn runq(&self) -> Result<Option<HashMap<u64, RunqStats>>, ProbeError> {
        match self.runq_unavailable() {
            Some(_) => Ok(None),
            None => KernelProbe::runq(self).map(Some),
        }
    }

    fn runq_poll_due(&self) -> bool {
        KernelProbe::runq_poll_due(self)
    }
}
