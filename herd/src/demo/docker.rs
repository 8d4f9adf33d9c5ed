//! `herd demo --docker`: the demo contour as Docker containers.
//!
//! herd builds an image `FROM scratch` holding its own binary and the libraries `ldd` lists
//! (no registry, nothing pulled), creates a bridge network with an explicit subnet in
//! 198.19.32.0/19 (inside 198.18.0.0/15, clear of herd's sandbox: 198.18.0.0/16 and /30s in
//! 198.19.64.0–198.19.253.255), and per run starts the backend (its SQLite in the output
//! directory, bind-mounted) and the gateway with `--cpus`. The probe's discovery finds them by
//! cgroup and names them from the Engine API, as it would a user's compose contour. The
//! driver reaches the gateway through a port published on 127.0.0.1 (docker-proxy), as
//! compose users do; the report follows it to the gateway's container.
//! It writes `docker-compose.yml` describing the same contour. Every container, the network
//! and the image are removed by guards, on error and on Ctrl-C too.
//!
//! The engine is reached through the `docker` CLI, so `DOCKER_HOST` means what it means to
//! the CLI (and to herd's discovery, which reads the same socket).

use std::{
    net::Ipv4Addr,
    os::unix::process::CommandExt as _,
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, anyhow, bail};

use super::{DemoConfig, fresh_db, record};
use crate::{
    launch::docker::{Kind, Made, build_image, docker, engine_answers},
    signals,
};

/// Names the demo in the guards' warnings and the build's messages.
const WHO: &str = "herd demo --docker";

/// The containers' names (as the report shows them) and the network's.
const GATEWAY: &str = "herd-demo-gateway";
const BACKEND: &str = "herd-demo-backend";
const NETWORK: &str = "herd-demo";

/// The demo's image and network, made once for both runs.
pub(super) struct Demo {
    /// Fields drop in order: the network before the image.
    network: Made,
    image: Made,
    subnet: Subnet,
    /// The compose file written to the output directory.
    pub compose: PathBuf,
}

/// The /24 the network has and the addresses herd gives its containers.
#[derive(Debug, Clone, Copy)]
struct Subnet(u8);

impl Subnet {
    fn cidr(self) -> String {
        format!("198.19.{}.0/24", self.0)
    }
    fn gateway(self) -> String {
        format!("198.19.{}.2", self.0)
    }
    fn backend(self) -> String {
        format!("198.19.{}.3", self.0)
    }
}

impl Demo {
    /// Checks the engine, builds the image, creates the network and writes the compose file.
    pub(super) fn new(args: &DemoConfig) -> Result<Self> {
        if let Err(why) = engine_answers() {
            let host = std::env::var("DOCKER_HOST")
                .unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
            return Err(crate::environment(anyhow!(
                "herd demo --docker: no Docker engine answers at {host} ({why}). Start one \
                 (`sudo systemctl start docker`), or set DOCKER_HOST to one that runs, or start \
                 a private one as `cargo xtask` does for the tests (`cargo xtask \
                 integration-test docker`; the dockerd command line is in docs/docker.md). `herd demo` without --docker needs \
                 no engine."
            )));
        }
        let tag = format!("herd-demo:{}", std::process::id());
        let image = build_image(&tag, WHO)?;
        stop_point()?;
        let (network, subnet) = create_network()?;
        stop_point()?;
        let compose = args.out.join("docker-compose.yml");
        std::fs::write(&compose, compose_file(args, subnet))
            .with_context(|| format!("writing {}", compose.display()))?;
        Ok(Self {
            network,
            image,
            subnet,
            compose,
        })
    }

    /// One full run against fresh containers whose gateway keeps `max_idle` idle backend
    /// connections.
    pub(super) fn one_run(
        &mut self,
        args: &DemoConfig,
        max_idle: usize,
        store: &str,
    ) -> Result<(i64, Vec<PathBuf>)> {
        let (db, url_file) = fresh_db(args, max_idle)?;
        let out = std::path::absolute(&args.out)
            .with_context(|| format!("resolving the path of {}", args.out.display()))?;
        let db_name = db.file_name().context("the database's file name")?;
        let (gw_ip, be_ip) = (self.subnet.gateway(), self.subnet.backend());
        let volume = format!("{}:/out", out.display());
        let backend = run_container(
            BACKEND,
            &self.image.name,
            &[
                "--network",
                &self.network.name,
                "--ip",
                &be_ip,
                "--cpus",
                &args.backend_cpus.to_string(),
                "-v",
                &volume,
            ],
            &backend_args(
                &be_ip,
                &format!("sqlite:/out/{}?mode=rwc", db_name.to_string_lossy()),
                args,
            ),
        )?;
        stop_point()?;
        let gateway = run_container(
            GATEWAY,
            &self.image.name,
            &[
                "--network",
                &self.network.name,
                "--ip",
                &gw_ip,
                "--cpus",
                &args.gateway_cpus.to_string(),
                // Published on loopback, a port the engine picks: players reach the gateway
                // as most compose users do, through docker-proxy, and the report must follow
                // the port to the container to find the request path.
                "-p",
                "127.0.0.1::8081",
            ],
            &gateway_args(&gw_ip, &be_ip, &max_idle.to_string()),
        )?;
        stop_point()?;
        let published = published_port(GATEWAY, 8081)?;
        tracing::info!(
            "herd demo --docker: run with the gateway keeping {max_idle} idle backend \
             connections (container {GATEWAY} at {gw_ip}, published on {published}, --cpus {}; \
             {BACKEND} at {be_ip}, --cpus {}; network {NETWORK} {})",
            args.gateway_cpus,
            args.backend_cpus,
            self.subnet.cidr()
        );
        // No explicit names: discovery finds the containers by cgroup and names them from
        // the Engine API, as for a user's own contour.
        let outcome = record(args, max_idle, store, &published, &url_file, Vec::new())?;
        drop(gateway);
        drop(backend);
        Ok(outcome)
    }
}

