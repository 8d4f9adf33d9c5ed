//! The loopback server every test shares, parameterised by protocol: HTTP/1.1 (keep-alive),
//! h2c (prior knowledge) or TLS (h2 or HTTP/1.1 as ALPN picks), on 127.0.0.1:0.
//!
//! Routes match by path (`/ok`, `/delay/{ms}`, `/echo/{*rest}`) and answer a fixed
//! [`Reply`] (status, headers, body, an optional delay) or whatever a closure returns: a
//! streamed body (SSE, NDJSON, chunks, with a clean end, a break or held open), a long poll
//! held until the client goes away, a connection reset. [`Server::raw`] hands each
//! connection's socket to a closure instead, for answers no HTTP server would give (garbage,
//! a response cut short, one byte at a time).
//!
//! The server counts what it saw — connections, TLS handshakes (and resumed ones), requests
//! in total, over HTTP/2, per route and per path — so a test compares the driver's counts
//! with the server's own. Requests are counted as they arrive, before their route runs.
//! Dropping the server stops its accept loop and every connection it serves.

use std::{
    collections::HashMap,
    convert::Infallible,
    net::SocketAddr,
    os::fd::{AsRawFd as _, RawFd},
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
    task::{Context, Poll},
    time::{Duration, Instant},
};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, Version};
use http_body_util::{BodyExt as _, Either, Full};
use hyper::{
    Request, Response,
    body::{Body, Frame, Incoming},
    server::conn,
    service::service_fn,
};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::{
    io::{AsyncRead, AsyncWrite},
    net::{TcpListener, TcpStream},
    sync::{Notify, mpsc},
    task::{JoinHandle, JoinSet},
};
use tokio_rustls::TlsAcceptor;

use crate::tls::ServerCert;

/// The protocol a cleartext server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// HTTP/1.1 with keep-alive.
    H1,
    /// HTTP/2 with prior knowledge.
    H2c,
}

impl Proto {
    /// Both, for tests that run once per protocol.
    pub const ALL: [Proto; 2] = [Proto::H1, Proto::H2c];

