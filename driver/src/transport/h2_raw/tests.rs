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

use super::*;
use crate::{outcome::TransportErrorKind, transport::hpack::tests::hex};

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

#[tokio::test]
async fn a_response_in_pieces_continuation_padding_interim_head_and_trailers() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (id, _, _) = p.request().await;
        // 103 Early Hints first, then the real head split over HEADERS (padded, with a
        // priority) and two CONTINUATIONs.
        p.send(
            HEADERS,
            END_HEADERS,
            id,
            &head_block(103, &[("link", "</a>")]),
        )
        .await;
        let block = head_block(
            200,
            &[
                ("x-one", "1"),
                ("x-two", "two"),
                ("content-type", "text/plain"),
            ],
        );
        let mut first = vec![3]; // pad length
        first.extend_from_slice(&[0x80, 0, 0, 0, 15]); // exclusive on 0, weight 15
        first.extend_from_slice(&block[..4]);
        first.extend_from_slice(&[0; 3]);
        p.send(HEADERS, PADDED | PRIORITY_FLAG, id, &first).await;
        p.send(CONTINUATION, 0, id, &block[4..10]).await;
        p.send(CONTINUATION, END_HEADERS, id, &block[10..]).await;
        let mut padded = vec![5];
        padded.extend_from_slice(b"hello, ");
        padded.extend_from_slice(&[0; 5]);
        p.send(DATA, PADDED, id, &padded).await;
        p.send(DATA, 0, id, b"world").await;
        let trailers = [0x00, 5, b'x', b'-', b'c', b'r', b'c', 1, b'7'];
        p.send(HEADERS, END_HEADERS | END_STREAM, id, &trailers)
            .await;
        assert!(p.next().await.is_none(), "the client sent nothing more");
    })
    .await;
    let r = within(c.send(get("pieces"))).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.headers.to_map()["x-one"], "1");
    assert_eq!(r.headers.to_map()["x-two"], "two");
    assert_eq!(r.headers.to_map()["content-type"], "text/plain");
    assert!(
        !r.headers.to_map().contains_key("link"),
        "the 103's headers are not the response's"
    );
    assert_eq!(&r.body[..], b"hello, world");
    drop(c);
    within(server).await.unwrap();
}

#[tokio::test]
async fn goaway_fails_the_streams_it_did_not_take_and_closes_the_connection() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (first, ..) = p.request().await;
        let (second, ..) = p.request().await;
        let mut goaway = first.to_be_bytes().to_vec();
        goaway.extend_from_slice(&NO_ERROR.to_be_bytes());
        goaway.extend_from_slice(b"shutting down");
        p.send(GOAWAY, 0, 0, &goaway).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        p.answer(first, "1", b"one").await;
        assert!(second > first);
        // The connection ends once its last stream has.
        tokio::time::sleep(Duration::from_millis(20)).await;
    })
    .await;
    let mut other = c.share().unwrap();
    let a = tokio::spawn(async move { within(c.send(get("a"))).await.map(|r| r.body) });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let b = within(other.send(get("b"))).await.unwrap_err();
    assert_eq!(b.kind(), TransportErrorKind::Reset, "{b}");
    assert!(
        b.to_string().contains("GOAWAY (NO_ERROR: shutting down)"),
        "{b}"
    );
    assert_eq!(&a.await.unwrap().unwrap()[..], b"one");
    assert!(other.is_closed());
    let e = within(other.send(get("c"))).await.unwrap_err();
    assert_eq!(e.kind(), TransportErrorKind::Reset, "{e}");
    within(server).await.unwrap();
}

#[tokio::test]
async fn rst_stream_fails_that_stream_by_its_code_and_the_connection_goes_on() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (id, ..) = p.request().await;
        p.send(RST_STREAM, 0, id, &0x7u32.to_be_bytes()).await; // REFUSED_STREAM
        let (id, ..) = p.request().await;
        p.send(HEADERS, END_HEADERS, id, &head_block(200, &[]))
            .await;
        p.send(RST_STREAM, 0, id, &PROTOCOL_ERROR.to_be_bytes())
            .await;
        let (id, ..) = p.request().await;
        p.answer(id, "", b"fine").await;
        let _ = p.next().await;
    })
    .await;
    let e = within(c.send(get("1"))).await.unwrap_err();
    assert_eq!(e.kind(), TransportErrorKind::Reset, "{e}");
    assert!(e.to_string().contains("REFUSED_STREAM"), "{e}");
    let e = within(c.send(get("2"))).await.unwrap_err();
    assert_eq!(e.kind(), TransportErrorKind::Protocol, "{e}");
    assert!(!c.is_closed(), "a reset ends one stream only");
    let r = within(c.send(get("3"))).await.unwrap();
    assert_eq!(&r.body[..], b"fine");
    drop(c);
    within(server).await.unwrap();
}

