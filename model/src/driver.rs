//! The driver's rows: the typed result stream (every interval, every phase's end, the whole
//! run) that a run recorder, a progress printer or a test reads. Latencies cross this
//! boundary twice: as percentiles for readers, and as [`LatencyHistogram`]s that merge
//! exactly, so whole-run and cross-run percentiles are computed, never averaged.

use std::{collections::BTreeMap, fmt};

use serde::{Deserialize, Serialize};

use crate::{
    histogram::{HistogramError, Latency, LatencyHistogram},
    outcome::Outcome,
};

/// One event of a run, in order: intervals as they pass, each phase's totals when all of its
/// ops have finished, and the whole run last.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum DriverEvent {
    /// One interval of the timeline (1 s by default).
    Interval(DriverInterval),
    /// A phase of the plan (or the hammer) ended and every op it started has been recorded.
    #[serde(alias = "step_end")]
    PhaseEnd(PhaseResult),
    /// The run is over.
    Done(Box<RunResult>),
}

/// One outcome of one op in one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutcomeStats {
    /// `ok`, `transport_error.reset`, `rate_limited`, a domain code, ...
    pub outcome: Outcome,
    /// How many ops ended so.
    pub count: u64,
    /// Their latency.
    pub latency: Latency,
    /// Their latency histogram (absent in results recorded before herd kept them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histogram: Option<LatencyHistogram>,
}

/// One op in one phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpStats {
    /// The op's name.
    pub op: String,
    /// Ops recorded, all outcomes.
    pub count: u64,
    /// Ops per second over the phase.
    pub rate: f64,
    /// Latency of all outcomes together.
    pub latency: Latency,
    /// Per outcome, most frequent first.
    pub outcomes: Vec<OutcomeStats>,
}

/// A phase's (or the hammer's) totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseResult {
    /// `step 1`, `soak 2`, `soak hold`, `stop`, `rate 1`, `catalog <op>` or `hammer`.
    pub phase: String,
    /// What kind of phase it was (older results without it are steps).
    #[serde(default)]
    pub kind: PhaseKind,
    /// An open-model (rate) phase's arrivals: sent, late and dropped starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open: Option<OpenStats>,
    /// The phase's index in the plan's sequence (`Scenario::plan`); none for the hammer.
    #[serde(alias = "step")]
    pub index: Option<usize>,
    /// Players the phase asked for (hammer: workers; catalog: its concurrency; rate: 0).
    pub players: usize,
    /// When the phase started, since the run's start.
    pub start_ms: u64,
    /// How long it ran (shorter than planned after a stop).
    pub duration_ms: u64,
    /// Per op, in the scenario's order.
    pub ops: Vec<OpStats>,
    /// Connections opened during the phase (by anyone, the hammer included).
    pub connects: u64,
    /// Of those, connections opened to replace a lost one.
    pub reconnects: u64,
    /// Failed connection attempts.
    pub connect_errors: u64,
    /// Streams, long polls and groups during the phase.
    #[serde(flatten)]
    pub play: PlayStats,
}

impl OpStats {
    /// The exact histogram of every sample of the op in the phase (all outcomes), or None
    /// when the result predates stored histograms.
    pub fn histogram(&self) -> Option<Result<hdrhistogram::Histogram<u64>, HistogramError>> {
        let hs: Option<Vec<&LatencyHistogram>> =
            self.outcomes.iter().map(|o| o.histogram.as_ref()).collect();
        hs.map(LatencyHistogram::merge)
    }
}

