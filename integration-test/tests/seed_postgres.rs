//! `herd seed` into a real PostgreSQL (started and removed by the test) holding the demo
//! contour's schema: the seeds' 10 000 accounts + 1 000 guests with sessions, tokens the
//! backend's own lookup accepts, and a cleanup that leaves the target's own rows untouched.

use std::{
    path::Path,
    process::Output,
    time::{Duration, Instant},
};

use herd_contour::store::{Store, StoreOptions};
use herd_testkit::TempDir;
use integration_test::{Postgres, herd_cmd, privileged};

const SCENARIO: &str = r#"[target]
url = "http://127.0.0.1:1"

[[op]]
name = "session"
path = "/v1/session"
headers = { authorization = "Bearer token-{account}" }

[[step]]
players = 1
duration = "1s"

[seed]
url_env = "HERD_TEST_SEED_URL"
accounts = 10000
guests = 1000
account = "INSERT INTO accounts (id, name, kind) VALUES ({id}, {name}, {kind})"
session = "INSERT INTO sessions (token_hash, account_id) VALUES ({token_hash}, {id})"
"#;

fn herd_seed(scenario: &Path, url: &str, args: &[&str]) -> Output {
    let out = herd_cmd()
        .arg("seed")
        .arg(scenario)
        .args(args)
        .env("HERD_TEST_SEED_URL", url)
        .output()
        .unwrap();
    eprintln!(
        "herd seed {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Every row of the seeded tables, in a stable order, and how many tracking tables exist.
async fn snapshot(pool: &sqlx::PgPool) -> (Vec<(i64, String, String)>, Vec<(String, i64)>, i64) {
    let a = sqlx::query_as("SELECT id, name, kind FROM accounts ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap();
    let s = sqlx::query_as("SELECT token_hash, account_id FROM sessions ORDER BY token_hash")
        .fetch_all(pool)
        .await
        .unwrap();
    let (t,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM pg_tables WHERE tablename IN ('herd_seeded', 'herd_seedings')",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    (a, s, t)
}

#[test]
fn seeds_the_seeds_accounts_into_postgresql_and_removes_only_them() {
    if !privileged("seeds_the_seeds_accounts_into_postgresql_and_removes_only_them") {
        return;
    }
    let pg = Postgres::start().unwrap();
    let dir = TempDir::new("it-seed-pg");
    let scenario = dir.write("seed.toml", SCENARIO);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let opts = StoreOptions {
        max_connections: 2,
        timeout: Duration::from_secs(5),
        max_moves: 100,
    };
    // The target's schema, created by the backend's own code, and rows of its own: two
    // accounts with sessions, a game and a seat, all with ids herd will not use.
    let pool = rt.block_on(async {
        Store::open(&pg.url, opts).await.unwrap().close().await;
        let pool = sqlx::PgPool::connect(&pg.url).await.unwrap();
        for sql in [
            "INSERT INTO accounts (id, name, kind) VALUES (900001, 'alice', 'durable'), (900002, 'bob', 'guest')",
            "INSERT INTO sessions (token_hash, account_id) VALUES ('h-alice', 900001), ('h-bob', 900002)",
            "INSERT INTO games (id, seats, seats_taken, status, created_ms) VALUES (1, 2, 1, 'waiting', 0)",
            "INSERT INTO game_players (game_id, seat, account_id) VALUES (1, 0, 900001)",
        ] {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        pool
    });
    let before = rt.block_on(snapshot(&pool));

    let t = Instant::now();
    let out = herd_seed(&scenario, &pg.url, &[]);
    let took = t.elapsed();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "seeding 1: 10000 accounts + 1000 guests, 22000 rows (accounts 11000, sessions 11000)"
        ),
        "{stdout}"
    );
    // Reported, not asserted (performance is never asserted in a test).
    eprintln!(
        "22 000 rows (+ 22 000 tracking rows) into PostgreSQL: {took:?} for the whole command"
    );

    let (accounts, sessions, tracking) = rt.block_on(snapshot(&pool));
    assert_eq!(
        (accounts.len(), sessions.len(), tracking),
        (11_002, 11_002, 2)
    );
    assert_eq!(
        accounts[10_000],
        (10_001, "player-10000".into(), "guest".into())
    );
    // The backend's own lookup finds each account by the token its player sends.
    rt.block_on(async {
        let store = Store::open(&pg.url, opts).await.unwrap();
        assert_eq!(store.account_for_token("token-0").await.unwrap(), Some(1));
        let guest = store.session("token-10999").await.unwrap().unwrap();
        assert_eq!((guest.id, guest.kind.as_str()), (11_000, "guest"));
        store.close().await;
    });

    // Seeding again collides with seeding 1 and is refused without touching anything;
    // --reset replaces it.
    let again = herd_seed(&scenario, &pg.url, &["--set", "seed.batch=500"]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("still holds herd seeding(s) 1"), "{err}");
    assert_eq!(rt.block_on(snapshot(&pool)).0.len(), 11_002);
    let reset = herd_seed(&scenario, &pg.url, &["--reset"]);
    assert!(reset.status.success());
    let stdout = String::from_utf8_lossy(&reset.stdout);
    assert!(
        stdout.contains("removed seeding 1: 22000 rows")
            && stdout.contains("seeding 1: 10000 accounts"),
        "{stdout}"
    );

    let t = Instant::now();
    let clean = herd_seed(&scenario, &pg.url, &["--cleanup"]);
    eprintln!(
        "cleanup of 22 000 rows: {:?} for the whole command",
        t.elapsed()
    );
    assert!(clean.status.success());
    assert_eq!(
        rt.block_on(snapshot(&pool)),
        before,
        "only the target's own rows remain"
    );
    rt.block_on(pool.close());
}

#[test]
fn a_bad_or_unreachable_postgresql_fails_without_its_password() {
    if !privileged("a_bad_or_unreachable_postgresql_fails_without_its_password") {
        return;
    }
    let pg = Postgres::start().unwrap();
    let dir = TempDir::new("it-seed-pgbad");
    let scenario = dir.write("seed.toml", SCENARIO);
    // A database without the target's tables (trust auth accepts any password).
    let port = pg
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let url = format!("postgres://postgres:s3cret@127.0.0.1:{port}/template1");
    let out = herd_seed(&scenario, &url, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("relation \"accounts\" does not exist")
            && err.contains(&format!(
                "postgres://postgres:***@127.0.0.1:{port}/template1"
            ))
            && !err.contains("s3cret"),
        "{err}"
    );
    // Nothing of herd's is left there either.
    let leftovers = herd_seed(&scenario, &url, &["--list"]);
    assert!(String::from_utf8_lossy(&leftovers.stdout).contains("holds no herd seeding"));

    drop(pg);
    // The server is gone: the same URL now fails at connect, naming the host.
    let out = herd_seed(&scenario, &url, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "cannot reach the seed database at 127.0.0.1:{port}"
        )) && !err.contains("s3cret"),
        "{err}"
    );
}