#[tokio::test]
async fn max_concurrent_streams_1_makes_requests_wait_their_turn() {
    let (c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[(0x3, 1)]).await;
        let (id, ..) = p.request().await;
        p.answer(id, "", b"").await;
        for _ in 0..3 {
            let (id, test, _) = p.request().await;
            // No other request may arrive while this one is open.
            let early = tokio::time::timeout(Duration::from_millis(50), p.next()).await;
            assert!(early.is_err(), "a second stream opened beside stream {id}");
            p.answer(id, &test, test.as_bytes()).await;
        }
    })
    .await;
    // One call first: the client has the server's SETTINGS from then on.
    within(c.share().unwrap().send(get("first"))).await.unwrap();
    let tasks: Vec<_> = (0..3)
        .map(|i| {
            let mut h = c.share().unwrap();
            tokio::spawn(async move { within(h.send(get(&i.to_string()))).await.unwrap() })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        let r = t.await.unwrap();
        assert_eq!(r.body, i.to_string().as_bytes());
    }
    within(server).await.unwrap();
}

#[tokio::test]
async fn a_large_body_goes_out_in_frames_within_the_servers_windows() {
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let want = body.clone();
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[(0x4, 20_000)]).await;
        let (id, ..) = p.request().await;
        p.answer(id, "", b"").await;
        let f = p.next().await.unwrap();
        assert_eq!((f.kind, f.flags & END_STREAM), (HEADERS, 0));
        let id = f.id;
        let (mut got, mut window, mut stream_window) = (Vec::new(), 65_535i64, 20_000i64);
        loop {
            let d = p.next().await.unwrap();
            assert_eq!((d.kind, d.id), (DATA, id));
            assert!(d.payload.len() <= MAX_FRAME, "a frame over 16 KiB");
            window -= d.payload.len() as i64;
            stream_window -= d.payload.len() as i64;
            assert!(
                window >= 0 && stream_window >= 0,
                "the client overran a window"
            );
            got.extend_from_slice(&d.payload);
            if d.flags & END_STREAM != 0 {
                break;
            }
            if stream_window == 0 || window < 16_384 {
                // Give back what was read, in two steps, as a server reading slowly would.
                let n = 20_000 - stream_window;
                p.send(WINDOW_UPDATE, 0, id, &(n as u32).to_be_bytes())
                    .await;
                stream_window += n;
                let n = 65_535 - window;
                p.send(WINDOW_UPDATE, 0, 0, &(n as u32).to_be_bytes()).await;
                window += n;
            }
        }
        assert!(got == body, "the body arrived whole and in order");
        p.answer(id, "", b"").await;
        let _ = p.next().await;
    })
    .await;
    // One call first: the client has the server's SETTINGS from then on.
    within(c.send(get("first"))).await.unwrap();
    let mut req = get("big");
    req.method = Method::POST;
    req.body = want.into();
    let r = within(c.send(req)).await.unwrap();
    assert_eq!(r.status, 200);
    drop(c);
    within(server).await.unwrap();
}

#[tokio::test]
async fn a_long_stream_gets_its_windows_back_as_it_is_read() {
    const TOTAL: usize = 11 << 20;
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (id, ..) = p.request().await;
        p.send(HEADERS, END_HEADERS, id, &head_block(200, &[]))
            .await;
        let chunk = vec![b'x'; MAX_FRAME];
        let mut sent = 0;
        while sent < TOTAL {
            // Strictly within the windows the client gave: wait for more when they are
            // spent.
            let stream = p.windows.get(&id).copied().unwrap_or(p.initial_window);
            let n = chunk.len().min(TOTAL - sent);
            if stream < n as i64 || p.window < n as i64 {
                assert!(within(p.window_update()).await, "only window updates");
                continue;
            }
            let end = if sent + n == TOTAL { END_STREAM } else { 0 };
            p.send(DATA, end, id, &chunk[..n]).await;
            *p.windows.entry(id).or_insert(stream) -= n as i64;
            p.window -= n as i64;
            sent += n;
        }
        let _ = p.next().await;
    })
    .await;
    let mut s = within(c.open(get("long"))).await.unwrap();
    assert_eq!(s.status, 200);
    let mut read = 0;
    while let Some(chunk) = within(s.body.chunk()).await {
        read += chunk.unwrap().len();
    }
    assert_eq!(read, TOTAL);
    drop((s, c));
    within(server).await.unwrap();
}

