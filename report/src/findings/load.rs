//! Findings about the load and what it met: throughput that collapsed while the players kept
//! asking, an objective broken with no errors, warm-up, and a driver that was itself the
//! limit.

use std::collections::BTreeSet;

use crate::units::latency;
use herd_model::RunData;

use super::{Finding, n};
use crate::model::{OpRow, Report, TimelinePoint};

/// A share of the phase's best req/s below which an interval has collapsed.
const COLLAPSE_SHARE: f64 = 0.5;

/// An interval shorter than this (a run's last, cut short) is left out of rate findings.
const SHORT_S: f64 = 0.5;

/// The highest p99 of any op in `p`; `None` when no request completed in it.
fn worst_p99(p: &TimelinePoint) -> Option<u64> {
    p.ops
        .iter()
        .filter(|o| o.req_per_s > 0.0)
        .map(|o| o.p99_us)
        .max()
}

/// `p`'s worst p99 in words, or that nothing completed (never a made-up `0µs`).
fn worst_p99_text(p: &TimelinePoint) -> String {
    worst_p99(p).map_or_else(
        || "no request completed".into(),
        |us| format!("worst p99 {}", latency(us)),
    )
}

/// Throughput collapse: in a phase of players, req/s falls below half the phase's best for
/// two intervals or more while at least as many players keep asking (a closed model's
/// offered load holds). Names what rose with it: a container at its CPU quota, errors, or the
/// latency.
pub fn throughput_collapse(r: &Report) -> Vec<Finding> {
    let mut out = Vec::new();
    let phases: BTreeSet<usize> = r.timeline.iter().filter_map(|p| p.phase_index).collect();
    for k in phases {
        let points: Vec<&TimelinePoint> = r
            .timeline
            .iter()
            .filter(|p| p.phase_index == Some(k) && p.duration_s >= SHORT_S)
            .collect();
        if points.len() < 3 || points.iter().all(|p| p.players == 0) {
            continue;
        }
        let Some(best) = points
            .iter()
            .max_by(|a, b| a.req_per_s.total_cmp(&b.req_per_s))
            .copied()
        else {
            continue;
        };
        if best.req_per_s <= 0.0 {
            continue;
        }
        let low: Vec<&TimelinePoint> = points
            .iter()
            .filter(|p| {
                p.start_s > best.start_s
                    && p.req_per_s < COLLAPSE_SHARE * best.req_per_s
                    && p.players >= best.players
            })
            .copied()
            .collect();
        if low.len() < 2 {
            continue;
        }
        let worst = low
            .iter()
            .min_by(|a, b| a.req_per_s.total_cmp(&b.req_per_s))
            .copied()
            .expect("two or more");
        let phase = best
            .phase
            .clone()
            .unwrap_or_else(|| format!("phase {}", k + 1));
        let row = |p: &TimelinePoint| {
            format!(
                "t = {:.0}–{:.0} s: {:.0} req/s, {} players, {}, errors {}",
                p.start_s,
                p.end_s(),
                p.req_per_s,
                p.players,
                worst_p99_text(p),
                n(p.split.errors)
            )
        };
        let mut shown: Vec<&TimelinePoint> = low.iter().take(10).copied().collect();
        if !shown.iter().any(|p| std::ptr::eq(*p, worst)) {
            shown.push(worst);
        }
        let mut evidence = vec![row(best)];
        evidence.extend(shown.iter().map(|p| row(p)));
        // The latency the players waited, from the collapsed intervals the evidence shows.
        let slowest = shown.iter().filter_map(|p| worst_p99(p)).max();
        // What rose with it, in the collapsed intervals: a container at its quota first.
        let at_quota = worst
            .containers
            .iter()
            .filter_map(|c| Some((c, c.cpu_quota_cores?, c.throttled_share?, c.cpu_cores?)))
            .filter(|(_, _, share, _)| *share >= 0.5)
            .max_by(|a, b| a.2.total_cmp(&b.2));
        let cause = if let Some((c, q, share, cpu)) = at_quota {
            evidence.push(format!(
                "t = {:.0}–{:.0} s: {} {cpu:.2} cores of a {q:.2}-core quota, throttled {:.0} %",
                worst.start_s,
                worst.end_s(),
                c.container,
                share * 100.0
            ));
            format!(
                "; {} sat at its {q:.2}-core quota, throttled {:.0} %",
                c.container,
                share * 100.0
            )
        } else if worst.split.errors > 0 {
            format!("; {} errors in that interval", n(worst.split.errors))
        } else {
            String::new()
        };
        out.push(
            Finding::new(
                "throughput_collapse",
                format!(
                    "{phase}: req/s fell from {:.0} to {:.0} while {} players kept asking{}{cause}",
                    best.req_per_s,
                    worst.req_per_s,
                    worst.players,
                    slowest.map_or_else(String::new, |us| format!(
                        "; the worst p99 reached {}",
                        latency(us)
                    ))
                ),
                "The offered load held but fewer requests completed: something on the path is \
                 saturated and the players wait on it. The rows name the intervals; the \
                 container and pair tables of this phase say which resource ran out.",
                evidence,
            )
            .in_phase(&phase)
            .number("req_per_s_before", best.req_per_s)
            .number("req_per_s_after", worst.req_per_s)
            .number("players", worst.players as f64),
        );
    }
    out
}

