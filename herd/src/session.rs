//! A run session: seed → attach the probe → drive → record both timelines as they happen →
//! clean up → report, as one call. `herd run`, `herd demo` and the tests build a
//! [`RunConfig`] and call [`run`]; nothing here knows about command-line parsing.
//!
//! Without root (or with `probe: false`) the run still drives and reports, and every probe
//! cell says why it is missing. The rows a `[seed]` inserted are removed however the run
//! ends (finished, failed, Ctrl-C), unless `keep_seed`.

use std::{
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, Result};
use herd_driver::{RunOptions, Scenario};
use herd_model::CleanupRecord;
use herd_model::ProbeInterval;
use herd_model::{DriverEvent, RunResult};
use herd_probe::{
    cgroup::CgroupLayout,
    containers::ContainerSet,
    sampler::{Sampler, Watch, watch},
};
use herd_report::Report;
use herd_report::text;
use herd_seed::{Cleaned, RunSeeding, Seeded};
use herd_store::{Recorder, Row, Rows, Source, Store, Writer};
use tokio::sync::{mpsc, watch};

use crate::{attach, output::live::LiveView, output::metrics::RunEndpoint, signals};

/// What one run does. Build it with [`RunConfig::new`] and adjust the fields.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The scenario, loaded and checked (`Scenario::load`).
    pub scenario: Scenario,
    /// The run's name in reports and comparisons.
    pub name: String,
    /// Where the report files go (and the default store).
    pub out: PathBuf,
    /// The run store's URL (`sqlite:PATH` or `postgres://…`).
    pub store: String,
    /// Containers named for the probe (`NAME=CGROUP_PATH`); others are discovered.
    pub containers: Vec<String>,
    /// Attach the kernel probe.
    pub probe: bool,
    /// Attach its connect() syscall tracepoints too (`--connect-syscalls`).
    pub connect_syscalls: bool,
    /// How it measures the run-queue delay (`--no-runq`, `--runq-waits`).
    pub runq: crate::attach::Runq,
    /// Length of one interval of both timelines.
    pub interval: Duration,
    /// How long requests in flight may take once the plan ends or a stop arrives.
    pub grace: Duration,
    /// Print the live view on stdout while the run lasts.
    pub live: bool,
    /// Leave the `[seed]` rows in the database afterwards.
    pub keep_seed: bool,
    /// Serve the run's metrics at `http://ADDR/metrics` while it lasts (`--listen`).
    pub listen: Option<std::net::SocketAddr>,
    /// Which part of the plan this process runs (`--shard I/N`).
    pub shard: herd_model::Shard,
    /// The key the shards of one run find it by (`--run-key`); None for a run of one process.
    pub run_key: Option<String>,
    /// How long a shard waits for the others to register.
    pub shard_timeout: Duration,
    /// Also write the run's HdrHistogram interval logs into this directory (`--hdr-log`).
    pub hdr_log: Option<PathBuf>,
}

impl RunConfig {
    /// A run of `scenario` named after its file, with reports and the default SQLite store
    /// in `out`, the probe attached, 1 s intervals, a 5 s grace and the live view on.
    pub fn new(scenario: Scenario, out: PathBuf) -> Self {
        let name = std::path::Path::new(&scenario.file)
            .file_stem()
            .map_or_else(|| "run".into(), |s| s.to_string_lossy().into_owned());
        Self {
            scenario,
            name,
            store: herd_store::default_url(&out),
            out,
            containers: Vec::new(),
            probe: true,
            connect_syscalls: false,
            runq: crate::attach::Runq::Totals,
            interval: Duration::from_secs(1),
            grace: Duration::from_secs(5),
            live: true,
            keep_seed: false,
            listen: None,
            shard: herd_model::Shard::WHOLE,
            run_key: None,
            shard_timeout: Duration::from_secs(120),
            hdr_log: None,
        }
    }
}

/// How a run ended: its id and store, the report files written, its objectives, its
/// seeding, and every row when the store was lost.
#[derive(Debug)]
pub struct RunEnd {
    /// The run's id in the store.
    pub run_id: i64,
    /// The store URL.
    pub store: String,
    /// Report files written.
    pub files: Vec<PathBuf>,
    /// Whether the report's objective checks failed.
    pub slo_failed: bool,
    /// Each broken objective in words (op, phase, objective, measured, limit).
    pub broken: Vec<String>,
    /// What the scenario's `[seed]` inserted before the load, if it has one.
    pub seeded: Option<Seeded>,
    /// What was removed after the load (None without `[seed]` or when kept).
    pub seed_cleaned: Option<Cleaned>,
    /// Why the run measured nothing, when every connect failed ([`RunResult::unreachable`]).
    pub unreachable: Option<String>,
    /// Every row of the run, when the store went down during it and stayed down: the report
    /// is built from these and they are saved beside it for `herd import`.
    pub lost: Option<Rows>,
    /// The HdrHistogram logs written (`--hdr-log`), or why they could not be: the run and its
    /// report are whole either way.
    pub hdr_logs: Result<Vec<PathBuf>, String>,
}

