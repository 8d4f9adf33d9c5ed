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

/// A player waiting out the connect backoff when the run stops (by a signal, or by its plan's
/// end) stops at once: the run is not held up to the backoff's 2 s longer, and the op it held
/// back, which sent nothing, is not tried — so the step's connect errors are its op's
/// `transport_error.connect` and the run's (issue #27).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_wakes_a_player_waiting_out_the_connect_backoff() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    // One player on a closed port fails at 0, 50, 150, 350 and 750 ms, then waits 800 ms:
    // a stop at 1 s (or the plan's end at 1 s) lands 550 ms into the wait. The same for a
    // gRPC player, whose calls wait out the backoff the same way.
    let proto = herd_testkit::py::arena_proto().display().to_string();
    let src = |grpc: bool, duration: &str| {
        let (target, op) = if grpc {
            (
                format!("grpc://127.0.0.1:{port}\"\nproto = \"{proto}"),
                "call = \"herd.arena.Arena/Join\"\nbody = '{\"player\": \"p\"}'",
            )
        } else {
            (format!("http://127.0.0.1:{port}"), "path = \"/\"")
        };
        format!(
            "[target]\nurl = \"{target}\"\n[[op]]\nname = \"a\"\n{op}\n\
             [[step]]\nplayers = 1\nduration = \"{duration}\"\n"
        )
    };
    for (grpc, by_signal) in [(false, true), (false, false), (true, true), (true, false)] {
        let s = herd_driver::Scenario::parse(
            "t.toml",
            &src(grpc, if by_signal { "10s" } else { "1s" }),
            &[],
        )
        .unwrap();
        let (tx, rx) = tokio::sync::watch::channel(false);
        if by_signal {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                tx.send_replace(true);
            });
        }
        let opts = RunOptions {
            stop: Some(rx),
            grace: Duration::from_secs(5),
            ..options()
        };
        let t = Instant::now();
        let report = herd_driver::run(s, opts).await.unwrap();
        let took = t.elapsed();
        assert!(
            took < Duration::from_millis(1_300),
            "grpc {grpc}, by signal {by_signal}: took {took:?}: the backoff held the stop"
        );
        let failed = report.outcome_count("a", "transport_error.connect");
        assert!((4..=6).contains(&failed), "{failed} connects tried");
        assert_eq!(
            report.op_count("a"),
            failed,
            "no op recorded but the tried ones"
        );
        assert_eq!(report.phases[0].connect_errors, failed);
        assert_eq!(report.connect_errors, failed);
        assert!(report.connects_held >= 4, "{report:?}");
    }
}
