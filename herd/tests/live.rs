//! `herd drive`'s live view, from the real binary against a loopback server: plain
//! `key=value` lines when stdout is a pipe, the redrawn block under a pseudo-terminal
//! (`script`).

use std::{
    collections::BTreeMap,
    path::PathBuf,
    process::{Command, Stdio},
};

use herd_testkit::{Proto, Reply, Server, TempDir};

/// An HTTP/1.1 keep-alive server on 127.0.0.1 that counts requests and answers `ok`, on a
/// runtime of its own (herd runs as a child process).
fn serve() -> Server {
    Server::http(Proto::H1)
        .fallback(Reply::ok().body("ok"))
        .start_blocking()
}

/// A two-step scenario (1 player, then 2) of 600 ms each against `url`.
fn scenario(dir: &TempDir, url: &str) -> PathBuf {
    dir.write(
        "live.toml",
        format!(
            "[target]\nurl = \"{url}\"\n[player]\nthink = \"10ms\"\n\
             [[op]]\nname = \"ping\"\npath = \"/\"\n\
             [[step]]\nplayers = 1\nduration = \"600ms\"\narrival = \"burst\"\n\
             [[step]]\nplayers = 2\nduration = \"600ms\"\narrival = \"burst\"\n"
        ),
    )
}

/// The `key=value` fields of a plain line's totals (before the first ` | `).
fn fields(line: &str) -> BTreeMap<&str, &str> {
    line.split(" | ")
        .next()
        .unwrap()
        .split(' ')
        .filter_map(|kv| kv.split_once('='))
        .collect()
}

fn millis(v: &str) -> f64 {
    match v.strip_suffix("ms") {
        Some(ms) => ms.parse().unwrap(),
        None => v.strip_suffix('s').unwrap().parse::<f64>().unwrap() * 1e3,
    }
}

#[test]
fn piped_stdout_gets_one_plain_line_per_interval() {
    let server = serve();
    let dir = TempDir::new("live-pipe");
    let file = scenario(&dir, &server.url());
    let json = dir.join("run.json");
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["drive", file.to_str().unwrap(), "--interval", "200ms"])
        .args(["--grace", "1s", "--json", json.to_str().unwrap()])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !stdout.contains('\x1b'),
        "no terminal codes into a pipe:\n{stdout}"
    );
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("t=")).collect();
    // 1.2 s of plan in 200 ms intervals, plus the drain.
    assert!(lines.len() >= 5, "{stdout}");
    let mut last_t = 0.0;
    let (mut ops, mut steps_seen, mut full_step_2) = (0u64, Vec::new(), false);
    for line in &lines {
        let f = fields(line);
        let t = millis(f["t"]);
        assert!(t > last_t, "time goes forward: {line}");
        let dt = (t - last_t) / 1e3;
        last_t = t;
        let n: u64 = f["ops"].parse().unwrap();
        ops += n;
        let rate: f64 = f["req/s"].parse().unwrap();
        assert_eq!(f["errors"], "0.00%", "{line}");
        let players: usize = f["players"].parse().unwrap();
        // An interval ending right at a step's start may see the step before its players.
        match f["step"] {
            "1/2" => assert_eq!(players, 1, "{line}"),
            "2/2" => assert!(players <= 2, "{line}"),
            "-" => {}
            other => panic!("step={other} in {line}"),
        }
        if f["step"] == "2/2" && players == 2 {
            full_step_2 = true;
        }
        if !steps_seen.contains(&f["step"]) {
            steps_seen.push(f["step"]);
        }
        if n > 0 {
            // The rate is the count over the interval's length (about 200 ms; the last can
            // be a few ms), up to the rounding of req/s and of t, whole milliseconds at both
            // ends: ±2 ms of rate matter when the interval itself lasts 3.
            let implied = rate * dt;
            assert!(
                (implied - n as f64).abs() <= 1.0 + n as f64 * 0.02 + rate * 0.002,
                "{line}"
            );
            assert!(millis(f["p99"]) > 0.0, "{line}");
            assert!(line.contains(" | ping ops="), "{line}");
        }
        assert!(line.contains(" | driver_cpu="), "{line}");
    }
    assert!(steps_seen.starts_with(&["1/2", "2/2"]), "{steps_seen:?}");
    assert!(full_step_2, "step 2's 2 players in some line: {stdout}");
    // Every op the driver recorded shows in exactly one interval's line.
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(ops, report["requests"].as_u64().unwrap(), "{stdout}");
    assert_eq!(ops, server.requests());
    assert!(ops > 20, "{ops} requests");
}

#[test]
fn a_terminal_gets_the_block_redrawn_in_place() {
    let server = serve();
    let dir = TempDir::new("live-tty");
    let file = scenario(&dir, &server.url());
    // `script` runs herd on a pseudo-terminal and copies what herd drew to its own stdout.
    let cmd = format!(
        "{} drive {} --interval 200ms --grace 1s",
        env!("CARGO_BIN_EXE_herd"),
        file.display()
    );
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{screen}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let blocks = screen.matches(" req/s  p99 ").count();
    assert!(
        screen.contains("step 1/2  players 1") && screen.contains("step 2/2  players 2"),
        "{screen}"
    );
    // Heading, column names, one op, the driver: 4 lines to go back over.
    assert!(
        screen.contains("\x1b[4F\x1b[J"),
        "redrawn in place: {screen:?}"
    );
    assert!(blocks >= 5, "{screen}");
    assert!(!screen.lines().any(|l| l.starts_with("t=")), "{screen}");
    assert!(server.requests() > 20);
}
