//! The scenario file: target, ops, outcomes, captures, checks and the load plan, in TOML.
//!
//! Loading is two passes: serde (with `deny_unknown_fields`) checks shapes and names, then
//! [`compile`] checks what serde cannot (op references, variable provenance, URL) and turns
//! strings into templates, methods and header names. Both passes report errors through one
//! [`Diagnostic`] that points at the file, line, column and key. `docs/scenario.md` documents
//! every key.

mod error;
mod overrides;
mod players;
pub mod seed;
pub mod shapes;
mod tls;

use std::{collections::BTreeMap, fmt, ops::Range, path::Path, time::Duration};

use http::{HeaderName, HeaderValue, Method};
use serde::Deserialize;
use toml::{
    Spanned,
    de::{DeTable, DeValue},
};

pub use error::{Diagnostic, ScenarioError};
use error::{Locator, reword};
pub use herd_seed::SeedSpec;
use overrides::{Seg, path_string};
pub use players::{Backoff, Finish, GroupSpec, OpKind, StreamFormat};
pub use shapes::{CatalogRoute, Phase, PhaseKind, PhaseWork, RateStep, Shapes, Soak, WhenFull};
pub use tls::Tls;

use crate::template::{BUILTINS, Template, VarNames};

/// How requests travel to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    /// HTTP/1.1, one request at a time per connection.
    H1,
    /// HTTP/2 over cleartext TCP with prior knowledge (no upgrade), many streams per
    /// connection.
    H2c,
    /// HTTP/2 over TLS, chosen by ALPN (`https://` targets only).
    H2,
}

/// Who owns the connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connections {
    /// Each player (and each hammer worker) opens and keeps its own connection, like real
    /// clients do.
    PerPlayer,
    /// All players share this many connections, opened when the run starts.
    Pool(usize),
}

/// Where the load goes.
#[derive(Debug, Clone)]
pub struct Target {
    /// Host to connect to, as written in the URL.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// `host:port`, the request authority.
    pub authority: String,
    /// Path prefix from the URL, prepended to every op's path (empty for `/`).
    pub base_path: String,
    /// HTTP/1.1, h2c or h2.
    pub transport: TransportKind,
    /// For `https://`: how the server's certificate is checked; none for `http://`.
    pub tls: Option<Tls>,
    /// Per player or a shared pool.
    pub connections: Connections,
    /// Bound on opening one connection.
    pub connect_timeout: Duration,
}

/// How a player paces its turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// Back to back.
    None,
    /// This pause after each turn ends (a person reading the screen).
    Think(Duration),
    /// A turn starts every tick, whatever the previous one took (a client's poll timer).
    Tick(Duration),
}

/// Settings every player of the run shares.
#[derive(Debug, Clone)]
pub struct PlayerSettings {
    /// Pause between turns.
    pub pace: Pace,
    /// Player `p` uses account `p % accounts`; without it, account = player id.
    pub accounts: Option<u64>,
    /// Ops each player runs once, in order, before its weighted loop.
    pub setup: Vec<usize>,
    /// Pause the player for a 429's `Retry-After` (delta-seconds) before its next op.
    pub honour_retry_after: bool,
    /// Bound on the ops one player runs (setup included); the player leaves after that.
    pub max_ops: Option<u64>,
}

/// What the response must satisfy for the op to count as `ok`.
#[derive(Debug, Clone, Default)]
pub struct Check {
    /// Exact status.
    pub status: Option<u16>,
    /// JSON pointer → expected value.
    pub json: Vec<(String, serde_json::Value)>,
    /// Expected sha256 of the body, hex, with or without a `sha256:` prefix.
    pub sha256: Option<Template>,
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
    /// A request, or a stream / long poll each player keeps open.
    pub kind: OpKind,
}

/// How the players of a step arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// New players arrive evenly spaced over this ramp.
    Gradual(Duration),
    /// New players all start at the step's first instant.
    Burst,
}

