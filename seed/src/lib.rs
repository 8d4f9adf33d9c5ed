//! herd's seeding, in one place: the accounts and sessions herd inserts into the target's own
//! database before a run, and removes after it.
//!
//! - [`spec`]: the `[seed]` section checked and its `INSERT` templates compiled into
//!   multi-row statements with bound parameters (no database needed; the scenario loader in
//!   herd-driver uses it to check a scenario file).
//! - [`db`] (feature `db`, on by default): the executor, which inserts in batches, records
//!   every row it adds in the target's `herd_seeded` table and removes exactly those.
//! - [`secret`]: the one URL scrubber every message that shows a database URL goes through.
//! - [`seeded`]: what a seeding or a cleanup did.
#![deny(missing_docs)]

#[cfg(feature = "db")]
pub mod db;
pub mod secret;
pub mod seeded;
pub mod spec;

#[cfg(feature = "db")]
pub use db::{RunSeeding, SeedDb};
pub use seeded::{Cleaned, Seeded, Seeding, TableRows};
pub use spec::{SeedSpec, SpecError};
