//! The one task that owns every histogram: it merges the players' samples into per op ×
//! step × outcome histograms and per-interval ones, and emits the result stream.

use std::{
    cmp::Reverse,
    collections::BinaryHeap,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst},
    },
    time::{Duration, Instant},
};

use hdrhistogram::Histogram;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, error::TryRecvError};

use herd_model::{
    DriverEvent, DriverHealth, DriverInterval, IntervalOp, OpStats, OpenStats, Outcome,
    OutcomeStats, PhaseResult, RunResult, SLOWEST_PER_INTERVAL, SlowRequest,
    histogram::{LatencyHistogram, latency, new_histogram, record},
};

use super::{gate::Gate, health};

/// A message to the aggregator.
#[derive(Debug)]
pub(crate) enum Msg {
    /// One op ended at `ended`. `row` is `phase * ops + op`; `status` is the response's, if
    /// one came.
    Sample {
        row: u32,
        outcome: Outcome,
        status: Option<u16>,
        latency_us: u64,
        ended: Instant,
    },
    /// A phase (step or hammer) began with this many players. `counters` is the connection
    /// counters read when its gate opened, before any of its players ran: read when the
    /// message arrives, a player's first connect could already be in them, and the phase's
    /// connect errors would fall one short of its ops' `transport_error.connect`.
    PhaseOpened {
        phase: usize,
        players: usize,
        counters: [u64; 3],
    },
    /// A phase stopped starting ops; `counters` as read when its gate closed.
    PhaseClosed { phase: usize, counters: [u64; 3] },
    /// An open-model phase's arrivals: sent, late and dropped starts (before its close).
    Open { phase: usize, stats: Box<OpenStats> },
    /// Every player has ended; nothing follows.
    Finish { stopped_early: bool },
}

/// Connection counters shared by everyone who opens connections.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub connects: AtomicU64,
    pub reconnects: AtomicU64,
    pub connect_errors: AtomicU64,
    /// Connects held back by the backoff after failed ones, and the time they waited.
    pub connects_held: AtomicU64,
    pub backoff_us: AtomicU64,
}

impl Counters {
    pub fn read(&self) -> [u64; 3] {
        [
            self.connects.load(SeqCst),
            self.reconnects.load(SeqCst),
            self.connect_errors.load(SeqCst),
        ]
    }
}

/// Who is alive, for the timeline.
#[derive(Debug, Default)]
pub(crate) struct Live {
    pub players: AtomicUsize,
    pub hammer_workers: AtomicUsize,
    /// Open-model starts that slipped behind schedule, and those dropped at the bound.
    pub late_starts: AtomicU64,
    pub dropped_starts: AtomicU64,
    /// Open-model requests in flight.
    pub in_flight: AtomicUsize,
}

/// Distinct domain codes kept per op before the rest fold into `domain_other`: a service
/// that puts free text at the code pointer must not grow the report without bound.
const MAX_DOMAIN_CODES: usize = 32;

#[derive(Default)]
struct OpAcc {
    outcomes: Vec<(Outcome, Histogram<u64>)>,
    domain_codes: usize,
}

impl OpAcc {
    /// The outcome to record under, folding codes past the cap.
    fn key(&mut self, outcome: Outcome) -> usize {
        if let Some(i) = self.outcomes.iter().position(|(o, _)| *o == outcome) {
            return i;
        }
        let outcome = match outcome {
            Outcome::Domain(_) if self.domain_codes >= MAX_DOMAIN_CODES => {
                let other = Outcome::Domain("domain_other".into());
                if let Some(i) = self.outcomes.iter().position(|(o, _)| *o == other) {
                    return i;
                }
                other
            }
            Outcome::Domain(c) => {
                self.domain_codes += 1;
                Outcome::Domain(c)
            }
            o => o,
        };
        self.outcomes.push((outcome, new_histogram()));
        self.outcomes.len() - 1
    }
}

struct PhaseAcc {
    ops: Vec<OpAcc>,
    recorded: u64,
    players: usize,
    opened: Option<Instant>,
    closed: Option<Instant>,
    counters_at_open: [u64; 3],
    counters_at_close: [u64; 3],
    open: Option<OpenStats>,
    report: Option<PhaseResult>,
}

