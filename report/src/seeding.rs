//! What `herd run` seeded before the load and what became of the rows after it, as recorded
//! in the run store (rows `seed` and `seed_cleanup`) and shown in the report's header. The
//! database URL is never recorded: only counts, table names and times.

use serde::{Deserialize, Serialize};

use herd_seed::{Cleaned, Seeded, TableRows};

/// Rows in one table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TableCount {
    /// The table.
    pub table: String,
    /// Rows inserted (or deleted).
    pub rows: u64,
}

fn tables(t: &[TableRows]) -> Vec<TableCount> {
    t.iter()
        .map(|t| TableCount {
            table: t.table.clone(),
            rows: t.rows,
        })
        .collect()
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

impl From<&Seeded> for SeedRecord {
    fn from(s: &Seeded) -> Self {
        Self {
            id: s.id,
            accounts: s.accounts,
            guests: s.guests,
            tables: tables(&s.tables),
            seconds: s.elapsed.as_secs_f64(),
        }
    }
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

impl From<&Cleaned> for CleanupRecord {
    fn from(c: &Cleaned) -> Self {
        Self::Removed {
            tables: tables(&c.tables),
            gone: c.gone,
            seconds: c.elapsed.as_secs_f64(),
        }
    }
}

/// The report's seeding line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Seeding {
    /// What was inserted.
    pub seeded: SeedRecord,
    /// Rows inserted, all tables.
    pub rows: u64,
    /// What became of them; absent when the run ended before its cleanup was recorded.
    pub cleanup: Option<CleanupRecord>,
}

impl Seeding {
    /// Builds the header entry.
    pub fn new(seeded: SeedRecord, cleanup: Option<CleanupRecord>) -> Self {
        Self {
            rows: seeded.tables.iter().map(|t| t.rows).sum(),
            seeded,
            cleanup,
        }
    }

    /// One sentence for the report's header.
    pub fn sentence(&self) -> String {
        let s = &self.seeded;
        let per = |t: &[TableCount]| {
            t.iter()
                .map(|t| format!("{} {}", t.table, t.rows))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let after = match &self.cleanup {
            Some(CleanupRecord::Removed {
                tables,
                gone,
                seconds,
            }) => {
                let n: u64 = tables.iter().map(|t| t.rows).sum();
                let gone = if *gone > 0 {
                    format!("; {gone} recorded rows were already gone")
                } else {
                    String::new()
                };
                format!("removed after the run: {n} rows in {seconds:.2} s{gone}")
            }
            Some(CleanupRecord::Kept) => format!(
                "kept after the run (--keep-seed): remove with `herd seed <scenario> --cleanup --seeding {}`",
                s.id
            ),
            Some(CleanupRecord::AlreadyRemoved) => "already removed when the run ended".to_owned(),
            Some(CleanupRecord::Failed) => format!(
                "the cleanup failed: the rows may still be there (`herd seed <scenario> --cleanup --seeding {}`)",
                s.id
            ),
            None => "cleanup not recorded (the run did not reach it)".to_owned(),
        };
        format!(
            "Seeded before the load (seeding {}): {} accounts + {} guests, {} rows ({}) in {:.2} s; {after}.",
            s.id,
            s.accounts,
            s.guests,
            self.rows,
            per(&s.tables),
            s.seconds
        )
    }
}
