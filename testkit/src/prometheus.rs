//! A real Prometheus for tests (Debian's `prometheus`, installed by `cargo xtask setup`):
//! started on 127.0.0.1 with its own config and data directory, scraping one target every
//! second, queried through its HTTP API, killed and removed on drop; and the queries of
//! docs/grafana/herd.json with their variables set.

use std::{
    collections::BTreeMap,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde_json::Value;

use crate::TempDir;

/// A free port on 127.0.0.1 (Prometheus refuses `:0`).
pub fn free_port() -> u16 {
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
pub struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: TempDir,
}

impl Prometheus {
    /// Starts scraping `target` every second; returns once the first scrape happened.
    pub fn start(target: SocketAddr) -> Self {
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
    pub fn query(&self, expr: &str, at: f64) -> Vec<Value> {
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
    pub fn values(&self, expr: &str, label: &str, at: f64) -> BTreeMap<String, f64> {
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

/// Now, as Unix seconds: the time a PromQL query is evaluated at.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Every `expr` of the dashboard's panels, from the workspace at `root`.
pub fn dashboard_queries(root: &Path) -> Vec<String> {
    let path = root.join("docs/grafana/herd.json");
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
pub fn is_probe(expr: &str) -> bool {
    ["herd_tcp_", "herd_pair_", "herd_container_", "herd_probe_"]
        .iter()
        .any(|p| expr.contains(p))
}

/// `expr` with the dashboard's variables set: `op` and `container` (regexes, `.*` for
/// all) and a 10 s rate window.
pub fn expand(expr: &str, op: &str, container: &str) -> String {
    expr.replace("$__rate_interval", "10s")
        .replace("$op", op)
        .replace("$container", container)
}
