//! From the serde shapes to a checked [`Scenario`]: each section through its own compiler,
//! then what spans sections — every variable has a value before an op reads it, the steps,
//! the hammer, the plan is not empty, the objectives name ops.

use std::time::Duration;

use super::{
    Arrival, Dur, Hammer, Invalid, Op, Pace, PhaseKind, PlayerSettings, Scenario, Seg, Step, at,
    find_op, flow, is_ident, key,
    op::{DEFAULT_TIMEOUT, compile_op, expected_outcome},
    players, pointer, positive, protocols,
    raw::{RawArrival, RawScenario, RawSlo},
    reads, seed, shapes,
    slo::parse_slo,
    target::compile_target,
};
use crate::template::{BUILTINS, VarNames};

pub(super) fn compile(file: &str, raw: RawScenario) -> Result<Scenario, Invalid> {
    let default_timeout = positive(
        raw.target.timeout,
        DEFAULT_TIMEOUT,
        &[key("target"), key("timeout")],
    )?;
    let compiled = compile_target(file, raw.target)?;
    let mut target = compiled.target;
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
    // The scenario-wide expected outcomes: a domain code needs some op that reads codes.
    let reads_codes = default_code.is_some() || raw.ops.iter().any(|o| o.code.is_some());
    let mut default_expected = Vec::new();
    for (k, name) in raw.outcome.expected.iter().enumerate() {
        let path = [key("outcome"), key("expected"), Seg::Index(k)];
        let e = expected_outcome(
            name,
            &path,
            reads_codes,
            "no op reads a code",
            target.transport,
        )?;
        if !default_expected.contains(&e) {
            default_expected.push(e);
        }
    }
    let mut ops = Vec::new();
    // A set, not a scan of the ops so far: the scan made checking 20 000 ops quadratic.
    let mut seen = std::collections::HashSet::new();
    let mut then_names = Vec::new();
    let weighted: Vec<bool> = raw.ops.iter().map(|o| o.weight.is_some()).collect();
    for (i, o) in raw.ops.into_iter().enumerate() {
        let (op, then) = compile_op(
            i,
            o,
            &target,
            default_timeout,
            &default_code,
            &default_expected,
            &mut names,
        )?;
        if !seen.insert(op.name.clone()) {
            return Err(at(
                &[key("op"), Seg::Index(i), key("name")],
                format!("a second op named `{}`", op.name),
            ));
        }
        ops.push(op);
        then_names.push(then);
    }
    flow::resolve(&mut ops, then_names, &weighted)?;
    if let Some(headers) = compiled.ws_headers {
        protocols::compile_ws_headers(&mut target, headers, &mut names)?;
    }
    defaults.resize(names.len(), None);
    for (i, op) in ops.iter().enumerate() {
        protocols::check_templates(op, i, &target, &defaults)?;
    }
    if target.transport == super::TransportKind::Ws {
        let streams: Vec<usize> = (0..ops.len())
            .filter(|&i| ops[i].kind.is_background())
            .collect();
        if streams.len() > 1 {
            return Err(at(
                &[key("op"), Seg::Index(streams[1]), key("kind")],
                format!(
                    "a WebSocket player holds one socket, whose pushes op `{}` already counts: one stream op at most",
                    ops[streams[0]].name
                ),
            ));
        }
        if let Some(ws) = &target.ws
            && let Some(s) = ws
                .path
                .slots()
                .chain(ws.headers.iter().flat_map(|(_, t)| t.slots()))
                .find(|s| defaults[*s].is_none())
        {
            return Err(at(
                &[key("target")],
                format!(
                    "the socket's URL or headers read `{{{}}}`, which has no value when the socket opens: give it a default in [vars]",
                    names.name(s)
                ),
            ));
        }
    }
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
    let mut group = raw
        .group
        .map(|g| players::compile_group(g, &ops, &find))
        .transpose()?;
    players::check_group_vars(&ops, group.as_mut(), &names, &reads)?;
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
        flow::check_reads(&ops, i, &known, &names)?;
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
    // WebSocket and gRPC players may only hold a stream (a socket's pushes, a server
    // stream), counting its events.
    let holds = matches!(
        target.transport,
        super::TransportKind::Ws | super::TransportKind::Grpc
    ) && ops.iter().any(|o| o.kind.is_background());
    if steps.iter().any(|s| s.players > 0) && !holds && !ops.iter().any(|o| o.weight > 0) {
        return Err(at(
            &[key("op")],
            "players need at least one op with weight > 0 (on a grpc:// or ws:// target, or a stream op they hold)",
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
