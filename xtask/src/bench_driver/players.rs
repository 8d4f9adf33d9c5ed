//! `cargo xtask bench-driver --grpc-ws`: herd's gRPC and WebSocket players.
//!
//! - CPU per 1 000 unary gRPC calls: herd (`herd drive grpc://…/herd.arena.Arena/Join
//!   --proto … -n N -c C`) and, as no ghz ships in Debian or PyPI, a Python grpcio client
//!   loop (`testkit/py/grpc_client.py`: C threads, a channel each, calling back to back),
//!   taking turns against one grpcio server (`testkit/py/grpc_server.py`) pinned to core 0,
//!   each client on core 1; CPU from `wait4`'s rusage of the client process.
//! - Memory per held WebSocket player: herd holding 1 000 and then 10 000 sockets (a stream
//!   op each, arriving over 10 s and held) against one websockets server
//!   (`testkit/py/ws_server.py`'s `/push?count=1&hold=1`: one push, then held); the
//!   driver's peak RSS for each, and the difference per player.
//!
//! The servers run from the venv `cargo xtask setup` makes and stop when this does.

use std::{
    io::{BufRead as _, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
};

use anyhow::{Context as _, Result, bail};

use super::harness::{SERVER_CORE, confine, prepare, run_client};

/// A Python test server on the server core, killed on drop.
struct PyServer {
    child: Child,
    port: u16,
}

impl PyServer {
    fn start(root: &Path, script: &str, args: &[&str]) -> Result<Self> {
        let mut cmd = Command::new(root.join("target/py/bin/python"));
        cmd.arg(root.join("testkit/py").join(script))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        confine(&mut cmd, SERVER_CORE, true);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting {script} (run `cargo xtask setup` first)"))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("server stdout")?).read_line(&mut line)?;
        let v: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("{script} said `{line}`"))?;
        let port = v["port"].as_u64().context("no port")? as u16;
        Ok(Self { child, port })
    }
}

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Options of the players' benchmark.
pub struct Players {
    pub reps: usize,
    pub calls: u64,
    pub concurrency: usize,
    pub sockets: usize,
    pub hold: u64,
}

