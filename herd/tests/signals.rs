//! Real signals to the real binary: a second Ctrl-C ends the grace at once.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use herd_testkit::{Proto, Reply, Server, TempDir};

/// `herd drive --quiet --grace GRACE --json JSON FILE`, its output piped.
fn spawn_drive(grace: &str, json: &std::path::Path, file: &std::path::Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["drive", "--quiet", "--grace", grace, "--json"])
        .arg(json)
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Sends `signal` to `child` and waits for it to exit: how long it took. Kills it and fails
/// with `still WHAT 20 s after SIGNAME` when it does not exit within 20 s.
fn signal_and_wait(
    child: &mut std::process::Child,
    signal: libc::c_int,
    name: &str,
    what: &str,
) -> Duration {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    let sent = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if sent.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("still {what} 20 s after {name}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    sent.elapsed()
}

/// Waits up to 20 s for `server` to have `n` connections; `what` says what failed otherwise.
fn await_connections(server: &Server, n: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.connections() < n {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_second_ctrl_c_ends_the_grace_at_once() {
    // Never answers: every request is still in flight when the stop comes.
    let server = Server::http(Proto::H1)
        .fallback(Reply::hold())
        .start_blocking();
    let dir = TempDir::new("signals-hurry");
    let file = dir.write(
        "s.toml",
        format!(
            "[target]\nurl = \"{}\"\n[[op]]\nname = \"wait\"\npath = \"/\"\ntimeout = \"60s\"\n\
             [[step]]\nplayers = 3\nduration = \"60s\"\narrival = \"burst\"\n",
            server.url()
        ),
    );
    let json = dir.join("run.json");
    let mut child = spawn_drive("60s", &json, &file);
    await_connections(&server, 3, "the players never connected");
    let pid = child.id() as libc::pid_t;
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid, libc::SIGINT) };
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first Ctrl-C starts the 60 s grace"
    );
    let second = Instant::now();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if second.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("still waiting out the grace 10 s after the second Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        second.elapsed() < Duration::from_secs(5),
        "{:?}",
        second.elapsed()
    );
    assert!(status.success(), "{text}");
    assert!(
        text.contains("second signal: ending the grace now"),
        "{text}"
    );
    assert!(text.contains("stopped early by a signal"), "{text}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["stopped_early"], true);
    assert!(
        report.to_string().contains("cancelled"),
        "the three held requests are recorded as cancelled"
    );
}

/// SIGTERM while `herd run` seeds a big `[seed]` into a real SQLite database: seeding stops
/// between two batches, the rows it had added are removed, and herd says so, within seconds
/// rather than after the 3 000 000 accounts.
#[test]
fn a_sigterm_during_seeding_stops_it_and_removes_its_rows() {
    let dir = TempDir::new("signals-seed");
    let db = dir.join("target.db");
    let url = format!("sqlite:{}", db.display());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let count = || {
        rt.block_on(async {
            let p = sqlx::SqlitePool::connect(&url).await.unwrap();
            let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM accounts")
                .fetch_one(&p)
                .await
                .unwrap();
            p.close().await;
            n
        })
    };
    rt.block_on(async {
        let p = sqlx::SqlitePool::connect(&format!("{url}?mode=rwc"))
            .await
            .unwrap();
        sqlx::query("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT, kind TEXT)")
            .execute(&p)
            .await
            .unwrap();
        p.close().await;
    });
    dir.write("seed-url", format!("{url}\n"));
    // The target is never reached: the stop comes while seeding.
    let file = dir.write(
        "s.toml",
        "[target]\nurl = \"http://127.0.0.1:9/\"\n[[op]]\nname = \"ping\"\npath = \"/\"\n\
         [[step]]\nplayers = 1\nduration = \"1s\"\n\
         [seed]\nurl_file = \"seed-url\"\naccounts = 3000000\n\
         account = \"INSERT INTO accounts (id, name, kind) VALUES ({id}, {name}, {kind})\"\n",
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["run", "--no-probe", "--quiet", "--out"])
        .arg(dir.join("out"))
        .arg("--store")
        .arg(format!("sqlite:{}", dir.join("runs.db").display()))
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while count() < 1000 {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("seeding never started");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    signal_and_wait(&mut child, libc::SIGTERM, "SIGTERM", "seeding");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the rows it had added are removed: interrupted after")
            && err.contains("of 3000000 accounts"),
        "{err}"
    );
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert_eq!(count(), 0, "every seeded row removed");
}

/// SIGTERM while herd checks a big scenario (1 MiB of ops, which no loop polls a flag in):
/// nothing has started, so herd ends at once with 128 + 15 and says where it was.
#[test]
fn a_sigterm_while_reading_a_big_scenario_ends_herd_at_once() {
    let dir = TempDir::new("signals-parse");
    let mut src = String::from(
        "[target]\nurl = \"http://127.0.0.1:9/\"\n[[step]]\nplayers = 1\nduration = \"1s\"\n",
    );
    for i in 0.. {
        let op = format!("[[op]]\nname = \"o{i}\"\npath = \"/p{i}\"\n");
        if src.len() + op.len() > 1024 * 1024 {
            break;
        }
        src.push_str(&op);
    }
    let file = dir.write("big.toml", src);
    let mut child = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["drive", "--quiet"])
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Past herd's start (the handlers are in place), well before the check of 25 000 ops ends.
    std::thread::sleep(Duration::from_millis(100));
    let took = signal_and_wait(&mut child, libc::SIGTERM, "SIGTERM", "running");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{err}");
    assert!(
        err.contains("stopped by a signal while reading the scenario"),
        "{err}"
    );
    assert!(took < Duration::from_millis(300), "{took:?}");
}

