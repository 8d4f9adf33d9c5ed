//! The timeline: one labelled point per driver interval, at its real start and length, with
//! the probe interval that overlaps it most. Rates are over each interval's own length (a
//! run's last interval is often a fraction of a second).

use herd_model::Counter;
use herd_model::{CPU_SATURATED_SHARE, LAG_SATURATED_US};
use herd_model::{CpuCell, DriverInterval, ProbeInterval, SocketCell, Throttling};
use serde::{Deserialize, Serialize};

use super::ops::Split;
use herd_model::RunData;

/// One op in one interval.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimelineOp {
    /// The op (`hammer:<op>` for the hammer's).
    pub op: String,
    /// Ops per second.
    pub req_per_s: f64,
    /// Median latency in the interval, µs.
    pub p50_us: u64,
    /// 99th percentile in the interval, µs.
    pub p99_us: u64,
    /// ok / expected / errors.
    pub split: Split,
}

/// One container in one interval, as the probe saw it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimelineContainer {
    /// The container.
    pub container: String,
    /// New TCP connections per second.
    pub connects_per_s: f64,
    /// Sockets entering TIME_WAIT per second.
    pub time_wait_entries_per_s: f64,
    /// The TIME_WAIT gauge of its network namespace at the interval's end.
    pub time_wait: Option<u64>,
    /// The namespace's usable ephemeral ports: where TIME_WAIT toward one destination runs
    /// out of ports.
    pub port_range: Option<u64>,
    /// CPU used, cores.
    pub cpu_cores: Option<f64>,
    /// Busiest 100 ms window, cores.
    pub cpu_burst_cores: Option<f64>,
    /// The CPU quota, cores (None: no quota, or not readable).
    pub cpu_quota_cores: Option<f64>,
    /// Share of CFS periods throttled.
    pub throttled_share: Option<f64>,
}

/// Why the driver limited an interval, if it did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DriverPoint {
    /// The driver's CPU, percent of one core.
    pub cpu_percent: f64,
    /// The cores it may use.
    pub cores: usize,
    /// 99th percentile of its scheduler's lateness, µs.
    pub lag_p99_us: u64,
    /// What saturated it (`CPU 187 % of 2 cores`, `scheduler lag p99 15ms`), None when it
    /// had headroom.
    pub saturated: Option<String>,
}

/// One timeline point.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimelinePoint {
    /// The interval's start, seconds since the run started.
    pub start_s: f64,
    /// Its length, seconds.
    pub duration_s: f64,
    /// The index of the phase running at its end (0-based), None between phases.
    pub phase_index: Option<usize>,
    /// That phase's name (`step 2`, `rate 1`, …).
    #[serde(default)]
    pub phase: Option<String>,
    /// Players alive at its end (the offered load of a closed model).
    pub players: usize,
    /// Requests per second, all ops.
    pub req_per_s: f64,
    /// ok / expected / errors, all ops.
    pub split: Split,
    /// Per op.
    pub ops: Vec<TimelineOp>,
    /// Stream and long-poll events per second, all ops.
    #[serde(default)]
    pub stream_events_per_s: f64,
    /// Open-model starts in the interval that slipped behind schedule.
    #[serde(default)]
    pub late_starts: u64,
    /// Open-model arrivals dropped at the in-flight bound.
    #[serde(default)]
    pub dropped_starts: u64,
    /// The driver's own health.
    pub driver: DriverPoint,
    /// Per container, from the probe interval overlapping this one most (empty without the
    /// probe).
    pub containers: Vec<TimelineContainer>,
}

impl TimelinePoint {
    /// The interval's end, seconds since the start.
    pub fn end_s(&self) -> f64 {
        self.start_s + self.duration_s
    }
}

fn secs(iv: &ProbeInterval) -> f64 {
    iv.interval_ns.max(1) as f64 / 1e9
}

/// What saturated the driver in `iv`, in words, or None.
fn saturation(iv: &DriverInterval) -> Option<String> {
    let d = &iv.driver;
    if !d.saturated {
        return None;
    }
    let mut why = Vec::new();
    if d.cpu_percent >= CPU_SATURATED_SHARE * 100.0 * d.cores.max(1) as f64 {
        why.push(format!("CPU {:.0} % of {} cores", d.cpu_percent, d.cores));
    }
    if d.lag_p99_us >= LAG_SATURATED_US {
        why.push(format!(
            "scheduler lag p99 {}",
            crate::units::latency(d.lag_p99_us)
        ));
    }
    if why.is_empty() {
        why.push("flagged by the driver".into());
    }
    Some(why.join(", "))
}

fn container(p: &ProbeInterval, c: &herd_model::ContainerInterval) -> TimelineContainer {
    let s = secs(p);
    let (cpu, burst, quota, share) = match &c.cpu {
        CpuCell::Measured(ci) => {
            let (q, sh) = match &ci.throttle {
                Throttling::Measured {
                    quota_cores,
                    throttled_share,
                    ..
                } => (*quota_cores, Some(*throttled_share)),
                Throttling::Unavailable { .. } => (None, None),
            };
            (Some(ci.cpu_cores), Some(ci.burst_cores), q, sh)
        }
        CpuCell::Unavailable { .. } => (None, None, None, None),
    };
    let (tw, range) = match &c.sockets {
        SocketCell::Measured { port_range, .. } => (c.sockets.time_wait_run(), Some(*port_range)),
        SocketCell::Unavailable { .. } => (None, None),
    };
    TimelineContainer {
        container: c.container.clone(),
        connects_per_s: c.counts.get(Counter::Connects) as f64 / s,
        time_wait_entries_per_s: c.counts.get(Counter::TimeWaitEntries) as f64 / s,
        time_wait: tw,
        port_range: range,
        cpu_cores: cpu,
        cpu_burst_cores: burst,
        cpu_quota_cores: quota,
        throttled_share: share,
    }
}

