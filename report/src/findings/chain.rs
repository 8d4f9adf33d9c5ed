//! The causal chain: when a pair's churn, its source container at its CPU quota and the
//! latency or throughput of the same phase line up, one headline says so, with the fix
//! first — the seeds' whole story (churn → gateway CPU → throttling → latency), which took
//! their team several passes to see.

use super::Finding;
use crate::model::Report;

fn quote(f: &Finding) -> String {
    format!("{}: {}", f.kind, f.title)
}

/// One headline over the findings that make a chain, or None: churn keeping its source at
/// its CPU quota first, else a throttled listener whose accept queue overflowed.
pub fn causal_chain(r: &Report, found: &[Finding]) -> Option<Finding> {
    churn_chain(r, found).or_else(|| accept_chain(found))
}

/// Churn on a pair, its source at its quota, and what users saw in that phase (an objective
/// broken, a collapse, the worst p99 doubled, or SYNs dropped at its own full accept queue).
/// A source at
/// its quota for seconds on end (`cpu_saturated`) makes the chain even when nothing in the
/// run says what users saw change (a one-step run with no objective): its own phase's worst
/// p99 is then the effect named.
fn churn_chain(r: &Report, found: &[Finding]) -> Option<Finding> {
    for churn in found.iter().filter(|f| f.kind == "churn_cliff") {
        let src = churn.container.as_deref()?;
        let Some(cpu) = found.iter().find(|f| {
            (f.kind == "cpu_saturated" || f.kind == "throttling_bursts")
                && f.container.as_deref() == Some(src)
        }) else {
            continue;
        };
        let phase = cpu.phase.clone()?;
        // What the users saw in that phase: an objective broken, throughput collapsed, or
        // the worst p99 at least doubled against the first phase.
        let effect = found
            .iter()
            .find(|f| {
                (f.kind == "slo_breach_without_errors" || f.kind == "throughput_collapse")
                    && f.phase.as_deref() == Some(phase.as_str())
            })
            .map(|f| (Some(quote(f)), effect_words(f)))
            .or_else(|| p99_rise(r, &phase).map(|(row, w)| (Some(row), w)))
            // Its clients' SYNs dropped at its own full accept queue while it was throttled.
            .or_else(|| {
                found
                    .iter()
                    .find(|f| {
                        f.kind == "accept_queue_overflow" && f.container.as_deref() == Some(src)
                    })
                    .map(|f| {
                        let port = f.numbers.get("port").copied().unwrap_or(0.0);
                        let drops = f.numbers.get("drops").copied().unwrap_or(0.0);
                        (
                            Some(quote(f)),
                            format!("its accept queue on port {port:.0} dropped {drops:.0} SYNs"),
                        )
                    })
            })
            .or_else(|| {
                (cpu.kind == "cpu_saturated").then(|| match worst_p99(r, &phase) {
                    Some((row, w)) => (Some(row), w),
                    None => (
                        None,
                        "everything it serves queues behind the throttling".into(),
                    ),
                })
            });
        let Some((effect_row, effect)) = effect else {
            continue;
        };
        let rate = churn.numbers.get("connects_per_s").copied().unwrap_or(0.0);
        let pct = 100.0 * churn.numbers.get("churn_ratio").copied().unwrap_or(0.0);
        let quota = cpu.numbers.get("quota_cores").copied().unwrap_or(0.0);
        let how = if cpu.kind == "cpu_saturated" {
            format!(
                "at its {quota:.2}-core CPU quota for {:.0} s",
                cpu.numbers.get("seconds").copied().unwrap_or(0.0)
            )
        } else {
            format!("throttled in bursts against its {quota:.2}-core quota")
        };
        let dest = churn
            .title
            .split_once(": a new connection")
            .map_or(src, |(pair, _)| pair);
        return Some(
            Finding::new(
                "causal_chain",
                format!(
                    "Fix first: {dest} — its churn ({rate:.0} new connections/s, {pct:.0} % of \
                     requests) keeps {src} {how} in {phase}, and {effect}"
                ),
                format!(
                    "These findings are one problem: every new connection costs {src} a TCP \
                     handshake and a port in TIME_WAIT, the extra CPU meets its quota, and the \
                     throttling is the latency users see. Fix the churn (keep connections to the \
                     destination open: a larger idle pool) before sizing {src}'s CPU — the seeds' \
                     team measured a 7× CPU drop from that fix alone."
                ),
                [Some(quote(churn)), Some(quote(cpu)), effect_row]
                    .into_iter()
                    .flatten()
                    .collect(),
            )
            .about(src)
            .in_phase(&phase)
            .number("connects_per_s", rate)
            .number("quota_cores", quota),
        );
    }
    None
}

