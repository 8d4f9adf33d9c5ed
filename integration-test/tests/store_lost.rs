//! A run store that fails during a run: a real PostgreSQL stopped mid-run (the run finishes,
//! prints its tables, writes its report and every row from memory, and `herd import` puts the
//! run back), and a real tmpfs filled mid-run then freed (rows buffered meanwhile, all written
//! once it has room again, in order).

use std::{
    path::Path,
    process::{Child, Output, Stdio},
    time::{Duration, Instant},
};

use herd_store::Store;
use herd_testkit::{Proto, Reply, Server, TempDir};
use integration_test::{Postgres, Tmpfs, herd_cmd, privileged};

fn serve() -> Server {
    Server::http(Proto::H1)
        .fallback(Reply::ok().body("ok"))
        .start_blocking()
}

/// `herd run` of 2 players for `secs` seconds, 200 ms intervals, into `store`.
fn start_run(dir: &TempDir, url: &str, secs: u64, store: &str) -> Child {
    let file = dir.write(
        "s.toml",
        format!(
            "[target]\nurl = \"{url}\"\n[player]\nthink = \"20ms\"\n\
             [[op]]\nname = \"ping\"\npath = \"/\"\n\
             [[step]]\nplayers = 2\nduration = \"{secs}s\"\narrival = \"burst\"\n"
        ),
    );
    herd_cmd()
        .args([
            "run",
            "--no-probe",
            "--quiet",
            "--interval",
            "200ms",
            "--grace",
            "1s",
        ])
        .arg("--out")
        .arg(dir.join("out"))
        .arg("--store")
        .arg(store)
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait(child: Child, limit: Duration) -> (Output, String) {
    let start = Instant::now();
    let mut child = child;
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("herd run still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn postgresql_stopped_mid_run_loses_no_row_and_the_run_imports() {
    if !privileged("postgresql_stopped_mid_run_loses_no_row_and_the_run_imports") {
        return;
    }
    let pg = Postgres::start().unwrap();
    let server = serve();
    let dir = TempDir::new("store-lost-pg");
    let child = start_run(&dir, &server.url(), 4, &pg.url);
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.connections() < 2 {
        assert!(Instant::now() < deadline, "the run never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1200));
    pg.stop();
    let (out, text) = wait(child, Duration::from_secs(40));
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("keeping the run's rows in memory")
            && text.contains("went down during run 1"),
        "{text}"
    );
    // The final table was printed, the report written, the rows saved.
    assert!(text.contains("ping"), "{text}");
    let saved = dir.join("out/run-1-rows.json");
    assert!(
        text.contains(&format!("herd import {}", saved.display())),
        "{text}"
    );
    let reports: Vec<String> = std::fs::read_dir(dir.join("out"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(reports.iter().any(|f| f.ends_with(".md")), "{reports:?}");
    let rows: serde_json::Value = serde_json::from_slice(&std::fs::read(&saved).unwrap()).unwrap();
    let driver = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["source"] == "driver")
        .count();
    // 4 s in 200 ms intervals: every one of them, not the 1.2 s the store saw.
    assert!(driver >= 19, "{driver} driver intervals saved");

    // Imported into another store, the run reads back whole.
    let db = format!("sqlite:{}", dir.join("imported.db").display());
    let out = herd_cmd()
        .arg("import")
        .arg(&saved)
        .args(["--store", &db])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    rt().block_on(async {
        let s = Store::open(&db).await.unwrap();
        let data = s.load_run(None).await.unwrap();
        assert_eq!(data.driver.len(), driver);
        assert!(data.final_report.is_some());
        assert_eq!(data.meta.status, "finished");
    });
}

/// Fills `dir` with zeros until the filesystem refuses.
fn fill(dir: &Path) -> std::path::PathBuf {
    use std::io::Write as _;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 4096];
    while f.write_all(&chunk).and_then(|()| f.flush()).is_ok() {}
    let _ = f.sync_all();
    path
}

#[test]
fn a_full_disk_mid_run_is_retried_and_every_row_written_once_it_has_room() {
    if !privileged("a_full_disk_mid_run_is_retried_and_every_row_written_once_it_has_room") {
        return;
    }
    let fs = Tmpfs::mount("store-full", "2m").unwrap();
    let server = serve();
    let dir = TempDir::new("store-full-run");
    let db = format!("sqlite:{}", fs.path().join("runs.db").display());
    let child = start_run(&dir, &server.url(), 4, &db);
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.connections() < 2 {
        assert!(Instant::now() < deadline, "the run never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(800));
    let filler = fill(fs.path());
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::remove_file(&filler).unwrap();
    let (out, text) = wait(child, Duration::from_secs(40));
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("keeping the run's rows in memory")
            && (text.contains("full") || text.contains("No space")),
        "the full disk is named: {text}"
    );
    assert!(text.contains("is back after"), "{text}");
    rt().block_on(async {
        let s = Store::open(&db).await.unwrap();
        let data = s.load_run(None).await.unwrap();
        assert!(
            data.driver.len() >= 19,
            "{} driver intervals",
            data.driver.len()
        );
        // In order, none lost or doubled.
        let ends: Vec<u64> = data.driver.iter().map(|iv| iv.end_ms).collect();
        assert!(ends.windows(2).all(|w| w[0] < w[1]), "{ends:?}");
        assert!(data.final_report.is_some());
        assert_eq!(data.meta.status, "finished");
        s.close().await;
    });
}