/// The probe interval that overlaps `[start, end)` (ns, monotonic) most. `probe` is in time
/// order: the search starts at the first interval ending after `start` and stops at the
/// first one starting at or after `end`, so a report's timeline costs n log n, not n².
fn overlapping(probe: &[ProbeInterval], start: u64, end: u64) -> Option<&ProbeInterval> {
    let from = probe.partition_point(|p| p.at_ns <= start);
    probe[from..]
        .iter()
        .take_while(|p| p.at_ns.saturating_sub(p.interval_ns) < end)
        .map(|p| {
            let (ps, pe) = (p.at_ns.saturating_sub(p.interval_ns), p.at_ns);
            (p, pe.min(end).saturating_sub(ps.max(start)))
        })
        .filter(|(_, overlap)| *overlap > 0)
        .max_by_key(|(_, overlap)| *overlap)
        .map(|(p, _)| p)
}

/// The most points a timeline has: a longer run's rows are merged (exactly, as the store's
/// roll-ups merge them) a few at a time, so charts and the JSON stay of bounded size.
pub const MAX_POINTS: usize = 2_000;

/// One point per driver interval (per row of the store: rolled-up rows stand for several),
/// or per few of them when there are more than [`MAX_POINTS`].
pub(crate) fn points(d: &RunData) -> Vec<TimelinePoint> {
    if d.driver.len() <= MAX_POINTS {
        return points_of(d, &d.driver, &d.probe);
    }
    let k = d.driver.len().div_ceil(MAX_POINTS);
    let mut groups: Vec<Vec<DriverInterval>> = Vec::new();
    for iv in &d.driver {
        match groups.last_mut() {
            Some(g) if g.len() < k && g[0].phase_index == iv.phase_index => g.push(iv.clone()),
            _ => groups.push(vec![iv.clone()]),
        }
    }
    let mono0 = d.meta.mono_start_ns as u64;
    let mut driver = Vec::with_capacity(groups.len());
    let mut probe = Vec::with_capacity(groups.len());
    let mut next_probe = 0;
    for g in groups {
        let merged = herd_model::rollup::driver(&g)
            .unwrap_or_else(|_| g.last().expect("groups are never empty").clone());
        // The probe rows that end within the merged point, merged alike.
        let end_ns = mono0 + merged.end_ms * 1_000_000;
        let from = next_probe;
        while next_probe < d.probe.len() && d.probe[next_probe].at_ns <= end_ns {
            next_probe += 1;
        }
        if let Ok(p) = herd_model::rollup::probe(&d.probe[from..next_probe]) {
            probe.push(p);
        }
        driver.push(merged);
    }
    points_of(d, &driver, &probe)
}

fn points_of(
    d: &RunData,
    driver: &[DriverInterval],
    probe: &[ProbeInterval],
) -> Vec<TimelinePoint> {
    let mono0 = d.meta.mono_start_ns as u64;
    driver
        .iter()
        .map(|iv| {
            let secs = (iv.duration_ms.max(1) as f64) / 1e3;
            let start_ms = iv.end_ms.saturating_sub(iv.duration_ms);
            let ops: Vec<TimelineOp> = iv
                .ops
                .iter()
                .map(|o| {
                    let base = o.op.strip_prefix("hammer:").unwrap_or(&o.op);
                    let expected = d.expected.get(base).map_or(&[][..], Vec::as_slice);
                    TimelineOp {
                        op: o.op.clone(),
                        req_per_s: o.count as f64 / secs,
                        p50_us: o.latency.p50_us,
                        p99_us: o.latency.p99_us,
                        split: Split::of(o.outcomes.iter().map(|(k, n)| (k, *n)), expected),
                    }
                })
                .collect();
            let mut split = Split::default();
            for o in &ops {
                split.add(o.split);
            }
            // The driver's own clock start when it recorded one: the run's is read before the
            // probe loads, a few hundred ms earlier.
            let origin = iv.clock_start_ns.unwrap_or(mono0);
            let probe = overlapping(
                probe,
                origin + start_ms * 1_000_000,
                origin + iv.end_ms * 1_000_000,
            );
            TimelinePoint {
                start_s: start_ms as f64 / 1e3,
                duration_s: iv.duration_ms as f64 / 1e3,
                phase_index: iv.phase_index,
                phase: iv.phase.clone(),
                players: iv.players,
                // A fold from +0: `sum` of no f64 is -0.0, which prints as "-0".
                req_per_s: ops.iter().fold(0.0, |a, o| a + o.req_per_s),
                split,
                stream_events_per_s: iv.play.streams.iter().map(|s| s.events).sum::<u64>() as f64
                    / secs,
                late_starts: iv.late_starts,
                dropped_starts: iv.dropped_starts,
                driver: DriverPoint {
                    cpu_percent: iv.driver.cpu_percent,
                    cores: iv.driver.cores,
                    lag_p99_us: iv.driver.lag_p99_us,
                    saturated: saturation(iv),
                },
                containers: probe
                    .map(|p| p.containers.iter().map(|c| container(p, c)).collect())
                    .unwrap_or_default(),
                ops,
            }
        })
        .collect()
}
