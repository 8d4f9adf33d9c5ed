//! What became of one op: the outcome classes every report counts and keeps a histogram for.

use std::{fmt, time::Duration};

use bytes::Bytes;
use sha2::{Digest as _, Sha256};

use crate::{scenario::Op, template::Vars, transport::Headers};

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
}

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
            "description": "An op's outcome: `ok`, `transport_error.{connect,reset,protocol,tls_*}`, `timeout`, `rate_limited`, `http_{1..5}xx`, `capture_missing`, `check_failed`, `var_missing`, `truncated`, `cancelled`, `domain_other`, or a domain code read from the response (written `domain.<code>` when it is spelled like one of herd's own names)."
        })
    }
}

/// Longest domain code kept as its own outcome; longer ones are not codes but messages.
const MAX_CODE_LEN: usize = 64;

/// Classifies a response for `op`, and on success stores its captures in `vars`.
/// Returns the outcome and, for a 429, the `Retry-After` pause it asked for.
pub(crate) fn classify(
    op: &Op,
    status: u16,
    headers: &Headers,
    body: &Bytes,
    vars: &mut Vars,
) -> (Outcome, Option<Duration>) {
    if status == 429 {
        return (Outcome::RateLimited, retry_after(headers));
    }
    let needs_json = op.code.is_some()
        || !op.captures.is_empty()
        || !op.check.json.is_empty()
        || op.then.iter().any(|t| t.for_each.is_some());
    let json: Option<serde_json::Value> = if needs_json {
        serde_json::from_slice(body).ok()
    } else {
        None
    };
    if let (Some(ptr), Some(j)) = (&op.code, &json)
        && let Some(code) = j.pointer(ptr).and_then(scalar)
        && !code.is_empty()
        && code.len() <= MAX_CODE_LEN
    {
        return (Outcome::Domain(code.into()), None);
    }
    let expected = op.check.status.is_some_and(|s| s == status);
    if !(200..300).contains(&status) && !expected {
        return (Outcome::Http((status / 100) as u8), None);
    }
    if op.check.status.is_some() && !expected {
        return (Outcome::CheckFailed, None);
    }
    for (ptr, want) in &op.check.json {
        let got = json.as_ref().and_then(|j| j.pointer(ptr));
        if !got.is_some_and(|g| json_eq(g, want)) {
            return (Outcome::CheckFailed, None);
        }
    }
    if let Some(t) = &op.check.sha256 {
        let Ok(want) = t.render(vars) else {
            return (Outcome::CheckFailed, None);
        };
        if !digest_matches(body, &want) {
            return (Outcome::CheckFailed, None);
        }
    }
    if let Some(h) = &op.check.sha256_header {
        let claimed = headers.get(h).and_then(|v| std::str::from_utf8(v).ok());
        if !claimed.is_some_and(|want| digest_matches(body, want)) {
            return (Outcome::CheckFailed, None);
        }
    }
    let mut missing = false;
    for (slot, ptr) in &op.captures {
        match json.as_ref().and_then(|j| j.pointer(ptr)).and_then(scalar) {
            Some(v) => vars.set(*slot, v),
            None => missing = true,
        }
    }
    // A for_each that selects nothing is a capture that found nothing: the next op of the
    // chain has nothing to run for.
    for t in &op.then {
        if let Some(f) = &t.for_each
            && json.as_ref().is_none_or(|j| f.items(j).is_empty())
        {
            missing = true;
        }
    }
    if missing {
        return (Outcome::CaptureMissing, None);
    }
    (Outcome::Ok, None)
}

