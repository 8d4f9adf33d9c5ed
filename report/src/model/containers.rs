//! Per phase × container rows: CPU (busiest 100 ms, sustained 30 s, average, quota),
//! throttling, memory and TCP, from the probe intervals that fall in each phase.

use std::collections::BTreeMap;

use herd_model::Counter;
use serde::{Deserialize, Serialize};

use super::waits::{self, WaitsRow};
use super::{Cell, phase_at, secs};
use herd_model::RunData;
use herd_model::{CpuCell, Memory, PhaseResult, ProbeInterval, SocketCell, Throttling};

/// One phase × container row.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ContainerRow {
    /// The phase's name (`step 1`, … or `after` / `before` for intervals outside every phase).
    pub phase: String,
    /// Container.
    pub container: String,
    /// Busiest 100 ms window in the step, cores.
    pub cpu_burst: Cell,
    /// Highest trailing-30 s average in the step, cores.
    pub cpu_sustained: Cell,
    /// Average over the step, cores.
    pub cpu_avg: Cell,
    /// CPU quota, cores.
    pub cpu_cap: Cell,
    /// Share of CFS periods throttled in the step.
    pub throttled_share: Cell,
    /// Time throttled in the step, ms (summed over CPUs).
    pub throttled_ms: Cell,
    /// Memory high-water mark, MiB: usage as the cgroup counts it (page cache included).
    pub mem_peak_mib: Cell,
    /// Highest working set in the step, MiB: usage minus inactive file cache, what `docker
    /// stats` and cAdvisor show as memory use.
    #[serde(default = "no_reading")]
    pub working_set_mib: Cell,
    /// When the container's cgroup appeared, seconds from the run's start, if it did while
    /// the probe ran (a container started mid-run, a one-shot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_s: Option<f64>,
    /// When its cgroup went away, seconds from the run's start (stopped, removed, exited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_s: Option<f64>,
    /// New TCP connections per second.
    pub connects_per_s: Cell,
    /// TIME_WAIT entries per second.
    pub time_wait_per_s: Cell,
    /// connect() failures in the step.
    pub connect_errors: Cell,
    /// Highest TIME_WAIT gauge of the container's netns in the step (as `ss` counts).
    pub time_wait_peak: Cell,
    /// Highest ESTABLISHED gauge in the step.
    pub established_peak: Cell,
    /// Fewest free ephemeral ports toward one destination in the step.
    pub headroom_min: Cell,
    /// Listen-queue overflows in the step.
    pub listen_overflows: Cell,
    /// Kernel-side waits in the step: run-queue delay, PSI, OOM kills, listen drops per
    /// port, conntrack, retransmits per destination.
    #[serde(default)]
    pub waits: WaitsRow,
}

fn no_reading() -> Cell {
    Cell::Missing("not in this report's data (recorded before herd read the working set)".into())
}

/// Per phase × container rows from the probe intervals; `missing` says why probe cells are
/// empty when the probe recorded nothing.
pub(crate) fn rows(
    d: &RunData,
    load_steps: &[&PhaseResult],
    missing: &dyn Fn(&str) -> Cell,
) -> Vec<ContainerRow> {
    let mono0 = d.meta.mono_start_ns as u64;
    let mut groups: BTreeMap<(String, String), Vec<(&ProbeInterval, usize)>> = BTreeMap::new();
    let mut order: Vec<(String, String)> = Vec::new();
    for iv in &d.probe {
        let t_ms = iv.at_ns.saturating_sub(mono0) / 1_000_000;
        let (label, _) = phase_at(load_steps, t_ms);
        for (i, c) in iv.containers.iter().enumerate() {
            let key = (label.clone(), c.container.clone());
            if !groups.contains_key(&key) {
                order.push(key.clone());
            }
            groups.entry(key).or_default().push((iv, i));
        }
    }
    let mut containers = Vec::new();
    let lossy = waits::lossy_pairs(&d.probe);
    for key in order {
        let rows = &groups[&key];
        let mut row = container_row(&key.0, &key.1, rows, mono0);
        row.waits = waits::row(rows, mono0, &lossy);
        containers.push(row);
    }
    let sums = node_sums(&containers);
    containers.extend(sums);
    if d.probe.is_empty() {
        for s in load_steps {
            containers.push(ContainerRow {
                phase: s.phase.clone(),
                container: "all".into(),
                cpu_burst: missing("no CPU"),
                cpu_sustained: missing("no CPU"),
                cpu_avg: missing("no CPU"),
                cpu_cap: missing("no quota"),
                throttled_share: missing("no throttling"),
                throttled_ms: missing("no throttling"),
                mem_peak_mib: missing("no memory"),
                working_set_mib: missing("no memory"),
                started_s: None,
                ended_s: None,
                connects_per_s: missing("no connects"),
                time_wait_per_s: missing("no TIME_WAIT"),
                connect_errors: missing("no connect errors"),
                time_wait_peak: missing("no TIME_WAIT gauge"),
                established_peak: missing("no ESTABLISHED gauge"),
                headroom_min: missing("no port headroom"),
                listen_overflows: missing("no listen overflows"),
                waits: match missing("no waits") {
                    Cell::Missing(why) => WaitsRow::missing(&why),
                    Cell::Value(_) => WaitsRow::default(),
                },
            });
        }
    }

    containers
}

