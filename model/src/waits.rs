//! Every kernel-side wait of a container and a pair over one interval: run-queue delay (eBPF),
//! its sub-second windows beside CFS throttling, PSI, OOM kills, listen-queue drops per
//! listening port, conntrack, and retransmits per pair with their 100 ms windows.
//!
//! One cell per source, each `measured` or `unavailable` with the reason (never a silent 0).
//! Kept in one module, with one field in [`crate::ContainerInterval`] and one in
//! [`crate::PairInterval`], so the group moves as one piece; every field reads as its default
//! from rows stored before it existed. What each number is, its hook or file and kernel
//! minimum, exact or attributed: `docs/probes-waits.md`.

use probe_common::{Log2Hist, RunqStats};

use crate::probe::Log2Summary;

/// Most sub-second windows one container keeps per interval: 60 s of 100 ms polls. Past it,
/// the last window grows to cover the rest of the interval (the sum stays exact, only the
/// resolution of the tail is lost), so memory is bounded whatever the interval.
pub const MAX_WINDOWS: usize = 600;

/// A container's waits over one interval.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct ContainerWaits {
    /// Time its threads spent runnable and not running (eBPF on the scheduler).
    pub runq: RunqCell,
    /// Run-queue delay and throttled time per poll window (100 ms) of the interval, oldest
    /// first, at most [`MAX_WINDOWS`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<WaitWindow>,
    /// Pressure stall information of its cgroup.
    pub psi: PsiCell,
    /// Processes of its cgroup killed by the OOM killer.
    pub oom: OomCell,
    /// Listening sockets of its network namespace: drops per port, accept queue, backlog.
    pub listeners: ListenerCell,
    /// Connection tracking of its network namespace.
    pub conntrack: ConntrackCell,
}

/// Run-queue delay of a container over an interval, or why there is none.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
#[expect(
    clippy::large_enum_variant,
    reason = "one cell per container and interval; the histogram is the measurement"
)]
pub enum RunqCell {
    /// Measured: by default from the scheduler's per-thread counters, read once per poll
    /// (count and total); with `--runq-waits` by a program on every context switch, which
    /// also times each wait (the histogram).
    Measured {
        /// Waits that ended in the interval (switch-ins after a wakeup or a preemption).
        count: u64,
        /// Their sum, ns: thread-time spent waiting for a CPU (two threads waiting 1 s
        /// each are 2 s).
        total_ns: u64,
        /// Percentiles of one wait, µs (log2 bucket upper bounds); `None` when the waits
        /// were not timed one by one (without `--runq-waits`, or merged with such an
        /// interval): see [`NO_PER_WAIT`].
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delay_us: Option<Log2Summary>,
        /// The histogram of one wait, µs, for merging intervals exactly; `None` as above.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delay_buckets: Option<Log2Hist>,
    },
    /// Not measured, with the reason.
    Unavailable {
        /// Why.
        reason: String,
    },
}

impl Default for RunqCell {
    fn default() -> Self {
        RunqCell::Unavailable {
            reason: "not sampled".into(),
        }
    }
}

/// Why a measured run-queue cell has no per-wait percentiles.
pub const NO_PER_WAIT: &str = "the waits were counted from the scheduler's per-thread totals, \
     not timed one by one: per-wait percentiles need `--runq-waits` (a program on every \
     context switch)";

impl RunqCell {
    /// The cell for one interval's delta, with its per-wait histogram.
    pub fn of(d: &RunqStats) -> Self {
        RunqCell::Measured {
            count: d.count,
            total_ns: d.total_ns,
            delay_us: Some(Log2Summary::of(&d.delay_us)),
            delay_buckets: Some(d.delay_us),
        }
    }

    /// The cell for one interval's delta counted from totals: no per-wait histogram.
    pub fn totals(d: &RunqStats) -> Self {
        RunqCell::Measured {
            count: d.count,
            total_ns: d.total_ns,
            delay_us: None,
            delay_buckets: None,
        }
    }

    /// Total wait (ns), `None` when not measured.
    pub fn total_ns(&self) -> Option<u64> {
        match self {
            RunqCell::Measured { total_ns, .. } => Some(*total_ns),
            RunqCell::Unavailable { .. } => None,
        }
    }
}

