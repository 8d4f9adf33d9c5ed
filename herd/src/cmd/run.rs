//! `herd run`: the options, turned into a [`RunConfig`] for [`session::run`].

use std::{path::PathBuf, time::Duration};

use anyhow::Result;
use herd_driver::{
    Scenario,
    units::{parse_duration, parse_interval},
};

use crate::session::{self, RunConfig};

/// Options of `herd run`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  sudo herd run lobby.toml                             # probe + drive + report into herd-out/
  sudo herd run lobby.toml --name after-fix --out results
  sudo herd run lobby.toml --store postgres://herd@127.0.0.1/herd
  sudo herd run lobby.toml --container gateway=/system.slice/gateway.service
  herd run lobby.toml --no-probe                       # no root needed, no kernel counts
  sudo herd run lobby.toml --listen 127.0.0.1:9464     # driver + probe metrics for Prometheus
  sudo herd run http://127.0.0.1:8080/ -c 50 -z 10s    # quick mode, probed and reported

Exit codes: 0 done, 1 failed, 2 bad input or environment, 99 an objective was broken.")]
pub struct RunArgs {
    /// The scenario: a TOML file with the target, ops and load plan (docs/scenario.md), or
    /// an http://, https://, grpc://, grpcs://, ws:// or wss:// URL to drive with the
    /// quick-mode flags below.
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
    /// Read the run store URL from FILE (a mounted secret: /run/secrets/NAME), so that it
    /// is in no command line or environment.
    #[arg(long, value_name = "FILE", conflicts_with = "store")]
    pub store_file: Option<PathBuf>,
    /// Name a container for the probe: NAME=CGROUP_PATH (repeatable); Docker, Kubernetes,
    /// systemd and herd's own containers are discovered anyway.
    #[arg(long = "container", value_name = "NAME=CGROUP_PATH")]
    pub containers: Vec<String>,
    /// Do not attach the kernel probe (the report says so in every probe cell).
    #[arg(long)]
    pub no_probe: bool,
    /// Also count the connect() failures that precede any TCP state (no route, a policy's
    /// EACCES/EPERM) with the connect() syscall tracepoints, which slow every syscall on the
    /// host (see `herd probe --help`).
    #[arg(long, conflicts_with = "no_probe")]
    pub connect_syscalls: bool,
    /// Leave out the probe's run-queue delay (no walk of the host's threads per poll): no
    /// run-queue delay in the report (see `herd probe --help`).
    #[arg(long, conflicts_with_all = ["no_probe", "runq_waits"])]
    pub no_runq: bool,
    /// Time each run-queue wait with a program on every context switch of the host, for
    /// per-wait percentiles (p99) beside the count and sum; costs on every switch (see
    /// `herd probe --help`).
    #[arg(long, conflicts_with = "no_probe")]
    pub runq_waits: bool,
    /// Length of one interval of both timelines (100ms or more).
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// How long requests in flight may take to finish once the plan ends or Ctrl-C stops it.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
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
    /// Also write HdrHistogram interval logs into DIR once the run is recorded:
    /// `run-<id>-<op>.hlog`, one per op, one histogram per interval.
    #[arg(long = "hdr-log", value_name = "DIR")]
    pub hdr_log: Option<PathBuf>,
    /// Serve the run's metrics (requests, latency histograms, players, phase, driver
    /// health; with the probe also its counters and gauges) in the Prometheus text format at
    /// http://ADDR/metrics while the run lasts, e.g. `--listen 127.0.0.1:9464`
    /// (docs/metrics.md) [default: off].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// Quick mode: SCENARIO is a URL.
    #[command(flatten)]
    pub quick: super::quick::QuickArgs,
    /// Run shard I of N of the plan (0-based: 0/3, 1/3, 2/3): its players, hammer workers,
    /// catalog requests and open-model arrivals, so that N processes send what one would.
    /// Needs --run-key and a PostgreSQL --store shared by the shards (docs/scale-out.md).
    #[arg(long, value_name = "I/N")]
    pub shard: Option<herd_model::Shard>,
    /// A Docker Swarm task's slot as the shard: `--shard-slot S/N` runs shard S mod N.
    /// Docker 20.10 numbers a replicated job's tasks 0…N-1 and renders slot 0 as the
    /// node's id, which counts as 0; an engine counting 1…N gives the same N shards.
    /// `herd launch swarm` sets it as HERD_SHARD_SLOT={{.Task.Slot}}/N (Swarm expands
    /// templates in environment values, not in a task's arguments).
    #[arg(
        long,
        value_name = "S/N",
        env = "HERD_SHARD_SLOT",
        conflicts_with = "shard",
        value_parser = parse_slot
    )]
    pub shard_slot: Option<herd_model::Shard>,
    /// The name the shards of one run share: the first to start creates the run, the others
    /// join it, and all start together once the N have registered.
    #[arg(long, value_name = "KEY")]
    pub run_key: Option<String>,
    /// How long a shard waits for the others to register before it fails, naming them.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub shard_timeout: Duration,
}

