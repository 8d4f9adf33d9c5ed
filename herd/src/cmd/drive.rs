//! `herd drive`: the options, turned into a [`DriveConfig`] for [`session::drive`]; prints
//! what is about to run, the per-phase × op table at the end, and writes `--json`.

use std::{
    fs::File,
    io::{BufWriter, Write as _},
    path::PathBuf,
    time::Duration,
};

use anyhow::{Context as _, Result};
use herd_driver::{
    Scenario,
    scenario::{Connections, PhaseWork},
    units::{parse_duration, parse_interval},
};
use herd_report::text;

use crate::session::{self, DriveConfig, print_hints};

/// Options of `herd drive`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  herd drive http://127.0.0.1:8080/ -c 50 -z 10s       # quick mode: 50 players for 10 s, like oha
  herd drive http://127.0.0.1:8080/ -n 10000 -c 20 --h2c
  herd drive http://127.0.0.1:8080/api -q 500 -z 30s -m POST -H 'content-type: application/json' -d '{}'
  herd drive http://127.0.0.1:8080/ -c 50 -z 10s --print-scenario > quick.toml
  herd drive grpc://127.0.0.1:50051/game.Lobby/Join --proto game.proto -d '{\"player\":\"p1\"}' -n 10000 -c 50
  herd drive ws://127.0.0.1:8080/echo -d '{\"type\":\"ping\"}' -c 100 -z 30s  # send, wait for the reply
  herd drive ws://127.0.0.1:8080/feed -c 1000 -z 60s   # hold 1000 sockets, count the pushes
  herd drive lobby.toml                                # the scenario's plan, a table per phase
  herd drive lobby.toml --set target.transport=h2c     # the same plan over h2c
  herd drive lobby.toml --set 'step[2].players=800' --json out.json
  herd drive lobby.toml --quiet --interval 500ms
  herd drive lobby.toml --listen 127.0.0.1:9464        # Prometheus scrapes /metrics meanwhile

Scenarios: docs/scenario.md; examples in driver/examples/scenarios/. `herd run` does the same
and probes the host beside it.")]
pub struct DriveArgs {
    /// The scenario: a TOML file with the target, ops and load plan (docs/scenario.md), or
    /// an http://, https://, grpc://, grpcs://, ws:// or wss:// URL to drive with the
    /// quick-mode flags below.
    #[arg(value_name = "SCENARIO")]
    pub scenario: PathBuf,
    /// Override one scenario key before the file is checked, for A/B runs without editing
    /// it: `--set target.transport=h2c`, `--set 'step[1].players=500'`,
    /// `--set 'op[game.state].weight=0'`. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Also write the whole run (per-phase tables and the per-interval timeline) as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// How long requests in flight may take to finish once the plan ends or Ctrl-C stops
    /// it; any still in flight after that count as `cancelled`.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub grace: Duration,
    /// Length of one timeline interval and of the progress lines' period (100ms or more).
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Print only the final table, no progress lines.
    #[arg(long)]
    pub quiet: bool,
    /// Accept any TLS certificate from an https:// target (self-signed, a private CA, another
    /// host's name), like `target.insecure = true`; `target.ca = "ca.pem"` is the safer way.
    #[arg(long)]
    pub insecure: bool,
    /// Serve the run's metrics (requests, latency histograms, players, phase, driver
    /// health; with the probe also its counters and gauges) in the Prometheus text format at
    /// http://ADDR/metrics while the run lasts, e.g. `--listen 127.0.0.1:9464`
    /// (docs/metrics.md) [default: off].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<std::net::SocketAddr>,
    /// Quick mode: SCENARIO is a URL.
    #[command(flatten)]
    pub quick: super::quick::QuickArgs,
    /// Run shard I of N of the plan (0-based: 0/3, 1/3, 2/3), so that N processes send what
    /// one would; `herd merge` merges their --json results. Without a store the shards start
    /// when started: `herd run --shard` starts them together.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<herd_model::Shard>,
}

/// Runs `herd drive`.
pub fn run(args: &DriveArgs) -> Result<()> {
    let quick = super::quick::scenario_text(&args.scenario, &args.quick, "drive")?;
    if args.quick.print_scenario {
        out!("{}", quick.unwrap_or_default());
        return Ok(());
    }
    let mut scenario = crate::signals::at_once(|| match &quick {
        Some(text) => Scenario::parse(super::quick::FILE, text, &args.set),
        None => Scenario::load(&args.scenario, &args.set),
    })?;
    herd_driver::limits::check_host(&scenario, args.shard.unwrap_or_default())?;
    if args.insecure && !scenario.target.accept_any_certificate() {
        tracing::warn!("--insecure does nothing for an http:// target");
    }
    // Opened before the load starts, so a bad path costs nothing but this message.
    let json = args
        .json
        .as_ref()
        .map(|p| {
            File::create(p).with_context(|| format!("creating the JSON output {}", p.display()))
        })
        .transpose()?;
    outln!("{}", heading(&scenario));
    if scenario.seed.is_some() {
        tracing::warn!(
            "herd drive: the scenario's [seed] is not applied (herd drive does not seed); run `herd seed {}` first, or `herd run`, which seeds and cleans up",
            args.scenario.display()
        );
    }
    let report = session::drive(
        scenario,
        &DriveConfig {
            grace: args.grace,
            interval: args.interval,
            live: !args.quiet,
            listen: args.listen,
            shard: args.shard.unwrap_or_default(),
        },
    )?;
    out!("\n{}", text::table(&report));
    print_hints(&report);
    if report.stopped_early {
        outln!("\nstopped early by a signal: the tables cover the run up to the stop");
    }
    if let (Some(file), Some(path)) = (json, &args.json) {
        let mut w = BufWriter::new(file);
        serde_json::to_writer_pretty(&mut w, &report)
            .map_err(anyhow::Error::from)
            .and_then(|()| Ok(w.flush()?))
            .with_context(|| format!("writing the run to {}", path.display()))?;
        outln!("wrote {}", path.display());
    }
    if let Some(why) = report.unreachable() {
        anyhow::bail!("{why}");
    }
    Ok(())
}