/// One op in one interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalOp {
    /// The op's name; hammer ops are `hammer:<op>`.
    pub op: String,
    /// Ops recorded in the interval.
    pub count: u64,
    /// Ops per second.
    pub rate: f64,
    /// Latency of all outcomes together.
    pub latency: Latency,
    /// Its histogram (absent in results recorded before herd kept them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histogram: Option<LatencyHistogram>,
    /// Count per outcome.
    pub outcomes: BTreeMap<Outcome, u64>,
    /// Responses per exact status code (`http_4xx` is 404s and 403s together); ops that got
    /// no response (a timeout, a transport error), streams and long polls are not in it.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        with = "status_keys"
    )]
    pub statuses: BTreeMap<u16, u64>,
    /// The interval's slowest requests of the op, slowest first: at most
    /// [`SLOWEST_PER_INTERVAL`], each with its start and latency, so the report can tie them
    /// to the waits the probe saw at the same time (absent in rows recorded before herd kept
    /// them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slowest: Vec<SlowRequest>,
}

/// Most requests of one op one interval keeps in [`IntervalOp::slowest`]: the driver's memory
/// for them is bounded by ops × 2 (players' and hammer's) × this × 16 bytes, and a stored
/// interval grows by at most about this × 24 bytes of JSON per op.
pub const SLOWEST_PER_INTERVAL: usize = 32;

/// One of the slowest requests of an op in an interval, on the driver's clock. Written as
/// `[start_us, latency_us]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SlowRequest {
    /// When it started (in an open-model phase: its intended start), µs since the driver's
    /// start: the origin of [`DriverInterval::end_ms`], at
    /// [`DriverInterval::clock_start_ns`] on CLOCK_MONOTONIC.
    pub start_us: u64,
    /// How long it took, µs (what its op's histograms hold).
    pub latency_us: u64,
}

impl SlowRequest {
    /// When it ended, µs since the driver's start.
    pub fn end_us(&self) -> u64 {
        self.start_us + self.latency_us
    }
}

impl Serialize for SlowRequest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        [self.start_us, self.latency_us].serialize(s)
    }
}

impl<'de> Deserialize<'de> for SlowRequest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let [start_us, latency_us] = <[u64; 2]>::deserialize(d)?;
        Ok(Self {
            start_us,
            latency_us,
        })
    }
}

/// Status codes as the string keys JSON has: an interval is read back through serde's
/// buffered path (`flatten`), which does not turn `"404"` into a number by itself.
mod status_keys {
    use std::collections::BTreeMap;

    use serde::{Deserialize as _, Deserializer, Serializer, de::Error as _};

