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
//! others.
//!
//! One file per layer, as h2 splits its own: this one is the entry (the handshake, the
//! handles, a request's life from a free stream to its response); [`frame`] reads and
//! writes frames; [`hpack`] is the header compression; [`conn`] the connection as a whole
//! (SETTINGS, PING, GOAWAY, connection errors); [`streams`] a stream's state, its header
//! blocks and resets; [`flow`] the windows; [`handoff`] which task drives the socket.
//! The small helpers one file calls in another carry `#[inline]`: a release build puts
//! modules in separate codegen units, across which nothing else is inlined.

mod conn;
mod duplex;
mod flow;
mod frame;
pub(crate) mod fuzz;
mod handoff;
mod hpack;
mod streams;

use std::{
    collections::VecDeque,
    fmt,
    future::poll_fn,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
    task::{Context, Poll, Waker},
};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, uri::Authority};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};

use self::{
    conn::STREAMS_BEFORE_SETTINGS,
    flow::{CONNECTION_WINDOW, STREAM_WINDOW, credit},
    frame::MAX_FRAME,
    handoff::{NOBODY, QUEUED},
    hpack::Name,
    streams::{Stream, concat},
};
use super::{
    Body, BoxFuture, Connection, Dial, Duplex, PendingHead, Request, Response, SendBody, Streaming,
    TransportError,
};
pub(crate) use duplex::{H2Head, H2Send};

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
    io.write_all(&conn::preface())
        .await
        .map_err(|e| dial.failed(e.to_string()))?;
    let inner = Inner {
        io: Box::new(io),
        // Taken at the first read (handoff.rs `fill`), given back whenever it empties.
        rbuf: BytesMut::new(),
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

impl Connection for H2Connection {
    fn send(&mut self, req: Request) -> BoxFuture<'_, Result<Response, TransportError>> {
        Box::pin(async move {
            let mut op = Op::new(&self.0);
            op.start(req, true, false).await?;
            let r = poll_fn(|cx| op.shared.poll_whole(cx, op.id)).await;
            op.id = 0; // released by poll_whole
            r
        })
    }

    fn open(&mut self, req: Request) -> BoxFuture<'_, Result<Streaming, TransportError>> {
        Box::pin(async move {
            let mut op = Op::new(&self.0);
            op.start(req, false, false).await?;
            let head = poll_fn(|cx| op.shared.poll_head(cx, op.id)).await;
            let id = std::mem::take(&mut op.id);
            let (status, headers) = head?;
            Ok(Streaming {
                status,
                headers,
                body: Body::H2(RecvBody {
                    shared: self.0.clone(),
                    id,
                    trailers: None,
                }),
            })
        })
    }

    fn duplex(&mut self, req: Request) -> BoxFuture<'_, Result<Duplex, TransportError>> {
        Box::pin(async move {
            let mut op = Op::new(&self.0);
            op.start(req, false, true).await?;
            let id = std::mem::take(&mut op.id);
            self.0.with(|inner, wakes| {
                // Nobody polls this stream until its owner sends or waits: the HEADERS go
                // out now, as the server may answer before the first message.
                inner.leave(QUEUED, wakes);
                inner.push_writes(wakes);
            });
            Ok(Duplex {
                send: SendBody(H2Send::new(self.0.clone(), id)),
                response: PendingHead(H2Head::new(self.0.clone(), id)),
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

    async fn start(
        &mut self,
        req: Request,
        collect: bool,
        open_body: bool,
    ) -> Result<(), TransportError> {
        let mut req = Some(req);
        let id = poll_fn(|cx| {
            self.shared
                .poll_start(cx, &mut req, &mut self.ticket, collect, open_body)
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
    /// The trailers that ended it, until taken.
    trailers: Option<HeaderMap>,
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
        let trailers = &mut self.trailers;
        let r = poll_fn(|cx| self.shared.poll_data(cx, self.id, trailers)).await;
        // poll_data left the connection itself as it returned.
        std::mem::forget(waiting);
        if !matches!(r, Some(Ok(_))) {
            self.id = 0; // released by poll_data
        }
        r
    }

    /// The trailers that ended the body, once [`RecvBody::chunk`] has returned `None`.
    pub fn trailers(&mut self) -> Option<HeaderMap> {
        self.trailers.take()
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
    /// Opens a stream for `req` once the server allows one more; returns its id.
    fn poll_start(
        &self,
        cx: &mut Context<'_>,
        req: &mut Option<Request>,
        ticket: &mut Option<u64>,
        collect: bool,
        open_body: bool,
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
            let r = inner.start(req, self.https, &self.authority, collect, open_body);
            if r.is_err() {
                inner.leave(QUEUED, wakes);
            }
            // A stream opened: the same poll goes on to wait on it, and drives there.
            Poll::Ready(r)
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
                let trailers = s.trailers.take();
                inner.finish(id, wakes);
                return Some(Ok(Response {
                    status,
                    headers: headers.into(),
                    body,
                    trailers,
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

    /// The next body chunk on stream `id`, `None` at its end (with the trailers, if any, put
    /// in `trailers`); releases the stream unless a chunk is returned.
    fn poll_data(
        &self,
        cx: &mut Context<'_>,
        id: u32,
        trailers: &mut Option<HeaderMap>,
    ) -> Poll<Option<Result<Bytes, TransportError>>> {
        self.poll_stream(cx, id, |inner, wakes, cx| {
            let s = inner.stream(id);
            if let Some(chunk) = s.data.pop_front() {
                // Read: the server may send that much more.
                s.unacked += chunk.len() as u32;
                if !s.ended
                    && let Some(n) = credit(&mut s.unacked, &mut s.recv_window, STREAM_WINDOW)
                {
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
                *trailers = s.trailers.take();
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

#[cfg(test)]
mod tests;
