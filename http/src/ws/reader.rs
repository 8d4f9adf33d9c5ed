//! Reads a server's frames out of bytes arriving in pieces split anywhere, and assembles
//! them into messages: fragments joined (a control frame may come between them, §5.4),
//! text checked as UTF-8, Close bodies parsed, a message past the size limit refused at
//! the head of the frame that would pass it, before its bytes are buffered.

use bytes::{Buf as _, Bytes, BytesMut};

use super::{
    Error,
    close::Close,
    frame::{Opcode, parse_head},
};

/// The largest message [`Reader`] takes by default (16 MiB).
pub const DEFAULT_MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// One frame as read (unmasked: a server's frames carry no mask).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The frame ends its message.
    pub fin: bool,
    /// The opcode.
    pub opcode: Opcode,
    /// The payload.
    pub payload: Bytes,
}

/// A message or a control frame from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A whole text message, valid UTF-8.
    Text(String),
    /// A whole binary message.
    Binary(Bytes),
    /// A ping; the socket answers it with a pong carrying the same payload.
    Ping(Bytes),
    /// A pong (to our ping, or unsolicited as a heartbeat).
    Pong(Bytes),
    /// The server's Close frame; nothing may follow it.
    Close(Close),
}

/// The incremental reader: [`Reader::push`] bytes, then take [`Reader::next`] until it
/// returns `Ok(None)`. After an error the connection is to be failed (§7.1.7): the reader
/// does not resynchronise.
#[derive(Debug)]
pub struct Reader {
    buf: BytesMut,
    max: usize,
    /// A fragmented message under way: its opcode (Text or Binary) and its bytes so far.
    partial: Option<(Opcode, Vec<u8>)>,
    /// The server's Close has been read.
    closed: bool,
}

impl Reader {
    /// A reader taking messages up to `max` bytes.
    pub fn new(max: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            max,
            partial: None,
            closed: false,
        }
    }

    /// Adds bytes as they arrived.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The buffer bytes are read into, for a socket that reads straight into it.
    pub(super) fn buffer(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Bytes received and not yet read as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// True once the server's Close has been read.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The next frame, `Ok(None)` until all of it has arrived. Checks the head's rules and
    /// the size limit (a continuation counts with the fragments before it); not the order
    /// of frames, which [`Reader::next`] checks.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, Error> {
        let Some(head) = parse_head(&self.buf)? else {
            return Ok(None);
        };
        let before = match (&self.partial, head.opcode) {
            (Some((_, so_far)), Opcode::Continuation) => so_far.len() as u64,
            _ => 0,
        };
        if !head.opcode.is_control() && before + head.len > self.max as u64 {
            return Err(Error::TooLarge {
                len: before + head.len,
                max: self.max,
            });
        }
        let len = head.len as usize; // within `max`, or at most 125
        let whole = head.head_len + len;
        if self.buf.len() < whole {
            self.buf.reserve(whole - self.buf.len());
            return Ok(None);
        }
        self.buf.advance(head.head_len);
        let payload = self.buf.split_to(len).freeze();
        Ok(Some(Frame {
            fin: head.fin,
            opcode: head.opcode,
            payload,
        }))
    }

    /// The next message or control frame, `Ok(None)` until one is whole.
    #[expect(
        clippy::should_implement_trait,
        reason = "fallible and waits on push; not an Iterator"
    )]
    pub fn next(&mut self) -> Result<Option<Message>, Error> {
        loop {
            let Some(f) = self.next_frame()? else {
                return Ok(None);
            };
            if self.closed {
                return Err(Error::AfterClose(f.opcode));
            }
            match f.opcode {
                Opcode::Ping => return Ok(Some(Message::Ping(f.payload))),
                Opcode::Pong => return Ok(Some(Message::Pong(f.payload))),
                Opcode::Close => {
                    self.closed = true;
                    return Close::parse(&f.payload).map(|c| Some(Message::Close(c)));
                }
                Opcode::Text | Opcode::Binary => {
                    if let Some((op, _)) = &self.partial {
                        return Err(Error::Interleaved {
                            open: *op,
                            new: f.opcode,
                        });
                    }
                    if f.fin {
                        return whole(f.opcode, f.payload).map(Some);
                    }
                    self.partial = Some((f.opcode, f.payload.to_vec()));
                }
                Opcode::Continuation => {
                    let Some((op, so_far)) = &mut self.partial else {
                        return Err(Error::Continuation);
                    };
                    so_far.extend_from_slice(&f.payload);
                    if f.fin {
                        let op = *op;
                        let (_, bytes) = self.partial.take().expect("matched above");
                        return whole(op, Bytes::from(bytes)).map(Some);
                    }
                }
            }
        }
    }
}

