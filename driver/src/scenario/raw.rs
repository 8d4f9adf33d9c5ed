//! The scenario file as serde reads it, before [`compile`](super::compile::compile) checks
//! what serde cannot. `deny_unknown_fields` everywhere: a misspelt key is an error that lists
//! the valid ones.

use std::{collections::BTreeMap, time::Duration};

use serde::Deserialize;

use super::{StreamFormat, TransportKind, players, seed, shapes};

/// A duration written as `500ms`, `10s`, `2m`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Dur(pub(super) Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        crate::units::parse_duration(&s)
            .map(Dur)
            .map_err(|e| serde::de::Error::custom(format!("invalid duration `{s}`: {e}")))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScenario {
    pub(super) target: RawTarget,
    #[serde(default)]
    pub(super) player: RawPlayer,
    #[serde(default)]
    pub(super) outcome: RawOutcome,
    #[serde(default)]
    pub(super) vars: BTreeMap<String, String>,
    #[serde(default, rename = "op")]
    pub(super) ops: Vec<RawOp>,
    #[serde(default, rename = "step")]
    pub(super) steps: Vec<RawStep>,
    pub(super) hammer: Option<RawHammer>,
    #[serde(default, rename = "rate")]
    pub(super) rates: Vec<shapes::RawRate>,
    pub(super) soak: Option<shapes::RawSoak>,
    pub(super) catalog: Option<shapes::RawCatalog>,
    pub(super) stop: Option<shapes::RawStop>,
    #[serde(default)]
    pub(super) random_seed: u64,
    /// `op = "p99 < 500ms"` or `op = ["p99 < 500ms", "errors < 1%"]`.
    #[serde(default)]
    pub(super) slo: BTreeMap<String, RawSlo>,
    pub(super) group: Option<players::RawGroup>,
    pub(super) seed: Option<seed::RawSeed>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawSlo {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(super) enum RawConnections {
    PerPlayer,
    Pool,
}

/// One string or a list of them: `proto = "a.proto"` or `proto = ["a.proto", "b.proto"]`.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub(super) fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTarget {
    pub(super) url: String,
    pub(super) transport: Option<TransportKind>,
    #[serde(default = "default_connections")]
    pub(super) connections: RawConnections,
    pub(super) pool_size: Option<usize>,
    pub(super) timeout: Option<Dur>,
    pub(super) connect_timeout: Option<Dur>,
    pub(super) ca: Option<String>,
    pub(super) insecure: Option<bool>,
    #[serde(default)]
    pub(super) source_addrs: Vec<String>,
    // gRPC (docs/scenario.md, "gRPC").
    pub(super) proto: Option<OneOrMany>,
    #[serde(default)]
    pub(super) proto_path: Vec<String>,
    pub(super) compression: Option<String>,
    pub(super) field_names: Option<String>,
    // WebSocket (docs/scenario.md, "WebSocket").
    #[serde(default)]
    pub(super) subprotocols: Vec<String>,
    pub(super) headers: Option<BTreeMap<String, String>>,
}

fn default_connections() -> RawConnections {
    RawConnections::PerPlayer
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlayer {
    pub(super) think: Option<Dur>,
    pub(super) tick: Option<Dur>,
    pub(super) accounts: Option<u64>,
    #[serde(default)]
    pub(super) setup: Vec<String>,
    pub(super) honour_retry_after: Option<bool>,
    pub(super) max_ops: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOutcome {
    pub(super) code: Option<String>,
    #[serde(default)]
    pub(super) expected: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOp {
    pub(super) name: String,
    pub(super) method: Option<String>,
    pub(super) path: Option<String>,
    /// gRPC: `package.Service/Method`.
    pub(super) call: Option<String>,
    /// gRPC client and bidi streams: the messages sent, in order.
    pub(super) messages: Option<Vec<String>>,
    pub(super) repeat: Option<u32>,
    pub(super) interval: Option<Dur>,
    pub(super) lockstep: Option<bool>,
    /// WebSocket: the frame sent and the reply waited for.
    pub(super) frame: Option<String>,
    pub(super) reply: Option<String>,
    #[serde(default)]
    pub(super) headers: BTreeMap<String, String>,
    pub(super) body: Option<String>,
    pub(super) weight: Option<u32>,
    pub(super) timeout: Option<Dur>,
    #[serde(default)]
    pub(super) capture: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) check: RawCheck,
    pub(super) code: Option<String>,
    #[serde(default)]
    pub(super) expected: Vec<String>,
    pub(super) kind: Option<players::RawKind>,
    pub(super) format: Option<StreamFormat>,
    pub(super) event_type: Option<String>,
    pub(super) reconnect: Option<players::RawReconnect>,
    pub(super) delivery: Option<String>,
    pub(super) pause: Option<Dur>,
    pub(super) conditional: Option<bool>,
    #[serde(default)]
    pub(super) then: Vec<String>,
    pub(super) for_each: Option<String>,
    pub(super) max_items: Option<usize>,
    pub(super) sample: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCheck {
    pub(super) status: Option<u16>,
    #[serde(default)]
    pub(super) json: BTreeMap<String, serde_json::Value>,
    pub(super) sha256: Option<String>,
    pub(super) sha256_header: Option<String>,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(super) enum RawArrival {
    Gradual,
    Burst,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStep {
    pub(super) players: usize,
    pub(super) duration: Dur,
    #[serde(default = "default_arrival")]
    pub(super) arrival: RawArrival,
    pub(super) ramp: Option<Dur>,
    pub(super) leave: Option<Dur>,
}

fn default_arrival() -> RawArrival {
    RawArrival::Gradual
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHammer {
    pub(super) op: String,
    pub(super) workers: usize,
    pub(super) duration: Dur,
    pub(super) start: Option<Dur>,
    #[serde(default)]
    pub(super) account: u64,
    #[serde(default)]
    pub(super) honour_retry_after: bool,
}
