use std::collections::BTreeMap;

use herd_model::Counter;

use super::*;
use herd_model::{
    ContainerInterval, CountMap, CpuCell, DriverHealth, DriverInterval, IntervalOp, Latency,
    OpStats, OutcomeStats, PairInterval, ProbeInterval, PublishedPort, RunResult, Service,
    SocketCell,
};
use herd_model::{RunData, RunMeta};

fn latency(p99_us: u64) -> Latency {
    Latency {
        p50_us: p99_us / 4,
        p90_us: p99_us / 2,
        p99_us,
        p999_us: p99_us,
        max_us: p99_us,
        mean_us: p99_us as f64 / 3.0,
    }
}

/// A run with one step, two driver intervals and two probe intervals; the probe has no
/// CPU source and no netns for its one container.
pub(crate) fn data() -> RunData {
    let mono0 = 1_000_000_000u64;
    let op = |count| IntervalOp {
        statuses: Default::default(),
        slowest: Vec::new(),
        histogram: None,
        op: "game.state".into(),
        count,
        rate: count as f64,
        latency: latency(2_000),
        outcomes: BTreeMap::from([("ok".into(), count)]),
    };
    let driver = (1..=2)
        .map(|i| DriverInterval {
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
            ops: vec![op(100)],
            connects: 0,
            reconnects: 0,
            connect_errors: 0,
            play: Default::default(),
            driver: DriverHealth::default(),
            clock_start_ns: None,
        })
        .collect();
    let mut counts = [0u64; herd_model::N_COUNTERS];
    counts[Counter::Connects as usize] = 100;
    let probe = (1..=2u64)
        .map(|i| ProbeInterval {
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
            pairs: vec![],
            lost: 0,
            services: Vec::new(),
        })
        .collect();
    let step = herd_model::PhaseResult {
        phase: "step 1".into(),
        kind: herd_model::PhaseKind::Step,
        open: None,
        index: Some(0),
        players: 10,
        start_ms: 0,
        duration_ms: 2000,
        ops: vec![OpStats {
            op: "game.state".into(),
            count: 200,
            rate: 100.0,
            latency: latency(2_000),
            outcomes: vec![OutcomeStats {
                histogram: None,
                outcome: "ok".into(),
                count: 200,
                latency: latency(2_000),
            }],
        }],
        connects: 10,
        reconnects: 0,
        connect_errors: 0,
        play: Default::default(),
    };
    RunData {
        meta: RunMeta {
            id: 7,
            name: "t".into(),
            scenario: "t.toml".into(),
            started_unix_ms: 0,
            mono_start_ns: mono0 as i64,
            finished_unix_ms: None,
            status: "running".into(),
            shards: Vec::new(),
        },
        phases: vec![step],
        driver,
        probe,
        probe_missing: None,
        final_report: None::<RunResult>,
        slo: vec![],
        seeded: None,
        seed_cleanup: None,
        expected: Default::default(),
    }
}

#[test]
fn every_table_cell_has_a_value_or_a_reason() {
    let r = Report::build(&data());
    assert_eq!(r.run.requests, 200);
    assert_eq!(r.containers.len(), 1);
    assert_eq!(r.containers[0].cpu_burst, Cell::Missing("no cgroup".into()));
    assert_eq!(r.containers[0].connects_per_s, Cell::Value(100.0));
    let md = crate::sections::markdown(&r);
    for line in md.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
        assert!(
            cells.iter().all(|c| !c.trim().is_empty()),
            "empty cell in: {line}"
        );
    }
    // A killed run says so.
    assert!(
        r.notes.iter().any(|n| n.contains("did not finish")),
        "{:?}",
        r.notes
    );
    let html = crate::sections::html(&r);
    assert!(html.contains("<svg") && !html.contains("http://") && !html.contains("https://"));
}

