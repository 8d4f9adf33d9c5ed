//! The contour's backend: an HTTP/1.1 keep-alive JSON API for a small turn-based game. Every
//! call but the health and stats checks carries a session token that one database round trip
//! resolves to an account; moves are written, state and history read, so each request costs a
//! little real CPU and I/O.

use std::{
    convert::Infallible,
    future::Future,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpListener;

use super::{
    serve::{self, ConnCounters},
    store::{Refusal, Store, StoreError, StoreOptions},
};

/// `herd contour backend`: the game API over HTTP/1.1 keep-alive.
#[derive(Clone, Debug, clap::Args)]
pub struct BackendArgs {
    /// Address to listen on (port 0 picks a free one; the `ready` line names it).
    #[arg(long, default_value = "127.0.0.1:8082")]
    pub listen: SocketAddr,
    /// Database: `sqlite:PATH` (created if missing) or `postgres://USER:PASS@HOST/DB`. The
    /// tables are created if absent.
    #[arg(long, default_value = "sqlite:herd-contour.db")]
    pub db: String,
    /// Worker threads of the runtime.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// Database connections in the pool.
    #[arg(long, default_value_t = 8)]
    pub db_max_connections: u32,
    /// Bound on waiting for a database connection, and SQLite's wait for its write lock.
    #[arg(long, default_value = "5s", value_parser = serve::parse_duration)]
    pub db_timeout: Duration,
    /// Connections open at once; at the cap new ones wait in the kernel's listen queue.
    #[arg(long, default_value_t = 4096)]
    pub max_connections: usize,
    /// Largest request body accepted (e.g. 64KiB); larger ones get 413.
    #[arg(long, default_value = "64KiB", value_parser = serve::parse_size)]
    pub max_body: usize,
    /// A game finishes after this many moves (0: never).
    #[arg(long, default_value_t = 1000)]
    pub max_moves: i64,
    /// Most moves one `game/history` call returns.
    #[arg(long, default_value_t = 100)]
    pub max_history: i64,
    /// On SIGTERM/SIGINT, how long open connections get to finish before the process exits.
    #[arg(long, default_value = "5s", value_parser = serve::parse_duration)]
    pub grace: Duration,
    /// Print every failed request (4xx other than domain outcomes, 5xx) on stderr.
    #[arg(long)]
    pub verbose: bool,
    /// Time each API request waits before it is answered (e.g. 5ms), standing for the
    /// downstream work a real backend does (other services, slow queries). It is a wait, not
    /// CPU: it raises the number of calls in flight, which is what makes a small client pool
    /// churn, without making the backend the CPU bottleneck. Health and stats are exempt.
    #[arg(long, default_value = "0s", value_parser = serve::parse_duration)]
    pub service_time: Duration,
}

/// The backend's counters, as `GET /v1/stats` shows them.
#[derive(Debug, Default)]
struct Stats {
    conns: Arc<ConnCounters>,
    requests: AtomicU64,
    storage_errors: AtomicU64,
}

struct App {
    store: Store,
    stats: Stats,
    max_body: usize,
    max_history: i64,
    verbose: bool,
    service_time: Duration,
}

/// A backend bound to its listener with its database open, not yet serving.
pub struct Backend {
    app: Arc<App>,
    listener: TcpListener,
    addr: SocketAddr,
    max_connections: usize,
    grace: Duration,
}

impl Backend {
    /// Opens the database (creating the schema) for a backend that will serve on `listener`.
    pub async fn start(args: &BackendArgs, listener: TcpListener) -> anyhow::Result<Backend> {
        let addr = listener
            .local_addr()
            .context("reading the backend's address")?;
        let store = Store::open(
            &args.db,
            StoreOptions {
                max_connections: args.db_max_connections,
                timeout: args.db_timeout,
                max_moves: args.max_moves,
            },
        )
        .await?;
        Ok(Backend {
            app: Arc::new(App {
                store,
                stats: Stats::default(),
                max_body: args.max_body,
                max_history: args.max_history.max(1),
                verbose: args.verbose,
                service_time: args.service_time,
            }),
            listener,
            addr,
            max_connections: args.max_connections,
            grace: args.grace,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` completes, then lets open connections finish within the grace
    /// and closes the database.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let app = self.app;
        let counters = app.stats.conns.clone();
        let mut http = hyper::server::conn::http1::Builder::new();
        // Keep-alive is the point: the gateway's pool decides how long a connection lives,
        // so the backend never closes an idle one (no header-read timer either) and any
        // TIME_WAIT lands on the gateway's side, as in the seeds.
        http.keep_alive(true);
        let graceful = serve::accept_until(
            self.listener,
            self.max_connections,
            counters,
            shutdown,
            |io, watcher| {
                let app = app.clone();
                let conn = http.serve_connection(
                    io,
                    hyper::service::service_fn(move |req| {
                        let app = app.clone();
                        async move { Ok::<_, Infallible>(app.handle(req).await) }
                    }),
                );
                let watched = watcher.watch(conn);
                async move {
                    // A peer that vanished mid-request is its own business.
                    let _ = watched.await;
                }
            },
        )
        .await;
        let deadline = tokio::time::Instant::now() + self.grace;
        serve::drain(graceful, self.grace).await;
        // Closing the pool waits for connections in use; a request stuck past the grace
        // must not hold the exit, so the wait shares the same deadline.
        let _ = tokio::time::timeout_at(deadline, app.store.close()).await;
        Ok(())
    }
}

/// `{"game_id": N}` and friends.
#[derive(Debug, Deserialize)]
struct GameRef {
    game_id: i64,
}

#[derive(Debug, Deserialize)]
struct JoinReq {
    #[serde(default = "two")]
    seats: i64,
}

fn two() -> i64 {
    2
}

#[derive(Debug, Deserialize)]
struct MoveReq {
    game_id: i64,
    #[serde(rename = "move")]
    play: serde_json::Value,
}

#[derive(Debug, Deserialize)]
struct HistoryReq {
    game_id: i64,
    #[serde(default)]
    after: i64,
    limit: Option<i64>,
}

#[derive(Debug, Deserialize)]
struct ListReq {
    limit: Option<i64>,
}

/// The backend's routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    Health,
    Stats,
    Session,
    Game(GameCall),
}

/// The authenticated game calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GameCall {
    Join,
    State,
    Move,
    History,
    List,
}

impl Route {
    /// The route at `path` and the one method it takes.
    fn of(path: &str) -> Option<(Route, Method)> {
        Some(match path {
            "/healthz" => (Route::Health, Method::GET),
            "/v1/stats" => (Route::Stats, Method::GET),
            "/v1/session" => (Route::Session, Method::GET),
            "/v1/game/join" => (Route::Game(GameCall::Join), Method::POST),
            "/v1/game/state" => (Route::Game(GameCall::State), Method::POST),
            "/v1/game/move" => (Route::Game(GameCall::Move), Method::POST),
            "/v1/game/history" => (Route::Game(GameCall::History), Method::POST),
            "/v1/games/list" => (Route::Game(GameCall::List), Method::POST),
            _ => return None,
        })
    }
}

/// Most games one `games/list` call returns.
const MAX_LIST: i64 = 100;

/// What a handler answers: a response, or a failure mapped to one.
enum Failure {
    Status(StatusCode, &'static str, String),
    Store(StoreError),
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::Store(e)
    }
}

fn bad_request(message: impl Into<String>) -> Failure {
    Failure::Status(StatusCode::BAD_REQUEST, "bad_request", message.into())
}

/// A domain outcome: HTTP 200 with the code in the body, so a client tells "the game said no"
/// from "the request failed" by the body, as the seeds' service did.
fn refused(r: Refusal) -> Response<Full<Bytes>> {
    serve::json(StatusCode::OK, &json!({ "error": { "code": r.code() } }))
}

fn parse<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, Failure> {
    // An empty body reads as `{}`, so calls whose fields all have defaults need none.
    let text: &[u8] = if body.is_empty() { b"{}" } else { body };
    serde_json::from_slice(text).map_err(|e| bad_request(format!("invalid request body: {e}")))
}

impl App {
    async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        if !self.service_time.is_zero() && path.starts_with("/v1/") && path != "/v1/stats" {
            tokio::time::sleep(self.service_time).await;
        }
        match self.route(req).await {
            Ok(resp) => resp,
            Err(Failure::Status(status, code, message)) => {
                if self.verbose {
                    eprintln!("backend: {method} {path}: {status} {code}: {message}");
                }
                serve::error(status, code, &message)
            }
            Err(Failure::Store(e)) => {
                self.stats.storage_errors.fetch_add(1, Ordering::Relaxed);
                if self.verbose {
                    eprintln!("backend: {method} {path}: {e}");
                }
                serve::error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "storage_error",
                    &e.to_string(),
                )
            }
        }
    }

    async fn route(&self, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Failure> {
        let (parts, body) = req.into_parts();
        let path = parts.uri.path();
        let Some((route, allowed)) = Route::of(path) else {
            return Err(Failure::Status(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no route {path}"),
            ));
        };
        if parts.method != allowed {
            return Err(Failure::Status(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                format!("{path} takes {allowed}, not {}", parts.method),
            ));
        }
        let call = match route {
            Route::Health => {
                self.store.ping().await?;
                return Ok(serve::json(StatusCode::OK, &json!({ "status": "ok" })));
            }
            Route::Stats => return Ok(self.stats_response()),
            // `None`: the session lookup itself, answered once the token is read.
            Route::Session => None,
            Route::Game(call) => Some(call),
        };
        let Some(token) = serve::bearer(&parts.headers) else {
            return Err(Failure::Status(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "missing `Authorization: Bearer TOKEN`".into(),
            ));
        };
        let unauthenticated = || {
            Failure::Status(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                "unknown session token".into(),
            )
        };
        let Some(call) = call else {
            let account = self
                .store
                .session(token)
                .await?
                .ok_or_else(unauthenticated)?;
            return Ok(serve::json(StatusCode::OK, &json!({ "account": account })));
        };
        let account = self
            .store
            .account_for_token(token)
            .await?
            .ok_or_else(unauthenticated)?;
        let body = serve::read_body(body, self.max_body)
            .await
            .map_err(|e| match e {
                serve::BodyError::TooLarge(_) => Failure::Status(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    e.to_string(),
                ),
                serve::BodyError::Read(m) => bad_request(m),
            })?;
        let resp = match call {
            GameCall::Join => {
                let r: JoinReq = parse(&body)?;
                if !(1..=4).contains(&r.seats) {
                    return Err(bad_request(format!(
                        "seats must be 1 to 4, not {}",
                        r.seats
                    )));
                }
                let joined = self.store.join(account, r.seats).await?;
                serve::json(StatusCode::OK, &json!({ "game": joined }))
            }
            GameCall::State => {
                let r: GameRef = parse(&body)?;
                match self.store.state(account, r.game_id).await? {
                    Ok(game) => serve::json(
                        StatusCode::OK,
                        &json!({ "game": game, "your_turn": game.turn == Some(account) }),
                    ),
                    Err(refusal) => refused(refusal),
                }
            }
            GameCall::Move => {
                let r: MoveReq = parse(&body)?;
                if !r.play.is_object() {
                    return Err(bad_request("`move` must be a JSON object"));
                }
                match self
                    .store
                    .play(account, r.game_id, &r.play.to_string())
                    .await?
                {
                    Ok((number, game)) => serve::json(
                        StatusCode::OK,
                        &json!({
                            "accepted": true,
                            "move": { "number": number, "account_id": account },
                            "game": game,
                        }),
                    ),
                    Err(refusal) => refused(refusal),
                }
            }
            GameCall::History => {
                let r: HistoryReq = parse(&body)?;
                let limit = r
                    .limit
                    .unwrap_or(self.max_history)
                    .clamp(1, self.max_history);
                match self
                    .store
                    .history(account, r.game_id, r.after.max(0), limit)
                    .await?
                {
                    Ok(rows) => {
                        let moves: Vec<_> = rows
                            .into_iter()
                            .map(|m| {
                                // Stored by this backend from a JSON object, so it parses;
                                // a row edited by hand shows as a string rather than failing
                                // the whole history.
                                let body = serde_json::from_str::<serde_json::Value>(&m.body)
                                    .unwrap_or(serde_json::Value::String(m.body));
                                json!({ "number": m.number, "account_id": m.account_id, "move": body })
                            })
                            .collect();
                        serve::json(
                            StatusCode::OK,
                            &json!({ "game_id": r.game_id, "moves": moves }),
                        )
                    }
                    Err(refusal) => refused(refusal),
                }
            }
            GameCall::List => {
                let r: ListReq = parse(&body)?;
                let limit = r.limit.unwrap_or(20).clamp(1, MAX_LIST);
                let games = self.store.games(account, limit).await?;
                serve::json(StatusCode::OK, &json!({ "games": games }))
            }
        };
        Ok(resp)
    }

    fn stats_response(&self) -> Response<Full<Bytes>> {
        let s = &self.stats;
        serve::json(
            StatusCode::OK,
            &json!({
                "connections_accepted": s.conns.accepted.load(Ordering::Relaxed),
                "connections_open": s.conns.open.load(Ordering::Relaxed),
                "accept_errors": s.conns.accept_errors.load(Ordering::Relaxed),
                "requests": s.requests.load(Ordering::Relaxed),
                "storage_errors": s.storage_errors.load(Ordering::Relaxed),
            }),
        )
    }
}

/// `herd contour backend`: binds, opens the database, prints `ready ADDR`, serves until
/// SIGTERM/SIGINT.
pub fn run(args: &BackendArgs) -> anyhow::Result<()> {
    let rt = serve::runtime(args.workers, "backend")?;
    let result = rt.block_on(async {
        let listener = serve::bind(args.listen, "backend").await?;
        let backend = Backend::start(args, listener).await?;
        let stop = serve::stop_signal()?;
        serve::say_ready(backend.local_addr());
        backend.serve(stop).await
    });
    // Tasks still running past the grace (a connection that never finished) are dropped.
    rt.shutdown_timeout(Duration::from_millis(100));
    result
}