fn container_row(
    step: &str,
    name: &str,
    rows: &[(&ProbeInterval, usize)],
    mono0: u64,
) -> ContainerRow {
    let mut burst: Option<f64> = None;
    let mut sustained: Option<f64> = None;
    let (mut used, mut span) = (0.0, 0.0);
    let mut cap: Option<f64> = None;
    let (mut periods, mut throttled, mut thr_ns) = (0u64, 0u64, 0u64);
    let mut thr_reason: Option<String> = None;
    let mut mem: Option<u64> = None;
    let mut working_set: Option<u64> = None;
    let (mut started_ns, mut ended_ns): (Option<u64>, Option<u64>) = (None, None);
    let mut mem_reason: Option<String> = None;
    let mut cpu_reason: Option<String> = None;
    let (mut connects, mut tw, mut errs, mut secs_total) = (0u64, 0u64, 0u64, 0.0);
    let (mut tw_peak, mut est_peak, mut head_min, mut overflows): (
        Option<u64>,
        Option<u64>,
        Option<u64>,
        u64,
    ) = (None, None, None, 0);
    let mut sock_reason: Option<String> = None;
    for (iv, i) in rows {
        let c = &iv.containers[*i];
        started_ns = started_ns.or(c.started_ns);
        ended_ns = ended_ns.or(c.ended_ns);
        let s = secs(iv);
        secs_total += s;
        connects += c.counts.get(Counter::Connects);
        tw += c.counts.get(Counter::TimeWaitEntries);
        errs += Counter::CONNECT_ERRORS
            .iter()
            .map(|k| c.counts.get(*k))
            .sum::<u64>();
        match &c.sockets {
            SocketCell::Measured {
                established,
                time_wait,
                time_wait_baseline,
                min_headroom,
                listen_overflows,
                ..
            } => {
                // This run's TIME_WAIT only: sockets left by an earlier run are its baseline.
                let run = time_wait.saturating_sub(*time_wait_baseline);
                tw_peak = Some(tw_peak.unwrap_or(0).max(run));
                est_peak = Some(est_peak.unwrap_or(0).max(*established));
                if let Some(h) = min_headroom {
                    head_min = Some(head_min.map_or(*h, |m| m.min(*h)));
                }
                overflows += listen_overflows;
            }
            SocketCell::Unavailable { reason } => sock_reason = Some(reason.clone()),
        }
        match &c.cpu {
            CpuCell::Measured(ci) => {
                burst = Some(burst.map_or(ci.burst_cores, |b: f64| b.max(ci.burst_cores)));
                sustained =
                    Some(sustained.map_or(ci.sustained_cores, |b: f64| b.max(ci.sustained_cores)));
                used += ci.cpu_cores * ci.interval_ns as f64;
                span += ci.interval_ns as f64;
                match &ci.throttle {
                    Throttling::Measured {
                        nr_periods,
                        nr_throttled,
                        throttled_ns,
                        quota_cores,
                        ..
                    } => {
                        periods += nr_periods;
                        throttled += nr_throttled;
                        thr_ns += throttled_ns;
                        if let Some(q) = quota_cores {
                            cap = Some(*q);
                        }
                    }
                    Throttling::Unavailable { reason } => thr_reason = Some(reason.clone()),
                }
                match &ci.memory {
                    Memory::Measured {
                        current_bytes,
                        peak_bytes,
                        working_set_bytes,
                        ..
                    } => {
                        let m = peak_bytes.unwrap_or(*current_bytes);
                        mem = Some(mem.map_or(m, |x: u64| x.max(m)));
                        if let Some(w) = working_set_bytes {
                            working_set = Some(working_set.map_or(*w, |x| x.max(*w)));
                        }
                    }
                    Memory::Unavailable { reason } => mem_reason = Some(reason.clone()),
                }
            }
            CpuCell::Unavailable { reason } => cpu_reason = Some(reason.clone()),
        }
    }
    let or = |v: Option<f64>, why: &Option<String>, what: &str| match v {
        Some(v) => Cell::Value(v),
        None => Cell::Missing(why.clone().unwrap_or_else(|| format!("no {what} reading"))),
    };
    let has_throttle = thr_reason.is_none() && burst.is_some();
    ContainerRow {
        phase: step.into(),
        container: name.into(),
        cpu_burst: or(burst, &cpu_reason, "CPU"),
        cpu_sustained: or(sustained, &cpu_reason, "CPU"),
        cpu_avg: or((span > 0.0).then(|| used / span), &cpu_reason, "CPU"),
        cpu_cap: match cap {
            Some(c) => Cell::Value(c),
            None if has_throttle => Cell::Missing("unlimited: no CPU quota".into()),
            None => or(None, &thr_reason.clone().or(cpu_reason.clone()), "quota"),
        },
        throttled_share: if has_throttle {
            Cell::Value(if periods > 0 {
                throttled as f64 / periods as f64
            } else {
                0.0
            })
        } else {
            or(
                None,
                &thr_reason.clone().or(cpu_reason.clone()),
                "throttling",
            )
        },
        throttled_ms: if has_throttle {
            Cell::Value(thr_ns as f64 / 1e6)
        } else {
            or(None, &thr_reason.or(cpu_reason.clone()), "throttling")
        },
        working_set_mib: match working_set {
            Some(w) => Cell::Value(w as f64 / (1024.0 * 1024.0)),
            None if mem.is_some() => {
                Cell::Missing("the cgroup's memory.stat has no inactive file count".into())
            }
            None => or(None, &mem_reason.clone().or(cpu_reason.clone()), "memory"),
        },
        mem_peak_mib: or(
            mem.map(|m| m as f64 / (1024.0 * 1024.0)),
            &mem_reason.or(cpu_reason),
            "memory",
        ),
        started_s: started_ns.map(|t| t.saturating_sub(mono0) as f64 / 1e9),
        ended_s: ended_ns.map(|t| t.saturating_sub(mono0) as f64 / 1e9),
        connects_per_s: Cell::Value(connects as f64 / secs_total.max(1e-9)),
        time_wait_per_s: Cell::Value(tw as f64 / secs_total.max(1e-9)),
        connect_errors: Cell::Value(errs as f64),
        time_wait_peak: or(tw_peak.map(|v| v as f64), &sock_reason, "socket gauge"),
        established_peak: or(est_peak.map(|v| v as f64), &sock_reason, "socket gauge"),
        headroom_min: match (head_min, tw_peak) {
            (Some(h), _) => Cell::Value(h as f64),
            (None, Some(_)) => Cell::Missing("no outbound connections".into()),
            (None, None) => or(None, &sock_reason, "socket gauge"),
        },
        listen_overflows: if tw_peak.is_some() {
            Cell::Value(overflows as f64)
        } else {
            or(None, &sock_reason, "socket gauge")
        },
        waits: WaitsRow::default(),
    }
}

