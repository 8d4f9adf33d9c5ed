//! The demo: herd's main job on its embedded default, with nothing to install or configure.
//!
//! herd builds a small game service on this host — a gateway and a backend, each in its own
//! container (cgroup with a CPU quota + network namespace), the backend on SQLite with accounts
//! and sessions seeded by herd — and runs the same scenario twice: with the gateway's backend
//! pool keeping 2 idle connections per host (Go's default, the seeds' bug) and with 512 (the
//! fix). Each run is a full `herd run` (probe + driver + store + report); the demo ends with the
//! comparison. Everything it creates outside the output directory is removed at the end, on
//! Ctrl-C and on failure.

use std::{
    io::{BufRead as _, BufReader},
    path::PathBuf,
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use herd_driver::Scenario;
use herd_testbed::{Container, Sandbox};

use crate::{
    session::{self, RunConfig},
    signals,
};

mod docker;

/// What the demo runs.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// Where the run store, the reports and the comparison go.
    pub out: PathBuf,
    /// Players per step; the last step arrives all at once (a burst).
    pub steps: Vec<usize>,
    /// Length of each step.
    pub step_duration: Duration,
    /// Pause of each player between its calls.
    pub think: Duration,
    /// The gateway's CPU quota, in cores.
    pub gateway_cpus: f64,
    /// The backend's CPU quota, in cores.
    pub backend_cpus: f64,
    /// Time the backend takes per call.
    pub backend_service_time: Duration,
    /// Idle backend connections per host, one run each: the bug, then the fix.
    pub max_idle: Vec<usize>,
    /// The contour as Docker containers (an image herd builds from itself, a network it
    /// creates) instead of herd's own sandbox.
    pub docker: bool,
}

/// What the demo produced.
#[derive(Debug)]
pub struct DemoEnd {
    /// The run store holding every run.
    pub store: String,
    /// The runs, in `max_idle` order.
    pub runs: Vec<i64>,
    /// The comparison of the first two runs, when there are two.
    pub comparison: Option<herd_report::compare::Comparison>,
    /// Every file written: each run's report, then the comparison's.
    pub files: Vec<PathBuf>,
}

/// The scenario both runs use, with `@…@` markers filled in (TOML uses braces itself).
const SCENARIO: &str = r#"# The demo's players: each owns an h2c connection to the gateway, joins a 2-player game,
# keeps the gateway's event stream open beside its calls (the seeds' Subscribe), then polls its
# game's state, moves and reads the history. Written by `herd demo`.
random_seed = 7

[target]
url = "http://@GATEWAY@"
transport = "h2c"
connections = "per_player"
timeout = "5s"
connect_timeout = "3s"

[outcome]
code = "/error/code"
# A move out of turn is the game's rules at work, not a failure.
expected = ["not_your_turn"]

# What the game promises its players: a state poll answered within 250 ms.
[slo]
"game.state" = "p99 < 250ms"

[player]
think = "@THINK@"
accounts = @ACCOUNTS@
setup = ["game.join"]

# The accounts and sessions the players use, inserted by herd into the backend's SQLite
# before the load and removed after it (docs/seed.md). Player p sends token-{p % accounts};
# the backend stores the token's SHA-256 in hex. The URL is in the file next to this one.
[seed]
url_file = "@URL_FILE@"
accounts = @DURABLE@
guests = @GUESTS@
token = "token-{account}"
token_hash = "sha256_hex"
account = "INSERT INTO accounts (id, name, kind) VALUES ({id}, {name}, {kind})"
session = "INSERT INTO sessions (token_hash, account_id) VALUES ({token_hash}, {id})"

[[op]]
name = "game.join"
method = "POST"
path = "/v1/call/game.join"
headers = { authorization = "Bearer token-{account}", content-type = "application/json" }
body = '{"seats": 2}'
weight = 0
capture = { game_id = "/game/id" }

[[op]]
name = "game.state"
method = "POST"
path = "/v1/call/game.state"
headers = { authorization = "Bearer token-{account}", content-type = "application/json" }
body = '{"game_id": {game_id}}'
weight = 5

[[op]]
name = "game.move"
method = "POST"
path = "/v1/call/game.move"
headers = { authorization = "Bearer token-{account}", content-type = "application/json" }
body = '{"game_id": {game_id}, "move": {"tiles": 2}}'
weight = 2

