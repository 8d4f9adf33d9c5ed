//! What bounds a broken objective: latency that rose while every container's CPU stayed far
//! under its cap is not a CPU problem (seed 003: the delivery SLO broke at 12-14 pairs with
//! the host's CPU near 30 %; the long-poll path, not the cores).

use crate::units::latency;

use super::{Finding, contention};
use crate::model::Report;
use herd_model::RunData;

/// A container's busiest 30 s under this share of its cap is "well under" it.
const WELL_UNDER: f64 = 0.5;

/// The first phase in which a latency objective broke while every container the probe saw
/// with a CPU cap used at most half of it (its busiest 30 s): adding cores will not help.
/// Needs containers with caps in that phase; without the probe it says nothing. Uncapped
/// rows (`host`, the root cgroup the probe always reads) have no cap to be under, so they
/// neither count for it nor against it. A phase in which some container's threads waited
/// for a CPU (`cpu_contention`'s thresholds: the run-queue delay, not the quota) is left
/// out: there the latency may well be the wait for a core, and more cores do help.
pub fn latency_not_cpu(r: &Report, d: &RunData) -> Option<Finding> {
    let capped = |c: &&crate::model::ContainerRow| c.cpu_cap.value().is_some_and(|cap| cap > 0.0);
    let broken = r
        .slo
        .iter()
        .filter(|s| !s.pass && !s.objective.starts_with("errors") && !super::load::warmed(r, s))
        .filter(|s| contention::in_phase(d, &s.phase).is_none())
        .find(|s| {
            let rows: Vec<_> = r
                .containers
                .iter()
                .filter(|c| c.phase == s.phase)
                .filter(capped)
                .collect();
            !rows.is_empty()
                && rows
                    .iter()
                    .all(|c| match (c.cpu_sustained.value(), c.cpu_cap.value()) {
                        (Some(used), Some(cap)) if cap > 0.0 => used <= WELL_UNDER * cap,
                        _ => false,
                    })
        })?;
    let rows: Vec<_> = r
        .containers
        .iter()
        .filter(|c| c.phase == broken.phase)
        .filter_map(|c| Some((c, c.cpu_sustained.value()?, c.cpu_cap.value()?)))
        .collect();
    let busiest = rows
        .iter()
        .max_by(|a, b| (a.1 / a.2).total_cmp(&(b.1 / b.2)))?;
    let share = busiest.1 / busiest.2;
    let pct = (share * 100.0).round();
    let measured = latency(broken.measured as u64);
    let mut evidence = vec![format!(
        "{} in {}: `{}` measured {measured}",
        broken.op, broken.phase, broken.objective
    )];
    evidence.extend(rows.iter().map(|(c, used, cap)| {
        format!(
            "{} / {}: CPU sustained (30 s) {used:.2} cores of a {cap:.2}-core cap ({:.0} %)",
            c.phase,
            c.container,
            (used / cap * 100.0).round()
        )
    }));
    Some(
        Finding::new(
            "latency_not_cpu",
            format!(
                "{} broke `{}` in {} (measured {measured}) while every container's CPU stayed \
                 at or under {pct:.0} % of its cap: adding cores will not help",
                broken.op, broken.objective, broken.phase
            ),
            "The objective broke with CPU to spare everywhere herd looked, so the time is spent \
             waiting, not computing: a lock, a queue, a pool, a long-poll or fan-out path that \
             does not scale with connections. Profile where requests wait (off-CPU time, queue \
             depths) under this load rather than adding cores or replicas.",
            evidence,
        )
        .in_phase(&broken.phase)
        .about(&busiest.0.container)
        .number("measured_us", broken.measured)
        .number("limit_us", broken.limit)
        .number("cpu_share_max", share),
    )
}
