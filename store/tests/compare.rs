//! The store and the report together: two runs written the way `herd run` writes them,
//! read back and compared by id.

use std::collections::BTreeMap;

/// Two runs written through the store the way `herd run` writes them, compared by id.
#[tokio::test]
async fn write_compare_reads_two_stored_runs_and_writes_both_pages() {
    use herd_model::{
        ContainerInterval, CountMap, Counter, CpuCell, DriverHealth, DriverInterval, IntervalOp,
        Latency, Log2Hist, Log2Summary, OpStats, OutcomeStats, PairGauges, PairInterval, PhaseKind,
        PhaseResult, ProbeInterval, RunResult, SocketCell,
    };
    use herd_report::compare::{runs, write_comparison};
    use herd_store::{Source, Store, default_url};

    let latency = |p99_us: u64| Latency {
        p50_us: p99_us / 4,
        p90_us: p99_us / 2,
        p99_us,
        p999_us: p99_us,
        max_us: p99_us,
        mean_us: p99_us as f64 / 3.0,
    };
    // One 2 s step of 100 game.state calls/s; the gateway opens `per_s` connections/s to
    // the backend and holds `tw` sockets in TIME_WAIT.
    let record = |store: Store, name: &'static str, per_s: u64, tw: u64, p99_us: u64| async move {
        let mono0 = 1_000_000_000u64;
        let run = store.begin(name, "demo.toml", mono0).await.unwrap();
        let step = PhaseResult {
            phase: "step 1".into(),
            kind: PhaseKind::Step,
            open: None,
            index: Some(0),
            players: 10,
            start_ms: 0,
            duration_ms: 2000,
            ops: vec![OpStats {
                op: "game.state".into(),
                count: 200,
                rate: 100.0,
                latency: latency(p99_us),
                outcomes: vec![OutcomeStats {
                    histogram: None,
                    outcome: "ok".into(),
                    count: 200,
                    latency: latency(p99_us),
                }],
            }],
            connects: 10,
            reconnects: 0,
            connect_errors: 0,
            play: Default::default(),
        };
        let mut intervals = Vec::new();
        for i in 1..=2u64 {
            let iv = DriverInterval {
                rolled_up: None,
                index: i - 1,
                end_ms: i * 1000,
                duration_ms: 1000,
                phase_index: Some(0),
                phase: Some("step 1".into()),
                late_starts: 0,
                dropped_starts: 0,
                in_flight: 0,
                players: 10,
                hammer_workers: 0,
                ops: vec![IntervalOp {
                    statuses: Default::default(),
                    slowest: Vec::new(),
                    histogram: None,
                    op: "game.state".into(),
                    count: 100,
                    rate: 100.0,
                    latency: latency(p99_us),
                    outcomes: BTreeMap::from([("ok".into(), 100)]),
                }],
                connects: 0,
                reconnects: 0,
                connect_errors: 0,
                play: Default::default(),
                driver: DriverHealth::default(),
                clock_start_ns: None,
            };
            store.put(run.id, Source::Driver, i, i, &iv).await.unwrap();
            intervals.push(iv);
            let mut counts = [0u64; herd_model::N_COUNTERS];
            counts[Counter::Connects as usize] = per_s;
            let hop = |container: &str, remote: &str, to: &str, n: u64, tw: u64| PairInterval {
                container: container.into(),
                remote: remote.parse().unwrap(),
                remote_container: Some(to.into()),
                connects: n,
                established: n,
                time_wait_entries: n,
                closed: n,
                connect_latency_us: Log2Summary::default(),
                lifetime_ms: Log2Summary::default(),
                connect_latency_buckets: Log2Hist::default(),
                lifetime_buckets: Log2Hist::default(),
                gauges: Some(PairGauges {
                    established: 2,
                    time_wait: tw,
                    time_wait_baseline: 0,
                    ports_in_use: tw + 2,
                    headroom: 28_232 - tw - 2,
                    srtt_p50_us: Some(50),
                    srtt_max_us: Some(90),
                    srtt_log2: {
                        let mut h = Log2Hist::default();
                        h.0[5] = 2; // [32, 64) µs
                        h
                    },
                }),
                waits: Default::default(),
            };
            let probe = ProbeInterval {
                rolled_up: None,
                at_ns: mono0 + i * 1_000_000_000,
                interval_ns: 1_000_000_000,
                containers: vec![ContainerInterval {
                    container: "gateway".into(),
                    counts: CountMap(counts),
                    cpu: CpuCell::Unavailable {
                        reason: "no cgroup".into(),
                    },
                    sockets: SocketCell::Unavailable {
                        reason: "no netns".into(),
                    },
                    started_ns: None,
                    ended_ns: None,
                    waits: Default::default(),
                }],
                pairs: vec![
                    hop("host", "127.0.0.1:8080", "gateway", 1, 0),
                    hop("gateway", "198.18.0.6:8082", "backend", per_s, tw),
                ],
                lost: 0,
                services: Vec::new(),
            };
            store
                .put(run.id, Source::Probe, i, i, &probe)
                .await
                .unwrap();
        }
        store.put(run.id, Source::Phase, 0, 0, &step).await.unwrap();
        let report = RunResult {
            expected: Default::default(),
            scenario: "demo.toml".into(),
            target: "127.0.0.1:8080".into(),
            transport: "h2c".into(),
            connections: "per_player".into(),
            started_unix_ms: 0,
            duration_ms: 2000,
            stopped_early: false,
            requests: 200,
            connects: 10,
            reconnects: 0,
            connect_errors: 0,
            connects_held: 0,
            connect_backoff_ms: 0,
            saturated_intervals: 0,
            phases: vec![step],
            intervals,
            play: Default::default(),
        };
        store
            .put(run.id, Source::Report, 0, 0, &report)
            .await
            .unwrap();
        store.finish(run.id, "finished").await.unwrap();
        (store, run.id)
    };

    // A directory of its own: a store left by an earlier run would shift the run ids.
    let dir = herd_testkit::TempDir::new("compare");
    let store = Store::open(&default_url(&dir)).await.unwrap();
    let (store, a) = record(store, "pool-2", 100, 150, 500_000).await;
    let (store, b) = record(store, "pool-512", 1, 0, 200_000).await;
    let (before, after) = store.load_pair(a, b).await.unwrap();
    let files = write_comparison(&runs(&before, &after), &dir).unwrap();
    assert_eq!(
        files,
        vec![
            dir.join(format!("compare-{a}-{b}.md")),
            dir.join(format!("compare-{a}-{b}.html")),
            dir.join(format!("compare-{a}-{b}.json"))
        ]
    );
    let md = std::fs::read_to_string(&files[0]).unwrap();
    for needle in [
        // 200 connections for 200 requests → churn 1; 2 for 200 after the fix.
        "| pair gateway → backend | churn ratio (new connections per request) | 1.00 | 0.010 | -0.99 | ÷100 |",
        "| pair gateway → backend | new connections/s | 100.0 | 1.0 | -99.0 | ÷100 |",
        "| pair gateway → backend | TIME_WAIT peak | 150 | 0 | -150 | → 0 |",
        "| container gateway | CPU burst peak (busiest 100 ms) | n/a (no cgroup) | n/a (no cgroup) | n/a (neither run has a value) |",
        "| op game.state | p99 | 500 ms | 200 ms | -300 ms | ÷2.50 |",
        "| run | requests | 200 | 200 | 0 | ×1.00 |",
    ] {
        assert!(md.contains(needle), "missing {needle:?} in:\n{md}");
    }
    assert!(
        md.contains(&format!("### run {a} (before)\n\n- **churn_cliff** — ")),
        "{md}"
    );
    let page = std::fs::read_to_string(&files[1]).unwrap();
    assert!(page.starts_with("<!doctype html>") && page.contains("gateway → backend"));
    // An unknown run is named, with where to look.
    let err = store.load_pair(a, 99).await.unwrap_err();
    assert!(format!("{err:#}").contains("run 99 is not in"), "{err:#}");
    // The store closes before its directory goes.
    drop(store);
}
