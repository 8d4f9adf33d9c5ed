//! The report's content, independent of its format: per phase × op and whole-run per op, per
//! phase × container, per destination pair, a timeline, objectives and findings. Built from a
//! [`RunData`] by pure functions, so it is tested without root or timing luck.

mod containers;
mod ops;
mod pairs;
mod slo;
mod timeline;

use std::collections::BTreeMap;

use herd_driver::{Outcome, report::PhaseReport};
use herd_probe::sample::Interval;
use serde::{Deserialize, Serialize};

pub use containers::ContainerRow;
pub use ops::{Latencies, LatencyCell, NO_HISTOGRAM, OpRow, OpTotal, Split, totals};
pub use pairs::{DEFAULT_PAIR_ROWS, Log2Row, PairRow};
pub use slo::SloRow;
pub use timeline::{DriverPoint, TimelineContainer, TimelineOp, TimelinePoint};

use super::{RunData, findings};

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
    pub streams: Vec<super::play::StreamRow>,
    /// Per phase: groups formed, finished, failed, abandoned (empty without a `[group]`).
    #[serde(default)]
    pub groups: Vec<super::play::GroupRow>,
    /// Per open-model (rate) phase: arrivals scheduled, sent, late, dropped.
    #[serde(default)]
    pub open: Vec<super::play::OpenRow>,
    /// Per phase × container: CPU, throttling, memory, TCP.
    pub containers: Vec<ContainerRow>,
    /// Per source container → destination, whole run.
    pub pairs: Vec<PairRow>,
    /// One point per driver interval.
    pub timeline: Vec<TimelinePoint>,
    /// The scenario's objectives, checked per phase.
    pub slo: Vec<SloRow>,
    /// What the run found, with numbers.
    pub findings: Vec<findings::Finding>,
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

/// A number, or why there is none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Cell {
    /// The value.
    Value(f64),
    /// Why it is missing.
    Missing(String),
}

impl Cell {
    /// The value, if any.
    pub fn value(&self) -> Option<f64> {
        match self {
            Cell::Value(v) => Some(*v),
            Cell::Missing(_) => None,
        }
    }
}

pub(crate) fn secs(iv: &Interval) -> f64 {
    iv.interval_ns.max(1) as f64 / 1e9
}

