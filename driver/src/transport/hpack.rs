//! HPACK (RFC 7541) for [`super::h2_raw`]: a full decoder (static and dynamic tables, size
//! updates, Huffman) and the small encoder a client needs: static-table indexes, literals
//! without indexing, no dynamic table (so nothing to keep in step with the server's).

use std::collections::VecDeque;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Method, header};

use super::itoa;

/// The dynamic table size every HPACK encoder starts with (SETTINGS_HEADER_TABLE_SIZE's
/// default), which the server may use until it acknowledges ours.
pub(super) const DEFAULT_TABLE_SIZE: usize = 4096;
/// The largest header list we keep, as RFC 9113 §6.5.2 counts it for
/// SETTINGS_MAX_HEADER_LIST_SIZE (which `h2_raw` advertises with it): every field's name
/// and value lengths plus 32. Responses with more are rare and no load test's business.
pub(super) const MAX_LIST_SIZE: usize = 64 * 1024;
/// The most fields in a header list we keep: more than any real response carries (h1_raw
/// takes 100), few enough that one-byte indexed fields cannot fill memory (nor the
/// `HeaderMap`, which panics past 24 576).
pub(super) const MAX_LIST_FIELDS: usize = 1000;
/// Scratch room grown past these by a large block is given back after it: 10 000
/// connections must not each keep one.
const KEEP_SCRATCH: usize = 16 * 1024;
const KEEP_FIELDS: usize = 64;

/// A header field's name as the decoder resolves it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Name {
    /// `:status`, the one pseudo-header a response carries.
    Status,
    /// Any other pseudo-header (`:path`, `:method`…): malformed in a response.
    Pseudo,
    Header(HeaderName),
    /// Not a header name at all: the response is malformed.
    Invalid,
}

