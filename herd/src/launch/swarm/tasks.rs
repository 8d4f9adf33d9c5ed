//! The swarm's side of a launch: its nodes, a service's tasks and how each slot fared, and
//! the services the launch creates and removes.

use super::*;

/// One task of a service, as `docker inspect` of a task reads.
#[derive(Debug, Clone)]
pub(super) struct Task {
    pub(super) id: String,
    pub(super) slot: u64,
    pub(super) node: String,
    pub(super) created_ns: i64,
    pub(super) state: String,
    pub(super) err: String,
}

/// The tasks of `service`, oldest first.
pub(super) fn tasks(service: &str) -> Result<Vec<Task>> {
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

pub(super) fn finished(state: &str) -> bool {
    matches!(
        state,
        "complete" | "failed" | "rejected" | "shutdown" | "orphaned" | "remove" | LOST
    )
}

/// The state herd gives a task whose node the swarm lost: the manager marks the node `Down`
/// (no heartbeat for a few periods) but leaves its tasks `running` until it comes back.
pub(super) const LOST: &str = "lost";

/// The swarm's nodes by id: (hostname, status), as `docker node ls` reads them.
pub(super) fn nodes() -> Result<std::collections::HashMap<String, (String, String)>> {
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
pub(super) fn mark_lost(
    tasks: &mut [Task],
    nodes: &std::collections::HashMap<String, (String, String)>,
) {
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
pub(super) fn firsts(all: Vec<Task>, by_node: bool) -> Vec<Task> {
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
pub(super) fn what(t: &Task, shards: Option<u32>) -> String {
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
pub(super) fn wait_tasks(
    service: &str,
    want: usize,
    by_node: bool,
    deadline: Instant,
) -> Result<Vec<Task>> {
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
                errln!("{WHO}: {} is lost: {}", what(lost, shards), lost.err);
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
pub(super) struct Service {
    pub(super) made: Option<Made>,
    /// The service's id, once created: a removed service's tasks are named by it.
    pub(super) id: Option<String>,
    /// Besides the service's own task containers: `docker ps --filter`s (ANDed) of the
    /// containers its tasks start (the probes of a sidecar).
    pub(super) started: Vec<String>,
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
pub(super) fn remote_tasks(ids: &[Option<String>]) -> Vec<String> {
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

pub(super) fn create_service(args: &[String], name: &str, started: Vec<String>) -> Result<Service> {
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
pub(super) fn task_logs(id: &str) -> String {
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
