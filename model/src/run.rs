//! A run as its store keeps it: the header ([`RunMeta`]), its shards ([`ShardInfo`]) and every
//! row recorded for it ([`RunData`]), which the report reads.

use std::collections::BTreeMap;

use crate::{
    driver::{DriverInterval, PhaseResult, RunResult, Slo},
    outcome::Outcome,
    probe::ProbeInterval,
    seeding::{CleanupRecord, SeedRecord},
};

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
    pub phases: Vec<PhaseResult>,
    /// Driver intervals, in order.
    pub driver: Vec<DriverInterval>,
    /// Probe intervals, in order.
    pub probe: Vec<ProbeInterval>,
    /// Why the probe has no intervals, if it did not run.
    pub probe_missing: Option<String>,
    /// The driver's final report (absent when the run was killed).
    pub final_report: Option<RunResult>,
    /// The scenario's service-level objectives.
    pub slo: Vec<Slo>,
    /// What `herd run` seeded before the load, if the scenario has a `[seed]`.
    pub seeded: Option<SeedRecord>,
    /// Each op's expected outcomes: part of normal play, counted apart from `ok` and errors.
    pub expected: BTreeMap<String, Vec<Outcome>>,
    /// What became of the seeded rows (absent until the cleanup is recorded).
    pub seed_cleanup: Option<CleanupRecord>,
}
