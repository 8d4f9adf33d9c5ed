//! Roll-ups end to end (shared by the SQLite test, store/tests/rollup.rs, and the PostgreSQL
//! one, integration-test/tests/store_postgres_rollup.rs): three minutes of 100 ms intervals (driver and probe, two phases)
//! written through the run writer into a store rolling up on a scaled-down policy (30 s at
//! full resolution, then 1 s rows, 10 s rows after 90 s), read back and reported beside the
//! same rows without roll-ups. The rolled-up run has a fifth of the rows and the same
//! numbers: every whole-run and per-phase percentile from the exactly merged histograms,
//! every count, every container and pair row.

use std::collections::BTreeMap;

use herd_model::{
    ContainerInterval, CountMap, Counter, CpuCell, CpuInterval, DriverEvent, DriverHealth,
    DriverInterval, IntervalOp, Log2Hist, Log2Summary, Memory, N_COUNTERS, OpStats, Outcome,
    OutcomeStats, PairGauges, PairInterval, PhaseKind, PhaseResult, ProbeInterval, RunData,
    RunResult, SlowRequest, SocketCell, Throttling,
    histogram::{LatencyHistogram, latency, new_histogram, record},
    waits::{
        ConntrackCell, ContainerWaits, ListenerCell, ListenerWaits, OomCell, PairWaits, Pressure,
        PsiCell, RetransWindowCell, RunqCell, WaitWindow,
    },
};
use herd_report::Report;
use herd_store::{
    Recorder, Store, Writer,
    rollup::{Policy, Tier},
};

const MONO0: u64 = 1_000_000_000_000;
const MS: u64 = 1_000_000;
const INTERVALS: u64 = 1_800; // 3 minutes at 100 ms
const PHASE_END_MS: [u64; 2] = [95_000, 180_000];
const OPS: [&str; 4] = ["a", "b", "c", "d"];

/// A deterministic stream of latencies (µs), spread over four decades.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn latency_us(&mut self) -> u64 {
        let decade = [100, 1_000, 10_000][(self.next() % 3) as usize];
        decade + self.next() % (decade * 9)
    }
}

fn phase_of(end_ms: u64) -> usize {
    usize::from(end_ms > PHASE_END_MS[0])
}

fn outcome_of(op: &str) -> (Outcome, u16) {
    if op == "d" {
        ("http_4xx".parse().unwrap(), 404)
    } else {
        (Outcome::Ok, 200)
    }
}

