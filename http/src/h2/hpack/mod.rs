//! HPACK (RFC 7541) for the HTTP/2 client: a full decoder (static and dynamic tables, size
//! updates, Huffman) and the small encoder a client needs: static-table indexes, literals
//! without indexing, no dynamic table (so nothing to keep in step with the server's).
//!
//! [`decoder`] reads header blocks (with the dynamic table), [`encoder`] writes request
//! blocks, [`huffman`] decodes Huffman-coded strings, [`table`] is the static table.

mod decoder;
mod encoder;
mod huffman;
mod table;

use http::HeaderName;

pub(crate) use decoder::Decoder;
pub(crate) use encoder::encode_request;

/// The dynamic table size every HPACK encoder starts with (SETTINGS_HEADER_TABLE_SIZE's
/// default), which the server may use until it acknowledges ours.
pub(crate) const DEFAULT_TABLE_SIZE: usize = 4096;
/// The largest header list we keep, as RFC 9113 §6.5.2 counts it for
/// SETTINGS_MAX_HEADER_LIST_SIZE (which `h2_raw` advertises with it): every field's name
/// and value lengths plus 32. Responses with more are rare and no load test's business.
pub(crate) const MAX_LIST_SIZE: usize = 64 * 1024;
/// The most fields in a header list we keep: more than any real response carries (h1_raw
/// takes 100), few enough that one-byte indexed fields cannot fill memory (nor the
/// `HeaderMap`, which panics past 24 576).
pub(crate) const MAX_LIST_FIELDS: usize = 1000;
/// A header field's name as the decoder resolves it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Name {
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
pub(crate) struct Error(pub &'static str);

/// What became of a header block that was valid HPACK.
#[derive(Debug, PartialEq)]
pub(crate) enum Decoded {
    /// Its fields are in the output.
    Whole,
    /// Its header list is over [`MAX_LIST_FIELDS`] or [`MAX_LIST_SIZE`]: it was decoded to
    /// its end all the same, so the dynamic table stays in step with the server's and the
    /// connection goes on, but none of its fields were kept.
    TooLarge,
}

#[cfg(test)]
pub(crate) mod tests;
