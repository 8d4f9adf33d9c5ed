//! The rendered report and comparison pinned as committed snapshots (insta): a fixture run
//! that fills nearly every section, once with the seeds' bug and once after their fix, goes
//! through [`Report::build`] and [`compare::compare`] and out through each renderer. A
//! change to what a user reads shows as a snapshot diff; `cargo insta review` (or
//! `INSTA_UPDATE=always cargo test -p herd-report snapshot`) accepts an intended one.

use std::collections::BTreeMap;

use herd_model::waits::{
    ConntrackCell, ContainerWaits, ListenerCell, ListenerWaits, OomCell, Pressure, PsiCell,
    RunqCell,
};
use herd_model::{Counter, Log2Hist, N_COUNTERS, RunqStats};

use crate::{Report, compare};
use herd_model::{CleanupRecord, RunData, RunMeta, SeedRecord, TableCount};
use herd_model::{
    ContainerInterval, CountMap, CpuCell, CpuInterval, DriverHealth, DriverInterval, GroupStats,
    IntervalOp, Latency, LatencyHistogram, Log2Summary, Memory, OpStats, OpenStats, OutcomeStats,
    PairGauges, PairInterval, PhaseKind, PhaseResult, PlayStats, ProbeInterval, RunResult, Slo,
    SloMetric, SocketCell, StreamStats, Throttling,
    histogram::{new_histogram, record},
};

const S: u64 = 1_000_000_000;
/// The run's CLOCK_MONOTONIC start.
const MONO0: u64 = 50 * S;

fn latency(p50_ms: f64, p99_ms: f64) -> Latency {
    let us = |ms: f64| (ms * 1e3) as u64;
    Latency {
        p50_us: us(p50_ms),
        p90_us: us((p50_ms + p99_ms) / 2.0),
        p99_us: us(p99_ms),
        p999_us: us(p99_ms * 1.5),
        max_us: us(p99_ms * 2.0),
        mean_us: p50_ms * 1.1e3,
    }
}

/// One op of a phase: its outcomes (name, count) and p50/p99 in ms.
struct Op {
    name: &'static str,
    outcomes: Vec<(&'static str, u64)>,
    p50_ms: f64,
    p99_ms: f64,
}

fn op(name: &'static str, outcomes: &[(&'static str, u64)], p50_ms: f64, p99_ms: f64) -> Op {
    Op {
        name,
        outcomes: outcomes.to_vec(),
        p50_ms,
        p99_ms,
    }
}

/// One phase of the plan, 1 s intervals.
struct Phase {
    name: &'static str,
    kind: PhaseKind,
    players: usize,
    seconds: u64,
    ops: Vec<Op>,
    play: PlayStats,
    open: Option<OpenStats>,
}

fn stream(op: &str, kind: &str, reconnects: u64, events: u64) -> StreamStats {
    // Three in four reopenings after the server ended the stream, the rest after a reset.
    let errors: BTreeMap<String, u64> = [
        ("ended", reconnects - reconnects / 4),
        ("transport_error.reset", reconnects / 4),
    ]
    .into_iter()
    .filter(|(_, n)| *n > 0)
    .map(|(k, n)| (k.to_owned(), n))
    .collect();
    let by_type = if kind == "sse" {
        BTreeMap::from([("move".into(), events * 2 / 3), ("chat".into(), events / 3)])
    } else {
        BTreeMap::from([
            ("news".into(), events / 4),
            ("no_news".into(), events * 3 / 4),
        ])
    };
    StreamStats {
        op: op.into(),
        kind: kind.into(),
        opened: 10 + reconnects,
        reconnects,
        cut_by_stop: 0,
        events,
        by_type,
        errors,
        first_event: (kind == "sse").then(|| latency(1.2, 9.0)),
    }
}

