//! Text for the shapes: a rate phase's heading with its arrivals, and the catalog's table
//! (one row per route).

use std::fmt::Write as _;

use crate::{
    report::{RunReport, StepReport},
    scenario::PhaseKind,
    text::{count, duration_us},
};

/// A rate phase's heading: target and sent rate, late and dropped starts.
pub(crate) fn open_heading(s: &StepReport) -> Option<String> {
    let o = s.open.as_ref()?;
    let secs = (s.duration_ms as f64 / 1e3).max(1e-3);
    Some(format!(
        "{}: {} req/s open model, {:.1}s: {} of {} arrivals sent ({:.1}/s), {} late starts (> {}), {} dropped starts (max {} in flight, peak {}), {} connects",
        s.phase,
        trim(o.rate),
        s.duration_ms as f64 / 1e3,
        count(o.sent),
        count(o.scheduled),
        o.sent as f64 / secs,
        count(o.late_starts),
        duration_us(o.late_after_us),
        count(o.dropped_starts),
        count(o.max_in_flight as u64),
        count(o.peak_in_flight as u64),
        count(s.connects),
    ))
}

fn trim(x: f64) -> String {
    if x.fract() == 0.0 {
        count(x as u64)
    } else {
        format!("{x}")
    }
}

/// The catalog: one row per route with concurrency, count, req/s, p50, p99, max and
/// outcomes; empty without catalog phases.
pub(crate) fn catalog_table(
    report: &RunReport,
    outcomes: impl Fn(&crate::report::OpStats) -> String,
) -> String {
    let routes: Vec<&StepReport> = report
        .steps
        .iter()
        .filter(|s| s.kind == PhaseKind::Catalog)
        .collect();
    if routes.is_empty() {
        return String::new();
    }
    let header = [
        "route", "conc", "count", "req/s", "p50", "p99", "max", "outcomes",
    ]
    .map(String::from);
    let mut rows = vec![header];
    for s in &routes {
        let route = s
            .phase
            .strip_prefix("catalog ")
            .unwrap_or(&s.phase)
            .to_owned();
        match s.ops.first() {
            Some(o) => rows.push([
                route,
                s.players.to_string(),
                count(o.count),
                format!("{:.1}", o.rate),
                duration_us(o.latency.p50_us),
                duration_us(o.latency.p99_us),
                duration_us(o.latency.max_us),
                outcomes(o),
            ]),
            None => rows.push([
                route,
                s.players.to_string(),
                "0".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "(no requests)".into(),
            ]),
        }
    }
    let mut width = [0usize; 8];
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = format!("\ncatalog: {} routes, one after another\n", routes.len());
    for r in &rows {
        out.push(' ');
        for (i, c) in r.iter().enumerate() {
            let pad = " ".repeat(width[i] - c.chars().count());
            let _ = match i {
                0 => write!(out, " {c}{pad}"),
                7 => write!(out, "  {c}"),
                _ => write!(out, "  {pad}{c}"),
            };
        }
        out.push('\n');
    }
    out
}
