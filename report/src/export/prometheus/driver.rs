//! The driver's series: each interval of the driver's result stream added to running totals
//! ([`DriverTotals`]), served by `herd run --listen` and `herd drive --listen` beside the
//! probe's (docs/metrics.md names every series).
//!
//! Latency histograms have fixed buckets whose counts come from the interval's
//! HdrHistogram, so `_count` is the op's exact request count and each `_bucket` the exact
//! number of recorded values at or below its bound (to HdrHistogram's 3 significant digits).

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
};

use herd_model::{DriverInterval, Outcome};

use super::esc;

/// The latency buckets' upper bounds, in µs (0.5 ms … 10 s): the ranges load tests talk in.
pub const BUCKETS_US: [u64; 14] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000, 10_000_000,
];

/// One op's latency, cumulative.
#[derive(Debug, Default, Clone)]
struct OpLatency {
    buckets: [u64; BUCKETS_US.len()],
    count: u64,
    sum_us: f64,
}

/// Running totals of a run's driver intervals.
#[derive(Debug, Default)]
pub struct DriverTotals {
    /// Each op's expected outcomes, to label every outcome ok, expected or error.
    expected: BTreeMap<String, Vec<Outcome>>,
    planned_s: f64,
    phases: Vec<String>,
    requests: BTreeMap<(String, String), (u64, &'static str)>,
    responses: BTreeMap<(String, u16), u64>,
    latency: BTreeMap<String, OpLatency>,
    connects: u64,
    reconnects: u64,
    connect_errors: u64,
    late_starts: u64,
    dropped_starts: u64,
    streams: BTreeMap<(String, String), [u64; 3]>,
    stream_events: BTreeMap<(String, String), u64>,
    groups: [u64; 4],
    intervals: u64,
    saturated_intervals: u64,
    last: Option<DriverInterval>,
    elapsed_s: f64,
}

impl DriverTotals {
    /// Empty totals for a run whose ops expect `expected` (besides `ok`), whose plan lasts
    /// `planned_s` seconds and whose phases are `phases`, in order.
    pub fn new(
        expected: BTreeMap<String, Vec<Outcome>>,
        planned_s: f64,
        phases: Vec<String>,
    ) -> Self {
        Self {
            expected,
            planned_s,
            phases,
            ..Self::default()
        }
    }

    /// `ok`, `expected` or `error` for `outcome` of `op`.
    fn class(&self, op: &str, outcome: &Outcome) -> &'static str {
        if *outcome == Outcome::Ok {
            "ok"
        } else if self
            .expected
            .get(op.strip_prefix("hammer:").unwrap_or(op))
            .is_some_and(|e| e.contains(outcome))
        {
            "expected"
        } else {
            "error"
        }
    }