/// A Swarm task's slot `S/N` as shard `S mod N`; a node id (25 lowercase letters and
/// digits: how Docker 20.10 renders a job's slot 0) is slot 0.
fn parse_slot(s: &str) -> std::result::Result<herd_model::Shard, String> {
    let bad = |why: &str| {
        format!(
            "--shard-slot {s}: {why}; give S/N, S a Swarm task's slot ({{{{.Task.Slot}}}}), e.g. 1/3"
        )
    };
    let (slot, n) = s
        .trim()
        .rsplit_once('/')
        .ok_or_else(|| bad("it has no `/`"))?;
    let n: u32 = n.trim().parse().map_err(|_| bad("N is not a number"))?;
    let slot = slot.trim();
    let node_id = slot.len() == 25
        && slot
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let slot: u64 = match slot.parse() {
        Ok(k) => k,
        Err(_) if node_id => 0,
        Err(_) => return Err(bad("S is neither a number nor a node id")),
    };
    if n == 0 {
        return Err(bad("a run has at least one shard"));
    }
    herd_model::Shard::new((slot % u64::from(n)) as u32, n).map_err(|e| bad(&e.to_string()))
}

impl RunArgs {
    /// The shard this process runs, from --shard or --shard-slot.
    pub fn shard(&self) -> Option<herd_model::Shard> {
        self.shard.or(self.shard_slot)
    }

    /// The run these options describe: the scenario loaded with its `--set`s.
    pub fn config(&self) -> Result<RunConfig> {
        let quick = super::quick::scenario_text(&self.scenario, &self.quick, "run")?;
        let mut scenario = crate::signals::at_once(|| match &quick {
            Some(text) => Scenario::parse(super::quick::FILE, text, &self.set),
            None => Scenario::load(&self.scenario, &self.set),
        })?;
        herd_driver::limits::check_host(&scenario, self.shard().unwrap_or_default())?;
        if self.insecure && !scenario.target.accept_any_certificate() {
            tracing::warn!("--insecure does nothing for an http:// target");
        }
        let mut c = RunConfig::new(scenario, self.out.clone());
        if quick.is_some() {
            c.name = "quick".to_owned();
        }
        if let Some(name) = &self.name {
            c.name.clone_from(name);
        }
        if let Some(url) = super::store_or_file(&self.store, &self.store_file)? {
            c.store = url;
        }
        c.containers.clone_from(&self.containers);
        c.probe = !self.no_probe;
        c.connect_syscalls = self.connect_syscalls;
        c.runq = crate::attach::Runq::of(self.no_runq, self.runq_waits);
        c.interval = self.interval;
        c.grace = self.grace;
        c.live = !self.quiet;
        c.keep_seed = self.keep_seed;
        c.listen = self.listen;
        match (self.shard(), &self.run_key) {
            (Some(shard), Some(key)) => {
                c.shard = shard;
                c.run_key = Some(key.clone());
            }
            (Some(shard), None) if !shard.is_whole() => {
                return Err(herd_store::ShardUsageError(format!(
                    "--shard {shard} needs --run-key KEY, the same for every shard of the run, \
                     so that they find one another in the store"
                ))
                .into());
            }
            (_, Some(key)) => c.run_key = Some(key.clone()),
            _ => {}
        }
        c.shard_timeout = self.shard_timeout;
        c.hdr_log = self.hdr_log.clone();
        Ok(c)
    }
}

/// Runs `herd run`.
pub fn run(args: &RunArgs) -> Result<()> {
    if args.quick.print_scenario {
        let text = super::quick::scenario_text(&args.scenario, &args.quick, "run")?;
        out!("{}", text.unwrap_or_default());
        return Ok(());
    }
    let outcome = session::run(&args.config()?)?;
    for f in &outcome.files {
        outln!("wrote {}", f.display());
    }
    match &outcome.hdr_logs {
        Ok(files) => files.iter().for_each(|f| outln!("wrote {}", f.display())),
        Err(why) => anyhow::bail!("{why}"),
    }
    if let Some(why) = &outcome.unreachable {
        anyhow::bail!("run {}: {why}", outcome.run_id);
    }
    if outcome.slo_failed {
        let n = outcome.broken.len();
        let mut msg = format!(
            "run {} broke an SLO of the scenario: {n} objective{} not met (the report's \
             Objectives table has every phase); exit code {}",
            outcome.run_id,
            if n == 1 { "" } else { "s" },
            crate::EXIT_CROSSED
        );
        for b in &outcome.broken {
            msg.push_str("\n  ");
            msg.push_str(b);
        }
        return Err(crate::Crossed(msg).into());
    }
    Ok(())
}
