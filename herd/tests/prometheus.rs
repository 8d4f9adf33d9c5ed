//! `herd run --listen` scraped by a real Prometheus (Debian's `prometheus`, installed by
//! `cargo xtask setup`), started here on 127.0.0.1 with its own config and data directory:
//! every query of docs/grafana/herd.json over the driver's metrics returns series while the
//! run lasts, and the counters Prometheus stored equal the run's report and the server's own
//! counts. The probe's panels run as root in integration-test/tests/prometheus.rs. A port in
//! use exits 2, naming it, before any request.

use std::{
    collections::BTreeMap,
    net::{SocketAddr, TcpListener},
    path::Path,
    process::{Command, Stdio},
};

use herd_testkit::{
    Proto, Reply, Server, TempDir,
    prometheus::{Prometheus, dashboard_queries, expand, free_port, is_probe, now},
};
use serde_json::Value;

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
    let queries = dashboard_queries(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")));
    let driver: Vec<&String> = queries.iter().filter(|q| !is_probe(q)).collect();
    assert!(driver.len() >= 14, "{driver:?}");
    for q in &driver {
        for op in [".*", "(ok|missing)"] {
            let e = expand(q, op, ".*");
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
    let statuses = prom.values("sum by (status) (herd_responses_total)", "status", ended);
    assert_eq!(statuses["200"], server.path_count("/ok") as f64);
    assert_eq!(statuses["404"], server.path_count("/missing") as f64);
    assert_eq!(statuses["500"], server.path_count("/broken") as f64);
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
