//! `herd probe --listen`: the Prometheus endpoint serves the same counts the probe measured;
//! `herd run --listen` with the probe: a real Prometheus (Debian's) scrapes it and every
//! query of docs/grafana/herd.json, the probe's panels included, returns series.

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::TcpStream,
    process::Stdio,
    time::{Duration, Instant},
};

use herd_testkit::{
    Proto, Reply, Server, TempDir,
    prometheus::{Prometheus, dashboard_queries, expand, free_port, now},
};
use integration_test::{Pair, herd_cmd, privileged};

fn scrape(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: herd\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    out
}

#[test]
fn the_metrics_endpoint_serves_the_probes_counts() {
    if !privileged("the_metrics_endpoint_serves_the_probes_counts") {
        return;
    }
    let mut pair = Pair::new("test").unwrap();
    let cgroup = pair.client.cgroup.clone();
    // Half a core: the quota gauge has a value to show.
    let capped = pair
        .sandbox
        .container("capped", Some((50_000, 100_000)))
        .unwrap();
    let mut probe = herd_cmd()
        .args([
            "probe",
            "--no-discover",
            "--duration",
            "30s",
            "--interval",
            "200ms",
        ])
        .args(["--listen", "127.0.0.1:0", "--container"])
        .arg(format!("cli={}", cgroup.display()))
        .arg("--container")
        .arg(format!("capped={}", capped.cgroup.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(probe.stderr.take().unwrap());
    let addr = loop {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "herd probe exited early"
        );
        if let Some(rest) = line.trim().strip_prefix("herd probe: metrics at http://") {
            break rest.trim_end_matches("/metrics").to_owned();
        }
    };
    pair.start_server(9200, &["--max-conns", "1000"]).unwrap();
    assert_eq!(
        pair.run_client(9200, 120, &[]).unwrap(),
        "connected 120 failed 0"
    );
    let want = "herd_tcp_connects_total{container=\"cli\"} 120\n";
    // The gauges are the latest interval's: TIME_WAIT of the client's 120 closed connections.
    let tw_gauge = "herd_container_sockets_time_wait{container=\"cli\"} 120\n";
    let deadline = Instant::now() + Duration::from_secs(10);
    let body = loop {
        let body = scrape(&addr);
        if (body.contains(want) && body.contains(tw_gauge)) || Instant::now() > deadline {
            break body;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // SAFETY: signalling our own child.
    unsafe { libc::kill(probe.id() as i32, libc::SIGINT) };
    probe.wait().unwrap();
    assert!(body.contains(want), "{body}");
    assert!(
        body.contains("herd_tcp_time_wait_entries_total{container=\"cli\"} 120\n"),
        "{body}"
    );
    let pair_line = format!(
        "herd_pair_connects_total{{container=\"cli\",remote=\"{}:9200\",remote_container=\"\"}} 120\n",
        pair.server_ip
    );
    assert!(body.contains(&pair_line), "{body}");
    assert!(body.contains("herd_probe_lost_events_total{reason=\"cgroup_map_full\"} 0\n"));
    // CPU, quota, memory, socket and port gauges per container and per pair.
    assert!(body.contains(tw_gauge), "{body}");
    assert!(
        body.contains("herd_container_cpu_quota_cores{container=\"capped\"} 0.5\n"),
        "{body}"
    );
    for name in [
        "herd_container_cpu_seconds_total",
        "herd_container_cpu_throttled_seconds_total",
        "herd_container_cpu_cores",
        "herd_container_cpu_throttled_ratio",
        "herd_container_memory_usage_bytes",
        "herd_container_ephemeral_ports",
        "herd_container_sockets_established",
    ] {
        assert!(
            body.contains(&format!("{name}{{container=\"cli\"}} ")),
            "{name}: {body}"
        );
    }
    let pair_tw = format!(
        "herd_pair_sockets_time_wait{{container=\"cli\",remote=\"{}:9200\",remote_container=\"\"}} 120\n",
        pair.server_ip
    );
    assert!(body.contains(&pair_tw), "{body}");
    let headroom = format!(
        "herd_pair_port_headroom{{container=\"cli\",remote=\"{}:9200\",remote_container=\"\"}} ",
        pair.server_ip
    );
    assert!(body.contains(&headroom), "{body}");
}

#[test]
fn prometheus_scrapes_herd_run_with_the_probe_and_every_dashboard_query_has_series() {
    if !privileged(
        "prometheus_scrapes_herd_run_with_the_probe_and_every_dashboard_query_has_series",
    ) {
        return;
    }
    let server = Server::http(Proto::H1)
        .route("/ok", Reply::ok().body("ok"))
        .route("/missing", Reply::new(404))
        .start_blocking();
    // A container with a quota, so the CPU-against-quota panel has a quota line.
    let mut pair = Pair::new("prom").unwrap();
    let capped = pair
        .sandbox
        .container("capped", Some((50_000, 100_000)))
        .unwrap();
    let dir = TempDir::new("prom-probe");
    let scenario = dir.write(
        "mixed.toml",
        format!(
            "[target]\nurl = \"{}\"\n[player]\nthink = \"20ms\"\n\
             [[op]]\nname = \"ok\"\npath = \"/ok\"\nweight = 3\n\
             [[op]]\nname = \"missing\"\npath = \"/missing\"\nexpected = [\"http_4xx\"]\n\
             [[step]]\nplayers = 3\nduration = \"6s\"\narrival = \"burst\"\n",
            server.url()
        ),
    );
    let listen = format!("127.0.0.1:{}", free_port());
    let prom = Prometheus::start(listen.parse().unwrap());
    let started = now();
    let out = herd_cmd()
        .args(["run", scenario.to_str().unwrap(), "--quiet"])
        .args(["--interval", "1s", "--grace", "1s", "--listen", &listen])
        .arg("--container")
        .arg(format!("capped={}", capped.cgroup.display()))
        .arg("--out")
        .arg(dir.join("out"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let ended = now();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let during = started + 4.5;
    assert!(during < ended);
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    let queries = dashboard_queries(root);
    assert!(queries.len() >= 25, "{queries:?}");
    for q in &queries {
        let e = expand(q, ".*", ".*");
        assert!(!prom.query(&e, during).is_empty(), "no series for {e}");
    }
    // One container selected as Grafana writes it.
    for q in queries.iter().filter(|q| q.contains("$container")) {
        let e = expand(q, ".*", "(host|capped)");
        assert!(!prom.query(&e, during).is_empty(), "no series for {e}");
    }
    let quota = prom.values(
        "herd_container_cpu_quota_cores{container=\"capped\"}",
        "container",
        during,
    );
    assert_eq!(quota["capped"], 0.5);
    // The probe's count of connections toward the server is the server's count of accepts.
    let remote = server.addr().to_string();
    let connects = prom.values(
        &format!("sum(herd_pair_connects_total{{remote=\"{remote}\"}})"),
        "",
        ended,
    );
    eprintln!(
        "prometheus: {} queries with series; connects toward {remote} {} (server accepted {}), quota {}",
        queries.len(),
        connects[""],
        server.connections(),
        quota["capped"]
    );
    assert_eq!(connects[""], server.connections() as f64);
    let requests = prom.values("sum(herd_requests_total)", "", ended);
    assert_eq!(requests[""], server.requests() as f64);
    drop(pair);
}
