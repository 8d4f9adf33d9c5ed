//! herd's protocol clients: HTTP/1.1, HTTP/2 over cleartext TCP (h2c, prior knowledge) and
//! either over TLS (h2 by ALPN), with gRPC ([`grpc`]) and WebSocket ([`ws`]) on top — a
//! library of its own in the way h2 and hyper are: it knows nothing of scenarios, players
//! or reports. A [`Transport`] (made by [`connector`]
//! from an [`Endpoint`], a [`Protocol`] and, for TLS, a [`TlsConfig`]) opens
//! [`Connection`]s; a connection sends [`Request`]s and returns whole [`Response`]s or a
//! [`Streaming`] head whose body arrives as it comes. Failures are [`TransportError`]s,
//! sorted by the part of the exchange that failed ([`ErrorKind`]); the driver maps them to
//! its outcomes.
//!
//! One file per protocol: `h1_raw` (plain HTTP/1.1 calls written and parsed in the caller's
//! task), `h1` (hyper's HTTP/1.1, for streams and TLS), `h2` (the hand-written HTTP/2
//! client, split by protocol layer as h2 is: `frame`, `hpack`, `conn`, `streams`, `flow`,
//! `handoff`), `h2c`, and `tls`; `grpc` (message framing, status, deadlines, `.proto` files
//! compiled at load time and read and written as JSON) and `ws` (RFC 6455: the upgrade,
//! frames both ways, a socket over TCP or TLS).
#![deny(missing_docs)]

mod dial;
#[doc(hidden)]
pub mod fuzzing;
pub mod grpc;
mod h1;
mod h1_raw;
mod h2;
mod h2c;
mod headers;
mod tls;
pub mod ws;

use std::{error::Error as _, future::Future, pin::Pin, sync::Arc};

use bytes::Bytes;
use http::{HeaderMap, Method};

pub(crate) use dial::Dial;
pub use dial::Endpoint;
pub use headers::Headers;
pub use tls::{ACCEPT_HINT, TRUST_HINT, TlsConfig};

/// A boxed, sendable future, so [`Transport`] and [`Connection`] stay object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One request as a player sends it.
#[derive(Debug, Clone)]
pub struct Request {
    /// HTTP method.
    pub method: Method,
    /// Origin-form path and query, e.g. `/games/7?full=1`.
    pub path: String,
    /// Headers besides Host, which the transport sets.
    pub headers: HeaderMap,
    /// Body; empty for none.
    pub body: Bytes,
}

/// A whole response: status, headers and the collected body.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: Headers,
    /// Body, read to its end.
    pub body: Bytes,
    /// Trailers (HTTP/2: a header block after the body, where gRPC puts `grpc-status`);
    /// `None` when the response had none.
    pub trailers: Option<HeaderMap>,
}

/// A response whose body is still arriving: a stream's head, for [`Connection::open`].
#[derive(Debug)]
pub struct Streaming {
    /// Status code.
    pub status: u16,
    /// Headers.
    pub headers: HeaderMap,
    /// The body, read as it arrives.
    pub body: Body,
}

/// A response body still arriving: hyper's (HTTP/1.1) or an HTTP/2 stream's.
#[derive(Debug)]
pub enum Body {
    /// HTTP/1.1, run by hyper.
    Hyper(hyper::body::Incoming),
    /// HTTP/2.
    H2(h2::RecvBody),
}

impl Body {
    /// The next piece of the body as it arrived, `None` at its end; trailers are skipped.
    pub async fn chunk(&mut self) -> Option<Result<Bytes, TransportError>> {
        match self {
            Self::Hyper(body) => loop {
                match http_body_util::BodyExt::frame(body).await? {
                    Ok(frame) => {
                        if let Ok(data) = frame.into_data() {
                            return Some(Ok(data));
                        }
                    }
                    Err(e) => return Some(Err(from_hyper(e))),
                }
            },
            Self::H2(body) => body.chunk().await,
        }
    }

    /// The trailers that ended the body, once [`Body::chunk`] has returned `None`; `None`
    /// before that, for a body without trailers, and over HTTP/1.1.
    pub fn trailers(&mut self) -> Option<HeaderMap> {
        match self {
            Self::Hyper(_) => None,
            Self::H2(body) => body.trailers(),
        }
    }

    /// The rest of the body, to its end.
    pub async fn collect(mut self) -> Result<Bytes, TransportError> {
        let mut whole = bytes::BytesMut::new();
        while let Some(chunk) = self.chunk().await {
            whole.extend_from_slice(&chunk?);
        }
        Ok(whole.freeze())
    }
}

/// A request whose body is still being written, with its response still to come: a
/// gRPC client- or bidi-streaming call. From [`Connection::duplex`].
pub struct Duplex {
    /// Writes the request body, then ends it.
    pub send: SendBody,
    /// The response, once its head arrives.
    pub response: PendingHead,
}

impl std::fmt::Debug for Duplex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Duplex")
    }
}

/// The request body of a [`Duplex`], written piece by piece. Dropped before
/// [`SendBody::finish`], it resets the stream (the call is cancelled).
pub struct SendBody(h2::H2Send);

impl SendBody {
    /// Queues `data` as the body's next bytes; they go out as the server's flow-control
    /// windows allow. Fails once the stream is over (the server ended or reset it: read the
    /// response for why), or when the server has left more than 4 MiB of it unread.
    pub fn send(&mut self, data: Bytes) -> Result<(), TransportError> {
        self.0.send(data)
    }

    /// Ends the body.
    pub fn finish(&mut self) -> Result<(), TransportError> {
        self.0.finish()
    }
}

/// The response of a [`Duplex`], before its head. Dropped unread, it resets the stream.
pub struct PendingHead(h2::H2Head);

