//! WebSocket frames (RFC 6455 §5.2): the head — FIN, three reserved bits, the opcode, the
//! mask bit and a 7-, 16- or 64-bit length, then the masking key — and the payload.
//!
//! [`write()`] writes one frame (a client's are masked with a fresh key from [`Masks`]);
//! [`parse_head`] reads a head off the front of a buffer and checks every rule a frame
//! from a server must keep.

use std::hash::{BuildHasher as _, RandomState};

use super::Error;

/// The largest control frame payload (§5.5).
pub const MAX_CONTROL: usize = 125;

/// A frame's opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// 0x0: a fragment after the first of a message.
    Continuation,
    /// 0x1: a text message (UTF-8), or its first fragment.
    Text,
    /// 0x2: a binary message, or its first fragment.
    Binary,
    /// 0x8: the closing handshake.
    Close,
    /// 0x9: a ping, answered with a pong carrying its payload.
    Ping,
    /// 0xA: a pong.
    Pong,
}

impl Opcode {
    /// The opcode numbered `n`; `None` for the reserved ones.
    pub fn from_u8(n: u8) -> Option<Self> {
        Some(match n {
            0x0 => Self::Continuation,
            0x1 => Self::Text,
            0x2 => Self::Binary,
            0x8 => Self::Close,
            0x9 => Self::Ping,
            0xA => Self::Pong,
            _ => return None,
        })
    }

    /// Its number.
    pub fn number(self) -> u8 {
        match self {
            Self::Continuation => 0x0,
            Self::Text => 0x1,
            Self::Binary => 0x2,
            Self::Close => 0x8,
            Self::Ping => 0x9,
            Self::Pong => 0xA,
        }
    }

    /// True for Close, Ping and Pong, which may come between a message's fragments.
    pub fn is_control(self) -> bool {
        self.number() & 0x8 != 0
    }
}

/// A frame's head, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// The frame ends its message.
    pub fin: bool,
    /// The opcode.
    pub opcode: Opcode,
    /// The payload length.
    pub len: u64,
    /// The head's own length in bytes (2 to 14).
    pub head_len: usize,
}

/// The head at the front of `buf`, `Ok(None)` until all of it has arrived. A server's frame
/// must have the reserved bits clear (no extension was negotiated), a known opcode, no mask
/// (§5.1), a length in the fewest bytes that hold it with the 64-bit one's top bit clear
/// (§5.2), and, for a control frame, FIN set and at most 125 bytes (§5.5).
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, Error> {
    let [b0, b1, rest @ ..] = buf else {
        return Ok(None);
    };
    if b0 & 0x70 != 0 {
        return Err(Error::ReservedBits(b0 & 0x70));
    }
    let opcode = Opcode::from_u8(b0 & 0x0f).ok_or(Error::Opcode(b0 & 0x0f))?;
    let fin = b0 & 0x80 != 0;
    if b1 & 0x80 != 0 {
        return Err(Error::Masked);
    }
    let (len, head_len) = match b1 & 0x7f {
        126 => {
            let Some(&[a, b]) = rest.first_chunk::<2>() else {
                return Ok(None);
            };
            let len = u64::from(u16::from_be_bytes([a, b]));
            if len < 126 {
                return Err(Error::LongLength(len));
            }
            (len, 4)
        }
        127 => {
            let Some(&b) = rest.first_chunk::<8>() else {
                return Ok(None);
            };
            let len = u64::from_be_bytes(b);
            if len >> 63 != 0 {
                return Err(Error::LengthTopBit);
            }
            if len <= 0xffff {
                return Err(Error::LongLength(len));
            }
            (len, 10)
        }
        n => (u64::from(n), 2),
    };
    if opcode.is_control() {
        if !fin {
            return Err(Error::FragmentedControl(opcode));
        }
        if len > MAX_CONTROL as u64 {
            return Err(Error::ControlTooLong { opcode, len });
        }
    }
    Ok(Some(Head {
        fin,
        opcode,
        len,
        head_len,
    }))
}

/// Appends one frame to `out`: masked with `mask` (a client's frames always are, §5.3),
/// or not (`None`: a server's, for tests and the fuzz harness).
pub fn write(out: &mut Vec<u8>, fin: bool, opcode: Opcode, payload: &[u8], mask: Option<[u8; 4]>) {
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    out.push(if fin { 0x80 } else { 0 } | opcode.number());
    match payload.len() {
        n @ 0..=125 => out.push(mask_bit | n as u8),
        n @ 126..=0xffff => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        None => out.extend_from_slice(payload),
        Some(key) => {
            out.extend_from_slice(&key);
            let start = out.len();
            out.extend_from_slice(payload);
            apply_mask(&mut out[start..], key);
        }
    }
}

/// XORs `data` with the masking key, which masks and unmasks alike (§5.3).
pub fn apply_mask(data: &mut [u8], key: [u8; 4]) {
    let word = u32::from_ne_bytes(key);
    let mut chunks = data.chunks_exact_mut(4);
    for c in &mut chunks {
        let v = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]) ^ word;
        c.copy_from_slice(&v.to_ne_bytes());
    }
    for (b, k) in chunks.into_remainder().iter_mut().zip(key) {
        *b ^= k;
    }
}

