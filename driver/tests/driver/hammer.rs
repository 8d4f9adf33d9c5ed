//! The hammer against a token-bucket limiter, beside a step of players; players honouring
//! `Retry-After`.

use std::{sync::atomic::Ordering::SeqCst, time::Duration};

use crate::support::{Bucket, Proto, TestServer, run, scenario};

const CAPACITY: f64 = 20.0;
const PER_SECOND: f64 = 40.0;
const HAMMER: Duration = Duration::from_millis(1500);

async fn hammer(proto: Proto) {
    let (server, _quiet) = TestServer::exclusive(proto, Bucket::new(CAPACITY, PER_SECOND)).await;
    let src = format!(
        r#"
[target]
url = "{{url}}"
transport = "{}"
[player]
think = "20ms"
[[op]]
name = "state"
path = "/ok"
[[op]]
name = "games.list"
path = "/limited"
weight = 0
[[step]]
players = 2
duration = "1500ms"
arrival = "burst"
[hammer]
op = "games.list"
workers = 4
duration = "{}ms"
"#,
        proto.name(),
        HAMMER.as_millis()
    );
    let report = run(scenario(&src, &server)).await;
    let stats = &server.stats;
    let (granted, limited) = (stats.granted.load(SeqCst), stats.limited.load(SeqCst));

    // Exact: every request the limiter judged is one the driver recorded, and vice versa.
    assert_eq!(report.requests, server.requests());
    assert_eq!(report.outcome_count("games.list", "ok"), granted);
    assert_eq!(report.outcome_count("games.list", "rate_limited"), limited);
    let phases: Vec<&str> = report.phases.iter().map(|s| s.phase.as_str()).collect();
    assert_eq!(phases, vec!["step 1", "hammer"]);
    assert!(report.op_count("state") > 0);
    assert!(
        report
            .intervals
            .iter()
            .flat_map(|i| &i.ops)
            .any(|o| o.op == "hammer:games.list")
    );

    // The bucket starts full and refills at PER_SECOND by the server's clock, so over the
    // window w between the hammer's first and last request it grants CAPACITY +
    // PER_SECOND·w tokens, give or take the one token still refilling at the end. The
    // rate_limited share must match that to within that one token.
    let total = granted + limited;
    let (first, last) = stats
        .limited_window
        .lock()
        .unwrap()
        .expect("the hammer reached the limiter");
    let window = (last - first).as_secs_f64();
    let bucket_grants = CAPACITY + PER_SECOND * window;
    assert!(
        (granted as f64 - bucket_grants).abs() <= 1.0,
        "granted {granted}, bucket says {bucket_grants:.1}"
    );
    let share = limited as f64 / total as f64;
    let expected_share = 1.0 - bucket_grants / total as f64;
    let tolerance = 1.0 / total as f64;
    assert!(
        (share - expected_share).abs() <= tolerance,
        "rate_limited share {share:.4}, bucket {expected_share:.4} ± {tolerance:.4}"
    );
    // Enough rejections for the share to mean something: at least as many as grants.
    assert!(
        total as f64 > 2.0 * bucket_grants,
        "the hammer sent only {total} requests"
    );
    // The hammer ran for its duration and stopped by itself: its workers start within
    // milliseconds of the plan; the upper bound leaves room for a loaded machine.
    let d = HAMMER.as_secs_f64();
    assert!(
        window >= d - 0.1 && window <= d + 1.0,
        "window {window:.3}s for a {d}s hammer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_hammer_rate_limited_share_matches_the_bucket() {
    hammer(Proto::H1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_hammer_rate_limited_share_matches_the_bucket() {
    hammer(Proto::H2c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn players_pause_for_retry_after() {
    // Two tokens, no refill, `Retry-After: 3`: between them the two players get the two
    // tokens, then each gets one 429 and pauses past the 1.5 s step, where back to back
    // they would send thousands.
    let mut bucket = Bucket::new(2.0, 0.0);
    bucket.retry_after_s = 3;
    let server = TestServer::with_bucket(Proto::H1, bucket).await;
    let src = "[target]\nurl = \"{url}\"\n[[op]]\nname = \"list\"\npath = \"/limited\"\n[[step]]\nplayers = 2\nduration = \"1500ms\"\narrival = \"burst\"\n";
    let report = run(scenario(src, &server)).await;
    assert_eq!(report.requests, server.requests());
    assert_eq!(report.outcome_count("list", "ok"), 2);
    assert_eq!(report.outcome_count("list", "rate_limited"), 2);
    // The pauses reach 1.5 s past the step's end; the end of the run cuts them short.
    assert!(report.duration_ms < 2_500, "{} ms", report.duration_ms);
}