    pub(super) fn serialize<S: Serializer>(
        m: &BTreeMap<u16, u64>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_map(m.iter().map(|(k, v)| (k.to_string(), v)))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<u16, u64>, D::Error> {
        BTreeMap::<String, u64>::deserialize(d)?
            .into_iter()
            .map(|(k, v)| {
                k.parse()
                    .map(|k| (k, v))
                    .map_err(|_| D::Error::custom(format!("`{k}` is not a status code")))
            })
            .collect()
    }
}

/// The driver's own health over one interval: is the driver, not the system, the limit?
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct DriverHealth {
    /// CPU the driver process used, in percent of one core.
    pub cpu_percent: f64,
    /// Cores the driver may use.
    pub cores: usize,
    /// Resident memory.
    pub rss_bytes: u64,
    /// 99th percentile of the scheduler's lateness waking a 10 ms timer.
    pub lag_p99_us: u64,
    /// Worst lateness.
    pub lag_max_us: u64,
    /// True when CPU or lag says the driver was saturated, so the interval's latencies
    /// measure the driver as much as the target.
    pub saturated: bool,
}

/// Lag p99 at or above this means the runtime could not run ready tasks on time: a
/// timer on an idle tokio runtime is late by about its 1 ms granularity.
pub const LAG_SATURATED_US: u64 = 10_000;

/// CPU at or above this share of the driver's cores means it had no headroom left.
pub const CPU_SATURATED_SHARE: f64 = 0.9;

/// True when the driver, not the system under test, limited the interval.
pub fn saturated(cpu_percent: f64, cores: usize, lag_p99_us: u64) -> bool {
    lag_p99_us >= LAG_SATURATED_US
        || cpu_percent >= CPU_SATURATED_SHARE * 100.0 * cores.max(1) as f64
}

/// One interval of the timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriverInterval {
    /// 0, 1, 2, ...
    pub index: u64,
    /// The interval's end, since the run's start.
    pub end_ms: u64,
    /// Its length.
    pub duration_ms: u64,
    /// The index of the phase running at its end (`Scenario::plan`); none before the first
    /// and after the last.
    #[serde(alias = "step")]
    pub phase_index: Option<usize>,
    /// That phase's name (`step 2`, `rate 1`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Open-model starts in the interval that slipped behind schedule.
    #[serde(default)]
    pub late_starts: u64,
    /// Open-model arrivals dropped at the in-flight bound.
    #[serde(default)]
    pub dropped_starts: u64,
    /// Open-model requests in flight at its end.
    #[serde(default)]
    pub in_flight: usize,
    /// Players alive at its end.
    pub players: usize,
    /// Hammer workers alive at its end.
    pub hammer_workers: usize,
    /// Ops with at least one record.
    pub ops: Vec<IntervalOp>,
    /// Connections opened.
    pub connects: u64,
    /// Of those, replacing a lost one.
    pub reconnects: u64,
    /// Failed connection attempts.
    pub connect_errors: u64,
    /// Streams, long polls and groups during the interval.
    #[serde(flatten)]
    pub play: PlayStats,
    /// The driver's own health.
    pub driver: DriverHealth,
    /// Set on a row that merges several intervals of the timeline (an hours-long run's
    /// older part, `herd_model::rollup`): how many, and how many were saturated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_up: Option<crate::rollup::RolledUp>,
    /// CLOCK_MONOTONIC (ns) at the driver's start, the origin of `end_ms` and of the slow
    /// requests' starts: what lines the driver's timeline up with the probe's windows
    /// (absent in rows recorded before herd kept it, and in a merge of shards whose clocks
    /// differ).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_start_ns: Option<u64>,
}

/// A share of failed connects (of those tried) at or above which a run that did reach its
/// target is named `target_unreachable` and `herd drive`/`herd run` exit 1 — with at least
/// [`FAILED_CONNECTS_MIN`] of them.
pub const FAILED_CONNECTS_SHARE: f64 = 0.05;

/// Fewer failed connects than this are left out: a reset or two in a long run is play.
pub const FAILED_CONNECTS_MIN: u64 = 10;

/// A whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// The scenario file.
    pub scenario: String,
    /// `host:port` of the target.
    pub target: String,
    /// `h1` or `h2c`.
    pub transport: String,
    /// `per_player` or `pool of N`.
    pub connections: String,
    /// Wall-clock start, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// How long the run took, the stop's grace included.
    pub duration_ms: u64,
    /// True if a stop ended the run before its plan did.
    pub stopped_early: bool,
    /// Requests tried: every outcome but `var_missing`, failed connects included.
    pub requests: u64,
    /// Connections opened.
    pub connects: u64,
    /// Of those, replacing a lost one.
    pub reconnects: u64,
    /// Failed connection attempts.
    pub connect_errors: u64,
    /// Connects held back by the per-player backoff after consecutive failed ones
    /// (50 ms doubling to 2 s, reset by a success).
    #[serde(default)]
    pub connects_held: u64,
    /// The time those connects waited, summed over players.
    #[serde(default)]
    pub connect_backoff_ms: u64,
    /// Intervals in which the driver was saturated.
    pub saturated_intervals: u64,
    /// Per phase, then the hammer.
    #[serde(alias = "steps")]
    pub phases: Vec<PhaseResult>,
    /// Each op's expected outcomes (`[outcome] expected`, an op's `expected`): part of
    /// normal play, counted apart from `ok` and from errors.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub expected: BTreeMap<String, Vec<Outcome>>,
    /// The timeline.
    pub intervals: Vec<DriverInterval>,
    /// Streams, long polls and groups over the whole run.
    #[serde(flatten)]
    pub play: PlayStats,
}

