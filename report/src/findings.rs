//! Findings: what a run shows, named with its numbers and the rows that prove it. Each
//! detector is a small pure function over the built report.

use serde::{Deserialize, Serialize};

use super::{
    RunData,
    model::{Cell, Report},
};

/// One finding.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Finding {
    /// Stable kind: `churn_cliff`, `throttling_bursts`, `pool_pinned`,
    /// `slo_breach_without_errors`, `driver_saturated`, `warm_up`, `stream_storm`.
    pub kind: String,
    /// One line, with the numbers.
    pub title: String,
    /// What it means and what to look at.
    pub detail: String,
    /// The report rows it rests on.
    pub evidence: Vec<String>,
}

/// Linux keeps a socket in TIME_WAIT for 60 s (`TCP_TIMEWAIT_LEN`).
const TIME_WAIT_S: f64 = 60.0;

/// The host's ephemeral port count (`ip_local_port_range`), 28 232 by default.
fn port_range() -> u64 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().filter_map(|v| v.parse::<u64>().ok());
            Some(it.next()?..=it.next()?)
        })
        .map_or(28_232, |r| r.end() - r.start() + 1)
}

/// Runs every detector.
pub fn detect(r: &Report, d: &RunData) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(churn_cliff(r, port_range()));
    out.extend(throttling_bursts(r));
    out.extend(driver_saturated(r));
    out.extend(warm_up(d));
    out.extend(slo_breach_without_errors(r));
    out.extend(pool_pinned(r, d));
    out.extend(stream_storm(r, d));
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
        out.push(Finding {
            kind: "stream_storm".into(),
            title: format!(
                "{} ({}) in {}: {} reconnects in {:.0} s for {} players ({per:.1} per player per \
                 minute), {errors} stream errors ({}) — the streams keep breaking",
                row.op,
                row.stream_kind,
                row.phase,
                row.reconnects,
                s.duration_ms as f64 / 1e3,
                s.players,
                super::play::counts(&row.errors)
            ),
            detail: "Every reopening is one more request (on HTTP/1.1 one more connection) and a \
                 gap in the events the player sees, and reconnect storms add load exactly when \
                 the service struggles. Look at what ends the streams: the error classes above, \
                 an idle or stream timeout in the server or a proxy in front of it."
                .into(),
            evidence: vec![format!(
                "{} / {}: opened {}, reconnects {}, events {}, errors {}",
                row.phase,
                row.op,
                row.opened,
                row.reconnects,
                row.events,
                super::play::counts(&row.errors)
            )],
        });
    }
    out
}

