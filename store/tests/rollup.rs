//! Roll-ups end to end on SQLite: three minutes of 100 ms intervals through the run writer,
//! rolled up on a scaled-down policy, against the same rows unrolled (rollup_run/mod.rs).

mod rollup_run;

#[tokio::test]
async fn a_rolled_up_run_has_a_fifth_of_the_rows_and_the_same_numbers() {
    let dir = herd_testkit::TempDir::new("rollup");
    let url = format!("sqlite:{}", dir.join("runs.db").display());
    rollup_run::recorded_and_checked(&url).await;
    // The pages the roll-ups freed left the file: it holds the rows it keeps.
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&url).await.unwrap();
    let pragma = |p: &'static str| {
        let pool = pool.clone();
        async move {
            let row = sqlx::query(p).fetch_one(&pool).await.unwrap();
            sqlx::Row::get::<i64, _>(&row, 0)
        }
    };
    assert_eq!(pragma("PRAGMA auto_vacuum").await, 2, "incremental");
    let (free, pages) = (
        pragma("PRAGMA freelist_count").await,
        pragma("PRAGMA page_count").await,
    );
    assert!(
        free * 20 < pages,
        "{free} of {pages} pages free after the roll-ups"
    );
}
