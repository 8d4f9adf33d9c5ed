//! `herd launch swarm`: a sharded run on a Docker Swarm, started, waited for, reported and
//! removed by herd — a replicated service of N driver shards (`{{.Task.Slot}}` → shard), a global
//! probe service (one per node), the scenario as a Docker config, the run store's URL as a
//! Docker secret, herd's image built from this binary (docs/scale-out.md).
//!
//! Swarm services can be neither privileged nor in the host's PID namespace, which the probe
//! needs (it reads the host's cgroups' pids and their /proc/PID/ns/net). So the probe
//! service's task is a sidecar: `herd probe --via-engine` asks its node's engine, over the
//! Docker socket mounted into it, to run the real probe in a container with the host's PID,
//! network and cgroup namespaces and the capabilities eBPF needs ([`probe_via_engine`]), and
//! removes it when the task is stopped or the probe exits.
//!
//! The engine is reached through the `docker` CLI as `herd demo --docker` does, so
//! `DOCKER_HOST` means what it means to the CLI; the sidecar speaks the Engine API on the
//! socket (it runs in an image that holds herd alone).

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::{Value, json};

use crate::{
    launch::docker::{Kind, Made, build_image, docker, docker_input, engine_answers, engine_host},
    signals,
};

mod sidecar;
mod tasks;

pub use sidecar::{Sidecar, probe_container, probe_via_engine};
use tasks::*;

/// Names the launcher in messages.
const WHO: &str = "herd launch swarm";

/// Where the tasks find the scenario (a Docker config) and the store URL (a Docker secret).
const SCENARIO_DIR: &str = "/etc/herd";
const SECRET: &str = "herd-store";

/// How to make this engine a one-node swarm, as the tests do.
pub const SETUP: &str = "docker swarm init --advertise-addr 127.0.0.1 --default-addr-pool \
                         198.19.48.0/20";

/// A sharded run as the swarm's objects describe it.
#[derive(Debug, Clone)]
pub struct SwarmRun {
    /// The scenario file's name in the tasks (`/etc/herd/NAME`).
    pub scenario_name: String,
    /// The run's name: the objects' name prefix and the shards' `--run-key`.
    pub name: String,
    /// Driver shards.
    pub shards: u32,
    /// herd's image on the nodes.
    pub image: String,
    /// The engine's socket on the nodes (bind-mounted into the probe sidecar).
    pub socket: String,
    /// `HERD_TEST_CLOCK_OFFSET_MS` for the shards, as the launcher's environment gives it (a
    /// test knob: docs/scale-out.md); Swarm expands templates in it.
    pub test_clock_offset: Option<String>,
}

impl SwarmRun {
    /// The Docker config holding the scenario.
    pub fn config(&self) -> String {
        format!("{}-scenario", self.name)
    }

    /// The Docker secret holding the store URL.
    pub fn secret(&self) -> String {
        format!("{}-store", self.name)
    }

    /// The probe service's name.
    pub fn probe(&self) -> String {
        format!("{}-probe", self.name)
    }

    fn labels(&self, role: &str) -> Vec<String> {
        vec![
            "--label".into(),
            format!("herd.run={}", self.name),
            "--label".into(),
            format!("herd.role={role}"),
            "--container-label".into(),
            format!("herd.run={}", self.name),
        ]
    }

