//! Outcome classes from status codes, bodies, broken connections and timeouts; captures
//! and checks; all through a scripted [`Player`], which is also the Rust API's test.

use herd_driver::{Player, Session, Stopped, outcome::sha256_hex};

use crate::support::{Bucket, Proto, TestServer, blob, options, scenario};

/// Calls the named ops once each, in order, then leaves.
struct Script {
    ops: Vec<&'static str>,
    next: usize,
}

impl Player for Script {
    async fn turn(&mut self, session: &mut Session) -> Result<(), Stopped> {
        let name = self.ops.get(self.next).ok_or(Stopped)?;
        self.next += 1;
        let op = session
            .op(name)
            .expect("the scenario has every scripted op");
        session.call(op).await?;
        Ok(())
    }
}

const SCENARIO: &str = r#"
[target]
url = "{url}"
transport = "PROTO"
[outcome]
code = "/error/code"
[player]
setup = ["create"]
[vars]
digest = "sha256:DIGEST"
wrong = "sha256:00"
[[op]]
name = "ok"
path = "/ok"
[[op]]
name = "not_found"
path = "/status/404"
[[op]]
name = "unavailable"
path = "/status/503"
[[op]]
name = "limited"
path = "/status/429"
[[op]]
name = "turn"
path = "/code/not_your_turn"
[[op]]
name = "slow"
path = "/delay/2000"
timeout = "100ms"
[[op]]
name = "create"
method = "POST"
path = "/game/new"
capture = { game_id = "/game/id" }
[[op]]
name = "echo"
method = "PUT"
path = "/echo/{game_id}?p={player}"
headers = { authorization = "Bearer t-{account}" }
body = '{"game": "{game_id}"}'
check = { status = 200, json = { "/path" = "/echo/g-1?p=0", "/auth" = "Bearer t-0", "/body" = '{"game": "g-1"}' } }
[[op]]
name = "missing"
path = "/ok"
capture = { nothing = "/nope" }
[[op]]
name = "bad_check"
path = "/ok"
check = { json = { "/ok" = false } }
[[op]]
name = "blob"
path = "/blob/ab"
check = { sha256 = "{digest}" }
[[op]]
name = "bad_blob"
path = "/blob/ab"
check = { sha256 = "{wrong}" }
[[op]]
name = "drop"
path = "/drop"
[[op]]
name = "after_drop"
path = "/ok"
[[step]]
players = 1
duration = "1s"
"#;

