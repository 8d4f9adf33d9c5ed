//! herd: a load driver and an eBPF host profiler in one binary.
//!
//! `main` parses [`Cli`] and calls [`run`]; each [`cmd`] module parses its options, builds
//! a config, calls the library and prints. A run is [`session::run`]; the probe, the
//! driver, the store, the report and seeding are crates of their own (docs/architecture.md).
#![deny(missing_docs)]
// Every line goes through output::stdio, which a closed pipe cannot crash (issue #27).
#![deny(clippy::print_stdout, clippy::print_stderr)]

/// `print!` to stdout through [`output::stdio::out`]: a closed pipe drops the output, it
/// does not panic.
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::stdio::out(format_args!($($arg)*)) };
}

/// `println!` through [`output::stdio::out`].
macro_rules! outln {
    () => { $crate::output::stdio::out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::stdio::out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprintln!` through [`output::stdio::err`].
macro_rules! errln {
    ($($arg:tt)*) => { $crate::output::stdio::err(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprint!` through [`output::stdio::err`].
macro_rules! err {
    ($($arg:tt)*) => { $crate::output::stdio::err(format_args!($($arg)*)) };
}

mod attach;
pub mod cmd;
#[cfg(feature = "demo")]
pub mod demo;
pub mod launch;
pub mod log;
mod memory;
pub mod output;
pub mod session;
pub mod signals;
pub mod usage;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// herd's exit codes (README, "Exit codes").
pub mod exit {
    /// The command failed: a run that failed, a store that lost rows, a target no connect
    /// reached.
    pub const FAILED: u8 = 1;
    /// Fix the input or the environment: bad usage, a scenario or `--container` error, a
    /// plan larger than the host, a missing capability, no BTF, no cgroup v2.
    pub const USAGE: u8 = 2;
    /// herd worked and the measured system crossed a limit the user set: an objective of
    /// the scenario in `herd run`, a `--fail-on` gate in `herd compare` (k6 exits 99 on a
    /// crossed threshold). No other path exits with it.
    pub const CROSSED: u8 = 99;
}

/// An error the user fixes in their environment (privileges, kernel features, cgroup layout)
/// or in what they asked for (usage, the scenario), rather than a failure of herd: the process
/// exits with [`exit::USAGE`].
#[derive(Debug, thiserror::Error)]
#[error("{}", error_text(.0))]
pub struct EnvironmentError(pub anyhow::Error);

/// Before discovery starts: one line when Docker containers may be on this host (a
/// `DOCKER_HOST`, a socket file, or Docker's cgroups) and no engine answers, since they are
/// then named `docker-<id12>` instead of their names.
pub(crate) fn note_docker_names(layout: &herd_probe::cgroup::CgroupLayout) {
    let names = herd_probe::discover::DockerNames::new();
    let docker_cgroups = layout.unified.join("docker").is_dir()
        || std::fs::read_dir(layout.unified.join("system.slice")).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("docker-"))
        });
    let maybe =
        std::env::var_os("DOCKER_HOST").is_some() || names.socket().exists() || docker_cgroups;
    if maybe && !names.answers() {
        tracing::warn!(
            "no Docker engine answers at {} (DOCKER_HOST, else the default socket): Docker \
             containers are still measured, named docker-<first 12 hex of the id>",
            names.socket().display()
        );
    }
}

/// Wraps `e` as an [`EnvironmentError`].
pub fn environment(e: impl Into<anyhow::Error>) -> anyhow::Error {
    anyhow::Error::new(EnvironmentError(e.into()))
}

/// herd's exit code when it worked and the measured system crossed a limit the user set: an
/// objective of the scenario in `herd run`, a `--fail-on` gate in `herd compare`. 99, as k6
/// exits when a threshold is crossed, apart from herd's own failures (1) and bad usage or an
/// environment to fix (2). docs/report.md lists them.
pub const EXIT_CROSSED: u8 = exit::CROSSED;

/// A verdict rather than a failure of herd (see [`EXIT_CROSSED`]): its message says which
/// limit was crossed, by how much.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Crossed(pub String);

