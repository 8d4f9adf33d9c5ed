//! Harnesses that feed arbitrary bytes to the HTTP/2 client as if a server sent them: the
//! HPACK decoder, the frame reader, and the whole client on a scripted socket. The fuzz
//! targets in `fuzz/` call them through [`crate::fuzzing`]; the unit tests call them with
//! the inputs the fuzzer found, so each fix keeps its case.
//!
//! Each harness panics on what the client must never do: panic or overflow itself, keep a
//! header list past its limits, return a 1xx head as the response, write a frame after its
//! GOAWAY, or leave its calls asleep with no task watching the socket (the hand-off's rule,
//! [`super::handoff`]).

use std::{
    future::{Future, poll_fn},
    io,
    pin::{Pin, pin},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering::SeqCst},
    },
    task::{Context, Poll, Wake, Waker},
};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{
    frame::{
        self, CONTINUATION, DATA, GOAWAY, HEADERS, MAX_FRAME, PING, PREFACE, RST_STREAM, SETTINGS,
        WINDOW_UPDATE,
    },
    handshake, hpack,
};
use crate::{Connection, Dial, Request, Response, TransportError};

/// HPACK: `data` is the largest table size the decoder allows (its first byte × 32), then
/// header blocks, each after its length in two bytes, decoded in turn through one
/// dynamic table, as a connection's responses are.
pub fn hpack(data: &[u8]) {
    let Some((&limit, mut rest)) = data.split_first() else {
        return;
    };
    let mut decoder = hpack::Decoder::new();
    decoder.set_limit(usize::from(limit) * 32);
    let mut fields = Vec::new();
    while let [a, b, tail @ ..] = rest {
        let n = usize::from(u16::from_be_bytes([*a, *b])).min(tail.len());
        let (block, tail) = tail.split_at(n);
        rest = tail;
        fields.clear();
        match decoder.decode(block, &mut fields) {
            Ok(hpack::Decoded::Whole) => {
                assert!(
                    fields.len() <= hpack::MAX_LIST_FIELDS,
                    "{} fields",
                    fields.len()
                );
                let size: usize = fields.iter().map(|(_, v)| v.len() + 32).sum();
                assert!(size <= hpack::MAX_LIST_SIZE, "a {size}-byte list");
            }
            Ok(hpack::Decoded::TooLarge) => assert!(fields.is_empty(), "fields kept"),
            // A connection error: the connection ends here.
            Err(_) => return,
        }
    }
}

/// The frame reader: `data`'s first byte is how many bytes arrive per read (1 to 256), the
/// rest the bytes. Every frame taken must be exactly the bytes it came from, and nothing
/// may be lost or taken twice.
pub fn frames(data: &[u8]) {
    let Some((&step, data)) = data.split_first() else {
        return;
    };
    let mut buf = BytesMut::new();
    let mut taken = 0;
    for piece in data.chunks(usize::from(step) + 1) {
        buf.extend_from_slice(piece);
        loop {
            let f = match frame::read(&mut buf) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(_) => return, // a connection error: the connection ends here
            };
            let len = f.payload.len();
            assert!(len <= MAX_FRAME, "a {len}-byte frame");
            let mut head = data[taken..taken + 9].to_vec();
            head[5] &= 0x7f; // the reserved bit, which the reader drops
            assert_eq!(frame::frame_bytes(len, f.kind, f.flags, f.id)[..], head[..]);
            assert_eq!(f.payload[..], data[taken + 9..taken + 9 + len]);
            taken += 9 + len;
            if let Ok(p) = frame::unpad(f.flags, f.payload.clone(), "DATA") {
                assert!(p.len() <= len);
            }
            let _ = frame::word("RST_STREAM", &f.payload);
        }
    }
    assert_eq!(taken + buf.len(), data.len(), "bytes lost or taken twice");
}

