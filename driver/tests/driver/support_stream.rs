//! The routes for the player model on the testkit's loopback server (HTTP/1.1 or h2c):
//! event streams, long polls and games, counting what they sent and served.
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
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
    time::Duration,
};

use herd_testkit::{Reply, Req, Server};
use serde_json::json;

use crate::support::Held;
pub use crate::support::Proto;

/// What the routes counted besides the server's own counts.
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

    /// Counts one more of `key` in `map` and returns the new count.
    fn bump(map: &Mutex<BTreeMap<String, u64>>, key: String) -> u64 {
        let mut m = map.lock().unwrap();
        let c = m.entry(key).or_default();
        *c += 1;
        *c
    }
}

/// The server of this file, with the routes above.
pub type StreamServer = Held<Stats>;

impl Held<Stats> {
    pub async fn start(proto: Proto) -> Self {
        let stats = Arc::new(Stats::default());
        let server = routes(Server::http(proto), &stats).start().await;
        Self::loaded(server, stats).await
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

const TYPES: [&str; 3] = ["move", "move", "chat"];

/// An event stream: `n` events, then (for the player's first `m` openings) a break
/// (`clean`: an end), else held open until the client goes away.
fn stream(st: &Stats, kind: &str, req: &Req, ndjson: bool, clean: bool) -> Reply {
    let (n, m) = (req.num("n"), req.num("m"));
    let open = Stats::bump(&st.opens, format!("{kind}/{}", req.param("p")));
    let events: Vec<String> = {
        let mut sent = st.sent.lock().unwrap();
        (0..n)
            .map(|i| {
                let t = TYPES[i as usize % 3];
                *sent.entry(t.to_owned()).or_default() += 1;
                if ndjson {
                    format!("{{\"type\":\"{t}\",\"i\":{i}}}\n")
                } else {
                    format!(": keep-alive\nevent: {t}\ndata: {{\"type\":\"{t}\",\"i\":{i}}}\n\n")
                }
            })
            .collect()
    };
    let ct = if ndjson {
        "application/x-ndjson"
    } else {
        "text/event-stream"
    };
    Reply::ok().header("content-type", ct).stream(move |c| {
        let events = events.clone();
        async move {
            for ev in events {
                c.send(ev).await;
            }
            // Let the events leave before the break, so the client counts them all.
            tokio::time::sleep(Duration::from_millis(30)).await;
            if open <= m {
                if !clean {
                    c.fail().await;
                }
                return;
            }
            c.closed().await;
        }
    })
}

/// The routes above on `b`, counting into `st`.
fn routes(b: herd_testkit::Builder, st: &Arc<Stats>) -> herd_testkit::Builder {
    // Each route's closure gets its own handle on the stats.
    let st = || st.clone();
    let on = |st: Arc<Stats>, f: fn(&Stats, &Req) -> Reply| {
        move |req: Req| {
            let r = f(&st, &req);
            async move { r }
        }
    };
    b.route("/ok", Reply::ok().json(json!({"ok": true})))
        .route_fn(
            "/sse/{p}/{n}/{m}",
            on(st(), |st, req| stream(st, "sse", req, false, false)),
        )
        .route_fn(
            "/ndjson/{p}/{n}/{m}",
            on(st(), |st, req| stream(st, "ndjson", req, true, false)),
        )
        .route_fn(
            "/end/{p}/{n}/{m}",
            on(st(), |st, req| stream(st, "end", req, false, true)),
        )
        .route_fn("/poll/{p}/{k}", {
            let st = st();
            move |req| {
                let st = st.clone();
                async move {
                    let i = Stats::bump(&st.opens, format!("poll/{}", req.param("p"))) - 1;
                    if i >= req.num("k") {
                        return Reply::hold();
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let mut polls = st.polls.lock().unwrap();
                    match i % 3 {
                        0 => {
                            polls.0 += 1;
                            Reply::ok().body(json!({"type": "news"}).to_string())
                        }
                        1 => {
                            polls.1 += 1;
                            Reply::new(204)
                        }
                        _ => {
                            polls.2 += 1;
                            Reply::ok()
                        }
                    }
                }
            }
        })
        .route_fn(
            "/game/create",
            on(st(), |st, _| {
                let c = st.creates.fetch_add(1, SeqCst) + 1;
                game(c)
            }),
        )
        .route_fn(
            "/game/create-flaky",
            on(st(), |st, _| {
                let c = st.creates.fetch_add(1, SeqCst) + 1;
                if c % 2 == 1 {
                    st.failed_creates.fetch_add(1, SeqCst);
                    Reply::new(500).body("{}")
                } else {
                    game(c)
                }
            }),
        )
        .route_fn(
            "/game/{id}/join",
            on(st(), |st, req| {
                Stats::bump(&st.joins, req.param("id").to_owned());
                ok(json!({"joined": true}))
            }),
        )
        .route_fn(
            "/game/{id}/{what}",
            on(st(), |st, req| {
                let what = req.param("what");
                if what != "state" && what != "play" {
                    return Reply::new(404).body("{}");
                }
                let c = Stats::bump(&st.calls, req.param("id").to_owned());
                match (what, c > 2) {
                    ("state", false) => ok(json!({"state": "playing"})),
                    ("state", true) => ok(json!({"state": "finished"})),
                    (_, false) => ok(json!({"ok": true})),
                    (_, true) => ok(json!({"error": {"code": "game_finished"}})),
                }
            }),
        )
        .route_fn("/v1/session", |req| async move {
            // The request's own number: the server counted it before its route ran.
            ok(json!({"session": {"token": format!("t-{}", req.number)}}))
        })
        .route_fn(
            "/v1/games",
            on(st(), |st, _| game(st.creates.fetch_add(1, SeqCst) + 1)),
        )
        .route_fn(
            "/v1/games/{id}/players",
            on(st(), |st, req| {
                Stats::bump(&st.joins, req.param("id").to_owned());
                ok(json!({"seat": 1}))
            }),
        )
        .route("/v1/games/{id}", ok(json!({"state": "playing"})))
        .route_fn(
            "/v1/games/{id}/plays",
            on(st(), |st, req| {
                if Stats::bump(&st.calls, req.param("id").to_owned()) >= 5 {
                    ok(json!({"error": {"code": "game_finished"}}))
                } else {
                    ok(json!({"accepted": true}))
                }
            }),
        )
        .route("/v1/events", {
            let st = st();
            Reply::ok()
                .header("content-type", "text/event-stream")
                .stream(move |c| {
                    let st = st.clone();
                    async move {
                        let mut kind = "hello";
                        loop {
                            let ev = format!("event: {kind}\ndata: {{\"type\":\"{kind}\"}}\n\n");
                            if !c.send(ev).await {
                                return;
                            }
                            *st.sent.lock().unwrap().entry(kind.to_owned()).or_default() += 1;
                            kind = "turn";
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                })
        })
        .route(
            "/v1/lobby/wait",
            Reply::new(204).after(Duration::from_millis(100)),
        )
        .fallback(Reply::new(404).body("{}"))
}

/// 200 with `v` as its body (these routes answer JSON without saying so, as before).
fn ok(v: serde_json::Value) -> Reply {
    Reply::ok().body(v.to_string())
}

fn game(n: u64) -> Reply {
    ok(json!({"game": {"id": format!("g-{n}")}}))
}
