//! Judging one response: its outcome class from the op's checks, captures taken on success,
//! and a 429's `Retry-After` pause. [`judge`] is the part gRPC calls and WebSocket replies
//! share with HTTP: checks and captures on a successful answer's JSON.

use std::time::Duration;

use bytes::Bytes;
use herd_model::Outcome;
use sha2::{Digest as _, Sha256};

use herd_http::Headers;

use crate::{scenario::Op, template::Vars};

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
    let json: Option<serde_json::Value> = if needs_json(op) {
        serde_json::from_slice(body).ok()
    } else {
        None
    };
    if let Some(code) = domain_code(op, json.as_ref()) {
        return (code, None);
    }
    let expected = op.check.status.is_some_and(|s| s == status);
    if !(200..300).contains(&status) && !expected {
        return (Outcome::Http((status / 100) as u8), None);
    }
    if op.check.status.is_some() && !expected {
        return (Outcome::CheckFailed, None);
    }
    (judge(op, json.as_ref(), body, Some(headers), vars), None)
}

/// True when judging a response of `op` reads its JSON: a code, a capture, a JSON check or
/// a `for_each` after it.
pub(crate) fn needs_json(op: &Op) -> bool {
    op.code.is_some()
        || !op.captures.is_empty()
        || !op.check.json.is_empty()
        || op.then.iter().any(|t| t.for_each.is_some())
}

/// The domain code at the op's `code` pointer, if the response carries one.
pub(crate) fn domain_code(op: &Op, json: Option<&serde_json::Value>) -> Option<Outcome> {
    let (ptr, j) = (op.code.as_ref()?, json?);
    let code = j.pointer(ptr).and_then(scalar)?;
    (!code.is_empty() && code.len() <= MAX_CODE_LEN).then(|| Outcome::Domain(code.into()))
}

/// A successful answer (an HTTP 2xx, a gRPC `ok`, a WebSocket reply) judged by the op's
/// checks — JSON, the body's sha256, a header's claim of it — then its captures taken:
/// `ok`, `check_failed` or `capture_missing`.
pub(crate) fn judge(
    op: &Op,
    json: Option<&serde_json::Value>,
    body: &[u8],
    headers: Option<&Headers>,
    vars: &mut Vars,
) -> Outcome {
    for (ptr, want) in &op.check.json {
        let got = json.and_then(|j| j.pointer(ptr));
        if !got.is_some_and(|g| json_eq(g, want)) {
            return Outcome::CheckFailed;
        }
    }
    if let Some(t) = &op.check.sha256 {
        let Ok(want) = t.render(vars) else {
            return Outcome::CheckFailed;
        };
        if !digest_matches(body, &want) {
            return Outcome::CheckFailed;
        }
    }
    if let Some(h) = &op.check.sha256_header {
        let claimed = headers
            .and_then(|hs| hs.get(h))
            .and_then(|v| std::str::from_utf8(v).ok());
        if !claimed.is_some_and(|want| digest_matches(body, want)) {
            return Outcome::CheckFailed;
        }
    }
    let mut missing = false;
    for (slot, ptr) in &op.captures {
        match json.and_then(|j| j.pointer(ptr)).and_then(scalar) {
            Some(v) => vars.set(*slot, v),
            None => missing = true,
        }
    }
    // A for_each that selects nothing is a capture that found nothing: the next op of the
    // chain has nothing to run for.
    for t in &op.then {
        if let Some(f) = &t.for_each
            && json.is_none_or(|j| f.items(j).is_empty())
        {
            missing = true;
        }
    }
    if missing {
        return Outcome::CaptureMissing;
    }
    Outcome::Ok
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
    use herd_model::TransportErrorKind;

    use super::*;
    use crate::scenario::Scenario;

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
