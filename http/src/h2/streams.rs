//! Streams: opening one for a request (its HEADERS and CONTINUATIONs), waiting for a free
//! one under the server's MAX_CONCURRENT_STREAMS, assembling the response's header blocks
//! into its head and trailers (1xx heads skipped), RST_STREAM both ways, the stream
//! errors that reset one stream and leave the connection to the others, and releasing a
//! stream its owner is done with.

use std::{collections::VecDeque, task::Waker};

use bytes::{Buf as _, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue};

use super::{
    Inner,
    flow::STREAM_WINDOW,
    frame::{
        self, CANCEL, COMPRESSION_ERROR, CONTINUATION, ConnectionError, END_HEADERS, END_STREAM,
        Filed, Frame, HEADERS, NO_ERROR, PRIORITY_FLAG, PROTOCOL_ERROR, RST_STREAM, STREAM_CLOSED,
        coded, frame_bytes, frame_head, reason,
    },
    handoff::set_waker_in,
    hpack::{self, Name},
};
use crate::{Request, TransportError};

/// The largest response header block (HEADERS and its CONTINUATIONs) we assemble. Larger
/// than any list within [`hpack::MAX_LIST_SIZE`] codes to (Huffman codes take up to 30
/// bits a byte); a larger block fails the connection, as its HPACK state cannot be kept.
const MAX_HEADER_BLOCK: usize = 1 << 20;
/// Decoded fields grown past this by a large header list are given back.
const KEEP_FIELDS: usize = 64;
/// A header block buffer grown past this by a large block is given back.
const KEEP_BLOCK: usize = 16 * 1024;

pub(super) struct Stream {
    pub id: u32,
    /// The response head, until its owner takes it.
    pub head: Option<(u16, HeaderMap)>,
    pub got_head: bool,
    /// The response's trailers, until its owner takes them.
    pub trailers: Option<HeaderMap>,
    /// DATA received and not yet taken by the owner.
    pub data: VecDeque<Bytes>,
    /// END_STREAM received.
    pub ended: bool,
    /// The stream failed: reset by either side, refused by a GOAWAY, or the connection
    /// broke.
    pub error: Option<TransportError>,
    /// No RST_STREAM is owed for it (either side reset it, a GOAWAY refused it, or the
    /// connection is gone).
    pub reset: bool,
    pub waker: Option<Waker>,
    /// The request body still to send (the piece being framed, then the pieces queued
    /// behind it by a [`super::SendBody`]), and the server's window for it.
    pub body: Bytes,
    pub more: VecDeque<Bytes>,
    /// A [`super::SendBody`] may still add to the body: END_STREAM waits for its finish.
    pub body_open: bool,
    pub sent_end: bool,
    pub send_window: i64,
    /// Our window for the response body, and what the owner has read since we last gave
    /// it back.
    pub recv_window: i64,
    pub unacked: u32,
    /// The owner collects the whole body: its window is given back on arrival.
    pub collect: bool,
    /// Counted in [`Inner::open`].
    pub counted: bool,
}

impl Stream {
    /// Forgets the request body still to send: the stream failed or was reset.
    #[inline]
    pub(super) fn drop_body(&mut self) {
        self.body.clear();
        self.more.clear();
        self.body_open = false;
    }
}

impl Inner {
    pub(super) fn enqueue(&mut self, ticket: &mut Option<u64>, waker: &Waker) {
        let t = *ticket.get_or_insert_with(|| {
            self.next_ticket += 1;
            self.next_ticket
        });
        match self.queued.iter_mut().find(|(q, _)| *q == t) {
            Some((_, w)) => set_waker_in(w, waker),
            None => self.queued.push_back((t, waker.clone())),
        }
    }

    pub(super) fn unqueue(&mut self, ticket: &mut Option<u64>) {
        if let Some(t) = ticket.take() {
            self.queued.retain(|(q, _)| *q != t);
        }
    }

    /// The stream `id`, which its owner holds, so it is there.
    #[inline]
    pub(super) fn stream(&mut self, id: u32) -> &mut Stream {
        self.streams
            .iter_mut()
            .find(|s| s.id == id)
            .expect("a stream stays until its owner releases it")
    }