/// The runtime a run drives its players on: one worker per core, or a single thread on one
/// core, where the multi-threaded scheduler's cross-thread bookkeeping buys nothing (like
/// `wrk -t1`).
pub fn runtime(cores: usize) -> Result<tokio::runtime::Runtime> {
    let mut builder = if cores == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(cores);
        b
    };
    builder
        .enable_all()
        .build()
        .context("starting the driver's runtime")
}

/// The cores the driver may use.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Turns herd's stop signal (a flag set by the signal handler) into the driver's stop
/// channel, and a second signal into its hurry channel (the grace ends at once); `on_stop`
/// runs once when the first fires.
pub fn stop_channel(
    on_stop: impl FnOnce() + Send + 'static,
) -> (
    watch::Receiver<bool>,
    watch::Receiver<bool>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = watch::channel(false);
    let (hurry_tx, hurry_rx) = watch::channel(false);
    let task = tokio::spawn(async move {
        while !signals::stop_requested() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tx.send_replace(true);
        on_stop();
        while !signals::hurry_requested() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tracing::info!(
            "second signal: ending the grace now; requests in flight count as cancelled"
        );
        hurry_tx.send_replace(true);
    });
    (rx, hurry_rx, task)
}

/// Under the tables, what to do about each TLS outcome the run had (the outcome names the
/// problem; the remedy would otherwise be in the docs only).
pub fn print_hints(report: &RunResult) {
    let hints = herd_report::text::tls::hints(report);
    if !hints.is_empty() {
        outln!("\n{}", hints.join("\n"));
    }
}

/// How `herd drive` drives: the players alone, with no probe and no store.
#[derive(Debug, Clone)]
pub struct DriveConfig {
    /// How long requests in flight may take once the plan ends or a stop arrives.
    pub grace: Duration,
    /// Length of one timeline interval.
    pub interval: Duration,
    /// Print the live view on stdout.
    pub live: bool,
    /// Serve the run's metrics at `http://ADDR/metrics` while it lasts (`--listen`).
    pub listen: Option<std::net::SocketAddr>,
    /// Which part of the plan this process runs (`--shard I/N`).
    pub shard: herd_model::Shard,
}

/// How long `--listen` waits, after the load, for a last scrape of the final counts (a
/// Prometheus `scrape_interval` up to this sees them; docs/metrics.md).
const LAST_SCRAPE: Duration = Duration::from_secs(10);

/// Drives `scenario`'s players until the plan ends or a stop signal, showing the live view.
pub fn drive(scenario: Scenario, config: &DriveConfig) -> Result<RunResult> {
    // Bound before the first request: a port in use costs nothing but its message.
    let endpoint = config
        .listen
        .map(|a| RunEndpoint::bind(a, &scenario))
        .transpose()?;
    let cores = cores();
    runtime(cores)?.block_on(async {
        let mut watch = Watchers::new(&scenario, config.live, endpoint);
        let (stop_rx, hurry_rx, watcher) = stop_channel(watch.on_stop());
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let opts = RunOptions {
            stop: Some(stop_rx),
            hurry: Some(hurry_rx),
            grace: config.grace,
            interval: config.interval,
            events: Some(events_tx),
            cores,
            shard: config.shard,
            // `herd drive --json` writes every interval in its result.
            keep_intervals: true,
        };
        let driver = tokio::spawn(herd_driver::run(scenario, opts));
        follow(&mut events, None, &mut watch, None).await?;
        watcher.abort();
        watch.finish().await;
        Ok(driver.await.context("the driver task panicked")??)
    })
}

