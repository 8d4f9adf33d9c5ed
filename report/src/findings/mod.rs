//! Findings: what a run shows, named with its numbers and the rows that prove it. Each
//! detector is a small pure function over the built report; every number a finding's title
//! states stands in its evidence, which quotes the report's rows (a test checks this for every
//! detector). When several findings line up in one phase — churn on a pair, its source at its
//! CPU quota, latency up — a causal chain heads them, with the fix first.

mod bound;
mod chain;
mod connects;
mod cpu;
mod integrity;
mod load;
mod sockets;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::model::Report;
use herd_model::RunData;

pub use bound::latency_not_cpu;
pub use chain::causal_chain;
pub use connects::target_unreachable;
pub use cpu::{cpu_saturated, throttling_bursts};
pub use integrity::integrity_failures;
pub use load::{
    driver_saturated, slo_breach_without_errors, throughput_collapse, warm_up,
    warm_up_across_phases,
};
pub use sockets::{churn_cliff, pool_pinned, stream_storm};

/// One finding.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Finding {
    /// Stable kind: `causal_chain`, `churn_cliff`, `cpu_saturated`, `throttling_bursts`,
    /// `throughput_collapse`, `pool_pinned`, `slo_breach_without_errors`, `driver_saturated`,
    /// `warm_up`, `stream_storm`, `target_unreachable`, `integrity_failures`, `latency_not_cpu`.
    pub kind: String,
    /// One line, with the numbers.
    pub title: String,
    /// What it means and what to do.
    pub detail: String,
    /// The report rows it rests on; every number of the title is in them.
    pub evidence: Vec<String>,
    /// The finding's numbers by name (`connects_per_s`, `time_wait_peak`, …), for tools.
    #[serde(default)]
    pub numbers: BTreeMap<String, f64>,
    /// The phase it is about, when it is about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The container it is about, when it is about one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
}

impl Finding {
    fn new(kind: &str, title: String, detail: impl Into<String>, evidence: Vec<String>) -> Self {
        Self {
            kind: kind.into(),
            title,
            detail: detail.into(),
            evidence,
            numbers: BTreeMap::new(),
            phase: None,
            container: None,
        }
    }

    fn number(mut self, name: &str, v: f64) -> Self {
        self.numbers.insert(name.into(), v);
        self
    }

    fn in_phase(mut self, phase: &str) -> Self {
        self.phase = Some(phase.into());
        self
    }

    fn about(mut self, container: &str) -> Self {
        self.container = Some(container.into());
        self
    }
}

/// A count as findings write it: digits, no separators, so the same figure reads the same
/// in a title and in its evidence.
pub(crate) fn n(v: u64) -> String {
    v.to_string()
}

/// Runs every detector; a causal chain, when the findings make one, comes first.
pub fn detect(r: &Report, d: &RunData) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(target_unreachable(d));
    out.extend(churn_cliff(r, d));
    out.extend(cpu_saturated(r));
    out.extend(throttling_bursts(r));
    out.extend(throughput_collapse(r));
    out.extend(driver_saturated(r));
    let warm = warm_up(d);
    out.extend(warm_up_across_phases(r, &warm));
    out.extend(warm);
    out.extend(slo_breach_without_errors(r));
    out.extend(pool_pinned(r, d));
    out.extend(stream_storm(r, d));
    out.extend(integrity_failures(r, d));
    out.extend(latency_not_cpu(r));
    if let Some(c) = causal_chain(r, &out) {
        out.insert(0, c);
    }
    out
}

#[cfg(test)]
mod tests;
