//! `herd compare`: two recorded runs side by side (before and after a fix), with deltas and
//! ratios, as Markdown and a self-contained HTML page.

use std::path::PathBuf;

use anyhow::{Context as _, Result};

use herd_report::compare;
use herd_store::Store;

/// Options of `herd compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// The run before the change: its id in the store (`herd report --list` shows them).
    #[arg(value_name = "RUN_A")]
    pub before: i64,
    /// The run after the change.
    #[arg(value_name = "RUN_B")]
    pub after: i64,
    /// Directory of the default store and of the comparison files
    /// (`compare-<RUN_A>-<RUN_B>.md` and `.html`).
    #[arg(long, default_value = "herd-out")]
    pub out: PathBuf,
    /// Run store URL (default: sqlite:<out>/runs.db).
    #[arg(long, value_name = "URL", env = "HERD_STORE")]
    pub store: Option<String>,
}

/// Runs `herd compare`: writes the files and prints the table.
pub fn run(args: &CompareArgs) -> Result<()> {
    let url = args
        .store
        .clone()
        .unwrap_or_else(|| herd_store::default_url(&args.out));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the comparison's runtime")?;
    rt.block_on(async {
        let store = Store::open(&url).await?;
        let c = store.load_comparison(args.before, args.after).await?;
        let files = compare::write_comparison(&c, &args.out)?;
        print!("{}", compare::table(&c));
        // stdout carries only the table, so it can be piped into a pull request as it is.
        for f in files {
            tracing::info!("wrote {}", f.display());
        }
        Ok(())
    })
}
