//! Types that cross the kernel/user boundary of herd's probe.
//!
//! Every type here is `#[repr(C)]`, `Copy`, made of fixed-width integers with no implicit
//! padding, and defined once: the eBPF programs in `probe-ebpf` write them into maps and the
//! user-space loader in `probe` reads them back. The `user` feature adds `aya::Pod`.
#![no_std]
#![deny(missing_docs)]

/// One per-cgroup TCP counter. The discriminant is the index into [`CgroupCounters::v`].
///
/// Adding a counter: add a variant before `Count`, extend [`Counter::ALL`] and
/// [`Counter::name`]; the map value grows with it and user space reads it by name.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// TCP active opens: a socket entered SYN_SENT (the kernel's `TcpActiveOpens`).
    Connects = 0,
    /// TCP passive opens completed: a child socket went SYN_RECV → ESTABLISHED.
    Accepts = 1,
    /// Sockets that became timewait sockets: FIN_WAIT2/CLOSING → CLOSE with no socket error
    /// (`tcp_time_wait()` → `tcp_done()`).
    TimeWaitEntries = 2,
    /// connect() failures: ECONNREFUSED (a reset answered the SYN).
    ConnectRefused = 3,
    /// connect() failures: ETIMEDOUT (SYN retries exhausted).
    ConnectTimedOut = 4,
    /// connect() failures: EADDRNOTAVAIL (no free ephemeral port for the destination).
    ConnectAddrNotAvail = 5,
    /// connect() failures: ENETUNREACH.
    ConnectNetUnreach = 6,
    /// connect() failures: EHOSTUNREACH.
    ConnectHostUnreach = 7,
    /// connect() failures with any other errno.
    ConnectOtherError = 8,
    /// Resets sent (`tcp/tcp_send_reset`).
    ResetsSent = 9,
    /// Resets received (`tcp/tcp_receive_reset`).
    ResetsReceived = 10,
    /// Segments retransmitted (`tcp/tcp_retransmit_skb`).
    Retransmits = 11,
    /// Number of counters; not a counter.
    Count = 12,
}

impl Counter {
    /// Every real counter, in index order.
    pub const ALL: [Counter; Counter::Count as usize] = [
        Counter::Connects,
        Counter::Accepts,
        Counter::TimeWaitEntries,
        Counter::ConnectRefused,
        Counter::ConnectTimedOut,
        Counter::ConnectAddrNotAvail,
        Counter::ConnectNetUnreach,
        Counter::ConnectHostUnreach,
        Counter::ConnectOtherError,
        Counter::ResetsSent,
        Counter::ResetsReceived,
        Counter::Retransmits,
    ];

    /// The connect() failures, one counter per errno class: what a "connect errors" cell
    /// sums.
    pub const CONNECT_ERRORS: [Counter; 6] = [
        Counter::ConnectRefused,
        Counter::ConnectTimedOut,
        Counter::ConnectAddrNotAvail,
        Counter::ConnectNetUnreach,
        Counter::ConnectHostUnreach,
        Counter::ConnectOtherError,
    ];

    /// The stable, snake_case name used in JSON output and metric names.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::Connects => "connects",
            Counter::Accepts => "accepts",
            Counter::TimeWaitEntries => "time_wait_entries",
            Counter::ConnectRefused => "connect_refused",
            Counter::ConnectTimedOut => "connect_timed_out",
            Counter::ConnectAddrNotAvail => "connect_addr_not_avail",
            Counter::ConnectNetUnreach => "connect_net_unreach",
            Counter::ConnectHostUnreach => "connect_host_unreach",
            Counter::ConnectOtherError => "connect_other_error",
            Counter::ResetsSent => "resets_sent",
            Counter::ResetsReceived => "resets_received",
            Counter::Retransmits => "retransmits",
            Counter::Count => "count",
        }
    }

    /// The counter for a connect() failure with `errno` (positive).
    pub const fn for_connect_errno(errno: i32) -> Counter {
        match errno {
            errno::ECONNREFUSED => Counter::ConnectRefused,
            errno::ETIMEDOUT => Counter::ConnectTimedOut,
            errno::EADDRNOTAVAIL => Counter::ConnectAddrNotAvail,
            errno::ENETUNREACH => Counter::ConnectNetUnreach,
            errno::EHOSTUNREACH => Counter::ConnectHostUnreach,
            _ => Counter::ConnectOtherError,
        }
    }
}

