//! `[[op]]`: one request template with its checks, captures and outcome rules.

use std::time::Duration;

use http::{HeaderName, HeaderValue, Method};

use super::{
    Invalid, OpKind, Seg, at,
    flow::{ForEach, Then, compile_for_each},
    is_ident, key, players, pointer, positive,
    raw::RawOp,
};
use crate::template::{BUILTINS, Template, VarNames};
use herd_model::Outcome;

/// What the response must satisfy for the op to count as `ok`.
#[derive(Debug, Clone, Default)]
pub struct Check {
    /// Exact status.
    pub status: Option<u16>,
    /// JSON pointer → expected value.
    pub json: Vec<(String, serde_json::Value)>,
    /// Expected sha256 of the body, hex, with or without a `sha256:` prefix.
    pub sha256: Option<Template>,
    /// A response header (lowercase) that must carry the body's sha256, e.g. a registry's
    /// `docker-content-digest`: the server's own claim about what it sent.
    pub sha256_header: Option<String>,
}

/// One operation: a request template with its outcome rules.
#[derive(Debug, Clone)]
pub struct Op {
    /// The op's name in reports.
    pub name: String,
    /// HTTP method.
    pub method: Method,
    /// Path and query template (after the target's base path).
    pub path: Template,
    /// Request headers; values are templates.
    pub headers: Vec<(HeaderName, Template)>,
    /// Request body template.
    pub body: Option<Template>,
    /// Relative weight in the player's loop; 0 keeps the op out of the loop (setup only).
    pub weight: u32,
    /// Bound on the whole exchange: waiting for a connection, the request and the body.
    pub timeout: Duration,
    /// Variable slot ← JSON pointer into the response body.
    pub captures: Vec<(usize, String)>,
    /// Response checks.
    pub check: Check,
    /// JSON pointer to a domain code in the response body.
    pub code: Option<String>,
    /// Outcomes that are part of normal play for this op (`[outcome] expected` and its own
    /// `expected`): reports count them apart from `ok` and from errors.
    pub expected: Vec<Outcome>,
    /// A request, or a stream / long poll each player keeps open.
    pub kind: OpKind,
    /// Ops that run after this one ends `ok`, in the same turn, in this order.
    pub then: Vec<Then>,
    /// Run once per item of the previous op's response rather than once.
    pub for_each: Option<ForEach>,
}

impl Op {
    /// True when `o` is one of the op's expected outcomes.
    pub fn expects(&self, o: &Outcome) -> bool {
        self.expected.contains(o)
    }
}

/// Checks one `expected` entry at `path`: a name herd can produce for an op that reads
/// domain codes when `reads_codes`. `ok` is what everything is measured against, and a
/// domain code needs a `code` pointer to ever be an outcome.
pub(super) fn expected_outcome(
    name: &str,
    path: &[Seg],
    reads_codes: bool,
    whose: &str,
) -> Result<Outcome, Invalid> {
    let o: Outcome = name.into();
    match &o {
        Outcome::Ok => Err(at(
            path,
            "`ok` is what the other outcomes are told apart from; list only outcomes that are not ok but part of normal play (e.g. a game's `not_your_turn`, a limiter's `rate_limited`)",
        )),
        Outcome::Domain(code)
            if code.starts_with("transport_error") || code.starts_with("http_") =>
        {
            Err(at(
                path,
                format!(
                    "`{name}` is not an outcome herd has: transport errors are transport_error.connect, .reset, .protocol or .tls_*; statuses are http_1xx … http_5xx"
                ),
            ))
        }
        Outcome::Domain(_) if !reads_codes => Err(at(
            path,
            format!(
                "`{name}` would be a domain code, but {whose}, so it can never be an outcome: set [outcome] code (or the op's code) to the JSON pointer where the response carries it, e.g. code = \"/error/code\""
            ),
        )),
        _ => Ok(o),
    }
}

