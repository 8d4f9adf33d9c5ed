//! The load shapes beside `[[step]]` and `[hammer]`: open-model rate steps (`[[rate]]`), a
//! soak (`[soak]`), a route catalog (`[catalog]`) and a staggered stop (`[stop]`), and the
//! order in which a plan runs its phases.
//!
//! The plan is one sequence of phases, always in this order (docs/scenario.md, "Plan order"):
//! the catalog's routes, one after another; the `[[step]]`s; the soak's steps; the stop's
//! spread; the rate steps. The hammer runs beside the sequence, timed from the run's start.

use std::time::Duration;

use serde::Deserialize;

use super::{Dur, Invalid, Op, OpKind, Seg, Step, at, find_op, key, reads};
use crate::template::VarNames;
use herd_model::PhaseKind;

/// What an open-model step does when `max_in_flight` requests are already out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WhenFull {
    /// Skip the arrival and count it as a dropped start (k6's `dropped_iterations`).
    Drop,
    /// Wait for a request to finish, then send it late (wrk2's model); its latency still
    /// counts from the intended time.
    Queue,
}

/// One open-model step: arrivals at a fixed rate, independent of the responses.
#[derive(Debug, Clone, PartialEq)]
pub struct RateStep {
    /// Arrivals per second.
    pub rate: f64,
    /// How long the step lasts; it schedules `round(rate × duration)` arrivals.
    pub duration: Duration,
    /// Bound on requests in flight; each in-flight slot owns a connection (per player) or
    /// uses the pool.
    pub max_in_flight: usize,
    /// What happens to an arrival when the bound is reached.
    pub when_full: WhenFull,
    /// A send that slipped behind its intended time by more than this is a late start.
    pub late_after: Duration,
    /// The ops arrivals pick from, with their weights.
    pub ops: Vec<(usize, u32)>,
    /// Each arrival slot runs `[player] setup` once, before its first arrival's op.
    pub setup: bool,
}

/// One route of the catalog: `requests` of one op at `concurrency`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogRoute {
    /// The op, an index into the scenario's ops.
    pub op: usize,
    /// Requests to send, exactly (unless the run stops or `max_duration` passes).
    pub requests: u64,
    /// Workers sending them back to back.
    pub concurrency: usize,
    /// Bound on the route's time.
    pub max_duration: Duration,
}

/// The `[soak]` as written, for headings (its steps are in [`super::Scenario::steps`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Soak {
    /// Players added each `every`.
    pub add: usize,
    /// The period of the additions.
    pub every: Duration,
    /// The player count the soak climbs to.
    pub up_to: usize,
    /// How long it holds `up_to`.
    pub hold: Duration,
}

/// The shapes a scenario adds to its `[[step]]`s and `[hammer]`.
#[derive(Debug, Clone, Default)]
pub struct Shapes {
    /// Open-model steps, run after every player step.
    pub rates: Vec<RateStep>,
    /// Catalog routes, run before every other phase.
    pub catalog: Vec<CatalogRoute>,
    /// The soak, if any.
    pub soak: Option<Soak>,
    /// The stop spread, if any (its step is the last of [`super::Scenario::steps`]).
    pub stop_spread: Option<Duration>,
}

/// What one phase of the plan runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseWork {
    /// Catalog route `i` of [`Shapes::catalog`].
    Route(usize),
    /// Player step `i` of [`super::Scenario::steps`].
    Players(usize),
    /// Rate step `i` of [`Shapes::rates`].
    Rate(usize),
}

/// One phase of the plan's sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Phase {
    /// Its name in reports: `catalog <op>`, `step 2`, `soak 3`, `soak hold`, `stop`,
    /// `rate 1`.
    pub name: String,
    /// Its kind.
    pub kind: PhaseKind,
    /// What it runs.
    pub work: PhaseWork,
}

