//! HTTP/1.1 over plain TCP without hyper on the request path: the request is written into a
//! reused buffer, the response read into another and parsed with `httparse`, all in the
//! player's own task (no connection task to hand over to and back per request).
//!
//! Covers what a player's calls need: `Content-Length`, chunked and close-delimited bodies,
//! `HEAD`/204/304 without a body, 1xx heads skipped, keep-alive and `Connection: close`,
//! HTTP/1.0 responses. A stream or long poll ([`Connection::open`]) and a request that sets
//! its own `Transfer-Encoding` hand the connection to hyper for the rest of its life
//! ([`super::h1`]); so does nothing else.

use std::{
    mem::MaybeUninit,
    task::{Context, Waker},
};

use bytes::{Buf as _, Bytes, BytesMut};
use http::{
    HeaderValue, Method,
    header::{CONTENT_LENGTH, HOST, TRANSFER_ENCODING},
};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _, ReadBuf},
    net::TcpStream,
};

use crate::{
    BoxFuture, Connection, Dial, Headers, Request, Response, Streaming, Transport, TransportError,
    h1::{Hyper, hyper_handshake},
    itoa,
};

/// The most response head bytes read before giving up on finding its end (hyper's default
/// read buffer limit is about this).
const MAX_HEAD: usize = 400 * 1024;
/// Response headers parsed at most (hyper's limit).
const MAX_HEADERS: usize = 100;

/// The HTTP/1.1 transport over plain TCP.
pub(crate) struct H1(pub Dial);

impl Transport for H1 {
    fn connect(&self) -> BoxFuture<'_, Result<Box<dyn Connection>, TransportError>> {
        Box::pin(async move { connection(&self.0, self.0.tcp().await?) })
    }

    fn multiplexed(&self) -> bool {
        false
    }
}

/// A fresh HTTP/1.1 connection on `stream`.
pub(super) fn connection(
    dial: &Dial,
    stream: TcpStream,
) -> Result<Box<dyn Connection>, TransportError> {
    let host = HeaderValue::from_str(&dial.authority).map_err(|e| dial.failed(e.to_string()))?;
    Ok(Box::new(RawConnection {
        state: State::Raw(Raw {
            io: stream,
            rbuf: BytesMut::with_capacity(8 * 1024),
            wbuf: Vec::with_capacity(512),
            closed: false,
        }),
        host,
    }))
}

struct RawConnection {
    state: State,
    host: HeaderValue,
}

enum State {
    Raw(Raw),
    /// Handed to hyper (see the module's doc).
    Hyper(Hyper),
    /// The hand-over failed.
    Gone,
}

struct Raw {
    io: TcpStream,
    rbuf: BytesMut,
    wbuf: Vec<u8>,
    /// The connection cannot carry another request (closed by the peer, `Connection:
    /// close`, a close-delimited body, or a failed exchange).
    closed: bool,
}

impl RawConnection {
    /// The hyper connection this one became, handing it over first if need be.
    async fn hyper(&mut self) -> Result<&mut Hyper, TransportError> {
        if matches!(self.state, State::Raw(_))
            && let State::Raw(raw) = std::mem::replace(&mut self.state, State::Gone)
        {
            if raw.closed || !raw.rbuf.is_empty() {
                return Err(TransportError::Reset(
                    "the connection closed before the request".into(),
                ));
            }
            self.state = State::Hyper(hyper_handshake(raw.io, self.host.clone()).await?);
        }
        match &mut self.state {
            State::Hyper(h) => Ok(h),
            _ => Err(TransportError::Reset(
                "the connection closed before the request".into(),
            )),
        }
    }
}

