//! Slow requests tied to the waits they were in flight during, against a server the test
//! throttles itself: python's `http.server` in a container whose CFS quota the test drops to
//! 1 ms per 100 ms in two known windows, and which sleeps (no CPU, no throttling) in three
//! requests between them, so the slow requests have two causes. `herd run` with the probe drives it; the
//! share of the op's slow requests the report says were in flight while the server was
//! throttled must equal the share the test computes from the same kept requests (the stored
//! driver rows) and its own windows, on the same CLOCK_MONOTONIC.

use std::{
    io::{BufRead as _, BufReader},
    path::PathBuf,
    process::Stdio,
    time::{Duration, Instant},
};

use herd_probe::clock::now_ns;
use herd_report::{Report, model::attribution::WaitKind};
use herd_store::Store;
use herd_testkit::TempDir;
use integration_test::{herd_cmd, privileged};

const PERIOD_US: u64 = 100_000;
/// While throttled: 1 ms of CPU per 100 ms period, the least cgroup v1 accepts.
const THROTTLED_US: u64 = 1_000;
const PORT: u16 = 8080;

/// The server: HTTP/1.1 keep-alive, no Nagle (its two writes would otherwise stall on the
/// client's delayed ACK), a thread per connection. Once the flag file exists it sleeps 600 ms
/// (no CPU) in its next 3 requests: slower than any throttled one, so they are always among
/// the op's slow requests, beside the throttled ones. It prints `first` at the first request.
const SERVER: &str = r#"
import http.server, os, sys, threading, time
flag = sys.argv[3]
first = [True]
sleeps = [0]
lock = threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def do_GET(self):
        if first[0]:
            first[0] = False
            print("first", flush=True)
        with lock:
            sleep = os.path.exists(flag) and sleeps[0] < 3
            sleeps[0] += sleep
        if sleep:
            time.sleep(0.6)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
class S(http.server.ThreadingHTTPServer):
    request_queue_size = 64
    daemon_threads = True
s = S((sys.argv[1], int(sys.argv[2])), H)
print("ready", flush=True)
s.serve_forever()
"#;

/// The container's CPU quota: set low while it lives, unlimited again when dropped (the
/// sandbox removes the cgroup itself after).
struct Quota {
    file: PathBuf,
    v1: bool,
}

impl Quota {
    fn set(&self, quota_us: Option<u64>) {
        let value = match (self.v1, quota_us) {
            (true, Some(q)) => q.to_string(),
            (true, None) => "-1".into(),
            (false, Some(q)) => format!("{q} {PERIOD_US}"),
            (false, None) => format!("max {PERIOD_US}"),
        };
        std::fs::write(&self.file, &value)
            .unwrap_or_else(|e| panic!("writing {value} to {}: {e}", self.file.display()));
    }

    /// Throttles for `d`; returns the window on CLOCK_MONOTONIC, from before the quota was
    /// lowered to after it was lifted.
    fn throttle_for(&self, d: Duration) -> (u64, u64) {
        let start = now_ns();
        self.set(Some(THROTTLED_US));
        std::thread::sleep(d);
        self.set(None);
        (start, now_ns())
    }
}

impl Drop for Quota {
    fn drop(&mut self) {
        let _ = std::panic::catch_unwind(|| self.set(None));
    }
}

/// Removes the server's sleep flag when dropped.
struct Flag(PathBuf);

impl Drop for Flag {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// One test at a time: the throttled server's windows must not share the host with the
/// other test's load.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The venv `cargo xtask setup` makes (the servers need nothing beyond the standard library).
fn python() -> &'static std::path::Path {
    let python = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../target/py/bin/python"
    ));
    assert!(
        python.exists(),
        "{} is missing: run `cargo xtask setup`",
        python.display()
    );
    python
}

