//! The demo contour's services on 127.0.0.1: calls through the gateway over h2c to the
//! backend and its SQLite database, the subscription stream, the limiter, and the churn that
//! the gateway's backend idle cap causes (2: the seeds' bug) or prevents (512: their fix).

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    time::{Duration, Instant},
};

use bytes::Bytes;
use clap::Parser as _;
use herd_contour::{Backend, ContourCmd, Gateway, store::token_hash};
use herd_testkit::TempDir;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::{net::TcpStream, sync::oneshot, task::JoinHandle};

/// The URL of a SQLite database in `dir`, created on first open.
fn db_url(dir: &TempDir) -> String {
    format!("sqlite:{}", dir.join("game.db").display())
}

#[derive(clap::Parser)]
struct Cli {
    #[command(subcommand)]
    cmd: ContourCmd,
}

/// The flags parsed exactly as `herd contour ...` parses them.
fn parse(args: &[&str]) -> ContourCmd {
    Cli::try_parse_from(std::iter::once("contour").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("parsing {args:?}: {e}"))
        .cmd
}

/// A service running in this process; stopped (as by SIGTERM) when dropped or `stop`ped.
struct Running {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<anyhow::Result<()>>>,
}

impl Running {
    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("the service stops within its grace")
                .expect("the service task did not panic")
                .expect("the service ended without an error");
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

async fn start_backend(db: &str, extra: &[&str]) -> Running {
    let mut args = vec!["backend", "--listen", "127.0.0.1:0", "--db", db];
    args.extend_from_slice(extra);
    let ContourCmd::Backend(a) = parse(&args) else {
        unreachable!()
    };
    let listener = tokio::net::TcpListener::bind(a.listen).await.unwrap();
    let b = Backend::start(&a, listener)
        .await
        .expect("the backend starts");
    let addr = b.local_addr();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(b.serve(async move {
        let _ = rx.await;
    }));
    Running {
        addr,
        stop: Some(tx),
        task: Some(task),
    }
}

async fn start_gateway(backend: SocketAddr, extra: &[&str]) -> Running {
    let backend = backend.to_string();
    let mut args = vec!["gateway", "--listen", "127.0.0.1:0", "--backend", &backend];
    args.extend_from_slice(extra);
    let ContourCmd::Gateway(a) = parse(&args) else {
        unreachable!()
    };
    let listener = tokio::net::TcpListener::bind(a.listen).await.unwrap();
    let g = Gateway::start(&a, listener)
        .await
        .expect("the gateway starts");
    let addr = g.local_addr();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(g.serve(async move {
        let _ = rx.await;
    }));
    Running {
        addr,
        stop: Some(tx),
        task: Some(task),
    }
}

/// Seeds accounts `1..=n` (`player-<id>`) with session tokens `token-<id>`, straight into the
/// database as herd's seeder does.
async fn seed(db: &str, n: i64) {
    let pool = sqlx::SqlitePool::connect(db).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    for id in 1..=n {
        sqlx::query("INSERT INTO accounts (id, name, kind) VALUES ($1, $2, $3)")
            .bind(id)
            .bind(format!("player-{id}"))
            .bind(if id % 10 == 0 { "guest" } else { "durable" })
            .execute(&mut *tx)
            .await
            .unwrap();
        sqlx::query("INSERT INTO sessions (token_hash, account_id) VALUES ($1, $2)")
            .bind(token_hash(&format!("token-{id}")))
            .bind(id)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    pool.close().await;
}

/// One h2c (HTTP/2 with prior knowledge) connection, as a player holds to the gateway.
#[derive(Clone)]
struct H2c {
    addr: SocketAddr,
    send: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
}

impl H2c {
    async fn connect(addr: SocketAddr) -> H2c {
        let stream = TcpStream::connect(addr).await.unwrap();
        let (send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
                .await
                .expect("an h2c handshake with the gateway");
        tokio::spawn(conn);
        H2c { addr, send }
    }

    async fn request(
        &mut self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: &str,
    ) -> hyper::Response<Incoming> {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr));
        if let Some(t) = token {
            req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = req.body(Full::new(Bytes::from(body.to_owned()))).unwrap();
        self.send.ready().await.unwrap();
        self.send.send_request(req).await.expect("a response")
    }

    /// `POST /v1/call/<op>`: status, `Retry-After` and the JSON body.
    async fn call(
        &mut self,
        op: &str,
        token: Option<&str>,
        body: Value,
    ) -> (StatusCode, Option<String>, Value) {
        let resp = self
            .request(
                Method::POST,
                &format!("/v1/call/{op}"),
                token,
                &body.to_string(),
            )
            .await;
        let status = resp.status();
        let retry = resp
            .headers()
            .get(header::RETRY_AFTER)
            .map(|v| v.to_str().unwrap().to_owned());
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("{op}: body is not JSON ({e}): {bytes:?}"));
        (status, retry, v)
    }

    async fn get_json(&mut self, path: &str) -> Value {
        let resp = self.request(Method::GET, path, None, "").await;
        assert_eq!(resp.status(), StatusCode::OK, "GET {path}");
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap()
    }
}

/// One HTTP/1.1 keep-alive connection to the backend for its stats: it is accepted once, so
/// the counts read through it move only with the gateway's connections.
struct H1 {
    send: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

impl H1 {
    async fn connect(addr: SocketAddr) -> H1 {
        let stream = TcpStream::connect(addr).await.unwrap();
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        H1 { send }
    }