/// Runs the scenario and writes the report.
pub fn run(config: &RunConfig) -> Result<RunEnd> {
    // Bound before the store, the seeding and the load: a port in use costs nothing.
    let endpoint = config
        .listen
        .map(|a| RunEndpoint::bind(a, &config.scenario))
        .transpose()?;
    let cores = cores();
    // Multi-threaded even on one core: the recorder and the driver must not wait on each
    // other's store writes.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .enable_all()
        .build()
        .context("starting the run's runtime")?;
    rt.block_on(async {
        // Opened before any load starts: an unreachable store costs nothing but this message.
        let store = Store::open(&config.store).await?;
        // Seeded before the probe attaches and the load starts (an unreachable database fails
        // here); the rows are removed below however the run ends, Ctrl-C and failure included.
        let shown = config.scenario.file.clone();
        let seeding = RunSeeding::start(
            config.scenario.seed.as_ref(),
            &shown,
            &signals::stop_requested,
        )
        .await?;
        if let Some(s) = &seeding {
            tracing::info!("herd run: {}", s.seeded.line(s.shown()));
        }
        let driven = record(
            config,
            &store,
            seeding.as_ref().map(|s| &s.seeded),
            cores,
            endpoint,
        )
        .await;
        let result = match seeding {
            None => match driven {
                Ok(outcome) => write_reports(&store, outcome, &config.out, &config.hdr_log).await,
                Err(e) => Err(e),
            },
            Some(seeding) => finish_seeding(config, &store, driven, seeding).await,
        };
        // Closed, not dropped: SQLite folds its WAL into runs.db and removes -wal and -shm.
        store.close().await;
        result
    })
}

/// Removes (or keeps) the seeded rows, records what became of them, then writes the report.
async fn finish_seeding(
    config: &RunConfig,
    store: &Store,
    driven: Result<RunEnd>,
    seeding: RunSeeding,
) -> Result<RunEnd> {
    let shown = &config.scenario.file;
    let (seeded, db) = (seeding.seeded.clone(), seeding.shown().to_owned());
    match (driven, seeding.finish(config.keep_seed, shown).await) {
        (Ok(mut outcome), Ok((cleaned, line))) => {
            outln!("seed: {}", seeded.line(&db));
            outln!("seed: {line}");
            let record = match (&cleaned, config.keep_seed) {
                (Some(c), _) => c.record(),
                (None, true) => CleanupRecord::Kept,
                (None, false) => CleanupRecord::AlreadyRemoved,
            };
            put_after(store, &mut outcome, Source::SeedCleanup, &record).await?;
            outcome.seeded = Some(seeded);
            outcome.seed_cleaned = cleaned;
            write_reports(store, outcome, &config.out, &config.hdr_log).await
        }
        (Ok(mut outcome), Err(e)) => {
            // The load ran: its report still says the cleanup failed, then the error.
            let _ = put_after(
                store,
                &mut outcome,
                Source::SeedCleanup,
                &CleanupRecord::Failed,
            )
            .await;
            if let Err(r) = write_reports(store, outcome, &config.out, &config.hdr_log).await {
                tracing::error!("herd run: writing the report: {}", crate::error_text(&r));
            }
            Err(e)
        }
        (Err(e), Ok((_, line))) => {
            tracing::info!("herd run: {line}");
            Err(e)
        }
        (Err(e), Err(c)) => {
            tracing::error!("herd run: {}", crate::error_text(&c));
            Err(e)
        }
    }
}

/// A row written after the load: to the store, or to the rows in memory once it is lost.
async fn put_after(
    store: &Store,
    outcome: &mut RunEnd,
    source: Source,
    body: &impl serde::Serialize,
) -> Result<()> {
    match &mut outcome.lost {
        Some(rows) => {
            rows.rows.push(Row {
                source: source.as_str().to_owned(),
                seq: 0,
                at_ns: 0,
                body: serde_json::to_value(body)?,
            });
            Ok(())
        }
        None => store.put(outcome.run_id, source, 0, 0, body).await,
    }
}