impl RunResult {
    /// When the report's `target_unreachable` finding names the run: every connect failed
    /// (the target was never reached, so the run measured nothing about it), or at least
    /// [`FAILED_CONNECTS_SHARE`] of at least [`FAILED_CONNECTS_MIN`] (a target that went
    /// down during the run). Says so with the numbers and what to check; `herd drive` and
    /// `herd run` then exit 1.
    pub fn unreachable(&self) -> Option<String> {
        let (opened, failed) = (self.connects, self.connect_errors);
        if failed == 0 {
            return None;
        }
        if opened == 0 {
            return Some(format!(
                "every one of the run's {failed} connects to {} failed and none succeeded: the \
                 run measured nothing about the target; is it up and listening there, and does \
                 it speak the transport the scenario names (the transport_error rows above say \
                 how each failed)?",
                self.target
            ));
        }
        let tried = opened + failed;
        let share = failed as f64 / tried as f64;
        (failed >= FAILED_CONNECTS_MIN && share >= FAILED_CONNECTS_SHARE).then(|| {
            format!(
                "{:.0} % of the run's connects to {} failed ({failed} of {tried}): the target \
                 was unreachable for part of the run, so its numbers mix the target's answers \
                 with failed connects; did it stop, restart or refuse connections (the \
                 transport_error rows above and the timeline say when)?",
                share * 100.0,
                self.target
            )
        })
    }

    /// Count of the outcome named `outcome` for `op` summed over all phases and the hammer.
    pub fn outcome_count(&self, op: &str, outcome: &str) -> u64 {
        let outcome: Outcome = outcome.parse().unwrap_or_else(|e| match e {});
        self.phases
            .iter()
            .flat_map(|s| &s.ops)
            .filter(|o| o.op == op)
            .flat_map(|o| &o.outcomes)
            .filter(|o| o.outcome == outcome)
            .map(|o| o.count)
            .sum()
    }

    /// The outcomes the scenario expects of `op` (empty when none).
    pub fn expected_of(&self, op: &str) -> &[Outcome] {
        self.expected.get(op).map_or(&[], Vec::as_slice)
    }

    /// Ops recorded for `op` over all phases and the hammer.
    pub fn op_count(&self, op: &str) -> u64 {
        self.phases
            .iter()
            .flat_map(|s| &s.ops)
            .filter(|o| o.op == op)
            .map(|o| o.count)
            .sum()
    }
}

/// What kind of phase a phase report (and a plan phase) is.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum PhaseKind {
    /// A `[[step]]` of players.
    #[default]
    Step,
    /// One step of a `[soak]` (compiled into player steps).
    Soak,
    /// The `[stop]` spread: players leaving one by one at the plan's end.
    Stop,
    /// An open-model `[[rate]]` step.
    Rate,
    /// One route of the `[catalog]`.
    Catalog,
    /// The `[hammer]`.
    Hammer,
}

impl fmt::Display for PhaseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Step => "step",
            Self::Soak => "soak",
            Self::Stop => "stop",
            Self::Rate => "rate",
            Self::Catalog => "catalog",
            Self::Hammer => "hammer",
        })
    }
}

/// An open-model phase's arrivals. Every arrival is either sent or dropped; a sent one may
/// also be late. Latencies of sent arrivals count from their intended time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenStats {
    /// The target rate, arrivals per second.
    pub rate: f64,
    /// Arrivals whose intended time fell in the phase (fewer than planned after a stop).
    pub scheduled: u64,
    /// Arrivals sent.
    pub sent: u64,
    /// Sent more than `late_after_us` after their intended time: the driver (or, with
    /// `when_full = "queue"`, the in-flight bound) held them back.
    pub late_starts: u64,
    /// Not sent because `max_in_flight` requests were already out (`when_full = "drop"`).
    pub dropped_starts: u64,
    /// The in-flight bound.
    pub max_in_flight: usize,
    /// Most requests in flight at one arrival.
    pub peak_in_flight: usize,
    /// The lateness threshold.
    pub late_after_us: u64,
}

