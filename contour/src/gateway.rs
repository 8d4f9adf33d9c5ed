//! The contour's gateway: players speak h2c to it (a streamed event channel plus calls), and
//! it proxies each call to the backend over HTTP/1.1 keep-alive through hyper-util's pooled
//! client. The pool's idle cap per host (`--backend-max-idle`) is the seeds' bug and its fix:
//! with 2, every connection beyond two idle ones is closed by the gateway as soon as its call
//! ends, so a busy gateway opens a new TCP connection for nearly every call and holds the
//! TIME_WAIT sockets; with 512 the connections are reused. `docs/contour.md` has the exact
//! pool semantics.

use std::{
    convert::Infallible,
    future::Future,
    net::SocketAddr,
    str::FromStr as _,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header, uri::Authority};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::{TokioExecutor, TokioTimer},
    server::conn::auto,
};
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpListener;

use super::{
    events::{EventStream, Hub, SubscribeError},
    limiter::{Limiter, Rate, Verdict, retry_after_secs},
    serve::{self, ConnCounters},
};

/// The calls a player can make (`POST /v1/call/<op>`) and the backend route each goes to.
pub const OPS: &[(&str, Method, &str)] = &[
    ("session.get", Method::GET, "/v1/session"),
    ("game.join", Method::POST, "/v1/game/join"),
    ("game.state", Method::POST, "/v1/game/state"),
    ("game.move", Method::POST, "/v1/game/move"),
    ("game.history", Method::POST, "/v1/game/history"),
    ("games.list", Method::POST, "/v1/games/list"),
];

