//! `--scale`: 10 000 herd players on their own h2c connections against the same nginx, and
//! what the driver cost to hold them.

use std::{fmt::Write as _, path::Path, process::Command};

use anyhow::{Context as _, Result, bail};

use super::{
    Args,
    harness::{CLIENT_CORE, SERVER_CORE, cores, nofile, prepare, proc_cpu, run_client_on},
    nginx::{H2C_PORT, Nginx, Setup},
    table::{herd_commit, thousands},
    tools::ops,
};

/// Connections from one source address to nginx's one port, at most: a third of the
/// ephemeral range. connect() tries the even half of the range first (odd ports are left to
/// bind()), so past half the range from one address every connect scans all the even ports
/// in the kernel (`__inet_hash_connect`, `__inet_check_established`) before it finds an odd
/// one: at 16 667 a source address that took 79 % of a shard's CPU and blocked its event
/// loop for seconds per burst of connects. A third leaves room for reconnects and TIME_WAIT.
fn per_source(ports: u64) -> u64 {
    (ports / 3).max(1)
}

/// The ephemeral ports (`net.ipv4.ip_local_port_range`), Linux's default range if unreadable.
fn ephemeral_ports() -> u64 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| {
            let mut it = r.split_whitespace().map(|v| v.parse::<u64>().ok());
            Some(it.next()??..=it.next()??)
        })
        .map_or(28_232, |r| r.end().saturating_sub(*r.start()) + 1)
}

/// Loopback source addresses for `players` connections: one a shard at least, and enough
/// that none carries more than [`per_source`].
fn sources_for(players: usize, shards: u32) -> u32 {
    let need = (players as u64).div_ceil(per_source(ephemeral_ports()));
    // 127.0.0.2 up to 127.0.0.254.
    (need as u32).max(shards).clamp(1, 253)
}