/// A pool at its cap: the ESTABLISHED connections of a request-path pair stay at the same
/// maximum through two or more load steps while the ops' latency climbs — the pool (or a
/// connection limit) is the queue, as the seeds' backend sat at MaxOpenConns=25.
pub fn pool_pinned(r: &Report, d: &RunData) -> Vec<Finding> {
    let mono0 = d.meta.mono_start_ns as u64;
    // Catalog routes are different ops one after another: their latencies do not climb.
    let steps: Vec<&herd_driver::report::PhaseReport> = d
        .phases
        .iter()
        .filter(|s| s.index.is_some() && s.kind != herd_driver::scenario::PhaseKind::Catalog)
        .collect();
    if steps.len() < 2 {
        return Vec::new();
    }
    // Peak ESTABLISHED per (pair, step index).
    let mut peaks: std::collections::BTreeMap<(String, String), Vec<u64>> = Default::default();
    for iv in &d.probe {
        let t_ms = iv.at_ns.saturating_sub(mono0) / 1_000_000;
        let (_, Some(k)) = super::model::step_at(&steps, t_ms) else {
            continue;
        };
        for p in &iv.pairs {
            if let Some(g) = &p.gauges {
                let v = peaks
                    .entry((p.container.clone(), p.remote.to_string()))
                    .or_insert_with(|| vec![0; steps.len()]);
                if let Some(slot) = v.get_mut(k) {
                    *slot = (*slot).max(g.established);
                }
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
        out.push(Finding {
            kind: "pool_pinned".into(),
            title: format!(
                "{} → {}: {cap} connections in every step from {} while the worst p99 rose \
                 from {:.0} ms to {:.0} ms — a pool or connection cap is the queue",
                p.container,
                p.remote,
                steps[from].phase,
                lat_from as f64 / 1e3,
                lat_to as f64 / 1e3
            ),
            detail: "More load did not get more connections: requests wait for a pooled one. \
                     Raise the pool size (e.g. a database client's max open connections) or find \
                     what holds the connections."
                .into(),
            evidence: vec![format!(
                "ESTABLISHED peak per step: {v:?}; worst p99 per step (µs): {p99:?}"
            )],
        });
    }
    out
}

/// A latency objective broken while the op's error share stayed 0: the service degrades
/// without failing, which error-rate alerts never see (seed 003: RPC at 16 s, 0 errors).
pub fn slo_breach_without_errors(r: &Report) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    for row in r.slo.iter().filter(|s| !s.pass && s.error_share == 0.0) {
        if row.objective.starts_with("errors") {
            continue;
        }
        // One finding per objective, from the first step that broke it.
        if out.iter().any(|f| {
            f.evidence
                .iter()
                .any(|e| e.starts_with(&format!("{} {}:", row.op, row.objective)))
        }) {
            continue;
        }
        let broken: Vec<String> = r
            .slo
            .iter()
            .filter(|s| s.op == row.op && s.objective == row.objective && !s.pass)
            .map(|s| format!("{} {:.0} ms", s.phase, s.measured / 1e3))
            .collect();
        out.push(Finding {
            kind: "slo_breach_without_errors".into(),
            title: format!(
                "{}: `{}` broken from {} ({:.0} ms) with 0 errors",
                row.op,
                row.objective,
                row.phase,
                row.measured / 1e3
            ),
            detail: "Every call still succeeds, so error-rate alerts stay green while users wait. \
                     Look for a queue or a long-poll path that saturates before the CPU does."
                .into(),
            evidence: vec![format!(
                "{} {}: {}",
                row.op,
                row.objective,
                broken.join(", ")
            )],
        });
    }
    out
}

/// A pair that opens a new connection for a large share of the requests crossing it.
pub fn churn_cliff(r: &Report, ports: u64) -> Vec<Finding> {
    r.pairs
        .iter()
        .filter_map(|p| {
            let churn = p.churn_ratio.value()?;
            // A pooled client opens about as many connections as it has calls in flight, a
            // churn ratio near 0; one request in ten opening a connection is already a pool
            // that does not hold.
            if churn < 0.1 || p.connects < 100 {
                return None;
            }
            // TIME_WAIT lands on whichever side closes first; only the source's count uses up
            // its ephemeral ports. A socket stays 60 s, so the peak entry rate x 60 is where
            // the gauge settles if the load holds (runs shorter than 60 s never get there).
            let projected = p.time_wait_implied_peak;
            let measured = p.time_wait_peak.value().map(|g| g as u64);
            let to = if p.remote_container == "-" {
                p.remote.clone()
            } else {
                format!("{} ({})", p.remote_container, p.remote)
            };
            let closer = if p.time_wait_entries * 2 < p.connects {
                " Most of these connections are closed by the destination first, so their \
                 TIME_WAIT sits there, not on the source's ports."
            } else {
                ""
            };
            Some(Finding {
                kind: "churn_cliff".into(),
                title: format!(
                    "{} → {to} opens a new connection for {:.0} % of requests: {:.0} new connections/s; \
                     held for 60 s that is ≈ {projected} sockets in TIME_WAIT against {ports} ephemeral \
                     ports {}{}",
                    p.container,
                    churn * 100.0,
                    p.connects_per_s,
                    if projected >= ports {
                        "— past the cliff: sustained, connects fail with EADDRNOTAVAIL".to_owned()
                    } else {
                        format!("({:.0} %)", 100.0 * projected as f64 / ports as f64)
                    },
                    match measured {
                        Some(m) => format!("; measured peak in this run: {m}"),
                        None => String::new(),
                    }
                ),
                detail: format!(
                    "{} connections for {} requests (churn ratio {churn:.2}). Each closed connection \
                     parks its port in TIME_WAIT for 60 s; at this rate the source runs out of ports \
                     toward this destination near {:.0} new connections/s. The usual cause is an HTTP \
                     client whose idle pool per host is smaller than its concurrency (Go's default \
                     MaxIdleConnsPerHost is 2): widen the pool.{closer}",
                    p.connects,
                    r.run.requests,
                    ports as f64 / TIME_WAIT_S
                ),
                evidence: vec![format!(
                    "pair {} → {}: connects {}, TIME_WAIT entries {}, lifetime p50 ≤ {} ms",
                    p.container, p.remote, p.connects, p.time_wait_entries, p.lifetime_ms.p50_le
                )],
            })
        })
        .collect()
}

/// A container whose 100 ms bursts hit its quota while its 30 s average stays under it.
pub fn throttling_bursts(r: &Report) -> Vec<Finding> {
    r.containers
        .iter()
        .filter_map(|c| {
            let cap = c.cpu_cap.value()?;
            let burst = c.cpu_burst.value()?;
            let sustained = c.cpu_sustained.value()?;
            let share = c.throttled_share.value().unwrap_or(0.0);
            // Only the plan's phases (steps, soak, rate steps, routes): the intervals before
            // and after the plan are not the load's.
            let in_step = c.phase != "before" && c.phase != "after";
            // Throttling means periods really throttled; a burst reading a hair over the cap
            // with none throttled is cpu.stat's tick granularity, not a quota hit.
            let hit = share > 0.0 && (share >= 0.05 || burst >= 0.9 * cap);
            if !in_step || !hit || sustained >= 0.8 * cap {
                return None;
            }
            Some(Finding {
                kind: "throttling_bursts".into(),
                title: format!(
                    "{} in {}: 100 ms bursts reach {burst:.2} cores against a {cap:.2}-core quota \
                     ({:.0} % of periods throttled) while the 30 s average is {sustained:.2}",
                    c.container,
                    c.phase,
                    share * 100.0
                ),
                detail: "Averages over 1 s or 30 s hide this: the container is throttled in bursts, \
                         which shows as latency spikes, not as high CPU. Raise the quota or smooth \
                         the bursts (connection storms, synchronized clients)."
                    .into(),
                evidence: vec![format!(
                    "{} / {}: burst {burst:.2}, sustained {sustained:.2}, cap {cap:.2}, throttled {:.1} ms",
                    c.phase,
                    c.container,
                    match c.throttled_ms {
                        Cell::Value(v) => v,
                        Cell::Missing(_) => 0.0,
                    }
                )],
            })
        })
        .collect()
}

/// The driver, not the system, limited the run in some intervals.
pub fn driver_saturated(r: &Report) -> Vec<Finding> {
    if r.run.saturated_intervals == 0 {
        return Vec::new();
    }
    vec![Finding {
        kind: "driver_saturated".into(),
        title: format!(
            "the driver was saturated in {} interval(s): those intervals measure the harness, not the system",
            r.run.saturated_intervals
        ),
        detail: "The driver's CPU or its scheduling lag crossed its limit. Give it more cores, \
                 run it on another host, or lower the load, and read latencies from those \
                 intervals with care."
            .into(),
        evidence: r
            .timeline
            .iter()
            .filter(|_| false)
            .map(|t| format!("t={:.0}s", t.t_s))
            .collect(),
    }]
}

/// The first interval of the first step much slower than the rest of it: connection pools and
/// caches warming up, to keep out of steady-state figures.
pub fn warm_up(d: &RunData) -> Vec<Finding> {
    let first: Vec<_> = d
        .driver
        .iter()
        .filter(|i| i.phase_index == Some(0))
        .collect();
    if first.len() < 4 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let ops: std::collections::BTreeSet<&str> = first
        .iter()
        .flat_map(|i| i.ops.iter().map(|o| o.op.as_str()))
        .collect();
    for op in ops {
        let p99s: Vec<u64> = first
            .iter()
            .filter_map(|i| i.ops.iter().find(|o| o.op == op).map(|o| o.latency.p99_us))
            .collect();
        if p99s.len() < 4 {
            continue;
        }
        let mut rest = p99s[1..].to_vec();
        rest.sort_unstable();
        let median = rest[rest.len() / 2].max(1);
        if p99s[0] >= 3 * median && p99s[0] >= 1_000 {
            out.push(Finding {
                kind: "warm_up".into(),
                title: format!(
                    "{op}: the first interval's p99 ({:.1} ms) is {:.0}× the step's steady p99 ({:.1} ms): warm-up",
                    p99s[0] as f64 / 1e3,
                    p99s[0] as f64 / median as f64,
                    median as f64 / 1e3
                ),
                detail: "Cold connection pools and caches make the first seconds slow. This is not \
                         degradation; leave the first interval out of steady-state figures."
                    .into(),
                evidence: vec![format!(
                    "{} p99 by interval (µs): {p99s:?}",
                    first[0].phase.as_deref().unwrap_or("step 1")
                )],
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{PairRow, RunSummary};

    fn report(pairs: Vec<PairRow>, requests: u64) -> Report {
        Report {
            run: RunSummary {
                id: 1,
                name: "t".into(),
                scenario: "t.toml".into(),
                status: "finished".into(),
                started_unix_ms: 0,
                duration_s: 60.0,
                requests,
                errors: 0,
                saturated_intervals: 0,
                probe_intervals: 60,
                seeding: None,
            },
            ops: vec![],
            streams: vec![],
            groups: vec![],
            open: vec![],
            containers: vec![],
            pairs,
            timeline: vec![],
            slo: vec![],
            findings: vec![],
            notes: vec![],
        }
    }

    fn pair(connects: u64, churn: f64) -> PairRow {
        PairRow {
            container: "gateway".into(),
            remote: "198.18.0.6:8082".into(),
            remote_container: "backend".into(),
            connects,
            connects_per_s: connects as f64 / 60.0,
            time_wait_entries: connects,
            time_wait_implied_peak: connects / 60 * 60,
            time_wait_peak: Cell::Missing("not sampled".into()),
            established_peak: Cell::Value(2.0),
            srtt_p50_us: Cell::Missing("not sampled".into()),
            srtt_p99_le_us: Cell::Missing("not sampled".into()),
            headroom_min: Cell::Missing("not sampled".into()),
            churn_ratio: Cell::Value(churn),
            connect_latency_us: Default::default(),
            lifetime_ms: Default::default(),
        }
    }

    #[test]
    fn a_pool_flat_at_its_cap_while_latency_climbs_is_named() {
        use herd_probe::sample::{Interval, PairGauges, PairInterval};
        let mut d = crate::model::tests::data();
        // Three steps of 2 s each; p99 20 ms, then 20 ms, then 400 ms.
        let base = d.phases[0].clone();
        d.phases = (0..3)
            .map(|k| {
                let mut s = base.clone();
                s.phase = format!("step {}", k + 1);
                s.index = Some(k);
                s.start_ms = k as u64 * 2000;
                s.duration_ms = 2000;
                s.ops[0].latency.p99_us = [20_000, 20_000, 400_000][k];
                s
            })
            .collect();
        let mono0 = d.meta.mono_start_ns as u64;
        let remote: std::net::SocketAddr = "198.18.0.6:5432".parse().unwrap();
        d.probe = (1..=6u64)
            .map(|i| Interval {
                at_ns: mono0 + i * 1_000_000_000 - 500_000_000,
                interval_ns: 1_000_000_000,
                containers: vec![],
                pairs: vec![PairInterval {
                    container: "backend".into(),
                    remote,
                    remote_container: Some("postgres".into()),
                    connects: 0,
                    established: 0,
                    time_wait_entries: 0,
                    closed: 0,
                    connect_latency_us: Default::default(),
                    lifetime_ms: Default::default(),
                    connect_latency_buckets: Default::default(),
                    lifetime_buckets: Default::default(),
                    gauges: Some(PairGauges {
                        established: if i <= 2 { 10 } else { 25 },
                        ..PairGauges::default()
                    }),
                }],
                lost: 0,
            })
            .collect();
        let mut r = report(vec![pair(500, 0.01)], 1000);
        r.pairs[0].container = "backend".into();
        r.pairs[0].remote = remote.to_string();
        let f = pool_pinned(&r, &d);
        assert_eq!(f.len(), 1, "{f:#?}");
        assert!(
            f[0].title
                .contains("25 connections in every step from step 2"),
            "{}",
            f[0].title
        );
        assert!(
            f[0].title.contains("from 20 ms to 400 ms"),
            "{}",
            f[0].title
        );
        // A pool that grows with the load is not pinned.
        for iv in &mut d.probe {
            let i = (iv.at_ns - mono0) / 1_000_000_000 + 1;
            iv.pairs[0].gauges.as_mut().unwrap().established = 10 * i;
        }
        assert!(pool_pinned(&r, &d).is_empty());
    }

    #[test]
    fn a_latency_breach_without_errors_is_named_once_from_its_first_step() {
        let mut r = report(vec![], 1000);
        let row = |step: &str, ms: f64, errors: f64| crate::model::SloRow {
            phase: step.into(),
            op: "rpc".into(),
            objective: "p99 < 500ms".into(),
            measured: ms * 1e3,
            limit: 500e3,
            pass: ms < 500.0,
            error_share: errors,
        };
        r.slo = vec![
            row("step 1", 120.0, 0.0),
            row("step 2", 1671.0, 0.0),
            row("step 3", 16_000.0, 0.0),
        ];
        let f = slo_breach_without_errors(&r);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].title
                .contains("broken from step 2 (1671 ms) with 0 errors"),
            "{}",
            f[0].title
        );
        assert!(
            f[0].evidence[0].contains("step 3 16000 ms"),
            "{:?}",
            f[0].evidence
        );
        // With errors it is a failure, not a silent degradation.
        r.slo = vec![row("step 1", 900.0, 0.2)];
        assert!(slo_breach_without_errors(&r).is_empty());
    }

    #[test]
    fn the_seeds_churn_is_named_with_its_numbers_and_a_pooled_pair_is_not() {
        // 440 new connections/s for ~2x as many requests, as in the seed report.
        let r = report(vec![pair(26_400, 0.5), pair(50, 0.0)], 52_800);
        let f = churn_cliff(&r, 28_232);
        assert_eq!(f.len(), 1);
        assert!(
            f[0].title.contains("440 new connections/s"),
            "{}",
            f[0].title
        );
        assert!(
            f[0].title.contains("26400 sockets in TIME_WAIT"),
            "{}",
            f[0].title
        );
        assert!(
            f[0].title.contains("28232 ephemeral ports (94 %)"),
            "{}",
            f[0].title
        );
        assert!(churn_cliff(&report(vec![pair(500, 0.01)], 50_000), 28_232).is_empty());
        // Past the port range the finding says what happens next.
        let f = churn_cliff(&report(vec![pair(60_000, 0.9)], 66_000), 28_232);
        assert!(f[0].title.contains("past the cliff"), "{}", f[0].title);
    }
}