fn op_names() -> String {
    OPS.iter()
        .map(|(n, _, _)| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `herd contour gateway`: h2c for players, HTTP/1.1 keep-alive to the backend.
#[derive(Clone, Debug, clap::Args)]
pub struct GatewayArgs {
    /// Address to listen on for players (port 0 picks a free one; the `ready` line names it).
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub listen: SocketAddr,
    /// The backend, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:8082")]
    pub backend: String,
    /// Idle keep-alive connections to the backend kept for reuse. A connection that finishes
    /// a call while this many are already idle is closed by the gateway: 2 reproduces the
    /// seeds' churn (Go's DefaultMaxIdleConnsPerHost), 512 is their fix, 0 opens a new
    /// connection for every call.
    #[arg(long, default_value_t = 512)]
    pub backend_max_idle: usize,
    /// An idle backend connection unused this long is closed by the gateway.
    #[arg(long, default_value = "90s", value_parser = serve::parse_duration)]
    pub backend_idle_timeout: Duration,
    /// Bound on one backend call: connecting, sending and reading the whole response.
    #[arg(long, default_value = "5s", value_parser = serve::parse_duration)]
    pub backend_timeout: Duration,
    /// Worker threads of the runtime.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Calls of `--rate-limited-op` allowed per session token: `R/s`, `R/m` or `off`.
    #[arg(long, default_value = "20/s")]
    pub rate_limit: Rate,
    /// Calls a session may make at once before the rate applies (default: the rate per
    /// second, rounded up).
    #[arg(long)]
    pub rate_burst: Option<u32>,
    /// The op the rate limit applies to.
    #[arg(long, default_value = "games.list")]
    pub rate_limited_op: String,
    /// Session tokens the limiter tracks at once; past it new tokens get 429 until tracked
    /// buckets refill.
    #[arg(long, default_value_t = 100_000)]
    pub rate_limit_keys: usize,
    /// Player connections open at once; at the cap new ones wait in the listen queue.
    #[arg(long, default_value_t = 10_000)]
    pub max_connections: usize,
    /// Concurrent HTTP/2 streams per player connection.
    #[arg(long, default_value_t = 250)]
    pub max_streams: u32,
    /// Subscriptions (`/v1/subscribe` streams) open at once; past it 503.
    #[arg(long, default_value_t = 10_000)]
    pub max_subscriptions: usize,
    /// Events queued per subscription; an event for a full queue is dropped and counted.
    #[arg(long, default_value_t = 64)]
    pub event_queue: usize,
    /// Interval of the `tick` event on every subscription.
    #[arg(long, default_value = "1s", value_parser = serve::parse_duration)]
    pub tick: Duration,
    /// Largest call body accepted (and backend response read); larger ones get 413 (502).
    #[arg(long, default_value = "64KiB", value_parser = serve::parse_size)]
    pub max_body: usize,
    /// On SIGTERM/SIGINT, how long calls and streams get to finish before the process exits.
    #[arg(long, default_value = "5s", value_parser = serve::parse_duration)]
    pub grace: Duration,
    /// Print every failed call (backend unreachable, timeouts, refused subscriptions) on
    /// stderr.
    #[arg(long)]
    pub verbose: bool,
}

#[derive(Debug, Default)]
struct Stats {
    conns: Arc<ConnCounters>,
    calls: AtomicU64,
    rate_limited: AtomicU64,
    backend_errors: AtomicU64,
}

type GatewayBody = Either<Full<Bytes>, EventStream>;

struct App {
    client: Client<HttpConnector, Full<Bytes>>,
    backend: String,
    backend_timeout: Duration,
    max_body: usize,
    limiter: Limiter,
    limited_op: String,
    hub: Arc<Hub>,
    stats: Stats,
    verbose: bool,
}

/// A gateway bound to its listener, not yet serving.
pub struct Gateway {
    app: Arc<App>,
    listener: TcpListener,
    addr: SocketAddr,
    max_connections: usize,
    max_streams: u32,
    grace: Duration,
}

/// Why a backend call failed.
#[derive(Debug, thiserror::Error)]
enum ProxyError {
    #[error("the backend at {0} did not answer within {1:?}")]
    Timeout(String, Duration),
    #[error("calling the backend at {0}: {1}")]
    Unavailable(String, String),
    #[error("reading the backend's response from {0}: {1}")]
    BadResponse(String, String),
}

impl Gateway {
    /// Checks the flags and builds the backend client for a gateway that will serve on
    /// `listener`. Connects to nothing yet: the pool opens backend connections on demand.
    pub async fn start(args: &GatewayArgs, listener: TcpListener) -> anyhow::Result<Gateway> {
        let addr = listener
            .local_addr()
            .context("reading the gateway's address")?;
        let authority = Authority::from_str(&args.backend)
            .with_context(|| format!("--backend `{}` is not HOST:PORT", args.backend))?;
        if authority.port_u16().is_none() {
            anyhow::bail!("--backend `{}` has no port: write HOST:PORT", args.backend);
        }
        if !OPS.iter().any(|(n, _, _)| *n == args.rate_limited_op) {
            anyhow::bail!(
                "--rate-limited-op `{}` is not an op; the ops are {}",
                args.rate_limited_op,
                op_names()
            );
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(args.backend_timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(args.backend_max_idle)
            .pool_idle_timeout(args.backend_idle_timeout)
            // Without a timer the pool only notices expired connections when it next looks
            // for one; with it, idle ones are closed on time.
            .pool_timer(TokioTimer::new())
            .build(connector);
        let burst = args.rate_burst.unwrap_or_else(|| {
            args.rate_limit
                .per_sec
                .ceil()
                .clamp(1.0, f64::from(u32::MAX)) as u32
        });
        Ok(Gateway {
            app: Arc::new(App {
                client,
                backend: authority.to_string(),
                backend_timeout: args.backend_timeout,
                max_body: args.max_body,
                limiter: Limiter::new(args.rate_limit, burst, args.rate_limit_keys),
                limited_op: args.rate_limited_op.clone(),
                hub: Hub::new(args.max_subscriptions, args.event_queue, args.tick),
                stats: Stats::default(),
                verbose: args.verbose,
            }),
            listener,
            addr,
            max_connections: args.max_connections,
            max_streams: args.max_streams,
            grace: args.grace,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` completes, then ends every subscription and lets calls in
    /// flight finish within the grace.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let app = self.app;
        let counters = app.stats.conns.clone();
        // One builder for both protocols: it reads the first bytes and serves h2c on the
        // HTTP/2 preface (prior knowledge), HTTP/1.1 otherwise.
        let mut http = auto::Builder::new(TokioExecutor::new());
        http.http2().max_concurrent_streams(self.max_streams);
        let graceful = serve::accept_until(
            self.listener,
            self.max_connections,
            counters,
            shutdown,
            |io, watcher| {
                let app = app.clone();
                let conn = http
                    .serve_connection(
                        io,
                        hyper::service::service_fn(move |req| {
                            let app = app.clone();
                            async move { Ok::<_, Infallible>(app.handle(req).await) }
                        }),
                    )
                    .into_owned();
                let watched = watcher.watch(conn);
                async move {
                    // A player that vanished mid-call is its own business.
                    let _ = watched.await;
                }
            },
        )
        .await;
        app.hub.close();
        serve::drain(graceful, self.grace).await;
        Ok(())
    }
}

fn full(resp: Response<Full<Bytes>>) -> Response<GatewayBody> {
    resp.map(Either::Left)
}

#[derive(Debug, Deserialize)]
struct SessionResp {
    account: AccountRef,
}

#[derive(Debug, Deserialize)]
struct AccountRef {
    id: i64,
}

#[derive(Debug, Deserialize)]
struct GameEvt {
    id: i64,
    #[serde(default)]
    players: Vec<i64>,
    turn: Option<i64>,
    #[serde(default)]
    status: String,
    #[serde(default)]
    seat: Option<usize>,
    #[serde(default)]
    started: bool,
}

#[derive(Debug, Deserialize)]
struct MoveEvt {
    number: i64,
    account_id: i64,
}

#[derive(Debug, Deserialize)]
struct CallResp {
    #[serde(default)]
    accepted: bool,
    #[serde(rename = "move")]
    played: Option<MoveEvt>,
    game: Option<GameEvt>,
}

impl App {
    async fn handle(&self, req: Request<Incoming>) -> Response<GatewayBody> {
        let path = req.uri().path();
        match (req.method(), path) {
            (&Method::GET, "/healthz") => {
                full(serve::json(StatusCode::OK, &json!({ "status": "ok" })))
            }
            (&Method::GET, "/v1/stats") => full(self.stats_response()),
            (&Method::GET, "/v1/subscribe") => self.subscribe(req).await,
            (&Method::POST, p) if p.starts_with("/v1/call/") => {
                let op = p["/v1/call/".len()..].to_owned();
                full(self.call(&op, req).await)
            }
            (_, "/healthz" | "/v1/stats" | "/v1/subscribe") => full(serve::error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                &format!("{path} takes GET"),
            )),
            (_, p) if p.starts_with("/v1/call/") => full(serve::error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "calls take POST",
            )),
            _ => full(serve::error(
                StatusCode::NOT_FOUND,
                "not_found",
                &format!("no route {path}"),
            )),
        }
    }

    fn unauthenticated() -> Response<Full<Bytes>> {
        serve::error(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "missing `Authorization: Bearer TOKEN`",
        )
    }

    async fn call(&self, op: &str, req: Request<Incoming>) -> Response<Full<Bytes>> {
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        let Some(&(_, ref method, route)) = OPS.iter().find(|(n, _, _)| *n == op) else {
            return serve::error(
                StatusCode::NOT_FOUND,
                "unknown_op",
                &format!("no op `{op}`; the ops are {}", op_names()),
            );
        };
        let (parts, body) = req.into_parts();
        let Some(token) = serve::bearer(&parts.headers) else {
            return Self::unauthenticated();
        };
        if op == self.limited_op
            && let Verdict::Deny { retry_after } = self.limiter.check(token, Instant::now())
        {
            self.stats.rate_limited.fetch_add(1, Ordering::Relaxed);
            let secs = retry_after_secs(retry_after);
            let mut resp = serve::error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limited",
                &format!("`{op}` is limited per session; retry in {secs}s"),
            );
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            return resp;
        }
        let body = match serve::read_body(body, self.max_body).await {
            Ok(b) => b,
            Err(e @ serve::BodyError::TooLarge(_)) => {
                return serve::error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    &e.to_string(),
                );
            }
            Err(e) => return serve::error(StatusCode::BAD_REQUEST, "bad_request", &e.to_string()),
        };
        let (status, bytes) = match self.backend_call(method.clone(), route, token, body).await {
            Ok(r) => r,
            Err(e) => return self.proxy_failure(op, e),
        };
        if status == StatusCode::OK {
            self.publish_events(op, &bytes);
        }
        let mut resp = Response::new(Full::new(bytes));
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp
    }

    fn proxy_failure(&self, what: &str, e: ProxyError) -> Response<Full<Bytes>> {
        self.stats.backend_errors.fetch_add(1, Ordering::Relaxed);
        if self.verbose {
            eprintln!("gateway: {what}: {e}");
        }
        let (status, code) = match e {
            ProxyError::Timeout(..) => (StatusCode::GATEWAY_TIMEOUT, "backend_timeout"),
            ProxyError::Unavailable(..) => (StatusCode::BAD_GATEWAY, "backend_unavailable"),
            ProxyError::BadResponse(..) => (StatusCode::BAD_GATEWAY, "backend_bad_response"),
        };
        serve::error(status, code, &e.to_string())
    }

    /// One call to the backend through the pooled client; the whole response is read, which
    /// is what hands the connection back to the pool (or closes it, past the idle cap).
    async fn backend_call(
        &self,
        method: Method,
        route: &str,
        token: &str,
        body: Bytes,
    ) -> Result<(StatusCode, Bytes), ProxyError> {
        let unavailable = |e: String| ProxyError::Unavailable(self.backend.clone(), e);
        let mut req = Request::builder()
            .method(method.clone())
            .uri(format!("http://{}{route}", self.backend))
            .header(header::AUTHORIZATION, format!("Bearer {token}"));
        if method == Method::POST {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Full::new(body))
            .map_err(|e| unavailable(format!("building the request: {e}")))?;
        let exchange = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| unavailable(error_chain(&e)))?;
            let status = resp.status();
            let bytes = serve::read_body(resp.into_body(), self.max_body)
                .await
                .map_err(|e| ProxyError::BadResponse(self.backend.clone(), e.to_string()))?;
            Ok((status, bytes))
        };
        tokio::time::timeout(self.backend_timeout, exchange)
            .await
            .map_err(|_| ProxyError::Timeout(self.backend.clone(), self.backend_timeout))?
    }

    /// Tells the other players of a game what a call just did, on their subscriptions.
    fn publish_events(&self, op: &str, body: &[u8]) {
        if op != "game.move" && op != "game.join" {
            return;
        }
        let Ok(resp) = serde_json::from_slice::<CallResp>(body) else {
            return;
        };
        let Some(game) = resp.game else { return };
        if op == "game.move" {
            let (true, Some(m)) = (resp.accepted, resp.played) else {
                return;
            };
            for &p in game.players.iter().filter(|&&p| p != m.account_id) {
                self.hub.publish(
                    p,
                    &json!({ "event": "opponent_moved", "game_id": game.id, "by": m.account_id,
                             "number": m.number }),
                );
                if game.status == "finished" {
                    self.hub
                        .publish(p, &json!({ "event": "game_finished", "game_id": game.id }));
                }
            }
            if let Some(t) = game.turn.filter(|&t| t != m.account_id) {
                self.hub
                    .publish(t, &json!({ "event": "your_turn", "game_id": game.id }));
            }
        } else if game.started {
            let joiner = game.seat.and_then(|s| game.players.get(s).copied());
            for &p in game.players.iter().filter(|&&p| Some(p) != joiner) {
                self.hub
                    .publish(p, &json!({ "event": "game_started", "game_id": game.id }));
            }
            if let Some(t) = game.turn.filter(|&t| Some(t) != joiner) {
                self.hub
                    .publish(t, &json!({ "event": "your_turn", "game_id": game.id }));
            }
        }
    }

    async fn subscribe(&self, req: Request<Incoming>) -> Response<GatewayBody> {
        let Some(token) = serve::bearer(req.headers()) else {
            return full(Self::unauthenticated());
        };
        // The session check goes through the backend like any call, so a subscription costs
        // one pooled backend request at its start.
        let (status, bytes) = match self
            .backend_call(Method::GET, "/v1/session", token, Bytes::new())
            .await
        {
            Ok(r) => r,
            Err(e) => return full(self.proxy_failure("subscribe", e)),
        };
        if status != StatusCode::OK {
            let mut resp = Response::new(Full::new(bytes));
            *resp.status_mut() = status;
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            return full(resp);
        }
        let account = match serde_json::from_slice::<SessionResp>(&bytes) {
            Ok(s) => s.account.id,
            Err(e) => {
                return full(self.proxy_failure(
                    "subscribe",
                    ProxyError::BadResponse(self.backend.clone(), format!("session: {e}")),
                ));
            }
        };
        let hello = super::events::line(&json!({ "event": "subscribed", "account_id": account }));
        match self.hub.subscribe(account, hello) {
            Ok(stream) => {
                let mut resp = Response::new(Either::Right(stream));
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/x-ndjson"),
                );
                resp.headers_mut()
                    .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
                resp
            }
            Err(e) => {
                if self.verbose {
                    eprintln!("gateway: subscribe: {e}");
                }
                let code = match e {
                    SubscribeError::Full(_) => "too_many_subscriptions",
                    SubscribeError::Closed => "shutting_down",
                };
                full(serve::error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    code,
                    &e.to_string(),
                ))
            }
        }
    }

    fn stats_response(&self) -> Response<Full<Bytes>> {
        let s = &self.stats;
        let c = &self.hub.counters;
        serve::json(
            StatusCode::OK,
            &json!({
                "connections_accepted": s.conns.accepted.load(Ordering::Relaxed),
                "connections_open": s.conns.open.load(Ordering::Relaxed),
                "accept_errors": s.conns.accept_errors.load(Ordering::Relaxed),
                "calls": s.calls.load(Ordering::Relaxed),
                "rate_limited": s.rate_limited.load(Ordering::Relaxed),
                "rate_limit_keys": self.limiter.keys(),
                "backend_errors": s.backend_errors.load(Ordering::Relaxed),
                "subscriptions_open": self.hub.open(),
                "events_sent": c.sent.load(Ordering::Relaxed),
                "events_dropped": c.dropped.load(Ordering::Relaxed),
            }),
        )
    }
}

/// An error and its sources on one line: hyper-util's client error alone says only
/// "client error (Connect)".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// `herd contour gateway`: binds, prints `ready ADDR`, serves until SIGTERM/SIGINT.
pub fn run(args: &GatewayArgs) -> anyhow::Result<()> {
    let rt = serve::runtime(args.workers, "gateway")?;
    let result = rt.block_on(async {
        let listener = serve::bind(args.listen, "gateway").await?;
        let gateway = Gateway::start(args, listener).await?;
        let stop = serve::stop_signal()?;
        serve::say_ready(gateway.local_addr());
        gateway.serve(stop).await
    });
    // Tasks still running past the grace (a stream that never finished) are dropped.
    rt.shutdown_timeout(Duration::from_millis(100));
    result
}