impl Connection for RawConnection {
    fn send(&mut self, req: Request) -> BoxFuture<'_, Result<Response, TransportError>> {
        // Two futures, each boxed on its own: hyper's hand-over (rare) is over a kilobyte,
        // and sharing one future with it would make every plain request's allocation that
        // large too (past glibc's per-thread cache: a slow path showed in the profile).
        if matches!(self.state, State::Raw(_)) && !req.headers.contains_key(TRANSFER_ENCODING) {
            let State::Raw(raw) = &mut self.state else {
                unreachable!("matched above")
            };
            // Written before the future is made, so the request takes no room in it (the
            // future held two copies of it: 352 of its 856 bytes, copied into every box).
            let head_only = req.method == Method::HEAD;
            if let Err(e) = raw.write_request(req, &self.host) {
                return Box::pin(std::future::ready(Err(e)));
            }
            return Box::pin(async move {
                let r = raw.exchange(head_only).await;
                if r.is_err() {
                    raw.closed = true;
                }
                r
            });
        }
        Box::pin(async move { self.hyper().await?.send_whole(req).await })
    }

    fn open(&mut self, req: Request) -> BoxFuture<'_, Result<Streaming, TransportError>> {
        Box::pin(async move { self.hyper().await?.open_stream(req).await })
    }

    fn is_closed(&self) -> bool {
        match &self.state {
            State::Raw(raw) => raw.closed || raw.peer_left(),
            State::Hyper(h) => h.gone(),
            State::Gone => true,
        }
    }

    fn share(&self) -> Option<Box<dyn Connection>> {
        None
    }
}

fn reset(e: std::io::Error) -> TransportError {
    TransportError::Reset(e.to_string())
}

fn protocol(what: impl std::fmt::Display) -> TransportError {
    TransportError::Protocol(what.to_string())
}

/// How the response body is delimited.
enum Framing {
    Empty,
    Length(usize),
    Chunked,
    UntilClose,
}

impl Raw {
    /// True if the peer closed the idle connection (or sent bytes nobody asked for), so the
    /// owner reconnects before its next request instead of sending into a dead socket.
    /// Costs no system call while the reactor has seen nothing arrive.
    fn peer_left(&self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        let mut byte = [0u8; 1];
        let mut buf = ReadBuf::new(&mut byte);
        // Any answer (end of stream, stray bytes, an error) means the connection cannot
        // carry the next request; nothing to read yet is the healthy case.
        self.io.poll_peek(&mut cx, &mut buf).is_ready()
    }

    /// Sends the request [`Raw::write_request`] wrote and reads its response.
    async fn exchange(&mut self, head_only: bool) -> Result<Response, TransportError> {
        self.io.write_all(&self.wbuf).await.map_err(reset)?;
        loop {
            let (status, headers, framing, keep_alive) = self.read_head(head_only).await?;
            if (100..200).contains(&status) {
                if status == 101 {
                    return Err(protocol("the server switched protocols (101) unasked"));
                }
                continue; // an interim response; the final one follows
            }
            let body = self.read_body(framing).await?;
            if !keep_alive {
                self.closed = true;
            }
            return Ok(Response {
                status,
                headers,
                body,
                trailers: None,
            });
        }
    }

    /// Writes `req` into the write buffer; a path that is not a valid request target is
    /// refused (the check and message hyper has).
    fn write_request(&mut self, req: Request, host: &HeaderValue) -> Result<(), TransportError> {
        if let Err(e) = req.path.parse::<http::Uri>() {
            return Err(TransportError::Protocol(format!(
                "path `{}`: {e}",
                req.path
            )));
        }
        let w = &mut self.wbuf;
        w.clear();
        w.extend_from_slice(req.method.as_str().as_bytes());
        w.push(b' ');
        w.extend_from_slice(req.path.as_bytes());
        w.extend_from_slice(b" HTTP/1.1\r\nhost: ");
        w.extend_from_slice(host.as_bytes());
        w.extend_from_slice(b"\r\n");
        let mut length_given = false;
        for (name, value) in &req.headers {
            if name == HOST {
                continue; // the transport's own, as with hyper
            }
            length_given |= name == CONTENT_LENGTH;
            w.extend_from_slice(name.as_str().as_bytes());
            w.extend_from_slice(b": ");
            w.extend_from_slice(value.as_bytes());
            w.extend_from_slice(b"\r\n");
        }
        // As hyper does: a length for a body, none for an empty one.
        if !req.body.is_empty() && !length_given {
            w.extend_from_slice(b"content-length: ");
            w.extend_from_slice(itoa(req.body.len(), &mut [0; 20]));
            w.extend_from_slice(b"\r\n");
        }
        w.extend_from_slice(b"\r\n");
        w.extend_from_slice(&req.body);
        Ok(())
    }