/// The run's events in order: its intervals, each phase's totals at its end, the result.
fn driver_events() -> Vec<DriverEvent> {
    let mut rng = Lcg(7);
    // Interval histograms drawn from a pool (encoding is what costs): 61 of 3 to 13 samples.
    let pool: Vec<(Vec<u64>, herd_model::Latency, LatencyHistogram)> = (0..61)
        .map(|j| {
            let samples: Vec<u64> = (0..3 + j % 11).map(|_| rng.latency_us()).collect();
            let mut h = new_histogram();
            samples.iter().for_each(|us| record(&mut h, *us));
            (samples, latency(&h), LatencyHistogram::encode(&h))
        })
        .collect();
    let mut events = Vec::new();
    // Per phase × op: the histogram of every sample, for the phase totals.
    let mut phase_h: Vec<BTreeMap<&str, hdrhistogram::Histogram<u64>>> = vec![
        OPS.iter().map(|o| (*o, new_histogram())).collect(),
        OPS.iter().map(|o| (*o, new_histogram())).collect(),
    ];
    for i in 0..INTERVALS {
        let end_ms = (i + 1) * 100;
        let phase = phase_of(end_ms);
        let ops = OPS
            .iter()
            .enumerate()
            .map(|(k, op)| {
                let (samples, lat, encoded) = &pool[((i * 7 + k as u64 * 13) % 61) as usize];
                let into = phase_h[phase].get_mut(op).unwrap();
                samples.iter().for_each(|us| record(into, *us));
                let n = samples.len() as u64;
                let (outcome, status) = outcome_of(op);
                IntervalOp {
                    op: (*op).into(),
                    count: n,
                    rate: n as f64 * 10.0,
                    latency: *lat,
                    histogram: Some(encoded.clone()),
                    outcomes: [(outcome, n)].into(),
                    statuses: [(status, n)].into(),
                    // The interval's slowest (all of them: fewer than the driver keeps),
                    // started in the interval, slowest first.
                    slowest: {
                        let mut v: Vec<SlowRequest> = samples
                            .iter()
                            .enumerate()
                            .map(|(j, us)| SlowRequest {
                                start_us: i * 100_000 + j as u64 * 1_000,
                                latency_us: *us,
                            })
                            .collect();
                        v.sort_by_key(|r| std::cmp::Reverse(r.latency_us));
                        v
                    },
                }
            })
            .collect();
        events.push(DriverEvent::Interval(DriverInterval {
            rolled_up: None,
            clock_start_ns: Some(MONO0),
            index: i,
            end_ms,
            duration_ms: 100,
            phase_index: Some(phase),
            phase: Some(format!("step {}", phase + 1)),
            late_starts: 0,
            dropped_starts: 0,
            in_flight: 0,
            players: 10 + (i % 13) as usize,
            hammer_workers: 0,
            ops,
            connects: i % 3,
            reconnects: i % 5 / 4,
            connect_errors: 0,
            play: Default::default(),
            driver: DriverHealth {
                cpu_percent: 20.0 + (i % 17) as f64,
                cores: 2,
                rss_bytes: 40 << 20,
                lag_p99_us: 900 + i % 300,
                lag_max_us: 2_000,
                saturated: i % 50 == 49,
            },
        }));
        if PHASE_END_MS.contains(&end_ms) {
            let start_ms = if phase == 0 { 0 } else { PHASE_END_MS[0] };
            events.push(DriverEvent::PhaseEnd(PhaseResult {
                phase: format!("step {}", phase + 1),
                kind: PhaseKind::Step,
                open: None,
                index: Some(phase),
                players: 22,
                start_ms,
                duration_ms: end_ms - start_ms,
                ops: OPS
                    .iter()
                    .map(|op| {
                        let h = &phase_h[phase][op];
                        OpStats {
                            op: (*op).into(),
                            count: h.len(),
                            rate: h.len() as f64 / 150.0,
                            latency: latency(h),
                            outcomes: vec![OutcomeStats {
                                outcome: outcome_of(op).0,
                                count: h.len(),
                                latency: latency(h),
                                histogram: Some(LatencyHistogram::encode(h)),
                            }],
                        }
                    })
                    .collect(),
                connects: 0,
                reconnects: 0,
                connect_errors: 0,
                play: Default::default(),
            }));
        }
    }
    events
}

/// A container's waits in interval `i`: run-queue delay every interval, PSI, an OOM kill
/// and listen drops now and then, conntrack climbing.
fn waits(i: u64, k: u64, at_ns: u64) -> ContainerWaits {
    let mut delay = Log2Hist::default();
    for j in 0..(1 + (i + k) % 4) {
        delay.record(5 + (i * 53 + j * 331 + k) % 20_000);
    }
    let total_ns = (0..delay.0.len()).map(|b| delay.0[b]).sum::<u64>() * 7_000 + i % 5;
    ContainerWaits {
        runq: RunqCell::Measured {
            count: (0..delay.0.len()).map(|b| delay.0[b]).sum(),
            total_ns,
            delay_us: Some(Log2Summary::of(&delay)),
            delay_buckets: Some(delay),
        },
        windows: vec![WaitWindow {
            start_ns: at_ns - 100 * MS,
            end_ns: at_ns,
            runq_ns: Some(total_ns),
            runq_count: 1,
            throttled_ns: Some(i % 4 / 3 * 5 * MS),
        }],
        psi: PsiCell::Measured {
            cpu: Some(Pressure {
                some_us: i % 50,
                full_us: Some(i % 10),
            }),
            memory: Some(Pressure {
                some_us: i % 3,
                full_us: Some(0),
            }),
            io: None,
        },
        oom: OomCell::Measured {
            oom_kills: u64::from(i % 500 == 499),
        },
        listeners: ListenerCell::Measured {
            ports: vec![ListenerWaits {
                local_port: 8080,
                sockets: 1,
                drops: i % 97 / 96,
                accept_queue: i % 5,
                backlog: 4,
            }],
        },
        conntrack: ConntrackCell::Measured {
            entries: 100 + i / 10 + k,
            max: 262_144,
            drop: Some(0),
            early_drop: Some(0),
            insert_failed: Some(i % 1000 / 999),
        },
    }
}

