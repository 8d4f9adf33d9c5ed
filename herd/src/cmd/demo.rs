//! `herd demo`: herd's main job on its embedded default, with nothing to install or configure.
//!
//! Today it builds two containers on this host (cgroup + network namespace, joined by a veth
//! pair), runs a TCP server in one and a client making a known number of connections in the
//! other, watches both with the kernel probe and checks the probe's per-container counts
//! against the workload's own. The full game-like contour (gateway, backend, database) grows
//! here as the end-to-end run lands.

use std::{
    io::{BufRead as _, BufReader},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use herd_probe::{
    containers::{Container, ContainerSet},
    sampler::Sampler,
};
use probe_common::Counter;

use crate::{cmd::probe, sandbox::Sandbox, signals};

/// Options of `herd demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Connections the client opens (one after another, client closes first).
    #[arg(long, default_value_t = 3000)]
    pub connections: u64,
    /// Sampling interval of the probe.
    #[arg(long, default_value = "500ms", value_parser = probe::parse_duration)]
    pub interval: Duration,
    /// Print the kernel verifier's log if a program is rejected.
    #[arg(long)]
    pub verbose: bool,
}

/// Runs `herd demo`.
pub fn run(args: &DemoArgs) -> Result<()> {
    if args.connections == 0 || args.connections > 100_000 {
        bail!(
            "--connections {} must be between 1 and 100000",
            args.connections
        );
    }
    let probe_handle = probe::load(args.verbose)?;
    let mut sb = Sandbox::new("demo").map_err(crate::environment)?;
    let client = sb.container("client", None)?;
    let server = sb.container("server", None)?;
    let (_, server_ip) = sb.link(&client, &server)?;
    let layout = sb.layout().clone();
    let mut set = ContainerSet::default();
    for c in [&client, &server] {
        set.add(Container {
            name: c.name.clone(),
            cgroup: c
                .cgroup
                .strip_prefix(&layout.unified)
                .map(|p| std::path::Path::new("/").join(p))?,
            cgroup_id: c.cgroup_id,
            kind: herd_probe::discover::Kind::Herd,
            ended_ns: None,
        })?;
    }
    let exe = std::env::current_exe().context("locating the herd binary")?;
    let target = format!("{server_ip}:8080");
    let mut srv = Command::new(&exe);
    srv.args(["workload", "tcp-server", "--listen", &target, "--max-conns"])
        .arg(args.connections.to_string())
        .stdout(Stdio::piped());
    let srv = sb.spawn(&server, srv)?;
    let mut srv_out = BufReader::new(sb.child(srv).stdout.take().context("server stdout")?);
    let mut line = String::new();
    srv_out
        .read_line(&mut line)
        .context("waiting for the demo server")?;
    if !line.starts_with("ready") {
        bail!("the demo server did not start: {line:?}");
    }
    eprintln!(
        "herd demo: client ({}) opens {} connections to server ({target}) in its own network \
         namespace; the kernel probe counts them per container",
        client.netns, args.connections
    );
    let mut cli = Command::new(&exe);
    cli.args(["workload", "tcp-client", "--target", &target, "--count"])
        .arg(args.connections.to_string())
        .stdout(Stdio::piped());
    let cli = sb.spawn(&client, cli)?;
    let t0 = herd_probe::clock::now_ns();
    let mut exited_at: Option<std::time::Instant> = None;
    let mut sampler = Sampler::new(probe_handle, set, layout)?;
    probe::watch(
        &mut sampler,
        args.interval,
        Duration::from_secs(120),
        || {
            // Once the client's bounded loop ends, give the last handshakes' softirq work a
            // moment to land, then take the final sample.
            if exited_at.is_none() && matches!(sb.child(cli).try_wait(), Ok(Some(_))) {
                exited_at = Some(std::time::Instant::now());
            }
            exited_at.is_some_and(|t| t.elapsed() >= Duration::from_millis(200))
        },
        |iv, _| {
            probe::print_interval(iv, t0);
            Ok(())
        },
    )?;
    let totals = sampler.totals();
    drop(sampler);
    println!();
    probe::print_totals(&totals);
    if signals::stop_requested() {
        bail!("interrupted; containers removed");
    }
    let mut reported = String::new();
    if let Some(mut out) = sb.child(cli).stdout.take() {
        std::io::Read::read_to_string(&mut out, &mut reported)?;
    }
    let total = |name: &str, c: Counter| {
        totals
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, t)| t[c as usize])
    };
    let connects = total("client", Counter::Connects);
    let accepts = total("server", Counter::Accepts);
    println!(
        "\nground truth: the client says `{}`; the probe saw client connects {connects}, server \
         accepts {accepts}, host connects {}",
        reported.trim(),
        total(herd_probe::containers::HOST, Counter::Connects)
    );
    Ok(())
}