/// One step of the load plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Players alive during the step (added or retired at its start).
    pub players: usize,
    /// How long the step lasts.
    pub duration: Duration,
    /// How added players arrive.
    pub arrival: Arrival,
    /// Players the step retires leave evenly spread over this (zero: all at its start).
    pub leave: Duration,
    /// A `[[step]]`, a soak step or the stop spread.
    pub kind: PhaseKind,
}

/// W workers flooding one op from one account, alongside the steps.
#[derive(Debug, Clone)]
pub struct Hammer {
    /// The op, an index into [`Scenario::ops`].
    pub op: usize,
    /// Concurrent workers, back to back.
    pub workers: usize,
    /// How long the hammer runs.
    pub duration: Duration,
    /// Delay from the run's start.
    pub start: Duration,
    /// The account every worker uses.
    pub account: u64,
    /// Pause on `Retry-After`; off by default because the hammer exists to prove the limiter.
    pub honour_retry_after: bool,
}

/// A loaded, checked scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The file name, for messages and reports.
    pub file: String,
    /// Where the load goes.
    pub target: Target,
    /// Player settings.
    pub player: PlayerSettings,
    /// Operations, in file order.
    pub ops: Vec<Op>,
    /// The step plan.
    pub steps: Vec<Step>,
    /// The hammer, if any.
    pub hammer: Option<Hammer>,
    /// Rate steps, the catalog, the soak and the stop spread ([`Scenario::plan`] orders them).
    pub shapes: Shapes,
    /// Variable names; a slot is an index here.
    pub vars: VarNames,
    /// `[vars]` defaults by slot.
    pub var_defaults: Vec<Option<String>>,
    /// Seed for the players' op choice, so a run's op mix repeats.
    pub random_seed: u64,
    /// Service-level objectives per op, checked per step by `herd run`'s report.
    pub slo: Vec<Slo>,
    /// How players form groups, if they do.
    pub group: Option<GroupSpec>,
    /// Accounts and sessions to insert into the target's database (`[seed]`).
    pub seed: Option<SeedSpec>,
}

/// One objective: an op's latency percentile (or its error share) must stay under a limit.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Slo {
    /// The op.
    pub op: String,
    /// What is measured.
    pub metric: SloMetric,
    /// The limit: microseconds for latencies, a share (0–1) for errors.
    pub limit: f64,
    /// The objective as written, e.g. `p99 < 500ms`.
    pub text: String,
}

/// What an [`Slo`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SloMetric {
    /// Median latency.
    P50,
    /// 90th percentile.
    P90,
    /// 99th percentile.
    P99,
    /// 99.9th percentile.
    P999,
    /// Largest latency.
    Max,
    /// Share of outcomes that are not `ok`.
    Errors,
}

/// Parses `p99 < 500ms`, `max < 2s`, `errors < 1%`.
fn parse_slo(op: &str, text: &str) -> Result<Slo, String> {
    let (metric, limit) = text.split_once('<').ok_or_else(|| {
        format!("`{text}`: write `p99 < 500ms` (p50, p90, p99, p999, max) or `errors < 1%`")
    })?;
    let metric = match metric.trim() {
        "p50" => SloMetric::P50,
        "p90" => SloMetric::P90,
        "p99" => SloMetric::P99,
        "p999" | "p99.9" => SloMetric::P999,
        "max" => SloMetric::Max,
        "errors" => SloMetric::Errors,
        other => {
            return Err(format!(
                "`{other}` is not a metric; valid: p50, p90, p99, p999, max, errors"
            ));
        }
    };
    let limit = limit.trim();
    let limit = if metric == SloMetric::Errors {
        let pct = limit
            .strip_suffix('%')
            .and_then(|v| v.trim().parse::<f64>().ok())
            .ok_or_else(|| format!("`{limit}`: an error limit is a percentage, e.g. 1%"))?;
        pct / 100.0
    } else {
        humantime::parse_duration(limit)
            .map_err(|e| format!("`{limit}`: {e} (write e.g. 500ms)"))?
            .as_micros() as f64
    };
    Ok(Slo {
        op: op.to_owned(),
        metric,
        limit,
        text: text.trim().to_owned(),
    })
}