fn probe_interval(i: u64) -> ProbeInterval {
    // Sampled on the probe's own clock, 37 ms off the driver's.
    let at_ns = MONO0 + i * 100 * MS + 37 * MS;
    let container = |name: &str, k: u64| {
        let mut counts = [0u64; N_COUNTERS];
        counts[Counter::Connects as usize] = (i + k) % 3;
        counts[Counter::TimeWaitEntries as usize] = (i + k) % 2;
        counts[Counter::Retransmits as usize] = i % 7 / 6;
        let usage_ns = 20 * MS + (i * 13 + k) % 50 * MS;
        ContainerInterval {
            container: name.into(),
            counts: CountMap(counts),
            cpu: CpuCell::Measured(Box::new(CpuInterval {
                at_ns,
                interval_ns: 100 * MS,
                polls: 1,
                usage_ns,
                cpu_cores: usage_ns as f64 / (100 * MS) as f64,
                user_cores: 0.2,
                system_cores: 0.05,
                burst_cores: usage_ns as f64 / (100 * MS) as f64 + (i % 11) as f64 / 10.0,
                burst_window_ns: 100 * MS,
                burst_at_ns: at_ns,
                sustained_cores: 0.3 + (i % 101) as f64 / 1000.0,
                sustained_window_ns: 30_000 * MS,
                throttle: Throttling::Measured {
                    nr_periods: 1,
                    nr_throttled: i % 4 / 3,
                    throttled_ns: i % 4 / 3 * 5 * MS,
                    throttled_share: (i % 4 / 3) as f64,
                    quota_cores: Some(0.5),
                    quota_us: Some(50_000),
                    period_us: 100_000,
                },
                memory: Memory::Measured {
                    current_bytes: (100 << 20) + (i * 4099 + k) % 1000 * 4096,
                    peak_bytes: None,
                    working_set_bytes: Some((80 << 20) + (i * 131) % 997 * 4096),
                },
            })),
            sockets: SocketCell::Measured {
                established: 10 + (i * 31 + k) % 23,
                syn_sent: i % 2,
                time_wait: 40 + (i * 17 + k) % 37,
                time_wait_baseline: 40 - (i / 100).min(40),
                timewait_sockets: 45,
                min_headroom: Some(28_000 - (i * 7 + k) % 300),
                port_range: 28_232,
                listen_overflows: i % 97 / 96,
                listen_drops: i % 97 / 96,
                inbound: Vec::new(),
            },
            started_ns: None,
            ended_ns: None,
            waits: waits(i, k, at_ns),
        }
    };
    let mut connect = Log2Hist::default();
    let mut life = Log2Hist::default();
    for j in 0..(i % 3) {
        connect.record(50 + (i * 37 + j * 1009) % 5000);
        life.record(10 + (i * 7 + j) % 900);
    }
    let mut srtt = Log2Hist::default();
    srtt.record(100 + i % 400);
    ProbeInterval {
        rolled_up: None,
        at_ns,
        interval_ns: 100 * MS,
        containers: vec![container("host", 0), container("web", 1)],
        pairs: vec![PairInterval {
            container: "web".into(),
            remote: "127.0.0.1:8080".parse().unwrap(),
            remote_container: None,
            connects: i % 3,
            established: i % 3,
            time_wait_entries: i % 2,
            closed: i % 2,
            connect_latency_us: Log2Summary::of(&connect),
            lifetime_ms: Log2Summary::of(&life),
            connect_latency_buckets: connect,
            lifetime_buckets: life,
            gauges: Some(PairGauges {
                established: 5 + (i * 3) % 17,
                time_wait: 20 + (i * 5) % 29,
                time_wait_baseline: 3,
                ports_in_use: 30 + i % 9,
                headroom: 28_000 - (i * 11) % 500,
                srtt_p50_us: Some(100 + (i % 400) as u32),
                srtt_max_us: Some(100 + (i % 400) as u32),
                srtt_log2: srtt,
            }),
            waits: PairWaits {
                retrans_segs: i % 13 / 12 * 3,
                syn_retrans: i % 13 / 12,
                windows: (i % 13 == 12)
                    .then_some(RetransWindowCell {
                        start_ns: at_ns - 100 * MS,
                        end_ns: at_ns,
                        retrans_segs: 3,
                        syn_retrans: 1,
                    })
                    .into_iter()
                    .collect(),
            },
        }],
        lost: 0,
        services: Vec::new(),
    }
}