/// Issue #11: sockets left in TIME_WAIT by an earlier run are the baseline, never this run's
/// peak, in the container and the pair tables.
#[test]
fn time_wait_left_by_an_earlier_run_is_not_this_runs_peak() {
    let mut d = data();
    let remote: std::net::SocketAddr = "198.18.0.3:8081".parse().unwrap();
    for (i, iv) in d.probe.iter_mut().enumerate() {
        // 40 sockets from before the run, then 5 of its own in the second interval.
        let own = 5 * i as u64;
        iv.containers[0].sockets = SocketCell::Measured {
            established: 0,
            syn_sent: 0,
            time_wait: 40 + own,
            time_wait_baseline: 40,
            timewait_sockets: 40 + own,
            min_headroom: Some(28_000),
            port_range: 28_232,
            listen_overflows: 0,
            listen_drops: 0,
            inbound: Vec::new(),
        };
        iv.pairs.push(herd_model::PairInterval::gauges_only(
            "gateway".into(),
            remote,
            None,
            herd_model::PairGauges {
                time_wait: 40 + own,
                time_wait_baseline: 40,
                ..Default::default()
            },
        ));
    }
    let r = Report::build(&d);
    assert_eq!(r.containers[0].time_wait_peak, Cell::Value(5.0));
    let p = r
        .pairs
        .iter()
        .find(|p| p.remote == remote.to_string())
        .unwrap();
    assert_eq!(p.time_wait_peak, Cell::Value(5.0));
}

/// Issue #12: pair rows are bounded — the most active N, then one `other` row whose counters
/// are exact sums and whose gauges say why they are missing.
#[test]
fn pair_rows_beyond_the_limit_are_one_other_row_of_sums() {
    let mut d = data();
    for iv in &mut d.probe {
        for i in 0..60u64 {
            iv.pairs.push(herd_model::PairInterval {
                container: "gateway".into(),
                remote: format!("198.18.1.{}:80", i + 1).parse().unwrap(),
                remote_container: None,
                connects: i + 1,
                established: i + 1,
                time_wait_entries: 1,
                closed: 0,
                connect_latency_us: Default::default(),
                lifetime_ms: Default::default(),
                connect_latency_buckets: {
                    let mut h = herd_model::Log2Hist::default();
                    h.0[4] = i + 1;
                    h
                },
                lifetime_buckets: Default::default(),
                gauges: None,
                waits: Default::default(),
            });
        }
    }
    let all = Report::build_with_pair_rows(&d, 100);
    assert_eq!(all.pairs.len(), 60);
    let r = Report::build_with_pair_rows(&d, 5);
    assert_eq!(r.pairs.len(), 6, "5 rows and other");
    // The busiest five: 60, 59, …, 56 connects per interval, two intervals.
    let kept: u64 = r.pairs[..5].iter().map(|p| p.connects).sum();
    assert_eq!(kept, 2 * (56..=60).sum::<u64>());
    let other = r.pairs.last().unwrap();
    assert_eq!(
        (other.container.as_str(), other.remote.as_str()),
        ("other", "55 more pairs")
    );
    assert_eq!(other.connects, 2 * (1..=55).sum::<u64>());
    assert_eq!(other.time_wait_entries, 2 * 55);
    assert_eq!(other.connect_latency_us.count, 2 * (1..=55).sum::<u64>());
    assert_eq!(
        other.time_wait_implied_peak,
        55 * 60,
        "55 entries in a 1 s interval"
    );
    assert!(matches!(&other.time_wait_peak, Cell::Missing(m) if m.contains("do not add up")));
    assert_eq!(
        all.pairs.iter().map(|p| p.connects).sum::<u64>(),
        r.pairs.iter().map(|p| p.connects).sum::<u64>(),
        "nothing lost"
    );
    crate::sections::markdown(&r);
}

