//! A second loopback test server (HTTP/1.1 or h2c) for the player model: event streams,
//! long polls and games, counting what it sent and served.
//!
//! Routes (`{p}` is the player id, so every player's history is its own):
//! - `/sse/{p}/{n}/{m}`, `/ndjson/{p}/{n}/{m}`: each opening sends `n` events whose types
//!   cycle `move, move, chat` (SSE: `event:` field and `{"type":..}` data; NDJSON: one
//!   `{"type":..}` line each). The player's first `m` openings then break (the body fails:
//!   HTTP/2 RST_STREAM, HTTP/1.1 a cut chunked body); later ones stay open.
//! - `/end/{p}/{n}/{m}`: SSE like `/sse`, but the first `m` openings end cleanly.
//! - `/poll/{p}/{k}`: a long poll. The player's poll `i < k` waits 20 ms and answers by
//!   `i % 3`: 0 → 200 `{"type":"news"}`, 1 → 204, 2 → 200 with an empty body; polls from
//!   `k` on are held until the client goes away.
//! - `/game/create` → `{"game":{"id":"g-N"}}`; `/game/create-flaky` → the same, but every
//!   odd-numbered create is a 500; `/game/{id}/join`; `/game/{id}/state` →
//!   `{"state":"playing"}` for the game's first 2 state calls, then `{"state":"finished"}`;
//!   `/game/{id}/play` → `{"ok":true}` for the first 2 plays, then
//!   `{"error":{"code":"game_finished"}}`; `/ok`.
//! - The routes of `examples/scenarios/lobby.toml`: `POST /v1/session`, `POST /v1/games`,
//!   `POST /v1/games/{id}/players`, `GET /v1/games/{id}`, `POST /v1/games/{id}/plays`
//!   (`game_finished` from the game's 5th play), `GET /v1/events` (SSE: a `hello`, then a
//!   `turn` every 100 ms) and `GET /v1/lobby/wait` (a long poll: 204 after 100 ms).

use std::{
    collections::BTreeMap,
    convert::Infallible,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::{
    Request, Response,
    body::{Body, Frame},
};
use tokio::sync::mpsc;

pub use crate::support::Proto;
use crate::support::{Counts, Server, serve};

/// A response body fed through a channel; an `Err` item breaks it.
pub struct ChanBody(mpsc::Receiver<Result<Bytes, std::io::Error>>);

impl Body for ChanBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.0.poll_recv(cx).map(|o| o.map(|r| r.map(Frame::data)))
    }
}

/// What the server counted besides [`Counts`].
#[derive(Default)]
pub struct Stats {
    /// Events sent, by type.
    pub sent: Mutex<BTreeMap<String, u64>>,
    /// Stream openings per route kind and player, e.g. `sse/3`.
    pub opens: Mutex<BTreeMap<String, u64>>,
    /// Long polls answered: (news, 204, empty 200).
    pub polls: Mutex<(u64, u64, u64)>,
    pub creates: AtomicU64,
    pub failed_creates: AtomicU64,
    /// Joins and state/play calls per game id.
    pub joins: Mutex<BTreeMap<String, u64>>,
    pub calls: Mutex<BTreeMap<String, u64>>,
}

impl Stats {
    pub fn sent(&self, kind: &str) -> u64 {
        self.sent.lock().unwrap().get(kind).copied().unwrap_or(0)
    }
}

/// The server of this file, with the routes above.
pub type StreamServer = Server<Stats>;

impl Server<Stats> {
    pub async fn start(proto: Proto) -> Self {
        let load = crate::support::QUIET.read().await;
        let stats = Arc::new(Stats::default());
        let st = stats.clone();
        Server::listen("http", stats, Some(load), move |stream, counts| {
            let (st, c) = (st.clone(), counts.clone());
            serve(stream, proto, counts.clone(), move |req| {
                handle(req, st.clone(), c.clone())
            })
        })
        .await
    }

    pub fn opens(&self, key: &str) -> u64 {
        self.stats
            .opens
            .lock()
            .unwrap()
            .get(key)
            .copied()
            .unwrap_or(0)
    }
}

fn body(status: u16, bytes: impl Into<Bytes>) -> Response<ChanBody> {
    let (tx, rx) = mpsc::channel(1);
    let bytes = bytes.into();
    if !bytes.is_empty() {
        tx.try_send(Ok(bytes)).unwrap();
    }
    let mut r = Response::new(ChanBody(rx));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
    r
}

fn json(v: serde_json::Value) -> Response<ChanBody> {
    body(200, v.to_string())
}

const TYPES: [&str; 3] = ["move", "move", "chat"];

/// An event stream: `n` events, then (for the player's first `m` openings) a break
/// (`clean`: an end), else held open until the client goes away.
fn stream(
    st: &Stats,
    kind: &str,
    player: &str,
    n: u64,
    m: u64,
    ndjson: bool,
    clean: bool,
) -> Response<ChanBody> {
    let open = {
        let mut opens = st.opens.lock().unwrap();
        let c = opens.entry(format!("{kind}/{player}")).or_default();
        *c += 1;
        *c
    };
    let (tx, rx) = mpsc::channel(n as usize + 1);
    {
        let mut sent = st.sent.lock().unwrap();
        for i in 0..n {
            let t = TYPES[i as usize % 3];
            let ev = if ndjson {
                format!("{{\"type\":\"{t}\",\"i\":{i}}}\n")
            } else {
                format!(": keep-alive\nevent: {t}\ndata: {{\"type\":\"{t}\",\"i\":{i}}}\n\n")
            };
            tx.try_send(Ok(Bytes::from(ev))).unwrap();
            *sent.entry(t.to_owned()).or_default() += 1;
        }
    }
    tokio::spawn(async move {
        // Let the events leave before the break, so the client counts them all.
        tokio::time::sleep(Duration::from_millis(30)).await;
        if open <= m {
            if !clean {
                let _ = tx
                    .send(Err(std::io::Error::other("stream broken on purpose")))
                    .await;
            }
            return;
        }
        tx.closed().await;
    });
    let mut r = Response::new(ChanBody(rx));
    let ct = if ndjson {
        "application/x-ndjson"
    } else {
        "text/event-stream"
    };
    r.headers_mut().insert("content-type", ct.parse().unwrap());
    r
}

