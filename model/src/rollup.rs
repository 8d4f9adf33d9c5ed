//! Exact roll-ups of a timeline: several consecutive intervals of one source merged into one
//! coarser interval, so an hours-long run keeps a bounded number of rows and every number the
//! report reads from them stays what it was.
//!
//! Every field of a row has one of four rules, applied in one place per type below (each
//! function destructures its type whole, so a field added later does not compile until its
//! rule is written here):
//!
//! - **counters** (deltas over the interval: requests, connects, CPU time, throttled
//!   periods, listen overflows, every [`Counter`](probe_common::Counter)) are **summed**;
//! - **histograms** (HdrHistogram [`LatencyHistogram`]s, [`Log2Hist`]s of connect latency and
//!   lifetime) are **merged**, exactly, and their summaries recomputed from the merge;
//! - **gauges** keep the extreme the report reads from them: **max** for peaks (players,
//!   ESTABLISHED, TIME_WAIT, memory, in-flight, the busiest CPU window with its window),
//!   **min** for headroom (free ephemeral ports), **last** for settings and samples read "at
//!   the end" (quotas, port range, the srtt sample, services);
//! - **rates and averages** are recomputed over the merged length (ops/s, cores used).
//!
//! A rolled-up row carries [`RolledUp`]: how many source intervals it holds (and, for the
//! driver, how many of them were saturated), so the report says each part's resolution and
//! counts saturated intervals as the driver did.

use std::collections::BTreeMap;

use crate::{
    driver::{DriverHealth, DriverInterval, IntervalOp},
    histogram::{HistogramError, LatencyHistogram, latency, new_histogram},
    probe::{
        ContainerInterval, CpuCell, CpuInterval, InboundCell, Log2Summary, Memory, PairGauges,
        PairInterval, ProbeInterval, SocketCell, Throttling,
    },
    waits::{
        ConntrackCell, ContainerWaits, ListenerCell, OomCell, PairWaits, Pressure, PsiCell,
        RetransWindowCell, RunqCell, WaitWindow,
    },
};

/// What a rolled-up row holds: the intervals of the timeline merged into it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RolledUp {
    /// Source intervals (at the run's `--interval`) merged into this row.
    pub intervals: u64,
    /// Of those, intervals in which the driver was saturated (driver rows only).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub saturated: u64,
    /// The resolution the rows were rolled up to, ms (a row cut short by a phase boundary
    /// is shorter).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub every_ms: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl RolledUp {
    /// What a row stands for: itself when it was never rolled up.
    pub fn of_driver(iv: &DriverInterval) -> Self {
        iv.rolled_up.unwrap_or(RolledUp {
            intervals: 1,
            saturated: u64::from(iv.driver.saturated),
            every_ms: 0,
        })
    }

    /// What a probe row stands for: itself when it was never rolled up.
    pub fn of_probe(iv: &ProbeInterval) -> Self {
        iv.rolled_up.unwrap_or(RolledUp {
            intervals: 1,
            saturated: 0,
            every_ms: 0,
        })
    }
}