struct IntervalRow {
    all: Histogram<u64>,
    outcomes: Vec<(Outcome, u64)>,
    /// Responses by exact status code (outcomes fold them into classes).
    statuses: Vec<(u16, u64)>,
    /// The interval's slowest requests.
    slowest: Slowest,
}

/// The [`SLOWEST_PER_INTERVAL`] slowest requests seen since the last take: a min-heap on
/// latency, so a request faster than every kept one costs one comparison.
#[derive(Default)]
pub(crate) struct Slowest(BinaryHeap<Reverse<(u64, u64)>>);

impl Slowest {
    /// Offers a request that started `start_us` after the driver's start and took
    /// `latency_us`.
    pub(crate) fn offer(&mut self, start_us: u64, latency_us: u64) {
        if self.0.len() < SLOWEST_PER_INTERVAL {
            self.0.push(Reverse((latency_us, start_us)));
        } else if let Some(mut least) = self.0.peek_mut()
            && latency_us > least.0.0
        {
            *least = Reverse((latency_us, start_us));
        }
    }

    /// The kept requests, slowest first; empties the set.
    pub(crate) fn take(&mut self) -> Vec<SlowRequest> {
        let mut v: Vec<SlowRequest> = self
            .0
            .drain()
            .map(|Reverse((latency_us, start_us))| SlowRequest {
                start_us,
                latency_us,
            })
            .collect();
        v.sort_by(|a, b| {
            b.latency_us
                .cmp(&a.latency_us)
                .then(a.start_us.cmp(&b.start_us))
        });
        v
    }
}

/// What the aggregator needs to know about the run.
pub(crate) struct Setup {
    pub scenario_file: String,
    pub target: String,
    pub transport: String,
    pub connections: String,
    pub op_names: Vec<String>,
    /// Each op's expected outcomes, for the final report.
    pub expected: std::collections::BTreeMap<String, Vec<Outcome>>,
    /// Phases of the plan's sequence; the hammer is phase `steps` after them.
    pub steps: usize,
    /// Each sequential phase's name and kind.
    pub phases: Vec<(String, herd_model::PhaseKind)>,
    pub started: Arc<[AtomicU64]>,
    pub counters: Arc<Counters>,
    pub live: Arc<Live>,
    pub step_gate: Arc<Gate>,
    pub play: Arc<super::play::PlayAcc>,
    pub events: Option<UnboundedSender<DriverEvent>>,
    pub interval: Duration,
    pub cores: usize,
    /// Keep every interval for the final result (else only their count: flat memory).
    pub keep_intervals: bool,
    pub t0: Instant,
    pub started_unix_ms: u64,
}

pub(crate) struct Aggregator {
    s: Setup,
    phases: Vec<PhaseAcc>,
    interval_rows: Vec<IntervalRow>,
    lag: Histogram<u64>,
    intervals: Vec<DriverInterval>,
    /// Intervals so far, and how many of them saturated the driver (kept or not).
    interval_count: u64,
    saturated_count: u64,
    last_tick: Instant,
    last_cpu: Option<Duration>,
    last_counters: [u64; 3],
    last_starts: [u64; 2],
    /// CLOCK_MONOTONIC (ns) at `t0`: the driver's clock start, which the intervals carry.
    clock_start_ns: u64,
}

