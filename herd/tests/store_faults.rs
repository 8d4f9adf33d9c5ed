//! The run store's URLs and a run's honesty about how it ended, from the real binary: a SQLite
//! file created from the documented `sqlite:PATH`, `mode=rwc` never shown, bad URLs exit 2, an
//! unreachable PostgreSQL named with its cause, a run killed with SIGKILL read `interrupted`.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use herd_store::Store;
use herd_testkit::{Proto, Reply, Server, TempDir};

fn serve() -> Server {
    Server::http(Proto::H1)
        .fallback(Reply::ok().body("ok"))
        .start_blocking()
}

fn scenario(dir: &TempDir, url: &str, duration: &str) -> PathBuf {
    dir.write(
        "s.toml",
        format!(
            "[target]\nurl = \"{url}\"\n[player]\nthink = \"20ms\"\n\
             [[op]]\nname = \"ping\"\npath = \"/\"\n\
             [[step]]\nplayers = 2\nduration = \"{duration}\"\narrival = \"burst\"\n"
        ),
    )
}

fn herd_run(file: &Path, out: &Path, store: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_herd"));
    c.args(["run", "--no-probe", "--quiet", "--grace", "1s", "--out"])
        .arg(out)
        .arg("--store")
        .arg(store)
        .arg(file)
        .stdin(Stdio::null());
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_documented_sqlite_form_creates_the_file_and_never_shows_mode_rwc() {
    let server = serve();
    let dir = TempDir::new("store-rwc");
    let file = scenario(&dir, &server.url(), "500ms");
    let db = dir.join("not/yet/new.db");
    let store = format!("sqlite:{}", db.display());
    let out = herd_run(&file, &dir.join("out"), &store).output().unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(db.exists(), "{all}");
    assert!(all.contains(&format!("recorded in {store}")), "{all}");
    // The default store too (sqlite:OUT/runs.db).
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["run", "--no-probe", "--quiet", "--out"])
        .arg(dir.join("out"))
        .arg(&file)
        .env_remove("HERD_STORE")
        .output()
        .unwrap();
    let all = format!("{all}{}", text(&out));
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(!all.contains("mode=rwc"), "{all}");
    for f in std::fs::read_dir(dir.join("out")).unwrap().flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        assert!(
            !name.ends_with("-wal") && !name.ends_with("-shm"),
            "{name} left"
        );
        if let Ok(body) = std::fs::read_to_string(f.path()) {
            assert!(!body.contains("mode=rwc"), "{name}");
        }
    }
}

#[test]
fn a_store_url_that_names_no_store_exits_2_with_the_forms() {
    let dir = TempDir::new("store-bad");
    let file = scenario(&dir, "http://127.0.0.1:9/", "1s");
    for (url, says) in [
        ("", "the run store URL is empty: give sqlite:PATH"),
        ("runs.db", "runs.db is neither SQLite nor PostgreSQL"),
    ] {
        let out = herd_run(&file, &dir.join("out"), url).output().unwrap();
        let all = text(&out);
        assert_eq!(out.status.code(), Some(2), "{url:?}: {all}");
        assert!(all.contains(says), "{url:?}: {all}");
    }
}

#[test]
fn an_unreachable_postgres_is_named_with_its_cause_and_no_password() {
    let dir = TempDir::new("store-refused");
    let file = scenario(&dir, "http://127.0.0.1:9/", "1s");
    // Port 1 on loopback: refused at once.
    let url = "postgres://herd:pl%23nt@127.0.0.1:1/herd";
    let start = Instant::now();
    let out = herd_run(&file, &dir.join("out"), url).output().unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{:?}",
        start.elapsed()
    );
    assert!(
        all.contains("opening the run store postgres://herd:***@127.0.0.1:1/herd")
            && all.contains("refused")
            && all.contains("is the server running at 127.0.0.1:1"),
        "{all}"
    );
    assert!(!all.contains("pl%23nt") && !all.contains("pl#nt"), "{all}");
    // Unencoded, the password breaks the URL: still never shown, and the fix is named.
    let url = "postgres://herd:pl#nt/ed?pw@127.0.0.1:1/herd";
    let out = herd_run(&file, &dir.join("out"), url).output().unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(all.contains("percent-encode"), "{all}");
    for part in ["pl#nt", "nt/ed", "ed?pw"] {
        assert!(!all.contains(part), "{part}: {all}");
    }
}

