//! HTTP/2 without hyper: a client written for a load driver's CPU budget. h2c (prior
//! knowledge over TCP) and h2 over TLS both run on it.
//!
//! There is no connection task. The connection's state sits behind one mutex, shared by
//! every handle ([`Connection::share`]) and every open [`RecvBody`]; whichever task polls
//! drives the socket: it writes the frames queued, reads what arrived and files each
//! frame under its stream, waking the task that waits on it. The one task that last met
//! an empty socket holds its read registration; a task leaving while others wait wakes
//! one of them to take over, so nobody sleeps on a socket nobody watches. Every way out
//! of a poll goes through [`Inner::leave`], which keeps that rule.
//!
//! Covers what a demanding client needs: SETTINGS both ways, MAX_CONCURRENT_STREAMS
//! (requests wait for a free stream), flow control both ways (bodies of any size out,
//! windows given back as data is read), CONTINUATION, padding and priority flags, PING,
//! GOAWAY, RST_STREAM, 1xx heads skipped, trailers read past, and a request dropped
//! mid-flight (a per-op timeout) resets its stream and leaves the connection to the
//! others. HPACK is [`super::hpack`]'s.

use std::{
    collections::VecDeque,
    fmt,
    future::poll_fn,
    io,
    pin::Pin,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
    task::{Context, Poll, Waker},
};

use bytes::{Buf as _, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, uri::Authority};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};

use super::{
    Body, BoxFuture, Connection, Dial, Request, Response, Streaming, TransportError,
    hpack::{self, Name},
};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types (RFC 9113 §6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const PRIORITY: u8 = 0x2;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

// Flags.
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY_FLAG: u8 = 0x20;

// Error codes (RFC 9113 §7).
const NO_ERROR: u32 = 0x0;
const PROTOCOL_ERROR: u32 = 0x1;
const FLOW_CONTROL_ERROR: u32 = 0x3;
const STREAM_CLOSED: u32 = 0x5;
const FRAME_SIZE_ERROR: u32 = 0x6;
const CANCEL: u32 = 0x8;
const COMPRESSION_ERROR: u32 = 0x9;

/// Our SETTINGS_HEADER_TABLE_SIZE. 0: the server then indexes nothing for us. Servers like
/// nginx add every response's `date`, `server`, `content-type` and `content-length` to the
/// client's table, which then holds ~4 KiB of entries per connection, churned on every
/// response: at 10 000 players that was 60 MiB of RSS, and 10 % of the CPU per request. The
/// price is a few header bytes per response from servers that would re-use their entries.
const HEADER_TABLE_SIZE: usize = 0;
/// Our SETTINGS_INITIAL_WINDOW_SIZE: how far a server may send into one stream before we
/// read it. Large, so a long body or event stream never waits on a round trip for more
/// window; bounded, so a stream nobody reads holds at most this much.
const STREAM_WINDOW: u32 = 4 << 20;
/// The connection's receive window, raised from the protocol's 65 535 in the preface and
/// given back as data arrives, so one slow stream never stalls the others.
const CONNECTION_WINDOW: u32 = 16 << 20;
/// The largest frame we accept: the protocol's default, which we do not raise.
const MAX_FRAME: usize = 16_384;
/// The largest response header block (HEADERS and its CONTINUATIONs) we assemble. Larger
/// than any list within [`hpack::MAX_LIST_SIZE`] codes to (Huffman codes take up to 30
/// bits a byte); a larger block fails the connection, as its HPACK state cannot be kept.
const MAX_HEADER_BLOCK: usize = 1 << 20;
/// Decoded fields grown past this by a large header list are given back.
const KEEP_FIELDS: usize = 64;
/// Request body bytes queued ahead of the socket, at most: a large body is framed as the
/// socket takes it, not copied whole.
const WRITE_AHEAD: usize = 64 * 1024;
/// A write buffer grown past this by a large body is given back once empty: 10 000 idle
/// connections must not each keep one.
const KEEP_WRITE_BUFFER: usize = 16 * 1024;
/// Streams opened at once before the server's SETTINGS say how many it takes: h2's
/// default, and the least RFC 9113 §6.5.2 asks a server to allow.
const STREAMS_BEFORE_SETTINGS: usize = 100;
const MAX_STREAM_ID: u32 = (1 << 31) - 1;
const MAX_WINDOW: i64 = (1 << 31) - 1;

/// The socket: TCP for h2c, TLS for h2.
pub(super) trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// Opens HTTP/2 on `io`: writes the preface, our SETTINGS and the connection window. The
/// server's SETTINGS are read with the first response, as every client does, so the first
/// request leaves without waiting a round trip.
pub(super) async fn handshake(
    dial: &Dial,
    mut io: impl Io + 'static,
    https: bool,
) -> Result<Box<dyn Connection>, TransportError> {
    let authority: Authority = dial
        .authority
        .parse()
        .map_err(|e: http::uri::InvalidUri| dial.failed(e.to_string()))?;
    let mut preface = Vec::with_capacity(80);
    preface.extend_from_slice(PREFACE);
    frame_head(&mut preface, 24, SETTINGS, 0, 0);
    for (id, value) in [
        (0x1, HEADER_TABLE_SIZE as u32),    // SETTINGS_HEADER_TABLE_SIZE
        (0x2, 0),                           // SETTINGS_ENABLE_PUSH
        (0x4, STREAM_WINDOW),               // SETTINGS_INITIAL_WINDOW_SIZE
        (0x6, hpack::MAX_LIST_SIZE as u32), // SETTINGS_MAX_HEADER_LIST_SIZE
    ] {
        preface.extend_from_slice(&u16::to_be_bytes(id));
        preface.extend_from_slice(&value.to_be_bytes());
    }
    frame_head(&mut preface, 4, WINDOW_UPDATE, 0, 0);
    preface.extend_from_slice(&(CONNECTION_WINDOW - 65_535).to_be_bytes());
    io.write_all(&preface)
        .await
        .map_err(|e| dial.failed(e.to_string()))?;
    let inner = Inner {
        io: Box::new(io),
        rbuf: BytesMut::with_capacity(8 * 1024),
        wbuf: Vec::with_capacity(512),
        wpos: 0,
        streams: Vec::new(),
        next_id: 1,
        open: 0,
        queued: VecDeque::new(),
        next_ticket: 0,
        max_streams: STREAMS_BEFORE_SETTINGS,
        max_frame: MAX_FRAME,
        initial_window: 65_535,
        send_window: 65_535,
        recv_window: i64::from(CONNECTION_WINDOW),
        recv_unacked: 0,
        decoder: hpack::Decoder::new(),
        fields: Vec::with_capacity(16),
        block: Vec::new(),
        continuing: None,
        heard: false,
        prior_knowledge: !https,
        settled: false,
        goaway: None,
        dead: None,
        reader: NOBODY,
    };
    Ok(Box::new(H2Connection(Arc::new(Shared {
        inner: Mutex::new(inner),
        closing: AtomicBool::new(false),
        https,
        authority: authority.as_str().to_owned(),
    }))))
}

/// A handle on one HTTP/2 connection; [`Connection::share`] makes more.
pub(super) struct H2Connection(Arc<Shared>);

struct Shared {
    inner: Mutex<Inner>,
    /// Set once no new stream may start (the connection failed, the server sent GOAWAY,
    /// the stream ids ran out), for [`Connection::is_closed`] without the lock.
    closing: AtomicBool,
    https: bool,
    authority: String,
}

/// [`Inner::reader`]: no task is known to hold the read registration.
const NOBODY: u32 = 0;
/// [`Inner::reader`]: a task waiting for a free stream holds it (which one is not known).
const QUEUED: u32 = u32::MAX;

struct Inner {
    io: Box<dyn Io>,
    /// Bytes read and not yet taken as frames.
    rbuf: BytesMut,
    /// Frames to write, from `wpos` on.
    wbuf: Vec<u8>,
    wpos: usize,
    /// Streams opened and not yet released by their owner, in opening order.
    streams: Vec<Stream>,
    next_id: u32,
    /// Streams that count against the server's SETTINGS_MAX_CONCURRENT_STREAMS.
    open: usize,
    /// Tasks waiting for a free stream, by ticket.
    queued: VecDeque<(u64, Waker)>,
    next_ticket: u64,
    // The server's settings.
    max_streams: usize,
    max_frame: usize,
    initial_window: i64,
    /// The server's connection window: what we may still send.
    send_window: i64,
    /// Our connection window: what the server may still send, and what we have read since
    /// we last gave it back.
    recv_window: i64,
    recv_unacked: u32,
    decoder: hpack::Decoder,
    fields: Vec<(Name, Bytes)>,
    /// A header block whose CONTINUATION frames are still coming: its stream and whether
    /// its HEADERS ended the stream.
    block: Vec<u8>,
    continuing: Option<(u32, bool)>,
    /// The server has sent a byte: a connection that breaks before is not HTTP/2's.
    heard: bool,
    /// h2c, HTTP/2 by prior knowledge: the server may not speak it. Over TLS, ALPN has
    /// already chosen h2.
    prior_knowledge: bool,
    /// The server's first SETTINGS has arrived.
    settled: bool,
    /// The server's GOAWAY: its last stream id and error code.
    goaway: Option<(u32, u32)>,
    /// The connection failed: every stream in flight failed with this.
    dead: Option<TransportError>,
    /// The stream whose task last met an empty socket and so is the one the socket wakes
    /// ([`NOBODY`], [`QUEUED`] otherwise).
    reader: u32,
}

struct Stream {
    id: u32,
    /// The response head, until its owner takes it.
    head: Option<(u16, HeaderMap)>,
    got_head: bool,
    /// DATA received and not yet taken by the owner.
    data: VecDeque<Bytes>,
    /// END_STREAM received.
    ended: bool,
    /// The stream failed: reset by either side, refused by a GOAWAY, or the connection
    /// broke.
    error: Option<TransportError>,
    /// No RST_STREAM is owed for it (either side reset it, a GOAWAY refused it, or the
    /// connection is gone).
    reset: bool,
    waker: Option<Waker>,
    /// The request body still to send, and the server's window for it.
    body: Bytes,
    sent_end: bool,
    send_window: i64,
    /// Our window for the response body, and what the owner has read since we last gave
    /// it back.
    recv_window: i64,
    unacked: u32,
    /// The owner collects the whole body: its window is given back on arrival.
    collect: bool,
    /// Counted in [`Inner::open`].
    counted: bool,
}

impl Connection for H2Connection {
    fn send(&mut self, req: Request) -> BoxFuture<'_, Result<Response, TransportError>> {
        Box::pin(async move {
            let mut op = Op::new(&self.0);
            op.start(req, true).await?;
            let r = poll_fn(|cx| op.shared.poll_whole(cx, op.id)).await;
            op.id = 0; // released by poll_whole
            r
        })
    }

    fn open(&mut self, req: Request) -> BoxFuture<'_, Result<Streaming, TransportError>> {
        Box::pin(async move {
            let mut op = Op::new(&self.0);
            op.start(req, false).await?;
            let head = poll_fn(|cx| op.shared.poll_head(cx, op.id)).await;
            let id = std::mem::take(&mut op.id);
            let (status, headers) = head?;
            Ok(Streaming {
                status,
                headers,
                body: Body::H2(RecvBody {
                    shared: self.0.clone(),
                    id,
                }),
            })
        })
    }

    fn is_closed(&self) -> bool {
        if self.0.closing.load(Relaxed) {
            return true;
        }
        // An idle connection: take in whatever arrived (a GOAWAY, the server's close) so the
        // owner reconnects instead of sending into it. Costs no system call while the
        // reactor has seen nothing arrive.
        let Ok(mut inner) = self.0.inner.try_lock() else {
            return false;
        };
        let mut wakes = Vec::new();
        inner.peek(&mut wakes);
        let closing = inner.closing();
        drop(inner);
        wakes.into_iter().for_each(Waker::wake);
        if closing {
            self.0.closing.store(true, Relaxed);
        }
        closing
    }

    fn share(&self) -> Option<Box<dyn Connection>> {
        Some(Box::new(H2Connection(self.0.clone())))
    }
}