/// Errors out when a stop was requested, so the guards clean up between steps.
fn stop_point() -> Result<()> {
    if signals::stop_requested() {
        bail!("herd demo --docker: interrupted; removing what it created");
    }
    Ok(())
}

fn backend_args(ip: &str, db_url: &str, args: &DemoConfig) -> Vec<String> {
    [
        "contour",
        "backend",
        "--listen",
        &format!("{ip}:8082"),
        "--db",
        db_url,
        "--workers",
        "1",
        "--service-time",
        &humantime::format_duration(args.backend_service_time).to_string(),
    ]
    .map(str::to_owned)
    .to_vec()
}

fn gateway_args(ip: &str, backend: &str, max_idle: &str) -> Vec<String> {
    [
        "contour",
        "gateway",
        "--listen",
        &format!("{ip}:8081"),
        "--backend",
        &format!("{backend}:8082"),
        "--backend-max-idle",
        max_idle,
        "--workers",
        "2",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The IPv4 routes of the host as (network, prefix length), from /proc/net/route.
fn host_routes() -> Vec<(u32, u32)> {
    let Ok(table) = std::fs::read_to_string("/proc/net/route") else {
        return Vec::new();
    };
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // The kernel prints the network-order words as native integers.
            let word = |s: &str| {
                u32::from_str_radix(s, 16)
                    .ok()
                    .map(|v| u32::from(Ipv4Addr::from(v.to_ne_bytes())))
            };
            let (dst, mask) = (word(f.get(1)?)?, word(f.get(7)?)?);
            (mask != 0).then_some((dst, mask.count_ones()))
        })
        .collect()
}

/// True when `net/len` and one of `routes` overlap.
fn overlaps(net: u32, len: u32, routes: &[(u32, u32)]) -> bool {
    routes.iter().any(|&(dst, plen)| {
        let p = len.min(plen);
        let mask = if p == 0 { 0 } else { u32::MAX << (32 - p) };
        net & mask == dst & mask
    })
}

/// Creates the network on the first /24 of 198.19.32.0/19 that neither the host's routes
/// (another engine's bridge, another herd) nor the engine's networks use, and checks with
/// `docker network inspect` that it has exactly that subnet.
fn create_network() -> Result<(Made, Subnet)> {
    let routes = host_routes();
    let start = std::process::id() % 32;
    let mut last = String::new();
    for k in 0..32 {
        let subnet = Subnet(32 + ((start + k) % 32) as u8);
        let net = u32::from(Ipv4Addr::new(198, 19, subnet.0, 0));
        if overlaps(net, 24, &routes) {
            continue;
        }
        let cidr = subnet.cidr();
        let gw = format!("198.19.{}.1", subnet.0);
        match docker(&[
            "network",
            "create",
            "--driver",
            "bridge",
            "--subnet",
            &cidr,
            "--gateway",
            &gw,
            NETWORK,
        ]) {
            Ok(_) => {
                let made = Made::new(Kind::Network, NETWORK, WHO);
                let has = docker(&[
                    "network",
                    "inspect",
                    "-f",
                    "{{range .IPAM.Config}}{{.Subnet}}{{end}}",
                    NETWORK,
                ])?;
                if has != cidr {
                    bail!(
                        "herd demo --docker: the network {NETWORK} has subnet {has:?}, not the \
                         {cidr} herd asked for"
                    );
                }
                return Ok((made, subnet));
            }
            Err(e) if format!("{e:#}").contains("overlap") => last = format!("{e:#}"),
            Err(e) => {
                return Err(e.context(format!(
                    "creating the Docker network {NETWORK} ({cidr}); if a demo that was killed \
                     left it, `docker network rm {NETWORK}`"
                )));
            }
        }
    }
    bail!(
        "herd demo --docker: every /24 of 198.19.32.0/19 is in use on this host (routes or \
         the engine's networks); last: {last}"
    )
}

