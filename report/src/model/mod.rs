//! The report's content, independent of its format: per phase × op and whole-run per op, per
//! phase × container, per destination pair, a timeline, objectives and findings. Built from a
//! [`RunData`] by pure functions, so it is tested without root or timing luck.

pub mod attribution;
mod cell;
pub(crate) mod containers;
mod finding;
pub(crate) mod ops;
pub(crate) mod pairs;
pub mod play;
pub(crate) mod resolution;
pub(crate) mod slo;
pub(crate) mod timeline;
pub(crate) mod waits;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use cell::Cell;
pub use containers::ContainerRow;
pub use finding::Finding;
pub use ops::{Latencies, LatencyCell, NO_HISTOGRAM, OpRow, OpTotal, Split, totals};
pub use pairs::{DEFAULT_PAIR_ROWS, Log2Row, PairRow};
pub use slo::SloRow;
pub use timeline::{DriverPoint, TimelineContainer, TimelineOp, TimelinePoint};
pub use waits::{ListenerRow, RetransPoint, RetransRow, WaitPoint, WaitsRow};

use herd_model::{Outcome, PhaseResult, ProbeInterval};

/// The JSON report's schema version: bumped whenever a field changes meaning or goes.
pub const SCHEMA_VERSION: u32 = 2;

/// A report.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Report {
    /// The JSON form's schema version ([`SCHEMA_VERSION`]; docs/report.schema.json).
    pub schema_version: u32,
    /// The herd that built the report.
    pub herd_version: String,
    /// The run.
    pub run: RunSummary,
    /// Each op's expected outcomes (part of normal play, counted apart from ok and errors).
    #[serde(default)]
    pub expected: BTreeMap<String, Vec<Outcome>>,
    /// Per phase × op: the seeds' table (catalog routes included, `kind` = `catalog`).
    pub ops: Vec<OpRow>,
    /// Per op over the whole run (every phase it ran in; the hammer's apart).
    pub totals: Vec<OpTotal>,
    /// Per phase × stream or long-poll op (empty without stream ops).
    #[serde(default)]
    pub streams: Vec<play::StreamRow>,
    /// Per phase: groups formed, finished, failed, abandoned (empty without a `[group]`).
    #[serde(default)]
    pub groups: Vec<play::GroupRow>,
    /// Per open-model (rate) phase: arrivals scheduled, sent, late, dropped.
    #[serde(default)]
    pub open: Vec<play::OpenRow>,
    /// Per phase × container: CPU, throttling, memory, TCP.
    pub containers: Vec<ContainerRow>,
    /// Per source container → destination, whole run.
    pub pairs: Vec<PairRow>,
    /// One point per driver interval.
    pub timeline: Vec<TimelinePoint>,
    /// The scenario's objectives, checked per phase.
    pub slo: Vec<SloRow>,
    /// What the run found, with numbers.
    pub findings: Vec<Finding>,
    /// Why some cells have no value.
    pub notes: Vec<String>,
}

/// The run's header.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunSummary {
    /// Run id in its store.
    pub id: i64,
    /// Name.
    pub name: String,
    /// Scenario file.
    pub scenario: String,
    /// `finished`, `stopped`, `failed`, or `running` (killed: the report covers every
    /// completed interval).
    pub status: String,
    /// Start, ms since the epoch.
    pub started_unix_ms: i64,
    /// Start, RFC 3339 in UTC.
    pub started_at: String,
    /// Seconds covered by recorded intervals.
    pub duration_s: f64,
    /// Requests the driver made (all outcomes).
    pub requests: u64,
    /// ok / expected / errors over the whole run.
    pub split: Split,
    /// Requests whose outcome was an error (neither `ok` nor expected).
    pub errors: u64,
    /// Driver intervals flagged saturated.
    pub saturated_intervals: u64,
    /// Probe intervals recorded (0 when the probe did not run).
    pub probe_intervals: u64,
    /// What `herd run` seeded before the load (absent without a `[seed]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seeding: Option<super::seeding::Seeding>,
}

pub(crate) fn secs(iv: &ProbeInterval) -> f64 {
    iv.interval_ns.max(1) as f64 / 1e9
}

/// The phase (name, index) a moment `t_ms` after the start falls in; `before` / `after`
/// outside every phase.
pub(crate) fn phase_at(phases: &[&PhaseResult], t_ms: u64) -> (String, Option<usize>) {
    for s in phases {
        if t_ms >= s.start_ms && t_ms <= s.start_ms + s.duration_ms {
            return (s.phase.clone(), s.index);
        }
    }
    match phases.first() {
        Some(f) if t_ms < f.start_ms => ("before".into(), None),
        _ => ("after".into(), None),
    }
}

impl Report {
    /// The outcomes the scenario expects of `op`.
    pub fn expected_of(&self, op: &str) -> &[Outcome] {
        let op = op.strip_prefix("hammer:").unwrap_or(op);
        self.expected.get(op).map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
pub(crate) mod tests;