/// CLOCK_MONOTONIC now, ns: the clock the probe's windows are on (`bpf_ktime_get_ns`), and
/// the one `Instant` reads on Linux.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Aggregator {
    pub fn new(s: Setup) -> Self {
        let n_ops = s.op_names.len();
        let phases = (0..=s.steps)
            .map(|_| PhaseAcc {
                ops: (0..n_ops).map(|_| OpAcc::default()).collect(),
                recorded: 0,
                players: 0,
                opened: None,
                closed: None,
                counters_at_open: [0; 3],
                counters_at_close: [0; 3],
                open: None,
                report: None,
            })
            .collect();
        // Rows 0..n are the players' ops, n..2n the hammer's.
        let interval_rows = (0..2 * n_ops)
            .map(|_| IntervalRow {
                all: new_histogram(),
                outcomes: Vec::new(),
                statuses: Vec::new(),
                slowest: Slowest::default(),
            })
            .collect();
        let last_tick = s.t0;
        // Both clocks read back to back: t0 on CLOCK_MONOTONIC, to the µs.
        let clock_start_ns = monotonic_ns().saturating_sub(s.t0.elapsed().as_nanos() as u64);
        health::prepare();
        Self {
            s,
            phases,
            interval_rows,
            lag: new_histogram(),
            intervals: Vec::new(),
            interval_count: 0,
            saturated_count: 0,
            last_tick,
            last_cpu: health::process_cpu(),
            last_counters: [0; 3],
            last_starts: [0; 2],
            clock_start_ns,
        }
    }

    /// Runs until [`Msg::Finish`], then returns the run's report (also sent as `Done`).
    pub async fn run(
        mut self,
        mut rx: UnboundedReceiver<Msg>,
        mut lag_rx: UnboundedReceiver<u64>,
    ) -> RunResult {
        let mut ticker =
            tokio::time::interval_at((self.s.t0 + self.s.interval).into(), self.s.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let stopped_early = loop {
            tokio::select! {
                biased;
                m = rx.recv() => {
                    if let Some(stopped_early) = self.drain(m, &mut rx) {
                        break stopped_early;
                    }
                }
                Some(l) = lag_rx.recv() => record(&mut self.lag, l),
                _ = ticker.tick() => self.tick(),
            }
            self.finish_phases(false);
        };
        while let Ok(l) = lag_rx.try_recv() {
            record(&mut self.lag, l);
        }
        // The last interval: skipped when empty and shorter than the timeline's millisecond
        // resolution (its `t` would repeat the one before). Samples that arrived in that
        // last millisecond wait it out instead, so every recorded op shows in an interval.
        let since = self.last_tick.elapsed();
        let resolution = Duration::from_millis(1);
        if since < resolution && self.interval_rows.iter().any(|r| !r.all.is_empty()) {
            tokio::time::sleep(resolution - since).await;
        }
        if self.last_tick.elapsed() >= resolution {
            self.tick();
        }
        self.finish_phases(true);
        let report = self.report(stopped_early);
        self.emit(DriverEvent::Done(Box::new(report.clone())));
        report
    }

    /// Handles `first` and whatever else is already queued (up to a bound, so the ticker
    /// is not starved): one wake-up per batch rather than a `select!` and a phase check per
    /// sample. `Some(stopped_early)` once the run finished (or every sender is gone).
    fn drain(&mut self, first: Option<Msg>, rx: &mut UnboundedReceiver<Msg>) -> Option<bool> {
        let mut next = first;
        let mut budget = 1024;
        loop {
            match next {
                Some(Msg::Finish { stopped_early }) => return Some(stopped_early),
                Some(m) => self.handle(m),
                None => return Some(true),
            }
            budget -= 1;
            if budget == 0 {
                return None;
            }
            next = match rx.try_recv() {
                Ok(m) => Some(m),
                Err(TryRecvError::Empty) => return None,
                Err(TryRecvError::Disconnected) => None,
            };
        }
    }

    fn emit(&self, e: DriverEvent) {
        if let Some(tx) = &self.s.events {
            // A consumer that went away does not stop the run.
            let _ = tx.send(e);
        }
    }

    fn handle(&mut self, m: Msg) {
        let n_ops = self.s.op_names.len();
        match m {
            Msg::Sample {
                row,
                outcome,
                status,
                latency_us,
                ended,
            } => {
                let (phase, op) = (row as usize / n_ops, row as usize % n_ops);
                let acc = &mut self.phases[phase];
                acc.recorded += 1;
                let i = acc.ops[op].key(outcome);
                let (outcome, h) = &mut acc.ops[op].outcomes[i];
                record(h, latency_us);
                let irow = &mut self.interval_rows[if phase == self.s.steps {
                    n_ops + op
                } else {
                    op
                }];
                record(&mut irow.all, latency_us);
                let end_us = ended.saturating_duration_since(self.s.t0).as_micros() as u64;
                irow.slowest
                    .offer(end_us.saturating_sub(latency_us), latency_us);
                match irow.outcomes.iter_mut().find(|(o, _)| o == outcome) {
                    Some((_, c)) => *c += 1,
                    None => irow.outcomes.push((outcome.clone(), 1)),
                }
                if let Some(code) = status {
                    match irow.statuses.iter_mut().find(|(s, _)| *s == code) {
                        Some((_, c)) => *c += 1,
                        None => irow.statuses.push((code, 1)),
                    }
                }
            }
            Msg::PhaseOpened {
                phase,
                players,
                counters,
            } => {
                let acc = &mut self.phases[phase];
                acc.opened = Some(Instant::now());
                acc.players = players;
                acc.counters_at_open = counters;
            }
            Msg::PhaseClosed { phase, counters } => {
                let acc = &mut self.phases[phase];
                if acc.opened.is_some() && acc.closed.is_none() {
                    acc.closed = Some(Instant::now());
                    acc.counters_at_close = counters;
                }
            }
            Msg::Open { phase, stats } => self.phases[phase].open = Some(*stats),
            Msg::Finish { .. } => {}
        }
    }

    /// Emits `PhaseEnd` for every closed phase whose ops have all been recorded (or, at the
    /// end, for every phase that ran).
    fn finish_phases(&mut self, all: bool) {
        for k in 0..self.phases.len() {
            let acc = &self.phases[k];
            if acc.report.is_some() || acc.opened.is_none() {
                continue;
            }
            let complete = acc.closed.is_some() && acc.recorded == self.s.started[k].load(SeqCst);
            if !(complete || all) {
                continue;
            }
            let report = self.phase_report(k);
            self.phases[k].report = Some(report.clone());
            self.emit(DriverEvent::PhaseEnd(report));
        }
    }

    fn phase_report(&mut self, k: usize) -> PhaseResult {
        // The plan's last phase ends in the grace: ops in flight at its close (a connect
        // timing out, one that failed at its end) still count their connects in it, as their
        // outcomes do, so that its connect errors are the op rows' `transport_error.connect`
        // and the run's (issue #27: a killed target showed 12 on the step line, 14 in the op
        // row and the finding). Its report is made once every op it started is recorded.
        let last = k < self.s.steps
            && self.phases[k + 1..self.s.steps]
                .iter()
                .all(|p| p.opened.is_none());
        let acc = &mut self.phases[k];
        let opened = acc.opened.expect("only opened phases are reported");
        if acc.closed.is_none() || last {
            acc.counters_at_close = self.s.counters.read();
        }
        if acc.closed.is_none() {
            acc.closed = Some(Instant::now());
        }
        let duration = acc.closed.expect("set above") - opened;
        let secs = duration.as_secs_f64().max(1e-3);
        let mut ops = Vec::new();
        for (i, op) in acc.ops.iter().enumerate() {
            if op.outcomes.is_empty() {
                continue;
            }
            let mut all = new_histogram();
            let mut outcomes: Vec<OutcomeStats> = op
                .outcomes
                .iter()
                .map(|(o, h)| {
                    all.add(h).expect("auto-resizing histograms always merge");
                    OutcomeStats {
                        outcome: o.clone(),
                        count: h.len(),
                        latency: latency(h),
                        histogram: Some(LatencyHistogram::encode(h)),
                    }
                })
                .collect();
            outcomes.sort_by(|a, b| {
                b.count
                    .cmp(&a.count)
                    .then_with(|| a.outcome.name().cmp(&b.outcome.name()))
            });
            ops.push(OpStats {
                op: self.s.op_names[i].clone(),
                count: all.len(),
                rate: all.len() as f64 / secs,
                latency: latency(&all),
                outcomes,
            });
        }
        let delta = |i: usize| acc.counters_at_close[i] - acc.counters_at_open[i];
        let (phase, kind) = self
            .s
            .phases
            .get(k)
            .cloned()
            .unwrap_or(("hammer".into(), herd_model::PhaseKind::Hammer));
        PhaseResult {
            phase,
            kind,
            open: acc.open.clone(),
            index: (k < self.s.steps).then_some(k),
            players: acc.players,
            start_ms: (opened - self.s.t0).as_millis() as u64,
            duration_ms: duration.as_millis() as u64,
            ops,
            connects: delta(0),
            reconnects: delta(1),
            connect_errors: delta(2),
            play: self.s.play.phase(k),
        }
    }

    fn tick(&mut self) {
        let now = Instant::now();
        let elapsed = now - self.last_tick;
        let began = std::mem::replace(&mut self.last_tick, now);
        let secs = elapsed.as_secs_f64().max(1e-3);
        let n_ops = self.s.op_names.len();
        let mut ops = Vec::new();
        for (i, row) in self.interval_rows.iter_mut().enumerate() {
            if row.all.is_empty() {
                continue;
            }
            let name = &self.s.op_names[i % n_ops];
            ops.push(IntervalOp {
                op: if i >= n_ops {
                    format!("hammer:{name}")
                } else {
                    name.clone()
                },
                count: row.all.len(),
                rate: row.all.len() as f64 / secs,
                latency: latency(&row.all),
                histogram: Some(LatencyHistogram::encode(&row.all)),
                outcomes: row.outcomes.drain(..).collect(),
                statuses: row.statuses.drain(..).collect(),
                slowest: row.slowest.take(),
            });
            row.all.reset();
        }
        let cpu = health::process_cpu();
        let cpu_percent = match (cpu, self.last_cpu) {
            (Some(now), Some(before)) => (now.saturating_sub(before)).as_secs_f64() / secs * 100.0,
            _ => 0.0,
        };
        self.last_cpu = cpu;
        let lag = latency(&self.lag);
        self.lag.reset();
        let counters = self.s.counters.read();
        let delta = |i: usize| counters[i] - self.last_counters[i];
        let starts = [
            self.s.live.late_starts.load(SeqCst),
            self.s.live.dropped_starts.load(SeqCst),
        ];
        // The interval in which the plan's last step ends is that step's tail, not a time
        // after the plan: the gate is closed by the tick, so name the phase that closed in it.
        let step = self.s.step_gate.current().or_else(|| {
            (self.phases.iter().enumerate())
                .filter(|(_, p)| p.closed.is_some_and(|c| c > began))
                .max_by_key(|(_, p)| p.closed)
                .map(|(k, _)| k)
        });
        let report = DriverInterval {
            rolled_up: None,
            phase: step.and_then(|k| self.s.phases.get(k)).map(|p| p.0.clone()),
            late_starts: starts[0] - self.last_starts[0],
            dropped_starts: starts[1] - self.last_starts[1],
            in_flight: self.s.live.in_flight.load(SeqCst),
            index: self.interval_count,
            end_ms: (now - self.s.t0).as_millis() as u64,
            duration_ms: elapsed.as_millis() as u64,
            phase_index: step,
            players: self.s.live.players.load(SeqCst),
            hammer_workers: self.s.live.hammer_workers.load(SeqCst),
            ops,
            connects: delta(0),
            reconnects: delta(1),
            connect_errors: delta(2),
            play: self.s.play.take_interval(),
            driver: DriverHealth {
                cpu_percent,
                cores: self.s.cores,
                rss_bytes: health::rss_bytes(),
                lag_p99_us: lag.p99_us,
                lag_max_us: lag.max_us,
                saturated: herd_model::saturated(cpu_percent, self.s.cores, lag.p99_us),
            },
            clock_start_ns: Some(self.clock_start_ns),
        };
        self.last_counters = counters;
        self.last_starts = starts;
        self.interval_count += 1;
        self.saturated_count += u64::from(report.driver.saturated);
        if self.s.keep_intervals {
            self.intervals.push(report.clone());
        }
        self.emit(DriverEvent::Interval(report));
    }

    fn report(&mut self, stopped_early: bool) -> RunResult {
        let phases: Vec<PhaseResult> = self
            .phases
            .iter_mut()
            .filter_map(|p| p.report.take())
            .collect();
        let requests = phases
            .iter()
            .flat_map(|s| &s.ops)
            .flat_map(|o| &o.outcomes)
            .filter(|o| o.outcome.was_sent())
            .map(|o| o.count)
            .sum();
        let [connects, reconnects, connect_errors] = self.s.counters.read();
        let connects_held = self.s.counters.connects_held.load(SeqCst);
        let connect_backoff_ms = self.s.counters.backoff_us.load(SeqCst) / 1000;
        RunResult {
            scenario: self.s.scenario_file.clone(),
            target: self.s.target.clone(),
            transport: self.s.transport.clone(),
            connections: self.s.connections.clone(),
            started_unix_ms: self.s.started_unix_ms,
            duration_ms: self.s.t0.elapsed().as_millis() as u64,
            stopped_early,
            requests,
            connects,
            reconnects,
            connect_errors,
            connects_held,
            connect_backoff_ms,
            saturated_intervals: self.saturated_count,
            phases,
            expected: self.s.expected.clone(),
            intervals: std::mem::take(&mut self.intervals),
            play: self.s.play.total(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_counts_each_op_once_in_the_phase_it_entered() {
        let started: Vec<AtomicU64> = (0..3).map(|_| AtomicU64::new(0)).collect();
        let gate = Gate::closed();
        assert_eq!(gate.enter(&started), None);
        gate.open(0);
        assert_eq!(gate.enter(&started), Some(0));
        gate.open(1);
        assert_eq!(gate.enter(&started), Some(1));
        assert_eq!(gate.enter(&started), Some(1));
        gate.close();
        assert_eq!(gate.enter(&started), None);
        let counts: Vec<u64> = started.iter().map(|a| a.load(SeqCst)).collect();
        assert_eq!(counts, vec![1, 2, 0]);
    }

    #[test]
    fn domain_codes_fold_past_the_cap() {
        let mut acc = OpAcc::default();
        for i in 0..MAX_DOMAIN_CODES + 5 {
            acc.key(Outcome::Domain(format!("code_{i}").into()));
        }
        acc.key(Outcome::Ok);
        acc.key(Outcome::Domain("code_0".into()));
        assert_eq!(acc.outcomes.len(), MAX_DOMAIN_CODES + 2);
        assert!(
            acc.outcomes
                .iter()
                .any(|(o, _)| o.to_string() == "domain_other")
        );
    }

    #[test]
    fn the_slowest_requests_are_kept_up_to_the_bound_slowest_first() {
        let mut s = Slowest::default();
        // 1000 requests, latency k µs for k in a scrambled order.
        for i in 0..1000u64 {
            let k = (i * 7919) % 1000;
            s.offer(i, k);
        }
        let kept = s.take();
        assert_eq!(kept.len(), SLOWEST_PER_INTERVAL);
        let want: Vec<u64> = (1000 - SLOWEST_PER_INTERVAL as u64..1000).rev().collect();
        assert_eq!(kept.iter().map(|r| r.latency_us).collect::<Vec<_>>(), want);
        // Each keeps its own start.
        assert!(
            kept.iter()
                .all(|r| (r.start_us * 7919) % 1000 == r.latency_us)
        );
        assert!(s.take().is_empty(), "taking empties it");
    }

    fn setup(events: UnboundedSender<DriverEvent>) -> (Setup, Arc<[AtomicU64]>) {
        let started: Arc<[AtomicU64]> = (0..2).map(|_| AtomicU64::new(0)).collect();
        let s = Setup {
            scenario_file: "t.toml".into(),
            target: "127.0.0.1:1".into(),
            transport: "h1".into(),
            connections: "per_player".into(),
            op_names: vec!["a".into(), "b".into()],
            expected: Default::default(),
            steps: 1,
            phases: vec![("step 1".into(), herd_model::PhaseKind::Step)],
            started: started.clone(),
            counters: Arc::default(),
            live: Arc::default(),
            step_gate: Arc::new(Gate::closed()),
            play: Arc::new(super::super::play::PlayAcc::new(
                Vec::new(),
                1,
                Arc::new(Gate::closed()),
            )),
            events: Some(events),
            interval: Duration::from_millis(50),
            cores: 2,
            keep_intervals: true,
            t0: Instant::now(),
            started_unix_ms: 0,
        };
        (s, started)
    }

    #[tokio::test]
    async fn merges_samples_into_steps_intervals_and_done() {
        let (etx, mut erx) = tokio::sync::mpsc::unbounded_channel();
        let (s, started) = setup(etx);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let (_lag_tx, lag_rx) = tokio::sync::mpsc::unbounded_channel();
        let agg = tokio::spawn(Aggregator::new(s).run(rx, lag_rx));
        tx.send(Msg::PhaseOpened {
            phase: 0,
            players: 3,
            counters: [0; 3],
        })
        .unwrap();
        tx.send(Msg::PhaseOpened {
            phase: 1,
            players: 2,
            counters: [0; 3],
        })
        .unwrap();
        started[0].store(4, SeqCst);
        started[1].store(1, SeqCst);
        for (row, outcome, us) in [
            (0, Outcome::Ok, 1_000),
            (0, Outcome::Ok, 3_000),
            (1, Outcome::Http(5), 2_000),
            (3, Outcome::RateLimited, 100),
        ] {
            tx.send(Msg::Sample {
                row,
                outcome,
                status: Some(200),
                latency_us: us,
                ended: Instant::now(),
            })
            .unwrap();
        }
        tx.send(Msg::PhaseClosed {
            phase: 0,
            counters: [0; 3],
        })
        .unwrap();
        tokio::time::sleep(Duration::from_millis(120)).await;
        // Step 0 has one op still in flight (started 4, recorded 3): no PhaseEnd yet.
        let mut early = Vec::new();
        while let Ok(e) = erx.try_recv() {
            early.push(e);
        }
        assert!(
            early.iter().all(|e| matches!(e, DriverEvent::Interval(_))),
            "{early:?}"
        );
        let first = match &early[0] {
            DriverEvent::Interval(i) => i,
            _ => unreachable!(),
        };
        let names: Vec<&str> = first.ops.iter().map(|o| o.op.as_str()).collect();
        assert_eq!(names, vec!["a", "b", "hammer:b"]);
        assert_eq!(first.ops[0].outcomes.get(&Outcome::Ok), Some(&2));
        assert_eq!(first.ops[0].statuses.get(&200), Some(&2));
        // Each request with its start and latency, slowest first, on the interval's clock.
        let slow: Vec<u64> = first.ops[0].slowest.iter().map(|r| r.latency_us).collect();
        assert_eq!(slow, vec![3_000, 1_000]);
        assert!(first.ops[0].slowest[0].end_us() <= first.end_ms * 1000);
        assert!(first.clock_start_ns.is_some());
        let h = first.ops[0].histogram.as_ref().unwrap().decode().unwrap();
        assert!(
            h.len() == 2 && h.equivalent(h.max(), 3_000),
            "{} {}",
            h.len(),
            h.max()
        );
        tx.send(Msg::Sample {
            row: 0,
            outcome: Outcome::Timeout,
            status: None,
            latency_us: 9_000,
            ended: Instant::now(),
        })
        .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        match erx.try_recv() {
            Ok(DriverEvent::PhaseEnd(s)) => {
                assert_eq!(s.phase, "step 1");
                assert_eq!(s.players, 3);
                assert_eq!(s.ops[0].count, 3);
                assert_eq!(s.ops[0].outcomes[0].outcome, Outcome::Ok);
                assert_eq!(s.ops[0].outcomes[0].count, 2);
                assert_eq!(s.ops[1].outcomes[0].outcome, Outcome::Http(5));
                // The phase's histogram is every sample's: 1, 3 and 9 ms.
                let h = s.ops[0].histogram().unwrap().unwrap();
                assert!(h.len() == 3 && h.equivalent(h.max(), 9_000));
            }
            other => panic!("expected PhaseEnd, got {other:?}"),
        }
        tx.send(Msg::Finish {
            stopped_early: false,
        })
        .unwrap();
        let report = agg.await.unwrap();
        assert_eq!(report.requests, 5);
        assert_eq!(report.phases.len(), 2);
        assert_eq!(report.phases[1].phase, "hammer");
        assert_eq!(report.outcome_count("b", "rate_limited"), 1);
        assert_eq!(report.op_count("a"), 3);
        let done = std::iter::from_fn(|| erx.try_recv().ok()).last();
        assert!(matches!(done, Some(DriverEvent::Done(r)) if *r == report));
    }
}
