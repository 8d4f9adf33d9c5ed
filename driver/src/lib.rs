//! herd's load driver: virtual players against a service over HTTP/1.1 or h2c, each with
//! its own connection (or a shared pool), run through a plan of steps, soak, open-model rate
//! steps and a route catalog ([`shapes`]) beside a hammer, with every op's latency in
//! HdrHistograms per op × phase × outcome.
//!
//! - [`Scenario`] loads and checks a TOML scenario (`docs/scenario.md`), with `--set`
//!   overrides, and points every error at its file, line, column and key.
//! - [`run`] runs the file's players; [`run_with`] runs players of your own ([`Player`]).
//! - Results arrive as a stream of [`DriverEvent`]s and as the final [`RunReport`];
//!   [`text`] renders them for a terminal.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let scenario = herd_driver::Scenario::load("game.toml".as_ref(), &["step[0].players=50".into()])?;
//! let report = herd_driver::run(scenario, herd_driver::RunOptions::default()).await?;
//! print!("{}", herd_driver::text::table(&report));
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod conns;
#[doc(hidden)]
pub mod fuzzing;
mod groups;
pub mod limits;
pub mod measure;
pub mod merge;
pub mod outcome;
pub mod player;
pub mod report;
mod run;
pub mod scenario;
pub mod shapes;
pub mod shard;
mod stream;
pub mod template;
pub mod text;
pub mod transport;
pub mod units;

pub use outcome::{Outcome, TransportErrorKind};
pub use player::{FilePlayer, Player, Reply, Session, Stopped};
pub use report::{DriverEvent, RunReport};
pub use run::{DriverError, RunOptions, run, run_with};
pub use scenario::{Scenario, ScenarioError};
pub use shard::{Shard, ShardError};
