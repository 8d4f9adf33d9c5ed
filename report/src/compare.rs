//! Two runs side by side — before and after a fix — as one table with deltas and ratios: the
//! seeds' before/after table (TIME_WAIT, new connections/s, CPU peak per container, latency
//! per op over the whole run and per step, errors, findings), built from two [`Report`]s by a
//! pure function and written as Markdown, a self-contained HTML page with both runs'
//! timelines overlaid, and JSON (schema: `docs/compare.schema.json`). A value one run lacks
//! shows why, never an empty cell. `--fail-on` gates ([`crate::gate`]) are checked on the
//! whole-run totals of both runs ([`apply_gates`]).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};
use serde::{Deserialize, Serialize};

use super::{
    chart::{Chart, Series, Stroke},
    doc::{Block, Column, Document, Table, Text, Value, ValueKind},
    findings::Finding,
    gate::{Gate, OpFigures, Verdict},
    model::{Cell, ContainerRow, OpRow, OpTotal, PairRow, Report, RunSummary, TimelinePoint},
    sections,
};

/// The part of the comparison a row belongs to; rows come in this order.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Section {
    /// A source container → destination.
    Pair,
    /// A container.
    Container,
    /// An op, over the whole run.
    Op,
    /// An op in one phase (step), matched by the phase's name.
    Step,
    /// The run's totals.
    Run,
}

/// How a metric's numbers are stored (the JSON holds the stored form) and shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// A count.
    Count,
    /// Per second.
    PerSecond,
    /// A plain ratio (churn: new connections per request).
    Ratio,
    /// CPU cores, shown in cores with the share of the container's quota beside it.
    Cores,
    /// A share in 0..=1, shown in percent; its deltas in percentage points.
    Share,
    /// Microseconds, shown in ms.
    Micros,
    /// MiB.
    Mib,
}

/// Which direction of change is an improvement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    /// Less is better (TIME_WAIT, CPU, latency, errors).
    Lower,
    /// More is better (throughput).
    Higher,
    /// Neither: a fix can rightly raise it (a pool keeping more connections ESTABLISHED).
    Neither,
}

/// One run's value in a row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Side {
    /// The value, or why there is none.
    pub value: Cell,
    /// True when the value is implied from a rate rather than read from a gauge (the
    /// TIME_WAIT peak as the busiest second's TIME_WAIT entries × 60 s, where the gauge was
    /// not sampled).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub implied: bool,
    /// The container's CPU quota in that run, cores (CPU rows of a container with one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_cores: Option<f64>,
}

impl Side {
    fn of(value: Cell) -> Self {
        Self {
            value,
            implied: false,
            quota_cores: None,
        }
    }

    fn missing(why: impl Into<String>) -> Self {
        Self::of(Cell::Missing(why.into()))
    }
}

/// One row of the before/after table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Row {
    /// Which part of the table.
    pub section: Section,
    /// `gateway → backend`, `gateway`, `game.state`, or `run`.
    pub subject: String,
    /// The phase of a `step` row (`step 2`); absent for whole-run rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// What is compared, e.g. `TIME_WAIT peak`.
    pub metric: String,
    /// How the numbers are stored and shown.
    pub unit: Unit,
    /// Which direction is an improvement.
    pub better: Better,
    /// The first run's value.
    pub before: Side,
    /// The second run's value.
    pub after: Side,
    /// after − before, or why there is none.
    pub delta: Cell,
    /// after / before; 0 when after is 0; missing when before is 0 or a side has no value.
    pub ratio: Cell,
}

/// Two runs compared.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Comparison {
    /// The JSON form's schema version ([`SCHEMA_VERSION`]; docs/compare.schema.json).
    pub schema_version: u32,
    /// The herd that compared them.
    pub herd_version: String,
    /// The run before the change.
    pub before: RunSummary,
    /// The run after it.
    pub after: RunSummary,
    /// Pairs, then containers, then ops over the whole run, then ops per step, then run
    /// totals.
    pub rows: Vec<Row>,
    /// The `--fail-on` gates' verdicts (empty without gates).
    #[serde(default)]
    pub gates: Vec<GateVerdict>,
    /// The first run's findings.
    pub before_findings: Vec<Finding>,
    /// The second run's findings.
    pub after_findings: Vec<Finding>,
    /// How the numbers were obtained and why some are missing.
    pub notes: Vec<String>,
    /// Both runs' timelines, for the overlaid charts (each run's own JSON report has them).
    #[serde(skip)]
    pub timelines: [Vec<TimelinePoint>; 2],
    /// Both runs' whole-run totals per op, what the gates are checked on.
    #[serde(skip)]
    pub totals: [Vec<OpTotal>; 2],
}

/// The comparison JSON's schema version: bumped whenever a field changes meaning or goes.
pub const SCHEMA_VERSION: u32 = 1;

/// One `--fail-on` gate checked on one op.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GateVerdict {
    /// The gate as written (`p99 +10%`).
    pub gate: String,
    /// The op it was checked on.
    pub op: String,
    /// Whether the comparison passes it.
    pub pass: bool,
    /// The figures and the change, in words (`p99 100ms → 115ms (+15.0 %)`).
    pub detail: String,
}

impl From<Verdict> for GateVerdict {
    fn from(v: Verdict) -> Self {
        Self {
            gate: v.gate,
            op: v.op,
            pass: v.pass,
            detail: v.detail,
        }
    }
}

/// A run's whole-run figures of `t`, as the gates read them.
fn figures(t: &OpTotal) -> OpFigures {
    let lat = t.latency.value();
    OpFigures {
        latency_us: lat
            .map(|l| {
                vec![
                    (500, l.p50_us as f64),
                    (900, l.p90_us as f64),
                    (990, l.p99_us as f64),
                    (999, l.p999_us as f64),
                    (1000, l.max_us as f64),
                ]
            })
            .unwrap_or_default(),
        mean_us: lat.map(|l| l.mean_us),
        rate: Some(t.rate),
        error_share: (t.count > 0).then(|| t.split.error_share()),
    }
}

/// Checks `gates` on both runs' whole-run totals per op and keeps the verdicts in `c`;
/// returns whether every gate passed.
pub fn apply_gates(c: &mut Comparison, gates: &[Gate]) -> bool {
    let [a, b] = &c.totals;
    let names = union_in_order(
        a.iter().map(|o| o.op.as_str()),
        b.iter().map(|o| o.op.as_str()),
    );
    let ops: Vec<(String, Option<OpFigures>, Option<OpFigures>)> = names
        .into_iter()
        .map(|op| {
            let f = |ts: &[OpTotal]| ts.iter().find(|t| t.op == op).map(figures);
            (op.clone(), f(a), f(b))
        })
        .collect();
    c.gates = crate::gate::check(gates, &ops)
        .into_iter()
        .map(GateVerdict::from)
        .collect();
    c.gates.iter().all(|g| g.pass)
}

/// The JSON schema of [`Comparison`], as committed in `docs/compare.schema.json`.
pub fn schema() -> String {
    let schema = schemars::schema_for!(Comparison);
    serde_json::to_string_pretty(&schema).expect("a schema serializes") + "\n"
}

/// A Linux socket stays in TIME_WAIT for 60 s (`TCP_TIMEWAIT_LEN`); the report's implied peak
/// uses it, and the note explaining that peak says so.
const TIME_WAIT_S: u32 = 60;

