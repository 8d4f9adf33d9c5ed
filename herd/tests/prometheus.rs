//! `herd run --listen` scraped by a real Prometheus (Debian's `prometheus`, installed by
//! `cargo xtask setup`), started here on 127.0.0.1 with its own config and data directory:
//! every query of docs/grafana/herd.json over the driver's metrics returns series while the
//! run lasts, and the counters Prometheus stored equal the run's report and the server's own
//! counts. The probe's panels run as root in integration-test/tests/prometheus.rs. A port in
//! use exits 2, naming it, before any request.

use std::{
    collections::BTreeMap,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use herd_testkit::{Proto, Reply, Server, TempDir};
use serde_json::Value;

/// A free port on 127.0.0.1 (Prometheus refuses `:0`).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One GET over HTTP/1.0; the status and body.
fn get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)?;
    let status = buf
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Ok((status, body.to_owned()))
}

fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus process with its own directory; killed and removed on drop.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: TempDir,
}

impl Prometheus {
    fn start(target: SocketAddr) -> Self {
        let bin = Path::new("/usr/bin/prometheus");
        assert!(
            bin.exists(),
            "{} is missing: `cargo xtask setup` (as root) installs Debian's prometheus",
            bin.display()
        );
        let dir = TempDir::new("prometheus");
        let config = dir.write(
            "prometheus.yml",
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: herd\n    static_configs:\n      - targets: [\"{target}\"]\n"
            ),
        );
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(bin)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let p = Self {
            child,
            addr,
            _dir: dir,
        };
        let until = Instant::now() + Duration::from_secs(30);
        while !matches!(get(p.addr, "/-/ready"), Ok((200, _))) {
            assert!(
                Instant::now() < until,
                "prometheus did not get ready in 30 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // Its discovery hands targets to the scrapers up to 5 s after start: wait for the
        // first scrape (up = 0 while nothing listens yet), so the run is scraped from its start.
        while p.query("up", now()).is_empty() {
            assert!(Instant::now() < until, "prometheus did not scrape in 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    /// An instant query at unix time `at`: its result vector.
    fn query(&self, expr: &str, at: f64) -> Vec<Value> {
        let (status, body) = get(
            self.addr,
            &format!("/api/v1/query?query={}&time={at:.3}", percent(expr)),
        )
        .unwrap();
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        assert_eq!(status, 200, "{expr}: {body}");
        assert_eq!(v["status"], "success", "{expr}: {body}");
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// `expr`'s value per `label` at `at`.
    fn values(&self, expr: &str, label: &str, at: f64) -> BTreeMap<String, f64> {
        self.query(expr, at)
            .iter()
            .map(|s| {
                (
                    s["metric"][label].as_str().unwrap_or("").to_owned(),
                    s["value"][1].as_str().unwrap().parse().unwrap(),
                )
            })
            .collect()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Every `expr` of the dashboard's panels.
fn dashboard_queries() -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/grafana/herd.json");
    let d: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(vars, ["datasource", "op", "container"]);
    d["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect()
}

/// The probe's series (measured as root, integration-test/tests/prometheus.rs).
fn is_probe(expr: &str) -> bool {
    ["herd_tcp_", "herd_pair_", "herd_container_", "herd_probe_"]
        .iter()
        .any(|p| expr.contains(p))
}

/// `expr` with the dashboard's variables set: an op (or every op) and the rate window.
fn expand(expr: &str, op: &str) -> String {
    expr.replace("$__rate_interval", "10s")
        .replace("$op", op)
        .replace("$container", ".*")
}

#[test]
fn prometheus_scrapes_a_run_and_every_dashboard_query_returns_its_counts() {
    let server = Server::http(Proto::H1)
        .route("/ok", Reply::ok().body("ok"))
        .route("/missing", Reply::new(404))
        .route("/broken", Reply::new(500))
        .start_blocking();
    let dir = TempDir::new("prom-run");
    let scenario = dir.write(
        "mixed.toml",
        format!(
            "[target]\nurl = \"{}\"\n[player]\nthink = \"20ms\"\n\
             [[op]]\nname = \"ok\"\npath = \"/ok\"\nweight = 6\n\
             [[op]]\nname = \"missing\"\npath = \"/missing\"\nweight = 2\nexpected = [\"http_4xx\"]\n\
             [[op]]\nname = \"broken\"\npath = \"/broken\"\nweight = 1\n\
             [[step]]\nplayers = 3\nduration = \"6s\"\narrival = \"burst\"\n",
            server.url()
        ),
    );
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let prom = Prometheus::start(listen);
    let out = dir.join("out");
    let started = now();
    let herd = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["run", scenario.to_str().unwrap(), "--no-probe", "--quiet"])
        .args(["--interval", "1s", "--grace", "1s"])
        .args(["--listen", &listen.to_string()])
        .args(["--out", out.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let ended = now();
    let stdout = String::from_utf8_lossy(&herd.stdout);
    assert!(
        herd.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&herd.stderr)
    );

    // While the load ran (4.5 s into the 6 s step), every driver panel has series, for all
    // ops and for two of them as Grafana writes a multi-value selection.
    let during = started + 4.5;
    assert!(during < ended, "the run ended before {during}: {ended}");
    let queries = dashboard_queries();
    let driver: Vec<&String> = queries.iter().filter(|q| !is_probe(q)).collect();
    assert!(driver.len() >= 14, "{driver:?}");
    for q in &driver {
        for op in [".*", "(ok|missing)"] {
            let e = expand(q, op);
            assert!(
                !prom.query(&e, during).is_empty(),
                "no series for {e} at {during} (run {started}..{ended}); up: {:?}, elapsed over the run: {:?}",
                prom.query("up", during),
                prom.query("herd_run_elapsed_seconds[20s]", ended)
            );
        }
    }

    // After the run: what Prometheus stored is what herd reported and the server served.
    let report_path = out.join("run-1.json");
    let report: Value = serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    let totals: BTreeMap<String, &Value> = report["totals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["op"].as_str().unwrap().to_owned(), t))
        .collect();
    let by_op = prom.values("sum by (op) (herd_requests_total)", "op", ended);
    let served = [
        ("ok", server.path_count("/ok")),
        ("missing", server.path_count("/missing")),
        ("broken", server.path_count("/broken")),
    ];
    for (op, n) in served {
        assert!(n > 10, "{op}: {n}");
        assert_eq!(by_op[op], n as f64, "{op}");
        assert_eq!(totals[op]["count"].as_u64().unwrap(), n, "{op}");
        let hist = prom.values(
            &format!("herd_request_duration_seconds_count{{op=\"{op}\"}}"),
            "op",
            ended,
        );
        assert_eq!(hist[op], n as f64, "{op}");
        let inf = prom.values(
            &format!("herd_request_duration_seconds_bucket{{op=\"{op}\",le=\"+Inf\"}}"),
            "op",
            ended,
        );
        assert_eq!(inf[op], n as f64, "{op}");
    }
    let by_class = prom.values("sum by (class) (herd_requests_total)", "class", ended);
    let split = |k: &str| -> f64 {
        totals
            .values()
            .map(|t| t["split"][k].as_u64().unwrap())
            .sum::<u64>() as f64
    };
    assert_eq!(by_class["ok"], split("ok"));
    assert_eq!(by_class["expected"], split("expected"));
    assert_eq!(by_class["error"], split("errors"));
    assert_eq!(by_class["expected"], server.path_count("/missing") as f64);
    assert_eq!(by_class["error"], server.path_count("/broken") as f64);
    eprintln!("prometheus by op {by_op:?}, by class {by_class:?}; the server served {served:?}");
    let all = prom.values("sum(herd_requests_total)", "", ended);
    assert_eq!(all[""], server.requests() as f64);
    let connects = prom.values("herd_driver_connects_total", "", ended);
    assert_eq!(connects[""], server.connections() as f64);
}

#[test]
fn a_port_in_use_exits_2_naming_it_before_any_load() {
    let server = Server::http(Proto::H1)
        .fallback(Reply::ok())
        .start_blocking();
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let url = server.url();
    let dir = TempDir::new("prom-port");
    let listen = format!("127.0.0.1:{port}");
    let out_dir = dir.path().to_str().unwrap();
    for cmd in ["drive", "run"] {
        let mut args = vec![cmd, &url, "-c", "2", "-z", "2s", "--listen", &listen];
        if cmd == "run" {
            args.extend(["--no-probe", "--out", out_dir]);
        }
        let out = Command::new(env!("CARGO_BIN_EXE_herd"))
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {stderr}");
        assert!(stderr.contains(&format!("port {port}")), "{cmd}: {stderr}");
        assert!(stderr.contains("nothing was sent"), "{cmd}: {stderr}");
    }
    assert_eq!(server.requests(), 0);
    assert_eq!(server.connections(), 0);
    // herd run made no store either: it stopped before opening one.
    assert!(!dir.join("runs.db").exists());
}
