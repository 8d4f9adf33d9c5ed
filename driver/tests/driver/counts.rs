//! Request and connection counts match the server's own, exactly, for every transport and
//! connection model; steps, arrivals and the event stream.

use std::time::Duration;

use crate::support::{Proto, TestServer, options, run, scenario};
use herd_model::DriverEvent;

async fn counts(proto: Proto, pool: Option<usize>) {
    let server = TestServer::start(proto).await;
    let conns = pool.map_or(String::new(), |n| {
        format!("connections = \"pool\"\npool_size = {n}")
    });
    let src = format!(
        r#"
[target]
url = "{{url}}"
transport = "{}"
{conns}
[player]
think = "5ms"
[[op]]
name = "ok"
path = "/ok"
check = {{ json = {{ "/ok" = true }} }}
[[step]]
players = 6
duration = "700ms"
arrival = "burst"
"#,
        proto.name()
    );
    let report = run(scenario(&src, &server)).await;
    assert_eq!(
        report.requests,
        server.requests(),
        "driver vs server request count"
    );
    assert!(
        report.requests >= 6 * 20,
        "only {} requests",
        report.requests
    );
    assert_eq!(report.outcome_count("ok", "ok"), report.requests);
    let want = pool.unwrap_or(6) as u64;
    assert_eq!(
        server.connections(),
        want,
        "connections the server accepted"
    );
    assert_eq!(
        (report.connects, report.reconnects, report.connect_errors),
        (want, 0, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_per_player_counts_match_the_server() {
    counts(Proto::H1, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_per_player_counts_match_the_server() {
    counts(Proto::H2c, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_pool_counts_match_the_server() {
    counts(Proto::H1, Some(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_pool_counts_match_the_server() {
    counts(Proto::H2c, Some(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_ops_bounds_each_player() {
    let server = TestServer::start(Proto::H1).await;
    let src = "[target]\nurl = \"{url}\"\n[player]\nmax_ops = 7\n[[op]]\nname = \"ok\"\npath = \"/ok\"\n[[step]]\nplayers = 3\nduration = \"300ms\"\narrival = \"burst\"\n";
    let report = run(scenario(src, &server)).await;
    assert_eq!(report.requests, 21);
    assert_eq!(server.requests(), 21);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_add_and_retire_players_and_stream_events() {
    let server = TestServer::start(Proto::H2c).await;
    let src = r#"
[target]
url = "{url}"
transport = "h2c"
[player]
think = "10ms"
[[op]]
name = "ok"
path = "/ok"
[[step]]
players = 2
duration = "400ms"
arrival = "burst"
[[step]]
players = 5
duration = "600ms"
ramp = "300ms"
[[step]]
players = 1
duration = "300ms"
arrival = "burst"
"#;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let opts = herd_driver::RunOptions {
        events: Some(tx),
        ..options()
    };
    let report = herd_driver::run(scenario(src, &server), opts)
        .await
        .unwrap();

    assert_eq!(report.requests, server.requests());
    // Retiring players in step 3 opens nothing; the 5 players of step 2 are 5 connections.
    assert_eq!(server.connections(), 5);
    let players: Vec<usize> = report.phases.iter().map(|s| s.players).collect();
    assert_eq!(players, vec![2, 5, 1]);
    let per_step: u64 = report.phases.iter().map(|s| s.ops[0].count).sum();
    assert_eq!(per_step, report.requests);
    assert!(report.phases.iter().all(|s| s.ops[0].count > 0));

    // Burst: step 1's two players connect together. Gradual: step 2's three new players
    // arrive over a 300 ms ramp, at 0, 100 and 200 ms; each connect may lag its arrival by
    // a few tens of ms on a busy machine, so the spread is checked, not each gap.
    let accepted = server.accepted();
    assert!(
        accepted[1] - accepted[0] < Duration::from_millis(50),
        "{accepted:?}"
    );
    let spread = accepted[4] - accepted[2];
    assert!(
        spread >= Duration::from_millis(120) && spread <= Duration::from_millis(400),
        "gradual arrivals spread over {spread:?}"
    );

    let mut events = Vec::new();
    while let Ok(e) = rx.try_recv() {
        events.push(e);
    }
    let kinds: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            DriverEvent::PhaseEnd(s) => Some(s.phase.clone()),
            DriverEvent::Done(_) => Some("done".into()),
            DriverEvent::Interval(_) => None,
        })
        .collect();
    assert_eq!(kinds, vec!["step 1", "step 2", "step 3", "done"]);
    let intervals: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            DriverEvent::Interval(i) => Some(i),
            _ => None,
        })
        .collect();
    assert!(intervals.len() >= 6, "{} intervals", intervals.len());
    assert_eq!(intervals.iter().map(|i| i.players).max(), Some(5));
    let timeline: u64 = intervals.iter().flat_map(|i| &i.ops).map(|o| o.count).sum();
    assert_eq!(
        timeline, report.requests,
        "the timeline holds every op once"
    );
    // Each interval with ops names its step; the one where the plan's last step ends is
    // that step's tail, not a time after the plan.
    for i in intervals.iter().filter(|i| !i.ops.is_empty()) {
        assert!(
            i.phase.is_some(),
            "interval {} has ops and no step",
            i.index
        );
    }
    let last = intervals.iter().rfind(|i| !i.ops.is_empty()).unwrap();
    assert_eq!(last.phase.as_deref(), Some("step 3"));
    assert!(
        intervals
            .iter()
            .all(|i| i.driver.cores == 2 && i.driver.rss_bytes > 0)
    );
    for e in &events {
        let json = serde_json::to_string(e).unwrap();
        assert_eq!(&serde_json::from_str::<DriverEvent>(&json).unwrap(), e);
    }
}
