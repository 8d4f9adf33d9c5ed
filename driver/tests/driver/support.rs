//! The driver's test server — the testkit's loopback server (HTTP/1.1 or h2c) with the
//! routes these tests call — and helpers to run scenarios against it.
//!
//! Routes: `/ok`; `/delay/{ms}`; `/status/{code}`; `/code/{name}` (200 with
//! `{"error":{"code":name}}`); `/limited` (a token bucket: 200 or 429 + `Retry-After: 1`);
//! `/drop` (resets the connection without answering); `/game/new` (`{"game":{"id":"g-N"}}`);
//! `/echo/...` (the request's path, authorization header and body as JSON); `/blob/{name}`
//! (`name` repeated 100 times).

use std::{
    ops::Deref,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
    time::{Duration, Instant},
};

use herd_driver::{RunOptions, Scenario};
use herd_model::RunResult;
pub use herd_testkit::Proto;
use herd_testkit::{Reply, Server};
use serde_json::json;

/// A token bucket: starts full, refills continuously; a 429 says `Retry-After: 1`.
pub struct Bucket {
    pub capacity: f64,
    pub per_second: f64,
    pub retry_after_s: u64,
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    pub fn new(capacity: f64, per_second: f64) -> Self {
        Self {
            capacity,
            per_second,
            retry_after_s: 1,
            state: Mutex::new((capacity, Instant::now())),
        }
    }

    fn take(&self) -> bool {
        let mut s = self.state.lock().unwrap();
        let now = Instant::now();
        s.0 = (s.0 + (now - s.1).as_secs_f64() * self.per_second).min(self.capacity);
        s.1 = now;
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What the routes counted besides the server's own counts.
#[derive(Default)]
pub struct Stats {
    pub granted: AtomicU64,
    pub limited: AtomicU64,
    games: AtomicU64,
    /// First and last `/limited` request.
    pub limited_window: Mutex<Option<(Instant, Instant)>>,
}

/// A test server, what its routes count besides (`S`) and, for most, a hold on [`QUIET`]
/// for reading. It reads as the testkit's [`Server`] (url, requests, connections, ...).
pub struct Held<S> {
    server: Server,
    pub stats: Arc<S>,
    _load: Option<tokio::sync::RwLockReadGuard<'static, ()>>,
}

impl<S> Deref for Held<S> {
    type Target = Server;

    fn deref(&self) -> &Server {
        &self.server
    }
}

impl<S> Held<S> {
    /// `server` and its route state, holding [`QUIET`] for reading while it lives.
    pub async fn loaded(server: Server, stats: Arc<S>) -> Self {
        let load = QUIET.read().await;
        Self {
            server,
            stats,
            _load: Some(load),
        }
    }
}

/// The server of this file, with the routes above.
pub type TestServer = Held<Stats>;

impl Held<Stats> {
    pub async fn start(proto: Proto) -> Self {
        Self::with_bucket(proto, Bucket::new(1e9, 0.0)).await
    }

    pub async fn with_bucket(proto: Proto, bucket: Bucket) -> Self {
        let (server, stats) = routes(proto, bucket).await;
        Self::loaded(server, stats).await
    }

    /// A server for a test that holds [`QUIET`] for writing.
    pub async fn exclusive(
        proto: Proto,
        bucket: Bucket,
    ) -> (Self, tokio::sync::RwLockWriteGuard<'static, ()>) {
        let quiet = QUIET.write().await;
        (Self::unlocked(proto, bucket).await, quiet)
    }

    /// A server that does not hold [`QUIET`].
    pub async fn unlocked(proto: Proto, bucket: Bucket) -> Self {
        let (server, stats) = routes(proto, bucket).await;
        Self {
            server,
            stats,
            _load: None,
        }
    }
}

pub fn blob(name: &str) -> Vec<u8> {
    name.repeat(100).into_bytes()
}

async fn routes(proto: Proto, bucket: Bucket) -> (Server, Arc<Stats>) {
    let stats = Arc::new(Stats::default());
    let (limiter, games) = (Arc::new((bucket, stats.clone())), stats.clone());
    let server = Server::http(proto)
        .route("/ok", Reply::ok().json(json!({"ok": true, "n": 1})))
        .route_fn("/delay/{ms}", |req| async move {
            Reply::ok()
                .json(json!({"ok": true}))
                .after(Duration::from_millis(req.num("ms")))
        })
        .route_fn("/status/{code}", |req| async move {
            Reply::new(req.num("code") as u16).json(json!({}))
        })
        .route_fn("/code/{name}", |req| async move {
            Reply::ok().json(json!({"error": {"code": req.param("name")}}))
        })
        .route_fn("/limited", move |_| {
            let (bucket, stats) = &*limiter;
            let now = Instant::now();
            {
                let mut w = stats.limited_window.lock().unwrap();
                let first = w.map_or(now, |(f, _)| f);
                *w = Some((first, now));
            }
            let reply = if bucket.take() {
                stats.granted.fetch_add(1, SeqCst);
                Reply::ok().json(json!({"ok": true}))
            } else {
                stats.limited.fetch_add(1, SeqCst);
                Reply::new(429)
                    .json(json!({"error": {"code": "slow_down"}}))
                    .header("retry-after", bucket.retry_after_s)
            };
            async move { reply }
        })
        .route("/drop", Reply::reset())
        .route_fn("/game/new", move |_| {
            let n = games.games.fetch_add(1, SeqCst) + 1;
            async move { Reply::ok().json(json!({"game": {"id": format!("g-{n}")}})) }
        })
        .route_fn("/echo/{*rest}", |req| async move {
            Reply::ok().json(json!({
                "path": req.path_and_query(),
                "auth": req.header("authorization").unwrap_or(""),
                "body": String::from_utf8_lossy(&req.body),
            }))
        })
        .route_fn("/blob/{name}", |req| async move {
            Reply::ok().body(blob(req.param("name")))
        })
        .fallback(Reply::new(404).json(json!({"error": {"code": "no_route"}})))
        .start()
        .await;
    (server, stats)
}

/// Every test that makes load holds this for reading (a [`TestServer`] holds it while it
/// lives); the tests that measure latency or flood the machine hold it for writing, so on a
/// 2-core machine no flood runs beside a measurement of time.
pub static QUIET: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Options for tests: short intervals, a short grace, 2 cores.
pub fn options() -> RunOptions {
    RunOptions {
        interval: Duration::from_millis(200),
        grace: Duration::from_secs(2),
        cores: 2,
        ..RunOptions::default()
    }
}

/// Parses `src` with `{url}` replaced by the server's URL.
pub fn scenario(src: &str, server: &Server) -> Scenario {
    scenario_at(src, &server.url())
}

/// Parses `src` with `{url}` replaced by `url`.
pub fn scenario_at(src: &str, url: &str) -> Scenario {
    Scenario::parse("test.toml", &src.replace("{url}", url), &[]).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs the file's players.
pub async fn run(s: Scenario) -> RunResult {
    herd_driver::run(s, options()).await.unwrap()
}
