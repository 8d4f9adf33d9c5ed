//! How a call ended: `grpc-status` and `grpc-message`, in the trailers or, for a call that
//! failed before any message, in the response head alone ("Trailers-Only").
//!
//! [`Code`] names the 17 codes as herd's outcomes do (`ok`, `resource_exhausted`, …; the
//! driver prefixes `grpc_`). [`head`] checks a response head and finds a Trailers-Only
//! status in it; [`Status::from_trailers`] reads the trailers. `grpc-message` is
//! percent-decoded ([`percent_decode`]), as the spec asks of every client.

use http::HeaderMap;

use super::{Encoding, Error};

/// A gRPC status code (grpc/doc/statuscodes.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Code {
    /// 0: success.
    Ok = 0,
    /// 1: the call was cancelled, typically by the caller.
    Cancelled = 1,
    /// 2: an error the server could not classify, or a code outside 0–16.
    Unknown = 2,
    /// 3: the client sent an invalid argument.
    InvalidArgument = 3,
    /// 4: the deadline passed before the call completed.
    DeadlineExceeded = 4,
    /// 5: an entity was not found.
    NotFound = 5,
    /// 6: the entity the client tried to create exists.
    AlreadyExists = 6,
    /// 7: the caller may not do this.
    PermissionDenied = 7,
    /// 8: a resource (quota, rate limit, memory) ran out.
    ResourceExhausted = 8,
    /// 9: the system is not in the state the call needs.
    FailedPrecondition = 9,
    /// 10: aborted, typically by a concurrency conflict.
    Aborted = 10,
    /// 11: past the valid range.
    OutOfRange = 11,
    /// 12: the server does not implement the method.
    Unimplemented = 12,
    /// 13: an internal error (also a client's for a malformed response).
    Internal = 13,
    /// 14: the service is unavailable now; retrying may help.
    Unavailable = 14,
    /// 15: unrecoverable data loss.
    DataLoss = 15,
    /// 16: no valid credentials.
    Unauthenticated = 16,
}

impl Code {
    /// Every code, by number.
    pub const ALL: [Code; 17] = [
        Code::Ok,
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    /// The code numbered `n`; outside 0–16, [`Code::Unknown`] (as grpc-go and grpc-java
    /// read an unknown code).
    pub fn from_u32(n: u32) -> Self {
        usize::try_from(n)
            .ok()
            .and_then(|i| Self::ALL.get(i))
            .copied()
            .unwrap_or(Self::Unknown)
    }

    /// Its number.
    pub fn number(self) -> u32 {
        self as u32
    }

    /// Its canonical name in lower snake case, as outcome names use it: `ok`,
    /// `resource_exhausted`, `deadline_exceeded`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Cancelled => "cancelled",
            Self::Unknown => "unknown",
            Self::InvalidArgument => "invalid_argument",
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::NotFound => "not_found",
            Self::AlreadyExists => "already_exists",
            Self::PermissionDenied => "permission_denied",
            Self::ResourceExhausted => "resource_exhausted",
            Self::FailedPrecondition => "failed_precondition",
            Self::Aborted => "aborted",
            Self::OutOfRange => "out_of_range",
            Self::Unimplemented => "unimplemented",
            Self::Internal => "internal",
            Self::Unavailable => "unavailable",
            Self::DataLoss => "data_loss",
            Self::Unauthenticated => "unauthenticated",
        }
    }

    /// The code named `name` (lower snake case, as [`Code::name`] writes it; the spec's
    /// upper case is taken too), for `expected = ["grpc_resource_exhausted"]`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(name))
    }

    /// The code a response without `grpc-status` stands for, by its HTTP status: what a
    /// proxy in front of the server answered (grpc/doc/http-grpc-status-mapping.md).
    pub fn from_http_status(status: u16) -> Self {
        match status {
            400 => Self::Internal,
            401 => Self::Unauthenticated,
            403 => Self::PermissionDenied,
            404 => Self::Unimplemented,
            429 | 502 | 503 | 504 => Self::Unavailable,
            _ => Self::Unknown,
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A call's end: its code and the server's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The code.
    pub code: Code,
    /// `grpc-status` as sent, which differs from [`Code::number`] only for a code past 16.
    pub number: u32,
    /// `grpc-message`, percent-decoded; empty without one.
    pub message: String,
}

impl Status {
    /// A status with this code and message.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            number: code.number(),
            message: message.into(),
        }
    }

    /// The status in a header block (trailers, or a Trailers-Only head); `None` without a
    /// `grpc-status`.
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<Self>, Error> {
        let Some(value) = headers.get("grpc-status") else {
            return Ok(None);
        };
        let bytes = value.as_bytes();
        // 1*DIGIT; grpc-go takes up to 32 bits.
        let number = std::str::from_utf8(bytes)
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|s| s.parse::<u32>().ok())
            .ok_or_else(|| Error::BadStatus(String::from_utf8_lossy(bytes).into_owned()))?;
        let message = headers
            .get("grpc-message")
            .map(|m| percent_decode(m.as_bytes()))
            .unwrap_or_default();
        Ok(Some(Self {
            code: Code::from_u32(number),
            number,
            message,
        }))
    }

    /// The status in a call's trailers, which must carry one.
    pub fn from_trailers(trailers: &HeaderMap) -> Result<Self, Error> {
        Self::from_headers(trailers)?.ok_or(Error::NoStatus)
    }

    /// True for [`Code::Ok`].
    pub fn is_ok(&self) -> bool {
        self.code == Code::Ok
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "grpc-status {} ({})", self.number, self.code)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

