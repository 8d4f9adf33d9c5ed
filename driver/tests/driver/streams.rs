//! Streams and long polls: the server sends a known number of events of known types and
//! the driver counts them exactly, over HTTP/1.1 and h2c.

use herd_driver::Scenario;
use herd_model::{RunResult, StreamStats};

use crate::{
    support::{Proto, run},
    support_stream::StreamServer,
};

const PLAYERS: u64 = 3;

fn scenario(server: &StreamServer, proto: Proto, stream_op: &str) -> Scenario {
    let src = format!(
        r#"
[target]
url = "{url}"
transport = "{proto}"

[player]
think = "50ms"

[[op]]
name = "ok"
path = "/ok"

{stream_op}

[[step]]
players = {PLAYERS}
duration = "1200ms"
arrival = "burst"
"#,
        url = server.url(),
        proto = proto.name(),
    );
    Scenario::parse("streams.toml", &src, &[]).unwrap_or_else(|e| panic!("{e}"))
}

fn stream<'a>(r: &'a RunResult, op: &str) -> &'a StreamStats {
    r.play
        .stream(op)
        .unwrap_or_else(|| panic!("no stream stats for {op}: {:?}", r.play))
}

/// Events by type in the run, in each step and summed over the timeline all agree.
fn assert_phases_agree(r: &RunResult, op: &str) {
    let total = stream(r, op);
    let step = r.phases[0].play.stream(op).expect("step stream stats");
    assert_eq!(step.by_type, total.by_type, "step vs run");
    let mut timeline = std::collections::BTreeMap::<String, u64>::new();
    for iv in &r.intervals {
        if let Some(s) = iv.play.stream(op) {
            for (k, v) in &s.by_type {
                *timeline.entry(k.clone()).or_default() += v;
            }
        }
    }
    assert_eq!(timeline, total.by_type, "timeline vs run");
}

async fn sse_counted_exactly(proto: Proto) {
    let server = StreamServer::start(proto).await;
    let op = r#"
[[op]]
name = "subscribe"
path = "/sse/{player}/6/0"
kind = "stream"
format = "sse"
"#;
    let r = run(scenario(&server, proto, op)).await;
    let s = stream(&r, "subscribe");
    assert_eq!(s.kind, "sse");
    assert_eq!(s.events, 6 * PLAYERS);
    assert_eq!(s.by_type.get("move"), Some(&(4 * PLAYERS)));
    assert_eq!(s.by_type.get("chat"), Some(&(2 * PLAYERS)));
    assert_eq!(server.stats.sent("move"), 4 * PLAYERS);
    assert_eq!((s.opened, s.reconnects), (PLAYERS, 0));
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    let first = s.first_event.expect("time to first event");
    assert!(first.max_us > 0);
    assert_phases_agree(&r, "subscribe");
    // Every opening is a request: the driver's count is the server's.
    assert_eq!(r.requests, server.requests());
    assert_eq!(r.op_count("subscribe"), PLAYERS);
    assert!(r.op_count("ok") > 0);
    // h2c: the stream is one more HTTP/2 stream on the player's own connection; HTTP/1.1
    // needs a second connection per player for it.
    let per_player = if proto == Proto::H2c { 1 } else { 2 };
    assert_eq!(server.connections(), per_player * PLAYERS);
    assert_eq!(r.connects, per_player * PLAYERS);
    let table = herd_report::text::table(&r);
    assert!(
        table.contains("stream subscribe (sse): 18 events (move 12, chat 6)"),
        "{table}"
    );
}

#[tokio::test]
async fn sse_events_are_counted_by_type_h1() {
    sse_counted_exactly(Proto::H1).await;
}

#[tokio::test]
async fn sse_events_are_counted_by_type_h2c() {
    sse_counted_exactly(Proto::H2c).await;
}

async fn broken_ndjson_reconnects(proto: Proto) {
    let server = StreamServer::start(proto).await;
    let op = r#"
[[op]]
name = "feed"
path = "/ndjson/{player}/4/2"
kind = "stream"
format = "ndjson"
event_type = "/type"
reconnect = { min = "20ms", max = "40ms" }
"#;
    let r = run(scenario(&server, proto, op)).await;
    let s = stream(&r, "feed");
    // Two broken openings and the one that stays: 3 × 4 events per player.
    for p in 0..PLAYERS {
        assert_eq!(server.opens(&format!("ndjson/{p}")), 3, "player {p}");
    }
    assert_eq!(s.events, 12 * PLAYERS);
    assert_eq!(s.by_type.get("move"), Some(&(3 * 3 * PLAYERS)));
    assert_eq!(s.by_type.get("chat"), Some(&(3 * PLAYERS)));
    assert_eq!(s.reconnects, 2 * PLAYERS);
    assert_eq!(s.opened, 3 * PLAYERS);
    let errors: u64 = s.errors.values().sum();
    assert_eq!(errors, 2 * PLAYERS, "{:?}", s.errors);
    assert!(
        s.errors.keys().all(|k| k.starts_with("transport_error.")),
        "{:?}",
        s.errors
    );
    assert_phases_agree(&r, "feed");
    if proto == Proto::H2c {
        // A broken stream (RST_STREAM) leaves the player's connection to its calls.
        assert_eq!(server.connections(), PLAYERS);
        assert_eq!(r.outcome_count("ok", "ok"), r.op_count("ok"));
    }
}

#[tokio::test]
async fn a_broken_ndjson_stream_is_reopened_and_counted_h1() {
    broken_ndjson_reconnects(Proto::H1).await;
}