/// The plan: one catalog route, two player steps, an open-model rate step. `fixed` is the
/// run after the seeds' fix: faster, no stream storm, one more op.
fn phases(fixed: bool) -> Vec<Phase> {
    let slow = if fixed { 0.4 } else { 1.0 };
    let mut step2 = vec![
        op(
            "game.state",
            &[
                ("ok", 1500),
                ("http_5xx", if fixed { 0 } else { 60 }),
                ("timeout", if fixed { 0 } else { 40 }),
            ],
            40.0 * slow,
            400.0 * slow,
        ),
        // Slower than its objective, and not one error: a silent breach.
        op("game.move", &[("ok", 400)], 30.0 * slow, 120.0 * slow),
    ];
    if fixed {
        step2.push(op("game.evaluate", &[("ok", 90)], 1.0, 4.0));
    }
    vec![
        Phase {
            name: "catalog game.list",
            kind: PhaseKind::Catalog,
            players: 2,
            seconds: 1,
            ops: vec![op("game.list", &[("ok", 20)], 3.0, 8.0)],
            play: PlayStats::default(),
            open: None,
        },
        Phase {
            name: "step 1",
            kind: PhaseKind::Step,
            players: 10,
            seconds: 4,
            ops: vec![
                op("game.state", &[("ok", 398), ("timeout", 2)], 8.0, 30.0),
                op("game.move", &[("ok", 95), ("not_your_turn", 5)], 5.0, 20.0),
            ],
            play: PlayStats {
                streams: vec![
                    stream("events", "sse", 1, 900),
                    stream("lobby.wait", "long_poll", 0, 40),
                ],
                groups: GroupStats {
                    formed: 5,
                    finished: 4,
                    failed: 0,
                    abandoned: 1,
                },
                ..Default::default()
            },
            open: None,
        },
        Phase {
            name: "step 2",
            kind: PhaseKind::Step,
            players: 40,
            seconds: 4,
            ops: step2,
            play: PlayStats {
                streams: vec![stream("events", "sse", if fixed { 2 } else { 40 }, 3000)],
                groups: GroupStats {
                    formed: 20,
                    finished: 18,
                    failed: 1,
                    abandoned: 1,
                },
                ..Default::default()
            },
            open: None,
        },
        Phase {
            name: "rate 1",
            kind: PhaseKind::Rate,
            players: 0,
            seconds: 2,
            ops: vec![op(
                "game.state",
                &[("ok", 95), ("rate_limited", 2)],
                20.0 * slow,
                300.0 * slow,
            )],
            play: PlayStats::default(),
            open: Some(OpenStats {
                rate: 48.5,
                scheduled: 97,
                sent: 91,
                late_starts: 5,
                dropped_starts: 6,
                max_in_flight: 12,
                peak_in_flight: 12,
                late_after_us: 20_000,
            }),
        },
    ]
}

/// `count` samples whose median is `p50_ms` and 99th percentile `p99_ms`: half at the one,
/// up to 99 % at the other, the rest at twice it.
fn histogram(count: u64, p50_ms: f64, p99_ms: f64) -> LatencyHistogram {
    let mut h = new_histogram();
    for i in 0..count {
        let ms = if i < count / 2 {
            p50_ms
        } else if i < count * 99 / 100 {
            p99_ms
        } else {
            p99_ms * 2.0
        };
        record(&mut h, (ms * 1e3) as u64);
    }
    LatencyHistogram::encode(&h)
}

fn op_stats(o: &Op, share: u64, of: u64) -> OpStats {
    let outcomes: Vec<OutcomeStats> = o
        .outcomes
        .iter()
        .map(|(name, n)| OutcomeStats {
            outcome: (*name).into(),
            count: n * share / of,
            latency: latency(o.p50_ms, o.p99_ms),
            histogram: Some(histogram(n * share / of, o.p50_ms, o.p99_ms)),
        })
        .filter(|x| x.count > 0)
        .collect();
    let count = outcomes.iter().map(|x| x.count).sum();
    OpStats {
        op: o.name.into(),
        count,
        rate: count as f64,
        latency: latency(o.p50_ms, o.p99_ms),
        outcomes,
    }
}

fn cpu(cores: f64, burst: f64, quota: Option<f64>, throttled: u64, memory_mib: u64) -> CpuCell {
    let throttle = Throttling::Measured {
        nr_periods: 10,
        nr_throttled: throttled,
        throttled_ns: throttled * 20_000_000,
        throttled_share: throttled as f64 / 10.0,
        quota_cores: quota,
        quota_us: quota.map(|q| (q * 100_000.0) as u64),
        period_us: 100_000,
    };
    CpuCell::Measured(Box::new(CpuInterval {
        at_ns: 0,
        interval_ns: S,
        polls: 10,
        usage_ns: (cores * 1e9) as u64,
        cpu_cores: cores,
        user_cores: cores * 0.7,
        system_cores: cores * 0.3,
        burst_cores: burst,
        burst_window_ns: 100_000_000,
        burst_at_ns: 0,
        sustained_cores: cores * 0.8,
        sustained_window_ns: 30 * S,
        throttle,
        memory: Memory::Measured {
            current_bytes: memory_mib << 20,
            peak_bytes: quota.map(|_| (memory_mib + 4) << 20),
            // Usage less the inactive page cache, as docker stats shows it.
            working_set_bytes: Some(memory_mib.saturating_sub(6) << 20),
        },
    }))
}

