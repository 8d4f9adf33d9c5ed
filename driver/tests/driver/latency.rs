//! A server with a known 50 ms delay: the driver's p50 lands within ±5 ms of it.

use crate::support::{Bucket, Proto, TestServer, run, scenario};

async fn p50_of_a_50ms_server(proto: Proto) {
    let (server, _quiet) = TestServer::exclusive(proto, Bucket::new(1e9, 0.0)).await;
    let src = format!(
        "[target]\nurl = \"{{url}}\"\ntransport = \"{}\"\n[[op]]\nname = \"slow\"\npath = \"/delay/50\"\n[[step]]\nplayers = 4\nduration = \"800ms\"\narrival = \"burst\"\n",
        proto.name()
    );
    let report = run(scenario(&src, &server)).await;
    let op = &report.phases[0].ops[0];
    assert!(op.count >= 4 * 10, "{} samples", op.count);
    assert_eq!(report.outcome_count("slow", "ok"), op.count);
    let p50 = op.latency.p50_us as i64;
    assert!((p50 - 50_000).abs() <= 5_000, "{proto:?} p50 {p50} µs");
    assert!(op.latency.max_us >= 50_000 && op.latency.p99_us >= op.latency.p50_us);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_p50_matches_the_server_delay() {
    p50_of_a_50ms_server(Proto::H1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_p50_matches_the_server_delay() {
    p50_of_a_50ms_server(Proto::H2c).await;
}
