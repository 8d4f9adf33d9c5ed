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

mod render;
mod rows;
#[cfg(test)]
mod tests;
mod waits;

pub use render::{before_after, document, gate_lines, html, markdown, table, write_comparison};
use rows::*;

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
    /// An op in one phase of the plan, matched by the phase's name.
    Phase,
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
    /// Both runs' per-container wait figures, what the container gates are checked on.
    #[serde(skip)]
    pub containers: [Vec<(String, crate::gate::ContainerFigures)>; 2],
    /// Both runs' run-queue delay per container and probe interval (seconds, ms/s), for the
    /// overlaid chart (each run's own JSON report has them).
    #[serde(skip)]
    pub runq: [RunqSeries; 2],
}

/// Per container, its run-queue delay per probe interval: (seconds since the run's start,
/// ms per second).
pub type RunqSeries = Vec<(String, Vec<(f64, f64)>)>;

/// The comparison JSON's schema version: bumped whenever a field changes meaning or goes.
pub const SCHEMA_VERSION: u32 = 1;

/// One `--fail-on` gate checked on one op.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GateVerdict {
    /// The gate as written (`p99 +10%`).
    pub gate: String,
    /// The op (or, for a wait metric, the container) it was checked on.
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

/// Checks `gates` on both runs' whole-run totals per op (and, for the wait metrics, per
/// container) and keeps the verdicts in `c`; returns whether every gate passed.
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
    let [ca, cb] = &c.containers;
    let containers: Vec<_> = union_in_order(
        ca.iter().map(|(n, _)| n.as_str()),
        cb.iter().map(|(n, _)| n.as_str()),
    )
    .into_iter()
    .map(|name| {
        let f = |cs: &[(String, crate::gate::ContainerFigures)]| {
            cs.iter().find(|(n, _)| *n == name).map(|(_, f)| f.clone())
        };
        (name.clone(), f(ca), f(cb))
    })
    .collect();
    c.gates = crate::gate::check(gates, &ops)
        .into_iter()
        .chain(crate::gate::check_containers(gates, &containers))
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

/// Compares two stored runs, `before` and `after`: each one's report built, then compared.
pub fn runs(before: &herd_model::RunData, after: &herd_model::RunData) -> Comparison {
    compare(&Report::build(before), &Report::build(after))
}

/// Compares run `a` (before) with run `b` (after).
pub fn compare(a: &Report, b: &Report) -> Comparison {
    let ids = [a.run.id, b.run.id];
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    pair_rows(a, b, &mut rows, &mut notes);
    waits::retransmit_rows(a, b, &mut rows);
    container_rows(a, b, &mut rows);
    waits::container_wait_rows(a, b, &mut rows);
    op_rows(a, b, &mut rows);
    step_rows(a, b, &mut rows);

    // Run totals.
    let count = |v: u64| Side::of(Cell::Value(v as f64));
    let totals = [
        // Same load, more requests served: the system kept up better.
        ("requests", Better::Higher, [a.run.requests, b.run.requests]),
        // Expected outcomes are part of normal play: more of them with more play is no
        // regression, so they are shown but never painted.
        (
            "expected outcomes",
            Better::Neither,
            [a.run.split.expected, b.run.split.expected],
        ),
        (
            "errors (neither ok nor expected)",
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
        containers: [waits::container_figures(a), waits::container_figures(b)],
        runq: [waits::runq_series(a), waits::runq_series(b)],
    }
}
