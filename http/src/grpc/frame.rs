//! gRPC's message framing inside an HTTP/2 body: each message is a 5-byte prefix — a
//! compressed flag (0 or 1) and the length as a big-endian u32 — then that many bytes,
//! compressed with the call's `grpc-encoding` if the flag is 1
//! (PROTOCOL-HTTP2.md, "Length-Prefixed-Message").
//!
//! [`encode`] frames one message for a request body; [`Decoder`] takes a response body's
//! DATA as it arrives, split anywhere, and yields whole messages.

use std::io::{Read as _, Write as _};

use bytes::{Buf as _, Bytes, BytesMut};

use super::Error;

/// The prefix before every message: the compressed flag and a 4-byte length.
pub const PREFIX_LEN: usize = 5;

/// The largest message [`Decoder`] takes by default: grpc-go's and grpc-java's default
/// receive limit (4 MiB).
pub const DEFAULT_MAX_MESSAGE: usize = 4 * 1024 * 1024;

/// How a call's messages are compressed: its `grpc-encoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// No compression; a message with the compressed flag set is then an error.
    #[default]
    Identity,
    /// gzip (RFC 1952), the one every gRPC implementation ships.
    Gzip,
}

impl Encoding {
    /// The `grpc-encoding` value.
    pub fn name(self) -> &'static str {
        match self {
            Self::Identity => "identity",
            Self::Gzip => "gzip",
        }
    }

    /// The encoding a `grpc-encoding` header names; `None` for one herd cannot decode
    /// (deflate, snappy, zstd, …).
    pub fn from_name(name: &str) -> Option<Self> {
        match name.trim() {
            "identity" => Some(Self::Identity),
            "gzip" => Some(Self::Gzip),
            _ => None,
        }
    }

    /// The encoding a response's headers declare (`grpc-encoding`; identity without one).
    pub fn from_headers(headers: &http::HeaderMap) -> Result<Self, Error> {
        let Some(value) = headers.get("grpc-encoding") else {
            return Ok(Self::Identity);
        };
        let name = String::from_utf8_lossy(value.as_bytes());
        Self::from_name(&name).ok_or_else(|| Error::UnsupportedEncoding(name.into_owned()))
    }
}

/// Appends `message` to `out` as one length-prefixed message, gzip-compressed when
/// `encoding` is [`Encoding::Gzip`] (the request then carries `grpc-encoding: gzip`).
pub fn encode(message: &[u8], encoding: Encoding, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; PREFIX_LEN]);
    let flag = match encoding {
        Encoding::Identity => {
            out.extend_from_slice(message);
            0
        }
        Encoding::Gzip => {
            let mut gz = flate2::write::GzEncoder::new(&mut *out, flate2::Compression::default());
            gz.write_all(message)
                .and_then(|()| gz.try_finish())
                .expect("writing to a Vec cannot fail");
            drop(gz);
            1
        }
    };
    let len = out.len() - start - PREFIX_LEN;
    let len = u32::try_from(len).expect("a gRPC message fits in 4 GiB");
    out[start] = flag;
    out[start + 1..start + PREFIX_LEN].copy_from_slice(&len.to_be_bytes());
}

/// One message framed on its own, for a request body of one message (a unary call).
pub fn encode_one(message: &[u8], encoding: Encoding) -> Bytes {
    let mut out = Vec::with_capacity(PREFIX_LEN + message.len());
    encode(message, encoding, &mut out);
    out.into()
}

/// Reads messages out of a response body arriving in pieces split anywhere.
///
/// [`Decoder::push`] each DATA chunk, then take [`Decoder::next`] until it returns
/// `Ok(None)`; at the body's end, [`Decoder::finish`] says whether a message was cut short.
/// A message whose prefix declares more than the maximum fails as soon as the prefix is
/// read, before its bytes are buffered.
#[derive(Debug)]
pub struct Decoder {
    buf: BytesMut,
    max: usize,
    encoding: Encoding,
    /// The prefix of the message being buffered: compressed flag and length.
    pending: Option<(bool, usize)>,
    /// Messages read so far, for errors that say which one was wrong.
    messages: u64,
}