/// Default bound on one op: long enough for a slow service, short enough that a stalled
/// player cannot hide for a whole step.
pub(super) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) fn compile_op(
    i: usize,
    o: RawOp,
    default_timeout: Duration,
    default_code: &Option<String>,
    default_expected: &[Outcome],
    names: &mut VarNames,
) -> Result<(Op, Vec<String>), Invalid> {
    let here = |k: &str| vec![key("op"), Seg::Index(i), key(k)];
    let template = |src: &str, path: Vec<Seg>, names: &mut VarNames| {
        Template::parse(src, names).map_err(|e| Invalid {
            path,
            message: e.to_string(),
        })
    };
    if o.name.is_empty() {
        return Err(at(&here("name"), "must not be empty"));
    }
    let method = Method::from_bytes(o.method.as_bytes()).map_err(|_| {
        at(
            &here("method"),
            format!("`{}` is not an HTTP method (e.g. GET, POST, PUT)", o.method),
        )
    })?;
    if !o.path.starts_with('/') {
        return Err(at(
            &here("path"),
            format!("`{}` must start with `/`", o.path),
        ));
    }
    if let Some(why) = super::request_target::refusal(&o.path) {
        return Err(at(&here("path"), why));
    }
    let path = template(&o.path, here("path"), names)?;
    let mut headers = Vec::new();
    for (k, v) in &o.headers {
        let hp = vec![key("op"), Seg::Index(i), key("headers"), key(k)];
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| at(&hp, format!("`{k}` is not a valid header name")))?;
        if HeaderValue::from_str(v).is_err() {
            return Err(at(&hp, "the value has characters a header cannot carry"));
        }
        headers.push((name, template(v, hp, names)?));
    }
    let body = o
        .body
        .as_deref()
        .map(|b| template(b, here("body"), names))
        .transpose()?;
    let timeout = positive(o.timeout, default_timeout, &here("timeout"))?;
    let mut captures = Vec::new();
    for (var, p) in &o.capture {
        let cp = vec![key("op"), Seg::Index(i), key("capture"), key(var)];
        if !(is_ident(var) || players::is_group_var(var)) || BUILTINS.contains(&var.as_str()) {
            return Err(at(
                &cp,
                format!(
                    "`{var}` cannot be a variable name: use letters, digits and _, not player or account"
                ),
            ));
        }
        captures.push((names.intern(var), pointer(p, &cp)?));
    }
    let cp = |k: &str| vec![key("op"), Seg::Index(i), key("check"), key(k)];
    if let Some(s) = o.check.status
        && !(100..=599).contains(&s)
    {
        return Err(at(
            &cp("status"),
            format!("{s} is not an HTTP status (100–599)"),
        ));
    }
    let mut json = Vec::new();
    for (p, v) in o.check.json {
        let jp = vec![key("op"), Seg::Index(i), key("check"), key("json"), key(&p)];
        json.push((pointer(&p, &jp)?, v));
    }
    let sha256 = o
        .check
        .sha256
        .as_deref()
        .map(|s| template(s, cp("sha256"), names))
        .transpose()?;
    let sha256_header = match o.check.sha256_header {
        Some(h) if HeaderName::from_bytes(h.as_bytes()).is_err() => {
            return Err(at(
                &cp("sha256_header"),
                format!("`{h}` is not a valid header name"),
            ));
        }
        h => h.map(|h| h.to_ascii_lowercase()),
    };
    let code = match o.code.as_ref().or(default_code.as_ref()) {
        Some(c) if c.is_empty() => None,
        Some(c) => Some(pointer(c, &here("code"))?),
        None => None,
    };
    let mut expected = default_expected.to_vec();
    for (k, name) in o.expected.iter().enumerate() {
        let path = [key("op"), Seg::Index(i), key("expected"), Seg::Index(k)];
        let whose = format!("op `{}` reads no code", o.name);
        let e = expected_outcome(name, &path, code.is_some(), &whose)?;
        if !expected.contains(&e) {
            expected.push(e);
        }
    }
    let kind = players::compile_kind(
        players::RawOpKind {
            kind: o.kind,
            format: o.format,
            event_type: o.event_type,
            reconnect: o.reconnect,
            delivery: o.delivery,
            pause: o.pause.map(|d| d.0),
            conditional: o.conditional,
        },
        &here,
    )?;
    let for_each = compile_for_each(i, o.for_each.as_deref(), o.max_items, o.sample, names)?;
    if for_each.is_some() && o.weight.is_some_and(|w| w > 0) {
        return Err(at(
            &here("weight"),
            "an op with a for_each runs after the op whose response it iterates (its then), not on its own; leave weight out",
        ));
    }
    let op = Op {
        name: o.name,
        method,
        path,
        headers,
        body,
        weight: if kind.is_background() || for_each.is_some() {
            0
        } else {
            o.weight.unwrap_or(1)
        },
        timeout,
        captures,
        check: Check {
            status: o.check.status,
            json,
            sha256,
            sha256_header,
        },
        code,
        expected,
        kind,
        then: Vec::new(),
        for_each,
    };
    if op.kind.is_background() {
        players::check_background(i, &op, o.weight.is_some())?;
        if !o.then.is_empty() || op.for_each.is_some() {
            return Err(at(
                &here(if o.then.is_empty() {
                    "for_each"
                } else {
                    "then"
                }),
                format!(
                    "a {} op is kept open by every player, not run in a chain",
                    op.kind.name()
                ),
            ));
        }
    }
    Ok((op, o.then))
}

/// The variable slots an op reads (its path, headers, body and sha256 check).
pub(crate) fn op_reads(op: &Op) -> impl Iterator<Item = usize> {
    reads(op).into_iter()
}

/// The index of the op named `name`, or an error at `path` that lists the ops there are.
pub(super) fn find_op(ops: &[Op], name: &str, path: &[Seg]) -> Result<usize, Invalid> {
    ops.iter().position(|o| o.name == name).ok_or_else(|| {
        let names: Vec<&str> = ops.iter().map(|o| o.name.as_str()).collect();
        at(
            path,
            format!("no op named `{name}`; ops are: {}", names.join(", ")),
        )
    })
}

/// The variable slots an op reads.
pub(super) fn reads(op: &Op) -> Vec<usize> {
    let mut v: Vec<usize> = op.path.slots().collect();
    for (_, t) in &op.headers {
        v.extend(t.slots());
    }
    if let Some(b) = &op.body {
        v.extend(b.slots());
    }
    if let Some(s) = &op.check.sha256 {
        v.extend(s.slots());
    }
    v
}
