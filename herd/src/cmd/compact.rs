//! `herd compact`: a finished run's rows rolled up to a coarser resolution, to keep an
//! archive of long runs small. The same exact merge as the roll-up during a run
//! (docs/report.md, "Long runs"): whole-run and per-phase percentiles do not change.

use std::{path::PathBuf, time::Duration};

use anyhow::Result;

use herd_driver::units::parse_duration;
use herd_store::Store;

/// Options of `herd compact`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  herd compact --every 10s          # the latest run of herd-out/runs.db, 10 s rows
  herd compact 3 --every 1m --out results

Per-phase and whole-run numbers stay exactly what they were; the timeline's charts and
windows get the coarser resolution, and the report says which. SQLite's file is vacuumed
afterwards (it needs as much free disk as the store's size while it runs).")]
pub struct CompactArgs {
    /// The run id (default: the latest run in the store).
    #[arg(value_name = "RUN")]
    pub run: Option<i64>,
    /// The resolution to roll the run's driver and probe rows up to (1s or more).
    #[arg(long, value_name = "DURATION", value_parser = parse_every)]
    pub every: Duration,
    /// Directory of the default store.
    #[arg(long, default_value = "herd-out")]
    pub out: PathBuf,
    /// The run store: `--store URL` or `--store-file FILE`.
    #[command(flatten)]
    pub store: super::StoreArg,
}

fn parse_every(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_secs(1) || d.subsec_nanos() != 0 {
        return Err(format!(
            "{s}: give whole seconds, 1s or more (a run's rows are 100 ms or longer already)"
        ));
    }
    Ok(d)
}

/// A run `herd compact` must not touch.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CompactRefused(String);

/// Runs `herd compact`.
pub fn run(args: &CompactArgs) -> Result<()> {
    let url = args.store.url(&args.out)?;
    let rt = super::store_runtime("compact")?;
    rt.block_on(async {
        let store = Store::open_existing(&url).await?;
        let meta = store.meta(args.run).await?;
        if meta.status == "running" {
            return Err(CompactRefused(format!(
                "run {} is still running (its writer rolls its rows up itself); compact it \
                 once it has finished",
                meta.id
            ))
            .into());
        }
        let every_ns = args.every.as_nanos() as u64;
        let done = store.compact(meta.id, every_ns).await?;
        store.vacuum().await?;
        store.close().await;
        outln!(
            "run {}: {} rows merged into {} of {} s",
            meta.id,
            done.read,
            done.written,
            args.every.as_secs()
        );
        Ok(())
    })
}
