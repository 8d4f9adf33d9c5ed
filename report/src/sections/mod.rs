//! The run report's sections, built once as a [`Document`] from a [`Report`]: the header,
//! findings, the timeline's charts, objectives, the per-phase × op table, the route catalog,
//! open-model phases, streams and groups, the per-phase × container table, the pairs and the
//! notes. Markdown and HTML render it; every number is formatted here, in one place.

use crate::units::latency;
use herd_model::PhaseKind;

mod slow;
mod timeline;
mod waits;

pub(crate) use timeline::*;
#[cfg(test)]
pub(crate) use waits::runq_wait;

use crate::{
    chart::{Band, Chart, Series, Stroke},
    doc::{Block, Column, Document, Table, Text, Value, ValueKind},
    model::play::{self, counts},
    model::{Cell, LatencyCell, Report, TimelineContainer, TimelinePoint},
    units,
};

/// The run report in Markdown.
pub fn markdown(r: &Report) -> String {
    crate::markdown::document(&document(r))
}

/// The run report's HTML page.
pub fn html(r: &Report) -> String {
    crate::html::document(&document(r))
}

/// A measured number with `digits` decimals, or why there is none.
pub(crate) fn num(c: &Cell, digits: usize) -> Value {
    match c {
        Cell::Value(v) => Value::plain(format!("{v:.digits$}")),
        Cell::Missing(why) => Value::missing(why.clone()),
    }
}

/// A measured number with its unit after it (`12.5 ms`, `48.0 MiB`), or why there is none.
fn with_unit(c: &Cell, digits: usize, unit: &str) -> Value {
    match c {
        Cell::Value(v) => Value::plain(format!("{v:.digits$} {unit}")),
        Cell::Missing(why) => Value::missing(why.clone()),
    }
}

/// A latency in µs, or why there is none.
fn latency_cell(c: &Cell) -> Value {
    match c {
        Cell::Value(v) => Value::plain(latency(*v as u64)),
        Cell::Missing(why) => Value::missing(why.clone()),
    }
}

/// A log2 bucket's upper bound in `unit_us` µs as a duration (`≤ 1.05s`), or why there is
/// none: a pair seen only in the gauges opened no connection in the run, so it has no
/// connect latency or lifetime.
fn le_of(connects: u64, v: u64, unit_us: u64) -> Value {
    if connects == 0 {
        Value::missing("no new connections")
    } else {
        Value::plain(units::bound(v, unit_us))
    }
}

/// A measured upper bound in µs (`≤ 2.05ms`), or why it is missing.
fn le_cell(c: &Cell) -> Value {
    match c {
        Cell::Value(v) => Value::plain(units::bound(*v as u64, 1)),
        Cell::Missing(why) => Value::missing(why.clone()),
    }
}

/// A ratio with significant digits (`0.0046`), or why there is none.
fn ratio_cell(c: &Cell) -> Value {
    match c {
        Cell::Value(v) => Value::plain(units::ratio(*v)),
        Cell::Missing(why) => Value::missing(why.clone()),
    }
}

/// CPU in cores with the share of the quota beside it (`0.71 cores (142 % of 0.50)`).
fn cores_cell(c: &Cell, quota: &Cell) -> Value {
    match c {
        Cell::Value(v) => Value::plain(units::cores(*v, quota.value())),
        Cell::Missing(why) => Value::missing(why.clone()),
    }
}

/// Two cells as one, `a / b`: missing when either is.
fn pair_of(a: Value, b: Value) -> Value {
    match (&a.kind, &b.kind) {
        (ValueKind::Missing(why), _) | (_, ValueKind::Missing(why)) => Value::missing(why.clone()),
        _ => Value::plain(format!("{} / {}", a.text, b.text)),
    }
}

/// The whole run report.
pub fn document(r: &Report) -> Document {
    let mut b = Vec::new();
    b.push(Block::Para(
        Text::plain("Scenario ")
            .code(&r.run.scenario)
            .then(", status ")
            .strong(&r.run.status)
            .then(format!(
                ", {:.0} s, {} requests: {} ok, {} expected, {} errors; {} probe intervals.",
                r.run.duration_s,
                r.run.requests,
                r.run.split.ok,
                r.run.split.expected,
                r.run.split.errors,
                r.run.probe_intervals
            )),
    ));
    if let Some(seeding) = &r.run.seeding {
        b.push(Block::Para(Text::plain(seeding.sentence())));
    }
    findings(&mut b, r);
    timeline(&mut b, r);
    objectives(&mut b, r);
    ops(&mut b, r);
    slow::slow(&mut b, r);
    catalog(&mut b, r);
    open_model(&mut b, r);
    streams(&mut b, r);
    groups(&mut b, r);
    containers(&mut b, r);
    waits::tables(&mut b, r);
    pairs(&mut b, r);
    if !r.notes.is_empty() {
        b.push(Block::Heading(2, "Notes".into()));
        b.push(Block::List(r.notes.iter().map(Text::plain).collect()));
    }
    Document {
        title: format!("herd run {} — {}", r.run.id, r.run.name),
        blocks: b,
    }
}

