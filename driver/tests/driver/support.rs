//! An in-process test server on 127.0.0.1:0 (HTTP/1.1 or h2c) that counts what it served,
//! and helpers to run scenarios against it.
//!
//! Routes: `/ok`; `/delay/{ms}`; `/status/{code}`; `/code/{name}` (200 with
//! `{"error":{"code":name}}`); `/limited` (a token bucket: 200 or 429 + `Retry-After: 1`);
//! `/drop` (resets the connection without answering); `/game/new` (`{"game":{"id":"g-N"}}`);
//! `/echo/...` (the request's path, authorization header and body as JSON); `/blob/{name}`
//! (`name` repeated 100 times).

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use herd_driver::{RunOptions, RunReport, Scenario};
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, body::Incoming, server::conn, service::service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::{TcpListener, TcpStream},
    sync::Notify,
    task::JoinHandle,
};

/// The protocol the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    H1,
    H2c,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Self::H1 => "h1",
            Self::H2c => "h2c",
        }
    }
}

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

/// What the server counted besides [`Counts`].
#[derive(Default)]
pub struct Stats {
    pub granted: AtomicU64,
    pub limited: AtomicU64,
    games: AtomicU64,
    /// First and last `/limited` request.
    pub limited_window: Mutex<Option<(Instant, Instant)>>,
    /// When each connection was accepted.
    pub accepted: Mutex<Vec<Instant>>,
}

/// The server of this file, with the routes above.
pub type TestServer = Server<Stats>;

struct State {
    stats: Arc<Stats>,
    bucket: Bucket,
}

impl Server<Stats> {
    pub async fn start(proto: Proto) -> Self {
        Self::with_bucket(proto, Bucket::new(1e9, 0.0)).await
    }

    pub async fn with_bucket(proto: Proto, bucket: Bucket) -> Self {
        let load = QUIET.read().await;
        let mut server = Self::unlocked(proto, bucket).await;
        server.load = Some(load);
        server
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
        let stats = Arc::new(Stats::default());
        let state = Arc::new(State {
            stats: stats.clone(),
            bucket,
        });
        Server::listen("http", stats, None, move |stream, counts| {
            state.stats.accepted.lock().unwrap().push(Instant::now());
            serve_droppable(stream, proto, counts.clone(), state.clone())
        })
        .await
    }
}

/// What every test server counts, in one place.
#[derive(Default)]
pub struct Counts {
    /// TCP connections accepted (before any TLS handshake).
    pub connections: AtomicU64,
    /// Requests, each counted as it arrives, before its route runs.
    pub requests: AtomicU64,
}

/// A test server: its accept loop on 127.0.0.1:0, its [`Counts`], what its routes count
/// besides (`S`) and, for most, a hold on [`QUIET`] for reading. Dropping it aborts the
/// loop and, with it, every connection it serves.
pub struct Server<S> {
    pub stats: Arc<S>,
    pub counts: Arc<Counts>,
    scheme: &'static str,
    addr: SocketAddr,
    task: JoinHandle<()>,
    load: Option<tokio::sync::RwLockReadGuard<'static, ()>>,
}

impl<S> Drop for Server<S> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<S> Server<S> {
    /// Binds 127.0.0.1:0 and hands each accepted connection (TCP_NODELAY set, counted) to
    /// `conn`, whose future is served on a task of its own. `conn` runs in the accept loop,
    /// so what it records is recorded before the connection is served.
    pub async fn listen<C, F>(
        scheme: &'static str,
        stats: Arc<S>,
        load: Option<tokio::sync::RwLockReadGuard<'static, ()>>,
        mut conn: C,
    ) -> Self
    where
        C: FnMut(TcpStream, &Arc<Counts>) -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counts = Arc::new(Counts::default());
        let c = counts.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                c.connections.fetch_add(1, SeqCst);
                stream.set_nodelay(true).unwrap();
                conns.spawn(conn(stream, &c));
            }
        });
        Self {
            stats,
            counts,
            scheme,
            addr,
            task,
            load,
        }
    }

    /// `http://127.0.0.1:port` (`https://` for TLS).
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    pub fn requests(&self) -> u64 {
        self.counts.requests.load(SeqCst)
    }

    pub fn connections(&self) -> u64 {
        self.counts.connections.load(SeqCst)
    }
}

