//! `herd compare`: two recorded runs side by side (before and after a fix), with deltas and
//! ratios, as Markdown, a self-contained HTML page and JSON; `--fail-on` gates turn it into
//! a CI check (exit code 99 when one fails, 2 when one does not parse).

use std::path::PathBuf;

use anyhow::Result;

use herd_report::{
    compare,
    gate::{self, Gate},
};
use herd_store::Store;

/// Options of `herd compare`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  herd compare 1 2                          # before: run 1, after: run 2 → herd-out/compare-1-2.*
  herd compare 1 2 --fail-on 'p99 +10%'     # exit 99 when any op's p99 grew by more than 10 %
  herd compare 4 5 --fail-on 'game.state p99 +20ms' --fail-on 'errors +0.5pp'
  herd compare 4 5 --fail-on 'gateway runq_p99 +20%' --fail-on 'retransmits +0'
  herd compare 1 2 --out results            # runs of results/runs.db")]
pub struct CompareArgs {
    /// The run before the change: its id in the store (`herd report --list` shows them).
    #[arg(value_name = "RUN_A")]
    pub before: i64,
    /// The run after the change.
    #[arg(value_name = "RUN_B")]
    pub after: i64,
    /// Directory of the default store and of the comparison files
    /// (`compare-<RUN_A>-<RUN_B>.md`, `.html` and `.json`).
    #[arg(long, default_value = "herd-out")]
    pub out: PathBuf,
    /// The run store: `--store URL` or `--store-file FILE`.
    #[command(flatten)]
    pub store: super::StoreArg,
    /// Fail (exit code 99) when the run after regressed past this gate, checked on each op's
    /// whole-run figures: `p99 +10%`, `game.state p99 +20ms`, `req/s -5%`, `errors +0.5pp`;
    /// or on each container's kernel-side waits: `runq_p99 +20%`, `gateway retransmits +0`,
    /// `listen_drops +0` (docs/report.md). Repeatable; every gate is checked and printed. A
    /// gate that cannot be checked (its op, container or figure missing from a run) fails.
    #[arg(long = "fail-on", value_name = "GATE", value_parser = parse_gate)]
    pub fail_on: Vec<Gate>,
}

/// A `--fail-on` value; clap exits 2 with the reason and [`gate::SYNTAX`] when it does not
/// parse.
fn parse_gate(s: &str) -> std::result::Result<Gate, gate::GateError> {
    s.parse()
}

/// Runs `herd compare`: writes the files and prints the table.
pub fn run(args: &CompareArgs) -> Result<()> {
    let url = args.store.url(&args.out)?;
    let rt = super::store_runtime("comparison")?;
    rt.block_on(async {
        let store = Store::open_existing(&url).await?;
        let (before, after) = store.load_pair(args.before, args.after).await?;
        let mut c = compare::runs(&before, &after);
        let passed = compare::apply_gates(&mut c, &args.fail_on);
        let files = compare::write_comparison(&c, &args.out)?;
        out!("{}", compare::table(&c));
        // stdout carries only the table, so it can be piped into a pull request as it is; the
        // gates' verdicts go to stderr, also under --quiet logging.
        for line in compare::gate_lines(&c) {
            errln!("herd compare: {line}");
        }
        for f in files {
            tracing::info!("wrote {}", f.display());
        }
        if !passed {
            let failed = c.gates.iter().filter(|g| !g.pass).count();
            return Err(crate::Crossed(format!(
                "{failed} of {} --fail-on checks failed comparing run {} with run {} (exit code {})",
                c.gates.len(),
                args.before,
                args.after,
                crate::EXIT_CROSSED
            ))
            .into());
        }
        Ok(())
    })
}