/// A header block that cannot be decoded: the connection's HPACK state is lost with it, so
/// this is a connection error (COMPRESSION_ERROR).
#[derive(Debug, PartialEq)]
pub(super) struct Error(pub &'static str);

/// What became of a header block that was valid HPACK.
#[derive(Debug, PartialEq)]
pub(super) enum Decoded {
    /// Its fields are in the output.
    Whole,
    /// Its header list is over [`MAX_LIST_FIELDS`] or [`MAX_LIST_SIZE`]: it was decoded to
    /// its end all the same, so the dynamic table stays in step with the server's and the
    /// connection goes on, but none of its fields were kept.
    TooLarge,
}

/// A decoded value, before the block's literals are copied out in one piece.
enum Value {
    Static(&'static str),
    /// A range of the decoder's scratch buffer.
    Scratch(usize, usize),
    /// A dynamic table entry's.
    Shared(Bytes),
}

struct Entry {
    name: Name,
    value: Bytes,
    /// RFC 7541 §4.1: name and value lengths plus 32.
    size: usize,
}

/// The response side of a connection's HPACK state.
pub(super) struct Decoder {
    /// Newest first, as the indexes count.
    table: VecDeque<Entry>,
    size: usize,
    /// The table's current maximum, as the encoder last set it.
    max: usize,
    /// The most the encoder may set it to.
    limit: usize,
    /// Literals decoded so far in the current block.
    scratch: Vec<u8>,
    fields: Vec<(Name, Value)>,
}

impl Decoder {
    pub fn new() -> Self {
        Self {
            table: VecDeque::new(),
            size: 0,
            max: DEFAULT_TABLE_SIZE,
            limit: DEFAULT_TABLE_SIZE,
            scratch: Vec::with_capacity(256),
            fields: Vec::with_capacity(16),
        }
    }

    /// Sets the largest table the encoder may ask for: ours, once the server has
    /// acknowledged our SETTINGS_HEADER_TABLE_SIZE. The table itself shrinks when the
    /// encoder says so, with a size update; a server that never does keeps using (and we
    /// keep) the table it has, as h2's decoder allows.
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// Decodes one whole header block into `out`. Every value's bytes are either static, a
    /// table entry's, or a slice of one copy of the block's literals: one allocation per
    /// block, however many fields.
    pub fn decode(
        &mut self,
        mut block: &[u8],
        out: &mut Vec<(Name, Bytes)>,
    ) -> Result<Decoded, Error> {
        self.scratch.clear();
        self.fields.clear();
        let (mut count, mut size) = (0, 0);
        while let Some(&first) = block.first() {
            let (field, field_size) = if first & 0x80 != 0 {
                let index = integer(&mut block, 7)?;
                self.field(index)?
            } else if first & 0xc0 == 0x40 {
                // Literal with incremental indexing.
                let (name, name_len, start) = self.literal(&mut block, 6)?;
                let end = self.scratch.len();
                self.insert(name.clone(), name_len, start, end);
                let size = name_len + (end - start) + 32;
                ((name, Value::Scratch(start, end)), size)
            } else if first & 0xe0 == 0x20 {
                if count > 0 {
                    return Err(Error("a dynamic table size update after a header field"));
                }
                let size = integer(&mut block, 5)?;
                if size > self.limit {
                    return Err(Error(
                        "a dynamic table size update above the SETTINGS_HEADER_TABLE_SIZE",
                    ));
                }
                self.max = size;
                self.evict(0);
                continue;
            } else {
                // Literal without indexing (0000) or never indexed (0001).
                let (name, name_len, start) = self.literal(&mut block, 4)?;
                let end = self.scratch.len();
                let size = name_len + (end - start) + 32;
                ((name, Value::Scratch(start, end)), size)
            };
            count += 1;
            size += field_size;
            if count > MAX_LIST_FIELDS || size > MAX_LIST_SIZE {
                // Past the limit nothing is kept, so the rest of the block holds at most
                // one literal's room while it is read through.
                self.fields.clear();
                self.scratch.clear();
            } else {
                self.fields.push(field);
            }
        }
        if count > MAX_LIST_FIELDS || size > MAX_LIST_SIZE {
            self.shrink();
            return Ok(Decoded::TooLarge);
        }
        let literals = if self.scratch.is_empty() {
            Bytes::new()
        } else {
            Bytes::copy_from_slice(&self.scratch)
        };
        out.extend(self.fields.drain(..).map(|(name, value)| {
            let value = match value {
                Value::Static(s) => Bytes::from_static(s.as_bytes()),
                Value::Scratch(a, b) => literals.slice(a..b),
                Value::Shared(b) => b,
            };
            (name, value)
        }));
        self.shrink();
        Ok(Decoded::Whole)
    }

    /// Gives back scratch room a large block grew.
    fn shrink(&mut self) {
        if self.scratch.capacity() > KEEP_SCRATCH {
            self.scratch = Vec::with_capacity(256);
        }
        if self.fields.capacity() > KEEP_FIELDS {
            self.fields = Vec::with_capacity(16);
        }
    }

    /// The name and value at `index`, and their size as a header list counts it.
    fn field(&self, index: usize) -> Result<((Name, Value), usize), Error> {
        match index {
            0 => Err(Error("index 0")),
            1..=14 => {
                let (name, value) = PSEUDO[index - 1];
                let size = name.len() + value.len() + 32;
                let name = if name == ":status" {
                    Name::Status
                } else {
                    Name::Pseudo
                };
                Ok(((name, Value::Static(value)), size))
            }
            15..=61 => {
                let (name, value) = &HEADERS[index - 15];
                let size = name.as_str().len() + value.len() + 32;
                Ok(((Name::Header(name.clone()), Value::Static(value)), size))
            }
            _ => {
                let e = self
                    .table
                    .get(index - 62)
                    .ok_or(Error("an index past the dynamic table"))?;
                Ok(((e.name.clone(), Value::Shared(e.value.clone())), e.size))
            }
        }
    }

    /// The name at `index` and its length.
    fn name(&self, index: usize) -> Result<(Name, usize), Error> {
        match index {
            0 => Err(Error("index 0")),
            1..=14 => Ok((self.field(index)?.0.0, PSEUDO[index - 1].0.len())),
            15..=61 => {
                let name = &HEADERS[index - 15].0;
                Ok((Name::Header(name.clone()), name.as_str().len()))
            }
            _ => {
                let e = self
                    .table
                    .get(index - 62)
                    .ok_or(Error("an index past the dynamic table"))?;
                Ok((e.name.clone(), e.size - 32 - e.value.len()))
            }
        }
    }

    /// A literal field's name (indexed or literal) and its length; its value is decoded onto
    /// the scratch buffer from the returned offset.
    fn literal(&mut self, block: &mut &[u8], prefix: u8) -> Result<(Name, usize, usize), Error> {
        let index = integer(block, prefix)?;
        let (name, name_len) = if index == 0 {
            let start = self.scratch.len();
            self.string(block)?;
            let raw = &self.scratch[start..];
            let name = match raw {
                b":status" => Name::Status,
                [b':', ..] => Name::Pseudo,
                _ => HeaderName::from_bytes(raw).map_or(Name::Invalid, Name::Header),
            };
            let len = raw.len();
            self.scratch.truncate(start);
            (name, len)
        } else {
            self.name(index)?
        };
        let start = self.scratch.len();
        self.string(block)?;
        Ok((name, name_len, start))
    }

    /// A string literal, Huffman-decoded if it is coded, appended to the scratch buffer.
    fn string(&mut self, block: &mut &[u8]) -> Result<(), Error> {
        let huffman = block.first().is_some_and(|b| b & 0x80 != 0);
        let len = integer(block, 7)?;
        if len > block.len() {
            return Err(Error("a string longer than its header block"));
        }
        let (s, rest) = block.split_at(len);
        *block = rest;
        if huffman {
            huffman_decode(s, &mut self.scratch)
        } else {
            self.scratch.extend_from_slice(s);
            Ok(())
        }
    }

    /// Adds the scratch range `start..end` as `name`'s value, evicting the oldest entries to
    /// make room; an entry larger than the whole table empties it (RFC 7541 §4.4).
    fn insert(&mut self, name: Name, name_len: usize, start: usize, end: usize) {
        let size = name_len + (end - start) + 32;
        if size > self.max {
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.size += size;
        let value = Bytes::copy_from_slice(&self.scratch[start..end]);
        self.table.push_front(Entry { name, value, size });
    }

    /// Evicts the oldest entries until `room` more bytes fit under the maximum.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            let Some(e) = self.table.pop_back() else {
                break;
            };
            self.size -= e.size;
        }
    }
}