/// Fresh masking keys (and handshake keys): SipHash, under a key the standard library
/// draws from the OS once per thread, over a counter — unpredictable to anyone who sees
/// the frames, as §5.3 asks, at one hash per frame and no system call.
#[derive(Debug)]
pub struct Masks {
    hasher: RandomState,
    n: u64,
}

impl Default for Masks {
    fn default() -> Self {
        Self::new()
    }
}

impl Masks {
    /// A source with a key of its own.
    pub fn new() -> Self {
        Self {
            hasher: RandomState::new(),
            n: 0,
        }
    }

    /// 64 fresh bits.
    pub fn next_u64(&mut self) -> u64 {
        self.n += 1;
        self.hasher.hash_one(self.n)
    }

    /// A masking key.
    pub fn key(&mut self) -> [u8; 4] {
        (self.next_u64() as u32).to_ne_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(bytes: &[u8]) -> Result<Option<Head>, Error> {
        parse_head(bytes)
    }

    #[test]
    fn lengths_in_7_16_and_64_bits() {
        for n in [0usize, 1, 125, 126, 127, 0xffff, 0x10000, 70_000] {
            let payload = vec![b'x'; n];
            let mut out = Vec::new();
            write(&mut out, true, Opcode::Binary, &payload, None);
            let h = head(&out).unwrap().unwrap();
            assert_eq!(h.len, n as u64);
            assert_eq!(
                h.head_len,
                if n < 126 {
                    2
                } else if n <= 0xffff {
                    4
                } else {
                    10
                }
            );
            assert_eq!(out.len(), h.head_len + n);
            // Any prefix of the head is not yet a head.
            for cut in 0..h.head_len {
                assert_eq!(head(&out[..cut]).unwrap(), None);
            }
        }
    }

    #[test]
    fn client_frames_are_masked() {
        let mut out = Vec::new();
        let key = [1, 2, 3, 4];
        write(&mut out, true, Opcode::Text, b"Hello", Some(key));
        // RFC 6455 §5.7's example, with our key.
        assert_eq!(&out[..6], &[0x81, 0x85, 1, 2, 3, 4]);
        let mut payload = out[6..].to_vec();
        apply_mask(&mut payload, key);
        assert_eq!(payload, b"Hello");
    }

    #[test]
    fn the_rfc_examples_read() {
        // §5.7: an unmasked "Hello", its two fragments, an unmasked ping.
        let h = head(&[0x81, 0x05]).unwrap().unwrap();
        assert_eq!((h.fin, h.opcode, h.len), (true, Opcode::Text, 5));
        let h = head(&[0x01, 0x03]).unwrap().unwrap();
        assert_eq!((h.fin, h.opcode), (false, Opcode::Text));
        let h = head(&[0x80, 0x02]).unwrap().unwrap();
        assert_eq!((h.fin, h.opcode), (true, Opcode::Continuation));
        let h = head(&[0x89, 0x05]).unwrap().unwrap();
        assert_eq!(h.opcode, Opcode::Ping);
        // 256 bytes in a 16-bit length; 64 KiB in a 64-bit one.
        assert_eq!(head(&[0x82, 0x7e, 0x01, 0x00]).unwrap().unwrap().len, 256);
        let h = head(&[0x82, 0x7f, 0, 0, 0, 0, 0, 1, 0, 0])
            .unwrap()
            .unwrap();
        assert_eq!(h.len, 65_536);
    }

    #[test]
    fn broken_rules_are_named() {
        let cases: [(&[u8], &str); 8] = [
            (
                &[0xc1, 0],
                "reserved bits 0x40 set, and no extension was negotiated",
            ),
            (&[0x83, 0], "opcode 0x3 is reserved"),
            (&[0x81, 0x80, 0, 0, 0, 0], "a masked frame from the server"),
            (
                &[0x81, 0x7e, 0, 5],
                "length 5 in a longer form than it needs",
            ),
            (
                &[0x82, 0x7f, 0, 0, 0, 0, 0, 0, 0xff, 0xff],
                "length 65535 in a longer form than it needs",
            ),
            (
                &[0x82, 0x7f, 0x80, 0, 0, 0, 0, 0, 0, 0],
                "a 64-bit length with its top bit set",
            ),
            (&[0x09, 0], "a Ping frame in fragments"),
            (
                &[0x88, 0x7e, 0, 126],
                "a Close frame of 126 bytes, over 125",
            ),
        ];
        for (bytes, text) in cases {
            assert_eq!(head(bytes).unwrap_err().to_string(), text, "{bytes:?}");
        }
    }

    #[test]
    fn masks_differ() {
        let mut m = Masks::new();
        let keys: std::collections::HashSet<[u8; 4]> = (0..1000).map(|_| m.key()).collect();
        assert!(keys.len() > 990);
        assert_ne!(Masks::new().next_u64(), Masks::new().next_u64());
    }

    #[test]
    fn mask_is_its_own_inverse_at_every_length() {
        for n in 0..20 {
            let data: Vec<u8> = (0..n as u8).collect();
            let mut d = data.clone();
            apply_mask(&mut d, [9, 8, 7, 6]);
            for (i, b) in d.iter().enumerate() {
                assert_eq!(*b, data[i] ^ [9, 8, 7, 6][i % 4]);
            }
            apply_mask(&mut d, [9, 8, 7, 6]);
            assert_eq!(d, data);
        }
    }
}