/// A group of driver intervals that cannot be merged exactly.
#[derive(Debug, thiserror::Error)]
pub enum RollupError {
    /// Nothing to merge.
    #[error("no intervals to roll up")]
    Empty,
    /// An op's interval has no histogram (recorded before herd kept them): its percentiles
    /// would not merge exactly, so the group stays at full resolution.
    #[error("op {0} has an interval without a histogram: it cannot be merged exactly")]
    NoHistogram(String),
    /// The intervals are of different phases: a merged row would move samples across a
    /// phase boundary.
    #[error("the intervals span phases {0:?} and {1:?}")]
    AcrossPhases(Option<usize>, Option<usize>),
    /// A histogram does not decode.
    #[error(transparent)]
    Histogram(#[from] HistogramError),
}

/// Merges consecutive driver intervals of one phase (oldest first) into one.
pub fn driver(group: &[DriverInterval]) -> Result<DriverInterval, RollupError> {
    let (first, last) = match group {
        [] => return Err(RollupError::Empty),
        [one] => return Ok(one.clone()),
        [first, .., last] => (first, last),
    };
    if let Some(other) = group.iter().find(|i| i.phase_index != first.phase_index) {
        return Err(RollupError::AcrossPhases(
            first.phase_index,
            other.phase_index,
        ));
    }
    let start_ms = first.end_ms.saturating_sub(first.duration_ms);
    let duration_ms = last.end_ms.saturating_sub(start_ms);
    let mut acc = DriverInterval {
        index: first.index,
        end_ms: last.end_ms,
        duration_ms,
        phase_index: last.phase_index,
        phase: last.phase.clone(),
        late_starts: 0,
        dropped_starts: 0,
        in_flight: 0,
        players: 0,
        hammer_workers: 0,
        ops: driver_ops(group, duration_ms)?,
        connects: 0,
        reconnects: 0,
        connect_errors: 0,
        play: crate::merge::play(group.iter().map(|i| &i.play)),
        driver: DriverHealth::default(),
        rolled_up: Some(RolledUp::default()),
        // One driver, one clock: every row of a run has the same origin.
        clock_start_ns: first
            .clock_start_ns
            .filter(|c| group.iter().all(|i| i.clock_start_ns == Some(*c))),
    };
    let mut cpu_ms = 0.0;
    for iv in group {
        // Every field, one rule each: a field added to DriverInterval stops here until it
        // has one.
        let DriverInterval {
            index: _,          // the first's
            end_ms: _,         // the last's
            duration_ms: dur,  // the span, first start to last end
            phase_index: _,    // one phase per group
            phase: _,          // the last's name of it
            late_starts,       // counter
            dropped_starts,    // counter
            in_flight,         // gauge: max
            players,           // gauge: max
            hammer_workers,    // gauge: max
            ops: _,            // merged per op above
            connects,          // counter
            reconnects,        // counter
            connect_errors,    // counter
            play: _,           // merged above (counters summed)
            driver: health,    // below
            rolled_up: _,      // below
            clock_start_ns: _, // the group's, when every row agrees (above)
        } = iv;
        acc.late_starts += late_starts;
        acc.dropped_starts += dropped_starts;
        acc.in_flight = acc.in_flight.max(*in_flight);
        acc.players = acc.players.max(*players);
        acc.hammer_workers = acc.hammer_workers.max(*hammer_workers);
        acc.connects += connects;
        acc.reconnects += reconnects;
        acc.connect_errors += connect_errors;
        let DriverHealth {
            cpu_percent, // average over the span, weighted by length
            cores,       // setting: last
            rss_bytes,   // gauge: max
            lag_p99_us,  // gauge: max (the worst interval's)
            lag_max_us,  // gauge: max
            saturated,   // any, and counted in rolled_up
        } = health;
        cpu_ms += cpu_percent * *dur as f64;
        acc.driver.cores = *cores;
        acc.driver.rss_bytes = acc.driver.rss_bytes.max(*rss_bytes);
        acc.driver.lag_p99_us = acc.driver.lag_p99_us.max(*lag_p99_us);
        acc.driver.lag_max_us = acc.driver.lag_max_us.max(*lag_max_us);
        acc.driver.saturated |= saturated;
        let r = RolledUp::of_driver(iv);
        let total = acc.rolled_up.get_or_insert_default();
        total.intervals += r.intervals;
        total.saturated += r.saturated;
    }
    let summed: u64 = group.iter().map(|i| i.duration_ms).sum();
    acc.driver.cpu_percent = if summed > 0 {
        cpu_ms / summed as f64
    } else {
        0.0
    };
    Ok(acc)
}

/// Each op of the group: counts and outcomes summed, histograms merged exactly, the rate
/// over the merged span.
fn driver_ops(group: &[DriverInterval], duration_ms: u64) -> Result<Vec<IntervalOp>, RollupError> {
    let mut order: Vec<&str> = Vec::new();
    let mut by_op: BTreeMap<&str, Vec<&IntervalOp>> = BTreeMap::new();
    for o in group.iter().flat_map(|i| &i.ops) {
        if !by_op.contains_key(o.op.as_str()) {
            order.push(&o.op);
        }
        by_op.entry(&o.op).or_default().push(o);
    }
    let secs = duration_ms.max(1) as f64 / 1e3;
    order
        .into_iter()
        .map(|name| {
            let parts = &by_op[name];
            let mut h = new_histogram();
            let mut acc = IntervalOp {
                op: name.to_owned(),
                count: 0,
                rate: 0.0,
                latency: Default::default(),
                histogram: None,
                outcomes: BTreeMap::new(),
                statuses: BTreeMap::new(),
                // The slowest of the group's kept requests: the slowest of all of them.
                slowest: crate::merge::slowest(parts.iter().map(|o| o.slowest.as_slice())),
            };
            for o in parts {
                let IntervalOp {
                    op: _,      // the key
                    count,      // counter
                    rate: _,    // recomputed over the span
                    latency: _, // recomputed from the merged histogram
                    histogram,  // merged
                    outcomes,   // counters
                    statuses,   // counters
                    slowest: _, // the slowest of their union (above)
                } = o;
                acc.count += count;
                let part = histogram
                    .as_ref()
                    .ok_or_else(|| RollupError::NoHistogram(name.to_owned()))?;
                h.add(part.decode()?)
                    .expect("auto-resizing histograms always merge");
                for (k, v) in outcomes {
                    *acc.outcomes.entry(k.clone()).or_insert(0) += v;
                }
                for (k, v) in statuses {
                    *acc.statuses.entry(*k).or_insert(0) += v;
                }
            }
            acc.rate = acc.count as f64 / secs;
            acc.latency = latency(&h);
            acc.histogram = Some(LatencyHistogram::encode(&h));
            Ok(acc)
        })
        .collect()
}

/// Merges consecutive probe intervals (oldest first) into one.
pub fn probe(group: &[ProbeInterval]) -> Result<ProbeInterval, RollupError> {
    let last = group.last().ok_or(RollupError::Empty)?;
    if group.len() == 1 {
        return Ok(last.clone());
    }
    let mut acc = ProbeInterval {
        at_ns: last.at_ns,
        interval_ns: 0,
        containers: Vec::new(),
        pairs: Vec::new(),
        lost: 0,
        services: Vec::new(),
        rolled_up: Some(RolledUp::default()),
    };
    for iv in group {
        let ProbeInterval {
            at_ns: _,    // the last's
            interval_ns, // lengths add up
            containers,  // per container, below
            pairs,       // per pair, below
            lost,        // counter
            services,    // last known
            rolled_up: _,
        } = iv;
        acc.interval_ns += interval_ns;
        acc.lost += lost;
        if !services.is_empty() {
            acc.services = services.clone();
        }
        for c in containers {
            match acc
                .containers
                .iter_mut()
                .find(|a| a.container == c.container)
            {
                Some(a) => container(a, c),
                None => acc.containers.push(c.clone()),
            }
        }
        for p in pairs {
            match acc
                .pairs
                .iter_mut()
                .find(|a| a.container == p.container && a.remote == p.remote)
            {
                Some(a) => pair(a, p),
                None => acc.pairs.push(p.clone()),
            }
        }
        acc.rolled_up.get_or_insert_default().intervals += RolledUp::of_probe(iv).intervals;
    }
    Ok(acc)
}

fn container(acc: &mut ContainerInterval, c: &ContainerInterval) {
    let ContainerInterval {
        container: _, // the key
        counts,       // counters
        cpu,
        sockets,
        started_ns, // the first known
        ended_ns,   // the last known
        waits,
    } = c;
    for (a, b) in acc.counts.0.iter_mut().zip(counts.0) {
        *a += b;
    }
    acc.started_ns = acc.started_ns.or(*started_ns);
    if ended_ns.is_some() {
        acc.ended_ns = *ended_ns;
    }
    cpu_cell(&mut acc.cpu, cpu);
    socket_cell(&mut acc.sockets, sockets);
    container_waits(&mut acc.waits, waits);
}

/// A measured cell absorbs a later measured one; an unavailable one is replaced by a later
/// measurement, and a measured one keeps its numbers over a later gap (the report's peaks and
/// sums are over the measured intervals alone).
fn cpu_cell(acc: &mut CpuCell, c: &CpuCell) {
    match (&mut *acc, c) {
        (CpuCell::Measured(a), CpuCell::Measured(b)) => cpu(a, b),
        (CpuCell::Unavailable { .. }, _) => *acc = c.clone(),
        (CpuCell::Measured(_), CpuCell::Unavailable { .. }) => {}
    }
}

fn cpu(acc: &mut CpuInterval, c: &CpuInterval) {
    let CpuInterval {
        at_ns,               // the last's
        interval_ns,         // lengths add up
        polls,               // counter
        usage_ns,            // counter
        cpu_cores: _,        // recomputed: usage over length
        user_cores,          // average, weighted by length
        system_cores,        // average, weighted by length
        burst_cores,         // gauge: max, with its window
        burst_window_ns,     // the busiest window's
        burst_at_ns,         // the busiest window's
        sustained_cores,     // gauge: max, with its window
        sustained_window_ns, // the highest's
        throttle,
        memory,
    } = c;
    let (a, b) = (acc.interval_ns as f64, *interval_ns as f64);
    let weighted = |x: f64, y: f64| {
        if a + b > 0.0 {
            (x * a + y * b) / (a + b)
        } else {
            y
        }
    };
    acc.user_cores = weighted(acc.user_cores, *user_cores);
    acc.system_cores = weighted(acc.system_cores, *system_cores);
    acc.at_ns = *at_ns;
    acc.interval_ns += interval_ns;
    acc.polls += polls;
    acc.usage_ns += usage_ns;
    acc.cpu_cores = if acc.interval_ns > 0 {
        acc.usage_ns as f64 / acc.interval_ns as f64
    } else {
        0.0
    };
    if *burst_cores > acc.burst_cores {
        acc.burst_cores = *burst_cores;
        acc.burst_window_ns = *burst_window_ns;
        acc.burst_at_ns = *burst_at_ns;
    }
    if *sustained_cores > acc.sustained_cores {
        acc.sustained_cores = *sustained_cores;
        acc.sustained_window_ns = *sustained_window_ns;
    }
    match (&mut acc.throttle, throttle) {
        (
            Throttling::Measured {
                nr_periods: ap,
                nr_throttled: at,
                throttled_ns: ans,
                throttled_share: ashare,
                quota_cores: aq,
                quota_us: aqu,
                period_us: apu,
            },
            Throttling::Measured {
                nr_periods,         // counter
                nr_throttled,       // counter
                throttled_ns,       // counter
                throttled_share: _, // recomputed
                quota_cores,        // setting: last
                quota_us,           // setting: last
                period_us,          // setting: last
            },
        ) => {
            *ap += nr_periods;
            *at += nr_throttled;
            *ans += throttled_ns;
            *ashare = if *ap > 0 {
                *at as f64 / *ap as f64
            } else {
                0.0
            };
            *aq = *quota_cores;
            *aqu = *quota_us;
            *apu = *period_us;
        }
        (Throttling::Unavailable { .. }, t) => acc.throttle = t.clone(),
        (Throttling::Measured { .. }, Throttling::Unavailable { .. }) => {}
    }
    match (&mut acc.memory, memory) {
        (
            Memory::Measured {
                current_bytes: ac,
                peak_bytes: ap,
                working_set_bytes: aw,
            },
            Memory::Measured {
                current_bytes,     // gauge: max
                peak_bytes,        // gauge: max
                working_set_bytes, // gauge: max
            },
        ) => {
            *ac = (*ac).max(*current_bytes);
            *ap = max_opt(*ap, *peak_bytes);
            *aw = max_opt(*aw, *working_set_bytes);
        }
        (Memory::Unavailable { .. }, m) => acc.memory = m.clone(),
        (Memory::Measured { .. }, Memory::Unavailable { .. }) => {}
    }
}

fn max_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// TIME_WAIT and its baseline stay a pair from one interval: the one where this run's
/// TIME_WAIT (the gauge less the baseline) peaked, which is what the report reads.
fn time_wait_peak(acc: (&mut u64, &mut u64), tw: u64, baseline: u64) {
    if tw.saturating_sub(baseline) > acc.0.saturating_sub(*acc.1) {
        *acc.0 = tw;
        *acc.1 = baseline;
    }
}

fn socket_cell(acc: &mut SocketCell, c: &SocketCell) {
    match (&mut *acc, c) {
        (
            SocketCell::Measured {
                established: ae,
                syn_sent: asy,
                time_wait: atw,
                time_wait_baseline: ab,
                timewait_sockets: ats,
                min_headroom: ah,
                port_range: apr,
                listen_overflows: alo,
                listen_drops: ald,
                inbound: ai,
            },
            SocketCell::Measured {
                established,        // gauge: max
                syn_sent,           // gauge: max
                time_wait,          // gauge: at the peak of this run's TIME_WAIT
                time_wait_baseline, // with it
                timewait_sockets,   // gauge: max
                min_headroom,       // gauge: min
                port_range,         // setting: last
                listen_overflows,   // counter
                listen_drops,       // counter
                inbound,            // per local port, below
            },
        ) => {
            *ae = (*ae).max(*established);
            *asy = (*asy).max(*syn_sent);
            time_wait_peak((atw, ab), *time_wait, *time_wait_baseline);
            *ats = (*ats).max(*timewait_sockets);
            *ah = min_opt(*ah, *min_headroom);
            *apr = *port_range;
            *alo += listen_overflows;
            *ald += listen_drops;
            for i in inbound {
                match ai.iter_mut().find(|a| a.local_port == i.local_port) {
                    Some(a) => inbound_cell(a, i),
                    None => ai.push(i.clone()),
                }
            }
        }
        (SocketCell::Unavailable { .. }, _) => *acc = c.clone(),
        (SocketCell::Measured { .. }, SocketCell::Unavailable { .. }) => {}
    }
}

fn inbound_cell(acc: &mut InboundCell, c: &InboundCell) {
    let InboundCell {
        local_port: _,      // the key
        established,        // gauge: max
        time_wait,          // gauge: at this run's peak
        time_wait_baseline, // with it
    } = c;
    acc.established = acc.established.max(*established);
    time_wait_peak(
        (&mut acc.time_wait, &mut acc.time_wait_baseline),
        *time_wait,
        *time_wait_baseline,
    );
}

fn pair(acc: &mut PairInterval, p: &PairInterval) {
    let PairInterval {
        container: _, // the key
        remote: _,    // the key
        remote_container,
        connects,                // counter
        established,             // counter (handshakes completed)
        time_wait_entries,       // counter
        closed,                  // counter
        connect_latency_us: _,   // recomputed from the merged histogram
        lifetime_ms: _,          // recomputed from the merged histogram
        connect_latency_buckets, // histogram: merged
        lifetime_buckets,        // histogram: merged
        gauges,
        waits,
    } = p;
    if remote_container.is_some() {
        acc.remote_container = remote_container.clone();
    }
    acc.connects += connects;
    acc.established += established;
    acc.time_wait_entries += time_wait_entries;
    acc.closed += closed;
    acc.connect_latency_buckets.add(connect_latency_buckets);
    acc.lifetime_buckets.add(lifetime_buckets);
    acc.connect_latency_us = Log2Summary::of(&acc.connect_latency_buckets);
    acc.lifetime_ms = Log2Summary::of(&acc.lifetime_buckets);
    match (&mut acc.gauges, gauges) {
        (Some(a), Some(g)) => pair_gauges(a, g),
        (None, Some(g)) => acc.gauges = Some(g.clone()),
        (_, None) => {}
    }
    pair_waits(&mut acc.waits, waits);
}

fn pair_gauges(acc: &mut PairGauges, g: &PairGauges) {
    let PairGauges {
        established,        // gauge: max
        time_wait,          // gauge: at this run's peak
        time_wait_baseline, // with it
        ports_in_use,       // gauge: max
        headroom,           // gauge: min
        srtt_p50_us,        // sample: the last taken
        srtt_max_us,        // sample: the last taken, with it
        srtt_log2,          // sample: the last taken, with it
    } = g;
    acc.established = acc.established.max(*established);
    time_wait_peak(
        (&mut acc.time_wait, &mut acc.time_wait_baseline),
        *time_wait,
        *time_wait_baseline,
    );
    acc.ports_in_use = acc.ports_in_use.max(*ports_in_use);
    acc.headroom = acc.headroom.min(*headroom);
    if srtt_p50_us.is_some() {
        acc.srtt_p50_us = *srtt_p50_us;
        acc.srtt_max_us = *srtt_max_us;
        acc.srtt_log2 = *srtt_log2;
    }
}

/// A container's waits: the run-queue histogram merged, stall and kill counters summed, the
/// listeners' and conntrack's gauges at their peak. The sub-second windows of the merged
/// intervals become one window over them all (sums kept): a rolled-up stretch ties a slow
/// request to its waits at the stretch's resolution, which the report states.
fn container_waits(acc: &mut ContainerWaits, w: &ContainerWaits) {
    let ContainerWaits {
        runq,
        windows,
        psi,
        oom,
        listeners,
        conntrack,
    } = w;
    match (&mut acc.runq, runq) {
        (
            RunqCell::Measured {
                count: ac,
                total_ns: at,
                delay_us: ad,
                delay_buckets: ab,
            },
            RunqCell::Measured {
                count,         // counter
                total_ns,      // counter
                delay_us: _,   // recomputed from the merged histogram
                delay_buckets, // histogram: merged
            },
        ) => {
            *ac += count;
            *at += total_ns;
            // A histogram describes the merged waits only when every part timed its own.
            match (ab.as_mut(), delay_buckets) {
                (Some(ab), Some(b)) => {
                    ab.add(b);
                    *ad = Some(Log2Summary::of(ab));
                }
                _ => {
                    *ab = None;
                    *ad = None;
                }
            }
        }
        (RunqCell::Unavailable { .. }, r) => acc.runq = r.clone(),
        (RunqCell::Measured { .. }, RunqCell::Unavailable { .. }) => {}
    }
    acc.windows.extend_from_slice(windows);
    coarsen_windows(&mut acc.windows);
    match (&mut acc.psi, psi) {
        (
            PsiCell::Measured {
                cpu: ac,
                memory: am,
                io: ai,
            },
            PsiCell::Measured { cpu, memory, io }, // counters
        ) => {
            pressure(ac, cpu);
            pressure(am, memory);
            pressure(ai, io);
        }
        (PsiCell::Unavailable { .. }, p) => acc.psi = p.clone(),
        (PsiCell::Measured { .. }, PsiCell::Unavailable { .. }) => {}
    }
    match (&mut acc.oom, oom) {
        (OomCell::Measured { oom_kills: a }, OomCell::Measured { oom_kills }) => *a += oom_kills,
        (OomCell::Unavailable { .. }, o) => acc.oom = o.clone(),
        (OomCell::Measured { .. }, OomCell::Unavailable { .. }) => {}
    }
    match (&mut acc.listeners, listeners) {
        (ListenerCell::Measured { ports: ap }, ListenerCell::Measured { ports }) => {
            for p in ports {
                match ap.iter_mut().find(|a| a.local_port == p.local_port) {
                    Some(a) => {
                        a.sockets = a.sockets.max(p.sockets); // gauge: max
                        a.drops += p.drops; // counter
                        a.accept_queue = a.accept_queue.max(p.accept_queue); // gauge: max
                        a.backlog = p.backlog; // setting: last
                    }
                    None => ap.push(p.clone()),
                }
            }
            ap.sort_by_key(|p| p.local_port);
        }
        (ListenerCell::Unavailable { .. }, l) => acc.listeners = l.clone(),
        (ListenerCell::Measured { .. }, ListenerCell::Unavailable { .. }) => {}
    }
    match (&mut acc.conntrack, conntrack) {
        (
            ConntrackCell::Measured {
                entries: ae,
                max: am,
                drop: ad,
                early_drop: aed,
                insert_failed: aif,
            },
            ConntrackCell::Measured {
                entries,       // gauge: max
                max,           // setting: last
                drop,          // counter
                early_drop,    // counter
                insert_failed, // counter
            },
        ) => {
            *ae = (*ae).max(*entries);
            *am = *max;
            *ad = sum_opt(*ad, *drop);
            *aed = sum_opt(*aed, *early_drop);
            *aif = sum_opt(*aif, *insert_failed);
        }
        (ConntrackCell::Unavailable { .. }, c) => acc.conntrack = c.clone(),
        (ConntrackCell::Measured { .. }, ConntrackCell::Unavailable { .. }) => {}
    }
}

/// The windows of a rolled-up row as one window from the first start to the last end, sums
/// kept (`None` only where no window measured it).
fn coarsen_windows(ws: &mut Vec<WaitWindow>) {
    let Some(first) = ws.first().copied() else {
        return;
    };
    let one = ws[1..].iter().fold(first, |a, w| WaitWindow {
        start_ns: a.start_ns.min(w.start_ns),
        end_ns: a.end_ns.max(w.end_ns),
        runq_ns: sum_opt(a.runq_ns, w.runq_ns),
        runq_count: a.runq_count + w.runq_count,
        throttled_ns: sum_opt(a.throttled_ns, w.throttled_ns),
    });
    ws.clear();
    ws.push(one);
}

fn pressure(acc: &mut Option<Pressure>, p: &Option<Pressure>) {
    match (acc.as_mut(), p) {
        (Some(a), Some(p)) => {
            a.some_us += p.some_us;
            a.full_us = sum_opt(a.full_us, p.full_us);
        }
        (None, Some(p)) => *acc = Some(*p),
        (_, None) => {}
    }
}

fn sum_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    }
}

/// A pair's retransmits: counters summed, their 100 ms windows as one window over the
/// merged intervals (see [`coarsen_windows`]).
fn pair_waits(acc: &mut PairWaits, w: &PairWaits) {
    let PairWaits {
        retrans_segs, // counter
        syn_retrans,  // counter
        windows,
    } = w;
    acc.retrans_segs += retrans_segs;
    acc.syn_retrans += syn_retrans;
    acc.windows.extend_from_slice(windows);
    let Some(first) = acc.windows.first().copied() else {
        return;
    };
    let one = acc.windows[1..]
        .iter()
        .fold(first, |a, w| RetransWindowCell {
            start_ns: a.start_ns.min(w.start_ns),
            end_ns: a.end_ns.max(w.end_ns),
            retrans_segs: a.retrans_segs + w.retrans_segs,
            syn_retrans: a.syn_retrans + w.syn_retrans,
        });
    acc.windows = vec![one];
}