#[tokio::test]
async fn a_dropped_request_resets_its_stream_and_the_next_call_goes_through() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (slow, ..) = p.request().await;
        let rst = p.next().await.unwrap();
        assert_eq!((rst.kind, rst.id), (RST_STREAM, slow));
        assert_eq!(&rst.payload[..], CANCEL.to_be_bytes());
        // The late answer to the dropped request is read past.
        p.answer(slow, "late", b"late").await;
        let (id, test, _) = p.request().await;
        p.answer(id, &test, b"next").await;
        let _ = p.next().await;
    })
    .await;
    let timed_out = tokio::time::timeout(Duration::from_millis(50), c.send(get("slow"))).await;
    assert!(timed_out.is_err());
    let r = within(c.send(get("next"))).await.unwrap();
    assert_eq!(&r.body[..], b"next");
    assert!(!c.is_closed());
    drop(c);
    within(server).await.unwrap();
}

#[tokio::test]
async fn a_dropped_stream_body_resets_the_stream() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (id, ..) = p.request().await;
        p.send(HEADERS, END_HEADERS, id, &head_block(200, &[]))
            .await;
        p.send(DATA, 0, id, b"event 1\n").await;
        let rst = p.next().await.unwrap();
        assert_eq!((rst.kind, rst.id), (RST_STREAM, id));
        let (id, ..) = p.request().await;
        p.answer(id, "", b"after").await;
        let _ = p.next().await;
    })
    .await;
    let mut s = within(c.open(get("events"))).await.unwrap();
    assert_eq!(
        &within(s.body.chunk()).await.unwrap().unwrap()[..],
        b"event 1\n"
    );
    drop(s);
    let r = within(c.send(get("after"))).await.unwrap();
    assert_eq!(&r.body[..], b"after");
    drop(c);
    within(server).await.unwrap();
}

/// The task the socket would wake finishes first; the other, still waiting, must be woken
/// to read its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_when_the_reader_leaves() {
    let (c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (late, ..) = p.request().await;
        let (early, ..) = p.request().await;
        p.answer(early, "", b"early").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        p.answer(late, "", b"late").await;
        let _ = p.next().await;
    })
    .await;
    let mut late = c.share().unwrap();
    let late = tokio::spawn(async move { within(late.send(get("late"))).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut early = c.share().unwrap();
    let early = tokio::spawn(async move { within(early.send(get("early"))).await.unwrap() });
    assert_eq!(&early.await.unwrap().body[..], b"early");
    assert_eq!(&late.await.unwrap().body[..], b"late");
    drop(c);
    within(server).await.unwrap();
}

#[tokio::test]
async fn pings_are_answered_and_a_connection_error_fails_every_handle() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (id, ..) = p.request().await;
        p.send(PING, 0, 0, b"12345678").await;
        let pong = p.next().await.unwrap();
        assert_eq!(
            (pong.kind, pong.flags, &pong.payload[..]),
            (PING, ACK, &b"12345678"[..])
        );
        p.answer(id, "", b"ok").await;
        let (id, ..) = p.request().await;
        p.send(DATA, 0, 0, b"on stream 0").await;
        let goaway = p.next().await.unwrap();
        assert_eq!(goaway.kind, GOAWAY);
        assert_eq!(&goaway.payload[4..8], PROTOCOL_ERROR.to_be_bytes());
        let _ = id;
    })
    .await;
    let r = within(c.send(get("ping"))).await.unwrap();
    assert_eq!(&r.body[..], b"ok");
    let other = c.share().unwrap();
    let e = within(c.send(get("broken"))).await.unwrap_err();
    assert_eq!(e.kind(), TransportErrorKind::Protocol, "{e}");
    assert!(other.is_closed() && c.is_closed());
    within(server).await.unwrap();
}

