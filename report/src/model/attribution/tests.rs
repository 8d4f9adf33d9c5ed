use herd_model::{
    LatencyHistogram, PairInterval, SlowRequest,
    histogram::{new_histogram, record},
    waits::{ListenerWaits, PairWaits, RetransWindowCell, WaitWindow},
};

use super::*;
use crate::model::{Latencies, LatencyCell, Log2Row, Split};

const MONO0: u64 = 1_000_000_000;
/// The driver's clock started 0.5 s after the run's (the probe loaded first).
const DRIVER0: u64 = MONO0 + 500_000_000;

fn ms(v: u64) -> u64 {
    v * 1_000_000
}

fn pair(container: &str, remote: &str, remote_container: &str, on_path: bool) -> PairRow {
    PairRow {
        container: container.into(),
        remote: remote.into(),
        remote_container: remote_container.into(),
        connects: 5,
        connects_per_s: 1.0,
        time_wait_entries: 0,
        time_wait_implied_peak: 0,
        churn_ratio: if on_path {
            Cell::Value(0.01)
        } else {
            Cell::Missing("not on the request path".into())
        },
        time_wait_peak: Cell::Value(0.0),
        established_peak: Cell::Value(5.0),
        srtt_p50_us: Cell::Value(50.0),
        srtt_p99_le_us: Cell::Value(64.0),
        headroom_min: Cell::Value(1000.0),
        connect_latency_us: Log2Row::default(),
        lifetime_ms: Log2Row::default(),
    }
}

fn window(start_ms: u64, throttled_ms: u64, runq_ms: u64) -> WaitWindow {
    WaitWindow {
        start_ns: MONO0 + ms(start_ms),
        end_ns: MONO0 + ms(start_ms + 100),
        runq_ns: Some(ms(runq_ms)),
        runq_count: 1,
        throttled_ns: Some(ms(throttled_ms)),
    }
}

/// One op: 996 requests of 1 ms and 4 slow ones, which the driver kept; a gateway on the
/// path throttled in one window, with run-queue delay in another; a bystander off the path
/// throttled throughout; a SYN retransmit on the path's pair; listen drops at the gateway.
fn run() -> (RunData, Vec<OpTotal>, Vec<PairRow>) {
    let mut d = crate::model::tests::data();
    let mut h = new_histogram();
    for _ in 0..996 {
        record(&mut h, 1_000);
    }
    // Run times (since MONO0) of the slow requests: A 0.6–0.8 s, B 0.75–0.95 s,
    // C 1.2–1.5 s, D 1.75–1.95 s; on the driver's clock 0.5 s less.
    let slow = [(600, 200), (750, 200), (1_200, 300), (1_750, 200)];
    for (_, lat) in slow {
        record(&mut h, lat * 1_000);
    }
    for iv in &mut d.driver {
        iv.clock_start_ns = Some(DRIVER0);
        let end_ms = iv.end_ms;
        iv.ops[0].slowest = slow
            .iter()
            .filter(|(s, lat)| s - 500 + lat <= end_ms && s - 500 + lat > end_ms - 1_000)
            .map(|(s, lat)| SlowRequest {
                start_us: (s - 500) * 1_000,
                latency_us: lat * 1_000,
            })
            // And a request under the threshold, which is not attributed.
            .chain([SlowRequest {
                start_us: 0,
                latency_us: 900,
            }])
            .collect();
    }
    for (i, iv) in d.probe.iter_mut().enumerate() {
        let gw = &mut iv.containers[0];
        if i == 0 {
            // 0.7–0.8 s throttled (A and B), 0.9–1.0 s run-queue delay (B only).
            gw.waits.windows = vec![window(700, 30, 0), window(900, 0, 6)];
        } else {
            // 1.9–2.0 s: a run-queue delay below the threshold (D is not explained by it).
            gw.waits.windows = vec![window(1_900, 0, 4)];
            gw.waits.listeners = ListenerCell::Measured {
                ports: vec![ListenerWaits {
                    local_port: 8080,
                    sockets: 1,
                    drops: 3,
                    accept_queue: 0,
                    backlog: 5,
                }],
            };
        }
        let mut bystander = gw.clone();
        bystander.container = "bystander".into();
        bystander.waits.windows = (0..10)
            .map(|k| window(i as u64 * 1_000 + k * 100, 90, 0))
            .collect();
        iv.containers.push(bystander);
        if i == 1 {
            iv.pairs.push(PairInterval {
                container: "host".into(),
                remote: "127.0.0.1:8080".parse().unwrap(),
                remote_container: Some("gateway".into()),
                connects: 1,
                established: 1,
                time_wait_entries: 0,
                closed: 0,
                connect_latency_us: Default::default(),
                lifetime_ms: Default::default(),
                connect_latency_buckets: Default::default(),
                lifetime_buckets: Default::default(),
                gauges: None,
                waits: PairWaits {
                    retrans_segs: 1,
                    syn_retrans: 1,
                    windows: vec![RetransWindowCell {
                        start_ns: MONO0 + ms(1_300),
                        end_ns: MONO0 + ms(1_400),
                        retrans_segs: 1,
                        syn_retrans: 1,
                    }],
                },
            });
        }
    }
    let total = OpTotal {
        op: "game.state".into(),
        phases: vec!["step 1".into()],
        count: 1_000,
        rate: 500.0,
        split: Split::default(),
        latency: LatencyCell::Value(Latencies::of(&h)),
        histogram: Some(LatencyHistogram::encode(&h)),
        slow: None,
    };
    let pairs = vec![
        pair("host", "127.0.0.1:8080", "gateway", true),
        pair("host", "198.18.0.9:80", "bystander", false),
    ];
    (d, vec![total], pairs)
}

