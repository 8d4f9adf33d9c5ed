//! The causal chain: when a pair's churn, its source container at its CPU quota and the
//! latency or throughput of the same phase line up, one headline says so, with the fix
//! first — the seeds' whole story (churn → gateway CPU → throttling → latency), which took
//! their team several passes to see.

use super::Finding;
use crate::model::Report;

fn quote(f: &Finding) -> String {
    format!("{}: {}", f.kind, f.title)
}

/// One headline over the findings that make a chain, or None.
pub fn causal_chain(r: &Report, found: &[Finding]) -> Option<Finding> {
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
            .map(|f| (quote(f), effect_words(f)))
            .or_else(|| p99_rise(r, &phase));
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
                vec![quote(churn), quote(cpu), effect_row],
            )
            .about(src)
            .in_phase(&phase)
            .number("connects_per_s", rate)
            .number("quota_cores", quota),
        );
    }
    None
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
