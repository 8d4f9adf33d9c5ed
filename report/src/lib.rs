//! herd's reports: one run's recorded rows ([`RunData`], read from a run store by herd-store)
//! turned into tables, a timeline and findings ([`Report::build`], pure functions), and
//! written as Markdown, a self-contained HTML page and JSON (schema in
//! `docs/report.schema.json`); two runs compared ([`compare`]). Every cell holds a value or
//! says why it has none. No runtime, no database, no command line here: everything is
//! tested on data built in memory.

pub mod chart;
pub mod compare;
pub mod doc;
pub mod export;
pub mod findings;
pub mod gate;
pub mod html;
pub mod markdown;
pub mod model;
pub mod play;
pub mod sections;
pub mod seeding;
#[cfg(test)]
mod snapshot_tests;
pub mod units;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use herd_driver::report::{IntervalReport, PhaseReport, RunReport};
use herd_probe::sample::Interval;
pub use model::{DEFAULT_PAIR_ROWS, Report};

/// One run's header, as its store keeps it.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct RunMeta {
    /// Run id in its store.
    pub id: i64,
    /// A name for reports (scenario file stem unless given).
    pub name: String,
    /// The scenario file.
    pub scenario: String,
    /// Wall-clock start, ms since the epoch.
    pub started_unix_ms: i64,
    /// CLOCK_MONOTONIC at start, ns: driver interval ends are offsets from it.
    pub mono_start_ns: i64,
    /// Wall-clock end, if the run finished.
    pub finished_unix_ms: Option<i64>,
    /// `running`, `finished`, `stopped` (Ctrl-C) or `failed`.
    pub status: String,
    /// The shards that recorded the run (`herd run --shard I/N`); empty for a run of one
    /// process.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardInfo>,
}

/// One shard of a sharded run, as the store registered it and what it recorded.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ShardInfo {
    /// Its index, 0-based.
    pub index: u32,
    /// The run's number of shards.
    pub count: u32,
    /// The host it ran on.
    pub host: String,
    /// Its pid there.
    pub pid: u32,
    /// `running`, `finished`, `stopped`, `failed`, or `interrupted` when its process is gone.
    pub status: String,
    /// When its plan's clock started (wall clock, ns since the epoch), once it did: on the run
    /// store's clock when `clock_ahead_ns` is known, else on its host's.
    pub started_unix_ns: Option<i64>,
    /// How far its host's wall clock read ahead of the run store's when it started (ns;
    /// negative: behind); shards time their common start on the store's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_ahead_ns: Option<i64>,
    /// Driver intervals it recorded.
    pub intervals: u64,
    /// Phase totals it recorded.
    pub phases: u64,
    /// True when its final report is stored (it ran to the end).
    pub finished: bool,
}

/// Everything recorded for one run.
#[derive(Clone, Debug)]
pub struct RunData {
    /// The run's header.
    pub meta: RunMeta,
    /// The driver's phase totals, in order.
    pub phases: Vec<PhaseReport>,
    /// Driver intervals, in order.
    pub driver: Vec<IntervalReport>,
    /// Probe intervals, in order.
    pub probe: Vec<Interval>,
    /// Why the probe has no intervals, if it did not run.
    pub probe_missing: Option<String>,
    /// The driver's final report (absent when the run was killed).
    pub final_report: Option<RunReport>,
    /// The scenario's service-level objectives.
    pub slo: Vec<herd_driver::scenario::Slo>,
    /// What `herd run` seeded before the load, if the scenario has a `[seed]`.
    pub seeded: Option<seeding::SeedRecord>,
    /// Each op's expected outcomes: part of normal play, counted apart from `ok` and errors.
    pub expected: std::collections::BTreeMap<String, Vec<herd_driver::Outcome>>,
    /// What became of the seeded rows (absent until the cleanup is recorded).
    pub seed_cleanup: Option<seeding::CleanupRecord>,
}

/// What [`write_report`] wrote.
pub struct Written {
    /// The files.
    pub files: Vec<PathBuf>,
    /// True when an SLO of the scenario failed.
    pub slo_failed: bool,
    /// Each broken objective in words ([`broken_objectives`]).
    pub broken: Vec<String>,
}

/// Each objective a phase broke, in words: op, phase, objective, measured value and limit
/// (`game.state in step 2: p99 < 500ms broken: measured 812ms, limit 500ms`).
pub fn broken_objectives(report: &Report) -> Vec<String> {
    report
        .slo
        .iter()
        .filter(|s| !s.pass)
        .map(|s| {
            let show = |v: f64| {
                if s.objective.starts_with("errors") {
                    units::percent(v * 100.0)
                } else {
                    herd_driver::units::latency(v.round() as u64)
                }
            };
            format!(
                "{} in {}: `{}` broken: measured {}, limit {}",
                s.op,
                s.phase,
                s.objective,
                show(s.measured),
                show(s.limit)
            )
        })
        .collect()
}

/// Writes a built report's files into `dir`.
pub fn write_report(report: &Report, dir: &Path) -> Result<Written> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let base = dir.join(format!("run-{}", report.run.id));
    let md = base.with_extension("md");
    std::fs::write(&md, markdown::render(report))
        .with_context(|| format!("writing {}", md.display()))?;
    let html = base.with_extension("html");
    std::fs::write(&html, html::render(report))
        .with_context(|| format!("writing {}", html.display()))?;
    let json = base.with_extension("json");
    std::fs::write(&json, serde_json::to_string_pretty(report)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let ops = dir.join(format!("run-{}-ops.csv", report.run.id));
    std::fs::write(&ops, export::csv::ops(report))
        .with_context(|| format!("writing {}", ops.display()))?;
    let timeline = dir.join(format!("run-{}-timeline.csv", report.run.id));
    std::fs::write(&timeline, export::csv::timeline(report))
        .with_context(|| format!("writing {}", timeline.display()))?;
    Ok(Written {
        files: vec![md, html, json, ops, timeline],
        slo_failed: report.slo.iter().any(|s| !s.pass),
        broken: broken_objectives(report),
    })
}

/// The JSON schema of [`Report`], as committed in `docs/report.schema.json`.
pub fn schema() -> String {
    let schema = schemars::schema_for!(Report);
    serde_json::to_string_pretty(&schema).expect("a schema serializes") + "\n"
}

#[cfg(test)]
mod tests {
    /// The committed schema is the contract for JSON consumers: a change to the report's
    /// shape must come with a regenerated schema (`UPDATE_SCHEMA=1 cargo test -p herd-report schema`).
    #[test]
    fn the_committed_schema_matches_the_report_type() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/report.schema.json");
        let now = super::schema();
        if std::env::var_os("UPDATE_SCHEMA").is_some() {
            std::fs::write(path, &now).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == now,
            "docs/report.schema.json is out of date; regenerate it with UPDATE_SCHEMA=1 cargo test -p herd-report schema"
        );
    }

    /// Likewise for `compare-A-B.json`, which CI jobs read for their own gates.
    #[test]
    fn the_committed_compare_schema_matches_the_comparison_type() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/compare.schema.json");
        let now = super::compare::schema();
        if std::env::var_os("UPDATE_SCHEMA").is_some() {
            std::fs::write(path, &now).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == now,
            "docs/compare.schema.json is out of date; regenerate it with UPDATE_SCHEMA=1 cargo test -p herd-report schema"
        );
    }
}
