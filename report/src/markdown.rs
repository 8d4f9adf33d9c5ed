//! The Markdown report: what a user pastes into a pull request.

use std::fmt::Write as _;

use herd_driver::scenario::PhaseKind;

use super::{
    model::{Cell, Report},
    play::counts,
};

use herd_driver::units::latency as ms;

fn cell(c: &Cell, digits: usize) -> String {
    match c {
        Cell::Value(v) => format!("{v:.digits$}"),
        Cell::Missing(why) => format!("n/a ({why})"),
    }
}

fn le(v: u64) -> String {
    if v == u64::MAX {
        "> 2^25".into()
    } else {
        format!("≤ {v}")
    }
}

/// A log2 bucket's upper bound, or why there is none: a pair seen only in the gauges opened
/// no connection in the run, so it has no connect latency or lifetime.
fn le_of(connects: u64, v: u64) -> String {
    if connects == 0 {
        "n/a (no new connections)".into()
    } else {
        le(v)
    }
}

/// A measured upper bound (`≤ v`), or the reason it is missing.
fn le_cell(c: &Cell) -> String {
    match c {
        Cell::Value(v) => le(*v as u64),
        Cell::Missing(_) => cell(c, 0),
    }
}

/// Renders the report.
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "# herd run {} — {}\n", r.run.id, r.run.name);
    let _ = writeln!(
        o,
        "Scenario `{}`, status **{}**, {:.0} s, {} requests ({} not ok), {} probe intervals.\n",
        r.run.scenario,
        r.run.status,
        r.run.duration_s,
        r.run.requests,
        r.run.errors,
        r.run.probe_intervals
    );
    if let Some(seeding) = &r.run.seeding {
        let _ = writeln!(o, "{}\n", seeding.sentence());
    }
    let _ = writeln!(o, "## Findings\n");
    if r.findings.is_empty() {
        let _ = writeln!(
            o,
            "None: no churn cliff, no hidden throttling, no saturated driver, no warm-up.\n"
        );
    }
    for f in &r.findings {
        let _ = writeln!(o, "- **{}** — {}\n  {}", f.kind, f.title, f.detail);
        for e in &f.evidence {
            let _ = writeln!(o, "  - evidence: {e}");
        }
    }
    if !r.slo.is_empty() {
        let _ = writeln!(o, "\n## Objectives\n");
        let _ = writeln!(
            o,
            "| step | op | objective | measured | errors | result |\n|---|---|---|---:|---:|---|"
        );
        for s in &r.slo {
            let measured = if s.objective.starts_with("errors") {
                format!("{:.2} %", s.measured * 100.0)
            } else {
                ms(s.measured as u64)
            };
            let _ = writeln!(
                o,
                "| {} | {} | `{}` | {} | {:.2} % | {} |",
                s.phase,
                s.op,
                s.objective,
                measured,
                s.error_share * 100.0,
                if s.pass { "pass" } else { "**FAIL**" }
            );
        }
    }
    let _ = writeln!(o, "\n## Per step and op\n");
    let _ = writeln!(
        o,
        "| phase | kind | load | op | count | req/s | p50 | p99 | max | outcomes |\n|---|---|---:|---|---:|---:|---:|---:|---:|---|"
    );
    for row in r.ops.iter().filter(|o| o.kind != PhaseKind::Catalog) {
        let outcomes: Vec<String> = row
            .outcomes
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {:.1} | {} | {} | {} | {} |",
            row.phase,
            row.kind,
            row.load,
            row.op,
            row.count,
            row.rate,
            ms(row.p50_us),
            ms(row.p99_us),
            ms(row.max_us),
            outcomes.join(", ")
        );
    }
    play(&mut o, r);
    let _ = writeln!(o, "\n## Per step and container\n");
    let _ = writeln!(
        o,
        "| step | container | CPU burst (100 ms) | CPU sustained (30 s) | CPU avg | cap | throttled periods | throttled | mem peak | connects/s | TIME_WAIT entries/s | TIME_WAIT peak | ESTABLISHED peak | port headroom min | listen overflows | connect errors |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for c in &r.containers {
        let share = match &c.throttled_share {
            Cell::Value(v) => format!("{:.1} %", v * 100.0),
            other => cell(other, 0),
        };
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} | {} ms | {} MiB | {} | {} | {} | {} | {} | {} | {} |",
            c.phase,
            c.container,
            cell(&c.cpu_burst, 2),
            cell(&c.cpu_sustained, 2),
            cell(&c.cpu_avg, 2),
            cell(&c.cpu_cap, 2),
            share,
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
    let _ = writeln!(o, "\n## Connections per source → destination\n");
    if r.pairs.is_empty() {
        let _ = writeln!(
            o,
            "No outbound connections were recorded{}.",
            if r.run.probe_intervals == 0 {
                " (the kernel probe did not run)"
            } else {
                ""
            }
        );
    } else {
        let _ = writeln!(
            o,
            "| source | destination | new conns | new conns/s | churn ratio | ESTABLISHED peak | TIME_WAIT peak | TIME_WAIT entries | port headroom min | connect p50 / p99 (µs) | srtt p50 / p99 (µs) | lifetime p50 (ms) |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for p in &r.pairs {
            let to = if p.remote_container == "-" {
                p.remote.clone()
            } else {
                format!("{} ({})", p.remote_container, p.remote)
            };
            let _ = writeln!(
                o,
                "| {} | {to} | {} | {:.1} | {} | {} | {} | {} | {} | {} / {} | {} / {} | {} |",
                p.container,
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
                le_cell(&p.srtt_p99_le_us),
                le_of(p.connects, p.lifetime_ms.p50_le)
            );
        }
    }
    if !r.notes.is_empty() {
        let _ = writeln!(o, "\n## Notes\n");
        for n in &r.notes {
            let _ = writeln!(o, "- {n}");
        }
    }
    o
}