/// The errno values the probe classifies (`include/uapi/asm-generic/errno.h`, the same on
/// every architecture herd supports).
pub mod errno {
    /// EINTR
    pub const EINTR: i32 = 4;
    /// EADDRNOTAVAIL
    pub const EADDRNOTAVAIL: i32 = 99;
    /// ENETUNREACH
    pub const ENETUNREACH: i32 = 101;
    /// EISCONN
    pub const EISCONN: i32 = 106;
    /// ETIMEDOUT
    pub const ETIMEDOUT: i32 = 110;
    /// ECONNREFUSED
    pub const ECONNREFUSED: i32 = 111;
    /// EHOSTUNREACH
    pub const EHOSTUNREACH: i32 = 113;
    /// EALREADY
    pub const EALREADY: i32 = 114;
    /// EINPROGRESS
    pub const EINPROGRESS: i32 = 115;
}

/// Number of per-cgroup counters.
pub const N_COUNTERS: usize = Counter::Count as usize;

/// Value of the per-CPU `CGROUP_COUNTERS` map, keyed by the cgroup v2 id (the inode number of
/// the cgroup's directory in the unified hierarchy).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupCounters {
    /// Counter values indexed by [`Counter`].
    pub v: [u64; N_COUNTERS],
}

/// Index into the per-CPU `LOSSES` array: events the programs could not record.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// `CGROUP_COUNTERS` was full: a cgroup's event was lost.
    CgroupMapFull = 0,
    /// Reading the socket's cgroup failed (the pointer chain was null or unreadable).
    CgroupUnreadable = 1,
    /// `SOCKS` was full: a socket's lifetime and connect latency were not tracked.
    SockMapFull = 2,
    /// `PAIRS` was full: a destination pair's event was lost.
    PairMapFull = 3,
    /// The kernel did not run a program for an event because that program was already
    /// running on the same CPU (a softirq interrupting it in process context). Never written
    /// by the programs: user space reads each program's `recursion_misses` into this slot.
    RecursionMiss = 4,
    /// `RUNQ_BASE` refused a thread's first entry: the part of its next run-queue waits
    /// that a migration accounted (the thread moved to another CPU while it waited) may be
    /// missing from the run-queue delay. With the fallback programs, `RUNQ_TASKS` refused
    /// it: that wakeup or preemption was not timed.
    RunqStartFull = 5,
    /// `RUNQ` was full: a cgroup's run-queue wait was measured but not recorded.
    RunqMapFull = 6,
    /// `RETRANS_WINDOWS` was full: a retransmit is in its pair's totals but not in a
    /// 100 ms window.
    RetransWindowFull = 7,
    /// `RUNQ_EXITS` was full: an exiting thread's run-queue waits since the task walk's
    /// previous poll were lost.
    RunqExitFull = 8,
    /// Number of loss reasons; not a reason.
    Count = 9,
}

impl Loss {
    /// Every loss reason, in index order.
    pub const ALL: [Loss; Loss::Count as usize] = [
        Loss::CgroupMapFull,
        Loss::CgroupUnreadable,
        Loss::SockMapFull,
        Loss::PairMapFull,
        Loss::RecursionMiss,
        Loss::RunqStartFull,
        Loss::RunqMapFull,
        Loss::RetransWindowFull,
        Loss::RunqExitFull,
    ];

    /// The stable, snake_case name used in output.
    pub const fn name(self) -> &'static str {
        match self {
            Loss::CgroupMapFull => "cgroup_map_full",
            Loss::CgroupUnreadable => "cgroup_unreadable",
            Loss::SockMapFull => "sock_map_full",
            Loss::PairMapFull => "pair_map_full",
            Loss::RecursionMiss => "recursion_miss",
            Loss::RunqStartFull => "runq_start_full",
            Loss::RunqMapFull => "runq_map_full",
            Loss::RetransWindowFull => "retrans_window_full",
            Loss::RunqExitFull => "runq_exit_full",
            Loss::Count => "count",
        }
    }
}