fn findings(b: &mut Vec<Block>, r: &Report) {
    b.push(Block::Heading(2, "Findings".into()));
    if r.findings.is_empty() {
        b.push(Block::Para(Text::plain(
            "None: no churn cliff, no hidden throttling, no saturated driver, no warm-up.",
        )));
    }
    for f in &r.findings {
        b.push(Block::Finding {
            kind: f.kind.clone(),
            title: f.title.clone(),
            detail: f.detail.clone(),
            evidence: f.evidence.clone(),
        });
    }
}

fn objectives(b: &mut Vec<Block>, r: &Report) {
    if r.slo.is_empty() {
        return;
    }
    b.push(Block::Heading(2, "Objectives".into()));
    let mut t = Table::new(vec![
        Column::left("step"),
        Column::left("op"),
        Column::left("objective"),
        Column::right("measured"),
        Column::right("errors"),
        Column::left("result"),
    ]);
    for s in &r.slo {
        let measured = if s.objective.starts_with("errors") {
            format!("{:.2} %", s.measured * 100.0)
        } else {
            latency(s.measured as u64)
        };
        t.row(vec![
            s.phase.clone().into(),
            s.op.clone().into(),
            Value::code(&s.objective),
            measured.into(),
            format!("{:.2} %", s.error_share * 100.0).into(),
            if s.pass {
                Value::plain("pass")
            } else {
                Value::marked("FAIL", ValueKind::Fail)
            },
        ]);
    }
    b.push(Block::Table(t));
}

