//! The report header's seeding line: what `herd run` seeded before the load (the stored
//! `seed` row) and what became of the rows after it (`seed_cleanup`).

use herd_model::{CleanupRecord, SeedRecord, TableCount};
use serde::{Deserialize, Serialize};

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
