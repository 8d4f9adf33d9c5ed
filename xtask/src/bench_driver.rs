//! `cargo xtask bench-driver`: herd's driver against wrk and h2load, side by side in one run.
//!
//! One nginx from Debian, started here with its own config in a temporary directory (never the
//! system service), listens on 127.0.0.1 only: an HTTP/1.1 keep-alive port and an h2c (prior
//! knowledge) port, both answering `200 ok`. nginx is pinned to core 0 and every client to
//! core 1. Each client opens 50 connections and sends one request at a time on each for
//! 10 s; the clients take turns, in an order that rotates every repetition.
//!
//! Measured per run: requests completed (from the client's own output; herd's JSON report)
//! and the client's CPU-seconds (user + system, from `wait4`'s rusage of the client process,
//! so start-up and teardown count too). Reported: CPU-seconds per 100 000 requests and
//! requests/s (median and range over the repetitions), and herd's ratios to wrk (h1) and
//! h2load (h2c).
//!
//! `--scale`: 10 000 herd players, each on its own h2c connection, one call every 5 s,
//! arriving over 10 s and then held 60 s; reported: the driver's peak RSS, CPU, ops by outcome
//! and connects.
//!
//! nginx and the temporary directory are removed at the end, on error and on Ctrl-C.

use std::{
    fmt::Write as _,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::atomic::{AtomicBool, Ordering::SeqCst},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

/// The core nginx runs on; the clients get [`CLIENT_CORE`].
const SERVER_CORE: usize = 0;
const CLIENT_CORE: usize = 1;
const H1_PORT: u16 = 18_080;
const H2C_PORT: u16 = 18_081;
const CONNECTIONS: usize = 50;
/// File descriptors wanted for nginx and the clients: the scale run holds 10 000 connections
/// on each side. Capped at the hard limit, which a container may not let root raise.
const NOFILE: u64 = 65_536;

fn nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-parameter.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    NOFILE.min(lim.rlim_max)
}

/// Options of `cargo xtask bench-driver`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Repetitions of each client (the order rotates every repetition).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Seconds each client runs.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Instead: the scale run (10 000 h2c players, a call every 5 s, held 60 s).
    #[arg(long)]
    pub scale: bool,
    /// Players in the scale run.
    #[arg(long, default_value_t = 10_000)]
    pub players: usize,
    /// Seconds the scale run holds its players (after a 10 s arrival).
    #[arg(long, default_value_t = 60)]
    pub hold: u64,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, SeqCst);
}

/// Ctrl-C reaches the client in the foreground (it stops) and this flag; nginx runs in its
/// own session so it does not see it, and is stopped by [`Nginx`]'s drop once the bench
/// returns its error.
fn catch_sigint() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
}

fn check_interrupted() -> Result<()> {
    if INTERRUPTED.load(SeqCst) {
        bail!("interrupted by Ctrl-C; nginx and the temporary directory are removed");
    }
    Ok(())
}

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("herd-bench-driver-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Self(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// In the child before exec: run on `core` only, with [`nofile`] descriptors, and (for a
/// server) in a session of its own and killed if the bench dies.
fn confine(cmd: &mut Command, core: usize, server: bool) {
    let nofile = nofile();
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(core, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let lim = libc::rlimit {
                rlim_cur: nofile,
                rlim_max: nofile,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if server {
                libc::setsid();
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            }
            Ok(())
        });
    }
}

/// nginx with a config of our own; stopped (and waited for) on drop.
struct Nginx {
    child: std::process::Child,
    error_log: PathBuf,
}

/// Bytes per second of each scale-run stream; the file lasts [`STREAM_BYTES`] / this.
const STREAM_RATE: usize = 256;
/// Size of the stream's file: 256 s at [`STREAM_RATE`], longer than any scale run.
const STREAM_BYTES: usize = 64 * 1024;

fn nginx_config(dir: &Path, worker_connections: usize) -> String {
    let d = dir.display();
    let nofile = nofile();
    format!(
        "# Written by cargo xtask bench-driver; removed with its directory.
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile {nofile};
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections {worker_connections};
    multi_accept on;
}}
http {{
    access_log off;
    keepalive_requests 1000000000;
    keepalive_timeout 300s;
    http2_max_concurrent_streams 128;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen 127.0.0.1:{H1_PORT} backlog=16384;
        listen 127.0.0.1:{H2C_PORT} http2 backlog=16384;
        location / {{
            default_type text/plain;
            return 200 \"ok\";
        }}
        # The scale run's open stream per player: a file sent at {STREAM_RATE} bytes/s, so
        # the response stays open for minutes and trickles chunks (each one an event).
        location = /stream {{
            alias {d}/stream.bin;
            # One descriptor for every stream: 10 000 open copies of the file would take
            # nginx past its RLIMIT_NOFILE beside 10 000 connections (500s).
            open_file_cache max=16 inactive=10m;
            default_type application/octet-stream;
            limit_rate {STREAM_RATE};
        }}
    }}
}}
"
    )
}

