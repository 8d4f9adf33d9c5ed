//! `herd launch swarm` on a real Docker Swarm: the test engine (`DOCKER_HOST`; `cargo xtask
//! integration-test swarm` starts a private dockerd under target/docker) made a one-node
//! swarm for the test (`docker swarm init` with an address pool in 198.19.48.0/20, left again
//! at the end, also when the test fails), three shards of one run against Debian's nginx
//! (its access log is the ground truth) with a PostgreSQL run store started by the test, the
//! probe service's sidecar starting a probe on the node, and nothing of the run left after
//! the launcher returns. Every test here is named `docker_…`: xtask counts them with the
//! other Docker tests.

use std::{
    path::Path,
    process::{Command, Output, Stdio},
    sync::Mutex,
    time::{Duration, Instant},
};

use herd_testkit::TempDir;
use integration_test::{Nginx, Postgres, docker, docker_engine, herd_cmd, privileged};
use probe_common::Counter;
use sqlx::Row as _;

/// One swarm at a time: the tests init and leave it.
static ONE: Mutex<()> = Mutex::new(());

fn swarm_state() -> String {
    docker(&["info", "--format", "{{.Swarm.LocalNodeState}}"])
}

/// The subnet of the swarm's ingress network.
fn ingress_subnet() -> String {
    docker(&[
        "network",
        "inspect",
        "ingress",
        "-f",
        "{{range .IPAM.Config}}{{.Subnet}}{{end}}",
    ])
}

/// A one-node swarm made for the test; left (`docker swarm leave --force`) on drop, with the
/// bridge a swarm node creates for its tasks (`docker_gwbridge`, a host interface with an
/// address of the engine's pool, which the engine keeps and recreates at every start
/// otherwise).
struct Swarm;

fn has_gwbridge() -> bool {
    Command::new("docker")
        .args(["network", "inspect", "docker_gwbridge"])
        .output()
        .is_ok_and(|o| o.status.success())
}

impl Swarm {
    fn init() -> Swarm {
        if swarm_state() == "active" {
            // Only a swarm an earlier, killed run of this test made (its pool) is ours to
            // leave; anyone else's is not touched.
            let ours = ingress_subnet().starts_with("198.19.");
            assert!(
                ours,
                "the test engine is already in a swarm that is not the test's (ingress {}); \
                 run the test against a private engine (`cargo xtask integration-test swarm`)",
                ingress_subnet()
            );
            docker(&["swarm", "leave", "--force"]);
        }
        // Never the default 10.0.0.0/8 pool: the overlay networks swarm creates (ingress)
        // take /24s of 198.19.48.0/20, inside 198.18.0.0/15.
        docker(&[
            "swarm",
            "init",
            "--advertise-addr",
            "127.0.0.1",
            "--listen-addr",
            "127.0.0.1:2377",
            "--default-addr-pool",
            "198.19.48.0/20",
            "--default-addr-pool-mask-length",
            "24",
        ]);
        let guard = Swarm;
        let ingress = ingress_subnet();
        assert!(
            ingress.starts_with("198.19.") && {
                let third: u8 = ingress.split('.').nth(2).unwrap().parse().unwrap();
                (48..64).contains(&third)
            },
            "ingress network {ingress} is outside 198.19.48.0/20"
        );
        eprintln!(
            "swarm: initialised; networks:\n{}",
            docker(&["network", "ls"])
        );
        guard
    }
}

impl Drop for Swarm {
    fn drop(&mut self) {
        let out = Command::new("docker")
            .args(["swarm", "leave", "--force"])
            .output();
        if !out.as_ref().is_ok_and(|o| o.status.success()) {
            eprintln!("cleanup: docker swarm leave --force failed: {out:?}");
        }
        if has_gwbridge() {
            let out = Command::new("docker")
                .args(["network", "rm", "docker_gwbridge"])
                .output();
            if !out.as_ref().is_ok_and(|o| o.status.success()) {
                eprintln!("cleanup: docker network rm docker_gwbridge failed: {out:?}");
            }
        }
    }
}

/// Every phase with an exact count: a catalog route (301 requests at 6), 30 players with 20
/// ops each, an open-model rate step (400/s × 1 s).
fn plan(dir: &TempDir, port: u16) -> std::path::PathBuf {
    dir.write(
        "plan.toml",
        format!(
            "[target]\nurl = \"http://127.0.0.1:{port}\"\n[player]\nmax_ops = 20\nthink = \"10ms\"\n\
             [[op]]\nname = \"ok\"\npath = \"/\"\n[catalog]\nrequests = 301\nconcurrency = 6\n\
             [[step]]\nplayers = 30\nduration = \"2s\"\nramp = \"300ms\"\n\
             [[rate]]\nrate = 400\nduration = \"1s\"\n"
        ),
    )
}
const PLANNED: u64 = 301 + 30 * 20 + 400;

