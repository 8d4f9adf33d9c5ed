//! Per phase × container: the kernel-side waits the probe measured (docs/probes-waits.md) —
//! run-queue delay (total and p99 from the merged log2 histogram), PSI, OOM kills, listen
//! drops per port, conntrack against its limit — and the container's retransmits per
//! destination, SYN apart from data. Each with the per-interval points its charts draw.

use std::collections::{BTreeMap, BTreeSet};

use herd_model::waits::{ConntrackCell, ContainerWaits, ListenerCell, OomCell, PsiCell, RunqCell};
use herd_model::{ContainerInterval, Log2Hist, PairInterval, ProbeInterval};
use serde::{Deserialize, Serialize};

use super::{Cell, secs};

/// Why a retransmit count is missing: the rows predate the per-pair count.
pub const RETRANS_NOT_RECORDED: &str =
    "not in this run's data (recorded before herd counted retransmits per pair)";

/// The kernel-side waits of one container in one phase.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WaitsRow {
    /// Run-queue delay: thread-time its threads spent runnable and not running in the
    /// phase, ms (two threads waiting 1 s each are 2000 ms).
    pub runq_total_ms: Cell,
    /// Run-queue delay per second of the phase, ms/s (1000: one thread always waiting).
    pub runq_ms_per_s: Cell,
    /// Upper bound of the log2 bucket holding the 99th percentile of one wait, µs, from the
    /// phase's merged histogram (so "p99 ≤ 512 µs").
    pub runq_p99_le_us: Cell,
    /// Waits counted (switch-ins after a wakeup or a preemption).
    pub runq_waits: Cell,
    /// PSI `cpu.pressure` some: time at least one task stalled waiting for a CPU, ms.
    pub psi_cpu_some_ms: Cell,
    /// PSI `cpu.pressure` full, ms (missing before 5.13).
    pub psi_cpu_full_ms: Cell,
    /// PSI `memory.pressure` some, ms.
    pub psi_memory_some_ms: Cell,
    /// PSI `memory.pressure` full, ms.
    pub psi_memory_full_ms: Cell,
    /// PSI `io.pressure` some, ms.
    pub psi_io_some_ms: Cell,
    /// PSI `io.pressure` full, ms.
    pub psi_io_full_ms: Cell,
    /// Processes the OOM killer killed in the phase.
    pub oom_kills: Cell,
    /// SYNs and handshake ACKs its listeners dropped in the phase, all ports.
    pub listen_drops: Cell,
    /// Per listening port (empty when not measured: `listen_drops` says why).
    #[serde(default)]
    pub listeners: Vec<ListenerRow>,
    /// Highest conntrack entries of its network namespace in the phase.
    pub conntrack_peak: Cell,
    /// The conntrack table's limit (`nf_conntrack_max`).
    pub conntrack_max: Cell,
    /// New connections conntrack dropped in the phase because the table was full.
    pub conntrack_drops: Cell,
    /// Its retransmits per destination in the phase, SYN apart from data: every pair that
    /// retransmitted anywhere in the run (zeros included), most first.
    #[serde(default)]
    pub retransmits: Vec<RetransRow>,
    /// Why `retransmits` has no rows when the count is missing (None: measured, and the
    /// pairs without a row had none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits_missing: Option<String>,
    /// Run-queue delay per probe interval, for its chart.
    #[serde(default)]
    pub runq_points: Vec<WaitPoint>,
}

/// One listening port of a container in one phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ListenerRow {
    /// The local port.
    pub port: u16,
    /// SYNs and handshake ACKs dropped.
    pub drops: u64,
    /// Most connections waiting in its accept queue at an interval's end.
    pub accept_queue_peak: u64,
    /// The accept queue's limit (the listen() backlog, capped by `somaxconn`).
    pub backlog: u64,
}

/// Retransmits of one source → destination pair in one phase.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RetransRow {
    /// Destination address:port.
    pub remote: String,
    /// The destination's container, or `-`.
    pub remote_container: String,
    /// SYN retransmits: connects retried (each adds the SYN timeout, 1 s then 2 s …).
    pub syn: u64,
    /// Data retransmits: every retransmitted segment but the SYNs.
    pub data: u64,
    /// Per probe interval: SYN and data retransmits per second, for its chart.
    #[serde(default)]
    pub points: Vec<RetransPoint>,
}