/// Capacity of the per-socket map (the issue asks for at least 64 k sockets).
pub const MAX_SOCKS: u32 = 65_536;

/// Cgroups remembered from `cgroup_mkdir`, newest kept (an LRU map): enough for the one-shot
/// containers of many intervals.
pub const MAX_CREATED: u32 = 1_024;

/// Longest cgroup path kept from `cgroup_mkdir` (NUL included): `/system.slice/docker-<64
/// hex>.scope` is 86 bytes, a Kubernetes pod slice about 120.
pub const CGROUP_PATH_LEN: usize = 160;

/// A cgroup v2 directory's path relative to the unified root, as `cgroup_mkdir` saw it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupPath {
    /// The path's bytes, NUL-terminated (a longer path is cut).
    pub bytes: [u8; CGROUP_PATH_LEN],
}

impl CgroupPath {
    /// The path up to its NUL, if it is UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        let end = self
            .bytes
            .iter()
            .position(|b| *b == 0)
            .unwrap_or(CGROUP_PATH_LEN);
        core::str::from_utf8(&self.bytes[..end]).ok()
    }
}

/// Capacity of the per-destination-pair map.
pub const MAX_PAIRS: u32 = 4_096;

/// Buckets of a [`Log2Hist`]: bucket `i` counts values in `[2^i, 2^(i+1))` (bucket 0 also
/// holds 0), the last bucket everything larger.
pub const HIST_BUCKETS: usize = 26;

/// The one log2 histogram herd keeps: in the kernel (connect latency, connection lifetime
/// per destination), and in user space for the sockets' srtt. Its percentiles are bucket
/// upper bounds ("p99 ≤ 128 µs"), which is all a log2 histogram can say honestly.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Log2Hist(pub [u64; HIST_BUCKETS]);

impl Default for Log2Hist {
    fn default() -> Self {
        Self([0; HIST_BUCKETS])
    }
}

impl Log2Hist {
    /// The exclusive upper bound of bucket `i` (`u64::MAX` for the open last bucket).
    pub const fn upper(i: usize) -> u64 {
        if i >= HIST_BUCKETS - 1 {
            u64::MAX
        } else {
            1u64 << (i + 1)
        }
    }

    /// Counts `v` once.
    pub fn record(&mut self, v: u64) {
        self.0[log2_bucket(v)] += 1;
    }

    /// Adds `o`'s counts (per-CPU copies, intervals, pairs): merging is exact.
    pub fn add(&mut self, o: &Self) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += b;
        }
    }

    /// `self - o` per bucket, saturating at 0 (a delta between two cumulative readings).
    pub fn saturating_sub(&self, o: &Self) -> Self {
        let mut d = *self;
        for (a, b) in d.0.iter_mut().zip(o.0) {
            *a = a.saturating_sub(b);
        }
        d
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.0.iter().sum()
    }

    /// The upper bound of the bucket holding the `per_mille`/1000 quantile (500: the
    /// median, 990: p99); None when empty.
    pub fn quantile_le(&self, per_mille: u64) -> Option<u64> {
        let count = self.count();
        if count == 0 {
            return None;
        }
        // ceil(count × q), at least 1: the rank of the value the quantile names.
        let rank = ((count * per_mille.min(1000)).div_ceil(1000)).max(1);
        let mut seen = 0;
        for (i, b) in self.0.iter().enumerate() {
            seen += b;
            if seen >= rank {
                return Some(Self::upper(i));
            }
        }
        Some(Self::upper(HIST_BUCKETS - 1))
    }

    /// The upper bound of the highest non-empty bucket; None when empty.
    pub fn max_le(&self) -> Option<u64> {
        self.0.iter().rposition(|&b| b > 0).map(Self::upper)
    }
}

