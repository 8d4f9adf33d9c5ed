//! `herd probe`: the kernel probe alone, next to whatever makes the load (k6, wrk, herd drive).

use std::{io::Write as _, path::PathBuf, time::Duration};

use anyhow::{Context as _, Result};
use herd_driver::units::{parse_duration, parse_interval};
use herd_probe::{
    cgroup::CgroupLayout,
    cgroupfs::Throttling,
    containers::ContainerSet,
    sample::{CpuCell, Interval},
    sampler::{Sampler, Watch, watch},
};
use probe_common::Counter;

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
    node: String,
    seq: u64,
    /// The run's clock: its monotonic base and the wall-clock instant (ns) it stands for,
    /// once the run has started.
    clock: Option<(u64, i64)>,
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
        Ok(Self {
            rt,
            store,
            run,
            node,
            seq: 0,
            clock: None,
            over: false,
            store_clock,
        })
    }

    /// Writes `iv` on the run's clock: the run's monotonic base plus the wall-clock time since
    /// the run's start (a node's monotonic clock means nothing on another host), read on the
    /// store's clock for a sharded run. Intervals before the run has started are not written.
    fn put(&mut self, iv: &Interval) -> Result<()> {
        let meta = self.rt.block_on(self.store.meta(Some(self.run)))?;
        self.over = meta.status != "running";
        if self.clock.is_none() {
            // A sharded run starts when its shards do; a run of one process when it began.
            let start_ns = if meta.shards.is_empty() {
                Some(meta.started_unix_ms * 1_000_000)
            } else {
                meta.shards.iter().filter_map(|s| s.started_unix_ns).min()
            };
            self.clock = start_ns.map(|s| (meta.mono_start_ns as u64, s));
        }
        let Some((mono0, start_ns)) = self.clock else {
            return Ok(());
        };
        // A sharded run's start is on the store's clock (the shards' common start); a run of
        // one process began on its host's.
        let now = if meta.shards.is_empty() {
            std::time::SystemTime::now()
        } else {
            self.store_clock.now()
        };
        let now_ns = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        let Some(since) = u64::try_from(now_ns - start_ns).ok() else {
            return Ok(());
        };
        let mut row = iv.clone();
        row.at_ns = mono0 + since;
        self.rt.block_on(
            self.store
                .put_node_probe(self.run, &self.node, self.seq, &row),
        )?;
        self.seq += 1;
        Ok(())
    }
}

/// Formats one interval: a line per active container (TCP opens, TIME_WAIT entries, CPU
/// average / busiest 100 ms / quota, throttled share), then one line per active destination.
pub fn print_interval(iv: &Interval, since_ns: u64, pair_rows: usize) {
    let secs = iv.interval_ns.max(1) as f64 / 1e9;
    let t = iv.at_ns.saturating_sub(since_ns) as f64 / 1e9;
    let mut lines = Vec::new();
    for c in &iv.containers {
        let (conn, acc, tw) = (
            c.counts.get(Counter::Connects),
            c.counts.get(Counter::Accepts),
            c.counts.get(Counter::TimeWaitEntries),
        );
        let cpu = match &c.cpu {
            CpuCell::Measured(ci) => {
                let quota = match &ci.throttle {
                    Throttling::Measured {
                        quota_cores: Some(q),
                        throttled_share,
                        ..
                    } => format!("/{q:.2} cap, throttled {:.0}%", throttled_share * 100.0),
                    _ => String::new(),
                };
                Some((
                    ci.cpu_cores,
                    format!(
                        "cpu {:.2} (burst {:.2}{quota})",
                        ci.cpu_cores, ci.burst_cores
                    ),
                ))
            }
            CpuCell::Unavailable { .. } => None,
        };
        let busy = cpu.as_ref().is_some_and(|(cores, _)| *cores >= 0.05);
        if conn + acc + tw == 0 && !busy {
            continue;
        }
        let errors: u64 = Counter::CONNECT_ERRORS
            .iter()
            .map(|k| c.counts.get(*k))
            .sum();
        let mut line = format!(
            "  {:<14} conn {:>6.0}/s  acc {:>6.0}/s  tw+ {:>6.0}/s",
            c.container,
            conn as f64 / secs,
            acc as f64 / secs,
            tw as f64 / secs
        );
        if errors > 0 {
            line.push_str(&format!("  connect errors {errors}"));
        }
        if let Some((_, text)) = cpu {
            line.push_str("  ");
            line.push_str(&text);
        }
        lines.push(line);
    }
    let lost = if iv.lost > 0 {
        format!("  LOST {} events", iv.lost)
    } else {
        String::new()
    };
    if lines.is_empty() {
        println!("{t:>7.1}s  (quiet){lost}");
    } else {
        println!("{t:>7.1}s{lost}");
        for l in lines {
            println!("{l}");
        }
    }
    for l in pair_lines(iv, pair_rows) {
        println!("{l}");
    }
}

