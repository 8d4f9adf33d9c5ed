//! herd's reports: one run's recorded rows ([`herd_model::RunData`], read from a run store by herd-store)
//! turned into tables, a timeline and findings ([`Report::build`], pure functions), and
//! written as Markdown, a self-contained HTML page and JSON (schema in
//! `docs/report.schema.json`); two runs compared ([`compare`]). Every cell holds a value or
//! says why it has none. No runtime, no database, no command line here: everything is
//! tested on data built in memory.
#![deny(missing_docs)]

mod build;
pub mod chart;
pub mod compare;
pub mod doc;
pub mod export;
pub mod findings;
pub mod gate;
pub mod html;
pub mod markdown;
pub mod model;
pub mod sections;
pub mod seeding;
#[cfg(test)]
mod snapshot_tests;
pub mod text;
pub mod units;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
pub use model::{DEFAULT_PAIR_ROWS, Report};

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
                    crate::units::latency(v.round() as u64)
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

/// Writes `contents` to `path` whole or not at all: into a temporary file beside it, renamed
/// over `path` once complete, so that a process killed mid-write (SIGKILL, a crash) or a
/// write that fails (a full disk, a file-size limit) never leaves half a file, and a reader
/// sees the old file or the new one. The temporary file is removed on failure.
pub fn write_whole(path: &Path, contents: impl AsRef<[u8]>) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let written = std::fs::write(&tmp, contents).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// [`write_whole`], its error naming the file.
pub(crate) fn write_file(path: &Path, contents: impl AsRef<[u8]>) -> Result<()> {
    write_whole(path, contents).with_context(|| format!("writing {}", path.display()))
}

/// Writes a built report's files into `dir`, each whole or not at all ([`write_whole`]).
pub fn write_report(report: &Report, dir: &Path) -> Result<Written> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let base = dir.join(format!("run-{}", report.run.id));
    let md = base.with_extension("md");
    write_file(&md, crate::sections::markdown(report))?;
    let html = base.with_extension("html");
    write_file(&html, crate::sections::html(report))?;
    let json = base.with_extension("json");
    write_file(&json, serde_json::to_string_pretty(report)?)?;
    let ops = dir.join(format!("run-{}-ops.csv", report.run.id));
    write_file(&ops, export::csv::ops(report))?;
    let timeline = dir.join(format!("run-{}-timeline.csv", report.run.id));
    write_file(&timeline, export::csv::timeline(report))?;
    let waits = dir.join(format!("run-{}-waits.csv", report.run.id));
    write_file(&waits, export::waits_csv::waits(report))?;
    let retransmits = dir.join(format!("run-{}-retransmits.csv", report.run.id));
    write_file(&retransmits, export::waits_csv::retransmits(report))?;
    Ok(Written {
        files: vec![md, html, json, ops, timeline, waits, retransmits],
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