/// A source container → remote address:port pair, for sockets this host opened (active).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PairKey {
    /// cgroup v2 id of the socket's owner.
    pub cgroup: u64,
    /// Remote address: 4 bytes for IPv4 (rest zero), 16 for IPv6, network byte order.
    pub addr: [u8; 16],
    /// Remote port, host byte order.
    pub port: u16,
    /// AF_INET (2) or AF_INET6 (10).
    pub family: u16,
    /// Explicit padding; always zero so keys compare bytewise.
    pub _pad: u32,
}

/// Per-pair counters and histograms.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairStats {
    /// New connections (SYN sent) toward the pair.
    pub connects: u64,
    /// Handshakes completed (SYN_SENT → ESTABLISHED).
    pub established: u64,
    /// Timewait entries of sockets toward the pair.
    pub time_wait_entries: u64,
    /// Connections to the pair that closed (any path), with a known open time.
    pub closed: u64,
    /// Connect latency, SYN sent → ESTABLISHED, in microseconds.
    pub connect_latency_us: Log2Hist,
    /// Connection lifetime, SYN sent → CLOSE, in milliseconds.
    pub lifetime_ms: Log2Hist,
    /// Segments retransmitted toward the pair (`tcp_retransmit_skb`, counted by the skb's
    /// `tcp_gso_segs` as the kernel's `TcpRetransSegs` is), SYN retransmits included.
    pub retrans_segs: u64,
    /// Of those, SYN retransmits: a connect's SYN sent again (`TCPHDR_SYN` in the skb's
    /// `tcp_flags`, what the kernel's `TCPSynRetrans` counts).
    pub syn_retrans: u64,
}

impl PairStats {
    /// Adds `o` into `self` (summing per-CPU copies, or intervals).
    pub fn add(&mut self, o: &PairStats) {
        self.connects += o.connects;
        self.established += o.established;
        self.time_wait_entries += o.time_wait_entries;
        self.closed += o.closed;
        self.connect_latency_us.add(&o.connect_latency_us);
        self.lifetime_ms.add(&o.lifetime_ms);
        self.retrans_segs += o.retrans_segs;
        self.syn_retrans += o.syn_retrans;
    }

    /// `self - o`, saturating at 0 per field (a delta between two cumulative readings).
    pub fn delta(&self, o: &PairStats) -> PairStats {
        let mut d = *self;
        d.connects = d.connects.saturating_sub(o.connects);
        d.established = d.established.saturating_sub(o.established);
        d.time_wait_entries = d.time_wait_entries.saturating_sub(o.time_wait_entries);
        d.closed = d.closed.saturating_sub(o.closed);
        d.connect_latency_us = self
            .connect_latency_us
            .saturating_sub(&o.connect_latency_us);
        d.lifetime_ms = self.lifetime_ms.saturating_sub(&o.lifetime_ms);
        d.retrans_segs = d.retrans_segs.saturating_sub(o.retrans_segs);
        d.syn_retrans = d.syn_retrans.saturating_sub(o.syn_retrans);
        d
    }
}

/// Run-queue delay of one cgroup (value of the per-CPU `RUNQ` map, keyed by cgroup v2 id, or
/// [`OWN_TGID_KEY`] for the threads of the process the loader named): the time its tasks
/// spent runnable and not running, from a wakeup or a preemption to the next switch-in.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunqStats {
    /// Waits measured (switch-ins that ended one).
    pub count: u64,
    /// Sum of the waits, ns.
    pub total_ns: u64,
    /// The waits, microseconds.
    pub delay_us: Log2Hist,
}

impl RunqStats {
    /// Adds `o` into `self` (per-CPU copies, cgroups of one container).
    pub fn add(&mut self, o: &RunqStats) {
        self.count += o.count;
        self.total_ns += o.total_ns;
        self.delay_us.add(&o.delay_us);
    }

    /// `self - o`, saturating at 0 per field (a delta between two cumulative readings).
    pub fn delta(&self, o: &RunqStats) -> RunqStats {
        RunqStats {
            count: self.count.saturating_sub(o.count),
            total_ns: self.total_ns.saturating_sub(o.total_ns),
            delay_us: self.delay_us.saturating_sub(&o.delay_us),
        }
    }
}