/// Streams, long polls and groups over one step, one interval or the whole run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlayStats {
    /// One entry per stream or long-poll op that opened or failed, in the scenario's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<StreamStats>,
    /// Group counts (all zero without a `[group]`).
    #[serde(default, skip_serializing_if = "GroupStats::is_zero")]
    pub groups: GroupStats,
    /// Checks that failed, by op and by the resource (request path) they were about.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub check_failures: Vec<CheckFailure>,
}

/// Responses to one op on one resource that failed a check (`check_failed`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckFailure {
    /// The op's name.
    pub op: String,
    /// The request path, e.g. `/v2/library/app/blobs/sha256:…`; `other` once an op has
    /// [`MAX_TYPES`] distinct ones.
    pub resource: String,
    /// How many responses failed.
    pub count: u64,
}

impl PlayStats {
    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty() && self.groups.is_zero() && self.check_failures.is_empty()
    }

    /// The entry for stream or long-poll op `op`.
    pub fn stream(&self, op: &str) -> Option<&StreamStats> {
        self.streams.iter().find(|s| s.op == op)
    }
}

fn none(n: &u64) -> bool {
    *n == 0
}

/// One stream or long-poll op.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamStats {
    /// The op's name.
    pub op: String,
    /// `sse`, `ndjson`, `chunks` or `long_poll`.
    pub kind: String,
    /// Openings that got a 2xx answer (long poll: polls answered).
    pub opened: u64,
    /// Openings after a player's first one: the stream broke or ended and was reopened
    /// (long poll: polls re-issued after a failure).
    pub reconnects: u64,
    /// Openings the player's stop cut short: sent, and no answer came before it stopped (a
    /// stream's head, a long poll's reply). The server saw them, so `opened` + this +
    /// failed openings is what it counts; a long poll in flight at the end is one.
    #[serde(default, skip_serializing_if = "none")]
    pub cut_by_stop: u64,
    /// Events received, all types (long poll: answers, `no_news` included).
    pub events: u64,
    /// Events per type (the `event:` field, the `event_type` pointer, `chunk`, or for a
    /// long poll `no_news`).
    pub by_type: BTreeMap<String, u64>,
    /// Failures per class: `transport_error.*`, `timeout`, `http_4xx`…, `ended` (the server
    /// closed the stream), `bad_event` (an event that did not parse).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, u64>,
    /// From sending the request to the opening's first event.
    pub first_event: Option<Latency>,
}

/// How groups fared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStats {
    /// Groups whose every member created or joined (`ok`), so play began.
    pub formed: u64,
    /// Groups that met their finish condition and left the rotation.
    pub finished: u64,
    /// Groups whose create or a join did not end `ok`; their players went back to form new
    /// ones.
    pub failed: u64,
    /// Groups a member left (retired by a step or stopped) before they finished.
    pub abandoned: u64,
}

impl GroupStats {
    /// True when every count is zero.
    pub fn is_zero(&self) -> bool {
        *self == Self::default()
    }
}

/// One objective: an op's latency percentile (or its error share) must stay under a limit.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Slo {
    /// The op.
    pub op: String,
    /// What is measured.
    pub metric: SloMetric,
    /// The limit: microseconds for latencies, a share (0–1) for errors.
    pub limit: f64,
    /// The objective as written, e.g. `p99 < 500ms`.
    pub text: String,
}

/// What an [`Slo`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SloMetric {
    /// Median latency.
    P50,
    /// 90th percentile.
    P90,
    /// 99th percentile.
    P99,
    /// 99.9th percentile.
    P999,
    /// Largest latency.
    Max,
    /// Share of outcomes that are not `ok`.
    Errors,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturation_thresholds() {
        assert!(!saturated(50.0, 2, 1_200));
        assert!(saturated(185.0, 2, 1_200));
        assert!(saturated(20.0, 2, 15_000));
        assert!(saturated(95.0, 0, 0));
    }
}