/// Builds a row, deriving its delta and ratio.
fn row(
    section: Section,
    subject: &str,
    metric: &str,
    unit: Unit,
    better: Better,
    [before, after]: [Side; 2],
    ids: [i64; 2],
) -> Row {
    let lacks = |which: &str| -> Cell { Cell::Missing(which.to_owned()) };
    let (delta, ratio) = match (before.value.value(), after.value.value()) {
        (Some(x), Some(y)) => (
            Cell::Value(y - x),
            if x == 0.0 && y == 0.0 {
                lacks("both 0")
            } else if x == 0.0 {
                lacks("before is 0")
            } else {
                Cell::Value(y / x)
            },
        ),
        (None, Some(_)) => {
            let why = format!("run {} has no value", ids[0]);
            (lacks(&why), lacks(&why))
        }
        (Some(_), None) => {
            let why = format!("run {} has no value", ids[1]);
            (lacks(&why), lacks(&why))
        }
        (None, None) => (
            lacks("neither run has a value"),
            lacks("neither run has a value"),
        ),
    };
    Row {
        section,
        subject: subject.to_owned(),
        phase: None,
        metric: metric.to_owned(),
        unit,
        better,
        before,
        after,
        delta,
        ratio,
    }
}

/// Why a run has no probe figures, when it has none.
fn probe_missing(r: &Report) -> Option<String> {
    (r.run.probe_intervals == 0).then(|| {
        let why = r
            .notes
            .iter()
            .find_map(|n| n.strip_prefix("Kernel probe: "))
            .unwrap_or("the probe recorded no interval");
        format!("no probe data in run {}: {why}", r.run.id)
    })
}

/// The largest value of `cells`, or the first reason when none has a value.
fn peak<'a>(cells: impl Iterator<Item = &'a Cell>) -> Option<Cell> {
    let mut best: Option<f64> = None;
    let mut why: Option<String> = None;
    for c in cells {
        match c {
            Cell::Value(v) => best = Some(best.map_or(*v, |b| b.max(*v))),
            Cell::Missing(w) => {
                why.get_or_insert_with(|| w.clone());
            }
        }
    }
    best.map(Cell::Value).or(why.map(Cell::Missing))
}

/// The sum of the cells' values, or the first reason when none has a value.
fn sum<'a>(cells: impl Iterator<Item = &'a Cell>) -> Cell {
    let mut total: Option<f64> = None;
    let mut why: Option<String> = None;
    for c in cells {
        match c {
            Cell::Value(v) => total = Some(total.unwrap_or(0.0) + v),
            Cell::Missing(w) => {
                why.get_or_insert_with(|| w.clone());
            }
        }
    }
    match (total, why) {
        (Some(t), _) => Cell::Value(t),
        (None, Some(w)) => Cell::Missing(w),
        (None, None) => Cell::Missing("no rows".into()),
    }
}

/// Keeps the first appearance of each name, `a`'s before `b`'s.
fn union_in_order<'a>(
    a: impl Iterator<Item = &'a str>,
    b: impl Iterator<Item = &'a str>,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in a.chain(b) {
        if !out.iter().any(|o| o == n) {
            out.push(n.to_owned());
        }
    }
    out
}

/// Compares run `a` (before) with run `b` (after).
pub fn compare(a: &Report, b: &Report) -> Comparison {
    let ids = [a.run.id, b.run.id];
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    pair_rows(a, b, &mut rows, &mut notes);
    container_rows(a, b, &mut rows);
    op_rows(a, b, &mut rows);
    step_rows(a, b, &mut rows);

    // Run totals.
    let count = |v: u64| Side::of(Cell::Value(v as f64));
    let totals = [
        // Same load, more requests served: the system kept up better.
        ("requests", Better::Higher, [a.run.requests, b.run.requests]),
        (
            "errors (not ok)",
            Better::Lower,
            [a.run.errors, b.run.errors],
        ),
        (
            "findings",
            Better::Lower,
            [a.findings.len() as u64, b.findings.len() as u64],
        ),
    ];
    for (metric, better, [x, y]) in totals {
        rows.push(row(
            Section::Run,
            "run",
            metric,
            Unit::Count,
            better,
            [count(x), count(y)],
            ids,
        ));
    }
    let mut kinds: BTreeMap<&str, [u64; 2]> = BTreeMap::new();
    for (i, r) in [a, b].into_iter().enumerate() {
        for f in &r.findings {
            kinds.entry(f.kind.as_str()).or_default()[i] += 1;
        }
    }
    for (kind, [x, y]) in kinds {
        rows.push(row(
            Section::Run,
            "run",
            &format!("findings: {kind}"),
            Unit::Count,
            Better::Lower,
            [count(x), count(y)],
            ids,
        ));
    }

    notes.push(
        "Op latencies over a run are the percentiles of the run's merged histogram of the op \
         (every phase it ran in; the hammer's requests are the separate op hammer:<op>); req/s \
         is the op's count over the time of the phases it ran in; errors leave out the \
         outcomes the scenario expects."
            .into(),
    );
    notes.push(
        "Container peaks are the highest of any load step; intervals before the first step and \
         after the last (setup, clean-up) are left out when a run has steps."
            .into(),
    );
    notes.push(
        "Ratio is after ÷ before: ×k when the second run's value is k times the first's, ÷k \
         when it is k times smaller, → 0 when it fell to 0."
            .into(),
    );
    for r in [a, b] {
        if let Some(why) = probe_missing(r) {
            notes.push(format!("Kernel probe: {why}."));
        }
        if r.run.status != "finished" {
            notes.push(format!(
                "Run {} did not finish (status `{}`): its figures cover the intervals recorded \
                 before it stopped.",
                r.run.id, r.run.status
            ));
        }
    }
    notes.push(
        "Per step: each op in each phase of the same name in both runs, from that phase's \
         histogram of the op."
            .into(),
    );
    Comparison {
        schema_version: SCHEMA_VERSION,
        herd_version: env!("CARGO_PKG_VERSION").into(),
        before: a.run.clone(),
        after: b.run.clone(),
        rows,
        gates: Vec::new(),
        before_findings: a.findings.clone(),
        after_findings: b.findings.clone(),
        notes,
        timelines: [a.timeline.clone(), b.timeline.clone()],
        totals: [a.totals.clone(), b.totals.clone()],
    }
}

/// The figures of a pair compared.
#[derive(Clone, Copy)]
enum PairMetric {
    Connects,
    TimeWait,
    Churn,
    Established,
}