/// Runs both parts; returns the markdown tables.
pub fn bench_players(root: &Path, o: &Players) -> Result<String> {
    let (herd, dir) = prepare(root)?;
    let proto = root.join("testkit/py/arena.proto");
    let proto = proto.display().to_string();
    let server = PyServer::start(root, "grpc_server.py", &["--proto", &proto])?;
    let mut rows: Vec<(&str, f64, f64, u64)> = Vec::new();
    for rep in 0..o.reps {
        for k in 0..2 {
            let tool = if (k + rep) % 2 == 0 {
                "herd"
            } else {
                "python grpcio"
            };
            let out = dir.join("client.out");
            let (exit, ok) = if tool == "herd" {
                let json = dir.join("herd.json");
                let url = format!("grpc://127.0.0.1:{}/herd.arena.Arena/Join", server.port);
                let mut cmd = Command::new(&herd);
                cmd.args(["drive", &url, "--proto", &proto])
                    .args(["-d", r#"{"player": "bench", "level": 2}"#])
                    .args(["-n", &o.calls.to_string(), "-c", &o.concurrency.to_string()])
                    .args(["--quiet", "--json"])
                    .arg(&json);
                let exit = run_client(&mut cmd, &out)?;
                let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json)?)?;
                let ok: u64 = r["phases"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|p| p["ops"].as_array().into_iter().flatten())
                    .flat_map(|op| op["outcomes"].as_array().into_iter().flatten())
                    .filter(|s| s["outcome"] == "ok")
                    .filter_map(|s| s["count"].as_u64())
                    .sum();
                (exit, ok)
            } else {
                let mut cmd = Command::new(root.join("target/py/bin/python"));
                cmd.arg(root.join("testkit/py/grpc_client.py"))
                    .args(["--proto", &proto])
                    .args(["--target", &format!("127.0.0.1:{}", server.port)])
                    .args(["-n", &o.calls.to_string(), "-c", &o.concurrency.to_string()]);
                let exit = run_client(&mut cmd, &out)?;
                let v: serde_json::Value = serde_json::from_str(exit.stdout.trim())?;
                let ok = v["ok"].as_u64().unwrap_or(0);
                (exit, ok)
            };
            if ok != o.calls {
                bail!("{tool} made {ok} ok calls of {}", o.calls);
            }
            let per_k = 1000.0 * exit.cpu_s / ok as f64;
            eprintln!(
                "xtask bench-players: rep {rep} {tool:<14} {ok} calls in {:.2}s, {:.3} CPU-s, {:.2} CPU-ms per 1000 calls, {:.0} calls/s, peak RSS {} KiB",
                exit.wall_s,
                exit.cpu_s,
                per_k * 1000.0,
                ok as f64 / exit.wall_s,
                exit.peak_rss_kib
            );
            rows.push((tool, per_k, ok as f64 / exit.wall_s, exit.peak_rss_kib));
        }
    }
    drop(server);
    let mut md = String::from(
        "| client | CPU-ms per 1 000 unary calls (median, range) | calls/s (median) | peak RSS |\n|---|---:|---:|---:|\n",
    );
    for tool in ["herd", "python grpcio"] {
        let mut cpu: Vec<f64> = rows
            .iter()
            .filter(|r| r.0 == tool)
            .map(|r| r.1 * 1000.0)
            .collect();
        let mut rate: Vec<f64> = rows.iter().filter(|r| r.0 == tool).map(|r| r.2).collect();
        let rss = rows
            .iter()
            .filter(|r| r.0 == tool)
            .map(|r| r.3)
            .max()
            .unwrap_or(0);
        cpu.sort_by(f64::total_cmp);
        rate.sort_by(f64::total_cmp);
        md.push_str(&format!(
            "| {tool} | {:.1} ({:.1}–{:.1}) | {:.0} | {:.1} MiB |\n",
            cpu[cpu.len() / 2],
            cpu[0],
            cpu[cpu.len() - 1],
            rate[rate.len() / 2],
            rss as f64 / 1024.0
        ));
    }

    // Held sockets.
    let server = PyServer::start(root, "ws_server.py", &[])?;
    let mut held = Vec::new();
    for players in [o.sockets / 10, o.sockets] {
        let scenario = dir.join(format!("hold-{players}.toml"));
        std::fs::write(
            &scenario,
            format!(
                "[target]\nurl = \"ws://127.0.0.1:{}/push?count=1&hold=1\"\nconnect_timeout = \"30s\"\n\n\
                 [[op]]\nname = \"feed\"\nkind = \"stream\"\n\n\
                 [[step]]\nplayers = {players}\nduration = \"{}s\"\nramp = \"10s\"\n",
                server.port,
                10 + o.hold
            ),
        )?;
        let json = dir.join("hold.json");
        let mut cmd = Command::new(&herd);
        cmd.arg("drive")
            .arg(&scenario)
            .args(["--quiet", "--json"])
            .arg(&json);
        let exit = run_client(&mut cmd, &dir.join("hold.out"))?;
        let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json)?)?;
        let feed = r["streams"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| s["op"] == "feed")
            .cloned()
            .unwrap_or_default();
        eprintln!(
            "xtask bench-players: {players} held sockets: peak RSS {} KiB, {:.2} CPU-s, connects {}, connect errors {}, opened {}, events {}",
            exit.peak_rss_kib,
            exit.cpu_s,
            r["connects"],
            r["connect_errors"],
            feed["opened"],
            feed["events"]
        );
        held.push((
            players,
            exit.peak_rss_kib,
            exit.cpu_s,
            r["connects"].clone(),
            feed["events"].clone(),
            r["connect_errors"].clone(),
        ));
    }
    drop(server);
    md.push_str("\n| held sockets | driver peak RSS | driver CPU-s | connects | connect errors | pushes counted |\n|---:|---:|---:|---:|---:|---:|\n");
    for (n, rss, cpu, connects, events, errors) in &held {
        md.push_str(&format!(
            "| {n} | {:.1} MiB | {cpu:.2} | {connects} | {errors} | {events} |\n",
            *rss as f64 / 1024.0
        ));
    }
    if let [(n1, r1, ..), (n2, r2, ..)] = held[..] {
        md.push_str(&format!(
            "\nPer held player: ({:.1} MiB − {:.1} MiB) / ({n2} − {n1}) = {:.2} KiB.\n",
            r2 as f64 / 1024.0,
            r1 as f64 / 1024.0,
            (r2 as f64 - r1 as f64) / (n2 - n1) as f64
        ));
    }
    Ok(md)
}