/// Issue #12: a driver aimed at a published port (`127.0.0.1:18081`, docker-proxy in between)
/// still finds its request path: the probe's services say which container serves the port, so
/// the hop toward the container's own address and the hops behind it get a churn ratio.
#[test]
fn a_published_port_target_is_followed_to_the_container_that_serves_it() {
    let mut d = data();
    let pair = |container: &str, remote: &str, rc: Option<&str>, connects: u64| PairInterval {
        container: container.into(),
        remote: remote.parse().unwrap(),
        remote_container: rc.map(Into::into),
        connects,
        established: connects,
        time_wait_entries: connects,
        closed: connects,
        connect_latency_us: Default::default(),
        lifetime_ms: Default::default(),
        connect_latency_buckets: Default::default(),
        lifetime_buckets: Default::default(),
        gauges: None,
        waits: Default::default(),
    };
    for iv in &mut d.probe {
        // docker-proxy (in host's row) → the gateway; the gateway → the backend, 1 per call.
        iv.pairs
            .push(pair("host", "198.19.64.2:8081", Some("gateway"), 100));
        iv.pairs
            .push(pair("gateway", "198.19.64.3:8082", Some("backend"), 100));
        iv.services = vec![Service {
            container: "gateway".into(),
            names: vec!["gateway".into()],
            addrs: vec!["198.19.64.2".parse().unwrap()],
            published: vec![PublishedPort {
                host: "127.0.0.1:18081".parse().unwrap(),
                container_port: 8081,
            }],
        }];
    }
    d.final_report = Some(RunResult {
        expected: Default::default(),
        scenario: "t.toml".into(),
        target: "127.0.0.1:18081".into(),
        transport: "http1".into(),
        connections: "per_request".into(),
        started_unix_ms: 0,
        duration_ms: 2000,
        stopped_early: false,
        requests: 200,
        connects: 200,
        reconnects: 0,
        connect_errors: 0,
        connects_held: 0,
        connect_backoff_ms: 0,
        saturated_intervals: 0,
        phases: d.phases.clone(),
        intervals: d.driver.clone(),
        play: Default::default(),
    });
    let r = Report::build(&d);
    let churn = |remote: &str| {
        r.pairs
            .iter()
            .find(|p| p.remote == remote)
            .map(|p| p.churn_ratio.clone())
            .unwrap()
    };
    assert_eq!(churn("198.19.64.2:8081"), Cell::Value(1.0));
    assert_eq!(
        churn("198.19.64.3:8082"),
        Cell::Value(1.0),
        "the hop behind the gateway"
    );
    // Without the services the same target finds no path.
    for iv in &mut d.probe {
        iv.services.clear();
    }
    let r = Report::build(&d);
    assert!(
        r.pairs
            .iter()
            .all(|p| matches!(&p.churn_ratio, Cell::Missing(m) if m == "not on the request path"))
    );
}

/// A container that appeared and went away during the run says when, in seconds from the
/// run's start; its working set is the highest usage-minus-inactive-file it had.
#[test]
fn a_container_row_says_when_it_appeared_and_ended_and_its_working_set() {
    let mut d = data();
    let mono0 = d.meta.mono_start_ns as u64;
    d.probe[0].containers[0].started_ns = Some(mono0 + 300_000_000);
    d.probe[1].containers[0].ended_ns = Some(mono0 + 1_900_000_000);
    let r = Report::build(&d);
    let g = r
        .containers
        .iter()
        .find(|c| c.container == "gateway")
        .unwrap();
    assert_eq!(g.started_s, Some(0.3));
    assert_eq!(g.ended_s, Some(1.9));
    // No cgroupfs reading: the working set says why, like every other memory cell.
    assert!(
        matches!(&g.working_set_mib, Cell::Missing(why) if why == "no cgroup"),
        "{:?}",
        g.working_set_mib
    );
}

/// Shards that timed their start on the run store's clock: the note gives their spread on
/// that clock and how far their hosts' clocks read off it; without offsets, it says the
/// spread includes the clocks' own.
#[test]
fn the_shard_note_gives_the_start_skew_on_the_store_s_clock_and_the_hosts_offsets() {
    let shard = |index, started, ahead| herd_model::ShardInfo {
        index,
        count: 2,
        host: format!("node-{}", index + 1),
        pid: 1,
        status: "finished".into(),
        started_unix_ns: Some(started),
        clock_ahead_ns: ahead,
        finished: true,
        ..herd_model::ShardInfo::default()
    };
    let notes = crate::build::shard_notes(&[
        shard(0, 1_000_000_000, Some(-100_000)),
        shard(1, 1_008_600_000, Some(800_000_000)),
    ]);
    assert_eq!(
        notes,
        [
            "Merged from 2 of 2 shards: counts add and latency histograms merge exactly; their \
          plans' clocks started within 8.6 ms of each other on the run store's clock (their \
          hosts' clocks read -0.1 to +800.0 ms off the run store's, which they corrected for)."
        ]
    );
    let notes =
        crate::build::shard_notes(&[shard(0, 1_000_000_000, None), shard(1, 1_002_000_000, None)]);
    assert!(
        notes[0].contains("within 2.0 ms of each other (read on each host's wall clock"),
        "{notes:?}"
    );
}