/// An integer with an N-bit prefix (RFC 7541 §5.1).
fn integer(block: &mut &[u8], prefix: u8) -> Result<usize, Error> {
    let (&first, rest) = block.split_first().ok_or(Error("a truncated integer"))?;
    *block = rest;
    let mask = (1u8 << prefix) - 1;
    let mut value = usize::from(first & mask);
    if value < usize::from(mask) {
        return Ok(value);
    }
    let mut shift = 0;
    loop {
        let (&b, rest) = block.split_first().ok_or(Error("a truncated integer"))?;
        *block = rest;
        value += usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
        if shift > 28 {
            return Err(Error("an integer past 2^32"));
        }
    }
}

/// Encodes a request's header block onto `out`: pseudo-headers first, then `headers` less
/// those HTTP/2 forbids (RFC 9113 §8.2.2) and `host` (the `:authority` is the transport's),
/// then `content-length` if `length` is given.
pub(super) fn encode_request(
    out: &mut Vec<u8>,
    method: &Method,
    https: bool,
    authority: &str,
    path: &str,
    headers: &HeaderMap,
    length: Option<usize>,
) {
    match *method {
        Method::GET => out.push(0x80 | 2),
        Method::POST => out.push(0x80 | 3),
        _ => literal(out, 2, method.as_str().as_bytes(), false),
    }
    out.push(if https { 0x80 | 7 } else { 0x80 | 6 });
    match path {
        "/" => out.push(0x80 | 4),
        _ => literal(out, 4, path.as_bytes(), false),
    }
    literal(out, 1, authority.as_bytes(), false);
    for (name, value) in headers {
        if matches!(
            *name,
            header::CONNECTION | header::TRANSFER_ENCODING | header::UPGRADE | header::HOST
        ) || matches!(name.as_str(), "keep-alive" | "proxy-connection")
            || (*name == header::TE && value != "trailers")
        {
            continue;
        }
        match HEADERS.iter().position(|(n, _)| n == name) {
            Some(i) => literal(out, i + 15, value.as_bytes(), value.is_sensitive()),
            None => {
                out.push(if value.is_sensitive() { 0x10 } else { 0 });
                string(out, name.as_str().as_bytes());
                string(out, value.as_bytes());
            }
        }
    }
    if let Some(n) = length {
        let mut digits = [0u8; 20];
        literal(out, 28, itoa(n, &mut digits), false);
    }
}

/// A literal field without indexing (never indexed if `sensitive`) whose name is static
/// table entry `index`.
fn literal(out: &mut Vec<u8>, index: usize, value: &[u8], sensitive: bool) {
    put_integer(out, 4, if sensitive { 0x10 } else { 0 }, index);
    string(out, value);
}

/// A string literal, not Huffman-coded: coding would save a few bytes per request and cost
/// CPU on both sides.
fn string(out: &mut Vec<u8>, s: &[u8]) {
    put_integer(out, 7, 0, s.len());
    out.extend_from_slice(s);
}