fn launch(scenario: &Path, store: &str, name: &str, out: &Path) -> Command {
    let mut c = herd_cmd();
    c.args(["launch", "swarm"])
        .arg(scenario)
        .args([
            "--shards",
            "3",
            "--store",
            store,
            "--name",
            name,
            "--timeout",
        ])
        .arg("3m")
        .arg("--out")
        .arg(out)
        .env_remove("HERD_STORE");
    c
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Panics naming whatever of run `name` the engine still holds.
fn nothing_left_of(name: &str) {
    // Services, configs and secrets exist only in a swarm (and the CLI refuses to list them
    // outside one).
    let in_swarm = swarm_state() == "active";
    let swarm_list = |what: &str| {
        if in_swarm {
            docker(&[what, "ls", "--format", "{{.Name}}"])
        } else {
            String::new()
        }
    };
    let (services, configs, secrets) = (
        swarm_list("service"),
        swarm_list("config"),
        swarm_list("secret"),
    );
    let containers = docker(&["ps", "-a", "--format", "{{.Names}} {{.Labels}}"]);
    let images = docker(&["images", "--format", "{{.Repository}}:{{.Tag}}"]);
    for (what, list) in [
        ("service", &services),
        ("config", &configs),
        ("secret", &secrets),
        ("container", &containers),
        ("image", &images),
    ] {
        assert!(
            !list.contains(name),
            "a {what} of run {name} is left after the launcher returned:\n{list}"
        );
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn docker_swarm_three_shards_and_a_probe_per_node_match_nginx_and_leave_nothing() {
    let test = "docker_swarm_three_shards_and_a_probe_per_node_match_nginx_and_leave_nothing";
    if !privileged(test) || !docker_engine(test) {
        return;
    }
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let swarm = Swarm::init();
    let pg = Postgres::start().unwrap();
    let nginx = Nginx::start("it-swarm-nginx");
    let dir = TempDir::new("it-swarm");
    let scenario = plan(&dir, nginx.port);
    let name = format!("it-swarm-{}", std::process::id());
    let node = docker(&["info", "--format", "{{.Name}}"]);

    let started = Instant::now();
    let out = launch(&scenario, &pg.url, &name, &dir.join("out"))
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    eprintln!(
        "herd launch swarm took {:.1} s:\n{stdout}\n{stderr}",
        started.elapsed().as_secs_f64()
    );
    assert!(out.status.success(), "herd launch swarm failed");
    nothing_left_of(&name);

    // The ground truth: nginx's access log.
    let logged = nginx.logged();
    assert_eq!(logged, PLANNED, "nginx logged what the plan sends");

    let rt = rt();
    let pool = rt.block_on(sqlx::PgPool::connect(&pg.url)).unwrap();
    let run: i64 = rt
        .block_on(
            sqlx::query("SELECT run_id FROM herd_run_keys WHERE run_key = $1")
                .bind(&name)
                .fetch_one(&pool),
        )
        .unwrap()
        .try_get("run_id")
        .unwrap();
    let shards: Vec<(i64, i64, String)> = rt
        .block_on(
            sqlx::query(
                "SELECT shard, shards, status FROM herd_shards WHERE run_id = $1 ORDER BY shard",
            )
            .bind(run)
            .fetch_all(&pool),
        )
        .unwrap()
        .iter()
        .map(|r| {
            (
                r.try_get("shard").unwrap(),
                r.try_get("shards").unwrap(),
                r.try_get("status").unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shards,
        (0..3)
            .map(|i| (i, 3, "finished".to_owned()))
            .collect::<Vec<_>>(),
        "three shards with the indexes 0, 1, 2, each finished"
    );

    // What the launcher printed: the run, its three shards, the merge.
    assert!(
        stdout.contains(&format!("run {run} (plan): finished, {PLANNED} requests")),
        "{stdout}"
    );
    for i in 0..3 {
        assert!(stdout.contains(&format!("shard {i}/3 on ")), "{stdout}");
    }
    assert!(stdout.contains("Merged from 3 of 3 shards"), "{stdout}");
    // The shards ran --no-probe because the node's probe probes for them.
    assert!(!stdout.contains("started with --no-probe"), "{stdout}");
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("out").join(format!("run-{run}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(
        report["run"]["requests"], logged,
        "merged count vs access log"
    );

    // The probe the sidecar started wrote rows tagged with the node, and it saw the shards'
    // containers (named by the engine: NAME.SLOT.TASK) connect.
    let probe_rows: i64 = rt
        .block_on(
            sqlx::query("SELECT count(*) AS n FROM herd_rows WHERE run_id = $1 AND source = $2")
                .bind(run)
                .bind(format!("probe@{node}"))
                .fetch_one(&pool),
        )
        .unwrap()
        .try_get("n")
        .unwrap();
    assert!(probe_rows > 0, "no probe@{node} rows in run {run}");
    rt.block_on(pool.close());
    let store = rt.block_on(herd_store::Store::open(&pg.url)).unwrap();
    let data = rt.block_on(store.load_run(Some(run))).unwrap();
    let shard_connects: u64 = data
        .probe
        .iter()
        .flat_map(|iv| &iv.containers)
        .filter(|c| c.container.starts_with(&format!("{name}.")))
        .inspect(|c| {
            assert!(
                c.container.ends_with(&format!("@{node}")),
                "{}",
                c.container
            )
        })
        .map(|c| c.counts.get(Counter::Connects))
        .sum();
    eprintln!(
        "probe: {probe_rows} rows of node {node}; the shards' containers made {shard_connects} \
         connects"
    );
    assert!(
        shard_connects > 0,
        "the probe saw no connect of the shards' containers"
    );
    rt.block_on(store.close());
    drop(swarm);
}

#[test]
fn docker_swarm_bad_input_and_no_swarm_exit_2_creating_nothing() {
    let test = "docker_swarm_bad_input_and_no_swarm_exit_2_creating_nothing";
    if !privileged(test) || !docker_engine(test) {
        return;
    }
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("it-swarm-bad");
    let ok = dir.write(
        "ok.toml",
        "[target]\nurl = \"http://127.0.0.1:9\"\n[[op]]\nname = \"a\"\npath = \"/\"\n\
         [[step]]\nplayers = 1\nduration = \"1s\"\n",
    );
    let name = format!("it-swarm-bad-{}", std::process::id());

    // A SQLite store: shards on several nodes cannot share a file.
    let out = launch(&ok, "sqlite:/tmp/x.db", &name, &dir.join("out"))
        .output()
        .unwrap();
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is not PostgreSQL"), "{err}");

    // A name that cannot name a service and an image tag.
    let out = launch(
        &ok,
        "postgres://h@127.0.0.1:1/db",
        "Bad Name",
        &dir.join("out"),
    )
    .output()
    .unwrap();
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--name \"Bad Name\""), "{err}");

    // A scenario that does not parse: its line, before anything is created.
    let broken = dir.write("broken.toml", "[target]\nurl = \n");
    let out = launch(
        &broken,
        "postgres://h@127.0.0.1:1/db",
        &name,
        &dir.join("out"),
    )
    .output()
    .unwrap();
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("broken.toml"), "{err}");

    // An engine that is no swarm manager: the one line that sets it up.
    if swarm_state() == "active" {
        let ours = ingress_subnet().starts_with("198.19.");
        assert!(ours, "the test engine is in a swarm that is not the test's");
        docker(&["swarm", "leave", "--force"]);
    }
    let out = launch(&ok, "postgres://h@127.0.0.1:1/db", &name, &dir.join("out"))
        .output()
        .unwrap();
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("not a swarm manager")
            && err.contains(
                "docker swarm init --advertise-addr 127.0.0.1 --default-addr-pool 198.19.48.0/20"
            ),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    nothing_left_of(&name);
}

#[test]
fn docker_swarm_interrupted_launch_removes_what_it_made() {
    let test = "docker_swarm_interrupted_launch_removes_what_it_made";
    if !privileged(test) || !docker_engine(test) {
        return;
    }
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let swarm = Swarm::init();
    let pg = Postgres::start().unwrap();
    let nginx = Nginx::start("it-swarm-nginx");
    let dir = TempDir::new("it-swarm-int");
    let scenario = dir.write(
        "long.toml",
        format!(
            "[target]\nurl = \"http://127.0.0.1:{}\"\n[player]\nthink = \"100ms\"\n\
             [[op]]\nname = \"ok\"\npath = \"/\"\n[[step]]\nplayers = 3\nduration = \"60s\"\n",
            nginx.port
        ),
    );
    let name = format!("it-swarm-int-{}", std::process::id());
    let child = launch(&scenario, &pg.url, &name, &dir.join("out"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupted once the shards run (nginx sees requests).
    let deadline = Instant::now() + Duration::from_secs(90);
    while nginx.logged() == 0 {
        assert!(Instant::now() < deadline, "the shards never sent a request");
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let t = Instant::now();
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    eprintln!(
        "interrupted launch ended in {:.1} s ({:?}):\n{stdout}\n{stderr}",
        t.elapsed().as_secs_f64(),
        out.status
    );
    assert!(!out.status.success());
    assert!(stderr.contains("interrupted"), "{stderr}");
    // The shards are stopped (SIGTERM, then SIGKILL after 15 s), not left to run their 60 s.
    assert!(t.elapsed() < Duration::from_secs(40), "{:?}", t.elapsed());
    nothing_left_of(&name);
    // They stopped as herd stops on SIGTERM: each closed its store rows as `stopped`.
    let rt = rt();
    let pool = rt.block_on(sqlx::PgPool::connect(&pg.url)).unwrap();
    let statuses: Vec<String> = rt
        .block_on(
            sqlx::query(
                "SELECT s.status FROM herd_shards s JOIN herd_run_keys k ON k.run_id = s.run_id \
                 WHERE k.run_key = $1 ORDER BY s.shard",
            )
            .bind(&name)
            .fetch_all(&pool),
        )
        .unwrap()
        .iter()
        .map(|r| r.try_get("status").unwrap())
        .collect();
    assert_eq!(statuses, ["stopped", "stopped", "stopped"]);
    rt.block_on(pool.close());
    drop(swarm);
}

#[test]
fn docker_swarm_a_killed_shard_is_reported_missing_and_the_launch_fails() {
    let test = "docker_swarm_a_killed_shard_is_reported_missing_and_the_launch_fails";
    if !privileged(test) || !docker_engine(test) {
        return;
    }
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let swarm = Swarm::init();
    let pg = Postgres::start().unwrap();
    let nginx = Nginx::start("it-swarm-nginx");
    let dir = TempDir::new("it-swarm-kill");
    let scenario = dir.write(
        "kill.toml",
        format!(
            "[target]\nurl = \"http://127.0.0.1:{}\"\n[player]\nthink = \"50ms\"\n\
             [[op]]\nname = \"ok\"\npath = \"/\"\n[[step]]\nplayers = 6\nduration = \"8s\"\n",
            nginx.port
        ),
    );
    let name = format!("it-swarm-kill-{}", std::process::id());
    let child = launch(&scenario, &pg.url, &name, &dir.join("out"))
        .arg("--no-probe")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Slot 1's container (NAME.1.TASK) is shard 1: SIGKILLed once the shards send.
    let deadline = Instant::now() + Duration::from_secs(90);
    while nginx.logged() == 0 {
        assert!(Instant::now() < deadline, "the shards never sent a request");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(2));
    let victim = docker(&[
        "ps",
        "-q",
        "--filter",
        &format!("name={name}.1."),
        "--filter",
        "status=running",
    ]);
    assert_eq!(victim.lines().count(), 1, "slot 1's container: {victim:?}");
    docker(&["kill", victim.trim()]);
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = text(&out);
    eprintln!(
        "launch with a killed shard ({:?}):\n{stdout}\n{stderr}",
        out.status
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed shard fails the launch"
    );
    assert!(
        stderr.contains("shard 1/3 (task ") && stderr.contains("failed"),
        "{stderr}"
    );
    assert!(stderr.contains("shard 1/3 of run"), "{stderr}");
    // The report is still printed, the killed shard named missing with what it recorded.
    assert!(stdout.contains("interrupted, "), "{stdout}");
    assert!(
        stdout.contains("Shard 1/3 (") && stdout.contains("is missing: it is `interrupted`"),
        "{stdout}"
    );
    nothing_left_of(&name);
    let rt = rt();
    let pool = rt.block_on(sqlx::PgPool::connect(&pg.url)).unwrap();
    let statuses: Vec<String> = rt
        .block_on(
            sqlx::query(
                "SELECT s.status FROM herd_shards s JOIN herd_run_keys k ON k.run_id = s.run_id \
                 WHERE k.run_key = $1 ORDER BY s.shard",
            )
            .bind(&name)
            .fetch_all(&pool),
        )
        .unwrap()
        .iter()
        .map(|r| r.try_get("status").unwrap())
        .collect();
    assert_eq!(statuses, ["finished", "interrupted", "finished"]);
    rt.block_on(pool.close());
    drop(swarm);
}