fn counts(pairs: &[(Counter, u64)]) -> CountMap {
    let mut c = [0u64; N_COUNTERS];
    for (k, v) in pairs {
        c[*k as usize] = *v;
    }
    CountMap(c)
}

/// `n` values, nine in ten in bucket `at`, the rest three buckets (8×) higher.
fn buckets(at: usize, n: u64) -> Log2Hist {
    let mut b = Log2Hist::default();
    b.0[at] = n * 9 / 10;
    b.0[at + 3] = n - n * 9 / 10;
    b
}

fn hop(
    from: &str,
    to: &str,
    owner: Option<&str>,
    connects: u64,
    gauges: PairGauges,
) -> PairInterval {
    let (latency, lifetime) = (buckets(6, connects), buckets(4, connects));
    PairInterval {
        container: from.into(),
        remote: to.parse().unwrap(),
        remote_container: owner.map(String::from),
        connects,
        established: connects,
        time_wait_entries: connects * 9 / 10,
        closed: connects,
        connect_latency_us: Log2Summary::of(&latency),
        lifetime_ms: Log2Summary::of(&lifetime),
        connect_latency_buckets: latency,
        lifetime_buckets: lifetime,
        gauges: Some(gauges),
        waits: Default::default(),
    }
}

fn gauges(established: u64, time_wait: u64) -> PairGauges {
    PairGauges {
        established,
        time_wait,
        time_wait_baseline: 0,
        ports_in_use: established + time_wait,
        headroom: 28_232 - established - time_wait,
        srtt_p50_us: (established > 0).then_some(48),
        srtt_max_us: (established > 0).then_some(160),
        // Three in four established sockets with an srtt ≤ 64 µs, the rest ≤ 256 µs.
        srtt_log2: {
            let mut h = Log2Hist::default();
            h.0[5] = established - established / 4;
            h.0[7] = established / 4;
            h
        },
    }
}

