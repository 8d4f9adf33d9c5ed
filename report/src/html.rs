//! The HTML report: one self-contained page (inline CSS and SVG, no scripts, no network), with
//! the Markdown report's tables and a timeline chart per signal, step boundaries marked.

use std::fmt::Write as _;

use herd_driver::scenario::PhaseKind;

use super::{
    model::{Cell, Report, TimelinePoint},
    play::counts,
};

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A log2 bucket's upper bound (the column header says ≤), or why there is none.
fn le_of(connects: u64, v: u64) -> String {
    match (connects, v) {
        (0, _) => "n/a (no new connections)".into(),
        (_, u64::MAX) => "> 2^25".into(),
        (_, v) => v.to_string(),
    }
}

fn cell(c: &Cell, digits: usize) -> String {
    match c {
        Cell::Value(v) => format!("{v:.digits$}"),
        Cell::Missing(why) => format!("<span class=na title=\"{}\">n/a</span>", esc(why)),
    }
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// One line chart: `series` are (name, points), x in seconds.
fn chart(
    title: &str,
    unit: &str,
    series: &[(String, Vec<(f64, f64)>)],
    steps: &[(f64, String)],
) -> String {
    let (w, h, left, bottom, top, right) = (760.0, 220.0, 60.0, 30.0, 24.0, 150.0);
    let xs = series.iter().flat_map(|(_, p)| p.iter().map(|(x, _)| *x));
    let xmax = xs.fold(1.0f64, f64::max);
    let ymax = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, y)| *y))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    let px = |x: f64| left + (x / xmax) * (w - left - right);
    let py = |y: f64| top + (1.0 - y / ymax) * (h - top - bottom);
    let mut s = format!(
        "<figure><figcaption>{}</figcaption><svg viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=img aria-label=\"{}\">",
        esc(title),
        esc(title)
    );
    let _ = write!(
        s,
        "<line x1={left} y1={} x2={} y2={} class=axis /><line x1={left} y1={top} x2={left} y2={} class=axis />",
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    for i in 0..=4 {
        let y = ymax * i as f64 / 4.0;
        let _ = write!(
            s,
            "<text x={} y={} class=tick text-anchor=end>{}</text>",
            left - 4.0,
            py(y) + 4.0,
            if ymax >= 100.0 {
                format!("{y:.0}")
            } else {
                format!("{y:.2}")
            }
        );
    }
    let _ = write!(s, "<text x={left} y=14 class=tick>{}</text>", esc(unit));
    let _ = write!(
        s,
        "<text x={} y={} class=tick text-anchor=end>{xmax:.0} s</text>",
        w - right,
        h - 8.0
    );
    for (x, label) in steps {
        let _ = write!(
            s,
            "<line x1={0} y1={top} x2={0} y2={1} class=step /><text x={2} y={3} class=tick>{4}</text>",
            px(*x),
            h - bottom,
            px(*x) + 3.0,
            top + 10.0,
            esc(label)
        );
    }
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = pts
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        let _ = write!(
            s,
            "<polyline fill=none stroke=\"{color}\" stroke-width=1.5 points=\"{}\" />",
            path.join(" ")
        );
        let _ = write!(
            s,
            "<text x={} y={} fill=\"{color}\" class=legend>{}</text>",
            w - right + 8.0,
            top + 14.0 * (i as f64 + 1.0),
            esc(name)
        );
    }
    s.push_str("</svg></figure>");
    s
}

fn step_marks(t: &[TimelinePoint]) -> Vec<(f64, String)> {
    let mut out = Vec::new();
    let mut last = None;
    for p in t {
        if p.phase_index != last {
            if let Some(k) = p.phase_index {
                let name = p.phase.clone().unwrap_or_else(|| format!("step {}", k + 1));
                out.push((p.t_s, name));
            }
            last = p.phase_index;
        }
    }
    out
}