#[tokio::test]
async fn an_http_1_server_is_a_protocol_error_whether_it_answers_or_hangs_up() {
    for answer in [
        &b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"[..],
        b"",
    ] {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut c = client(&l).await;
        let (mut s, _) = l.accept().await.unwrap();
        s.read_exact(&mut [0; PREFACE.len()]).await.unwrap();
        s.write_all(answer).await.unwrap();
        drop(s);
        let e = within(c.send(get("h1"))).await.unwrap_err();
        assert_eq!(e.kind(), TransportErrorKind::Protocol, "{e}");
        assert!(e.to_string().contains("HTTP/1.1 server?"), "{e}");
        assert!(c.is_closed());
    }
}

/// Over TLS, ALPN has already chosen h2: a server that hangs up unheard is a reset, not a
/// suspected HTTP/1.1 server. (The socket is plain TCP here: TLS changes nothing else.)
#[tokio::test]
async fn over_tls_a_server_that_hangs_up_unheard_is_a_reset() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let d = dial(&l);
    let mut c = handshake(&d, d.tcp().await.unwrap(), true).await.unwrap();
    let (mut s, _) = l.accept().await.unwrap();
    s.read_exact(&mut [0; PREFACE.len()]).await.unwrap();
    drop(s);
    let e = within(c.send(get("h2"))).await.unwrap_err();
    assert_eq!(e.kind(), TransportErrorKind::Reset, "{e}");
    assert!(!e.to_string().contains("HTTP/1.1"), "{e}");
    assert!(c.is_closed());
}

#[tokio::test]
async fn a_server_that_closes_after_speaking_http2_is_a_reset() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let _ = p.request().await;
    })
    .await;
    let e = within(c.send(get("x"))).await.unwrap_err();
    assert_eq!(e.kind(), TransportErrorKind::Reset, "{e}");
    within(server).await.unwrap();
}

/// hyper's server codes header values with Huffman: every printable byte round-trips, and
/// many streams at once on shared handles all get their own answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn huffman_headers_and_many_streams_against_hyper() {
    let printable: String = (0x20u8..0x7f).map(char::from).collect();
    let (d, _server) = hyper_server(printable.clone()).await;
    let c = handshake(&d, d.tcp().await.unwrap(), false).await.unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|t| {
            let mut h = c.share().unwrap();
            let printable = printable.clone();
            tokio::spawn(async move {
                for i in 0..50 {
                    let n = format!("{t}-{i}");
                    let r = within(h.send(get(&n))).await.unwrap();
                    assert_eq!(r.body, n.as_bytes());
                    assert_eq!(r.headers.to_map()["x-printable"], printable.as_str());
                    assert_eq!(r.headers.to_map()["x-utf8"].as_bytes(), [0xc3, 0xa9]);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert!(!c.is_closed());
}

/// Many tasks on one connection, some of whose requests time out (their futures dropped
/// mid-flight, whichever task was reading at the time): nobody is left waiting, every
/// answer reaches its own request, and the connection stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timeouts_in_a_crowd_leave_nobody_hanging() {
    let (d, _server) = hyper_server(String::new()).await;
    let c = handshake(&d, d.tcp().await.unwrap(), false).await.unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|t| {
            let mut h = c.share().unwrap();
            tokio::spawn(async move {
                let mut answered = 0;
                for i in 0..40 {
                    // `x-test: ms/tag`: the server waits `ms` before answering `tag`.
                    let n = format!("{}/{t}-{i}", (t + i) % 4);
                    let call = tokio::time::timeout(Duration::from_millis(2), h.send(get(&n)));
                    if let Ok(r) = within(call).await {
                        assert_eq!(r.unwrap().body, n.as_bytes());
                        answered += 1;
                    }
                }
                answered
            })
        })
        .collect();
    let mut answered = 0;
    for t in tasks {
        answered += t.await.unwrap();
    }
    assert!(answered > 0, "some calls beat their timeout");
    assert!(!c.is_closed());
    let r = within(c.share().unwrap().send(get("0/last")))
        .await
        .unwrap();
    assert_eq!(&r.body[..], b"0/last");
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
        let mut b = http2::Builder::new(TokioExecutor::new());
        // The tests drop requests mid-flight on purpose (timeouts in a crowd): each is a reset
        // before the server took the stream, which h2 otherwise caps at 20 as a rapid-reset
        // defence (CVE-2023-44487) and answers with GOAWAY ENHANCE_YOUR_CALM — more of them
        // arrive before accept the slower the machine is.
        b.max_pending_accept_reset_streams(100_000);
        let _ = b.serve_connection(TokioIo::new(s), svc).await;
    });
    (d, server)
}

