//! `herd launch swarm` on a real swarm of two Docker engines on this host
//! (`integration_test::nodes`: each engine in network, UTS and mount namespaces of its own,
//! joined over a bridge in 198.18.64.0/20, its containers under a cgroup parent of its own).
//! The run store (PostgreSQL) and the target (Debian's nginx, its access log the ground
//! truth, each line with the client's address, so with the node it came from) listen on the
//! bridge's host address. One cluster serves every test here: the first test makes it, the
//! test process removes it when it exits (and the next run sweeps it if the process was
//! killed); a test that lost a node has it wiped, and the next one brings it back. Every test
//! is named `docker_…`: xtask counts them with the other Docker tests.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use herd_model::ProbeInterval;
use herd_testkit::TempDir;
use integration_test::{
    Access, Nginx, Postgres, herd_cmd,
    nodes::{Cluster, Node},
    privileged,
};
use probe_common::Counter;
use sqlx::Row as _;

/// The cluster every test here shares; `None` until the first one makes it.
static CLUSTER: Mutex<Option<Cluster>> = Mutex::new(None);

extern "C" fn remove_cluster() {
    let mut g = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    drop(g.take());
}

/// The shared cluster (made now if it is not yet), every node up; one test at a time.
fn cluster() -> MutexGuard<'static, Option<Cluster>> {
    let mut g = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    if g.is_none() {
        let t = Instant::now();
        let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target");
        // SAFETY: registers a plain function; it runs once, at exit, after the tests.
        unsafe { libc::atexit(remove_cluster) };
        *g = Some(
            Cluster::start(&target, 2, Path::new(env!("CARGO_BIN_EXE_herd")))
                .unwrap_or_else(|e| panic!("making the two-node swarm: {e:#}")),
        );
        eprintln!(
            "nodes: two-node swarm ready in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    let c = g.as_mut().expect("made above");
    for i in 0..c.nodes.len() {
        if !c.nodes[i].is_up() {
            c.revive(i)
                .unwrap_or_else(|e| panic!("reviving node {}: {e:#}", i + 1));
        }
    }
    g
}

/// `herd launch swarm` on the manager: `shards` shards of `scenario`, herd's image as every
/// node has it, the node socket where each node's engine has it.
fn launch(
    c: &Cluster,
    scenario: &Path,
    store: &str,
    name: &str,
    out: &Path,
    shards: u32,
) -> Command {
    let mut cmd = herd_cmd();
    cmd.args(["launch", "swarm"])
        .arg(scenario)
        .args([
            "--shards",
            &shards.to_string(),
            "--store",
            store,
            "--name",
            name,
        ])
        .args(["--image", &c.image, "--node-socket", "/var/run/docker.sock"])
        .args(["--timeout", "3m", "--out"])
        .arg(out)
        .env("DOCKER_HOST", c.manager().docker_host())
        .env_remove("HERD_STORE")
        .env_remove(herd_store::TEST_CLOCK_OFFSET);
    cmd
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// What a watcher saw of a run while it ran: the node of each task (`docker service ps` on
/// the manager), and each node's containers (id → name, from its own engine) and container
/// cgroups (from the kernel, under the node's cgroup parent).
#[derive(Default, Debug)]
struct Seen {
    /// Task name (`NAME.SLOT`) → node.
    placement: BTreeMap<String, String>,
    /// Task id → node.
    task_nodes: BTreeMap<String, String>,
    /// Node → container id → name.
    containers: BTreeMap<String, BTreeMap<String, String>>,
    /// Node → container ids with a cgroup under its parent.
    cgroups: BTreeMap<String, BTreeSet<String>>,
}

/// Watches run `name` every 200 ms until `stop` is set.
fn watch(c: &Cluster, name: &str, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Seen> {
    let manager = c.manager().docker_host();
    let nodes: Vec<(String, String, PathBuf)> = c
        .nodes
        .iter()
        .map(|n| {
            let dir = Path::new("/sys/fs/cgroup/unified");
            let root = if dir.exists() {
                dir
            } else {
                Path::new("/sys/fs/cgroup")
            };
            (
                n.name.clone(),
                n.docker_host(),
                root.join(n.cgroup_parent.trim_start_matches('/')),
            )
        })
        .collect();
    let name = name.to_owned();
    std::thread::spawn(move || {
        let mut seen = Seen::default();
        let docker = |host: &str, args: &[&str]| {
            Command::new("docker")
                .arg("-H")
                .arg(host)
                .args(args)
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default()
        };
        while !stop.load(Ordering::SeqCst) {
            let ps = docker(
                &manager,
                &[
                    "service",
                    "ps",
                    &name,
                    "--no-trunc",
                    "--format",
                    "{{.ID}} {{.Name}} {{.Node}}",
                ],
            );
            for l in ps.lines() {
                let f: Vec<&str> = l.split(' ').collect();
                if let [id, task, node] = f[..] {
                    // A task is `SERVICE.SLOT`; listed while the launcher removes the service,
                    // its name reads `SERVICE_ID.SLOT` instead: key it by the slot.
                    let slot = task.rsplit_once('.').map_or(task, |(_, slot)| slot);
                    seen.placement
                        .insert(format!("{name}.{slot}"), node.to_owned());
                    seen.task_nodes.insert(id.to_owned(), node.to_owned());
                }
            }
            for (node, host, cg) in &nodes {
                let ps = docker(
                    host,
                    &["ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.Names}}"],
                );
                let m = seen.containers.entry(node.clone()).or_default();
                for l in ps.lines() {
                    if let Some((id, n)) = l.split_once(' ') {
                        m.insert(id.to_owned(), n.to_owned());
                    }
                }
                let set = seen.cgroups.entry(node.clone()).or_default();
                for e in std::fs::read_dir(cg).into_iter().flatten().flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        set.insert(e.file_name().to_string_lossy().into_owned());
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        seen
    })
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The run of key `name`, its shards (index → (host, status)) and each shard's final report
/// (index → requests, connects) from the store.
struct Stored {
    run: i64,
    shards: BTreeMap<i64, (String, String)>,
    finals: BTreeMap<i64, (u64, u64)>,
    /// Node → its probe's intervals, as written.
    probes: BTreeMap<String, Vec<ProbeInterval>>,
    /// Shard → its driver intervals' requests, summed.
    interval_requests: BTreeMap<i64, u64>,
}

fn stored(url: &str, name: &str) -> Stored {
    let rt = rt();
    rt.block_on(async {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        let run: i64 = sqlx::query("SELECT run_id FROM herd_run_keys WHERE run_key = $1")
            .bind(name)
            .fetch_one(&pool)
            .await
            .unwrap()
            .get("run_id");
        let shards = sqlx::query("SELECT shard, host, status FROM herd_shards WHERE run_id = $1")
            .bind(run)
            .fetch_all(&pool)
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get("shard"), (r.get("host"), r.get("status"))))
            .collect();
        let mut finals = BTreeMap::new();
        let mut interval_requests = BTreeMap::new();
        let mut probes: BTreeMap<String, Vec<ProbeInterval>> = BTreeMap::new();
        for r in
            sqlx::query("SELECT shard, source, body FROM herd_rows WHERE run_id = $1 ORDER BY seq")
                .bind(run)
                .fetch_all(&pool)
                .await
                .unwrap()
        {
            let (shard, source, body): (i64, String, String) =
                (r.get("shard"), r.get("source"), r.get("body"));
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            match source.as_str() {
                "report" => {
                    finals.insert(
                        shard,
                        (
                            v["requests"].as_u64().unwrap(),
                            v["connects"].as_u64().unwrap(),
                        ),
                    );
                }
                "driver" => {
                    *interval_requests.entry(shard).or_default() += v["ops"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|op| op["count"].as_u64().unwrap_or(0))
                        .sum::<u64>();
                }
                s => {
                    if let Some(node) = s.strip_prefix("probe@") {
                        probes
                            .entry(node.to_owned())
                            .or_default()
                            .push(serde_json::from_str(&body).unwrap());
                    }
                }
            }
        }
        pool.close().await;
        Stored {
            run,
            shards,
            finals,
            probes,
            interval_requests,
        }
    })
}

/// nginx's lines by the node they came from (its address).
fn by_node(c: &Cluster, log: &[Access]) -> BTreeMap<String, Vec<Access>> {
    let node_of: HashMap<Ipv4Addr, &str> =
        c.nodes.iter().map(|n| (n.addr, n.name.as_str())).collect();
    let mut out: BTreeMap<String, Vec<Access>> = BTreeMap::new();
    for a in log {
        let node = node_of.get(&a.from).copied().unwrap_or("elsewhere");
        out.entry(node.to_owned()).or_default().push(a.clone());
    }
    out
}

/// What of run `name` a node's engine still holds: (kind, listing) for each kind that does.
fn left_of(node: &Node, name: &str) -> Vec<(&'static str, String)> {
    let manager = node.docker(&["info", "--format", "{{.Swarm.ControlAvailable}}"]) == "true";
    let mut lists = vec![(
        "container",
        node.docker(&["ps", "-a", "--format", "{{.Names}} {{.Status}}"]),
    )];
    if manager {
        for what in ["service", "config", "secret"] {
            lists.push((what, node.docker(&[what, "ls", "--format", "{{.Name}}"])));
        }
    }
    lists.retain(|(_, l)| l.contains(name));
    lists
}

/// Waits (10 s at most) until no engine of `nodes` holds anything of run `name`, and panics
/// naming what is left. The launcher returns once the swarm lists no task of its services;
/// a worker's agent removes the last task container a moment later. Returns how long after
/// the call that took.
fn nothing_left<'a>(nodes: impl Iterator<Item = &'a Node> + Clone, name: &str) -> Duration {
    let t = Instant::now();
    loop {
        let left: Vec<(String, &'static str, String)> = nodes
            .clone()
            .flat_map(|n| {
                left_of(n, name)
                    .into_iter()
                    .map(|(k, l)| (n.name.clone(), k, l))
            })
            .collect();
        if left.is_empty() {
            eprintln!(
                "nothing of run {name} left on any node {:.1} s after the launcher returned",
                t.elapsed().as_secs_f64()
            );
            return t.elapsed();
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "left of run {name} 10 s after the launcher returned: {left:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every phase with an exact count: a catalog route (301 requests at 6), 30 players with 20
/// ops each, an open-model rate step (400/s × 1 s).
const PLANNED: u64 = 301 + 30 * 20 + 400;

#[test]
fn docker_nodes_four_shards_on_two_engines_match_nginx_per_node_and_each_probe_sees_its_own() {
    let test =
        "docker_nodes_four_shards_on_two_engines_match_nginx_per_node_and_each_probe_sees_its_own";
    if !privileged(test) {
        return;
    }
    let g = cluster();
    // The test's own time: the cluster's setup (or a node's revival) is printed apart.
    let started = Instant::now();
    let c = g.as_ref().unwrap();
    let pg = Postgres::start_on(c.host_addr, &c.subnet).unwrap();
    let nginx = Nginx::start_on("it-nodes-nginx", c.host_addr);
    let dir = TempDir::new("it-nodes");
    let scenario = dir.write(
        "plan.toml",
        format!(
            "[target]\nurl = \"http://{}:{}\"\n[player]\nmax_ops = 20\nthink = \"10ms\"\n\
             [[op]]\nname = \"ok\"\npath = \"/\"\n[catalog]\nrequests = 301\nconcurrency = 6\n\
             [[step]]\nplayers = 30\nduration = \"2s\"\nramp = \"300ms\"\n\
             [[rate]]\nrate = 400\nduration = \"1s\"\n",
            nginx.addr, nginx.port
        ),
    );
    let name = format!("it-nodes-{}", std::process::id());
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch(c, &name, stop.clone());
    let t = Instant::now();
    let out = launch(c, &scenario, &pg.url, &name, &dir.join("out"), 4)
        .output()
        .unwrap();
    let took = t.elapsed();
    stop.store(true, Ordering::SeqCst);
    let seen = watcher.join().unwrap();
    let (stdout, stderr) = text(&out);
    eprintln!(
        "herd launch swarm took {:.1} s:\n{stdout}\n{stderr}",
        took.as_secs_f64()
    );
    assert!(out.status.success(), "herd launch swarm failed");
    let settled = nothing_left(c.nodes.iter(), &name);

    // Placement, as the swarm's manager told it while the run ran: both nodes took shards.
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for node in seen.placement.values() {
        *per_node.entry(node.clone()).or_default() += 1;
    }
    eprintln!("placement: {:?}", seen.placement);
    assert_eq!(per_node.values().sum::<usize>(), 4, "{:?}", seen.placement);
    for n in &c.nodes {
        assert!(
            per_node.get(&n.name).is_some_and(|&k| k >= 1),
            "no shard on {}: {:?}",
            n.name,
            seen.placement
        );
    }

    // The store: four shards, each on the host the swarm put it on, all finished.
    let st = stored(&pg.url, &name);
    let mut hosts: BTreeMap<String, usize> = BTreeMap::new();
    for (host, status) in st.shards.values() {
        assert_eq!(status, "finished");
        *hosts.entry(host.clone()).or_default() += 1;
    }
    assert_eq!(hosts, per_node, "shards per node: the store vs the swarm");

    // nginx: every request, and from each node exactly what that node's shards sent.
    let log = nginx.accesses();
    assert_eq!(
        log.len() as u64,
        PLANNED,
        "nginx logged what the plan sends"
    );
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("out").join(format!("run-{}.json", st.run))).unwrap(),
    )
    .unwrap();
    assert_eq!(
        report["run"]["requests"], PLANNED,
        "merged count vs access log"
    );
    let logged = by_node(c, &log);
    assert_eq!(
        logged.keys().collect::<Vec<_>>(),
        c.nodes.iter().map(|n| &n.name).collect::<Vec<_>>(),
        "requests came from the nodes' addresses only"
    );
    for n in &c.nodes {
        let of_node: Vec<i64> = st
            .shards
            .iter()
            .filter(|(_, (h, _))| *h == n.name)
            .map(|(i, _)| *i)
            .collect();
        let (requests, connects) = of_node.iter().fold((0, 0), |(r, k), i| {
            let f = st.finals[i];
            (r + f.0, k + f.1)
        });
        let lines = &logged[&n.name];
        let connections: BTreeSet<u64> = lines.iter().map(|a| a.connection).collect();
        eprintln!(
            "{}: shards {of_node:?} sent {requests} requests over {connects} connects; nginx \
             logged {} requests on {} connections from {}",
            n.name,
            lines.len(),
            connections.len(),
            n.addr
        );
        assert_eq!(
            lines.len() as u64,
            requests,
            "{}: nginx vs its shards",
            n.name
        );
        assert_eq!(
            connections.len() as u64,
            connects,
            "{}: connections",
            n.name
        );
    }

    // Each node's probe: rows tagged with its node, its own containers only, and the
    // connects of its shards' containers toward nginx = the connections nginx accepted
    // from that node.
    let target: std::net::SocketAddr = (nginx.addr, nginx.port).into();
    for n in &c.nodes {
        let rows = st
            .probes
            .get(&n.name)
            .unwrap_or_else(|| panic!("no probe@{} rows", n.name));
        let names: BTreeSet<&str> = rows
            .iter()
            .flat_map(|iv| &iv.containers)
            .map(|c| c.container.as_str())
            .collect();
        let mine: BTreeSet<&str> = seen.containers[&n.name]
            .values()
            .map(String::as_str)
            .collect();
        for other in c.nodes.iter().filter(|o| o.name != n.name) {
            for (id, cname) in &seen.containers[&other.name] {
                assert!(
                    !names.contains(cname.as_str())
                        && !names.contains(&*format!("docker-{}", &id[..12])),
                    "{}'s probe reports {cname} ({id}), a container of {}: {names:?}",
                    n.name,
                    other.name
                );
            }
            for id in &seen.cgroups[&other.name] {
                assert!(
                    !names.iter().any(|c| c.contains(&id[..12])),
                    "{}'s probe reports a cgroup of {}: {id}",
                    n.name,
                    other.name
                );
            }
        }
        let shard_containers: BTreeSet<&str> = mine
            .iter()
            .copied()
            .filter(|c| c.starts_with(&format!("{name}.")))
            .collect();
        assert_eq!(
            shard_containers.len(),
            per_node[&n.name],
            "{}: its engine ran its shards",
            n.name
        );
        for s in &shard_containers {
            assert!(
                names.contains(s),
                "{}'s probe misses {s}: {names:?}",
                n.name
            );
        }
        let probe_connects: u64 = rows
            .iter()
            .flat_map(|iv| &iv.pairs)
            .filter(|p| shard_containers.contains(p.container.as_str()) && p.remote == target)
            .map(|p| p.connects)
            .sum();
        let shard_connects: u64 = rows
            .iter()
            .flat_map(|iv| &iv.containers)
            .filter(|c| shard_containers.contains(c.container.as_str()))
            .map(|c| c.counts.get(Counter::Connects))
            .sum();
        let nginx_connections = logged[&n.name]
            .iter()
            .map(|a| a.connection)
            .collect::<BTreeSet<_>>()
            .len() as u64;
        eprintln!(
            "probe@{}: {} rows, containers {names:?}; its shards' containers made {shard_connects} \
             connects, {probe_connects} toward nginx (nginx: {nginx_connections} connections)",
            n.name,
            rows.len()
        );
        assert_eq!(
            probe_connects, nginx_connections,
            "{}: probe vs nginx",
            n.name
        );
    }
    eprintln!(
        "docker_nodes_four_shards…: {:.1} s (launch {:.1} s, the worker clean {:.1} s after)",
        started.elapsed().as_secs_f64(),
        took.as_secs_f64(),
        settled.as_secs_f64()
    );
}

#[test]
fn docker_nodes_a_lost_node_s_shards_are_reported_lost_with_what_they_recorded() {
    let test = "docker_nodes_a_lost_node_s_shards_are_reported_lost_with_what_they_recorded";
    if !privileged(test) {
        return;
    }
    let mut g = cluster();
    // The test's own time: the cluster's setup (or a node's revival) is printed apart.
    let started = Instant::now();
    let c = g.as_mut().unwrap();
    let pg = Postgres::start_on(c.host_addr, &c.subnet).unwrap();
    let nginx = Nginx::start_on("it-nodes-nginx", c.host_addr);
    let dir = TempDir::new("it-nodes-loss");
    let scenario = dir.write(
        "loss.toml",
        format!(
            "[target]\nurl = \"http://{}:{}\"\n[player]\nthink = \"50ms\"\n\
             [[op]]\nname = \"ok\"\npath = \"/\"\n[[step]]\nplayers = 8\nduration = \"10s\"\n",
            nginx.addr, nginx.port
        ),
    );
    let name = format!("it-nodes-loss-{}", std::process::id());
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch(c, &name, stop.clone());
    let mut child = launch(c, &scenario, &pg.url, &name, &dir.join("out"), 4)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The launcher's stderr, each line with when it came.
    let err = child.stderr.take().unwrap();
    let lines = std::thread::spawn(move || {
        use std::io::BufRead as _;
        std::io::BufReader::new(err)
            .lines()
            .map_while(Result::ok)
            .map(|l| (Instant::now(), l))
            .collect::<Vec<_>>()
    });
    // Once both nodes' shards send, and two seconds more, node 2 is lost.
    let deadline = Instant::now() + Duration::from_secs(90);
    while by_node(c, &nginx.accesses()).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the shards of both nodes never sent"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    let lost_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let lost_at = Instant::now();
    let killed = c.nodes[1].lose();
    let out = child.wait_with_output().unwrap();
    let ended = lost_at.elapsed();
    stop.store(true, Ordering::SeqCst);
    let seen = watcher.join().unwrap();
    let lines = lines.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr: String = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    // When the launcher said the first shard was lost.
    let told = lines
        .iter()
        .find(|(_, l)| l.contains("is lost: its node node-2 is down"))
        .map(|(at, _)| at.duration_since(lost_at))
        .unwrap_or_else(|| panic!("the launcher never said a shard was lost:\n{stderr}"));
    eprintln!(
        "node-2 lost ({killed} processes killed); the launcher said so {:.1} s later and \
         ended {:.1} s later ({:?}):\n{stdout}\n{stderr}",
        told.as_secs_f64(),
        ended.as_secs_f64(),
        out.status
    );
    assert_eq!(out.status.code(), Some(1), "a lost shard fails the launch");
    // Nothing of the run on the node that is left.
    let settled = nothing_left(c.nodes[..1].iter(), &name);

    let st = stored(&pg.url, &name);
    let lost: Vec<i64> = st
        .shards
        .iter()
        .filter(|(_, (h, _))| h == "node-2")
        .map(|(i, _)| *i)
        .collect();
    let on_node_2 = seen.placement.values().filter(|n| *n == "node-2").count();
    assert!(
        !lost.is_empty(),
        "no shard ran on node-2: {:?}",
        seen.placement
    );
    assert_eq!(lost.len(), on_node_2, "{:?}", seen.placement);
    for (i, (host, status)) in &st.shards {
        let want = if host == "node-2" { "lost" } else { "finished" };
        assert_eq!(status, want, "shard {i} on {host}");
    }
    // The launcher named each lost shard and why, and failed.
    for i in &lost {
        assert!(
            stderr.contains(&format!("shard {i}/4 (task "))
                && stderr.contains("is lost: its node node-2 is down"),
            "{stderr}"
        );
    }
    assert!(stderr.contains("lost with its node"), "{stderr}");
    // The report: the run interrupted, each lost shard missing with what it recorded.
    assert!(stdout.contains(": interrupted, "), "{stdout}");
    for i in &lost {
        let note = format!("Shard {i}/4 (node-2, pid 1) is missing: it is `lost` and recorded ");
        let recorded: u64 = stdout
            .split(&note)
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no note for shard {i}: {stdout}"));
        assert!(recorded >= 1, "shard {i} recorded {recorded} intervals");
    }
    // What they recorded against nginx: every request of node 2 up to a second and a half
    // before the loss is in their intervals (they flush one a second), none it did not log.
    let logged = by_node(c, &nginx.accesses());
    let from_2 = &logged["node-2"];
    let recorded: u64 = lost.iter().map(|i| st.interval_requests[i]).sum();
    let before = from_2.iter().filter(|a| a.at < lost_unix - 1.5).count() as u64;
    eprintln!(
        "node-2's shards {lost:?} recorded {recorded} requests; nginx logged {} from node-2 \
         ({before} of them 1.5 s before the loss)",
        from_2.len()
    );
    assert!(
        before <= recorded && recorded <= from_2.len() as u64,
        "{before} ≤ {recorded} ≤ {}",
        from_2.len()
    );
    // The survivors finished, and the merged report holds them and what the lost recorded.
    let survivors: u64 = st
        .finals
        .iter()
        .filter(|(i, _)| !lost.contains(i))
        .map(|(_, f)| f.0)
        .sum();
    assert_eq!(survivors, logged["node-1"].len() as u64, "node-1 vs nginx");
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("out").join(format!("run-{}.json", st.run))).unwrap(),
    )
    .unwrap();
    assert_eq!(report["run"]["requests"], survivors + recorded);

    // The harness clears the lost node: no process, no cgroup, no directory left.
    let node = &mut c.nodes[1];
    node.wipe();
    assert!(node.container_cgroups().is_empty());
    assert!(!node.dir.exists());
    eprintln!(
        "docker_nodes_a_lost_node…: {:.1} s (loss seen after {:.1} s, the launch ended {:.1} s \
         after it, node-1 clean {:.1} s after that)",
        started.elapsed().as_secs_f64(),
        told.as_secs_f64(),
        ended.as_secs_f64(),
        settled.as_secs_f64()
    );
}

#[test]
fn docker_nodes_shards_on_a_node_whose_clock_is_ahead_start_and_change_phase_together() {
    let test = "docker_nodes_shards_on_a_node_whose_clock_is_ahead_start_and_change_phase_together";
    if !privileged(test) {
        return;
    }
    let g = cluster();
    // The test's own time: the cluster's setup (or a node's revival) is printed apart.
    let started = Instant::now();
    let c = g.as_ref().unwrap();
    let pg = Postgres::start_on(c.host_addr, &c.subnet).unwrap();
    let nginx = Nginx::start_on("it-nodes-nginx", c.host_addr);
    let dir = TempDir::new("it-nodes-skew");
    // Phase 1 (every player at once) asks /a, phase 2 (a rate step, 2 s after the start) /b.
    let scenario = dir.write(
        "skew.toml",
        format!(
            "[target]\nurl = \"http://{}:{}\"\n[player]\nthink = \"20ms\"\n\
             [[op]]\nname = \"a\"\npath = \"/a\"\n[[op]]\nname = \"b\"\npath = \"/b\"\nweight = 0\n\
             [[step]]\nplayers = 8\nduration = \"2s\"\narrival = \"burst\"\n\
             [[rate]]\nrate = 200\nduration = \"1s\"\nops = [\"b\"]\n",
            nginx.addr, nginx.port
        ),
    );
    let name = format!("it-nodes-skew-{}", std::process::id());
    let out = launch(c, &scenario, &pg.url, &name, &dir.join("out"), 4)
        // node-2's shards read their wall clock 800 ms ahead (Swarm expands the template).
        .env(
            herd_store::TEST_CLOCK_OFFSET,
            "{{if eq .Node.Hostname \"node-2\"}}800{{else}}0{{end}}",
        )
        .arg("--no-probe")
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    eprintln!("{stdout}\n{stderr}");
    assert!(out.status.success(), "herd launch swarm failed");
    nothing_left(c.nodes.iter(), &name);
    let st = stored(&pg.url, &name);
    let hosts: BTreeSet<&str> = st.shards.values().map(|(h, _)| h.as_str()).collect();
    assert_eq!(hosts.len(), 2, "shards on both nodes: {:?}", st.shards);

    // nginx's clock is one: when each node's first request of each phase came.
    let logged = by_node(c, &nginx.accesses());
    let first = |node: &str, uri: &str| {
        logged[node]
            .iter()
            .filter(|a| a.uri == uri)
            .map(|a| a.at)
            .fold(f64::MAX, f64::min)
    };
    for uri in ["/a", "/b"] {
        let (one, two) = (first("node-1", uri), first("node-2", uri));
        eprintln!(
            "first {uri}: node-1 at {one:.3}, node-2 at {two:.3} ({:+.0} ms)",
            (two - one) * 1e3
        );
        assert!(
            (two - one).abs() < 0.15,
            "node-2's shards asked their first {uri} {:+.0} ms after node-1's",
            (two - one) * 1e3
        );
    }
    // The report says how far apart they started, and how far off node-2's clock read.
    let notes: String = stdout
        .lines()
        .filter(|l| l.contains("Merged from"))
        .collect();
    let skew_ms: f64 = notes
        .split("started within ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no skew in {notes}"));
    assert!(skew_ms < 150.0, "{notes}");
    assert!(notes.contains("off the run store's"), "{notes}");
    eprintln!(
        "docker_nodes_shards_on_a_node_whose_clock…: {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
