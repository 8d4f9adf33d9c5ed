//! gRPC and WebSocket players end to end, against real servers nobody here wrote: Python's
//! grpcio serving `testkit/py/arena.proto`, and Python's websockets. Each server counts
//! what it served (per method, per path); each test runs scenarios through the driver and
//! compares herd's counts with the server's own. One server per test, shared by its
//! scenarios, which run one after another and reset the counters in between.

use std::time::Duration;

use herd_driver::{RunOptions, Scenario};
use herd_model::{Outcome, RunResult};
use herd_testkit::{PyServer, py::arena_proto};
use serde_json::{Value, json};

async fn run(src: &str) -> RunResult {
    run_as("players.toml", src, &[]).await
}

async fn run_as(file: &str, src: &str, sets: &[String]) -> RunResult {
    let scenario = Scenario::parse(file, src, sets).unwrap_or_else(|e| panic!("{e}"));
    let opts = RunOptions {
        grace: Duration::from_secs(3),
        ..RunOptions::default()
    };
    herd_driver::run(scenario, opts).await.unwrap()
}

/// Op `op`'s count of `outcome` over the run.
fn outcomes(r: &RunResult, op: &str, outcome: &str) -> u64 {
    let want: Outcome = outcome.into();
    r.phases
        .iter()
        .flat_map(|p| &p.ops)
        .filter(|o| o.op == op)
        .flat_map(|o| &o.outcomes)
        .filter(|o| o.outcome == want)
        .map(|o| o.count)
        .sum()
}

/// Op `op`'s count over the run, every outcome.
fn count(r: &RunResult, op: &str) -> u64 {
    r.phases
        .iter()
        .flat_map(|p| &p.ops)
        .filter(|o| o.op == op)
        .map(|o| o.count)
        .sum()
}

