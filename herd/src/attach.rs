//! Attaching the kernel probe from the command line: the errors a user fixes in their
//! environment (capabilities, kernel BTF, lockdown) exit with code 2.

use anyhow::Result;
use herd_probe::{KernelProbe, ProbeOptions, WaitOptions};

/// Loads and attaches the probe's programs; with `opts.verifier_log`, prints the verifier's
/// log of a program the kernel rejects. `driving`: this process drives the load, so its own
/// threads' run-queue delay gets a row of its own (`herd`), and a driver starved of CPU shows
/// in kernel truth. `no_runq`: leave the run-queue program out (`--no-runq`).
pub fn probe(opts: &ProbeOptions, no_runq: bool, driving: bool) -> Result<KernelProbe> {
    let verbose = opts.verifier_log;
    KernelProbe::load_with(
        opts,
        &WaitOptions {
            own_tgid: driving.then(std::process::id),
            no_runq,
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