/// Contiguous ranges of interval indexes: `[(first, last)]`.
fn ranges(points: &[&TimelinePoint]) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    for p in points {
        match out.last_mut() {
            Some((_, end)) if (p.start_s - *end).abs() < 0.01 => *end = p.end_s(),
            _ => out.push((p.start_s, p.end_s())),
        }
    }
    out
}

/// The driver, not the system, limited the run in some intervals: they are named, with
/// what saturated it, and the charts mark them.
pub fn driver_saturated(r: &Report) -> Vec<Finding> {
    let hit: Vec<&TimelinePoint> = r
        .timeline
        .iter()
        .filter(|p| p.driver.saturated.is_some())
        .collect();
    if hit.is_empty() {
        return Vec::new();
    }
    let cpu = hit.iter().any(|p| {
        p.driver
            .saturated
            .as_deref()
            .is_some_and(|s| s.contains("CPU"))
    });
    let lag = hit.iter().any(|p| {
        p.driver
            .saturated
            .as_deref()
            .is_some_and(|s| s.contains("lag"))
    });
    let spans: Vec<String> = ranges(&hit)
        .iter()
        .map(|(a, b)| format!("{a:.1}–{b:.1} s"))
        .collect();
    let mut evidence = vec![format!(
        "{} of {} intervals saturated the driver",
        hit.len(),
        r.timeline.len()
    )];
    evidence.extend(hit.iter().take(20).map(|p| {
        format!(
            "t = {:.1}–{:.1} s: {}",
            p.start_s,
            p.end_s(),
            p.driver.saturated.as_deref().unwrap_or_default()
        )
    }));
    if hit.len() > 20 {
        evidence.push(format!("… and {} more intervals", hit.len() - 20));
    }
    let what = match (cpu, lag) {
        (true, true) => "its CPU and its scheduler's lag",
        (true, false) => "its CPU",
        (false, true) => "its scheduler's lag",
        (false, false) => "its own limits",
    };
    let advice = if cpu {
        "The driver used nearly all its cores: run it on a host with more (or as several \
         processes on several hosts), or lower the load."
    } else {
        "The driver's runtime could not run ready tasks on time (another process on its \
         cores, or too many players for one process): give it cores of its own, or split the \
         players over several processes."
    };
    vec![
        Finding::new(
            "driver_saturated",
            format!(
                "the driver was saturated by {what} in {} interval(s), t = {}: those intervals \
                 measure the harness as much as the system",
                hit.len(),
                spans.join(", ")
            ),
            format!("{advice} Read latencies from those intervals with care."),
            evidence,
        )
        .number("intervals", hit.len() as f64),
    ]
}

/// A latency objective broken while the op had no errors: the service degrades without
/// failing, which error-rate alerts never see (seed 003: RPC at 16 s, 0 errors). Expected
/// outcomes (part of normal play) are not errors.
pub fn slo_breach_without_errors(r: &Report) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    for row in r.slo.iter().filter(|s| !s.pass && s.error_share == 0.0) {
        if row.objective.starts_with("errors") || warmed(r, row) {
            continue;
        }
        // One finding per objective, from the first phase that broke it.
        if out.iter().any(|f| {
            f.evidence
                .iter()
                .any(|e| e.starts_with(&format!("{} {}:", row.op, row.objective)))
        }) {
            continue;
        }
        let broken: Vec<String> = r
            .slo
            .iter()
            .filter(|s| s.op == row.op && s.objective == row.objective && !s.pass)
            .map(|s| format!("{} {}", s.phase, latency(s.measured as u64)))
            .collect();
        out.push(
            Finding::new(
                "slo_breach_without_errors",
                format!(
                    "{}: `{}` broken from {} ({}) with 0 errors",
                    row.op,
                    row.objective,
                    row.phase,
                    latency(row.measured as u64)
                ),
                "Every call still succeeds, so error-rate alerts stay green while users wait. \
                 Look for a queue or a long-poll path that saturates before the CPU does.",
                vec![format!(
                    "{} {}: {}; errors 0",
                    row.op,
                    row.objective,
                    broken.join(", ")
                )],
            )
            .in_phase(&row.phase)
            .number("measured_us", row.measured)
            .number("limit_us", row.limit),
        );
    }
    out
}