/// One line per destination of the interval, the `limit` most active first (by new
/// connections plus TIME_WAIT entries), then one `other` line summing the rest: a server
/// host's thousands of destinations must not flood the view.
pub fn pair_lines(iv: &Interval, limit: usize) -> Vec<String> {
    let secs = iv.interval_ns.max(1) as f64 / 1e9;
    let mut pairs: Vec<&herd_probe::sample::PairInterval> = iv.pairs.iter().collect();
    pairs.sort_by_key(|p| std::cmp::Reverse(p.connects + p.time_wait_entries));
    let mut lines: Vec<String> = pairs
        .iter()
        .take(limit)
        .map(|p| {
            let to = match &p.remote_container {
                Some(c) => format!("{c} ({})", p.remote),
                None => p.remote.to_string(),
            };
            format!(
                "    {} -> {to}: new {:.0}/s, tw+ {:.0}/s, connect p50 <= {}us, lifetime p50 <= {}ms",
                p.container,
                p.connects as f64 / secs,
                p.time_wait_entries as f64 / secs,
                p.connect_latency_us.p50_le,
                p.lifetime_ms.p50_le
            )
        })
        .collect();
    let rest = &pairs[limit.min(pairs.len())..];
    if !rest.is_empty() {
        let connects: u64 = rest.iter().map(|p| p.connects).sum();
        let tw: u64 = rest.iter().map(|p| p.time_wait_entries).sum();
        lines.push(format!(
            "    other: {} more pairs, new {:.0}/s, tw+ {:.0}/s (--pair-rows shows more)",
            rest.len(),
            connects as f64 / secs,
            tw as f64 / secs
        ));
    }
    lines
}

/// Prints the totals table: one row per container, one column per counter that is non-zero
/// somewhere (connects, accepts and TIME_WAIT entries always).
pub fn print_totals(totals: &[(String, herd_probe::Counts)]) {
    let always = [
        Counter::Connects,
        Counter::Accepts,
        Counter::TimeWaitEntries,
    ];
    let cols: Vec<Counter> = Counter::ALL
        .into_iter()
        .filter(|c| always.contains(c) || totals.iter().any(|(_, s)| s[*c as usize] > 0))
        .collect();
    let width = totals
        .iter()
        .map(|(n, _)| n.len())
        .max()
        .unwrap_or(4)
        .max(9);
    print!("{:<width$}", "container");
    for c in &cols {
        print!(" {:>w$}", c.name(), w = c.name().len().max(8));
    }
    println!();
    for (n, s) in totals {
        print!("{n:<width$}");
        for c in &cols {
            print!(" {:>w$}", s[*c as usize], w = c.name().len().max(8));
        }
        println!();
    }
}

/// Runs `herd probe`.
pub fn run(args: &ProbeArgs) -> Result<()> {
    if args.via_engine {
        return crate::swarm::probe_via_engine(args);
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
    let probe = attach::probe(args.verbose)?;
    if store.is_some() {
        eprintln!("{ATTACHED}");
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
        .map(crate::metrics::MetricsServer::start)
        .transpose()?;
    // After the probe loads: a missing capability is the one line herd prints then.
    if !args.no_discover {
        crate::note_docker_names(&layout);
    }
    let mut sampler = Sampler::new(probe, set, layout)?;
    if let Some(m) = &metrics {
        m.publish(sampler.exposition().render());
        tracing::info!("herd probe: metrics at http://{}/metrics", m.addr());
    }
    tracing::info!(
        "herd probe: watching {} for {} every {}; Ctrl-C stops",
        sampler.containers().names().join(", "),
        humantime::format_duration(args.duration),
        humantime::format_duration(args.interval)
    );
    let t0 = herd_probe::clock::now_ns();
    let w = Watch {
        every: args.interval,
        total: args.duration,
        until: &|| over.get(),
        stop: &signals::stop_requested,
    };
    let mut gauges = herd_probe::prometheus::Gauges::default();
    watch(&mut sampler, &w, |iv, sampler| {
        print_interval(iv, t0, args.pair_rows);
        if let Some(sink) = sink.as_mut() {
            sink.put(iv)?;
            over.set(sink.over);
        }
        if let Some(m) = &metrics {
            gauges.add(iv);
            let mut body = sampler.exposition().render();
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
    let totals = sampler.totals();
    drop(sampler);
    println!();
    print_totals(&totals);
    if let Some(sig) = signals::received() {
        tracing::info!("herd probe: stopped by signal {sig}; programs detached");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use herd_probe::sample::{Interval, PairInterval};

    #[test]
    fn the_live_view_shows_the_busiest_pairs_and_one_other_line() {
        let pair = |i: u64| PairInterval {
            container: "gateway".into(),
            remote: format!("198.18.1.{}:80", i + 1).parse().unwrap(),
            remote_container: None,
            connects: i,
            established: 0,
            time_wait_entries: 1,
            closed: 0,
            connect_latency_us: Default::default(),
            lifetime_ms: Default::default(),
            connect_latency_buckets: Default::default(),
            lifetime_buckets: Default::default(),
            gauges: None,
        };
        let iv = Interval {
            at_ns: 1_000_000_000,
            interval_ns: 1_000_000_000,
            containers: vec![],
            pairs: (0..100).map(pair).collect(),
            lost: 0,
            services: vec![],
        };
        let lines = super::pair_lines(&iv, 3);
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(
            lines[0].contains("198.18.1.100:80: new 99/s"),
            "{}",
            lines[0]
        );
        assert!(lines[2].contains("198.18.1.98:80"), "{}", lines[2]);
        // 0 + 1 + … + 96 new connections and 97 TIME_WAIT entries in the other 97 pairs.
        assert_eq!(
            lines[3],
            "    other: 97 more pairs, new 4656/s, tw+ 97/s (--pair-rows shows more)"
        );
        assert_eq!(
            super::pair_lines(&iv, 100).len(),
            100,
            "no other line when all fit"
        );
    }
}