    /// `docker service create` arguments of the driver shards: N replicas at once, none
    /// restarted (a shard started again would find its index taken), each `herd run
    /// --shard-slot {{.Task.Slot}}/N`. A replicated service rather than a `replicated-job`:
    /// Docker 20.10 never removes a removed job's finished task containers on any node
    /// (moby/moby#42789), and those on worker nodes are out of the launcher's reach; a
    /// service's are removed with it, on every node.
    pub fn job_args(&self) -> Vec<String> {
        let mut a: Vec<String> = [
            "service",
            "create",
            "--detach",
            "--no-resolve-image",
            "--name",
            &self.name,
            "--mode",
            "replicated",
            "--replicas",
            &self.shards.to_string(),
            "--restart-condition",
            "none",
            // The private engine runs with iptables off, so overlay and ingress meshes do not
            // route; a load driver wants the host's network anyway.
            "--network",
            "host",
            "--config",
            &format!(
                "source={},target={SCENARIO_DIR}/{}",
                self.config(),
                self.scenario_name
            ),
            "--secret",
            &format!("source={},target={SECRET},mode=0400", self.secret()),
            // Swarm expands templates in --env, not in a task's arguments; slots count from 1.
            "--env",
            &format!("HERD_SHARD_SLOT={{{{.Task.Slot}}}}/{}", self.shards),
        ]
        .map(str::to_owned)
        .to_vec();
        if let Some(offset) = &self.test_clock_offset {
            a.extend([
                "--env".into(),
                format!("{}={offset}", herd_store::TEST_CLOCK_OFFSET),
            ]);
        }
        a.extend(self.labels("driver"));
        a.push(self.image.clone());
        a.extend(
            [
                "run",
                &format!("{SCENARIO_DIR}/{}", self.scenario_name),
                "--run-key",
                &self.name,
                "--store-file",
                &format!("/run/secrets/{SECRET}"),
                // The probe service probes each node once; a probe per shard would count a
                // node's containers once per shard on it.
                "--no-probe",
                "--quiet",
                "--out",
                "/tmp/herd-out",
            ]
            .map(str::to_owned),
        );
        a
    }

    /// `docker service create` arguments of the probe service: one task per node, the
    /// engine's socket mounted, running the sidecar that starts the probe on the host's namespaces.
    pub fn probe_args(&self) -> Vec<String> {
        let mut a: Vec<String> = [
            "service",
            "create",
            "--detach",
            "--no-resolve-image",
            "--name",
            &self.probe(),
            "--mode",
            "global",
            "--restart-condition",
            "none",
            "--network",
            "host",
            "--secret",
            &format!("source={},target={SECRET},mode=0400", self.secret()),
            "--mount",
            &format!(
                "type=bind,source={},target=/var/run/docker.sock",
                self.socket
            ),
            "--env",
            "HERD_NODE={{.Node.Hostname}}",
        ]
        .map(str::to_owned)
        .to_vec();
        a.extend(self.labels("probe"));
        a.push(self.image.clone());
        a.extend(
            [
                "probe",
                "--via-engine",
                "--engine-image",
                &self.image,
                "--engine-socket",
                &self.socket,
                "--store-file",
                &format!("/run/secrets/{SECRET}"),
                "--run-key",
                &self.name,
                "--duration",
                "24h",
            ]
            .map(str::to_owned),
        );
        a
    }
}

/// Options of `herd launch swarm`, as [`launch`] needs them.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The scenario file.
    pub scenario: PathBuf,
    /// Driver shards.
    pub shards: u32,
    /// The PostgreSQL run store's URL.
    pub store: Option<String>,
    /// An image to use instead of building one.
    pub image: Option<String>,
    /// The Docker socket's path on the nodes (default: `DOCKER_HOST`'s, else the default).
    pub node_socket: Option<String>,
    /// The run's name.
    pub name: String,
    /// No probe service.
    pub no_probe: bool,
    /// How long the shards may take in all.
    pub timeout: Duration,
    /// Keep the image herd built.
    pub keep_image: bool,
    /// Where the merged report's files go.
    pub out: PathBuf,
}

/// Errors out when a stop was requested, so the guards clean up between steps.
fn stop_point() -> Result<()> {
    if signals::stop_requested() {
        bail!("{WHO}: interrupted; removing what it created");
    }
    Ok(())
}