/// One line on what is about to run.
fn heading(s: &Scenario) -> String {
    let connections = match s.target.connections {
        Connections::PerPlayer => "a connection per player".to_owned(),
        Connections::Pool(n) => format!("a shared pool of {n} connections"),
    };
    let plan: Vec<String> = s
        .plan()
        .iter()
        .map(|p| match p.work {
            PhaseWork::Players(i) => format!(
                "{} {} players × {:?}",
                p.name, s.steps[i].players, s.steps[i].duration
            ),
            PhaseWork::Rate(i) => {
                let r = &s.shapes.rates[i];
                format!("{} {} req/s × {:?}", p.name, r.rate, r.duration)
            }
            PhaseWork::Route(i) => {
                let r = &s.shapes.catalog[i];
                format!(
                    "{} {} × {} at {}",
                    p.name, r.requests, s.ops[r.op].name, r.concurrency
                )
            }
        })
        .collect();
    let tls = match &s.target.tls {
        Some(t) if t.insecure => " (TLS, any certificate accepted)",
        Some(_) => " (TLS)",
        None => "",
    };
    let mut line = format!(
        "herd drive: {} → {} over {}{tls}, {connections}; plan: {}",
        s.file,
        s.target.authority,
        s.target.transport,
        if plan.is_empty() {
            "none".to_owned()
        } else {
            plan.join(", ")
        }
    );
    if let Some(k) = &s.shapes.soak {
        line.push_str(&format!(
            "; soak: +{} players every {:?} up to {}, held {:?}",
            k.add, k.every, k.up_to, k.hold
        ));
    }
    if let Some(h) = &s.hammer {
        line.push_str(&format!(
            "; hammer: {} workers on {} for {:?} from {:?}",
            h.workers, s.ops[h.op].name, h.duration, h.start
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use herd_testkit::{Proto, Reply, Server, TempDir};

    use super::*;

    fn args(scenario: PathBuf, set: Vec<String>, json: Option<PathBuf>) -> DriveArgs {
        DriveArgs {
            scenario,
            set,
            json,
            grace: Duration::from_secs(1),
            interval: Duration::from_millis(200),
            quiet: true,
            insecure: false,
            listen: None,
            quick: Default::default(),
            shard: None,
        }
    }

    #[test]
    fn drives_a_scenario_and_writes_json() {
        let dir = TempDir::new("drive");
        let file = dir.write(
            "ok.toml",
            "[target]\nurl = \"http://127.0.0.1:1\"\n[player]\nthink = \"10ms\"\n[[op]]\nname = \"ok\"\npath = \"/\"\n[[step]]\nplayers = 2\nduration = \"400ms\"\n",
        );
        // `run` makes its own runtime: the server runs on one of its own.
        let server = Server::http(Proto::H1)
            .fallback(Reply::ok().body("ok"))
            .start_blocking();
        let out = dir.join("run.json");
        run(&args(
            file,
            vec![format!("target.url={}", server.url())],
            Some(out.clone()),
        ))
        .unwrap();
        let report: herd_model::RunResult =
            serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        assert_eq!(report.requests, server.requests());
        assert!(report.requests > 10, "{} requests", report.requests);
        assert_eq!(report.outcome_count("ok", "ok"), report.requests);
        assert!(!report.intervals.is_empty());
    }

    #[test]
    fn a_bad_key_names_file_line_column_and_the_valid_keys() {
        let dir = TempDir::new("drive-bad");
        let file = dir.write(
            "bad.toml",
            "[target]\nurl = \"http://127.0.0.1:1\"\ntrasnport = \"h2c\"\n",
        );
        let e = run(&args(file.clone(), vec![], None)).unwrap_err();
        let msg = format!("{e:#}");
        assert!(
            msg.starts_with(&format!(
                "{}:3:1: target.trasnport: unknown key `trasnport`",
                file.display()
            )),
            "{msg}"
        );
        assert!(
            msg.contains("`transport`, `connections`, `pool_size`"),
            "{msg}"
        );
    }
}