/// Per phase, one row per container that runs on several nodes (`NAME@node` rows, from a
/// probe per node): `NAME (N nodes)`, the sum of its nodes' rates, CPU, memory and gauges
/// (the fewest free ports of any node; no throttled share, which is per node).
fn node_sums(rows: &[ContainerRow]) -> Vec<ContainerRow> {
    let mut groups: Vec<((String, String), Vec<&ContainerRow>)> = Vec::new();
    for r in rows {
        let Some((base, _node)) = r.container.rsplit_once('@') else {
            continue;
        };
        let key = (r.phase.clone(), base.to_owned());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(r),
            None => groups.push((key, vec![r])),
        }
    }
    let fold = |g: &[&ContainerRow], f: fn(&ContainerRow) -> &Cell, min: bool| -> Cell {
        let mut acc: Option<f64> = None;
        for r in g {
            match f(r) {
                Cell::Value(v) => {
                    acc = Some(match acc {
                        None => *v,
                        Some(a) if min => a.min(*v),
                        Some(a) => a + v,
                    })
                }
                Cell::Missing(why) => return Cell::Missing(format!("{}: {why}", r.container)),
            }
        }
        acc.map_or_else(|| Cell::Missing("no node measured it".into()), Cell::Value)
    };
    groups
        .into_iter()
        .filter(|(_, g)| g.len() > 1)
        .map(|((phase, base), g)| {
            let sum = |f: fn(&ContainerRow) -> &Cell| fold(&g, f, false);
            ContainerRow {
                phase,
                container: format!("{base} ({} nodes)", g.len()),
                cpu_burst: sum(|r| &r.cpu_burst),
                cpu_sustained: sum(|r| &r.cpu_sustained),
                cpu_avg: sum(|r| &r.cpu_avg),
                cpu_cap: sum(|r| &r.cpu_cap),
                throttled_share: Cell::Missing("per node: see the node rows".into()),
                throttled_ms: sum(|r| &r.throttled_ms),
                mem_peak_mib: sum(|r| &r.mem_peak_mib),
                working_set_mib: sum(|r| &r.working_set_mib),
                started_s: None,
                ended_s: None,
                connects_per_s: sum(|r| &r.connects_per_s),
                time_wait_per_s: sum(|r| &r.time_wait_per_s),
                connect_errors: sum(|r| &r.connect_errors),
                time_wait_peak: sum(|r| &r.time_wait_peak),
                established_peak: sum(|r| &r.established_peak),
                headroom_min: fold(&g, |r| &r.headroom_min, true),
                listen_overflows: sum(|r| &r.listen_overflows),
                waits: waits::node_sum(
                    &g.iter()
                        .map(|r| (r.container.as_str(), &r.waits))
                        .collect::<Vec<_>>(),
                ),
            }
        })
        .collect()
}