/// Per destination pair: new connections/s, TIME_WAIT peak, churn ratio, ESTABLISHED peak.
fn pair_rows(a: &Report, b: &Report, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    let ids = [a.run.id, b.run.id];
    // A destination is named by its container when either run knows it, so a backend that
    // came up at another address in the second run still lines up with the first.
    let mut names: BTreeMap<&str, &str> = BTreeMap::new();
    for p in a.pairs.iter().chain(&b.pairs) {
        if p.remote_container != "-" {
            names.insert(p.remote.as_str(), p.remote_container.as_str());
        }
    }
    let dest = |p: &PairRow| -> (String, bool) {
        match names.get(p.remote.as_str()) {
            Some(n) => ((*n).to_owned(), true),
            None => (p.remote.clone(), false),
        }
    };
    let mut by_key: BTreeMap<(String, String), [Vec<&PairRow>; 2]> = BTreeMap::new();
    let mut by_address = false;
    // Sockets of unrelated local processes show up as gauge-only pairs (no new connection,
    // not on the request path); comparing them is noise. A pair that mattered in either run
    // stays, with both sides.
    let relevant: Vec<(String, String)> = a
        .pairs
        .iter()
        .chain(&b.pairs)
        .filter(|p| p.connects > 0 || p.churn_ratio.value().is_some())
        .map(|p| (p.container.clone(), dest(p).0))
        .collect();
    for (i, r) in [a, b].into_iter().enumerate() {
        for p in &r.pairs {
            let (d, named) = dest(p);
            if !relevant.contains(&(p.container.clone(), d.clone())) {
                continue;
            }
            by_address |= !named;
            by_key.entry((p.container.clone(), d)).or_default()[i].push(p);
        }
    }
    // The busiest pair first: that is where churn shows.
    let mut keys: Vec<((String, String), f64)> = by_key
        .iter()
        .map(|(k, sides)| {
            let busiest = sides
                .iter()
                .map(|ps| ps.iter().map(|p| p.connects_per_s).sum::<f64>())
                .fold(0.0, f64::max);
            (k.clone(), busiest)
        })
        .collect();
    keys.sort_by(|x, y| y.1.total_cmp(&x.1).then_with(|| x.0.cmp(&y.0)));

    for ((src, dst), _) in keys {
        let sides = &by_key[&(src.clone(), dst.clone())];
        let subject = format!("{src} → {dst}");
        let reports = [a, b];
        // Several rows under one key (one destination container on two ports) add up: counts
        // and rates exactly, gauge peaks as an upper bound (their peaks may not coincide).
        let side = |i: usize, metric: PairMetric| -> Side {
            let ps = &sides[i];
            if ps.is_empty() {
                if let Some(why) = probe_missing(reports[i]) {
                    return Side::missing(why);
                }
                // The probe counts every connect of every container, so a pair with no row
                // opened no connection in that run; its gauges were never read.
                return match metric {
                    PairMetric::Connects => Side::of(Cell::Value(0.0)),
                    _ => Side::missing(format!(
                        "no connection from {src} to {dst} in run {}",
                        ids[i]
                    )),
                };
            }
            match metric {
                PairMetric::Connects => {
                    Side::of(Cell::Value(ps.iter().map(|p| p.connects_per_s).sum()))
                }
                PairMetric::TimeWait => {
                    let implied = ps.iter().any(|p| p.time_wait_peak.value().is_none());
                    let total = ps
                        .iter()
                        .map(|p| {
                            p.time_wait_peak
                                .value()
                                .unwrap_or(p.time_wait_implied_peak as f64)
                        })
                        .sum();
                    Side {
                        value: Cell::Value(total),
                        implied,
                        quota_cores: None,
                    }
                }
                PairMetric::Churn => Side::of(sum(ps.iter().map(|p| &p.churn_ratio))),
                PairMetric::Established => Side::of(sum(ps.iter().map(|p| &p.established_peak))),
            }
        };
        for (metric, key, unit, better) in [
            (
                "new connections/s",
                PairMetric::Connects,
                Unit::PerSecond,
                Better::Lower,
            ),
            (
                "TIME_WAIT peak",
                PairMetric::TimeWait,
                Unit::Count,
                Better::Lower,
            ),
            (
                "churn ratio (new connections per request)",
                PairMetric::Churn,
                Unit::Ratio,
                Better::Lower,
            ),
            (
                "ESTABLISHED peak",
                PairMetric::Established,
                Unit::Count,
                Better::Neither,
            ),
        ] {
            rows.push(row(
                Section::Pair,
                &subject,
                metric,
                unit,
                better,
                [side(0, key), side(1, key)],
                ids,
            ));
        }
    }
    if rows.iter().any(|r| r.before.implied || r.after.implied) {
        notes.push(format!(
            "TIME_WAIT peak is the gauge of the source's network namespace toward the \
             destination; ≈ … (implied) marks a peak implied from the busiest second's TIME_WAIT \
             entries × {TIME_WAIT_S} s, where the gauge was not sampled."
        ));
    }
    if by_address {
        notes.push("Destinations no run names a container for are matched by address:port.".into());
    }
}

/// The container rows to compare: those of the load steps (all rows when there are none).
/// Without the probe a report holds one placeholder row per step (container `all`) whose cells
/// carry the reason; the reason is used instead, so `all` is no container to compare.
fn compared_containers(r: &Report) -> Vec<&ContainerRow> {
    if probe_missing(r).is_some() {
        return Vec::new();
    }
    let in_steps: Vec<&ContainerRow> = r
        .containers
        .iter()
        .filter(|c| c.phase != "before" && c.phase != "after")
        .collect();
    if in_steps.is_empty() {
        r.containers.iter().collect()
    } else {
        in_steps
    }
}

/// Per container: CPU burst and sustained peaks, throttled share, memory peak.
fn container_rows(a: &Report, b: &Report, rows: &mut Vec<Row>) {
    let ids = [a.run.id, b.run.id];
    let reports = [a, b];
    let sides = [compared_containers(a), compared_containers(b)];
    let names = union_in_order(
        sides[0].iter().map(|c| c.container.as_str()),
        sides[1].iter().map(|c| c.container.as_str()),
    );
    type Pick = fn(&ContainerRow) -> &Cell;
    let metrics: [(&str, Unit, Pick); 4] = [
        ("CPU burst peak (busiest 100 ms)", Unit::Cores, |c| {
            &c.cpu_burst
        }),
        ("CPU sustained peak (30 s)", Unit::Cores, |c| {
            &c.cpu_sustained
        }),
        (
            "throttled share of periods (worst step)",
            Unit::Share,
            |c| &c.throttled_share,
        ),
        ("memory peak", Unit::Mib, |c| &c.mem_peak_mib),
    ];
    for name in &names {
        for (metric, unit, pick) in metrics {
            let side = |i: usize| -> Side {
                if let Some(why) = probe_missing(reports[i]) {
                    return Side::missing(why);
                }
                let mine = || sides[i].iter().filter(|c| &c.container == name);
                let mut s = Side::of(peak(mine().map(|c| pick(c))).unwrap_or_else(|| {
                    Cell::Missing(format!("no container {name} in run {}", ids[i]))
                }));
                if unit == Unit::Cores {
                    s.quota_cores = peak(mine().map(|c| &c.cpu_cap)).and_then(|c| c.value());
                }
                s
            };
            rows.push(row(
                Section::Container,
                name,
                metric,
                unit,
                Better::Lower,
                [side(0), side(1)],
                ids,
            ));
        }
    }
}

