//! The executor against real SQLite databases holding the demo contour's real schema
//! (created by its backend's own `Store::open`): exact rows in, exact rows out.

use std::time::Duration;

use herd_contour::store::{Store, StoreOptions, token_hash};
use herd_driver::Scenario;
use herd_seed::{SeedDb, SeedSpec, Seeding, TableRows, spec::SeedUrl};
use herd_testkit::TempDir;

/// A temporary directory holding a SQLite database with the demo contour's real schema
/// (created by the backend's own `Store::open`) and a file with its URL.
struct Db {
    dir: TempDir,
    url: String,
}

impl Db {
    async fn new(name: &str) -> Self {
        let dir = TempDir::new(&format!("seed-{name}"));
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

    /// A scenario seeding `accounts` + `guests` from `id_start`, URL from the file; names
    /// and tokens are numbered by `{account}`, or by `{id}` when seedings must not overlap.
    fn spec(&self, accounts: u64, guests: u64, id_start: i64, batch: usize) -> SeedSpec {
        self.spec_by(accounts, guests, id_start, batch, "{account}")
    }

    fn spec_by(
        &self,
        accounts: u64,
        guests: u64,
        id_start: i64,
        batch: usize,
        by: &str,
    ) -> SeedSpec {
        let src = format!(
            r#"[target]
url = "http://127.0.0.1:1"
[[op]]
name = "state"
path = "/state"
[[step]]
players = 1
duration = "1s"
[seed]
url_file = "seed-url"
accounts = {accounts}
guests = {guests}
id_start = {id_start}
batch = {batch}
name = "player-{by}"
token = "token-{by}"
account = "INSERT INTO accounts (id, name, kind) VALUES ({{id}}, {{name}}, {{kind}})"
session = "INSERT INTO sessions (token_hash, account_id) VALUES ({{token_hash}}, {{id}})"
"#
        );
        let file = self.dir.join("s.toml");
        Scenario::parse(&file.display().to_string(), &src, &[])
            .unwrap()
            .seed
            .unwrap()
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

fn never() -> bool {
    false
}

#[tokio::test]
async fn seeds_accounts_and_guests_whose_tokens_the_backend_accepts() {
    let db = Db::new("tokens").await;
    let spec = db.spec(90, 10, 1, 32);
    let seed = SeedDb::connect(&spec).await.unwrap();
    let done = seed.seed(&spec, "s.toml", &never).await.unwrap();
    assert_eq!(done.id, 1);
    assert_eq!(
        done.tables,
        [
            TableRows {
                table: "accounts".into(),
                rows: 100
            },
            TableRows {
                table: "sessions".into(),
                rows: 100
            },
        ]
    );
    let (accounts, sessions, tracking) = db.snapshot().await;
    assert_eq!((accounts.len(), sessions.len(), tracking), (100, 100, 2));
    assert_eq!(accounts[0], (1, "player-0".into(), "durable".into()));
    assert_eq!(accounts[89].2, "durable");
    assert_eq!(accounts[90], (91, "player-90".into(), "guest".into()));
    // The hash is the backend's: its own session lookup finds account k + 1 for the token
    // player k will send.
    assert!(sessions.contains(&(token_hash("token-41"), 42)));
    let store = Store::open(
        &db.url,
        StoreOptions {
            max_connections: 1,
            timeout: Duration::from_secs(5),
            max_moves: 100,
        },
    )
    .await
    .unwrap();
    assert_eq!(store.account_for_token("token-41").await.unwrap(), Some(42));
    let guest = store.session("token-95").await.unwrap().unwrap();
    assert_eq!((guest.id, guest.kind.as_str()), (96, "guest"));
    store.close().await;
    let list = seed.seedings().await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!((list[0].status.as_str(), list[0].rows), ("seeded", 200));
    seed.close().await;
}

#[tokio::test]
async fn cleanup_removes_exactly_herds_rows_and_its_tables() {
    let db = Db::new("cleanup").await;
    // The target's own rows, including a game the load would create and a seat of a
    // pre-existing player in it.
    let p = db.pool().await;
    for sql in [
        "INSERT INTO accounts (id, name, kind) VALUES (50000, 'alice', 'durable'), (50001, 'bob', 'guest')",
        "INSERT INTO sessions (token_hash, account_id) VALUES ('h-alice', 50000), ('h-bob', 50001)",
        "INSERT INTO games (id, seats, seats_taken, status, created_ms) VALUES (1, 2, 1, 'waiting', 0)",
        "INSERT INTO game_players (game_id, seat, account_id) VALUES (1, 0, 50000)",
    ] {
        sqlx::query(sql).execute(&p).await.unwrap();
    }
    p.close().await;
    let before = db.snapshot().await;
    assert_eq!(before.2, 0);
    // The seeds' shape: 10 000 accounts + 1 000 guests with sessions.
    let spec = db.spec(10_000, 1_000, 1, 1_000);
    let seed = SeedDb::connect(&spec).await.unwrap();
    let done = seed.seed(&spec, "s.toml", &never).await.unwrap();
    // Reported, never asserted: tests do not time things.
    eprintln!("SQLite: {}", done.line(seed.shown()));
    assert_eq!(db.snapshot().await.0.len(), 11_002);
    let cleaned = seed.cleanup(None).await.unwrap().unwrap();
    eprintln!("SQLite: {}", cleaned.line());
    assert_eq!((cleaned.id, cleaned.rows(), cleaned.gone), (1, 22_000, 0));
    // Sessions first (they reference accounts), then accounts.
    assert_eq!(cleaned.tables[0].table, "sessions");
    let after = db.snapshot().await;
    assert_eq!(
        after, before,
        "the target's own rows, and only they, remain"
    );
    let p = db.pool().await;
    let (seats,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM game_players")
        .fetch_one(&p)
        .await
        .unwrap();
    assert_eq!(seats, 1);
    p.close().await;
    // Nothing left to remove is not an error.
    assert!(seed.cleanup(None).await.unwrap().is_none());
    seed.close().await;
}

#[tokio::test]
async fn cleanup_takes_the_last_or_a_given_seeding_and_reset_takes_all() {
    let db = Db::new("reset").await;
    let seed = SeedDb::connect(&db.spec(1, 0, 1, 10)).await.unwrap();
    for start in [1, 101, 201] {
        let spec = db.spec_by(50, 5, start, 20, "{id}");
        seed.seed(&spec, "s.toml", &never).await.unwrap();
    }
    let ids = |l: Vec<Seeding>| l.iter().map(|s| s.id).collect::<Vec<_>>();
    assert_eq!(ids(seed.seedings().await.unwrap()), [1, 2, 3]);
    // The last one by default.
    assert_eq!(seed.cleanup(None).await.unwrap().unwrap().id, 3);
    // A given one.
    let c = seed.cleanup(Some(1)).await.unwrap().unwrap();
    assert_eq!((c.id, c.rows()), (1, 110));
    assert!(seed.cleanup(Some(1)).await.unwrap().is_none());
    let (accounts, _, tables) = db.snapshot().await;
    assert_eq!(accounts.first().map(|a| a.0), Some(101));
    assert_eq!((accounts.len(), tables), (55, 2));
    // Seeding the same ids again collides with seeding 2 and says how to get rid of it.
    let spec = db.spec_by(50, 5, 101, 20, "{id}");
    let e = format!(
        "{:#}",
        seed.seed(&spec, "s.toml", &never).await.unwrap_err()
    );
    assert!(
        e.contains("accounts already holds 20 rows whose id")
            && e.contains("still holds herd seeding(s) 2")
            && e.contains("--reset"),
        "{e}"
    );
    // --reset: every previous seeding goes, then the new one is the only one.
    assert_eq!(seed.reset().await.unwrap().len(), 1);
    let (accounts, sessions, tables) = db.snapshot().await;
    assert_eq!((accounts.len(), sessions.len(), tables), (0, 0, 0));
    seed.seed(&spec, "s.toml", &never).await.unwrap();
    assert_eq!(ids(seed.seedings().await.unwrap()), [1]);
    seed.close().await;
}

#[tokio::test]
async fn a_failed_or_interrupted_seeding_leaves_nothing_behind() {
    let db = Db::new("partial").await;
    let p = db.pool().await;
    sqlx::query("INSERT INTO accounts (id, name) VALUES (45, 'owned-by-the-target')")
        .execute(&p)
        .await
        .unwrap();
    p.close().await;
    let before = db.snapshot().await;
    // Batches 1..=4 commit, batch 5 meets id 45: the whole seeding is rolled back out.
    let spec = db.spec(100, 0, 1, 10);
    let seed = SeedDb::connect(&spec).await.unwrap();
    let e = format!(
        "{:#}",
        seed.seed(&spec, "s.toml", &never).await.unwrap_err()
    );
    assert!(
        e.contains("seeding 1 stopped; the rows it had added are removed")
            && e.contains("accounts already holds 1 rows whose id"),
        "{e}"
    );
    assert_eq!(db.snapshot().await, before);
    // Ctrl-C between batches: the same.
    let spec = db.spec(40, 0, 1, 10);
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let stop = || calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 2;
    let e = format!("{:#}", seed.seed(&spec, "s.toml", &stop).await.unwrap_err());
    assert!(e.contains("interrupted after 20 of 40 accounts"), "{e}");
    assert_eq!(db.snapshot().await, before);
    seed.close().await;
}

#[tokio::test]
async fn unreachable_or_missing_databases_fail_clearly_without_the_password() {
    let db = Db::new("bad").await;
    let spec = db.spec(1, 0, 1, 10);
    let url_file = db.dir.join("seed-url");
    let connect = |url: &str| {
        std::fs::write(&url_file, url).unwrap();
        SeedDb::connect(&spec)
    };
    // Nothing listens on port 1 of loopback.
    let e = format!(
        "{:#}",
        connect("postgres://herd:s3cr%65t@127.0.0.1:1/game")
            .await
            .err()
            .unwrap()
    );
    assert!(!e.contains("s3cr"), "{e}");
    assert!(
        e.contains("cannot reach the seed database at 127.0.0.1:1")
            && e.contains("postgres://herd:***@127.0.0.1:1/game")
            && e.contains(&format!("the file {}", url_file.display()))
            && e.contains("start it, or fix the URL"),
        "{e}"
    );
    let missing = db.dir.join("nope.db");
    let e = format!(
        "{:#}",
        connect(&format!("sqlite:{}", missing.display()))
            .await
            .err()
            .unwrap()
    );
    assert!(
        e.contains(&missing.display().to_string()) && e.contains("must exist"),
        "{e}"
    );
    let e = format!("{:#}", connect("mysql://u:pw@h/db").await.err().unwrap());
    assert!(
        e.contains("neither postgres://") && e.contains("mysql://u:***@h/db") && !e.contains("pw@"),
        "{e}"
    );
    std::fs::remove_file(&url_file).unwrap();
    let e = format!("{:#}", SeedDb::connect(&spec).await.err().unwrap());
    assert!(e.contains("url_file") && e.contains("seed-url"), "{e}");
    let mut by_env = spec.clone();
    by_env.url = SeedUrl::Env("HERD_TEST_SEED_URL_NEVER_SET".into());
    let e = format!("{:#}", SeedDb::connect(&by_env).await.err().unwrap());
    assert!(
        e.starts_with("HERD_TEST_SEED_URL_NEVER_SET is not set"),
        "{e}"
    );
}
