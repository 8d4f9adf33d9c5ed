//! The socket's hand-off between tasks. There is no connection task: whichever task polls
//! drives the socket ([`Inner::drive`]: write what is queued, read and file what arrived).
//! The task that last met an empty socket holds its read registration and is the one the
//! socket wakes ([`Inner::reader`]); every way out of a poll goes through [`Inner::leave`],
//! which wakes one waiting task to take over if the leaver might hold that registration or
//! left frames unwritten, so nobody sleeps on a socket nobody watches.

use std::{
    io,
    pin::Pin,
    sync::{MutexGuard, PoisonError, atomic::Ordering::Relaxed},
    task::{Context, Poll, Waker},
};

use bytes::BytesMut;
use tokio::io::{AsyncRead as _, AsyncWrite as _, ReadBuf};

use super::{Inner, Shared};

/// [`Inner::reader`]: no task is known to hold the read registration.
pub(super) const NOBODY: u32 = 0;
/// [`Inner::reader`]: a task waiting for a free stream holds it (which one is not known).
pub(super) const QUEUED: u32 = u32::MAX;
/// A write buffer grown past this by a large body is given back once empty: 10 000 idle
/// connections must not each keep one.
const KEEP_WRITE_BUFFER: usize = 16 * 1024;

impl Shared {
    /// Runs `f` under the lock, then wakes the tasks it found waiting (after unlocking, so
    /// they do not wake into a held lock).
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut Inner, &mut Vec<Waker>) -> R) -> R {
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

    /// Stream `id`'s answer, as `ready` finds it: asked once; if there is none yet, the
    /// connection is driven (what arrived is read and filed under its streams) and `ready`
    /// asked again; if there is still none, the task waits with the stream's waker set.
    pub(super) fn poll_stream<T>(
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
}

impl Inner {
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
    #[inline]
    pub(super) fn leave(&mut self, me: u32, wakes: &mut Vec<Waker>) {
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

    /// Wakes one waiting task (a stream's, else one waiting for a stream), or all. A stream
    /// has a waker only while its task waits in a poll here ([`Inner::leave`] takes it), so
    /// the task woken will poll and drive.
    pub(super) fn wake_waiters(&mut self, all: bool, wakes: &mut Vec<Waker>) {
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
    pub(super) fn drive(&mut self, cx: &mut Context<'_>, me: u32, wakes: &mut Vec<Waker>) {
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
                    if self.rbuf.is_empty() {
                        // Nothing half-read: the buffer goes back to the allocator (or, once
                        // the chunks filed from it are read, with them) and the next read
                        // takes one afresh. Most connections of a many-player run wait
                        // between a few small frames; each keeping 8 KiB was 40 % of a
                        // player's memory, reused by one connection after another now.
                        self.rbuf = BytesMut::new();
                    }
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
    pub(super) fn peek(&mut self, wakes: &mut Vec<Waker>) {
        let waiting = !self.queued.is_empty() || self.streams.iter().any(|s| s.waker.is_some());
        if !waiting {
            let mut cx = Context::from_waker(Waker::noop());
            self.drive(&mut cx, NOBODY, wakes);
            self.leave(NOBODY, wakes);
        }
    }

    /// Writes what is queued, framing request bodies as windows allow; false if the
    /// connection failed.
    pub(super) fn flush_or_fail(&mut self, cx: &mut Context<'_>, wakes: &mut Vec<Waker>) -> bool {
        match self.flush(cx) {
            Ok(()) => true,
            Err(e) => {
                let e = self.broken(e.to_string());
                self.fail(e, wakes);
                false
            }
        }
    }

    pub(super) fn flush(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
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
                            self.wbuf = Vec::new();
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
}

/// Puts `waker` in `slot`, cloning only if it is another task's.
#[inline]
pub(super) fn set_waker(slot: &mut Option<Waker>, waker: &Waker) {
    match slot {
        Some(w) => set_waker_in(w, waker),
        None => *slot = Some(waker.clone()),
    }
}

#[inline]
pub(super) fn set_waker_in(w: &mut Waker, waker: &Waker) {
    if !w.will_wake(waker) {
        w.clone_from(waker);
    }
}