/// The `RUNQ` key under which the threads of the process named by the `OWN_TGID` global are
/// counted instead of under their cgroup: herd's own driver gets its own row. No cgroup has
/// this id (kernfs ids are inode numbers, far below it).
pub const OWN_TGID_KEY: u64 = u64::MAX;

/// Direct-mapped run-queue slots per CPU in `RUNQ_SLOTS`: CPU `c`'s slot for key `k` is
/// `c * RUNQ_SLOTS_PER_CPU + k % RUNQ_SLOTS_PER_CPU`. The first key to reach a slot keeps it;
/// a key whose slot another holds is counted in `RUNQ` instead. A power of two.
pub const RUNQ_SLOTS_PER_CPU: u32 = 256;

/// One slot of `RUNQ_SLOTS`: the key that holds it (0: free; kernfs ids start at 1) and its
/// run-queue delay on that slot's CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunqSlot {
    /// A cgroup v2 id or [`OWN_TGID_KEY`]; 0 while the slot is free.
    pub key: u64,
    /// The key's waits on this CPU.
    pub stats: RunqStats,
}

/// One thread as the `runq_tasks` iterator writes it: who it is, where it runs and the
/// scheduler's two run-queue counters for it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskWait {
    /// Thread id (`task_struct.pid`).
    pub tid: u32,
    /// Process id (`task_struct.tgid`).
    pub tgid: u32,
    /// `task_struct.start_time` (CLOCK_MONOTONIC ns at fork): tells a new thread that reuses
    /// an id from the one seen before.
    pub start_time: u64,
    /// Its cgroup v2 id.
    pub cgroup: u64,
    /// `sched_info.run_delay`: ns it has spent runnable and not running (schedstat field 2).
    pub run_delay: u64,
    /// `sched_info.pcount`: waits that ended (switch-ins after one; schedstat field 3).
    pub pcount: u64,
}

/// Capacity of the fallback programs' per-thread `RUNQ_TASKS` map (an LRU: the threads
/// switched in most recently are kept).
pub const MAX_RUNQ_TASKS: u32 = 32_768;

/// One thread's state in `RUNQ_TASKS`, the fallback run-queue programs' map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunqTask {
    /// When it became runnable (`bpf_ktime_get_ns`), 0 when it is not waiting.
    pub start_ns: u64,
    /// The wait it ended at its last switch-in, ns.
    pub waited_ns: u64,
    /// 1 while `waited_ns` is not yet recorded (it is, at the thread's next switch-out).
    pub pending: u64,
}

/// Most slots of `RUNQ_BASE` (16 MiB): the loader sizes it to the kernel's `pid_max`
/// rounded up to a power of two, up to this.
pub const MAX_RUNQ_BASE_SLOTS: u32 = 1 << 20;

/// One thread's slot in `RUNQ_BASE`: its `sched_info.run_delay` right after its last
/// switch-in, and which thread that was.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunqBase {
    /// `sched_info.run_delay` (ns) once the wait that ended at its last switch-in was added.
    pub run_delay: u64,
    /// `task_struct.start_time` of the thread: tells a new thread that reuses a freed
    /// `task_struct` from the one the entry was written for.
    pub start_time: u64,
}

/// Length of a retransmit window: retransmits are kept per pair and per window of this
/// many ns of the monotonic clock (window `w` = `[w × RETRANS_WINDOW_NS, (w+1) × …)`).
pub const RETRANS_WINDOW_NS: u64 = 100_000_000;

/// Capacity of the (pair, window) → retransmits map; user space drains closed windows every
/// interval, so this bounds the pairs × windows with a retransmit in one interval.
pub const MAX_RETRANS_WINDOWS: u32 = 8_192;

/// Key of the `RETRANS_WINDOWS` map: one pair in one 100 ms window.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RetransWindowKey {
    /// The pair.
    pub pair: PairKey,
    /// The window: `bpf_ktime_get_ns() / RETRANS_WINDOW_NS`.
    pub window: u64,
}

/// Value of the `RETRANS_WINDOWS` map.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetransWindow {
    /// Segments retransmitted in the window, SYNs included.
    pub retrans_segs: u64,
    /// Of those, SYN retransmits.
    pub syn_retrans: u64,
}