/// One probe interval, `t` seconds into the run, in phase `phase` (0-based, None after the
/// plan).
fn probe(t: u64, phase: Option<usize>, fixed: bool) -> ProbeInterval {
    let load = match phase {
        Some(1) => 1.0,
        Some(2) | Some(3) => 3.0,
        _ => 0.1,
    };
    let churn = if fixed { 2 } else { (120.0 * load) as u64 };
    let backend = if fixed {
        "198.18.0.10:8082"
    } else {
        "198.18.0.6:8082"
    };
    // Throttled in bursts in step 2 only, until the fix.
    let throttled = if fixed || phase != Some(2) { 0 } else { 2 };
    // The driver's players, each on its own connection.
    let players = match phase {
        Some(1) => 10,
        Some(2) => 40,
        Some(3) => 8,
        _ => 2,
    };
    let gateway = ContainerInterval {
        container: "gateway".into(),
        counts: counts(&[
            (Counter::Connects, churn),
            (Counter::Accepts, 10),
            (Counter::TimeWaitEntries, churn * 9 / 10),
            (Counter::ConnectAddrNotAvail, u64::from(t == 8 && !fixed)),
            (Counter::Retransmits, 1),
        ]),
        cpu: cpu(
            0.3 * load,
            (0.33 * load).min(if fixed { 0.5 } else { 0.98 }),
            Some(1.0),
            throttled,
            48 + 4 * load as u64,
        ),
        sockets: SocketCell::Measured {
            established: 10 * load as u64 + 2,
            syn_sent: 0,
            time_wait: if fixed { 3 } else { churn * 50 },
            time_wait_baseline: 0,
            timewait_sockets: if fixed { 3 } else { churn * 51 },
            min_headroom: Some(28_232 - if fixed { 5 } else { churn * 50 }),
            port_range: 28_232,
            listen_overflows: u64::from(t == 7 && !fixed),
            listen_drops: 0,
            inbound: Vec::new(),
        },
        started_ns: None,
        ended_ns: None,
        waits: gateway_waits(load, t, fixed),
    };
    let backend_row = ContainerInterval {
        container: "backend".into(),
        counts: counts(&[(Counter::Accepts, churn), (Counter::Connects, 0)]),
        cpu: cpu(0.2 * load, 0.25 * load, None, 0, 30),
        sockets: SocketCell::Unavailable {
            reason: "no process in the container to reach its network namespace".into(),
        },
        started_ns: None,
        ended_ns: None,
        waits: backend_waits(load),
    };
    let host = ContainerInterval {
        container: "host".into(),
        counts: counts(&[(Counter::Connects, 10), (Counter::ResetsSent, 1)]),
        cpu: CpuCell::Unavailable {
            reason: "no cgroupfs reading in this interval".into(),
        },
        sockets: SocketCell::Measured {
            established: 10,
            syn_sent: 1,
            time_wait: 0,
            time_wait_baseline: 0,
            timewait_sockets: 0,
            min_headroom: Some(28_222),
            port_range: 28_232,
            listen_overflows: 0,
            listen_drops: 0,
            inbound: Vec::new(),
        },
        started_ns: None,
        ended_ns: None,
        waits: Default::default(),
    };
    let mut pairs = vec![
        hop(
            "host",
            "127.0.0.1:8080",
            Some("gateway"),
            10,
            gauges(players, 0),
        ),
        hop(
            "gateway",
            backend,
            Some("backend"),
            churn,
            gauges(2, if fixed { 0 } else { churn * 50 }),
        ),
        // The backend's database pool: 25 connections from the first step on.
        hop(
            "backend",
            "198.18.0.7:5432",
            Some("postgres"),
            0,
            gauges(25, 0),
        ),
    ];
    // Loss toward the backend until the fix: a SYN retried in step 2, data retransmits.
    if !fixed && phase.is_some() {
        pairs[1].waits.retrans_segs = 2 + u64::from(t == 7);
        pairs[1].waits.syn_retrans = u64::from(t == 7);
    }
    if t == 3 {
        // Another local process's socket: gauges only, not on the request path.
        pairs.push(hop("host", "127.0.0.1:38495", None, 0, gauges(1, 0)));
    }
    ProbeInterval {
        rolled_up: None,
        at_ns: MONO0 + t * S - S / 2,
        interval_ns: S,
        containers: vec![gateway, backend_row, host],
        pairs,
        lost: u64::from(t == 5),
        services: Vec::new(),
    }
}

/// The gateway's waits: run-queue delay growing with the load (less after the fix), PSI,
/// no OOM kill, its listener dropping a SYN at t = 7 until the fix, conntrack.
fn gateway_waits(load: f64, t: u64, fixed: bool) -> ContainerWaits {
    let mut h = Log2Hist::default();
    let waits = (200.0 * load) as u64;
    for k in 0..waits {
        // Mostly short waits; one in 50 of 2–4 ms (4 ms without the fix).
        h.record(if k % 50 == 0 {
            if fixed { 2_500 } else { 3_500 }
        } else {
            60
        });
    }
    let long = waits.div_ceil(50);
    let total_us: u64 = (waits - long) * 60 + long * if fixed { 2_500 } else { 3_500 };
    ContainerWaits {
        runq: RunqCell::of(&RunqStats {
            count: h.count(),
            total_ns: total_us * 1_000,
            delay_us: h,
        }),
        windows: Vec::new(),
        psi: PsiCell::Measured {
            cpu: Some(Pressure {
                some_us: (4_000.0 * load) as u64,
                full_us: None,
            }),
            memory: Some(Pressure {
                some_us: 0,
                full_us: Some(0),
            }),
            io: Some(Pressure {
                some_us: 120,
                full_us: Some(40),
            }),
        },
        oom: OomCell::Measured { oom_kills: 0 },
        listeners: ListenerCell::Measured {
            ports: vec![ListenerWaits {
                local_port: 8080,
                sockets: 1,
                drops: u64::from(t == 7 && !fixed),
                accept_queue: if t == 7 && !fixed { 4 } else { 0 },
                backlog: 4,
            }],
        },
        conntrack: ConntrackCell::Measured {
            entries: 180 + (40.0 * load) as u64,
            max: 262_144,
            drop: Some(0),
            early_drop: Some(0),
            insert_failed: Some(0),
        },
    }
}

