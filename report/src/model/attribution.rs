//! Slow requests tied to the kernel-side waits they were in flight during. The driver keeps,
//! per op and interval, its slowest requests with their start and latency
//! ([`herd_model::IntervalOp::slowest`]); the probe keeps, per container, 100 ms windows of
//! throttled time and run-queue delay, per pair 100 ms windows of retransmits, and per
//! listening port the drops of each interval. Both are on CLOCK_MONOTONIC, so a request and
//! a window overlap or they do not: for each op, of its kept requests slower than its
//! whole-run p99, the share that were in flight during a window of each wait on the request
//! path. Only overlap is claimed, at the windows' resolution: a request in flight during a
//! 100 ms window in which the gateway was throttled, not "throttled for 80 ms".

use std::collections::{BTreeMap, BTreeSet};

use herd_model::{
    CpuCell, RunData, Throttling,
    waits::{ListenerCell, RunqCell},
};
use serde::{Deserialize, Serialize};

use super::{Cell, OpTotal, PairRow};
use crate::units;

/// A window counts as run-queue delay when the container's threads waited for a CPU at
/// least this share of it, in percent, summed over its threads (5 ms of a 100 ms window):
/// enough to add milliseconds to a request served there, well above the microseconds of an
/// idle host's wake-ups.
pub const RUNQ_PERCENT: u64 = 5;

/// Most evidence windows listed per wait; the rest are counted.
pub const EVIDENCE_ROWS: usize = 10;

/// An op's slowest requests and the waits they were in flight during.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SlowRequests {
    /// The threshold: the op's whole-run p99, µs (from its merged histogram); requests
    /// slower than it are the ones attributed.
    pub over_us: u64,
    /// Requests of the op slower than the threshold, from its merged histogram.
    pub above: u64,
    /// Of those, the ones the driver kept (its slowest per op and interval) and this
    /// attributes: fewer than `above` when an interval had more than it keeps.
    pub kept: u64,
    /// The slowest kept request, µs.
    pub slowest_us: u64,
    /// Kept requests in flight during at least one window of the waits below.
    pub explained: u64,
    /// Which containers and pairs were searched: the request path, or every one the probe
    /// saw when the path is unknown (a run that did not finish).
    pub scope: String,
    /// One row per wait and where it was, most requests first (waits no kept request
    /// overlapped are left out).
    pub waits: Vec<SlowWait>,
}

/// A kind of kernel-side wait.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum WaitKind {
    /// CFS throttling of a container on the path (cpu.stat throttled time in the window).
    Throttled,
    /// Run-queue delay of a container on the path of at least [`RUNQ_PERCENT`] of the window.
    RunQueue,
    /// Data retransmits on a pair of the path.
    Retransmit,
    /// SYN retransmits (connects retried) on a pair of the path.
    SynRetransmit,
    /// Connections dropped by a listener on the path (accept queue full).
    ListenDrop,
}

/// The requests of one op in flight during one wait at one place.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SlowWait {
    /// The wait.
    pub kind: WaitKind,
    /// Where: a container, a pair `source → address (container)`, or a listener
    /// `container:port`.
    pub at: String,
    /// Kept requests in flight during at least one of its windows.
    pub requests: u64,
    /// `requests` over the kept requests, 0..1.
    pub share: f64,
    /// The longest of its windows, ms: the resolution of "in flight during" (the probe's
    /// 100 ms poll windows; a whole probe interval for listen drops and for rows recorded
    /// without windows).
    pub resolution_ms: u64,
    /// The finding in words: `Of game.state's 181 requests over 1.00s …`.
    pub sentence: String,
    /// The windows those requests overlapped, most requests first, at most
    /// [`EVIDENCE_ROWS`].
    pub evidence: Vec<WaitEvidence>,
    /// Windows with such requests beyond the listed ones.
    pub more_windows: u64,
}