/// Checks the store, the scenario and the engine; exit 2 (an environment to fix) when any is
/// not what a sharded run on a swarm needs.
fn check(l: &Launch) -> Result<String> {
    herd_model::Shard::new(0, l.shards)?;
    // It names services, a config, a secret and an image tag: the strictest of their rules.
    let n = &l.name;
    let ok = !n.is_empty()
        && n.len() <= 48
        && n.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_' || b == b'.'
        })
        && n.as_bytes()[0].is_ascii_alphanumeric();
    if !ok {
        return Err(crate::environment(anyhow!(
            "{WHO}: --name {n:?} cannot name Docker services and an image tag: use at most 48 \
             lowercase letters, digits, `-`, `_` and `.`, starting with a letter or digit"
        )));
    }
    let store = l.store.clone().ok_or_else(|| {
        crate::environment(anyhow!(
            "{WHO}: --store URL is missing: the shards need one PostgreSQL run store they all \
             reach (postgres://USER:PASSWORD@HOST:5432/DB)"
        ))
    })?;
    if !(store.starts_with("postgres://") || store.starts_with("postgresql://")) {
        return Err(crate::environment(anyhow!(
            "{WHO}: --store {} is not PostgreSQL: shards on several nodes need one shared \
             store, and a SQLite file lives on one host; give postgres://USER:PASSWORD@HOST/DB",
            herd_store::redact(&store)
        )));
    }
    // Checked here, where the error points at the file's line, not in N tasks.
    signals::at_once(|| herd_driver::Scenario::load(&l.scenario, &[]))?;
    if let Err(why) = engine_answers() {
        return Err(crate::environment(anyhow!(
            "{WHO}: no Docker engine answers at {} ({why}); start one (`sudo systemctl start \
             docker`) and make it a swarm manager: `{SETUP}`",
            engine_host()
        )));
    }
    let info = docker(&[
        "info",
        "--format",
        "{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}",
    ])?;
    if info != "active true" {
        return Err(crate::environment(anyhow!(
            "{WHO}: the engine at {} is not a swarm manager (swarm state: {info}); make it one: \
             `{SETUP}` (or run herd on a manager node of your swarm)",
            engine_host()
        )));
    }
    Ok(store)
}