/// What the programs remember about one live socket (keyed by its kernel address).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockInfo {
    /// When the socket entered SYN_SENT (active) or ESTABLISHED (passive), bpf_ktime ns.
    pub opened_ns: u64,
    /// The destination pair for active sockets (cgroup 0 for passive ones).
    pub pair: PairKey,
    /// 1 for active (connect) sockets, 0 for accepted ones.
    pub active: u32,
    /// Explicit padding.
    pub _pad: u32,
}

/// log2 bucket of `v` for [`HIST_BUCKETS`]-bucket histograms, without loops (the verifier
/// prefers straight-line code).
#[inline(always)]
pub const fn log2_bucket(v: u64) -> usize {
    if v == 0 {
        return 0;
    }
    let b = 63 - v.leading_zeros() as usize;
    if b >= HIST_BUCKETS {
        HIST_BUCKETS - 1
    } else {
        b
    }
}

/// Capacity of the per-cgroup maps (the issue asks for at least 4 096 cgroups).
pub const MAX_CGROUPS: u32 = 8192;

/// Struct-member byte offsets the programs need, resolved from the running kernel's BTF at
/// load time and written into the programs' read-only globals. Nothing here is compiled in:
/// Rust eBPF has no CO-RE, so this is how herd stays portable across kernels.
///
/// The global names used by the programs and the loader are the constants below.
pub mod globals {
    /// `offsetof(struct sock, sk_cgrp_data) + offsetof(struct sock_cgroup_data, cgroup)`.
    pub const SOCK_CGROUP: &str = "SOCK_CGROUP_OFF";
    /// `offsetof(struct cgroup, kn)`.
    pub const CGROUP_KN: &str = "CGROUP_KN_OFF";
    /// `offsetof(struct kernfs_node, id)`.
    pub const KERNFS_NODE_ID: &str = "KERNFS_NODE_ID_OFF";
    /// `offsetof(struct sock, sk_err)`.
    pub const SOCK_ERR: &str = "SOCK_ERR_OFF";
    /// `offsetof(struct sock, sk_protocol)`.
    pub const SOCK_PROTOCOL: &str = "SOCK_PROTOCOL_OFF";
    /// `offsetof(struct sock_common, skc_daddr)` (struct sock starts with it).
    pub const SKC_DADDR: &str = "SKC_DADDR_OFF";
    /// `offsetof(struct sock_common, skc_v6_daddr)`.
    pub const SKC_V6_DADDR: &str = "SKC_V6_DADDR_OFF";
    /// `offsetof(struct sock_common, skc_dport)`.
    pub const SKC_DPORT: &str = "SKC_DPORT_OFF";
    /// `offsetof(struct sock_common, skc_family)`.
    pub const SKC_FAMILY: &str = "SKC_FAMILY_OFF";
    /// `offsetof(struct sock_common, skc_state)`: valid in full, request and timewait sockets.
    pub const SKC_STATE: &str = "SKC_STATE_OFF";
    /// `offsetof(struct task_struct, __state)` (5.14+; `state` before, a `long` whose low
    /// 32 bits are read the same way on little-endian): the fallback `sched_switch_old`.
    pub const TASK_STATE: &str = "TASK_STATE_OFF";
    /// `offsetof(struct task_struct, sched_info.last_queued)`: when the task was last
    /// enqueued (`rq_clock()`), 0 when it has not waited since it last ran
    /// (CONFIG_SCHED_INFO).
    pub const TASK_LAST_QUEUED: &str = "TASK_LAST_QUEUED_OFF";
    /// `offsetof(struct task_struct, sched_info.run_delay)`: ns the task spent waiting for a
    /// CPU (schedstat's field 2).
    pub const TASK_RUN_DELAY: &str = "TASK_RUN_DELAY_OFF";
    /// `offsetof(struct task_struct, start_time)`.
    pub const TASK_START_TIME: &str = "TASK_START_TIME_OFF";
    /// `offsetof(struct task_struct, se.cfs_rq)` (CONFIG_FAIR_GROUP_SCHED).
    pub const TASK_SE_CFS_RQ: &str = "TASK_SE_CFS_RQ_OFF";
    /// `offsetof(struct cfs_rq, rq)` (CONFIG_FAIR_GROUP_SCHED).
    pub const CFS_RQ_RQ: &str = "CFS_RQ_RQ_OFF";
    /// `offsetof(struct rq, clock)`: what `rq_clock()` returns.
    pub const RQ_CLOCK: &str = "RQ_CLOCK_OFF";
    /// `offsetof(struct rq, idle)`: the CPU's idle task.
    pub const RQ_IDLE: &str = "RQ_IDLE_OFF";
    /// `offsetof(struct task_struct, pid)`: the thread id.
    pub const TASK_PID: &str = "TASK_PID_OFF";
    /// Not an offset: `RUNQ_BASE`'s slots minus one.
    pub const RUNQ_BASE_MASK: &str = "RUNQ_BASE_MASK";
    /// `offsetof(struct task_struct, tgid)`.
    pub const TASK_TGID: &str = "TASK_TGID_OFF";
    /// `offsetof(struct task_struct, sched_info.pcount)`: waits that ended (schedstat's
    /// field 3).
    pub const TASK_PCOUNT: &str = "TASK_PCOUNT_OFF";
    /// `offsetof(struct task_struct, cgroups)`.
    pub const TASK_CGROUPS: &str = "TASK_CGROUPS_OFF";
    /// `offsetof(struct css_set, dfl_cgrp)`: the task's cgroup v2.
    pub const CSS_SET_DFL_CGRP: &str = "CSS_SET_DFL_CGRP_OFF";
    /// `offsetof(struct sk_buff, cb)`: where TCP keeps its `struct tcp_skb_cb`.
    pub const SKB_CB: &str = "SKB_CB_OFF";
    /// `offsetof(struct tcp_skb_cb, tcp_flags)`.
    pub const TCP_SKB_CB_FLAGS: &str = "TCP_SKB_CB_FLAGS_OFF";
    /// `offsetof(struct tcp_skb_cb, tcp_gso_segs)`: `tcp_skb_pcount()`.
    pub const TCP_SKB_CB_GSO_SEGS: &str = "TCP_SKB_CB_GSO_SEGS_OFF";
    /// `offsetof(struct tcp_sock, segs_out)`: segments the socket sent, its SYN included.
    pub const TCP_SEGS_OUT: &str = "TCP_SEGS_OUT_OFF";
    /// Not an offset: 1 when the connect() syscall tracepoints are attached.
    pub const CONNECT_SYSCALLS: &str = "CONNECT_SYSCALLS";
    /// Not an offset: the process (tgid) whose threads' run-queue delay is counted under
    /// [`super::OWN_TGID_KEY`], 0 for none.
    pub const OWN_TGID: &str = "OWN_TGID";
}

