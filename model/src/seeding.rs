//! What `herd run` seeded before the load and what became of the rows after it, as recorded
//! in the run store (rows `seed` and `seed_cleanup`). The database URL is never recorded: only
//! counts, table names and times.

use serde::{Deserialize, Serialize};

/// Rows in one table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TableCount {
    /// The table.
    pub table: String,
    /// Rows inserted (or deleted).
    pub rows: u64,
}

/// The `seed` row: what was inserted before the load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SeedRecord {
    /// The seeding's id in the target database's `herd_seedings`.
    pub id: i64,
    /// Durable accounts.
    pub accounts: u64,
    /// Guests.
    pub guests: u64,
    /// Rows per table, in template order.
    pub tables: Vec<TableCount>,
    /// Wall time of the seeding, seconds.
    pub seconds: f64,
}

/// The `seed_cleanup` row: what became of the seeded rows after the load.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum CleanupRecord {
    /// Removed after the run.
    Removed {
        /// Rows deleted per table, in deletion order.
        tables: Vec<TableCount>,
        /// Recorded rows already gone (deleted by the target or a cascade).
        gone: u64,
        /// Wall time, seconds.
        seconds: f64,
    },
    /// Left in the database (`--keep-seed`).
    Kept,
    /// Someone removed the seeding before the run's cleanup.
    AlreadyRemoved,
    /// The cleanup failed; the rows may still be there.
    Failed,
}