/// A per-second figure at the middle of one probe interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WaitPoint {
    /// Seconds since the run started (the interval's middle).
    pub t_s: f64,
    /// Run-queue delay in the interval, ms per second.
    pub ms_per_s: f64,
}

/// Retransmits of a pair at the middle of one probe interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RetransPoint {
    /// Seconds since the run started (the interval's middle).
    pub t_s: f64,
    /// SYN retransmits per second.
    pub syn_per_s: f64,
    /// Data retransmits per second.
    pub data_per_s: f64,
}

impl WaitsRow {
    /// A row with every cell missing for `why`.
    pub fn missing(why: &str) -> Self {
        let m = || Cell::Missing(why.to_owned());
        Self {
            runq_total_ms: m(),
            runq_ms_per_s: m(),
            runq_p99_le_us: m(),
            runq_waits: m(),
            psi_cpu_some_ms: m(),
            psi_cpu_full_ms: m(),
            psi_memory_some_ms: m(),
            psi_memory_full_ms: m(),
            psi_io_some_ms: m(),
            psi_io_full_ms: m(),
            oom_kills: m(),
            listen_drops: m(),
            listeners: Vec::new(),
            conntrack_peak: m(),
            conntrack_max: m(),
            conntrack_drops: m(),
            retransmits: Vec::new(),
            retransmits_missing: Some(why.to_owned()),
            runq_points: Vec::new(),
        }
    }

    /// Whether any wait of the row was measured (a table shows the row's section then).
    pub fn any_measured(&self) -> bool {
        self.runq_total_ms.value().is_some()
            || self.psi_cpu_some_ms.value().is_some()
            || self.psi_memory_some_ms.value().is_some()
            || self.psi_io_some_ms.value().is_some()
            || self.oom_kills.value().is_some()
            || self.listen_drops.value().is_some()
            || self.conntrack_peak.value().is_some()
    }

    /// Retransmits over the row's pairs: (SYN, data); None when not counted.
    pub fn retransmit_sums(&self) -> Option<(u64, u64)> {
        if self.retransmits_missing.is_some() {
            return None;
        }
        Some(
            self.retransmits
                .iter()
                .fold((0, 0), |(s, d), r| (s + r.syn, d + r.data)),
        )
    }
}

impl Default for WaitsRow {
    fn default() -> Self {
        Self::missing("not in this report's data (recorded before herd measured waits)")
    }
}

/// Whether the probe that wrote `c` knew the waits at all: rows stored before them read
/// every cell as the default `unavailable` ("not sampled").
fn knows_waits(c: &ContainerInterval) -> bool {
    c.waits != ContainerWaits::default()
}

/// A sum over a phase's intervals, or why there is none: missing when any interval lacks
/// it (a total with a hole is not the phase's total), with how many did.
#[derive(Default)]
struct Acc {
    sum: Option<f64>,
    why: Option<String>,
    seen: u32,
    missing: u32,
    /// A peak: the highest of the intervals that have it.
    peak: bool,
}

impl Acc {
    fn peak() -> Self {
        Self {
            peak: true,
            ..Self::default()
        }
    }

    fn add(&mut self, v: Option<f64>, why: impl FnOnce() -> String) {
        self.seen += 1;
        match v {
            Some(v) => {
                self.sum = Some(match self.sum {
                    None => v,
                    Some(m) if self.peak => m.max(v),
                    Some(m) => m + v,
                })
            }
            None => {
                self.missing += 1;
                self.why = Some(why());
            }
        }
    }

    fn cell(self, what: &str) -> Cell {
        let why = || {
            self.why
                .clone()
                .unwrap_or_else(|| format!("no {what} reading"))
        };
        match self.sum {
            Some(v) if self.missing == 0 || self.peak => Cell::Value(v),
            Some(_) => Cell::Missing(format!(
                "not measured in {} of the step's {} intervals: {}",
                self.missing,
                self.seen,
                why()
            )),
            None => Cell::Missing(why()),
        }
    }
}