impl Scenario {
    /// Reads and checks a scenario file, applying `--set KEY=VALUE` overrides.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Self, ScenarioError> {
        let source = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&path.display().to_string(), &source, overrides)
    }

    /// Checks a scenario held in memory; `file` names it in messages.
    pub fn parse(file: &str, source: &str, overrides: &[String]) -> Result<Self, ScenarioError> {
        let loc = Locator {
            file,
            source,
            overrides,
        };
        let invalid = |span: Option<Range<usize>>, key: String, message: String| {
            ScenarioError::Invalid(Box::new(loc.diagnostic(span, key, message)))
        };
        let mut doc = DeTable::parse(source)
            .map_err(|e| invalid(e.span(), String::new(), e.message().to_owned()))?;
        for (n, arg) in overrides.iter().enumerate() {
            let bad = |reason: String| ScenarioError::Override {
                arg: arg.clone(),
                reason,
            };
            let (path, value) = overrides::parse_arg(arg).map_err(bad)?;
            let span = Locator::override_span(source.len(), n);
            let value = overrides::parse_value(value, span.clone());
            overrides::apply(doc.get_mut(), &path, value, &span).map_err(bad)?;
        }
        seed::refuse_urls(doc.get_ref(), &loc)?;
        let raw: RawScenario = serde_path_to_error::deserialize(toml::de::Deserializer::from(
            doc.clone(),
        ))
        .map_err(|e| {
            let key = e.path().to_string();
            let inner = e.into_inner();
            invalid(inner.span(), key, reword(inner.message()))
        })?;
        compile(file, raw).map_err(|Invalid { path, message }| {
            invalid(locate(&doc, &path), path_string(&path), message)
        })
    }

    /// The index of the op named `name`.
    pub fn op(&self, name: &str) -> Option<usize> {
        self.ops.iter().position(|o| o.name == name)
    }

    /// How long the plan runs: the steps and rate steps (the catalog, bounded by counts,
    /// adds its own time), or the hammer if it ends later.
    pub fn duration(&self) -> Duration {
        let steps: Duration = self.steps.iter().map(|s| s.duration).sum::<Duration>()
            + self
                .shapes
                .rates
                .iter()
                .map(|r| r.duration)
                .sum::<Duration>();
        let hammer = self
            .hammer
            .as_ref()
            .map_or(Duration::ZERO, |h| h.start + h.duration);
        steps.max(hammer)
    }
}

/// The span of the value at `path`, or of its deepest ancestor that exists.
fn locate(doc: &Spanned<DeTable<'_>>, path: &[Seg]) -> Option<Range<usize>> {
    let mut span = None;
    let mut cur: Option<&Spanned<DeValue<'_>>> = None;
    let mut table = Some(doc.get_ref());
    for seg in path {
        let next = match (seg, table, cur.map(|c| c.get_ref())) {
            (Seg::Key(k), Some(t), _) => t.get(k.as_str()),
            (Seg::Index(i), _, Some(DeValue::Array(a))) => a.get(*i),
            _ => None,
        };
        let Some(next) = next else { break };
        span = Some(next.span());
        table = next.get_ref().as_table();
        cur = Some(next);
    }
    span
}

/// A problem [`compile`] found, before it is located in the source.
struct Invalid {
    path: Vec<Seg>,
    message: String,
}

fn at(path: &[Seg], message: impl Into<String>) -> Invalid {
    Invalid {
        path: path.to_vec(),
        message: message.into(),
    }
}

fn key(k: &str) -> Seg {
    Seg::Key(k.to_owned())
}

