//! One finding of a report: its kind, one line with its numbers, what it means, and the
//! report rows it rests on. The detectors are in `crate::findings`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One finding.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Finding {
    /// Stable kind: `causal_chain`, `churn_cliff`, `cpu_saturated`, `throttling_bursts`,
    /// `throughput_collapse`, `pool_pinned`, `slo_breach_without_errors`, `driver_saturated`,
    /// `warm_up`, `stream_storm`, `target_unreachable`, `integrity_failures`, `latency_not_cpu`,
    /// `oom_killed`, `accept_queue_overflow`, `conntrack_exhaustion`, `packet_loss`,
    /// `cpu_contention`, `memory_pressure`, `nagle_delayed_ack`.
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
    pub(crate) fn new(
        kind: &str,
        title: String,
        detail: impl Into<String>,
        evidence: Vec<String>,
    ) -> Self {
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

    pub(crate) fn number(mut self, name: &str, v: f64) -> Self {
        self.numbers.insert(name.into(), v);
        self
    }

    pub(crate) fn in_phase(mut self, phase: &str) -> Self {
        self.phase = Some(phase.into());
        self
    }

    pub(crate) fn about(mut self, container: &str) -> Self {
        self.container = Some(container.into());
        self
    }
}