/// TCP states as numbered by the kernel (`include/net/tcp_states.h`); part of the UAPI-stable
/// `inet_sock_set_state` tracepoint contract.
pub mod tcp_state {
    /// TCP_ESTABLISHED
    pub const ESTABLISHED: i32 = 1;
    /// TCP_SYN_SENT
    pub const SYN_SENT: i32 = 2;
    /// TCP_SYN_RECV
    pub const SYN_RECV: i32 = 3;
    /// TCP_FIN_WAIT1
    pub const FIN_WAIT1: i32 = 4;
    /// TCP_FIN_WAIT2
    pub const FIN_WAIT2: i32 = 5;
    /// TCP_TIME_WAIT
    pub const TIME_WAIT: i32 = 6;
    /// TCP_CLOSE
    pub const CLOSE: i32 = 7;
    /// TCP_CLOSE_WAIT
    pub const CLOSE_WAIT: i32 = 8;
    /// TCP_LAST_ACK
    pub const LAST_ACK: i32 = 9;
    /// TCP_LISTEN
    pub const LISTEN: i32 = 10;
    /// TCP_CLOSING
    pub const CLOSING: i32 = 11;
    /// TCP_NEW_SYN_RECV
    pub const NEW_SYN_RECV: i32 = 12;
}

#[cfg(feature = "serde")]
extern crate alloc;

