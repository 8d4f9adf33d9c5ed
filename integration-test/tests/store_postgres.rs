//! The run store on a real PostgreSQL (started and removed by the test): a run recorded there
//! reads back, and `herd report --store postgres://…` builds its report.

use herd_store::{Source, Store};
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
}