/// RFC 7541 C.6's three responses (Huffman-coded, through the dynamic table) as the heads of
/// three streams; then a table size update above our SETTINGS_HEADER_TABLE_SIZE, which the
/// server has acknowledged: a compression error, fatal to the connection.
#[tokio::test]
async fn the_dynamic_table_and_huffman_over_the_wire() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        for block in [
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            "4883 640e ffc1 c0bf",
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            "3fe1 1f 88",
        ] {
            let (id, ..) = p.request().await;
            p.send(HEADERS, END_HEADERS | END_STREAM, id, &hex(block)).await;
        }
        let goaway = p.next().await.unwrap();
        assert_eq!(&goaway.payload[4..8], COMPRESSION_ERROR.to_be_bytes());
    })
    .await;
    let r = within(c.send(get("1"))).await.unwrap();
    assert_eq!(r.status, 302);
    assert_eq!(r.headers.to_map()["location"], "https://www.example.com");
    let r = within(c.send(get("2"))).await.unwrap();
    assert_eq!(r.status, 307);
    assert_eq!(r.headers.to_map()["date"], "Mon, 21 Oct 2013 20:13:21 GMT");
    let r = within(c.send(get("3"))).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers.to_map()["set-cookie"],
        "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"
    );
    assert_eq!(r.headers.to_map()["content-encoding"], "gzip");
    assert_eq!(r.headers.to_map()["cache-control"], "private");
    let e = within(c.send(get("4"))).await.unwrap_err();
    assert_eq!(e.kind(), TransportErrorKind::Protocol, "{e}");
    assert!(e.to_string().contains("HPACK"), "{e}");
    assert!(c.is_closed());
    within(server).await.unwrap();
}