    #[inline]
    pub(super) fn index(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    /// Queues the request's HEADERS (and CONTINUATIONs) and puts its body up for sending;
    /// returns the new stream's id.
    ///
    /// With `open_body` the body stays open after `req.body` for a [`super::SendBody`] to
    /// add to, and carries no `content-length`.
    pub(super) fn start(
        &mut self,
        req: Request,
        https: bool,
        authority: &str,
        collect: bool,
        open_body: bool,
    ) -> Result<u32, TransportError> {
        let path = if req.path.is_empty() { "/" } else { &req.path };
        check_path(path).map_err(|e| TransportError::Protocol(format!("path `{path}`: {e}")))?;
        let id = self.next_id;
        self.next_id += 2;
        let length = (!open_body
            && !req.body.is_empty()
            && !req.headers.contains_key(http::header::CONTENT_LENGTH))
        .then_some(req.body.len());
        let end = if req.body.is_empty() && !open_body {
            END_STREAM
        } else {
            0
        };
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
            trailers: None,
            data: VecDeque::new(),
            ended: false,
            error: None,
            reset: false,
            waker: None,
            sent_end: req.body.is_empty() && !open_body,
            body: req.body,
            more: VecDeque::new(),
            body_open: open_body,
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
    pub(super) fn finish(&mut self, id: u32, wakes: &mut Vec<Waker>) {
        self.release(id, wakes);
        self.leave(id, wakes);
    }

    /// Forgets stream `id`, resetting it if it is still open on the server's side.
    pub(super) fn release(&mut self, id: u32, wakes: &mut Vec<Waker>) {
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

    /// A frame on stream `id` that is not open: fine for a stream we released (its late
    /// frames), an error for one never opened.
    pub(super) fn unknown_stream(&self, id: u32, kind: &str) -> Result<(), ConnectionError> {
        if id == 0 || id >= self.next_id || id.is_multiple_of(2) {
            return Err(ConnectionError::new(
                PROTOCOL_ERROR,
                format!("{kind} on stream {id}, which we never opened"),
            ));
        }
        Ok(())
    }

    pub(super) fn headers(&mut self, f: Frame, me: u32, wakes: &mut Vec<Waker>) -> Filed {
        let (id, flags) = (f.id, f.flags);
        let mut block = frame::unpad(flags, f.payload, "HEADERS")?;
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

    pub(super) fn continuation(&mut self, f: &Frame, me: u32, wakes: &mut Vec<Waker>) -> Filed {
        let (id, frame) = (f.id, &f.payload[..]);
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
        if f.flags & END_HEADERS == 0 {
            return Ok(());
        }
        self.continuing = None;
        let block = std::mem::take(&mut self.block);
        let r = self.header_block(id, end, &block, me, wakes);
        self.block = block;
        if self.block.capacity() > KEEP_BLOCK {
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
    ) -> Filed {
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
    ) -> Filed {
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
        } else {
            match trailers(&mut self.fields) {
                Ok(t) => s.trailers = Some(t),
                Err(what) => {
                    self.malformed(i, what, wakes);
                    return Ok(());
                }
            }
        }
        s.ended |= end;
        self.settle(i, me, wakes);
        Ok(())
    }

    /// A response that breaks HTTP/2's rules for one stream: that stream fails as a
    /// protocol error and is reset; the connection goes on.
    pub(super) fn malformed(&mut self, i: usize, what: String, wakes: &mut Vec<Waker>) {
        let id = self.streams[i].id;
        let what = format!("malformed response on stream {id}: {what}");
        self.stream_error(i, PROTOCOL_ERROR, what, wakes);
    }

    /// A `kind` frame on a stream the server already ended (half-closed, RFC 9113 §5.1): a
    /// stream error, STREAM_CLOSED; the whole response stands.
    pub(super) fn after_end(&mut self, i: usize, kind: &str, wakes: &mut Vec<Waker>) {
        let id = self.streams[i].id;
        let what = format!("{kind} on stream {id} after its end");
        self.stream_error(i, STREAM_CLOSED, what, wakes);
    }

    /// An error of the server's on one stream (RFC 9113 §5.4.2): the stream is reset with
    /// `code` and fails, unless its response is already whole, which stands (as with the
    /// server's own RST_STREAM); a stream that already failed keeps its first error.
    pub(super) fn stream_error(
        &mut self,
        i: usize,
        code: u32,
        what: String,
        wakes: &mut Vec<Waker>,
    ) {
        let s = &mut self.streams[i];
        let id = s.id;
        if !s.ended {
            s.error.get_or_insert_with(|| coded(code, what));
            s.data.clear();
        }
        s.drop_body();
        let reset = std::mem::replace(&mut s.reset, true);
        self.settle(i, 0, wakes);
        if !reset {
            self.rst_stream(id, code);
        }
    }

    pub(super) fn rst_received(&mut self, f: &Frame, me: u32, wakes: &mut Vec<Waker>) -> Filed {
        let id = f.id;
        let code = frame::word("RST_STREAM", &f.payload)?;
        let Some(i) = self.index(id) else {
            return self.unknown_stream(id, "RST_STREAM");
        };
        let s = &mut self.streams[i];
        s.reset = true;
        s.drop_body();
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

    /// After a change to stream `i`: frees its place against MAX_CONCURRENT_STREAMS if it is
    /// closed both ways, and wakes its owner (unless that is the task filing the frame).
    #[inline]
    pub(super) fn settle(&mut self, i: usize, me: u32, wakes: &mut Vec<Waker>) {
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

    fn rst_stream(&mut self, id: u32, code: u32) {
        frame::put_word(&mut self.wbuf, RST_STREAM, id, code);
    }
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

/// Trailers from decoded fields: headers only, no pseudo-header (RFC 9113 §8.1).
fn trailers(fields: &mut Vec<(Name, Bytes)>) -> Result<HeaderMap, String> {
    let mut trailers = HeaderMap::with_capacity(fields.len());
    for (name, value) in fields.drain(..) {
        match name {
            Name::Status | Name::Pseudo => return Err("a pseudo-header in trailers".into()),
            Name::Invalid => return Err("an invalid header name in trailers".into()),
            Name::Header(name) => {
                let value = HeaderValue::from_maybe_shared(value)
                    .map_err(|_| format!("an invalid value for trailer `{name}`"))?;
                trailers.append(name, value);
            }
        }
    }
    Ok(trailers)
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

/// A whole body's chunks as one piece, copied only if it came in more than one.
#[inline]
pub(super) fn concat(data: &mut VecDeque<Bytes>) -> Bytes {
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