    /// Adds one interval.
    pub fn add(&mut self, iv: &DriverInterval) {
        for op in &iv.ops {
            for (outcome, n) in &op.outcomes {
                let class = self.class(&op.op, outcome);
                self.requests
                    .entry((op.op.clone(), outcome.name()))
                    .or_insert((0, class))
                    .0 += n;
            }
            for (code, n) in &op.statuses {
                *self.responses.entry((op.op.clone(), *code)).or_default() += n;
            }
            let l = self.latency.entry(op.op.clone()).or_default();
            match op.histogram.as_ref().map(|h| h.decode()) {
                Some(Ok(h)) => {
                    for v in h.iter_recorded() {
                        // A recorded value stands for its HdrHistogram bucket's range: it
                        // falls in every fixed bucket its lowest value fits.
                        let low = h.lowest_equivalent(v.value_iterated_to());
                        let n = v.count_at_value();
                        for (i, b) in BUCKETS_US.iter().enumerate() {
                            if low <= *b {
                                l.buckets[i] += n;
                            }
                        }
                        l.sum_us += h.median_equivalent(v.value_iterated_to()) as f64 * n as f64;
                    }
                    l.count += h.len();
                }
                // No histogram (a result from before herd kept them): the count and the
                // mean still add up; the buckets cannot.
                _ => {
                    l.count += op.count;
                    l.sum_us += op.latency.mean_us * op.count as f64;
                }
            }
        }
        self.connects += iv.connects;
        self.reconnects += iv.reconnects;
        self.connect_errors += iv.connect_errors;
        self.late_starts += iv.late_starts;
        self.dropped_starts += iv.dropped_starts;
        for s in &iv.play.streams {
            let e = self
                .streams
                .entry((s.op.clone(), s.kind.clone()))
                .or_default();
            e[0] += s.opened;
            e[1] += s.reconnects;
            e[2] += s.errors.values().sum::<u64>();
            for (t, n) in &s.by_type {
                *self
                    .stream_events
                    .entry((s.op.clone(), t.clone()))
                    .or_default() += n;
            }
        }
        let g = &iv.play.groups;
        for (i, n) in [g.formed, g.finished, g.failed, g.abandoned]
            .into_iter()
            .enumerate()
        {
            self.groups[i] += n;
        }
        self.intervals += 1;
        self.saturated_intervals += u64::from(iv.driver.saturated);
        self.elapsed_s = iv.end_ms as f64 / 1e3;
        self.last = Some(iv.clone());
    }

