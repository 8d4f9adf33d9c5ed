//! Findings: what a run shows, named with its numbers and the rows that prove it. Each
//! detector is a small pure function over the built report; every number a finding's title
//! states stands in its evidence, which quotes the report's rows (a test checks this for every
//! detector). When several findings line up in one phase — churn on a pair, its source at its
//! CPU quota, latency up — a causal chain heads them, with the fix first.

mod bound;
mod chain;
mod connects;
mod conntrack;
mod contention;
mod cpu;
mod integrity;
mod listen;
mod load;
mod loss;
mod memory;
mod nagle;
mod sockets;
mod waits;

pub use crate::model::Finding;
use crate::model::Report;
use herd_model::RunData;

pub use bound::latency_not_cpu;
pub use chain::causal_chain;
pub use connects::target_unreachable;
pub use conntrack::conntrack_exhaustion;
pub use contention::cpu_contention;
pub use cpu::{cpu_saturated, throttling_bursts};
pub use integrity::integrity_failures;
pub use listen::accept_queue_overflow;
pub use load::{
    driver_saturated, slo_breach_without_errors, throughput_collapse, warm_up,
    warm_up_across_phases,
};
pub use loss::packet_loss;
pub use memory::{memory_pressure, oom_killed};
pub use nagle::nagle_delayed_ack;
pub use sockets::{churn_cliff, pool_pinned, stream_storm};

/// A count as findings write it: digits, no separators, so the same figure reads the same
/// in a title and in its evidence.
pub(crate) fn n(v: u64) -> String {
    v.to_string()
}

/// Runs every detector, in order of impact: a causal chain, when the findings make one,
/// comes first; then what lost requests outright (an unreachable target, OOM kills), the
/// churn cliff, the CPU quota and a collapse, then the kernel-side waits that add latency
/// (accept-queue overflows, a full conntrack table, packet loss, CPU contention, memory
/// pressure, the Nagle × delayed-ACK stall), then the rest.
pub fn detect(r: &Report, d: &RunData) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(target_unreachable(d));
    out.extend(oom_killed(d));
    out.extend(churn_cliff(r, d));
    out.extend(cpu_saturated(r));
    out.extend(throttling_bursts(r));
    out.extend(throughput_collapse(r));
    out.extend(accept_queue_overflow(d));
    out.extend(conntrack_exhaustion(d));
    out.extend(packet_loss(d));
    out.extend(cpu_contention(d));
    out.extend(memory_pressure(d));
    out.extend(nagle_delayed_ack(r));
    out.extend(driver_saturated(r));
    let warm = warm_up(d);
    out.extend(warm_up_across_phases(r, &warm));
    out.extend(warm);
    out.extend(slo_breach_without_errors(r));
    out.extend(pool_pinned(r, d));
    out.extend(stream_storm(r, d));
    out.extend(integrity_failures(r, d));
    out.extend(latency_not_cpu(r, d));
    if let Some(c) = causal_chain(r, &out) {
        out.insert(0, c);
    }
    out
}

#[cfg(test)]
mod tests;