fn put_integer(out: &mut Vec<u8>, prefix: u8, flags: u8, mut value: usize) {
    let mask = (1usize << prefix) - 1;
    if value < mask {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | mask as u8);
    value -= mask;
    while value >= 0x80 {
        out.push(0x80 | (value & 0x7f) as u8);
        value >>= 7;
    }
    out.push(value as u8);
}

/// The static table's first 14 entries (RFC 7541 Appendix A): pseudo-headers.
const PSEUDO: [(&str, &str); 14] = [
    (":authority", ""),
    (":method", "GET"),
    (":method", "POST"),
    (":path", "/"),
    (":path", "/index.html"),
    (":scheme", "http"),
    (":scheme", "https"),
    (":status", "200"),
    (":status", "204"),
    (":status", "206"),
    (":status", "304"),
    (":status", "400"),
    (":status", "404"),
    (":status", "500"),
];

/// The rest of the static table, entries 15 to 61.
static HEADERS: [(HeaderName, &str); 47] = [
    (header::ACCEPT_CHARSET, ""),
    (header::ACCEPT_ENCODING, "gzip, deflate"),
    (header::ACCEPT_LANGUAGE, ""),
    (header::ACCEPT_RANGES, ""),
    (header::ACCEPT, ""),
    (header::ACCESS_CONTROL_ALLOW_ORIGIN, ""),
    (header::AGE, ""),
    (header::ALLOW, ""),
    (header::AUTHORIZATION, ""),
    (header::CACHE_CONTROL, ""),
    (header::CONTENT_DISPOSITION, ""),
    (header::CONTENT_ENCODING, ""),
    (header::CONTENT_LANGUAGE, ""),
    (header::CONTENT_LENGTH, ""),
    (header::CONTENT_LOCATION, ""),
    (header::CONTENT_RANGE, ""),
    (header::CONTENT_TYPE, ""),
    (header::COOKIE, ""),
    (header::DATE, ""),
    (header::ETAG, ""),
    (header::EXPECT, ""),
    (header::EXPIRES, ""),
    (header::FROM, ""),
    (header::HOST, ""),
    (header::IF_MATCH, ""),
    (header::IF_MODIFIED_SINCE, ""),
    (header::IF_NONE_MATCH, ""),
    (header::IF_RANGE, ""),
    (header::IF_UNMODIFIED_SINCE, ""),
    (header::LAST_MODIFIED, ""),
    (header::LINK, ""),
    (header::LOCATION, ""),
    (header::MAX_FORWARDS, ""),
    (header::PROXY_AUTHENTICATE, ""),
    (header::PROXY_AUTHORIZATION, ""),
    (header::RANGE, ""),
    (header::REFERER, ""),
    (header::REFRESH, ""),
    (header::RETRY_AFTER, ""),
    (header::SERVER, ""),
    (header::SET_COOKIE, ""),
    (header::STRICT_TRANSPORT_SECURITY, ""),
    (header::TRANSFER_ENCODING, ""),
    (header::USER_AGENT, ""),
    (header::VARY, ""),
    (header::VIA, ""),
    (header::WWW_AUTHENTICATE, ""),
];
/// RFC 7541 Appendix B: each symbol's code and its length in bits; the last is EOS.
const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13),
    (0x7fffd8, 23),
    (0xfffffe2, 28),
    (0xfffffe3, 28),
    (0xfffffe4, 28),
    (0xfffffe5, 28),
    (0xfffffe6, 28),
    (0xfffffe7, 28),
    (0xfffffe8, 28),
    (0xffffea, 24),
    (0x3ffffffc, 30),
    (0xfffffe9, 28),
    (0xfffffea, 28),
    (0x3ffffffd, 30),
    (0xfffffeb, 28),
    (0xfffffec, 28),
    (0xfffffed, 28),
    (0xfffffee, 28),
    (0xfffffef, 28),
    (0xffffff0, 28),
    (0xffffff1, 28),
    (0xffffff2, 28),
    (0x3ffffffe, 30),
    (0xffffff3, 28),
    (0xffffff4, 28),
    (0xffffff5, 28),
    (0xffffff6, 28),
    (0xffffff7, 28),
    (0xffffff8, 28),
    (0xffffff9, 28),
    (0xffffffa, 28),
    (0xffffffb, 28),
    (0x14, 6),
    (0x3f8, 10),
    (0x3f9, 10),
    (0xffa, 12),
    (0x1ff9, 13),
    (0x15, 6),
    (0xf8, 8),
    (0x7fa, 11),
    (0x3fa, 10),
    (0x3fb, 10),
    (0xf9, 8),
    (0x7fb, 11),
    (0xfa, 8),
    (0x16, 6),
    (0x17, 6),
    (0x18, 6),
    (0x0, 5),
    (0x1, 5),
    (0x2, 5),
    (0x19, 6),
    (0x1a, 6),
    (0x1b, 6),
    (0x1c, 6),
    (0x1d, 6),
    (0x1e, 6),
    (0x1f, 6),
    (0x5c, 7),
    (0xfb, 8),
    (0x7ffc, 15),
    (0x20, 6),
    (0xffb, 12),
    (0x3fc, 10),
    (0x1ffa, 13),
    (0x21, 6),
    (0x5d, 7),
    (0x5e, 7),
    (0x5f, 7),
    (0x60, 7),
    (0x61, 7),
    (0x62, 7),
    (0x63, 7),
    (0x64, 7),
    (0x65, 7),
    (0x66, 7),
    (0x67, 7),
    (0x68, 7),
    (0x69, 7),
    (0x6a, 7),
    (0x6b, 7),
    (0x6c, 7),
    (0x6d, 7),
    (0x6e, 7),
    (0x6f, 7),
    (0x70, 7),
    (0x71, 7),
    (0x72, 7),
    (0xfc, 8),
    (0x73, 7),
    (0xfd, 8),
    (0x1ffb, 13),
    (0x7fff0, 19),
    (0x1ffc, 13),
    (0x3ffc, 14),
    (0x22, 6),
    (0x7ffd, 15),
    (0x3, 5),
    (0x23, 6),
    (0x4, 5),
    (0x24, 6),
    (0x5, 5),
    (0x25, 6),
    (0x26, 6),
    (0x27, 6),
    (0x6, 5),
    (0x74, 7),
    (0x75, 7),
    (0x28, 6),
    (0x29, 6),
    (0x2a, 6),
    (0x7, 5),
    (0x2b, 6),
    (0x76, 7),
    (0x2c, 6),
    (0x8, 5),
    (0x9, 5),
    (0x2d, 6),
    (0x77, 7),
    (0x78, 7),
    (0x79, 7),
    (0x7a, 7),
    (0x7b, 7),
    (0x7ffe, 15),
    (0x7fc, 11),
    (0x3ffd, 14),
    (0x1ffd, 13),
    (0xffffffc, 28),
    (0xfffe6, 20),
    (0x3fffd2, 22),
    (0xfffe7, 20),
    (0xfffe8, 20),
    (0x3fffd3, 22),
    (0x3fffd4, 22),
    (0x3fffd5, 22),
    (0x7fffd9, 23),
    (0x3fffd6, 22),
    (0x7fffda, 23),
    (0x7fffdb, 23),
    (0x7fffdc, 23),
    (0x7fffdd, 23),
    (0x7fffde, 23),
    (0xffffeb, 24),
    (0x7fffdf, 23),
    (0xffffec, 24),
    (0xffffed, 24),
    (0x3fffd7, 22),
    (0x7fffe0, 23),
    (0xffffee, 24),
    (0x7fffe1, 23),
    (0x7fffe2, 23),
    (0x7fffe3, 23),
    (0x7fffe4, 23),
    (0x1fffdc, 21),
    (0x3fffd8, 22),
    (0x7fffe5, 23),
    (0x3fffd9, 22),
    (0x7fffe6, 23),
    (0x7fffe7, 23),
    (0xffffef, 24),
    (0x3fffda, 22),
    (0x1fffdd, 21),
    (0xfffe9, 20),
    (0x3fffdb, 22),
    (0x3fffdc, 22),
    (0x7fffe8, 23),
    (0x7fffe9, 23),
    (0x1fffde, 21),
    (0x7fffea, 23),
    (0x3fffdd, 22),
    (0x3fffde, 22),
    (0xfffff0, 24),
    (0x1fffdf, 21),
    (0x3fffdf, 22),
    (0x7fffeb, 23),
    (0x7fffec, 23),
    (0x1fffe0, 21),
    (0x1fffe1, 21),
    (0x3fffe0, 22),
    (0x1fffe2, 21),
    (0x7fffed, 23),
    (0x3fffe1, 22),
    (0x7fffee, 23),
    (0x7fffef, 23),
    (0xfffea, 20),
    (0x3fffe2, 22),
    (0x3fffe3, 22),
    (0x3fffe4, 22),
    (0x7ffff0, 23),
    (0x3fffe5, 22),
    (0x3fffe6, 22),
    (0x7ffff1, 23),
    (0x3ffffe0, 26),
    (0x3ffffe1, 26),
    (0xfffeb, 20),
    (0x7fff1, 19),
    (0x3fffe7, 22),
    (0x7ffff2, 23),
    (0x3fffe8, 22),
    (0x1ffffec, 25),
    (0x3ffffe2, 26),
    (0x3ffffe3, 26),
    (0x3ffffe4, 26),
    (0x7ffffde, 27),
    (0x7ffffdf, 27),
    (0x3ffffe5, 26),
    (0xfffff1, 24),
    (0x1ffffed, 25),
    (0x7fff2, 19),
    (0x1fffe3, 21),
    (0x3ffffe6, 26),
    (0x7ffffe0, 27),
    (0x7ffffe1, 27),
    (0x3ffffe7, 26),
    (0x7ffffe2, 27),
    (0xfffff2, 24),
    (0x1fffe4, 21),
    (0x1fffe5, 21),
    (0x3ffffe8, 26),
    (0x3ffffe9, 26),
    (0xffffffd, 28),
    (0x7ffffe3, 27),
    (0x7ffffe4, 27),
    (0x7ffffe5, 27),
    (0xfffec, 20),
    (0xfffff3, 24),
    (0xfffed, 20),
    (0x1fffe6, 21),
    (0x3fffe9, 22),
    (0x1fffe7, 21),
    (0x1fffe8, 21),
    (0x7ffff3, 23),
    (0x3fffea, 22),
    (0x3fffeb, 22),
    (0x1ffffee, 25),
    (0x1ffffef, 25),
    (0xfffff4, 24),
    (0xfffff5, 24),
    (0x3ffffea, 26),
    (0x7ffff4, 23),
    (0x3ffffeb, 26),
    (0x7ffffe6, 27),
    (0x3ffffec, 26),
    (0x3ffffed, 26),
    (0x7ffffe7, 27),
    (0x7ffffe8, 27),
    (0x7ffffe9, 27),
    (0x7ffffea, 27),
    (0x7ffffeb, 27),
    (0xffffffe, 28),
    (0x7ffffec, 27),
    (0x7ffffed, 27),
    (0x7ffffee, 27),
    (0x7ffffef, 27),
    (0x7fffff0, 27),
    (0x3ffffee, 26),
    (0x3fffffff, 30),
];

