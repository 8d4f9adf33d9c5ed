//! `herd run`: attach the probe, drive the scenario, record both timelines as they happen,
//! then write the report. Without root the run still drives and reports; every probe cell then
//! says why it is missing.

use std::{
    io::Write as _,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, Result};
use herd_driver::{DriverEvent, RunOptions, Scenario, text};
use herd_probe::{
    cgroup::CgroupLayout, containers::ContainerSet, sample::Interval, sampler::Sampler,
};
use tokio::sync::{mpsc, watch};

use crate::{
    cmd::probe,
    live::Live,
    report::{
        self,
        seeding::{CleanupRecord, SeedRecord},
    },
    seed::{Cleaned, RunSeeding, Seeded},
    signals,
    store::{self, Source, Store},
};

/// Options of `herd run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The scenario: a TOML file with the target, ops and load plan (docs/scenario.md).
    #[arg(value_name = "SCENARIO")]
    pub scenario: PathBuf,
    /// Override one scenario key (see `herd drive --help`). Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// A name for the run in reports and comparisons (default: the scenario's file stem).
    #[arg(long)]
    pub name: Option<String>,
    /// Directory for the run store (unless --store) and the report files.
    #[arg(long, default_value = "herd-out")]
    pub out: PathBuf,
    /// Run store URL: sqlite:PATH or postgres://USER@HOST/DB (password from PGPASSWORD or the
    /// URL; never printed). Default: sqlite:<out>/runs.db.
    #[arg(long, value_name = "URL", env = "HERD_STORE")]
    pub store: Option<String>,
    /// Name a container for the probe: NAME=CGROUP_PATH (repeatable); Docker, Kubernetes,
    /// systemd and herd's own containers are discovered anyway.
    #[arg(long = "container", value_name = "NAME=CGROUP_PATH")]
    pub containers: Vec<String>,
    /// Do not attach the kernel probe (the report says so in every probe cell).
    #[arg(long)]
    pub no_probe: bool,
    /// Length of one interval of both timelines (100ms or more).
    #[arg(long, default_value = "1s", value_parser = probe::parse_interval)]
    pub interval: Duration,
    /// How long requests in flight may take to finish once the plan ends or Ctrl-C stops it.
    #[arg(long, default_value = "5s", value_parser = probe::parse_duration)]
    pub grace: Duration,
    /// Print only the final summary, no progress lines.
    #[arg(long)]
    pub quiet: bool,
    /// Accept any TLS certificate from an https:// target (self-signed, a private CA, another
    /// host's name), like `target.insecure = true`; `target.ca = "ca.pem"` is the safer way.
    #[arg(long)]
    pub insecure: bool,
    /// Leave the rows the scenario's `[seed]` inserted in the database after the run (remove
    /// them later with `herd seed SCENARIO --cleanup`).
    #[arg(long)]
    pub keep_seed: bool,
}

/// What `herd run` produced.
pub struct RunOutcome {
    /// The run's id in the store.
    pub run_id: i64,
    /// The store URL.
    pub store: String,
    /// Report files written.
    pub files: Vec<PathBuf>,
    /// Whether the report's SLO checks failed.
    pub slo_failed: bool,
    /// What the scenario's `[seed]` inserted before the load, if it has one.
    pub seeded: Option<Seeded>,
    /// What was removed after the load (None without `[seed]` or with --keep-seed).
    pub seed_cleaned: Option<Cleaned>,
}

/// Runs `herd run`.
pub fn run(args: &RunArgs) -> Result<()> {
    let outcome = execute(args)?;
    for f in &outcome.files {
        println!("wrote {}", f.display());
    }
    if outcome.slo_failed {
        anyhow::bail!(
            "run {} broke an SLO of the scenario (see the report's SLO table)",
            outcome.run_id
        );
    }
    Ok(())
}

