//! CPU contention without throttling: a container whose threads are runnable but wait for a
//! CPU while it is under its quota (or has none) — a noisy neighbour, an oversubscribed host,
//! the load driver on the same cores. The throttling findings cannot see it, and adding cores
//! (or a larger quota) is exactly what helps, so `latency_not_cpu` must not fire over it.

use std::collections::BTreeMap;

use herd_model::waits::RunqCell;
use herd_model::{CpuCell, Log2Hist, RunData, Throttling};

use super::Finding;
use super::waits::{At, load, secs, span};
use crate::units::bound;

/// Thread-time waiting for a CPU per second of wall time from which a container contends:
/// 0.10 is a tenth of a thread always waiting.
const MIN_SHARE: f64 = 0.10;

/// The p99 of one wait (its log2 bucket's upper bound, µs) from which waits are long enough
/// to show in a request's latency: 4096 is waits over 2 ms.
const MIN_P99_LE_US: u64 = 4096;

/// Thread-time waiting per second of wall time from which a container contends whatever
/// the length of each wait: half a thread always waiting. Many short waits (a pipeline of
/// threads handing work to each other on a busy CPU) add up inside one request as surely as
/// a few long ones.
const MANY_SHORT_SHARE: f64 = 0.5;

/// An interval throttled in this share of its CFS periods or more is the quota's: its
/// run-queue delay counts for the throttling findings, not for contention.
const THROTTLED: f64 = 0.05;

/// The row of herd's own threads (the driver), as the probe names it.
const OWN_ROW: &str = "herd";

/// The root cgroup's row: everything outside the named containers.
const HOST: &str = "host";

/// Other rows whose CPU a finding names, at most.
const OTHERS: usize = 3;

/// One container's run-queue delay in one phase, over its intervals that were not throttled.
pub(super) struct Contention {
    /// The container.
    pub container: String,
    /// The phase.
    pub phase: String,
    /// First and last second of the intervals counted.
    pub from_s: f64,
    /// End of the last interval counted.
    pub to_s: f64,
    /// Wall time of the intervals counted, s.
    pub wall_s: f64,
    /// Intervals counted.
    pub intervals: usize,
    /// Intervals left out because the container was throttled in them.
    pub throttled: usize,
    /// Run-queue delay summed over them, ns.
    pub total_ns: u64,
    /// Waits that ended in them.
    pub waits: u64,
    /// One wait's histogram, µs; `None` when an interval counted had none (the waits were
    /// counted from the scheduler's totals, not timed one by one).
    pub hist: Option<Log2Hist>,
    /// The container's CPU quota (cores), when it had one.
    pub quota: Option<f64>,
    /// Other rows' CPU over the same intervals: core-seconds by name.
    pub others: BTreeMap<String, f64>,
}

impl Contention {
    /// Thread-seconds waiting per second of wall time.
    pub fn share(&self) -> f64 {
        self.total_ns as f64 / 1e9 / self.wall_s.max(1e-9)
    }

    /// One wait's p99, µs (bucket upper bound), when the waits were timed one by one.
    pub fn p99_le(&self) -> Option<u64> {
        self.hist.as_ref().and_then(|h| h.quantile_le(990))
    }

    /// The mean wait, µs.
    pub fn mean_us(&self) -> f64 {
        self.total_ns as f64 / 1e3 / self.waits.max(1) as f64
    }

    /// True when it meets the thresholds. Without a per-wait histogram the waits are long
    /// when their mean is over 2 ms (which puts the p99 past it too).
    pub fn contended(&self) -> bool {
        let long = match self.p99_le() {
            Some(p99) => p99 >= MIN_P99_LE_US,
            None => self.mean_us() >= MIN_P99_LE_US as f64 / 2.0,
        };
        self.wall_s >= 1.0
            && self.share() >= MIN_SHARE
            && (long || self.share() >= MANY_SHORT_SHARE)
    }

    /// One wait's length in words: p50 and p99 when timed, else the mean.
    fn wait_words(&self) -> String {
        match &self.hist {
            Some(h) => format!(
                "p50 {}, p99 {}",
                bound(h.quantile_le(500).unwrap_or(0), 1),
                bound(self.p99_le().unwrap_or(0), 1)
            ),
            None => format!(
                "mean {} (no per-wait p99 without --runq-waits)",
                mean_words(self.mean_us())
            ),
        }
    }

