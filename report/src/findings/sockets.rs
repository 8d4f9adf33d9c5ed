//! Findings about connections: a churn cliff, a pool pinned at its cap, streams that keep
//! breaking.

use std::collections::BTreeMap;

use crate::units::latency;
use herd_model::Counter;
use herd_model::RunData;
use herd_model::{PhaseKind, PhaseResult};

use super::{Finding, n};
use crate::model::{PairRow, Report, phase_at};

/// Linux keeps a socket in TIME_WAIT for 60 s (`TCP_TIMEWAIT_LEN`).
const TIME_WAIT_S: f64 = 60.0;

/// Ports of Linux's default `ip_local_port_range` (32768–60999), for a source whose range
/// was not read.
const DEFAULT_PORTS: u64 = 60_999 - 32_768 + 1;

/// A container's usable ephemeral ports, as its network namespace reported them (the
/// largest seen), or None when its namespace was never sampled.
pub(super) fn port_range(r: &Report, container: &str) -> Option<u64> {
    r.timeline
        .iter()
        .flat_map(|p| &p.containers)
        .filter(|c| c.container == container)
        .filter_map(|c| c.port_range)
        .max()
}

/// connect() failures with EADDRNOTAVAIL (no free port) of a container over the run.
fn addr_not_avail(d: &RunData, container: &str) -> u64 {
    d.probe
        .iter()
        .flat_map(|iv| &iv.containers)
        .filter(|c| c.container == container)
        .map(|c| c.counts.get(Counter::ConnectAddrNotAvail))
        .sum()
}

/// The destination as rows name it: `backend (198.18.0.6:8082)`, or the address alone.
pub(super) fn destination(p: &PairRow) -> String {
    if p.remote_container == "-" {
        p.remote.clone()
    } else {
        format!("{} ({})", p.remote_container, p.remote)
    }
}

