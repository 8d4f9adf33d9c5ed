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
    docker::{Kind, Made, build_image, docker, docker_input, engine_answers, engine_host},
    signals,
};

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
    herd_driver::Shard::new(0, l.shards)?;
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

/// One task of a service, as `docker inspect` of a task reads.
#[derive(Debug, Clone)]
struct Task {
    id: String,
    slot: u64,
    node: String,
    created_ns: i64,
    state: String,
    err: String,
}

/// The tasks of `service`, oldest first.
fn tasks(service: &str) -> Result<Vec<Task>> {
    let ids = docker(&["service", "ps", "-q", "--no-trunc", service])?;
    let ids: Vec<&str> = ids.split_whitespace().collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut args = vec![
        "inspect",
        "--type",
        "task",
        "--format",
        "{{.ID}}\t{{.Slot}}\t{{.NodeID}}\t{{.CreatedAt.UnixNano}}\t{{.Status.State}}\t{{.Status.Err}}",
    ];
    args.extend(ids);
    let mut out: Vec<Task> = docker(&args)?
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(6, '\t');
            Some(Task {
                id: f.next()?.to_owned(),
                slot: f.next()?.parse().unwrap_or(0),
                node: f.next()?.to_owned(),
                created_ns: f.next()?.parse().unwrap_or(0),
                state: f.next()?.to_owned(),
                err: f.next().unwrap_or("").to_owned(),
            })
        })
        .collect();
    out.sort_by_key(|t| t.created_ns);
    Ok(out)
}

fn finished(state: &str) -> bool {
    matches!(
        state,
        "complete" | "failed" | "rejected" | "shutdown" | "orphaned" | "remove" | LOST
    )
}

/// The state herd gives a task whose node the swarm lost: the manager marks the node `Down`
/// (no heartbeat for a few periods) but leaves its tasks `running` until it comes back.
const LOST: &str = "lost";

/// The swarm's nodes by id: (hostname, status), as `docker node ls` reads them.
fn nodes() -> Result<std::collections::HashMap<String, (String, String)>> {
    Ok(docker(&[
        "node",
        "ls",
        "--format",
        "{{.ID}}\t{{.Hostname}}\t{{.Status}}",
    ])?
    .lines()
    .filter_map(|l| {
        let mut f = l.split('\t');
        let id = f.next()?.to_owned();
        Some((id, (f.next()?.to_owned(), f.next()?.to_owned())))
    })
    .collect())
}

/// Marks [`LOST`] the unfinished tasks whose node is down or no longer in the swarm: they
/// will never report an end.
fn mark_lost(tasks: &mut [Task], nodes: &std::collections::HashMap<String, (String, String)>) {
    for t in tasks
        .iter_mut()
        .filter(|t| !finished(&t.state) && !t.node.is_empty())
    {
        let why = match nodes.get(&t.node) {
            Some((host, status)) if status == "Down" => format!("its node {host} is down"),
            Some(_) => continue,
            None => format!("its node {} left the swarm", t.node),
        };
        t.state = LOST.into();
        t.err = why;
    }
}

/// The first task of each slot (the shards) or node (a global service). A failed task is not
/// started again (`--restart-condition none`; Docker 20.10 did start a failed *job* task
/// again whatever it said); should one be, the first attempt is the shard's (a second one
/// finds its index taken in the store).
fn firsts(all: Vec<Task>, by_node: bool) -> Vec<Task> {
    let mut seen = std::collections::HashSet::new();
    all.into_iter()
        .filter(|t| !(by_node && t.node.is_empty()))
        .filter(|t| {
            seen.insert(if by_node {
                t.node.clone()
            } else {
                t.slot.to_string()
            })
        })
        .collect()
}