impl Decoder {
    /// A decoder taking messages up to `max` bytes (after decompression) in `encoding`.
    pub fn new(max: usize, encoding: Encoding) -> Self {
        Self {
            buf: BytesMut::new(),
            max,
            encoding,
            pending: None,
            messages: 0,
        }
    }

    /// Sets the encoding compressed messages are in, once the response head names it.
    pub fn set_encoding(&mut self, encoding: Encoding) {
        self.encoding = encoding;
    }

    /// Adds a piece of the body.
    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole message (decompressed), `Ok(None)` until more bytes arrive.
    #[expect(
        clippy::should_implement_trait,
        reason = "fallible and waits on push; not an Iterator"
    )]
    pub fn next(&mut self) -> Result<Option<Bytes>, Error> {
        let (compressed, len) = match self.pending {
            Some(p) => p,
            None => {
                if self.buf.len() < PREFIX_LEN {
                    return Ok(None);
                }
                let flag = self.buf[0];
                let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]);
                let len = len as usize;
                let compressed = match flag {
                    0 => false,
                    1 => true,
                    _ => {
                        return Err(Error::BadFlag {
                            flag,
                            message: self.messages + 1,
                        });
                    }
                };
                if compressed && self.encoding == Encoding::Identity {
                    return Err(Error::CompressedWithoutEncoding {
                        message: self.messages + 1,
                    });
                }
                if len > self.max {
                    return Err(Error::TooLarge {
                        len,
                        max: self.max,
                        message: self.messages + 1,
                    });
                }
                self.buf.advance(PREFIX_LEN);
                self.pending = Some((compressed, len));
                (compressed, len)
            }
        };
        if self.buf.len() < len {
            self.buf.reserve(len - self.buf.len());
            return Ok(None);
        }
        self.pending = None;
        let body = self.buf.split_to(len).freeze();
        let body = if compressed {
            self.decompress(&body)?
        } else {
            body
        };
        self.messages += 1;
        Ok(Some(body))
    }

    fn decompress(&self, body: &[u8]) -> Result<Bytes, Error> {
        let message = self.messages + 1;
        let mut out = Vec::new();
        match self.encoding {
            Encoding::Identity => unreachable!("refused at the prefix"),
            Encoding::Gzip => {
                // One byte past the limit tells a message over it from one exactly at it,
                // without inflating a bomb to its end.
                flate2::read::GzDecoder::new(body)
                    .take(self.max as u64 + 1)
                    .read_to_end(&mut out)
                    .map_err(|e| Error::Decompress {
                        encoding: self.encoding.name(),
                        message,
                        reason: e.to_string(),
                    })?;
            }
        }
        if out.len() > self.max {
            return Err(Error::InflatesTooLarge {
                max: self.max,
                message,
            });
        }
        Ok(out.into())
    }

    /// Messages returned so far.
    pub fn messages(&self) -> u64 {
        self.messages
    }

    /// At the body's end: an error if it ended inside a message.
    pub fn finish(&self) -> Result<(), Error> {
        let have = self.buf.len();
        match self.pending {
            None if have == 0 => Ok(()),
            None => Err(Error::Truncated {
                message: self.messages + 1,
                have,
                need: PREFIX_LEN,
                what: "prefix",
            }),
            Some((_, len)) => Err(Error::Truncated {
                message: self.messages + 1,
                have,
                need: len,
                what: "message",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(d: &mut Decoder) -> Vec<Bytes> {
        let mut out = Vec::new();
        while let Some(m) = d.next().unwrap() {
            out.push(m);
        }
        out
    }

    #[test]
    fn prefix_is_flag_then_big_endian_length() {
        assert_eq!(
            &encode_one(b"abc", Encoding::Identity)[..],
            b"\0\0\0\0\x03abc"
        );
        assert_eq!(&encode_one(b"", Encoding::Identity)[..], b"\0\0\0\0\0");
    }

    #[test]
    fn every_split_of_three_messages_yields_the_three() {
        let mut body = Vec::new();
        for m in [&b"first"[..], b"", &[7u8; 300][..]] {
            encode(m, Encoding::Identity, &mut body);
        }
        for a in 0..=body.len() {
            for b in a..=body.len() {
                let mut d = Decoder::new(1024, Encoding::Identity);
                let mut got = Vec::new();
                for piece in [&body[..a], &body[a..b], &body[b..]] {
                    d.push(piece);
                    got.extend(all(&mut d));
                }
                d.finish().unwrap();
                assert_eq!(got.len(), 3, "split at {a}, {b}");
                assert_eq!(&got[0][..], b"first");
                assert!(got[1].is_empty());
                assert_eq!(&got[2][..], &[7u8; 300][..]);
            }
        }
    }

    #[test]
    fn gzip_round_trip() {
        let message = b"a message that compresses, a message that compresses".repeat(20);
        let body = encode_one(&message, Encoding::Gzip);
        assert_eq!(body[0], 1);
        assert!(body.len() < message.len());
        let mut d = Decoder::new(4096, Encoding::Gzip);
        d.push(&body);
        assert_eq!(&d.next().unwrap().unwrap()[..], &message[..]);
        assert_eq!(d.next().unwrap(), None);
    }

    #[test]
    fn a_length_over_the_limit_fails_at_the_prefix() {
        let mut d = Decoder::new(10, Encoding::Identity);
        d.push(&[0, 0, 0, 0, 11]);
        let e = d.next().unwrap_err();
        assert_eq!(
            e.to_string(),
            "message 1 declares 11 bytes, over the 10-byte limit"
        );
        // Exactly at the limit is fine.
        let mut d = Decoder::new(10, Encoding::Identity);
        d.push(&encode_one(&[1; 10], Encoding::Identity));
        assert_eq!(d.next().unwrap().unwrap().len(), 10);
    }

    #[test]
    fn a_gzip_bomb_stops_at_the_limit() {
        let body = encode_one(&[0u8; 1 << 20], Encoding::Gzip);
        assert!(body.len() < 4096, "{}", body.len());
        let mut d = Decoder::new(4096, Encoding::Gzip);
        d.push(&body);
        assert_eq!(
            d.next().unwrap_err().to_string(),
            "message 1 inflates past the 4096-byte limit"
        );
    }

    #[test]
    fn the_peers_bad_bytes_are_named() {
        let mut d = Decoder::new(100, Encoding::Identity);
        d.push(&[2, 0, 0, 0, 0]);
        assert_eq!(
            d.next().unwrap_err().to_string(),
            "message 1 has compressed flag 2 (only 0 and 1 exist)"
        );
        let mut d = Decoder::new(100, Encoding::Identity);
        d.push(&[1, 0, 0, 0, 0]);
        assert!(matches!(
            d.next(),
            Err(Error::CompressedWithoutEncoding { message: 1 })
        ));
        let mut d = Decoder::new(100, Encoding::Gzip);
        d.push(&[1, 0, 0, 0, 3, 1, 2, 3]);
        assert!(matches!(d.next(), Err(Error::Decompress { .. })));
    }

    #[test]
    fn a_body_ending_inside_a_message_is_truncated() {
        let mut d = Decoder::new(100, Encoding::Identity);
        d.push(&[0, 0, 0]);
        assert_eq!(d.next().unwrap(), None);
        assert_eq!(
            d.finish().unwrap_err().to_string(),
            "the body ended inside message 1: 3 of its 5 prefix bytes"
        );
        let mut d = Decoder::new(100, Encoding::Identity);
        d.push(&[0, 0, 0, 0, 9, 1, 2]);
        assert_eq!(d.next().unwrap(), None);
        assert_eq!(
            d.finish().unwrap_err().to_string(),
            "the body ended inside message 1: 2 of its 9 message bytes"
        );
    }

    #[test]
    fn encoding_names() {
        assert_eq!(Encoding::from_name("gzip"), Some(Encoding::Gzip));
        assert_eq!(Encoding::from_name("identity"), Some(Encoding::Identity));
        assert_eq!(Encoding::from_name("zstd"), None);
        let mut h = http::HeaderMap::new();
        assert_eq!(Encoding::from_headers(&h).unwrap(), Encoding::Identity);
        h.insert("grpc-encoding", "snappy".parse().unwrap());
        assert_eq!(
            Encoding::from_headers(&h).unwrap_err().to_string(),
            "the server compressed its messages with `snappy`; herd decodes gzip and identity"
        );
    }
}
