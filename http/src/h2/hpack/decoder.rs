//! The decoder: a connection's response-side HPACK state (the dynamic table) and the
//! header blocks read through it (RFC 7541 §3, §6).

use std::collections::VecDeque;

use bytes::Bytes;
use http::HeaderName;

use super::{
    DEFAULT_TABLE_SIZE, Decoded, Error, MAX_LIST_FIELDS, MAX_LIST_SIZE, Name,
    huffman::huffman_decode,
    table::{HEADERS, PSEUDO},
};

/// Scratch room grown past these by a large block is given back after it: 10 000
/// connections must not each keep one.
pub(super) const KEEP_SCRATCH: usize = 16 * 1024;
pub(super) const KEEP_FIELDS: usize = 64;

/// A decoded value, before the block's literals are copied out in one piece.
pub(super) enum Value {
    Static(&'static str),
    /// A range of the decoder's scratch buffer.
    Scratch(usize, usize),
    /// A dynamic table entry's.
    Shared(Bytes),
}

pub(super) struct Entry {
    pub(super) name: Name,
    pub(super) value: Bytes,
    /// RFC 7541 §4.1: name and value lengths plus 32.
    pub(super) size: usize,
}

/// The response side of a connection's HPACK state.
pub(crate) struct Decoder {
    /// Newest first, as the indexes count.
    pub(super) table: VecDeque<Entry>,
    pub(super) size: usize,
    /// The table's current maximum, as the encoder last set it.
    pub(super) max: usize,
    /// The most the encoder may set it to.
    limit: usize,
    /// Literals decoded so far in the current block.
    pub(super) scratch: Vec<u8>,
    pub(super) fields: Vec<(Name, Value)>,
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
