//! The run store on a real PostgreSQL (started and removed by the test): a run recorded there
//! reads back, `herd report --store postgres://…` builds its report, and eight `herd run`s
//! started at once are each recorded under their own id.

use std::{
    collections::BTreeMap,
    process::Stdio,
    time::{Duration, Instant},
};

use herd_store::{Source, Store};
use herd_testkit::{Proto, Reply, Server, TempDir};
use integration_test::{Postgres, herd_cmd, privileged};

#[test]
fn runs_recorded_in_postgresql_read_back_and_report() {
    if !privileged("runs_recorded_in_postgresql_read_back_and_report") {
        return;
    }
    let pg = Postgres::start().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let id = rt.block_on(async {
        let store = Store::open(&pg.url).await.unwrap();
        let run = store.begin("pg", "pg.toml", 1_000).await.unwrap();
        for seq in 0..3u64 {
            let iv = herd_model::ProbeInterval {
                rolled_up: None,
                at_ns: 1_000 + seq * 1_000_000_000,
                interval_ns: 1_000_000_000,
                containers: vec![],
                pairs: vec![],
                lost: 0,
                services: Vec::new(),
            };
            store
                .put(run.id, Source::Probe, seq, iv.at_ns, &iv)
                .await
                .unwrap();
        }
        store
            .put(run.id, Source::ProbeMissing, 0, 0, &"test")
            .await
            .unwrap();
        store.finish(run.id, "finished").await.unwrap();
        // A second open sees the same rows: they were committed, not buffered.
        let again = Store::open(&pg.url).await.unwrap();
        let rows: Vec<herd_model::ProbeInterval> = again.rows(run.id, Source::Probe).await.unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(again.meta(Some(run.id)).await.unwrap().status, "finished");
        run.id
    });
    let out = herd_testkit::TempDir::new("it-pg");
    let st = herd_cmd()
        .args(["report", "--store", &pg.url, "--out"])
        .arg(&out)
        .arg(id.to_string())
        .status()
        .unwrap();
    assert!(st.success());
    let md = std::fs::read_to_string(out.join(format!("run-{id}.md"))).unwrap();
    assert!(
        md.contains("# herd run 1 — pg") && md.contains("3 probe intervals"),
        "{md}"
    );
    eight_runs_started_at_once_get_their_own_ids(&pg, &rt);
}

/// Eight `herd run`s started at once on the one PostgreSQL store (issue #27: on a shared
/// store they read the same `MAX(id)` and all but one failed on the duplicate key). The test
/// holds an EXCLUSIVE lock on herd_runs while they start: reads of it pass, writes wait, so
/// all eight reach the id's allocation before any can insert; then it lets them go.
fn eight_runs_started_at_once_get_their_own_ids(pg: &Postgres, rt: &tokio::runtime::Runtime) {
    let server = Server::http(Proto::H1)
        .fallback(Reply::ok().body("ok"))
        .start_blocking();
    let dir = TempDir::new("it-pg-at-once");
    let file = dir.write(
        "s.toml",
        format!(
            "[target]\nurl = \"{}\"\n[player]\nthink = \"20ms\"\n[[op]]\nname = \"ping\"\n\
             path = \"/\"\n[[step]]\nplayers = 2\nduration = \"200ms\"\narrival = \"burst\"\n",
            server.url()
        ),
    );
    let mut lock = rt.block_on(async {
        use sqlx::Connection as _;
        let mut c = sqlx::PgConnection::connect(&pg.url).await.unwrap();
        sqlx::query("BEGIN").execute(&mut c).await.unwrap();
        sqlx::query("LOCK TABLE herd_runs IN EXCLUSIVE MODE")
            .execute(&mut c)
            .await
            .unwrap();
        c
    });
    let children: Vec<_> = (0..8)
        .map(|i| {
            herd_cmd()
                .args([
                    "run",
                    "--no-probe",
                    "--quiet",
                    "--grace",
                    "1s",
                    "--store",
                    &pg.url,
                ])
                .args(["--name", &format!("at-once-{i}"), "--out"])
                .arg(dir.join("out"))
                .arg(&file)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // Until every one waits on the lock (or 10 s): herd_runs' lock has eight waiters.
    let deadline = Instant::now() + Duration::from_secs(10);
    rt.block_on(async {
        let pool = sqlx::PgPool::connect(&pg.url).await.unwrap();
        loop {
            let (waiting,): (i64,) =
                sqlx::query_as("SELECT COUNT(*) FROM pg_locks WHERE NOT granted")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            if waiting >= 8 || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        pool.close().await;
        sqlx::query("ROLLBACK").execute(&mut lock).await.unwrap();
    });
    let mut ids = BTreeMap::new();
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
    rt.block_on(async {
        let s = Store::open(&pg.url).await.unwrap();
        let listed: Vec<_> = s
            .list()
            .await
            .unwrap()
            .into_iter()
            .filter(|m| m.name.starts_with("at-once-"))
            .collect();
        assert_eq!(listed.len(), 8, "{listed:?}");
        for m in listed {
            assert_eq!(ids.get(&m.id), Some(&m.name), "run {}", m.id);
            let data = s.load_run(Some(m.id)).await.unwrap();
            assert!(
                data.final_report.is_some_and(|r| r.requests > 0),
                "run {}",
                m.id
            );
        }
        s.close().await;
    });
}
