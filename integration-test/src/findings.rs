//! The report's findings over probe rows alone: what `herd report` says of a run whose only
//! rows are the probe's (no driver, no plan: every interval is the run's), for tests that
//! check a finding against the kernel truth they made.

use herd_model::{ProbeInterval, RunData, RunMeta};
use herd_report::{Report, model::Finding};

/// The findings of a run made of `probe`'s intervals; the run starts where the first
/// interval does.
pub fn of_probe(probe: Vec<ProbeInterval>) -> Vec<Finding> {
    let start = probe
        .iter()
        .map(|iv| iv.at_ns.saturating_sub(iv.interval_ns))
        .min()
        .unwrap_or(0);
    let d = RunData {
        meta: RunMeta {
            id: 0,
            name: "probe".into(),
            scenario: String::new(),
            started_unix_ms: 0,
            mono_start_ns: start as i64,
            finished_unix_ms: None,
            status: "running".into(),
            shards: Vec::new(),
        },
        phases: Vec::new(),
        driver: Vec::new(),
        probe,
        probe_missing: None,
        final_report: None,
        slo: Vec::new(),
        seeded: None,
        seed_cleanup: None,
        expected: Default::default(),
    };
    Report::build(&d).findings
}

/// The kinds of `found`, for messages and membership checks.
pub fn kinds(found: &[Finding]) -> Vec<&str> {
    found.iter().map(|f| f.kind.as_str()).collect()
}