/// Builds the run's report from the store (or, when the store was lost, from the rows in
/// memory, saved beside the report) and writes its files.
async fn write_reports(
    store: &Store,
    mut outcome: RunEnd,
    out: &std::path::Path,
    hdr_log: &Option<PathBuf>,
) -> Result<RunEnd> {
    let Some(rows) = outcome.lost.take() else {
        let data = store.load_run(Some(outcome.run_id)).await?;
        let written = herd_report::write_report(&Report::build(&data), out)?;
        outcome.files = written.files;
        outcome.slo_failed = written.slo_failed;
        outcome.broken = written.broken;
        if let Some(dir) = &hdr_log {
            outcome.hdr_logs = hdr_logs(&data, dir, store.url()).map_err(|e| crate::error_text(&e));
        }
        return Ok(outcome);
    };
    std::fs::create_dir_all(out)
        .with_context(|| format!("creating the output directory {}", out.display()))?;
    let saved = out.join(format!("run-{}-rows.json", outcome.run_id));
    rows.save(&saved)?;
    let written = herd_report::write_report(&Report::build(&rows.clone().run_data()?), out)?;
    for f in &written.files {
        outln!("wrote {}", f.display());
    }
    outln!("wrote {}", saved.display());
    anyhow::bail!(
        "the run store {} went down during run {} and stayed down: the tables above and the \
         report are complete, and every row is in {}; once the store is back, \
         `herd import {} --store URL` puts the run into it",
        outcome.store,
        outcome.run_id,
        saved.display(),
        saved.display()
    )
}

/// Writes run `data`'s HdrHistogram interval logs into `dir`; an error names the run and
/// `herd report` to write them again from the store at `store`.
pub fn hdr_logs(
    data: &herd_model::RunData,
    dir: &std::path::Path,
    store: &str,
) -> Result<Vec<PathBuf>> {
    let id = data.meta.id;
    let again = || {
        format!(
            "writing the HdrHistogram logs of run {id} into {} (--hdr-log); the run is \
             recorded in {}: `herd report {id} --hdr-log DIR` writes them from there",
            dir.display(),
            herd_store::redact(store)
        )
    };
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating {}", dir.display()))
        .with_context(again)?;
    herd_report::export::hdr::write_logs(data, dir).with_context(again)
}

/// Records the run: begins it in the store, attaches the probe, drives, and commits every
/// row as it arrives, then closes the run with its status.
async fn record(
    config: &RunConfig,
    store: &Store,
    seeded: Option<&Seeded>,
    cores: usize,
    endpoint: Option<RunEndpoint>,
) -> Result<RunEnd> {
    let scenario = &config.scenario;
    let meta = match &config.run_key {
        Some(key) => {
            store
                .join(
                    key,
                    config.shard,
                    &config.name,
                    &scenario.file,
                    herd_probe::clock::now_ns(),
                )
                .await?
        }
        None => {
            store
                .begin(&config.name, &scenario.file, herd_probe::clock::now_ns())
                .await?
        }
    };
    let sharded = config.run_key.as_ref().map(|_| config.shard);
    tracing::info!(
        "herd run: run {} ({}{}) recorded in {}",
        meta.id,
        config.name,
        sharded.map_or(String::new(), |s| format!(", shard {s}")),
        store.url()
    );
    let mut rec = Recorder::new(
        store,
        meta.clone(),
        Writer::Run {
            shard: sharded.map(|s| s.index),
        },
    );
    rec.put_once(Source::Slo, &scenario.slo).await?;
    rec.put_once(Source::Expected, &scenario.expected_outcomes())
        .await?;
    if let Some(s) = seeded {
        // Counts, tables and time only: never the database's URL.
        rec.put_once(Source::Seed, &s.record()).await?;
    }

    // The probe samples in its own thread and sends intervals to the recorder.
    let (probe_tx, mut probe_rx) = mpsc::unbounded_channel::<ProbeInterval>();
    let probe_stop = Arc::new(AtomicBool::new(false));
    // The probe thread renders its exposition here for --listen.
    let probe_text = endpoint
        .is_some()
        .then(|| Arc::new(Mutex::new(String::new())));
    let probe_thread = if !config.probe {
        rec.put_once(Source::ProbeMissing, &"the run was started with --no-probe")
            .await?;
        None
    } else {
        match start_probe(config, probe_tx, probe_stop.clone(), probe_text.clone()) {
            Ok(t) => Some(t),
            Err(e) => {
                let why = crate::error_text(&e);
                tracing::warn!("herd run: driving without the kernel probe: {why}");
                rec.put_once(Source::ProbeMissing, &why).await?;
                None
            }
        }
    };

    let mut started = None;
    if let Some(shard) = sharded {
        let at = match store.barrier(meta.id, shard, config.shard_timeout).await {
            Ok(at) => at,
            Err(e) => {
                let _ = store.finish_shard(meta.id, shard.index, "failed").await;
                probe_stop.store(true, Ordering::SeqCst);
                return Err(e);
            }
        };
        // The start is on the store's clock, which every shard reads through the same server:
        // shards on hosts whose clocks differ still start together (to within half the round
        // trip of the read); each then times its plan from its own monotonic clock.
        let clock = store.clock().await?;
        tracing::info!(
            "herd run: all {} shards of run {} registered; starting at {} on the run store's \
             clock (this host's reads {:+.1} ms off it)",
            shard.count,
            meta.id,
            humantime::format_rfc3339_millis(at),
            clock.ahead_ns as f64 / 1e6
        );
        if let Ok(wait) = clock.to_local(at).duration_since(herd_store::wall_now()) {
            tokio::time::sleep(wait).await;
        }
        rec.start_at(herd_probe::clock::now_ns());
        started = Some((clock.now(), clock));
    }
    let mut watch = Watchers::new(scenario, config.live, endpoint);
    let (stop_rx, hurry_rx, watcher) = stop_channel(watch.on_stop());
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let driver = tokio::spawn(herd_driver::run(
        scenario.clone(),
        RunOptions {
            stop: Some(stop_rx),
            hurry: Some(hurry_rx),
            grace: config.grace,
            interval: config.interval,
            events: Some(events_tx),
            cores,
            shard: config.shard,
            // The store has every interval: the driver's memory stays flat.
            keep_intervals: false,
        },
    ));
    if let (Some((at, clock)), Some(shard)) = (started, sharded) {
        store.shard_started(meta.id, shard.index, at, clock).await?;
    }

    let final_report = follow(
        &mut events,
        probe_thread
            .is_some()
            .then_some((&mut probe_rx, probe_stop.as_ref(), probe_text.as_ref())),
        &mut watch,
        Some(&mut rec),
    )
    .await?;
    watcher.abort();
    watch.finish().await;
    let driven = driver.await.context("the driver task panicked")?;
    if let Some(t) = probe_thread {
        t.join()
            .map_err(|_| anyhow::anyhow!("the probe thread panicked"))??;
    }
    let status = match (&driven, &final_report) {
        (Err(_), _) => "failed",
        (Ok(r), _) if r.stopped_early => "stopped",
        _ => "finished",
    };
    let lost = rec.finish(status).await;
    if let (Err(_), Some(rows)) = (&driven, &lost) {
        // A failed run on a lost store: its rows are all that is left of it.
        let saved = config.out.join(format!("run-{}-rows.json", meta.id));
        if std::fs::create_dir_all(&config.out).is_ok() && rows.save(&saved).is_ok() {
            tracing::error!(
                "herd run: the store is down; the run's rows are in {}",
                saved.display()
            );
        }
    }
    driven.context("driving the scenario")?;
    if let Some(r) = &final_report {
        out!("\n{}", text::table(r));
        print_hints(r);
    }
    // The report is written once the seeded rows' fate is recorded.
    Ok(RunEnd {
        run_id: meta.id,
        store: store.url().to_owned(),
        files: Vec::new(),
        slo_failed: false,
        broken: Vec::new(),
        seeded: None,
        seed_cleaned: None,
        unreachable: final_report.as_ref().and_then(RunResult::unreachable),
        lost,
        hdr_logs: Ok(Vec::new()),
    })
}