/// SIGINT in the middle of a big step's ramp-up (3 000 players arriving over 30 s, a real
/// server answering): no more players arrive, the grace is kept, the tables are written.
#[test]
fn a_sigint_during_the_ramp_up_of_a_big_step_stops_it_within_the_grace() {
    let server = Server::http(Proto::H1)
        .fallback(Reply::ok())
        .start_blocking();
    let dir = TempDir::new("signals-ramp");
    let file = dir.write(
        "s.toml",
        format!(
            "[target]\nurl = \"{}\"\n[player]\nthink = \"100ms\"\n\
             [[op]]\nname = \"ping\"\npath = \"/\"\n\
             [[step]]\nplayers = 3000\nduration = \"60s\"\nramp = \"30s\"\n",
            server.url()
        ),
    );
    let json = dir.join("run.json");
    let mut child = spawn_drive("2s", &json, &file);
    await_connections(&server, 50, "the ramp never started");
    let took = signal_and_wait(&mut child, libc::SIGINT, "SIGINT", "running");
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        took < Duration::from_secs(5),
        "the 2 s grace, then out: {took:?}"
    );
    assert!(text.contains("stopped early by a signal"), "{text}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let arrived = report["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["players"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(
        arrived < 3000,
        "the ramp stopped at the signal: {arrived} of 3000 players"
    );
}

/// The report files of run 1 in `dir`, by name.
const REPORT_FILES: [&str; 5] = [
    "run-1.md",
    "run-1.html",
    "run-1.json",
    "run-1-ops.csv",
    "run-1-timeline.csv",
];

/// A scenario whose report takes a while to write (300 ops, two steps): its files are
/// written one after another, so a signal can land between them.
fn big_report_scenario(dir: &TempDir, url: &str) -> std::path::PathBuf {
    let ops: String = (0..300)
        .map(|i| format!("[[op]]\nname = \"op{i:03}\"\npath = \"/o/{i}\"\n"))
        .collect();
    dir.write(
        "big.toml",
        format!(
            "[target]\nurl = \"{url}\"\n{ops}[[step]]\nplayers = 2\nduration = \"500ms\"\n\
             arrival = \"burst\"\n[[step]]\nplayers = 3\nduration = \"500ms\"\n"
        ),
    )
}

/// A SIGTERM while `herd run` writes its report (after the load, the run recorded): the
/// report is what a stop writes anyway, so herd finishes writing it — every file whole, the
/// same bytes `herd report` builds from the store — and exits as the run would have (0).
/// And a file that cannot be written whole (SIGKILL, a full disk) is not left half written.
#[test]
fn a_sigterm_while_the_report_is_written_lets_it_finish_whole() {
    let server = Server::http(Proto::H1)
        .fallback(Reply::ok().body("ok"))
        .start_blocking();
    let dir = TempDir::new("signals-report");
    let file = big_report_scenario(&dir, &server.url());
    let out = dir.join("out");
    let mut child = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["run", "--no-probe", "--quiet", "--grace", "1s", "--out"])
        .arg(&out)
        .arg(&file)
        .env_remove("HERD_STORE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first file of the report appears: the others are still to be written.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !out.join(REPORT_FILES[0]).exists() {
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!("herd run never wrote its report");
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let missing = REPORT_FILES
        .iter()
        .filter(|f| !out.join(f).exists())
        .count();
    signal_and_wait(&mut child, libc::SIGTERM, "SIGTERM", "writing the report");
    let o = child.wait_with_output().unwrap();
    let (stdout, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "{stdout}{err}");
    eprintln!("{missing} of 5 report files were still to be written when the SIGTERM came");
    // Rebuilt from the store into another directory: the same bytes, file by file.
    let again = dir.join("again");
    let st = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["report", "1", "--out"])
        .arg(&again)
        .arg("--store")
        .arg(herd_store::default_url(&out))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    for f in REPORT_FILES {
        assert!(
            stdout.contains(&format!("wrote {}", out.join(f).display())),
            "{stdout}"
        );
        assert!(
            std::fs::read(out.join(f)).unwrap() == std::fs::read(again.join(f)).unwrap(),
            "{f} is not the whole report"
        );
    }

    // A report file is written whole or not at all (a temporary file renamed into place):
    // `herd report` that cannot write a file whole — its size limit (RLIMIT_FSIZE) below
    // the HTML's — leaves no half file and names the file, where it used to leave the HTML
    // cut at the limit.
    use std::os::unix::process::CommandExt as _;
    let html = std::fs::metadata(out.join("run-1.html")).unwrap().len();
    let md = std::fs::metadata(out.join("run-1.md")).unwrap().len();
    assert!(
        md < html / 2,
        "the limit falls between the two: md {md}, html {html}"
    );
    let limit = html / 2;
    let again = dir.join("again-limited");
    let mut c = Command::new(env!("CARGO_BIN_EXE_herd"));
    c.args(["report", "1", "--out"])
        .arg(&again)
        .arg("--store")
        .arg(herd_store::default_url(&out))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit and signal are async-signal-safe; the child runs nothing else first.
    unsafe {
        c.pre_exec(move || {
            // A write past the limit then fails with EFBIG instead of killing herd.
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let l = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &l) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("run-1.html"), "{err}");
    assert_eq!(
        std::fs::read(again.join("run-1.md")).unwrap(),
        std::fs::read(out.join("run-1.md")).unwrap(),
        "the file before it is whole"
    );
    let left: Vec<String> = std::fs::read_dir(&again)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        left,
        ["run-1.md"],
        "no half file, no temporary file: {left:?}"
    );
}