/// Records the run through the writer into the store at `url` with `policy`; returns it
/// read back.
async fn recorded(url: &str, policy: Policy, events: &[DriverEvent]) -> RunData {
    let name = "rolled";
    let t = std::time::Instant::now();
    let store = Store::open(url).await.unwrap();
    let meta = store.begin(name, "soak.toml", MONO0).await.unwrap();
    let mut rec = Recorder::new(&store, meta, Writer::Run { shard: None });
    rec.roll_up(policy);
    let mut probe_i = 0;
    for e in events.iter().cloned() {
        // The probe's intervals as they come, interleaved with the driver's.
        if let DriverEvent::Interval(iv) = &e {
            while probe_i < INTERVALS
                && MONO0 + probe_i * 100 * MS + 37 * MS <= MONO0 + iv.end_ms * MS
            {
                rec.probe_interval(&probe_interval(probe_i)).await.unwrap();
                probe_i += 1;
            }
        }
        rec.driver_event(e).await.unwrap();
    }
    let result = RunResult {
        scenario: "soak.toml".into(),
        target: "127.0.0.1:8080".into(),
        transport: "h1".into(),
        connections: "per_player".into(),
        started_unix_ms: 0,
        duration_ms: INTERVALS * 100,
        stopped_early: false,
        requests: 0,
        connects: 0,
        reconnects: 0,
        connect_errors: 0,
        connects_held: 0,
        connect_backoff_ms: 0,
        saturated_intervals: INTERVALS / 50,
        phases: Vec::new(),
        expected: [("d".to_owned(), vec!["http_4xx".parse().unwrap()])].into(),
        intervals: Vec::new(),
        play: Default::default(),
    };
    rec.driver_event(DriverEvent::Done(Box::new(result)))
        .await
        .unwrap();
    if let Some(rows) = rec.finish("finished").await {
        panic!(
            "{name}: the store did not take {} rows: {:?}",
            rows.rows.len(),
            rows.rows.first().map(|r| (&r.source, r.seq))
        );
    }
    eprintln!("{name}: recorded in {:.1?}", t.elapsed());
    let data = store.load_run(None).await.unwrap();
    store.close().await;
    data
}

type Merged = BTreeMap<(Option<usize>, String), hdrhistogram::Histogram<u64>>;