/// The whole client on a socket whose server side is `data`. Its first bytes are the plan:
///
/// 0. how the server's bytes arrive: 1, 7, 64, 1 000 or 16 384 at a time, or all at once
///    (the first once every task waits); with bit 7, the socket runs dry between pieces (a
///    read waits for the next);
/// 1. how much a write takes at once (1 byte to all of it); bit 7: the socket is not
///    writable again until the network moves; bit 6: h2 over TLS (no prior knowledge);
///    bit 5: no SETTINGS frame is put before the server's bytes;
/// 2. how many tasks share the connection (1 to 4);
/// 3. two bytes per task: its two calls (see [`call`]).
///
/// The rest is what the server sends, after an empty SETTINGS frame unless bit 5 above
/// says otherwise; the server closes the connection once it has sent it all. Returns how
/// many calls got their answer.
pub fn client(data: &[u8]) -> usize {
    let [c0, c1, c2, rest @ ..] = data else {
        return 0;
    };
    let tasks = 1 + usize::from(*c2 % 4);
    if rest.len() < 2 * tasks {
        return 0;
    }
    let (calls, server) = rest.split_at(2 * tasks);
    let mut incoming = Vec::with_capacity(9 + server.len());
    if c1 & 0x20 == 0 {
        frame::frame_head(&mut incoming, 0, SETTINGS, 0, 0);
    }
    incoming.extend_from_slice(server);
    let piece = [1, 7, 64, 1000, 16_384, usize::MAX][usize::from(c0 & 0x7f) % 6];
    let wire = Arc::new(Mutex::new(Wire {
        available: 0,
        incoming,
        read: 0,
        piece,
        dry: c0 & 0x80 != 0,
        read_waker: None,
        written: Vec::new(),
        room: [1, 9, 100, 4096, usize::MAX][usize::from(c1 & 0x1f) % 5],
        writable: true,
        stalls: c1 & 0x80 != 0,
        write_waker: None,
    }));
    // Every step moves something on: a poll, a piece of input, a write. Past this, the
    // client spins.
    let budget = 64 * (data.len() + 8 * 1024);
    let dial = Dial {
        host: "127.0.0.1".into(),
        port: 1,
        authority: "127.0.0.1:1".into(),
        timeout: std::time::Duration::from_secs(1),
        sources: Default::default(),
        next_source: Default::default(),
    };
    let mut opened = None;
    let socket = Socket(wire.clone());
    run(
        vec![Box::pin(async {
            opened = Some(handshake(&dial, socket, c1 & 0x40 != 0).await);
        })],
        &wire,
        budget,
    );
    let Some(Ok(conn)) = opened else {
        panic!("the handshake only writes, and the socket takes every write");
    };
    let answered = std::cell::Cell::new(0);
    let mut handles: Vec<_> = (0..tasks)
        .map(|_| conn.share().expect("h2 shares"))
        .collect();
    let work: Vec<Pin<Box<dyn Future<Output = ()> + '_>>> = handles
        .iter_mut()
        .zip(calls.chunks(2))
        .map(|(h, codes)| {
            let answered = &answered;
            Box::pin(async move {
                for &code in codes {
                    let _ = h.is_closed();
                    if call(h, code).await {
                        answered.set(answered.get() + 1);
                    }
                }
            }) as Pin<Box<dyn Future<Output = ()>>>
        })
        .collect();
    run(work, &wire, budget);
    drop((handles, conn));
    check_written(&wire.lock().unwrap().written);
    answered.get()
}

/// One call on the connection. `code`'s low 3 bits: 0–1 a whole response, 2 a streamed
/// body read to its end, 3 its first chunk only, 4 its head only, 5 a whole response to a
/// request with a 17 000-byte header (CONTINUATION on the way out), 6 a request whose path
/// the client refuses, 7 a PUT; bits 3–4: the request body (none, 100 B, 20 000 B, or
/// 70 000 B, past the server's first window); bits 5–7: if set, the call is given up (as
/// a timeout would) after that many polls that found no answer. True if it got its answer
/// (a whole response, or a streamed one read as far as the call reads).
async fn call(c: &mut Box<dyn Connection>, code: u8) -> bool {
    let mut req = Request {
        method: Method::GET,
        path: "/".into(),
        headers: HeaderMap::new(),
        body: Bytes::new(),
    };
    let body = [0, 100, 20_000, 70_000][usize::from(code >> 3 & 3)];
    if body > 0 {
        req.method = Method::POST;
        req.body = vec![b'x'; body].into();
    }
    match code & 7 {
        5 => {
            let big = HeaderValue::from_bytes(&[b'b'; 17_000]).expect("plain bytes");
            req.headers.insert("x-big", big);
        }
        6 => req.path = "/a b".into(),
        7 => req.method = Method::PUT,
        _ => {}
    }
    let polls = u32::from(code >> 5);
    let exchange = async {
        match code & 7 {
            2..=4 => {
                let Ok(mut s) = c.open(req).await else {
                    return false;
                };
                assert!(s.status >= 200, "a {} head as the response", s.status);
                match code & 7 {
                    2 => loop {
                        match s.body.chunk().await {
                            Some(Ok(_)) => {}
                            Some(Err(_)) => return false,
                            None => return true,
                        }
                    },
                    3 => !matches!(s.body.chunk().await, Some(Err(_))),
                    _ => true,
                }
            }
            _ => whole(c.send(req).await),
        }
    };
    if polls == 0 {
        exchange.await
    } else {
        give_up_after(polls, exchange).await.unwrap_or(false)
    }
}

fn whole(r: Result<Response, TransportError>) -> bool {
    let Ok(r) = r else {
        return false;
    };
    assert!(r.status >= 200, "a {} head as the response", r.status);
    true
}

/// Polls `f` until it is ready or has been pending `polls` times; then drops it.
async fn give_up_after<T>(polls: u32, f: impl Future<Output = T>) -> Option<T> {
    let mut f = pin!(f);
    let mut left = polls;
    poll_fn(move |cx| match f.as_mut().poll(cx) {
        Poll::Ready(r) => Poll::Ready(Some(r)),
        Poll::Pending if left <= 1 => Poll::Ready(None),
        Poll::Pending => {
            left -= 1;
            Poll::Pending
        }
    })
    .await
}

