//! The clients: wrk, h2load and herd, the scenarios herd runs, and one timed run of a client
//! with what it reports parsed from its own output.

use std::{path::Path, process::Command};

use anyhow::{Context as _, Result};

use super::{
    harness::{proc_cpu, run_client},
    nginx::{H1_PORT, H2C_PORT, Nginx, STREAM_RATE},
};

pub(super) const CONNECTIONS: usize = 50;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Proto {
    H1,
    H2c,
}

impl Proto {
    /// The protocol column of the tables.
    pub(super) fn label(self) -> &'static str {
        match self {
            Proto::H1 => "HTTP/1.1",
            Proto::H2c => "h2c",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Tool {
    Wrk,
    H2loadH1,
    HerdH1,
    H2loadH2c,
    HerdH2c,
}

pub(super) const TOOLS: [Tool; 5] = [
    Tool::Wrk,
    Tool::H2loadH1,
    Tool::HerdH1,
    Tool::H2loadH2c,
    Tool::HerdH2c,
];

impl Tool {
    pub(super) fn name(self) -> &'static str {
        match self {
            Tool::Wrk => "wrk",
            Tool::H2loadH1 => "h2load --h1",
            Tool::HerdH1 => "herd",
            Tool::H2loadH2c => "h2load",
            Tool::HerdH2c => "herd",
        }
    }

    pub(super) fn proto(self) -> Proto {
        match self {
            Tool::Wrk | Tool::H2loadH1 | Tool::HerdH1 => Proto::H1,
            Tool::H2loadH2c | Tool::HerdH2c => Proto::H2c,
        }
    }
}

/// The ops of both of herd's scenarios: one GET, and each player's long-lived response on
/// its own connection.
pub(super) fn ops() -> String {
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

/// One client run's result.
pub(super) struct Sample {
    pub(super) requests: u64,
    pub(super) errors: u64,
    pub(super) cpu_s: f64,
    pub(super) user_s: f64,
    pub(super) wall_s: f64,
    pub(super) server_cpu_s: f64,
}

impl Sample {
    /// The client's CPU-seconds per 100 000 requests: what the comparison ranks by.
    pub(super) fn cpu_per_100k(&self) -> f64 {
        self.cpu_s * 1e5 / self.requests.max(1) as f64
    }
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

pub(super) fn run_tool(
    tool: Tool,
    herd: &Path,
    dir: &Path,
    seconds: u64,
    nginx: &Nginx,
) -> Result<Sample> {
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
            let ok: u64 = report["phases"]
                .as_array()
                .context("phases in herd's JSON")?
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