/// Runs the scenario and writes the report; the library entry point for the demo and tests.
pub fn execute(args: &RunArgs) -> Result<RunOutcome> {
    let mut scenario = Scenario::load(&args.scenario, &args.set)?;
    if args.insecure && !scenario.target.accept_any_certificate() {
        eprintln!("note: --insecure does nothing for an http:// target");
    }
    let url = args
        .store
        .clone()
        .unwrap_or_else(|| store::default_url(&args.out));
    let name = args.name.clone().unwrap_or_else(|| {
        args.scenario
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "run".into())
    });
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .enable_all()
        .build()
        .context("starting the run's runtime")?;
    rt.block_on(async {
        // Opened before any load starts: an unreachable store costs nothing but this message.
        let store = Store::open(&url).await?;
        // Seeded before the probe attaches and the load starts (an unreachable database fails
        // here); the rows are removed below however the run ends, Ctrl-C and failure included.
        let shown = args.scenario.display().to_string();
        let seeding = RunSeeding::start(scenario.seed.as_ref(), &shown).await?;
        if let Some(s) = &seeding {
            eprintln!("herd run: {}", s.seeded.line(s.shown()));
        }
        let run = async {
        let meta = store
            .begin(&name, &args.scenario.display().to_string(), herd_probe::clock::now_ns())
            .await?;
        eprintln!("herd run: run {} ({name}) recorded in {}", meta.id, store::redact(&url));
        store.put(meta.id, Source::Slo, 0, 0, &scenario.slo).await?;
        if let Some(s) = &seeding {
            // Counts, tables and time only: never the database's URL.
            store.put(meta.id, Source::Seed, 0, 0, &SeedRecord::from(&s.seeded)).await?;
        }

        // The probe samples in its own thread and sends intervals to the recorder.
        let (probe_tx, mut probe_rx) = mpsc::unbounded_channel::<Interval>();
        let probe_stop = Arc::new(AtomicBool::new(false));
        let probe_thread = if args.no_probe {
            store
                .put(meta.id, Source::ProbeMissing, 0, 0, &"the run was started with --no-probe")
                .await?;
            None
        } else {
            match start_probe(args, probe_tx, probe_stop.clone()) {
                Ok(t) => Some(t),
                Err(e) => {
                    let why = format!("{e:#}");
                    eprintln!("herd run: driving without the kernel probe: {why}");
                    store.put(meta.id, Source::ProbeMissing, 0, 0, &why).await?;
                    None
                }
            }
        };

        let (stop_tx, stop_rx) = watch::channel(false);
        let watcher = tokio::spawn(async move {
            while !signals::stop_requested() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            stop_tx.send_replace(true);
        });
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let driver = tokio::spawn(herd_driver::run(
            scenario.clone(),
            RunOptions {
                stop: Some(stop_rx),
                grace: args.grace,
                interval: args.interval,
                events: Some(events_tx),
                cores,
            },
        ));

        // The recorder: every row is committed as it arrives.
        let (steps, quiet) = (scenario.plan().len(), args.quiet);
        let mut live = Live::for_stdout(steps);
        let (mut dseq, mut pseq, mut sseq) = (0u64, 0u64, 0u64);
        let mono0 = meta.mono_start_ns as u64;
        let mut driver_open = true;
        let mut probe_open = probe_thread.is_some();
        let mut final_report = None;
        while driver_open || probe_open {
            tokio::select! {
                e = events.recv(), if driver_open => match e {
                    Some(DriverEvent::Interval(iv)) => {
                        if !quiet {
                            let mut out = std::io::stdout().lock();
                            let _ = out.write_all(live.interval(&iv).as_bytes());
                            let _ = out.flush();
                        }
                        store.put(meta.id, Source::Driver, dseq, mono0 + iv.end_ms * 1_000_000, &iv).await?;
                        dseq += 1;
                    }
                    Some(DriverEvent::StepEnd(st)) => {
                        store.put(meta.id, Source::Step, sseq, mono0 + (st.start_ms + st.duration_ms) * 1_000_000, &st).await?;
                        sseq += 1;
                    }
                    Some(DriverEvent::Done(r)) => {
                        store.put(meta.id, Source::Report, 0, mono0 + r.duration_ms * 1_000_000, &r).await?;
                        final_report = Some(r);
                        // The load is over: take the probe's last interval and stop it.
                        probe_stop.store(true, Ordering::SeqCst);
                    }
                    None => {
                        driver_open = false;
                        probe_stop.store(true, Ordering::SeqCst);
                    }
                },
                iv = probe_rx.recv(), if probe_open => match iv {
                    Some(iv) => {
                        store.put(meta.id, Source::Probe, pseq, iv.at_ns, &iv).await?;
                        pseq += 1;
                    }
                    None => probe_open = false,
                },
            }
        }
        watcher.abort();
        let driven = driver.await.context("the driver task panicked")?;
        if let Some(t) = probe_thread {
            t.join().map_err(|_| anyhow::anyhow!("the probe thread panicked"))??;
        }
        let status = match (&driven, &final_report) {
            (Err(_), _) => "failed",
            (Ok(r), _) if r.stopped_early => "stopped",
            _ => "finished",
        };
        store.finish(meta.id, status).await?;
        driven.context("driving the scenario")?;
        if let Some(r) = &final_report {
            print!("\n{}", text::table(r));
            super::drive::print_hints(r);
        }
        // The report is written once the seeded rows' fate is recorded (below).
        Ok(RunOutcome {
            run_id: meta.id,
            store: url.clone(),
            files: Vec::new(),
            slo_failed: false,
            seeded: None,
            seed_cleaned: None,
        })
        }
        .await;
        let report = |mut outcome: RunOutcome| async {
            let written = report::write_run(&store, outcome.run_id, &args.out).await?;
            outcome.files = written.files;
            outcome.slo_failed = written.slo_failed;
            anyhow::Ok(outcome)
        };
        let Some(seeding) = seeding else {
            return match run {
                Ok(outcome) => report(outcome).await,
                Err(e) => Err(e),
            };
        };
        let (seeded, db) = (seeding.seeded.clone(), seeding.shown().to_owned());
        match (run, seeding.finish(args.keep_seed, &shown).await) {
            (Ok(mut outcome), Ok((cleaned, line))) => {
                println!("seed: {}", seeded.line(&db));
                println!("seed: {line}");
                let record = match (&cleaned, args.keep_seed) {
                    (Some(c), _) => CleanupRecord::from(c),
                    (None, true) => CleanupRecord::Kept,
                    (None, false) => CleanupRecord::AlreadyRemoved,
                };
                store.put(outcome.run_id, Source::SeedCleanup, 0, 0, &record).await?;
                outcome.seeded = Some(seeded);
                outcome.seed_cleaned = cleaned;
                report(outcome).await
            }
            (Ok(outcome), Err(e)) => {
                // The load ran: its report still says the cleanup failed, then the error.
                let _ = store
                    .put(outcome.run_id, Source::SeedCleanup, 0, 0, &CleanupRecord::Failed)
                    .await;
                if let Err(r) = report(outcome).await {
                    eprintln!("herd run: writing the report: {r:#}");
                }
                Err(e)
            }
            (Err(e), Ok((_, line))) => {
                eprintln!("herd run: {line}");
                Err(e)
            }
            (Err(e), Err(c)) => {
                eprintln!("herd run: {c:#}");
                Err(e)
            }
        }
    })
}

/// Loads the probe and starts the sampling thread; intervals go to `tx` until `stop`.
fn start_probe(
    args: &RunArgs,
    tx: mpsc::UnboundedSender<Interval>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<Result<()>>> {
    let layout = CgroupLayout::detect()?;
    let set = ContainerSet::from_args(&layout, &args.containers)?.with_discovery();
    let probe = probe::load(false)?;
    let mut sampler = Sampler::new(probe, set, layout)?;
    let every = args.interval;
    Ok(std::thread::Builder::new()
        .name("herd-probe".into())
        .spawn(move || {
            probe::watch(
                &mut sampler,
                every,
                Duration::from_secs(7 * 24 * 3600),
                || stop.load(Ordering::SeqCst),
                |iv, _| {
                    // The recorder may be gone if the run failed; the probe just stops.
                    let _ = tx.send(iv.clone());
                    Ok(())
                },
            )
        })?)
}
