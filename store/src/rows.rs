//! A run's rows: which timeline each belongs to ([`Source`]), one row and every row of a run
//! held in memory ([`Row`], [`Rows`]), and one run's data from its shards' ([`merge_shards`]).

use std::{collections::BTreeMap, path::Path};

use anyhow::{Context as _, Result};
use herd_model::{CleanupRecord, Outcome, RunData, RunMeta, RunResult, SeedRecord, Slo};

/// Which timeline a row belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A driver interval ([`herd_model::DriverInterval`]).
    Driver,
    /// A driver phase's totals ([`herd_model::PhaseResult`]).
    Phase,
    /// The driver's final result ([`herd_model::RunResult`]).
    Report,
    /// A probe interval ([`herd_model::ProbeInterval`]).
    Probe,
    /// Why the probe did not run (a JSON string).
    ProbeMissing,
    /// The scenario's service-level objectives (`Vec<`[`herd_model::Slo`]`>`).
    Slo,
    /// What `herd run` seeded before the load ([`herd_model::SeedRecord`]).
    Seed,
    /// What became of the seeded rows after it ([`herd_model::CleanupRecord`]).
    SeedCleanup,
    /// Each op's expected outcomes (`BTreeMap<String, Vec<`[`herd_model::Outcome`]`>>`).
    Expected,
    /// The process recording the run ([`Owner`]), to tell a live run from an interrupted one.
    Owner,
}

impl Source {
    /// The sources a report reads.
    pub(crate) const REPORTED: [Source; 9] = [
        Source::Driver,
        Source::Phase,
        Source::Report,
        Source::Probe,
        Source::ProbeMissing,
        Source::Slo,
        Source::Seed,
        Source::SeedCleanup,
        Source::Expected,
    ];

    /// The name rows of this source carry in the store.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Driver => "driver",
            Source::Phase => "phase",
            Source::Report => "report",
            Source::Probe => "probe",
            Source::ProbeMissing => "probe_missing",
            Source::Slo => "slo",
            Source::Seed => "seed",
            Source::SeedCleanup => "seed_cleanup",
            Source::Expected => "expected",
            Source::Owner => "owner",
        }
    }
}

impl Source {
    /// True when a stored row named `name` is of this source: phase rows were stored as
    /// `step` before herd called them phases, and those runs stay readable.
    pub fn matches(self, name: &str) -> bool {
        name == self.as_str() || (self == Source::Phase && name == "step")
    }
}

/// The source of a node probe's rows is this and the node's name: each node numbers its
/// rows apart from the others, and old readers skip the rows they do not know.
pub const NODE_PROBE: &str = "probe@";

/// One stored row, as [`Rows`] keeps it in memory and in its JSON file.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Row {
    /// [`Source::as_str`].
    pub source: String,
    /// Order within its source.
    pub seq: u64,
    /// CLOCK_MONOTONIC ns (0 for rows without a time).
    pub at_ns: u64,
    /// The row itself.
    pub body: serde_json::Value,
}

/// Every row of one run held in memory: what `herd run` writes to a JSON file when the store
/// went down and stayed down, and what `herd import` reads back into a store.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Rows {
    /// The run's header.
    pub meta: RunMeta,
    /// Its rows, in the order they were recorded.
    pub rows: Vec<Row>,
    /// Set when these are only the run's later rows (a long run whose store went down: the
    /// earlier ones are in that store): the run they continue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<Continues>,
}

/// The run (and writer) a set of saved rows continues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Continues {
    /// The run's id in the store it was recorded in.
    pub run: i64,
    /// The shard whose rows these are (0 for a run of one process).
    pub shard: u32,
}

/// Rows as the store holds them: each body its JSON text, decoded once, straight into the
/// type its source has (no JSON tree in between: for an hour's rows, half the time and most
/// of the memory of `herd report`).
pub(crate) struct TextRows {
    pub(crate) meta: RunMeta,
    /// (source, seq, body)
    pub(crate) rows: Vec<(String, u64, String)>,
}

/// Rows that decode by source.
trait Decode {
    fn meta(&self) -> &RunMeta;
    fn of<T: serde::de::DeserializeOwned>(&self, source: Source) -> Result<Vec<T>>;
}

impl Decode for TextRows {
    fn meta(&self) -> &RunMeta {
        &self.meta
    }

    fn of<T: serde::de::DeserializeOwned>(&self, source: Source) -> Result<Vec<T>> {
        let mut rows: Vec<&(String, u64, String)> =
            self.rows.iter().filter(|r| source.matches(&r.0)).collect();
        rows.sort_by_key(|r| r.1);
        rows.iter()
            .map(|(name, seq, body)| {
                serde_json::from_str(body).with_context(|| {
                    format!("run {}: {name} row {seq} does not decode", self.meta.id)
                })
            })
            .collect()
    }
}

impl TextRows {
    /// Everything a report needs, from these rows.
    pub(crate) fn run_data(self) -> Result<RunData> {
        run_data(&self)
    }
}

impl Decode for Rows {
    fn meta(&self) -> &RunMeta {
        &self.meta
    }

    fn of<T: serde::de::DeserializeOwned>(&self, source: Source) -> Result<Vec<T>> {
        let mut rows: Vec<&Row> = self
            .rows
            .iter()
            .filter(|r| source.matches(&r.source))
            .collect();
        rows.sort_by_key(|r| r.seq);
        rows.iter()
            .map(|r| {
                // From the borrowed value: no copy of every row's body.
                T::deserialize(&r.body).with_context(|| {
                    format!(
                        "run {}: {} row {} does not decode",
                        self.meta.id, r.source, r.seq
                    )
                })
            })
            .collect()
    }
}