/// One request's claim on the connection: a place in the queue for a stream, then the
/// stream. Dropped before it is done (a timeout, an abort), it gives both back and resets
/// the stream, leaving the connection to the others.
struct Op<'a> {
    shared: &'a Arc<Shared>,
    ticket: Option<u64>,
    /// The stream, 0 before it opens and once released.
    id: u32,
}

impl<'a> Op<'a> {
    fn new(shared: &'a Arc<Shared>) -> Self {
        Self {
            shared,
            ticket: None,
            id: 0,
        }
    }

    async fn start(&mut self, req: Request, collect: bool) -> Result<(), TransportError> {
        let mut req = Some(req);
        let id = poll_fn(|cx| {
            self.shared
                .poll_start(cx, &mut req, &mut self.ticket, collect)
        })
        .await?;
        self.id = id;
        Ok(())
    }
}

impl Drop for Op<'_> {
    fn drop(&mut self) {
        if self.ticket.is_some() || self.id != 0 {
            self.shared.abandon(self.ticket, self.id);
        }
    }
}

/// A response body arriving on an HTTP/2 stream, for [`Connection::open`].
///
/// Its holder need not keep polling it: between chunks, or with a [`RecvBody::chunk`]
/// given up half-way (a timeout around it), the other calls on the connection read for
/// themselves. An unread body holds at most its stream's window of data, and none of the
/// connection's.
pub struct RecvBody {
    shared: Arc<Shared>,
    /// 0 once the body has ended (or failed) and the stream is released.
    id: u32,
}

impl fmt::Debug for RecvBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvBody")
            .field("stream", &self.id)
            .finish()
    }
}

impl RecvBody {
    /// The next piece of the body as it arrived; `None` at its end.
    pub async fn chunk(&mut self) -> Option<Result<Bytes, TransportError>> {
        if self.id == 0 {
            return None;
        }
        let waiting = Waiting {
            shared: &self.shared,
            id: self.id,
        };
        let r = poll_fn(|cx| self.shared.poll_data(cx, self.id)).await;
        // poll_data left the connection itself as it returned.
        std::mem::forget(waiting);
        if !matches!(r, Some(Ok(_))) {
            self.id = 0; // released by poll_data
        }
        r
    }
}

/// A [`RecvBody::chunk`] under way: dropped before it returns, it leaves the connection as
/// a return would, so the socket is not left registered to a task that polls elsewhere.
struct Waiting<'a> {
    shared: &'a Shared,
    id: u32,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.shared.with(|inner, wakes| inner.leave(self.id, wakes));
    }
}

