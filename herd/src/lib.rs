//! herd: a load driver and an eBPF host profiler in one binary.
//!
//! `main` parses [`Cli`] and calls [`run`]; each [`cmd`] module parses its options, builds
//! a config, calls the library and prints. A run is [`session::run`]; the probe, the
//! driver, the store, the report and seeding are crates of their own (docs/architecture.md).

mod attach;
pub mod cmd;
#[cfg(feature = "demo")]
pub mod demo;
pub mod live;
pub mod log;
pub mod metrics;
pub mod session;
pub mod signals;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// An error the user fixes in their environment (privileges, kernel features, cgroup layout)
/// rather than a failure of herd: the process exits with code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0:#}")]
pub struct EnvironmentError(pub anyhow::Error);

/// Wraps `e` as an [`EnvironmentError`].
pub fn environment(e: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(EnvironmentError(e.into()))
}

/// herd's exit code when it worked and the measured system crossed a limit the user set: an
/// objective of the scenario in `herd run`, a `--fail-on` gate in `herd compare`. 99, as k6
/// exits when a threshold is crossed, apart from herd's own failures (1) and bad usage or an
/// environment to fix (2). docs/report.md lists them.
pub const EXIT_CROSSED: u8 = 99;

/// A verdict rather than a failure of herd (see [`EXIT_CROSSED`]): its message says which
/// limit was crossed, by how much.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Crossed(pub String);

/// herd: a load driver and an eBPF host probe in one binary. The probe counts, in the kernel
/// and per container (cgroup), what load does to the host's TCP stack.
#[derive(Debug, Parser)]
#[command(name = "herd", version, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// herd's subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compare two recorded runs (before and after a fix): TIME_WAIT, new connections/s, CPU
    /// peaks per container, latency and errors per op, findings, with deltas and ratios.
    Compare(cmd::compare::CompareArgs),
    /// Run the embedded demo: a gateway and a backend in containers on this host, driven and
    /// probed twice (the seeds' 2-idle-connection pool, then the fix), reported and compared
    /// (needs root; about 3 minutes).
    #[cfg(feature = "demo")]
    Demo(cmd::demo::DemoArgs),
    /// Drive virtual players against a service from a scenario file and print a per-step
    /// table (latency percentiles and outcomes per op).
    Drive(cmd::drive::DriveArgs),
    /// Report a recorded run (Markdown, HTML and JSON), also one that was killed, or list the
    /// runs in a store.
    Report(cmd::report::ReportArgs),
    /// Attach the probe, drive a scenario, record both timelines, and write the report.
    Run(cmd::run::RunArgs),
    /// Insert a scenario's `[seed]` accounts and sessions into the target's database, list
    /// herd's seedings there, or remove exactly their rows (--cleanup, --reset).
    Seed(cmd::seed::SeedArgs),
    /// Run the kernel probe alone, next to any load tool: per container and interval TCP
    /// connects, accepts, failures by errno, TIME_WAIT, socket gauges, CPU and throttling
    /// (needs root or CAP_BPF + CAP_PERFMON).
    Probe(cmd::probe::ProbeArgs),
    /// The demo contour's services (internal: `herd demo` starts them in its containers).
    #[cfg(feature = "demo")]
    #[command(subcommand, hide = true)]
    Contour(herd_contour::ContourCmd),
}

/// Runs a parsed command line. Errors print as `Error: ...` with their context chain.
pub fn run(cli: Cli) -> ExitCode {
    log::init();
    signals::install();
    let result = match &cli.command {
        Command::Compare(a) => cmd::compare::run(a),
        #[cfg(feature = "demo")]
        Command::Demo(a) => cmd::demo::run(a),
        Command::Drive(a) => cmd::drive::run(a),
        Command::Probe(a) => cmd::probe::run(a),
        Command::Report(a) => cmd::report::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Seed(a) => cmd::seed::run(a),
        #[cfg(feature = "demo")]
        Command::Contour(c) => herd_contour::run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:#}");
            if e.downcast_ref::<Crossed>().is_some() {
                return ExitCode::from(EXIT_CROSSED);
            }
            let env = e.downcast_ref::<EnvironmentError>().is_some();
            ExitCode::from(if env { 2 } else { 1 })
        }
    }
}