/// The (source container, destination) pairs with a retransmit anywhere in the run: their
/// rows stay in every phase, zeros included, so their charts have no gaps.
pub(crate) fn lossy_pairs(probe: &[ProbeInterval]) -> BTreeSet<(String, String)> {
    probe
        .iter()
        .flat_map(|iv| &iv.pairs)
        .filter(|p| p.waits.retrans_segs > 0)
        .map(|p| (p.container.clone(), p.remote.to_string()))
        .collect()
}

/// The waits of one container over `rows` (the probe intervals of one phase, with the
/// container's index in each); `mono0` is the run's start on the probe's clock; `lossy`
/// from [`lossy_pairs`].
pub(crate) fn row(
    rows: &[(&ProbeInterval, usize)],
    mono0: u64,
    lossy: &BTreeSet<(String, String)>,
) -> WaitsRow {
    let (mut runq_ms, mut runq_waits) = (Acc::default(), Acc::default());
    // `None` once an interval without a per-wait histogram is counted.
    let mut hist = Some(Log2Hist::default());
    let mut runq_secs = 0.0;
    let mut psi: [Acc; 6] = Default::default();
    let (mut oom, mut drops) = (Acc::default(), Acc::default());
    let mut ports: BTreeMap<u16, ListenerRow> = BTreeMap::new();
    let (mut ct_peak, mut ct_max, mut ct_drops) = (Acc::peak(), Acc::peak(), Acc::default());
    let mut retrans: BTreeMap<String, RetransRow> = BTreeMap::new();
    let mut knows = false;
    let mut points = Vec::new();
    let mut lens = Vec::new();
    let mut retrans_lens: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (iv, i) in rows {
        let c = &iv.containers[*i];
        // Any container of the interval: the probe that wrote it knew the waits.
        knows |= iv.containers.iter().any(knows_waits);
        let s = secs(iv);
        let mid = (iv.at_ns.saturating_sub(iv.interval_ns / 2)).saturating_sub(mono0) as f64 / 1e9;
        let w = &c.waits;
        match &w.runq {
            RunqCell::Measured {
                count,
                total_ns,
                delay_buckets,
                ..
            } => {
                runq_ms.add(Some(*total_ns as f64 / 1e6), String::new);
                runq_waits.add(Some(*count as f64), String::new);
                match (hist.as_mut(), delay_buckets) {
                    (Some(h), Some(b)) => h.add(b),
                    _ => hist = None,
                }
                runq_secs += s;
                points.push(WaitPoint {
                    t_s: mid,
                    ms_per_s: *total_ns as f64 / 1e6 / s,
                });
                lens.push(s);
            }
            RunqCell::Unavailable { reason } => {
                runq_ms.add(None, || reason.clone());
                runq_waits.add(None, || reason.clone());
            }
        }
        match &w.psi {
            PsiCell::Measured { cpu, memory, io } => {
                for (k, p) in [cpu, memory, io].into_iter().enumerate() {
                    let what = ["cpu", "memory", "io"][k];
                    let none = || format!("the cgroup has no {what}.pressure");
                    psi[2 * k].add(p.map(|p| p.some_us as f64 / 1e3), none);
                    psi[2 * k + 1].add(
                        p.and_then(|p| p.full_us).map(|v| v as f64 / 1e3),
                        || match p {
                            Some(_) => format!("{what}.pressure has no `full` line (before 5.13)"),
                            None => none(),
                        },
                    );
                }
            }
            PsiCell::Unavailable { reason } => {
                for a in &mut psi {
                    a.add(None, || reason.clone());
                }
            }
        }
        match &w.oom {
            OomCell::Measured { oom_kills } => oom.add(Some(*oom_kills as f64), String::new),
            OomCell::Unavailable { reason } => oom.add(None, || reason.clone()),
        }
        match &w.listeners {
            ListenerCell::Measured { ports: ps } => {
                drops.add(
                    Some(ps.iter().map(|p| p.drops).sum::<u64>() as f64),
                    String::new,
                );
                for p in ps {
                    let e = ports.entry(p.local_port).or_insert(ListenerRow {
                        port: p.local_port,
                        drops: 0,
                        accept_queue_peak: 0,
                        backlog: 0,
                    });
                    e.drops += p.drops;
                    e.accept_queue_peak = e.accept_queue_peak.max(p.accept_queue);
                    e.backlog = e.backlog.max(p.backlog);
                }
            }
            ListenerCell::Unavailable { reason } => drops.add(None, || reason.clone()),
        }
        match &w.conntrack {
            ConntrackCell::Measured {
                entries, max, drop, ..
            } => {
                ct_peak.add(Some(*entries as f64), String::new);
                ct_max.add(Some(*max as f64), String::new);
                ct_drops.add(drop.map(|d| d as f64), || {
                    "the kernel's /proc/net/stat/nf_conntrack has no `drop` column".into()
                });
            }
            ConntrackCell::Unavailable { reason } => {
                for a in [&mut ct_peak, &mut ct_max, &mut ct_drops] {
                    a.add(None, || reason.clone());
                }
            }
        }
        for p in iv
            .pairs
            .iter()
            .filter(|p| lossy.contains(&(p.container.clone(), p.remote.to_string())))
            .filter(|p| p.container == c.container)
        {
            add_retrans(&mut retrans, p, mid, s);
            retrans_lens
                .entry(p.remote.to_string())
                .or_default()
                .push(s);
        }
    }
    let points = thin(
        &points,
        &lens,
        |p| p.t_s,
        |ps, ls, t_s| WaitPoint {
            t_s,
            ms_per_s: weighted(ps.iter().map(|p| p.ms_per_s), ls),
        },
    );
    for (remote, r) in retrans.iter_mut() {
        let ls = &retrans_lens[remote];
        r.points = thin(
            &r.points,
            ls,
            |p| p.t_s,
            |ps, ls, t_s| RetransPoint {
                t_s,
                syn_per_s: weighted(ps.iter().map(|p| p.syn_per_s), ls),
                data_per_s: weighted(ps.iter().map(|p| p.data_per_s), ls),
            },
        );
    }
    let [cpu_some, cpu_full, mem_some, mem_full, io_some, io_full] = psi;
    let mut retransmits: Vec<RetransRow> = retrans.into_values().collect();
    retransmits.sort_by_key(|r| std::cmp::Reverse(r.syn + r.data));
    let p99 = hist.as_ref().map(|h| h.quantile_le(990));
    let runq_total_ms = runq_ms.cell("run-queue");
    WaitsRow {
        runq_ms_per_s: match &runq_total_ms {
            Cell::Value(v) => Cell::Value(v / runq_secs.max(1e-9)),
            missing => missing.clone(),
        },
        runq_p99_le_us: match (&runq_total_ms, p99) {
            (Cell::Missing(_), _) => runq_total_ms.clone(),
            (Cell::Value(_), Some(Some(v))) => Cell::Value(v as f64),
            (Cell::Value(_), Some(None)) => Cell::Missing("no thread waited for a CPU".into()),
            (Cell::Value(_), None) => Cell::Missing(herd_model::waits::NO_PER_WAIT.into()),
        },
        runq_total_ms,
        runq_waits: runq_waits.cell("run-queue"),
        psi_cpu_some_ms: cpu_some.cell("PSI"),
        psi_cpu_full_ms: cpu_full.cell("PSI"),
        psi_memory_some_ms: mem_some.cell("PSI"),
        psi_memory_full_ms: mem_full.cell("PSI"),
        psi_io_some_ms: io_some.cell("PSI"),
        psi_io_full_ms: io_full.cell("PSI"),
        oom_kills: oom.cell("OOM"),
        listen_drops: drops.cell("listener"),
        listeners: ports.into_values().collect(),
        conntrack_peak: ct_peak.cell("conntrack"),
        conntrack_max: ct_max.cell("conntrack"),
        conntrack_drops: ct_drops.cell("conntrack"),
        retransmits,
        retransmits_missing: (!knows).then(|| RETRANS_NOT_RECORDED.to_owned()),
        runq_points: points,
    }
}