impl Drop for RecvBody {
    fn drop(&mut self) {
        if self.id != 0 {
            self.shared.abandon(None, self.id);
        }
    }
}

impl Shared {
    /// Runs `f` under the lock, then wakes the tasks it found waiting (after unlocking, so
    /// they do not wake into a held lock).
    fn with<R>(&self, f: impl FnOnce(&mut Inner, &mut Vec<Waker>) -> R) -> R {
        let mut wakes = Vec::new();
        let mut inner = self.lock();
        let r = f(&mut inner, &mut wakes);
        if inner.closing() && !self.closing.load(Relaxed) {
            self.closing.store(true, Relaxed);
        }
        drop(inner);
        wakes.into_iter().for_each(Waker::wake);
        r
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic under the lock leaves plain data behind; the connection's own checks
        // still hold.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a stream for `req` once the server allows one more; returns its id.
    fn poll_start(
        &self,
        cx: &mut Context<'_>,
        req: &mut Option<Request>,
        ticket: &mut Option<u64>,
        collect: bool,
    ) -> Poll<Result<u32, TransportError>> {
        self.with(|inner, wakes| {
            let mut driven = false;
            loop {
                if let Some(e) = inner.refusal() {
                    inner.unqueue(ticket);
                    inner.leave(QUEUED, wakes);
                    return Poll::Ready(Err(e));
                }
                if inner.open < inner.max_streams {
                    break;
                }
                if driven {
                    inner.enqueue(ticket, cx.waker());
                    return Poll::Pending;
                }
                // Every task that waits drives the connection: the stream it waits for
                // ends when someone reads the frame that ends it.
                inner.drive(cx, QUEUED, wakes);
                driven = true;
            }
            inner.unqueue(ticket);
            let req = req
                .take()
                .expect("poll_start is not polled after it is ready");
            let r = inner.start(req, self.https, &self.authority, collect);
            if r.is_err() {
                inner.leave(QUEUED, wakes);
            }
            // A stream opened: the same poll goes on to wait on it, and drives there.
            Poll::Ready(r)
        })
    }

    /// Stream `id`'s answer, as `ready` finds it: asked once; if there is none yet, the
    /// connection is driven (what arrived is read and filed under its streams) and `ready`
    /// asked again; if there is still none, the task waits with the stream's waker set.
    fn poll_stream<T>(
        &self,
        cx: &mut Context<'_>,
        id: u32,
        mut ready: impl FnMut(&mut Inner, &mut Vec<Waker>, &mut Context<'_>) -> Option<T>,
    ) -> Poll<T> {
        self.with(|inner, wakes| {
            if let Some(r) = ready(inner, wakes, cx) {
                return Poll::Ready(r);
            }
            inner.drive(cx, id, wakes);
            if let Some(r) = ready(inner, wakes, cx) {
                return Poll::Ready(r);
            }
            set_waker(&mut inner.stream(id).waker, cx.waker());
            Poll::Pending
        })
    }

    /// The whole response on stream `id`; releases the stream when ready.
    fn poll_whole(&self, cx: &mut Context<'_>, id: u32) -> Poll<Result<Response, TransportError>> {
        self.poll_stream(cx, id, |inner, wakes, _| {
            let s = inner.stream(id);
            if let Some(e) = s.error.take() {
                inner.finish(id, wakes);
                return Some(Err(e));
            }
            if s.ended
                && let Some((status, headers)) = s.head.take()
            {
                let body = concat(&mut s.data);
                inner.finish(id, wakes);
                return Some(Ok(Response {
                    status,
                    headers: headers.into(),
                    body,
                }));
            }
            None
        })
    }

    /// The response head on stream `id`; the stream stays open for its body, or is released
    /// if it failed.
    fn poll_head(
        &self,
        cx: &mut Context<'_>,
        id: u32,
    ) -> Poll<Result<(u16, HeaderMap), TransportError>> {
        self.poll_stream(cx, id, |inner, wakes, _| {
            let s = inner.stream(id);
            if let Some(e) = s.error.take() {
                inner.finish(id, wakes);
                return Some(Err(e));
            }
            let head = s.head.take()?;
            inner.leave(id, wakes);
            Some(Ok(head))
        })
    }

    /// The next body chunk on stream `id`, `None` at its end; releases the stream unless a
    /// chunk is returned.
    fn poll_data(
        &self,
        cx: &mut Context<'_>,
        id: u32,
    ) -> Poll<Option<Result<Bytes, TransportError>>> {
        self.poll_stream(cx, id, |inner, wakes, cx| {
            let s = inner.stream(id);
            if let Some(chunk) = s.data.pop_front() {
                // Read: the server may send that much more.
                s.unacked += chunk.len() as u32;
                if s.unacked >= STREAM_WINDOW / 2 && !s.ended {
                    let n = std::mem::take(&mut s.unacked);
                    s.recv_window += i64::from(n);
                    inner.window_update(id, n);
                    inner.flush_or_fail(cx, wakes);
                }
                inner.leave(id, wakes);
                return Some(Some(Ok(chunk)));
            }
            if let Some(e) = s.error.take() {
                inner.finish(id, wakes);
                return Some(Some(Err(e)));
            }
            if s.ended {
                inner.finish(id, wakes);
                return Some(None);
            }
            None
        })
    }

    /// Gives back a dropped op's place in the queue and its stream (resetting it), and
    /// wakes every waiting task, so none relies on the leaver for reading, writing or a
    /// free stream.
    fn abandon(&self, ticket: Option<u64>, id: u32) {
        self.with(|inner, wakes| {
            inner.unqueue(&mut ticket.clone());
            if id != 0 {
                inner.release(id, wakes);
            }
            let before = wakes.len();
            inner.leave(if id != 0 { id } else { QUEUED }, wakes);
            inner.wake_waiters(true, wakes);
            if wakes.len() == before && inner.wpos < inner.wbuf.len() {
                // Nobody else waits, so nobody's write registration is lost by trying the
                // RST_STREAM now rather than with the next request.
                let mut cx = Context::from_waker(Waker::noop());
                inner.flush_or_fail(&mut cx, wakes);
            }
        });
    }
}

impl Inner {
    /// True once no new stream may start.
    fn closing(&self) -> bool {
        self.dead.is_some() || self.goaway.is_some() || self.next_id > MAX_STREAM_ID
    }

    /// Why a new stream cannot start, if it cannot.
    fn refusal(&self) -> Option<TransportError> {
        if let Some(e) = &self.dead {
            return Some(e.clone());
        }
        if let Some((_, code)) = self.goaway {
            return Some(TransportError::Reset(format!(
                "the server is closing the connection (GOAWAY, {}): no new requests on it",
                reason(code)
            )));
        }
        if self.next_id > MAX_STREAM_ID {
            return Some(TransportError::Reset(
                "the connection has used up its stream ids".into(),
            ));
        }
        None
    }

    fn enqueue(&mut self, ticket: &mut Option<u64>, waker: &Waker) {
        let t = *ticket.get_or_insert_with(|| {
            self.next_ticket += 1;
            self.next_ticket
        });
        match self.queued.iter_mut().find(|(q, _)| *q == t) {
            Some((_, w)) => set_waker_in(w, waker),
            None => self.queued.push_back((t, waker.clone())),
        }
    }

    fn unqueue(&mut self, ticket: &mut Option<u64>) {
        if let Some(t) = ticket.take() {
            self.queued.retain(|(q, _)| *q != t);
        }
    }

    /// The stream `id`, which its owner holds, so it is there.
    fn stream(&mut self, id: u32) -> &mut Stream {
        self.streams
            .iter_mut()
            .find(|s| s.id == id)
            .expect("a stream stays until its owner releases it")
    }

    fn index(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    /// Queues the request's HEADERS (and CONTINUATIONs) and puts its body up for sending;
    /// returns the new stream's id.
    fn start(
        &mut self,
        req: Request,
        https: bool,
        authority: &str,
        collect: bool,
    ) -> Result<u32, TransportError> {
        let path = if req.path.is_empty() { "/" } else { &req.path };
        check_path(path).map_err(|e| TransportError::Protocol(format!("path `{path}`: {e}")))?;
        let id = self.next_id;
        self.next_id += 2;
        let length = (!req.body.is_empty()
            && !req.headers.contains_key(http::header::CONTENT_LENGTH))
        .then_some(req.body.len());
        let end = if req.body.is_empty() { END_STREAM } else { 0 };
        let start = self.wbuf.len();
        self.wbuf.extend_from_slice(&[0; 9]);
        hpack::encode_request(
            &mut self.wbuf,
            &req.method,
            https,
            authority,
            path,
            &req.headers,
            length,
        );
        let len = self.wbuf.len() - start - 9;
        if len <= self.max_frame {
            let head = &mut self.wbuf[start..start + 9];
            head.copy_from_slice(&frame_bytes(len, HEADERS, END_HEADERS | end, id));
        } else {
            let block = self.wbuf.split_off(start + 9);
            self.wbuf.truncate(start);
            let mut chunks = block.chunks(self.max_frame).peekable();
            let mut kind = HEADERS;
            let mut flags = end;
            while let Some(c) = chunks.next() {
                if chunks.peek().is_none() {
                    flags |= END_HEADERS;
                }
                frame_head(&mut self.wbuf, c.len(), kind, flags, id);
                self.wbuf.extend_from_slice(c);
                kind = CONTINUATION;
                flags = 0;
            }
        }
        self.streams.push(Stream {
            id,
            head: None,
            got_head: false,
            data: VecDeque::new(),
            ended: false,
            error: None,
            reset: false,
            waker: None,
            sent_end: req.body.is_empty(),
            body: req.body,
            send_window: self.initial_window,
            recv_window: i64::from(STREAM_WINDOW),
            unacked: 0,
            collect,
            counted: true,
        });
        self.open += 1;
        Ok(id)
    }

    /// Releases a finished stream and leaves the connection.
    fn finish(&mut self, id: u32, wakes: &mut Vec<Waker>) {
        self.release(id, wakes);
        self.leave(id, wakes);
    }

    /// The rule for every way out of a poll that may have driven the connection: its
    /// return with a result (an error too), a dropped call, an idle peek. The task waiting
    /// on `me` (a stream, or [`QUEUED`] for a stream) waits no more, so its waker goes: a
    /// waker left behind would be the one woken to take over, and its task may never poll
    /// here again. It may also be the one the socket would wake, and the others sleep
    /// trusting it to read for them; if it is, or might be ([`NOBODY`], [`QUEUED`]: not
    /// known), it wakes one waiting task, which drives and so takes the read registration
    /// over. Frames it queued and could not write are handed on the same way. A way out
    /// that skips this can leave every other call on the connection asleep until its
    /// timeout.
    fn leave(&mut self, me: u32, wakes: &mut Vec<Waker>) {
        if let Some(i) = self.index(me) {
            self.streams[i].waker = None;
        }
        let reading = matches!(self.reader, NOBODY | QUEUED) || self.reader == me;
        if reading {
            self.reader = NOBODY;
        }
        if reading || self.wpos < self.wbuf.len() {
            self.wake_waiters(false, wakes);
        }
    }

    /// Forgets stream `id`, resetting it if it is still open on the server's side.
    fn release(&mut self, id: u32, wakes: &mut Vec<Waker>) {
        let Some(i) = self.index(id) else {
            return;
        };
        let s = self.streams.swap_remove(i);
        if s.counted {
            self.open -= 1;
            if let Some((_, w)) = self.queued.pop_front() {
                wakes.push(w);
            }
        }
        if !(s.reset || s.ended && s.sent_end) && self.dead.is_none() {
            // The response is whole but the body is not sent: the server needs no more
            // (RFC 9113 §8.1); otherwise the owner gave up.
            self.rst_stream(id, if s.ended { NO_ERROR } else { CANCEL });
        }
        if self.streams.is_empty() && self.streams.capacity() > 64 {
            self.streams = Vec::new();
        }
    }

    /// Wakes one waiting task (a stream's, else one waiting for a stream), or all. A stream
    /// has a waker only while its task waits in a poll here ([`Inner::leave`] takes it), so
    /// the task woken will poll and drive.
    fn wake_waiters(&mut self, all: bool, wakes: &mut Vec<Waker>) {
        for s in &mut self.streams {
            if let Some(w) = s.waker.take() {
                wakes.push(w);
                if !all {
                    return;
                }
            }
        }
        if all {
            wakes.extend(self.queued.iter().map(|(_, w)| w.clone()));
        } else if let Some((_, w)) = self.queued.front() {
            wakes.push(w.clone());
        }
    }

    /// Moves the connection on as far as it goes without waiting: writes what is queued,
    /// reads and files what arrived until the socket is empty. `me` is the stream the
    /// polling task waits on; it becomes the reader the socket wakes.
    fn drive(&mut self, cx: &mut Context<'_>, me: u32, wakes: &mut Vec<Waker>) {
        if self.dead.is_some() {
            return;
        }
        if !self.flush_or_fail(cx, wakes) {
            return;
        }
        loop {
            match self.fill(cx) {
                Poll::Pending => {
                    self.reader = me;
                    break;
                }
                Poll::Ready(Ok(0)) => {
                    let e = self.broken("the server closed the connection".into());
                    return self.fail(e, wakes);
                }
                Poll::Ready(Ok(_)) => {
                    self.heard = true;
                    if let Err(e) = self.frames(me, wakes) {
                        return self.fail_connection(cx, e, wakes);
                    }
                }
                Poll::Ready(Err(e)) => {
                    let e = self.broken(e.to_string());
                    return self.fail(e, wakes);
                }
            }
        }
        self.flush_or_fail(cx, wakes);
    }

    /// [`Inner::drive`] for a connection nobody waits on, so no task's read registration is
    /// at stake: reads what arrived while it sat idle.
    fn peek(&mut self, wakes: &mut Vec<Waker>) {
        let waiting = !self.queued.is_empty() || self.streams.iter().any(|s| s.waker.is_some());
        if !waiting {
            let mut cx = Context::from_waker(Waker::noop());
            self.drive(&mut cx, NOBODY, wakes);
            self.leave(NOBODY, wakes);
        }
    }

    /// Writes what is queued, framing request bodies as windows allow; false if the
    /// connection failed.
    fn flush_or_fail(&mut self, cx: &mut Context<'_>, wakes: &mut Vec<Waker>) -> bool {
        match self.flush(cx) {
            Ok(()) => true,
            Err(e) => {
                let e = self.broken(e.to_string());
                self.fail(e, wakes);
                false
            }
        }
    }

    fn flush(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        loop {
            self.frame_bodies();
            if self.wpos == self.wbuf.len() {
                break;
            }
            match Pin::new(&mut self.io).poll_write(cx, &self.wbuf[self.wpos..]) {
                Poll::Ready(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Poll::Ready(Ok(n)) => {
                    self.wpos += n;
                    if self.wpos == self.wbuf.len() {
                        self.wpos = 0;
                        self.wbuf.clear();
                        if self.wbuf.capacity() > KEEP_WRITE_BUFFER {
                            self.wbuf = Vec::with_capacity(512);
                        }
                    }
                }
                Poll::Ready(Err(e)) => return Err(e),
                Poll::Pending => return Ok(()),
            }
        }
        // TLS keeps records back until flushed; TCP's flush does nothing.
        match Pin::new(&mut self.io).poll_flush(cx) {
            Poll::Ready(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }

    /// Frames request body bytes as DATA, as far as the windows and the write-ahead allow.
    fn frame_bodies(&mut self) {
        for s in &mut self.streams {
            while !s.body.is_empty()
                && s.send_window > 0
                && self.send_window > 0
                && self.wbuf.len() - self.wpos < WRITE_AHEAD
            {
                // A server's larger SETTINGS_MAX_FRAME_SIZE is no reason to copy more than
                // the write-ahead at once.
                let n = s
                    .body
                    .len()
                    .min(self.max_frame.min(WRITE_AHEAD))
                    .min(s.send_window as usize)
                    .min(self.send_window as usize);
                let last = n == s.body.len();
                frame_head(
                    &mut self.wbuf,
                    n,
                    DATA,
                    if last { END_STREAM } else { 0 },
                    s.id,
                );
                self.wbuf.extend_from_slice(&s.body[..n]);
                s.body.advance(n);
                s.send_window -= n as i64;
                self.send_window -= n as i64;
                s.sent_end |= last;
            }
        }
    }

    /// Reads what the socket has into the read buffer.
    fn fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.rbuf.capacity() - self.rbuf.len() < 4096 {
            self.rbuf.reserve(8192);
        }
        let spare = self.rbuf.spare_capacity_mut();
        let mut buf = ReadBuf::uninit(spare);
        let ptr = buf.filled().as_ptr();
        match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) => {
                let n = buf.filled().len();
                assert_eq!(ptr, buf.filled().as_ptr(), "the reader swapped the buffer");
                // SAFETY: poll_read initialised the first n bytes of the spare capacity
                // (the same memory: checked above).
                unsafe { self.rbuf.set_len(self.rbuf.len() + n) };
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The error for a connection that broke under its streams: a reset, or a protocol
    /// error if an h2c server never spoke HTTP/2 or the server said why in its GOAWAY.
    fn broken(&self, what: String) -> TransportError {
        if !self.heard && self.prior_knowledge {
            return TransportError::Protocol(format!(
                "{what} (the server sent nothing back to the HTTP/2 preface: is it an \
                 HTTP/1.1 server?)"
            ));
        }
        match self.goaway {
            Some((_, code)) if code != NO_ERROR => {
                coded(code, format!("{what} after GOAWAY ({})", reason(code)))
            }
            _ => TransportError::Reset(what),
        }
    }

    /// Fails the connection for everyone: every stream not yet whole fails with `e`.
    fn fail(&mut self, e: TransportError, wakes: &mut Vec<Waker>) {
        if self.dead.is_some() {
            return;
        }
        for s in &mut self.streams {
            s.reset = true;
            if s.error.is_none() && !s.ended {
                s.error = Some(e.clone());
            }
            s.body.clear();
            wakes.extend(s.waker.take());
        }
        wakes.extend(self.queued.drain(..).map(|(_, w)| w));
        self.dead = Some(e);
    }

    /// Fails the connection for a protocol error of the server's, telling it why in a
    /// GOAWAY first.
    fn fail_connection(
        &mut self,
        cx: &mut Context<'_>,
        e: ConnectionError,
        wakes: &mut Vec<Waker>,
    ) {
        let debug = e.what.as_bytes();
        frame_head(&mut self.wbuf, 8 + debug.len(), GOAWAY, 0, 0);
        self.wbuf.extend_from_slice(&0u32.to_be_bytes());
        self.wbuf.extend_from_slice(&e.code.to_be_bytes());
        self.wbuf.extend_from_slice(debug);
        // Failed first: that drops the request bodies, so the flush frames no DATA after
        // the GOAWAY.
        self.fail(TransportError::Protocol(e.what), wakes);
        let _ = self.flush(cx);
    }

    /// Files every whole frame in the read buffer.
    fn frames(&mut self, me: u32, wakes: &mut Vec<Waker>) -> Result<(), ConnectionError> {
        loop {
            if !self.settled && self.rbuf.starts_with(b"HTTP/") {
                let line = self.rbuf[..].split(|&b| b == b'\r' || b == b'\n').next();
                return Err(ConnectionError::new(
                    PROTOCOL_ERROR,
                    format!(
                        "the server answered the HTTP/2 preface with `{}`: is it an HTTP/1.1 \
                         server?",
                        String::from_utf8_lossy(line.unwrap_or_default())
                    ),
                ));
            }
            if self.rbuf.len() < 9 {
                return Ok(());
            }
            let len = usize::from(self.rbuf[0]) << 16
                | usize::from(self.rbuf[1]) << 8
                | usize::from(self.rbuf[2]);
            let (kind, flags) = (self.rbuf[3], self.rbuf[4]);
            let id = u32::from_be_bytes([self.rbuf[5], self.rbuf[6], self.rbuf[7], self.rbuf[8]])
                & MAX_STREAM_ID;
            if len > MAX_FRAME {
                return Err(ConnectionError::new(
                    FRAME_SIZE_ERROR,
                    format!("a {len}-byte frame, above the {MAX_FRAME} bytes we accept"),
                ));
            }
            if self.rbuf.len() < 9 + len {
                self.rbuf.reserve(9 + len - self.rbuf.len());
                return Ok(());
            }
            if !self.settled && kind != SETTINGS {
                return Err(ConnectionError::new(
                    PROTOCOL_ERROR,
                    format!("the server's first frame was of type {kind}, not SETTINGS"),
                ));
            }
            if let Some((cid, _)) = self.continuing
                && (kind != CONTINUATION || id != cid)
            {
                return Err(ConnectionError::new(
                    PROTOCOL_ERROR,
                    format!("a frame of type {kind} inside stream {cid}'s header block"),
                ));
            }
            let mut frame = self.rbuf.split_to(9 + len).freeze();
            frame.advance(9);
            match kind {
                DATA => self.data(id, flags, frame, me, wakes)?,
                HEADERS => self.headers(id, flags, frame, me, wakes)?,
                CONTINUATION => self.continuation(id, flags, &frame, me, wakes)?,
                PRIORITY if len != 5 => return Err(ConnectionError::size("PRIORITY", len)),
                RST_STREAM => self.rst_received(id, &frame, me, wakes)?,
                SETTINGS => self.settings(id, flags, &frame, wakes)?,
                PUSH_PROMISE => {
                    return Err(ConnectionError::new(
                        PROTOCOL_ERROR,
                        "a PUSH_PROMISE although we disabled push".into(),
                    ));
                }
                PING => {
                    ConnectionError::on_connection_only("PING", id)?;
                    if len != 8 {
                        return Err(ConnectionError::size("PING", len));
                    }
                    if flags & ACK == 0 {
                        frame_head(&mut self.wbuf, 8, PING, ACK, 0);
                        self.wbuf.extend_from_slice(&frame);
                    }
                }
                GOAWAY => self.goaway_received(id, &frame, wakes)?,
                WINDOW_UPDATE => self.window_update_received(id, &frame, wakes)?,
                _ => {} // unknown frame types are ignored (RFC 9113 §4.1)
            }
        }
    }

    /// A frame on stream `id` that is not open: fine for a stream we released (its late
    /// frames), an error for one never opened.
    fn unknown_stream(&self, id: u32, kind: &str) -> Result<(), ConnectionError> {
        if id == 0 || id >= self.next_id || id.is_multiple_of(2) {
            return Err(ConnectionError::new(
                PROTOCOL_ERROR,
                format!("{kind} on stream {id}, which we never opened"),
            ));
        }
        Ok(())
    }

    fn data(
        &mut self,
        id: u32,
        flags: u8,
        frame: Bytes,
        me: u32,
        wakes: &mut Vec<Waker>,
    ) -> Result<(), ConnectionError> {
        let len = frame.len();
        // The whole frame, padding too, counts against both windows.
        if len as i64 > self.recv_window {
            return Err(ConnectionError::new(
                FLOW_CONTROL_ERROR,
                "DATA beyond the connection's window".into(),
            ));
        }
        self.recv_window -= len as i64;
        self.recv_unacked += len as u32;
        if self.recv_unacked >= CONNECTION_WINDOW / 2 {
            let n = std::mem::take(&mut self.recv_unacked);
            self.recv_window += i64::from(n);
            self.window_update(0, n);
        }
        let data = unpad(flags, frame, "DATA")?;
        let Some(i) = self.index(id) else {
            return self.unknown_stream(id, "DATA");
        };
        let s = &mut self.streams[i];
        if s.reset {
            return Ok(());
        }
        if len as i64 > s.recv_window {
            return Err(ConnectionError::new(
                FLOW_CONTROL_ERROR,
                format!("DATA beyond stream {id}'s window"),
            ));
        }
        s.recv_window -= len as i64;
        if s.ended {
            self.after_end(i, "DATA", wakes);
            return Ok(());
        }
        if !s.got_head {
            self.malformed(i, "DATA before its head".into(), wakes);
            return Ok(());
        }
        // Padding is never read by the owner: give it back now; the data as the owner reads
        // it, or on arrival if the owner collects the whole body anyway.
        let credit = if s.collect { len } else { len - data.len() };
        if !data.is_empty() {
            s.data.push_back(data);
        }
        if flags & END_STREAM != 0 {
            s.ended = true;
        } else {
            s.unacked += credit as u32;
            if s.unacked >= STREAM_WINDOW / 2 {
                let n = std::mem::take(&mut s.unacked);
                s.recv_window += i64::from(n);
                self.window_update(id, n);
            }
        }
        self.settle(i, me, wakes);
        Ok(())
    }

    fn headers(
        &mut self,
        id: u32,
        flags: u8,
        frame: Bytes,
        me: u32,
        wakes: &mut Vec<Waker>,
    ) -> Result<(), ConnectionError> {
        let mut block = unpad(flags, frame, "HEADERS")?;
        if flags & PRIORITY_FLAG != 0 {
            if block.len() < 5 {
                return Err(ConnectionError::size("HEADERS", block.len()));
            }
            block.advance(5);
        }
        let end = flags & END_STREAM != 0;
        if flags & END_HEADERS != 0 {
            return self.header_block(id, end, &block, me, wakes);
        }
        self.block.clear();
        self.block.extend_from_slice(&block);
        self.continuing = Some((id, end));
        Ok(())
    }

    fn continuation(
        &mut self,
        id: u32,
        flags: u8,
        frame: &[u8],
        me: u32,
        wakes: &mut Vec<Waker>,
    ) -> Result<(), ConnectionError> {
        let Some((_, end)) = self.continuing else {
            return Err(ConnectionError::new(
                PROTOCOL_ERROR,
                format!("a CONTINUATION on stream {id} without HEADERS before it"),
            ));
        };
        if self.block.len() + frame.len() > MAX_HEADER_BLOCK {
            return Err(ConnectionError::new(
                PROTOCOL_ERROR,
                format!("a response header block over {MAX_HEADER_BLOCK} bytes"),
            ));
        }
        self.block.extend_from_slice(frame);
        if flags & END_HEADERS == 0 {
            return Ok(());
        }
        self.continuing = None;
        let block = std::mem::take(&mut self.block);
        let r = self.header_block(id, end, &block, me, wakes);
        self.block = block;
        if self.block.capacity() > KEEP_WRITE_BUFFER {
            self.block = Vec::new();
        }
        r
    }

    /// A whole header block: decoded in any case (the HPACK state is the connection's),
    /// then filed as the stream's head, an interim (1xx) head to skip, or its trailers.
    fn header_block(
        &mut self,
        id: u32,
        end: bool,
        block: &[u8],
        me: u32,
        wakes: &mut Vec<Waker>,
    ) -> Result<(), ConnectionError> {
        self.fields.clear();
        let decoded = self
            .decoder
            .decode(block, &mut self.fields)
            .map_err(|e| ConnectionError::new(COMPRESSION_ERROR, format!("HPACK: {}", e.0)))?;
        let r = self.file_block(id, end, decoded, me, wakes);
        self.fields.clear();
        if self.fields.capacity() > KEEP_FIELDS {
            self.fields = Vec::with_capacity(16);
        }
        r
    }

    /// A decoded header block (in [`Inner::fields`]) filed under its stream.
    fn file_block(
        &mut self,
        id: u32,
        end: bool,
        decoded: hpack::Decoded,
        me: u32,
        wakes: &mut Vec<Waker>,
    ) -> Result<(), ConnectionError> {
        let Some(i) = self.index(id) else {
            return self.unknown_stream(id, "HEADERS");
        };
        let s = &mut self.streams[i];
        if s.reset {
            return Ok(());
        }
        if s.ended {
            self.after_end(i, "HEADERS", wakes);
            return Ok(());
        }
        if decoded == hpack::Decoded::TooLarge {
            // Only this stream fails: the block was decoded through, so the connection's
            // HPACK state still matches the server's.
            let what = format!(
                "a header list over {} fields or {} KiB (our SETTINGS_MAX_HEADER_LIST_SIZE)",
                hpack::MAX_LIST_FIELDS,
                hpack::MAX_LIST_SIZE / 1024
            );
            self.malformed(i, what, wakes);
            return Ok(());
        }
        if !s.got_head {
            match head(&mut self.fields) {
                Ok((status, _)) if (100..200).contains(&status) => {
                    if status == 101 || end {
                        self.malformed(i, format!("an interim {status} response"), wakes);
                    }
                    return Ok(()); // the final head follows
                }
                Ok(h) => {
                    s.head = Some(h);
                    s.got_head = true;
                }
                Err(what) => {
                    self.malformed(i, what, wakes);
                    return Ok(());
                }
            }
        } else if !end {
            self.malformed(i, "trailers that do not end the stream".into(), wakes);
            return Ok(());
        }
        // Trailers have nowhere to go in a response here: read past them.
        s.ended |= end;
        self.settle(i, me, wakes);
        Ok(())
    }

    /// A response that breaks HTTP/2's rules for one stream: that stream fails as a
    /// protocol error and is reset; the connection goes on.
    fn malformed(&mut self, i: usize, what: String, wakes: &mut Vec<Waker>) {
        let id = self.streams[i].id;
        let what = format!("malformed response on stream {id}: {what}");
        self.stream_error(i, PROTOCOL_ERROR, what, wakes);
    }

    /// A `kind` frame on a stream the server already ended (half-closed, RFC 9113 §5.1): a
    /// stream error, STREAM_CLOSED; the whole response stands.
    fn after_end(&mut self, i: usize, kind: &str, wakes: &mut Vec<Waker>) {
        let id = self.streams[i].id;
        let what = format!("{kind} on stream {id} after its end");
        self.stream_error(i, STREAM_CLOSED, what, wakes);
    }

    /// An error of the server's on one stream (RFC 9113 §5.4.2): the stream is reset with
    /// `code` and fails, unless its response is already whole, which stands (as with the
    /// server's own RST_STREAM); a stream that already failed keeps its first error.
    fn stream_error(&mut self, i: usize, code: u32, what: String, wakes: &mut Vec<Waker>) {
        let s = &mut self.streams[i];
        let id = s.id;
        if !s.ended {
            s.error.get_or_insert_with(|| coded(code, what));
            s.data.clear();
        }
        s.body.clear();
        let reset = std::mem::replace(&mut s.reset, true);
        self.settle(i, 0, wakes);
        if !reset {
            self.rst_stream(id, code);
        }
    }

    fn rst_received(
        &mut self,
        id: u32,
        frame: &[u8],
        me: u32,
        wakes: &mut Vec<Waker>,
    ) -> Result<(), ConnectionError> {
        if frame.len() != 4 {
            return Err(ConnectionError::size("RST_STREAM", frame.len()));
        }
        let code = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
        let Some(i) = self.index(id) else {
            return self.unknown_stream(id, "RST_STREAM");
        };
        let s = &mut self.streams[i];
        s.reset = true;
        s.body.clear();
        // A whole response stands: a server may reset the stream to stop the rest of a
        // request body it does not need (RFC 9113 §8.1).
        if !s.ended && s.error.is_none() {
            s.error = Some(coded(
                code,
                format!("the server reset stream {id} ({})", reason(code)),
            ));
        }
        self.settle(i, me, wakes);
        Ok(())
    }

    fn settings(
        &mut self,
        id: u32,
        flags: u8,
        frame: &[u8],
        wakes: &mut Vec<Waker>,
    ) -> Result<(), ConnectionError> {
        ConnectionError::on_connection_only("SETTINGS", id)?;
        if flags & ACK != 0 {
            if !frame.is_empty() {
                return Err(ConnectionError::size("SETTINGS ACK", frame.len()));
            }
            // From here on the server's encoder holds to our table size.
            self.decoder.set_limit(HEADER_TABLE_SIZE);
            return Ok(());
        }
        if !frame.len().is_multiple_of(6) {
            return Err(ConnectionError::size("SETTINGS", frame.len()));
        }
        let max_streams = self.max_streams;
        if !self.settled {
            // Unlimited unless these SETTINGS say otherwise.
            self.max_streams = usize::MAX;
        }
        for p in frame.chunks_exact(6) {
            let value = u32::from_be_bytes([p[2], p[3], p[4], p[5]]);
            match u16::from_be_bytes([p[0], p[1]]) {
                0x3 => self.max_streams = value as usize,
                0x4 => {
                    let value = i64::from(value);
                    if value > MAX_WINDOW {
                        return Err(ConnectionError::new(
                            FLOW_CONTROL_ERROR,
                            format!("SETTINGS_INITIAL_WINDOW_SIZE {value}"),
                        ));
                    }
                    let delta = value - self.initial_window;
                    self.initial_window = value;
                    for s in &mut self.streams {
                        s.send_window += delta;
                        if s.send_window > MAX_WINDOW {
                            return Err(ConnectionError::new(
                                FLOW_CONTROL_ERROR,
                                format!("stream {}'s window past 2^31-1", s.id),
                            ));
                        }
                    }
                }
                0x5 => {
                    if !(16_384..=16_777_215).contains(&value) {
                        return Err(ConnectionError::new(
                            PROTOCOL_ERROR,
                            format!("SETTINGS_MAX_FRAME_SIZE {value}"),
                        ));
                    }
                    self.max_frame = value as usize;
                }
                // HEADER_TABLE_SIZE: our encoder keeps no table. ENABLE_PUSH,
                // MAX_HEADER_LIST_SIZE and unknown settings change nothing for us.
                _ => {}
            }
        }
        if self.max_streams > max_streams {
            // More room (the first SETTINGS may lift the limit we kept until then without
            // naming MAX_CONCURRENT_STREAMS): every waiting task looks again, not one per
            // stream that ends.
            wakes.extend(self.queued.iter().map(|(_, w)| w.clone()));
        }
        frame_head(&mut self.wbuf, 0, SETTINGS, ACK, 0);
        self.settled = true;
        Ok(())
    }

    fn goaway_received(
        &mut self,
        id: u32,
        frame: &[u8],
        wakes: &mut Vec<Waker>,
    ) -> Result<(), ConnectionError> {
        ConnectionError::on_connection_only("GOAWAY", id)?;
        if frame.len() < 8 {
            return Err(ConnectionError::size("GOAWAY", frame.len()));
        }
        let last = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) & MAX_STREAM_ID;
        let code = u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        let debug = String::from_utf8_lossy(&frame[8..frame.len().min(8 + 200)]);
        let said = if debug.is_empty() {
            String::new()
        } else {
            format!(": {debug}")
        };
        self.goaway = Some((last, code));
        // Streams past `last` were never processed and never will be.
        for s in &mut self.streams {
            if s.id > last && !s.reset {
                s.reset = true;
                s.body.clear();
                if s.error.is_none() && !s.ended {
                    s.error = Some(coded(
                        code,
                        format!(
                            "the server refused stream {} with GOAWAY ({}{said})",
                            s.id,
                            reason(code)
                        ),
                    ));
                }
                if s.counted {
                    s.counted = false;
                    self.open -= 1;
                }
                wakes.extend(s.waker.take());
            }
        }
        wakes.extend(self.queued.drain(..).map(|(_, w)| w));
        Ok(())
    }

    fn window_update_received(
        &mut self,
        id: u32,
        frame: &[u8],
        wakes: &mut Vec<Waker>,
    ) -> Result<(), ConnectionError> {
        if frame.len() != 4 {
            return Err(ConnectionError::size("WINDOW_UPDATE", frame.len()));
        }
        let n =
            i64::from(u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]) & MAX_STREAM_ID);
        if id == 0 {
            if n == 0 {
                return Err(ConnectionError::new(
                    PROTOCOL_ERROR,
                    "a WINDOW_UPDATE of 0 for the connection".into(),
                ));
            }
            self.send_window += n;
            if self.send_window > MAX_WINDOW {
                return Err(ConnectionError::new(
                    FLOW_CONTROL_ERROR,
                    "the connection's window past 2^31-1".into(),
                ));
            }
            return Ok(());
        }
        let Some(i) = self.index(id) else {
            return Ok(()); // a released stream's, or one the server is being eager about
        };
        let s = &mut self.streams[i];
        if n == 0 {
            self.malformed(i, "a WINDOW_UPDATE of 0".into(), wakes);
        } else if s.send_window + n > MAX_WINDOW {
            let what = format!("the server's WINDOW_UPDATE took stream {id}'s window past 2^31-1");
            self.stream_error(i, FLOW_CONTROL_ERROR, what, wakes);
        } else {
            s.send_window += n;
        }
        Ok(())
    }

    /// After a change to stream `i`: frees its place against MAX_CONCURRENT_STREAMS if it is
    /// closed both ways, and wakes its owner (unless that is the task filing the frame).
    fn settle(&mut self, i: usize, me: u32, wakes: &mut Vec<Waker>) {
        let s = &mut self.streams[i];
        if s.counted && (s.reset || (s.ended && s.sent_end)) {
            s.counted = false;
            self.open -= 1;
            if let Some((_, w)) = self.queued.pop_front() {
                wakes.push(w);
            }
        }
        let s = &mut self.streams[i];
        if s.id != me
            && let Some(w) = s.waker.take()
        {
            wakes.push(w);
        }
    }

    fn window_update(&mut self, id: u32, n: u32) {
        frame_head(&mut self.wbuf, 4, WINDOW_UPDATE, 0, id);
        self.wbuf.extend_from_slice(&n.to_be_bytes());
    }

    fn rst_stream(&mut self, id: u32, code: u32) {
        frame_head(&mut self.wbuf, 4, RST_STREAM, 0, id);
        self.wbuf.extend_from_slice(&code.to_be_bytes());
    }
}

#[cfg(test)]
mod tests;

/// A connection error of the server's making, and the code our GOAWAY gives it.
struct ConnectionError {
    code: u32,
    what: String,
}

impl ConnectionError {
    fn new(code: u32, what: String) -> Self {
        Self { code, what }
    }

    fn size(kind: &str, len: usize) -> Self {
        Self::new(FRAME_SIZE_ERROR, format!("a {kind} frame of {len} bytes"))
    }

    /// A frame `kind` that belongs to the connection (stream 0) arrived on stream `id`.
    fn on_connection_only(kind: &str, id: u32) -> Result<(), Self> {
        if id == 0 {
            return Ok(());
        }
        Err(Self::new(PROTOCOL_ERROR, format!("{kind} on stream {id}")))
    }
}

/// The payload of a frame that may be PADDED, without its padding.
fn unpad(flags: u8, mut frame: Bytes, kind: &str) -> Result<Bytes, ConnectionError> {
    if flags & PADDED == 0 {
        return Ok(frame);
    }
    let Some(&pad) = frame.first() else {
        return Err(ConnectionError::size(kind, 0));
    };
    let pad = usize::from(pad);
    if pad >= frame.len() {
        return Err(ConnectionError::new(
            PROTOCOL_ERROR,
            format!("a {kind} frame padded past its end"),
        ));
    }
    frame.advance(1);
    frame.truncate(frame.len() - pad);
    Ok(frame)
}

/// A response head from decoded fields: `:status` and the headers.
fn head(fields: &mut Vec<(Name, Bytes)>) -> Result<(u16, HeaderMap), String> {
    let mut status = None;
    let mut headers = HeaderMap::with_capacity(fields.len());
    for (name, value) in fields.drain(..) {
        match name {
            Name::Status => {
                if status.is_some() || !headers.is_empty() {
                    return Err("a misplaced :status".into());
                }
                status = match value[..] {
                    [a @ b'1'..=b'9', b @ b'0'..=b'9', c @ b'0'..=b'9'] => Some(
                        u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0'),
                    ),
                    _ => {
                        return Err(format!(":status `{}`", String::from_utf8_lossy(&value)));
                    }
                };
            }
            Name::Pseudo => return Err("a request pseudo-header in a response".into()),
            Name::Invalid => return Err("an invalid header name".into()),
            Name::Header(name) => {
                let value = HeaderValue::from_maybe_shared(value)
                    .map_err(|_| format!("an invalid value for `{name}`"))?;
                headers.append(name, value);
            }
        }
    }
    let status = status.ok_or("no :status")?;
    Ok((status, headers))
}

/// The same check of a request path hyper made, with its message; a path of plain
/// characters skips it.
fn check_path(path: &str) -> Result<(), http::uri::InvalidUri> {
    let plain = path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/?=&-._~%+,;:@!$*'()".contains(&b));
    if plain {
        return Ok(());
    }
    http::uri::PathAndQuery::try_from(path).map(drop)
}

fn concat(data: &mut VecDeque<Bytes>) -> Bytes {
    match data.len() {
        0 => Bytes::new(),
        1 => data.pop_front().expect("one chunk"),
        _ => {
            let mut body = BytesMut::with_capacity(data.iter().map(Bytes::len).sum());
            for c in data.drain(..) {
                body.extend_from_slice(&c);
            }
            body.freeze()
        }
    }
}

fn set_waker(slot: &mut Option<Waker>, waker: &Waker) {
    match slot {
        Some(w) => set_waker_in(w, waker),
        None => *slot = Some(waker.clone()),
    }
}

fn set_waker_in(w: &mut Waker, waker: &Waker) {
    if !w.will_wake(waker) {
        w.clone_from(waker);
    }
}

fn frame_bytes(len: usize, kind: u8, flags: u8, id: u32) -> [u8; 9] {
    let [_, l0, l1, l2] = (len as u32).to_be_bytes();
    let [i0, i1, i2, i3] = id.to_be_bytes();
    [l0, l1, l2, kind, flags, i0, i1, i2, i3]
}

fn frame_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, id: u32) {
    out.extend_from_slice(&frame_bytes(len, kind, flags, id));
}

/// An RST_STREAM's or GOAWAY's error code as the error it means, sorted as hyper's errors
/// were: codes that say one side broke HTTP/2 (or will not speak it) are protocol errors;
/// the rest (CANCEL, REFUSED_STREAM, a plain GOAWAY…) end a healthy exchange early.
fn coded(code: u32, what: String) -> TransportError {
    match code {
        PROTOCOL_ERROR | FLOW_CONTROL_ERROR | FRAME_SIZE_ERROR | COMPRESSION_ERROR | 0xd => {
            TransportError::Protocol(what)
        }
        _ => TransportError::Reset(what),
    }
}

/// An error code's name (RFC 9113 §7).
fn reason(code: u32) -> String {
    let name = match code {
        0x0 => "NO_ERROR",
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x4 => "SETTINGS_TIMEOUT",
        0x5 => "STREAM_CLOSED",
        0x6 => "FRAME_SIZE_ERROR",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0x9 => "COMPRESSION_ERROR",
        0xa => "CONNECT_ERROR",
        0xb => "ENHANCE_YOUR_CALM",
        0xc => "INADEQUATE_SECURITY",
        0xd => "HTTP_1_1_REQUIRED",
        _ => return format!("error code {code:#x}"),
    };
    name.to_owned()
}
