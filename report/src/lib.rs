//! Reports: one run read back from the store, turned into tables, a timeline and findings,
//! and written as Markdown, a self-contained HTML page and JSON (schema in
//! `docs/report.schema.json`). Every cell holds a value or says why it has none.

pub mod compare;
pub mod findings;
pub mod html;
pub mod markdown;
pub mod model;
pub mod play;
pub mod seeding;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use herd_driver::report::{IntervalReport, RunReport, StepReport};
use herd_probe::sample::Interval;
pub use model::Report;

use crate::store::{RunMeta, Source, Store};

/// Everything recorded for one run.
#[derive(Clone, Debug)]
pub struct RunData {
    /// The run's header.
    pub meta: RunMeta,
    /// Driver step summaries, in order.
    pub steps: Vec<StepReport>,
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
    /// What became of the seeded rows (absent until the cleanup is recorded).
    pub seed_cleanup: Option<seeding::CleanupRecord>,
}

impl RunData {
    /// Reads run `id` (latest when None) from the store.
    pub async fn load(store: &Store, id: Option<i64>) -> Result<Self> {
        let meta = store.meta(id).await?;
        let probe_missing: Vec<String> = store.rows(meta.id, Source::ProbeMissing).await?;
        let mut finals: Vec<RunReport> = store.rows(meta.id, Source::Report).await?;
        let slo: Vec<Vec<herd_driver::scenario::Slo>> = store.rows(meta.id, Source::Slo).await?;
        let mut seeded: Vec<seeding::SeedRecord> = store.rows(meta.id, Source::Seed).await?;
        let mut cleanup: Vec<seeding::CleanupRecord> =
            store.rows(meta.id, Source::SeedCleanup).await?;
        Ok(Self {
            steps: store.rows(meta.id, Source::Step).await?,
            driver: store.rows(meta.id, Source::Driver).await?,
            probe: store.rows(meta.id, Source::Probe).await?,
            probe_missing: probe_missing.into_iter().next(),
            final_report: finals.pop(),
            slo: slo.into_iter().next().unwrap_or_default(),
            seeded: seeded.pop(),
            seed_cleanup: cleanup.pop(),
            meta,
        })
    }
}

/// What [`write_run`] wrote.
pub struct Written {
    /// The files.
    pub files: Vec<PathBuf>,
    /// True when an SLO of the scenario failed.
    pub slo_failed: bool,
}

/// Builds run `id`'s report and writes `run-<id>.{md,json}` into `dir`.
pub async fn write_run(store: &Store, id: i64, dir: &Path) -> Result<Written> {
    let data = RunData::load(store, Some(id)).await?;
    let report = Report::build(&data);
    write_report(&report, dir)
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
    Ok(Written {
        files: vec![md, html, json],
        slo_failed: report.slo.iter().any(|s| !s.pass),
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
    /// shape must come with a regenerated schema (`UPDATE_SCHEMA=1 cargo test -p herd schema`).
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
            "docs/report.schema.json is out of date; regenerate it with UPDATE_SCHEMA=1 cargo test -p herd schema"
        );
    }
}
