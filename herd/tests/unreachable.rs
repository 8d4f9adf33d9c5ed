//! A target whose port is closed from the start: the run says it measured nothing and exits 1
//! instead of 0 with "Findings: None"; each player backs off between failed connects instead
//! of retrying as fast as the kernel refuses; the report names the target as a finding.

use std::{
    process::{Command, Stdio},
    time::Duration,
};

use herd_testkit::TempDir;

/// Players, the step's length and their think time in the scenario below.
const PLAYERS: u64 = 2;
const DURATION: Duration = Duration::from_secs(2);
const THINK: Duration = Duration::from_millis(50);

/// The most connects one player can try in `d` under the documented backoff: the first at
/// once, then after 50 ms, doubling to 2 s.
fn attempts_with_backoff(d: Duration) -> u64 {
    let (mut at, mut wait, mut n) = (Duration::ZERO, Duration::from_millis(50), 1);
    while at + wait <= d {
        at += wait;
        wait = (wait * 2).min(Duration::from_secs(2));
        n += 1;
    }
    n
}

#[test]
fn a_run_in_which_every_connect_failed_backs_off_says_so_and_exits_1() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = TempDir::new("unreachable");
    let file = dir.write(
        "s.toml",
        format!(
            "[target]\nurl = \"http://127.0.0.1:{port}/\"\n[player]\nthink = \"{}ms\"\n\
             [[op]]\nname = \"ping\"\npath = \"/\"\n\
             [[step]]\nplayers = {PLAYERS}\nduration = \"{}ms\"\narrival = \"burst\"\n",
            THINK.as_millis(),
            DURATION.as_millis()
        ),
    );
    let json = dir.join("drive.json");
    let out_dir = dir.join("out");
    for cmd in [
        &["drive", "--json", json.to_str().unwrap()][..],
        &["run", "--no-probe", "--out", out_dir.to_str().unwrap()],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_herd"))
            .args(cmd)
            .args(["--quiet", "--grace", "1s"])
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "herd {cmd:?}: {err}");
        assert!(
            err.contains(&format!(
                "connects to 127.0.0.1:{port} failed and none succeeded"
            )),
            "herd {cmd:?}: {err}"
        );
        assert!(
            stdout.contains("connect backoff: ") && stdout.contains("connects held back"),
            "herd {cmd:?} shows the backoff in its summary: {stdout}"
        );
    }

    // The backoff bounds the attempts: without it each player would try again after every
    // think, PLAYERS × DURATION / THINK = 80 connects; with it, a handful each.
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let failed = run["connect_errors"].as_u64().unwrap();
    let held = run["connects_held"].as_u64().unwrap();
    let without = PLAYERS * (DURATION.as_millis() / THINK.as_millis()) as u64;
    // One more each for a stop that lands just after a wait ended.
    let bound = PLAYERS * (attempts_with_backoff(DURATION) + 1);
    assert_eq!(run["connects"].as_u64(), Some(0));
    assert!(
        (PLAYERS..=bound).contains(&failed),
        "{failed} connects tried; the backoff allows at most {bound}, no backoff would make \
         {without}"
    );
    assert!(bound * 4 < without, "the test tells the two apart");
    assert!(held >= 1, "{run}");
    assert!(run["connect_backoff_ms"].as_u64().unwrap() >= 100, "{run}");

    // The report of `herd run` names it as its first finding, with the numbers.
    let report = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("run-") && name.ends_with(".json") && !name.contains("-rows")
        })
        .expect("herd run wrote its JSON report");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let f = &report["findings"][0];
    assert_eq!(f["kind"], "target_unreachable", "{:#}", report["findings"]);
    let title = f["title"].as_str().unwrap();
    assert!(
        title.starts_with("every one of the run's ")
            && title.contains(&format!("connects to 127.0.0.1:{port} failed")),
        "{title}"
    );
    assert!(
        f["numbers"]["connects_held"].as_f64().unwrap() >= 1.0,
        "{f:#}"
    );
}

/// A target killed during the run: at least 5 % of at least 10 connects failed, so the run
/// is named `target_unreachable` and exits 1 (as the docs' matrix says), and the step line,
/// the op row and the finding give the same number of failed connects (issue #27: 12, 14
/// and 14).
#[test]
fn a_target_killed_mid_run_exits_1_and_every_count_of_failed_connects_agrees() {
    use std::{
        io::{Read as _, Write as _},
        net::TcpListener,
        time::Instant,
    };
    let dir = TempDir::new("killed-target");
    let json = dir.join("drive.json");
    let out_dir = dir.join("out");
    for cmd in [
        &["drive", "--json", json.to_str().unwrap()][..],
        &["run", "--no-probe", "--out", out_dir.to_str().unwrap()],
    ] {
        // A target that answers each request and closes (`connection: close`), so that
        // every request connects, until it is killed 600 ms in: its port then refuses.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let target = std::thread::spawn(move || {
            let dies = Instant::now() + Duration::from_millis(600);
            while Instant::now() < dies {
                let Ok((mut c, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                };
                c.set_nonblocking(false).unwrap();
                c.set_read_timeout(Some(Duration::from_millis(500)))
                    .unwrap();
                let mut buf = [0u8; 1024];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(n @ 1..) => got.extend_from_slice(&buf[..n]),
                        _ => break,
                    }
                }
                let _ = c.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                );
            }
        });
        let file = dir.write(
            "s.toml",
            format!(
                "[target]\nurl = \"http://127.0.0.1:{port}/\"\n[player]\nthink = \"20ms\"\n\
                 [[op]]\nname = \"ping\"\npath = \"/\"\n\
                 [[step]]\nplayers = 4\nduration = \"2s\"\narrival = \"burst\"\n"
            ),
        );
        let out = Command::new(env!("CARGO_BIN_EXE_herd"))
            .args(cmd)
            .args(["--quiet", "--grace", "3s"])
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        target.join().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "herd {cmd:?}: {stdout}{err}");
        assert!(
            err.contains(&format!("of the run's connects to 127.0.0.1:{port} failed")),
            "herd {cmd:?}: {err}"
        );
        // The step line and the op row, as printed.
        let step: u64 = stdout
            .lines()
            .find(|l| l.starts_with("step 1:"))
            .and_then(|l| l.split(", ").find(|p| p.ends_with(" connect errors")))
            .and_then(|p| p.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("a step line with connect errors: {stdout}"));
        let row = format!("transport_error.connect {step} (");
        assert!(
            stdout.contains(&row),
            "the op row says {step} too: {stdout}"
        );
        if cmd[0] == "drive" {
            let run: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
            assert_eq!(run["connect_errors"].as_u64(), Some(step), "{stdout}");
            assert_eq!(run["phases"][0]["connect_errors"].as_u64(), Some(step));
            assert!(step >= 10, "{step} failed connects");
            // No player is left waiting out a backoff past the plan: the run ends with it.
            let ms = run["duration_ms"].as_u64().unwrap();
            assert!(ms < 2_400, "the run took {ms} ms for a 2 s plan");
        } else {
            let report = std::fs::read_dir(&out_dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .find(|p| p.extension().is_some_and(|e| e == "json"))
                .expect("herd run wrote its JSON report");
            let report: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
            let f = &report["findings"][0];
            assert_eq!(f["kind"], "target_unreachable", "{:#}", report["findings"]);
            assert_eq!(f["numbers"]["connect_errors"].as_f64(), Some(step as f64));
        }
    }
}