/// The TOML blocks of docs/scenario.md's section `heading` (up to the next `## `), and the
/// example files `examples/players/NAME`, each with the address it names swapped for
/// `addr`: (a name to parse it as, its text).
fn examples(heading: &str, files: &[&str], from: &str, addr: &str) -> Vec<(String, String)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(root.join("docs/scenario.md")).unwrap();
    let section = doc
        .split(&format!("\n## {heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("no section {heading}"))
        .split("\n## ")
        .next()
        .unwrap();
    let py = herd_testkit::py::py_dir();
    let mut out: Vec<(String, String)> = section
        .split("```toml\n")
        .skip(1)
        .enumerate()
        .map(|(i, b)| {
            let name = py.join(format!("docs-{heading}-{i}.toml"));
            (
                name.display().to_string(),
                b.split("```").next().unwrap().replace(from, addr),
            )
        })
        .collect();
    assert!(
        !out.is_empty(),
        "no example in docs/scenario.md's {heading}"
    );
    for f in files {
        let path = root.join("examples/players").join(f);
        let text = std::fs::read_to_string(&path).unwrap();
        out.push((path.display().to_string(), text.replace(from, addr)));
    }
    out
}

/// Runs an example for 1 s with 3 players; returns its errors (outcomes neither ok nor
/// expected) and its ops and stream events.
async fn run_example(name: &str, text: &str) -> (u64, u64) {
    let sets = [
        "step[0].duration=1s".to_owned(),
        "step[0].players=3".to_owned(),
    ];
    let r = run_as(name, text, &sets).await;
    eprintln!("{name}: {:?} {:?}", all_outcomes(&r), r.play.streams);
    let mut errors = 0;
    let mut ops: u64 = r.play.streams.iter().map(|s| s.events).sum();
    for p in &r.phases {
        for o in &p.ops {
            ops += o.count;
            let expected = r.expected.get(&o.op);
            for s in &o.outcomes {
                if !s.outcome.is_ok() && !expected.is_some_and(|e| e.contains(&s.outcome)) {
                    errors += s.count;
                }
            }
        }
    }
    (errors, ops)
}

fn all_outcomes(r: &RunResult) -> Vec<(String, String, u64)> {
    r.phases
        .iter()
        .flat_map(|p| &p.ops)
        .flat_map(|o| {
            o.outcomes
                .iter()
                .map(move |s| (o.op.clone(), s.outcome.name(), s.count))
        })
        .collect()
}

/// The server's counters, once `ready` holds for them (a handler counts how its call
/// ended a moment after the client has read the end).
async fn counters_once(server: &mut PyServer, ready: impl Fn(&Value) -> bool) -> Value {
    let until = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let c = server.counters();
        if ready(&c) || std::time::Instant::now() > until {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// ~6 s: four scenarios against one grpcio server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_calls_counted_as_the_server_counts_them() {
    let mut server = PyServer::grpc();
    let proto = arena_proto().display().to_string();
    let head = format!(
        "[target]\nurl = \"grpc://127.0.0.1:{}\"\nproto = \"{proto}\"\n",
        server.port()
    );

    // Unary, client-streaming and bidi calls side by side, with 7 Joins refused as
    // RESOURCE_EXHAUSTED (expected), captures and checks on the replies, and metadata.
    server.command("fail RESOURCE_EXHAUSTED 7");
    let src = format!(
        r#"{head}
[player]
max_ops = 30

[[op]]
name = "join"
call = "herd.arena.Arena/Join"
body = '{{"player": "p{{player}}", "level": 3, "scores": {{"a": 2, "b": 5}}}}'
headers = {{ authorization = "Bearer {{account}}" }}
capture = {{ seat = "/seat" }}
check = {{ json = {{ "/player" = "p0", "/total" = 7 }} }}
expected = ["grpc_resource_exhausted"]
weight = 3

[[op]]
name = "submit"
call = "herd.arena.Arena/Submit"
messages = ['{{"seq": 1}}', '{{"seq": {{player}}}}']
repeat = 2
check = {{ json = {{ "/moves" = 4 }} }}

[[op]]
name = "play"
call = "herd.arena.Arena/Play"
messages = ['{{"seq": 1, "text": "a"}}', '{{"seq": 2, "text": "b"}}', '{{"seq": 3, "text": "c"}}']
lockstep = true
check = {{ json = {{ "/2/text" = "echo c" }} }}

[[step]]
players = 4
duration = "1500ms"
"#
    );
    let r = run(&src).await;
    let c = counters_once(&mut server, |c| {
        c["Play"]["calls"].as_u64() == c["Play"]["status"]["OK"].as_u64()
    })
    .await;
    let joins = count(&r, "join");
    assert_eq!(
        count(&r, "join") + count(&r, "submit") + count(&r, "play"),
        4 * 30
    );
    assert_eq!(c["Join"]["calls"], joins, "{c}");
    assert_eq!(
        outcomes(&r, "join", "grpc_resource_exhausted"),
        7,
        "{:?}",
        all_outcomes(&r)
    );
    assert_eq!(c["Join"]["status"]["RESOURCE_EXHAUSTED"], 7);
    // Only player 0's Joins pass the check on /player; the others fail it, counted.
    let player0_ok = outcomes(&r, "join", "ok");
    assert_eq!(
        player0_ok + outcomes(&r, "join", "check_failed") + 7,
        joins,
        "{:?}",
        all_outcomes(&r)
    );
    assert!(player0_ok > 0);
    assert_eq!(c["Submit"]["calls"], count(&r, "submit"));
    assert_eq!(c["Submit"]["received"], 4 * count(&r, "submit"));
    assert_eq!(outcomes(&r, "submit", "ok"), count(&r, "submit"));
    assert_eq!(c["Play"]["calls"], count(&r, "play"));
    assert_eq!(c["Play"]["sent"], 3 * count(&r, "play"));
    assert_eq!(outcomes(&r, "play", "ok"), count(&r, "play"));
    assert_eq!(r.connects, 4, "one connection per player");
    assert_eq!(
        r.expected.get("join").map(|v| v.as_slice()),
        Some(&["grpc_resource_exhausted".into()][..])
    );

    // A server stream held by each player: its messages are the events, counted by type.
    server.command("reset");
    let src = format!(
        r#"{head}
[[op]]
name = "watch"
call = "herd.arena.Arena/Watch"
kind = "stream"
body = '{{"count": 30, "interval_ms": 2, "kind": "tick", "pad_bytes": 100}}'
event_type = "/kind"
pause = "30s"

[[step]]
players = 3
duration = "800ms"
"#
    );
    let r = run(&src).await;
    let c = counters_once(&mut server, |c| c["Watch"]["status"]["OK"] == 3).await;
    let s = r.play.stream("watch").expect("the stream's numbers");
    assert_eq!(c["Watch"]["calls"], 3, "{c} {s:?}");
    assert_eq!(c["Watch"]["sent"], 90);
    assert_eq!(s.events, 90, "{s:?}");
    assert_eq!(s.by_type.get("tick"), Some(&90));
    assert_eq!(s.opened, 3);
    // A stream that completed (status ok) is a call done, not a break: no error, no
    // reconnect; the next call waits for the op's pause.
    assert!(s.errors.is_empty(), "{s:?}");
    assert_eq!(s.reconnects, 0);
    assert!(s.first_event.is_some());

    // Deadlines: the op's timeout is the call's grpc-timeout; either clock ends it as a
    // timeout.
    server.command("reset");
    let src = format!(
        r#"{head}
[player]
max_ops = 2

[[op]]
name = "slow"
call = "herd.arena.Arena/Slow"
body = '{{"delay_ms": 3000}}'
timeout = "150ms"

[[step]]
players = 2
duration = "1s"
"#
    );
    let r = run(&src).await;
    assert_eq!(outcomes(&r, "slow", "timeout"), 4, "{:?}", all_outcomes(&r));
    let c = counters_once(&mut server, |c| {
        c["Slow"]["status"]
            .as_object()
            .is_some_and(|s| s.values().filter_map(Value::as_u64).sum::<u64>() == 4)
    })
    .await;
    assert_eq!(c["Slow"]["calls"], 4, "{c}");
    assert!(c["Slow"]["status"].get("OK").is_none(), "{c}");

    // Not expected: an unexpected status is its own error outcome; a paced client stream
    // whose messages go out 20 ms apart after the call's head.
    server.command("reset");
    let src = format!(
        r#"{head}
[player]
max_ops = 3

[[op]]
name = "join"
call = "herd.arena.Arena/Join"
body = '{{"fail": "UNAVAILABLE"}}'

[[op]]
name = "submit"
call = "herd.arena.Arena/Submit"
messages = ['{{"seq": 2}}']
repeat = 3
interval = "20ms"
capture = {{ total = "/total" }}
check = {{ json = {{ "/total" = 6 }} }}
weight = 0

[player.setup]
[[step]]
players = 1
duration = "1s"
"#
    )
    .replace("[player.setup]\n", "");
    let src = src.replace("max_ops = 3\n", "max_ops = 3\nsetup = [\"submit\"]\n");
    let r = run(&src).await;
    assert_eq!(
        outcomes(&r, "join", "grpc_unavailable"),
        2,
        "{:?}",
        all_outcomes(&r)
    );
    assert_eq!(outcomes(&r, "submit", "ok"), 1, "{:?}", all_outcomes(&r));
    let c = server.counters();
    assert_eq!(c["Submit"]["received"], 3);
    assert_eq!(c["Join"]["status"]["UNAVAILABLE"], 2);

    // docs/scenario.md's gRPC examples and examples/players/arena.toml run, 1 s each, and
    // every call they make is one the server counted.
    let addr = format!("127.0.0.1:{}", server.port());
    for (name, text) in examples("gRPC", &["arena.toml"], "127.0.0.1:50051", &addr) {
        server.command("reset");
        let (errors, ops) = run_example(&name, &text).await;
        assert!(ops > 0, "{name}");
        assert_eq!(errors, 0, "{name}");
    }
}

/// ~5 s: three scenarios against one websockets server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_players_counted_as_the_server_counts_them() {
    let mut server = PyServer::websocket();
    let port = server.port();

    // Echo: each op's reply matched by its correlation id; a ping answered by its pong.
    let src = format!(
        r#"[target]
url = "ws://127.0.0.1:{port}/echo"
subprotocols = ["herd.v1"]

[player]
max_ops = 40

[[op]]
name = "say"
body = '{{"id": "{{player}}-{{now_us}}", "text": "hello"}}'
reply = "/id"
check = {{ json = {{ "/text" = "hello" }} }}
weight = 3

[[op]]
name = "ping"
frame = "ping"
body = "are you there"

[[step]]
players = 5
duration = "1500ms"
"#
    );
    let r = run(&src).await;
    let c = counters_once(&mut server, |c| c["echo"]["close_received"]["1001"] == 5).await;
    let says = count(&r, "say");
    assert_eq!(says + count(&r, "ping"), 5 * 40);
    assert_eq!(outcomes(&r, "say", "ok"), says, "{:?}", all_outcomes(&r));
    assert_eq!(outcomes(&r, "ping", "ok"), count(&r, "ping"));
    assert_eq!(c["echo"]["received"], says, "{c}");
    assert_eq!(c["echo"]["sent"], says);
    assert_eq!(c["echo"]["connections"], 5);
    assert_eq!(r.connects, 5);
    // Each player's socket closed going away (1001) at its end.
    assert_eq!(c["echo"]["close_received"]["1001"], 5, "{c}");

    // Pushes: a stream op holds each socket and counts what the server pushes by type;
    // the server's Close after the last one is the stream's end (ws_normal), and the
    // socket reopens (a reconnect) for another round.
    server.command("reset");
    let src = format!(
        r#"[target]
url = "ws://127.0.0.1:{port}/push?count=60&rate=0&types=move,chat,score&fragments=2"

[[op]]
name = "events"
kind = "stream"
event_type = "/type"
reconnect = {{ min = "30s" }}

[[step]]
players = 4
duration = "1s"
"#
    );
    let r = run(&src).await;
    let s = r.play.stream("events").expect("the stream's numbers");
    let c = server.counters();
    assert_eq!(c["push"]["sent"], 240, "{c}");
    assert_eq!(s.events, 240, "{s:?}");
    assert_eq!(s.by_type.get("move"), Some(&80));
    assert_eq!(s.by_type.get("score"), Some(&80));
    assert_eq!(s.errors.get("ws_normal"), Some(&4), "{s:?}");
    assert_eq!(s.opened, 4);

    // A server that drops the socket mid-run (after 3 echoes, no Close): an op under it
    // ends transport_error.reset, a drop between ops is the held socket's stream error;
    // either way the socket reopens, counted as a reconnect.
    server.command("reset");
    let src = format!(
        r#"[target]
url = "ws://127.0.0.1:{port}/drop?after=3"

[player]
# 8, not 9: a player's last op is then never a socket's third echo, whose drop would
# come after the player (and its socket) left.
max_ops = 8

[[op]]
name = "say"
body = "x"

[[op]]
name = "socket"
kind = "stream"
reconnect = {{ min = "20ms" }}

[[step]]
players = 2
duration = "1500ms"
"#
    );
    let r = run(&src).await;
    let c = server.counters();
    let s = r.play.stream("socket").expect("the socket's numbers");
    let resets = outcomes(&r, "say", "transport_error.reset")
        + s.errors.get("transport_error.reset").copied().unwrap_or(0);
    assert_eq!(
        outcomes(&r, "say", "ok"),
        c["drop"]["sent"].as_u64().unwrap(),
        "{c}"
    );
    assert_eq!(resets, c["drop"]["drops"].as_u64().unwrap(), "{c} {s:?}");
    assert_eq!(r.reconnects + 2, c["drop"]["connections"].as_u64().unwrap());
    assert!(r.reconnects >= 2, "{}", r.reconnects);
    assert_eq!(s.reconnects, r.reconnects);

    // A server that closes with its own code (4001) as each socket opens: the op waiting
    // on it ends `ws_4001`, expected here, and the next op reconnects.
    server.command("reset");
    let src = format!(
        r#"[target]
url = "ws://127.0.0.1:{port}/close?code=4001&after=0"

[player]
max_ops = 3

[[op]]
name = "say"
body = "x"
expected = ["ws_4001"]

[[step]]
players = 1
duration = "1s"
"#
    );
    let r = run(&src).await;
    assert_eq!(outcomes(&r, "say", "ws_4001"), 3, "{:?}", all_outcomes(&r));
    assert_eq!(r.reconnects, 2);
    let c = counters_once(&mut server, |c| c["close"]["close_received"]["4001"] == 3).await;
    assert_eq!(c["close"]["close_sent"]["4001"], 3, "{c}");
    // herd's Close echoed the server's code.
    assert_eq!(c["close"]["close_received"]["4001"], 3, "{c}");
    assert_eq!(json!(r.expected["say"]), json!(["ws_4001"]));

    // docs/scenario.md's WebSocket examples and examples/players/{chat,feed}.toml run, 1 s
    // each, without an error.
    let addr = format!("127.0.0.1:{port}");
    for (name, text) in examples(
        "WebSocket",
        &["chat.toml", "feed.toml"],
        "127.0.0.1:8765",
        &addr,
    ) {
        let (errors, ops) = run_example(&name, &text).await;
        assert!(ops > 0, "{name}");
        assert_eq!(errors, 0, "{name}");
    }
}