/// One poll window (about 100 ms) of a container's interval, on the probe's monotonic clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WaitWindow {
    /// Window start (ns, CLOCK_MONOTONIC).
    pub start_ns: u64,
    /// Window end (ns).
    pub end_ns: u64,
    /// Run-queue waits that ended in the window, summed (ns); `None` when not measured.
    pub runq_ns: Option<u64>,
    /// How many waits ended in the window.
    #[serde(default)]
    pub runq_count: u64,
    /// Time the container's cgroup was throttled in the window (ns, cpu.stat
    /// `throttled_time`/`throttled_usec`); `None` without a CFS bandwidth source.
    pub throttled_ns: Option<u64>,
}

/// Appends `w` to `windows`, bounded by [`MAX_WINDOWS`]: past the bound the last window
/// absorbs `w` (its end moves, its sums grow).
pub fn push_window(windows: &mut Vec<WaitWindow>, w: WaitWindow) {
    if windows.len() < MAX_WINDOWS {
        windows.push(w);
        return;
    }
    let last = windows.last_mut().expect("MAX_WINDOWS > 0");
    last.end_ns = w.end_ns;
    last.runq_ns = match (last.runq_ns, w.runq_ns) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    };
    last.runq_count += w.runq_count;
    last.throttled_ns = match (last.throttled_ns, w.throttled_ns) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    };
}

/// Stall time of one resource over an interval (a `*.pressure` file's `total=` deltas).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pressure {
    /// Time at least one task of the cgroup stalled on the resource (µs).
    pub some_us: u64,
    /// Time every non-idle task stalled at once (µs); `None` where the file has no `full`
    /// line (`cpu.pressure` before 5.13).
    pub full_us: Option<u64>,
}

/// PSI of a container over an interval, or why there is none.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum PsiCell {
    /// Read from the cgroup's `cpu.pressure`, `memory.pressure`, `io.pressure`.
    Measured {
        /// CPU stalls.
        cpu: Option<Pressure>,
        /// Memory stalls (reclaim, refaults, swap-in).
        memory: Option<Pressure>,
        /// I/O stalls.
        io: Option<Pressure>,
    },
    /// Not available, with the reason.
    Unavailable {
        /// Why.
        reason: String,
    },
}

impl Default for PsiCell {
    fn default() -> Self {
        PsiCell::Unavailable {
            reason: "not sampled".into(),
        }
    }
}

/// OOM kills of a container over an interval, or why there is no count.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum OomCell {
    /// Read from the memory cgroup's `oom_kill` counter.
    Measured {
        /// Processes the OOM killer killed in the interval.
        oom_kills: u64,
    },
    /// Not available, with the reason.
    Unavailable {
        /// Why.
        reason: String,
    },
}

impl Default for OomCell {
    fn default() -> Self {
        OomCell::Unavailable {
            reason: "not sampled".into(),
        }
    }
}

/// One listening port of a container's network namespace over an interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListenerWaits {
    /// The local port.
    pub local_port: u16,
    /// Listening sockets on it (more than one with SO_REUSEPORT, or IPv4 and IPv6).
    pub sockets: u64,
    /// SYNs and handshake-completing ACKs the listeners dropped in the interval: every
    /// `tcp_listendrop()` on them (accept queue full, and the rarer drops ListenDrops also
    /// counts), read as each listener's `sk_drops`.
    pub drops: u64,
    /// Connections waiting in the accept queues at the end of the interval (sock_diag
    /// `idiag_rqueue` of a listener).
    pub accept_queue: u64,
    /// The accept queues' limit (`idiag_wqueue`: the backlog given to listen(), capped by
    /// `net.core.somaxconn`).
    pub backlog: u64,
}

/// Listening sockets of a container's network namespace, or why there are none.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ListenerCell {
    /// From the namespace's sock_diag dump.
    Measured {
        /// One row per listening port, by port.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        ports: Vec<ListenerWaits>,
    },
    /// Not available, with the reason.
    Unavailable {
        /// Why.
        reason: String,
    },
}

impl Default for ListenerCell {
    fn default() -> Self {
        ListenerCell::Unavailable {
            reason: "not sampled".into(),
        }
    }
}

