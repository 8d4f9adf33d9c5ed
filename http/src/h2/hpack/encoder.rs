//! The encoder: a request's header block from static-table indexes and plain literals,
//! with no dynamic table (RFC 7541 §6.1, §6.2.2, §6.2.3).

use http::{HeaderMap, Method, header};

use super::table::HEADERS;
use crate::itoa;

/// Encodes a request's header block onto `out`: pseudo-headers first, then `headers` less
/// those HTTP/2 forbids (RFC 9113 §8.2.2) and `host` (the `:authority` is the transport's),
/// then `content-length` if `length` is given.
pub(crate) fn encode_request(
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

pub(super) fn put_integer(out: &mut Vec<u8>, prefix: u8, flags: u8, mut value: usize) {
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
