//! Stopping a run: no new ops, in-flight ones finish within the grace, results reported.

use std::time::{Duration, Instant};

use herd_driver::RunOptions;

use crate::support::{Proto, TestServer, options, scenario};

async fn stop_after(
    src: &str,
    proto: Proto,
    after: Duration,
    grace: Duration,
) -> (herd_model::RunResult, TestServer, Duration) {
    let server = TestServer::start(proto).await;
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        tx.send_replace(true);
    });
    let opts = RunOptions {
        stop: Some(rx),
        grace,
        ..options()
    };
    let t = Instant::now();
    let report = herd_driver::run(scenario(src, &server), opts)
        .await
        .unwrap();
    (report, server, t.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_lets_in_flight_ops_finish() {
    let src = "[target]\nurl = \"{url}\"\n[[op]]\nname = \"slow\"\npath = \"/delay/200\"\n[[step]]\nplayers = 3\nduration = \"10s\"\narrival = \"burst\"\n";
    let (report, server, took) = stop_after(
        src,
        Proto::H1,
        Duration::from_millis(500),
        Duration::from_secs(2),
    )
    .await;
    assert!(report.stopped_early);
    assert!(took < Duration::from_millis(1_200), "took {took:?}");
    assert_eq!(report.requests, server.requests());
    assert_eq!(report.outcome_count("slow", "ok"), report.requests);
    assert!(report.requests >= 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_past_the_grace_are_cancelled() {
    let src = "[target]\nurl = \"{url}\"\ntransport = \"h2c\"\n[[op]]\nname = \"stuck\"\npath = \"/delay/5000\"\n[[step]]\nplayers = 3\nduration = \"10s\"\narrival = \"burst\"\n";
    let (report, server, took) = stop_after(
        src,
        Proto::H2c,
        Duration::from_millis(300),
        Duration::from_millis(300),
    )
    .await;
    assert!(took < Duration::from_millis(1_200), "took {took:?}");
    assert_eq!(report.outcome_count("stuck", "cancelled"), 3);
    assert_eq!(report.requests, server.requests());
    let cancelled = &report.phases[0].ops[0].outcomes[0];
    assert!(cancelled.latency.p50_us >= 550_000, "{cancelled:?}");
}