/// Renders the page.
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!doctype html><html lang=en><meta charset=utf-8><title>herd run {} — {}</title><style>\
         body{{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}}\
         table{{border-collapse:collapse;margin:.5em 0 1.5em}}td,th{{border:1px solid #ccc;padding:3px 7px;text-align:right}}\
         td:first-child,th:first-child,td.l{{text-align:left}}th{{background:#f3f3f3}}\
         .na{{color:#999;border-bottom:1px dotted #999}}.finding{{border-left:4px solid #d62728;padding:.3em .8em;margin:.6em 0;background:#fff6f6}}\
         svg .axis{{stroke:#888}}svg .step{{stroke:#bbb;stroke-dasharray:4 3}}svg .tick,svg .legend{{font-size:11px;fill:#555}}\
         figure{{margin:1em 0}}figcaption{{font-weight:600}}</style>",
        r.run.id,
        esc(&r.run.name)
    );
    let _ = write!(
        o,
        "<h1>herd run {} — {}</h1><p>Scenario <code>{}</code>, status <b>{}</b>, {:.0} s, {} requests ({} not ok), {} probe intervals.</p>",
        r.run.id,
        esc(&r.run.name),
        esc(&r.run.scenario),
        esc(&r.run.status),
        r.run.duration_s,
        r.run.requests,
        r.run.errors,
        r.run.probe_intervals
    );
    if let Some(seeding) = &r.run.seeding {
        let _ = write!(o, "<p>{}</p>", esc(&seeding.sentence()));
    }
    o.push_str("<h2>Findings</h2>");
    if r.findings.is_empty() {
        o.push_str(
            "<p>None: no churn cliff, no hidden throttling, no saturated driver, no warm-up.</p>",
        );
    }
    for f in &r.findings {
        let _ = write!(
            o,
            "<div class=finding><b>{}</b> — {}<br>{}",
            esc(&f.kind),
            esc(&f.title),
            esc(&f.detail)
        );
        for e in &f.evidence {
            let _ = write!(o, "<br><small>evidence: {}</small>", esc(e));
        }
        o.push_str("</div>");
    }
    let marks = step_marks(&r.timeline);
    let series = |f: &dyn Fn(&TimelinePoint) -> f64| -> Vec<(f64, f64)> {
        r.timeline.iter().map(|p| (p.t_s, f(p))).collect()
    };
    o.push_str("<h2>Timeline</h2>");
    o.push_str(&chart(
        "Requests per second",
        "req/s",
        &[("all ops".into(), series(&|p| p.req_per_s))],
        &marks,
    ));
    o.push_str(&chart(
        "Worst p99 across ops",
        "ms",
        &[("p99".into(), series(&|p| p.p99_ms))],
        &marks,
    ));
    o.push_str(&chart(
        "Errors (non-ok outcomes) per interval",
        "count",
        &[("errors".into(), series(&|p| p.errors as f64))],
        &marks,
    ));
    if !r.streams.is_empty() {
        o.push_str(&chart(
            "Stream and long-poll events per second",
            "events/s",
            &[("all stream ops".into(), series(&|p| p.stream_events_per_s))],
            &marks,
        ));
    }
    if !r.open.is_empty() {
        o.push_str(&chart(
            "Open-model starts behind schedule, per interval",
            "count",
            &[
                ("late starts".into(), series(&|p| p.late_starts as f64)),
                (
                    "dropped starts".into(),
                    series(&|p| p.dropped_starts as f64),
                ),
            ],
            &marks,
        ));
    }
    let names: Vec<String> = {
        let mut n: Vec<String> = r
            .timeline
            .iter()
            .flat_map(|p| p.containers.keys().cloned())
            .collect();
        n.sort();
        n.dedup();
        n
    };
    for (idx, title, unit) in [
        (
            0,
            "New TCP connections per second, by container",
            "connects/s",
        ),
        (1, "TIME_WAIT entries per second, by container", "entries/s"),
        (2, "CPU, by container", "cores"),
        (3, "Share of CFS periods throttled, by container", "share"),
    ] {
        let s: Vec<(String, Vec<(f64, f64)>)> = names
            .iter()
            .map(|n| {
                (
                    n.clone(),
                    series(&|p| p.containers.get(n).map_or(0.0, |v| v[idx])),
                )
            })
            .collect();
        if !s.is_empty() {
            o.push_str(&chart(title, unit, &s, &marks));
        }
    }
    if !r.slo.is_empty() {
        o.push_str("<h2>Objectives</h2><table><tr><th>step<th>op<th>objective<th>measured<th>errors<th>result");
        for s in &r.slo {
            let measured = if s.objective.starts_with("errors") {
                format!("{:.2} %", s.measured * 100.0)
            } else {
                format!("{:.1} ms", s.measured / 1e3)
            };
            let _ = write!(
                o,
                "<tr><td>{}<td class=l>{}<td class=l><code>{}</code><td>{}<td>{:.2} %<td>{}",
                esc(&s.phase),
                esc(&s.op),
                esc(&s.objective),
                measured,
                s.error_share * 100.0,
                if s.pass {
                    "pass"
                } else {
                    "<b style=color:#d62728>FAIL</b>"
                }
            );
        }
        o.push_str("</table>");
    }
    o.push_str("<h2>Per step and op</h2><table><tr><th>phase<th>kind<th>load<th>op<th>count<th>req/s<th>p50 ms<th>p99 ms<th>max ms<th>outcomes");
    for row in r.ops.iter().filter(|o| o.kind != PhaseKind::Catalog) {
        let outcomes: Vec<String> = row
            .outcomes
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = write!(
            o,
            "<tr><td>{}<td class=l>{}<td>{}<td class=l>{}<td>{}<td>{:.1}<td>{:.1}<td>{:.1}<td>{:.1}<td class=l>{}",
            esc(&row.phase),
            esc(&row.kind.to_string()),
            esc(&row.load),
            esc(&row.op),
            row.count,
            row.rate,
            row.p50_us as f64 / 1e3,
            row.p99_us as f64 / 1e3,
            row.max_us as f64 / 1e3,
            esc(&outcomes.join(", "))
        );
    }
    o.push_str("</table>");
    play(&mut o, r);
    o.push_str("<h2>Per step and container</h2><table><tr><th>step<th>container<th>CPU burst (100 ms)<th>CPU sustained (30 s)<th>CPU avg<th>cap<th>throttled share<th>throttled ms<th>mem peak MiB<th>connects/s<th>TIME_WAIT entries/s<th>TIME_WAIT peak<th>ESTABLISHED peak<th>port headroom min<th>listen overflows<th>connect errors");
    for c in &r.containers {
        let _ = write!(
            o,
            "<tr><td>{}<td class=l>{}<td>{}<td>{}<td>{}<td>{}<td>{}<td>{}<td>{}<td>{}<td>{}<td>{}<td>{}<td>{}<td>{}<td>{}",
            esc(&c.phase),
            esc(&c.container),
            cell(&c.cpu_burst, 2),
            cell(&c.cpu_sustained, 2),
            cell(&c.cpu_avg, 2),
            cell(&c.cpu_cap, 2),
            cell(&c.throttled_share, 3),
            cell(&c.throttled_ms, 1),
            cell(&c.mem_peak_mib, 1),
            cell(&c.connects_per_s, 1),
            cell(&c.time_wait_per_s, 1),
            cell(&c.time_wait_peak, 0),
            cell(&c.established_peak, 0),
            cell(&c.headroom_min, 0),
            cell(&c.listen_overflows, 0),
            cell(&c.connect_errors, 0)
        );
    }
    o.push_str("</table><h2>Connections per source → destination</h2><table><tr><th>source<th>destination<th>new conns<th>new conns/s<th>churn ratio<th>ESTABLISHED peak<th>TIME_WAIT peak<th>TIME_WAIT entries<th>port headroom min<th>connect p50 / p99 µs (≤)<th>srtt p50 / p99 µs (≤)<th>lifetime p50 ms (≤)");
    for p in &r.pairs {
        let to = if p.remote_container == "-" {
            p.remote.clone()
        } else {
            format!("{} ({})", p.remote_container, p.remote)
        };
        let _ = write!(
            o,
            "<tr><td>{}<td class=l>{}<td>{}<td>{:.1}<td>{}<td>{}<td>{}<td>{}<td>{}<td>{} / {}<td>{} / {}<td>{}",
            esc(&p.container),
            esc(&to),
            p.connects,
            p.connects_per_s,
            cell(&p.churn_ratio, 2),
            cell(&p.established_peak, 0),
            cell(&p.time_wait_peak, 0),
            p.time_wait_entries,
            cell(&p.headroom_min, 0),
            le_of(p.connects, p.connect_latency_us.p50_le),
            le_of(p.connects, p.connect_latency_us.p99_le),
            cell(&p.srtt_p50_us, 0),
            cell(&p.srtt_p99_le_us, 0),
            le_of(p.connects, p.lifetime_ms.p50_le)
        );
    }
    o.push_str("</table>");
    if !r.notes.is_empty() {
        o.push_str("<h2>Notes</h2><ul>");
        for n in &r.notes {
            let _ = write!(o, "<li>{}", esc(n));
        }
        o.push_str("</ul>");
    }
    o.push_str("</html>\n");
    o
}

/// A latency in µs as ms, or why there is none.
fn ms_cell(c: &Cell) -> String {
    match c {
        Cell::Value(v) => format!("{:.1}", v / 1e3),
        Cell::Missing(_) => cell(c, 0),
    }
}

/// The route catalog, open-model phases, streams and groups, each only when it has rows.
fn play(o: &mut String, r: &Report) {
    let routes: Vec<_> = r
        .ops
        .iter()
        .filter(|o| o.kind == PhaseKind::Catalog)
        .collect();
    if !routes.is_empty() {
        let _ = write!(
            o,
            "<h2>Route catalog</h2><p>{} routes, one after another, each measured alone.</p><table><tr><th>route<th>concurrency<th>count<th>req/s<th>p50 ms<th>p99 ms<th>max ms<th>outcomes",
            routes.len()
        );
        for row in routes {
            let _ = write!(
                o,
                "<tr><td>{}<td>{}<td>{}<td>{:.1}<td>{:.1}<td>{:.1}<td>{:.1}<td class=l>{}",
                esc(&row.op),
                row.players,
                row.count,
                row.rate,
                row.p50_us as f64 / 1e3,
                row.p99_us as f64 / 1e3,
                row.max_us as f64 / 1e3,
                esc(&counts(&row.outcomes))
            );
        }
        o.push_str("</table>");
    }
    if !r.open.is_empty() {
        o.push_str("<h2>Open-model phases</h2><table><tr><th>phase<th>target req/s<th>duration s<th>scheduled<th>sent<th>sent/s<th>late starts<th>late after ms<th>dropped starts<th>in-flight bound<th>in-flight peak");
        for p in &r.open {
            let _ = write!(
                o,
                "<tr><td>{}<td>{}<td>{:.1}<td>{}<td>{}<td>{:.1}<td>{}<td>{:.1}<td>{}<td>{}<td>{}",
                esc(&p.step),
                p.rate,
                p.duration_s,
                p.scheduled,
                p.sent,
                p.sent_per_s,
                p.late_starts,
                p.late_after_us as f64 / 1e3,
                p.dropped_starts,
                p.max_in_flight,
                p.peak_in_flight
            );
        }
        let _ = write!(o, "</table><p>{}</p>", esc(super::play::OPEN_NOTE));
    }
    if !r.streams.is_empty() {
        o.push_str("<h2>Streams and long polls per step</h2><table><tr><th>phase<th>op<th>kind<th>events<th>events/s<th>by type<th>opened<th>reconnects<th>errors<th>first event p50 ms<th>first event p99 ms");
        for s in &r.streams {
            let _ = write!(
                o,
                "<tr><td>{}<td class=l>{}<td class=l>{}<td>{}<td>{:.1}<td class=l>{}<td>{}<td>{}<td class=l>{}<td>{}<td>{}",
                esc(&s.step),
                esc(&s.op),
                esc(&s.stream_kind),
                s.events,
                s.events_per_s,
                esc(&counts(&s.by_type)),
                s.opened,
                s.reconnects,
                esc(&counts(&s.errors)),
                ms_cell(&s.first_event_p50_us),
                ms_cell(&s.first_event_p99_us)
            );
        }
        o.push_str("</table>");
    }
    if !r.groups.is_empty() {
        o.push_str("<h2>Groups per step</h2><table><tr><th>phase<th>formed<th>finished<th>failed<th>abandoned");
        for g in &r.groups {
            let _ = write!(
                o,
                "<tr><td>{}<td>{}<td>{}<td>{}<td>{}",
                esc(&g.step),
                g.formed,
                g.finished,
                g.failed,
                g.abandoned
            );
        }
        o.push_str("</table>");
    }
}
