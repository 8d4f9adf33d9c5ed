//! What became of one op: the outcome classes every report counts and keeps a histogram for.

use std::fmt;

/// Which part of a connection failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransportErrorKind {
    /// The TCP connect or the HTTP handshake failed (refused, unreachable, timed out).
    Connect,
    /// The connection ended under the request: RST, EOF, or the peer closed it.
    Reset,
    /// The peer spoke something other than the HTTP we expected.
    Protocol,
    /// The TLS handshake failed, for this reason.
    Tls(TlsProblem),
}

/// Why a TLS handshake failed: the outcome names it, since each has its own remedy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TlsProblem {
    /// The certificate chains to no CA the driver trusts: self-signed, or a private CA
    /// (`target.ca` or `--insecure`).
    UnknownCa,
    /// The certificate is not for the URL's host (fix the URL, or `--insecure`).
    NameMismatch,
    /// The certificate has expired or is not valid yet.
    Expired,
    /// Anything else: an alert from the server, a peer that does not speak TLS, another
    /// certificate problem.
    Handshake,
}

/// The outcome class of one op.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// A response that passed every check; captures were taken.
    Ok,
    /// The connection failed; the player reconnects on its next op.
    TransportError(TransportErrorKind),
    /// No full response within the op's timeout.
    Timeout,
    /// HTTP 429.
    RateLimited,
    /// A status outside 2xx (other than 429) that the op did not expect, by class: 1, 3, 4, 5.
    Http(u8),
    /// A domain code the response body carried at the op's `code` pointer.
    Domain(Box<str>),
    /// A capture's JSON pointer found nothing (or the body was not JSON).
    CaptureMissing,
    /// A status, JSON or sha256 check failed.
    CheckFailed,
    /// The op reads a variable the player never got; nothing was sent.
    VarMissing,
    /// A `for_each` found more items than its `max_items`: one count per cut-off list, on
    /// the op that would have run for them; nothing was sent for it.
    Truncated,
    /// The run's grace after a stop ran out while the op was in flight.
    Cancelled,
    /// A gRPC call ended with this status code (1–16, never 0: that is `ok`; 4,
    /// deadline exceeded, is `timeout`): `grpc_resource_exhausted`, `grpc_unavailable`, …
    Grpc(u8),
    /// The WebSocket closed under the op with this close code: `ws_going_away`,
    /// `ws_policy_violation`, … for the codes RFC 6455 and IANA name, `ws_4001` for a
    /// service's own (3000–4999).
    WsClose(u16),
}

/// gRPC's status codes by number, as outcome names write them (after `grpc_`).
pub const GRPC_CODES: [&str; 17] = [
    "ok",
    "cancelled",
    "unknown",
    "invalid_argument",
    "deadline_exceeded",
    "not_found",
    "already_exists",
    "permission_denied",
    "resource_exhausted",
    "failed_precondition",
    "aborted",
    "out_of_range",
    "unimplemented",
    "internal",
    "unavailable",
    "data_loss",
    "unauthenticated",
];

/// The WebSocket close codes with a name of their own (RFC 6455 §7.4.1 and the IANA
/// registry), as outcome names write them (after `ws_`).
pub const WS_CLOSE_CODES: [(u16, &str); 15] = [
    (1000, "normal"),
    (1001, "going_away"),
    (1002, "protocol_error"),
    (1003, "unsupported_data"),
    (1005, "no_status"),
    (1006, "abnormal"),
    (1007, "invalid_payload"),
    (1008, "policy_violation"),
    (1009, "message_too_big"),
    (1010, "mandatory_extension"),
    (1011, "internal_error"),
    (1012, "service_restart"),
    (1013, "try_again_later"),
    (1014, "bad_gateway"),
    (1015, "tls_handshake"),
];

impl Outcome {
    /// True if herd tried to send the op (everything but `var_missing`; a failed connect
    /// counts as a try).
    pub fn was_sent(&self) -> bool {
        !matches!(self, Self::VarMissing | Self::Truncated)
    }

    /// True for [`Outcome::Ok`].
    pub fn is_ok(&self) -> bool {
        matches!(self, Self::Ok)
    }
}