/// Serves one connection with `handler` until it ends, counting each request in `counts`:
/// HTTP/1.1, or HTTP/2 with prior knowledge for [`Proto::H2c`] (on a TLS stream: h2 as ALPN
/// chose it).
pub async fn serve<I, H, F, B>(io: I, proto: Proto, counts: Arc<Counts>, handler: H)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> F + Send + 'static,
    F: Future<Output = Result<Response<B>, Infallible>> + Send + 'static,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let svc = service_fn(move |req| {
        counts.requests.fetch_add(1, SeqCst);
        handler(req)
    });
    let io = TokioIo::new(io);
    let _ = match proto {
        Proto::H1 => conn::http1::Builder::new().serve_connection(io, svc).await,
        Proto::H2c => {
            conn::http2::Builder::new(TokioExecutor::new())
                .serve_connection(io, svc)
                .await
        }
    };
}

/// [`serve`] with this server's routes, until the connection ends or `/drop` drops it.
async fn serve_droppable(stream: TcpStream, proto: Proto, counts: Arc<Counts>, state: Arc<State>) {
    let drop_now = Arc::new(Notify::new());
    let d = drop_now.clone();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&stream);
    let c = serve(stream, proto, counts, move |req| {
        handle(req, state.clone(), d.clone())
    });
    until_dropped(c, &drop_now, fd).await
}

/// Serves the connection until it ends or a handler asks to drop it; a dropped connection
/// closes with a reset (zero linger), so the client sees it break under its request.
async fn until_dropped<F: std::future::Future>(c: F, drop_now: &Notify, fd: std::os::fd::RawFd) {
    tokio::pin!(c);
    tokio::select! {
        _ = &mut c => return,
        _ = drop_now.notified() => {}
    }
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `c` still owns the socket, so fd is open; setsockopt reads `linger` for the
    // size given.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

fn json(status: u16, v: serde_json::Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    r
}

pub fn blob(name: &str) -> Vec<u8> {
    name.repeat(100).into_bytes()
}

async fn handle(
    req: Request<Incoming>,
    state: Arc<State>,
    drop_now: Arc<Notify>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let stats = &state.stats;
    let path = req.uri().path().to_owned();
    let full_path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let auth = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let r = match segs.as_slice() {
        ["ok"] => json(200, serde_json::json!({"ok": true, "n": 1})),
        ["delay", ms] => {
            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
            json(200, serde_json::json!({"ok": true}))
        }
        ["status", code] => json(code.parse().unwrap(), serde_json::json!({})),
        ["code", name] => json(200, serde_json::json!({"error": {"code": name}})),
        ["limited"] => {
            let now = Instant::now();
            {
                let mut w = stats.limited_window.lock().unwrap();
                let first = w.map_or(now, |(f, _)| f);
                *w = Some((first, now));
            }
            if state.bucket.take() {
                stats.granted.fetch_add(1, SeqCst);
                json(200, serde_json::json!({"ok": true}))
            } else {
                stats.limited.fetch_add(1, SeqCst);
                let mut r = json(429, serde_json::json!({"error": {"code": "slow_down"}}));
                r.headers_mut()
                    .insert("retry-after", state.bucket.retry_after_s.into());
                r
            }
        }
        ["drop"] => {
            drop_now.notify_one();
            std::future::pending::<()>().await;
            unreachable!("the connection is dropped with this handler")
        }
        ["game", "new"] => {
            let n = stats.games.fetch_add(1, SeqCst) + 1;
            json(200, serde_json::json!({"game": {"id": format!("g-{n}")}}))
        }
        ["echo", ..] => json(
            200,
            serde_json::json!({"path": full_path, "auth": auth, "body": String::from_utf8_lossy(&body)}),
        ),
        ["blob", name] => Response::new(Full::new(Bytes::from(blob(name)))),
        _ => json(404, serde_json::json!({"error": {"code": "no_route"}})),
    };
    Ok(r)
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
pub fn scenario(src: &str, server: &TestServer) -> Scenario {
    scenario_at(src, &server.url())
}

/// Parses `src` with `{url}` replaced by `url`.
pub fn scenario_at(src: &str, url: &str) -> Scenario {
    Scenario::parse("test.toml", &src.replace("{url}", url), &[]).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs the file's players.
pub async fn run(s: Scenario) -> RunReport {
    herd_driver::run(s, options()).await.unwrap()
}
