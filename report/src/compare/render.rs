//! The comparison drawn: its cells in units, the before/after table, the overlaid charts,
//! and the Markdown, HTML and JSON files.

use super::*;

/// `v` in `unit`, signed (`+3`, `-26500`) when `signed`.
pub(super) fn show(unit: Unit, v: f64, signed: bool) -> String {
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

pub(super) fn show_side(unit: Unit, s: &Side) -> String {
    match &s.value {
        Cell::Value(v) if s.implied => format!("≈ {} (implied)", show(unit, *v, false)),
        Cell::Value(v) if unit == Unit::Cores => crate::units::cores(*v, s.quota_cores),
        Cell::Value(v) => show(unit, *v, false),
        Cell::Missing(why) => format!("n/a ({why})"),
    }
}

pub(super) fn show_delta(unit: Unit, d: &Cell) -> String {
    match d {
        Cell::Value(v) => show(unit, *v, true),
        Cell::Missing(why) => format!("n/a ({why})"),
    }
}

pub(super) fn show_ratio(r: &Cell) -> String {
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

pub(super) fn what(r: &Row) -> String {
    match r.section {
        Section::Pair => format!("pair {}", r.subject),
        Section::Container => format!("container {}", r.subject),
        Section::Op => format!("op {}", r.subject),
        Section::Phase => format!(
            "op {} in {}",
            r.subject,
            r.phase.as_deref().unwrap_or("a phase")
        ),
        Section::Run => r.subject.clone(),
    }
}

/// Whether the change is an improvement (Some(true)), a regression (Some(false)), or neither.
pub(super) fn verdict(r: &Row) -> Option<bool> {
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

pub(super) fn run_line(r: &RunSummary) -> Text {
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
pub(super) fn shown(value: &Cell, text: String, verdict: Option<bool>) -> Value {
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
                Section::Phase => "Ops per phase",
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
pub(super) fn overlay(
    c: &Comparison,
    title: &str,
    unit: &str,
    series: &dyn Fn(&[TimelinePoint]) -> Vec<Series>,
) -> Chart {
    overlay_runs(c, title, unit, &|i| series(&c.timelines[i]))
}

/// [`overlay`] of series that are not the timeline's: `series(0)` the run before's,
/// `series(1)` the run after's.
pub(super) fn overlay_runs(
    c: &Comparison,
    title: &str,
    unit: &str,
    series: &dyn Fn(usize) -> Vec<Series>,
) -> Chart {
    let [ta, tb] = &c.timelines;
    let mut lines = Vec::new();
    for (i, id, stroke) in [
        (0, c.before.id, Stroke::Before),
        (1, c.after.id, Stroke::Solid),
    ] {
        for mut s in series(i) {
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

pub(super) fn lines_empty(c: &Chart) -> bool {
    c.series.iter().all(|s| s.points.is_empty())
}

/// Both runs' timelines overlaid: req/s, p99 per op, per container connects/s, CPU and the
/// TIME_WAIT gauge.
pub(super) fn charts(c: &Comparison) -> Vec<Block> {
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
        out.push(Block::Chart(super::waits::runq_overlay(c, &containers)));
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
    crate::write_file(&md, markdown(c))?;
    let page = base.with_extension("html");
    crate::write_file(&page, html(c))?;
    let json = base.with_extension("json");
    crate::write_file(&json, serde_json::to_string_pretty(c)? + "\n")?;
    Ok(vec![md, page, json])
}