impl super::Scenario {
    /// The plan's phases in the order they run (the hammer, beside them, is not one).
    pub fn plan(&self) -> Vec<Phase> {
        let mut out = Vec::new();
        for (i, r) in self.shapes.catalog.iter().enumerate() {
            out.push(Phase {
                name: format!("catalog {}", self.ops[r.op].name),
                kind: PhaseKind::Catalog,
                work: PhaseWork::Route(i),
            });
        }
        let (mut n_step, mut n_soak) = (0, 0);
        let soak_steps = self
            .steps
            .iter()
            .filter(|s| s.kind == PhaseKind::Soak)
            .count();
        for (i, s) in self.steps.iter().enumerate() {
            let name = match s.kind {
                PhaseKind::Soak => {
                    n_soak += 1;
                    if n_soak == soak_steps {
                        "soak hold".to_owned()
                    } else {
                        format!("soak {n_soak}")
                    }
                }
                PhaseKind::Stop => "stop".to_owned(),
                _ => {
                    n_step += 1;
                    format!("step {n_step}")
                }
            };
            out.push(Phase {
                name,
                kind: s.kind,
                work: PhaseWork::Players(i),
            });
        }
        for i in 0..self.shapes.rates.len() {
            out.push(Phase {
                name: format!("rate {}", i + 1),
                kind: PhaseKind::Rate,
                work: PhaseWork::Rate(i),
            });
        }
        out
    }
}

