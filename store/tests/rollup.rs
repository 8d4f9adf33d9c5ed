//! Roll-ups end to end on SQLite: three minutes of 100 ms intervals through the run writer,
//! rolled up on a scaled-down policy, against the same rows unrolled (rollup_run/mod.rs).

mod rollup_run;

#[tokio::test]
async fn a_rolled_up_run_has_a_fifth_of_the_rows_and_the_same_numbers() {
    let dir = herd_testkit::TempDir::new("rollup");
    let url = format!("sqlite:{}", dir.join("runs.db").display());
    rollup_run::recorded_and_checked(&url).await;
}