#[tokio::test]
async fn a_broken_ndjson_stream_is_reopened_and_counted_h2c() {
    broken_ndjson_reconnects(Proto::H2c).await;
}

#[tokio::test]
async fn a_stream_the_server_ends_is_an_error_and_reopens() {
    let server = StreamServer::start(Proto::H2c).await;
    let op = r#"
[[op]]
name = "subscribe"
path = "/end/{player}/3/1"
kind = "stream"
reconnect = { min = "20ms" }
"#;
    let r = run(scenario(&server, Proto::H2c, op)).await;
    let s = stream(&r, "subscribe");
    assert_eq!(s.events, 6 * PLAYERS);
    assert_eq!(s.errors.get("ended"), Some(&PLAYERS));
    assert_eq!(s.reconnects, PLAYERS);
}

async fn long_poll_loop(proto: Proto) {
    let server = StreamServer::start(proto).await;
    let op = r#"
[[op]]
name = "poll"
path = "/poll/{player}/6"
kind = "long_poll"
event_type = "/type"
timeout = "30s"
"#;
    let r = run(scenario(&server, proto, op)).await;
    let s = stream(&r, "poll");
    assert_eq!(s.kind, "long_poll");
    // Polls 0..6 per player: news at 0 and 3, a 204 at 1 and 4, an empty 200 at 2 and 5.
    assert_eq!(s.events, 6 * PLAYERS);
    assert_eq!(s.by_type.get("news"), Some(&(2 * PLAYERS)));
    assert_eq!(s.by_type.get("no_news"), Some(&(4 * PLAYERS)));
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    assert_eq!(s.reconnects, 0);
    assert_eq!(
        *server.stats.polls.lock().unwrap(),
        (2 * PLAYERS, 2 * PLAYERS, 2 * PLAYERS)
    );
    // Every answer is an `ok` op; the 7th poll, held by the server, is cut by the stop:
    // no op sample, counted as cut.
    assert_eq!(r.op_count("poll"), 6 * PLAYERS);
    assert_eq!(r.outcome_count("poll", "ok"), 6 * PLAYERS);
    assert_eq!(s.cut_by_stop, PLAYERS);
    for p in 0..PLAYERS {
        assert_eq!(server.opens(&format!("poll/{p}")), 7, "player {p}");
    }
    assert_eq!(r.requests + PLAYERS, server.requests());
    assert_phases_agree(&r, "poll");
}

#[tokio::test]
async fn long_polls_loop_and_no_news_is_not_an_error_h1() {
    long_poll_loop(Proto::H1).await;
}

#[tokio::test]
async fn long_polls_loop_and_no_news_is_not_an_error_h2c() {
    long_poll_loop(Proto::H2c).await;
}

#[tokio::test]
async fn stream_keys_are_checked() {
    let bad = [
        (
            "[[op]]\nname = \"s\"\npath = \"/s\"\nformat = \"sse\"\n",
            "`format` needs kind = \"stream\"",
        ),
        (
            "[[op]]\nname = \"s\"\npath = \"/s\"\nkind = \"stream\"\nweight = 2\n",
            "not picked by weight",
        ),
        (
            "[[op]]\nname = \"s\"\npath = \"/s\"\nkind = \"stream\"\nformat = \"chunks\"\nevent_type = \"/t\"\n",
            "raw chunks have no event type",
        ),
        (
            "[[op]]\nname = \"s\"\npath = \"/s\"\nkind = \"long_poll\"\ncapture = { x = \"/x\" }\n",
            "counted as events, not captured",
        ),
        (
            "[[op]]\nname = \"s\"\npath = \"/s\"\nkind = \"stream\"\nreconnect = { min = \"2s\", max = \"1s\" }\n",
            "reconnect.max must be at least reconnect.min",
        ),
        (
            "[[op]]\nname = \"s\"\npath = \"/s\"\nkind = \"stream\"\npause = \"1s\"\n",
            "`pause` is how a long poll is re-issued",
        ),
        (
            "[[op]]\nname = \"s\"\npath = \"/s\"\nconditional = true\n",
            "`conditional` needs kind",
        ),
        (
            "[[op]]\nname = \"s\"\npath = \"/s\"\nkind = \"firehose\"\n",
            "`request`, `stream`, `long_poll`",
        ),
    ];
    for (op, want) in bad {
        let src = format!(
            "[target]\nurl = \"http://127.0.0.1:1\"\n[[op]]\nname = \"ok\"\npath = \"/ok\"\n{op}[[step]]\nplayers = 1\nduration = \"1s\"\n"
        );
        let e = Scenario::parse("bad.toml", &src, &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{want:?} not in: {e}");
        assert!(e.contains("bad.toml:"), "{e}");
    }
}

/// A phase before the player steps (here a catalog route) shifts the steps' plan index:
/// their stream counts still land in their own step report.
#[tokio::test]
async fn a_step_after_a_catalog_route_keeps_its_stream_counts() {
    let server = StreamServer::start(Proto::H1).await;
    let op = r#"
[[op]]
name = "subscribe"
path = "/sse/{player}/6/0"
kind = "stream"
format = "sse"

[catalog]
ops = ["ok"]
requests = 2
"#;
    let r = run(scenario(&server, Proto::H1, op)).await;
    let step = r
        .phases
        .iter()
        .find(|s| s.phase == "step 1")
        .expect("the step's report");
    assert_eq!(step.index, Some(1), "the catalog route is phase 0");
    let s = step.play.stream("subscribe").expect("step stream stats");
    assert_eq!((s.events, s.opened), (6 * PLAYERS, PLAYERS));
    assert_eq!(
        s,
        stream(&r, "subscribe"),
        "the step holds the run's streams"
    );
}