/// Each op's merged histogram over the whole run (phase None) and over each phase.
fn merged(d: &RunData) -> Merged {
    let mut out = Merged::new();
    for iv in &d.driver {
        for o in &iv.ops {
            let h = o.histogram.as_ref().unwrap().decode().unwrap();
            for key in [None, iv.phase_index] {
                out.entry((key, o.op.clone()))
                    .or_insert_with(new_histogram)
                    .add(&h)
                    .unwrap();
            }
        }
    }
    out
}

/// Records the run into the store at `url` on a scaled-down policy and checks it against the
/// same rows without roll-ups.
pub async fn recorded_and_checked(url: &str) {
    let s = 1_000_000_000;
    let scaled = Policy {
        tiers: vec![
            Tier {
                after_ns: 30 * s,
                every_ns: s,
            },
            Tier {
                after_ns: 90 * s,
                every_ns: 10 * s,
            },
        ],
    };
    let t = std::time::Instant::now();
    let events = driver_events();
    eprintln!("fixture in {:.1?}", t.elapsed());
    let rolled = recorded(url, scaled, &events).await;
    // The same run without roll-ups: its rows as they were recorded.
    let full = RunData {
        driver: events
            .iter()
            .filter_map(|e| match e {
                DriverEvent::Interval(iv) => Some(iv.clone()),
                _ => None,
            })
            .collect(),
        probe: (0..INTERVALS).map(probe_interval).collect(),
        ..rolled.clone()
    };
    let bytes = |d: &RunData| -> usize {
        d.driver
            .iter()
            .map(|i| serde_json::to_string(i).unwrap().len())
            .chain(
                d.probe
                    .iter()
                    .map(|i| serde_json::to_string(i).unwrap().len()),
            )
            .sum()
    };
    let (rolled_bytes, full_bytes) = (bytes(&rolled), bytes(&full));
    let t = std::time::Instant::now();

    // Every interval is there, once: the newest 30 s at 100 ms, then 1 s rows, then 10 s.
    assert_eq!(full.driver.len() as u64, INTERVALS);
    let stands_for = |ivs: &[DriverInterval]| {
        ivs.iter()
            .map(|i| herd_model::RolledUp::of_driver(i).intervals)
            .sum::<u64>()
    };
    assert_eq!(stands_for(&rolled.driver), INTERVALS);
    assert!(
        rolled.driver.len() < 400 && rolled.probe.len() < 420,
        "{} driver rows, {} probe rows",
        rolled.driver.len(),
        rolled.probe.len()
    );
    assert!(
        rolled
            .driver
            .iter()
            .rev()
            .take(290)
            .all(|i| i.rolled_up.is_none())
    );
    let tens = rolled
        .driver
        .iter()
        .filter(|i| i.duration_ms == 10_000)
        .count();
    assert!(tens >= 7, "{tens} 10 s rows");
    assert!(
        rolled
            .driver
            .windows(2)
            .all(|w| w[0].end_ms < w[1].end_ms && w[1].end_ms - w[1].duration_ms == w[0].end_ms),
        "the rolled-up timeline has no gap and no overlap"
    );
    assert!(
        rolled_bytes * 3 < full_bytes,
        "{rolled_bytes} B of rows rolled up, {full_bytes} B in full"
    );

    // The whole run's and each phase's histograms merge to exactly the same histogram.
    let (a, b) = (merged(&rolled), merged(&full));
    assert_eq!(a.len(), OPS.len() * 3);
    assert_eq!(a, b);
    for (key, h) in &a {
        assert_eq!(latency(h), latency(&b[key]), "{key:?}");
    }

    eprintln!("checks in {:.1?}", t.elapsed());
    let t = std::time::Instant::now();
    let (a, b) = (Report::build(&rolled), Report::build(&full));
    eprintln!("reports in {:.1?}", t.elapsed());
    let json = |v: &dyn erased::Json| v.json();
    assert_eq!(json(&a.ops), json(&b.ops));
    // The slow requests a rolled-up row keeps are the slowest of its stretch: at most
    // SLOWEST_PER_INTERVAL for several intervals, so the attribution may keep fewer of those
    // above the p99 (it says so), never other numbers.
    let totals = |r: &Report| {
        let mut v = json(&r.totals);
        let slow: Vec<serde_json::Value> = v
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .map(|t| {
                t.as_object_mut()
                    .unwrap()
                    .remove("slow")
                    .unwrap_or_default()
            })
            .collect();
        (v, slow)
    };
    let ((ta, sa), (tb, sb)) = (totals(&a), totals(&b));
    assert_eq!(ta, tb);
    for (x, y) in sa.iter().zip(&sb) {
        assert_eq!(x["over_us"], y["over_us"]);
        assert_eq!(x["above"], y["above"]);
        assert!(x["kept"].as_u64() <= y["kept"].as_u64(), "{x} {y}");
    }
    // Rates are over summed lengths: fewer rows sum with less rounding.
    // Chart points are per stored row (fewer once rolled up); every total is compared.
    let containers = |r: &Report| {
        let mut v = json(&r.containers);
        for c in v.as_array_mut().unwrap() {
            let w = c["waits"].as_object_mut().unwrap();
            assert!(
                !w.remove("runq_points")
                    .unwrap()
                    .as_array()
                    .unwrap()
                    .is_empty()
            );
            for r in w["retransmits"].as_array_mut().unwrap() {
                r.as_object_mut().unwrap().remove("points");
            }
        }
        v
    };
    close(&containers(&a), &containers(&b));
    assert_eq!(a.run.requests, b.run.requests);
    assert_eq!(a.run.saturated_intervals, b.run.saturated_intervals);
    assert_eq!(a.run.saturated_intervals, INTERVALS / 50);
    assert!((a.run.duration_s - b.run.duration_s).abs() < 1e-6);
    assert_eq!(json(&a.run.split), json(&b.run.split));
    let pairs = |r: &Report| {
        let mut v = serde_json::to_value(&r.pairs).unwrap();
        // The implied TIME_WAIT peak is the peak entry rate × 60 s, at the rows' resolution.
        for p in v.as_array_mut().unwrap() {
            p.as_object_mut().unwrap().remove("time_wait_implied_peak");
        }
        v
    };
    close(&pairs(&a), &pairs(&b));
    let sum = |d: &RunData, c: Counter| -> u64 {
        d.probe
            .iter()
            .flat_map(|p| &p.containers)
            .map(|x| x.counts.get(c))
            .sum()
    };
    for c in Counter::ALL {
        assert_eq!(sum(&rolled, c), sum(&full, c), "{}", c.name());
    }
    assert_eq!(waits_totals(&rolled), waits_totals(&full));

    // `herd compact`: the finished run rolled up whole to 10 s rows, the same numbers.
    let store = Store::open(url).await.unwrap();
    let done = store.compact(rolled.meta.id, 10 * s).await.unwrap();
    store.vacuum().await.unwrap();
    let compacted = store.load_run(Some(rolled.meta.id)).await.unwrap();
    store.close().await;
    assert!(done.written > 0 && done.read > done.written, "{done:?}");
    assert_eq!(stands_for(&compacted.driver), INTERVALS);
    // 10 s rows, but where a phase starts inside one (each part merged on its own).
    let short = compacted
        .driver
        .iter()
        .filter(|i| i.duration_ms < 10_000)
        .count();
    assert!(
        compacted.driver.len() <= (INTERVALS / 100) as usize + 4 && short <= 4,
        "{} driver rows, {short} shorter than 10 s",
        compacted.driver.len()
    );
    assert!(
        compacted.probe.len() < rolled.probe.len() / 3,
        "{} probe rows",
        compacted.probe.len()
    );
    assert_eq!(merged(&compacted), merged(&full));
    for c in Counter::ALL {
        assert_eq!(sum(&compacted, c), sum(&full, c), "{}", c.name());
    }
    assert_eq!(waits_totals(&compacted), waits_totals(&full));
    let c = Report::build(&compacted);
    assert_eq!(json(&c.ops), json(&b.ops));
}