/// The backend's waits: run-queue delay only; the rest unreadable, each for its reason.
fn backend_waits(load: f64) -> ContainerWaits {
    let mut h = Log2Hist::default();
    let waits = (100.0 * load) as u64;
    for _ in 0..waits {
        h.record(30);
    }
    ContainerWaits {
        runq: RunqCell::of(&RunqStats {
            count: waits,
            total_ns: waits * 30_000,
            delay_us: h,
        }),
        windows: Vec::new(),
        psi: PsiCell::Unavailable {
            reason: "the kernel was booted with psi=0".into(),
        },
        oom: OomCell::Measured { oom_kills: 0 },
        listeners: ListenerCell::Unavailable {
            reason: "no process in the container to reach its network namespace".into(),
        },
        conntrack: ConntrackCell::Unavailable {
            reason: "no process in the container to reach its network namespace".into(),
        },
    }
}

/// The fixture run: `fixed` is the second pass, after the seeds' fix.
pub(crate) fn fixture(fixed: bool) -> RunData {
    let plan = phases(fixed);
    let (mut reports, mut driver, mut start) = (Vec::new(), Vec::new(), 0u64);
    for (k, p) in plan.iter().enumerate() {
        let ops: Vec<OpStats> = p.ops.iter().map(|o| op_stats(o, 1, 1)).collect();
        reports.push(PhaseResult {
            phase: p.name.into(),
            kind: p.kind,
            open: p.open.clone(),
            index: Some(k),
            players: p.players,
            start_ms: start * 1000,
            duration_ms: p.seconds * 1000,
            ops,
            connects: p.players as u64,
            reconnects: 0,
            connect_errors: 0,
            play: p.play.clone(),
        });
        for i in 0..p.seconds {
            let t = start + i + 1;
            let ops = p
                .ops
                .iter()
                .map(|o| {
                    let s = op_stats(o, 1, p.seconds);
                    // The first second of the first step is the slowest (a cold pool).
                    let warm = if t == 2 { 3.0 } else { 1.0 };
                    IntervalOp {
                        statuses: Default::default(),
                        slowest: Vec::new(),
                        op: s.op,
                        count: s.count,
                        rate: s.rate,
                        latency: latency(o.p50_ms * warm, o.p99_ms * warm),
                        histogram: None,
                        outcomes: s
                            .outcomes
                            .iter()
                            .map(|x| (x.outcome.clone(), x.count))
                            .collect(),
                    }
                })
                .collect();
            let mut play = PlayStats::default();
            for s in &p.play.streams {
                let mut s = s.clone();
                s.events /= p.seconds;
                play.streams.push(s);
            }
            let open = p.open.as_ref();
            driver.push(DriverInterval {
                rolled_up: None,
                index: t - 1,
                end_ms: t * 1000,
                duration_ms: 1000,
                phase_index: Some(k),
                phase: Some(p.name.into()),
                late_starts: open.map_or(0, |o| o.late_starts / p.seconds),
                dropped_starts: open.map_or(0, |o| o.dropped_starts / p.seconds),
                in_flight: open.map_or(0, |o| o.peak_in_flight),
                players: p.players,
                hammer_workers: 0,
                ops,
                connects: if i == 0 { p.players as u64 } else { 0 },
                reconnects: 0,
                connect_errors: 0,
                play,
                driver: DriverHealth {
                    cpu_percent: 35.0,
                    cores: 2,
                    rss_bytes: 64 << 20,
                    lag_p99_us: 300,
                    lag_max_us: 800,
                    saturated: t == 8 && !fixed,
                },
                clock_start_ns: None,
            });
        }
        start += p.seconds;
    }
    let phase_at = |t: u64| {
        let mut end = 0;
        plan.iter().position(|p| {
            end += p.seconds;
            t <= end
        })
    };
    let mut probes: Vec<ProbeInterval> =
        (1..=start).map(|t| probe(t, phase_at(t), fixed)).collect();
    // One interval after the plan: the clean-up, not the load.
    probes.push(probe_after(start + 1, fixed));
    let requests = driver.iter().flat_map(|i| &i.ops).map(|o| o.count).sum();
    let final_report = RunResult {
        expected: Default::default(),
        scenario: "demo.toml".into(),
        target: "127.0.0.1:8080".into(),
        transport: "h2c".into(),
        connections: "per_player".into(),
        started_unix_ms: 1_764_000_000_000,
        duration_ms: start * 1000,
        stopped_early: false,
        requests,
        connects: 52,
        reconnects: 0,
        connect_errors: 0,
        connects_held: 0,
        connect_backoff_ms: 0,
        saturated_intervals: u64::from(!fixed),
        phases: reports.clone(),
        intervals: driver.clone(),
        play: PlayStats::default(),
    };
    let ms = |s: f64| (s * 1e3) as u64;
    let slo = |op: &str, metric, limit: f64, text: &str| Slo {
        op: op.into(),
        metric,
        limit,
        text: text.into(),
    };
    RunData {
        meta: RunMeta {
            id: if fixed { 13 } else { 12 },
            name: if fixed { "pool-512" } else { "pool-2" }.into(),
            scenario: "demo.toml".into(),
            started_unix_ms: 1_764_000_000_000,
            mono_start_ns: MONO0 as i64,
            finished_unix_ms: Some(1_764_000_000_000 + ms(start as f64 + 1.0) as i64),
            status: "finished".into(),
            shards: Vec::new(),
        },
        phases: reports,
        driver,
        probe: probes,
        probe_missing: None,
        final_report: Some(final_report),
        expected: Default::default(),
        slo: vec![
            slo("game.state", SloMetric::P99, 100_000.0, "p99 < 100ms"),
            slo("game.move", SloMetric::P99, 100_000.0, "p99 < 100ms"),
            slo("game.state", SloMetric::Errors, 0.01, "errors < 1%"),
        ],
        seeded: Some(SeedRecord {
            id: 3,
            accounts: 40,
            guests: 10,
            tables: vec![
                TableCount {
                    table: "accounts".into(),
                    rows: 50,
                },
                TableCount {
                    table: "sessions".into(),
                    rows: 50,
                },
            ],
            seconds: 0.25,
        }),
        seed_cleanup: Some(if fixed {
            CleanupRecord::Kept
        } else {
            CleanupRecord::Removed {
                tables: vec![
                    TableCount {
                        table: "sessions".into(),
                        rows: 50,
                    },
                    TableCount {
                        table: "accounts".into(),
                        rows: 50,
                    },
                ],
                gone: 0,
                seconds: 0.05,
            }
        }),
    }
}