/// One step of the Huffman decoder: from a state (an inner node of the code tree), four
/// bits of input lead to state `next`, completing symbol `sym` on the way if `EMIT`.
#[derive(Clone, Copy)]
struct Step {
    next: u8,
    sym: u8,
    flags: u8,
}

/// The step completes a symbol.
const EMIT: u8 = 1;
/// The step decodes EOS or runs off the tree: the string is invalid.
const FAIL: u8 = 2;
/// The step ends where a string may end: at the root, or up to 7 bits down the all-ones
/// path (the padding, a prefix of EOS).
const ACCEPT: u8 = 4;

/// The decoder's state machine, a nibble at a time (as nghttp2 and h2 decode): 256 inner
/// nodes × 16 nibbles, built from [`CODES`] at compile time.
static STEPS: [[Step; 16]; 256] = steps();

const fn steps() -> [[Step; 16]; 256] {
    const LEAF: u16 = 0x8000;
    // Inner nodes' children: another inner node, a leaf (LEAF | symbol), or 0 for none (the
    // root is no node's child).
    let mut tree = [[0u16; 2]; 256];
    let mut nodes = 1u16;
    let mut sym = 0;
    while sym < CODES.len() {
        let (code, len) = CODES[sym];
        let mut node = 0;
        let mut bit = len;
        while bit > 0 {
            bit -= 1;
            let b = ((code >> bit) & 1) as usize;
            if bit == 0 {
                tree[node][b] = LEAF | sym as u16;
            } else {
                if tree[node][b] == 0 {
                    tree[node][b] = nodes;
                    nodes += 1;
                }
                node = tree[node][b] as usize;
            }
        }
        sym += 1;
    }
    let mut accept = [false; 256];
    accept[0] = true;
    let mut node = 0;
    let mut depth = 0;
    while depth < 7 {
        node = tree[node][1] as usize;
        accept[node] = true;
        depth += 1;
    }
    let mut steps = [[Step {
        next: 0,
        sym: 0,
        flags: 0,
    }; 16]; 256];
    let mut state = 0;
    while state < 256 {
        let mut nibble = 0;
        while nibble < 16 {
            let mut node = state;
            let mut flags = 0;
            let mut out = 0;
            let mut bit = 4;
            while bit > 0 {
                bit -= 1;
                let child = tree[node][(nibble >> bit) & 1];
                if child & LEAF != 0 {
                    let s = child & !LEAF;
                    if s == 256 {
                        flags |= FAIL;
                    } else {
                        flags |= EMIT;
                        out = s as u8;
                    }
                    node = 0;
                } else if child == 0 {
                    flags |= FAIL;
                    node = 0;
                } else {
                    node = child as usize;
                }
            }
            if accept[node] {
                flags |= ACCEPT;
            }
            steps[state][nibble] = Step {
                next: node as u8,
                sym: out,
                flags,
            };
            nibble += 1;
        }
        state += 1;
    }
    steps
}