impl Nginx {
    fn start(dir: &Path, worker_connections: usize) -> Result<Self> {
        for port in [H1_PORT, H2C_PORT] {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                bail!("127.0.0.1:{port} is already taken; stop what listens there and rerun");
            }
        }
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, nginx_config(dir, worker_connections))?;
        std::fs::write(dir.join("stream.bin"), vec![b'.'; STREAM_BYTES])?;
        let error_log = dir.join("error.log");
        let mut cmd = Command::new("nginx");
        cmd.arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir)
            .arg("-e")
            .arg(&error_log)
            .stdin(Stdio::null());
        confine(&mut cmd, SERVER_CORE, true);
        let child = cmd
            .spawn()
            .context("starting nginx (run `cargo xtask setup` to install it)")?;
        let mut nginx = Self { child, error_log };
        // Ready once both ports answer.
        let deadline = Instant::now() + Duration::from_secs(5);
        for port in [H1_PORT, H2C_PORT] {
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                if Instant::now() > deadline || nginx.child.try_wait()?.is_some() {
                    bail!(
                        "nginx did not listen on 127.0.0.1:{port} within 5s; its log: {}",
                        std::fs::read_to_string(&nginx.error_log).unwrap_or_default()
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(nginx)
    }

    /// The worker's pid (the master's only child).
    fn worker(&self) -> Option<u32> {
        let pid = self.child.id();
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return; // already reaped: its pid may belong to someone else by now
        }
        // SIGTERM: fast shutdown of the master and its worker.
        // SAFETY: signalling our own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// utime + stime of a live process, in seconds.
fn proc_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

/// What one client process cost.
struct Exit {
    stdout: String,
    cpu_s: f64,
    user_s: f64,
    peak_rss_kib: u64,
    wall_s: f64,
}

/// Runs `cmd` on the client core and reaps it with `wait4`, which hands back its rusage.
fn run_client(cmd: &mut Command, out: &Path) -> Result<Exit> {
    let file = std::fs::File::create(out)?;
    cmd.stdout(file).stderr(Stdio::piped()).stdin(Stdio::null());
    confine(cmd, CLIENT_CORE, false);
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", crate::show(cmd)))?;
    let stderr = child.stderr.take().context("client stderr")?;
    let errs = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut { stderr }, &mut s);
        s
    });
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: waiting for our own child; status and usage are valid out-parameters.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e).context("wait4 on the client");
        }
    }
    let wall_s = started.elapsed().as_secs_f64();
    let stderr = errs.join().unwrap_or_default();
    check_interrupted()?;
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!(
            "`{}` failed (wait status {status}): {stderr}",
            crate::show(cmd)
        );
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Exit {
        stdout: std::fs::read_to_string(out)?,
        cpu_s: secs(usage.ru_utime) + secs(usage.ru_stime),
        user_s: secs(usage.ru_utime),
        peak_rss_kib: usage.ru_maxrss as u64,
        wall_s,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Proto {
    H1,
    H2c,
}

impl Proto {
    /// The protocol column of the tables.
    fn label(self) -> &'static str {
        match self {
            Proto::H1 => "HTTP/1.1",
            Proto::H2c => "h2c",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Tool {
    Wrk,
    H2loadH1,
    HerdH1,
    H2loadH2c,
    HerdH2c,
}

const TOOLS: [Tool; 5] = [
    Tool::Wrk,
    Tool::H2loadH1,
    Tool::HerdH1,
    Tool::H2loadH2c,
    Tool::HerdH2c,
];

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Wrk => "wrk",
            Tool::H2loadH1 => "h2load --h1",
            Tool::HerdH1 => "herd",
            Tool::H2loadH2c => "h2load",
            Tool::HerdH2c => "herd",
        }
    }

    fn proto(self) -> Proto {
        match self {
            Tool::Wrk | Tool::H2loadH1 | Tool::HerdH1 => Proto::H1,
            Tool::H2loadH2c | Tool::HerdH2c => Proto::H2c,
        }
    }
}

