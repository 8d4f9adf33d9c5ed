//! The rows a herd run is made of, at the bottom of the workspace (aya's `-common` idea, for
//! user space): what the driver and the probe produce, what the store persists, what the
//! report reads. Nothing here measures, stores or renders; every type has its serde names
//! fixed, because stored runs are read back by later versions of herd.
//!
//! - [`driver`]: the driver's result stream — [`DriverEvent`]s carrying a
//!   [`DriverInterval`] per interval, a [`PhaseResult`] per phase and the [`RunResult`] —
//!   with per-op [`Outcome`] counts and [`LatencyHistogram`]s.
//! - [`probe`]: one [`ProbeInterval`] per sample: per container ([`ContainerInterval`]) and
//!   per source → destination pair ([`PairInterval`]).
//! - [`run`]: a stored run — its header [`RunMeta`], its shards [`ShardInfo`], and all of its
//!   rows as [`RunData`].
//! - [`seeding`]: what `herd run` seeded and what became of it.
//! - [`shard`]: which part of the plan a process runs (`--shard I/N`).
//! - [`waits`]: every kernel-side wait of a container and a pair (run-queue delay, PSI, OOM
//!   kills, listen drops, conntrack, retransmits), the probe's cells for why a request was
//!   slow.
//! - [`merge`]: the exact merge of several shards' driver rows.
//! - [`rollup`]: the exact merge of consecutive intervals of one timeline into a coarser one.
#![deny(missing_docs)]

pub mod driver;
pub mod histogram;
pub mod merge;
pub mod outcome;
pub mod probe;
pub mod rollup;
pub mod run;
pub mod seeding;
pub mod shard;
pub mod waits;

pub use driver::{
    CPU_SATURATED_SHARE, CheckFailure, DriverEvent, DriverHealth, DriverInterval,
    FAILED_CONNECTS_MIN, FAILED_CONNECTS_SHARE, GroupStats, IntervalOp, LAG_SATURATED_US, OpStats,
    OpenStats, OutcomeStats, PhaseKind, PhaseResult, PlayStats, RunResult, SLOWEST_PER_INTERVAL,
    Slo, SloMetric, SlowRequest, StreamStats, saturated,
};
pub use histogram::{HistogramError, Latency, LatencyHistogram};
pub use outcome::{Outcome, TlsProblem, TransportErrorKind};
pub use probe::{
    ContainerInterval, CountMap, Counts, CpuCell, CpuInterval, InboundCell, Log2Summary, Memory,
    OTHER_REMOTE, PairGauges, PairInterval, ProbeInterval, ProbeTotals, PublishedPort, Service,
    SocketCell, Throttling,
};
pub use probe_common::{Counter, HIST_BUCKETS, Log2Hist, Loss, N_COUNTERS, PairStats, RunqStats};
pub use rollup::{RolledUp, RollupError};
pub use run::{RunData, RunMeta, ShardInfo};
pub use seeding::{CleanupRecord, SeedRecord, TableCount};
pub use shard::{Shard, ShardError};