/// A duration written as `500ms`, `10s`, `2m`.
#[derive(Debug, Clone, Copy)]
struct Dur(Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map(Dur).map_err(|e| {
            serde::de::Error::custom(format!(
                "invalid duration `{s}`: {e} (write e.g. 500ms, 10s, 2m)"
            ))
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    target: RawTarget,
    #[serde(default)]
    player: RawPlayer,
    #[serde(default)]
    outcome: RawOutcome,
    #[serde(default)]
    vars: BTreeMap<String, String>,
    #[serde(default, rename = "op")]
    ops: Vec<RawOp>,
    #[serde(default, rename = "step")]
    steps: Vec<RawStep>,
    hammer: Option<RawHammer>,
    #[serde(default, rename = "rate")]
    rates: Vec<shapes::RawRate>,
    soak: Option<shapes::RawSoak>,
    catalog: Option<shapes::RawCatalog>,
    stop: Option<shapes::RawStop>,
    #[serde(default)]
    random_seed: u64,
    /// `op = "p99 < 500ms"` or `op = ["p99 < 500ms", "errors < 1%"]`.
    #[serde(default)]
    slo: BTreeMap<String, RawSlo>,
    group: Option<players::RawGroup>,
    seed: Option<seed::RawSeed>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawSlo {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum RawConnections {
    PerPlayer,
    Pool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTarget {
    url: String,
    #[serde(default = "default_transport")]
    transport: TransportKind,
    #[serde(default = "default_connections")]
    connections: RawConnections,
    pool_size: Option<usize>,
    timeout: Option<Dur>,
    connect_timeout: Option<Dur>,
    ca: Option<String>,
    insecure: Option<bool>,
}

fn default_transport() -> TransportKind {
    TransportKind::H1
}

fn default_connections() -> RawConnections {
    RawConnections::PerPlayer
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPlayer {
    think: Option<Dur>,
    tick: Option<Dur>,
    accounts: Option<u64>,
    #[serde(default)]
    setup: Vec<String>,
    honour_retry_after: Option<bool>,
    max_ops: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawOutcome {
    code: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOp {
    name: String,
    #[serde(default = "default_method")]
    method: String,
    path: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: Option<String>,
    weight: Option<u32>,
    timeout: Option<Dur>,
    #[serde(default)]
    capture: BTreeMap<String, String>,
    #[serde(default)]
    check: RawCheck,
    code: Option<String>,
    kind: Option<players::RawKind>,
    format: Option<StreamFormat>,
    event_type: Option<String>,
    reconnect: Option<players::RawReconnect>,
}

fn default_method() -> String {
    "GET".into()
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawCheck {
    status: Option<u16>,
    #[serde(default)]
    json: BTreeMap<String, serde_json::Value>,
    sha256: Option<String>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
enum RawArrival {
    Gradual,
    Burst,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    players: usize,
    duration: Dur,
    #[serde(default = "default_arrival")]
    arrival: RawArrival,
    ramp: Option<Dur>,
    leave: Option<Dur>,
}

fn default_arrival() -> RawArrival {
    RawArrival::Gradual
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHammer {
    op: String,
    workers: usize,
    duration: Dur,
    start: Option<Dur>,
    #[serde(default)]
    account: u64,
    #[serde(default)]
    honour_retry_after: bool,
}

/// Default bound on one op: long enough for a slow service, short enough that a stalled
/// player cannot hide for a whole step.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

fn positive(d: Option<Dur>, default: Duration, path: &[Seg]) -> Result<Duration, Invalid> {
    match d {
        None => Ok(default),
        Some(Dur(d)) if d.is_zero() => Err(at(path, "must be longer than 0")),
        Some(Dur(d)) => Ok(d),
    }
}

fn pointer(p: &str, path: &[Seg]) -> Result<String, Invalid> {
    if p.is_empty() || p.starts_with('/') {
        Ok(p.to_owned())
    } else {
        Err(at(
            path,
            format!("`{p}` is not a JSON pointer: write `/{p}` (RFC 6901, e.g. `/error/code`)"),
        ))
    }
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

fn compile_target(file: &str, t: RawTarget) -> Result<Target, Invalid> {
    let p = [key("target")];
    let url_path = [key("target"), key("url")];
    let uri: http::Uri = t
        .url
        .parse()
        .map_err(|e| at(&url_path, format!("`{}` is not a URL: {e}", t.url)))?;
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => {
            return Err(at(
                &url_path,
                format!("`{}` needs the http:// or https:// scheme", t.url),
            ));
        }
    };
    let tls = tls::compile(file, https, t.transport, t.ca, t.insecure)?;
    let host = uri
        .host()
        .ok_or_else(|| at(&url_path, format!("`{}` has no host", t.url)))?
        .trim_matches(['[', ']'])
        .to_owned();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    if uri.query().is_some() {
        return Err(at(
            &url_path,
            "the target URL takes no query; put it in each op's path",
        ));
    }
    let base_path = uri.path().trim_end_matches('/').to_owned();
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_default();
    let connections = match (t.connections, t.pool_size) {
        (RawConnections::PerPlayer, None) => Connections::PerPlayer,
        (RawConnections::PerPlayer, Some(_)) => {
            return Err(at(
                &[key("target"), key("pool_size")],
                "pool_size needs connections = \"pool\"",
            ));
        }
        (RawConnections::Pool, None) => {
            return Err(at(&p, "connections = \"pool\" needs pool_size = N (N ≥ 1)"));
        }
        (RawConnections::Pool, Some(0)) => {
            return Err(at(&[key("target"), key("pool_size")], "must be at least 1"));
        }
        (RawConnections::Pool, Some(n)) => Connections::Pool(n),
    };
    let connect_timeout = positive(
        t.connect_timeout,
        DEFAULT_CONNECT_TIMEOUT,
        &[key("target"), key("connect_timeout")],
    )?;
    Ok(Target {
        host,
        port,
        authority,
        base_path,
        transport: t.transport,
        tls,
        connections,
        connect_timeout,
    })
}

fn compile_op(
    i: usize,
    o: RawOp,
    default_timeout: Duration,
    default_code: &Option<String>,
    names: &mut VarNames,
) -> Result<Op, Invalid> {
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
    let code = match o.code.as_ref().or(default_code.as_ref()) {
        Some(c) if c.is_empty() => None,
        Some(c) => Some(pointer(c, &here("code"))?),
        None => None,
    };
    let kind = players::compile_kind(
        players::RawOpKind {
            kind: o.kind,
            format: o.format,
            event_type: o.event_type,
            reconnect: o.reconnect,
        },
        &here,
    )?;
    let op = Op {
        name: o.name,
        method,
        path,
        headers,
        body,
        weight: if kind.is_background() {
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
        },
        code,
        kind,
    };
    if op.kind.is_background() {
        players::check_background(i, &op, o.weight.is_some())?;
    }
    Ok(op)
}

/// The variable slots an op reads (its path, headers, body and sha256 check).
pub(crate) fn op_reads(op: &Op) -> impl Iterator<Item = usize> {
    reads(op).into_iter()
}

/// The index of the op named `name`, or an error at `path` that lists the ops there are.
fn find_op(ops: &[Op], name: &str, path: &[Seg]) -> Result<usize, Invalid> {
    ops.iter().position(|o| o.name == name).ok_or_else(|| {
        let names: Vec<&str> = ops.iter().map(|o| o.name.as_str()).collect();
        at(
            path,
            format!("no op named `{name}`; ops are: {}", names.join(", ")),
        )
    })
}

/// The variable slots an op reads.
fn reads(op: &Op) -> Vec<usize> {
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

fn compile(file: &str, raw: RawScenario) -> Result<Scenario, Invalid> {
    let default_timeout = positive(
        raw.target.timeout,
        DEFAULT_TIMEOUT,
        &[key("target"), key("timeout")],
    )?;
    let target = compile_target(file, raw.target)?;
    let mut names = VarNames::default();
    let mut defaults: Vec<Option<String>> = Vec::new();
    for (k, v) in &raw.vars {
        if !is_ident(k) || BUILTINS.contains(&k.as_str()) {
            return Err(at(
                &[key("vars"), key(k)],
                format!(
                    "`{k}` cannot be a variable name: use letters, digits and _, not player or account"
                ),
            ));
        }
        let slot = names.intern(k);
        defaults.resize(slot + 1, None);
        defaults[slot] = Some(v.clone());
    }
    let default_code = match raw.outcome.code {
        Some(c) => Some(pointer(&c, &[key("outcome"), key("code")])?),
        None => None,
    };
    let mut ops = Vec::new();
    for (i, o) in raw.ops.into_iter().enumerate() {
        let op = compile_op(i, o, default_timeout, &default_code, &mut names)?;
        if ops.iter().any(|p: &Op| p.name == op.name) {
            return Err(at(
                &[key("op"), Seg::Index(i), key("name")],
                format!("a second op named `{}`", op.name),
            ));
        }
        ops.push(op);
    }
    defaults.resize(names.len(), None);
    let find = |name: &str, path: &[Seg]| find_op(&ops, name, path);

    let p = &raw.player;
    let pace = match (p.think, p.tick) {
        (Some(_), Some(_)) => {
            return Err(at(
                &[key("player"), key("tick")],
                "set think or tick, not both",
            ));
        }
        (Some(Dur(d)), None) => Pace::Think(d),
        (None, Some(Dur(d))) if d.is_zero() => {
            return Err(at(&[key("player"), key("tick")], "must be longer than 0"));
        }
        (None, Some(Dur(d))) => Pace::Tick(d),
        (None, None) => Pace::None,
    };
    if p.accounts == Some(0) {
        return Err(at(&[key("player"), key("accounts")], "must be at least 1"));
    }
    let seed = raw.seed.map(|s| seed::compile(file, s)).transpose()?;
    let accounts = match &seed {
        Some(s) => seed::player_accounts(p.accounts, s)?,
        None => p.accounts,
    };
    if p.max_ops == Some(0) {
        return Err(at(&[key("player"), key("max_ops")], "must be at least 1"));
    }
    let mut setup = Vec::new();
    for (i, name) in p.setup.iter().enumerate() {
        setup.push(find(name, &[key("player"), key("setup"), Seg::Index(i)])?);
    }

    // A variable must have a value before any op reads it, or the op could never be sent:
    // setup ops may read defaults and what earlier setup ops captured; loop ops may read
    // everything setup captures; the hammer, which runs no setup, only defaults.
    let mut known: Vec<bool> = defaults.iter().map(Option::is_some).collect();
    let missing = |op: &Op, known: &[bool]| reads(op).into_iter().find(|s| !known[*s]);
    for (i, &o) in setup.iter().enumerate() {
        if let Some(s) = missing(&ops[o], &known) {
            return Err(at(
                &[key("player"), key("setup"), Seg::Index(i)],
                format!(
                    "setup op `{}` reads `{{{}}}` before any earlier setup op captures it; capture it earlier or give it a default in [vars]",
                    ops[o].name,
                    names.name(s)
                ),
            ));
        }
        for (s, _) in &ops[o].captures {
            known[*s] = true;
        }
    }
    let group = raw
        .group
        .map(|g| players::compile_group(g, &ops, &find))
        .transpose()?;
    players::check_group_vars(&ops, group.as_ref(), &names, &reads)?;
    // The group's create op runs after setup; join after create; the loop after both.
    if let Some(g) = &group {
        for (o, k) in [(g.create, "create"), (g.join, "join")] {
            if let Some(s) = missing(&ops[o], &known) {
                return Err(at(
                    &[key("group"), key(k)],
                    format!(
                        "the group's {k} op `{}` reads `{{{}}}` before setup{} captures it; capture it earlier or give it a default in [vars]",
                        ops[o].name,
                        names.name(s),
                        if k == "join" { " or the create op" } else { "" }
                    ),
                ));
            }
            for (s, _) in &ops[o].captures {
                known[*s] = true;
            }
        }
    }
    for (i, op) in ops.iter().enumerate() {
        if op.weight == 0 && !op.kind.is_background() {
            continue;
        }
        if let Some(s) = missing(op, &known) {
            return Err(at(
                &[key("op"), Seg::Index(i)],
                format!(
                    "op `{}` reads `{{{}}}`, which no setup op captures; add a setup op that captures it, or a default in [vars]",
                    op.name,
                    names.name(s)
                ),
            ));
        }
    }

    let mut steps = Vec::new();
    for (i, s) in raw.steps.iter().enumerate() {
        let sp = |k: &str| vec![key("step"), Seg::Index(i), key(k)];
        let duration = positive(Some(s.duration), Duration::ZERO, &sp("duration"))?;
        let arrival = match (s.arrival, s.ramp) {
            (RawArrival::Burst, Some(_)) => {
                return Err(at(
                    &sp("ramp"),
                    "a burst has no ramp; use arrival = \"gradual\"",
                ));
            }
            (RawArrival::Burst, None) => Arrival::Burst,
            (RawArrival::Gradual, Some(Dur(r))) if r > duration => {
                return Err(at(&sp("ramp"), "the ramp must fit in the step's duration"));
            }
            (RawArrival::Gradual, Some(Dur(r))) => Arrival::Gradual(r),
            // A quarter keeps three quarters of the step at the full player count.
            (RawArrival::Gradual, None) => Arrival::Gradual(duration / 4),
        };
        let leave = match s.leave {
            Some(Dur(l)) if l > duration => {
                return Err(at(
                    &sp("leave"),
                    "the leaving must fit in the step's duration",
                ));
            }
            l => l.map_or(Duration::ZERO, |l| l.0),
        };
        steps.push(Step {
            players: s.players,
            duration,
            arrival,
            leave,
            kind: PhaseKind::Step,
        });
    }
    let shapes = shapes::compile(
        shapes::RawShapes {
            rates: raw.rates,
            soak: raw.soak,
            catalog: raw.catalog,
            stop: raw.stop,
        },
        &ops,
        &setup,
        &defaults,
        &names,
        &mut steps,
    )?;
    if steps.iter().any(|s| s.players > 0) && !ops.iter().any(|o| o.weight > 0) {
        return Err(at(
            &[key("op")],
            "players need at least one op with weight > 0",
        ));
    }

    let hammer = match raw.hammer {
        None => None,
        Some(h) => {
            let hp = |k: &str| vec![key("hammer"), key(k)];
            let op = find(&h.op, &hp("op"))?;
            if ops[op].kind.is_background() {
                return Err(at(
                    &hp("op"),
                    format!(
                        "`{}` is a {} op; the hammer floods a request op",
                        h.op,
                        ops[op].kind.name()
                    ),
                ));
            }
            let defaults_only: Vec<bool> = defaults.iter().map(Option::is_some).collect();
            if let Some(s) = missing(&ops[op], &defaults_only) {
                return Err(at(
                    &hp("op"),
                    format!(
                        "the hammer runs no setup, but op `{}` reads `{{{}}}`; give it a default in [vars]",
                        h.op,
                        names.name(s)
                    ),
                ));
            }
            if h.workers == 0 {
                return Err(at(&hp("workers"), "must be at least 1"));
            }
            Some(Hammer {
                op,
                workers: h.workers,
                duration: positive(Some(h.duration), Duration::ZERO, &hp("duration"))?,
                start: h.start.map_or(Duration::ZERO, |d| d.0),
                account: h.account,
                honour_retry_after: h.honour_retry_after,
            })
        }
    };
    if steps.is_empty() && hammer.is_none() && shapes.is_empty() {
        return Err(at(
            &[],
            "the plan is empty: add a [[step]], [soak], [[rate]], [catalog] or [hammer]",
        ));
    }

    let mut slo = Vec::new();
    for (op, spec) in raw.slo {
        let path = [key("slo"), key(&op)];
        find_op(&ops, &op, &path)?;
        let texts = match spec {
            RawSlo::One(t) => vec![t],
            RawSlo::Many(v) => v,
        };
        for t in texts {
            slo.push(parse_slo(&op, &t).map_err(|m| at(&path, m))?);
        }
    }
    Ok(Scenario {
        file: file.to_owned(),
        target,
        player: PlayerSettings {
            pace,
            accounts,
            setup,
            honour_retry_after: p.honour_retry_after.unwrap_or(true),
            max_ops: p.max_ops,
        },
        ops,
        steps,
        hammer,
        shapes,
        vars: names,
        var_defaults: defaults,
        random_seed: raw.random_seed,
        slo,
        group,
        seed,
    })
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::H1 => "h1",
            Self::H2c => "h2c",
            Self::H2 => "h2",
        })
    }
}

#[cfg(test)]
mod tests;