#[test]
fn each_slow_request_is_tied_to_the_waits_on_its_path_at_its_time() {
    let (d, mut totals, pairs) = run();
    attribute(&d, &mut totals, &pairs);
    let s = totals[0].slow.as_ref().expect("attributed");
    assert_eq!((s.over_us, s.above, s.kept), (1_000, 4, 4));
    assert_eq!(s.slowest_us, 300_000);
    // A, B (throttled, run queue), C (SYN retransmit, listen drops 1–2 s), D (listen drops).
    assert_eq!(s.explained, 4);
    let got: Vec<(WaitKind, &str, u64)> = s
        .waits
        .iter()
        .map(|w| (w.kind, w.at.as_str(), w.requests))
        .collect();
    assert_eq!(
        got,
        vec![
            (WaitKind::Throttled, "gateway", 2),
            (WaitKind::ListenDrop, "gateway:8080", 2),
            (WaitKind::RunQueue, "gateway", 1),
            (
                WaitKind::SynRetransmit,
                "host → 127.0.0.1:8080 (gateway)",
                1
            ),
        ],
        "the bystander off the path is never named"
    );
    let t = &s.waits[0];
    assert_eq!(
        t.sentence,
        "Of game.state's 4 requests over 1.0ms (its whole-run p99), 2 (50.0 %) were in flight \
         during a probe window (at most 100 ms) in which gateway was throttled."
    );
    assert_eq!((t.share, t.resolution_ms, t.more_windows), (0.5, 100, 0));
    assert_eq!(
        t.evidence,
        vec![WaitEvidence {
            start_s: 0.7,
            end_s: 0.8,
            what: "throttled 30.0 ms".into(),
            requests: 2
        }]
    );
    assert_eq!(s.waits[1].resolution_ms, 1_000);
    assert!(
        s.waits[1]
            .sentence
            .contains("during a 1.0 s probe interval in which the listener gateway:8080 dropped"),
        "{}",
        s.waits[1].sentence
    );
    assert_eq!(s.waits[1].evidence[0].what, "3 listen drops");
    assert_eq!(s.scope, "the request path");
}

