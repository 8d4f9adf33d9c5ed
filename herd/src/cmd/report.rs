//! `herd report`: rebuild a run's report from the store, also for runs that were killed.

use std::path::PathBuf;

use anyhow::Result;

use herd_report::Report;
use herd_store::Store;

/// Options of `herd report`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  herd report                       # the latest run in herd-out/runs.db → herd-out/run-N.{md,html,json}
  herd report --list                # the runs the store holds
  herd report 3 --out results       # run 3 of results/runs.db, written into results/
  herd report 3 --hdr-log hlog/     # also HdrHistogram interval logs per op
  HERD_STORE=postgres://herd@127.0.0.1/herd herd report 12")]
pub struct ReportArgs {
    /// The run id (default: the latest run in the store).
    #[arg(value_name = "RUN")]
    pub run: Option<i64>,
    /// Directory of the default store and of the report files.
    #[arg(long, default_value = "herd-out")]
    pub out: PathBuf,
    /// The run store: `--store URL` or `--store-file FILE`.
    #[command(flatten)]
    pub store: super::StoreArg,
    /// List the runs in the store instead.
    #[arg(long)]
    pub list: bool,
    /// Pair rows to show: the most active ones and those on the request path; the rest are
    /// one `other` row of sums.
    #[arg(long, value_name = "N", default_value_t = herd_report::DEFAULT_PAIR_ROWS)]
    pub pair_rows: usize,
    /// Also write HdrHistogram interval logs into DIR: `run-<id>-<op>.hlog`, one per op,
    /// one histogram per driver interval (HdrHistogram's HistogramLogProcessor reads them).
    #[arg(long = "hdr-log", value_name = "DIR")]
    pub hdr_log: Option<PathBuf>,
}

/// Runs `herd report`.
pub fn run(args: &ReportArgs) -> Result<()> {
    let url = args.store.url(&args.out)?;
    let rt = super::store_runtime("report")?;
    rt.block_on(async {
        let store = Store::open_existing(&url).await?;
        if args.list {
            outln!("{:>5}  {:<10}  {:<24}  scenario", "run", "status", "name");
            for m in store.list().await? {
                outln!(
                    "{:>5}  {:<10}  {:<24}  {}",
                    m.id,
                    m.status,
                    m.name,
                    m.scenario
                );
            }
            return Ok(());
        }
        let data = store.load_run(args.run).await?;
        let built = Report::build_with_pair_rows(&data, args.pair_rows);
        let mut files = herd_report::write_report(&built, &args.out)?.files;
        if let Some(dir) = &args.hdr_log {
            files.extend(crate::session::hdr_logs(&data, dir, &url)?);
        }
        for f in files {
            outln!("wrote {}", f.display());
        }
        Ok(())
    })
}