/// The scale run: every player on its own h2c connection, a call every 5 s; with shards or
/// more players than one source address carries well ([`per_source`]), the connections
/// come from loopback source addresses in turn.
fn scale_scenario(players: usize, hold: u64, sources: u32) -> String {
    let ops = ops();
    let sources = if sources > 1 {
        let list: Vec<String> = (0..sources)
            .map(|i| format!("\"127.0.0.{}\"", i + 2))
            .collect();
        format!("source_addrs = [{}]\n", list.join(", "))
    } else {
        String::new()
    };
    format!(
        "# Written by cargo xtask bench-driver --scale.
[target]
url = \"http://127.0.0.1:{H2C_PORT}\"
transport = \"h2c\"
connections = \"per_player\"
timeout = \"10s\"
connect_timeout = \"10s\"
{sources}
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

/// The core shard `i` of `shards` runs on: one shard on the client core as every client;
/// several take the cores in turn from the client core on, each single-threaded on its own
/// core. Three shards on the one client core were half a 2-core host for the driver while
/// nginx used about half of the other: the goal is the players a 2-core host holds, and a
/// shard beside nginx takes what nginx leaves.
fn shard_core(i: u32, shards: u32) -> usize {
    if shards <= 1 {
        return CLIENT_CORE;
    }
    (CLIENT_CORE + i as usize) % cores()
}

/// Where the shards ran, for the table's last line.
fn placement(shards: u32) -> String {
    if shards <= 1 {
        return format!("herd on core {CLIENT_CORE}");
    }
    let cores: Vec<String> = (0..shards)
        .map(|i| format!("shard {i} on core {}", shard_core(i, shards)))
        .collect();
    cores.join(", ")
}

/// The scale run; returns a markdown table.
pub fn bench_scale(root: &Path, args: &Args) -> Result<String> {
    let (herd, dir) = prepare(root)?;
    let shards = args.shards.max(1);
    let per_shard = args.players.div_ceil(shards as usize);
    if nofile() < per_shard as u64 + 1024 {
        bail!(
            "{per_shard} players per process need {} file descriptors; the hard RLIMIT_NOFILE \
             is {}: give --shards {}",
            per_shard + 1024,
            nofile(),
            (args.players as u64).div_ceil(nofile().saturating_sub(2048).max(1))
        );
    }
    // One nginx worker holds at most RLIMIT_NOFILE connections too.
    let workers = (args.players as u64).div_ceil(nofile().saturating_sub(3072).max(1)) as usize;
    let nginx = Nginx::start(
        &dir,
        &Setup {
            // Twice a worker's share: nginx starts closing idle connections (a fresh h2
            // connection before its first request is one) once fewer than 1/16 of its
            // worker_connections are free (ngx_drain_connections: "worker_connections are
            // not enough, reusing connections"), and a share plus 1 024 left 6 % free at
            // 50 000 players, so it reset thousands of them during the arrival. A slot is
            // memory, not a descriptor.
            worker_connections: 2 * args.players.div_ceil(workers) + 1024,
            workers,
            access_log: true,
        },
    )?;
    let scenario = dir.join("scale.toml");
    let sources = sources_for(args.players, shards);
    std::fs::write(&scenario, scale_scenario(args.players, args.hold, sources))?;
    let server_pids = nginx.workers();
    let server_before: f64 = server_pids.iter().map(|&p| proc_cpu(p)).sum();
    let runs: Vec<_> = (0..shards)
        .map(|i| {
            let (herd, scenario, dir) = (herd.clone(), scenario.clone(), dir.path().to_owned());
            std::thread::spawn(
                move || -> Result<(std::path::PathBuf, super::harness::Exit)> {
                    let json = dir.join(format!("scale-{i}.json"));
                    let mut cmd = Command::new(&herd);
                    cmd.arg("drive")
                        .arg(&scenario)
                        .arg("--json")
                        .arg(&json)
                        .arg("--grace")
                        .arg("10s")
                        .arg("--quiet");
                    if shards > 1 {
                        cmd.arg("--shard").arg(format!("{i}/{shards}"));
                    }
                    let exit = run_client_on(
                        &mut cmd,
                        &dir.join(format!("scale-{i}.out")),
                        shard_core(i, shards),
                    )?;
                    Ok((json, exit))
                },
            )
        })
        .collect();
    let mut exits = Vec::new();
    for r in runs {
        exits.push(
            r.join()
                .map_err(|_| anyhow::anyhow!("a shard's thread panicked"))??,
        );
    }
    let server_cpu_s = server_pids.iter().map(|&p| proc_cpu(p)).sum::<f64>() - server_before;
    // The access log is flushed every second and when nginx stops.
    std::thread::sleep(std::time::Duration::from_secs(2));
    drop(nginx);
    let logged = Nginx::logged(&dir)?;
    let json = if shards > 1 {
        let merged = dir.join("scale.json");
        let mut merge = Command::new(&herd);
        merge.arg("merge");
        for (j, _) in &exits {
            merge.arg(j);
        }
        merge
            .arg("--json")
            .arg(&merged)
            .stdout(std::process::Stdio::null());
        let st = merge.status().context("running herd merge")?;
        if !st.success() {
            bail!("herd merge of the shards' results failed");
        }
        merged
    } else {
        exits[0].0.clone()
    };
    let exit = super::harness::Exit {
        stdout: String::new(),
        cpu_s: exits.iter().map(|(_, e)| e.cpu_s).sum(),
        user_s: exits.iter().map(|(_, e)| e.user_s).sum(),
        // The shards' peaks, summed: they hold their players at the same time.
        peak_rss_kib: exits.iter().map(|(_, e)| e.peak_rss_kib).sum(),
        wall_s: exits.iter().map(|(_, e)| e.wall_s).fold(0.0, f64::max),
        run_delay_s: exits.iter().map(|(_, e)| e.run_delay_s).sum(),
    };
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json)?).context("reading herd's JSON report")?;
    let mut outcomes: std::collections::BTreeMap<String, u64> = Default::default();
    for s in report["phases"].as_array().context("phases")? {
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
        .filter(|i| i["phase_index"].as_u64() == Some(1))
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
    let step_p99: Vec<String> = report["phases"]
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
        "| driver processes | {shards} (`herd drive --shard I/{shards}`, merged by `herd merge`){} |",
        if sources > 1 {
            format!(", source addresses 127.0.0.2–127.0.0.{}", sources + 1)
        } else {
            String::new()
        }
    )?;
    writeln!(t, "| nginx workers | {workers} |")?;
    writeln!(
        t,
        "| driver peak RSS (rusage; summed over the shards) | {:.1} MiB |",
        exit.peak_rss_kib as f64 / 1024.0
    )?;
    writeln!(
        t,
        "| driver peak RSS (herd's own 1 s samples; summed over the shards) | {:.1} MiB |",
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
        "| driver waiting for a CPU (runnable, not running; schedstat, all shards) | {:.2} s |",
        exit.run_delay_s
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
    writeln!(
        t,
        "| requests: herd (merged) / nginx access log | {} / {} |",
        thousands(report["requests"].as_f64().unwrap_or(0.0)),
        thousands(logged as f64)
    )?;
    writeln!(t, "| nginx CPU over the run | {:.2} CPU-s |", server_cpu_s)?;
    writeln!(
        t,
        "\nherd commit {}; nginx on core {SERVER_CORE}, {}.",
        herd_commit(root),
        placement(shards)
    )?;
    Ok(t)
}