/// One probe window and the slow requests in flight during it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WaitEvidence {
    /// Its start, seconds since the run's start.
    pub start_s: f64,
    /// Its end, seconds since the run's start.
    pub end_s: f64,
    /// What the probe measured in it: `throttled 38.2 ms`, `run-queue delay 12.0 ms`,
    /// `3 retransmits`, `2 SYN retransmits`, `5 listen drops`.
    pub what: String,
    /// Kept slow requests in flight during it.
    pub requests: u64,
}

/// One wait at one place, with its windows on CLOCK_MONOTONIC (ns).
struct Source {
    kind: WaitKind,
    at: String,
    /// (start, end, what).
    windows: Vec<(u64, u64, String)>,
}

impl Source {
    fn new(kind: WaitKind, at: String) -> Self {
        Self {
            kind,
            at,
            windows: Vec::new(),
        }
    }
}

fn ms(ns: u64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Where to look: the containers, the pairs (source, address) and the listeners
/// (container, port) of the request path, from the report's pair rows.
struct OnPath {
    containers: BTreeSet<String>,
    hops: BTreeSet<(String, String)>,
    listeners: BTreeSet<(String, u16)>,
}

/// The request path, or `None` when it is unknown (no pair has a churn ratio).
fn path(pairs: &[PairRow]) -> Option<OnPath> {
    let on: Vec<&PairRow> = pairs
        .iter()
        .filter(|r| match &r.churn_ratio {
            Cell::Value(_) => true,
            Cell::Missing(m) => m == super::pairs::NO_REQUESTS,
        })
        .collect();
    if on.is_empty() {
        return None;
    }
    let mut p = OnPath {
        containers: BTreeSet::new(),
        hops: BTreeSet::new(),
        listeners: BTreeSet::new(),
    };
    for r in on {
        p.containers.insert(r.container.clone());
        p.hops.insert((r.container.clone(), r.remote.clone()));
        if r.remote_container != "-" {
            p.containers.insert(r.remote_container.clone());
            if let Ok(a) = r.remote.parse::<std::net::SocketAddr>() {
                p.listeners.insert((r.remote_container.clone(), a.port()));
            }
        }
    }
    Some(p)
}

/// Every wait's windows on the path (or everywhere, `path` None).
fn sources(d: &RunData, path: Option<&OnPath>) -> Vec<Source> {
    let mut by: BTreeMap<(WaitKind, String), Source> = BTreeMap::new();
    let mut add = |kind: WaitKind, at: &str, w: (u64, u64, String)| {
        by.entry((kind, at.to_owned()))
            .or_insert_with(|| Source::new(kind, at.to_owned()))
            .windows
            .push(w);
    };
    for iv in &d.probe {
        let (iv_start, iv_end) = (iv.at_ns.saturating_sub(iv.interval_ns), iv.at_ns);
        for c in &iv.containers {
            if path.is_some_and(|p| !p.containers.contains(&c.container)) {
                continue;
            }
            let name = c.container.as_str();
            if c.waits.windows.is_empty() {
                // Rows without windows: the whole interval is the resolution.
                if let CpuCell::Measured(ci) = &c.cpu
                    && let Throttling::Measured {
                        nr_throttled,
                        throttled_ns,
                        ..
                    } = ci.throttle
                    && nr_throttled > 0
                {
                    let what = format!("throttled {}", ms(throttled_ns));
                    add(WaitKind::Throttled, name, (iv_start, iv_end, what));
                }
                if let RunqCell::Measured { total_ns, .. } = c.waits.runq
                    && total_ns * 100 >= RUNQ_PERCENT * iv.interval_ns.max(1)
                {
                    let what = format!("run-queue delay {}", ms(total_ns));
                    add(WaitKind::RunQueue, name, (iv_start, iv_end, what));
                }
            }
            for w in &c.waits.windows {
                let len = w.end_ns.saturating_sub(w.start_ns).max(1);
                if let Some(t) = w.throttled_ns.filter(|t| *t > 0) {
                    let what = format!("throttled {}", ms(t));
                    add(WaitKind::Throttled, name, (w.start_ns, w.end_ns, what));
                }
                if let Some(r) = w.runq_ns.filter(|r| r * 100 >= RUNQ_PERCENT * len) {
                    let what = format!("run-queue delay {}", ms(r));
                    add(WaitKind::RunQueue, name, (w.start_ns, w.end_ns, what));
                }
            }
            if let ListenerCell::Measured { ports } = &c.waits.listeners {
                for l in ports.iter().filter(|l| l.drops > 0) {
                    if path.is_some_and(|p| {
                        !p.listeners.contains(&(c.container.clone(), l.local_port))
                    }) {
                        continue;
                    }
                    let at = format!("{name}:{}", l.local_port);
                    let what = plural(l.drops, "listen drop", "listen drops");
                    add(WaitKind::ListenDrop, &at, (iv_start, iv_end, what));
                }
            }
        }
        for p in &iv.pairs {
            let remote = p.remote.to_string();
            if path.is_some_and(|x| !x.hops.contains(&(p.container.clone(), remote.clone()))) {
                continue;
            }
            let at = match &p.remote_container {
                Some(rc) => format!("{} → {remote} ({rc})", p.container),
                None => format!("{} → {remote}", p.container),
            };
            let mut each = |start: u64, end: u64, segs: u64, syn: u64| {
                let data = segs.saturating_sub(syn);
                if data > 0 {
                    let what = plural(data, "retransmit", "retransmits");
                    add(WaitKind::Retransmit, &at, (start, end, what));
                }
                if syn > 0 {
                    let what = plural(syn, "SYN retransmit", "SYN retransmits");
                    add(WaitKind::SynRetransmit, &at, (start, end, what));
                }
            };
            if p.waits.windows.is_empty() {
                each(iv_start, iv_end, p.waits.retrans_segs, p.waits.syn_retrans);
            }
            for w in &p.waits.windows {
                each(w.start_ns, w.end_ns, w.retrans_segs, w.syn_retrans);
            }
        }
    }
    by.into_values().collect()
}

/// The phrase for a wait at `at` seen in windows of `res_ms`.
fn during(kind: WaitKind, at: &str, res_ms: u64) -> String {
    let window = if res_ms < 1_000 {
        format!("a probe window (at most {res_ms} ms)")
    } else {
        format!("a {:.1} s probe interval", res_ms as f64 / 1e3)
    };
    match kind {
        WaitKind::Throttled => format!("during {window} in which {at} was throttled"),
        WaitKind::RunQueue => format!(
            "during {window} in which {at}'s threads waited for a CPU at least {RUNQ_PERCENT} % \
             of the time (run-queue delay)"
        ),
        WaitKind::Retransmit => format!("during {window} in which {at} retransmitted data"),
        WaitKind::SynRetransmit => {
            format!("during {window} in which {at} retransmitted a SYN (a connect retried)")
        }
        WaitKind::ListenDrop => format!(
            "during {window} in which the listener {at} dropped connections (accept queue full)"
        ),
    }
}

/// Fills each op total's [`OpTotal::slow`]: its requests above its whole-run p99 that the
/// driver kept, and the waits on the request path they were in flight during. Left `None`
/// without the probe's intervals, a histogram, or kept requests (rows recorded before herd
/// kept them).
pub(crate) fn attribute(d: &RunData, totals: &mut [OpTotal], pairs: &[PairRow]) {
    if d.probe.is_empty() {
        return;
    }
    let mono0 = d.meta.mono_start_ns as u64;
    let path = path(pairs);
    let scope = match &path {
        Some(_) => "the request path".to_owned(),
        None => "every container and pair the probe saw (the request path is unknown: \
                 the run did not finish)"
            .to_owned(),
    };
    let sources = sources(d, path.as_ref());
    let run_s = |ns: u64| ns.saturating_sub(mono0) as f64 / 1e9;
    for t in totals.iter_mut() {
        let (Some(l), Some(h)) = (
            t.latency.value(),
            t.histogram.as_ref().and_then(|h| h.decode().ok()),
        ) else {
            continue;
        };
        let over_us = l.p99_us;
        let above = h.len().saturating_sub(h.count_between(0, over_us));
        // Each kept request above the threshold, on CLOCK_MONOTONIC: (start, end) ns.
        let mut kept: Vec<(u64, u64, u64)> = Vec::new();
        for iv in &d.driver {
            let origin = iv.clock_start_ns.unwrap_or(mono0);
            for o in iv.ops.iter().filter(|o| o.op == t.op) {
                for r in o.slowest.iter().filter(|r| r.latency_us > over_us) {
                    let s = origin + r.start_us * 1_000;
                    kept.push((s, s + r.latency_us * 1_000, r.latency_us));
                }
            }
        }
        if kept.is_empty() {
            continue;
        }
        let n = kept.len() as u64;
        let mut explained = vec![false; kept.len()];
        let mut waits = Vec::new();
        for src in &sources {
            let mut per_window = vec![0u64; src.windows.len()];
            let mut requests = 0;
            for (i, &(s, e, _)) in kept.iter().enumerate() {
                let mut hit = false;
                for (k, (ws, we, _)) in src.windows.iter().enumerate() {
                    if s < *we && e > *ws {
                        per_window[k] += 1;
                        hit = true;
                    }
                }
                if hit {
                    requests += 1;
                    explained[i] = true;
                }
            }
            if requests == 0 {
                continue;
            }
            let res_ms = src
                .windows
                .iter()
                .map(|(s, e, _)| e.saturating_sub(*s))
                .max()
                .unwrap_or(0)
                .div_ceil(1_000_000);
            let mut order: Vec<usize> = (0..src.windows.len())
                .filter(|&k| per_window[k] > 0)
                .collect();
            order.sort_by_key(|&k| (std::cmp::Reverse(per_window[k]), src.windows[k].0));
            let more = order.len().saturating_sub(EVIDENCE_ROWS) as u64;
            order.truncate(EVIDENCE_ROWS);
            let share = requests as f64 / n as f64;
            waits.push(SlowWait {
                kind: src.kind,
                at: src.at.clone(),
                requests,
                share,
                resolution_ms: res_ms,
                sentence: format!(
                    "Of {}'s {} {} over {} (its whole-run p99{}), {} ({}) were in flight {}.",
                    t.op,
                    n,
                    if n == 1 { "request" } else { "requests" },
                    units::latency(over_us),
                    if n < above {
                        format!(
                            "; the driver kept {n} of its {above}: \
                             the {} slowest per interval",
                            herd_model::SLOWEST_PER_INTERVAL
                        )
                    } else {
                        String::new()
                    },
                    requests,
                    units::percent(share * 100.0),
                    during(src.kind, &src.at, res_ms)
                ),
                evidence: order
                    .into_iter()
                    .map(|k| {
                        let (ws, we, what) = &src.windows[k];
                        WaitEvidence {
                            start_s: run_s(*ws),
                            end_s: run_s(*we),
                            what: what.clone(),
                            requests: per_window[k],
                        }
                    })
                    .collect(),
                more_windows: more,
            });
        }
        waits.sort_by(|a, b| {
            b.requests
                .cmp(&a.requests)
                .then(a.kind.cmp(&b.kind))
                .then(a.at.cmp(&b.at))
        });
        t.slow = Some(SlowRequests {
            over_us,
            above,
            kept: n,
            slowest_us: kept.iter().map(|k| k.2).max().unwrap_or(0),
            explained: explained.iter().filter(|x| **x).count() as u64,
            scope: scope.clone(),
            waits,
        });
    }
}

#[cfg(test)]
mod tests;