/// Outcomes as `ok 398, timeout 2`, the expected ones marked: `not_your_turn 5 (expected)`.
fn outcome_list(
    outcomes: &std::collections::BTreeMap<herd_model::Outcome, u64>,
    expected: &[herd_model::Outcome],
) -> String {
    outcomes
        .iter()
        .map(|(k, v)| {
            if expected.contains(k) {
                format!("{k} {v} (expected)")
            } else {
                format!("{k} {v}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn ops(b: &mut Vec<Block>, r: &Report) {
    b.push(Block::Heading(2, "Per step and op".into()));
    let mut t = Table::new(vec![
        Column::left("phase"),
        Column::left("kind"),
        Column::right("load"),
        Column::left("op"),
        Column::right("count"),
        Column::right("req/s"),
        Column::right("p50"),
        Column::right("p90"),
        Column::right("p99"),
        Column::right("p99.9"),
        Column::right("max"),
        Column::right("errors"),
        Column::left("outcomes"),
    ]);
    for row in r.ops.iter().filter(|o| o.kind != PhaseKind::Catalog) {
        let l = &row.latency;
        t.row(vec![
            row.phase.clone().into(),
            row.kind.to_string().into(),
            row.load.clone().into(),
            row.op.clone().into(),
            row.count.to_string().into(),
            format!("{:.1}", row.rate).into(),
            latency(l.p50_us).into(),
            latency(l.p90_us).into(),
            latency(l.p99_us).into(),
            latency(l.p999_us).into(),
            latency(l.max_us).into(),
            share(row.split.errors, row.count).into(),
            outcome_list(&row.outcomes, r.expected_of(&row.op)).into(),
        ]);
    }
    b.push(Block::Table(t));
    totals(b, r);
}

/// `3 (0.75 %)` of `of`, with significant digits for small shares.
fn share(n: u64, of: u64) -> String {
    if n == 0 {
        return "0".into();
    }
    let pct = 100.0 * n as f64 / of.max(1) as f64;
    format!("{n} ({})", crate::units::percent(pct))
}

fn totals(b: &mut Vec<Block>, r: &Report) {
    if r.totals.is_empty() {
        return;
    }
    b.push(Block::Heading(2, "Per op over the whole run".into()));
    b.push(Block::Para(Text::plain(
        "Every phase the op ran in, from the merged histogram of all its requests (the \
         hammer's apart): percentiles of the run, not means of the phases'.",
    )));
    let mut t = Table::new(vec![
        Column::left("op"),
        Column::right("count"),
        Column::right("req/s"),
        Column::right("ok"),
        Column::right("expected"),
        Column::right("errors"),
        Column::right("mean"),
        Column::right("p50"),
        Column::right("p90"),
        Column::right("p99"),
        Column::right("p99.9"),
        Column::right("max"),
    ]);
    for o in &r.totals {
        let lat = |f: fn(&crate::model::Latencies) -> u64| match &o.latency {
            LatencyCell::Value(l) => Value::plain(latency(f(l))),
            LatencyCell::Missing(why) => Value::missing(why.clone()),
        };
        t.row(vec![
            o.op.clone().into(),
            o.count.to_string().into(),
            format!("{:.1}", o.rate).into(),
            o.split.ok.to_string().into(),
            o.split.expected.to_string().into(),
            share(o.split.errors, o.count).into(),
            lat(|l| l.mean_us.round() as u64),
            lat(|l| l.p50_us),
            lat(|l| l.p90_us),
            lat(|l| l.p99_us),
            lat(|l| l.p999_us),
            lat(|l| l.max_us),
        ]);
    }
    b.push(Block::Table(t));
}

fn catalog(b: &mut Vec<Block>, r: &Report) {
    let routes: Vec<_> = r
        .ops
        .iter()
        .filter(|o| o.kind == PhaseKind::Catalog)
        .collect();
    if routes.is_empty() {
        return;
    }
    b.push(Block::Heading(2, "Route catalog".into()));
    b.push(Block::Para(Text::plain(format!(
        "{} route{}, one after another, each measured alone.",
        routes.len(),
        if routes.len() == 1 { "" } else { "s" }
    ))));
    let mut t = Table::new(vec![
        Column::left("route"),
        Column::right("concurrency"),
        Column::right("count"),
        Column::right("req/s"),
        Column::right("p50"),
        Column::right("p99"),
        Column::right("max"),
        Column::left("outcomes"),
    ]);
    for row in routes {
        t.row(vec![
            row.op.clone().into(),
            row.players.to_string().into(),
            row.count.to_string().into(),
            format!("{:.1}", row.rate).into(),
            latency(row.latency.p50_us).into(),
            latency(row.latency.p99_us).into(),
            latency(row.latency.max_us).into(),
            counts(&row.outcomes).into(),
        ]);
    }
    b.push(Block::Table(t));
}

fn open_model(b: &mut Vec<Block>, r: &Report) {
    if r.open.is_empty() {
        return;
    }
    b.push(Block::Heading(2, "Open-model phases".into()));
    let mut t = Table::new(vec![
        Column::left("phase"),
        Column::right("target req/s"),
        Column::right("duration"),
        Column::right("scheduled"),
        Column::right("sent"),
        Column::right("sent/s"),
        Column::right("late starts"),
        Column::right("dropped starts"),
        Column::right("in-flight bound"),
        Column::right("in-flight peak"),
    ]);
    for p in &r.open {
        t.row(vec![
            p.phase.clone().into(),
            p.rate.to_string().into(),
            format!("{:.1} s", p.duration_s).into(),
            p.scheduled.to_string().into(),
            p.sent.to_string().into(),
            format!("{:.1}", p.sent_per_s).into(),
            format!("{} (> {})", p.late_starts, latency(p.late_after_us)).into(),
            p.dropped_starts.to_string().into(),
            p.max_in_flight.to_string().into(),
            p.peak_in_flight.to_string().into(),
        ]);
    }
    b.push(Block::Table(t));
    b.push(Block::Para(Text::plain(play::OPEN_NOTE)));
}

fn streams(b: &mut Vec<Block>, r: &Report) {
    if r.streams.is_empty() {
        return;
    }
    b.push(Block::Heading(2, "Streams and long polls per phase".into()));
    let mut t = Table::new(vec![
        Column::left("phase"),
        Column::left("op"),
        Column::left("kind"),
        Column::right("events"),
        Column::right("events/s"),
        Column::left("by type"),
        Column::right("opened"),
        Column::right("reconnects"),
        Column::left("errors"),
        Column::right("first event p50"),
        Column::right("first event p99"),
    ]);
    for s in &r.streams {
        t.row(vec![
            s.phase.clone().into(),
            s.op.clone().into(),
            s.stream_kind.clone().into(),
            s.events.to_string().into(),
            format!("{:.1}", s.events_per_s).into(),
            counts(&s.by_type).into(),
            // The server saw the openings the stop cut short: said beside the opened ones.
            if s.cut_by_stop > 0 {
                format!("{} (+{} cut by the stop)", s.opened, s.cut_by_stop).into()
            } else {
                s.opened.to_string().into()
            },
            s.reconnects.to_string().into(),
            counts(&s.errors).into(),
            latency_cell(&s.first_event_p50_us),
            latency_cell(&s.first_event_p99_us),
        ]);
    }
    b.push(Block::Table(t));
}

fn groups(b: &mut Vec<Block>, r: &Report) {
    if r.groups.is_empty() {
        return;
    }
    b.push(Block::Heading(2, "Groups per phase".into()));
    let mut t = Table::new(vec![
        Column::left("phase"),
        Column::right("formed"),
        Column::right("finished"),
        Column::right("failed"),
        Column::right("abandoned"),
    ]);
    for g in &r.groups {
        t.row(vec![
            g.phase.clone().into(),
            g.formed.to_string().into(),
            g.finished.to_string().into(),
            g.failed.to_string().into(),
            g.abandoned.to_string().into(),
        ]);
    }
    b.push(Block::Table(t));
}

fn containers(b: &mut Vec<Block>, r: &Report) {
    b.push(Block::Heading(2, "Per step and container".into()));
    let mut t = Table::new(vec![
        Column::left("step"),
        Column::left("container"),
        Column::right("CPU burst (100 ms)"),
        Column::right("CPU sustained (30 s)"),
        Column::right("CPU avg"),
        Column::right("quota"),
        Column::right("throttled periods"),
        Column::right("throttled"),
        Column::right("mem peak (usage)"),
        Column::right("working set peak"),
        Column::right("connects/s"),
        Column::right("TIME_WAIT entries/s"),
        Column::right("TIME_WAIT peak"),
        Column::right("ESTABLISHED peak"),
        Column::right("port headroom min"),
        Column::right("listen overflows"),
        Column::right("connect errors"),
    ]);
    for c in &r.containers {
        let share = match &c.throttled_share {
            Cell::Value(v) => Value::plain(units::percent(v * 100.0)),
            Cell::Missing(why) => Value::missing(why.clone()),
        };
        t.row(vec![
            c.phase.clone().into(),
            container_name(c).into(),
            cores_cell(&c.cpu_burst, &c.cpu_cap),
            cores_cell(&c.cpu_sustained, &c.cpu_cap),
            cores_cell(&c.cpu_avg, &c.cpu_cap),
            with_unit(&c.cpu_cap, 2, "cores"),
            share,
            with_unit(&c.throttled_ms, 1, "ms"),
            with_unit(&c.mem_peak_mib, 1, "MiB"),
            with_unit(&c.working_set_mib, 1, "MiB"),
            num(&c.connects_per_s, 1),
            num(&c.time_wait_per_s, 1),
            num(&c.time_wait_peak, 0),
            num(&c.established_peak, 0),
            num(&c.headroom_min, 0),
            num(&c.listen_overflows, 0),
            num(&c.connect_errors, 0),
        ]);
    }
    b.push(Block::Table(t));
}

/// The container's name, with when it appeared or went away during the run (`worker (from
/// t = 3.2 s, ended t = 3.9 s)`).
fn container_name(c: &crate::model::ContainerRow) -> String {
    match (c.started_s, c.ended_s) {
        (None, None) => c.container.clone(),
        (Some(a), None) => format!("{} (from t = {a:.1} s)", c.container),
        (None, Some(z)) => format!("{} (ended t = {z:.1} s)", c.container),
        (Some(a), Some(z)) => format!("{} (from t = {a:.1} s, ended t = {z:.1} s)", c.container),
    }
}

fn pairs(b: &mut Vec<Block>, r: &Report) {
    b.push(Block::Heading(
        2,
        "Connections per source → destination".into(),
    ));
    if r.pairs.is_empty() {
        b.push(Block::Para(Text::plain(format!(
            "No outbound connections were recorded{}.",
            if r.run.probe_intervals == 0 {
                " (the kernel probe did not run)"
            } else {
                ""
            }
        ))));
        return;
    }
    let mut t = Table::new(vec![
        Column::left("source"),
        Column::left("destination"),
        Column::right("new conns"),
        Column::right("new conns/s"),
        Column::right("churn ratio"),
        Column::right("ESTABLISHED peak"),
        Column::right("TIME_WAIT peak"),
        Column::right("TIME_WAIT entries"),
        Column::right("port headroom min"),
        Column::right("connect p50 / p99"),
        Column::right("srtt p50 / p99"),
        Column::right("lifetime p50"),
    ]);
    for p in &r.pairs {
        let to = if p.remote_container == "-" {
            p.remote.clone()
        } else {
            format!("{} ({})", p.remote_container, p.remote)
        };
        t.row(vec![
            p.container.clone().into(),
            to.into(),
            p.connects.to_string().into(),
            format!("{:.1}", p.connects_per_s).into(),
            ratio_cell(&p.churn_ratio),
            num(&p.established_peak, 0),
            num(&p.time_wait_peak, 0),
            p.time_wait_entries.to_string().into(),
            num(&p.headroom_min, 0),
            pair_of(
                le_of(p.connects, p.connect_latency_us.p50_le, 1),
                le_of(p.connects, p.connect_latency_us.p99_le, 1),
            ),
            pair_of(latency_cell(&p.srtt_p50_us), le_cell(&p.srtt_p99_le_us)),
            le_of(p.connects, p.lifetime_ms.p50_le, 1_000),
        ]);
    }
    b.push(Block::Table(t));
}
