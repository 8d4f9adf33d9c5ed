//! How a player's requests reach the target: a [`Transport`] opens [`Connection`]s.
//!
//! One file per protocol ([`h1`], [`h2c`]); [`tls`] puts either HTTP/1.1 or HTTP/2 over
//! TLS (h2 by ALPN) and is picked in [`for_target`] for `https://` targets. HTTP/2, over
//! TCP or TLS, is the hand-written client in `h2` (a file per protocol layer, HPACK in
//! `h2::hpack`); so are plain HTTP/1.1 calls (`h1_raw`).

pub mod h1;
mod h1_raw;
pub(crate) mod h2;
pub mod h2c;
mod headers;
pub mod tls;

use std::{error::Error as _, future::Future, pin::Pin, sync::Arc, time::Duration};

use bytes::Bytes;
use http::{HeaderMap, Method};
use tokio::net::TcpStream;

pub use headers::Headers;

use crate::scenario::{Target, TransportKind};
use herd_model::{TlsProblem, TransportErrorKind};

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

    /// The rest of the body, to its end.
    pub async fn collect(mut self) -> Result<Bytes, TransportError> {
        let mut whole = bytes::BytesMut::new();
        while let Some(chunk) = self.chunk().await {
            whole.extend_from_slice(&chunk?);
        }
        Ok(whole.freeze())
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

impl TransportError {
    /// The outcome sub-kind.
    pub fn kind(&self) -> TransportErrorKind {
        match self {
            Self::Connect { .. } => TransportErrorKind::Connect,
            Self::Reset(_) => TransportErrorKind::Reset,
            Self::Protocol(_) => TransportErrorKind::Protocol,
            Self::Tls { problem, .. } => TransportErrorKind::Tls(*problem),
        }
    }
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
    /// For a multiplexed protocol, another handle onto this same connection, so a pool can
    /// run many requests on it at once; `None` where one request at a time is the rule.
    fn share(&self) -> Option<Box<dyn Connection>>;
}

/// The transport the target asks for.
pub fn for_target(target: &Target) -> Arc<dyn Transport> {
    let dial = Dial {
        host: target.host.clone(),
        port: target.port,
        authority: target.authority.clone(),
        timeout: target.connect_timeout,
        sources: target.source_addrs.clone().into(),
        next_source: Default::default(),
    };
    match (&target.tls, target.transport) {
        (Some(tls), kind) => Arc::new(tls::Tls::new(dial, tls, kind)),
        (None, TransportKind::H1) => Arc::new(h1::H1(dial)),
        (None, TransportKind::H2c) => Arc::new(h2c::H2c(dial)),
        // The scenario gives every h2 target its TLS settings; a hand-built one gets the
        // defaults (system roots, certificates checked).
        (None, TransportKind::H2) => Arc::new(tls::Tls::new(
            dial,
            &crate::scenario::Tls::default(),
            TransportKind::H2,
        )),
    }
}

/// Where and how long to dial.
#[derive(Debug, Clone)]
pub(crate) struct Dial {
    pub host: String,
    pub port: u16,
    pub authority: String,
    pub timeout: Duration,
    /// `target.source_addrs`, taken in turn.
    pub sources: Arc<[std::net::IpAddr]>,
    pub next_source: Arc<std::sync::atomic::AtomicUsize>,
}

impl Dial {
    /// A TCP connection with Nagle off: a request is one small write that must not wait for
    /// the previous segment's ACK.
    pub async fn tcp(&self) -> Result<TcpStream, TransportError> {
        let connect = async {
            if self.sources.is_empty() {
                return TcpStream::connect((self.host.as_str(), self.port)).await;
            }
            let n = self
                .next_source
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.tcp_from(self.sources[n % self.sources.len()]).await
        };
        let stream = tokio::time::timeout(self.timeout, connect)
            .await
            .map_err(|_| self.failed(format!("no answer within {:?}", self.timeout)))?
            .map_err(|e| self.failed(e.to_string()))?;
        stream
            .set_nodelay(true)
            .map_err(|e| self.failed(e.to_string()))?;
        Ok(stream)
    }

    /// Connects from source address `src`: the first of the host's addresses of its family.
    async fn tcp_from(&self, src: std::net::IpAddr) -> std::io::Result<TcpStream> {
        let to = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await?
            .find(|a| a.is_ipv4() == src.is_ipv4())
            .ok_or_else(|| {
                std::io::Error::other(format!(
                    "{} has no {} address for source address {src}",
                    self.host,
                    if src.is_ipv4() { "IPv4" } else { "IPv6" }
                ))
            })?;
        let socket = if src.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        // Without IP_BIND_ADDRESS_NO_PORT, bind() to port 0 picks the port there and then,
        // unique for the source address whatever the destination (inet_csk_get_port), so one
        // source address would cap every destination together at the ephemeral range; with
        // it the port is picked at connect() per 4-tuple (__inet_hash_connect), as for an
        // unbound socket. Linux ≥ 4.2.
        let on: libc::c_int = 1;
        // SAFETY: setsockopt on a socket this function owns, with a c_int option value.
        let rc = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&socket),
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        socket
            .bind(std::net::SocketAddr::new(src, 0))
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "binding source address {src} (target.source_addrs; is it local?): {e}"
                    ),
                )
            })?;
        socket.connect(to).await
    }

    pub fn failed(&self, reason: String) -> TransportError {
        TransportError::Connect {
            addr: format!("{}:{}", self.host, self.port),
            reason,
        }
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
