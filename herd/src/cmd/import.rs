//! `herd import`: put a run whose store went down during it (saved by `herd run` as
//! `OUT/run-N-rows.json`) into a store, to report and compare it like any other.

use std::path::PathBuf;

use anyhow::Result;

use herd_store::{Rows, Store};

/// Options of `herd import`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  herd import herd-out/run-3-rows.json                     # into herd-out/runs.db
  herd import run-3-rows.json --store postgres://herd@127.0.0.1/herd")]
pub struct ImportArgs {
    /// The saved rows (`run-N-rows.json`, written by `herd run` when its store was lost).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Directory of the default store.
    #[arg(long, default_value = "herd-out")]
    pub out: PathBuf,
    /// The run store: `--store URL` or `--store-file FILE`.
    #[command(flatten)]
    pub store: super::StoreArg,
}

/// Runs `herd import`.
pub fn run(args: &ImportArgs) -> Result<()> {
    // A file that is missing or holds no saved run is bad input (exit 2), not a failure.
    let saved = Rows::load(&args.file).map_err(crate::environment)?;
    let url = args.store.url(&args.out)?;
    let rt = super::store_runtime("import")?;
    rt.block_on(async {
        let store = Store::open(&url).await?;
        let id = store.import(&saved).await?;
        outln!(
            "imported run {} ({} rows) from {} as run {id} into {}; `herd report {id}` writes its report",
            saved.meta.id,
            saved.rows.len(),
            args.file.display(),
            store.url()
        );
        store.close().await;
        Ok(())
    })
}