async fn outcomes(proto: Proto) {
    let server = TestServer::start(proto).await;
    let src = SCENARIO
        .replace("PROTO", proto.name())
        .replace("DIGEST", &sha256_hex(&blob("ab")));
    let script = vec![
        "ok",
        "not_found",
        "unavailable",
        "limited",
        "turn",
        "slow",
        "create",
        "echo",
        "missing",
        "bad_check",
        "blob",
        "bad_blob",
        "drop",
        "after_drop",
    ];
    let n = script.len() as u64;
    let report = herd_driver::run_with(
        scenario(&src, &server),
        move |_| Script {
            ops: script.clone(),
            next: 0,
        },
        options(),
    )
    .await
    .unwrap();
    let expect = [
        ("ok", "ok"),
        ("not_found", "http_4xx"),
        ("unavailable", "http_5xx"),
        ("limited", "rate_limited"),
        ("turn", "not_your_turn"),
        ("slow", "timeout"),
        ("create", "ok"),
        ("echo", "ok"),
        ("missing", "capture_missing"),
        ("bad_check", "check_failed"),
        ("blob", "ok"),
        ("bad_blob", "check_failed"),
        ("drop", "transport_error.reset"),
        ("after_drop", "ok"),
    ];
    for (op, outcome) in expect {
        assert_eq!(
            report.outcome_count(op, outcome),
            1,
            "{op} → {outcome}: {:#?}",
            report.phases[0].ops
        );
        assert_eq!(report.op_count(op), 1, "{op}");
    }
    assert_eq!(report.requests, n);
    assert_eq!(
        server.requests(),
        n,
        "the timed-out and dropped requests reached the server too"
    );
    // HTTP/1.1 drops the connection after a timeout as well as after the reset; h2c only
    // resets the timed-out stream.
    let reconnects = if proto == Proto::H1 { 2 } else { 1 };
    assert_eq!(report.reconnects, reconnects);
    assert_eq!(server.connections(), 1 + reconnects);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_outcome_classes() {
    outcomes(Proto::H1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_outcome_classes() {
    outcomes(Proto::H2c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_are_connect_errors_and_the_run_goes_on() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let src = format!(
        "[target]\nurl = \"http://127.0.0.1:{port}\"\n[player]\nmax_ops = 3\n[[op]]\nname = \"ok\"\npath = \"/ok\"\n[[step]]\nplayers = 2\nduration = \"300ms\"\narrival = \"burst\"\n"
    );
    let s = herd_driver::Scenario::parse("t.toml", &src, &[]).unwrap();
    let report = herd_driver::run(s, options()).await.unwrap();
    assert_eq!(report.outcome_count("ok", "transport_error.connect"), 6);
    assert_eq!((report.connects, report.connect_errors), (0, 6));
}

/// h2c against an HTTP/1.1 server: the server hangs up on the HTTP/2 preface without a
/// byte, which the h2c transport reports as a protocol error. (The other way round, an
/// HTTP/1.1 request to an h2c server, races the server's GOAWAY against its reset of the
/// unread request, so it is a protocol error or a reset depending on timing.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_to_an_h1_server_is_a_protocol_error() {
    let server = TestServer::start(Proto::H1).await;
    let src = "[target]\nurl = \"{url}\"\ntransport = \"h2c\"\n[player]\nmax_ops = 2\n[[op]]\nname = \"ok\"\npath = \"/ok\"\n[[step]]\nplayers = 1\nduration = \"200ms\"\n";
    let report = herd_driver::run(scenario(src, &server), options())
        .await
        .unwrap();
    assert_eq!(
        report.outcome_count("ok", "transport_error.protocol"),
        2,
        "{:#?}",
        report.phases
    );
    assert_eq!(server.requests(), 0);
    // The first failure retires the connection: the second op dials again.
    assert_eq!((report.connects, report.reconnects), (2, 1));
}

/// Calls its ops in order, once each, and keeps what each call returned.
struct Timed {
    ops: Vec<&'static str>,
    seen: Seen,
}

type Seen = std::sync::Arc<std::sync::Mutex<Vec<(&'static str, String, std::time::Duration)>>>;

impl Player for Timed {
    async fn turn(&mut self, session: &mut Session) -> Result<(), Stopped> {
        let name = *self
            .ops
            .get(self.seen.lock().unwrap().len())
            .ok_or(Stopped)?;
        let reply = session.call(session.op(name).expect("scripted op")).await?;
        let kept = (name, reply.outcome.to_string(), reply.latency);
        self.seen.lock().unwrap().push(kept);
        Ok(())
    }
}

/// A session keeps one timer between calls and re-arms it lazily: ops with a long and a
/// short timeout, alternated, must each time out at their own deadline, never earlier, and
/// not at the other op's.
async fn alternating_timeouts(proto: Proto) {
    // Timing: no flood beside it.
    let (server, _quiet) = TestServer::exclusive(proto, Bucket::new(1e9, 0.0)).await;
    let src = format!(
        "[target]\nurl = \"{{url}}\"\ntransport = \"{}\"\n[[op]]\nname = \"patient\"\npath = \"/delay/250\"\ntimeout = \"5s\"\n[[op]]\nname = \"hasty\"\npath = \"/delay/1000\"\ntimeout = \"120ms\"\n[[step]]\nplayers = 1\nduration = \"3s\"\n",
        proto.name()
    );
    let seen = Seen::default();
    let ops = vec!["hasty", "patient", "hasty", "patient", "patient", "hasty"];
    let report = herd_driver::run_with(
        scenario(&src, &server),
        {
            let (ops, seen) = (ops.clone(), std::sync::Arc::clone(&seen));
            move |_| Timed {
                ops: ops.clone(),
                seen: seen.clone(),
            }
        },
        options(),
    )
    .await
    .unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), ops.len(), "{seen:?}");
    for (name, outcome, latency) in &seen {
        let ms = latency.as_millis();
        match *name {
            "hasty" => assert!(
                outcome == "timeout" && (120..400).contains(&ms),
                "hasty: {outcome} after {ms} ms: {seen:?}"
            ),
            _ => assert!(
                outcome == "ok" && (250..1000).contains(&ms),
                "patient: {outcome} after {ms} ms: {seen:?}"
            ),
        }
    }
    assert_eq!(report.outcome_count("hasty", "timeout"), 3);
    assert_eq!(report.outcome_count("patient", "ok"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternating_timeouts_fire_at_their_own_deadlines_h1() {
    alternating_timeouts(Proto::H1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternating_timeouts_fire_at_their_own_deadlines_h2c() {
    alternating_timeouts(Proto::H2c).await;
}

/// A variable's value that a request line cannot carry (a space, CR LF) goes out
/// percent-encoded, as a browser sends it, instead of failing every request as
/// `transport_error.protocol` after a connect each (issue #27). The server echoes the path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_a_request_line_cannot_carry_is_sent_percent_encoded() {
    let server = TestServer::start(Proto::H1).await;
    let src = "[target]\nurl = \"{url}\"\n[player]\nmax_ops = 2\n[vars]\nname = \"John Smith\\r\\n<x>\"\n\
               [[op]]\nname = \"echo\"\npath = \"/echo/{name}?q={name}\"\n\
               check = { json = { \"/path\" = \"/echo/John%20Smith%0D%0A%3Cx%3E?q=John%20Smith%0D%0A%3Cx%3E\" } }\n\
               [[step]]\nplayers = 1\nduration = \"300ms\"\n";
    let report = herd_driver::run(scenario(src, &server), options())
        .await
        .unwrap();
    assert_eq!(
        report.outcome_count("echo", "ok"),
        2,
        "{:#?}",
        report.phases[0].ops
    );
    assert_eq!((report.connects, report.connect_errors), (1, 0));
}
