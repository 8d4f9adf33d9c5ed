//! gRPC over HTTP/2 (grpc/doc/PROTOCOL-HTTP2.md), the layers above the HTTP/2 client: what
//! a call puts in its request and reads out of its response, with no I/O of its own.
//!
//! A call is one HTTP/2 stream: a POST to `/package.Service/Method` with
//! [`request_headers`], a body of length-prefixed messages ([`encode`]); the response
//! head ([`head`]), a body of messages read with a [`Decoder`] as DATA arrives, and
//! trailers with the [`Status`]. A call that fails before any message carries its status in
//! the head alone (Trailers-Only). Messages are built from JSON and read back to JSON with
//! the `.proto` files compiled at load time ([`Protos`], [`Method`]).
//!
//! What the HTTP/2 client carries for it, beyond a plain request: the response's trailers
//! ([`crate::Response::trailers`], [`crate::Body::trailers`]: where `grpc-status` is for
//! any call that sent a message), and a request body that keeps streaming after the head
//! ([`crate::Connection::duplex`]: client and bidi calls, DATA frames as the caller sends,
//! END_STREAM only when it is done, no `content-length`). [`read_response`] reads a whole
//! response (a unary or client-streaming call's) into its messages and status.
//!
//! One file per layer: [`frame`] the message framing and compression, [`status`] codes,
//! statuses and the response head, [`timeout`] `grpc-timeout`, [`proto`] the `.proto`
//! files and JSON. gzip is the one compression herd speaks; deflate, snappy and zstd
//! responses fail as [`Error::UnsupportedEncoding`] (herd never offers them).

pub mod frame;
#[doc(hidden)]
pub mod fuzz;
pub mod proto;
pub mod status;
pub mod timeout;

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};

pub use frame::{DEFAULT_MAX_MESSAGE, Decoder, Encoding, encode, encode_one};
pub use proto::{JsonOptions, Method, ProtoError, Protos, Streaming};
pub use status::{Code, Head, Status, head};

/// The request's `content-type`.
pub const CONTENT_TYPE: &str = "application/grpc";

/// A whole call read back: its response messages (decompressed, still encoded) and how it
/// ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The messages, in order.
    pub messages: Vec<bytes::Bytes>,
    /// The status from the trailers, or the head of a Trailers-Only response.
    pub status: Status,
}

/// Reads a whole response (HTTP status, head, body, trailers) as a call's [`Reply`],
/// taking messages up to `max` bytes. The status is the trailers' (or a Trailers-Only
/// head's); a body cut inside a message, or a call that sent messages and no trailers, is
/// an [`Error`].
pub fn read_response(
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    trailers: Option<&HeaderMap>,
    max: usize,
) -> Result<Reply, Error> {
    let encoding = match head(status, headers)? {
        Head::TrailersOnly(status) => {
            return Ok(Reply {
                messages: Vec::new(),
                status,
            });
        }
        Head::Messages(e) => e,
    };
    let mut decoder = Decoder::new(max, encoding);
    decoder.push(body);
    let mut messages = Vec::new();
    while let Some(m) = decoder.next()? {
        messages.push(m);
    }
    decoder.finish()?;
    let status = Status::from_trailers(trailers.ok_or(Error::NoStatus)?)?;
    Ok(Reply { messages, status })
}

/// What was wrong in a gRPC response: the server's bytes or headers, not the scenario's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A message prefix whose compressed flag is neither 0 nor 1.
    #[error("message {message} has compressed flag {flag} (only 0 and 1 exist)")]
    BadFlag {
        /// The flag byte.
        flag: u8,
        /// Which message of the response (1 is the first).
        message: u64,
    },
    /// A message flagged compressed in a response that names no `grpc-encoding`.
    #[error("message {message} is flagged compressed but the response names no grpc-encoding")]
    CompressedWithoutEncoding {
        /// Which message of the response.
        message: u64,
    },
    /// A message prefix declaring more than the largest message taken.
    #[error("message {message} declares {len} bytes, over the {max}-byte limit")]
    TooLarge {
        /// The declared length.
        len: usize,
        /// The limit.
        max: usize,
        /// Which message of the response.
        message: u64,
    },
    /// A compressed message inflating past the largest message taken.
    #[error("message {message} inflates past the {max}-byte limit")]
    InflatesTooLarge {
        /// The limit.
        max: usize,
        /// Which message of the response.
        message: u64,
    },
    /// A message flagged compressed that does not decompress.
    #[error("message {message} does not decompress as {encoding}: {reason}")]
    Decompress {
        /// The call's encoding.
        encoding: &'static str,
        /// Which message of the response.
        message: u64,
        /// The decompressor's complaint.
        reason: String,
    },
    /// The body ended inside a message.
    #[error("the body ended inside message {message}: {have} of its {need} {what} bytes")]
    Truncated {
        /// Which message of the response.
        message: u64,
        /// Bytes there were.
        have: usize,
        /// Bytes the prefix or message needed.
        need: usize,
        /// `prefix` or `message`.
        what: &'static str,
    },
    /// A `grpc-encoding` herd cannot decode.
    #[error("the server compressed its messages with `{0}`; herd decodes gzip and identity")]
    UnsupportedEncoding(String),
    /// `grpc-status` that is not a number.
    #[error("grpc-status `{0}` is not a status code")]
    BadStatus(String),
    /// The trailers (or the end of the stream) without `grpc-status`.
    #[error("the call ended without grpc-status in its trailers")]
    NoStatus,
    /// A non-200 response without `grpc-status`: a proxy's or a non-gRPC server's answer.
    #[error("HTTP status {status} without grpc-status (a proxy's answer?), read as {code}")]
    HttpStatus {
        /// The HTTP status.
        status: u16,
        /// The code it maps to.
        code: Code,
    },
    /// A 200 whose `content-type` is not gRPC's.
    #[error("content-type {} is not application/grpc: not a gRPC server?", shown(.0))]
    ContentType(Option<String>),
    /// A message that does not decode as the method's output type.
    #[error("the server's message is not a valid `{message}`: {reason}")]
    Decode {
        /// The message type, by full name.
        message: String,
        /// What the decoder found.
        reason: String,
    },
}