/// Per container: run-queue waits (count, total, merged histogram), PSI and OOM sums,
/// listen drops, the conntrack peak, the windows' sums; per pair: retransmits and their
/// windows' sums.
fn waits_totals(d: &RunData) -> BTreeMap<String, Vec<u64>> {
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    let mut add = |key: String, vals: Vec<u64>, max_at: usize| {
        let acc = out.entry(key).or_insert_with(|| vec![0; vals.len()]);
        for (i, (a, v)) in acc.iter_mut().zip(vals).enumerate() {
            if i == max_at {
                *a = (*a).max(v);
            } else {
                *a += v;
            }
        }
    };
    for p in &d.probe {
        for c in &p.containers {
            let w = &c.waits;
            let RunqCell::Measured {
                count,
                total_ns,
                delay_buckets,
                ..
            } = &w.runq
            else {
                panic!("runq measured in every row");
            };
            let PsiCell::Measured { cpu, memory, .. } = &w.psi else {
                panic!("psi measured");
            };
            let OomCell::Measured { oom_kills } = &w.oom else {
                panic!("oom measured");
            };
            let ListenerCell::Measured { ports } = &w.listeners else {
                panic!("listeners measured");
            };
            let ConntrackCell::Measured {
                entries,
                insert_failed,
                ..
            } = &w.conntrack
            else {
                panic!("conntrack measured");
            };
            let mut v = vec![
                *entries,
                *count,
                *total_ns,
                cpu.unwrap().some_us,
                cpu.unwrap().full_us.unwrap(),
                memory.unwrap().some_us,
                *oom_kills,
                ports.iter().map(|p| p.drops).sum(),
                insert_failed.unwrap(),
                w.windows.iter().map(|w| w.runq_ns.unwrap()).sum(),
                w.windows.iter().map(|w| w.runq_count).sum(),
                w.windows.iter().map(|w| w.throttled_ns.unwrap()).sum(),
            ];
            v.extend(delay_buckets.as_ref().unwrap().0.iter().copied());
            add(c.container.clone(), v, 0);
        }
        for pr in &p.pairs {
            let w = &pr.waits;
            add(
                format!("{} → {}", pr.container, pr.remote),
                vec![
                    0,
                    w.retrans_segs,
                    w.syn_retrans,
                    w.windows.iter().map(|w| w.retrans_segs).sum(),
                    w.windows.iter().map(|w| w.syn_retrans).sum(),
                ],
                0,
            );
        }
    }
    assert!(out["web"][1] > 0 && out["web"][6] > 0 && out["web"][7] > 0);
    out
}

/// Equal JSON, numbers within 1e-9 of each other (relative).
fn close(a: &serde_json::Value, b: &serde_json::Value) {
    use serde_json::Value::*;
    match (a, b) {
        (Number(x), Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!((x - y).abs() <= 1e-9 * x.abs().max(y.abs()), "{x} vs {y}");
        }
        (Array(x), Array(y)) => {
            assert_eq!(x.len(), y.len());
            x.iter().zip(y).for_each(|(x, y)| close(x, y));
        }
        (Object(x), Object(y)) => {
            assert_eq!(x.keys().collect::<Vec<_>>(), y.keys().collect::<Vec<_>>());
            x.iter().for_each(|(k, v)| close(v, &y[k]));
        }
        _ => assert_eq!(a, b),
    }
}

/// `assert_eq!` on report sections through their JSON (they do not all derive PartialEq).
mod erased {
    pub trait Json {
        fn json(&self) -> serde_json::Value;
    }

    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> serde_json::Value {
            serde_json::to_value(self).unwrap()
        }
    }
}