/// Starts `herd ARGS` in container `name` of `image` with the `docker run` options `opts`;
/// returns when it printed `ready`.
fn run_container(name: &str, image: &str, opts: &[&str], args: &[String]) -> Result<Made> {
    let mut run = vec!["run", "-d", "--name", name];
    run.extend_from_slice(opts);
    run.push(image);
    run.extend(args.iter().map(String::as_str));
    docker(&run).with_context(|| {
        format!(
            "starting the container {name}; if a demo that was killed left one, `docker rm -f {name}`"
        )
    })?;
    let made = Made::new(Kind::Container, name, WHO);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let logs = Command::new("docker")
            .args(["logs", name])
            .stdin(Stdio::null())
            .process_group(0)
            .output()
            .with_context(|| format!("reading the logs of {name}"))?;
        if String::from_utf8_lossy(&logs.stdout).starts_with("ready") {
            return Ok(made);
        }
        let running = docker(&["inspect", "-f", "{{.State.Running}}", name])?;
        if running != "true" || Instant::now() >= deadline || signals::stop_requested() {
            bail!(
                "the container {name} did not start (running: {running}; said {:?} {:?}); \
                 `docker run --rm {image} {}` shows why",
                String::from_utf8_lossy(&logs.stdout).trim(),
                String::from_utf8_lossy(&logs.stderr).trim(),
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The loopback address the engine published `container`'s TCP `port` on
/// (`docker port`: `127.0.0.1:49153`).
fn published_port(container: &str, port: u16) -> Result<String> {
    let said = docker(&["port", container, &format!("{port}/tcp")])?;
    said.lines()
        .map(str::trim)
        .find(|l| l.starts_with("127.0.0.1:"))
        .map(str::to_owned)
        .with_context(|| {
            format!("`docker port {container} {port}/tcp` named no 127.0.0.1 address: {said:?}")
        })
}

/// The demo's contour as a compose file: the same services, command lines, CPU quotas,
/// network and subnet, for users to read and adapt.
fn compose_file(args: &DemoConfig, subnet: Subnet) -> String {
    let (gw, be) = (subnet.gateway(), subnet.backend());
    let quote = |v: Vec<String>| {
        v.iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let first = args.max_idle.first().copied().unwrap_or(2);
    let runs = args
        .max_idle
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(" and ");
    format!(
        "# The contour `herd demo --docker` ran, as a compose file: read it, adapt it, run it.
# herd built the image FROM scratch with its own binary and the libraries `ldd` lists, and
# removed it at the end; to rebuild it, put herd and those libraries under rootfs/ next to a
# Dockerfile saying:
#   FROM scratch
#   COPY rootfs/ /
#   ENTRYPOINT [\"/herd\"]
# and `docker build -t herd-demo .`. Then `docker compose -p herd-demo up -d` here (or
# `docker-compose`, Debian 12's), and drive it with the demo's scenario (it seeds the
# backend's database here): `sudo herd run demo-max-idle-{first}.toml --out . --set
# target.url=http://127.0.0.1:18081`.
# The demo ran it with BACKEND_MAX_IDLE = {runs} (the bug, then the fix).
# (No top-level `name:`: docker-compose 1.x rejects it; -p names the project.)
services:
  backend:
    image: herd-demo
    command: [{backend}]
    cpus: {be_cpus}
    volumes:
      # The backend's SQLite, in the demo's output directory (this one).
      - ./:/out
    networks:
      herd-demo:
        ipv4_address: {be}
  gateway:
    image: herd-demo
    command: [{gateway}]
    cpus: {gw_cpus}
    depends_on: [backend]
    # Players reach the gateway here (the demo let the engine pick the host port; the
    # scenario's target.url names the one it got: `--set target.url=http://127.0.0.1:18081`).
    ports:
      - \"127.0.0.1:${{GATEWAY_PORT:-18081}}:8081\"
    networks:
      herd-demo:
        ipv4_address: {gw}
networks:
  herd-demo:
    driver: bridge
    ipam:
      config:
        - subnet: {cidr}
",
        // The database the scenario's seed URL file of that max-idle names.
        backend = quote(backend_args(
            &be,
            &format!("sqlite:/out/contour-max-idle-${{BACKEND_MAX_IDLE:-{first}}}.db?mode=rwc"),
            args
        )),
        gateway = quote(gateway_args(
            &gw,
            &be,
            &format!("${{BACKEND_MAX_IDLE:-{first}}}")
        )),
        be_cpus = args.backend_cpus,
        gw_cpus = args.gateway_cpus,
        cidr = subnet.cidr(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_inside_or_around_a_subnet_overlaps_it() {
        let net = u32::from(Ipv4Addr::new(198, 19, 40, 0));
        let r = |a: [u8; 4], l| (u32::from(Ipv4Addr::from(a)), l);
        assert!(overlaps(net, 24, &[r([198, 19, 40, 0], 24)]));
        assert!(overlaps(net, 24, &[r([198, 19, 32, 0], 19)]));
        assert!(overlaps(net, 24, &[r([198, 19, 40, 4], 30)]));
        assert!(!overlaps(net, 24, &[r([198, 19, 41, 0], 24)]));
        assert!(!overlaps(net, 24, &[r([198, 19, 64, 0], 30)]));
    }
}
