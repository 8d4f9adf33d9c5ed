//! The scenario file: target, ops, outcomes, captures, checks and the load plan, in TOML.
//!
//! Loading is two passes: serde (with `deny_unknown_fields`) checks shapes and names, then
//! `compile.rs` checks what serde cannot (op references, variable provenance, URL) and turns
//! strings into templates, methods and header names. Both passes report errors through one
//! [`Diagnostic`] that points at the file, line, column and key. `docs/scenario.md` documents
//! every key.
//!
//! One file per part of the file: `raw.rs` the serde shapes, `target.rs`, `op.rs`, `slo.rs`,
//! `players.rs`, `shapes.rs`, `tls.rs` and `seed.rs` each section's types and checks,
//! `compile.rs` what ties them together (variables known before they are read, steps, the
//! hammer), `values.rs` the checks of single values they share.

mod compile;
mod error;
mod flow;
mod op;
mod overrides;
mod players;
mod protocols;
pub mod quick;
mod raw;
mod request_target;
pub mod seed;
pub mod shapes;
mod slo;
mod target;
mod tls;
mod userinfo;
mod values;

use std::{ops::Range, path::Path, time::Duration};

use toml::{
    Spanned,
    de::{DeTable, DeValue},
};

use compile::compile;
pub use error::{Diagnostic, ScenarioError};
use error::{Invalid, Locator, at, key, reword};
pub use flow::{ForEach, Then};
pub use herd_seed::SeedSpec;
pub(crate) use op::op_reads;
pub use op::{Check, Op};
use op::{find_op, reads};
use overrides::{Seg, path_string};
pub use players::{Backoff, Finish, GroupSpec, OpKind, Role, StreamFormat};
pub(crate) use protocols::encode as encode_message;
pub use protocols::{Call, GrpcCall, GrpcTarget, WsFrame, WsReply, WsSend, WsTarget};
use raw::{Dur, RawScenario};
pub(crate) use request_target::encode_unsendable;
pub use shapes::{CatalogRoute, Phase, PhaseWork, RateStep, Shapes, Soak, WhenFull};
pub use target::{Connections, Target, TransportKind};
pub use tls::Tls;
use values::{is_ident, pointer, positive};

use crate::template::VarNames;
use herd_model::{PhaseKind, Slo};

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

/// The largest scenario file herd reads: far beyond a written one, and small enough that
/// checking it (about 50 KB per `[[op]]`, issue #13) cannot take the host's memory.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

impl Scenario {
    /// Reads and checks a scenario file, applying `--set KEY=VALUE` overrides.
    pub fn load(path: &Path, overrides: &[String]) -> Result<Self, ScenarioError> {
        if let Ok(m) = std::fs::metadata(path)
            && m.len() > MAX_FILE_BYTES
        {
            return Err(ScenarioError::TooLarge {
                path: path.to_owned(),
                bytes: m.len(),
                max: MAX_FILE_BYTES,
            });
        }
        let bytes = std::fs::read(path).map_err(|error| ScenarioError::Read {
            path: path.to_owned(),
            error,
        })?;
        let source = String::from_utf8(bytes).map_err(|e| {
            let offset = e.utf8_error().valid_up_to();
            let bytes = e.as_bytes();
            // The prefix is valid UTF-8 by definition of `valid_up_to`.
            let valid = std::str::from_utf8(&bytes[..offset]).unwrap_or_default();
            let line_start = valid.rfind('\n').map_or(0, |i| i + 1);
            ScenarioError::NotUtf8 {
                path: path.to_owned(),
                line: valid.matches('\n').count() + 1,
                column: valid[line_start..].chars().count() + 1,
                offset,
                byte: bytes[offset],
            }
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
                arg: userinfo::hide(arg),
                reason,
            };
            let (path, value) = overrides::parse_arg(arg).map_err(bad)?;
            let span = Locator::override_span(source.len(), n);
            let value = overrides::parse_value(value, span.clone());
            overrides::apply(doc.get_mut(), &path, value, &span).map_err(bad)?;
        }
        seed::refuse_urls(doc.get_ref(), &loc)?;
        userinfo::refuse(doc.get_ref(), &loc)?;
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

    /// Each op's expected outcomes (ops without any left out), for reports to count apart
    /// from `ok` and from errors.
    pub fn expected_outcomes(
        &self,
    ) -> std::collections::BTreeMap<String, Vec<herd_model::Outcome>> {
        self.ops
            .iter()
            .filter(|o| !o.expected.is_empty())
            .map(|o| (o.name.clone(), o.expected.clone()))
            .collect()
    }

    /// The index of the op named `name`.
    pub fn op(&self, name: &str) -> Option<usize> {
        self.ops.iter().position(|o| o.name == name)
    }

    /// The plan's length in seconds: its timed phases one after another, or the hammer's
    /// end if later. Catalog routes last as long as their requests take and count nothing.
    pub fn planned_secs(&self) -> f64 {
        let phases: f64 = self
            .plan()
            .iter()
            .map(|p| match p.work {
                PhaseWork::Players(i) => self.steps[i].duration.as_secs_f64(),
                PhaseWork::Rate(i) => self.shapes.rates[i].duration.as_secs_f64(),
                PhaseWork::Route(_) => 0.0,
            })
            .sum();
        let hammer = self
            .hammer
            .as_ref()
            .map_or(0.0, |h| (h.start + h.duration).as_secs_f64());
        phases.max(hammer)
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

#[cfg(test)]
mod tests;
