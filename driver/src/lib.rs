//! herd's load driver: virtual players against a service over HTTP/1.1 or h2c, each with
//! its own connection (or a shared pool), run through a plan of steps, soak, open-model rate
//! steps and a route catalog ([`shapes`]) beside a hammer, with every op's latency in
//! HdrHistograms per op × phase × outcome.
//!
//! - [`Scenario`] loads and checks a TOML scenario (`docs/scenario.md`), with `--set`
//!   overrides, and points every error at its file, line, column and key.
//! - [`run`] runs the file's players; [`run_with`] runs players of your own ([`Player`]).
//! - Results arrive as a stream of [`herd_model::DriverEvent`]s and as the final
//!   [`herd_model::RunResult`], the rows of the record model; herd-report renders them.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let scenario = herd_driver::Scenario::load("game.toml".as_ref(), &["step[0].players=50".into()])?;
//! let result = herd_driver::run(scenario, herd_driver::RunOptions::default()).await?;
//! println!("{} requests, {} connects", result.requests, result.connects);
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

mod conns;
mod groups;
mod grpc;
pub mod limits;
pub mod measure;
pub mod outcome;
pub mod player;
mod run;
pub mod scenario;
pub mod shapes;
mod stream;
pub mod template;
pub mod transport;
pub mod units;
mod ws;

pub use player::{FilePlayer, Player, Reply, Session, Stopped};
pub use run::{DriverError, RunOptions, run, run_with};
pub use scenario::{Scenario, ScenarioError};
