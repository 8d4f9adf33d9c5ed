//! The registry example's player (a flow the file cannot express) run for real.

use std::time::Duration;

#[expect(
    dead_code,
    reason = "the example's `main` is its own entry point, unused here"
)]
#[path = "../../examples/registry.rs"]
mod registry;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_example_validates_images_and_finds_the_broken_one() {
    // Thousands of requests a second: a flood, kept away from the timing tests.
    let _quiet = crate::support::QUIET.write().await;
    let d = registry::demo(Duration::from_millis(600)).await.unwrap();
    let r = &d.report;
    assert_eq!(r.requests, d.served, "driver vs registry request count");
    assert!(d.valid > 0, "no image validated");
    // Every tag of library/broken has one rotten layer, and nothing else fails.
    assert!(d.invalid > 0, "the broken repository was never picked");
    assert_eq!(r.outcome_count("blob.get", "check_failed"), d.invalid);
    let ops = r.op_count("tags.list") + r.op_count("manifest.get") + r.op_count("blob.get");
    assert_eq!(ops, r.requests);
    assert_eq!(
        r.outcome_count("manifest.get", "ok"),
        r.op_count("manifest.get")
    );
    let players: Vec<usize> = r.phases.iter().map(|s| s.players).collect();
    assert_eq!(players, vec![4, 8]);
}