/// Per op over the whole run, from each run's merged histograms: mean, p50, p90, p99,
/// p99.9, max, error share (expected outcomes are not errors), req/s.
fn op_rows(a: &Report, b: &Report, rows: &mut Vec<Row>) {
    let ids = [a.run.id, b.run.id];
    let names = union_in_order(
        a.totals.iter().map(|o| o.op.as_str()),
        b.totals.iter().map(|o| o.op.as_str()),
    );
    for op in &names {
        let totals = [
            a.totals.iter().find(|t| t.op == *op),
            b.totals.iter().find(|t| t.op == *op),
        ];
        type Metric = fn(&OpTotal) -> Cell;
        let metrics: [(&str, Unit, Better, Metric); 8] = [
            ("mean", Unit::Micros, Better::Lower, |t| {
                t.latency.get(|l| l.mean_us)
            }),
            ("p50", Unit::Micros, Better::Lower, |t| {
                t.latency.get(|l| l.p50_us as f64)
            }),
            ("p90", Unit::Micros, Better::Lower, |t| {
                t.latency.get(|l| l.p90_us as f64)
            }),
            ("p99", Unit::Micros, Better::Lower, |t| {
                t.latency.get(|l| l.p99_us as f64)
            }),
            ("p99.9", Unit::Micros, Better::Lower, |t| {
                t.latency.get(|l| l.p999_us as f64)
            }),
            ("max", Unit::Micros, Better::Lower, |t| {
                t.latency.get(|l| l.max_us as f64)
            }),
            (
                "error share (errors / count; expected outcomes apart)",
                Unit::Share,
                Better::Lower,
                |t| Cell::Value(t.split.error_share()),
            ),
            ("req/s", Unit::PerSecond, Better::Higher, |t| {
                Cell::Value(t.rate)
            }),
        ];
        for (metric, unit, better, f) in metrics {
            let side = |i: usize| -> Side {
                match totals[i] {
                    None => Side::missing(format!("op not run in run {}", ids[i])),
                    Some(t) if t.count == 0 && metric != "req/s" => {
                        Side::missing("no requests recorded")
                    }
                    Some(t) => Side::of(f(t)),
                }
            };
            rows.push(row(
                Section::Op,
                op,
                metric,
                unit,
                better,
                [side(0), side(1)],
                ids,
            ));
        }
    }
}