/// `e` and its causes as one line, `what herd was doing: why`, each cause once: a cause
/// whose text its context already quotes (`reading x: No such file or directory (os error
/// 2)` over the same io::Error) is not repeated.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// The exit code for `e`: [`exit::USAGE`] when any cause is bad input (a scenario, a
/// `--container`, a plan the host cannot hold) or the environment, else [`exit::FAILED`].
/// (Seed-spec errors count too.)
pub fn exit_code(e: &anyhow::Error) -> u8 {
    let usage = e.chain().any(|c| {
        c.is::<EnvironmentError>()
            || c.is::<herd_driver::ScenarioError>()
            || c.is::<herd_probe::containers::ContainerError>()
            || c.is::<herd_seed::SpecError>()
            || c.is::<herd_driver::limits::PlanTooLarge>()
            || c.is::<herd_store::StoreUrlError>()
            || c.is::<herd_store::NoSuchRun>()
            || c.is::<herd_model::ShardError>()
            || c.is::<herd_store::ShardUsageError>()
            || c.is::<cmd::merge::MergeInputError>()
            || c.is::<cmd::compact::CompactRefused>()
    });
    if e.chain().any(|c| c.is::<Crossed>()) {
        exit::CROSSED
    } else if usage {
        exit::USAGE
    } else {
        exit::FAILED
    }
}

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
    /// Roll a finished run's rows up to a coarser resolution (e.g. 10 s) to keep an archive
    /// of long runs small: per-phase and whole-run numbers stay exactly what they were.
    Compact(cmd::compact::CompactArgs),
    /// Compare two recorded runs (before and after a fix): TIME_WAIT, new connections/s, CPU
    /// peaks per container, latency and errors per op, findings, with deltas and ratios.
    Compare(cmd::compare::CompareArgs),
    /// Run the embedded demo: a game service's gateway and backend in containers on this
    /// host, driven and probed twice (the gateway keeping 2 idle backend connections, the
    /// bug; then 512, the fix), reported and compared (needs root; about 2 minutes).
    #[cfg(feature = "demo")]
    Demo(cmd::demo::DemoArgs),
    /// Drive virtual players against a service from a scenario file and print a per-phase
    /// table (latency percentiles and outcomes per op).
    Drive(cmd::drive::DriveArgs),
    /// Put a run whose store went down during it (`OUT/run-N-rows.json`, saved by `herd run`)
    /// into a store.
    Import(cmd::import::ImportArgs),
    /// Start a sharded run on an engine: `k8s` writes the Kubernetes manifests (an Indexed
    /// Job of driver shards, a DaemonSet of probes) for `kubectl apply`; `swarm` runs the
    /// shards and a probe per node on a Docker Swarm, waits, and writes the merged report.
    Launch(cmd::launch::LaunchArgs),
    /// Merge the `herd drive --shard I/N --json` results of one run's shards into one result:
    /// counts add, latency histograms merge exactly.
    Merge(cmd::merge::MergeArgs),
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
    herd_driver::limits::raise_nofile();
    if matches!(
        cli.command,
        Command::Drive(_) | Command::Probe(_) | Command::Run(_)
    ) {
        memory::trim_periodically();
    }
    let result = match &cli.command {
        Command::Compact(a) => cmd::compact::run(a),
        Command::Compare(a) => cmd::compare::run(a),
        #[cfg(feature = "demo")]
        Command::Demo(a) => cmd::demo::run(a),
        Command::Drive(a) => cmd::drive::run(a),
        Command::Import(a) => cmd::import::run(a),
        Command::Launch(a) => cmd::launch::run(a),
        Command::Merge(a) => cmd::merge::run(a),
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
            errln!("Error: {}", error_text(&e));
            ExitCode::from(exit_code(&e))
        }
    }
}

#[cfg(test)]
mod tests {
    use anyhow::Context as _;

    use super::*;

    #[test]
    fn a_cause_its_context_already_quotes_is_printed_once() {
        let io = std::fs::read("/no/such/file").unwrap_err();
        let said = io.to_string();
        let e = Err::<(), _>(io)
            .with_context(|| format!("reading /no/such/file: {said}"))
            .context("herd report")
            .unwrap_err();
        let text = error_text(&e);
        assert_eq!(text.matches(&said).count(), 1, "{text}");
        assert_eq!(text, format!("herd report: reading /no/such/file: {said}"));
    }

    #[test]
    fn bad_input_exits_2_a_failure_1_and_99_is_reserved() {
        let scenario = herd_driver::Scenario::parse("s.toml", "[target", &[]).unwrap_err();
        let e = anyhow::Error::new(scenario).context("herd run");
        assert_eq!(exit_code(&e), exit::USAGE);
        assert_eq!(
            exit_code(&environment(anyhow::anyhow!("no BTF"))),
            exit::USAGE
        );
        let e = anyhow::anyhow!("the store went away").context("herd run");
        assert_eq!(exit_code(&e), exit::FAILED);
        // 99 belongs to the report's objectives (issue #11): nothing here maps to it.
        assert_ne!(exit::CROSSED, exit::USAGE);
        assert_ne!(exit::CROSSED, exit::FAILED);
    }
}