impl Rows {
    /// Everything a report needs, from these rows.
    pub fn run_data(self) -> Result<RunData> {
        run_data(&self)
    }

    /// Writes the rows as JSON to `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        let write = || -> Result<()> {
            let mut w = std::io::BufWriter::new(std::fs::File::create(path)?);
            serde_json::to_writer(&mut w, self)?;
            std::io::Write::flush(&mut w)?;
            Ok(())
        };
        write().with_context(|| format!("writing the run's rows to {}", path.display()))
    }

    /// Reads rows written by [`Rows::save`].
    pub fn load(path: &Path) -> Result<Self> {
        let file = std::fs::File::open(path)
            .with_context(|| format!("opening saved rows {}", path.display()))?;
        serde_json::from_reader(std::io::BufReader::new(file))
            .with_context(|| format!("{} holds no saved herd run", path.display()))
    }
}

/// Everything a report needs, from `rows`.
fn run_data(rows: &impl Decode) -> Result<RunData> {
    let probe_missing: Vec<String> = rows.of(Source::ProbeMissing)?;
    let mut finals: Vec<RunResult> = rows.of(Source::Report)?;
    let slo: Vec<Vec<Slo>> = rows.of(Source::Slo)?;
    let mut seeded: Vec<SeedRecord> = rows.of(Source::Seed)?;
    let mut cleanup: Vec<CleanupRecord> = rows.of(Source::SeedCleanup)?;
    let mut expected: Vec<BTreeMap<String, Vec<Outcome>>> = rows.of(Source::Expected)?;
    // Runs recorded before the row existed: the driver's final report carries it too.
    let expected = expected
        .pop()
        .or_else(|| finals.last().map(|r| r.expected.clone()))
        .unwrap_or_default();
    Ok(RunData {
        phases: rows.of(Source::Phase)?,
        driver: rows.of(Source::Driver)?,
        probe: rows.of(Source::Probe)?,
        probe_missing: probe_missing.into_iter().next(),
        final_report: finals.pop(),
        slo: slo.into_iter().next().unwrap_or_default(),
        seeded: seeded.pop(),
        seed_cleanup: cleanup.pop(),
        expected,
        meta: rows.meta().clone(),
    })
}

/// One run's data from the data of each of its shards: phase totals and intervals merged
/// exactly ([`herd_model::merge`]), probe intervals of every node, the final report merged
/// when every shard wrote one (a shard that died leaves the run unfinished).
pub fn merge_shards(meta: RunMeta, parts: Vec<RunData>) -> Result<RunData> {
    let phases = herd_model::merge::phases(parts.iter().map(|p| p.phases.as_slice()))?;
    let driver = herd_model::merge::intervals(parts.iter().map(|p| p.driver.as_slice()))?;
    let all_finished = parts.len() == meta.shards.len() && meta.shards.iter().all(|s| s.finished);
    let finals: Vec<RunResult> = parts
        .iter()
        .filter_map(|p| p.final_report.clone())
        .collect();
    let final_report = if all_finished && !finals.is_empty() {
        Some(herd_model::merge::runs(&finals)?)
    } else {
        None
    };
    let mut probe: Vec<_> = parts.iter().flat_map(|p| p.probe.clone()).collect();
    probe.sort_by_key(|iv| iv.at_ns);
    // Every shard records the scenario's objectives and expected outcomes alike.
    let base = parts
        .into_iter()
        .max_by_key(|p| !p.slo.is_empty() || !p.expected.is_empty());
    Ok(match base {
        Some(base) => RunData {
            phases,
            driver,
            probe,
            final_report,
            meta,
            ..base
        },
        None => RunData {
            meta,
            phases,
            driver,
            probe,
            probe_missing: None,
            final_report,
            slo: Vec::new(),
            seeded: None,
            expected: BTreeMap::new(),
            seed_cleanup: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs recorded before herd called phases phases stored their rows as `step`: they
    /// still read, beside rows written as `phase`.
    #[test]
    fn phase_rows_stored_as_step_still_read() {
        let meta = RunMeta {
            id: 1,
            name: "old".into(),
            scenario: "old.toml".into(),
            started_unix_ms: 0,
            mono_start_ns: 0,
            finished_unix_ms: None,
            status: "finished".into(),
            shards: Vec::new(),
        };
        let phase = |name: &str| {
            serde_json::json!({
                "phase": name, "step": 0, "players": 1, "start_ms": 0, "duration_ms": 1000,
                "ops": [], "connects": 0, "reconnects": 0, "connect_errors": 0
            })
        };
        let row = |source: &str, seq, body| Row {
            source: source.into(),
            seq,
            at_ns: 0,
            body,
        };
        let rows = Rows {
            meta,
            rows: vec![
                row("step", 0, phase("step 1")),
                row("phase", 1, phase("step 2")),
            ],
            continues: None,
        };
        let data = rows.run_data().unwrap();
        let names: Vec<&str> = data.phases.iter().map(|p| p.phase.as_str()).collect();
        assert_eq!(names, ["step 1", "step 2"]);
        assert!(Source::Phase.matches("step") && Source::Phase.matches("phase"));
        assert!(!Source::Driver.matches("step"));
    }
}