/// A whole message of type `op`: text must be UTF-8.
fn whole(op: Opcode, payload: Bytes) -> Result<Message, Error> {
    if op == Opcode::Binary {
        return Ok(Message::Binary(payload));
    }
    match String::from_utf8(Vec::from(payload)) {
        Ok(s) => Ok(Message::Text(s)),
        Err(e) => Err(Error::Utf8 {
            offset: e.utf8_error().valid_up_to(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ws::{close::CloseCode, frame::write};

    fn frame(out: &mut Vec<u8>, fin: bool, op: Opcode, payload: &[u8]) {
        write(out, fin, op, payload, None);
    }

    fn read_all(bytes: &[u8], max: usize) -> Result<Vec<Message>, Error> {
        let mut r = Reader::new(max);
        r.push(bytes);
        let mut out = Vec::new();
        while let Some(m) = r.next()? {
            out.push(m);
        }
        Ok(out)
    }

    /// Text in three fragments with a ping and a pong between, a binary message, a close.
    fn conversation() -> Vec<u8> {
        let mut b = Vec::new();
        frame(&mut b, false, Opcode::Text, "héllo ".as_bytes());
        frame(
            &mut b,
            false,
            Opcode::Continuation,
            &"wörld".as_bytes()[..2],
        );
        frame(&mut b, true, Opcode::Ping, b"p");
        frame(
            &mut b,
            false,
            Opcode::Continuation,
            &"wörld".as_bytes()[2..],
        );
        frame(&mut b, true, Opcode::Pong, b"");
        frame(&mut b, true, Opcode::Continuation, b"!");
        frame(&mut b, true, Opcode::Binary, &[0, 1, 2]);
        frame(&mut b, true, Opcode::Close, b"\x03\xe8done");
        b
    }

    fn expected() -> Vec<Message> {
        vec![
            Message::Ping(Bytes::from_static(b"p")),
            Message::Pong(Bytes::new()),
            Message::Text("héllo wörld!".into()),
            Message::Binary(Bytes::from_static(&[0, 1, 2])),
            Message::Close(Close::new(CloseCode::NORMAL, "done")),
        ]
    }

    #[test]
    fn fragments_and_control_frames_between_them() {
        assert_eq!(read_all(&conversation(), 1024).unwrap(), expected());
    }

    #[test]
    fn every_split_in_two_and_byte_by_byte() {
        let bytes = conversation();
        for cut in 0..=bytes.len() {
            let mut r = Reader::new(1024);
            let mut got = Vec::new();
            for piece in [&bytes[..cut], &bytes[cut..]] {
                r.push(piece);
                while let Some(m) = r.next().unwrap() {
                    got.push(m);
                }
            }
            assert_eq!(got, expected(), "cut at {cut}");
        }
        let mut r = Reader::new(1024);
        let mut got = Vec::new();
        for b in &bytes {
            r.push(std::slice::from_ref(b));
            while let Some(m) = r.next().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, expected());
        assert_eq!(r.buffered(), 0);
        assert!(r.is_closed());
    }

    #[test]
    fn the_size_limit_counts_fragments_and_fails_at_the_head() {
        let mut b = Vec::new();
        frame(&mut b, false, Opcode::Binary, &[0; 6]);
        frame(&mut b, true, Opcode::Continuation, &[0; 5]);
        assert!(read_all(&b, 11).is_ok());
        assert_eq!(
            read_all(&b, 10).unwrap_err().to_string(),
            "a message of 11 bytes, over the 10-byte limit"
        );
        // A head claiming 2^62 bytes fails as soon as it is read.
        let mut r = Reader::new(1 << 20);
        r.push(&[0x82, 0x7f, 0x40, 0, 0, 0, 0, 0, 0, 0]);
        assert!(matches!(r.next(), Err(Error::TooLarge { .. })));
    }

    #[test]
    fn order_errors() {
        let mut b = Vec::new();
        frame(&mut b, true, Opcode::Continuation, b"x");
        assert_eq!(
            read_all(&b, 100).unwrap_err().to_string(),
            "a continuation frame with no message to continue"
        );
        let mut b = Vec::new();
        frame(&mut b, false, Opcode::Text, b"x");
        frame(&mut b, true, Opcode::Binary, b"y");
        assert_eq!(
            read_all(&b, 100).unwrap_err().to_string(),
            "a new Binary message inside a fragmented Text message"
        );
        let mut b = Vec::new();
        frame(&mut b, true, Opcode::Close, b"");
        frame(&mut b, true, Opcode::Text, b"late");
        assert_eq!(
            read_all(&b, 100).unwrap_err().to_string(),
            "a Text frame after the server's Close"
        );
    }

    #[test]
    fn text_must_be_utf8_but_may_split_a_character_across_fragments() {
        let mut b = Vec::new();
        frame(&mut b, true, Opcode::Text, b"ok\xc3");
        assert_eq!(
            read_all(&b, 100).unwrap_err().to_string(),
            "a text message that is not UTF-8 (from byte 2)"
        );
        let mut b = Vec::new();
        frame(&mut b, false, Opcode::Text, b"\xc3");
        frame(&mut b, true, Opcode::Continuation, b"\xa9");
        assert_eq!(read_all(&b, 100).unwrap(), [Message::Text("é".into())]);
    }

    #[test]
    fn a_bad_close_body_is_an_error() {
        let mut b = Vec::new();
        frame(&mut b, true, Opcode::Close, b"\x03\xee");
        assert_eq!(
            read_all(&b, 100).unwrap_err().to_string(),
            "close code 1006 may not be sent in a Close frame"
        );
    }
}