/// The ops of both of herd's scenarios: one GET, and each player's long-lived response on
/// its own connection.
fn ops() -> String {
    format!(
        "[[op]]
name = \"get\"
path = \"/\"

# Each player's long-lived response on its own connection (the seeds' Subscribe): nginx
# trickles a file at {STREAM_RATE} B/s; every chunk counts as an event.
[[op]]
name = \"subscribe\"
path = \"/stream\"
kind = \"stream\"
format = \"chunks\"
"
    )
}

/// herd's side of the comparison: 50 players, each on its own connection, back to back (no
/// think time), one GET, all arriving at once, for the whole run.
fn herd_scenario(proto: Proto, seconds: u64) -> String {
    let (port, transport) = match proto {
        Proto::H1 => (H1_PORT, "h1"),
        Proto::H2c => (H2C_PORT, "h2c"),
    };
    let ops = ops();
    format!(
        "# Written by cargo xtask bench-driver.
[target]
url = \"http://127.0.0.1:{port}\"
transport = \"{transport}\"
connections = \"per_player\"

{ops}
[[step]]
players = {CONNECTIONS}
duration = \"{seconds}s\"
arrival = \"burst\"
"
    )
}

/// The scale run: every player on its own h2c connection, a call every 5 s.
fn scale_scenario(players: usize, hold: u64) -> String {
    let ops = ops();
    format!(
        "# Written by cargo xtask bench-driver --scale.
[target]
url = \"http://127.0.0.1:{H2C_PORT}\"
transport = \"h2c\"
connections = \"per_player\"
timeout = \"10s\"
connect_timeout = \"10s\"

[player]
tick = \"5s\"

{ops}
[[step]]
players = {players}
duration = \"10s\"
ramp = \"10s\"

[[step]]
players = {players}
duration = \"{hold}s\"
"
    )
}

/// One client run's result.
struct Sample {
    requests: u64,
    errors: u64,
    cpu_s: f64,
    user_s: f64,
    wall_s: f64,
    server_cpu_s: f64,
}

fn word_after(text: &str, after: &str) -> Result<u64> {
    let i = text
        .find(after)
        .with_context(|| format!("`{after}` in the output:\n{text}"))?;
    let rest = text[i + after.len()..].trim_start();
    let n: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    n.parse()
        .with_context(|| format!("a number after `{after}` in:\n{text}"))
}

fn number_before(text: &str, before: &str) -> Result<u64> {
    let i = text
        .find(before)
        .with_context(|| format!("`{before}` in the output:\n{text}"))?;
    let head = text[..i].trim_end();
    let n: String = head
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_digit())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    n.parse()
        .with_context(|| format!("a number before `{before}` in:\n{text}"))
}

