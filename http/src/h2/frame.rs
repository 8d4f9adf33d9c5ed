//! HTTP/2 frames (RFC 9113 §4, §6): their types, flags and error codes, taking one frame
//! off the read buffer, padding, and writing the frames the client sends.

use bytes::{Buf as _, Bytes, BytesMut};

use crate::TransportError;

pub(super) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types (RFC 9113 §6).
pub(super) const DATA: u8 = 0x0;
pub(super) const HEADERS: u8 = 0x1;
pub(super) const PRIORITY: u8 = 0x2;
pub(super) const RST_STREAM: u8 = 0x3;
pub(super) const SETTINGS: u8 = 0x4;
pub(super) const PUSH_PROMISE: u8 = 0x5;
pub(super) const PING: u8 = 0x6;
pub(super) const GOAWAY: u8 = 0x7;
pub(super) const WINDOW_UPDATE: u8 = 0x8;
pub(super) const CONTINUATION: u8 = 0x9;

// Flags.
pub(super) const END_STREAM: u8 = 0x1;
pub(super) const ACK: u8 = 0x1;
pub(super) const END_HEADERS: u8 = 0x4;
pub(super) const PADDED: u8 = 0x8;
pub(super) const PRIORITY_FLAG: u8 = 0x20;

// Error codes (RFC 9113 §7).
pub(super) const NO_ERROR: u32 = 0x0;
pub(super) const PROTOCOL_ERROR: u32 = 0x1;
pub(super) const FLOW_CONTROL_ERROR: u32 = 0x3;
pub(super) const STREAM_CLOSED: u32 = 0x5;
pub(super) const FRAME_SIZE_ERROR: u32 = 0x6;
pub(super) const CANCEL: u32 = 0x8;
pub(super) const COMPRESSION_ERROR: u32 = 0x9;

/// The largest frame we accept: the protocol's default, which we do not raise.
pub(super) const MAX_FRAME: usize = 16_384;
pub(super) const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// One frame as it arrived: its header's fields and its payload.
pub(super) struct Frame {
    pub kind: u8,
    pub flags: u8,
    /// The stream, its reserved bit cleared.
    pub id: u32,
    pub payload: Bytes,
}

/// Takes the first frame off `buf` once it is whole; `None` before (with room reserved for
/// the rest of it). A frame over [`MAX_FRAME`] is an error as soon as its header is in.
#[inline]
pub(super) fn read(buf: &mut BytesMut) -> Result<Option<Frame>, ConnectionError> {
    if buf.len() < 9 {
        return Ok(None);
    }
    let len = usize::from(buf[0]) << 16 | usize::from(buf[1]) << 8 | usize::from(buf[2]);
    if len > MAX_FRAME {
        return Err(ConnectionError::new(
            FRAME_SIZE_ERROR,
            format!("a {len}-byte frame, above the {MAX_FRAME} bytes we accept"),
        ));
    }
    if buf.len() < 9 + len {
        buf.reserve(9 + len - buf.len());
        return Ok(None);
    }
    let (kind, flags) = (buf[3], buf[4]);
    let id = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]) & MAX_STREAM_ID;
    let mut payload = buf.split_to(9 + len).freeze();
    payload.advance(9);
    Ok(Some(Frame {
        kind,
        flags,
        id,
        payload,
    }))
}

/// The payload of a frame that may be PADDED, without its padding.
#[inline]
pub(super) fn unpad(flags: u8, mut frame: Bytes, kind: &str) -> Result<Bytes, ConnectionError> {
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

/// A 4-byte payload (RST_STREAM's code, WINDOW_UPDATE's increment) as a number; `kind`
/// names the frame in the error for any other length.
#[inline]
pub(super) fn word(kind: &str, payload: &[u8]) -> Result<u32, ConnectionError> {
    match *payload {
        [a, b, c, d] => Ok(u32::from_be_bytes([a, b, c, d])),
        _ => Err(ConnectionError::size(kind, payload.len())),
    }
}

#[inline]
pub(super) fn frame_bytes(len: usize, kind: u8, flags: u8, id: u32) -> [u8; 9] {
    let [_, l0, l1, l2] = (len as u32).to_be_bytes();
    let [i0, i1, i2, i3] = id.to_be_bytes();
    [l0, l1, l2, kind, flags, i0, i1, i2, i3]
}

#[inline]
pub(super) fn frame_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, id: u32) {
    out.extend_from_slice(&frame_bytes(len, kind, flags, id));
}

/// A frame whose payload is one 4-byte number: WINDOW_UPDATE, RST_STREAM.
#[inline]
pub(super) fn put_word(out: &mut Vec<u8>, kind: u8, id: u32, n: u32) {
    frame_head(out, 4, kind, 0, id);
    out.extend_from_slice(&n.to_be_bytes());
}

/// A GOAWAY that processed no stream of the server's (it opens none), with `debug` as its
/// debug data.
pub(super) fn put_goaway(out: &mut Vec<u8>, code: u32, debug: &[u8]) {
    frame_head(out, 8 + debug.len(), GOAWAY, 0, 0);
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(debug);
}

/// What filing one frame comes to: nothing more, or the connection fails.
pub(super) type Filed = Result<(), ConnectionError>;

/// A connection error of the server's making, and the code our GOAWAY gives it.
pub(super) struct ConnectionError {
    pub code: u32,
    pub what: String,
}

impl ConnectionError {
    pub fn new(code: u32, what: String) -> Self {
        Self { code, what }
    }

    pub fn size(kind: &str, len: usize) -> Self {
        Self::new(FRAME_SIZE_ERROR, format!("a {kind} frame of {len} bytes"))
    }

    /// A frame `kind` that belongs to the connection (stream 0) arrived on stream `id`.
    pub fn on_connection_only(kind: &str, id: u32) -> Result<(), Self> {
        if id == 0 {
            return Ok(());
        }
        Err(Self::new(PROTOCOL_ERROR, format!("{kind} on stream {id}")))
    }
}

/// An RST_STREAM's or GOAWAY's error code as the error it means, sorted as hyper's errors
/// were: codes that say one side broke HTTP/2 (or will not speak it) are protocol errors;
/// the rest (CANCEL, REFUSED_STREAM, a plain GOAWAY…) end a healthy exchange early.
pub(super) fn coded(code: u32, what: String) -> TransportError {
    match code {
        PROTOCOL_ERROR | FLOW_CONTROL_ERROR | FRAME_SIZE_ERROR | COMPRESSION_ERROR | 0xd => {
            TransportError::Protocol(what)
        }
        _ => TransportError::Reset(what),
    }
}

/// An error code's name (RFC 9113 §7).
pub(super) fn reason(code: u32) -> String {
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