impl fmt::Display for TransportErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Connect => "connect",
            Self::Reset => "reset",
            Self::Protocol => "protocol",
            Self::Tls(TlsProblem::UnknownCa) => "tls_unknown_ca",
            Self::Tls(TlsProblem::NameMismatch) => "tls_name_mismatch",
            Self::Tls(TlsProblem::Expired) => "tls_expired",
            Self::Tls(TlsProblem::Handshake) => "tls_handshake",
        })
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ok => f.write_str("ok"),
            Self::TransportError(k) => write!(f, "transport_error.{k}"),
            Self::Timeout => f.write_str("timeout"),
            Self::RateLimited => f.write_str("rate_limited"),
            Self::Http(c) => write!(f, "http_{c}xx"),
            Self::Domain(code) if code.parse::<Outcome>().ok().as_ref() == Some(self) => {
                f.write_str(code)
            }
            Self::Domain(code) => write!(f, "domain.{code}"),
            Self::CaptureMissing => f.write_str("capture_missing"),
            Self::CheckFailed => f.write_str("check_failed"),
            Self::VarMissing => f.write_str("var_missing"),
            Self::Truncated => f.write_str("truncated"),
            Self::Cancelled => f.write_str("cancelled"),
            Self::Grpc(c) => match GRPC_CODES.get(usize::from(*c)) {
                Some(name) => write!(f, "grpc_{name}"),
                None => write!(f, "grpc_{c}"),
            },
            Self::WsClose(c) => match WS_CLOSE_CODES.iter().find(|(n, _)| n == c) {
                Some((_, name)) => write!(f, "ws_{name}"),
                None => write!(f, "ws_{c}"),
            },
        }
    }
}

impl Outcome {
    /// The outcome's name as reports, the store and JSON write it: `ok`,
    /// `transport_error.reset`, `http_5xx`, a domain code, … A domain code that would read
    /// back as something else (`timeout`, `http_5xx`, …) is written `domain.<code>`, so
    /// every name reads back as the outcome it was.
    pub fn name(&self) -> String {
        self.to_string()
    }
}

fn parse_http(s: &str) -> Option<u8> {
    let c = s.strip_prefix("http_")?.strip_suffix("xx")?;
    match c.as_bytes() {
        [d @ b'1'..=b'5'] => Some(d - b'0'),
        _ => None,
    }
}

fn parse_grpc(s: &str) -> Option<Outcome> {
    let c = s.strip_prefix("grpc_")?;
    if let Some(n) = GRPC_CODES.iter().position(|n| *n == c) {
        return Some(Outcome::Grpc(n as u8));
    }
    // `grpc_8` is taken for `grpc_resource_exhausted`, as a code is often known by number.
    digits(c)
        .and_then(|n| u8::try_from(n).ok())
        .map(Outcome::Grpc)
}

fn parse_ws(s: &str) -> Option<Outcome> {
    let c = s.strip_prefix("ws_")?;
    if let Some((n, _)) = WS_CLOSE_CODES.iter().find(|(_, name)| *name == c) {
        return Some(Outcome::WsClose(*n));
    }
    // `ws_1008` is taken for `ws_policy_violation`.
    digits(c)
        .and_then(|n| u16::try_from(n).ok())
        .map(Outcome::WsClose)
}

/// A number written in plain decimal digits (0, or without a leading zero).
fn digits(s: &str) -> Option<u32> {
    if s.is_empty()
        || s.len() > 5
        || (s.len() > 1 && s.starts_with('0'))
        || !s.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    s.parse().ok()
}

impl std::str::FromStr for Outcome {
    type Err = std::convert::Infallible;

    /// Reads a name written by [`Outcome::name`]; anything that is not one of herd's own
    /// classes is a domain code.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use TransportErrorKind as K;
        Ok(match s {
            "ok" => Self::Ok,
            "timeout" => Self::Timeout,
            "rate_limited" => Self::RateLimited,
            "capture_missing" => Self::CaptureMissing,
            "check_failed" => Self::CheckFailed,
            "var_missing" => Self::VarMissing,
            "truncated" => Self::Truncated,
            "cancelled" => Self::Cancelled,
            s => {
                if let Some(k) = s.strip_prefix("transport_error.") {
                    let kind = match k {
                        "connect" => Some(K::Connect),
                        "reset" => Some(K::Reset),
                        "protocol" => Some(K::Protocol),
                        "tls_unknown_ca" => Some(K::Tls(TlsProblem::UnknownCa)),
                        "tls_name_mismatch" => Some(K::Tls(TlsProblem::NameMismatch)),
                        "tls_expired" => Some(K::Tls(TlsProblem::Expired)),
                        "tls_handshake" => Some(K::Tls(TlsProblem::Handshake)),
                        _ => None,
                    };
                    if let Some(kind) = kind {
                        return Ok(Self::TransportError(kind));
                    }
                }
                if let Some(c) = parse_http(s) {
                    return Ok(Self::Http(c));
                }
                if let Some(o) = parse_grpc(s).or_else(|| parse_ws(s)) {
                    return Ok(o);
                }
                Self::Domain(s.strip_prefix("domain.").unwrap_or(s).into())
            }
        })
    }
}