    /// The quota it was under, in words.
    fn quota_words(&self) -> String {
        match self.quota {
            Some(q) => format!(
                "while under its {q:.2}-core quota (throttled in under {:.0} % of periods)",
                THROTTLED * 100.0
            ),
            None => "with no CPU quota".into(),
        }
    }

    /// The evidence row of this phase.
    fn row(&self) -> String {
        let n = self.waits;
        format!(
            "{} in {}, {} ({} s, {} intervals{}): run-queue delay {} in {n} waits, {}, {}",
            self.container,
            self.phase,
            span(self.from_s, self.to_s),
            fmt1(self.wall_s),
            self.intervals,
            if self.throttled > 0 {
                format!(", {} throttled intervals left out", self.throttled)
            } else {
                String::new()
            },
            secs(self.total_ns as f64 / 1e9),
            self.wait_words(),
            self.quota_words()
        )
    }

    /// The busiest other rows in the same intervals: (name, mean cores), busiest first.
    fn busiest_others(&self) -> Vec<(String, f64)> {
        let mut v: Vec<(String, f64)> = self
            .others
            .iter()
            .map(|(k, cs)| (k.clone(), cs / self.wall_s.max(1e-9)))
            .filter(|(_, c)| *c >= 0.05)
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        v.truncate(OTHERS);
        v
    }
}

fn fmt1(v: f64) -> String {
    format!("{v:.1}")
}

/// A mean wait in µs, in words (µs below a millisecond, else ms).
fn mean_words(us: f64) -> String {
    if us < 1000.0 {
        format!("{us:.0} µs")
    } else {
        format!("{:.1} ms", us / 1000.0)
    }
}

/// The container's throttled share and quota in an interval: (share, quota cores).
fn throttle(c: &herd_model::ContainerInterval) -> (f64, Option<f64>) {
    match &c.cpu {
        CpuCell::Measured(ci) => match &ci.throttle {
            Throttling::Measured {
                throttled_share,
                quota_cores,
                ..
            } => (*throttled_share, *quota_cores),
            Throttling::Unavailable { .. } => (0.0, None),
        },
        CpuCell::Unavailable { .. } => (0.0, None),
    }
}

/// Run-queue delay per (phase, container) over the load's intervals in which the container
/// was not throttled; the host row is left out (it is not a container one can size).
pub(super) fn per_phase(d: &RunData) -> Vec<Contention> {
    let ats = load(d);
    let mut out: Vec<Contention> = Vec::new();
    for a in &ats {
        for c in &a.iv.containers {
            let RunqCell::Measured {
                count,
                total_ns,
                delay_buckets,
                ..
            } = &c.waits.runq
            else {
                continue;
            };
            if c.container == HOST {
                continue;
            }
            let i = match out
                .iter()
                .position(|x| x.container == c.container && x.phase == a.phase)
            {
                Some(i) => i,
                None => {
                    out.push(Contention {
                        container: c.container.clone(),
                        phase: a.phase.clone(),
                        from_s: a.start_s,
                        to_s: a.end_s,
                        wall_s: 0.0,
                        intervals: 0,
                        throttled: 0,
                        total_ns: 0,
                        waits: 0,
                        hist: Some(Log2Hist::default()),
                        quota: None,
                        others: BTreeMap::new(),
                    });
                    out.len() - 1
                }
            };
            let x = &mut out[i];
            let (share, quota) = throttle(c);
            if share >= THROTTLED {
                x.throttled += 1;
                continue;
            }
            add(
                x,
                a,
                c.container.as_str(),
                (*count, *total_ns),
                delay_buckets.as_ref(),
                quota,
            );
        }
    }
    out.retain(|x| x.intervals > 0);
    out
}

fn add(
    x: &mut Contention,
    a: &At<'_>,
    name: &str,
    (waits, total): (u64, u64),
    h: Option<&Log2Hist>,
    q: Option<f64>,
) {
    if x.intervals == 0 {
        x.from_s = a.start_s;
    }
    x.to_s = a.end_s;
    x.wall_s += a.secs();
    x.intervals += 1;
    x.total_ns += total;
    x.waits += waits;
    match (x.hist.as_mut(), h) {
        (Some(acc), Some(h)) => acc.add(h),
        _ => x.hist = None,
    }
    x.quota = x.quota.or(q);
    for o in &a.iv.containers {
        // herd's own row holds only its threads' waits: its CPU is in its cgroup's row.
        if o.container == name || o.container == OWN_ROW {
            continue;
        }
        if let CpuCell::Measured(ci) = &o.cpu {
            *x.others.entry(o.container.clone()).or_default() += ci.cpu_cores * a.secs();
        }
    }
}

