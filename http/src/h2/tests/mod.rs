//! The client against real peers on 127.0.0.1: a hand-rolled HTTP/2 server that writes
//! exact frames (GOAWAY, RST_STREAM, CONTINUATION, padding, strict flow control…), and
//! hyper's server for Huffman-coded headers and many streams at once.

use std::{collections::HashMap, convert::Infallible, time::Duration};

use bytes::{Buf as _, Bytes, BytesMut};
use http::{HeaderMap, Method};

use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};

use super::{conn::STREAMS_BEFORE_SETTINGS, frame::*, hpack::tests::hex, *};
use crate::ErrorKind;

/// Long enough for anything a test waits on here; a hang fails instead of stalling.
const PATIENCE: Duration = Duration::from_secs(10);

struct Frame {
    kind: u8,
    flags: u8,
    id: u32,
    payload: Bytes,
}

/// The server's end of one connection: frames in and out, the client's SETTINGS acknowledged
/// and its WINDOW_UPDATEs counted as they pass.
struct Peer {
    io: TcpStream,
    buf: BytesMut,
    decoder: hpack::Decoder,
    /// What the client's windows let us send: the connection's, and each stream's.
    window: i64,
    windows: HashMap<u32, i64>,
    initial_window: i64,
    /// The client's settings, as it last sent them.
    settings: HashMap<u16, u32>,
}

impl Peer {
    /// Accepts a connection, checks the preface and sends our SETTINGS.
    async fn accept(l: &TcpListener, settings: &[(u16, u32)]) -> Self {
        let mut p = Self::preface(l).await;
        p.settings(settings).await;
        p
    }

    /// Accepts a connection and checks the preface; our SETTINGS are still to send.
    async fn preface(l: &TcpListener) -> Self {
        let (io, _) = l.accept().await.unwrap();
        let mut p = Self {
            io,
            buf: BytesMut::new(),
            decoder: hpack::Decoder::new(),
            window: 65_535,
            windows: HashMap::new(),
            initial_window: 65_535,
            settings: HashMap::new(),
        };
        while p.buf.len() < PREFACE.len() {
            assert!(p.io.read_buf(&mut p.buf).await.unwrap() > 0, "no preface");
        }
        assert_eq!(&p.buf[..PREFACE.len()], PREFACE);
        p.buf.advance(PREFACE.len());
        p
    }

    async fn settings(&mut self, settings: &[(u16, u32)]) {
        let payload: Vec<u8> = settings
            .iter()
            .flat_map(|(k, v)| k.to_be_bytes().into_iter().chain(v.to_be_bytes()))
            .collect();
        self.send(SETTINGS, 0, 0, &payload).await;
    }

    async fn send(&mut self, kind: u8, flags: u8, id: u32, payload: &[u8]) {
        self.send_all(&[(kind, flags, id, payload)]).await;
    }

    /// Frames in one write, so the client reads them together.
    async fn send_all(&mut self, frames: &[(u8, u8, u32, &[u8])]) {
        let mut f = Vec::new();
        for &(kind, flags, id, payload) in frames {
            frame_head(&mut f, payload.len(), kind, flags, id);
            f.extend_from_slice(payload);
        }
        self.io.write_all(&f).await.unwrap();
    }

    /// The client's next frame other than SETTINGS and WINDOW_UPDATE (which it notes);
    /// `None` once the client closed.
    async fn next(&mut self) -> Option<Frame> {
        loop {
            let f = self.raw().await?;
            if !self.note(&f).await {
                return Some(f);
            }
        }
    }

    /// Reads until the client gives back window (noting every SETTINGS and WINDOW_UPDATE on
    /// the way); false if it sent something else first.
    async fn window_update(&mut self) -> bool {
        loop {
            let f = self.raw().await.expect("the client stays");
            if !self.note(&f).await {
                return false;
            }
            if f.kind == WINDOW_UPDATE {
                return true;
            }
        }
    }

    /// Takes note of a SETTINGS (acknowledging it) or WINDOW_UPDATE; false for any other
    /// frame.
    async fn note(&mut self, f: &Frame) -> bool {
        match f.kind {
            SETTINGS if f.flags & ACK == 0 => {
                for p in f.payload.chunks(6) {
                    let (k, v) = (
                        u16::from_be_bytes([p[0], p[1]]),
                        u32::from_be_bytes([p[2], p[3], p[4], p[5]]),
                    );
                    self.settings.insert(k, v);
                    if k == 4 {
                        let v = i64::from(v);
                        for w in self.windows.values_mut() {
                            *w += v - self.initial_window;
                        }
                        self.initial_window = v;
                    }
                }
                self.send(SETTINGS, ACK, 0, &[]).await;
                true
            }
            SETTINGS => true,
            WINDOW_UPDATE => {
                let n = i64::from(u32::from_be_bytes(f.payload[..4].try_into().unwrap()));
                if f.id == 0 {
                    self.window += n;
                } else {
                    *self.windows.entry(f.id).or_insert(self.initial_window) += n;
                }
                true
            }
            _ => false,
        }
    }