    /// Reads more bytes; an end of stream here cuts a response short.
    async fn fill(&mut self) -> Result<(), TransportError> {
        if self.rbuf.capacity() - self.rbuf.len() < 1024 {
            self.rbuf.reserve(8 * 1024);
        }
        match self.io.read_buf(&mut self.rbuf).await {
            Ok(0) => {
                self.closed = true;
                Err(TransportError::Reset(
                    "connection closed before message completed".into(),
                ))
            }
            Ok(_) => Ok(()),
            Err(e) => Err(reset(e)),
        }
    }

    /// One response head: status, headers, how the body is framed, and whether the
    /// connection stays open after it.
    async fn read_head(
        &mut self,
        head_only: bool,
    ) -> Result<(u16, Headers, Framing, bool), TransportError> {
        loop {
            if !self.rbuf.is_empty() {
                // Uninitialised: zeroing 100 slots (3 KiB) per response showed in the
                // profile; the parser writes the ones it uses.
                let mut slots =
                    [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
                let mut parsed = httparse::Response::new(&mut []);
                match httparse::ParserConfig::default().parse_response_with_uninit_headers(
                    &mut parsed,
                    &self.rbuf,
                    &mut slots,
                ) {
                    Ok(httparse::Status::Complete(n)) => {
                        let status = parsed.code.unwrap_or(0);
                        let version = parsed.version.unwrap_or(1);
                        let mut framing = None;
                        let mut length: Option<usize> = None;
                        let mut keep_alive = version == 1;
                        // Only the three headers that frame the body are read here; the
                        // rest stay in the head's bytes ([`Headers`]).
                        for h in parsed.headers.iter() {
                            let (name, value) = (h.name.as_bytes(), h.value);
                            if name.eq_ignore_ascii_case(b"content-length") {
                                let n = std::str::from_utf8(value)
                                    .ok()
                                    .and_then(|v| v.trim().parse::<usize>().ok())
                                    .ok_or_else(|| protocol("invalid content-length"))?;
                                if length.is_some_and(|l| l != n) {
                                    return Err(protocol("conflicting content-length headers"));
                                }
                                length = Some(n);
                            } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
                                let chunked =
                                    value.rsplit(|&b| b == b',').next().is_some_and(|t| {
                                        t.trim_ascii().eq_ignore_ascii_case(b"chunked")
                                    });
                                framing = Some(if chunked {
                                    Framing::Chunked
                                } else {
                                    Framing::UntilClose
                                });
                            } else if name.eq_ignore_ascii_case(b"connection") {
                                for token in value.split(|&b| b == b',') {
                                    let t = token.trim_ascii();
                                    if t.eq_ignore_ascii_case(b"close") {
                                        keep_alive = false;
                                    } else if t.eq_ignore_ascii_case(b"keep-alive") && version == 0
                                    {
                                        keep_alive = true;
                                    }
                                }
                            }
                        }
                        let headers = Headers::from_head(self.rbuf.split_to(n).freeze());
                        let framing = if head_only || status == 204 || status == 304 || status < 200
                        {
                            Framing::Empty
                        } else {
                            match (framing, length) {
                                (Some(f), _) => f,
                                (None, Some(0)) => Framing::Empty,
                                (None, Some(n)) => Framing::Length(n),
                                (None, None) => Framing::UntilClose,
                            }
                        };
                        if matches!(framing, Framing::UntilClose) {
                            keep_alive = false;
                        }
                        return Ok((status, headers, framing, keep_alive));
                    }
                    Ok(httparse::Status::Partial) => {
                        if self.rbuf.len() > MAX_HEAD {
                            return Err(protocol("response head too large"));
                        }
                    }
                    Err(e) => return Err(protocol(format!("invalid HTTP response: {e}"))),
                }
            }
            self.fill().await?;
        }
    }