/// What a task is, for messages: a shard of `shards` (`shard 1/4 (task ID of slot 2)`), or
/// a node's probe.
fn what(t: &Task, shards: Option<u32>) -> String {
    match shards {
        Some(n) => format!(
            "shard {}/{n} (task {} of slot {})",
            t.slot % u64::from(n),
            t.id,
            t.slot
        ),
        None => format!("the probe task {}", t.id),
    }
}

/// Waits until `service` has `want` slots (or nodes, `by_node`) whose first task has
/// finished (or `deadline`, or a stop).
fn wait_tasks(service: &str, want: usize, by_node: bool, deadline: Instant) -> Result<Vec<Task>> {
    let mut told = std::collections::HashSet::new();
    loop {
        let mut t = firsts(tasks(service)?, by_node);
        if !t.iter().all(|t| finished(&t.state)) {
            mark_lost(&mut t, &nodes()?);
        }
        // Said when seen: the others may run for a long while yet.
        for lost in t.iter().filter(|t| t.state == LOST) {
            if told.insert(lost.id.clone()) {
                let shards = (!by_node).then_some(want as u32);
                eprintln!("{WHO}: {} is lost: {}", what(lost, shards), lost.err);
            }
        }
        if t.len() >= want && t.iter().all(|t| finished(&t.state)) {
            return Ok(t);
        }
        stop_point()?;
        if Instant::now() >= deadline {
            let states: Vec<String> = t
                .iter()
                .map(|t| format!("slot {} {}", t.slot, t.state))
                .collect();
            bail!(
                "{WHO}: the service {service} did not finish in time ({}); `docker service ps \
                 {service}` shows its tasks",
                states.join(", ")
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Removes a service on drop, then its tasks' containers: the running ones are stopped (a
/// probe sidecar then removes the probe it started), then every container of the service or
/// of what its tasks started is removed (the engine keeps a finished task's container).
struct Service {
    made: Option<Made>,
    /// The service's id, once created: a removed service's tasks are named by it.
    id: Option<String>,
    /// Besides the service's own task containers: `docker ps --filter`s (ANDed) of the
    /// containers its tasks start (the probes of a sidecar).
    started: Vec<String>,
}

impl Drop for Service {
    fn drop(&mut self) {
        let name = self
            .made
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        drop(self.made.take());
        let own = vec![format!("label=com.docker.swarm.service.name={name}")];
        let containers = |running: bool| {
            let mut ids = Vec::new();
            for set in [&own, &self.started] {
                if set.is_empty() {
                    continue;
                }
                let mut args = vec!["ps", "-q", "--no-trunc"];
                for f in set {
                    args.extend(["--filter", f.as_str()]);
                }
                if running {
                    args.extend(["--filter", "status=running"]);
                } else {
                    args.push("-a");
                }
                if let Ok(out) = docker(&args) {
                    ids.extend(out.split_whitespace().map(str::to_owned));
                }
            }
            ids.sort();
            ids.dedup();
            ids
        };
        // Stop this node's running tasks with a grace herd chooses (Docker 20.10 leaves a
        // removed *job*'s running tasks running): SIGTERM, a shard records itself stopped, a
        // sidecar removes its probe; SIGKILL after 15 s.
        let running = containers(true);
        if !running.is_empty() {
            let mut args = vec!["stop", "-t", "15"];
            args.extend(running.iter().map(String::as_str));
            let _ = docker(&args);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while !containers(true).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(250));
        }
        // The node's agent may still be starting a task the orchestrator scheduled before the
        // service went (a failed shard's restart): it appears after a first look. Remove
        // until none has been seen for a second, at most 30 s.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut quiet = 0;
        let mut left = Vec::new();
        while quiet < 4 && Instant::now() < deadline {
            left = containers(false);
            if left.is_empty() {
                quiet += 1;
            } else {
                quiet = 0;
                let mut args = vec!["rm", "-f", "-v"];
                args.extend(left.iter().map(String::as_str));
                let _ = docker(&args);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        if !left.is_empty() {
            tracing::warn!(
                "{WHO}: could not remove the containers of {name}; `docker rm -f {}`",
                left.join(" ")
            );
        }
        // The other nodes' task containers are removed by their nodes' agents, which report
        // each task gone once they have stopped it: wait for every node that is up.
        let ids = [Some(name.clone()), self.id.clone()];
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = remote_tasks(&ids);
            if left.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                tracing::warn!(
                    "{WHO}: the swarm still lists tasks of the removed service {name} after 30 s \
                     ({}); their nodes remove them when they can",
                    left.join(", ")
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// The tasks the swarm's nodes that are up still hold of a service named or identified by
/// one of `ids` (a removed service's tasks are named `ID.SLOT`), as `docker node ps` lists.
fn remote_tasks(ids: &[Option<String>]) -> Vec<String> {
    let Ok(nodes) = nodes() else {
        return Vec::new();
    };
    let up: Vec<&str> = nodes
        .iter()
        .filter(|(_, (_, status))| status == "Ready")
        .map(|(id, _)| id.as_str())
        .collect();
    if up.is_empty() {
        return Vec::new();
    }
    let mut args = vec!["node", "ps", "--format", "{{.Name}}"];
    args.extend(up);
    docker(&args)
        .unwrap_or_default()
        .lines()
        .filter(|t| {
            t.rsplit_once('.')
                .is_some_and(|(svc, _)| ids.iter().flatten().any(|i| i == svc))
        })
        .map(str::to_owned)
        .collect()
}

fn create_service(args: &[String], name: &str, started: Vec<String>) -> Result<Service> {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    // Guarded before: a create that failed halfway may still have left the service.
    let mut guard = Service {
        made: Some(Made::new(Kind::Service, name, WHO)),
        id: None,
        started,
    };
    let id = docker(&a).with_context(|| {
        format!("{WHO}: creating the service {name}; if a launch that was killed left it, `docker service rm {name}`")
    })?;
    guard.id = Some(id.trim().to_owned()).filter(|i| !i.is_empty());
    Ok(guard)
}

/// The logs of one task (`docker service logs`: the task's stdout on stdout, its stderr on
/// stderr), for a failure message.
fn task_logs(id: &str) -> String {
    use std::os::unix::process::CommandExt as _;
    let out = std::process::Command::new("docker")
        .args(["service", "logs", "--raw", "--no-trunc", id])
        .stdin(std::process::Stdio::null())
        .process_group(0)
        .output();
    match out {
        Ok(o) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            if text.trim().is_empty() {
                "(no output)".into()
            } else {
                text.trim_end().to_owned()
            }
        }
        Err(e) => format!("(could not read its logs: {e})"),
    }
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
    println!(
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
        eprintln!(
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
                    eprintln!(
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
        println!(
            "run {id} ({}): {}, {} requests",
            data.meta.name, data.meta.status, report.run.requests
        );
        for s in &data.meta.shards {
            println!(
                "  shard {}/{} on {} (pid {}): {}, {} intervals",
                s.index, s.count, s.host, s.pid, s.status, s.intervals
            );
        }
        for n in &report.notes {
            println!("  {n}");
        }
        for f in written.files {
            println!("wrote {}", f.display());
        }
        st.close().await;
        Ok(id)
    })
}

/// `herd probe --via-engine`: the probe service's task. Starts the real probe in a container
/// of `image` on this node's engine — eBPF's capabilities, the host's PID, network and cgroup
/// namespaces, cgroupfs and BTF mounted, the store URL copied in as a file — waits for it,
/// relays its output, and removes it when it exits or this task is stopped (SIGTERM).
pub fn probe_via_engine(args: &crate::cmd::probe::ProbeArgs) -> Result<()> {
    let image = args
        .engine_image
        .clone()
        .context("--via-engine needs --engine-image IMAGE, the image the probe runs in")?;
    let store = crate::cmd::store_or_file(&args.store, &args.store_file)?
        .context("--via-engine needs --store-file or --store")?;
    let key = args
        .run_key
        .clone()
        .context("--via-engine needs --run-key KEY")?;
    let node = args.node.clone().unwrap_or_else(|| "node".into());
    let sock = Path::new("/var/run/docker.sock");
    let spec = probe_container(&image, &key, &node, &args.engine_socket, args.duration);
    let name = format!("{key}-probe-{node}");
    let (status, body) = api(
        sock,
        "POST",
        &format!("/containers/create?name={name}"),
        Some(("application/json", spec.to_string().as_bytes())),
    )?;
    if status != 201 {
        return Err(crate::environment(anyhow!(
            "herd probe --via-engine: the engine refused to create the probe container {name} \
             ({status}: {})",
            String::from_utf8_lossy(&body).trim()
        )));
    }
    let id = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["Id"].as_str().map(str::to_owned))
        .context("the engine's answer to create names no container id")?;
    let guard = Child {
        sock: sock.to_owned(),
        id: id.clone(),
    };
    // The URL goes in as a file of the container's own layer: not in its command line or
    // environment, which `docker inspect` shows.
    let tar = tar_one("herd-store", store.as_bytes());
    expect_2xx(
        api(
            sock,
            "PUT",
            &format!("/containers/{id}/archive?path=/"),
            Some(("application/x-tar", &tar)),
        )?,
        "copying the store URL into the probe container",
    )?;
    expect_2xx(
        api(sock, "POST", &format!("/containers/{id}/start"), None)?,
        "starting the probe container",
    )?;
    eprintln!(
        "herd probe --via-engine: probe container {name} ({}) started",
        &id[..12.min(id.len())]
    );
    let mut announced = false;
    let code = loop {
        if !announced && logs(sock, &id).contains(crate::cmd::probe::ATTACHED) {
            // The launcher starts the shards once every node's sidecar has said so.
            eprintln!("{PROBE_ATTACHED}{node}");
            announced = true;
        }
        let (st, body) = api(sock, "GET", &format!("/containers/{id}/json"), None)?;
        if st == 200 {
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            if v["State"]["Status"].as_str() == Some("exited") {
                break v["State"]["ExitCode"].as_i64().unwrap_or(1);
            }
        } else {
            bail!("herd probe --via-engine: the probe container {name} is gone ({st})");
        }
        if signals::stop_requested() {
            // The probe ends its interval and closes its store rows on SIGTERM.
            let _ = engine(
                sock,
                "POST",
                &format!("/containers/{id}/stop?t=10"),
                None,
                20,
            );
            break -1;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    eprint!("{}", logs(sock, &id));
    drop(guard);
    match code {
        0 | -1 => Ok(()),
        c => bail!("herd probe --via-engine: the probe container {name} exited with {c}"),
    }
}

/// The Engine API body that creates the probe's container.
pub fn probe_container(
    image: &str,
    key: &str,
    node: &str,
    socket: &str,
    duration: Duration,
) -> Value {
    json!({
        "Image": image,
        "Cmd": [
            "probe", "--store-file", "/herd-store", "--run-key", key, "--node", node,
            "--duration", humantime::format_duration(duration).to_string(),
            // Several engines may share the kernel (nodes of a test swarm on one host): the
            // node's probe reports its engine's containers, no other's.
            "--engine-only",
        ],
        "Labels": {"herd.run": key, "herd.role": "probe"},
        "HostConfig": {
            // Loading eBPF programs and reading every process's namespaces and cgroups:
            // CAP_SYS_ADMIN (bpf(2) and perf_event_open(2), which the kernel still accepts
            // it for in place of CAP_BPF + CAP_PERFMON — names Docker 20.10 does not know;
            // setns into a container's network namespace; mounting tracefs), CAP_NET_ADMIN
            // (sock_diag), CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH (/proc/PID/ns/net of other
            // processes). Named, not `Privileged`: that asks for every capability, and an
            // engine whose own bounding set lacks one (CAP_SYS_RESOURCE on the hosts herd is
            // developed on) then fails to start the container ("unable to apply caps").
            "CapAdd": ["SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "DAC_READ_SEARCH"],
            // The default seccomp profile refuses bpf(2) and perf_event_open(2) to a
            // container without CAP_SYS_ADMIN in 20.10; the default AppArmor profile refuses
            // mount(2) (tracefs). Masked /proc paths would hide what the probe reads.
            "SecurityOpt": ["seccomp=unconfined", "apparmor=unconfined"],
            "MaskedPaths": [],
            "ReadonlyPaths": [],
            "PidMode": "host",
            "NetworkMode": "host",
            "CgroupnsMode": "host",
            "Binds": [
                "/sys/fs/cgroup:/sys/fs/cgroup:ro",
                "/sys/kernel/btf:/sys/kernel/btf:ro",
                // Container names from the engine.
                format!("{socket}:/var/run/docker.sock"),
            ],
        },
    })
}

/// Removes the probe container on drop (also when the sidecar fails or is interrupted).
struct Child {
    sock: PathBuf,
    id: String,
}

impl Drop for Child {
    fn drop(&mut self) {
        if let Err(e) = engine(
            &self.sock,
            "DELETE",
            &format!("/containers/{}?force=true&v=true", self.id),
            None,
            20,
        ) {
            eprintln!(
                "herd probe --via-engine: could not remove the probe container {}: {e}; \
                 `docker rm -f {0}`",
                self.id
            );
        }
    }
}

fn engine(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<(&str, &[u8])>,
    secs: u64,
) -> std::io::Result<(u16, Vec<u8>)> {
    herd_probe::discover::engine_request(sock, method, path, body, Duration::from_secs(secs))
}

fn api(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<(&str, &[u8])>,
) -> Result<(u16, Vec<u8>)> {
    engine(sock, method, path, body, 10).with_context(|| {
        format!(
            "herd probe --via-engine: {method} {path} on the engine's socket {} (mount the \
             node's Docker socket there)",
            sock.display()
        )
    })
}

fn expect_2xx((status, body): (u16, Vec<u8>), what: &str) -> Result<()> {
    if !(200..300).contains(&status) {
        bail!(
            "herd probe --via-engine: {what}: the engine answered {status}: {}",
            String::from_utf8_lossy(&body).trim()
        );
    }
    Ok(())
}

/// The probe's output, from the engine's multiplexed log stream (8-byte frame headers).
fn logs(sock: &Path, id: &str) -> String {
    let Ok((200, body)) = engine(
        sock,
        "GET",
        &format!("/containers/{id}/logs?stdout=1&stderr=1"),
        None,
        10,
    ) else {
        return String::new();
    };
    let mut out = String::new();
    let mut rest = &body[..];
    while rest.len() >= 8 {
        let n = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]) as usize;
        let end = (8 + n).min(rest.len());
        out.push_str(&String::from_utf8_lossy(&rest[8..end]));
        rest = &rest[end..];
    }
    out
}

/// A tar archive of one file `name` (mode 0400, root's) holding `data`.
fn tar_one(name: &str, data: &[u8]) -> Vec<u8> {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    let octal = |h: &mut [u8; 512], at: usize, len: usize, v: u64| {
        let s = format!("{v:0w$o}\0", w = len - 1);
        h[at..at + len].copy_from_slice(s.as_bytes());
    };
    octal(&mut h, 100, 8, 0o400);
    octal(&mut h, 108, 8, 0);
    octal(&mut h, 116, 8, 0);
    octal(&mut h, 124, 12, data.len() as u64);
    octal(&mut h, 136, 12, 0);
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    // The checksum is the header's byte sum with its own field as spaces.
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out.extend_from_slice(&[0u8; 1024]);
    out
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

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
            assert_eq!(a.shard(), Some(herd_driver::Shard::new(shard, 3).unwrap()));
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