impl PendingHead {
    /// Waits for the response's head; its body then arrives as it comes.
    pub async fn head(self) -> Result<Streaming, TransportError> {
        self.0.head().await
    }
}

/// A connection failure, by the part of the exchange that failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    /// The TCP connect or handshake failed.
    #[error("connecting to {addr}: {reason}")]
    Connect {
        /// `host:port`.
        addr: String,
        /// What failed.
        reason: String,
    },
    /// The connection ended under the request.
    #[error("connection reset: {0}")]
    Reset(String),
    /// The peer's bytes were not the HTTP we expected.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The TLS handshake failed (certificate, alert, not TLS at all).
    #[error("TLS handshake with {addr}: {reason}")]
    Tls {
        /// `host:port`.
        addr: String,
        /// The failure's class, which the outcome names.
        problem: TlsProblem,
        /// What failed and what to do about it.
        reason: String,
    },
}

/// Which part of a connection failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The TCP connect or the HTTP handshake failed (refused, unreachable, timed out).
    Connect,
    /// The connection ended under the request: RST, EOF, or the peer closed it.
    Reset,
    /// The peer spoke something other than the HTTP expected.
    Protocol,
    /// The TLS handshake failed, for this reason.
    Tls(TlsProblem),
}

/// Why a TLS handshake failed: each has its own remedy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TlsProblem {
    /// The certificate chains to no CA the client trusts: self-signed, or a private CA.
    UnknownCa,
    /// The certificate is not for the host the client asked for.
    NameMismatch,
    /// The certificate has expired or is not valid yet.
    Expired,
    /// Anything else: an alert from the server, a peer that does not speak TLS, another
    /// certificate problem.
    Handshake,
}

impl TransportError {
    /// The part of the exchange that failed.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Connect { .. } => ErrorKind::Connect,
            Self::Reset(_) => ErrorKind::Reset,
            Self::Protocol(_) => ErrorKind::Protocol,
            Self::Tls { problem, .. } => ErrorKind::Tls(*problem),
        }
    }
}

/// Which HTTP a [`Transport`] speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// HTTP/1.1, one request at a time per connection.
    H1,
    /// HTTP/2 over cleartext TCP with prior knowledge (no upgrade): many streams per
    /// connection.
    H2c,
    /// HTTP/2 over TLS, chosen by ALPN.
    H2,
}

/// Opens connections to one target.
pub trait Transport: Send + Sync + 'static {
    /// Opens one connection (TCP connect and protocol handshake).
    fn connect(&self) -> BoxFuture<'_, Result<Box<dyn Connection>, TransportError>>;
    /// True if one connection carries many requests at once (HTTP/2 streams).
    fn multiplexed(&self) -> bool;
}

/// One open connection.
pub trait Connection: Send + 'static {
    /// Sends `req` and reads the whole response.
    fn send(&mut self, req: Request) -> BoxFuture<'_, Result<Response, TransportError>>;
    /// Sends `req` and returns at the response head, leaving the body to be read as it
    /// arrives (a server-sent event stream, a long poll).
    fn open(&mut self, req: Request) -> BoxFuture<'_, Result<Streaming, TransportError>>;
    /// True once the connection is gone; the owner opens a new one.
    fn is_closed(&self) -> bool;
    /// Sends `req`'s head and returns at once with a body still to write and the response
    /// still to come (gRPC's client- and bidi-streaming calls). HTTP/2 only: over
    /// HTTP/1.1 it fails as a protocol error.
    fn duplex(&mut self, req: Request) -> BoxFuture<'_, Result<Duplex, TransportError>> {
        drop(req);
        Box::pin(async {
            Err(TransportError::Protocol(
                "a request body streamed after its head needs HTTP/2".into(),
            ))
        })
    }
    /// For a multiplexed protocol, another handle onto this same connection, so a pool can
    /// run many requests on it at once; `None` where one request at a time is the rule.
    fn share(&self) -> Option<Box<dyn Connection>>;
}

/// The transport that reaches `endpoint` in `protocol`: over TLS with `tls` when given (and
/// always for [`Protocol::H2`], with [`TlsConfig::default`]'s system roots when `tls` is
/// `None`), over plain TCP otherwise.
pub fn connector(
    endpoint: &Endpoint,
    protocol: Protocol,
    tls: Option<&TlsConfig>,
) -> Arc<dyn Transport> {
    let dial = Dial::new(endpoint);
    match (tls, protocol) {
        (Some(tls), p) => Arc::new(tls::Tls::new(dial, tls, p)),
        (None, Protocol::H1) => Arc::new(h1_raw::H1(dial)),
        (None, Protocol::H2c) => Arc::new(h2c::H2c(dial)),
        (None, Protocol::H2) => Arc::new(tls::Tls::new(dial, &TlsConfig::default(), Protocol::H2)),
    }
}

/// Sorts a hyper error (HTTP/1.1: every failure ends the connection) into reset or
/// protocol by what it says.
pub(crate) fn from_hyper(e: hyper::Error) -> TransportError {
    let text = error_text(&e);
    let mut source = e.source();
    while let Some(s) = source {
        if s.downcast_ref::<std::io::Error>().is_some() {
            return TransportError::Reset(text);
        }
        source = s.source();
    }
    if e.is_incomplete_message() || e.is_closed() || e.is_canceled() || e.is_body_write_aborted() {
        TransportError::Reset(text)
    } else {
        TransportError::Protocol(text)
    }
}

/// The error and its causes on one line.
fn error_text(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// `n` in decimal, in `buf`: a `content-length` without a `String`, for the hand-written
/// HTTP/1.1 and HPACK encoders.
fn itoa(mut n: usize, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}
