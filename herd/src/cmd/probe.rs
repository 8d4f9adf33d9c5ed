//! `herd probe`: the kernel probe alone, next to whatever makes the load (k6, wrk, herd drive).

use std::{io::Write as _, path::PathBuf, time::Duration};

use anyhow::{Context as _, Result};
use herd_driver::units::{parse_duration, parse_interval};
use herd_model::ProbeInterval;
use herd_probe::{
    cgroup::CgroupLayout,
    containers::ContainerSet,
    sampler::{Sampler, Watch, watch},
};

use crate::{attach, signals};

/// Options of `herd probe`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  sudo herd probe                                   # 10 s, every container discovered, a table per interval
  sudo herd probe --duration 5m --out probe.jsonl   # and every interval as a JSON line
  sudo herd probe --duration 10m --listen 127.0.0.1:9464   # Prometheus scrapes /metrics
  sudo herd probe --container gateway=/system.slice/gateway.service --no-discover

Run it beside wrk, k6 or your own load tool; `herd run` runs it beside herd's driver.")]
pub struct ProbeArgs {
    /// Name a container: NAME=CGROUP_PATH, the cgroup v2 directory, absolute or relative to
    /// the unified root (e.g. gateway=/system.slice/gateway.service). Repeatable. Sockets of
    /// descendant cgroups count for the container; everything else counts as `host`.
    #[arg(long = "container", value_name = "NAME=CGROUP_PATH")]
    pub containers: Vec<String>,
    /// How long to watch (e.g. 30s, 5m). Ctrl-C stops earlier and still prints the summary.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Sampling interval, 100ms or more.
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Also write every interval as one JSON line to FILE (flushed each interval).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Print the kernel verifier's log if a program is rejected.
    #[arg(long)]
    pub verbose: bool,
    /// Also count the connect() failures that precede any TCP state: no route (ENETUNREACH,
    /// EHOSTUNREACH), a policy's EACCES/EPERM, any other errno. It attaches the connect()
    /// syscall tracepoints, which put every syscall on the host on the kernel's slower traced
    /// path (13 % more time per pipe round trip measured, docs/benchmarks.md). Without it the
    /// connect errors are those a socket shows: refused, timed out, ICMP unreachable, no free
    /// local port.
    #[arg(long)]
    pub connect_syscalls: bool,
    /// Leave out the run-queue delay (by default counted from the scheduler's per-thread
    /// totals with one walk of the host's threads per poll, nothing on a context switch): no
    /// run-queue delay, no `cpu_contention` from it (PSI cpu stays), nothing else lost.
    #[arg(long, conflicts_with = "runq_waits")]
    pub no_runq: bool,
    /// Time each run-queue wait with a program on every context switch of the host: per-wait
    /// percentiles (p99, the `runq_p99` gate, the histogram's buckets in Prometheus) beside
    /// the count and sum. Costs 150–180 ns per switch measured on a 2-vCPU VM (7 % of a pipe
    /// ping-pong, docs/benchmarks.md).
    #[arg(long)]
    pub runq_waits: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics while the probe runs (e.g.
    /// 127.0.0.1:9464; port 0 picks a free one, printed at start).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// Destination lines per interval: the most active pairs (new connections + TIME_WAIT
    /// entries); the rest are one `other` line of sums.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub pair_rows: usize,
    /// Only count the --container cgroups; do not discover Docker containers, Kubernetes
    /// pods, systemd services and herd's own containers.
    #[arg(long)]
    pub no_discover: bool,
    /// Of the Docker containers, only those of the engine herd asks (DOCKER_HOST, else
    /// /var/run/docker.sock): a container that engine does not know is another engine's on
    /// the same kernel (several nodes on one host) and counts in `host`. `herd launch swarm`'s
    /// probes run with it.
    #[arg(long, conflicts_with = "no_discover")]
    pub engine_only: bool,
    /// Write every interval into the run store at URL as a probe of run --run (a probe per
    /// node beside the shards of a sharded run, docs/scale-out.md); stops when the run ends.
    #[arg(long, value_name = "URL", group = "store_source")]
    pub store: Option<String>,
    /// Read the run store URL from FILE instead (a mounted secret: /run/secrets/NAME).
    #[arg(long, value_name = "FILE", group = "store_source")]
    pub store_file: Option<PathBuf>,
    /// The run whose probe this is (with --store).
    #[arg(
        long,
        value_name = "ID",
        requires = "store_source",
        conflicts_with = "run_key"
    )]
    pub run: Option<i64>,
    /// The run by its shards' --run-key (with --store): waits up to 10 minutes for its
    /// first shard to create it.
    #[arg(long, value_name = "KEY", requires = "store_source")]
    pub run_key: Option<String>,
    /// This node's name in the report (default: the host's name; `herd launch swarm` sets
    /// HERD_NODE to the Swarm node's hostname).
    #[arg(long, value_name = "NAME", env = "HERD_NODE")]
    pub node: Option<String>,
    /// Run the probe in a container this engine starts beside this one (privileged, the
    /// host's PID and network namespaces), through the Docker socket mounted at
    /// /var/run/docker.sock: how a Swarm service, which can be neither, probes its node
    /// (`herd launch swarm`). Waits for it and removes it on SIGTERM or when it exits.
    #[arg(long, hide = true, requires_all = ["engine_image", "run_key"])]
    pub via_engine: bool,
    /// With --via-engine: the image the probe container runs (herd at its entrypoint).
    #[arg(long, hide = true, value_name = "IMAGE")]
    pub engine_image: Option<String>,
    /// With --via-engine: the engine's socket on the node, bind-mounted into the probe
    /// container so that it names containers.
    #[arg(
        long,
        hide = true,
        value_name = "PATH",
        default_value = "/var/run/docker.sock"
    )]
    pub engine_socket: String,
}