#[cfg(test)]
mod node_tests {
    use super::*;

    fn row(container: &str, connects: f64, headroom: f64) -> ContainerRow {
        let v = Cell::Value;
        ContainerRow {
            phase: "step 1".into(),
            container: container.into(),
            cpu_burst: v(0.5),
            cpu_sustained: v(0.4),
            cpu_avg: v(0.25),
            cpu_cap: Cell::Missing("unlimited: no CPU quota".into()),
            throttled_share: v(0.0),
            throttled_ms: v(0.0),
            mem_peak_mib: v(10.0),
            working_set_mib: v(8.0),
            started_s: None,
            ended_s: None,
            connects_per_s: v(connects),
            time_wait_per_s: v(1.0),
            connect_errors: v(0.0),
            time_wait_peak: v(3.0),
            established_peak: v(4.0),
            headroom_min: v(headroom),
            listen_overflows: v(0.0),
            waits: WaitsRow::default(),
        }
    }

    #[test]
    fn a_service_on_several_nodes_gets_one_row_of_sums() {
        let rows = vec![
            row("nginx@a", 10.0, 500.0),
            row("nginx@b", 32.0, 200.0),
            row("db@a", 1.0, 9.0),
        ];
        let sums = node_sums(&rows);
        assert_eq!(sums.len(), 1, "db runs on one node only");
        let s = &sums[0];
        assert_eq!(s.container, "nginx (2 nodes)");
        assert_eq!(s.connects_per_s.value(), Some(42.0));
        assert_eq!(s.cpu_avg.value(), Some(0.5));
        assert_eq!(s.established_peak.value(), Some(8.0));
        assert_eq!(
            s.headroom_min.value(),
            Some(200.0),
            "the fewest free ports of any node"
        );
        assert!(matches!(&s.cpu_cap, Cell::Missing(w) if w.contains("nginx@a")));
    }
}