/// What the client wrote must be HTTP/2 from a client: the preface, then frames of the
/// types it sends on the streams they belong to, and nothing after its GOAWAY.
fn check_written(out: &[u8]) {
    let n = PREFACE.len().min(out.len());
    assert_eq!(out[..n], PREFACE[..n], "the preface");
    let mut rest = &out[n..];
    let mut goaway = false;
    while rest.len() >= 9 {
        let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
        let (kind, id) = (
            rest[3],
            u32::from_be_bytes([rest[5], rest[6], rest[7], rest[8]]),
        );
        assert!(!goaway, "a frame of type {kind} after our GOAWAY");
        match kind {
            SETTINGS | PING | GOAWAY => assert_eq!(id, 0, "frame type {kind}"),
            HEADERS | CONTINUATION | DATA | RST_STREAM => {
                assert!(id % 2 == 1, "frame type {kind} on stream {id}")
            }
            WINDOW_UPDATE => assert!(id == 0 || id % 2 == 1, "WINDOW_UPDATE on stream {id}"),
            _ => panic!("a frame of type {kind} from the client"),
        }
        goaway |= kind == GOAWAY;
        rest = &rest[(9 + len).min(rest.len())..];
    }
}

/// The network between the client and its scripted server.
struct Wire {
    /// The server's bytes: `read` of them taken by the client, `available` arrived. The
    /// first piece arrives when the network first moves, once the client has sent what it
    /// could: a server answers requests, it does not guess them.
    incoming: Vec<u8>,
    read: usize,
    available: usize,
    /// How many more arrive each time the network moves.
    piece: usize,
    /// The socket runs dry between pieces (else, from the first on, each arrives as soon as
    /// it is read for).
    dry: bool,
    read_waker: Option<Waker>,
    written: Vec<u8>,
    /// The most one write takes.
    room: usize,
    writable: bool,
    /// A write leaves the socket unwritable until the network moves.
    stalls: bool,
    write_waker: Option<Waker>,
}

impl Wire {
    /// The network moves: the next piece arrives, the socket drains. Returns the wakers the
    /// socket holds, as a reactor would wake them.
    fn moves(&mut self) -> Vec<Waker> {
        self.available = self
            .incoming
            .len()
            .min(self.available.saturating_add(self.piece));
        self.writable = true;
        self.read_waker
            .take()
            .into_iter()
            .chain(self.write_waker.take())
            .collect()
    }
}

/// The client's end of the socket. Like a tokio socket, it keeps one waker a direction:
/// the last task that found it not ready.
struct Socket(Arc<Mutex<Wire>>);

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut w = self.0.lock().unwrap();
        if w.read == w.available && w.read < w.incoming.len() {
            if w.dry || w.available == 0 {
                w.read_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            w.available = w.incoming.len().min(w.available.saturating_add(w.piece));
        }
        // All sent (read == available == its length): the server closed, an EOF.
        let n = buf.remaining().min(w.available - w.read);
        buf.put_slice(&w.incoming[w.read..w.read + n]);
        w.read += n;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut w = self.0.lock().unwrap();
        if !w.writable {
            w.write_waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let n = buf.len().min(w.room);
        w.written.extend_from_slice(&buf[..n]);
        w.writable = !w.stalls;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A task's waker: marks it to be polled.
struct Woken(AtomicBool);

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.0.store(true, SeqCst);
    }
}

/// Runs `tasks` to their ends on this thread. Whenever none is woken, the network moves
/// (the socket wakes whichever task it holds); if none is woken and the socket holds no
/// task either, the calls would sleep forever: that is the bug this looks for.
fn run(tasks: Vec<Pin<Box<dyn Future<Output = ()> + '_>>>, wire: &Mutex<Wire>, budget: usize) {
    let mut tasks: Vec<_> = tasks
        .into_iter()
        .map(|t| (Arc::new(Woken(AtomicBool::new(true))), Some(t)))
        .collect();
    for _ in 0..budget {
        let mut polled = false;
        for (woken, task) in &mut tasks {
            let Some(t) = task else { continue };
            if woken.0.swap(false, SeqCst) {
                polled = true;
                let waker = Waker::from(woken.clone());
                if t.as_mut().poll(&mut Context::from_waker(&waker)).is_ready() {
                    *task = None;
                }
            }
        }
        if tasks.iter().all(|(_, t)| t.is_none()) {
            return;
        }
        if !polled {
            let wakers = wire.lock().unwrap().moves();
            assert!(
                !wakers.is_empty(),
                "every call is asleep and no task is registered with the socket"
            );
            wakers.into_iter().for_each(Waker::wake);
        }
    }
    panic!("the calls did not end within {budget} steps");
}