/// What `herd probe --store` prints on stderr once its programs are attached, before it waits
/// for the run: the line a swarm probe sidecar waits for (`herd launch swarm` starts the
/// shards once every node's probe has printed it).
pub const ATTACHED: &str = "herd probe: the kernel probe is attached";

/// Where `herd probe --store URL --run ID` writes, and the run's clock it writes on.
struct NodeSink {
    rt: tokio::runtime::Runtime,
    store: herd_store::Store,
    run: i64,
    /// The store's one run writer, buffering and retrying while the store is down.
    rec: herd_store::Recorder,
    /// The run's clock, once the run has started: its monotonic base, the wall-clock instant
    /// (ns) it stands for, and whether that instant is on the store's clock (a sharded run).
    clock: Option<(u64, i64, bool)>,
    /// True once the run is no longer running.
    over: bool,
    /// This host's clock against the store's: a sharded run's start is on the store's clock.
    store_clock: herd_store::StoreClock,
}

impl NodeSink {
    fn open(url: &str, run: Option<i64>, key: Option<&str>, node: String) -> Result<Self> {
        let rt = super::store_runtime("probe's store")?;
        let store = rt.block_on(herd_store::Store::open(url))?;
        let run = match (run, key) {
            (Some(run), _) => run,
            (None, Some(key)) => rt.block_on(store.wait_for_key(key, Duration::from_secs(600)))?,
            (None, None) => {
                return Err(crate::environment(anyhow::anyhow!(
                    "--store needs --run ID or --run-key KEY: the run this probe belongs to"
                )));
            }
        };
        let meta = rt.block_on(store.meta(Some(run)))?;
        let store_clock = rt.block_on(store.clock())?;
        tracing::info!(
            "herd probe: writing node {node}'s intervals into run {} ({}) in {}",
            meta.id,
            meta.name,
            store.url()
        );
        let rec = herd_store::Recorder::new(&store, meta, herd_store::Writer::Node(node));
        Ok(Self {
            rt,
            store,
            run,
            rec,
            clock: None,
            over: false,
            store_clock,
        })
    }

    /// Writes `iv` on the run's clock: the run's monotonic base plus the wall-clock time since
    /// the run's start (a node's monotonic clock means nothing on another host), read on the
    /// store's clock for a sharded run. Intervals before the run has started are not written.
    fn put(&mut self, iv: &ProbeInterval) -> Result<()> {
        let meta = match self.rt.block_on(self.store.meta(Some(self.run))) {
            Ok(meta) => meta,
            // The store is down: the writer keeps the rows of a run already started.
            Err(_) if self.clock.is_some() => return self.write(iv),
            Err(e) => return Err(e),
        };
        self.over = meta.status != "running";
        if self.clock.is_none() {
            // A sharded run starts when its shards do, on the store's clock (their common
            // start); a run of one process when it began, on its host's.
            let sharded = !meta.shards.is_empty();
            let start_ns = if sharded {
                meta.shards.iter().filter_map(|s| s.started_unix_ns).min()
            } else {
                Some(meta.started_unix_ms * 1_000_000)
            };
            self.clock = start_ns.map(|s| (meta.mono_start_ns as u64, s, sharded));
        }
        self.write(iv)
    }

    /// Writes `iv` on the run's clock, once the run has started.
    fn write(&mut self, iv: &ProbeInterval) -> Result<()> {
        let Some((mono0, start_ns, sharded)) = self.clock else {
            return Ok(());
        };
        let now = if sharded {
            self.store_clock.now()
        } else {
            std::time::SystemTime::now()
        };
        let now_ns = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        let Some(since) = u64::try_from(now_ns - start_ns).ok() else {
            return Ok(());
        };
        let mut row = iv.clone();
        row.at_ns = mono0 + since;
        self.rt.block_on(self.rec.probe_interval(&row))
    }

