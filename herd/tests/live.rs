//! `herd drive`'s live view, from the real binary against a loopback server: plain
//! `key=value` lines when stdout is a pipe, the redrawn block under a pseudo-terminal
//! (`script`).

use std::{
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

use herd_testkit::logfmt::parse as logfmt;

#[test]
fn piped_stdout_gets_logfmt_lines_with_fixed_units() {
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
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("start_s="))
        .collect();
    let (mut last_end, mut ops, mut op_ops, mut phases) = (0.0, 0u64, 0u64, Vec::new());
    let mut full_step_2 = false;
    for line in &lines {
        let f = logfmt(line);
        // Units are in the keys; values are plain numbers, counts integers.
        for (k, v) in &f {
            if k.ends_with("_s") || k.ends_with("_ms") || k.ends_with("_pct") {
                assert!(
                    v.parse::<f64>().is_ok_and(f64::is_finite),
                    "{k}={v}: {line}"
                );
            } else if ["ops", "total_ops", "errors", "players", "connects"].contains(&k.as_str())
                || k.starts_with("outcome.")
            {
                assert!(v.parse::<u64>().is_ok(), "{k}={v}: {line}");
            }
        }
        let start: f64 = f["start_s"].parse().unwrap();
        let dur: f64 = f["dur_s"].parse().unwrap();
        assert!(dur > 0.0 && dur <= 0.25, "{line}");
        if let Some(end) = f.get("elapsed_s") {
            // An interval line: it starts where the one before ended (the driver rounds its
            // end and its length to whole milliseconds each, as the report does).
            let end: f64 = end.parse().unwrap();
            assert!(
                (start - last_end).abs() <= 0.002 + 1e-9,
                "{line} after {last_end}"
            );
            assert!((start + dur - end).abs() < 1e-6, "{line}");
            last_end = end;
            let n: u64 = f["ops"].parse().unwrap();
            ops += n;
            assert_eq!(f["total_ops"].parse::<u64>().unwrap(), ops, "{line}");
            assert_eq!(f["errors"], "0", "{line}");
            assert_eq!(f["planned_s"], "1.2", "{line}");
            let players: usize = f["players"].parse().unwrap();
            match f["phase"].as_str() {
                "step 1" => assert_eq!(players, 1, "{line}"),
                "step 2" => assert!(players <= 2, "{line}"),
                "-" => {}
                other => panic!("phase={other} in {line}"),
            }
            full_step_2 |= f["phase"] == "step 2" && players == 2;
            if !phases.contains(&f["phase"]) {
                phases.push(f["phase"].clone());
            }
        } else {
            // An op line of the same interval.
            assert_eq!(f["op"], "ping", "{line}");
            assert!((start + dur - last_end).abs() < 1e-6, "{line}");
            let n: u64 = f["ops"].parse().unwrap();
            op_ops += n;
            assert_eq!(f["outcome.ok"].parse::<u64>().unwrap(), n, "{line}");
            assert!(f["p99_ms"].parse::<f64>().unwrap() > 0.0, "{line}");
            assert!(f["p50_ms"].parse::<f64>().unwrap() > 0.0, "{line}");
        }
    }
    assert!(lines.len() >= 10, "{stdout}");
    assert!(
        phases.starts_with(&["step 1".to_owned(), "step 2".to_owned()]),
        "{phases:?}"
    );
    assert!(full_step_2, "step 2's 2 players in some line: {stdout}");
    // Every op the driver recorded shows in exactly one interval's line.
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(ops, report["requests"].as_u64().unwrap(), "{stdout}");
    assert_eq!(ops, op_ops);
    assert_eq!(ops, server.requests());
    assert!(ops > 20, "{ops} requests");
}

/// What `herd drive` drew on a pseudo-terminal of `cols` columns (`script` runs it there).
fn on_a_terminal(cols: u16) -> (String, Server) {
    let server = serve();
    let dir = TempDir::new("live-tty");
    let file = scenario(&dir, &server.url());
    let cmd = format!(
        "stty cols {cols} rows 50; {} drive {} --interval 200ms --grace 1s",
        env!("CARGO_BIN_EXE_herd"),
        file.display()
    );
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let screen = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{screen}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (screen, server)
}