/// The most chart points one phase keeps per container (and per pair): past it, runs of
/// consecutive intervals become one point each, their per-second figures averaged over
/// their lengths, so a long run's JSON and charts stay of bounded size.
pub const MAX_WAIT_POINTS: usize = 500;

/// `points` (each over an interval of `lens[i]` seconds) in at most [`MAX_WAIT_POINTS`]
/// points: `k` consecutive ones merged by `merge(points, lens, mid)`, `mid` their
/// length-weighted middle.
fn thin<P: Clone>(
    points: &[P],
    lens: &[f64],
    t: impl Fn(&P) -> f64,
    merge: impl Fn(&[P], &[f64], f64) -> P,
) -> Vec<P> {
    if points.len() <= MAX_WAIT_POINTS || points.len() != lens.len() {
        return points.to_vec();
    }
    let k = points.len().div_ceil(MAX_WAIT_POINTS);
    points
        .chunks(k)
        .zip(lens.chunks(k))
        .map(|(ps, ls)| {
            let mid = weighted(ps.iter().map(&t), ls);
            merge(ps, ls, mid)
        })
        .collect()
}

/// The mean of `values` weighted by `lens`.
fn weighted(values: impl Iterator<Item = f64>, lens: &[f64]) -> f64 {
    let total: f64 = lens.iter().sum();
    values.zip(lens).map(|(v, l)| v * l).sum::<f64>() / total.max(1e-12)
}