#[cfg(feature = "serde")]
mod serde_impls {
    use super::{HIST_BUCKETS, Log2Hist};

    /// Written as its bucket counts; also read from the `[upper bound, count]` pairs that
    /// probe intervals recorded srtt histograms as before this type existed.
    impl serde::Serialize for Log2Hist {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            self.0.serialize(s)
        }
    }

    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Form {
        Counts([u64; HIST_BUCKETS]),
        UpperAndCount(alloc::vec::Vec<(u64, u64)>),
    }

    impl<'de> serde::Deserialize<'de> for Log2Hist {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            Ok(match Form::deserialize(d)? {
                Form::Counts(c) => Log2Hist(c),
                Form::UpperAndCount(pairs) => {
                    let mut h = Log2Hist::default();
                    for (upper, n) in pairs {
                        // The bucket whose upper bound is `upper` holds upper / 2.
                        h.0[super::log2_bucket(upper / 2)] += n;
                    }
                    h
                }
            })
        }
    }
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY (all): repr(C), fixed-width integer fields, explicit padding only; every bit
    // pattern is a valid value.
    unsafe impl aya::Pod for super::CgroupCounters {}
    unsafe impl aya::Pod for super::PairKey {}
    unsafe impl aya::Pod for super::PairStats {}
    unsafe impl aya::Pod for super::SockInfo {}
    unsafe impl aya::Pod for super::CgroupPath {}
    unsafe impl aya::Pod for super::RunqStats {}
    unsafe impl aya::Pod for super::RunqBase {}
    unsafe impl aya::Pod for super::RunqTask {}
    unsafe impl aya::Pod for super::TaskWait {}
    unsafe impl aya::Pod for super::RetransWindowKey {}
    unsafe impl aya::Pod for super::RetransWindow {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2_quantiles_are_bucket_upper_bounds() {
        let mut h = Log2Hist::default();
        assert_eq!((h.quantile_le(500), h.max_le()), (None, None));
        for v in [3, 3, 3, 100] {
            h.record(v);
        }
        // 3 is in [2, 4); 100 in [64, 128).
        assert_eq!(h.count(), 4);
        assert_eq!(h.quantile_le(500), Some(4));
        assert_eq!(h.quantile_le(750), Some(4));
        assert_eq!(h.quantile_le(990), Some(128));
        assert_eq!(h.max_le(), Some(128));
        let mut big = Log2Hist::default();
        big.record(u64::MAX);
        assert_eq!(big.max_le(), Some(u64::MAX));
        let mut sum = h;
        sum.add(&big);
        assert_eq!(sum.count(), 5);
        assert_eq!(sum.saturating_sub(&big), h);
    }

    #[test]
    fn log2_buckets() {
        assert_eq!(log2_bucket(0), 0);
        assert_eq!(log2_bucket(1), 0);
        assert_eq!(log2_bucket(2), 1);
        assert_eq!(log2_bucket(3), 1);
        assert_eq!(log2_bucket(1024), 10);
        assert_eq!(log2_bucket(u64::MAX), HIST_BUCKETS - 1);
    }

    #[test]
    fn layouts_have_no_implicit_padding() {
        assert_eq!(core::mem::size_of::<PairKey>(), 8 + 16 + 2 + 2 + 4);
        assert_eq!(core::mem::size_of::<SockInfo>(), 8 + 32 + 4 + 4);
        assert_eq!(
            core::mem::size_of::<PairStats>(),
            8 * (6 + 2 * HIST_BUCKETS)
        );
        assert_eq!(core::mem::size_of::<RunqStats>(), 8 * (2 + HIST_BUCKETS));
        assert_eq!(core::mem::size_of::<RetransWindowKey>(), 32 + 8);
        assert_eq!(core::mem::size_of::<RetransWindow>(), 16);
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
        for (i, l) in Loss::ALL.iter().enumerate() {
            assert_eq!(*l as usize, i);
        }
        assert_eq!(Counter::for_connect_errno(111), Counter::ConnectRefused);
        assert_eq!(Counter::for_connect_errno(1), Counter::ConnectOtherError);
    }
}