/// A listener whose accept queue overflowed while its container was held by its CPU quota:
/// the throttled server accepts too slowly, its clients' SYNs are dropped and retried a
/// second later.
fn accept_chain(found: &[Finding]) -> Option<Finding> {
    for acc in found.iter().filter(|f| f.kind == "accept_queue_overflow") {
        let Some(c) = acc.container.as_deref() else {
            continue;
        };
        let Some(cpu) = found.iter().find(|f| {
            (f.kind == "cpu_saturated" || f.kind == "throttling_bursts")
                && f.container.as_deref() == Some(c)
        }) else {
            continue;
        };
        let quota = cpu.numbers.get("quota_cores").copied().unwrap_or(0.0);
        let port = acc.numbers.get("port").copied().unwrap_or(0.0);
        let drops = acc.numbers.get("drops").copied().unwrap_or(0.0);
        let phase = cpu.phase.clone().unwrap_or_default();
        let how = if cpu.kind == "cpu_saturated" {
            format!(
                "at its {quota:.2}-core CPU quota for {:.0} s",
                cpu.numbers.get("seconds").copied().unwrap_or(0.0)
            )
        } else {
            format!("throttled in bursts against its {quota:.2}-core quota")
        };
        let mut f = Finding::new(
            "causal_chain",
            format!(
                "Fix first: {c}'s CPU — {how} in {phase}, it accepts too slowly: its accept queue \
                 on port {port:.0} overflowed and dropped {drops:.0} SYNs, each a client that \
                 waits for a SYN retry"
            ),
            format!(
                "These findings are one problem: while {c} is throttled its accept loop does not \
                 run, the queue of finished handshakes fills, and the kernel drops new SYNs; each \
                 client sends its SYN again after 1 s, then 3 s in all — connect latency in whole \
                 seconds that no server-side timer shows. Give {c} the CPU it needs (or find what \
                 costs it the CPU) first; a larger backlog only makes the queue longer."
            ),
            vec![quote(acc), quote(cpu)],
        )
        .about(c)
        .number("quota_cores", quota)
        .number("port", port)
        .number("drops", drops);
        if !phase.is_empty() {
            f = f.in_phase(&phase);
        }
        return Some(f);
    }
    None
}

/// The worst p99 of `phase`'s ops, as (evidence, words).
fn worst_p99(r: &Report, phase: &str) -> Option<(String, String)> {
    let w = r
        .ops
        .iter()
        .filter(|o| o.phase == phase)
        .max_by_key(|o| o.latency.p99_us)?;
    let l = crate::units::latency(w.latency.p99_us);
    Some((
        format!("worst p99 in {phase}: {} {l}", w.op),
        format!("{}'s p99 there was {l}", w.op),
    ))
}

/// What a latency or throughput finding says users saw, in a few words.
fn effect_words(f: &Finding) -> String {
    match f.kind.as_str() {
        "throughput_collapse" => {
            let before = f.numbers.get("req_per_s_before").copied().unwrap_or(0.0);
            let after = f.numbers.get("req_per_s_after").copied().unwrap_or(0.0);
            format!("req/s fell from {before:.0} to {after:.0}")
        }
        _ => {
            let measured = f.numbers.get("measured_us").copied().unwrap_or(0.0);
            format!(
                "an objective broke ({}) with 0 errors",
                crate::units::latency(measured as u64)
            )
        }
    }
}

/// The worst p99 of `phase` at least twice the first load phase's, as (evidence, words).
fn p99_rise(r: &Report, phase: &str) -> Option<(String, String)> {
    let worst = |name: &str| {
        r.ops
            .iter()
            .filter(|o| o.phase == name)
            .max_by_key(|o| o.latency.p99_us)
    };
    let first = r.ops.first()?.phase.clone();
    let (a, b) = (worst(&first)?, worst(phase)?);
    if first == phase || b.latency.p99_us < 2 * a.latency.p99_us.max(1) {
        return None;
    }
    let (la, lb) = (
        crate::units::latency(a.latency.p99_us),
        crate::units::latency(b.latency.p99_us),
    );
    Some((
        format!(
            "worst p99 per phase: {first} {} {la}, {phase} {} {lb}",
            a.op, b.op
        ),
        format!("{}'s p99 rose from {la} ({first}) to {lb}", b.op),
    ))
}