/// A pair on the request path that opens a new connection for a large share of the requests
/// crossing it: each closed connection parks its port in TIME_WAIT for 60 s, so the rate
/// decides whether the source runs out of ports toward that destination, and when.
pub fn churn_cliff(r: &Report, d: &RunData) -> Vec<Finding> {
    r.pairs
        .iter()
        .filter_map(|p| {
            let churn = p.churn_ratio.value()?;
            // A pooled client opens about as many connections as it has calls in flight, a
            // churn ratio near 0; one request in ten opening a connection is already a pool
            // that does not hold.
            if churn < 0.1 || p.connects < 100 || p.connects_per_s <= 0.0 {
                return None;
            }
            let to = destination(p);
            let rate = p.connects_per_s;
            let pct = churn * 100.0;
            let peak = p.time_wait_peak.value().map(|v| v as u64);
            let range = port_range(r, &p.container);
            let failed = addr_not_avail(d, &p.container);
            let mut evidence = vec![format!(
                "pair {} → {to}: {} new connections for {} requests (churn ratio {churn:.2}: \
                 {pct:.0} % of requests), {rate:.0} new connections/s over {:.0} s, TIME_WAIT \
                 entries {}, TIME_WAIT peak {}",
                p.container,
                n(p.connects),
                n(r.run.requests),
                r.run.duration_s,
                n(p.time_wait_entries),
                peak.map_or_else(|| "not sampled".into(), n)
            )];
            let mut title = format!(
                "{} → {to}: a new connection for {pct:.0} % of requests — {rate:.0} new \
                 connections/s{}",
                p.container,
                match peak {
                    Some(v) => format!(", TIME_WAIT peak {}", n(v)),
                    None => String::new(),
                }
            );
            let mut f = Finding::new("churn_cliff", String::new(), "", Vec::new())
                .about(&p.container)
                .number("churn_ratio", churn)
                .number("connects_per_s", rate);
            if let Some(v) = peak {
                f = f.number("time_wait_peak", v as f64);
            }
            match range {
                Some(ports) => {
                    let steady = rate * TIME_WAIT_S;
                    evidence.push(format!(
                        "{}'s network namespace: {} ephemeral ports",
                        p.container,
                        n(ports)
                    ));
                    if steady >= ports as f64 {
                        let secs = ports as f64 / rate;
                        title.push_str(&format!(
                            "; at this rate its {} ephemeral ports toward it run out after \
                             {secs:.0} s",
                            n(ports)
                        ));
                        evidence.push(format!(
                            "projection: {} ports ÷ {rate:.0} new connections/s = {secs:.0} s, \
                             sooner than the {TIME_WAIT_S:.0} s a socket stays in TIME_WAIT",
                            n(ports)
                        ));
                        f = f.number("seconds_to_exhaustion", secs);
                    } else {
                        let share = 100.0 * steady / ports as f64;
                        title.push_str(&format!(
                            "; held, TIME_WAIT settles near {steady:.0} of its {} ephemeral ports \
                             ({share:.0} %)",
                            n(ports)
                        ));
                        evidence.push(format!(
                            "projection: {rate:.0} new connections/s × {TIME_WAIT_S:.0} s in \
                             TIME_WAIT = {steady:.0} sockets, {share:.0} % of {} ports",
                            n(ports)
                        ));
                        f = f.number("time_wait_steady", steady);
                    }
                    f = f.number("port_range", ports as f64);
                }
                None => {
                    // Not read: the kernel's default range is stated as an assumption, and
                    // projected only when even that would run out.
                    let steady = rate * TIME_WAIT_S;
                    let ports = DEFAULT_PORTS;
                    evidence.push(format!(
                        "{}'s port range was not sampled; Linux's default ip_local_port_range \
                         32768–60999 is {} ports",
                        p.container,
                        n(ports)
                    ));
                    if steady >= ports as f64 {
                        let secs = ports as f64 / rate;
                        title.push_str(&format!(
                            "; {}'s port range was not sampled: with Linux's default {} ports \
                             toward it they would run out after {secs:.0} s",
                            p.container,
                            n(ports)
                        ));
                        evidence.push(format!(
                            "projection with the default: {} ports ÷ {rate:.0} new connections/s \
                             = {secs:.0} s",
                            n(ports)
                        ));
                        f = f.number("seconds_to_exhaustion_default_range", secs);
                    } else {
                        title.push_str(&format!(
                            "; {}'s port range was not sampled, so when its ports run out is \
                             unknown",
                            p.container
                        ));
                    }
                }
            }
            evidence.push(format!(
                "{}: connect() failures with EADDRNOTAVAIL (no free port): {}",
                p.container,
                n(failed)
            ));
            if failed > 0 {
                title.push_str(&format!(
                    "; {} connects already failed for want of a port (EADDRNOTAVAIL)",
                    n(failed)
                ));
            }
            let closer = if p.time_wait_entries * 2 < p.connects {
                " Most of these connections are closed by the destination first, so their \
                 TIME_WAIT sits there, not on the source's ports."
            } else {
                ""
            };
            f.title = title;
            f.detail = format!(
                "Each closed connection holds its port in TIME_WAIT for 60 s. The usual cause is \
                 an HTTP client whose idle pool per host is smaller than its concurrency (Go's \
                 default MaxIdleConnsPerHost is 2): widen the pool, or reuse connections.{closer}"
            );
            f.evidence = evidence;
            Some(f)
        })
        .collect()
}