    /// The name herd's scenarios use for it (`transport = "h1"`).
    pub fn name(self) -> &'static str {
        match self {
            Self::H1 => "h1",
            Self::H2c => "h2c",
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type Handler = Arc<dyn Fn(Req) -> BoxFuture<Reply> + Send + Sync>;
type StreamFn = Arc<dyn Fn(Chunks) -> BoxFuture<()> + Send + Sync>;
type RawFn = Arc<dyn Fn(TcpStream) -> BoxFuture<()> + Send + Sync>;

/// One request as a route sees it, its body read.
#[derive(Debug)]
pub struct Req {
    /// The method.
    pub method: Method,
    /// The target (path and query).
    pub uri: Uri,
    /// HTTP/1.1 or HTTP/2.
    pub version: Version,
    /// The request's headers.
    pub headers: HeaderMap,
    /// The whole body.
    pub body: Bytes,
    /// The request's number on this server, from 1, in order of arrival.
    pub number: u64,
    /// The `{name}` segments of the route's pattern, with what they matched.
    params: Vec<(String, String)>,
}

impl Req {
    /// The path, without the query.
    pub fn path(&self) -> &str {
        self.uri.path()
    }

    /// The path and query as the client sent them.
    pub fn path_and_query(&self) -> &str {
        self.uri.path_and_query().map_or("/", |p| p.as_str())
    }

    /// What the pattern's `{name}` (or `{*name}`) matched; panics if the pattern has none.
    pub fn param(&self, name: &str) -> &str {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("the route for {} has no {{{name}}}", self.path()))
    }

    /// [`Self::param`] as a number; panics if it is not one.
    pub fn num(&self, name: &str) -> u64 {
        let v = self.param(name);
        v.parse()
            .unwrap_or_else(|e| panic!("{{{name}}} of {} is {v:?}: {e}", self.path()))
    }

    /// A header's value, if present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// What a route answers. Built like `Reply::ok().json(...)`, `Reply::new(429).header(...)`,
/// `Reply::ok().stream(...)`, [`Reply::hold`], [`Reply::reset`].
#[derive(Clone)]
pub struct Reply {
    status: StatusCode,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: ReplyBody,
    delay: Duration,
}

#[derive(Clone)]
enum ReplyBody {
    Full(Bytes),
    Stream(StreamFn),
    Hold,
    Reset,
}

impl Reply {
    /// `status` with an empty body.
    pub fn new(status: u16) -> Self {
        Self {
            status: StatusCode::from_u16(status).unwrap_or_else(|e| panic!("status {status}: {e}")),
            headers: Vec::new(),
            body: ReplyBody::Full(Bytes::new()),
            delay: Duration::ZERO,
        }
    }

    /// 200 with an empty body.
    pub fn ok() -> Self {
        Self::new(200)
    }

    /// Never answers: the request waits until the client gives up or the server is dropped
    /// (a long poll with no news, a stuck backend).
    pub fn hold() -> Self {
        Self {
            body: ReplyBody::Hold,
            ..Self::ok()
        }
    }

    /// Answers nothing and resets the connection (a zero-linger close: the client reads a
    /// TCP RST under its request, and so do the connection's other requests).
    pub fn reset() -> Self {
        Self {
            body: ReplyBody::Reset,
            ..Self::ok()
        }
    }

    /// Sets the status.
    pub fn status(mut self, status: u16) -> Self {
        self.status =
            StatusCode::from_u16(status).unwrap_or_else(|e| panic!("status {status}: {e}"));
        self
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: impl std::fmt::Display) -> Self {
        let name = HeaderName::try_from(name).unwrap_or_else(|e| panic!("header {name}: {e}"));
        let value = HeaderValue::try_from(value.to_string())
            .unwrap_or_else(|e| panic!("header {name}: {e}"));
        self.headers.push((name, value));
        self
    }

    /// Sets the body (sent with a `content-length`).
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = ReplyBody::Full(body.into());
        self
    }

    /// Sets a JSON body and its content type.
    pub fn json(self, v: serde_json::Value) -> Self {
        self.header("content-type", "application/json")
            .body(v.to_string())
    }

    /// Waits `delay` before answering (before the response head).
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Streams the body: `f` runs on a task of its own once the head is sent and writes
    /// [`Chunks`]. The body ends cleanly when `f` returns, breaks when it calls
    /// [`Chunks::fail`], and stays open while it waits (e.g. on [`Chunks::closed`]).
    pub fn stream<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Chunks) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.body = ReplyBody::Stream(Arc::new(move |c| Box::pin(f(c))));
        self
    }
}

/// The writing end of a streamed body.
pub struct Chunks(mpsc::Sender<Result<Bytes, std::io::Error>>);

impl Chunks {
    /// Sends one chunk; false once the client has gone away.
    pub async fn send(&self, data: impl Into<Bytes>) -> bool {
        self.0.send(Ok(data.into())).await.is_ok()
    }

    /// Breaks the body: HTTP/2 resets the stream, HTTP/1.1 cuts the chunked body short.
    pub async fn fail(self) {
        let _ = self
            .0
            .send(Err(std::io::Error::other("stream broken on purpose")))
            .await;
    }

    /// Waits until the client has gone away, holding the body open until then.
    pub async fn closed(&self) {
        self.0.closed().await;
    }
}

/// A streamed body: frames from a channel, an `Err` breaks it.
struct ChanBody(mpsc::Receiver<Result<Bytes, std::io::Error>>);

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

type RespBody = Either<Full<Bytes>, ChanBody>;

enum Seg {
    Lit(String),
    Param(String),
    Rest(String),
}

struct Route {
    pattern: String,
    segs: Vec<Seg>,
    handler: Handler,
}

