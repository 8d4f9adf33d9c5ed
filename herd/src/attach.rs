//! Attaching the kernel probe from the command line: the errors a user fixes in their
//! environment (capabilities, kernel BTF, lockdown) exit with code 2.

use anyhow::Result;
use herd_probe::{KernelProbe, ProbeOptions, WaitOptions};

/// How the probe measures the run-queue delay, from `--no-runq` and `--runq-waits`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Runq {
    /// Counted and summed from the scheduler's per-thread totals, once per poll (nothing
    /// runs on a context switch).
    #[default]
    Totals,
    /// Each wait timed by a program on every context switch: a per-wait histogram too.
    PerWait,
    /// Not measured.
    Off,
}

impl Runq {
    /// The mode the two flags ask for (clap keeps them apart).
    pub fn of(no_runq: bool, runq_waits: bool) -> Self {
        match (no_runq, runq_waits) {
            (true, _) => Runq::Off,
            (false, true) => Runq::PerWait,
            (false, false) => Runq::Totals,
        }
    }
}

/// Loads and attaches the probe's programs; with `opts.verifier_log`, prints the verifier's
/// log of a program the kernel rejects. `driving`: this process drives the load, so its own
/// threads' run-queue delay gets a row of its own (`herd`), and a driver starved of CPU shows
/// in kernel truth. `runq`: how the run-queue delay is measured (`--no-runq`,
/// `--runq-waits`).
pub fn probe(opts: &ProbeOptions, runq: Runq, driving: bool) -> Result<KernelProbe> {
    let verbose = opts.verifier_log;
    KernelProbe::load_with(
        opts,
        &WaitOptions {
            own_tgid: driving.then(std::process::id),
            no_runq: runq == Runq::Off,
            per_wait: runq == Runq::PerWait,
            ..WaitOptions::default()
        },
    )
    .map_err(|e| {
        if verbose && let Some(log) = e.verifier_log() {
            tracing::error!("verifier log:\n{log}");
        }
        let env = e.is_environment();
        let err = anyhow::Error::new(e).context("starting herd's kernel probe");
        if env { crate::environment(err) } else { err }
    })
}