/// The interval after the plan: the gateway's connections winding down.
fn probe_after(t: u64, fixed: bool) -> ProbeInterval {
    let mut iv = probe(t, None, fixed);
    iv.pairs.truncate(2);
    iv
}

/// The fixture's report (its ports come from the recorded intervals, not from this host).
fn report(fixed: bool) -> Report {
    Report::build(&fixture(fixed))
}

#[test]
fn snapshot_the_run_report_in_markdown() {
    let r = report(false);
    let kinds: Vec<&str> = r.findings.iter().map(|f| f.kind.as_str()).collect();
    for kind in [
        "churn_cliff",
        "throttling_bursts",
        "driver_saturated",
        "slo_breach_without_errors",
        "stream_storm",
    ] {
        assert!(
            kinds.contains(&kind),
            "the fixture reaches {kind}: {kinds:?}"
        );
    }
    insta::assert_snapshot!("run_markdown", crate::sections::markdown(&r));
}

/// A page with one tag per line, so a change reads as a diff of the lines it touches (the
/// renderers write no line breaks between tags; this adds them, nothing else).
fn lines(page: &str) -> String {
    page.replace("><", ">\n<")
}

#[test]
fn snapshot_the_run_report_in_html() {
    insta::assert_snapshot!("run_html", lines(&crate::sections::html(&report(false))));
}

#[test]
fn snapshot_the_comparison_in_markdown_html_and_its_table() {
    let c = compare::compare(&report(false), &report(true));
    insta::assert_snapshot!("compare_markdown", compare::markdown(&c));
    insta::assert_snapshot!("compare_table", compare::table(&c));
    insta::assert_snapshot!("compare_html", lines(&compare::html(&c)));
}

/// The figures of a page, one string each.
fn figures(page: &str) -> Vec<&str> {
    page.split("<figure>")
        .skip(1)
        .map(|f| f.split("</figure>").next().unwrap())
        .collect()
}