fn run_tool(tool: Tool, herd: &Path, dir: &Path, seconds: u64, nginx: &Nginx) -> Result<Sample> {
    let url = |port: u16| format!("http://127.0.0.1:{port}/");
    let c = CONNECTIONS.to_string();
    let d = seconds.to_string();
    let out = dir.join("client.out");
    let json = dir.join("herd.json");
    let mut cmd = match tool {
        Tool::Wrk => {
            let mut c2 = Command::new("wrk");
            c2.args(["-t1", "-c", &c, "-d"])
                .arg(format!("{seconds}s"))
                .arg(url(H1_PORT));
            c2
        }
        Tool::H2loadH1 | Tool::H2loadH2c => {
            let mut c2 = Command::new("h2load");
            if tool == Tool::H2loadH1 {
                c2.arg("--h1");
            }
            c2.args(["-t1", "-c", &c, "-m1", "-D", &d])
                .arg(url(if tool == Tool::H2loadH1 {
                    H1_PORT
                } else {
                    H2C_PORT
                }));
            c2
        }
        Tool::HerdH1 | Tool::HerdH2c => {
            let scenario = dir.join("bench.toml");
            std::fs::write(&scenario, herd_scenario(tool.proto(), seconds))?;
            let _ = std::fs::remove_file(&json);
            let mut c2 = Command::new(herd);
            c2.arg("drive")
                .arg(&scenario)
                .arg("--quiet")
                .arg("--json")
                .arg(&json);
            c2
        }
    };
    let worker = nginx.worker();
    let server_before = worker.map_or(0.0, proc_cpu);
    let exit = run_client(&mut cmd, &out)?;
    let server_cpu_s = worker.map_or(0.0, proc_cpu) - server_before;
    let (requests, errors) = match tool {
        Tool::Wrk => {
            // wrk counts every response it read; the non-2xx/3xx ones and socket errors are
            // listed apart, when there are any.
            let all = number_before(&exit.stdout, "requests in")?;
            let bad = word_after(&exit.stdout, "Non-2xx or 3xx responses:").unwrap_or(0);
            let socket: u64 = exit
                .stdout
                .lines()
                .find_map(|l| l.trim().strip_prefix("Socket errors:"))
                .map(|r| {
                    r.split(|c: char| !c.is_ascii_digit())
                        .filter_map(|n| n.parse::<u64>().ok())
                        .sum()
                })
                .unwrap_or(0);
            (all - bad, bad + socket)
        }
        Tool::H2loadH1 | Tool::H2loadH2c => {
            let ok = number_before(&exit.stdout, "succeeded")?;
            let failed = number_before(&exit.stdout, "failed")?;
            let errored = number_before(&exit.stdout, "errored")?;
            (ok, failed + errored)
        }
        Tool::HerdH1 | Tool::HerdH2c => {
            let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json)?)
                .context("reading herd's JSON report")?;
            let total = report["requests"]
                .as_u64()
                .context("requests in herd's JSON")?;
            let ok: u64 = report["steps"]
                .as_array()
                .context("steps in herd's JSON")?
                .iter()
                .flat_map(|s| s["ops"].as_array().into_iter().flatten())
                .flat_map(|o| o["outcomes"].as_array().into_iter().flatten())
                .filter(|o| o["outcome"] == "ok")
                .filter_map(|o| o["count"].as_u64())
                .sum();
            (ok, total - ok)
        }
    };
    Ok(Sample {
        requests,
        errors,
        cpu_s: exit.cpu_s,
        user_s: exit.user_s,
        wall_s: exit.wall_s,
        server_cpu_s,
    })
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn range(v: &[f64], decimals: usize) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{lo:.decimals$}–{hi:.decimals$}")
}

