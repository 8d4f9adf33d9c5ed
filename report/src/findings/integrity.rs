//! Findings about what the responses carried: checks that failed (a body whose sha256 is not
//! the digest it was fetched by, a status or JSON value other than the one demanded), by op
//! and by the resource they were about. Seed 004 validated every image it read; a corrupted
//! layer is not load, and it must not hide in an error share.

use std::collections::BTreeMap;

use super::{Finding, n};
use crate::model::Report;
use herd_model::Outcome;
use herd_model::RunData;

/// Resources listed in the evidence; the rest are counted in one row.
const SHOWN: usize = 10;

/// Responses that failed their op's check: the count per op and phase from the op table, and
/// per resource (request path) from the driver's run totals when the run finished.
pub fn integrity_failures(r: &Report, d: &RunData) -> Option<Finding> {
    let mut by_op: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut evidence = Vec::new();
    for row in &r.ops {
        let failed = row
            .outcomes
            .get(&Outcome::CheckFailed)
            .copied()
            .unwrap_or(0);
        if failed == 0 {
            continue;
        }
        let e = by_op.entry(row.op.as_str()).or_default();
        e.0 += failed;
        e.1 += row.count;
        evidence.push(format!(
            "{} in {}: {} check_failed of {} responses",
            row.op,
            row.phase,
            n(failed),
            n(row.count)
        ));
    }
    let total: u64 = by_op.values().map(|v| v.0).sum();
    if total == 0 {
        return None;
    }
    for (op, (failed, count)) in &by_op {
        evidence.push(format!(
            "{op} over the run: {} check_failed of {} responses",
            n(*failed),
            n(*count)
        ));
    }
    let failures = d
        .final_report
        .as_ref()
        .map(|f| f.play.check_failures.clone())
        .unwrap_or_default();
    let resources = failures.len();
    let mut sorted = failures;
    sorted.sort_by(|a, b| b.count.cmp(&a.count).then(a.resource.cmp(&b.resource)));
    for c in sorted.iter().take(SHOWN) {
        evidence.push(format!("{} {}: {} failed", c.op, c.resource, n(c.count)));
    }
    if resources > SHOWN {
        evidence.push(format!(
            "{} more resources failed",
            n((resources - SHOWN) as u64)
        ));
    }
    if resources > 0 {
        evidence.push(format!("{} distinct resources failed", n(resources as u64)));
    }
    let ops: Vec<String> = by_op
        .iter()
        .map(|(op, (f, _))| format!("{op} {}", n(*f)))
        .collect();
    let title = if resources > 0 {
        format!(
            "{} responses failed their integrity check, on {} distinct resources ({})",
            n(total),
            n(resources as u64),
            ops.join(", ")
        )
    } else {
        format!(
            "{} responses failed their integrity check ({})",
            n(total),
            ops.join(", ")
        )
    };
    evidence.insert(
        0,
        format!("check_failed over the run: {} responses", n(total)),
    );
    Some(
        Finding::new(
            "integrity_failures",
            title,
            "These responses came back but did not carry what the op's check demands: a body \
             whose sha256 differs from the digest it was fetched by is damaged data (on the \
             server's disk, in a cache or in transit), not a symptom of load, and a client \
             would have stored it. The resources are listed with how often each failed: one \
             that fails every time is damaged at rest; re-fetch it, compare with the stored \
             copy, and repair or re-push it.",
            evidence,
        )
        .number("check_failed", total as f64)
        .number("resources", resources as f64),
    )
}
