//! Flow control (RFC 9113 §5.2, §6.9): DATA in under our windows, which are given back as
//! data is read; request bodies out as DATA within the server's windows; WINDOW_UPDATE
//! both ways.

use std::task::Waker;

use bytes::Buf as _;

use super::{
    Inner,
    frame::{
        self, ConnectionError, DATA, END_STREAM, FLOW_CONTROL_ERROR, Filed, Frame, MAX_STREAM_ID,
        PROTOCOL_ERROR, WINDOW_UPDATE, frame_head,
    },
};

/// Our SETTINGS_INITIAL_WINDOW_SIZE: how far a server may send into one stream before we
/// read it. Large, so a long body or event stream never waits on a round trip for more
/// window; bounded, so a stream nobody reads holds at most this much.
pub(super) const STREAM_WINDOW: u32 = 4 << 20;
/// The connection's receive window, raised from the protocol's 65 535 in the preface and
/// given back as data arrives, so one slow stream never stalls the others.
pub(super) const CONNECTION_WINDOW: u32 = 16 << 20;
pub(super) const MAX_WINDOW: i64 = (1 << 31) - 1;
/// Request body bytes queued ahead of the socket, at most: a large body is framed as the
/// socket takes it, not copied whole.
const WRITE_AHEAD: usize = 64 * 1024;

/// The credit to give back, once what was read since the last WINDOW_UPDATE (`unacked`)
/// is half of the `full` window: taken from `unacked` and put back into `window`.
#[inline]
pub(super) fn credit(unacked: &mut u32, window: &mut i64, full: u32) -> Option<u32> {
    if *unacked < full / 2 {
        return None;
    }
    let n = std::mem::take(unacked);
    *window += i64::from(n);
    Some(n)
}

impl Inner {
    pub(super) fn data(&mut self, f: Frame, me: u32, wakes: &mut Vec<Waker>) -> Filed {
        let Frame {
            id,
            flags,
            payload: frame,
            ..
        } = f;
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
        if let Some(n) = credit(
            &mut self.recv_unacked,
            &mut self.recv_window,
            CONNECTION_WINDOW,
        ) {
            self.window_update(0, n);
        }
        let data = frame::unpad(flags, frame, "DATA")?;
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
        let credited = if s.collect { len } else { len - data.len() };
        if !data.is_empty() {
            s.data.push_back(data);
        }
        if flags & END_STREAM != 0 {
            s.ended = true;
        } else {
            s.unacked += credited as u32;
            if let Some(n) = credit(&mut s.unacked, &mut s.recv_window, STREAM_WINDOW) {
                self.window_update(id, n);
            }
        }
        self.settle(i, me, wakes);
        Ok(())
    }

    /// Frames request body bytes as DATA, as far as the windows and the write-ahead allow;
    /// the last piece of a body carries END_STREAM, and a streamed body finished with
    /// nothing left to send ends with an empty DATA frame.
    pub(super) fn frame_bodies(&mut self) {
        for s in &mut self.streams {
            loop {
                while s.body.is_empty() {
                    match s.more.pop_front() {
                        Some(next) => s.body = next,
                        None => break,
                    }
                }
                if s.body.is_empty()
                    || s.send_window <= 0
                    || self.send_window <= 0
                    || self.wbuf.len() - self.wpos >= WRITE_AHEAD
                {
                    break;
                }
                // A server's larger SETTINGS_MAX_FRAME_SIZE is no reason to copy more than
                // the write-ahead at once.
                let n = s
                    .body
                    .len()
                    .min(self.max_frame.min(WRITE_AHEAD))
                    .min(s.send_window as usize)
                    .min(self.send_window as usize);
                let last = n == s.body.len() && s.more.is_empty() && !s.body_open;
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
            if !s.sent_end && !s.reset && !s.body_open && s.body.is_empty() && s.more.is_empty() {
                frame_head(&mut self.wbuf, 0, DATA, END_STREAM, s.id);
                s.sent_end = true;
            }
        }
    }

    pub(super) fn window_update_received(&mut self, f: &Frame, wakes: &mut Vec<Waker>) -> Filed {
        let id = f.id;
        let n = i64::from(frame::word("WINDOW_UPDATE", &f.payload)? & MAX_STREAM_ID);
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

    /// Gives the server `n` more bytes of window on stream `id` (0: the connection).
    #[inline]
    pub(super) fn window_update(&mut self, id: u32, n: u32) {
        frame::put_word(&mut self.wbuf, WINDOW_UPDATE, id, n);
    }
}
