//! `herd run` with a `[seed]`: seeded before the load into a real SQLite database holding the
//! demo backend's schema, driven against that backend, cleaned up after it.

use std::time::Duration;

use herd::{cmd::run::RunArgs, session};
use herd_contour::store::{Store, StoreOptions};
use herd_testkit::TempDir;

/// A temporary directory holding a SQLite database with the demo contour's real schema
/// (created by the backend's own `Store::open`) and a file with its URL.
struct Db {
    dir: TempDir,
    url: String,
}

impl Db {
    async fn new(name: &str) -> Self {
        let dir = TempDir::new(&format!("seed-run-{name}"));
        let url = format!("sqlite:{}", dir.join("target.db").display());
        let opts = StoreOptions {
            max_connections: 1,
            timeout: Duration::from_secs(5),
            max_moves: 100,
        };
        let store = Store::open(&format!("{url}?mode=rwc"), opts).await.unwrap();
        store.close().await;
        dir.write("seed-url", format!("{url}\n"));
        Db { dir, url }
    }

    async fn pool(&self) -> sqlx::SqlitePool {
        sqlx::SqlitePool::connect(&self.url).await.unwrap()
    }

    /// Every row of accounts and sessions, and whether herd's tables exist.
    async fn snapshot(&self) -> (Vec<(i64, String, String)>, Vec<(String, i64)>, i64) {
        let p = self.pool().await;
        let a = sqlx::query_as("SELECT id, name, kind FROM accounts ORDER BY id")
            .fetch_all(&p)
            .await
            .unwrap();
        let s = sqlx::query_as("SELECT token_hash, account_id FROM sessions ORDER BY token_hash")
            .fetch_all(&p)
            .await
            .unwrap();
        let (t,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM sqlite_master WHERE name IN ('herd_seeded', 'herd_seedings')",
        )
        .fetch_one(&p)
        .await
        .unwrap();
        p.close().await;
        (a, s, t)
    }
}

/// `herd run` against the demo contour's real backend on loopback: the run seeds before the
/// load (every player's token is accepted), prints and returns the counts, and removes the
/// rows at the end; with --keep-seed they stay until `herd seed --cleanup`.
#[test]
fn herd_run_seeds_before_the_load_and_cleans_up_after_it() {
    use herd::cmd::seed as seed_cmd;
    use herd_contour::backend::{Backend, BackendArgs};
    use herd_store::{Source, Store as RunStore};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let db = rt.block_on(Db::new("run"));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let addr = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let backend = Backend::start(
            &BackendArgs {
                listen: "127.0.0.1:0".parse().unwrap(),
                db: db.url.clone(),
                workers: 1,
                db_max_connections: 2,
                db_timeout: Duration::from_secs(5),
                max_connections: 64,
                max_body: 65536,
                max_moves: 100,
                max_history: 100,
                grace: Duration::from_secs(1),
                verbose: true,
                service_time: Duration::ZERO,
            },
            listener,
        )
        .await
        .unwrap();
        let addr = backend.local_addr();
        tokio::spawn(backend.serve(async {
            let _ = stop_rx.await;
        }));
        addr
    });
    let file = db.dir.join("run.toml");
    std::fs::write(
        &file,
        format!(
            r#"[target]
url = "http://{addr}"
[player]
think = "20ms"
max_ops = 20
[[op]]
name = "session"
path = "/v1/session"
headers = {{ authorization = "Bearer token-{{account}}" }}
check = {{ status = 200 }}
[[step]]
players = 10
duration = "600ms"
arrival = "burst"
[seed]
url_file = "seed-url"
accounts = 8
guests = 2
account = "INSERT INTO accounts (id, name, kind) VALUES ({{id}}, {{name}}, {{kind}})"
session = "INSERT INTO sessions (token_hash, account_id) VALUES ({{token_hash}}, {{id}})"
"#
        ),
    )
    .unwrap();
    let args = |keep_seed: bool| RunArgs {
        scenario: file.clone(),
        set: Vec::new(),
        name: None,
        out: db.dir.join("out"),
        store: None,
        store_file: None,
        containers: Vec::new(),
        no_probe: true,
        connect_syscalls: false,
        no_runq: false,
        runq_waits: false,
        interval: Duration::from_millis(200),
        grace: Duration::from_secs(1),
        quiet: true,
        keep_seed,
        insecure: false,
        hdr_log: None,
        listen: None,
        quick: Default::default(),
        shard: None,
        shard_slot: None,
        run_key: None,
        shard_timeout: Duration::from_secs(1),
    };
    let outcome = session::run(&args(false).config().unwrap()).unwrap();
    let seeded = outcome.seeded.as_ref().unwrap();
    assert_eq!((seeded.accounts, seeded.guests, seeded.rows()), (8, 2, 20));
    assert_eq!(outcome.seed_cleaned.as_ref().unwrap().rows(), 20);
    // The report's header says what was seeded and that it was removed, never where.
    let md_of = |o: &session::RunEnd| {
        let md = o
            .files
            .iter()
            .find(|f| f.extension().is_some_and(|e| e == "md"));
        std::fs::read_to_string(md.unwrap()).unwrap()
    };
    let md = md_of(&outcome);
    let id = seeded.id;
    assert!(
        md.contains(&format!(
            "Seeded before the load (seeding {id}): 8 accounts + 2 guests, 20 rows (accounts 10, sessions 10) in "
        )) && md.contains("; removed after the run: 20 rows in "),
        "{md}"
    );
    assert!(!md.contains("target.db") && !md.contains("sqlite:"), "{md}");
    let report: herd_model::RunResult = rt.block_on(async {
        let store = RunStore::open(&outcome.store).await.unwrap();
        store
            .rows(outcome.run_id, Source::Report)
            .await
            .unwrap()
            .pop()
            .unwrap()
    });
    // All ten players, guests included, were let in with the tokens herd seeded.
    assert!(report.requests >= 10, "{} requests", report.requests);
    assert_eq!(report.outcome_count("session", "ok"), report.requests);
    let (accounts, sessions, tables) = rt.block_on(db.snapshot());
    assert_eq!((accounts.len(), sessions.len(), tables), (0, 0, 0));

    let kept = session::run(&args(true).config().unwrap()).unwrap();
    assert!(kept.seed_cleaned.is_none());
    let md = md_of(&kept);
    assert!(
        md.contains(&format!(
            "kept after the run (--keep-seed): remove with `herd seed <scenario> --cleanup --seeding {}`",
            kept.seeded.as_ref().unwrap().id
        )),
        "{md}"
    );
    assert_eq!(rt.block_on(db.snapshot()).0.len(), 10);
    seed_cmd::run(&seed_cmd::SeedArgs {
        scenario: file.clone(),
        set: Vec::new(),
        cleanup: true,
        seeding: None,
        reset: false,
        list: false,
    })
    .unwrap();
    assert_eq!(rt.block_on(db.snapshot()), (vec![], vec![], 0));
    let _ = stop_tx.send(());
}