/// The first interval of the first step much slower than the rest of it: connection pools and
/// caches warming up, to keep out of steady-state figures.
pub fn warm_up(d: &RunData) -> Vec<Finding> {
    let first: Vec<_> = d
        .driver
        .iter()
        .filter(|i| i.phase_index == Some(0))
        .collect();
    if first.len() < 4 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let ops: BTreeSet<&str> = first
        .iter()
        .flat_map(|i| i.ops.iter().map(|o| o.op.as_str()))
        .collect();
    for op in ops {
        let p99s: Vec<u64> = first
            .iter()
            .filter_map(|i| i.ops.iter().find(|o| o.op == op).map(|o| o.latency.p99_us))
            .collect();
        if p99s.len() < 4 {
            continue;
        }
        let mut rest = p99s[1..].to_vec();
        rest.sort_unstable();
        let median = rest[rest.len() / 2].max(1);
        if p99s[0] >= 3 * median && p99s[0] >= 1_000 {
            let ratio = p99s[0] as f64 / median as f64;
            let phase = first[0].phase.clone().unwrap_or_else(|| "step 1".into());
            let all: Vec<String> = p99s.iter().map(|v| latency(*v)).collect();
            out.push(
                Finding::new(
                    "warm_up",
                    format!(
                        "{op}: the first interval's p99 ({}) is {ratio:.0}× the step's steady p99 \
                         ({}): warm-up",
                        latency(p99s[0]),
                        latency(median)
                    ),
                    "Cold connection pools and caches make the first seconds slow. This is not \
                     degradation; leave the first interval out of steady-state figures.",
                    vec![format!(
                        "{phase} / {op}: p99 by interval {}; steady p99 (the median of the rest) \
                         {}, {ratio:.0}× below the first",
                        all.join(", "),
                        latency(median)
                    )],
                )
                .in_phase(&phase)
                .number("first_p99_us", p99s[0] as f64)
                .number("steady_p99_us", median as f64),
            );
        }
    }
    out
}

/// True when objective row `s` broke in its op's warm-up phase ([`warm_phase`]): cold, not
/// degraded.
pub(crate) fn warmed(r: &Report, s: &crate::model::SloRow) -> bool {
    warm_phase(r, &s.op).is_some_and(|(first, _)| first.phase == s.phase)
}

/// The op's first phase and a later one that carried at least as many of its requests per
/// second with a p99 at least 3× lower: latency that fell as the load rose is a cold pool or
/// cache warming (seed 003's /healthz: p95 376 ms at 50 req/s, 125 ms from 100 req/s on),
/// not degradation. The hammer's phase is left out (it is not the players' load).
pub(crate) fn warm_phase<'a>(r: &'a Report, op: &str) -> Option<(&'a OpRow, &'a OpRow)> {
    let rows: Vec<&OpRow> = r
        .ops
        .iter()
        .filter(|o| o.op == op && o.kind != herd_model::PhaseKind::Hammer && o.count > 0)
        .collect();
    let (first, rest) = rows.split_first()?;
    let later = rest
        .iter()
        .filter(|o| o.rate >= first.rate)
        .min_by_key(|o| o.latency.p99_us)?;
    (first.latency.p99_us >= 1_000 && first.latency.p99_us >= 3 * later.latency.p99_us.max(1))
        .then_some((*first, *later))
}

/// Warm-up across phases: an op slow in its first phase and much faster in a later, heavier
/// one (see [`warm_phase`]); an objective broken only there is the warm-up's, and the
/// degradation findings leave it out. Ops the in-phase [`warm_up`] named are not named again.
pub fn warm_up_across_phases(r: &Report, named: &[Finding]) -> Vec<Finding> {
    let ops: BTreeSet<&str> = r.ops.iter().map(|o| o.op.as_str()).collect();
    let mut out = Vec::new();
    for op in ops {
        if named
            .iter()
            .any(|f| f.title.starts_with(&format!("{op}: ")))
        {
            continue;
        }
        let Some((first, later)) = warm_phase(r, op) else {
            continue;
        };
        let evidence = r
            .ops
            .iter()
            .filter(|o| o.op == op && o.kind != herd_model::PhaseKind::Hammer && o.count > 0)
            .map(|o| {
                format!(
                    "{} / {op}: {:.0} req/s, p99 {}",
                    o.phase,
                    o.rate,
                    latency(o.latency.p99_us)
                )
            })
            .collect();
        out.push(
            Finding::new(
                "warm_up",
                format!(
                    "{op}: p99 {} at {:.0} req/s in {}, {} at {:.0} req/s in {}: latency fell as \
                     the load rose, warm-up, not degradation",
                    latency(first.latency.p99_us),
                    first.rate,
                    first.phase,
                    latency(later.latency.p99_us),
                    later.rate,
                    later.phase
                ),
                "The first phase met cold connection pools and caches; a later phase with more \
                 load was much faster, so the system did not degrade. Leave the first phase out \
                 of steady-state figures, or warm the target up before measuring; an objective \
                 broken only there is not a capacity limit.",
                evidence,
            )
            .in_phase(&first.phase)
            .number("first_p99_us", first.latency.p99_us as f64)
            .number("steady_p99_us", later.latency.p99_us as f64),
        );
    }
    out
}