impl Shapes {
    /// True when the scenario has none of these shapes' phases.
    pub fn is_empty(&self) -> bool {
        self.rates.is_empty() && self.catalog.is_empty()
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawRates {
    One(f64),
    Many(Vec<f64>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRate {
    rate: RawRates,
    duration: Dur,
    max_in_flight: Option<usize>,
    when_full: Option<WhenFull>,
    late_after: Option<Dur>,
    #[serde(default)]
    ops: Vec<String>,
    #[serde(default)]
    setup: bool,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(super) enum RawSoakArrival {
    Gradual,
    Burst,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSoak {
    add: usize,
    every: Dur,
    up_to: usize,
    hold: Dur,
    arrival: Option<RawSoakArrival>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCatalog {
    #[serde(default)]
    ops: Vec<String>,
    requests: u64,
    #[serde(default = "one")]
    concurrency: usize,
    max_duration: Option<Dur>,
}

fn one() -> usize {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStop {
    spread: Dur,
}

/// The raw sections this module compiles.
pub(super) struct RawShapes {
    pub rates: Vec<RawRate>,
    pub soak: Option<RawSoak>,
    pub catalog: Option<RawCatalog>,
    pub stop: Option<RawStop>,
}

/// Default bound on one catalog route.
const DEFAULT_ROUTE_MAX: Duration = Duration::from_secs(60);
/// Default slip that makes a start late: well above timer granularity on a loaded machine.
const DEFAULT_LATE_AFTER: Duration = Duration::from_millis(10);
/// Rate steps are bounded so a typo (`rate = 5000000`) cannot schedule a flood.
const MAX_RATE: f64 = 1_000_000.0;

/// Checks the shapes, appends the soak's and the stop's steps to `steps`, and returns the
/// rest. Catalog ops run no setup, so like the hammer's they may read only `[vars]`
/// defaults (and `{player}`, `{account}`); rate ops too, unless the rate step runs the
/// players' `setup` in each arrival slot, when they may read what it captures.
pub(super) fn compile(
    raw: RawShapes,
    ops: &[Op],
    setup: &[usize],
    defaults: &[Option<String>],
    names: &VarNames,
    steps: &mut Vec<Step>,
) -> Result<Shapes, Invalid> {
    let find = |name: &str, path: &[Seg]| find_op(ops, name, path);
    // What an op may read without setup, and after the players' setup has run.
    let bare: Vec<bool> = defaults.iter().map(Option::is_some).collect();
    let mut set_up = bare.clone();
    for &o in setup {
        for (s, _) in &ops[o].captures {
            set_up[*s] = true;
        }
    }
    let missing = |op: usize, known: &[bool]| {
        reads(&ops[op])
            .into_iter()
            .find(|s| !known.get(*s).copied().unwrap_or(false))
    };
    let sendable = |op: usize, path: &[Seg], what: &str| match missing(op, &bare) {
        None => Ok(()),
        Some(s) => {
            let hint = if what == "a rate step" && missing(op, &set_up).is_none() {
                "; set `setup = true` to run [player] setup in each arrival slot first"
            } else {
                "; give it a default in [vars] or leave the op out"
            };
            Err(at(
                path,
                format!(
                    "{what} runs no setup, but op `{}` reads `{{{}}}`{hint}",
                    ops[op].name,
                    names.name(s)
                ),
            ))
        }
    };
    // A stream or long poll is held open by each player in the background; an arrival or a
    // route sends one request and waits for its answer, which such an op never gives.
    let background = |op: usize, path: &[Seg], what: &str| {
        if ops[op].kind == OpKind::Request {
            Ok(())
        } else {
            Err(at(
                path,
                format!(
                    "op `{}` is a stream or long poll, which players keep open in the background; {what} sends single requests: leave it out",
                    ops[op].name
                ),
            ))
        }
    };
    let sendable_after_setup = |op: usize, path: &[Seg]| match missing(op, &set_up) {
        None => Ok(()),
        Some(s) => Err(at(
            path,
            format!(
                "op `{}` reads `{{{}}}`, which no [player] setup op captures; add a setup op that captures it, or a default in [vars]",
                ops[op].name,
                names.name(s)
            ),
        )),
    };

    let mut shapes = Shapes::default();

    if let Some(c) = raw.catalog {
        let cp = |k: &str| vec![key("catalog"), key(k)];
        if c.requests == 0 {
            return Err(at(&cp("requests"), "must be at least 1"));
        }
        if c.concurrency == 0 {
            return Err(at(&cp("concurrency"), "must be at least 1"));
        }
        let max_duration = match c.max_duration {
            None => DEFAULT_ROUTE_MAX,
            Some(Dur(d)) if d.is_zero() => {
                return Err(at(&cp("max_duration"), "must be longer than 0"));
            }
            Some(Dur(d)) => d,
        };
        let chosen: Vec<(usize, Vec<Seg>)> = if c.ops.is_empty() {
            // Every request op: streams and long polls are a player's background, not routes.
            (0..ops.len())
                .filter(|&i| ops[i].kind == OpKind::Request)
                .map(|i| (i, cp("ops")))
                .collect()
        } else {
            let mut v = Vec::new();
            for (i, name) in c.ops.iter().enumerate() {
                let p = vec![key("catalog"), key("ops"), Seg::Index(i)];
                v.push((find(name, &p)?, p));
            }
            v
        };
        if chosen.is_empty() {
            return Err(at(&cp("ops"), "the catalog needs at least one [[op]]"));
        }
        for (op, p) in chosen {
            background(op, &p, "the catalog")?;
            sendable(op, &p, "the catalog")?;
            shapes.catalog.push(CatalogRoute {
                op,
                requests: c.requests,
                concurrency: c.concurrency,
                max_duration,
            });
        }
    }

    if let Some(s) = raw.soak {
        let sp = |k: &str| vec![key("soak"), key(k)];
        if s.add == 0 {
            return Err(at(&sp("add"), "must be at least 1"));
        }
        if s.up_to < s.add {
            return Err(at(
                &sp("up_to"),
                format!(
                    "must be at least `add` ({}): the soak climbs from add to up_to",
                    s.add
                ),
            ));
        }
        let every = super::positive(Some(s.every), Duration::ZERO, &sp("every"))?;
        let hold = super::positive(Some(s.hold), Duration::ZERO, &sp("hold"))?;
        let arrival = match s.arrival {
            Some(RawSoakArrival::Gradual) => super::Arrival::Gradual(every),
            _ => super::Arrival::Burst,
        };
        let mut players = s.add;
        loop {
            let last = players >= s.up_to;
            let players_now = players.min(s.up_to);
            steps.push(Step {
                players: players_now,
                duration: if last { hold } else { every },
                arrival: match arrival {
                    // The hold's arrival is the last addition, spread over one period.
                    super::Arrival::Gradual(r) if last => super::Arrival::Gradual(r.min(hold)),
                    a => a,
                },
                leave: Duration::ZERO,
                kind: PhaseKind::Soak,
            });
            if last {
                break;
            }
            players += s.add;
        }
        shapes.soak = Some(Soak {
            add: s.add,
            every,
            up_to: s.up_to,
            hold,
        });
    }

    if let Some(st) = raw.stop {
        let p = [key("stop"), key("spread")];
        let spread = super::positive(Some(st.spread), Duration::ZERO, &p)?;
        if steps.is_empty() {
            return Err(at(
                &p,
                "a staggered stop needs players: add a [[step]] or a [soak]",
            ));
        }
        steps.push(Step {
            players: 0,
            duration: spread,
            arrival: super::Arrival::Burst,
            leave: spread,
            kind: PhaseKind::Stop,
        });
        shapes.stop_spread = Some(spread);
    }

    for (i, r) in raw.rates.into_iter().enumerate() {
        let rp = |k: &str| vec![key("rate"), Seg::Index(i), key(k)];
        let rates = match r.rate {
            RawRates::One(x) => vec![x],
            RawRates::Many(v) if v.is_empty() => {
                return Err(at(
                    &rp("rate"),
                    "give at least one rate, e.g. [50, 100, 200]",
                ));
            }
            RawRates::Many(v) => v,
        };
        for &x in &rates {
            if !(x > 0.0 && x <= MAX_RATE) {
                return Err(at(
                    &rp("rate"),
                    format!(
                        "{x} is not a rate: requests per second, above 0 and at most {MAX_RATE}"
                    ),
                ));
            }
        }
        let duration = super::positive(Some(r.duration), Duration::ZERO, &rp("duration"))?;
        if r.max_in_flight == Some(0) {
            return Err(at(&rp("max_in_flight"), "must be at least 1"));
        }
        let late_after = r.late_after.map_or(DEFAULT_LATE_AFTER, |d| d.0);
        if r.setup && setup.is_empty() {
            return Err(at(
                &rp("setup"),
                "setup = true, but [player] setup lists no ops to run",
            ));
        }
        let check = |k: usize, p: &[Seg]| {
            if r.setup {
                sendable_after_setup(k, p)
            } else {
                sendable(k, p, "a rate step")
            }
        };
        let mut chosen = Vec::new();
        if r.ops.is_empty() {
            for (k, o) in ops.iter().enumerate().filter(|(_, o)| o.weight > 0) {
                check(k, &rp("ops"))?;
                chosen.push((k, o.weight));
            }
            if chosen.is_empty() {
                return Err(at(
                    &rp("ops"),
                    "no op has weight > 0: list the ops to send, e.g. ops = [\"state\"]",
                ));
            }
        } else {
            for (j, name) in r.ops.iter().enumerate() {
                let p = vec![key("rate"), Seg::Index(i), key("ops"), Seg::Index(j)];
                let k = find(name, &p)?;
                background(k, &p, "a rate step")?;
                check(k, &p)?;
                // A listed op is sent even with weight 0 (a setup op in the player loop).
                chosen.push((k, ops[k].weight.max(1)));
            }
        }
        for x in rates {
            shapes.rates.push(RateStep {
                rate: x,
                duration,
                // One second of arrivals: ample while the target answers within a second.
                max_in_flight: r.max_in_flight.unwrap_or(x.ceil() as usize),
                when_full: r.when_full.unwrap_or(WhenFull::Drop),
                late_after,
                ops: chosen.clone(),
                setup: r.setup,
            });
        }
    }
    Ok(shapes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Arrival, Scenario, ScenarioError};

    const BASE: &str = r#"
[target]
url = "http://127.0.0.1:8080"

[vars]
token = "t"

[player]
setup = ["login"]

[[op]]
name = "login"
path = "/login"
weight = 0
capture = { session = "/token" }

[[op]]
name = "state"
path = "/state?t={token}"
weight = 3

[[op]]
name = "mine"
path = "/mine/{session}"
"#;

    fn parse(extra: &str) -> Result<Scenario, String> {
        Scenario::parse("s.toml", &format!("{BASE}{extra}"), &[]).map_err(|e| match e {
            ScenarioError::Invalid(d) => {
                format!("{}:{} {}: {}", d.line, d.column, d.key, d.message)
            }
            e => e.to_string(),
        })
    }

    #[test]
    fn rate_lists_become_consecutive_steps() {
        let s = parse("[[rate]]\nrate = [50, 2000]\nduration = \"10s\"\nops = [\"state\"]\n[[rate]]\nrate = 7.5\nduration = \"1s\"\nmax_in_flight = 3\nwhen_full = \"queue\"\nlate_after = \"2ms\"\nops = [\"login\"]\n").unwrap();
        let r = &s.shapes.rates;
        assert_eq!(r.len(), 3);
        assert_eq!(
            (r[0].rate, r[0].max_in_flight, r[0].when_full),
            (50.0, 50, WhenFull::Drop)
        );
        assert_eq!((r[1].rate, r[1].max_in_flight), (2000.0, 2000));
        assert_eq!(r[0].ops, vec![(1, 3)]);
        assert_eq!(r[0].late_after, DEFAULT_LATE_AFTER);
        // A listed weight-0 op is sent with weight 1.
        assert_eq!(
            (r[2].max_in_flight, r[2].when_full, r[2].ops.clone()),
            (3, WhenFull::Queue, vec![(0, 1)])
        );
        assert_eq!(r[2].late_after, Duration::from_millis(2));
        assert_eq!(s.duration(), Duration::from_secs(21));
        let names: Vec<String> = s.plan().into_iter().map(|p| p.name).collect();
        assert_eq!(names, vec!["rate 1", "rate 2", "rate 3"]);
    }

    #[test]
    fn rate_and_catalog_ops_may_read_only_defaults() {
        let e = parse("[[rate]]\nrate = 10\nduration = \"1s\"\n").unwrap_err();
        assert!(
            e.contains("rate[0].ops") && e.contains("`{session}`") && e.contains("setup = true"),
            "{e}"
        );
        // With setup, the slot runs [player] setup first, so `mine` may read `{session}`.
        let s = parse("[[rate]]\nrate = 10\nduration = \"1s\"\nsetup = true\n").unwrap();
        assert!(s.shapes.rates[0].setup);
        assert_eq!(s.shapes.rates[0].ops, vec![(1, 3), (2, 1)]);
        let e = parse("[[rate]]\nrate = 10\nduration = \"1s\"\nops = [\"state\", \"mine\"]\n")
            .unwrap_err();
        assert!(
            e.starts_with("28:17 ") && e.contains("rate[0].ops[1]"),
            "{e}"
        );
        let e = parse("[catalog]\nrequests = 5\n").unwrap_err();
        assert!(e.contains("catalog.ops") && e.contains("op `mine`"), "{e}");
        let e = parse("[catalog]\nrequests = 5\nops = [\"nope\"]\n").unwrap_err();
        assert!(
            e.contains("no op named `nope`; ops are: login, state, mine"),
            "{e}"
        );
    }

    #[test]
    fn streams_stay_out_of_the_catalog_and_rate_steps() {
        let stream = "[[op]]\nname = \"events\"\npath = \"/events\"\nkind = \"stream\"\n";
        // By default the catalog takes every request op and leaves the stream out.
        let s = parse(&format!(
            "{stream}[catalog]\nrequests = 5\nops = [\"login\", \"state\"]\n"
        ))
        .unwrap();
        assert_eq!(s.shapes.catalog.len(), 2);
        let e = parse(&format!(
            "{stream}[catalog]\nrequests = 5\nops = [\"events\"]\n"
        ))
        .unwrap_err();
        assert!(
            e.contains("catalog.ops[0]") && e.contains("background"),
            "{e}"
        );
        let e = parse(&format!(
            "{stream}[[rate]]\nrate = 5\nduration = \"1s\"\nops = [\"events\"]\n"
        ))
        .unwrap_err();
        assert!(
            e.contains("rate[0].ops[0]") && e.contains("background"),
            "{e}"
        );
    }

    #[test]
    fn bad_values_name_their_key() {
        for (extra, key, words) in [
            (
                "[[rate]]\nrate = 0\nduration = \"1s\"\nops = [\"state\"]\n",
                "rate[0].rate",
                "above 0",
            ),
            (
                "[[rate]]\nrate = []\nduration = \"1s\"\nops = [\"state\"]\n",
                "rate[0].rate",
                "at least one",
            ),
            (
                "[[rate]]\nrate = 5\nduration = \"1s\"\nmax_in_flight = 0\nops = [\"state\"]\n",
                "rate[0].max_in_flight",
                "at least 1",
            ),
            (
                "[[rate]]\nrate = 5\nduration = \"1s\"\nwhen_full = \"wait\"\n",
                "rate[0].when_full",
                "drop",
            ),
            (
                "[catalog]\nrequests = 0\nops = [\"state\"]\n",
                "catalog.requests",
                "at least 1",
            ),
            (
                "[catalog]\nrequests = 3\nconcurrency = 0\nops = [\"state\"]\n",
                "catalog.concurrency",
                "at least 1",
            ),
            (
                "[soak]\nadd = 5\nevery = \"1s\"\nup_to = 2\nhold = \"1s\"\n",
                "soak.up_to",
                "at least `add`",
            ),
            (
                "[soak]\nadd = 0\nevery = \"1s\"\nup_to = 2\nhold = \"1s\"\n",
                "soak.add",
                "at least 1",
            ),
            (
                "[stop]\nspread = \"1s\"\n[[rate]]\nrate = 5\nduration = \"1s\"\nops = [\"state\"]\n",
                "stop.spread",
                "needs players",
            ),
            (
                "[[step]]\nplayers = 1\nduration = \"1s\"\nleave = \"2s\"\n",
                "step[0].leave",
                "fit",
            ),
        ] {
            let e = parse(extra).unwrap_err();
            assert!(
                e.contains(&format!(" {key}: ")) && e.contains(words),
                "{extra}: {e}"
            );
        }
    }

    #[test]
    fn soak_and_stop_compile_into_steps_and_the_plan_orders_everything() {
        let s = parse(
            "[[step]]\nplayers = 3\nduration = \"2s\"\n[soak]\nadd = 4\nevery = \"10s\"\nup_to = 10\nhold = \"1m\"\narrival = \"gradual\"\n[stop]\nspread = \"5s\"\n[catalog]\nrequests = 10\nops = [\"state\"]\n[[rate]]\nrate = 20\nduration = \"3s\"\nops = [\"state\"]\n",
        )
        .unwrap();
        let steps: Vec<(usize, Duration, PhaseKind)> = s
            .steps
            .iter()
            .map(|st| (st.players, st.duration, st.kind))
            .collect();
        let sec = Duration::from_secs;
        assert_eq!(
            steps,
            vec![
                (3, sec(2), PhaseKind::Step),
                (4, sec(10), PhaseKind::Soak),
                (8, sec(10), PhaseKind::Soak),
                (10, sec(60), PhaseKind::Soak),
                (0, sec(5), PhaseKind::Stop),
            ]
        );
        assert_eq!(s.steps[1].arrival, Arrival::Gradual(sec(10)));
        assert_eq!(s.steps[4].leave, sec(5));
        let plan: Vec<(String, PhaseKind)> =
            s.plan().into_iter().map(|p| (p.name, p.kind)).collect();
        let want = [
            ("catalog state", PhaseKind::Catalog),
            ("step 1", PhaseKind::Step),
            ("soak 1", PhaseKind::Soak),
            ("soak 2", PhaseKind::Soak),
            ("soak hold", PhaseKind::Soak),
            ("stop", PhaseKind::Stop),
            ("rate 1", PhaseKind::Rate),
        ];
        assert_eq!(plan, want.map(|(n, k)| (n.to_owned(), k)));
        assert_eq!(s.shapes.catalog[0].concurrency, 1);
        assert_eq!(s.shapes.catalog[0].max_duration, DEFAULT_ROUTE_MAX);
    }
}