/// Runs the launch: checks, builds, creates, waits, reports, removes. Returns the run's id.
pub fn launch(l: &Launch) -> Result<i64> {
    let store = check(l)?;
    let run = SwarmRun {
        scenario_name: l.scenario.file_name().map_or_else(
            || "scenario.toml".into(),
            |s| s.to_string_lossy().into_owned(),
        ),
        name: l.name.clone(),
        shards: l.shards,
        image: l
            .image
            .clone()
            .unwrap_or_else(|| format!("herd-swarm:{}", l.name)),
        socket: l.node_socket.clone().unwrap_or_else(|| {
            herd_probe::discover::socket_from(std::env::var("DOCKER_HOST").ok().as_deref())
                .display()
                .to_string()
        }),
        test_clock_offset: std::env::var(herd_store::TEST_CLOCK_OFFSET).ok(),
    };
    // Dropped in reverse order below: services, then the secret and the config, then the
    // image (no container may use it any more).
    let image = match (&l.image, l.keep_image) {
        (Some(_), _) => None,
        (None, keep) => {
            let made = build_image(&run.image, WHO)?;
            if keep {
                // --keep-image: the guard must not remove it.
                std::mem::forget(made);
                None
            } else {
                Some(made)
            }
        }
    };
    stop_point()?;
    let config = Made::new(Kind::Config, run.config(), WHO);
    docker(&[
        "config",
        "create",
        "--label",
        &format!("herd.run={}", run.name),
        &run.config(),
        &l.scenario.to_string_lossy(),
    ])
    .with_context(|| {
        format!(
            "{WHO}: creating the config {} from {}",
            run.config(),
            l.scenario.display()
        )
    })?;
    let secret = Made::new(Kind::Secret, run.secret(), WHO);
    docker_input(
        &[
            "secret",
            "create",
            "--label",
            &format!("herd.run={}", run.name),
            &run.secret(),
            "-",
        ],
        Some(store.as_bytes()),
    )
    .with_context(|| {
        format!(
            "{WHO}: creating the secret {} (the store URL)",
            run.secret()
        )
    })?;
    stop_point()?;
    let probe = if l.no_probe {
        None
    } else {
        let s = create_service(
            &run.probe_args(),
            &run.probe(),
            vec![
                format!("label=herd.run={}", run.name),
                "label=herd.role=probe".into(),
            ],
        )?;
        wait_probe_started(&run)?;
        Some(s)
    };
    stop_point()?;
    let job = create_service(&run.job_args(), &run.name, Vec::new())?;
    outln!(
        "{WHO}: run {} as {} shards ({}), image {}{}",
        run.name,
        run.shards,
        l.scenario.display(),
        run.image,
        if l.no_probe {
            String::new()
        } else {
            format!(", a probe per node ({})", run.probe())
        }
    );
    let deadline = Instant::now() + l.timeout;
    let done = wait_tasks(&run.name, run.shards as usize, false, deadline)?;
    let (mut failed, mut lost) = (Vec::new(), Vec::new());
    for t in done.iter().filter(|t| t.state != "complete") {
        let shard = (t.slot % u64::from(run.shards)) as u32;
        if t.state == LOST {
            // Said when it was seen; its logs are on the lost node, which
            // `docker service logs` would wait for.
            lost.push(shard);
            continue;
        }
        errln!(
            "{WHO}: shard {shard}/{} (task {} of slot {}) {}: {}\n{}",
            run.shards,
            t.id,
            t.slot,
            t.state,
            t.err,
            task_logs(&t.id)
        );
        failed.push(shard);
    }
    if !failed.is_empty() || !lost.is_empty() {
        close_dead_shards(&store, &run.name, &failed, &lost)?;
    }
    if let Some(p) = &probe {
        // The probes end by themselves once the run is over (their next interval sees it).
        let name = p.made.as_ref().map(|m| m.name.clone()).unwrap_or_default();
        match wait_tasks(&name, 1, true, Instant::now() + Duration::from_secs(30)) {
            Ok(ts) => {
                for t in ts
                    .iter()
                    .filter(|t| t.state != "complete" && t.state != LOST)
                {
                    errln!(
                        "{WHO}: the probe task {} {}: {}\n{}",
                        t.id,
                        t.state,
                        t.err,
                        task_logs(&t.id)
                    );
                }
            }
            Err(e) => tracing::warn!("{e:#}; stopping it"),
        }
    }
    drop(job);
    drop(probe);
    let id = report(&store, &run, &l.out)?;
    drop(secret);
    drop(config);
    drop(image);
    let names = |shards: &[u32]| {
        shards
            .iter()
            .map(|i| format!("{i}/{}", run.shards))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (failed.is_empty(), lost.is_empty()) {
        (true, true) => Ok(id),
        (false, true) => bail!(
            "{WHO}: shard {} of run {} failed (its error and logs above); the report holds what \
             the others recorded",
            names(&failed),
            run.name
        ),
        (true, false) => bail!(
            "{WHO}: shard {} of run {} lost with its node (above); the report holds what every \
             shard recorded, the lost ones' up to their last interval",
            names(&lost),
            run.name
        ),
        (false, false) => bail!(
            "{WHO}: shard {} of run {} failed and {} lost with its node (above); the report \
             holds what every shard recorded",
            names(&failed),
            run.name,
            names(&lost)
        ),
    }
}

/// Marks the shards whose task failed `interrupted`, and those lost with their node `lost`,
/// when they are still `running` in the store (killed before they could close their rows): a
/// shard in a container is pid 1 of its own PID namespace, which the store cannot check from
/// here, but the engine saw it die (or its node go). The run then closes, the node probes
/// stop, and the report names the shards missing.
fn close_dead_shards(store: &str, key: &str, dead: &[u32], lost: &[u32]) -> Result<()> {
    let rt = crate::cmd::store_runtime("swarm launch's store")?;
    rt.block_on(async {
        let st = herd_store::Store::open_existing(store).await?;
        let Ok(id) = st.wait_for_key(key, Duration::from_secs(1)).await else {
            // No shard registered: nothing to close.
            return Ok(());
        };
        let meta = st.meta(Some(id)).await?;
        for s in meta.shards.iter().filter(|s| s.status == "running") {
            if dead.contains(&s.index) {
                st.finish_shard(id, s.index, "interrupted").await?;
            } else if lost.contains(&s.index) {
                st.finish_shard(id, s.index, herd_store::LOST).await?;
            }
        }
        st.close().await;
        anyhow::Ok(())
    })
}

/// What a probe sidecar prints, with its node's name, once the probe it started has its
/// kernel programs attached.
const PROBE_ATTACHED: &str = "herd probe --via-engine: the probe is attached on ";

/// The nodes whose probe sidecar of service `probe` has printed [`PROBE_ATTACHED`].
fn attached_nodes(probe: &str) -> Vec<String> {
    task_logs(probe)
        .lines()
        .filter_map(|l| l.split(PROBE_ATTACHED).nth(1))
        .map(|n| n.trim().to_owned())
        .collect()
}

/// Waits (up to 60 s) until every node that takes tasks runs its probe sidecar and that
/// sidecar's probe is attached (its line in `docker service logs`, which the manager gathers
/// from every node), so the probes count from the shards' first connection.
fn wait_probe_started(run: &SwarmRun) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let t = firsts(tasks(&run.probe())?, true);
        if let Some(bad) = t.iter().find(|t| finished(&t.state)) {
            bail!(
                "{WHO}: the probe task {} ended before the run ({}: {})\n{}",
                bad.id,
                bad.state,
                bad.err,
                task_logs(&bad.id)
            );
        }
        let hosts: Vec<String> = docker(&[
            "node",
            "ls",
            "--format",
            "{{.Hostname}}\t{{.Status}}\t{{.Availability}}",
        ])?
        .lines()
        .filter_map(|l| l.strip_suffix("\tReady\tActive"))
        .map(str::to_owned)
        .collect();
        let sidecars = t.iter().filter(|t| t.state == "running").count();
        let attached = if sidecars >= hosts.len().max(1) {
            attached_nodes(&run.probe())
        } else {
            Vec::new()
        };
        let waiting: Vec<&String> = hosts.iter().filter(|h| !attached.contains(h)).collect();
        if sidecars >= hosts.len().max(1) && waiting.is_empty() {
            return Ok(());
        }
        stop_point()?;
        if Instant::now() >= deadline {
            bail!(
                "{WHO}: the probe service {} did not attach a probe on every node within 60 s \
                 (waiting for {}); `docker service ps {0}` and `docker service logs {0}` show why",
                run.probe(),
                waiting
                    .iter()
                    .map(|h| h.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Builds the merged report of run key `run.name` into `out` and prints it in short.
fn report(store: &str, run: &SwarmRun, out: &Path) -> Result<i64> {
    let rt = crate::cmd::store_runtime("swarm launch's report")?;
    rt.block_on(async {
        let st = herd_store::Store::open_existing(store).await?;
        let id = st.wait_for_key(&run.name, Duration::from_secs(1)).await?;
        let data = st.load_run(Some(id)).await?;
        let report = herd_report::Report::build(&data);
        let written = herd_report::write_report(&report, out)?;
        outln!(
            "run {id} ({}): {}, {} requests",
            data.meta.name,
            data.meta.status,
            report.run.requests
        );
        for s in &data.meta.shards {
            outln!(
                "  shard {}/{} on {} (pid {}): {}, {} intervals",
                s.index,
                s.count,
                s.host,
                s.pid,
                s.status,
                s.intervals
            );
        }
        for n in &report.notes {
            outln!("  {n}");
        }
        for f in written.files {
            outln!("wrote {}", f.display());
        }
        st.close().await;
        Ok(id)
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::{sidecar::tar_one, *};

    fn run() -> SwarmRun {
        SwarmRun {
            scenario_name: "game.toml".into(),
            name: "game-1".into(),
            shards: 3,
            image: "herd-swarm:game-1".into(),
            socket: "/var/run/docker.sock".into(),
            test_clock_offset: None,
        }
    }

    /// The value after `flag` in `args`, each time it appears.
    fn values<'a>(args: &'a [String], flag: &str) -> Vec<&'a str> {
        args.windows(2)
            .filter(|w| w[0] == flag)
            .map(|w| w[1].as_str())
            .collect()
    }

    /// herd's command line of a service: what follows the image (its first mention).
    fn herd_args(args: &[String], image: &str) -> Vec<String> {
        let at = args.iter().position(|a| a == image).unwrap();
        args[at + 1..].to_vec()
    }

    #[test]
    fn the_job_runs_each_slot_as_its_shard_with_the_scenario_and_the_secret() {
        let r = run();
        let a = r.job_args();
        assert_eq!(values(&a, "--mode"), ["replicated"]);
        assert_eq!(values(&a, "--replicas"), ["3"]);
        assert_eq!(values(&a, "--restart-condition"), ["none"]);
        assert_eq!(values(&a, "--network"), ["host"]);
        assert_eq!(
            values(&a, "--config"),
            ["source=game-1-scenario,target=/etc/herd/game.toml"]
        );
        assert_eq!(
            values(&a, "--secret"),
            ["source=game-1-store,target=herd-store,mode=0400"]
        );
        let env = values(&a, "--env");
        assert_eq!(env, ["HERD_SHARD_SLOT={{.Task.Slot}}/3"]);
        // The slots a replicated service's tasks get (1…3), and those Docker 20.10 hands a
        // replicated job's (0 rendered as the node's id, 1, 2): each set is shards 0, 1 and 2.
        for (slot, shard) in [
            ("w41lusmj75u5s181vjfs2jo6w", 0),
            ("1", 1),
            ("2", 2),
            ("3", 0),
        ] {
            let line = std::iter::once("herd".to_owned()).chain(herd_args(&a, &r.image));
            let slot_env = env[0].replace("{{.Task.Slot}}", slot);
            let slot_value = slot_env.split_once('=').unwrap().1.to_owned();
            let line: Vec<String> = line
                .chain(["--shard-slot".to_owned(), slot_value])
                .collect();
            let cli = crate::Cli::try_parse_from(line).unwrap();
            let crate::Command::Run(a) = cli.command else {
                panic!("not herd run")
            };
            assert_eq!(a.shard(), Some(herd_model::Shard::new(shard, 3).unwrap()));
            assert_eq!(a.run_key.as_deref(), Some("game-1"));
            assert_eq!(
                a.store_file.as_deref(),
                Some(Path::new("/run/secrets/herd-store"))
            );
            assert!(a.no_probe);
            assert_eq!(a.scenario, Path::new("/etc/herd/game.toml"));
        }
    }

    #[test]
    fn a_slot_that_is_neither_a_number_nor_a_node_id_is_refused() {
        for (bad, says) in [
            ("abc/3", "neither a number nor a node id"),
            ("1/0", "at least one shard"),
            ("1", "no `/`"),
        ] {
            let e = crate::Cli::try_parse_from(["herd", "run", "x.toml", "--shard-slot", bad])
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_probe_service_is_a_sidecar_per_node_whose_probe_runs_on_the_host_namespaces() {
        let r = run();
        let a = r.probe_args();
        assert_eq!(values(&a, "--mode"), ["global"]);
        assert_eq!(
            values(&a, "--mount"),
            ["type=bind,source=/var/run/docker.sock,target=/var/run/docker.sock"]
        );
        assert_eq!(values(&a, "--env"), ["HERD_NODE={{.Node.Hostname}}"]);
        let line = std::iter::once("herd".to_owned())
            .chain(herd_args(&a, &r.image))
            .chain(["--node".to_owned(), "node-a".to_owned()]);
        let cli = crate::Cli::try_parse_from(line).unwrap();
        let crate::Command::Probe(p) = cli.command else {
            panic!("not herd probe")
        };
        assert!(p.via_engine);
        assert_eq!(p.engine_image.as_deref(), Some("herd-swarm:game-1"));
        assert_eq!(p.run_key.as_deref(), Some("game-1"));

        let c = probe_container(&r.image, "game-1", "node-a", &r.socket, p.duration);
        let h = &c["HostConfig"];
        let caps: Vec<&str> = h["CapAdd"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        for cap in ["SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE"] {
            assert!(caps.contains(&cap), "{cap} in {caps:?}");
        }
        assert_eq!(h["PidMode"], "host");
        assert_eq!(h["NetworkMode"], "host");
        let binds: Vec<&str> = h["Binds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_str().unwrap())
            .collect();
        assert_eq!(
            binds,
            [
                "/sys/fs/cgroup:/sys/fs/cgroup:ro",
                "/sys/kernel/btf:/sys/kernel/btf:ro",
                "/var/run/docker.sock:/var/run/docker.sock"
            ]
        );
        // The probe's own command line, as herd parses it.
        let cmd = c["Cmd"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned());
        let cli =
            crate::Cli::try_parse_from(std::iter::once("herd".to_owned()).chain(cmd)).unwrap();
        let crate::Command::Probe(p) = cli.command else {
            panic!("not herd probe")
        };
        assert!(!p.via_engine);
        assert_eq!(
            (p.run_key.as_deref(), p.node.as_deref()),
            (Some("game-1"), Some("node-a"))
        );
        assert_eq!(p.store_file.as_deref(), Some(Path::new("/herd-store")));
        assert_eq!(c["Labels"]["herd.run"], "game-1");
    }

    #[test]
    fn each_slot_or_node_is_judged_by_its_first_task() {
        let t = |id: &str, slot: u64, node: &str, at: i64, state: &str| Task {
            id: id.into(),
            slot,
            node: node.into(),
            created_ns: at,
            state: state.into(),
            err: String::new(),
        };
        // Oldest first, as `tasks` sorts them: slot 1 failed and Docker 20.10 started it
        // again; the retry (still pending, on no node yet) is not the shard.
        let job = vec![
            t("a", 0, "n1", 1, "complete"),
            t("b", 1, "n1", 2, "failed"),
            t("c", 2, "n1", 3, "complete"),
            t("d", 1, "", 4, "pending"),
        ];
        let firsts_ids = |v: Vec<Task>| v.into_iter().map(|t| t.id).collect::<Vec<_>>();
        assert_eq!(firsts_ids(firsts(job.clone(), false)), ["a", "b", "c"]);
        assert!(firsts(job, false).iter().all(|t| finished(&t.state)));
        // A global service's tasks all have slot 0: one per node, unassigned ones skipped.
        let global = vec![
            t("p", 0, "n1", 1, "running"),
            t("q", 0, "n2", 2, "running"),
            t("r", 0, "", 3, "pending"),
            t("s", 0, "n1", 4, "running"),
        ];
        assert_eq!(firsts_ids(firsts(global, true)), ["p", "q"]);
    }

    #[test]
    fn a_task_whose_node_is_down_or_gone_is_lost() {
        let t = |id: &str, node: &str, state: &str| Task {
            id: id.into(),
            slot: 1,
            node: node.into(),
            created_ns: 0,
            state: state.into(),
            err: String::new(),
        };
        let mut ts = vec![
            t("a", "n1", "running"),
            t("b", "n2", "running"),
            t("c", "n2", "complete"),
            t("d", "n3", "starting"),
            t("e", "", "pending"),
        ];
        let nodes = std::collections::HashMap::from([
            ("n1".to_owned(), ("node-1".to_owned(), "Ready".to_owned())),
            ("n2".to_owned(), ("node-2".to_owned(), "Down".to_owned())),
        ]);
        mark_lost(&mut ts, &nodes);
        let got: Vec<(&str, &str)> = ts
            .iter()
            .map(|t| (t.state.as_str(), t.err.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("running", ""),
                (LOST, "its node node-2 is down"),
                ("complete", ""),
                (LOST, "its node n3 left the swarm"),
                ("pending", ""),
            ]
        );
        assert!(
            ts.iter()
                .filter(|t| t.state == LOST)
                .all(|t| finished(&t.state))
        );
    }

    #[test]
    fn the_store_url_archive_is_a_tar_of_one_file() {
        let t = tar_one("herd-store", b"postgres://u:p@h/db");
        assert_eq!(t.len(), 512 + 512 + 1024);
        assert_eq!(&t[..10], b"herd-store");
        assert_eq!(&t[257..262], b"ustar");
        let sum: u32 = t[..512]
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    u32::from(b)
                }
            })
            .sum();
        let field = std::str::from_utf8(&t[148..154]).unwrap();
        assert_eq!(u32::from_str_radix(field, 8).unwrap(), sum);
        assert_eq!(&t[512..531], b"postgres://u:p@h/db");
    }
}