/// A pool at its cap: the ESTABLISHED connections of a request-path pair stay at the same
/// maximum through two or more load steps while the ops' latency climbs — the pool (or a
/// connection limit) is the queue, as the seeds' backend sat at MaxOpenConns=25.
pub fn pool_pinned(r: &Report, d: &RunData) -> Vec<Finding> {
    let mono0 = d.meta.mono_start_ns as u64;
    // Catalog routes are different ops one after another: their latencies do not climb.
    let steps: Vec<&PhaseResult> = d
        .phases
        .iter()
        .filter(|s| s.index.is_some() && s.kind != PhaseKind::Catalog)
        .collect();
    if steps.len() < 2 {
        return Vec::new();
    }
    // Peak ESTABLISHED per (pair, position of the step in `steps`).
    let mut peaks: BTreeMap<(String, String), Vec<u64>> = BTreeMap::new();
    for iv in &d.probe {
        let t_ms = iv.at_ns.saturating_sub(mono0) / 1_000_000;
        let (_, Some(k)) = phase_at(&steps, t_ms) else {
            continue;
        };
        let Some(pos) = steps.iter().position(|s| s.index == Some(k)) else {
            continue;
        };
        for p in &iv.pairs {
            if let Some(g) = &p.gauges {
                let v = peaks
                    .entry((p.container.clone(), p.remote.to_string()))
                    .or_insert_with(|| vec![0; steps.len()]);
                v[pos] = v[pos].max(g.established);
            }
        }
    }
    // Worst p99 per step over the ops.
    let p99: Vec<u64> = steps
        .iter()
        .map(|s| s.ops.iter().map(|o| o.latency.p99_us).max().unwrap_or(0))
        .collect();
    let mut out = Vec::new();
    for p in r.pairs.iter().filter(|p| p.churn_ratio.value().is_some()) {
        let Some(v) = peaks.get(&(p.container.clone(), p.remote.clone())) else {
            continue;
        };
        // The first step from which the peak stops growing, and stays there to the end.
        let cap = *v.iter().max().unwrap_or(&0);
        let Some(from) = v.iter().position(|&e| e == cap) else {
            continue;
        };
        let pinned = v[from..].iter().all(|&e| e == cap);
        let (lat_from, lat_to) = (p99[from], *p99.last().unwrap_or(&0));
        if cap < 4 || !pinned || from + 1 >= v.len() || lat_to < 2 * lat_from.max(1) {
            continue;
        }
        let per_phase = |f: &dyn Fn(usize) -> String| {
            steps
                .iter()
                .enumerate()
                .map(|(i, s)| format!("{} {}", s.phase, f(i)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push(
            Finding::new(
                "pool_pinned",
                format!(
                    "{} → {}: {cap} connections in every step from {} while the worst p99 rose \
                     from {} to {} — a pool or connection cap is the queue",
                    p.container,
                    destination(p),
                    steps[from].phase,
                    latency(lat_from),
                    latency(lat_to)
                ),
                "More load did not get more connections: requests wait for a pooled one. Raise \
                 the pool size (e.g. a database client's max open connections) or find what \
                 holds the connections.",
                vec![
                    format!(
                        "pair {} → {}: ESTABLISHED peak per phase: {}",
                        p.container,
                        destination(p),
                        per_phase(&|i| v[i].to_string())
                    ),
                    format!("worst p99 per phase: {}", per_phase(&|i| latency(p99[i]))),
                ],
            )
            .about(&p.container)
            .number("established_cap", cap as f64)
            .number("p99_from_us", lat_from as f64)
            .number("p99_to_us", lat_to as f64),
        );
    }
    out
}

/// Reconnects per player per minute above which a stream op's phase is a storm.
const STORM_PER_PLAYER_MIN: f64 = 0.5;

/// Streams that keep breaking: in a player phase, a stream or long-poll op reopened more
/// than half as many times per minute as there are players (and at least 10 times). Each
/// reopening is one more request, on HTTP/1.1 one more connection, and a gap in what the
/// player sees.
pub fn stream_storm(r: &Report, d: &RunData) -> Vec<Finding> {
    let mut out = Vec::new();
    for row in &r.streams {
        let Some(s) = d.phases.iter().find(|s| s.phase == row.phase) else {
            continue;
        };
        let minutes = s.duration_ms as f64 / 60_000.0;
        if s.players == 0 || minutes <= 0.0 || row.reconnects < 10 {
            continue;
        }
        let per = row.reconnects as f64 / s.players as f64 / minutes;
        if per <= STORM_PER_PLAYER_MIN {
            continue;
        }
        let errors: u64 = row.errors.values().sum();
        let secs = s.duration_ms as f64 / 1e3;
        let classes = crate::model::play::counts(&row.errors);
        out.push(
            Finding::new(
                "stream_storm",
                format!(
                    "{} ({}) in {}: {} reconnects in {secs:.0} s for {} players ({per:.1} per \
                     player per minute), {} stream errors ({classes}) — the streams keep breaking",
                    row.op,
                    row.stream_kind,
                    row.phase,
                    n(row.reconnects),
                    s.players,
                    n(errors),
                ),
                "Every reopening is one more request (on HTTP/1.1 one more connection) and a gap \
                 in the events the player sees, and reconnect storms add load exactly when the \
                 service struggles. Look at what ends the streams: the error classes above, an \
                 idle or stream timeout in the server or a proxy in front of it.",
                vec![format!(
                    "{} / {}: opened {}, reconnects {}, events {}, errors {} ({classes}), over \
                     {secs:.0} s with {} players: {per:.1} reconnects per player per minute",
                    row.phase,
                    row.op,
                    n(row.opened),
                    n(row.reconnects),
                    n(row.events),
                    n(errors),
                    s.players,
                )],
            )
            .in_phase(&row.phase)
            .number("reconnects", row.reconnects as f64)
            .number("per_player_per_minute", per),
        );
    }
    out
}