/// The route catalog, open-model phases, streams and groups: each section only when the run
/// has rows for it.
fn play(o: &mut String, r: &Report) {
    let routes: Vec<_> = r
        .ops
        .iter()
        .filter(|o| o.kind == PhaseKind::Catalog)
        .collect();
    if !routes.is_empty() {
        let _ = writeln!(
            o,
            "\n## Route catalog\n\n{} routes, one after another, each measured alone.\n",
            routes.len()
        );
        let _ = writeln!(
            o,
            "| route | concurrency | count | req/s | p50 | p99 | max | outcomes |\n|---|---:|---:|---:|---:|---:|---:|---|"
        );
        for row in routes {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {:.1} | {} | {} | {} | {} |",
                row.op,
                row.players,
                row.count,
                row.rate,
                ms(row.p50_us),
                ms(row.p99_us),
                ms(row.max_us),
                counts(&row.outcomes)
            );
        }
    }
    if !r.open.is_empty() {
        let _ = writeln!(o, "\n## Open-model phases\n");
        let _ = writeln!(
            o,
            "| phase | target req/s | duration | scheduled | sent | sent/s | late starts | dropped starts | in-flight bound | in-flight peak |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for p in &r.open {
            let _ = writeln!(
                o,
                "| {} | {} | {:.1} s | {} | {} | {:.1} | {} (> {}) | {} | {} | {} |",
                p.step,
                p.rate,
                p.duration_s,
                p.scheduled,
                p.sent,
                p.sent_per_s,
                p.late_starts,
                ms(p.late_after_us),
                p.dropped_starts,
                p.max_in_flight,
                p.peak_in_flight
            );
        }
        let _ = writeln!(o, "\n{}", super::play::OPEN_NOTE);
    }
    if !r.streams.is_empty() {
        let _ = writeln!(o, "\n## Streams and long polls per step\n");
        let _ = writeln!(
            o,
            "| phase | op | kind | events | events/s | by type | opened | reconnects | errors | first event p50 | first event p99 |\n|---|---|---|---:|---:|---|---:|---:|---|---:|---:|"
        );
        for s in &r.streams {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {:.1} | {} | {} | {} | {} | {} | {} |",
                s.step,
                s.op,
                s.stream_kind,
                s.events,
                s.events_per_s,
                counts(&s.by_type),
                s.opened,
                s.reconnects,
                counts(&s.errors),
                ms_cell(&s.first_event_p50_us),
                ms_cell(&s.first_event_p99_us)
            );
        }
    }
    if !r.groups.is_empty() {
        let _ = writeln!(o, "\n## Groups per step\n");
        let _ = writeln!(
            o,
            "| phase | formed | finished | failed | abandoned |\n|---|---:|---:|---:|---:|"
        );
        for g in &r.groups {
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} |",
                g.step, g.formed, g.finished, g.failed, g.abandoned
            );
        }
    }
}

/// A latency in µs as ms, or why there is none.
fn ms_cell(c: &Cell) -> String {
    match c {
        Cell::Value(v) => ms(*v as u64),
        Cell::Missing(_) => cell(c, 0),
    }
}
