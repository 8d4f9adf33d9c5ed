//! The report's content, independent of its format: per step × op, per step × container, per
//! destination pair, a timeline, and findings. Built from a [`RunData`] by pure functions, so
//! it is tested without root or timing luck.

use std::collections::BTreeMap;

use herd_driver::{Outcome, report::PhaseReport, scenario::PhaseKind};
use herd_probe::{
    cgroupfs::{Memory, Throttling},
    sample::{CpuCell, Interval, Log2Summary, SocketCell},
};
use probe_common::{Counter, Log2Hist, PairStats};
use serde::{Deserialize, Serialize};

use super::{RunData, findings};

/// A report.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Report {
    /// The run.
    pub run: RunSummary,
    /// Per step × op: the seeds' table (catalog routes included, `kind` = `catalog`).
    pub ops: Vec<OpRow>,
    /// Per phase × stream or long-poll op (empty without stream ops).
    #[serde(default)]
    pub streams: Vec<super::play::StreamRow>,
    /// Per phase: groups formed, finished, failed, abandoned (empty without a `[group]`).
    #[serde(default)]
    pub groups: Vec<super::play::GroupRow>,
    /// Per open-model (rate) phase: arrivals scheduled, sent, late, dropped.
    #[serde(default)]
    pub open: Vec<super::play::OpenRow>,
    /// Per step × container: CPU, throttling, memory, TCP.
    pub containers: Vec<ContainerRow>,
    /// Per source container → destination, whole run.
    pub pairs: Vec<PairRow>,
    /// One point per driver interval.
    pub timeline: Vec<TimelinePoint>,
    /// The scenario's objectives, checked per step.
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
    /// Seconds covered by recorded intervals.
    pub duration_s: f64,
    /// Requests the driver made (all outcomes).
    pub requests: u64,
    /// Requests whose outcome was not `ok`.
    pub errors: u64,
    /// Driver intervals flagged saturated.
    pub saturated_intervals: u64,
    /// Probe intervals recorded (0 when the probe did not run).
    pub probe_intervals: u64,
    /// What `herd run` seeded before the load (absent without a `[seed]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seeding: Option<super::seeding::Seeding>,
}

/// One objective checked in one phase.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SloRow {
    /// The phase's name (`step 1`, `rate 2`, …).
    pub phase: String,
    /// Op.
    pub op: String,
    /// The objective as written, e.g. `p99 < 500ms`.
    pub objective: String,
    /// What the phase measured: µs for latencies, a share for errors.
    pub measured: f64,
    /// The limit, in the same unit.
    pub limit: f64,
    /// Whether the phase met it.
    pub pass: bool,
    /// The op's share of non-ok outcomes in the phase.
    pub error_share: f64,
}

/// One phase × op row.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OpRow {
    /// The phase's name: `step 1`, `soak hold`, `rate 1`, `catalog <op>`, `hammer`, …
    pub phase: String,
    /// The phase's kind.
    #[serde(default)]
    pub kind: PhaseKind,
    /// Players in the phase (hammer: workers; catalog: the route's concurrency; rate: 0).
    pub players: usize,
    /// What loaded the phase, in words: `10 players`, `4 workers`, `2 concurrent`,
    /// `50 req/s open`.
    #[serde(default)]
    pub load: String,
    /// Op name.
    pub op: String,
    /// Ops recorded.
    pub count: u64,
    /// Ops per second.
    pub rate: f64,
    /// Median latency, µs.
    pub p50_us: u64,
    /// 99th percentile, µs.
    pub p99_us: u64,
    /// Largest, µs.
    pub max_us: u64,
    /// Count per outcome.
    pub outcomes: BTreeMap<Outcome, u64>,
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