fn figure<'a>(page: &'a str, caption: &str) -> &'a str {
    figures(page)
        .into_iter()
        .find(|f| f.starts_with(&format!("<figcaption>{caption}")))
        .unwrap_or_else(|| panic!("no chart {caption:?} in the page"))
}

#[test]
fn the_run_reports_charts_show_quotas_the_port_cliff_and_phases_at_their_start() {
    use crate::chart::tests::{attrs, texts};
    let r = report(false);
    let page = crate::sections::html(&r);
    for f in figures(&page) {
        // Every legend entry of a line wears its line's colour.
        let lines = attrs(f, "line x1", "stroke");
        let legends = attrs(f, "text x", "fill");
        assert_eq!(lines, legends, "{f}");
        // Nice y ticks: evenly spaced 1-2-5 steps from 0.
        let ys: Vec<f64> = texts(f, "tick")
            .iter()
            .filter(|t| !t.ends_with(" s"))
            .map(|t| t.parse().unwrap())
            .collect();
        if ys.len() > 1 {
            let step = ys[1] - ys[0];
            let mag = 10f64.powf(step.log10().floor());
            assert!(
                [1.0, 2.0, 5.0, 10.0]
                    .iter()
                    .any(|n| (step / mag - n).abs() < 1e-6),
                "{ys:?}"
            );
            assert_eq!(ys[0], 0.0);
        }
        assert!(!f.contains("<script") && !f.contains("http"));
    }
    // The CPU chart draws the gateway's 1-core quota dashed in the gateway's colour.
    let cpu = figure(&page, "CPU, by container");
    let gateway = cpu
        .split("<polyline")
        .find(|p| p.contains("stroke-dasharray"))
        .expect("a dashed quota line");
    assert!(
        texts(cpu, "legend").contains(&"gateway quota".to_owned()),
        "{cpu}"
    );
    let colour = attrs(cpu, "polyline", "stroke")[0].clone();
    assert!(
        gateway.contains(&colour),
        "the quota wears its container's colour"
    );
    // The TIME_WAIT gauge against the ports: the cliff is a dashed line.
    let tw = figure(&page, "TIME_WAIT sockets of gateway");
    assert!(texts(tw, "legend").contains(&"ephemeral ports (the cliff)".to_owned()));
    assert!(tw.contains("stroke-dasharray"));
    // Phase marks carry the phases' names, at the start of their first interval.
    let marks = crate::sections::phase_marks(&r.timeline);
    assert_eq!(
        texts(figure(&page, "Requests per second"), "mark"),
        marks.iter().map(|m| m.1.clone()).collect::<Vec<_>>()
    );
    for (x, name) in &marks {
        let first = r
            .timeline
            .iter()
            .find(|p| p.phase.as_deref() == Some(name.as_str()))
            .unwrap();
        assert_eq!(*x, first.start_s, "{name}");
    }
    // The driver's saturated intervals are shaded where the fixture saturates it.
    assert!(
        r.timeline.iter().any(|p| p.driver.saturated.is_some())
            == page.contains("class=band><title>")
    );
}

#[test]
fn the_comparison_overlays_both_runs_on_the_same_axes() {
    use crate::chart::tests::{attrs, texts};
    let c = compare::compare(&report(false), &report(true));
    let page = compare::html(&c);
    let rps = figure(&page, "Requests per second");
    let legend = texts(rps, "legend");
    assert!(legend.iter().any(|l| l.ends_with("(run 12)")), "{legend:?}");
    assert!(legend.iter().any(|l| l.ends_with("(run 13)")), "{legend:?}");
    // The run before is dashed and lighter; each op keeps its colour in both runs.
    let before: Vec<&str> = rps
        .split("<polyline")
        .skip(1)
        .filter(|p| p.contains("stroke-opacity"))
        .collect();
    assert!(!before.is_empty());
    let names = texts(rps, "legend");
    let fills = attrs(rps, "text x", "fill");
    assert_eq!(names.len(), fills.len());
    for (name, fill) in names.iter().zip(&fills) {
        let Some(op) = name.strip_suffix(" (run 12)") else {
            continue;
        };
        let after = names.iter().position(|n| n == &format!("{op} (run 13)"));
        if let Some(i) = after {
            assert_eq!(&fills[i], fill, "{op} in both runs");
        }
    }
}
