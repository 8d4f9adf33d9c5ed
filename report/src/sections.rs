//! The run report's sections, built once as a [`Document`] from a [`Report`]: the header,
//! findings, the timeline's charts, objectives, the per-phase × op table, the route catalog,
//! open-model phases, streams and groups, the per-phase × container table, the pairs and the
//! notes. Markdown and HTML render it; every number is formatted here, in one place.

use herd_driver::{scenario::PhaseKind, units::latency};

use crate::{
    chart::Chart,
    doc::{Block, Column, Document, Table, Text, Value, ValueKind},
    model::{Cell, LatencyCell, Report, TimelineContainer, TimelinePoint},
    play::{self, counts},
};

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

/// A log2 bucket's upper bound (`≤ 128`), or `> 2^25` for the open last bucket.
fn le(v: u64) -> String {
    if v == u64::MAX {
        "> 2^25".into()
    } else {
        format!("≤ {v}")
    }
}

/// A log2 bucket's upper bound, or why there is none: a pair seen only in the gauges opened
/// no connection in the run, so it has no connect latency or lifetime.
fn le_of(connects: u64, v: u64) -> Value {
    if connects == 0 {
        Value::missing("no new connections")
    } else {
        Value::plain(le(v))
    }
}

/// A measured upper bound (`≤ v`), or why it is missing.
fn le_cell(c: &Cell) -> Value {
    match c {
        Cell::Value(v) => Value::plain(le(*v as u64)),
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
    catalog(&mut b, r);
    open_model(&mut b, r);
    streams(&mut b, r);
    groups(&mut b, r);
    containers(&mut b, r);
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

/// Where each phase starts: the start of its first interval, named.
fn phase_marks(t: &[TimelinePoint]) -> Vec<(f64, String)> {
    let mut out = Vec::new();
    let mut last = None;
    for p in t {
        if p.phase_index != last {
            if let Some(k) = p.phase_index {
                let name = p
                    .phase
                    .clone()
                    .unwrap_or_else(|| format!("phase {}", k + 1));
                out.push((p.start_s, name));
            }
            last = p.phase_index;
        }
    }
    out
}

fn timeline(b: &mut Vec<Block>, r: &Report) {
    let marks = phase_marks(&r.timeline);
    // A point at each interval's middle: a rate belongs to the whole interval.
    let series = |f: &dyn Fn(&TimelinePoint) -> Option<f64>| -> Vec<(f64, f64)> {
        r.timeline
            .iter()
            .filter_map(|p| Some((p.start_s + p.duration_s / 2.0, f(p)?)))
            .collect()
    };
    let chart = |title: &str, unit: &str, series: Vec<(String, Vec<(f64, f64)>)>| {
        Block::Chart(Chart {
            title: title.into(),
            unit: unit.into(),
            series,
            marks: marks.clone(),
        })
    };
    let mut ops: Vec<&str> = r
        .timeline
        .iter()
        .flat_map(|p| p.ops.iter().map(|o| o.op.as_str()))
        .collect();
    ops.dedup();
    let mut seen = std::collections::BTreeSet::new();
    ops.retain(|o| seen.insert(*o));
    let per_op = |f: &dyn Fn(&crate::model::TimelineOp) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
        ops.iter()
            .map(|op| {
                (
                    (*op).to_owned(),
                    series(&|p| p.ops.iter().find(|o| o.op == *op).map(f)),
                )
            })
            .collect()
    };
    b.push(Block::Heading(2, "Timeline".into()));
    b.push(chart(
        "Requests per second, by op",
        "req/s",
        per_op(&|o| o.req_per_s),
    ));
    b.push(chart(
        "p99 latency, by op",
        "ms",
        per_op(&|o| o.p99_us as f64 / 1e3),
    ));
    b.push(chart(
        "Errors and expected outcomes per interval",
        "count",
        vec![
            ("errors".into(), series(&|p| Some(p.split.errors as f64))),
            (
                "expected".into(),
                series(&|p| Some(p.split.expected as f64)),
            ),
        ],
    ));
    if !r.streams.is_empty() {
        b.push(chart(
            "Stream and long-poll events per second",
            "events/s",
            vec![(
                "all stream ops".into(),
                series(&|p| Some(p.stream_events_per_s)),
            )],
        ));
    }
    if !r.open.is_empty() {
        b.push(chart(
            "Open-model starts behind schedule, per interval",
            "count",
            vec![
                (
                    "late starts".into(),
                    series(&|p| Some(p.late_starts as f64)),
                ),
                (
                    "dropped starts".into(),
                    series(&|p| Some(p.dropped_starts as f64)),
                ),
            ],
        ));
    }
    let mut names: Vec<String> = r
        .timeline
        .iter()
        .flat_map(|p| p.containers.iter().map(|c| c.container.clone()))
        .collect();
    names.sort();
    names.dedup();
    type Of = fn(&TimelineContainer) -> Option<f64>;
    let by_container: [(&str, &str, Of); 5] = [
        (
            "New TCP connections per second, by container",
            "connects/s",
            |c| Some(c.connects_per_s),
        ),
        ("TIME_WAIT sockets, by container", "sockets", |c| {
            c.time_wait.map(|v| v as f64)
        }),
        ("CPU, by container", "cores", |c| c.cpu_cores),
        ("CPU quota, by container", "cores", |c| c.cpu_quota_cores),
        (
            "Share of CFS periods throttled, by container",
            "share",
            |c| c.throttled_share,
        ),
    ];
    for (title, unit, f) in by_container {
        let s: Vec<(String, Vec<(f64, f64)>)> = names
            .iter()
            .map(|n| {
                (
                    n.clone(),
                    series(&|p| p.containers.iter().find(|c| c.container == *n).and_then(f)),
                )
            })
            .filter(|(_, pts)| !pts.is_empty())
            .collect();
        if !s.is_empty() {
            b.push(chart(title, unit, s));
        }
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
    outcomes: &std::collections::BTreeMap<herd_driver::Outcome, u64>,
    expected: &[herd_driver::Outcome],
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
    b.push(Block::Heading(2, "Streams and long polls per step".into()));
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
            s.opened.to_string().into(),
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
    b.push(Block::Heading(2, "Groups per step".into()));
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
        Column::right("cap"),
        Column::right("throttled periods"),
        Column::right("throttled"),
        Column::right("mem peak"),
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
            Cell::Value(v) => Value::plain(format!("{:.1} %", v * 100.0)),
            Cell::Missing(why) => Value::missing(why.clone()),
        };
        t.row(vec![
            c.phase.clone().into(),
            c.container.clone().into(),
            num(&c.cpu_burst, 2),
            num(&c.cpu_sustained, 2),
            num(&c.cpu_avg, 2),
            num(&c.cpu_cap, 2),
            share,
            with_unit(&c.throttled_ms, 1, "ms"),
            with_unit(&c.mem_peak_mib, 1, "MiB"),
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
        Column::right("connect p50 / p99 (µs)"),
        Column::right("srtt p50 / p99 (µs)"),
        Column::right("lifetime p50 (ms)"),
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
            num(&p.churn_ratio, 2),
            num(&p.established_peak, 0),
            num(&p.time_wait_peak, 0),
            p.time_wait_entries.to_string().into(),
            num(&p.headroom_min, 0),
            pair_of(
                le_of(p.connects, p.connect_latency_us.p50_le),
                le_of(p.connects, p.connect_latency_us.p99_le),
            ),
            pair_of(num(&p.srtt_p50_us, 0), le_cell(&p.srtt_p99_le_us)),
            le_of(p.connects, p.lifetime_ms.p50_le),
        ]);
    }
    b.push(Block::Table(t));
}