/// One phase × container row.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ContainerRow {
    /// The phase's name (`step 1`, … or `after` / `before` for intervals outside every phase).
    pub phase: String,
    /// Container.
    pub container: String,
    /// Busiest 100 ms window in the step, cores.
    pub cpu_burst: Cell,
    /// Highest trailing-30 s average in the step, cores.
    pub cpu_sustained: Cell,
    /// Average over the step, cores.
    pub cpu_avg: Cell,
    /// CPU quota, cores.
    pub cpu_cap: Cell,
    /// Share of CFS periods throttled in the step.
    pub throttled_share: Cell,
    /// Time throttled in the step, ms (summed over CPUs).
    pub throttled_ms: Cell,
    /// Memory high-water mark, MiB.
    pub mem_peak_mib: Cell,
    /// New TCP connections per second.
    pub connects_per_s: Cell,
    /// TIME_WAIT entries per second.
    pub time_wait_per_s: Cell,
    /// connect() failures in the step.
    pub connect_errors: Cell,
    /// Highest TIME_WAIT gauge of the container's netns in the step (as `ss` counts).
    pub time_wait_peak: Cell,
    /// Highest ESTABLISHED gauge in the step.
    pub established_peak: Cell,
    /// Fewest free ephemeral ports toward one destination in the step.
    pub headroom_min: Cell,
    /// Listen-queue overflows in the step.
    pub listen_overflows: Cell,
}

/// One source container → destination row.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PairRow {
    /// Source container.
    pub container: String,
    /// Destination address:port.
    pub remote: String,
    /// The destination's container, or `-` when the address is not a known container's.
    pub remote_container: String,
    /// New connections over the run.
    pub connects: u64,
    /// New connections per second.
    pub connects_per_s: f64,
    /// TIME_WAIT entries over the run.
    pub time_wait_entries: u64,
    /// Implied TIME_WAIT gauge at the peak second's entry rate: entries/s × 60 s (Linux keeps
    /// a socket in TIME_WAIT for 60 s, `TCP_TIMEWAIT_LEN`).
    pub time_wait_implied_peak: u64,
    /// Connections per request served (see [`findings`]); missing when no request count
    /// applies.
    pub churn_ratio: Cell,
    /// Highest TIME_WAIT gauge toward the destination (source netns, as `ss` counts).
    pub time_wait_peak: Cell,
    /// Highest ESTABLISHED gauge toward it.
    pub established_peak: Cell,
    /// Median srtt of established connections at the last sample, µs.
    pub srtt_p50_us: Cell,
    /// Upper bound of the log2 bucket holding their 99th percentile srtt, µs.
    pub srtt_p99_le_us: Cell,
    /// Fewest free ephemeral ports toward it.
    pub headroom_min: Cell,
    /// Connect latency, log2-bucket upper bounds in µs.
    pub connect_latency_us: Log2Row,
    /// Connection lifetime, log2-bucket upper bounds in ms.
    pub lifetime_ms: Log2Row,
}

/// Percentiles of a log2 histogram as bucket upper bounds (`u64::MAX`: the open last bucket).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Log2Row {
    /// Samples.
    pub count: u64,
    /// Median is at most this.
    pub p50_le: u64,
    /// 99th percentile is at most this.
    pub p99_le: u64,
    /// Largest is at most this.
    pub max_le: u64,
}

impl From<Log2Summary> for Log2Row {
    fn from(s: Log2Summary) -> Self {
        Self {
            count: s.count,
            p50_le: s.p50_le,
            p99_le: s.p99_le,
            max_le: s.max_le,
        }
    }
}

/// One timeline point (a driver interval, with the probe interval ending closest to it).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimelinePoint {
    /// Seconds since the run started.
    pub t_s: f64,
    /// The phase's index in the plan (0-based), None between phases.
    pub phase_index: Option<usize>,
    /// The phase's name (`step 2`, `rate 1`, …), None between phases.
    #[serde(default)]
    pub phase: Option<String>,
    /// Stream and long-poll events per second, all ops.
    #[serde(default)]
    pub stream_events_per_s: f64,
    /// Open-model starts in the interval that slipped behind schedule.
    #[serde(default)]
    pub late_starts: u64,
    /// Open-model arrivals dropped at the in-flight bound.
    #[serde(default)]
    pub dropped_starts: u64,
    /// Requests per second, all ops.
    pub req_per_s: f64,
    /// Worst p99 across ops, ms.
    pub p99_ms: f64,
    /// Non-ok outcomes in the interval.
    pub errors: u64,
    /// Per container: connects/s, TIME_WAIT entries/s, CPU cores, throttled share.
    pub containers: BTreeMap<String, [f64; 4]>,
}