/// Groups digits by thousands with thin spaces, as docs/benchmarks.md writes numbers.
fn thousands(n: f64) -> String {
    let s = format!("{:.0}", n);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// The commit herd was built from, marked when the driver or herd had uncommitted changes.
fn herd_commit(root: &Path) -> String {
    let git = || {
        let mut c = Command::new("git");
        c.arg("-C").arg(root);
        c
    };
    let head = crate::output(git().args(["rev-parse", "--short", "HEAD"]))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| "unknown".into());
    let dirty = crate::output(git().args(["status", "--porcelain", "--", "driver", "herd"]))
        .is_some_and(|s| !s.trim().is_empty());
    if dirty {
        format!("{head} plus uncommitted changes to driver/ or herd/")
    } else {
        head
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What both runs need first: two cores, Ctrl-C caught, the path of herd's release binary
/// and a scratch directory.
fn prepare(root: &Path) -> Result<(PathBuf, TempDir)> {
    if cores() < 2 {
        bail!("the driver benchmark pins the server and the client to separate cores: it needs 2");
    }
    catch_sigint();
    Ok((root.join("target/release/herd"), TempDir::new()?))
}

/// The side-by-side comparison; returns the markdown tables.
pub fn bench_driver(root: &Path, args: &Args) -> Result<String> {
    let (herd, dir) = prepare(root)?;
    let nginx = Nginx::start(&dir.0, 4096)?;
    let mut samples: Vec<(Tool, Sample)> = Vec::new();
    for rep in 0..args.reps {
        // Rotate the order, so drift over the run (other load, thermal) favours nobody.
        for k in 0..TOOLS.len() {
            let tool = TOOLS[(k + rep) % TOOLS.len()];
            let s = run_tool(tool, &herd, &dir.0, args.seconds, &nginx)?;
            eprintln!(
                "xtask bench-driver: rep {rep} {:<12} {:>5}: {:>9} requests ({} errors), client {:.2} CPU-s ({:.2} user), {:.3} CPU-s/100k, {:.0} req/s, server {:.0} % of its core, {:.1}s wall",
                tool.name(),
                if tool.proto() == Proto::H1 {
                    "h1"
                } else {
                    "h2c"
                },
                s.requests,
                s.errors,
                s.cpu_s,
                s.user_s,
                s.cpu_s * 1e5 / s.requests.max(1) as f64,
                s.requests as f64 / args.seconds as f64,
                100.0 * s.server_cpu_s / args.seconds as f64,
                s.wall_s,
            );
            samples.push((tool, s));
        }
    }
    drop(nginx);
    let mut t = String::new();
    writeln!(
        t,
        "| protocol | client | CPU-s per 100 000 requests (median) | range | requests/s (median) | range | client user share | server core busy | errors |"
    )?;
    writeln!(t, "|---|---|---:|---:|---:|---:|---:|---:|---:|")?;
    let mut per100k = std::collections::HashMap::new();
    for tool in TOOLS {
        let s: Vec<&Sample> = samples
            .iter()
            .filter(|(t, _)| *t == tool)
            .map(|(_, s)| s)
            .collect();
        let cpu: Vec<f64> = s
            .iter()
            .map(|s| s.cpu_s * 1e5 / s.requests.max(1) as f64)
            .collect();
        let rate: Vec<f64> = s
            .iter()
            .map(|s| s.requests as f64 / args.seconds as f64)
            .collect();
        let user: Vec<f64> = s.iter().map(|s| s.user_s / s.cpu_s).collect();
        let server: Vec<f64> = s
            .iter()
            .map(|s| s.server_cpu_s / args.seconds as f64)
            .collect();
        let errors: u64 = s.iter().map(|s| s.errors).sum();
        per100k.insert(tool, median(&cpu));
        writeln!(
            t,
            "| {} | {} | {:.2} | {} | {} | {}–{} | {:.0} % | {:.0} % | {errors} |",
            tool.proto().label(),
            tool.name(),
            median(&cpu),
            range(&cpu, 2),
            thousands(median(&rate)),
            thousands(rate.iter().copied().fold(f64::INFINITY, f64::min)),
            thousands(rate.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
            100.0 * median(&user),
            100.0 * median(&server),
        )?;
    }
    writeln!(
        t,
        "\nherd / wrk (HTTP/1.1): {:.2}; herd / h2load --h1: {:.2}; herd / h2load (h2c): {:.2} (of the medians; goal ≤ 1 against wrk and h2load)",
        per100k[&Tool::HerdH1] / per100k[&Tool::Wrk],
        per100k[&Tool::HerdH1] / per100k[&Tool::H2loadH1],
        per100k[&Tool::HerdH2c] / per100k[&Tool::H2loadH2c],
    )?;
    writeln!(t, "\nPer repetition, CPU-s per 100 000 requests:\n")?;
    writeln!(t, "| protocol | client | repetitions |")?;
    writeln!(t, "|---|---|---|")?;
    for tool in TOOLS {
        let v: Vec<String> = samples
            .iter()
            .filter(|(t, _)| *t == tool)
            .map(|(_, s)| format!("{:.2}", s.cpu_s * 1e5 / s.requests.max(1) as f64))
            .collect();
        writeln!(
            t,
            "| {} | {} | {} |",
            tool.proto().label(),
            tool.name(),
            v.join(", ")
        )?;
    }
    writeln!(
        t,
        "\nherd commit {}, {} repetitions × {} s, {} connections, nginx on core {SERVER_CORE}, clients on core {CLIENT_CORE}.",
        herd_commit(root),
        args.reps,
        args.seconds,
        CONNECTIONS
    )?;
    Ok(t)
}

/// The scale run; returns a markdown table.
pub fn bench_scale(root: &Path, args: &Args) -> Result<String> {
    let (herd, dir) = prepare(root)?;
    let nginx = Nginx::start(&dir.0, args.players + 1024)?;
    if nofile() < args.players as u64 + 1024 {
        bail!(
            "{} players need {} file descriptors per process; the hard RLIMIT_NOFILE is {}",
            args.players,
            args.players + 1024,
            nofile()
        );
    }
    let scenario = dir.0.join("scale.toml");
    std::fs::write(&scenario, scale_scenario(args.players, args.hold))?;
    let json = dir.0.join("scale.json");
    let mut cmd = Command::new(&herd);
    cmd.arg("drive")
        .arg(&scenario)
        .arg("--json")
        .arg(&json)
        .arg("--grace")
        .arg("10s");
    let worker = nginx.worker();
    let server_before = worker.map_or(0.0, proc_cpu);
    let exit = run_client(&mut cmd, &dir.0.join("scale.out"))?;
    let server_cpu_s = worker.map_or(0.0, proc_cpu) - server_before;
    drop(nginx);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json)?).context("reading herd's JSON report")?;
    let mut outcomes: std::collections::BTreeMap<String, u64> = Default::default();
    for s in report["steps"].as_array().context("steps")? {
        for o in s["ops"].as_array().into_iter().flatten() {
            for oc in o["outcomes"].as_array().into_iter().flatten() {
                *outcomes
                    .entry(oc["outcome"].as_str().unwrap_or("?").to_owned())
                    .or_default() += oc["count"].as_u64().unwrap_or(0);
            }
        }
    }
    let ok = outcomes.get("ok").copied().unwrap_or(0);
    let total: u64 = outcomes.values().sum();
    let others: Vec<String> = outcomes
        .iter()
        .filter(|(k, _)| *k != "ok")
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let intervals = report["intervals"].as_array().context("intervals")?;
    let peak_rss_interval = intervals
        .iter()
        .filter_map(|i| i["driver"]["rss_bytes"].as_u64())
        .max()
        .unwrap_or(0);
    let held: Vec<&serde_json::Value> = intervals
        .iter()
        .filter(|i| i["step"].as_u64() == Some(1))
        .collect();
    let cpu_held = held
        .iter()
        .filter_map(|i| i["driver"]["cpu_percent"].as_f64())
        .sum::<f64>()
        / held.len().max(1) as f64;
    let lag_p99 = held
        .iter()
        .filter_map(|i| i["driver"]["lag_p99_us"].as_u64())
        .max()
        .unwrap_or(0);
    let step_p99: Vec<String> = report["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["ops"].as_array().into_iter().flatten())
        .map(|o| format!("{} µs", o["latency"]["p99_us"].as_u64().unwrap_or(0)))
        .collect();
    let mut t = String::new();
    writeln!(t, "| measure | value |\n|---|---:|")?;
    writeln!(
        t,
        "| players (own h2c connection each, an open stream, a call every 5 s) | {} |",
        args.players
    )?;
    writeln!(t, "| plan | arrive over 10 s, hold {} s |", args.hold)?;
    writeln!(
        t,
        "| driver peak RSS (rusage) | {:.1} MiB |",
        exit.peak_rss_kib as f64 / 1024.0
    )?;
    writeln!(
        t,
        "| driver peak RSS (herd's own 1 s samples) | {:.1} MiB |",
        peak_rss_interval as f64 / 1_048_576.0
    )?;
    writeln!(
        t,
        "| driver CPU, whole process | {:.2} CPU-s in {:.1} s wall ({:.1} % of its core) |",
        exit.cpu_s,
        exit.wall_s,
        100.0 * exit.cpu_s / exit.wall_s
    )?;
    writeln!(
        t,
        "| driver CPU while held (herd's samples, mean) | {cpu_held:.1} % |"
    )?;
    writeln!(
        t,
        "| event-loop lag p99 while held (worst interval) | {lag_p99} µs |"
    )?;
    writeln!(
        t,
        "| saturated intervals | {} of {} |",
        report["saturated_intervals"].as_u64().unwrap_or(0),
        intervals.len()
    )?;
    writeln!(
        t,
        "| ops | {} ({} ok{}{}) |",
        thousands(total as f64),
        thousands(ok as f64),
        if others.is_empty() { "" } else { ", " },
        others.join(", ")
    )?;
    writeln!(t, "| op p99 per step | {} |", step_p99.join(", "))?;
    writeln!(
        t,
        "| connects / reconnects / connect errors | {} / {} / {} |",
        report["connects"].as_u64().unwrap_or(0),
        report["reconnects"].as_u64().unwrap_or(0),
        report["connect_errors"].as_u64().unwrap_or(0)
    )?;
    for st in report["streams"].as_array().into_iter().flatten() {
        let errors: Vec<String> = st["errors"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        writeln!(
            t,
            "| stream `{}`: opened / reconnects / events / errors | {} / {} / {} / {} |",
            st["op"].as_str().unwrap_or("?"),
            thousands(st["opened"].as_f64().unwrap_or(0.0)),
            st["reconnects"].as_u64().unwrap_or(0),
            thousands(st["events"].as_f64().unwrap_or(0.0)),
            if errors.is_empty() {
                "0".to_owned()
            } else {
                errors.join(", ")
            }
        )?;
    }
    writeln!(t, "| nginx CPU over the run | {:.2} CPU-s |", server_cpu_s)?;
    writeln!(
        t,
        "\nherd commit {}; nginx on core {SERVER_CORE}, herd on core {CLIENT_CORE}.",
        herd_commit(root)
    )?;
    Ok(t)
}
