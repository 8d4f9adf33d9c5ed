//! Findings about CPU quotas, told apart the way they need different fixes: a container at
//! its quota for seconds on end (saturated: it needs more CPU or less work), and one that
//! hits its quota in 100 ms bursts while its averages stay under it (bursts: averages over
//! 1 s or 30 s hide them).

use super::Finding;
use crate::model::{Report, TimelinePoint};

/// Seconds in a row at the quota that make a container saturated rather than bursty.
const SATURATED_S: f64 = 3.0;

/// Throttled share of an interval's CFS periods from which the container is at its quota.
const AT_QUOTA_SHARE: f64 = 0.5;

/// One container's stretch of intervals at its quota.
struct Stretch<'a> {
    points: Vec<(&'a TimelinePoint, f64, f64, f64)>,
}

impl Stretch<'_> {
    fn seconds(&self) -> f64 {
        self.points.iter().map(|(p, ..)| p.duration_s).sum()
    }
}

/// Each container's longest stretch of consecutive intervals throttled in at least half
/// their periods: (container, stretch).
fn stretches(r: &Report) -> Vec<(String, Stretch<'_>)> {
    let mut names: Vec<&str> = r
        .timeline
        .iter()
        .flat_map(|p| p.containers.iter().map(|c| c.container.as_str()))
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut out = Vec::new();
    for name in names {
        let mut best = Stretch { points: Vec::new() };
        let mut cur = Stretch { points: Vec::new() };
        for p in &r.timeline {
            let c = p.containers.iter().find(|c| c.container == name);
            let at = c.and_then(|c| {
                let (q, share, cpu) = (c.cpu_quota_cores?, c.throttled_share?, c.cpu_cores?);
                (share >= AT_QUOTA_SHARE).then_some((q, share, cpu))
            });
            match at {
                Some((q, share, cpu)) => cur.points.push((p, q, share, cpu)),
                None => {
                    if cur.seconds() > best.seconds() {
                        best = std::mem::replace(&mut cur, Stretch { points: Vec::new() });
                    } else {
                        cur.points.clear();
                    }
                }
            }
        }
        if cur.seconds() > best.seconds() {
            best = cur;
        }
        if best.seconds() >= SATURATED_S {
            out.push((name.to_owned(), best));
        }
    }
    out
}

/// A container at its CPU quota for seconds on end: throttled in at least half its periods
/// through [`SATURATED_S`] or more consecutive seconds. It is not bursting: it needs more
/// CPU than its quota, or less work.
pub fn cpu_saturated(r: &Report) -> Vec<Finding> {
    stretches(r)
        .into_iter()
        .map(|(name, s)| {
            let (first, last) = (s.points[0].0, s.points[s.points.len() - 1].0);
            let (a, b) = (first.start_s, last.end_s());
            let k = s.points.len() as f64;
            let quota = s.points[0].1;
            let share = 100.0 * s.points.iter().map(|x| x.2).sum::<f64>() / k;
            let used = s.points.iter().map(|x| x.3).sum::<f64>() / k;
            let secs = s.seconds();
            let phase = first
                .phase
                .clone()
                .unwrap_or_else(|| "between phases".into());
            let mut evidence = vec![format!(
                "{name}, {} intervals, t = {a:.0}–{b:.0} s ({secs:.0} s, {phase}): mean CPU \
                 {used:.2} cores of a {quota:.2}-core quota, throttled in {share:.0} % of periods",
                s.points.len()
            )];
            for (p, q, sh, cpu) in s.points.iter().take(12) {
                evidence.push(format!(
                    "t = {:.0}–{:.0} s: {name} {cpu:.2} cores of {q:.2}, throttled {:.0} %",
                    p.start_s,
                    p.end_s(),
                    sh * 100.0
                ));
            }
            if s.points.len() > 12 {
                evidence.push(format!("… and {} more intervals", s.points.len() - 12));
            }
            Finding::new(
                "cpu_saturated",
                format!(
                    "{name} at its {quota:.2}-core CPU quota for {secs:.0} s in a row (t = \
                     {a:.0}–{b:.0} s, {phase}): throttled in {share:.0} % of periods, {used:.2} \
                     cores used"
                ),
                "This is not a burst the averages hide: the container needs more CPU than its \
                 quota for as long as this load lasts, so everything it serves queues behind \
                 the throttling. Raise the quota, or find what costs the CPU (a connection storm \
                 pays a TCP and TLS handshake per request).",
                evidence,
            )
            .about(&name)
            .in_phase(&phase)
            .number("quota_cores", quota)
            .number("seconds", secs)
            .number("throttled_share", share / 100.0)
            .number("cpu_cores", used)
        })
        .collect()
}

/// A container whose 100 ms bursts hit its quota while its averages stay under it, in a
/// phase where it was not saturated for seconds on end.
pub fn throttling_bursts(r: &Report) -> Vec<Finding> {
    let saturated: Vec<(String, Vec<String>)> = stretches(r)
        .into_iter()
        .map(|(name, s)| {
            let phases = s
                .points
                .iter()
                .filter_map(|(p, ..)| p.phase.clone())
                .collect();
            (name, phases)
        })
        .collect();
    r.containers
        .iter()
        .filter_map(|c| {
            let cap = c.cpu_cap.value()?;
            let burst = c.cpu_burst.value()?;
            let sustained = c.cpu_sustained.value()?;
            let avg = c.cpu_avg.value()?;
            let share = c.throttled_share.value().unwrap_or(0.0);
            // Only the plan's phases (steps, soak, rate steps, routes): the intervals before
            // and after the plan are not the load's.
            let in_phase = c.phase != "before" && c.phase != "after";
            // Throttling means periods really throttled; a burst reading a hair over the cap
            // with none throttled is cpu.stat's tick granularity, not a quota hit.
            let hit = share > 0.0 && (share >= 0.05 || burst >= 0.9 * cap);
            let covered = saturated
                .iter()
                .any(|(n, phases)| *n == c.container && phases.contains(&c.phase));
            if !in_phase || !hit || covered || sustained >= 0.8 * cap {
                return None;
            }
            let pct = share * 100.0;
            let ms = c.throttled_ms.value().unwrap_or(0.0);
            Some(
                Finding::new(
                    "throttling_bursts",
                    format!(
                        "{} in {}: 100 ms bursts reach {burst:.2} cores against a {cap:.2}-core \
                         quota ({pct:.1} % of periods throttled) while its average is {avg:.2} \
                         cores and its busiest 30 s {sustained:.2}",
                        c.container, c.phase
                    ),
                    "Averages over 1 s or 30 s hide this: the container is throttled in bursts, \
                     which shows as latency spikes, not as high CPU. Raise the quota or smooth \
                     the bursts (connection storms, synchronized clients).",
                    vec![format!(
                        "{} / {}: CPU burst (100 ms) {burst:.2}, CPU sustained (30 s) \
                         {sustained:.2}, CPU avg {avg:.2}, cap {cap:.2}, throttled periods \
                         {pct:.1} %, throttled {ms:.1} ms",
                        c.phase, c.container
                    )],
                )
                .about(&c.container)
                .in_phase(&c.phase)
                .number("burst_cores", burst)
                .number("quota_cores", cap)
                .number("throttled_share", share)
                .number("avg_cores", avg)
                .number("sustained_cores", sustained),
            )
        })
        .collect()
}
