//! What a seeding did: rows per table inserted or removed, and the seedings a database holds.

use std::time::Duration;

use herd_model::{CleanupRecord, SeedRecord, TableCount};

/// Rows per table, in template order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRows {
    /// The table.
    pub table: String,
    /// Rows inserted or deleted.
    pub rows: u64,
}

/// What a seeding inserted.
#[derive(Debug, Clone)]
pub struct Seeded {
    /// The seeding's id in `herd_seedings`.
    pub id: i64,
    /// Durable accounts.
    pub accounts: u64,
    /// Guests.
    pub guests: u64,
    /// Rows per table.
    pub tables: Vec<TableRows>,
    /// Wall time, tracking included.
    pub elapsed: Duration,
}

fn counts(t: &[TableRows]) -> Vec<TableCount> {
    t.iter()
        .map(|t| TableCount {
            table: t.table.clone(),
            rows: t.rows,
        })
        .collect()
}

impl Seeded {
    /// The store's `seed` row for it: counts, table names and time, never the URL.
    pub fn record(&self) -> SeedRecord {
        SeedRecord {
            id: self.id,
            accounts: self.accounts,
            guests: self.guests,
            tables: counts(&self.tables),
            seconds: self.elapsed.as_secs_f64(),
        }
    }

    /// Rows inserted into the target's tables (herd's own tracking rows not counted).
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|t| t.rows).sum()
    }

    /// One line for the run's output.
    pub fn line(&self, db: &str) -> String {
        let per: Vec<String> = self
            .tables
            .iter()
            .map(|t| format!("{} {}", t.table, t.rows))
            .collect();
        format!(
            "seeding {}: {} accounts + {} guests, {} rows ({}) into {db} in {:.2} s ({:.0} rows/s)",
            self.id,
            self.accounts,
            self.guests,
            self.rows(),
            per.join(", "),
            self.elapsed.as_secs_f64(),
            self.rows() as f64 / self.elapsed.as_secs_f64().max(1e-9)
        )
    }
}

/// What a cleanup removed.
#[derive(Debug, Clone)]
pub struct Cleaned {
    /// The seeding removed.
    pub id: i64,
    /// Rows deleted per table, in deletion order.
    pub tables: Vec<TableRows>,
    /// Rows herd recorded but found already gone (the target deleted them, or a cascade
    /// from an earlier table did).
    pub gone: u64,
    /// Wall time.
    pub elapsed: Duration,
}

impl Cleaned {
    /// The store's `seed_cleanup` row for it.
    pub fn record(&self) -> CleanupRecord {
        CleanupRecord::Removed {
            tables: counts(&self.tables),
            gone: self.gone,
            seconds: self.elapsed.as_secs_f64(),
        }
    }

    /// Rows deleted from the target's tables.
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|t| t.rows).sum()
    }

    /// One line for the output.
    pub fn line(&self) -> String {
        let per: Vec<String> = self
            .tables
            .iter()
            .map(|t| format!("{} {}", t.table, t.rows))
            .collect();
        let gone = if self.gone > 0 {
            format!("; {} recorded rows were already gone", self.gone)
        } else {
            String::new()
        };
        format!(
            "removed seeding {}: {} rows ({}) in {:.2} s{gone}",
            self.id,
            self.rows(),
            per.join(", "),
            self.elapsed.as_secs_f64()
        )
    }
}

/// One recorded seeding.
#[derive(Debug, Clone)]
pub struct Seeding {
    /// Its id.
    pub id: i64,
    /// The scenario it came from.
    pub scenario: String,
    /// When it started, ms since the epoch.
    pub started_unix_ms: i64,
    /// Durable accounts.
    pub accounts: i64,
    /// Guests.
    pub guests: i64,
    /// `seeding` while (or if interrupted while) inserting, `seeded` once complete.
    pub status: String,
    /// Rows herd recorded for it.
    pub rows: i64,
}