/// A GOAWAY that arrives while nobody uses the connection is seen by `is_closed`, so the
/// owner reconnects instead of sending into a closing connection.
#[tokio::test]
async fn an_idle_connection_notices_a_goaway() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (id, ..) = p.request().await;
        p.answer(id, "", b"ok").await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut goaway = id.to_be_bytes().to_vec();
        goaway.extend_from_slice(&NO_ERROR.to_be_bytes());
        p.send(GOAWAY, 0, 0, &goaway).await;
        let _ = p.next().await;
    })
    .await;
    within(c.send(get("1"))).await.unwrap();
    assert!(!c.is_closed());
    within(async {
        while !c.is_closed() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    drop(c);
    within(server).await.unwrap();
}

/// MAX_CONCURRENT_STREAMS 1: one call in flight, one queued for a stream and reading for
/// both when the GOAWAY arrives. The queued call fails, refused; the one in flight still
/// gets its answer when it comes, not at its timeout: the leaver hands the socket on.
#[tokio::test]
async fn after_a_goaway_the_queued_call_fails_and_the_one_in_flight_is_answered() {
    let (c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[(0x3, 1)]).await;
        let (id, ..) = p.request().await;
        p.answer(id, "", b"").await;
        let (a, ..) = p.request().await;
        // By now the second call waits for a stream, and reads for both.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut goaway = a.to_be_bytes().to_vec();
        goaway.extend_from_slice(&NO_ERROR.to_be_bytes());
        p.send(GOAWAY, 0, 0, &goaway).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        p.answer(a, "a", b"a").await;
        let _ = p.next().await;
    })
    .await;
    // One call first: the client has the server's SETTINGS from then on.
    within(c.share().unwrap().send(get("first"))).await.unwrap();
    let mut h = c.share().unwrap();
    let a = tokio::spawn(async move { h.send(get("a")).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut h = c.share().unwrap();
    let b = tokio::spawn(async move { h.send(get("b")).await });
    let e = within(b).await.unwrap().unwrap_err();
    assert_eq!(e.kind(), TransportErrorKind::Reset, "{e}");
    assert!(e.to_string().contains("GOAWAY"), "{e}");
    let r = tokio::time::timeout(Duration::from_secs(2), a)
        .await
        .expect("the call in flight was answered, not left asleep")
        .unwrap()
        .unwrap();
    assert_eq!(&r.body[..], b"a");
    drop(c);
    within(server).await.unwrap();
}

/// A body's holder waits for a chunk last (so the socket would wake it), then gives up
/// (a timeout) and keeps the body: the call waiting beside it still gets its answer.
#[tokio::test]
async fn a_chunk_given_up_mid_wait_hands_the_socket_on() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (events, ..) = p.request().await;
        p.send(HEADERS, END_HEADERS, events, &head_block(200, &[]))
            .await;
        let (call, ..) = p.request().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        p.answer(call, "call", b"call").await;
        while p.next().await.is_some() {}
    })
    .await;
    let mut s = within(c.open(get("events"))).await.unwrap();
    let mut h = c.share().unwrap();
    let call = tokio::spawn(async move { h.send(get("call")).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let gave_up = tokio::time::timeout(Duration::from_millis(30), s.body.chunk()).await;
    assert!(gave_up.is_err(), "no chunk came");
    let r = tokio::time::timeout(Duration::from_secs(2), call)
        .await
        .expect("the other call was answered, not left asleep")
        .unwrap()
        .unwrap();
    assert_eq!(&r.body[..], b"call");
    drop((s, c));
    within(server).await.unwrap();
}

/// Requests past the 100 streams allowed before the server's SETTINGS wait; SETTINGS that
/// set no MAX_CONCURRENT_STREAMS lift the limit, and every one of them goes at once, not
/// one per stream that ends.
#[tokio::test]
async fn settings_without_a_stream_limit_release_every_queued_request() {
    const CALLS: usize = STREAMS_BEFORE_SETTINGS + 3;
    let (c, server) = pair(|l| async move {
        let mut p = Peer::preface(&l).await;
        let mut ids = Vec::new();
        for _ in 0..STREAMS_BEFORE_SETTINGS {
            ids.push(p.request().await);
        }
        let early = tokio::time::timeout(Duration::from_millis(50), p.next()).await;
        assert!(early.is_err(), "a stream past the limit before SETTINGS");
        p.settings(&[]).await;
        for _ in 0..CALLS - STREAMS_BEFORE_SETTINGS {
            let next = tokio::time::timeout(Duration::from_secs(2), p.request()).await;
            ids.push(next.expect("the queued requests go once the limit is lifted"));
        }
        for (id, test, _) in ids {
            p.answer(id, &test, test.as_bytes()).await;
        }
        while p.next().await.is_some() {}
    })
    .await;
    let tasks: Vec<_> = (0..CALLS)
        .map(|i| {
            let mut h = c.share().unwrap();
            tokio::spawn(async move { within(h.send(get(&i.to_string()))).await.unwrap() })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap().body, i.to_string().as_bytes());
    }
    drop(c);
    within(server).await.unwrap();
}

/// A head of 30 000 one-byte indexed fields (then one added to the dynamic table): that
/// stream fails as a protocol error, with no panic and no 30 000-entry map, and the
/// connection goes on: the block was read through, so the next response's reference to
/// the entry it added still decodes. The client states its limit in its SETTINGS.
#[tokio::test]
async fn a_header_list_past_our_limit_fails_its_stream_only() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (id, ..) = p.request().await;
        let limit = p.settings.get(&0x6).copied();
        assert_eq!(limit, Some(hpack::MAX_LIST_SIZE as u32));
        let mut block = vec![0x88]; // :status 200
        block.resize(1 + 30_000, 0x90); // accept-encoding: gzip, deflate
        block.extend_from_slice(b"\x40\x06x-kept\x03yes"); // indexed
        let mut pieces = block.chunks(MAX_FRAME).peekable();
        let (mut kind, mut flags) = (HEADERS, END_STREAM);
        while let Some(piece) = pieces.next() {
            if pieces.peek().is_none() {
                flags |= END_HEADERS;
            }
            p.send(kind, flags, id, piece).await;
            (kind, flags) = (CONTINUATION, 0);
        }
        let rst = p.next().await.unwrap();
        assert_eq!((rst.kind, rst.id), (RST_STREAM, id));
        assert_eq!(&rst.payload[..], PROTOCOL_ERROR.to_be_bytes());
        let (id, ..) = p.request().await;
        p.send(HEADERS, END_HEADERS | END_STREAM, id, &[0x88, 0xbe])
            .await;
        let _ = p.next().await;
    })
    .await;
    let e = within(c.send(get("huge"))).await.unwrap_err();
    assert_eq!(e.kind(), TransportErrorKind::Protocol, "{e}");
    assert!(
        e.to_string().contains("SETTINGS_MAX_HEADER_LIST_SIZE"),
        "{e}"
    );
    let r = within(c.send(get("next"))).await.unwrap();
    assert_eq!(r.headers.to_map()["x-kept"], "yes");
    assert!(!c.is_closed());
    drop(c);
    within(server).await.unwrap();
}