    async fn read_body(&mut self, framing: Framing) -> Result<Bytes, TransportError> {
        match framing {
            Framing::Empty => Ok(Bytes::new()),
            Framing::Length(n) => {
                if self.rbuf.len() < n {
                    self.rbuf.reserve(n - self.rbuf.len());
                }
                while self.rbuf.len() < n {
                    self.fill().await?;
                }
                Ok(self.rbuf.split_to(n).freeze())
            }
            Framing::UntilClose => {
                loop {
                    match self.fill().await {
                        Ok(()) => {}
                        Err(TransportError::Reset(_)) if self.closed => break,
                        Err(e) => return Err(e),
                    }
                }
                Ok(self.rbuf.split().freeze())
            }
            Framing::Chunked => {
                let mut body = BytesMut::new();
                loop {
                    let size = loop {
                        match httparse::parse_chunk_size(&self.rbuf) {
                            Ok(httparse::Status::Complete((used, size))) => {
                                self.rbuf.advance(used);
                                break usize::try_from(size)
                                    .map_err(|_| protocol("chunk too large"))?;
                            }
                            Ok(httparse::Status::Partial) => self.fill().await?,
                            Err(_) => return Err(protocol("invalid chunk size line")),
                        }
                    };
                    if size == 0 {
                        self.skip_trailers().await?;
                        return Ok(body.freeze());
                    }
                    while self.rbuf.len() < size + 2 {
                        self.fill().await?;
                    }
                    body.extend_from_slice(&self.rbuf[..size]);
                    if &self.rbuf[size..size + 2] != b"\r\n" {
                        return Err(protocol("chunk data not followed by CRLF"));
                    }
                    self.rbuf.advance(size + 2);
                }
            }
        }
    }

    /// The trailer section after the last chunk, up to and including its empty line.
    async fn skip_trailers(&mut self) -> Result<(), TransportError> {
        loop {
            match self.rbuf.windows(2).position(|w| w == b"\r\n") {
                Some(0) => {
                    self.rbuf.advance(2);
                    return Ok(());
                }
                Some(i) => self.rbuf.advance(i + 2),
                None => {
                    if self.rbuf.len() > MAX_HEAD {
                        return Err(protocol("trailers too large"));
                    }
                    self.fill().await?;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::{
        io::{AsyncReadExt as _, AsyncWriteExt as _},
        net::TcpListener,
    };

    use crate::ErrorKind;

    use super::*;

    /// A loopback server that answers each request on one connection with the next of
    /// `answers` (raw bytes), then closes; returns the address and the requests it read.
    async fn server(answers: Vec<&'static [u8]>) -> (Dial, tokio::task::JoinHandle<Vec<String>>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let h = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut seen = Vec::new();
            for a in answers {
                let mut req = Vec::new();
                let mut b = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut b).await.unwrap();
                    if n == 0 {
                        return seen;
                    }
                    req.extend_from_slice(&b[..n]);
                }
                seen.push(String::from_utf8(req).unwrap());
                // Split the answer, so the client has to read more than once.
                let mid = a.len() / 2;
                s.write_all(&a[..mid]).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                s.write_all(&a[mid..]).await.unwrap();
            }
            seen
        });
        let dial = Dial {
            host: "127.0.0.1".into(),
            port,
            authority: format!("127.0.0.1:{port}"),
            timeout: Duration::from_secs(5),
            sources: Default::default(),
            next_source: Default::default(),
        };
        (dial, h)
    }

    fn get(path: &str) -> Request {
        Request {
            method: Method::GET,
            path: path.into(),
            headers: http::HeaderMap::new(),
            body: Bytes::new(),
        }
    }