    /// Writes what is still buffered; says so when some never reached the store.
    fn finish(self) {
        let Self { rt, rec, run, .. } = self;
        if rt.block_on(rec.finish("finished")).is_some() {
            tracing::error!(
                "herd probe: the run store stayed down: the intervals this node sampled since \
                 it went down are not in run {run}"
            );
        }
    }
}

/// Runs `herd probe`.
pub fn run(args: &ProbeArgs) -> Result<()> {
    if args.via_engine {
        let sidecar = crate::launch::swarm::Sidecar {
            image: args
                .engine_image
                .clone()
                .context("--via-engine needs --engine-image IMAGE, the image the probe runs in")?,
            store: super::store_or_file(&args.store, &args.store_file)?
                .context("--via-engine needs --store-file or --store")?,
            key: args
                .run_key
                .clone()
                .context("--via-engine needs --run-key KEY")?,
            node: args.node.clone().unwrap_or_else(|| "node".into()),
            engine_socket: args.engine_socket.clone(),
            duration: args.duration,
        };
        return crate::launch::swarm::probe_via_engine(&sidecar);
    }
    let layout = CgroupLayout::detect().map_err(crate::environment)?;
    let mut set = ContainerSet::from_args(&layout, &args.containers)?;
    if !args.no_discover {
        set = set.with_discovery();
    }
    if args.engine_only {
        set = set.only_this_engine();
    }
    let mut out = match &args.out {
        Some(p) => Some(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating --out {}", p.display()))?,
        )),
        None => None,
    };
    let store = super::store_or_file(&args.store, &args.store_file)?;
    // Attached before waiting for the run: a probe per node counts from the shards' first
    // connection, however soon after the first shard's registration they start.
    let probe = attach::probe(
        &herd_probe::ProbeOptions {
            verifier_log: args.verbose,
            connect_syscalls: args.connect_syscalls,
        },
        crate::attach::Runq::of(args.no_runq, args.runq_waits),
        false,
    )?;
    if store.is_some() {
        errln!("{ATTACHED}");
    }
    let mut sink = match (&store, args.run) {
        (Some(url), run) => {
            let node = args.node.clone().unwrap_or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|h| h.trim().to_owned())
                    .unwrap_or_else(|_| "node".into())
            });
            Some(NodeSink::open(url, run, args.run_key.as_deref(), node)?)
        }
        _ => None,
    };
    let over = std::cell::Cell::new(false);
    let metrics = args
        .listen
        .map(crate::output::metrics::MetricsServer::start)
        .transpose()?;
    // After the probe loads: a missing capability is the one line herd prints then.
    if !args.no_discover {
        crate::note_docker_names(&layout);
    }
    let mut sampler = Sampler::new(probe, set, layout)?;
    if let Some(m) = &metrics {
        m.publish(herd_report::export::prometheus::counters(
            &sampler.running_totals(),
        ));
        tracing::info!("herd probe: metrics at http://{}/metrics", m.addr());
    }
    tracing::info!(
        "herd probe: watching {} for {} every {}; Ctrl-C stops",
        sampler.containers().names().join(", "),
        humantime::format_duration(args.duration),
        humantime::format_duration(args.interval)
    );
    let t0 = herd_probe::clock::now_ns();
    // A probe whose only output is stdout ends once its reader went away (`| head`), as a
    // Unix tool would on SIGPIPE, but with its programs detached and exit code 0.
    let stdout_only = args.out.is_none() && store.is_none() && args.listen.is_none();
    let w = Watch {
        every: args.interval,
        total: args.duration,
        until: &|| over.get() || (stdout_only && crate::output::stdio::stdout_gone()),
        stop: &signals::stop_requested,
    };
    let mut gauges = herd_report::export::prometheus::Gauges::default();
    watch(&mut sampler, &w, |iv, sampler| {
        for line in herd_report::text::probe::interval_lines(iv, t0, args.pair_rows) {
            outln!("{line}");
        }
        if let Some(sink) = sink.as_mut() {
            sink.put(iv)?;
            over.set(sink.over);
        }
        if let Some(m) = &metrics {
            gauges.add(iv);
            let mut body = herd_report::export::prometheus::counters(&sampler.running_totals());
            body.push_str(&gauges.render());
            m.publish(body);
        }
        if let Some(out) = out.as_mut() {
            serde_json::to_writer(&mut *out, iv)?;
            out.write_all(b"\n")?;
            out.flush().context("writing --out")?;
        }
        anyhow::Ok(())
    })?;
    if let Some(sink) = sink {
        sink.finish();
    }
    let totals = sampler.totals();
    drop(sampler);
    outln!();
    out!("{}", herd_report::text::probe::totals_table(&totals));
    if let Some(sig) = signals::received() {
        tracing::info!("herd probe: stopped by signal {sig}; programs detached");
    }
    Ok(())
}