/// The phase (name, index) a moment `t_ms` after the start falls in; `before` / `after`
/// outside every phase.
pub(crate) fn phase_at(phases: &[&PhaseReport], t_ms: u64) -> (String, Option<usize>) {
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

/// RFC 3339 (UTC, seconds) of `ms` since the epoch.
fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

impl Report {
    /// The outcomes the scenario expects of `op`.
    pub fn expected_of(&self, op: &str) -> &[Outcome] {
        let op = op.strip_prefix("hammer:").unwrap_or(op);
        self.expected.get(op).map_or(&[], Vec::as_slice)
    }

    /// Builds the report of `d`, with at most [`pairs::DEFAULT_PAIR_ROWS`] pair rows.
    pub fn build(d: &RunData) -> Self {
        Self::build_with_pair_rows(d, pairs::DEFAULT_PAIR_ROWS)
    }

    /// Builds the report of `d` with the `pair_rows` most active pairs (and those on the
    /// request path); the rest are one `other` row of sums.
    pub fn build_with_pair_rows(d: &RunData, pair_rows: usize) -> Self {
        let load_phases: Vec<&PhaseReport> =
            d.phases.iter().filter(|s| s.index.is_some()).collect();
        let probe_note = d.probe_missing.clone().unwrap_or_else(|| {
            if d.probe.is_empty() {
                "the probe recorded no interval".into()
            } else {
                String::new()
            }
        });
        let missing = |what: &str| Cell::Missing(format!("{what}: {probe_note}"));

        let ops = ops::rows(d);
        let totals = ops::totals(&ops);
        let containers = containers::rows(d, &load_phases, &missing);
        let duration_s: f64 = d
            .driver
            .iter()
            .map(|i| i.duration_ms as f64 / 1e3)
            .sum::<f64>()
            .max(d.probe.iter().map(secs).sum::<f64>());
        let timeline = timeline::points(d);
        let requests: u64 = d.driver.iter().flat_map(|i| &i.ops).map(|o| o.count).sum();
        let mut split = Split::default();
        for p in &timeline {
            split.add(p.split);
        }
        let pairs = pairs::bound(
            d,
            pairs::rows(d, duration_s, requests),
            pair_rows,
            duration_s,
        );

        let mut notes = Vec::new();
        if !probe_note.is_empty() {
            notes.push(format!("Kernel probe: {probe_note}"));
        }
        if d.final_report.is_none() {
            notes.push(format!(
                "The run did not finish (status `{}`): the report covers every interval recorded \
                 before it stopped; phase totals exist only for phases that ended.",
                d.meta.status
            ));
        }
        notes.extend(shard_notes(&d.meta.shards));
        if ops.iter().any(|o| o.histogram.is_none()) {
            notes.push(format!(
                "Some latencies were {NO_HISTOGRAM}: their phase rows show the percentiles the \
                 driver computed, and whole-run figures that would need them are missing."
            ));
        }
        let (streams, groups, open) = super::play::rows(&d.phases);
        let slo = slo::rows(&d.slo, &d.phases, &d.expected);
        if !d.slo.is_empty() && slo.is_empty() {
            notes.push(
                "The scenario has objectives, but no phase finished: nothing to check.".into(),
            );
        }
        let mut report = Report {
            schema_version: SCHEMA_VERSION,
            herd_version: env!("CARGO_PKG_VERSION").into(),
            expected: d.expected.clone(),
            run: RunSummary {
                id: d.meta.id,
                name: d.meta.name.clone(),
                scenario: d.meta.scenario.clone(),
                status: d.meta.status.clone(),
                started_unix_ms: d.meta.started_unix_ms,
                started_at: rfc3339(d.meta.started_unix_ms),
                duration_s,
                requests,
                errors: split.errors,
                split,
                saturated_intervals: d.driver.iter().filter(|i| i.driver.saturated).count() as u64,
                probe_intervals: d.probe.len() as u64,
                seeding: d
                    .seeded
                    .clone()
                    .map(|s| super::seeding::Seeding::new(s, d.seed_cleanup.clone())),
            },
            ops,
            totals,
            streams,
            groups,
            open,
            containers,
            pairs,
            timeline,
            slo,
            findings: Vec::new(),
            notes,
        };
        report.findings = findings::detect(&report, d);
        report
    }
}

/// What a sharded run's report says about its shards: how many merged, how far apart their
/// clocks started, and which did not run to the end with what they recorded.
fn shard_notes(shards: &[crate::ShardInfo]) -> Vec<String> {
    let Some(first) = shards.first() else {
        return Vec::new();
    };
    let count = first.count;
    let starts: Vec<i64> = shards.iter().filter_map(|s| s.started_unix_ns).collect();
    let ahead: Vec<i64> = shards.iter().filter_map(|s| s.clock_ahead_ns).collect();
    let skew = match (starts.iter().min(), starts.iter().max()) {
        (Some(a), Some(b)) if starts.len() > 1 && ahead.len() == starts.len() => {
            let (lo, hi) = (
                ahead.iter().min().copied().unwrap_or(0),
                ahead.iter().max().copied().unwrap_or(0),
            );
            format!(
                "; their plans' clocks started within {:.1} ms of each other on the run store's \
                 clock (their hosts' clocks read {:+.1} to {:+.1} ms off the run store's, \
                 which they corrected for)",
                (b - a) as f64 / 1e6,
                lo as f64 / 1e6,
                hi as f64 / 1e6
            )
        }
        (Some(a), Some(b)) if starts.len() > 1 => {
            format!(
                "; their plans' clocks started within {:.1} ms of each other (read on each \
                 host's wall clock, so across hosts it includes their clocks' offset)",
                (b - a) as f64 / 1e6
            )
        }
        _ => String::new(),
    };
    let mut notes = vec![format!(
        "Merged from {} of {count} shards: counts add and latency histograms merge exactly{skew}.",
        shards.len()
    )];
    for i in 0..count {
        if !shards.iter().any(|s| s.index == i) {
            notes.push(format!(
                "Shard {i}/{count} never registered: it recorded nothing."
            ));
        }
    }
    for s in shards.iter().filter(|s| !s.finished) {
        notes.push(format!(
            "Shard {}/{count} ({}, pid {}) is missing: it is `{}` and recorded {} intervals and \
             {} phase totals before it stopped, which the tables include; phases it did not \
             end lack its share.",
            s.index, s.host, s.pid, s.status, s.intervals, s.phases
        ));
    }
    notes
}

#[cfg(test)]
pub(crate) mod tests;