impl Route {
    fn new(pattern: &str, handler: Handler) -> Self {
        let segs: Vec<Seg> = pattern
            .trim_start_matches('/')
            .split('/')
            .map(
                |s| match s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    Some(name) => match name.strip_prefix('*') {
                        Some(rest) => Seg::Rest(rest.to_owned()),
                        None => Seg::Param(name.to_owned()),
                    },
                    None => Seg::Lit(s.to_owned()),
                },
            )
            .collect();
        assert!(
            segs.iter()
                .rev()
                .skip(1)
                .all(|s| !matches!(s, Seg::Rest(_))),
            "route {pattern}: {{*name}} must be the last segment"
        );
        Self {
            pattern: pattern.to_owned(),
            segs,
            handler,
        }
    }

    /// The parameters when `path` matches: a literal segment itself, `{name}` any one
    /// segment, `{*name}` whatever is left (possibly nothing).
    fn matches(&self, path: &str) -> Option<Vec<(String, String)>> {
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let mut params = Vec::new();
        for (i, seg) in self.segs.iter().enumerate() {
            match seg {
                Seg::Rest(name) => {
                    params.push((name.clone(), parts.get(i..).unwrap_or(&[]).join("/")));
                    return Some(params);
                }
                Seg::Lit(l) if parts.get(i) == Some(&l.as_str()) => {}
                Seg::Param(name) if parts.get(i).is_some() => {
                    params.push((name.clone(), parts[i].to_owned()));
                }
                _ => return None,
            }
        }
        (parts.len() == self.segs.len()).then_some(params)
    }
}

fn handler<F, Fut>(f: F) -> Handler
where
    F: Fn(Req) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    Arc::new(move |req| Box::pin(f(req)))
}

enum Mode {
    Plain(Proto),
    Tls(TlsAcceptor),
    Raw(RawFn),
}

/// A server being configured: its protocol, routes and fallback.
pub struct Builder {
    mode: Mode,
    routes: Vec<Route>,
    fallback: Handler,
}

impl Builder {
    fn with(mode: Mode) -> Self {
        Self {
            mode,
            routes: Vec::new(),
            fallback: handler(|_| async { Reply::new(404) }),
        }
    }

    /// Answers `reply` on `pattern`. Routes are tried in the order they were added.
    pub fn route(self, pattern: &str, reply: Reply) -> Self {
        self.route_fn(pattern, move |_| {
            let r = reply.clone();
            async move { r }
        })
    }

    /// Answers what `f` returns for each request on `pattern`.
    pub fn route_fn<F, Fut>(mut self, pattern: &str, f: F) -> Self
    where
        F: Fn(Req) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Reply> + Send + 'static,
    {
        self.routes.push(Route::new(pattern, handler(f)));
        self
    }

    /// Answers `reply` where no route matches (default: an empty 404).
    pub fn fallback(self, reply: Reply) -> Self {
        self.fallback_fn(move |_| {
            let r = reply.clone();
            async move { r }
        })
    }

    /// Answers what `f` returns where no route matches.
    pub fn fallback_fn<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Req) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Reply> + Send + 'static,
    {
        self.fallback = handler(f);
        self
    }

    /// Binds 127.0.0.1:0 and serves on the current tokio runtime until dropped.
    pub async fn start(self) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding a loopback test server on 127.0.0.1:0");
        let addr = listener.local_addr().expect("the listener's address");
        let scheme = match self.mode {
            Mode::Tls(_) => "https",
            _ => "http",
        };
        let shared = Arc::new(Shared {
            counts: Counts::default(),
            routes: self.routes,
            fallback: self.fallback,
            streams: Mutex::new(JoinSet::new()),
        });
        let counts = shared.clone();
        let mode = Arc::new(self.mode);
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                shared.counts.connections.fetch_add(1, SeqCst);
                shared
                    .counts
                    .accepted
                    .lock()
                    .expect("the counts' lock")
                    .push(Instant::now());
                // Requests and replies are small: send each segment at once.
                let _ = stream.set_nodelay(true);
                while conns.try_join_next().is_some() {}
                conns.spawn(connection(stream, mode.clone(), shared.clone()));
            }
        });
        Server {
            addr,
            scheme,
            shared: counts,
            task,
            runtime: None,
        }
    }

    /// [`Self::start`] on a runtime of the server's own (one worker thread), for tests
    /// without one: a test that runs herd's CLI, which makes its own.
    pub fn start_blocking(self) -> Server {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("herd-testkit-server")
            .enable_all()
            .build()
            .expect("a runtime for the test server");
        let mut server = runtime.block_on(self.start());
        server.runtime = Some(runtime);
        server
    }
}

