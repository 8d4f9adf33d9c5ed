//! The demo contour's services: a gateway and a backend that herd starts, each in its own
//! container, as the system under test. They reproduce the seeds' game service closely enough
//! that its headline bug is there to find: players hold h2c connections to the gateway (a
//! streamed event channel plus calls), the gateway proxies calls over HTTP/1.1 keep-alive to
//! the backend, and the backend checks sessions and stores moves in SQLite or PostgreSQL.
//!
//! Both services print `ready ADDR` once listening, log nothing per request unless
//! `--verbose`, take every limit from a flag, and exit on SIGTERM/SIGINT after a bounded
//! grace. The API, the schema and the backend pool's semantics are in `docs/contour.md`.
//!
//! This crate is a workload herd drives, not part of the profiler: `herd demo` runs it from
//! the herd binary as the hidden `herd contour` subcommand (cargo feature `demo`, on by
//! default), and its tests run it as the `herd-contour` binary.
#![deny(missing_docs)]

pub mod backend;
pub mod events;
pub mod gateway;
pub mod limiter;
mod serve;
pub mod store;

pub use backend::{Backend, BackendArgs};
pub use gateway::{Gateway, GatewayArgs};

/// The contour's services (`herd contour …`, hidden; herd runs them inside its containers).
#[derive(Debug, clap::Subcommand)]
pub enum ContourCmd {
    /// The gateway: h2c for players (`/v1/subscribe` events, `/v1/call/<op>` calls), proxying
    /// calls to the backend over HTTP/1.1 keep-alive with a bounded idle pool.
    Gateway(GatewayArgs),
    /// The backend: the game's JSON API over HTTP/1.1 keep-alive, sessions and moves in
    /// SQLite or PostgreSQL.
    Backend(BackendArgs),
}

/// Runs a contour service until SIGTERM/SIGINT.
pub fn run(cmd: &ContourCmd) -> anyhow::Result<()> {
    match cmd {
        ContourCmd::Gateway(a) => gateway::run(a),
        ContourCmd::Backend(a) => backend::run(a),
    }
}