/// Connection tracking of a container's network namespace, or why there is none.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ConntrackCell {
    /// Read inside the namespace.
    Measured {
        /// Entries in the namespace's table at the end of the interval
        /// (`net.netfilter.nf_conntrack_count`).
        entries: u64,
        /// The table's limit (`net.netfilter.nf_conntrack_max`, host-wide).
        max: u64,
        /// New connections dropped in the interval because the table was full and nothing
        /// could be evicted (`/proc/net/stat/nf_conntrack` `drop`, summed over CPUs);
        /// `None` where the kernel has no such column.
        drop: Option<u64>,
        /// Entries evicted early to make room (`early_drop`).
        early_drop: Option<u64>,
        /// Inserts that failed (`insert_failed`: a race lost to another CPU's identical
        /// entry, the classic UDP DNS loss).
        insert_failed: Option<u64>,
    },
    /// Not available, with the reason (conntrack is not loaded, or not in this namespace).
    Unavailable {
        /// Why.
        reason: String,
    },
}

impl Default for ConntrackCell {
    fn default() -> Self {
        ConntrackCell::Unavailable {
            reason: "not sampled".into(),
        }
    }
}

/// Retransmits of one pair over an interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct PairWaits {
    /// Segments retransmitted toward the destination (what `TcpRetransSegs` counts), SYNs
    /// included.
    pub retrans_segs: u64,
    /// Of those, SYN retransmits: connects retried (what `TCPSynRetrans` counts); each adds
    /// the SYN timeout (1 s, then 2 s, 4 s ...) to a connect.
    pub syn_retrans: u64,
    /// The 100 ms windows of the monotonic clock that had a retransmit and closed in the
    /// interval, oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub windows: Vec<RetransWindowCell>,
}

impl PairWaits {
    /// Data retransmits: all retransmitted segments but the SYNs.
    pub fn data_retrans(&self) -> u64 {
        self.retrans_segs.saturating_sub(self.syn_retrans)
    }
}

/// Retransmits of a pair in one 100 ms window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RetransWindowCell {
    /// Window start (ns, CLOCK_MONOTONIC).
    pub start_ns: u64,
    /// Window end (ns).
    pub end_ns: u64,
    /// Segments retransmitted in it, SYNs included.
    pub retrans_segs: u64,
    /// Of those, SYN retransmits.
    pub syn_retrans: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_bounded_and_the_tail_keeps_the_sums() {
        let mut ws = Vec::new();
        for k in 0..(MAX_WINDOWS as u64 + 5) {
            push_window(
                &mut ws,
                WaitWindow {
                    start_ns: k * 100,
                    end_ns: (k + 1) * 100,
                    runq_ns: Some(2),
                    runq_count: 1,
                    throttled_ns: Some(3),
                },
            );
        }
        assert_eq!(ws.len(), MAX_WINDOWS);
        let last = ws.last().unwrap();
        assert_eq!(last.start_ns, (MAX_WINDOWS as u64 - 1) * 100);
        assert_eq!(last.end_ns, (MAX_WINDOWS as u64 + 5) * 100);
        assert_eq!(
            (last.runq_ns, last.runq_count, last.throttled_ns),
            (Some(12), 6, Some(18))
        );
        let total: u64 = ws.iter().map(|w| w.runq_ns.unwrap()).sum();
        assert_eq!(total, 2 * (MAX_WINDOWS as u64 + 5));
    }

    #[test]
    fn rows_stored_before_the_waits_existed_read_as_unavailable() {
        let w: ContainerWaits = serde_json::from_str("{}").unwrap();
        assert_eq!(w, ContainerWaits::default());
        assert!(matches!(w.runq, RunqCell::Unavailable { .. }));
        let p: PairWaits = serde_json::from_str("{}").unwrap();
        assert_eq!(p, PairWaits::default());
        // The output contract: tagged cells, snake_case names.
        let mut h = Log2Hist::default();
        h.record(300);
        let cell = RunqCell::of(&RunqStats {
            count: 1,
            total_ns: 300_000,
            delay_us: h,
        });
        let json = serde_json::to_value(&cell).unwrap();
        assert_eq!(json["state"], "measured");
        assert_eq!(json["total_ns"], 300_000);
        assert_eq!(json["delay_us"]["p99_le"], 512);
        assert_eq!(
            serde_json::to_value(&PsiCell::Measured {
                cpu: Some(Pressure {
                    some_us: 5,
                    full_us: None
                }),
                memory: None,
                io: None
            })
            .unwrap(),
            serde_json::json!({"state":"measured","cpu":{"some_us":5,"full_us":null},"memory":null,"io":null})
        );
    }
}
