//! `cargo xtask bench-driver`: herd's driver against wrk and h2load, side by side in one run.
//!
//! One nginx from Debian, started here with its own config in a temporary directory (never the
//! system service), listens on 127.0.0.1 only: an HTTP/1.1 keep-alive port and an h2c (prior
//! knowledge) port, both answering `200 ok`. nginx is pinned to core 0 and every client to
//! core 1. Each client opens 50 connections and sends one request at a time on each for
//! 10 s; the clients take turns, in an order that rotates every repetition.
//!
//! Measured per run: requests completed (from the client's own output; herd's JSON report)
//! and the client's CPU-seconds (user + system, from `wait4`'s rusage of the client process,
//! so start-up and teardown count too). Reported: CPU-seconds per 100 000 requests and
//! requests/s (median and range over the repetitions), and herd's ratios to wrk (h1) and
//! h2load (h2c).
//!
//! `--scale`: 10 000 herd players, each on its own h2c connection, one call every 5 s,
//! arriving over 10 s and then held 60 s; reported: the driver's peak RSS, CPU, ops by outcome
//! and connects. With `--shards N` the shards take the cores in turn from core 1 on (so one
//! runs beside nginx on a 2-core host), each alone on its core.
//!
//! nginx and the temporary directory are removed at the end, on error and on Ctrl-C.
//!
//! `harness.rs` confines and measures processes, `nginx.rs` is the server, `tools.rs` the
//! clients and one run of each, `table.rs` the comparison's tables, `scale.rs` the scale run.

mod harness;
mod nginx;
mod players;
mod scale;
mod table;
mod tools;

use std::path::Path;

use anyhow::Result;

pub use players::{Players, bench_players};
pub use scale::bench_scale;

use harness::prepare;
use nginx::Nginx;
use tools::{Proto, Sample, TOOLS, Tool, run_tool};

/// Options of `cargo xtask bench-driver`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Repetitions of each client (the order rotates every repetition).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Seconds each client runs.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Instead: the scale run (10 000 h2c players, a call every 5 s, held 60 s).
    #[arg(long)]
    pub scale: bool,
    /// Players in the scale run.
    #[arg(long, default_value_t = 10_000)]
    pub players: usize,
    /// Seconds the scale run holds its players (after a 10 s arrival).
    #[arg(long, default_value_t = 60)]
    pub hold: u64,
    /// Shards of the scale run: that many `herd drive --shard I/N` processes side by side
    /// (one process may hold at most RLIMIT_NOFILE connections), merged with `herd merge`.
    #[arg(long, default_value_t = 1)]
    pub shards: u32,
    /// Instead: gRPC and WebSocket players (players.rs): CPU per 1 000 unary calls, herd vs a
    /// Python grpcio client loop against one grpcio server; herd's memory per held
    /// WebSocket player at --sockets held sockets.
    #[arg(long = "grpc-ws")]
    pub grpc_ws: bool,
    /// Unary calls per client run (--grpc-ws).
    #[arg(long, default_value_t = 20_000)]
    pub calls: u64,
    /// Concurrent calls, each on its own connection (--grpc-ws).
    #[arg(long, default_value_t = 10)]
    pub concurrency: usize,
    /// Held WebSocket sockets (--grpc-ws); a tenth of them first, for the difference.
    #[arg(long, default_value_t = 10_000)]
    pub sockets: usize,
}

/// The side-by-side comparison; returns the markdown tables.
pub fn bench_driver(root: &Path, args: &Args) -> Result<String> {
    let (herd, dir) = prepare(root)?;
    let nginx = Nginx::start(
        &dir,
        &nginx::Setup {
            worker_connections: 4096,
            workers: 1,
            access_log: false,
        },
    )?;
    let mut samples: Vec<(Tool, Sample)> = Vec::new();
    for rep in 0..args.reps {
        // Rotate the order, so drift over the run (other load, thermal) favours nobody.
        for k in 0..TOOLS.len() {
            let tool = TOOLS[(k + rep) % TOOLS.len()];
            let s = run_tool(tool, &herd, &dir, args.seconds, &nginx)?;
            eprintln!(
                "xtask bench-driver: rep {rep} {:<12} {:>5}: {:>9} requests ({} errors), client {:.2} CPU-s ({:.2} user), {:.3} CPU-s/100k, {:.0} req/s, server {:.0} % of its core, {:.1}s wall",
                tool.name(),
                if tool.proto() == Proto::H1 {
                    "h1"
                } else {
                    "h2c"
                },
                s.requests,
                s.errors,
                s.cpu_s,
                s.user_s,
                s.cpu_per_100k(),
                s.requests as f64 / args.seconds as f64,
                100.0 * s.server_cpu_s / args.seconds as f64,
                s.wall_s,
            );
            samples.push((tool, s));
        }
    }
    drop(nginx);
    table::comparison(root, args, &samples)
}
