//! The player-model keys: `[group]` (players assembled into groups by a create/join
//! sequence, leaving on a finish condition) and the op kinds `stream` and `long_poll`
//! (a player's long-lived responses, counted by event type).

use std::time::Duration;

use serde::Deserialize;

use super::{Dur, Invalid, Op, Seg, at, key, pointer};
use crate::template::{GROUP_PREFIX, VarNames};

/// What kind of exchange an op is.
#[derive(Debug, Clone, PartialEq)]
pub enum OpKind {
    /// One request, one response: picked by weight or run in a sequence.
    Request,
    /// A long-lived response each player keeps open beside its calls; its events are counted
    /// by type and it is reopened (with backoff) when it breaks.
    Stream {
        /// How the body is cut into events.
        format: StreamFormat,
        /// JSON pointer to the event's type inside each event (SSE: inside `data:`).
        event_type: Option<String>,
        /// Pause before reopening.
        reconnect: Backoff,
        /// A gRPC stream: pause after it completed (status ok) before the next call.
        pause: Duration,
    },
    /// A request the server holds until it has news (or its own timeout), re-issued as soon
    /// as it returns; an empty or 204 answer is "no news", not an error.
    LongPoll {
        /// JSON pointer to the news' type in the response body.
        event_type: Option<String>,
        /// JSON pointer to the send time (Unix microseconds, e.g. a `{now_us}` the sender's
        /// body carried) in the answer: the op's latency is then the message's delivery
        /// latency, from its send to its arrival here.
        delivery: Option<String>,
        /// Pause before re-issuing after a failure.
        reconnect: Backoff,
        /// Pause after an answer before the next poll (a client's re-poll delay); zero
        /// re-issues at once.
        pause: Duration,
        /// Re-issue with `If-Modified-Since` / `If-None-Match` from the last answer's
        /// `Last-Modified` / `Etag`, so the server answers with the message after the last
        /// one seen (nchan's and HTTP long polling's cursor) instead of only new ones.
        conditional: bool,
    },
}

impl OpKind {
    /// True for the kinds a player keeps running in the background (stream, long poll).
    pub fn is_background(&self) -> bool {
        !matches!(self, Self::Request)
    }

    /// `request`, `stream` or `long_poll`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Stream { .. } => "stream",
            Self::LongPoll { .. } => "long_poll",
        }
    }
}

/// How a stream's body is cut into events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamFormat {
    /// Server-sent events: blank-line separated, type from `event:` (default `message`).
    Sse,
    /// Newline-delimited JSON: one event per line.
    Ndjson,
    /// Raw chunks: every body chunk is one event of type `chunk`.
    Chunks,
}

/// Exponential backoff between reopenings: `min`, doubling up to `max`; back to `min` once
/// an opening delivers an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// First pause.
    pub min: Duration,
    /// Largest pause.
    pub max: Duration,
}

/// When a group leaves the rotation.
#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    /// Any member's op ended with this domain code (the op's `code` pointer).
    Code(String),
    /// A response (of `op`, or of any op) whose JSON matches every pointer = value.
    Json {
        /// Only this op's responses, if set.
        op: Option<usize>,
        /// Pointer → expected value.
        json: Vec<(String, serde_json::Value)>,
    },
}

/// Players assembled into groups: one creates, the others join with what it captured.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupSpec {
    /// Smallest group.
    pub min: usize,
    /// Largest group (each group's size is drawn in `min..=max`).
    pub max: usize,
    /// The op the group's first player runs; its `group.*` captures are the group's.
    pub create: usize,
    /// The op every other member runs once the group's variables are known.
    pub join: usize,
    /// When the group leaves the rotation; without it a group plays until its players stop.
    pub finish: Option<Finish>,
    /// Groups one player takes part in before it leaves the run; unbounded without it.
    pub rounds: Option<u64>,
    /// What each seat plays (`[[group.role]]`); empty: every member plays every op.
    pub roles: Vec<Role>,
    /// Some op other than `create` captures a group variable: members then share what any
    /// of them captured, read before each of their ops.
    pub shared: bool,
}

/// One role of a group: the seats it takes and the ops its players run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    /// Its name, for messages.
    pub name: String,
    /// The first seat it takes (0 is the group's creator).
    pub first_seat: usize,
    /// The ops its players pick by weight and the streams and long polls they open.
    pub ops: Vec<usize>,
}