/// `counts` is only read: [`serve`] counted this request before it got here.
async fn handle(
    req: Request<hyper::body::Incoming>,
    st: Arc<Stats>,
    counts: Arc<Counts>,
) -> Result<Response<ChanBody>, Infallible> {
    let path = req.uri().path().to_owned();
    let _ = req.into_body().collect().await;
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let n = |s: &str| s.parse::<u64>().unwrap();
    let r = match segs.as_slice() {
        ["ok"] => json(serde_json::json!({"ok": true})),
        ["sse", p, c, m] => stream(&st, "sse", p, n(c), n(m), false, false),
        ["ndjson", p, c, m] => stream(&st, "ndjson", p, n(c), n(m), true, false),
        ["end", p, c, m] => stream(&st, "end", p, n(c), n(m), false, true),
        ["poll", p, k] => {
            let i = {
                let mut opens = st.opens.lock().unwrap();
                let c = opens.entry(format!("poll/{p}")).or_default();
                *c += 1;
                *c - 1
            };
            if i >= n(k) {
                // Held until the client goes away.
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            let mut polls = st.polls.lock().unwrap();
            match i % 3 {
                0 => {
                    polls.0 += 1;
                    json(serde_json::json!({"type": "news"}))
                }
                1 => {
                    polls.1 += 1;
                    body(204, "")
                }
                _ => {
                    polls.2 += 1;
                    body(200, "")
                }
            }
        }
        ["game", "create"] => {
            let c = st.creates.fetch_add(1, SeqCst) + 1;
            json(serde_json::json!({"game": {"id": format!("g-{c}")}}))
        }
        ["game", "create-flaky"] => {
            let c = st.creates.fetch_add(1, SeqCst) + 1;
            if c % 2 == 1 {
                st.failed_creates.fetch_add(1, SeqCst);
                body(500, "{}")
            } else {
                json(serde_json::json!({"game": {"id": format!("g-{c}")}}))
            }
        }
        ["game", id, "join"] => {
            *st.joins
                .lock()
                .unwrap()
                .entry((*id).to_owned())
                .or_default() += 1;
            json(serde_json::json!({"joined": true}))
        }
        ["game", id, what @ ("state" | "play")] => {
            let c = {
                let mut calls = st.calls.lock().unwrap();
                let c = calls.entry((*id).to_owned()).or_default();
                *c += 1;
                *c
            };
            match (*what, c > 2) {
                ("state", false) => json(serde_json::json!({"state": "playing"})),
                ("state", true) => json(serde_json::json!({"state": "finished"})),
                (_, false) => json(serde_json::json!({"ok": true})),
                (_, true) => json(serde_json::json!({"error": {"code": "game_finished"}})),
            }
        }
        ["v1", "session"] => {
            let c = counts.requests.load(SeqCst);
            json(serde_json::json!({"session": {"token": format!("t-{c}")}}))
        }
        ["v1", "games"] => {
            let c = st.creates.fetch_add(1, SeqCst) + 1;
            json(serde_json::json!({"game": {"id": format!("g-{c}")}}))
        }
        ["v1", "games", id, "players"] => {
            *st.joins
                .lock()
                .unwrap()
                .entry((*id).to_owned())
                .or_default() += 1;
            json(serde_json::json!({"seat": 1}))
        }
        ["v1", "games", _] => json(serde_json::json!({"state": "playing"})),
        ["v1", "games", id, "plays"] => {
            let c = {
                let mut calls = st.calls.lock().unwrap();
                let c = calls.entry((*id).to_owned()).or_default();
                *c += 1;
                *c
            };
            if c >= 5 {
                json(serde_json::json!({"error": {"code": "game_finished"}}))
            } else {
                json(serde_json::json!({"accepted": true}))
            }
        }
        ["v1", "events"] => {
            let (tx, rx) = mpsc::channel(4);
            let st = st.clone();
            tokio::spawn(async move {
                let mut kind = "hello";
                loop {
                    let ev = format!("event: {kind}\ndata: {{\"type\":\"{kind}\"}}\n\n");
                    if tx.send(Ok(Bytes::from(ev))).await.is_err() {
                        return;
                    }
                    *st.sent.lock().unwrap().entry(kind.to_owned()).or_default() += 1;
                    kind = "turn";
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
            let mut r = Response::new(ChanBody(rx));
            r.headers_mut()
                .insert("content-type", "text/event-stream".parse().unwrap());
            r
        }
        ["v1", "lobby", "wait"] => {
            tokio::time::sleep(Duration::from_millis(100)).await;
            body(204, "")
        }
        _ => body(404, "{}"),
    };
    Ok(r)
}