    #[tokio::test]
    async fn reads_every_kind_of_framing_on_one_connection() {
        let (dial, server) = server(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4;x=y\r\ndefg\r\n0\r\nTrailer: t\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end",
        ])
        .await;
        let mut c = connection(&dial, dial.tcp().await.unwrap()).unwrap();
        let r = c.send(get("/a?x=1")).await.unwrap();
        assert_eq!((r.status, &r.body[..]), (200, &b"hello"[..]));
        assert_eq!(r.headers.get("x-a"), Some(&b"1"[..]));
        assert_eq!(r.headers.to_map()["x-a"], "1");
        let mut post = get("/b");
        post.method = Method::POST;
        post.body = Bytes::from_static(b"{}");
        post.headers.insert("x-key", HeaderValue::from_static("k"));
        let r = c.send(post).await.unwrap();
        assert_eq!((r.status, &r.body[..]), (201, &b"abcdefg"[..]));
        let r = c.send(get("/c")).await.unwrap();
        assert_eq!((r.status, r.body.len()), (204, 0));
        let mut head = get("/d");
        head.method = Method::HEAD;
        let r = c.send(head).await.unwrap();
        assert_eq!((r.status, r.body.len()), (200, 0));
        assert!(!c.is_closed());
        let r = c.send(get("/e")).await.unwrap();
        assert_eq!(&r.body[..], b"until the end");
        assert!(c.is_closed(), "a close-delimited body ends the connection");
        let seen = server.await.unwrap();
        assert_eq!(seen.len(), 5);
        assert!(
            seen[0].starts_with("GET /a?x=1 HTTP/1.1\r\nhost: 127.0.0.1:"),
            "{}",
            seen[0]
        );
        assert!(seen[1].starts_with("POST /b HTTP/1.1\r\n"), "{}", seen[1]);
        assert!(seen[1].contains("\r\nx-key: k\r\n"), "{}", seen[1]);
        assert!(seen[1].contains("\r\ncontent-length: 2\r\n"), "{}", seen[1]);
        assert!(!seen[0].contains("content-length"), "{}", seen[0]);
    }

    #[tokio::test]
    async fn connection_close_and_an_idle_hang_up_mark_the_connection_closed() {
        let (dial, served) = server(vec![b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"]).await;
        let mut c = connection(&dial, dial.tcp().await.unwrap()).unwrap();
        c.send(get("/")).await.unwrap();
        served.await.unwrap(); // the server hangs up, idle
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        // The reactor learns of the hang-up on its next turn.
        while !c.is_closed() {
            assert!(
                std::time::Instant::now() < deadline,
                "the hang-up went unnoticed"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let (dial, _server) = server(vec![b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx"]).await;
        let mut c = connection(&dial, dial.tcp().await.unwrap()).unwrap();
        c.send(get("/")).await.unwrap();
        assert!(c.is_closed(), "HTTP/1.0 without keep-alive");
    }

    #[tokio::test]
    async fn garbage_is_a_protocol_error_and_a_cut_response_a_reset() {
        for (answer, kind) in [
            (&b"SSH-2.0-OpenSSH_9.6\r\n\r\n"[..], ErrorKind::Protocol),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
                ErrorKind::Reset,
            ),
            (b"HTTP/1.1 200 OK\r\nContent-Le", ErrorKind::Reset),
        ] {
            let (dial, _server) = server(vec![answer]).await;
            let mut c = connection(&dial, dial.tcp().await.unwrap()).unwrap();
            let e = c.send(get("/")).await.unwrap_err();
            assert_eq!(
                e.kind(),
                kind,
                "{e} for {:?}",
                String::from_utf8_lossy(answer)
            );
        }
        let (dial, _server) = server(vec![]).await;
        let mut c = connection(&dial, dial.tcp().await.unwrap()).unwrap();
        let e = c.send(get("/a b")).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    }
}