[[op]]
name = "game.history"
method = "POST"
path = "/v1/call/game.history"
headers = { authorization = "Bearer token-{account}", content-type = "application/json" }
body = '{"game_id": {game_id}, "limit": 20}'
weight = 1

# The live event channel: one more HTTP/2 stream on the player's own connection, opened after
# the join; its events (subscribed, tick, opponent_moved, game_finished…) are counted by type.
[[op]]
name = "events"
kind = "stream"
method = "GET"
path = "/v1/subscribe"
headers = { authorization = "Bearer token-{account}" }
format = "ndjson"
event_type = "/event"
"#;

fn scenario(gateway: &str, args: &DemoConfig, accounts: usize, url_file: &str) -> String {
    // One account in ten is a guest, as in the seeds (10 000 accounts + 1 000 guests).
    let guests = accounts / 10;
    let mut s = SCENARIO
        .replace("@GATEWAY@", gateway)
        .replace("@URL_FILE@", url_file)
        .replace("@DURABLE@", &(accounts - guests).to_string())
        .replace("@GUESTS@", &guests.to_string())
        .replace(
            "@THINK@",
            &humantime::format_duration(args.think).to_string(),
        )
        .replace("@ACCOUNTS@", &accounts.to_string());
    let dur = humantime::format_duration(args.step_duration).to_string();
    let ramp = humantime::format_duration(args.step_duration / 3).to_string();
    for (i, players) in args.steps.iter().enumerate() {
        s.push_str(&format!(
            "\n[[step]]\nplayers = {players}\nduration = \"{dur}\"\n"
        ));
        if i + 1 == args.steps.len() && i > 0 {
            s.push_str("arrival = \"burst\"\n");
        } else {
            s.push_str(&format!("ramp = \"{ramp}\"\n"));
        }
    }
    s
}

/// Starts `herd contour <args>` in `c` and waits for its `ready` line.
fn start(sb: &mut Sandbox, c: &Container, args: &[String]) -> Result<()> {
    let exe = std::env::current_exe().context("locating the herd binary")?;
    let mut cmd = Command::new(exe);
    cmd.arg("contour").args(args).stdout(Stdio::piped());
    let h = sb.spawn(c, cmd)?;
    let out = sb.child(h).stdout.take().context("service stdout")?;
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .with_context(|| format!("waiting for the {} to start", c.name))?;
    if !line.starts_with("ready") {
        bail!(
            "the {} did not start (said {line:?}); run with the same flags by hand to see why",
            c.name
        );
    }
    Ok(())
}

/// The backend's database file of the run with `max_idle` (any earlier one removed), and the
/// name of the file beside it holding the URL `herd run` seeds it through.
fn fresh_db(args: &DemoConfig, max_idle: usize) -> Result<(PathBuf, String)> {
    let db = args.out.join(format!("contour-max-idle-{max_idle}.db"));
    for f in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(PathBuf::from(format!("{}{f}", db.display())));
    }
    // The backend creates the schema when it starts; `herd run` seeds it from the scenario's
    // [seed], which reads this URL from a file (a URL never goes in a scenario).
    let url_file = format!("contour-max-idle-{max_idle}.seed-url");
    let abs_db = std::path::absolute(&db)
        .with_context(|| format!("resolving the path of {}", db.display()))?;
    std::fs::write(
        args.out.join(&url_file),
        format!("sqlite:{}\n", abs_db.display()),
    )
    .with_context(|| format!("writing {}", args.out.join(&url_file).display()))?;
    Ok((db, url_file))
}

