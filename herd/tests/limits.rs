//! Plans larger than the host are refused before the first player starts, with the numbers;
//! the soft `RLIMIT_NOFILE` is raised to the hard one first. Real limits set on the real
//! binary (setrlimit between fork and exec, what `ulimit -n` does) against a loopback server.

use std::{
    os::unix::process::CommandExt as _,
    path::PathBuf,
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use herd_testkit::{Proto, Reply, Server, TempDir};

fn scenario(dir: &TempDir, url: &str, players: u64) -> PathBuf {
    dir.write(
        "plan.toml",
        format!(
            "[target]\nurl = \"{url}\"\n[player]\nthink = \"50ms\"\n\
             [[op]]\nname = \"ping\"\npath = \"/\"\n\
             [[step]]\nplayers = {players}\nduration = \"1s\"\narrival = \"burst\"\n"
        ),
    )
}

/// `herd drive FILE` under `ulimit -Sn soft -Hn hard`.
fn drive(file: &PathBuf, json: &PathBuf, soft: u64, hard: u64) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_herd"));
    cmd.args(["drive", "--quiet", "--grace", "1s", "--json"])
        .arg(json)
        .arg(file)
        .stdin(Stdio::null());
    // SAFETY: only setrlimit, async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().unwrap()
}

#[test]
fn a_billion_players_are_refused_at_once_with_the_numbers() {
    let dir = TempDir::new("limits-billion");
    let file = scenario(&dir, "http://127.0.0.1:9/", 1_000_000_000);
    let start = Instant::now();
    let out = drive(&file, &dir.join("run.json"), 1024, 4096);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    for says in [
        "the plan does not fit this host",
        "1000000000 connections need 1000000256 file descriptors",
        "the hard limit is 4096",
        "1000000000 players and 1 ops need at least 20507812 MiB",
    ] {
        assert!(err.contains(says), "{says}: {err}");
    }
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

#[test]
fn under_a_low_hard_limit_the_plan_is_refused_before_any_connect() {
    let server = Server::http(Proto::H1)
        .fallback(Reply::ok().body("ok"))
        .start_blocking();
    let dir = TempDir::new("limits-hard");
    let file = scenario(&dir, &server.url(), 300);
    let out = drive(&file, &dir.join("run.json"), 400, 400);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("300 connections need 556 file descriptors")
            && err.contains("the limit (RLIMIT_NOFILE) is 400; the hard limit is 400"),
        "{err}"
    );
    assert_eq!(server.connections(), 0, "refused before load");
}

#[test]
fn the_soft_limit_is_raised_to_the_hard_one_so_every_player_connects() {
    let server = Server::http(Proto::H1)
        .fallback(Reply::ok().body("ok"))
        .start_blocking();
    let dir = TempDir::new("limits-raise");
    let file = scenario(&dir, &server.url(), 500);
    let json = dir.join("run.json");
    // 500 sockets do not fit a soft limit of 256; they fit the hard 4096 herd raises it to.
    let out = drive(&file, &json, 256, 4096);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["connect_errors"], 0, "{err}");
    assert_eq!(report["connects"], 500, "{err}");
}