/// Starts `script` (a Python server printing `ready`, then serving on `ip:PORT`) in `server`,
/// with `extra` arguments; returns its stdout past `ready`.
fn serve(
    sandbox: &mut herd_testbed::Sandbox,
    server: &herd_testbed::Container,
    script: &str,
    ip: std::net::Ipv4Addr,
    extra: &[&std::ffi::OsStr],
) -> BufReader<std::process::ChildStdout> {
    let mut py = std::process::Command::new(python());
    py.args(["-c", script, &ip.to_string(), &PORT.to_string()])
        .args(extra)
        .stdout(Stdio::piped());
    let h = sandbox.spawn(server, py).unwrap();
    let mut out = BufReader::new(sandbox.child(h).stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready", "the test server did not start");
    out
}

/// `herd run` of `scenario` with the probe, `server` named, at 1 s intervals, into `out`.
fn herd_run(
    scenario: &std::path::Path,
    server: &herd_testbed::Container,
    out: &std::path::Path,
) -> std::process::Command {
    let mut c = herd_cmd();
    c.args(["run", "--quiet", "--interval", "1s", "--grace", "1s"])
        .arg("--container")
        .arg(format!("server={}", server.cgroup.display()))
        .arg("--out")
        .arg(out)
        .arg(scenario)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// The run `herd run` (which exited with `st`) stored in `out`.
fn stored_run(st: &std::process::Output, out: &std::path::Path) -> herd_model::RunData {
    assert!(
        st.status.success(),
        "herd run failed: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = Store::open(&herd_store::default_url(out)).await.unwrap();
        store.load_run(None).await.unwrap()
    })
}

#[test]
fn the_share_of_slow_requests_in_flight_while_the_server_was_throttled_is_what_the_test_knows() {
    if !privileged("the_share_of_slow_requests_in_flight_while_the_server_was_throttled") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = Instant::now();
    let dir = TempDir::new("it-slow");
    let mut sandbox = herd_testbed::Sandbox::new("slow-attribution").unwrap();
    // Created with a quota so a pure cgroup v2 host enables its cpu controller; lifted below.
    let server = sandbox
        .container("server", Some((PERIOD_US, PERIOD_US)))
        .unwrap();
    let quota = match &server.cpu_v1 {
        Some(v1) => Quota {
            file: v1.join("cpu.cfs_quota_us"),
            v1: true,
        },
        None => Quota {
            file: server.cgroup.join("cpu.max"),
            v1: false,
        },
    };
    quota.set(None);
    let (_, server_ip) = sandbox.link_host(&server).unwrap();
    let flag = Flag(dir.join("sleep"));
    let mut out = serve(
        &mut sandbox,
        &server,
        SERVER,
        server_ip,
        &[flag.0.as_os_str()],
    );

    let scenario = dir.write(
        "slow.toml",
        format!(
            "[target]\nurl = \"http://{server_ip}:{PORT}\"\ntransport = \"h1\"\n\
             [player]\nthink = \"20ms\"\n[[op]]\nname = \"get\"\npath = \"/\"\n\
             [[step]]\nplayers = 4\nduration = \"11s\"\n"
        ),
    );
    let run = herd_run(&scenario, &server, &dir.join("out"))
        .spawn()
        .unwrap();
    // The windows start from the first request the server sees: the driver is running. A
    // herd that never sends one fails the test with its own words, not a hang.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = out.read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(line) if line.trim() == "first" => {}
        got => {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(run.id() as i32, libc::SIGKILL) };
            let st = run.wait_with_output().unwrap();
            panic!(
                "the server saw no request within 30 s ({got:?}); herd run: {}",
                String::from_utf8_lossy(&st.stderr)
            );
        }
    }
    std::thread::sleep(Duration::from_millis(1_500));
    let mut throttled = vec![quota.throttle_for(Duration::from_secs(2))];
    std::thread::sleep(Duration::from_secs(1));
    std::fs::write(&flag.0, "").unwrap();
    std::thread::sleep(Duration::from_secs(1));
    std::fs::remove_file(&flag.0).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    throttled.push(quota.throttle_for(Duration::from_secs(2)));
    let st = run.wait_with_output().unwrap();

    let d = stored_run(&st, &dir.join("out"));
    let r = Report::build(&d);
    let total = r.totals.iter().find(|t| t.op == "get").expect("op get");
    let slow = total
        .slow
        .as_ref()
        .unwrap_or_else(|| panic!("no attribution: {:#?}", r.notes));

    // What the test knows: the kept requests above the p99, on the driver's clock start,
    // against its own windows.
    let mut kept = 0u64;
    let mut in_throttle = 0u64;
    let mut slept = 0u64;
    for iv in &d.driver {
        let origin = iv
            .clock_start_ns
            .expect("the driver records its clock start");
        for o in iv.ops.iter().filter(|o| o.op == "get") {
            for q in o.slowest.iter().filter(|q| q.latency_us > slow.over_us) {
                kept += 1;
                let (s, e) = (origin + q.start_us * 1_000, origin + q.end_us() * 1_000);
                if throttled.iter().any(|&(a, b)| s < b && e > a) {
                    in_throttle += 1;
                } else {
                    slept += 1;
                }
            }
        }
    }
    let reported = slow
        .waits
        .iter()
        .find(|w| w.kind == WaitKind::Throttled && w.at == "server");
    eprintln!(
        "slow requests of get over {} µs: {kept} kept of {}, {in_throttle} in a throttle \
         window by the test's clock, {slept} not; the driver's clock started {:.0} ms after \
         the run's; the report: {:?} ({:.0} s wall clock)",
        slow.over_us,
        slow.above,
        (d.driver[0].clock_start_ns.unwrap() as f64 - d.meta.mono_start_ns as f64) / 1e6,
        reported.map(|w| (&w.sentence, &w.evidence)),
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(slow.kept, kept);
    assert!(
        in_throttle > 0 && slept >= 3,
        "both causes must be among the slow requests for the share to mean something: \
         {in_throttle} throttled, {slept} slept"
    );
    let w = reported.unwrap_or_else(|| panic!("no throttled wait named: {:#?}", slow.waits));
    assert_eq!(w.requests, in_throttle, "{}", w.sentence);
    // The probe's 100 ms poll windows, stretched by a late poll on a busy host.
    assert!((100..=250).contains(&w.resolution_ms), "{}", w.sentence);
    assert!(
        w.sentence.starts_with(&format!(
            "Of get's {kept} requests over {} (its whole-run p99",
            herd_report::units::latency(slow.over_us)
        )),
        "{}",
        w.sentence
    );
    // herd run wrote the same into its Markdown and JSON.
    let out = dir.join("out");
    let md = std::fs::read_to_string(out.join(format!("run-{}.md", r.run.id))).unwrap();
    assert!(md.contains(&w.sentence), "{md}");
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join(format!("run-{}.json", r.run.id))).unwrap(),
    )
    .unwrap();
    let waits = &json["totals"][0]["slow"]["waits"];
    assert!(
        waits.as_array().is_some_and(|ws| ws
            .iter()
            .any(|x| x["kind"] == "throttled" && x["requests"] == in_throttle)),
        "{json:#}"
    );
    // Every evidence window lies within a throttle window the test made, to its 100 ms grid.
    let mono0 = d.meta.mono_start_ns as u64;
    for e in &w.evidence {
        let (a, b) = (
            mono0 + (e.start_s * 1e9) as u64,
            mono0 + (e.end_s * 1e9) as u64,
        );
        assert!(
            throttled
                .iter()
                .any(|&(s, z)| a < z + 1_000_000 && b + 1_000_000 > s),
            "{e:?} is outside every throttle window"
        );
    }
    drop(quota);
    drop(sandbox);
}