    /// The Prometheus text exposition of the totals so far.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let family = |o: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        family(
            &mut o,
            "herd_requests_total",
            "counter",
            "Requests that ended, by op, outcome and class (ok, expected, error).",
        );
        for ((op, outcome), (n, class)) in &self.requests {
            let _ = writeln!(
                o,
                "herd_requests_total{{op=\"{}\",outcome=\"{}\",class=\"{class}\"}} {n}",
                esc(op),
                esc(outcome)
            );
        }
        family(
            &mut o,
            "herd_responses_total",
            "counter",
            "Responses by op and exact status code (streams and long polls not included).",
        );
        for ((op, code), n) in &self.responses {
            let _ = writeln!(
                o,
                "herd_responses_total{{op=\"{}\",status=\"{code}\"}} {n}",
                esc(op)
            );
        }
        let name = "herd_request_duration_seconds";
        family(
            &mut o,
            name,
            "histogram",
            "Request latency by op (exact counts from the driver's HdrHistogram).",
        );
        for (op, l) in &self.latency {
            let op = esc(op);
            for (b, n) in BUCKETS_US.iter().zip(l.buckets) {
                let _ = writeln!(
                    o,
                    "{name}_bucket{{op=\"{op}\",le=\"{}\"}} {n}",
                    *b as f64 / 1e6
                );
            }
            let _ = writeln!(o, "{name}_bucket{{op=\"{op}\",le=\"+Inf\"}} {}", l.count);
            let _ = writeln!(o, "{name}_sum{{op=\"{op}\"}} {}", l.sum_us / 1e6);
            let _ = writeln!(o, "{name}_count{{op=\"{op}\"}} {}", l.count);
        }
        let counters = [
            (
                "herd_driver_connects_total",
                "Connections the driver opened.",
                self.connects,
            ),
            (
                "herd_driver_reconnects_total",
                "Of those, connections opened to replace a lost one.",
                self.reconnects,
            ),
            (
                "herd_driver_connect_errors_total",
                "Connection attempts that failed (refused, timed out, TLS).",
                self.connect_errors,
            ),
            (
                "herd_open_late_starts_total",
                "Open-model requests sent later than their schedule allowed.",
                self.late_starts,
            ),
            (
                "herd_open_dropped_starts_total",
                "Open-model arrivals dropped at the in-flight bound.",
                self.dropped_starts,
            ),
            (
                "herd_driver_intervals_total",
                "Timeline intervals the driver closed.",
                self.intervals,
            ),
            (
                "herd_driver_saturated_intervals_total",
                "Intervals in which the driver itself was saturated (CPU or timer lag).",
                self.saturated_intervals,
            ),
        ];
        for (name, help, v) in counters {
            family(&mut o, name, "counter", help);
            let _ = writeln!(o, "{name} {v}");
        }
        let stream_families = [
            (
                "herd_stream_opened_total",
                "Stream or long-poll openings answered 2xx.",
            ),
            (
                "herd_stream_reconnects_total",
                "Stream or long-poll openings after a player's first.",
            ),
            (
                "herd_stream_errors_total",
                "Stream or long-poll failures, all classes.",
            ),
        ];
        for (i, (name, help)) in stream_families.iter().enumerate() {
            family(&mut o, name, "counter", help);
            for ((op, kind), v) in &self.streams {
                let _ = writeln!(
                    o,
                    "{name}{{op=\"{}\",kind=\"{}\"}} {}",
                    esc(op),
                    esc(kind),
                    v[i]
                );
            }
        }
        let name = "herd_stream_events_total";
        family(&mut o, name, "counter", "Stream events received, by type.");
        for ((op, t), n) in &self.stream_events {
            let _ = writeln!(o, "{name}{{op=\"{}\",type=\"{}\"}} {n}", esc(op), esc(t));
        }
        let name = "herd_groups_total";
        family(
            &mut o,
            name,
            "counter",
            "Player groups, by what became of them.",
        );
        for (what, n) in ["formed", "finished", "failed", "abandoned"]
            .iter()
            .zip(self.groups)
        {
            let _ = writeln!(o, "{name}{{event=\"{what}\"}} {n}");
        }
        let last = self.last.as_ref();
        let players = last.map_or(0, |l| l.players);
        let phase = last.and_then(|l| l.phase.clone());
        let d = last.map(|l| l.driver).unwrap_or_default();
        let gauges = [
            (
                "herd_players",
                "Players alive at the last interval's end.",
                players as f64,
            ),
            (
                "herd_hammer_workers",
                "Hammer workers alive at the last interval's end.",
                last.map_or(0, |l| l.hammer_workers) as f64,
            ),
            (
                "herd_open_in_flight",
                "Open-model requests in flight at the last interval's end.",
                last.map_or(0, |l| l.in_flight) as f64,
            ),
            (
                "herd_run_elapsed_seconds",
                "Time since the load started, at the last interval's end.",
                self.elapsed_s,
            ),
            (
                "herd_run_planned_seconds",
                "How long the plan lasts; a catalog's routes, which last as long as their requests take, count 0.",
                self.planned_s,
            ),
            (
                "herd_phase_index",
                "The running phase's index in the plan (0-based); -1 before and after it.",
                last.and_then(|l| l.phase_index).map_or(-1.0, |i| i as f64),
            ),
            (
                "herd_driver_cpu_cores",
                "CPU the driver used over the last interval, in cores.",
                d.cpu_percent / 100.0,
            ),
            (
                "herd_driver_cores",
                "Cores the driver may use.",
                d.cores as f64,
            ),
            (
                "herd_driver_resident_memory_bytes",
                "The driver's resident memory.",
                d.rss_bytes as f64,
            ),
            (
                "herd_driver_lag_p99_seconds",
                "99th percentile of the driver's timer lateness over the last interval.",
                d.lag_p99_us as f64 / 1e6,
            ),
            (
                "herd_driver_lag_max_seconds",
                "Worst timer lateness over the last interval.",
                d.lag_max_us as f64 / 1e6,
            ),
            (
                "herd_driver_saturated",
                "1 when the last interval's driver was saturated, so its latencies measure the driver too.",
                f64::from(u8::from(d.saturated)),
            ),
        ];
        for (name, help, v) in gauges {
            family(&mut o, name, "gauge", help);
            let _ = writeln!(o, "{name} {v}");
        }
        let name = "herd_phase";
        family(
            &mut o,
            name,
            "gauge",
            "1 for the running phase, 0 for the plan's others (label phase).",
        );
        let seen: BTreeSet<&String> = self.phases.iter().collect();
        for p in seen {
            let on = u8::from(phase.as_ref() == Some(p));
            let _ = writeln!(o, "{name}{{phase=\"{}\"}} {on}", esc(p));
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use herd_model::{
        DriverHealth, IntervalOp, LatencyHistogram,
        histogram::{latency, new_histogram, record},
    };

    use super::*;

    fn interval(values_us: &[u64], outcomes: &[(Outcome, u64)]) -> DriverInterval {
        let mut h = new_histogram();
        for v in values_us {
            record(&mut h, *v);
        }
        DriverInterval {
            rolled_up: None,
            index: 0,
            end_ms: 1_000,
            duration_ms: 1_000,
            phase_index: Some(0),
            phase: Some("step 1".into()),
            late_starts: 2,
            dropped_starts: 1,
            in_flight: 0,
            players: 3,
            hammer_workers: 0,
            ops: vec![IntervalOp {
                statuses: Default::default(),
                slowest: Vec::new(),
                op: "state".into(),
                count: values_us.len() as u64,
                rate: values_us.len() as f64,
                latency: latency(&h),
                histogram: Some(LatencyHistogram::encode(&h)),
                outcomes: outcomes.iter().cloned().collect(),
            }],
            connects: 3,
            reconnects: 0,
            connect_errors: 0,
            play: Default::default(),
            driver: DriverHealth::default(),
            clock_start_ns: None,
        }
    }

    /// Totals for a run whose one op expects `http_4xx`, planned for 2 s in one phase.
    fn totals() -> DriverTotals {
        DriverTotals::new(
            BTreeMap::from([("state".to_owned(), vec![Outcome::Http(4)])]),
            2.0,
            vec!["step 1".into()],
        )
    }

    #[test]
    fn buckets_count_exactly_what_the_histograms_recorded() {
        let mut t = totals();
        // Values on both sides of bounds, and one past the last bucket.
        let first = [499, 500, 501, 999, 1_000, 2_400, 12_000_000];
        t.add(&interval(
            &first,
            &[(Outcome::Ok, 5), (Outcome::Http(4), 2)],
        ));
        t.add(&interval(&[100, 5_000], &[(Outcome::Http(5), 2)]));
        let text = t.render();
        let count = |le: &str| -> u64 {
            let key = format!("herd_request_duration_seconds_bucket{{op=\"state\",le=\"{le}\"}} ");
            let line = text.lines().find(|l| l.starts_with(&key)).unwrap();
            line[key.len()..].parse().unwrap()
        };
        assert_eq!(count("0.0005"), 3); // 100, 499, 500
        assert_eq!(count("0.001"), 6); // + 501, 999, 1000
        assert_eq!(count("0.0025"), 7);
        assert_eq!(count("0.005"), 8);
        assert_eq!(count("10"), 8);
        assert_eq!(count("+Inf"), 9);
        assert!(text.contains("herd_request_duration_seconds_count{op=\"state\"} 9\n"));
        assert!(text.contains("herd_requests_total{op=\"state\",outcome=\"ok\",class=\"ok\"} 5\n"));
        assert!(text.contains(
            "herd_requests_total{op=\"state\",outcome=\"http_4xx\",class=\"expected\"} 2\n"
        ));
        assert!(text.contains(
            "herd_requests_total{op=\"state\",outcome=\"http_5xx\",class=\"error\"} 2\n"
        ));
        assert!(text.contains("herd_open_late_starts_total 4\n"));
        assert!(text.contains("herd_phase{phase=\"step 1\"} 1\n"));
        assert!(text.contains("herd_run_planned_seconds 2\n"));
        // Every sample belongs to a declared family.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            let family = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(text.contains(&format!("# TYPE {family} ")), "{name}");
        }
    }
}