/// What a session shows while it drives: the live view on stdout and the `--listen`
/// endpoint, each fed every driver interval and every probe interval.
struct Watchers {
    /// Shared with the stop signal's handler, which moves the next block below its message.
    live: Option<Arc<Mutex<LiveView>>>,
    endpoint: Option<RunEndpoint>,
}

impl Watchers {
    fn new(scenario: &Scenario, live: bool, endpoint: Option<RunEndpoint>) -> Self {
        Self {
            live: live.then(|| Arc::new(Mutex::new(LiveView::for_stdout(scenario)))),
            endpoint,
        }
    }

    /// What the first stop signal does: says so, below the live block.
    fn on_stop(&self) -> impl FnOnce() + Send + 'static {
        let live = self.live.clone();
        move || {
            tracing::info!("stopping: no new requests; in-flight ones get the grace to finish");
            if let Some(live) = live {
                live.lock().expect("the live view's lock").written_below();
            }
        }
    }

    fn driver_interval(&mut self, iv: &herd_model::DriverInterval) {
        if let Some(ep) = self.endpoint.as_mut() {
            ep.driver_interval(iv);
        }
        if let Some(live) = &self.live {
            let text = live.lock().expect("the live view's lock").interval(iv);
            out!("{text}");
        }
    }

    fn probe_interval(&mut self, iv: &ProbeInterval, text: Option<&Arc<Mutex<String>>>) {
        if let Some(live) = &self.live {
            live.lock().expect("the live view's lock").probe(iv);
        }
        if let (Some(ep), Some(text)) = (self.endpoint.as_mut(), text) {
            ep.probe(text.lock().map(|t| t.clone()).unwrap_or_default());
        }
    }

    /// After the load: the endpoint waits for a last scrape of the final counts.
    async fn finish(self) {
        if let Some(ep) = self.endpoint {
            ep.finish(LAST_SCRAPE).await;
        }
    }
}