impl GroupSpec {
    /// The role of seat `seat`: the last role whose first seat is at or before it (seats
    /// past the roles' own take the last role).
    pub fn role_of(&self, seat: usize) -> Option<&Role> {
        self.roles.iter().rev().find(|r| r.first_seat <= seat)
    }
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(super) enum RawKind {
    Request,
    Stream,
    LongPoll,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReconnect {
    min: Option<Dur>,
    max: Option<Dur>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawSize {
    One(usize),
    Range(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGroup {
    size: RawSize,
    create: String,
    join: String,
    finish: Option<RawFinish>,
    rounds: Option<u64>,
    #[serde(default)]
    role: Vec<RawRole>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRole {
    name: String,
    ops: Vec<String>,
    seats: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFinish {
    code: Option<String>,
    op: Option<String>,
    #[serde(default)]
    json: std::collections::BTreeMap<String, serde_json::Value>,
}

/// The op-level keys of this module, as written.
pub(super) struct RawOpKind {
    pub kind: Option<RawKind>,
    pub format: Option<StreamFormat>,
    pub event_type: Option<String>,
    pub reconnect: Option<RawReconnect>,
    pub delivery: Option<String>,
    pub pause: Option<Duration>,
    pub conditional: Option<bool>,
    /// The op calls gRPC, whose streams complete: `pause` applies to them.
    pub grpc: bool,
}

const DEFAULT_BACKOFF: Backoff = Backoff {
    min: Duration::from_millis(100),
    max: Duration::from_secs(5),
};

/// True for `group.name` with an identifier after the prefix.
pub(super) fn is_group_var(name: &str) -> bool {
    name.strip_prefix(GROUP_PREFIX).is_some_and(super::is_ident)
}

/// The op's kind from its keys; `here(k)` is the path of the op's key `k`.
pub(super) fn compile_kind(
    raw: RawOpKind,
    here: &dyn Fn(&str) -> Vec<Seg>,
) -> Result<OpKind, Invalid> {
    let kind = raw.kind.unwrap_or(RawKind::Request);
    let reconnect_set = raw.reconnect.is_some();
    let reconnect = match raw.reconnect {
        None => DEFAULT_BACKOFF,
        Some(r) => {
            let path = here("reconnect");
            let min = r.min.map_or(DEFAULT_BACKOFF.min, |d| d.0);
            let max = r.max.map_or(DEFAULT_BACKOFF.max.max(min), |d| d.0);
            if min.is_zero() {
                return Err(at(&path, "reconnect.min must be longer than 0"));
            }
            if max < min {
                return Err(at(&path, "reconnect.max must be at least reconnect.min"));
            }
            Backoff { min, max }
        }
    };
    let event_type = raw
        .event_type
        .map(|p| pointer(&p, &here("event_type")))
        .transpose()?;
    match kind {
        RawKind::Request => {
            for (set, k) in [
                (raw.delivery.is_some(), "delivery"),
                (raw.pause.is_some(), "pause"),
                (raw.conditional.is_some(), "conditional"),
                (raw.format.is_some(), "format"),
                (event_type.is_some(), "event_type"),
                (reconnect_set, "reconnect"),
            ] {
                if set {
                    return Err(at(
                        &here(k),
                        format!("`{k}` needs kind = \"stream\" or kind = \"long_poll\""),
                    ));
                }
            }
            Ok(OpKind::Request)
        }
        RawKind::Stream => {
            if raw.delivery.is_some() {
                return Err(at(
                    &here("delivery"),
                    "delivery latency is measured on a long poll's answers: use kind = \"long_poll\"",
                ));
            }
            for (set, k) in [
                (raw.pause.is_some() && !raw.grpc, "pause"),
                (raw.conditional.is_some(), "conditional"),
            ] {
                if set {
                    return Err(at(
                        &here(k),
                        format!("`{k}` is how a long poll is re-issued: use kind = \"long_poll\""),
                    ));
                }
            }
            let format = raw.format.unwrap_or(StreamFormat::Sse);
            if format == StreamFormat::Chunks && event_type.is_some() {
                return Err(at(
                    &here("event_type"),
                    "raw chunks have no event type; use format = \"sse\" or \"ndjson\"",
                ));
            }
            Ok(OpKind::Stream {
                format,
                event_type,
                reconnect,
                pause: raw.pause.unwrap_or_default(),
            })
        }
        RawKind::LongPoll => {
            if raw.format.is_some() {
                return Err(at(
                    &here("format"),
                    "a long poll's answer is one body; `format` is for kind = \"stream\"",
                ));
            }
            Ok(OpKind::LongPoll {
                event_type,
                delivery: raw
                    .delivery
                    .map(|p| pointer(&p, &here("delivery")))
                    .transpose()?,
                reconnect,
                pause: raw.pause.unwrap_or_default(),
                conditional: raw.conditional.unwrap_or(false),
            })
        }
    }
}

/// Checks what a background op may not have (it is opened, not picked; its events are
/// counted, not captured).
pub(super) fn check_background(i: usize, op: &Op, weight_set: bool) -> Result<(), Invalid> {
    let here = |k: &str| vec![key("op"), Seg::Index(i), key(k)];
    let kind = op.kind.name();
    if weight_set {
        return Err(at(
            &here("weight"),
            format!("a {kind} op is opened by every player, not picked by weight: remove `weight`"),
        ));
    }
    if !op.captures.is_empty() {
        return Err(at(
            &here("capture"),
            format!("a {kind} op's answers are counted as events, not captured"),
        ));
    }
    if matches!(op.kind, OpKind::Stream { .. })
        && (op.check.status.is_some() || !op.check.json.is_empty() || op.check.sha256.is_some())
    {
        return Err(at(
            &here("check"),
            "a stream has no single response to check; its events are counted by type",
        ));
    }
    Ok(())
}

/// Resolves an op's name, written at a path, to its index.
pub(super) type FindOp<'a> = dyn Fn(&str, &[Seg]) -> Result<usize, Invalid> + 'a;

/// Compiles `[group]`; `find` resolves an op name at a path.
pub(super) fn compile_group(
    g: RawGroup,
    ops: &[Op],
    find: &FindOp<'_>,
) -> Result<GroupSpec, Invalid> {
    let gp = |k: &str| vec![key("group"), key(k)];
    let (min, max) = match &g.size {
        RawSize::One(n) => (*n, *n),
        RawSize::Range(s) => {
            let parsed = s.split_once(['-', '–']).and_then(|(a, b)| {
                Some((
                    a.trim().parse::<usize>().ok()?,
                    b.trim().parse::<usize>().ok()?,
                ))
            });
            parsed.ok_or_else(|| {
                at(
                    &gp("size"),
                    format!("`{s}`: write a number (size = 2) or a range (size = \"2-4\")"),
                )
            })?
        }
    };
    if min < 1 || max < min {
        return Err(at(
            &gp("size"),
            "a group has at least 1 player and the range must not be reversed (e.g. \"2-4\")",
        ));
    }
    let create = find(&g.create, &gp("create"))?;
    let join = find(&g.join, &gp("join"))?;
    if create == join {
        return Err(at(&gp("join"), "join must be a different op than create"));
    }
    for (o, k) in [(create, "create"), (join, "join")] {
        if ops[o].weight > 0 && !ops[o].kind.is_background() {
            return Err(at(
                &gp(k),
                format!(
                    "`{}` runs once per group, not in the loop: give it weight = 0",
                    ops[o].name
                ),
            ));
        }
        if ops[o].kind.is_background() {
            return Err(at(
                &gp(k),
                format!(
                    "`{}` is a {} op; {k} needs a request op",
                    ops[o].name,
                    ops[o].kind.name()
                ),
            ));
        }
    }
    if g.rounds == Some(0) {
        return Err(at(&gp("rounds"), "must be at least 1"));
    }
    let finish = match g.finish {
        None => None,
        Some(f) => {
            let fp = |k: &str| vec![key("group"), key("finish"), key(k)];
            match (f.code, f.json.is_empty()) {
                (Some(_), false) => {
                    return Err(at(
                        &gp("finish"),
                        "set finish.code or finish.json, not both",
                    ));
                }
                (Some(c), true) => {
                    if f.op.is_some() {
                        return Err(at(&fp("op"), "finish.op goes with finish.json"));
                    }
                    if c.is_empty() {
                        return Err(at(&fp("code"), "must not be empty"));
                    }
                    Some(Finish::Code(c))
                }
                (None, true) => {
                    return Err(at(
                        &gp("finish"),
                        "write finish = { code = \"game_finished\" } or finish = { json = { \"/state\" = \"finished\" } }",
                    ));
                }
                (None, false) => {
                    let op = f.op.as_deref().map(|n| find(n, &fp("op"))).transpose()?;
                    let mut json = Vec::new();
                    for (p, v) in f.json {
                        let jp = vec![key("group"), key("finish"), key("json"), key(&p)];
                        json.push((pointer(&p, &jp)?, v));
                    }
                    Some(Finish::Json { op, json })
                }
            }
        }
    };
    let mut roles = Vec::new();
    let mut next_seat = 0;
    for (k, r) in g.role.iter().enumerate() {
        let rp = |key_: &str| vec![key("group"), key("role"), Seg::Index(k), key(key_)];
        if r.name.is_empty() {
            return Err(at(&rp("name"), "must not be empty"));
        }
        let seats = r.seats.unwrap_or(1);
        if seats == 0 {
            return Err(at(&rp("seats"), "must be at least 1"));
        }
        // Seats are handed out in order, so a role that starts past the smallest group's
        // last seat would have no player in some groups, and one past the largest in any.
        if next_seat >= min {
            return Err(at(
                &[key("group"), key("role"), Seg::Index(k)],
                format!(
                    "no member takes role `{}`: the roles before it fill seats 1–{next_seat}, and a group has {}; add seats to [group] size or fewer to the roles before it",
                    r.name,
                    if min == max {
                        format!("{min}")
                    } else {
                        format!("as few as {min}")
                    }
                ),
            ));
        }
        let mut role_ops = Vec::new();
        for (j, name) in r.ops.iter().enumerate() {
            let op = find(
                name,
                &[
                    key("group"),
                    key("role"),
                    Seg::Index(k),
                    key("ops"),
                    Seg::Index(j),
                ],
            )?;
            role_ops.push(op);
        }
        if !role_ops
            .iter()
            .any(|&o| ops[o].weight > 0 || ops[o].kind.is_background())
        {
            return Err(at(
                &rp("ops"),
                format!(
                    "role `{}` has no op to run: list an op with a weight, or a stream or long poll",
                    r.name
                ),
            ));
        }
        roles.push(Role {
            name: r.name.clone(),
            first_seat: next_seat,
            ops: role_ops,
        });
        next_seat += seats;
    }
    Ok(GroupSpec {
        min,
        max,
        create,
        join,
        finish,
        rounds: g.rounds,
        roles,
        shared: false,
    })
}

/// Without a `[group]`, no op may read or capture a group variable; with one, the create
/// op captures at least one, and any other op that captures one shares it with the group.
pub(super) fn check_group_vars(
    ops: &[Op],
    mut group: Option<&mut GroupSpec>,
    names: &VarNames,
    reads: &dyn Fn(&Op) -> Vec<usize>,
) -> Result<(), Invalid> {
    if let Some(g) = group.as_deref()
        && !ops[g.create]
            .captures
            .iter()
            .any(|(s, _)| is_group_var(names.name(*s)))
    {
        return Err(at(
            &[key("group"), key("create")],
            format!(
                "`{}` captures nothing for the group: add e.g. capture = {{ \"group.game_id\" = \"/game/id\" }}",
                ops[g.create].name
            ),
        ));
    }
    for (i, op) in ops.iter().enumerate() {
        for (slot, _) in &op.captures {
            let name = names.name(*slot);
            if !is_group_var(name) {
                continue;
            }
            match group.as_deref_mut() {
                None => {
                    return Err(at(
                        &[key("op"), Seg::Index(i), key("capture"), key(name)],
                        format!(
                            "`{name}` is a group variable: add a [group] whose create op captures it"
                        ),
                    ));
                }
                Some(g) if g.create != i => g.shared = true,
                Some(_) => {}
            }
        }
        if group.is_none()
            && let Some(s) = reads(op).into_iter().find(|s| is_group_var(names.name(*s)))
        {
            return Err(at(
                &[key("op"), Seg::Index(i)],
                format!(
                    "op `{}` reads `{{{}}}`, a group variable: add a [group] whose create op captures it",
                    op.name,
                    names.name(s)
                ),
            ));
        }
    }
    Ok(())
}