/// The contention in `phase` that explains latency there, if any: a container (herd's own
/// threads included) whose threads waited for a CPU past the thresholds.
pub(super) fn in_phase(d: &RunData, phase: &str) -> Option<Contention> {
    per_phase(d)
        .into_iter()
        .filter(|x| x.phase == phase && x.contended())
        .max_by(|a, b| a.share().total_cmp(&b.share()))
}

/// A container whose threads waited for a CPU — at least a tenth of a thread waiting all
/// along, single waits over 2 ms at p99 — in intervals it was not throttled in: named with
/// its worst phase, the delay's total and p99, and who else used the CPU meanwhile.
pub fn cpu_contention(d: &RunData) -> Vec<Finding> {
    let all = per_phase(d);
    let mut names: Vec<&str> = all.iter().map(|x| x.container.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let mut found: Vec<(f64, Finding)> = Vec::new();
    for name in names {
        let phases: Vec<&Contention> = all
            .iter()
            .filter(|x| x.container == name && x.contended())
            .collect();
        let Some(worst) = phases.iter().max_by(|a, b| a.share().total_cmp(&b.share())) else {
            continue;
        };
        let total = worst.total_ns as f64 / 1e9;
        let p99 = worst.p99_le();
        let mut evidence: Vec<String> = vec![worst.row()];
        let others = worst.busiest_others();
        let others_words: Vec<String> = others
            .iter()
            .map(|(n, c)| format!("{n} {c:.2} cores"))
            .collect();
        if !others.is_empty() {
            evidence.push(format!(
                "meanwhile ({} in {}), mean CPU: {}",
                span(worst.from_s, worst.to_s),
                worst.phase,
                others_words.join(", ")
            ));
        }
        for p in phases.iter().filter(|p| p.phase != worst.phase).take(6) {
            evidence.push(p.row());
        }
        let title = format!(
            "{name}'s threads waited {} for a CPU over {} s of {} ({}) {}: one wait's {}{}",
            secs(total),
            fmt1(worst.wall_s),
            worst.phase,
            span(worst.from_s, worst.to_s),
            worst.quota_words(),
            match p99 {
                Some(p99) => format!("p99 {}", bound(p99, 1)),
                None => format!("mean {}", mean_words(worst.mean_us())),
            },
            if others_words.is_empty() {
                String::new()
            } else {
                format!("; meanwhile {}", others_words.join(", "))
            }
        );
        let detail = if name == OWN_ROW {
            "herd's own threads (the load driver) were runnable but waited for a CPU: every \
             latency it measured includes that wait, so part of what the report shows is the \
             harness. Give the driver cores of its own (or fewer players per process), or move \
             what competes with it elsewhere."
                .to_owned()
        } else {
            format!(
                "The threads were ready to run but no CPU was free, and the container was not \
                 held by its quota: the cores are shared with {}. Each wait sits inside the \
                 requests the container is serving. More cores (or fewer neighbours on these \
                 cores, or CPU pinning) help here; a larger quota alone does not.",
                if others.is_empty() {
                    "other work on the host".to_owned()
                } else {
                    others
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )
        };
        let mut f = Finding::new("cpu_contention", title, detail, evidence)
            .about(name)
            .in_phase(&worst.phase)
            .number("runq_total_s", total)
            .number("runq_mean_us", worst.mean_us())
            .number("runq_share", worst.share())
            .number("seconds", worst.wall_s);
        if let Some(q) = worst.quota {
            f = f.number("quota_cores", q);
        }
        if let Some(p99) = p99 {
            f = f.number("runq_p99_le_us", p99 as f64);
        }
        found.push((worst.share(), f));
    }
    // The most contended first.
    found.sort_by(|a, b| b.0.total_cmp(&a.0));
    found.into_iter().map(|(_, f)| f).collect()
}