impl From<&str> for Outcome {
    /// The outcome `name` stands for (see [`FromStr`](std::str::FromStr)).
    fn from(name: &str) -> Self {
        name.parse()
            .unwrap_or_else(|e: std::convert::Infallible| match e {})
    }
}

impl serde::Serialize for Outcome {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Outcome {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(s.parse()
            .unwrap_or_else(|e: std::convert::Infallible| match e {}))
    }
}

impl schemars::JsonSchema for Outcome {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Outcome".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "An op's outcome: `ok`, `transport_error.{connect,reset,protocol,tls_*}`, `timeout`, `rate_limited`, `http_{1..5}xx`, `capture_missing`, `check_failed`, `var_missing`, `truncated`, `cancelled`, `grpc_<code>` (a gRPC status, e.g. `grpc_resource_exhausted`), `ws_<close code>` (a WebSocket closed under the op, e.g. `ws_going_away`, `ws_4001`), `domain_other`, or a domain code read from the response (written `domain.<code>` when it is spelled like one of herd's own names)."
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_name_reads_back_as_its_outcome() {
        use TransportErrorKind as K;
        for o in [
            Outcome::Ok,
            Outcome::TransportError(K::Connect),
            Outcome::TransportError(K::Reset),
            Outcome::TransportError(K::Protocol),
            Outcome::TransportError(K::Tls(TlsProblem::UnknownCa)),
            Outcome::TransportError(K::Tls(TlsProblem::NameMismatch)),
            Outcome::TransportError(K::Tls(TlsProblem::Expired)),
            Outcome::TransportError(K::Tls(TlsProblem::Handshake)),
            Outcome::Timeout,
            Outcome::RateLimited,
            Outcome::Http(1),
            Outcome::Http(5),
            Outcome::CaptureMissing,
            Outcome::CheckFailed,
            Outcome::VarMissing,
            Outcome::Truncated,
            Outcome::Cancelled,
            Outcome::Domain("not_your_turn".into()),
            Outcome::Domain("domain_other".into()),
            // Domain codes spelled like herd's own names keep their identity.
            Outcome::Domain("timeout".into()),
            Outcome::Domain("http_4xx".into()),
            Outcome::Domain("transport_error.reset".into()),
            Outcome::Domain("domain.x".into()),
            Outcome::Grpc(8),
            Outcome::Grpc(14),
            Outcome::Grpc(1),
            Outcome::Grpc(0),
            Outcome::Grpc(42),
            Outcome::WsClose(1001),
            Outcome::WsClose(1006),
            Outcome::WsClose(4001),
            Outcome::WsClose(3000),
            Outcome::WsClose(1004),
            // Domain codes spelled like the new names keep their identity too.
            Outcome::Domain("grpc_unavailable".into()),
            Outcome::Domain("ws_normal".into()),
            Outcome::Domain("grpc_".into()),
            Outcome::Domain("ws_01".into()),
        ] {
            let name = o.name();
            assert_eq!(name.parse::<Outcome>().unwrap(), o, "{name}");
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(serde_json::from_str::<Outcome>(&json).unwrap(), o, "{json}");
        }
        assert_eq!(
            Outcome::Domain("not_your_turn".into()).name(),
            "not_your_turn"
        );
        assert_eq!(Outcome::Domain("timeout".into()).name(), "domain.timeout");
        assert_eq!(Outcome::Http(4).name(), "http_4xx");
        assert_eq!(Outcome::Grpc(8).name(), "grpc_resource_exhausted");
        assert_eq!(Outcome::Grpc(14).name(), "grpc_unavailable");
        assert_eq!(Outcome::WsClose(1001).name(), "ws_going_away");
        assert_eq!(Outcome::WsClose(4001).name(), "ws_4001");
        assert_eq!(
            Outcome::Domain("grpc_unavailable".into()).name(),
            "domain.grpc_unavailable"
        );
        assert_eq!(
            "ws_1000".parse::<Outcome>().unwrap(),
            Outcome::WsClose(1000)
        );
        assert_eq!("grpc_8".parse::<Outcome>().unwrap(), Outcome::Grpc(8));
        // An unknown transport error kind or status class is a domain code, as it was.
        assert_eq!(
            "transport_error.x".parse::<Outcome>().unwrap(),
            Outcome::Domain("transport_error.x".into())
        );
        assert_eq!(
            "http_9xx".parse::<Outcome>().unwrap(),
            Outcome::Domain("http_9xx".into())
        );
    }
}