/// The blocks herd drew, split at each redraw.
fn frames(screen: &str) -> Vec<String> {
    let screen = screen.replace("\r\n", "\n");
    let mut frames = Vec::new();
    for part in screen.split("\x1b[") {
        // Each redraw starts `ESC[<n>F ESC[J`; the first block follows the heading line.
        let body = part
            .split_once("F")
            .filter(|(n, _)| n.chars().all(|c| c.is_ascii_digit()))
            .map_or(part, |(_, b)| b);
        let body = body.strip_prefix("J").unwrap_or(body);
        // A block's heading is `herd` and the elapsed time; `herd drive: …` is not one.
        let heading = body
            .match_indices("herd ")
            .find(|(i, _)| body[i + 5..].starts_with(|c: char| c == ' ' || c.is_ascii_digit()));
        if let Some((i, _)) = heading {
            let block: String = body[i..]
                .lines()
                .take_while(|l| !l.is_empty() && !l.starts_with("step"))
                .collect::<Vec<_>>()
                .join("\n");
            frames.push(block);
        }
    }
    frames
}

/// A frame with its measured numbers replaced, for a snapshot of its shape: digits become
/// `N`, the progress bar `[bar]`, runs of spaces one space; a saturation warning left out.
fn shape(frame: &str) -> String {
    let mut out = String::new();
    // Whether the driver saturated depends on the host's load, not on the view.
    for line in frame.lines().filter(|l| !l.starts_with("  ! SATURATED")) {
        let mut l = String::new();
        let mut in_bar = false;
        for c in line.chars() {
            match c {
                '[' if line.contains("/ ")
                    && !in_bar
                    && l.starts_with("herd")
                    && !l.contains("[bar]") =>
                {
                    in_bar = true;
                    l.push_str("[bar]");
                }
                ']' if in_bar => in_bar = false,
                _ if in_bar => {}
                '0'..='9' => {
                    if !l.ends_with('N') {
                        l.push('N');
                    }
                }
                '.' if l.ends_with('N') => {}
                ' ' if l.ends_with(' ') => {}
                c => l.push(c),
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    }
    out
}

#[test]
fn a_terminal_gets_the_block_redrawn_in_place() {
    let (screen, server) = on_a_terminal(200);
    let frames = frames(&screen);
    assert!(frames.len() >= 5, "{screen:?}");
    assert!(
        frames
            .iter()
            .any(|f| f.contains("phase 1/2 (step 1)  players 1"))
            && frames
                .iter()
                .any(|f| f.contains("phase 2/2 (step 2)  players 2")),
        "{screen}"
    );
    // Heading, now/total, column names, one op, the driver: 5 lines to go back over (6
    // after an interval in which a loaded host saturated the driver).
    assert!(
        screen.contains("\x1b[5F\x1b[J") || screen.contains("\x1b[6F\x1b[J"),
        "redrawn in place: {screen:?}"
    );
    assert!(
        !screen.lines().any(|l| l.starts_with("start_s=")),
        "{screen}"
    );
    // The second frame (0.4 s into step 1), numbers aside.
    insta::assert_snapshot!("pty_frame", shape(&frames[1]));
    assert!(server.requests() > 20);
}

#[test]
fn a_narrow_terminal_gets_every_line_cut_to_its_width() {
    let (screen, _server) = on_a_terminal(60);
    let frames = frames(&screen);
    assert!(frames.len() >= 5, "{screen:?}");
    for f in &frames {
        for line in f.lines() {
            assert!(line.chars().count() <= 59, "{line:?} is wider than 59");
        }
    }
    // The heading was long enough to be cut.
    assert!(
        frames[1].lines().next().unwrap().ends_with('…'),
        "{}",
        frames[1]
    );
}