fn add_retrans(acc: &mut BTreeMap<String, RetransRow>, p: &PairInterval, mid: f64, s: f64) {
    let key = p.remote.to_string();
    let e = acc.entry(key.clone()).or_insert_with(|| RetransRow {
        remote: key,
        remote_container: "-".into(),
        syn: 0,
        data: 0,
        points: Vec::new(),
    });
    if let Some(rc) = &p.remote_container {
        e.remote_container = rc.clone();
    }
    let (syn, data) = (p.waits.syn_retrans, p.waits.data_retrans());
    e.syn += syn;
    e.data += data;
    e.points.push(RetransPoint {
        t_s: mid,
        syn_per_s: syn as f64 / s,
        data_per_s: data as f64 / s,
    });
}

/// Per phase, the sum of a container's node rows (`NAME@node`): totals and drops add; the
/// run-queue p99 is the worst node's bound (a bound of the merged histogram is at most the
/// largest of the nodes' bounds); peaks add (each node has its own table).
pub(crate) fn node_sum(g: &[(&str, &WaitsRow)]) -> WaitsRow {
    let fold = |f: fn(&WaitsRow) -> &Cell, max: bool| -> Cell {
        let mut acc: Option<f64> = None;
        for (name, r) in g {
            match f(r) {
                Cell::Value(v) => {
                    acc = Some(match acc {
                        None => *v,
                        Some(a) if max => a.max(*v),
                        Some(a) => a + v,
                    })
                }
                Cell::Missing(why) => return Cell::Missing(format!("{name}: {why}")),
            }
        }
        acc.map_or_else(|| Cell::Missing("no node measured it".into()), Cell::Value)
    };
    let sum = |f: fn(&WaitsRow) -> &Cell| fold(f, false);
    let mut listeners: BTreeMap<u16, ListenerRow> = BTreeMap::new();
    let mut retrans: BTreeMap<String, RetransRow> = BTreeMap::new();
    for (_, r) in g {
        for l in &r.listeners {
            let e = listeners.entry(l.port).or_insert_with(|| ListenerRow {
                drops: 0,
                accept_queue_peak: 0,
                backlog: 0,
                ..l.clone()
            });
            e.drops += l.drops;
            e.accept_queue_peak += l.accept_queue_peak;
            e.backlog += l.backlog;
        }
        for x in &r.retransmits {
            let e = retrans
                .entry(x.remote.clone())
                .or_insert_with(|| RetransRow {
                    syn: 0,
                    data: 0,
                    points: Vec::new(),
                    ..x.clone()
                });
            e.syn += x.syn;
            e.data += x.data;
        }
    }
    WaitsRow {
        runq_total_ms: sum(|r| &r.runq_total_ms),
        runq_ms_per_s: sum(|r| &r.runq_ms_per_s),
        runq_p99_le_us: fold(|r| &r.runq_p99_le_us, true),
        runq_waits: sum(|r| &r.runq_waits),
        psi_cpu_some_ms: Cell::Missing("per node: see the node rows".into()),
        psi_cpu_full_ms: Cell::Missing("per node: see the node rows".into()),
        psi_memory_some_ms: Cell::Missing("per node: see the node rows".into()),
        psi_memory_full_ms: Cell::Missing("per node: see the node rows".into()),
        psi_io_some_ms: Cell::Missing("per node: see the node rows".into()),
        psi_io_full_ms: Cell::Missing("per node: see the node rows".into()),
        oom_kills: sum(|r| &r.oom_kills),
        listen_drops: sum(|r| &r.listen_drops),
        listeners: listeners.into_values().collect(),
        conntrack_peak: Cell::Missing("per node: see the node rows".into()),
        conntrack_max: Cell::Missing("per node: see the node rows".into()),
        conntrack_drops: sum(|r| &r.conntrack_drops),
        retransmits: retrans.into_values().collect(),
        retransmits_missing: g.iter().find_map(|(_, r)| r.retransmits_missing.clone()),
        runq_points: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_phase_keeps_a_bounded_number_of_points_with_the_same_mean() {
        // 1 801 points of 100 ms, then one of 0.4 s: merged by 4 into 451.
        let mut pts: Vec<WaitPoint> = (0..1801)
            .map(|i| WaitPoint {
                t_s: i as f64 * 0.1 + 0.05,
                ms_per_s: (i % 7) as f64,
            })
            .collect();
        let mut lens = vec![0.1; 1801];
        pts.push(WaitPoint {
            t_s: 180.3,
            ms_per_s: 10.0,
        });
        lens.push(0.4);
        let out = thin(
            &pts,
            &lens,
            |p| p.t_s,
            |ps, ls, t_s| WaitPoint {
                t_s,
                ms_per_s: weighted(ps.iter().map(|p| p.ms_per_s), ls),
            },
        );
        assert!(out.len() <= MAX_WAIT_POINTS, "{}", out.len());
        let total = |ps: &[WaitPoint], ls: &[f64]| -> f64 {
            ps.iter().zip(ls).map(|(p, l)| p.ms_per_s * l).sum()
        };
        let k = pts.len().div_ceil(MAX_WAIT_POINTS);
        let out_lens: Vec<f64> = lens.chunks(k).map(|c| c.iter().sum()).collect();
        assert!((total(&pts, &lens) - total(&out, &out_lens)).abs() < 1e-9);
        assert!(out.windows(2).all(|w| w[0].t_s < w[1].t_s));
    }
    use herd_model::RunqStats;

    const S: u64 = 1_000_000_000;

    fn runq(waits_us: &[u64]) -> RunqCell {
        let mut h = Log2Hist::default();
        for w in waits_us {
            h.record(*w);
        }
        RunqCell::of(&RunqStats {
            count: waits_us.len() as u64,
            total_ns: waits_us.iter().sum::<u64>() * 1_000,
            delay_us: h,
        })
    }

    fn interval(t: u64, runq: RunqCell, retrans: (u64, u64)) -> ProbeInterval {
        let mut pair = PairInterval::gauges_only(
            "gw".into(),
            "198.18.0.6:80".parse().unwrap(),
            Some("be".into()),
            Default::default(),
        );
        pair.waits.retrans_segs = retrans.0;
        pair.waits.syn_retrans = retrans.1;
        ProbeInterval {
            rolled_up: None,
            at_ns: t * S,
            interval_ns: S,
            containers: vec![ContainerInterval {
                container: "gw".into(),
                counts: Default::default(),
                cpu: Default::default(),
                sockets: Default::default(),
                started_ns: None,
                ended_ns: None,
                waits: ContainerWaits {
                    runq,
                    oom: OomCell::Measured {
                        oom_kills: u64::from(t == 2),
                    },
                    ..Default::default()
                },
            }],
            pairs: vec![pair],
            lost: 0,
            services: Vec::new(),
        }
    }

    #[test]
    fn a_steps_run_queue_p99_is_the_bound_of_its_merged_histogram_and_totals_add_exactly() {
        // 99 short waits in one interval, 2 long ones in the next: neither interval's p99 is
        // the step's (the first's is ≤ 64 µs, the second's ≤ 8192 µs).
        let a = interval(1, runq(&[50; 99]), (3, 1));
        let b = interval(2, runq(&[5_000, 5_000]), (0, 0));
        let rows = [(&a, 0), (&b, 0)];
        let lossy = lossy_pairs(&[a.clone(), b.clone()]);
        let w = row(&rows, 0, &lossy);
        assert_eq!(
            w.runq_total_ms.value(),
            Some((99.0 * 50.0 + 10_000.0) / 1e3)
        );
        assert_eq!(w.runq_ms_per_s.value(), Some(14.95 / 2.0));
        assert_eq!(w.runq_waits.value(), Some(101.0));
        // 101 waits: the 99th percentile is the 100th, one of the long ones.
        assert_eq!(w.runq_p99_le_us.value(), Some(8_192.0));
        assert_eq!(w.oom_kills.value(), Some(1.0));
        assert_eq!(w.runq_points.len(), 2);
        assert_eq!(w.runq_points[0].t_s, 0.5);
        // Retransmits: SYN apart from data; the quiet interval's point is a zero, not a gap.
        assert_eq!(w.retransmits.len(), 1);
        let x = &w.retransmits[0];
        assert_eq!((x.syn, x.data, x.remote_container.as_str()), (1, 2, "be"));
        assert_eq!(x.points.len(), 2);
        assert_eq!(w.retransmit_sums(), Some((1, 2)));
        // Nothing read PSI: the reason, not a zero.
        assert_eq!(w.psi_cpu_some_ms, Cell::Missing("not sampled".into()));
    }

    /// The default probe counts waits from the scheduler's totals: no histogram, so no p99
    /// (and why), and a step mixing such an interval with timed ones has none either; the
    /// table says the mean instead.
    #[test]
    fn waits_counted_from_totals_have_a_mean_and_no_p99() {
        let totals = |n: u64, us: u64| {
            RunqCell::totals(&RunqStats {
                count: n,
                total_ns: n * us * 1_000,
                ..Default::default()
            })
        };
        let a = interval(1, totals(40, 300), (0, 0));
        let b = interval(2, runq(&[5_000, 5_000]), (0, 0));
        let w = row(&[(&a, 0), (&b, 0)], 0, &BTreeSet::new());
        assert_eq!(w.runq_total_ms.value(), Some(22.0));
        assert_eq!(w.runq_waits.value(), Some(42.0));
        assert_eq!(
            w.runq_p99_le_us,
            Cell::Missing(herd_model::waits::NO_PER_WAIT.into())
        );
        assert_eq!(crate::sections::runq_wait(&w).text, "mean 524 µs");
        // Timed alone, the p99 is there.
        let w = row(&[(&b, 0)], 0, &BTreeSet::new());
        assert_eq!(w.runq_p99_le_us.value(), Some(8_192.0));
    }

    #[test]
    fn a_total_with_an_unmeasured_interval_is_missing_and_says_how_many() {
        let a = interval(1, runq(&[50]), (0, 0));
        let b = interval(
            2,
            RunqCell::Unavailable {
                reason: "the scheduler programs did not load".into(),
            },
            (0, 0),
        );
        let w = row(&[(&a, 0), (&b, 0)], 0, &BTreeSet::new());
        assert_eq!(
            w.runq_total_ms,
            Cell::Missing(
                "not measured in 1 of the step's 2 intervals: the scheduler programs did not load"
                    .into()
            )
        );
        assert_eq!(w.runq_p99_le_us, w.runq_total_ms);
        assert!(w.retransmits.is_empty() && w.retransmit_sums() == Some((0, 0)));
        // Rows stored before the waits: every cell missing, retransmits not counted.
        let mut old = interval(1, RunqCell::default(), (0, 0));
        old.containers[0].waits = ContainerWaits::default();
        let w = row(&[(&old, 0)], 0, &BTreeSet::new());
        assert_eq!(w.retransmits_missing.as_deref(), Some(RETRANS_NOT_RECORDED));
        assert!(!w.any_measured());
    }
}