    async fn get_json(&mut self, path: &str) -> Value {
        let req = Request::get(path)
            .header(header::HOST, "backend")
            .body(Full::new(Bytes::new()))
            .unwrap();
        self.send.ready().await.unwrap();
        let resp = self.send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "GET {path}");
        serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap()
    }
}

/// Reads newline-delimited JSON events from a streamed body.
struct Events {
    body: Incoming,
    buf: Vec<u8>,
}

impl Events {
    /// The next event, or None if the stream ended; panics past `within`.
    async fn next(&mut self, within: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(serde_json::from_slice(&line).expect("an event is one JSON line"));
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame())
                .await
                .expect("an event within the deadline");
            match frame {
                None => return None,
                Some(f) => {
                    if let Ok(data) = f.expect("the stream stays healthy").into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// Skips ticks until an event named `name`.
    async fn expect(&mut self, name: &str) -> Value {
        loop {
            let ev = self
                .next(Duration::from_secs(5))
                .await
                .unwrap_or_else(|| panic!("the stream ended before `{name}`"));
            if ev["event"] == name {
                return ev;
            }
            assert_eq!(
                ev["event"], "tick",
                "unexpected event while waiting for `{name}`"
            );
        }
    }
}

async fn subscribe(h: &mut H2c, token: &str) -> Events {
    let resp = h
        .request(Method::GET, "/v1/subscribe", Some(token), "")
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "application/x-ndjson");
    Events {
        body: resp.into_body(),
        buf: Vec::new(),
    }
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_through_the_gateway_reach_the_backend_and_its_database() {
    let dir = TempDir::new("contour-api");
    let db = db_url(&dir);
    let backend = start_backend(&db, &[]).await;
    seed(&db, 3).await;
    let gateway = start_gateway(backend.addr, &[]).await;
    let mut p = H2c::connect(gateway.addr).await;
    let (alice, bob, carol) = (Some("token-1"), Some("token-2"), Some("token-3"));

    let (s, _, v) = p.call("session.get", alice, json!({})).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        v["account"],
        json!({"id": 1, "name": "player-1", "kind": "durable"})
    );

    // Alice opens a two-seat game, Bob's join fills and starts it; seat 0 moves first.
    let (s, _, v) = p.call("game.join", alice, json!({"seats": 2})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let game_id = v["game"]["id"].as_i64().unwrap();
    assert_eq!(
        (v["game"]["status"].as_str(), v["game"]["seat"].as_i64()),
        (Some("waiting"), Some(0))
    );
    let (_, _, v) = p.call("game.join", bob, json!({"seats": 2})).await;
    assert_eq!(v["game"]["id"].as_i64(), Some(game_id));
    assert_eq!(v["game"]["status"], "active");
    assert_eq!(v["game"]["started"], true);
    assert_eq!(v["game"]["players"], json!([1, 2]));
    assert_eq!(v["game"]["turn"], 1);

    // Domain outcomes are HTTP 200 with a code.
    let (s, _, v) = p
        .call(
            "game.move",
            bob,
            json!({"game_id": game_id, "move": {"x": 1}}),
        )
        .await;
    assert_eq!((s, code(&v)), (StatusCode::OK, "not_your_turn"));
    let (s, _, v) = p
        .call(
            "game.move",
            alice,
            json!({"game_id": game_id, "move": {"x": 7, "y": 7}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["accepted"], true);
    assert_eq!(v["move"], json!({"number": 1, "account_id": 1}));
    assert_eq!(v["game"]["turn"], 2);
    let (_, _, v) = p.call("game.state", bob, json!({"game_id": game_id})).await;
    assert_eq!(
        (v["game"]["moves"].as_i64(), v["your_turn"].as_bool()),
        (Some(1), Some(true))
    );
    let (_, _, v) = p
        .call("game.state", carol, json!({"game_id": game_id}))
        .await;
    assert_eq!(code(&v), "not_a_player");
    let (_, _, v) = p
        .call("game.state", alice, json!({"game_id": 999_999}))
        .await;
    assert_eq!(code(&v), "game_not_found");
    let (_, _, v) = p
        .call("game.history", bob, json!({"game_id": game_id}))
        .await;
    assert_eq!(
        v["moves"],
        json!([{"number": 1, "account_id": 1, "move": {"x": 7, "y": 7}}])
    );
    let (_, _, v) = p.call("games.list", alice, json!({})).await;
    assert_eq!(v["games"][0]["id"].as_i64(), Some(game_id));

    // Failures: a bad token (the backend says so), no token (the gateway does), an op that
    // does not exist, a body that does not parse.
    let (s, _, v) = p
        .call(
            "game.state",
            Some("token-nope"),
            json!({"game_id": game_id}),
        )
        .await;
    assert_eq!((s, code(&v)), (StatusCode::UNAUTHORIZED, "unauthenticated"));
    let (s, _, v) = p
        .call("game.state", None, json!({"game_id": game_id}))
        .await;
    assert_eq!((s, code(&v)), (StatusCode::UNAUTHORIZED, "unauthenticated"));
    let (s, _, v) = p.call("game.teleport", alice, json!({})).await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, "unknown_op"));
    let (s, _, v) = p
        .call("game.move", alice, json!({"game_id": "seven"}))
        .await;
    assert_eq!((s, code(&v)), (StatusCode::BAD_REQUEST, "bad_request"));

    // The move is in the database.
    let pool = sqlx::SqlitePool::connect(&db).await.unwrap();
    let stored: Vec<(i64, i64, String)> =
        sqlx::query_as("SELECT game_id, account_id, body FROM moves")
            .fetch_all(&pool)
            .await
            .unwrap();
    pool.close().await;
    assert_eq!(stored, vec![(game_id, 1, r#"{"x":7,"y":7}"#.to_owned())]);

    let stats = p.get_json("/v1/stats").await;
    assert_eq!(stats["calls"], 14);
    assert_eq!(stats["backend_errors"], 0);
    gateway.stop().await;
    backend.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribe_streams_ticks_and_game_events_until_the_client_goes_away() {
    let dir = TempDir::new("contour-subscribe");
    let db = db_url(&dir);
    let backend = start_backend(&db, &[]).await;
    seed(&db, 2).await;
    let gateway = start_gateway(backend.addr, &["--tick", "100ms"]).await;
    let mut alice = H2c::connect(gateway.addr).await;
    let mut bob = H2c::connect(gateway.addr).await;

    let resp = alice
        .request(Method::GET, "/v1/subscribe", Some("token-nope"), "")
        .await;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);

    let mut alice_events = subscribe(&mut alice, "token-1").await;
    let hello = alice_events.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(hello, json!({"event": "subscribed", "account_id": 1}));
    let mut bob_events = subscribe(&mut bob, "token-2").await;
    bob_events.expect("subscribed").await;

    // Ticks come on their own, numbered.
    let t1 = alice_events.expect("tick").await;
    let t2 = alice_events.expect("tick").await;
    assert_eq!(t2["seq"].as_u64(), Some(t1["seq"].as_u64().unwrap() + 1));

    let (_, _, v) = alice
        .call("game.join", Some("token-1"), json!({"seats": 2}))
        .await;
    let game_id = v["game"]["id"].clone();
    bob.call("game.join", Some("token-2"), json!({"seats": 2}))
        .await;
    assert_eq!(
        alice_events.expect("game_started").await["game_id"],
        game_id
    );
    assert_eq!(alice_events.expect("your_turn").await["game_id"], game_id);

    let (_, _, v) = alice
        .call(
            "game.move",
            Some("token-1"),
            json!({"game_id": game_id, "move": {"x": 7}}),
        )
        .await;
    assert_eq!(v["accepted"], true, "{v}");
    let moved = bob_events.expect("opponent_moved").await;
    assert_eq!(
        moved,
        json!({"event": "opponent_moved", "game_id": game_id, "by": 1, "number": 1})
    );
    assert_eq!(bob_events.expect("your_turn").await["game_id"], game_id);

    // Alice goes away (her stream is reset): the gateway lets go of her subscription.
    let mut stats = alice.clone();
    assert_eq!(stats.get_json("/v1/stats").await["subscriptions_open"], 2);
    drop(alice_events);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let open = stats.get_json("/v1/stats").await["subscriptions_open"].as_u64();
        if open == Some(1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the subscription stayed open: {open:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Bob's stream still runs, and shutting the gateway down ends it.
    bob_events.expect("tick").await;
    gateway.stop().await;
    loop {
        match bob_events.next(Duration::from_secs(5)).await {
            None => break,
            Some(ev) => assert_eq!(ev["event"], "tick"),
        }
    }
    backend.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limiter_answers_429_with_retry_after_on_its_op_only() {
    let dir = TempDir::new("contour-limit");
    let db = db_url(&dir);
    let backend = start_backend(&db, &[]).await;
    seed(&db, 2).await;
    let gateway = start_gateway(
        backend.addr,
        &[
            "--rate-limit",
            "5/s",
            "--rate-burst",
            "5",
            "--rate-limited-op",
            "games.list",
        ],
    )
    .await;
    let mut h = H2c::connect(gateway.addr).await;

    // The hammer: 40 back-to-back calls from one session.
    let started = Instant::now();
    let (mut ok, mut limited) = (0u32, 0u32);
    for _ in 0..40 {
        let (s, retry, v) = h.call("games.list", Some("token-1"), json!({})).await;
        match s {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                limited += 1;
                assert_eq!(code(&v), "rate_limited");
                let secs: u64 = retry.expect("a 429 carries Retry-After").parse().unwrap();
                assert!((1..=1).contains(&secs), "Retry-After {secs}s at 5/s");
            }
            other => panic!("unexpected {other}: {v}"),
        }
    }
    // The burst, plus what refilled at 5/s while the hammer ran.
    let refill = (started.elapsed().as_secs_f64() * 5.0).ceil() as u32;
    assert!(
        ok >= 5 && ok <= 5 + refill,
        "ok {ok}, refill allowance {refill}"
    );
    assert_eq!(ok + limited, 40);

    // Another session has its own bucket, and other ops are not limited.
    let (s, _, _) = h.call("games.list", Some("token-2"), json!({})).await;
    assert_eq!(s, StatusCode::OK);
    for _ in 0..20 {
        let (s, _, v) = h.call("session.get", Some("token-1"), json!({})).await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
    let stats = h.get_json("/v1/stats").await;
    assert_eq!(stats["rate_limited"].as_u64(), Some(u64::from(limited)));
    gateway.stop().await;
    backend.stop().await;
}

/// The TCP sockets in TIME_WAIT whose remote end is `addr` (the connecting side closed first)
/// and whose local end is `addr` (the listening side closed first), each as its
/// `/proc/net/tcp` pair of ends, so that a later reading counts only the new ones: the table is
/// the whole host's, with other tests' sockets and entries that expire meanwhile.
fn time_wait(addr: SocketAddr) -> (BTreeSet<String>, BTreeSet<String>) {
    let SocketAddr::V4(v4) = addr else {
        panic!("the test's backend listens on IPv4");
    };
    // /proc/net/tcp prints the address as the u32 in host (little-endian) order.
    let end = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(v4.ip().octets()),
        v4.port()
    );
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let (mut client_side, mut server_side) = (BTreeSet::new(), BTreeSet::new());
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        // st 06 is TCP_TIME_WAIT (include/net/tcp_states.h).
        if f.len() < 4 || f[3] != "06" {
            continue;
        }
        let pair = format!("{} -> {}", f[1], f[2]);
        if f[2] == end {
            client_side.insert(pair.clone());
        }
        if f[1] == end {
            server_side.insert(pair);
        }
    }
    (client_side, server_side)
}

struct Churn {
    calls: u64,
    accepted: u64,
    backend_requests: u64,
    /// TIME_WAIT entries that appeared during the calls, each as its pair of ends.
    tw_gateway_side: Vec<String>,
    tw_backend_side: Vec<String>,
}

/// `callers` players, each on its own h2c connection, make `per_caller` calls through a
/// gateway whose backend idle cap is `max_idle`; counts what the backend accepted.
async fn churn(max_idle: usize, callers: usize, per_caller: usize) -> Churn {
    let dir = TempDir::new("contour-churn");
    let db = db_url(&dir);
    let backend = start_backend(&db, &[]).await;
    seed(&db, callers as i64).await;
    let idle = max_idle.to_string();
    let gateway = start_gateway(
        backend.addr,
        &["--backend-max-idle", &idle, "--rate-limit", "off"],
    )
    .await;
    let mut stats = H1::connect(backend.addr).await;
    let before = stats.get_json("/v1/stats").await;
    let (tw_before_gw, tw_before_be) = time_wait(backend.addr);

    let mut players = Vec::new();
    for id in 1..=callers {
        let mut h = H2c::connect(gateway.addr).await;
        players.push(tokio::spawn(async move {
            let token = format!("token-{id}");
            let t = Some(token.as_str());
            // A one-seat game, so every move is this player's turn: each call is a real
            // read or write, none a refusal.
            let (_, _, v) = h.call("game.join", t, json!({"seats": 1})).await;
            let game_id = v["game"]["id"].as_i64().expect("a game id");
            for i in 1..per_caller {
                let (s, _, v) = if i % 2 == 1 {
                    h.call(
                        "game.move",
                        t,
                        json!({"game_id": game_id, "move": {"i": i}}),
                    )
                    .await
                } else {
                    h.call("game.state", t, json!({"game_id": game_id})).await
                };
                assert_eq!(s, StatusCode::OK, "{v}");
                assert_eq!(code(&v), "", "{v}");
            }
        }));
    }
    for p in players {
        p.await.expect("a player finished all its calls");
    }
    let after = stats.get_json("/v1/stats").await;
    // Read before shutdown: stopping the gateway closes its pooled connections, which would
    // add TIME_WAIT entries that are not churn.
    let (tw_gw, tw_be) = time_wait(backend.addr);
    gateway.stop().await;
    backend.stop().await;
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap();
    Churn {
        calls: (callers * per_caller) as u64,
        accepted: n(&after, "connections_accepted") - n(&before, "connections_accepted"),
        // The two stats calls themselves are not the gateway's.
        backend_requests: n(&after, "requests") - n(&before, "requests") - 1,
        tw_gateway_side: tw_gw.difference(&tw_before_gw).cloned().collect(),
        tw_backend_side: tw_be.difference(&tw_before_be).cloned().collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_cap_of_2_churns_backend_connections_and_512_reuses_them() {
    const CALLERS: usize = 50;
    const PER_CALLER: usize = 20;
    let bug = churn(2, CALLERS, PER_CALLER).await;
    let fix = churn(512, CALLERS, PER_CALLER).await;
    for (name, r) in [("max-idle 2", &bug), ("max-idle 512", &fix)] {
        eprintln!(
            "{name}: {} calls, backend requests {}, backend connections accepted {}, \
             TIME_WAIT gateway side {}, backend side {}",
            r.calls,
            r.backend_requests,
            r.accepted,
            r.tw_gateway_side.len(),
            r.tw_backend_side.len()
        );
        assert_eq!(
            r.backend_requests, r.calls,
            "{name}: one backend request per call"
        );
        // The backend never closes a keep-alive connection first.
        assert_eq!(r.tw_backend_side, Vec::<String>::new(), "{name}");
    }
    // The bug: a new connection for a large share of the calls, each closed by the gateway.
    assert!(
        bug.accepted >= bug.calls * 3 / 10,
        "max-idle 2 accepted only {} connections for {} calls",
        bug.accepted,
        bug.calls
    );
    assert!(
        bug.tw_gateway_side.len() as u64 >= bug.accepted / 2,
        "max-idle 2: {} gateway-side TIME_WAIT for {} connections",
        bug.tw_gateway_side.len(),
        bug.accepted
    );
    // The fix: about one connection per concurrent caller, all kept open.
    assert!(
        fix.accepted <= CALLERS as u64,
        "max-idle 512 accepted {} connections for {CALLERS} concurrent callers",
        fix.accepted
    );
    // At most one closed in a thousand calls: one CI run saw a single gateway-side TIME_WAIT
    // (24 connections, 1 000 calls, counted then by port alone; not reproduced in 14 runs
    // since), against the bug's one per new connection.
    assert!(
        fix.tw_gateway_side.len() <= 1,
        "max-idle 512 closed connections: {:?}",
        fix.tw_gateway_side
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_what_is_wrong() {
    let dir = TempDir::new("contour-errors");
    let ContourCmd::Backend(a) =
        parse(&["backend", "--listen", "127.0.0.1:0", "--db", "mysql://db/x"])
    else {
        unreachable!()
    };
    let l = tokio::net::TcpListener::bind(a.listen).await.unwrap();
    let e = Backend::start(&a, l).await.err().expect("mysql is refused");
    assert!(
        format!("{e:#}").contains("unsupported database URL `mysql://db/x`"),
        "{e:#}"
    );

    let missing = format!("sqlite:{}", dir.join("no/such/dir/absent.db").display());
    let ContourCmd::Backend(a) = parse(&["backend", "--listen", "127.0.0.1:0", "--db", &missing])
    else {
        unreachable!()
    };
    let l = tokio::net::TcpListener::bind(a.listen).await.unwrap();
    let e = Backend::start(&a, l)
        .await
        .err()
        .expect("a file in a missing directory fails");
    assert!(format!("{e:#}").contains("absent.db"), "{e:#}");

    for (flag, value, says) in [
        ("--backend", "no-port", "has no port"),
        ("--rate-limited-op", "games.teleport", "is not an op"),
    ] {
        let mut args = vec!["gateway", "--listen", "127.0.0.1:0", flag, value];
        if flag != "--backend" {
            args.extend(["--backend", "127.0.0.1:9"]);
        }
        let ContourCmd::Gateway(a) = parse(&args) else {
            unreachable!()
        };
        let l = tokio::net::TcpListener::bind(a.listen).await.unwrap();
        let e = Gateway::start(&a, l)
            .await
            .err()
            .expect("a bad flag is refused");
        assert!(format!("{e:#}").contains(says), "{flag} {value}: {e:#}");
    }
    assert!(
        Cli::try_parse_from(["contour", "gateway", "--rate-limit", "5"]).is_err(),
        "a rate needs a unit"
    );

    // A backend that is not there: the gateway answers 502 and says where it tried.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let gateway = start_gateway(closed, &["--backend-timeout", "2s"]).await;
    let mut h = H2c::connect(gateway.addr).await;
    let (s, _, v) = h
        .call("game.state", Some("token-1"), json!({"game_id": 1}))
        .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_GATEWAY, "backend_unavailable")
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&closed.to_string()),
        "{v}"
    );
    gateway.stop().await;
}

/// A service process started the way herd starts it, with its `ready` line read.
struct Proc {
    child: std::process::Child,
    addr: SocketAddr,
}

impl Proc {
    fn spawn(args: &[&str]) -> Proc {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_herd-contour"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawning herd contour");
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let addr = line
            .strip_prefix("ready ")
            .unwrap_or_else(|| panic!("expected `ready ADDR`, got {line:?}"))
            .trim()
            .parse()
            .unwrap();
        Proc { child, addr }
    }

    /// SIGTERM, then the exit status within `within`.
    fn terminate(mut self, within: Duration) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + within;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the process did not exit within {within:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_processes_say_ready_serve_and_exit_on_sigterm_with_a_stream_open() {
    let dir = TempDir::new("contour-procs");
    let db = db_url(&dir);
    let backend = Proc::spawn(&[
        "backend",
        "--listen",
        "127.0.0.1:0",
        "--db",
        &db,
        "--grace",
        "2s",
    ]);
    seed(&db, 1).await;
    let health = H1::connect(backend.addr).await.get_json("/healthz").await;
    assert_eq!(health, json!({"status": "ok"}));
    let b = backend.addr.to_string();
    let gateway = Proc::spawn(&[
        "gateway",
        "--listen",
        "127.0.0.1:0",
        "--backend",
        &b,
        "--grace",
        "2s",
        "--tick",
        "100ms",
    ]);
    let mut h = H2c::connect(gateway.addr).await;
    let (s, _, v) = h.call("session.get", Some("token-1"), json!({})).await;
    assert_eq!((s, v["account"]["id"].as_i64()), (StatusCode::OK, Some(1)));
    let mut events = subscribe(&mut h, "token-1").await;
    events.expect("subscribed").await;
    events.expect("tick").await;

    // The open stream ends with the gateway's shutdown instead of holding it past the grace.
    let st = tokio::task::spawn_blocking(move || gateway.terminate(Duration::from_secs(4)))
        .await
        .unwrap();
    assert!(st.success(), "gateway exit: {st}");
    let st = tokio::task::spawn_blocking(move || backend.terminate(Duration::from_secs(4)))
        .await
        .unwrap();
    assert!(st.success(), "backend exit: {st}");
}