/// One full run against a fresh contour whose gateway keeps `max_idle` idle backend
/// connections. Returns the run id and its report files.
fn one_run(args: &DemoConfig, max_idle: usize, store: &str) -> Result<(i64, Vec<PathBuf>)> {
    let mut sb = Sandbox::new("demo").map_err(crate::environment)?;
    let quota = |cores: f64| Some(((cores * 100_000.0) as u64, 100_000));
    let gateway = sb.container("gateway", quota(args.gateway_cpus))?;
    let backend = sb.container("backend", quota(args.backend_cpus))?;
    let layout_unified = sb.layout().unified.clone();
    let (_, gw_ip) = sb.link_host(&gateway)?;
    let (_, be_ip) = sb.link(&gateway, &backend)?;
    let (db, url_file) = fresh_db(args, max_idle)?;
    let db_url = format!("sqlite:{}?mode=rwc", db.display());
    start(
        &mut sb,
        &backend,
        &[
            "backend".into(),
            "--listen".into(),
            format!("{be_ip}:8082"),
            "--db".into(),
            db_url.clone(),
            "--workers".into(),
            "1".into(),
            "--service-time".into(),
            humantime::format_duration(args.backend_service_time).to_string(),
        ],
    )?;
    start(
        &mut sb,
        &gateway,
        &[
            "gateway".into(),
            "--listen".into(),
            format!("{gw_ip}:8081"),
            "--backend".into(),
            format!("{be_ip}:8082"),
            "--backend-max-idle".into(),
            max_idle.to_string(),
            "--workers".into(),
            "2".into(),
        ],
    )?;
    // Named explicitly: another herd sandbox on the host (a second demo, a test) is
    // discovered too, and must not take these names.
    let containers = [&gateway, &backend]
        .iter()
        .map(|c| {
            let rel = c.cgroup.strip_prefix(&layout_unified).unwrap_or(&c.cgroup);
            format!("{}=/{}", c.name, rel.display())
        })
        .collect();
    tracing::info!(
        "herd demo: run with the gateway keeping {max_idle} idle backend connections \
         (gateway {gw_ip} quota {} cores, backend {be_ip} quota {} cores)",
        args.gateway_cpus,
        args.backend_cpus
    );
    let outcome = record(
        args,
        max_idle,
        store,
        &format!("{gw_ip}:8081"),
        &url_file,
        containers,
    )?;
    drop(sb);
    Ok(outcome)
}

/// Writes the run's scenario for the gateway at `gateway` and records one `herd run` of it
/// into `store`, `containers` naming cgroups explicitly (empty: discovery names them).
fn record(
    args: &DemoConfig,
    max_idle: usize,
    store: &str,
    gateway: &str,
    url_file: &str,
    containers: Vec<String>,
) -> Result<(i64, Vec<PathBuf>)> {
    let accounts = args.steps.iter().copied().max().unwrap_or(1);
    let file = args.out.join(format!("demo-max-idle-{max_idle}.toml"));
    std::fs::write(&file, scenario(gateway, args, accounts, url_file))
        .with_context(|| format!("writing {}", file.display()))?;
    let mut config = RunConfig::new(Scenario::load(&file, &[])?, args.out.clone());
    config.name = format!("max-idle-{max_idle}");
    config.store = store.to_owned();
    config.containers = containers;
    config.grace = Duration::from_secs(3);
    config.live = false;
    let outcome = session::run(&config)?;
    Ok((outcome.run_id, outcome.files))
}

/// Runs the demo: one run per `max_idle`, then the comparison of the first two.
pub fn run(args: &DemoConfig) -> Result<DemoEnd> {
    if args.steps.is_empty() || args.steps.iter().any(|&p| p == 0 || p > 5_000) {
        bail!("--steps takes 1 to 5000 players per step, e.g. 50,200,400");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(crate::environment(anyhow::anyhow!(
            "herd demo creates containers (cgroups, network namespaces) and loads eBPF programs: run it as root, e.g. `sudo herd demo`"
        )));
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating the output directory {}", args.out.display()))?;
    let store = herd_store::default_url(&args.out);
    let (mut runs, mut files) = (Vec::new(), Vec::new());
    // The image and the network serve both runs; each run gets fresh containers, as the
    // sandbox gives each run a fresh contour.
    let mut engine = if args.docker {
        let d = docker::Demo::new(args)?;
        files.push(d.compose.clone());
        Some(d)
    } else {
        None
    };
    for &idle in &args.max_idle {
        let (id, written) = match &mut engine {
            Some(d) => d.one_run(args, idle, &store)?,
            None => one_run(args, idle, &store)?,
        };
        runs.push(id);
        files.extend(written);
        if signals::stop_requested() {
            bail!(
                "interrupted; the containers are removed and every recorded interval is in {store}"
            );
        }
    }
    drop(engine);
    let comparison = match runs.as_slice() {
        [before, after, ..] => {
            let c = compare(&store, *before, *after)?;
            files.extend(herd_report::compare::write_comparison(&c, &args.out)?);
            Some(c)
        }
        _ => None,
    };
    Ok(DemoEnd {
        store,
        runs,
        comparison,
        files,
    })
}

fn compare(store: &str, before: i64, after: i64) -> Result<herd_report::compare::Comparison> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let (a, b) = herd_store::Store::open(store)
                .await?
                .load_pair(before, after)
                .await?;
            Ok(herd_report::compare::runs(&a, &b))
        })
}