#[derive(Default)]
struct Counts {
    connections: AtomicU64,
    handshakes: AtomicU64,
    resumed: AtomicU64,
    requests: AtomicU64,
    h2_requests: AtomicU64,
    accepted: Mutex<Vec<Instant>>,
    /// Per path: requests and the last one's arrival.
    paths: Mutex<HashMap<String, (u64, Instant)>>,
    /// Per route pattern: requests.
    routes: Mutex<HashMap<String, u64>>,
}

struct Shared {
    counts: Counts,
    routes: Vec<Route>,
    fallback: Handler,
    /// The tasks writing streamed bodies. They outlive their connection, so a writer waiting
    /// on [`Chunks::closed`] sees the client leave; they are aborted with the server.
    streams: Mutex<JoinSet<()>>,
}

/// A loopback test server; dropping it stops the accept loop and every connection.
pub struct Server {
    addr: SocketAddr,
    scheme: &'static str,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl Server {
    /// A cleartext server speaking `proto`.
    pub fn http(proto: Proto) -> Builder {
        Builder::with(Mode::Plain(proto))
    }

    /// A TLS server with `cert`, choosing from `alpn` in its own order of preference (`h2`,
    /// `http/1.1`; empty: no ALPN at all, so HTTP/1.1). HTTP/2 when ALPN picked `h2`.
    pub fn tls(cert: &ServerCert, alpn: &[&[u8]]) -> Builder {
        let (chain, key) = cert.rustls();
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("rustls' default protocol versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("the test certificate and key");
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Builder::with(Mode::Tls(TlsAcceptor::from(Arc::new(config))))
    }

    /// A server that hands each accepted TCP connection to `f` (counted, nothing else):
    /// for bytes no HTTP server would send.
    pub fn raw<F, Fut>(f: F) -> Builder
    where
        F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Builder::with(Mode::Raw(Arc::new(move |s| Box::pin(f(s)))))
    }

    /// `http://127.0.0.1:port` (`https://` for TLS).
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// TCP connections accepted (before any TLS handshake).
    pub fn connections(&self) -> u64 {
        self.shared.counts.connections.load(SeqCst)
    }

    /// When each connection was accepted, in order.
    pub fn accepted(&self) -> Vec<Instant> {
        self.shared
            .counts
            .accepted
            .lock()
            .expect("the counts' lock")
            .clone()
    }

    /// TLS handshakes that completed.
    pub fn handshakes(&self) -> u64 {
        self.shared.counts.handshakes.load(SeqCst)
    }

    /// Of those, abbreviated ones that resumed an earlier session.
    pub fn resumed(&self) -> u64 {
        self.shared.counts.resumed.load(SeqCst)
    }

    /// Requests that arrived, whatever became of them.
    pub fn requests(&self) -> u64 {
        self.shared.counts.requests.load(SeqCst)
    }

    /// Of those, requests that came over HTTP/2.
    pub fn h2_requests(&self) -> u64 {
        self.shared.counts.h2_requests.load(SeqCst)
    }

    /// Requests to exactly `path` (no query).
    pub fn path_count(&self, path: &str) -> u64 {
        self.path_entry(path).map_or(0, |e| e.0)
    }

    /// When the last request to `path` arrived.
    pub fn last_at(&self, path: &str) -> Option<Instant> {
        self.path_entry(path).map(|e| e.1)
    }

    fn path_entry(&self, path: &str) -> Option<(u64, Instant)> {
        let paths = self.shared.counts.paths.lock().expect("the counts' lock");
        paths.get(path).copied()
    }