fn shown(content_type: &Option<String>) -> String {
    match content_type {
        Some(t) => format!("`{t}`"),
        None => "missing".to_owned(),
    }
}

impl Error {
    /// The status a gRPC client reports for this error (grpc-go's choice): too large a
    /// message is `resource_exhausted`, an encoding it lacks `unimplemented`, a proxy's
    /// HTTP status the code it maps to, anything else malformed `internal`.
    pub fn code(&self) -> Code {
        match self {
            Self::TooLarge { .. } | Self::InflatesTooLarge { .. } => Code::ResourceExhausted,
            Self::UnsupportedEncoding(_) => Code::Unimplemented,
            Self::HttpStatus { code, .. } => *code,
            Self::ContentType(_) => Code::Unknown,
            _ => Code::Internal,
        }
    }
}

/// What a call's request carries besides `:method POST`, `:scheme`, `:authority` and
/// `:path` (the HTTP/2 client's): `content-type: application/grpc`, `te: trailers`,
/// `grpc-timeout` for a deadline, `grpc-encoding` when the messages are compressed,
/// `grpc-accept-encoding: gzip` (the server may compress its answer), then `metadata` (the
/// scenario's headers; `-bin` keys carry base64 values, as the spec has them). Metadata
/// cannot replace the call's own headers: its copies of them are left out.
pub fn request_headers(
    deadline: Option<Duration>,
    encoding: Encoding,
    metadata: &HeaderMap,
) -> HeaderMap {
    let mut h = HeaderMap::with_capacity(5 + metadata.len());
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(CONTENT_TYPE),
    );
    h.insert(http::header::TE, HeaderValue::from_static("trailers"));
    if let Some(d) = deadline {
        h.insert(
            HeaderName::from_static("grpc-timeout"),
            HeaderValue::from_str(&timeout::encode(d)).expect("digits and a unit"),
        );
    }
    if encoding != Encoding::Identity {
        h.insert(
            HeaderName::from_static("grpc-encoding"),
            HeaderValue::from_static(encoding.name()),
        );
    }
    h.insert(
        HeaderName::from_static("grpc-accept-encoding"),
        HeaderValue::from_static("gzip"),
    );
    for (k, v) in metadata {
        if !OWN.contains(&k.as_str()) {
            h.append(k, v.clone());
        }
    }
    h
}

/// The headers [`request_headers`] writes itself.
const OWN: [&str; 5] = [
    "content-type",
    "te",
    "grpc-timeout",
    "grpc-encoding",
    "grpc-accept-encoding",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_headers_carry_the_call() {
        let mut meta = HeaderMap::new();
        meta.insert("authorization", "Bearer t".parse().unwrap());
        meta.insert("te", "gzip".parse().unwrap());
        meta.insert("content-type", "application/json".parse().unwrap());
        let h = request_headers(Some(Duration::from_millis(250)), Encoding::Gzip, &meta);
        assert_eq!(h["content-type"], "application/grpc");
        assert_eq!(h["te"], "trailers");
        assert_eq!(h["grpc-timeout"], "250000u");
        assert_eq!(h["grpc-encoding"], "gzip");
        assert_eq!(h["grpc-accept-encoding"], "gzip");
        assert_eq!(h["authorization"], "Bearer t");
        assert_eq!(h.get_all("te").iter().count(), 1);
        assert_eq!(h.get_all("content-type").iter().count(), 1);
        let h = request_headers(None, Encoding::Identity, &HeaderMap::new());
        assert!(!h.contains_key("grpc-timeout"));
        assert!(!h.contains_key("grpc-encoding"));
    }

    #[test]
    fn errors_map_to_the_status_a_client_reports() {
        assert_eq!(
            Error::TooLarge {
                len: 9,
                max: 1,
                message: 1
            }
            .code(),
            Code::ResourceExhausted
        );
        assert_eq!(
            Error::UnsupportedEncoding("zstd".into()).code(),
            Code::Unimplemented
        );
        assert_eq!(Error::NoStatus.code(), Code::Internal);
    }
}