/// A JSON scalar as text: strings as they are, numbers and booleans as written.
fn scalar(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// JSON equality where `1` and `1.0` are the same number, since TOML writes integers and
/// floats apart and a service may not.
pub(crate) fn json_eq(got: &serde_json::Value, want: &serde_json::Value) -> bool {
    match (got, want) {
        (serde_json::Value::Number(a), serde_json::Value::Number(b)) => {
            a == b || a.as_f64() == b.as_f64()
        }
        _ => got == want,
    }
}

/// The body's sha256 as lowercase hex.
pub fn sha256_hex(body: &[u8]) -> String {
    let digest = Sha256::digest(body);
    let mut s = String::with_capacity(64);
    for b in digest {
        s.push(char::from_digit((b >> 4) as u32, 16).expect("a nibble"));
        s.push(char::from_digit((b & 15) as u32, 16).expect("a nibble"));
    }
    s
}

/// Compares a body's sha256 with `want`, hex with or without the `sha256:` prefix that
/// registries put on digests.
fn digest_matches(body: &[u8], want: &str) -> bool {
    let want = want.trim();
    let want = want.strip_prefix("sha256:").unwrap_or(want);
    want.eq_ignore_ascii_case(&sha256_hex(body))
}

/// `Retry-After` as delta-seconds. An HTTP-date is not honoured: a limiter answers in
/// seconds, and a date would tie the pause to the two hosts' clocks agreeing.
fn retry_after(headers: &Headers) -> Option<Duration> {
    let v = std::str::from_utf8(headers.get("retry-after")?).ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Scenario;

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

    fn op(extra: &str) -> (Scenario, Vars) {
        let src = format!(
            "[target]\nurl = \"http://127.0.0.1:1\"\n[outcome]\ncode = \"/error/code\"\n[vars]\ndigest = \"\"\n[[op]]\nname = \"a\"\npath = \"/a\"\n{extra}\n[[step]]\nplayers = 1\nduration = \"1s\"\n"
        );
        let s = Scenario::parse("t.toml", &src, &[]).unwrap();
        let vars = Vars::new(1, 1, &s.var_defaults);
        (s, vars)
    }

    fn run(
        extra: &str,
        status: u16,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (Outcome, Option<Duration>, Vars, Scenario) {
        let (s, mut vars) = op(extra);
        let mut h = http::HeaderMap::new();
        for (k, v) in headers {
            h.insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let (o, ra) = classify(
            &s.ops[0],
            status,
            &h.into(),
            &Bytes::from(body.to_owned()),
            &mut vars,
        );
        (o, ra, vars, s)
    }

    #[test]
    fn status_classes() {
        assert_eq!(run("", 200, &[], "").0, Outcome::Ok);
        assert_eq!(run("", 204, &[], "").0, Outcome::Ok);
        assert_eq!(run("", 404, &[], "").0, Outcome::Http(4));
        assert_eq!(run("", 503, &[], "").0, Outcome::Http(5));
        assert_eq!(run("", 302, &[], "").0, Outcome::Http(3));
        assert_eq!(run("check = { status = 404 }", 404, &[], "").0, Outcome::Ok);
        assert_eq!(
            run("check = { status = 201 }", 200, &[], "").0,
            Outcome::CheckFailed
        );
    }

    #[test]
    fn rate_limited_with_retry_after() {
        let (o, ra, ..) = run("", 429, &[("retry-after", "2")], "");
        assert_eq!(
            (o, ra),
            (Outcome::RateLimited, Some(Duration::from_secs(2)))
        );
        let (o, ra, ..) = run(
            "",
            429,
            &[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")],
            "",
        );
        assert_eq!((o, ra), (Outcome::RateLimited, None));
    }

    #[test]
    fn domain_codes_from_the_body() {
        let body = r#"{"error":{"code":"not_your_turn"}}"#;
        assert_eq!(
            run("", 200, &[], body).0,
            Outcome::Domain("not_your_turn".into())
        );
        assert_eq!(
            run("", 409, &[], body).0,
            Outcome::Domain("not_your_turn".into())
        );
        assert_eq!(run("code = \"\"", 409, &[], body).0, Outcome::Http(4));
        assert_eq!(run("", 200, &[], "not json").0, Outcome::Ok);
        assert_eq!(
            Outcome::Domain("game_finished".into()).to_string(),
            "game_finished"
        );
    }

    #[test]
    fn captures_and_capture_missing() {
        let (o, _, vars, s) = run(
            "capture = { game_id = \"/game/id\" }",
            200,
            &[],
            r#"{"game":{"id":17}}"#,
        );
        assert_eq!(o, Outcome::Ok);
        assert_eq!(vars.get(s.vars.slot("game_id").unwrap()), Some("17"));
        let (o, _, vars, s) = run(
            "capture = { game_id = \"/game/id\" }",
            200,
            &[],
            r#"{"game":{}}"#,
        );
        assert_eq!(o, Outcome::CaptureMissing);
        assert_eq!(vars.get(s.vars.slot("game_id").unwrap()), None);
        assert_eq!(
            run("capture = { game_id = \"/game/id\" }", 200, &[], "<html>").0,
            Outcome::CaptureMissing
        );
    }

    #[test]
    fn json_and_digest_checks() {
        let json = "check = { json = { \"/ok\" = true, \"/n\" = 2 } }";
        assert_eq!(run(json, 200, &[], r#"{"ok":true,"n":2.0}"#).0, Outcome::Ok);
        assert_eq!(
            run(json, 200, &[], r#"{"ok":false,"n":2}"#).0,
            Outcome::CheckFailed
        );
        let hex = sha256_hex(b"blob");
        assert_eq!(hex.len(), 64);
        let check = format!("check = {{ sha256 = \"sha256:{hex}\" }}");
        assert_eq!(run(&check, 200, &[], "blob").0, Outcome::Ok);
        assert_eq!(run(&check, 200, &[], "blob!").0, Outcome::CheckFailed);
        let (s, mut vars) = op("check = { sha256 = \"{digest}\" }");
        vars.set(s.vars.slot("digest").unwrap(), hex.to_uppercase());
        let (o, _) = classify(
            &s.ops[0],
            200,
            &Headers::default(),
            &Bytes::from_static(b"blob"),
            &mut vars,
        );
        assert_eq!(o, Outcome::Ok);
    }

    #[test]
    fn names() {
        assert_eq!(
            Outcome::TransportError(TransportErrorKind::Reset).to_string(),
            "transport_error.reset"
        );
        assert_eq!(Outcome::Http(5).to_string(), "http_5xx");
        assert!(!Outcome::VarMissing.was_sent());
    }
}