/// Python's `http.server` as it comes: HTTP/1.1 keep-alive, its headers and its body in two
/// writes, Nagle on (the module's default). On a sub-millisecond path every response's body
/// waits for the client's delayed ACK of the headers: ~40 ms a request.
const NAGLE_SERVER: &str = r#"
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
class S(http.server.ThreadingHTTPServer):
    daemon_threads = True
s = S((sys.argv[1], int(sys.argv[2])), H)
print("ready", flush=True)
s.serve_forever()
"#;

/// The Nagle × delayed-ACK stall named on a real server that makes it: `http.server` in a
/// container on a veth (srtt in µs), driven by `herd run` with the probe.
#[test]
fn a_server_writing_headers_and_body_apart_is_named_a_nagle_delayed_ack_stall() {
    if !privileged("a_server_writing_headers_and_body_apart_is_named_a_nagle_delayed_ack_stall") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("it-nagle");
    let mut sandbox = herd_testbed::Sandbox::new("nagle").unwrap();
    let server = sandbox.container("server", None).unwrap();
    let (_, server_ip) = sandbox.link_host(&server).unwrap();
    let _out = serve(&mut sandbox, &server, NAGLE_SERVER, server_ip, &[]);
    let scenario = dir.write(
        "nagle.toml",
        format!(
            "[target]\nurl = \"http://{server_ip}:{PORT}\"\ntransport = \"h1\"\n\
             [[op]]\nname = \"get\"\npath = \"/\"\n\
             [[step]]\nplayers = 4\nduration = \"5s\"\n"
        ),
    );
    let st = herd_run(&scenario, &server, &dir.join("out"))
        .output()
        .unwrap();
    let d = stored_run(&st, &dir.join("out"));
    let r = Report::build(&d);
    let get = r.ops.iter().find(|o| o.op == "get").expect("op get");
    eprintln!(
        "get: {} requests, p50 {} µs, p90 {} µs; findings: {:?}",
        get.count,
        get.latency.p50_us,
        get.latency.p90_us,
        r.findings.iter().map(|f| &f.title).collect::<Vec<_>>()
    );
    // The stall itself, as the driver measured it: the delayed-ACK timer, every request.
    assert!(
        (38_000..52_000).contains(&get.latency.p50_us),
        "p50 {} µs: the server did not stall on the delayed ACK",
        get.latency.p50_us
    );
    let f = r
        .findings
        .iter()
        .find(|f| f.kind == "nagle_delayed_ack")
        .unwrap_or_else(|| panic!("no nagle_delayed_ack finding: {:#?}", r.findings));
    assert!(f.title.contains("get"), "{}", f.title);
    drop(sandbox);
}
