//! The scenario's objectives, checked against every load phase's totals.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ops::Split;
use herd_model::{Outcome, PhaseResult, Slo, SloMetric};

/// One objective checked in one phase.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SloRow {
    /// The phase's name (`step 1`, `rate 2`, …).
    pub phase: String,
    /// Op.
    pub op: String,
    /// The objective as written, e.g. `p99 < 500ms`.
    pub objective: String,
    /// What the phase measured: µs for latencies, a share for errors.
    pub measured: f64,
    /// The limit, in the same unit.
    pub limit: f64,
    /// Whether the phase met it.
    pub pass: bool,
    /// The op's share of errors in the phase (expected outcomes are not errors).
    pub error_share: f64,
}

/// Checks every objective against every load phase's totals. The latencies are the phase's
/// (from its histogram, as the driver computed them); an `errors` objective counts errors
/// only, not the op's expected outcomes.
pub(crate) fn rows(
    slo: &[Slo],
    steps: &[PhaseResult],
    expected: &BTreeMap<String, Vec<Outcome>>,
) -> Vec<SloRow> {
    let mut out = Vec::new();
    for s in steps.iter().filter(|s| s.index.is_some()) {
        for o in slo {
            let Some(op) = s.ops.iter().find(|x| x.op == o.op) else {
                continue;
            };
            let expected = expected.get(&op.op).map_or(&[][..], Vec::as_slice);
            let error_share =
                Split::of(op.outcomes.iter().map(|x| (&x.outcome, x.count)), expected)
                    .error_share();
            let measured = match o.metric {
                SloMetric::P50 => op.latency.p50_us as f64,
                SloMetric::P90 => op.latency.p90_us as f64,
                SloMetric::P99 => op.latency.p99_us as f64,
                SloMetric::P999 => op.latency.p999_us as f64,
                SloMetric::Max => op.latency.max_us as f64,
                SloMetric::Errors => error_share,
            };
            out.push(SloRow {
                phase: s.phase.clone(),
                op: o.op.clone(),
                objective: o.text.clone(),
                measured,
                limit: o.limit,
                pass: measured < o.limit,
                error_share,
            });
        }
    }
    out
}