    /// Requests the route added with `pattern` answered.
    pub fn route_count(&self, pattern: &str) -> u64 {
        let routes = self.shared.counts.routes.lock().expect("the counts' lock");
        routes.get(pattern).copied().unwrap_or(0)
    }
}

async fn connection(stream: TcpStream, mode: Arc<Mode>, shared: Arc<Shared>) {
    let fd = stream.as_raw_fd();
    // A route's [`Reply::reset`] asks for the connection to be reset.
    let reset = Arc::new(Notify::new());
    let served = {
        let reset = reset.clone();
        async move {
            match &*mode {
                Mode::Raw(f) => f(stream).await,
                Mode::Plain(proto) => serve(stream, *proto, shared, reset).await,
                Mode::Tls(acceptor) => {
                    // A client that refuses the certificate aborts the handshake here.
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let session = tls.get_ref().1;
                    shared.counts.handshakes.fetch_add(1, SeqCst);
                    if session.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                        shared.counts.resumed.fetch_add(1, SeqCst);
                    }
                    let proto = match session.alpn_protocol() {
                        Some(b"h2") => Proto::H2c,
                        _ => Proto::H1,
                    };
                    serve(tls, proto, shared, reset).await;
                }
            }
        }
    };
    tokio::pin!(served);
    tokio::select! {
        _ = &mut served => return,
        _ = reset.notified() => {}
    }
    linger_zero(fd);
    // `served` still owns the socket here; dropping it on return closes it with a reset.
}

/// Makes the next close of `fd` send a reset instead of a FIN.
fn linger_zero(fd: RawFd) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the caller's future still owns the socket, so fd is open; setsockopt reads
    // `linger` for the size given.
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

/// Serves one connection's requests with the routes until it ends.
async fn serve<I>(io: I, proto: Proto, shared: Arc<Shared>, reset: Arc<Notify>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = service_fn(move |req: Request<Incoming>| {
        let c = &shared.counts;
        let number = c.requests.fetch_add(1, SeqCst) + 1;
        if req.version() == Version::HTTP_2 {
            c.h2_requests.fetch_add(1, SeqCst);
        }
        let path = req.uri().path().to_owned();
        {
            let now = Instant::now();
            let mut paths = c.paths.lock().expect("the counts' lock");
            let e = paths.entry(path.clone()).or_insert((0, now));
            *e = (e.0 + 1, now);
        }
        let (shared, reset) = (shared.clone(), reset.clone());
        async move {
            let (handler, params) = match shared
                .routes
                .iter()
                .find_map(|r| r.matches(&path).map(|p| (r, p)))
            {
                Some((route, params)) => {
                    let mut routes = shared.counts.routes.lock().expect("the counts' lock");
                    *routes.entry(route.pattern.clone()).or_default() += 1;
                    (route.handler.clone(), params)
                }
                None => (shared.fallback.clone(), Vec::new()),
            };
            let (head, body) = req.into_parts();
            let body = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let reply = handler(Req {
                method: head.method,
                uri: head.uri,
                version: head.version,
                headers: head.headers,
                body,
                number,
                params,
            })
            .await;
            Ok::<_, Infallible>(respond(reply, &shared, &reset).await)
        }
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

async fn respond(reply: Reply, shared: &Shared, reset: &Notify) -> Response<RespBody> {
    tokio::time::sleep(reply.delay).await;
    let body = match reply.body {
        ReplyBody::Full(b) => Either::Left(Full::new(b)),
        ReplyBody::Stream(f) => {
            let (tx, rx) = mpsc::channel(64);
            let mut streams = shared.streams.lock().expect("the streams' lock");
            while streams.try_join_next().is_some() {}
            streams.spawn(f(Chunks(tx)));
            Either::Right(ChanBody(rx))
        }
        ReplyBody::Hold => std::future::pending().await,
        ReplyBody::Reset => {
            reset.notify_one();
            std::future::pending().await
        }
    };
    let mut r = Response::new(body);
    *r.status_mut() = reply.status;
    r.headers_mut().extend(reply.headers);
    r
}