/// Per pair over the run: peaks of the gauges, the last srtt sample, the fewest free ports.
#[derive(Clone, Default)]
struct GaugePeaks {
    time_wait: u64,
    established: u64,
    srtt_p50: Option<u32>,
    srtt_log2: Log2Hist,
    headroom: Option<u64>,
}

fn secs(iv: &Interval) -> f64 {
    iv.interval_ns.max(1) as f64 / 1e9
}

/// The step (label, index) a moment `t_ms` after the start falls in.
pub(crate) fn step_at(steps: &[&PhaseReport], t_ms: u64) -> (String, Option<usize>) {
    for s in steps {
        if t_ms >= s.start_ms && t_ms <= s.start_ms + s.duration_ms {
            return (s.phase.clone(), s.index);
        }
    }
    match steps.first() {
        Some(f) if t_ms < f.start_ms => ("before".into(), None),
        _ => ("after".into(), None),
    }
}

impl Report {
    /// Builds the report of `d`.
    pub fn build(d: &RunData) -> Self {
        let mono0 = d.meta.mono_start_ns as u64;
        let load_steps: Vec<&PhaseReport> = d.phases.iter().filter(|s| s.index.is_some()).collect();
        let probe_note = d.probe_missing.clone().unwrap_or_else(|| {
            if d.probe.is_empty() {
                "the probe recorded no interval".into()
            } else {
                String::new()
            }
        });
        let missing = |what: &str| Cell::Missing(format!("{what}: {probe_note}"));

        // Per step × op.
        let ops: Vec<OpRow> = d
            .phases
            .iter()
            .flat_map(|s| {
                s.ops.iter().map(move |o| OpRow {
                    phase: s.phase.clone(),
                    kind: s.kind,
                    players: s.players,
                    load: super::play::load(s.kind, s.players, s.open.as_ref().map(|x| x.rate)),
                    op: o.op.clone(),
                    count: o.count,
                    rate: o.rate,
                    p50_us: o.latency.p50_us,
                    p99_us: o.latency.p99_us,
                    max_us: o.latency.max_us,
                    outcomes: o
                        .outcomes
                        .iter()
                        .map(|x| (x.outcome.clone(), x.count))
                        .collect(),
                })
            })
            .collect();

        // Per step × container from probe intervals.
        let mut groups: BTreeMap<(String, String), Vec<(&Interval, usize)>> = BTreeMap::new();
        let mut order: Vec<(String, String)> = Vec::new();
        for iv in &d.probe {
            let t_ms = iv.at_ns.saturating_sub(mono0) / 1_000_000;
            let (label, _) = step_at(&load_steps, t_ms);
            for (i, c) in iv.containers.iter().enumerate() {
                let key = (label.clone(), c.container.clone());
                if !groups.contains_key(&key) {
                    order.push(key.clone());
                }
                groups.entry(key).or_default().push((iv, i));
            }
        }
        let mut containers = Vec::new();
        for key in order {
            let rows = &groups[&key];
            containers.push(container_row(&key.0, &key.1, rows));
        }
        if d.probe.is_empty() {
            for s in &load_steps {
                containers.push(ContainerRow {
                    phase: s.phase.clone(),
                    container: "all".into(),
                    cpu_burst: missing("no CPU"),
                    cpu_sustained: missing("no CPU"),
                    cpu_avg: missing("no CPU"),
                    cpu_cap: missing("no quota"),
                    throttled_share: missing("no throttling"),
                    throttled_ms: missing("no throttling"),
                    mem_peak_mib: missing("no memory"),
                    connects_per_s: missing("no connects"),
                    time_wait_per_s: missing("no TIME_WAIT"),
                    connect_errors: missing("no connect errors"),
                    time_wait_peak: missing("no TIME_WAIT gauge"),
                    established_peak: missing("no ESTABLISHED gauge"),
                    headroom_min: missing("no port headroom"),
                    listen_overflows: missing("no listen overflows"),
                });
            }
        }

        // Pairs over the whole run.
        let duration_s: f64 = d
            .driver
            .iter()
            .map(|i| i.duration_ms as f64 / 1e3)
            .sum::<f64>()
            .max(d.probe.iter().map(secs).sum::<f64>());
        let requests: u64 = d.driver.iter().flat_map(|i| &i.ops).map(|o| o.count).sum();
        let errors: u64 = d
            .driver
            .iter()
            .flat_map(|i| &i.ops)
            .flat_map(|o| o.outcomes.iter())
            .filter(|(k, _)| !k.is_ok())
            .map(|(_, n)| n)
            .sum();
        let mut pair_acc: BTreeMap<(String, String), (String, PairStats, f64)> = BTreeMap::new();
        let mut pair_gauges: BTreeMap<(String, String), GaugePeaks> = BTreeMap::new();
        for iv in &d.probe {
            for p in &iv.pairs {
                let e = pair_acc
                    .entry((p.container.clone(), p.remote.to_string()))
                    .or_insert_with(|| (String::new(), PairStats::default(), 0.0));
                if let Some(rc) = &p.remote_container {
                    e.0 = rc.clone();
                }
                e.1.add(&p.stats());
                if let Some(g) = &p.gauges {
                    let e = pair_gauges
                        .entry((p.container.clone(), p.remote.to_string()))
                        .or_default();
                    e.time_wait = e.time_wait.max(g.time_wait);
                    e.established = e.established.max(g.established);
                    if g.srtt_p50_us.is_some() {
                        e.srtt_p50 = g.srtt_p50_us;
                        e.srtt_log2 = g.srtt_log2;
                    }
                    e.headroom = Some(e.headroom.map_or(g.headroom, |h| h.min(g.headroom)));
                }
                e.2 = e.2.max(p.time_wait_entries as f64 / secs(iv));
            }
        }
        // The request path: the driver's target, then every hop whose source is a
        // destination already on the path (a gateway's calls to its backend). Each driver
        // request crosses each hop once, so connections per driver request is their churn.
        let target = d.final_report.as_ref().map(|r| r.target.clone());
        let mut on_path: Vec<String> = Vec::new();
        let mut path_sources: Vec<String> = Vec::new();
        if let Some(t) = &target {
            let port = t.rsplit(':').next().unwrap_or("");
            let names = [
                t.clone(),
                t.replace("localhost:", "127.0.0.1:"),
                format!("[::1]:{port}"),
            ];
            for (c, r) in pair_acc.keys() {
                if names.contains(r) && (r == t || t.starts_with("localhost:") || r == &names[0]) {
                    on_path.push(format!("{c}|{r}"));
                }
            }
            loop {
                let sources: Vec<String> = pair_acc
                    .iter()
                    .filter(|((c, r), _)| on_path.contains(&format!("{c}|{r}")))
                    .map(|(_, (rc, _, _))| rc.clone())
                    .filter(|rc| !rc.is_empty() && !path_sources.contains(rc))
                    .collect();
                if sources.is_empty() {
                    break;
                }
                path_sources.extend(sources);
                for (c, r) in pair_acc.keys() {
                    let key = format!("{c}|{r}");
                    if path_sources.contains(c) && !on_path.contains(&key) {
                        on_path.push(key);
                    }
                }
            }
        }
        let pairs: Vec<PairRow> = pair_acc
            .into_iter()
            .map(|((c, r), (rc, st, tw_peak_rate))| {
                let g = pair_gauges.get(&(c.clone(), r.clone())).cloned();
                let gauge = |v: Option<f64>, what: &str| match (&g, v) {
                    (_, Some(v)) => Cell::Value(v),
                    (Some(_), None) => Cell::Missing(format!("no {what}")),
                    (None, None) => {
                        Cell::Missing("the source's network namespace was not sampled".into())
                    }
                };
                PairRow {
                    time_wait_peak: gauge(g.as_ref().map(|g| g.time_wait as f64), "TIME_WAIT"),
                    established_peak: gauge(
                        g.as_ref().map(|g| g.established as f64),
                        "connections",
                    ),
                    srtt_p50_us: gauge(
                        g.as_ref().and_then(|g| g.srtt_p50).map(f64::from),
                        "established connection",
                    ),
                    srtt_p99_le_us: gauge(
                        g.as_ref()
                            .and_then(|g| g.srtt_log2.quantile_le(990))
                            .map(|v| v as f64),
                        "established connection",
                    ),
                    headroom_min: gauge(
                        g.as_ref().and_then(|g| g.headroom).map(|h| h as f64),
                        "headroom",
                    ),
                    churn_ratio: if target.is_none() {
                        Cell::Missing("the run did not finish: no driver target recorded".into())
                    } else if !on_path.contains(&format!("{c}|{r}")) {
                        Cell::Missing("not on the request path".into())
                    } else if requests == 0 {
                        Cell::Missing("no requests recorded by the driver".into())
                    } else {
                        Cell::Value(st.connects as f64 / requests as f64)
                    },
                    container: c,
                    remote: r,
                    remote_container: if rc.is_empty() { "-".into() } else { rc },
                    connects: st.connects,
                    connects_per_s: st.connects as f64 / duration_s.max(1e-9),
                    time_wait_entries: st.time_wait_entries,
                    time_wait_implied_peak: (tw_peak_rate * 60.0).round() as u64,
                    connect_latency_us: Log2Summary::of(&st.connect_latency_us).into(),
                    lifetime_ms: Log2Summary::of(&st.lifetime_ms).into(),
                }
            })
            .collect();

        // Timeline.
        let timeline: Vec<TimelinePoint> = d
            .driver
            .iter()
            .map(|iv| {
                let end_ns = mono0 + iv.end_ms * 1_000_000;
                let probe = d.probe.iter().min_by_key(|p| p.at_ns.abs_diff(end_ns));
                TimelinePoint {
                    t_s: iv.end_ms as f64 / 1e3,
                    phase_index: iv.phase_index,
                    phase: iv.phase.clone(),
                    stream_events_per_s: iv.play.streams.iter().map(|s| s.events).sum::<u64>()
                        as f64
                        / (iv.duration_ms.max(1) as f64 / 1e3),
                    late_starts: iv.late_starts,
                    dropped_starts: iv.dropped_starts,
                    req_per_s: iv.ops.iter().map(|o| o.rate).sum(),
                    p99_ms: iv.ops.iter().map(|o| o.latency.p99_us).max().unwrap_or(0) as f64 / 1e3,
                    errors: iv
                        .ops
                        .iter()
                        .flat_map(|o| o.outcomes.iter())
                        .filter(|(k, _)| !k.is_ok())
                        .map(|(_, n)| n)
                        .sum(),
                    containers: probe
                        .map(|p| {
                            p.containers
                                .iter()
                                .map(|c| {
                                    let (cpu, thr) = match &c.cpu {
                                        CpuCell::Measured(ci) => (
                                            ci.cpu_cores,
                                            match ci.throttle {
                                                Throttling::Measured {
                                                    throttled_share, ..
                                                } => throttled_share,
                                                Throttling::Unavailable { .. } => 0.0,
                                            },
                                        ),
                                        CpuCell::Unavailable { .. } => (0.0, 0.0),
                                    };
                                    (
                                        c.container.clone(),
                                        [
                                            c.counts.get(Counter::Connects) as f64 / secs(p),
                                            c.counts.get(Counter::TimeWaitEntries) as f64 / secs(p),
                                            cpu,
                                            thr,
                                        ],
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                }
            })
            .collect();

        let mut notes = Vec::new();
        if !probe_note.is_empty() {
            notes.push(format!("Kernel probe: {probe_note}"));
        }
        if d.final_report.is_none() {
            notes.push(format!(
                "The run did not finish (status `{}`): the report covers every interval recorded \
                 before it stopped; step totals exist only for steps that ended.",
                d.meta.status
            ));
        }
        let (streams, groups, open) = super::play::rows(&d.phases);
        let slo = slo_rows(&d.slo, &d.phases);
        if !d.slo.is_empty() && slo.is_empty() {
            notes.push(
                "The scenario has objectives, but no step finished: nothing to check.".into(),
            );
        }
        let mut report = Report {
            run: RunSummary {
                id: d.meta.id,
                name: d.meta.name.clone(),
                scenario: d.meta.scenario.clone(),
                status: d.meta.status.clone(),
                started_unix_ms: d.meta.started_unix_ms,
                duration_s,
                requests,
                errors,
                saturated_intervals: d.driver.iter().filter(|i| i.driver.saturated).count() as u64,
                probe_intervals: d.probe.len() as u64,
                seeding: d
                    .seeded
                    .clone()
                    .map(|s| super::seeding::Seeding::new(s, d.seed_cleanup.clone())),
            },
            ops,
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

/// Checks every objective against every load step's totals.
fn slo_rows(slo: &[herd_driver::scenario::Slo], steps: &[PhaseReport]) -> Vec<SloRow> {
    use herd_driver::scenario::SloMetric;
    let mut out = Vec::new();
    for s in steps.iter().filter(|s| s.index.is_some()) {
        for o in slo {
            let Some(op) = s.ops.iter().find(|x| x.op == o.op) else {
                continue;
            };
            let not_ok: u64 = op
                .outcomes
                .iter()
                .filter(|x| !x.outcome.is_ok())
                .map(|x| x.count)
                .sum();
            let error_share = if op.count > 0 {
                not_ok as f64 / op.count as f64
            } else {
                0.0
            };
            let measured = match o.metric {
                SloMetric::P50 => op.latency.p50_us as f64,
                SloMetric::P90 => op.latency.p90_us as f64,
                SloMetric::P99 => op.latency.p99_us as f64,
                SloMetric::P999 => op.latency.p999_us as f64,
                SloMetric::Max => op.latency.max_us as f64,
                SloMetric::Errors => error_share,
            };
            out.push(SloRow {
                phase: s.phase.clone(),
                op: o.op.clone(),
                objective: o.text.clone(),
                measured,
                limit: o.limit,
                pass: measured < o.limit,
                error_share,
            });
        }
    }
    out
}

fn container_row(step: &str, name: &str, rows: &[(&Interval, usize)]) -> ContainerRow {
    let mut burst: Option<f64> = None;
    let mut sustained: Option<f64> = None;
    let (mut used, mut span) = (0.0, 0.0);
    let mut cap: Option<f64> = None;
    let (mut periods, mut throttled, mut thr_ns) = (0u64, 0u64, 0u64);
    let mut thr_reason: Option<String> = None;
    let mut mem: Option<u64> = None;
    let mut mem_reason: Option<String> = None;
    let mut cpu_reason: Option<String> = None;
    let (mut connects, mut tw, mut errs, mut secs_total) = (0u64, 0u64, 0u64, 0.0);
    let (mut tw_peak, mut est_peak, mut head_min, mut overflows): (
        Option<u64>,
        Option<u64>,
        Option<u64>,
        u64,
    ) = (None, None, None, 0);
    let mut sock_reason: Option<String> = None;
    for (iv, i) in rows {
        let c = &iv.containers[*i];
        let s = secs(iv);
        secs_total += s;
        connects += c.counts.get(Counter::Connects);
        tw += c.counts.get(Counter::TimeWaitEntries);
        errs += Counter::CONNECT_ERRORS
            .iter()
            .map(|k| c.counts.get(*k))
            .sum::<u64>();
        match &c.sockets {
            SocketCell::Measured {
                established,
                time_wait,
                min_headroom,
                listen_overflows,
                ..
            } => {
                tw_peak = Some(tw_peak.unwrap_or(0).max(*time_wait));
                est_peak = Some(est_peak.unwrap_or(0).max(*established));
                if let Some(h) = min_headroom {
                    head_min = Some(head_min.map_or(*h, |m| m.min(*h)));
                }
                overflows += listen_overflows;
            }
            SocketCell::Unavailable { reason } => sock_reason = Some(reason.clone()),
        }
        match &c.cpu {
            CpuCell::Measured(ci) => {
                burst = Some(burst.map_or(ci.burst_cores, |b: f64| b.max(ci.burst_cores)));
                sustained =
                    Some(sustained.map_or(ci.sustained_cores, |b: f64| b.max(ci.sustained_cores)));
                used += ci.cpu_cores * ci.interval_ns as f64;
                span += ci.interval_ns as f64;
                match &ci.throttle {
                    Throttling::Measured {
                        nr_periods,
                        nr_throttled,
                        throttled_ns,
                        quota_cores,
                        ..
                    } => {
                        periods += nr_periods;
                        throttled += nr_throttled;
                        thr_ns += throttled_ns;
                        if let Some(q) = quota_cores {
                            cap = Some(*q);
                        }
                    }
                    Throttling::Unavailable { reason } => thr_reason = Some(reason.clone()),
                }
                match &ci.memory {
                    Memory::Measured {
                        current_bytes,
                        peak_bytes,
                    } => {
                        let m = peak_bytes.unwrap_or(*current_bytes);
                        mem = Some(mem.map_or(m, |x: u64| x.max(m)));
                    }
                    Memory::Unavailable { reason } => mem_reason = Some(reason.clone()),
                }
            }
            CpuCell::Unavailable { reason } => cpu_reason = Some(reason.clone()),
        }
    }
    let or = |v: Option<f64>, why: &Option<String>, what: &str| match v {
        Some(v) => Cell::Value(v),
        None => Cell::Missing(why.clone().unwrap_or_else(|| format!("no {what} reading"))),
    };
    let has_throttle = thr_reason.is_none() && burst.is_some();
    ContainerRow {
        phase: step.into(),
        container: name.into(),
        cpu_burst: or(burst, &cpu_reason, "CPU"),
        cpu_sustained: or(sustained, &cpu_reason, "CPU"),
        cpu_avg: or((span > 0.0).then(|| used / span), &cpu_reason, "CPU"),
        cpu_cap: match cap {
            Some(c) => Cell::Value(c),
            None if has_throttle => Cell::Missing("unlimited: no CPU quota".into()),
            None => or(None, &thr_reason.clone().or(cpu_reason.clone()), "quota"),
        },
        throttled_share: if has_throttle {
            Cell::Value(if periods > 0 {
                throttled as f64 / periods as f64
            } else {
                0.0
            })
        } else {
            or(
                None,
                &thr_reason.clone().or(cpu_reason.clone()),
                "throttling",
            )
        },
        throttled_ms: if has_throttle {
            Cell::Value(thr_ns as f64 / 1e6)
        } else {
            or(None, &thr_reason.or(cpu_reason.clone()), "throttling")
        },
        mem_peak_mib: or(
            mem.map(|m| m as f64 / (1024.0 * 1024.0)),
            &mem_reason.or(cpu_reason),
            "memory",
        ),
        connects_per_s: Cell::Value(connects as f64 / secs_total.max(1e-9)),
        time_wait_per_s: Cell::Value(tw as f64 / secs_total.max(1e-9)),
        connect_errors: Cell::Value(errs as f64),
        time_wait_peak: or(tw_peak.map(|v| v as f64), &sock_reason, "socket gauge"),
        established_peak: or(est_peak.map(|v| v as f64), &sock_reason, "socket gauge"),
        headroom_min: match (head_min, tw_peak) {
            (Some(h), _) => Cell::Value(h as f64),
            (None, Some(_)) => Cell::Missing("no outbound connections".into()),
            (None, None) => or(None, &sock_reason, "socket gauge"),
        },
        listen_overflows: if tw_peak.is_some() {
            Cell::Value(overflows as f64)
        } else {
            or(None, &sock_reason, "socket gauge")
        },
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use herd_driver::report::{
        DriverHealth, IntervalOp, IntervalReport, Latency, OpStats, OutcomeStats, RunReport,
    };
    use herd_probe::sample::{ContainerInterval, CountMap, CpuCell, Interval, SocketCell};

    use super::*;
    use crate::RunMeta;

    fn latency(p99_us: u64) -> Latency {
        Latency {
            p50_us: p99_us / 4,
            p90_us: p99_us / 2,
            p99_us,
            p999_us: p99_us,
            max_us: p99_us,
            mean_us: p99_us as f64 / 3.0,
        }
    }

    /// A run with one step, two driver intervals and two probe intervals; the probe has no
    /// CPU source and no netns for its one container.
    pub(crate) fn data() -> RunData {
        let mono0 = 1_000_000_000u64;
        let op = |count| IntervalOp {
            histogram: None,
            op: "game.state".into(),
            count,
            rate: count as f64,
            latency: latency(2_000),
            outcomes: BTreeMap::from([("ok".into(), count)]),
        };
        let driver = (1..=2)
            .map(|i| IntervalReport {
                index: i - 1,
                end_ms: i * 1000,
                duration_ms: 1000,
                phase_index: Some(0),
                phase: Some("step 1".into()),
                late_starts: 0,
                dropped_starts: 0,
                in_flight: 0,
                players: 10,
                hammer_workers: 0,
                ops: vec![op(100)],
                connects: 0,
                reconnects: 0,
                connect_errors: 0,
                play: Default::default(),
                driver: DriverHealth::default(),
            })
            .collect();
        let mut counts = [0u64; probe_common::N_COUNTERS];
        counts[Counter::Connects as usize] = 100;
        let probe = (1..=2u64)
            .map(|i| Interval {
                at_ns: mono0 + i * 1_000_000_000,
                interval_ns: 1_000_000_000,
                containers: vec![ContainerInterval {
                    container: "gateway".into(),
                    counts: CountMap(counts),
                    cpu: CpuCell::Unavailable {
                        reason: "no cgroup".into(),
                    },
                    sockets: SocketCell::Unavailable {
                        reason: "no netns".into(),
                    },
                }],
                pairs: vec![],
                lost: 0,
            })
            .collect();
        let step = herd_driver::report::PhaseReport {
            phase: "step 1".into(),
            kind: herd_driver::scenario::PhaseKind::Step,
            open: None,
            index: Some(0),
            players: 10,
            start_ms: 0,
            duration_ms: 2000,
            ops: vec![OpStats {
                op: "game.state".into(),
                count: 200,
                rate: 100.0,
                latency: latency(2_000),
                outcomes: vec![OutcomeStats {
                    histogram: None,
                    outcome: "ok".into(),
                    count: 200,
                    latency: latency(2_000),
                }],
            }],
            connects: 10,
            reconnects: 0,
            connect_errors: 0,
            play: Default::default(),
        };
        RunData {
            meta: RunMeta {
                id: 7,
                name: "t".into(),
                scenario: "t.toml".into(),
                started_unix_ms: 0,
                mono_start_ns: mono0 as i64,
                finished_unix_ms: None,
                status: "running".into(),
            },
            phases: vec![step],
            driver,
            probe,
            probe_missing: None,
            final_report: None::<RunReport>,
            slo: vec![],
            seeded: None,
            seed_cleanup: None,
            expected: Default::default(),
        }
    }

    #[test]
    fn every_table_cell_has_a_value_or_a_reason() {
        let r = Report::build(&data());
        assert_eq!(r.run.requests, 200);
        assert_eq!(r.containers.len(), 1);
        assert_eq!(r.containers[0].cpu_burst, Cell::Missing("no cgroup".into()));
        assert_eq!(r.containers[0].connects_per_s, Cell::Value(100.0));
        let md = crate::markdown::render(&r);
        for line in md.lines().filter(|l| l.starts_with('|')) {
            let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
            assert!(
                cells.iter().all(|c| !c.trim().is_empty()),
                "empty cell in: {line}"
            );
        }
        // A killed run says so.
        assert!(
            r.notes.iter().any(|n| n.contains("did not finish")),
            "{:?}",
            r.notes
        );
        let html = crate::html::render(&r);
        assert!(html.contains("<svg") && !html.contains("http://") && !html.contains("https://"));
    }
}