#[test]
fn a_run_killed_with_sigkill_reads_interrupted() {
    let server = serve();
    let dir = TempDir::new("store-kill");
    let file = scenario(&dir, &server.url(), "60s");
    let store = format!("sqlite:{}", dir.join("runs.db").display());
    let mut child = herd_run(&file, &dir.join("out"), &store)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.connections() < 2 {
        assert!(Instant::now() < deadline, "the run never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let status = || {
        rt.block_on(async {
            let s = Store::open(&store).await.unwrap();
            s.meta(None).await.unwrap().status
        })
    };
    assert_eq!(status(), "running");
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(status(), "interrupted");
}

fn herd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(args)
        .env_remove("HERD_STORE")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_missing_run_a_scenario_without_seed_and_a_file_that_is_no_saved_run_exit_2() {
    let dir = TempDir::new("store-exit-2");
    let out = dir.join("out");
    let o = out.to_str().unwrap();
    // A store holding run 1 only.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let s = Store::open(&herd_store::default_url(&out)).await.unwrap();
        let run = s.begin("one", "one.toml", 0).await.unwrap();
        s.finish(run.id, "finished").await.unwrap();
        s.close().await;
    });
    let file = scenario(&dir, "http://127.0.0.1:9/", "1s");
    let not_a_run = dir.write("result.json", "{\"requests\": 3}");
    for (args, says) in [
        (vec!["report", "99", "--out", o], "run 99 is not in"),
        (vec!["compare", "1", "99", "--out", o], "run 99 is not in"),
        (
            vec!["seed", file.to_str().unwrap()],
            "has no [seed] section",
        ),
        (
            vec!["import", not_a_run.to_str().unwrap(), "--out", o],
            "holds no saved herd run",
        ),
    ] {
        let o = herd(&args);
        let all = text(&o);
        assert_eq!(o.status.code(), Some(2), "herd {args:?}: {all}");
        assert!(all.contains(says), "herd {args:?}: {all}");
    }
}

#[test]
fn a_runs_db_that_is_no_database_is_named_with_what_to_do() {
    let dir = TempDir::new("store-corrupt");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let db = out.join("runs.db");
    // Not SQLite at all, then a SQLite header over a damaged body.
    let mut damaged = b"SQLite format 3\0".to_vec();
    damaged.extend(std::iter::repeat_n(0xA5u8, 8192));
    for bytes in [
        &b"these are not the runs you are looking for\n".repeat(200)[..],
        &damaged,
    ] {
        std::fs::write(&db, bytes).unwrap();
        let file = scenario(&dir, "http://127.0.0.1:9/", "1s");
        for args in [
            vec!["report", "--out", out.to_str().unwrap()],
            vec![
                "run",
                "--no-probe",
                "--out",
                out.to_str().unwrap(),
                file.to_str().unwrap(),
            ],
        ] {
            let o = herd(&args);
            let all = text(&o);
            assert_eq!(o.status.code(), Some(2), "herd {args:?}: {all}");
            assert!(
                all.contains(&format!(
                    "the run store {} is not a herd run store",
                    db.display()
                )) && all.contains(&format!("mv {0} {0}.bad", db.display())),
                "herd {args:?}: {all}"
            );
        }
        assert_eq!(
            std::fs::read(&db).unwrap(),
            bytes,
            "the file is left as it was"
        );
    }
}

/// Eight `herd run`s started at the same moment on one store: every one exits 0 and is
/// recorded under its own id, its name and its rows its own. `held` is called once they are
/// all started; it holds the store's write lock a while, so that all eight reach the id's
/// allocation before any can write (a read of `MAX(id)` does not wait for it).
fn eight_runs_at_once_each_get_their_own_id(
    store: &str,
    dir: &TempDir,
    target: &str,
    held: impl FnOnce(),
) {
    let file = scenario(dir, target, "200ms");
    let children: Vec<_> = (0..8)
        .map(|i| {
            herd_run(&file, &dir.join("out"), store)
                .args(["--name", &format!("at-once-{i}")])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    held();
    let mut ids = std::collections::BTreeMap::new();
    for (i, c) in children.into_iter().enumerate() {
        let o = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "run {i}: {err}");
        let id: i64 = err
            .split("herd run: run ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("run {i} names its id: {err}"));
        assert!(
            ids.insert(id, format!("at-once-{i}")).is_none(),
            "id {id} twice"
        );
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let s = Store::open(store).await.unwrap();
        let listed: Vec<(i64, String)> = s
            .list()
            .await
            .unwrap()
            .into_iter()
            .filter(|m| m.name.starts_with("at-once-"))
            .map(|m| (m.id, m.name))
            .collect();
        assert_eq!(listed.len(), 8, "{listed:?}");
        for (id, name) in listed {
            assert_eq!(ids.get(&id), Some(&name), "run {id}");
            let data = s.load_run(Some(id)).await.unwrap();
            assert_eq!(data.meta.status, "finished", "run {id}");
            assert!(
                data.final_report.is_some_and(|r| r.requests > 0),
                "run {id}"
            );
        }
        s.close().await;
    });
}

#[test]
fn eight_runs_started_at_once_on_one_sqlite_store_are_all_recorded() {
    let server = serve();
    let dir = TempDir::new("store-at-once");
    let db = dir.join("runs.db");
    let store = format!("sqlite:{}", db.display());
    let rt = tokio::runtime::Runtime::new().unwrap();
    // The store exists (in WAL mode, where readers pass a writer) and its write lock is
    // held while the eight start: they meet at the id's allocation (herd's busy wait is 5 s).
    let mut lock = rt.block_on(async {
        use sqlx::Connection as _;
        Store::open(&store).await.unwrap().close().await;
        let mut c = sqlx::SqliteConnection::connect(&store).await.unwrap();
        sqlx::query("BEGIN IMMEDIATE")
            .execute(&mut c)
            .await
            .unwrap();
        c
    });
    eight_runs_at_once_each_get_their_own_id(&store, &dir, &server.url(), || {
        std::thread::sleep(Duration::from_millis(2000));
        rt.block_on(sqlx::query("ROLLBACK").execute(&mut lock))
            .unwrap();
    });
}