/// The probe's side of a session: its intervals, the flag that stops it once the load is
/// over, and the exposition text it renders for `--listen`.
type ProbeFeed<'a> = (
    &'a mut mpsc::UnboundedReceiver<ProbeInterval>,
    &'a AtomicBool,
    Option<&'a Arc<Mutex<String>>>,
);

/// The one event loop of `herd drive` and `herd run`: every driver event and every probe
/// interval goes to the watchers and, in a run, to the recorder, until the driver's stream
/// and the probe's have both ended. Returns the driver's final result, once it came.
async fn follow(
    events: &mut mpsc::UnboundedReceiver<DriverEvent>,
    mut probe: Option<ProbeFeed<'_>>,
    watch: &mut Watchers,
    mut rec: Option<&mut Recorder>,
) -> Result<Option<RunResult>> {
    let stop_probe = |p: &Option<ProbeFeed<'_>>| {
        if let Some((_, stop, _)) = p {
            stop.store(true, Ordering::SeqCst);
        }
    };
    let (mut driver_open, mut probe_open) = (true, probe.is_some());
    let mut final_result = None;
    while driver_open || probe_open {
        tokio::select! {
            e = events.recv(), if driver_open => match e {
                Some(e) => {
                    if let DriverEvent::Interval(iv) = &e {
                        watch.driver_interval(iv);
                    }
                    let done = match rec.as_deref_mut() {
                        Some(rec) => rec.driver_event(e).await?,
                        None => match e {
                            DriverEvent::Done(r) => Some(*r),
                            _ => None,
                        },
                    };
                    if let Some(r) = done {
                        final_result = Some(r);
                        // The load is over: take the probe's last interval and stop it.
                        stop_probe(&probe);
                    }
                }
                None => {
                    driver_open = false;
                    stop_probe(&probe);
                }
            },
            iv = async { probe.as_mut().expect("open only with a probe").0.recv().await }, if probe_open => match iv {
                Some(iv) => {
                    watch.probe_interval(&iv, probe.as_ref().and_then(|p| p.2));
                    if let Some(rec) = rec.as_deref_mut() {
                        rec.probe_interval(&iv).await?;
                    }
                }
                None => probe_open = false,
            },
        }
    }
    Ok(final_result)
}

/// Loads the probe and starts the sampling thread; intervals go to `tx` until `stop`.
fn start_probe(
    config: &RunConfig,
    tx: mpsc::UnboundedSender<ProbeInterval>,
    stop: Arc<AtomicBool>,
    text: Option<Arc<Mutex<String>>>,
) -> Result<std::thread::JoinHandle<Result<()>>> {
    let layout = CgroupLayout::detect()?;
    let set = ContainerSet::from_args(&layout, &config.containers)?.with_discovery();
    let probe = attach::probe(
        &herd_probe::ProbeOptions {
            verifier_log: false,
            connect_syscalls: config.connect_syscalls,
        },
        config.runq,
        true,
    )?;
    // After the probe loads: a missing capability is the one line herd prints then.
    crate::note_docker_names(&layout);
    let mut sampler = Sampler::new(probe, set, layout)?;
    let every = config.interval;
    Ok(std::thread::Builder::new()
        .name("herd-probe".into())
        .spawn(move || {
            let until = || stop.load(Ordering::SeqCst);
            let w = Watch {
                every,
                total: Duration::from_secs(7 * 24 * 3600),
                until: &until,
                stop: &signals::stop_requested,
            };
            let mut gauges = herd_report::export::prometheus::Gauges::default();
            watch(&mut sampler, &w, |iv, sampler| {
                if let Some(text) = &text {
                    // Rendered before the interval is sent, so the recorder's copy is current.
                    gauges.add(iv);
                    let mut body =
                        herd_report::export::prometheus::counters(&sampler.running_totals());
                    body.push_str(&gauges.render());
                    if let Ok(mut t) = text.lock() {
                        *t = body;
                    }
                }
                // The recorder may be gone if the run failed; the probe just stops.
                let _ = tx.send(iv.clone());
                anyhow::Ok(())
            })
        })?)
}
