//! The connection as a whole: the preface and our SETTINGS, the server's SETTINGS, PING,
//! GOAWAY both ways, and the errors that end the connection for every stream on it.

use std::task::{Context, Waker};

use super::{
    Inner,
    flow::{CONNECTION_WINDOW, MAX_WINDOW, STREAM_WINDOW},
    frame::{
        self, ACK, CONTINUATION, ConnectionError, DATA, FLOW_CONTROL_ERROR, Filed, Frame, GOAWAY,
        HEADERS, MAX_STREAM_ID, NO_ERROR, PING, PREFACE, PRIORITY, PROTOCOL_ERROR, PUSH_PROMISE,
        RST_STREAM, SETTINGS, WINDOW_UPDATE, coded, frame_head, reason,
    },
    hpack,
};
use crate::TransportError;

/// Our SETTINGS_HEADER_TABLE_SIZE. 0: the server then indexes nothing for us. Servers like
/// nginx add every response's `date`, `server`, `content-type` and `content-length` to the
/// client's table, which then holds ~4 KiB of entries per connection, churned on every
/// response: at 10 000 players that was 60 MiB of RSS, and 10 % of the CPU per request. The
/// price is a few header bytes per response from servers that would re-use their entries.
pub(super) const HEADER_TABLE_SIZE: usize = 0;
/// Streams opened at once before the server's SETTINGS say how many it takes: h2's
/// default, and the least RFC 9113 §6.5.2 asks a server to allow.
pub(super) const STREAMS_BEFORE_SETTINGS: usize = 100;

/// What the client writes first: the preface, our SETTINGS and the connection window.
pub(super) fn preface() -> Vec<u8> {
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
    frame::put_word(&mut preface, WINDOW_UPDATE, 0, CONNECTION_WINDOW - 65_535);
    preface
}

impl Inner {
    /// True once no new stream may start.
    #[inline]
    pub(super) fn closing(&self) -> bool {
        self.dead.is_some() || self.goaway.is_some() || self.next_id > MAX_STREAM_ID
    }

    /// Why a new stream cannot start, if it cannot.
    pub(super) fn refusal(&self) -> Option<TransportError> {
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

    /// The error for a connection that broke under its streams: a reset, or a protocol
    /// error if an h2c server never spoke HTTP/2 or the server said why in its GOAWAY.
    pub(super) fn broken(&self, what: String) -> TransportError {
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
    pub(super) fn fail(&mut self, e: TransportError, wakes: &mut Vec<Waker>) {
        if self.dead.is_some() {
            return;
        }
        for s in &mut self.streams {
            s.reset = true;
            if s.error.is_none() && !s.ended {
                s.error = Some(e.clone());
            }
            s.drop_body();
            wakes.extend(s.waker.take());
        }
        wakes.extend(self.queued.drain(..).map(|(_, w)| w));
        self.dead = Some(e);
    }

    /// Fails the connection for a protocol error of the server's, telling it why in a
    /// GOAWAY first.
    pub(super) fn fail_connection(
        &mut self,
        cx: &mut Context<'_>,
        e: ConnectionError,
        wakes: &mut Vec<Waker>,
    ) {
        frame::put_goaway(&mut self.wbuf, e.code, e.what.as_bytes());
        // Failed first: that drops the request bodies, so the flush frames no DATA after
        // the GOAWAY.
        self.fail(TransportError::Protocol(e.what), wakes);
        let _ = self.flush(cx);
    }

    /// Files every whole frame in the read buffer.
    pub(super) fn frames(&mut self, me: u32, wakes: &mut Vec<Waker>) -> Filed {
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
            let Some(f) = frame::read(&mut self.rbuf)? else {
                return Ok(());
            };
            let (kind, id, len) = (f.kind, f.id, f.payload.len());
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
            match kind {
                DATA => self.data(f, me, wakes)?,
                HEADERS => self.headers(f, me, wakes)?,
                CONTINUATION => self.continuation(&f, me, wakes)?,
                PRIORITY if len != 5 => return Err(ConnectionError::size("PRIORITY", len)),
                RST_STREAM => self.rst_received(&f, me, wakes)?,
                SETTINGS => self.settings(&f, wakes)?,
                PUSH_PROMISE => {
                    return Err(ConnectionError::new(
                        PROTOCOL_ERROR,
                        "a PUSH_PROMISE although we disabled push".into(),
                    ));
                }
                PING => self.ping(&f)?,
                GOAWAY => self.goaway_received(&f, wakes)?,
                WINDOW_UPDATE => self.window_update_received(&f, wakes)?,
                _ => {} // unknown frame types are ignored (RFC 9113 §4.1)
            }
        }
    }

    fn ping(&mut self, f: &Frame) -> Filed {
        ConnectionError::on_connection_only("PING", f.id)?;
        if f.payload.len() != 8 {
            return Err(ConnectionError::size("PING", f.payload.len()));
        }
        if f.flags & ACK == 0 {
            frame_head(&mut self.wbuf, 8, PING, ACK, 0);
            self.wbuf.extend_from_slice(&f.payload);
        }
        Ok(())
    }

    fn settings(&mut self, f: &Frame, wakes: &mut Vec<Waker>) -> Filed {
        ConnectionError::on_connection_only("SETTINGS", f.id)?;
        let frame = &f.payload[..];
        if f.flags & ACK != 0 {
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
                0x4 => self.initial_window(value)?,
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

    /// SETTINGS_INITIAL_WINDOW_SIZE: every open stream's send window moves by the change.
    fn initial_window(&mut self, value: u32) -> Filed {
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
        Ok(())
    }

    fn goaway_received(&mut self, f: &Frame, wakes: &mut Vec<Waker>) -> Filed {
        ConnectionError::on_connection_only("GOAWAY", f.id)?;
        let frame = &f.payload[..];
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
                s.drop_body();
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
}