/// What a response head says about the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Head {
    /// Messages follow, compressed (if flagged) in this encoding; the status comes in the
    /// trailers.
    Messages(Encoding),
    /// Trailers-Only: the call ended with this status in the head, and the body is empty.
    TrailersOnly(Status),
}

/// Checks a response head (its HTTP status and headers): a gRPC response is a 200 with
/// `content-type: application/grpc[+proto|;…]`. A head with `grpc-status` is Trailers-Only
/// whatever its content type. A non-200 without `grpc-status` (a proxy's answer) fails with
/// [`Error::HttpStatus`], whose [`Error::code`] is the code the HTTP status maps to.
pub fn head(status: u16, headers: &HeaderMap) -> Result<Head, Error> {
    if let Some(s) = Status::from_headers(headers)? {
        return Ok(Head::TrailersOnly(s));
    }
    if status != 200 {
        return Err(Error::HttpStatus {
            status,
            code: Code::from_http_status(status),
        });
    }
    let content_type = headers
        .get(http::header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let grpc = content_type.as_deref().is_some_and(|t| {
        let t = t.to_ascii_lowercase();
        t == "application/grpc"
            || t.starts_with("application/grpc+")
            || t.starts_with("application/grpc;")
    });
    if !grpc {
        return Err(Error::ContentType(content_type));
    }
    Ok(Head::Messages(Encoding::from_headers(headers)?))
}

/// `grpc-message` percent-decoded: `%XX` is the byte XX, anything else is itself, and the
/// bytes are read as UTF-8 (an invalid sequence becomes U+FFFD). A malformed `%` escape
/// is kept as it is, as the spec asks ("the client MUST NOT error").
pub fn percent_decode(value: &[u8]) -> String {
    let hex = |b: u8| char::from(b).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        if value[i] == b'%'
            && let Some((Some(hi), Some(lo))) =
                value.get(i + 1..i + 3).map(|p| (hex(p[0]), hex(p[1])))
        {
            out.push(hi << 4 | lo);
            i += 3;
            continue;
        }
        out.push(value[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `message` percent-encoded for `grpc-message`: bytes outside printable ASCII, and `%`,
/// as `%XX` (upper-case hex).
pub fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for &b in message.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn codes_by_number_and_name() {
        for (i, c) in Code::ALL.into_iter().enumerate() {
            assert_eq!(c.number() as usize, i);
            assert_eq!(Code::from_u32(i as u32), c);
            assert_eq!(Code::from_name(c.name()), Some(c));
        }
        assert_eq!(Code::ResourceExhausted.name(), "resource_exhausted");
        assert_eq!(Code::DeadlineExceeded.name(), "deadline_exceeded");
        assert_eq!(Code::from_name("UNAVAILABLE"), Some(Code::Unavailable));
        assert_eq!(Code::from_name("nope"), None);
        assert_eq!(Code::from_u32(17), Code::Unknown);
        assert_eq!(Code::from_u32(u32::MAX), Code::Unknown);
    }

    #[test]
    fn http_status_mapping() {
        assert_eq!(Code::from_http_status(404), Code::Unimplemented);
        assert_eq!(Code::from_http_status(503), Code::Unavailable);
        assert_eq!(Code::from_http_status(429), Code::Unavailable);
        assert_eq!(Code::from_http_status(500), Code::Unknown);
    }

    #[test]
    fn status_from_trailers() {
        let s = Status::from_trailers(&headers(&[
            ("grpc-status", "8"),
            ("grpc-message", "quota %E2%80%94 used up 100%25"),
        ]))
        .unwrap();
        assert_eq!(s.code, Code::ResourceExhausted);
        assert_eq!(s.message, "quota — used up 100%");
        assert_eq!(
            s.to_string(),
            "grpc-status 8 (resource_exhausted): quota — used up 100%"
        );
        let s = Status::from_trailers(&headers(&[("grpc-status", "42")])).unwrap();
        assert_eq!((s.code, s.number), (Code::Unknown, 42));
        assert!(matches!(
            Status::from_trailers(&HeaderMap::new()),
            Err(Error::NoStatus)
        ));
        for bad in ["", "-1", "ok", "1 ", "99999999999"] {
            let mut h = HeaderMap::new();
            h.insert("grpc-status", http::HeaderValue::from_str(bad).unwrap());
            assert!(
                matches!(Status::from_headers(&h), Err(Error::BadStatus(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn percent_decoding_keeps_what_is_not_an_escape() {
        assert_eq!(percent_decode(b"plain"), "plain");
        assert_eq!(percent_decode(b"50%"), "50%");
        assert_eq!(percent_decode(b"%zz%4"), "%zz%4");
        assert_eq!(percent_decode(b"%41%62"), "Ab");
        assert_eq!(percent_decode(b"%FF"), "\u{fffd}");
        let m = "naïve 100% \n done";
        assert_eq!(percent_decode(percent_encode(m).as_bytes()), m);
        assert_eq!(percent_encode("a%b\n"), "a%25b%0A");
    }

    #[test]
    fn heads() {
        let ok = headers(&[("content-type", "application/grpc+proto")]);
        assert_eq!(head(200, &ok).unwrap(), Head::Messages(Encoding::Identity));
        let gz = headers(&[
            ("content-type", "application/grpc"),
            ("grpc-encoding", "gzip"),
        ]);
        assert_eq!(head(200, &gz).unwrap(), Head::Messages(Encoding::Gzip));
        let only = headers(&[
            ("content-type", "application/grpc"),
            ("grpc-status", "14"),
            ("grpc-message", "down"),
        ]);
        assert_eq!(
            head(200, &only).unwrap(),
            Head::TrailersOnly(Status::new(Code::Unavailable, "down"))
        );
        let e = head(503, &headers(&[("content-type", "text/html")])).unwrap_err();
        assert_eq!(e.code(), Code::Unavailable);
        assert_eq!(
            e.to_string(),
            "HTTP status 503 without grpc-status (a proxy's answer?), read as unavailable"
        );
        let e = head(200, &headers(&[("content-type", "application/json")])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "content-type `application/json` is not application/grpc: not a gRPC server?"
        );
        assert!(matches!(
            head(200, &HeaderMap::new()),
            Err(Error::ContentType(None))
        ));
    }
}