/// An unreachable seed database stops `herd run` before anything starts: no run is
/// recorded, and the message names the host, not the password.
#[test]
fn herd_run_fails_before_the_load_when_the_seed_database_is_unreachable() {
    use herd_store::Store as RunStore;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let db = rt.block_on(Db::new("run-unreachable"));
    std::fs::write(
        db.dir.join("seed-url"),
        "postgres://herd:s3cret@127.0.0.1:1/game\n",
    )
    .unwrap();
    let file = db.dir.join("run.toml");
    std::fs::write(
        &file,
        "[target]\nurl = \"http://127.0.0.1:1\"\n[[op]]\nname = \"a\"\npath = \"/\"\n\
         [[step]]\nplayers = 1\nduration = \"1s\"\n[seed]\nurl_file = \"seed-url\"\n\
         accounts = 1\naccount = \"INSERT INTO accounts (id) VALUES ({id})\"\n",
    )
    .unwrap();
    let out = db.dir.join("out");
    let e = session::run(
        &RunArgs {
            scenario: file,
            set: Vec::new(),
            name: None,
            out: out.clone(),
            store: None,
            store_file: None,
            containers: Vec::new(),
            no_probe: true,
            connect_syscalls: false,
            no_runq: false,
            runq_waits: false,
            interval: Duration::from_millis(200),
            grace: Duration::from_secs(1),
            quiet: true,
            keep_seed: false,
            insecure: false,
            hdr_log: None,
            listen: None,
            quick: Default::default(),
            shard: None,
            shard_slot: None,
            run_key: None,
            shard_timeout: Duration::from_secs(1),
        }
        .config()
        .unwrap(),
    )
    .err()
    .unwrap();
    let e = format!("{e:#}");
    assert!(
        e.starts_with("seeding before the load (nothing was started): cannot reach the seed database at 127.0.0.1:1")
            && !e.contains("s3cret"),
        "{e}"
    );
    let runs = rt.block_on(async {
        RunStore::open(&herd_store::default_url(&out))
            .await
            .unwrap()
            .list()
            .await
            .unwrap()
    });
    assert!(runs.is_empty(), "a run was recorded: {runs:?}");
}
