//! A request body that keeps streaming after the request's head: gRPC's client- and
//! bidi-streaming calls. [`Connection::duplex`](crate::Connection::duplex) opens the stream
//! with HEADERS alone (no END_STREAM, no `content-length`) and hands back two halves: an
//! [`H2Send`] that queues DATA as the caller has it and ends the stream on
//! [`H2Send::finish`], and an [`H2Head`] that waits for the response's head and then reads
//! its body like [`Connection::open`](crate::Connection::open)'s.
//!
//! The sender never reads the socket: it queues, and writes what the windows allow at
//! once if no task is polling the connection, else wakes one to write it. A body the server
//! does not take (its window stays shut) is refused past [`MAX_QUEUED`] bytes rather than
//! held without bound. A sender dropped before its finish resets the stream (CANCEL).

use std::{
    sync::Arc,
    task::{Context, Waker},
};

use bytes::Bytes;
use http::HeaderMap;

use super::{Body, Inner, RecvBody, Shared, frame::CANCEL};
use crate::{Streaming, TransportError};

/// Request body bytes queued for one stream at most, beyond what the server's windows let
/// out: a scripted call's messages fit many times over.
pub(crate) const MAX_QUEUED: usize = 4 << 20;

/// The sending half of a duplex stream.
pub(crate) struct H2Send {
    shared: Arc<Shared>,
    id: u32,
    finished: bool,
}

impl H2Send {
    pub(super) fn new(shared: Arc<Shared>, id: u32) -> Self {
        Self {
            shared,
            id,
            finished: false,
        }
    }

    /// Queues `data` as the body's next bytes and writes what the windows allow.
    pub(crate) fn send(&mut self, data: Bytes) -> Result<(), TransportError> {
        if self.finished {
            return Err(TransportError::Protocol(
                "the request body was sent after its end".into(),
            ));
        }
        let id = self.id;
        self.shared.with(|inner, wakes| {
            let Some(i) = inner.index(id) else {
                return Err(gone(id));
            };
            let s = &mut inner.streams[i];
            if s.reset || s.ended {
                return Err(ended(id, s.error.as_ref()));
            }
            let queued = s.body.len() + s.more.iter().map(Bytes::len).sum::<usize>();
            if queued + data.len() > MAX_QUEUED {
                return Err(TransportError::Protocol(format!(
                    "the server takes no more of the request body on stream {id}: {queued} bytes \
                     wait for its flow-control window"
                )));
            }
            s.more.push_back(data);
            inner.push_writes(wakes);
            Ok(())
        })
    }

    /// Ends the body (END_STREAM, on its last DATA or an empty one).
    pub(crate) fn finish(&mut self) -> Result<(), TransportError> {
        if std::mem::replace(&mut self.finished, true) {
            return Ok(());
        }
        let id = self.id;
        self.shared.with(|inner, wakes| {
            let Some(i) = inner.index(id) else {
                return Err(gone(id));
            };
            let s = &mut inner.streams[i];
            if s.reset {
                return Err(ended(id, s.error.as_ref()));
            }
            s.body_open = false;
            inner.push_writes(wakes);
            Ok(())
        })
    }
}

fn gone(id: u32) -> TransportError {
    TransportError::Reset(format!(
        "stream {id} is over: its response was read to its end or given up"
    ))
}

fn ended(id: u32, error: Option<&TransportError>) -> TransportError {
    match error {
        Some(e) => e.clone(),
        None => TransportError::Reset(format!(
            "the server ended stream {id} before the request body's end"
        )),
    }
}

impl Drop for H2Send {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let id = self.id;
        self.shared.with(|inner, wakes| {
            if let Some(i) = inner.index(id)
                && !inner.streams[i].reset
            {
                let what = format!("the request body on stream {id} was abandoned before its end");
                inner.stream_error(i, CANCEL, what, wakes);
                inner.push_writes(wakes);
            }
        });
    }
}

/// The receiving half of a duplex stream, before its head.
pub(crate) struct H2Head {
    shared: Arc<Shared>,
    /// 0 once handed on.
    id: u32,
}

impl H2Head {
    pub(super) fn new(shared: Arc<Shared>, id: u32) -> Self {
        Self { shared, id }
    }

    /// The response's head, with its body to read as it arrives.
    pub(crate) async fn head(mut self) -> Result<Streaming, TransportError> {
        let id = self.id;
        let shared = self.shared.clone();
        let head = std::future::poll_fn(|cx| shared.poll_head(cx, id)).await;
        // poll_head released the stream if it failed; otherwise the body takes it over.
        self.id = 0;
        let (status, headers) = head?;
        Ok(Streaming {
            status,
            headers,
            body: Body::H2(RecvBody {
                shared,
                id,
                trailers: None::<HeaderMap>,
            }),
        })
    }
}

impl Drop for H2Head {
    fn drop(&mut self) {
        if self.id != 0 {
            self.shared.abandon(None, self.id);
        }
    }
}

impl Inner {
    /// Gets what was queued written without taking a task's registration on the socket:
    /// a task waiting on the connection is woken to write it; with none waiting, it is
    /// written now (what the socket does not take waits for the next task to poll).
    pub(super) fn push_writes(&mut self, wakes: &mut Vec<Waker>) {
        let before = wakes.len();
        self.wake_waiters(false, wakes);
        if wakes.len() == before {
            self.flush_or_fail(&mut Context::from_waker(Waker::noop()), wakes);
        }
    }
}