    async fn raw(&mut self) -> Option<Frame> {
        loop {
            if self.buf.len() >= 9 {
                let len = usize::from(self.buf[0]) << 16
                    | usize::from(self.buf[1]) << 8
                    | usize::from(self.buf[2]);
                if self.buf.len() >= 9 + len {
                    let head = self.buf.split_to(9);
                    return Some(Frame {
                        kind: head[3],
                        flags: head[4],
                        id: u32::from_be_bytes(head[5..9].try_into().unwrap()),
                        payload: self.buf.split_to(len).freeze(),
                    });
                }
            }
            if self.io.read_buf(&mut self.buf).await.ok()? == 0 {
                return None;
            }
        }
    }

    /// The next request: its stream, `x-test` header, and body (read to END_STREAM).
    async fn request(&mut self) -> (u32, String, Vec<u8>) {
        let f = self.next().await.expect("a request");
        assert_eq!(f.kind, HEADERS, "a request starts with HEADERS");
        assert_ne!(f.flags & END_HEADERS, 0);
        let mut fields = Vec::new();
        self.decoder.decode(&f.payload, &mut fields).unwrap();
        let test = fields
            .iter()
            .find(|(n, _)| *n == Name::Header("x-test".parse().unwrap()))
            .map(|(_, v)| String::from_utf8(v.to_vec()).unwrap())
            .unwrap_or_default();
        let mut body = Vec::new();
        let mut end = f.flags & END_STREAM != 0;
        while !end {
            let d = self.next().await.expect("the request body");
            assert_eq!((d.kind, d.id), (DATA, f.id), "the request's DATA");
            body.extend_from_slice(&d.payload);
            end = d.flags & END_STREAM != 0;
        }
        (f.id, test, body)
    }

    /// A `200` head with `x-test: value`, and `body` in one DATA frame.
    async fn answer(&mut self, id: u32, value: &str, body: &[u8]) {
        self.send(
            HEADERS,
            END_HEADERS,
            id,
            &head_block(200, &[("x-test", value)]),
        )
        .await;
        self.send(DATA, END_STREAM, id, body).await;
    }
}

/// A header block of plain literals: `:status` then `headers`.
fn head_block(status: u16, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut b = vec![0x08, 3];
    b.extend_from_slice(status.to_string().as_bytes());
    for (n, v) in headers {
        b.push(0);
        b.push(n.len() as u8);
        b.extend_from_slice(n.as_bytes());
        b.push(v.len() as u8);
        b.extend_from_slice(v.as_bytes());
    }
    b
}

fn dial(l: &TcpListener) -> Dial {
    let port = l.local_addr().unwrap().port();
    Dial {
        host: "127.0.0.1".into(),
        port,
        authority: format!("127.0.0.1:{port}"),
        timeout: PATIENCE,
        sources: Default::default(),
        next_source: Default::default(),
    }
}

async fn client(l: &TcpListener) -> Box<dyn Connection> {
    let d = dial(l);
    handshake(&d, d.tcp().await.unwrap(), false).await.unwrap()
}

/// A listener and a hand-rolled server task on it, and the client connected to it.
async fn pair<F, Fut>(server: F) -> (Box<dyn Connection>, JoinHandle<()>)
where
    F: FnOnce(TcpListener) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let d = dial(&l);
    let server = tokio::spawn(server(l));
    let c = handshake(&d, d.tcp().await.unwrap(), false).await.unwrap();
    (c, server)
}

fn get(test: &str) -> Request {
    let mut headers = HeaderMap::new();
    headers.insert("x-test", test.parse().unwrap());
    Request {
        method: Method::GET,
        path: "/".into(),
        headers,
        body: Bytes::new(),
    }
}

async fn within<T>(f: impl Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, f)
        .await
        .expect("done within the test's patience")
}

/// hyper's HTTP/2 server on loopback: answers the request's `x-test` value (after waiting
/// the milliseconds before a `/` in it, if any), with `x-printable: printable` and a
/// non-ASCII `x-utf8`.
async fn hyper_server(printable: String) -> (Dial, JoinHandle<()>) {
    use hyper::{server::conn::http2, service::service_fn};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let d = dial(&l);
    let server = tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let value = printable;
        let svc = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let value = value.clone();
            async move {
                let n = req.headers()["x-test"].to_str().unwrap().to_owned();
                if let Some((ms, _)) = n.split_once('/') {
                    tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
                }
                let mut r = hyper::Response::new(http_body_util::Full::new(Bytes::from(n)));
                r.headers_mut()
                    .insert("x-printable", value.parse().unwrap());
                r.headers_mut().insert(
                    "x-utf8",
                    http::HeaderValue::from_bytes(&[0xc3, 0xa9]).unwrap(),
                );
                Ok::<_, Infallible>(r)
            }
        });
        // Calls that time out reset streams the server may not have taken yet; past 20
        // of those (h2's rapid-reset guard) it sends GOAWAY ENHANCE_YOUR_CALM, which a slow
        // or busy test machine reaches in `timeouts_in_a_crowd_leave_nobody_hanging`.
        let _ = http2::Builder::new(TokioExecutor::new())
            .max_pending_accept_reset_streams(10_000)
            .serve_connection(TokioIo::new(s), svc)
            .await;
    });
    (d, server)
}

mod conn;
mod flow;
mod fuzzed;
mod handoff;
mod streams;