#[test]
fn on_the_runs_clock_instead_of_the_drivers_the_requests_would_miss_the_windows() {
    // The same rows without the driver's clock start: the requests move 0.5 s earlier (the
    // run's start), and the attribution follows them: A and B no longer meet the throttled
    // window, C (0.7–1.0 s) does. The clock start is what lines the two timelines up.
    let (mut d, mut totals, pairs) = run();
    for iv in &mut d.driver {
        iv.clock_start_ns = None;
    }
    attribute(&d, &mut totals, &pairs);
    let s = totals[0].slow.as_ref().unwrap();
    let throttled = s.waits.iter().find(|w| w.kind == WaitKind::Throttled);
    assert_eq!(throttled.map(|w| w.requests), Some(1), "{:#?}", s.waits);
}

#[test]
fn no_probe_or_no_kept_requests_means_no_attribution() {
    let (mut d, mut totals, pairs) = run();
    d.probe.clear();
    attribute(&d, &mut totals, &pairs);
    assert!(totals[0].slow.is_none());
    let (mut d, mut totals, pairs) = run();
    for iv in &mut d.driver {
        iv.ops[0].slowest.clear();
    }
    attribute(&d, &mut totals, &pairs);
    assert!(totals[0].slow.is_none());
}

#[test]
fn a_bounded_sample_says_how_many_of_the_slow_requests_it_kept() {
    let (d, mut totals, pairs) = run();
    // Ten more slow requests in the histogram than the driver kept.
    let mut h = totals[0].histogram.as_ref().unwrap().decode().unwrap();
    for _ in 0..10 {
        record(&mut h, 50_000);
    }
    // And as many more fast ones: the p99 stays 1 ms.
    for _ in 0..1_000 {
        record(&mut h, 1_000);
    }
    totals[0].latency = LatencyCell::Value(Latencies::of(&h));
    totals[0].histogram = Some(LatencyHistogram::encode(&h));
    attribute(&d, &mut totals, &pairs);
    let s = totals[0].slow.as_ref().unwrap();
    assert_eq!((s.above, s.kept), (14, 4));
    assert!(
        s.waits[0].sentence.contains(
            "(its whole-run p99; the driver kept 4 of its 14: the 32 slowest per interval)"
        ),
        "{}",
        s.waits[0].sentence
    );
}

#[test]
fn the_section_shows_each_sentence_and_its_windows() {
    let (d, mut totals, pairs) = run();
    attribute(&d, &mut totals, &pairs);
    let mut r = crate::Report::build(&crate::model::tests::data());
    r.totals[0].slow = totals[0].slow.clone();
    let md = crate::sections::markdown(&r);
    assert!(md.contains("## Slow requests and their waits"), "{md}");
    assert!(
        md.contains(
            "- Of game.state's 4 requests over 1.0ms (its whole-run p99), 2 (50.0 %) were in \
             flight during a probe window (at most 100 ms) in which gateway was throttled."
        ),
        "{md}"
    );
    assert!(
        md.contains("| game.state | throttled | gateway | 0.7–0.8 | throttled 30.0 ms | 2 |"),
        "{md}"
    );
    let html = crate::sections::html(&r);
    assert!(
        html.contains("Slow requests and their waits") && html.contains("throttled 30.0 ms"),
        "{html}"
    );
    // Without kept requests the section is left out.
    r.totals[0].slow = None;
    assert!(!crate::sections::markdown(&r).contains("Slow requests"));
}

#[test]
fn the_timeline_lines_driver_intervals_up_with_the_probe_on_the_drivers_clock() {
    // The driver started 0.6 s after the run: its first interval (0.6–1.6 s of the run)
    // overlaps the probe's second interval (1–2 s) most.
    let mut d = crate::model::tests::data();
    d.probe[1].containers[0].counts.0[herd_model::Counter::Connects as usize] = 500;
    for iv in &mut d.driver {
        iv.clock_start_ns = Some(MONO0 + ms(600));
    }
    let t = crate::model::timeline::points(&d);
    assert_eq!(t[0].containers[0].connects_per_s, 500.0);
    // Without it, the run's start: the first probe interval.
    for iv in &mut d.driver {
        iv.clock_start_ns = None;
    }
    let t = crate::model::timeline::points(&d);
    assert_eq!(t[0].containers[0].connects_per_s, 100.0);
}