/// Appends the Huffman-decoded `src` to `dst`.
fn huffman_decode(src: &[u8], dst: &mut Vec<u8>) -> Result<(), Error> {
    dst.reserve(src.len() * 8 / 5);
    let mut state = 0;
    let mut accept = true;
    for &byte in src {
        for nibble in [byte >> 4, byte & 0xf] {
            let step = STEPS[state][usize::from(nibble)];
            if step.flags & FAIL != 0 {
                return Err(Error("an invalid Huffman code"));
            }
            if step.flags & EMIT != 0 {
                dst.push(step.sym);
            }
            state = usize::from(step.next);
            accept = step.flags & ACCEPT != 0;
        }
    }
    if accept {
        Ok(())
    } else {
        Err(Error("invalid Huffman padding"))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Bytes from hex digits, whitespace ignored (the RFC's examples as printed).
    pub(in crate::transport) fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn fields(d: &mut Decoder, block: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        d.decode(&hex(block), &mut out).unwrap();
        out.into_iter()
            .map(|(n, v)| {
                let n = match n {
                    Name::Status => ":status".to_owned(),
                    Name::Pseudo => ":pseudo".to_owned(),
                    Name::Header(h) => h.as_str().to_owned(),
                    Name::Invalid => "!".to_owned(),
                };
                (n, String::from_utf8(v.to_vec()).unwrap())
            })
            .collect()
    }

    fn table(d: &Decoder) -> (usize, Vec<String>) {
        let names = d
            .table
            .iter()
            .map(|e| match &e.name {
                Name::Status => format!(":status: {}", String::from_utf8_lossy(&e.value)),
                Name::Header(h) => format!("{h}: {}", String::from_utf8_lossy(&e.value)),
                _ => "?".to_owned(),
            })
            .collect();
        (d.size, names)
    }

    /// RFC 7541 C.5 (plain) and C.6 (Huffman): three responses through a 256-byte table,
    /// so entries are evicted.
    #[test]
    fn rfc_7541_responses_with_eviction() {
        let blocks = [
            (
                "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
                "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            ),
            ("4803 3330 37c1 c0bf", "4883 640e ffc1 c0bf"),
            (
                "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31",
                "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            ),
        ];
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect()
        };
        let want = [
            pairs(&[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com"),
            ]),
            pairs(&[
                (":status", "307"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com"),
            ]),
            pairs(&[
                (":status", "200"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
                ("location", "https://www.example.com"),
                ("content-encoding", "gzip"),
                (
                    "set-cookie",
                    "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
                ),
            ]),
        ];
        let sizes = [222, 222, 215];
        for huffman in [false, true] {
            let mut d = Decoder::new();
            d.max = 256;
            for (i, (plain, coded)) in blocks.iter().enumerate() {
                let got = fields(&mut d, if huffman { coded } else { plain });
                assert_eq!(got, want[i], "huffman {huffman}, response {i}");
                assert_eq!(table(&d).0, sizes[i], "huffman {huffman}, response {i}");
            }
            assert_eq!(
                table(&d).1,
                vec![
                    "set-cookie: foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
                    "content-encoding: gzip",
                    "date: Mon, 21 Oct 2013 20:13:22 GMT",
                ]
            );
        }
    }

    #[test]
    fn size_updates_bad_huffman_and_bad_indexes_are_errors() {
        let mut d = Decoder::new();
        d.set_limit(0);
        let mut out = Vec::new();
        // Size update to 0, then a literal with incremental indexing: nothing is kept.
        d.decode(&hex("20 40 01 61 01 62 88"), &mut out).unwrap();
        assert_eq!((d.table.len(), out.len()), (0, 2));
        for (block, why) in [
            ("21", "above the limit"),
            ("88 20", "after a field"),
            ("be", "past the table"),
            ("80", "index 0"),
            ("0f", "truncated integer"),
            ("00 81 ff", "EOS-prefix longer than 7 bits"),
            ("00 84 ff ff ff ff", "EOS itself"),
            ("00 05 61", "string past the block"),
        ] {
            assert!(d.decode(&hex(block), &mut out).is_err(), "{why}");
        }
        // Padding of up to 7 one bits is fine: 'a' is 00011, then 111.
        out.clear();
        d.decode(&hex("00 81 1f 81 1f"), &mut out).unwrap();
        assert_eq!(out[0].0, Name::Header(HeaderName::from_static("a")));
        assert_eq!(&out[0].1[..], b"a");
    }

    /// Past the limits (30 000 one-byte indexed fields, then one to index): the block is
    /// read to its end, so the table takes that last field, but nothing is kept, and the
    /// room it took is given back. Right at the limits a list is whole.
    #[test]
    fn a_header_list_past_the_limits_is_read_through_and_dropped() {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        // 0x90: accept-encoding: gzip, deflate (60 bytes as a list counts it).
        let mut block = vec![0x90; 30_000];
        block.extend_from_slice(&hex("40 06 782d6b657074 03 796573")); // x-kept: yes
        assert_eq!(d.decode(&block, &mut out), Ok(Decoded::TooLarge));
        assert!(out.is_empty());
        assert_eq!(table(&d).1, ["x-kept: yes"]);
        assert!(d.fields.capacity() <= KEEP_FIELDS);
        assert!(d.scratch.capacity() <= KEEP_SCRATCH);
        assert_eq!(fields(&mut d, "be"), [("x-kept".into(), "yes".into())]);
        for (n, want) in [
            (MAX_LIST_FIELDS, Decoded::Whole),
            (MAX_LIST_FIELDS + 1, Decoded::TooLarge),
        ] {
            out.clear();
            assert_eq!(d.decode(&vec![0x90; n], &mut out), Ok(want), "{n} fields");
        }
        // `a: xxx…`, 1 + 32 + the value's length.
        for (len, want) in [
            (MAX_LIST_SIZE - 33, Decoded::Whole),
            (MAX_LIST_SIZE - 32, Decoded::TooLarge),
        ] {
            let mut block = vec![0x00, 0x01, b'a'];
            put_integer(&mut block, 7, 0, len);
            block.resize(block.len() + len, b'x');
            out.clear();
            assert_eq!(d.decode(&block, &mut out), Ok(want), "a {len}-byte value");
        }
        assert!(d.scratch.capacity() <= KEEP_SCRATCH);
    }

    #[test]
    fn a_request_block_uses_static_indexes_and_plain_literals() {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", "application/json".parse().unwrap());
        headers.insert("x-key", "k".parse().unwrap());
        headers.insert("connection", "close".parse().unwrap());
        headers.insert("host", "elsewhere".parse().unwrap());
        let mut out = Vec::new();
        encode_request(
            &mut out,
            &Method::PUT,
            false,
            "a:1",
            "/x?y=1",
            &headers,
            Some(12),
        );
        let mut want = vec![0x02, 3, b'P', b'U', b'T', 0x86, 0x04, 6];
        want.extend_from_slice(b"/x?y=1");
        want.extend_from_slice(&[0x01, 3, b'a', b':', b'1']);
        want.extend_from_slice(&[0x0f, 31 - 15, 16]);
        want.extend_from_slice(b"application/json");
        want.extend_from_slice(&[0x00, 5]);
        want.extend_from_slice(b"x-key");
        want.extend_from_slice(&[1, b'k']);
        want.extend_from_slice(&[0x0f, 28 - 15, 2, b'1', b'2']);
        assert_eq!(out, want);
        // Our own decoder reads it back (pseudo-headers aside).
        let mut d = Decoder::new();
        let mut fields = Vec::new();
        d.decode(&out, &mut fields).unwrap();
        let names: Vec<_> = fields
            .iter()
            .filter_map(|(n, v)| match n {
                Name::Header(h) => Some(format!("{h}={}", String::from_utf8_lossy(v))),
                _ => None,
            })
            .collect();
        assert_eq!(
            names,
            [
                "content-type=application/json",
                "x-key=k",
                "content-length=12"
            ]
        );
    }
}