/// Per phase × op, for every phase name either run has: p50, p99, error share and req/s,
/// each from that phase's histogram of the op. A new contour keeps its plan, so phases line
/// up by name (`step 2` with `step 2`).
fn step_rows(a: &Report, b: &Report, rows: &mut Vec<Row>) {
    let ids = [a.run.id, b.run.id];
    let mut keys: Vec<(String, String)> = Vec::new();
    for o in a.ops.iter().chain(&b.ops) {
        let k = (o.phase.clone(), o.op.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    type Metric = fn(&OpRow) -> Cell;
    let metrics: [(&str, Unit, Better, Metric); 4] = [
        ("p50", Unit::Micros, Better::Lower, |o| {
            Cell::Value(o.latency.p50_us as f64)
        }),
        ("p99", Unit::Micros, Better::Lower, |o| {
            Cell::Value(o.latency.p99_us as f64)
        }),
        (
            "error share (errors / count; expected outcomes apart)",
            Unit::Share,
            Better::Lower,
            |o| Cell::Value(o.split.error_share()),
        ),
        ("req/s", Unit::PerSecond, Better::Higher, |o| {
            Cell::Value(o.rate)
        }),
    ];
    for (phase, op) in keys {
        let found = [a, b].map(|r| r.ops.iter().find(|o| o.phase == phase && o.op == op));
        for (metric, unit, better, f) in metrics {
            let side = |i: usize| -> Side {
                match found[i] {
                    None => Side::missing(format!("op not run in {phase} of run {}", ids[i])),
                    Some(o) if o.count == 0 && metric != "req/s" => {
                        Side::missing("no requests recorded")
                    }
                    Some(o) => Side::of(f(o)),
                }
            };
            let mut r = row(
                Section::Step,
                &op,
                metric,
                unit,
                better,
                [side(0), side(1)],
                ids,
            );
            r.phase = Some(phase.clone());
            rows.push(r);
        }
    }
}

/// `v` in `unit`, signed (`+3`, `-26500`) when `signed`.
fn show(unit: Unit, v: f64, signed: bool) -> String {
    let m = v.abs();
    let body = match unit {
        Unit::Count => format!("{m:.0}"),
        Unit::PerSecond => format!("{m:.1}"),
        // Churn after a fix sits in the thousandths (2 connections per 500 requests).
        Unit::Ratio if m > 0.0 && m < 0.01 => format!("{m:.4}"),
        Unit::Ratio if m < 0.1 => format!("{m:.3}"),
        Unit::Ratio => format!("{m:.2}"),
        Unit::Cores => format!("{m:.2}"),
        // Error shares live well under 1 % (the seeds' 0.07 %); one decimal would say 0.
        Unit::Share if m > 0.0 && m < 0.01 => format!("{:.2}", m * 100.0),
        Unit::Share => format!("{:.1}", m * 100.0),
        Unit::Micros if m >= 10_000.0 => format!("{:.0}", m / 1e3),
        Unit::Micros => format!("{:.1}", m / 1e3),
        Unit::Mib => format!("{m:.1}"),
    };
    // A value that rounds to zero carries no sign.
    let zero = body.chars().all(|c| c == '0' || c == '.');
    let sign = match () {
        _ if zero => "",
        _ if v < 0.0 => "-",
        _ if signed => "+",
        _ => "",
    };
    let suffix = match unit {
        Unit::Count | Unit::PerSecond | Unit::Ratio => "",
        Unit::Cores => " cores",
        Unit::Share if signed => " pp",
        Unit::Share => " %",
        Unit::Micros => " ms",
        Unit::Mib => " MiB",
    };
    format!("{sign}{body}{suffix}")
}

fn show_side(unit: Unit, s: &Side) -> String {
    match &s.value {
        Cell::Value(v) if s.implied => format!("≈ {} (implied)", show(unit, *v, false)),
        Cell::Value(v) if unit == Unit::Cores => crate::units::cores(*v, s.quota_cores),
        Cell::Value(v) => show(unit, *v, false),
        Cell::Missing(why) => format!("n/a ({why})"),
    }
}

fn show_delta(unit: Unit, d: &Cell) -> String {
    match d {
        Cell::Value(v) => show(unit, *v, true),
        Cell::Missing(why) => format!("n/a ({why})"),
    }
}

fn show_ratio(r: &Cell) -> String {
    let factor = |f: f64| {
        if f >= 100.0 {
            format!("{f:.0}")
        } else if f >= 10.0 {
            format!("{f:.1}")
        } else {
            format!("{f:.2}")
        }
    };
    match r {
        Cell::Value(v) if *v == 0.0 => "→ 0".into(),
        // Within half a percent either way reads as unchanged, not as "÷1.00".
        Cell::Value(v) if (v - 1.0).abs() < 0.005 => "×1.00".into(),
        Cell::Value(v) if *v >= 1.0 => format!("×{}", factor(*v)),
        Cell::Value(v) => format!("÷{}", factor(1.0 / v)),
        Cell::Missing(why) => format!("n/a ({why})"),
    }
}

fn what(r: &Row) -> String {
    match r.section {
        Section::Pair => format!("pair {}", r.subject),
        Section::Container => format!("container {}", r.subject),
        Section::Op => format!("op {}", r.subject),
        Section::Step => format!(
            "op {} in {}",
            r.subject,
            r.phase.as_deref().unwrap_or("a phase")
        ),
        Section::Run => r.subject.clone(),
    }
}

/// Whether the change is an improvement (Some(true)), a regression (Some(false)), or neither.
fn verdict(r: &Row) -> Option<bool> {
    let (x, y) = (r.before.value.value()?, r.after.value.value()?);
    let lower = match r.better {
        Better::Lower => true,
        Better::Higher => false,
        Better::Neither => return None,
    };
    // Run-to-run noise moves latencies and rates by a few percent; only paint what moved more.
    if (y - x).abs() <= 0.05 * x.abs().max(y.abs()) {
        return None;
    }
    Some((y < x) == lower)
}

fn run_line(r: &RunSummary) -> Text {
    Text::plain(format!("run {} ", r.id))
        .code(&r.name)
        .then(" (scenario ")
        .code(&r.scenario)
        .then(format!(
            ", status {}, {:.0} s, {} requests, {} not ok)",
            r.status, r.duration_s, r.requests, r.errors
        ))
}

/// A side's, delta's or ratio's cell: its text, or why it is missing.
fn shown(value: &Cell, text: String, verdict: Option<bool>) -> Value {
    match (value, verdict) {
        (Cell::Missing(why), _) => Value::marked(text, ValueKind::Missing(why.clone())),
        (Cell::Value(_), Some(true)) => Value::marked(text, ValueKind::Better),
        (Cell::Value(_), Some(false)) => Value::marked(text, ValueKind::Worse),
        (Cell::Value(_), None) => Value::plain(text),
    }
}

/// The before/after table: one group of rows per part (pairs, containers, ops, the run);
/// deltas and ratios marked better or worse.
pub fn before_after(c: &Comparison) -> Table {
    let mut t = Table::new(vec![
        Column::left("what"),
        Column::left("metric"),
        Column::right(format!("before: run {}", c.before.id)),
        Column::right(format!("after: run {}", c.after.id)),
        Column::right("delta"),
        Column::right("ratio"),
    ]);
    let mut section = None;
    for r in &c.rows {
        if section != Some(r.section) {
            section = Some(r.section);
            t.group(match r.section {
                Section::Pair => "Connections per source → destination",
                Section::Container => "Containers (peaks over the load steps)",
                Section::Op => "Ops over the whole run",
                Section::Step => "Ops per step",
                Section::Run => "Run totals",
            });
        }
        let v = verdict(r);
        t.row(vec![
            what(r).into(),
            r.metric.clone().into(),
            shown(&r.before.value, show_side(r.unit, &r.before), None),
            shown(&r.after.value, show_side(r.unit, &r.after), None),
            shown(&r.delta, show_delta(r.unit, &r.delta), v),
            shown(&r.ratio, show_ratio(&r.ratio), v),
        ]);
    }
    t
}

/// The before/after table alone, in Markdown (what `herd compare` prints).
pub fn table(c: &Comparison) -> String {
    crate::markdown::table(&before_after(c))
}

/// One chart of both runs on the same axes: `series(timeline, colour base)` of each, the
/// run before dashed and lighter, each legend entry naming its run. Phase marks and the
/// driver's saturated intervals are the run after's; short intervals of either run stay off
/// the scale.
fn overlay(
    c: &Comparison,
    title: &str,
    unit: &str,
    series: &dyn Fn(&[TimelinePoint]) -> Vec<Series>,
) -> Chart {
    let [ta, tb] = &c.timelines;
    let mut lines = Vec::new();
    for (t, id, stroke) in [
        (ta, c.before.id, Stroke::Before),
        (tb, c.after.id, Stroke::Solid),
    ] {
        for mut s in series(t) {
            s.name = format!("{} (run {id})", s.name);
            if s.stroke == Stroke::Solid {
                s.stroke = stroke;
            }
            lines.push(s);
        }
    }
    let mut chart = sections::timeline_chart(tb, title, unit, lines);
    chart.off_scale.extend(sections::short_intervals(ta));
    chart.x_max = [ta, tb]
        .iter()
        .filter_map(|t| t.last().map(TimelinePoint::end_s))
        .reduce(f64::max);
    chart.notes.retain(|n| !n.starts_with("The interval at"));
    if lines_empty(&chart) {
        chart.empty = Some("neither run recorded this".into());
    }
    chart
}

fn lines_empty(c: &Chart) -> bool {
    c.series.iter().all(|s| s.points.is_empty())
}

/// Both runs' timelines overlaid: req/s, p99 per op, per container connects/s, CPU and the
/// TIME_WAIT gauge.
fn charts(c: &Comparison) -> Vec<Block> {
    if c.timelines.iter().all(Vec::is_empty) {
        return Vec::new();
    }
    let ops = union_in_order(
        sections::timeline_ops(&c.timelines[0])
            .iter()
            .map(String::as_str),
        sections::timeline_ops(&c.timelines[1])
            .iter()
            .map(String::as_str),
    );
    let per_op = |f: fn(&crate::model::TimelineOp) -> f64| {
        let ops = ops.clone();
        move |t: &[TimelinePoint]| -> Vec<Series> {
            ops.iter()
                .enumerate()
                .map(|(i, op)| {
                    Series::new(
                        op.clone(),
                        i,
                        sections::points_of(t, &|p| p.ops.iter().find(|o| o.op == *op).map(f)),
                    )
                })
                .collect()
        }
    };
    let mut containers: Vec<String> = sections::timeline_containers(&c.timelines[0]);
    for n in sections::timeline_containers(&c.timelines[1]) {
        if !containers.contains(&n) {
            containers.push(n);
        }
    }
    let by = |f: sections::ContainerFigure| {
        let names = containers.clone();
        move |t: &[TimelinePoint]| -> Vec<Series> {
            names
                .iter()
                .enumerate()
                .map(|(i, n)| Series::new(n.clone(), i, sections::container_points(t, n, f)))
                .filter(|s| !s.points.is_empty())
                .collect()
        }
    };
    let mut out = vec![
        Block::Heading(2, "Timelines, both runs".into()),
        Block::Chart({
            let mut ch = overlay(
                c,
                "Requests per second, by op",
                "req/s",
                &per_op(|o| o.req_per_s),
            );
            // A note of the chart, not a paragraph: the Markdown, which has no charts, skips
            // the whole section.
            ch.notes.insert(
                0,
                format!(
                    "Run {} dashed and lighter, run {} solid, on the same axes.",
                    c.before.id, c.after.id
                ),
            );
            ch
        }),
        Block::Chart(overlay(
            c,
            "p99 latency, by op",
            "ms",
            &per_op(|o| o.p99_us as f64 / 1e3),
        )),
    ];
    if !containers.is_empty() {
        out.push(Block::Chart(overlay(
            c,
            "New TCP connections per second, by container",
            "connects/s",
            &by(sections::CONNECTS),
        )));
        out.push(Block::Chart(overlay(
            c,
            "CPU, by container",
            "cores",
            &by(sections::CPU),
        )));
        out.push(Block::Chart(overlay(
            c,
            "TIME_WAIT sockets, by container",
            "sockets",
            &by(sections::TIME_WAIT),
        )));
    }
    out
}

/// The gates' verdicts, one line each.
pub fn gate_lines(c: &Comparison) -> Vec<String> {
    c.gates
        .iter()
        .map(|g| {
            format!(
                "{} `{}` on {}: {}",
                if g.pass { "pass" } else { "FAIL" },
                g.gate,
                g.op,
                g.detail
            )
        })
        .collect()
}

/// The comparison's page: both runs, the gates, the table, both runs' timelines overlaid,
/// both runs' findings, notes.
pub fn document(c: &Comparison) -> Document {
    let mut b = vec![Block::List(vec![
        Text::plain("before: ").then_all(run_line(&c.before)),
        Text::plain("after: ").then_all(run_line(&c.after)),
    ])];
    if !c.gates.is_empty() {
        b.push(Block::Heading(2, "Gates (--fail-on)".into()));
        b.push(Block::List(gate_lines(c).iter().map(Text::plain).collect()));
    }
    b.push(Block::Heading(2, "Before / after".into()));
    b.push(Block::Table(before_after(c)));
    b.extend(charts(c));
    b.push(Block::Heading(2, "Findings".into()));
    for (label, r, fs) in [
        ("before", &c.before, &c.before_findings),
        ("after", &c.after, &c.after_findings),
    ] {
        b.push(Block::Heading(3, format!("run {} ({label})", r.id)));
        if fs.is_empty() {
            b.push(Block::Para(Text::plain("None.")));
        }
        for f in fs {
            b.push(Block::Finding {
                kind: f.kind.clone(),
                title: f.title.clone(),
                detail: String::new(),
                evidence: Vec::new(),
            });
        }
    }
    b.push(Block::Heading(2, "Notes".into()));
    b.push(Block::List(c.notes.iter().map(Text::plain).collect()));
    Document {
        title: format!("herd compare — run {} → run {}", c.before.id, c.after.id),
        blocks: b,
    }
}

/// The Markdown page.
pub fn markdown(c: &Comparison) -> String {
    crate::markdown::document(&document(c))
}

/// The HTML page: self-contained (inline CSS, no scripts, no network); improvements green,
/// regressions red.
pub fn html(c: &Comparison) -> String {
    crate::html::document(&document(c))
}

/// Writes `compare-<A>-<B>.md`, `.html` and `.json` into `dir`.
pub fn write_comparison(c: &Comparison, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let base = dir.join(format!("compare-{}-{}", c.before.id, c.after.id));
    let md = base.with_extension("md");
    std::fs::write(&md, markdown(c)).with_context(|| format!("writing {}", md.display()))?;
    let page = base.with_extension("html");
    std::fs::write(&page, html(c)).with_context(|| format!("writing {}", page.display()))?;
    let json = base.with_extension("json");
    std::fs::write(&json, serde_json::to_string_pretty(c)? + "\n")
        .with_context(|| format!("writing {}", json.display()))?;
    Ok(vec![md, page, json])
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use herd_driver::scenario::PhaseKind;

    use hdrhistogram::Histogram;
    use herd_driver::{
        measure::histogram::{new_histogram, record},
        report::LatencyHistogram,
    };

    use crate::model::{Latencies, Log2Row, OpRow, SCHEMA_VERSION, Split, totals};

    fn summary(id: i64, requests: u64, errors: u64, probe_intervals: u64) -> RunSummary {
        RunSummary {
            id,
            name: format!("demo-{id}"),
            scenario: "demo.toml".into(),
            status: "finished".into(),
            started_unix_ms: 0,
            started_at: "1970-01-01T00:00:00Z".into(),
            duration_s: 60.0,
            requests,
            split: Split {
                ok: requests - errors,
                expected: 0,
                errors,
            },
            errors,
            saturated_intervals: 0,
            probe_intervals,
            seeding: None,
        }
    }

    /// `count` samples in ms: half at `p[0]`, up to 99 % at `p[1]`, the rest at `p[2]`.
    fn samples(count: u64, p: [u64; 3]) -> Histogram<u64> {
        let mut h = new_histogram();
        for i in 0..count {
            let ms = if i < count / 2 {
                p[0]
            } else if i < count * 99 / 100 {
                p[1]
            } else {
                p[2]
            };
            record(&mut h, ms * 1000);
        }
        h
    }

    fn op(step: &str, name: &str, count: u64, rate: f64, p: [u64; 3], not_ok: u64) -> OpRow {
        let mut outcomes = BTreeMap::from([(herd_driver::Outcome::Ok, count - not_ok)]);
        if not_ok > 0 {
            outcomes.insert("transport_error".into(), not_ok);
        }
        let h = samples(count, p);
        OpRow {
            phase: step.into(),
            kind: PhaseKind::Step,
            players: 10,
            load: "10 players".into(),
            op: name.into(),
            count,
            rate,
            latency: Latencies::of(&h),
            split: Split {
                ok: count - not_ok,
                expected: 0,
                errors: not_ok,
            },
            outcomes,
            histogram: Some(LatencyHistogram::encode(&h)),
        }
    }

    /// A report of these rows, with the whole-run totals they make.
    fn with(mut r: Report) -> Report {
        r.totals = totals(&r.ops);
        r
    }

    fn container(step: &str, name: &str, burst: f64, share: f64, mem: Cell) -> ContainerRow {
        let unused = || Cell::Missing("not part of the comparison".into());
        ContainerRow {
            phase: step.into(),
            container: name.into(),
            cpu_burst: Cell::Value(burst),
            cpu_sustained: Cell::Value(burst / 2.0),
            cpu_avg: unused(),
            cpu_cap: Cell::Value(3.0),
            throttled_share: Cell::Value(share),
            throttled_ms: unused(),
            mem_peak_mib: mem,
            connects_per_s: unused(),
            time_wait_per_s: unused(),
            connect_errors: unused(),
            time_wait_peak: unused(),
            established_peak: unused(),
            headroom_min: unused(),
            listen_overflows: unused(),
        }
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one argument per column of the pair row"
    )]
    fn pair(
        src: &str,
        remote: &str,
        remote_container: &str,
        connects_per_s: f64,
        time_wait_peak: Cell,
        implied_peak: u64,
        churn: Cell,
        established: f64,
    ) -> PairRow {
        PairRow {
            container: src.into(),
            remote: remote.into(),
            remote_container: remote_container.into(),
            connects: (connects_per_s * 60.0) as u64,
            connects_per_s,
            time_wait_entries: (connects_per_s * 60.0) as u64,
            time_wait_implied_peak: implied_peak,
            churn_ratio: churn,
            time_wait_peak,
            established_peak: Cell::Value(established),
            srtt_p50_us: Cell::Missing("not part of the comparison".into()),
            srtt_p99_le_us: Cell::Missing("not part of the comparison".into()),
            headroom_min: Cell::Missing("not part of the comparison".into()),
            connect_latency_us: Log2Row::default(),
            lifetime_ms: Log2Row::default(),
        }
    }

    fn finding(kind: &str) -> Finding {
        Finding {
            kind: kind.into(),
            title: format!("{kind} title"),
            detail: String::new(),
            evidence: vec![],
            numbers: BTreeMap::new(),
            phase: None,
            container: None,
        }
    }

    /// The seeds' buggy pass: the gateway churns ~440 connections/s to the backend, 26 500
    /// sockets in TIME_WAIT, CPU bursts to 1.75 cores, game.state p99 500 ms.
    fn buggy() -> Report {
        with(Report {
            schema_version: SCHEMA_VERSION,
            herd_version: "test".into(),
            expected: BTreeMap::new(),
            totals: vec![],
            run: summary(1, 4000, 40, 60),
            streams: vec![],
            groups: vec![],
            open: vec![],
            ops: vec![
                op("step 1", "game.state", 1000, 100.0, [20, 200, 400], 10),
                op("step 2", "game.state", 3000, 150.0, [100, 600, 900], 30),
            ],
            containers: vec![
                container("step 1", "gateway", 0.9, 0.02, Cell::Value(40.0)),
                container("step 2", "gateway", 1.75, 0.12, Cell::Value(80.0)),
                // Clean-up after the last step: not load, so not the peak.
                container("after", "gateway", 2.5, 0.5, Cell::Value(90.0)),
                container("step 1", "backend", 0.7, 0.0, Cell::Value(50.0)),
            ],
            pairs: vec![
                pair(
                    "gateway",
                    "198.18.0.6:8082",
                    "backend",
                    440.0,
                    Cell::Value(26_500.0),
                    26_400,
                    Cell::Value(0.5),
                    2.0,
                ),
                pair(
                    "host",
                    "127.0.0.1:8080",
                    "gateway",
                    1.0,
                    Cell::Missing("the source's network namespace was not sampled".into()),
                    60,
                    Cell::Value(0.01),
                    500.0,
                ),
            ],
            timeline: vec![],
            slo: vec![],
            findings: vec![finding("churn_cliff"), finding("throttling_bursts")],
            notes: vec![],
        })
    }

    /// The fixed pass: the backend came up at another address, the pool keeps ~225
    /// connections, TIME_WAIT is gone, game.state p99 200 ms, a new op and a DNS pair appear.
    fn fixed() -> Report {
        with(Report {
            schema_version: SCHEMA_VERSION,
            herd_version: "test".into(),
            expected: BTreeMap::new(),
            totals: vec![],
            run: summary(2, 4500, 0, 60),
            streams: vec![],
            groups: vec![],
            open: vec![],
            ops: vec![
                op("step 1", "game.state", 1000, 100.0, [10, 200, 250], 0),
                op("step 2", "game.state", 3000, 150.0, [20, 200, 260], 0),
                op("step 2", "game.evaluate", 500, 25.0, [1, 200, 193], 0),
            ],
            containers: vec![
                container("step 1", "gateway", 0.2, 0.0, Cell::Value(45.0)),
                container("step 2", "gateway", 0.26, 0.0, Cell::Value(45.0)),
                container(
                    "step 1",
                    "backend",
                    0.7,
                    0.0,
                    Cell::Missing("memory.peak needs kernel 5.19".into()),
                ),
            ],
            pairs: vec![
                pair(
                    "gateway",
                    "198.18.0.10:8082",
                    "backend",
                    3.75,
                    Cell::Value(0.0),
                    0,
                    Cell::Value(0.004),
                    225.0,
                ),
                pair(
                    "gateway",
                    "10.0.0.9:53",
                    "-",
                    0.5,
                    Cell::Value(0.0),
                    0,
                    Cell::Missing("not on the request path".into()),
                    0.0,
                ),
            ],
            timeline: vec![],
            slo: vec![],
            findings: vec![],
            notes: vec![],
        })
    }

    fn find<'a>(c: &'a Comparison, subject: &str, metric: &str) -> &'a Row {
        c.rows
            .iter()
            .find(|r| r.subject == subject && r.metric.starts_with(metric))
            .unwrap_or_else(|| panic!("no row {subject} / {metric}"))
    }

    /// Splits a Markdown table line into cells, keeping escaped `\|` inside its cell.
    fn cells(line: &str) -> Vec<String> {
        let mut out = vec![String::new()];
        let mut prev = ' ';
        for ch in line.trim().trim_start_matches('|').chars() {
            if ch == '|' && prev != '\\' {
                out.push(String::new());
            } else {
                out.last_mut().unwrap().push(ch);
            }
            prev = ch;
        }
        if line.trim().ends_with('|') {
            out.pop();
        }
        out
    }

    #[test]
    fn the_seeds_fix_reads_as_before_and_after_with_deltas_and_ratios() {
        let c = compare(&buggy(), &fixed());

        // Order: pairs (busiest first), containers, ops, run totals.
        let sections: Vec<Section> = c.rows.iter().map(|r| r.section).collect();
        assert!(sections.windows(2).all(|w| w[0] <= w[1]), "{sections:?}");
        assert_eq!(c.rows[0].subject, "gateway → backend");
        assert_eq!(c.rows.last().unwrap().section, Section::Run);

        // Matched by destination container although the backend's address changed.
        let tw = find(&c, "gateway → backend", "TIME_WAIT peak");
        assert_eq!(tw.before.value, Cell::Value(26_500.0));
        assert_eq!(tw.after.value, Cell::Value(0.0));
        assert_eq!(tw.delta, Cell::Value(-26_500.0));
        assert_eq!(tw.ratio, Cell::Value(0.0));
        let conn = find(&c, "gateway → backend", "new connections/s");
        assert_eq!(conn.delta, Cell::Value(3.75 - 440.0));
        assert_eq!(conn.ratio, Cell::Value(3.75 / 440.0));
        let est = find(&c, "gateway → backend", "ESTABLISHED peak");
        assert_eq!(
            (est.before.value.value(), est.after.value.value()),
            (Some(2.0), Some(225.0))
        );
        assert_eq!(est.ratio, Cell::Value(112.5));

        // The driver's pair has no gauge in run 1 (implied peak) and no row in run 2.
        let host_tw = find(&c, "host → gateway", "TIME_WAIT peak");
        assert!(host_tw.before.implied);
        assert_eq!(host_tw.before.value, Cell::Value(60.0));
        assert!(
            matches!(&host_tw.after.value, Cell::Missing(w) if w.contains("no connection from host to gateway in run 2")),
            "{:?}",
            host_tw.after
        );
        assert_eq!(host_tw.delta, Cell::Missing("run 2 has no value".into()));
        let host_conn = find(&c, "host → gateway", "new connections/s");
        assert_eq!(host_conn.after.value, Cell::Value(0.0));
        assert_eq!(host_conn.ratio, Cell::Value(0.0));

        // A destination with no container is keyed by address; run 1 opened nothing to it.
        let dns = find(&c, "gateway → 10.0.0.9:53", "new connections/s");
        assert_eq!(dns.before.value, Cell::Value(0.0));
        assert_eq!(dns.ratio, Cell::Missing("before is 0".into()));
        let dns_tw = find(&c, "gateway → 10.0.0.9:53", "TIME_WAIT peak");
        assert_eq!(dns_tw.ratio, Cell::Missing("run 1 has no value".into()));

        // Containers: peaks over load steps only (the 2.5-core clean-up burst is left out).
        let cpu = find(&c, "gateway", "CPU burst peak");
        assert_eq!(cpu.before.value, Cell::Value(1.75));
        assert_eq!(cpu.after.value, Cell::Value(0.26));
        let thr = find(&c, "gateway", "throttled share");
        assert_eq!(thr.before.value, Cell::Value(0.12));
        let mem = find(&c, "backend", "memory peak");
        assert_eq!(mem.before.value, Cell::Value(50.0));
        assert_eq!(
            mem.after.value,
            Cell::Missing("memory.peak needs kernel 5.19".into())
        );

        // Ops over the whole run, from the merged histogram: exactly the percentiles of
        // every sample of both steps, recorded in one histogram here.
        let mut all = samples(1000, [20, 200, 400]);
        all.add(samples(3000, [100, 600, 900])).unwrap();
        let whole = Latencies::of(&all);
        let p99 = find(&c, "game.state", "p99");
        assert_eq!(p99.before.value, Cell::Value(whole.p99_us as f64));
        // 600 ms: 3 000 of the 4 000 samples sit at 100 and 600 ms, so the 99th percentile
        // is the second step's p99, not a mean of the two steps' p99s (500 ms).
        assert!(whole.p99_us.abs_diff(600_000) <= 600, "{whole:?}");
        let mut after = samples(1000, [10, 200, 250]);
        after.add(samples(3000, [20, 200, 260])).unwrap();
        assert_eq!(
            p99.after.value,
            Cell::Value(Latencies::of(&after).p99_us as f64)
        );
        assert_eq!(
            find(&c, "game.state", "p50").before.value,
            Cell::Value(whole.p50_us as f64)
        );
        assert_eq!(
            find(&c, "game.state", "max").before.value,
            Cell::Value(whole.max_us as f64)
        );
        let errs = find(&c, "game.state", "error share");
        assert_eq!(errs.before.value, Cell::Value(0.01));
        assert_eq!(errs.ratio, Cell::Value(0.0));
        // 4000 requests over 10 s + 20 s of steps.
        let rate = find(&c, "game.state", "req/s");
        assert!((rate.before.value.value().unwrap() - 4000.0 / 30.0).abs() < 1e-9);
        let eval = find(&c, "game.evaluate", "p99");
        assert_eq!(
            eval.before.value,
            Cell::Missing("op not run in run 1".into())
        );

        // Totals and findings by kind.
        let churn = find(&c, "run", "findings: churn_cliff");
        assert_eq!(
            (churn.before.value.value(), churn.after.value.value()),
            (Some(1.0), Some(0.0))
        );
        assert_eq!(find(&c, "run", "findings").before.value, Cell::Value(2.0));
        assert_eq!(find(&c, "run", "errors").ratio, Cell::Value(0.0));

        // The rendered table says it the seeds' way, with no empty cell.
        let md = markdown(&c);
        for needle in [
            "| pair gateway → backend | TIME_WAIT peak | 26500 | 0 | -26500 | → 0 |",
            "| container gateway | CPU burst peak (busiest 100 ms) | 1.75 cores (58 % of 3.00) | 0.26 cores (9 % of 3.00) | -1.49 cores | ÷6.73 |",
            "| op game.state | p99 | 600 ms | 200 ms | -400 ms | ÷3.00 |",
            "| run | findings: churn_cliff | 1 | 0 | -1 | → 0 |",
            "| pair gateway → 10.0.0.9:53 | new connections/s | 0.0 | 0.5 | +0.5 | n/a (before is 0) |",
            "| pair host → gateway | TIME_WAIT peak | ≈ 60 (implied) | n/a (no connection from host to gateway in run 2) |",
            "| op game.state | error share (errors / count; expected outcomes apart) | 1.0 % | 0.0 % | -1.0 pp | → 0 |",
            "| pair gateway → backend | ESTABLISHED peak | 2 | 225 | +223 | ×112 |",
            "| pair gateway → backend | churn ratio (new connections per request) | 0.50 | 0.0040 | -0.50 | ÷125 |",
        ] {
            assert!(md.contains(needle), "missing {needle:?} in:\n{md}");
        }
        let lines: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(lines.len(), c.rows.len() + 2);
        for line in lines {
            let cs = cells(line);
            assert_eq!(cs.len(), 6, "{line}");
            assert!(
                cs.iter().all(|c| !c.trim().is_empty()),
                "empty cell in: {line}"
            );
        }
        assert!(
            md.contains("### run 1 (before)\n\n- **churn_cliff** — "),
            "{md}"
        );
        assert!(md.contains("### run 2 (after)\n\nNone."), "{md}");

        // The JSON form keeps raw numbers and units, and flags implied values.
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["rows"][0]["section"], "pair");
        assert_eq!(json["rows"][1]["before"]["value"], 26_500.0);
        assert_eq!(json["rows"][1]["unit"], "count");
        assert!(json["rows"][1]["before"].get("implied").is_none());
        let host = c
            .rows
            .iter()
            .position(|r| std::ptr::eq(r, host_tw))
            .unwrap();
        assert_eq!(json["rows"][host]["before"]["implied"], true);
        let back: Comparison = serde_json::from_value(json).unwrap();
        assert_eq!(back.rows, c.rows);

        let page = html(&c);
        assert!(
            page.contains("<td class=better>-26500<td class=better>→ 0"),
            "{page}"
        );
        assert!(
            !page.contains("<script") && !page.contains("http://") && !page.contains("https://")
        );
        assert!(!page.contains("<td></td>") && !page.contains("<td><td"));
    }

    #[test]
    fn a_run_without_the_probe_says_why_in_every_probe_cell() {
        let mut b = fixed();
        b.run.probe_intervals = 0;
        b.pairs.clear();
        b.containers = vec![container("step 1", "all", 0.0, 0.0, Cell::Value(0.0))];
        b.notes = vec!["Kernel probe: needs root or CAP_BPF".into()];
        let c = compare(&buggy(), &b);
        let why = Cell::Missing("no probe data in run 2: needs root or CAP_BPF".into());
        for r in c
            .rows
            .iter()
            .filter(|r| matches!(r.section, Section::Pair | Section::Container))
        {
            assert_eq!(r.after.value, why, "{} / {}", r.subject, r.metric);
            assert_eq!(r.delta, Cell::Missing("run 2 has no value".into()));
        }
        // The placeholder container of a probe-less report is no container.
        assert!(!c.rows.iter().any(|r| r.subject == "all"));
        assert!(c.notes.iter().any(|n| n.contains("needs root or CAP_BPF")));
        // Reasons with a `|` stay inside their cell.
        let mut b2 = b.clone();
        b2.notes = vec!["Kernel probe: a | b".into()];
        let md = table(&compare(&buggy(), &b2));
        assert!(md.contains("a \\| b"));
        for line in md.lines() {
            assert_eq!(cells(line).len(), 6, "{line}");
        }
    }

    #[test]
    fn sockets_of_unrelated_local_processes_are_left_out() {
        let mut a = buggy();
        // A gauge-only pair: no new connection, not on the request path.
        a.pairs.push(pair(
            "host",
            "127.0.0.1:38495",
            "-",
            0.0,
            Cell::Value(2.0),
            0,
            Cell::Missing("not on the request path".into()),
            0.0,
        ));
        let c = compare(&a, &fixed());
        assert!(
            c.rows
                .iter()
                .all(|r| !r.subject.contains("127.0.0.1:38495")),
            "{:#?}",
            c.rows
        );
        assert!(c.rows.iter().any(|r| r.subject.contains("backend")));
    }

    #[test]
    fn numbers_show_in_their_units() {
        assert_eq!(show(Unit::Share, 0.0007, false), "0.07 %");
        assert_eq!(show(Unit::Share, -0.02, true), "-2.0 pp");
        assert_eq!(show(Unit::Cores, 0.71, false), "0.71 cores");
        assert_eq!(show(Unit::Cores, -1.49, true), "-1.49 cores");
        assert_eq!(show(Unit::Micros, 1500.0, false), "1.5 ms");
        assert_eq!(show(Unit::Count, 0.2, true), "0");
        assert_eq!(show(Unit::Mib, 2.0, true), "+2.0 MiB");
        assert_eq!(show(Unit::Ratio, 0.004, false), "0.0040");
        assert_eq!(show(Unit::Ratio, 0.05, false), "0.050");
        assert_eq!(show_ratio(&Cell::Value(1.0)), "×1.00");
        assert_eq!(show_ratio(&Cell::Value(0.9995)), "×1.00");
        assert_eq!(show_ratio(&Cell::Value(0.99)), "÷1.01");
        assert_eq!(show_ratio(&Cell::Value(0.0001)), "÷10000");
        assert_eq!(show_ratio(&Cell::Missing("both 0".into())), "n/a (both 0)");
    }
}