/// Stream errors of the server's: DATA after a whole response leaves that response whole
/// (and resets its stream with STREAM_CLOSED);
/// a WINDOW_UPDATE past 2^31-1 resets its stream with FLOW_CONTROL_ERROR; PING on a stream
/// is a connection error, PROTOCOL_ERROR.
#[tokio::test]
async fn stream_errors_keep_a_whole_response_and_carry_their_own_codes() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (id, ..) = p.request().await;
        let head = head_block(200, &[]);
        p.send_all(&[
            (HEADERS, END_HEADERS, id, &head),
            (DATA, END_STREAM, id, b"whole"),
            (DATA, 0, id, b"more"),
        ])
        .await;
        // DATA after END_STREAM: STREAM_CLOSED (RFC 9113 §5.1), unless the client had
        // already released the stream when it read the frame, which it then ignores.
        let mut f = p.next().await.unwrap();
        if f.kind == RST_STREAM {
            assert_eq!(
                (f.id, &f.payload[..]),
                (id, &STREAM_CLOSED.to_be_bytes()[..])
            );
            f = p.next().await.unwrap();
        }
        assert_eq!(f.kind, HEADERS);
        let id = f.id;
        p.send(HEADERS, END_HEADERS, id, &head).await;
        p.send(WINDOW_UPDATE, 0, id, &MAX_STREAM_ID.to_be_bytes())
            .await;
        let rst = p.next().await.unwrap();
        assert_eq!((rst.kind, rst.id), (RST_STREAM, id));
        assert_eq!(&rst.payload[..], FLOW_CONTROL_ERROR.to_be_bytes());
        let (id, ..) = p.request().await;
        p.send(PING, 0, id, b"12345678").await;
        let goaway = p.next().await.unwrap();
        assert_eq!(goaway.kind, GOAWAY);
        assert_eq!(&goaway.payload[4..8], PROTOCOL_ERROR.to_be_bytes());
    })
    .await;
    let r = within(c.send(get("whole"))).await.unwrap();
    assert_eq!(&r.body[..], b"whole");
    let e = within(c.send(get("window"))).await.unwrap_err();
    assert_eq!(e.kind(), TransportErrorKind::Protocol, "{e}");
    assert!(e.to_string().contains("past 2^31-1"), "{e}");
    assert!(!c.is_closed());
    let e = within(c.send(get("ping"))).await.unwrap_err();
    assert_eq!(e.kind(), TransportErrorKind::Protocol, "{e}");
    assert!(e.to_string().contains("PING on stream"), "{e}");
    assert!(c.is_closed());
    within(server).await.unwrap();
}

/// A connection error while a request body waits for window: the GOAWAY is the last
/// thing the client sends, though the same read opened the window.
#[tokio::test]
async fn no_data_follows_our_goaway() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let f = p.next().await.unwrap();
        assert_eq!((f.kind, f.flags & END_STREAM), (HEADERS, 0));
        let mut sent = 0;
        while sent < 65_535 {
            let d = p.next().await.unwrap();
            assert_eq!(d.kind, DATA);
            sent += d.payload.len();
        }
        let more = 65_535u32.to_be_bytes();
        p.send_all(&[
            (WINDOW_UPDATE, 0, f.id, &more),
            (WINDOW_UPDATE, 0, 0, &more),
            (PING, 0, f.id, b"12345678"),
        ])
        .await;
        let goaway = p.next().await.unwrap();
        assert_eq!(goaway.kind, GOAWAY, "nothing before the GOAWAY");
        assert!(p.next().await.is_none(), "nothing after the GOAWAY");
    })
    .await;
    let mut req = get("big");
    req.method = Method::POST;
    req.body = vec![b'x'; 100_000].into();
    let e = within(c.send(req)).await.unwrap_err();
    assert_eq!(e.kind(), TransportErrorKind::Protocol, "{e}");
    drop(c);
    within(server).await.unwrap();
}
