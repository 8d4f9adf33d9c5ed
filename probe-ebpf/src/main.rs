//! herd's kernel programs.
//!
//! Only program types that load on locked-down hosts are used (see `docs/build.md`): raw
//! tracepoints, which need neither kprobes nor tracefs, and classic tracepoints where no raw
//! one carries the data: `cgroup/cgroup_mkdir` (a new cgroup's id and path) and, only when
//! asked for (`--connect-syscalls`: they slow every syscall on the host),
//! `syscalls/sys_exit_connect` (the only place a connect() error that precedes any TCP state
//! is visible) with `sys_enter_connect` (which tells it the address family).
//! Every struct offset they dereference is resolved from the running kernel's BTF by the loader
//! and handed in as a read-only global, so nothing of the build machine's kernel is baked in.
//!
//! Aggregation happens here: per-CPU counters and log2 histograms; user space only reads the
//! maps once per interval.
#![no_std]
#![no_main]

use aya_ebpf::{
    EbpfContext as _,
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_ktime_get_ns,
        bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes, bpf_probe_read_user,
    },
    macros::{btf_tracepoint, map, raw_tracepoint, tracepoint},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{BtfTracePointContext, RawTracePointContext, TracePointContext},
};
use probe_common::{
    CGROUP_PATH_LEN, CgroupCounters, CgroupPath, Counter, Loss, MAX_CGROUPS, MAX_CREATED,
    MAX_PAIRS, MAX_RETRANS_WINDOWS, MAX_RUNQ_TASKS, MAX_SOCKS, OWN_TGID_KEY, PairKey, PairStats,
    RETRANS_WINDOW_NS, RUNQ_SLOTS_PER_CPU, RetransWindow, RetransWindowKey, RunqBase, RunqSlot,
    RunqStats, RunqTask, SockInfo, TaskWait, errno, log2_bucket, tcp_state,
};

/// Per-cgroup TCP counters, keyed by cgroup v2 id. Per-CPU so increments need no atomics
/// (`fetch_add` does not exist on the BPF target); user space sums the CPUs.
#[map]
static CGROUP_COUNTERS: PerCpuHashMap<u64, CgroupCounters> =
    PerCpuHashMap::with_max_entries(MAX_CGROUPS, 0);

/// Per source container → destination counters and histograms (active sockets only: the
/// remote port of accepted sockets is the client's ephemeral port, which would explode the map).
#[map]
static PAIRS: PerCpuHashMap<PairKey, PairStats> = PerCpuHashMap::with_max_entries(MAX_PAIRS, 0);

/// One all-zero `PairStats`, the template for new pairs: at 464 bytes it does not fit on the
/// 512-byte BPF stack next to everything else. Never written.
#[map]
static ZERO_PAIR: PerCpuArray<PairStats> = PerCpuArray::with_max_entries(1, 0);

/// Live sockets seen opening, keyed by the kernel address of their `struct sock`, for connect
/// latency and lifetime. Not per-CPU: a socket's transitions can run on any CPU.
#[map]
static SOCKS: HashMap<u64, SockInfo> = HashMap::with_max_entries(MAX_SOCKS, 0);

/// Threads inside connect() whose socket reached SYN_SENT, so `sys_exit_connect` can tell a
/// failure already counted at the socket's SYN_SENT → CLOSE from one it must count itself.
/// Written only when the syscall programs are attached (`CONNECT_SYSCALLS`). LRU: an entry
/// whose syscall exit never comes (io_uring, TCP fast open via sendmsg) ages out.
#[map]
static CONNECTING: LruHashMap<u64, u64> = LruHashMap::with_max_entries(16_384, 0);

/// Threads inside a connect() whose address is not AF_INET/AF_INET6 (glibc's nscd lookups
/// connect AF_UNIX sockets and fail with ENOENT): `sys_exit_connect` leaves their errors out,
/// since herd counts TCP/IP connect failures. LRU for the same reason as `CONNECTING`.
#[map]
static NON_INET_CONNECT: LruHashMap<u64, u8> = LruHashMap::with_max_entries(4_096, 0);

/// Cgroup v2 directories by id as they are created: a one-shot container's cgroup can be
/// gone before user space re-reads the tree, and its sockets still carry its id.
#[map]
static CREATED: LruHashMap<u64, CgroupPath> = LruHashMap::with_max_entries(MAX_CREATED, 0);

/// Events that could not be recorded, indexed by [`Loss`]. Never silent: user space reports them.
#[map]
static LOSSES: PerCpuArray<u64> = PerCpuArray::with_max_entries(Loss::Count as u32, 0);

// Struct-member offsets from the running kernel's BTF (see `probe_common::globals`). The loader
// refuses to attach unless every one resolved.
#[unsafe(no_mangle)]
static SOCK_CGROUP_OFF: u64 = 0;
#[unsafe(no_mangle)]
static CGROUP_KN_OFF: u64 = 0;
#[unsafe(no_mangle)]
static KERNFS_NODE_ID_OFF: u64 = 0;
#[unsafe(no_mangle)]
static SOCK_ERR_OFF: u64 = 0;
#[unsafe(no_mangle)]
static SOCK_PROTOCOL_OFF: u64 = 0;
#[unsafe(no_mangle)]
static SKC_DADDR_OFF: u64 = 0;
#[unsafe(no_mangle)]
static SKC_V6_DADDR_OFF: u64 = 0;
#[unsafe(no_mangle)]
static SKC_DPORT_OFF: u64 = 0;
#[unsafe(no_mangle)]
static SKC_FAMILY_OFF: u64 = 0;
#[unsafe(no_mangle)]
static SKC_STATE_OFF: u64 = 0;
#[unsafe(no_mangle)]
static SKB_CB_OFF: u64 = 0;
#[unsafe(no_mangle)]
static TASK_STATE_OFF: u64 = 0;
#[unsafe(no_mangle)]
static TCP_SKB_CB_FLAGS_OFF: u64 = 0;
#[unsafe(no_mangle)]
static TCP_SKB_CB_GSO_SEGS_OFF: u64 = 0;
#[unsafe(no_mangle)]
static TCP_SEGS_OUT_OFF: u64 = 0;
/// Not an offset: 1 when `sys_enter_connect`/`sys_exit_connect` are attached.
#[unsafe(no_mangle)]
static CONNECT_SYSCALLS: u64 = 0;
// The scheduler's fields `runq_switch` reads (see `probe_common::globals`).
#[unsafe(no_mangle)]
static TASK_LAST_QUEUED_OFF: u64 = 0;
#[unsafe(no_mangle)]
static TASK_RUN_DELAY_OFF: u64 = 0;
#[unsafe(no_mangle)]
static TASK_START_TIME_OFF: u64 = 0;
#[unsafe(no_mangle)]
static TASK_SE_CFS_RQ_OFF: u64 = 0;
#[unsafe(no_mangle)]
static CFS_RQ_RQ_OFF: u64 = 0;
#[unsafe(no_mangle)]
static RQ_CLOCK_OFF: u64 = 0;
#[unsafe(no_mangle)]
static RQ_IDLE_OFF: u64 = 0;
#[unsafe(no_mangle)]
static TASK_TGID_OFF: u64 = 0;
#[unsafe(no_mangle)]
static TASK_PID_OFF: u64 = 0;
/// `RUNQ_BASE`'s slots minus one (a power of two minus one).
#[unsafe(no_mangle)]
static RUNQ_BASE_MASK: u64 = 0;
#[unsafe(no_mangle)]
static TASK_PCOUNT_OFF: u64 = 0;
#[unsafe(no_mangle)]
static TASK_CGROUPS_OFF: u64 = 0;
#[unsafe(no_mangle)]
static CSS_SET_DFL_CGRP_OFF: u64 = 0;
/// The process whose threads' run-queue waits count under `OWN_TGID_KEY` (herd's own
/// driver), 0 for none.
#[unsafe(no_mangle)]
static OWN_TGID: u64 = 0;

/// Each thread's `sched_info.run_delay` right after its last switch-in, direct-mapped by its
/// thread id (slot `pid & RUNQ_BASE_MASK`; the loader sizes the array to the kernel's
/// `pid_max`, at most 2^20 slots): what the run delay grew by since then, besides the wait
/// that ends at the next switch-in, is the part of that wait the kernel accounted when a
/// migration took the queued thread to another CPU. An inlined array lookup on every
/// switch-in that ends a wait, where a hash lookup cost about twice the rest of the program.
#[map]
static RUNQ_BASE: Array<RunqBase> = Array::with_max_entries(1, 0);

/// The fallback programs' per-thread state (`sched_wakeup`, `sched_switch`), keyed by its
/// `task_struct` address: when it became runnable, and the wait it ended at its last
/// switch-in until it is recorded. Updated in place; LRU, so exited threads age out. Sized
/// to 1 entry by the loader when [`runq_switch`] runs instead.
#[map]
static RUNQ_TASKS: LruHashMap<u64, RunqTask> = LruHashMap::with_max_entries(MAX_RUNQ_TASKS, 0);

/// `BPF_F_MMAPABLE` (`include/uapi/linux/bpf.h`, 5.5).
const BPF_F_MMAPABLE: u32 = 1 << 10;

/// Run-queue delay per CPU and cgroup v2 id (and `OWN_TGID_KEY`), direct-mapped
/// ([`RUNQ_SLOTS_PER_CPU`] slots per CPU, sized by the loader to the possible CPUs): an
/// array lookup, which the verifier inlines, instead of a hash lookup on every context
/// switch. Only the slot's CPU writes it (the programs run under its run-queue lock), so no
/// atomics; user space reads it through a read-only mapping, without a system call per
/// slot. A key whose slot another key holds is counted in [`RUNQ`].
#[map]
static RUNQ_SLOTS: Array<RunqSlot> = Array::with_max_entries(RUNQ_SLOTS_PER_CPU, BPF_F_MMAPABLE);

/// Run-queue delay per cgroup v2 id (and `OWN_TGID_KEY`): count, total, log2 histogram.
#[map]
static RUNQ: PerCpuHashMap<u64, RunqStats> = PerCpuHashMap::with_max_entries(MAX_CGROUPS, 0);

/// One all-zero `RunqStats`, the template for new cgroups (224 bytes kept off the stack of a
/// program that runs on every context switch).
#[map]
static ZERO_RUNQ: PerCpuArray<RunqStats> = PerCpuArray::with_max_entries(1, 0);

/// Retransmits per pair and 100 ms window of `bpf_ktime_get_ns()`; user space removes each
/// window once it has closed and been read.
#[map]
static RETRANS_WINDOWS: PerCpuHashMap<RetransWindowKey, RetransWindow> =
    PerCpuHashMap::with_max_entries(MAX_RETRANS_WINDOWS, 0);

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
const IPPROTO_TCP: u16 = 6;

#[inline(always)]
fn global(v: &'static u64) -> usize {
    // read_volatile keeps the compiler from folding the zero initialiser into the code; the
    // loader rewrites .rodata before the verifier sees it.
    unsafe { core::ptr::read_volatile(v) as usize }
}

#[inline(always)]
fn read<T>(base: *const u8, off: usize) -> Option<T> {
    unsafe { bpf_probe_read_kernel(base.add(off) as *const T).ok() }
}

#[inline(always)]
fn lose(reason: Loss) {
    if let Some(n) = LOSSES.get_ptr_mut(reason as u32) {
        unsafe { *n += 1 };
    }
}

/// The cgroup v2 id that owns `sk`: `sk->sk_cgrp_data.cgroup->kn->id`.
///
/// The owner is fixed when the socket is created (`cgroup_sk_alloc`, process context) and
/// copied to accepted children (`sk_clone_lock` → `cgroup_sk_clone`), so it is right even in
/// softirq, where `bpf_get_current_cgroup_id()` returns whoever the CPU happened to run.
#[inline(always)]
fn sock_cgroup_id(sk: *const u8) -> Option<u64> {
    let cgrp: *const u8 = read(sk, global(&SOCK_CGROUP_OFF))?;
    if cgrp.is_null() {
        return None;
    }
    let kn: *const u8 = read(cgrp, global(&CGROUP_KN_OFF))?;
    if kn.is_null() {
        return None;
    }
    read(kn, global(&KERNFS_NODE_ID_OFF))
}

#[inline(always)]
fn count(cgroup: u64, counter: Counter) {
    count_n(cgroup, counter, 1)
}

#[inline(always)]
fn count_n(cgroup: u64, counter: Counter, n: u64) {
    if let Some(c) = CGROUP_COUNTERS.get_ptr_mut(cgroup) {
        unsafe { (*c).v[counter as usize] += n };
        return;
    }
    let mut fresh = CgroupCounters::default();
    fresh.v[counter as usize] = n;
    // BPF_NOEXIST: another CPU may have inserted the key meanwhile; then add to ours.
    if CGROUP_COUNTERS.insert(cgroup, fresh, 1).is_err() {
        match CGROUP_COUNTERS.get_ptr_mut(cgroup) {
            Some(c) => unsafe { (*c).v[counter as usize] += n },
            None => lose(Loss::CgroupMapFull),
        }
    }
}

#[inline(always)]
fn count_sock(sk: *const u8, counter: Counter) {
    match sock_cgroup_id(sk) {
        Some(cgroup) => count(cgroup, counter),
        None => lose(Loss::CgroupUnreadable),
    }
}

/// The pair's stats slot for this CPU, created zeroed if new.
#[inline(always)]
#[expect(
    clippy::needless_borrows_for_generic_args,
    reason = "passing the map value by reference keeps 448 bytes off the 512-byte BPF stack"
)]
fn pair_stats(key: &PairKey) -> Option<*mut PairStats> {
    if let Some(p) = PAIRS.get_ptr_mut(key) {
        return Some(p);
    }
    let zero = ZERO_PAIR.get_ptr(0)?;
    // BPF_NOEXIST: if another CPU created the key meanwhile, ours is created by that insert.
    let _ = PAIRS.insert(key, unsafe { &*zero }, 1);
    let p = PAIRS.get_ptr_mut(key);
    if p.is_none() {
        lose(Loss::PairMapFull);
    }
    p
}

#[inline(always)]
fn pair_key(sk: *const u8, cgroup: u64) -> Option<PairKey> {
    let family: u16 = read(sk, global(&SKC_FAMILY_OFF))?;
    let dport_be: u16 = read(sk, global(&SKC_DPORT_OFF))?;
    let mut key = PairKey {
        cgroup,
        port: u16::from_be(dport_be),
        family,
        ..PairKey::default()
    };
    if family == AF_INET {
        let a: [u8; 4] = read(sk, global(&SKC_DADDR_OFF))?;
        key.addr[..4].copy_from_slice(&a);
    } else if family == AF_INET6 {
        key.addr = read(sk, global(&SKC_V6_DADDR_OFF))?;
    } else {
        return None;
    }
    Some(key)
}

/// `trace_inet_sock_set_state(const struct sock *sk, int oldstate, int newstate)`, fired from
/// `inet_sk_state_store`/`inet_sk_set_state` for every TCP state change (kernel ≥ 4.16).
#[raw_tracepoint(tracepoint = "inet_sock_set_state")]
pub fn inet_sock_set_state(ctx: RawTracePointContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    let old = ctx.arg::<u64>(1) as i32;
    let new = ctx.arg::<u64>(2) as i32;
    // SCTP also reports through this tracepoint with its own state numbers.
    if read::<u16>(sk, global(&SOCK_PROTOCOL_OFF)) != Some(IPPROTO_TCP) {
        return 0;
    }
    match (old, new) {
        // tcp_v4_connect/tcp_v6_connect, in the connecting thread: the kernel's TcpActiveOpens.
        (tcp_state::CLOSE, tcp_state::SYN_SENT) => on_connect(sk),
        (tcp_state::SYN_SENT, tcp_state::ESTABLISHED) => on_established(sk),
        // tcp_rcv_state_process on the child socket: the handshake completed.
        (tcp_state::SYN_RECV, tcp_state::ESTABLISHED) => on_accept(sk),
        (_, tcp_state::CLOSE) => on_close(sk, old),
        _ => {}
    }
    0
}

#[inline(always)]
fn on_connect(sk: *const u8) {
    let Some(cgroup) = sock_cgroup_id(sk) else {
        lose(Loss::CgroupUnreadable);
        return;
    };
    count(cgroup, Counter::Connects);
    if global(&CONNECT_SYSCALLS) != 0 {
        let _ = CONNECTING.insert(bpf_get_current_pid_tgid(), sk as u64, 0);
    }
    let Some(pair) = pair_key(sk, cgroup) else {
        return;
    };
    if let Some(p) = pair_stats(&pair) {
        unsafe { (*p).connects += 1 };
    }
    let info = SockInfo {
        opened_ns: unsafe { bpf_ktime_get_ns() },
        pair,
        active: 1,
        _pad: 0,
    };
    if SOCKS.insert(sk as u64, info, 0).is_err() {
        lose(Loss::SockMapFull);
    }
}

#[inline(always)]
fn on_established(sk: *const u8) {
    let Some(info) = (unsafe { SOCKS.get(sk as u64) }) else {
        return;
    };
    let latency_us = (unsafe { bpf_ktime_get_ns() } - info.opened_ns) / 1_000;
    if let Some(p) = pair_stats(&info.pair) {
        unsafe {
            (*p).established += 1;
            (*p).connect_latency_us.0[log2_bucket(latency_us)] += 1;
        }
    }
}

#[inline(always)]
fn on_accept(sk: *const u8) {
    count_sock(sk, Counter::Accepts);
    let info = SockInfo {
        opened_ns: unsafe { bpf_ktime_get_ns() },
        ..SockInfo::default()
    };
    if SOCKS.insert(sk as u64, info, 0).is_err() {
        lose(Loss::SockMapFull);
    }
}

#[inline(always)]
fn on_close(sk: *const u8, old: i32) {
    let err: i32 = read(sk, global(&SOCK_ERR_OFF)).unwrap_or(0);
    let time_wait = err == 0 && (old == tcp_state::FIN_WAIT2 || old == tcp_state::CLOSING);
    if time_wait {
        // tcp_time_wait() allocates the timewait socket, then tcp_done() moves the full socket
        // to CLOSE: the only TIME_WAIT entry a tracepoint shows. A reset or timeout in these
        // states sets sk_err first (tcp_done_with_error), so err == 0 singles out timewait.
        count_sock(sk, Counter::TimeWaitEntries);
    } else if old == tcp_state::SYN_SENT && err != 0 {
        // Asynchronous connect failure: RST (ECONNREFUSED), SYN retries (ETIMEDOUT), ICMP
        // unreachable.
        count_sock(sk, Counter::for_connect_errno(err));
    } else if old == tcp_state::SYN_SENT && read::<u32>(sk, global(&TCP_SEGS_OUT_OFF)) == Some(0) {
        // No error and no segment ever sent: tcp_v4_connect/tcp_v6_connect's own failure path,
        // which runs right after the CLOSE → SYN_SENT above when inet_hash_connect finds no
        // free local port (EADDRNOTAVAIL) — the only way out of connect() between the state
        // change and the SYN but a route that vanished meanwhile or an allocation failure. A
        // connect the application abandons (close() in SYN_SENT) has sent its SYN. Counted
        // here, in the connecting thread, instead of at syscall exit: the syscall tracepoints
        // slow every syscall on the host (`--connect-syscalls`).
        count_sock(sk, Counter::ConnectAddrNotAvail);
    }
    let Some(info) = (unsafe { SOCKS.get(sk as u64) }) else {
        return;
    };
    let info = *info;
    let _ = SOCKS.remove(sk as u64);
    if info.active == 0 {
        return;
    }
    let lifetime_ms = (unsafe { bpf_ktime_get_ns() } - info.opened_ns) / 1_000_000;
    if let Some(p) = pair_stats(&info.pair) {
        unsafe {
            (*p).closed += 1;
            (*p).lifetime_ms.0[log2_bucket(lifetime_ms)] += 1;
            if time_wait {
                (*p).time_wait_entries += 1;
            }
        }
    }
}

/// `cgroup/cgroup_mkdir`: `{ common (8), int root, int level, u64 id, __data_loc char[] path
/// }` (kernel/cgroup trace events, 5.5+ with `id` a u64). Only the unified hierarchy (`root`
/// 0, the "0::" of /proc/PID/cgroup) is kept: socket owners are v2 ids, and v1 hierarchies
/// have their own kernfs ids.
#[tracepoint(category = "cgroup", name = "cgroup_mkdir")]
pub fn cgroup_mkdir(ctx: TracePointContext) -> u32 {
    let root: i32 = unsafe { ctx.read_at(8) }.unwrap_or(-1);
    if root != 0 {
        return 0;
    }
    let Ok(id) = (unsafe { ctx.read_at::<u64>(16) }) else {
        return 0;
    };
    let Ok(loc) = (unsafe { ctx.read_at::<u32>(24) }) else {
        return 0;
    };
    // __data_loc: offset from the record's start in the low 16 bits.
    let src = unsafe { (ctx.as_ptr() as *const u8).add((loc & 0xffff) as usize) };
    let Some(p) = ZERO_PATH.get_ptr_mut(0) else {
        return 0;
    };
    // Built in a per-CPU slot: 160 bytes are too many for the BPF stack next to the rest.
    let p = unsafe { &mut *p };
    p.bytes = [0; CGROUP_PATH_LEN];
    if unsafe { bpf_probe_read_kernel_str_bytes(src, &mut p.bytes) }.is_ok() {
        let _ = CREATED.insert(id, *p, 0);
    }
    0
}

/// Scratch space for [`cgroup_mkdir`]'s path.
#[map]
static ZERO_PATH: PerCpuArray<CgroupPath> = PerCpuArray::with_max_entries(1, 0);

/// `syscalls/sys_enter_connect`: `{ common (8 bytes), int __syscall_nr, then one 8-byte slot
/// per argument from offset 16: fd, uservaddr, addrlen }`, the layout of every syscall
/// tracepoint. Reads the address family the caller passed (`sa_family`, the first 2 bytes).
#[tracepoint(category = "syscalls", name = "sys_enter_connect")]
pub fn sys_enter_connect(ctx: TracePointContext) -> u32 {
    let addr: u64 = unsafe { ctx.read_at(24) }.unwrap_or(0);
    // An unreadable address fails the syscall with EFAULT: not an IP connect failure either.
    let family: u16 = if addr == 0 {
        0
    } else {
        unsafe { bpf_probe_read_user(addr as *const u16) }.unwrap_or(0)
    };
    if family != AF_INET && family != AF_INET6 {
        let _ = NON_INET_CONNECT.insert(bpf_get_current_pid_tgid(), 1, 0);
    }
    0
}

/// `syscalls/sys_exit_connect`: `{ common (8 bytes), int __syscall_nr, long ret }`, a layout
/// unchanged since syscall tracepoints exist (2.6.33). Runs in the calling thread, so the
/// current cgroup is the caller's.
#[tracepoint(category = "syscalls", name = "sys_exit_connect")]
pub fn sys_exit_connect(ctx: TracePointContext) -> u32 {
    let ret: i64 = unsafe { ctx.read_at(16) }.unwrap_or(0);
    let tid = bpf_get_current_pid_tgid();
    let reached_syn_sent = unsafe { CONNECTING.get(tid) }.is_some();
    if reached_syn_sent {
        let _ = CONNECTING.remove(tid);
    }
    if unsafe { NON_INET_CONNECT.get(tid) }.is_some() {
        let _ = NON_INET_CONNECT.remove(tid);
        return 0;
    }
    // A socket that reached SYN_SENT failed through its SYN_SENT → CLOSE, which on_close
    // counted (from sk_err, or as EADDRNOTAVAIL when no SYN went out).
    if ret >= 0 || reached_syn_sent {
        return 0;
    }
    let e = (-ret) as i32;
    if e == errno::EINPROGRESS || e == errno::EALREADY || e == errno::EINTR || e == errno::EISCONN {
        return 0;
    }
    count(
        unsafe { bpf_get_current_cgroup_id() },
        Counter::for_connect_errno(e),
    );
    0
}

/// `trace_tcp_send_reset(const struct sock *sk, const struct sk_buff *skb, ...)`. `sk` is NULL
/// for resets answering a segment no socket owns (a closed port), and may be a timewait or
/// request socket (`tcp_v4_send_reset` from `tcp_timewait_state_process`/`tcp_check_req`):
/// those are not full sockets and have no `sk_cgrp_data`, so only `skc_state` (in
/// `sock_common`, shared by all three) is read before deciding. Resets without a full socket
/// count for cgroup 0, reported as `host`.
#[raw_tracepoint(tracepoint = "tcp_send_reset")]
pub fn tcp_send_reset(ctx: RawTracePointContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    if sk.is_null() {
        count(0, Counter::ResetsSent);
        return 0;
    }
    let state: u8 = read(sk, global(&SKC_STATE_OFF)).unwrap_or(0);
    if i32::from(state) == tcp_state::TIME_WAIT || i32::from(state) == tcp_state::NEW_SYN_RECV {
        count(0, Counter::ResetsSent);
    } else {
        count_sock(sk, Counter::ResetsSent);
    }
    0
}

/// `trace_tcp_receive_reset(struct sock *sk)`.
#[raw_tracepoint(tracepoint = "tcp_receive_reset")]
pub fn tcp_receive_reset(ctx: RawTracePointContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    if !sk.is_null() {
        count_sock(sk, Counter::ResetsReceived);
    }
    0
}

/// `trace_tcp_retransmit_skb(const struct sock *sk, const struct sk_buff *skb, ...)`, fired
/// by `__tcp_retransmit_skb` once per skb sent again. The kernel's `TcpRetransSegs` adds
/// `tcp_skb_pcount(skb)` (= `TCP_SKB_CB(skb)->tcp_gso_segs`) and `TCPSynRetrans` 1 when the
/// skb carries a SYN (`tcp_flags & TCPHDR_SYN`): the same two numbers are read here from the
/// skb's control block, so the pair's counts are the kernel's own.
#[raw_tracepoint(tracepoint = "tcp_retransmit_skb")]
pub fn tcp_retransmit_skb(ctx: RawTracePointContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    let skb: *const u8 = ctx.arg(1);
    if sk.is_null() {
        return 0;
    }
    let (segs, syn) = if skb.is_null() {
        (1, 0)
    } else {
        let cb = global(&SKB_CB_OFF);
        let segs: u16 = read(skb, cb + global(&TCP_SKB_CB_GSO_SEGS_OFF)).unwrap_or(1);
        let flags: u8 = read(skb, cb + global(&TCP_SKB_CB_FLAGS_OFF)).unwrap_or(0);
        (u64::from(segs.max(1)), u64::from(flags & TCPHDR_SYN != 0))
    };
    match sock_cgroup_id(sk) {
        Some(cgroup) => count_n(cgroup, Counter::Retransmits, segs),
        None => lose(Loss::CgroupUnreadable),
    }
    // Pairs are the sockets seen connecting (see `PAIRS`).
    let Some(info) = (unsafe { SOCKS.get(sk as u64) }) else {
        return 0;
    };
    if info.active == 0 {
        return 0;
    }
    let pair = info.pair;
    if let Some(p) = pair_stats(&pair) {
        unsafe {
            (*p).retrans_segs += segs;
            (*p).syn_retrans += syn;
        }
    }
    let key = RetransWindowKey {
        pair,
        window: unsafe { bpf_ktime_get_ns() } / RETRANS_WINDOW_NS,
    };
    if let Some(w) = RETRANS_WINDOWS.get_ptr_mut(key) {
        unsafe {
            (*w).retrans_segs += segs;
            (*w).syn_retrans += syn;
        }
        return 0;
    }
    let fresh = RetransWindow {
        retrans_segs: segs,
        syn_retrans: syn,
    };
    // BPF_NOEXIST, as in `count_n`.
    if RETRANS_WINDOWS.insert(key, fresh, 1).is_err() {
        match RETRANS_WINDOWS.get_ptr_mut(key) {
            Some(w) => unsafe {
                (*w).retrans_segs += segs;
                (*w).syn_retrans += syn;
            },
            None => lose(Loss::RetransWindowFull),
        }
    }
    0
}

/// Inserts the all-zero template for `key` (BPF_NOEXIST).
#[inline(always)]
#[expect(
    clippy::needless_borrows_for_generic_args,
    reason = "passing the map value by reference keeps 224 bytes off the BPF stack"
)]
fn insert_zero_runq(key: u64, zero: *const RunqStats) {
    let _ = RUNQ.insert(key, unsafe { &*zero }, 1);
}

/// `TCPHDR_SYN` (`include/net/tcp.h`), the wire bit.
const TCPHDR_SYN: u8 = 0x02;

/// A load of a `T` at `base + off`, `base` a kernel pointer the verifier types from BTF (an
/// argument of a BTF tracepoint, or a pointer field read from one): the verifier checks the
/// access against the running kernel's BTF (`off` is a known constant, read from the frozen
/// read-only globals) and the JIT emits one load guarded by an exception-table entry (a bad
/// pointer reads 0), no helper call.
#[inline(always)]
unsafe fn load<T: Copy>(base: *const u8, off: usize) -> T {
    unsafe { core::ptr::read_volatile(base.add(off) as *const T) }
}

/// `trace_sched_switch(bool preempt, prev, next, unsigned int prev_state)` as a BTF
/// tracepoint (5.5): the end of `next`'s wait for a CPU, read from the scheduler's own
/// accounting rather than timed by hooks of its own.
///
/// With CONFIG_SCHED_INFO the kernel stamps `next->sched_info.last_queued` with
/// `rq_clock(rq)` when the task is enqueued (`sched_info_enqueue`: a wakeup, a new task,
/// a preemption that leaves it runnable via `sched_info_depart`, a migration), and right
/// after this tracepoint `context_switch` → `prepare_task_switch` → `sched_info_switch` →
/// `sched_info_arrive(rq, next)` adds `rq_clock(rq) - last_queued` to
/// `sched_info.run_delay` (schedstat's field 2) and zeroes the stamp. The run-queue lock is
/// held from `update_rq_clock` in `__schedule` until then, so `rq->clock` here is the value
/// `sched_info_arrive` uses: the wait computed here is the kernel's to the nanosecond. A
/// migration of a queued task (`deactivate_task` → `sched_info_dequeue`) adds the wait so
/// far to `run_delay` and the destination stamps a new `last_queued`: that part is the
/// growth of `run_delay` since the thread's previous switch-in, kept in [`RUNQ_BASE`].
///
/// One observation per wait, recorded at its end in the cgroup (or `OWN_TGID_KEY`) of
/// the thread being switched in. No wakeup program, no per-thread timestamp of our own.
#[btf_tracepoint(function = "sched_switch")]
pub fn runq_switch(ctx: BtfTracePointContext) -> i32 {
    let next: *const u8 = ctx.arg(2);
    // Never NULL here; a verifier that types tracepoint arguments as maybe-NULL wants the
    // check before any access.
    if next.is_null() {
        return 0;
    }
    // SAFETY (all loads below): BTF-checked loads from the task being switched in and the
    // structures it points to, which the run-queue lock and RCU keep alive.
    let queued: u64 = unsafe { load(next, global(&TASK_LAST_QUEUED_OFF)) };
    if queued == 0 {
        // Not queued since it last ran: `sched_info_arrive` does nothing either.
        return 0;
    }
    // `rq_of(next->se.cfs_rq)`: this CPU's run queue, whatever the task's class (the
    // pointer is kept by `set_task_rq` for every task).
    let cfs_rq: *const u8 = unsafe { load(next, global(&TASK_SE_CFS_RQ_OFF)) };
    let rq: *const u8 = unsafe { load(cfs_rq, global(&CFS_RQ_RQ_OFF)) };
    // `sched_info_switch` skips the idle task.
    if unsafe { load::<*const u8>(rq, global(&RQ_IDLE_OFF)) } == next {
        return 0;
    }
    let clock: u64 = unsafe { load(rq, global(&RQ_CLOCK_OFF)) };
    let mut waited = clock.wrapping_sub(queued);
    waited += migrated_part(next, waited);
    let key = task_key(next);
    record_wait(key, waited);
    0
}

/// The part of `next`'s wait that a migration while it was queued accounted (the growth of
/// its `run_delay` since its previous switch-in beyond the wait ending now), from
/// [`RUNQ_BASE`].
#[inline(always)]
fn migrated_part(next: *const u8, waited: u64) -> u64 {
    // SAFETY: BTF-checked loads from the task being switched in.
    let pid: u32 = unsafe { load(next, global(&TASK_PID_OFF)) };
    let Some(b) = RUNQ_BASE.get_ptr_mut(pid & global(&RUNQ_BASE_MASK) as u32) else {
        return 0;
    };
    let run_delay: u64 = unsafe { load(next, global(&TASK_RUN_DELAY_OFF)) };
    let started: u64 = unsafe { load(next, global(&TASK_START_TIME_OFF)) };
    // SAFETY: a slot of the array; written at this thread's switch-ins (under its run
    // queue's lock) and, where ids collide, another thread's.
    unsafe {
        // The same thread (not another one of the slot, or a new one reusing the id) whose
        // run delay grew while it waited: migrations while queued. A thread seen for the
        // first time cannot tell a migration before it apart; from now on it can.
        let part = if (*b).start_time == started && run_delay > (*b).run_delay {
            run_delay - (*b).run_delay
        } else {
            0
        };
        (*b).run_delay = run_delay.wrapping_add(waited);
        (*b).start_time = started;
        part
    }
}

/// Where a thread's run-queue wait counts: `OWN_TGID_KEY` for herd's own threads, else its
/// cgroup v2 id.
#[inline(always)]
fn task_key(task: *const u8) -> u64 {
    let own = global(&OWN_TGID) as u64;
    // SAFETY (all loads): BTF-checked loads from a task the run-queue lock keeps alive.
    if own != 0 && u64::from(unsafe { load::<u32>(task, global(&TASK_TGID_OFF)) }) == own {
        return OWN_TGID_KEY;
    }
    task_cgroup(task)
}

/// `cgroup_id(task_dfl_cgroup(task))`: what `bpf_get_current_cgroup_id()` returns once the
/// task runs.
#[inline(always)]
fn task_cgroup(task: *const u8) -> u64 {
    // SAFETY (all loads): BTF-checked loads from a live task and what it points to.
    let cset: *const u8 = unsafe { load(task, global(&TASK_CGROUPS_OFF)) };
    let cgrp: *const u8 = unsafe { load(cset, global(&CSS_SET_DFL_CGRP_OFF)) };
    let kn: *const u8 = unsafe { load(cgrp, global(&CGROUP_KN_OFF)) };
    unsafe { load(kn, global(&KERNFS_NODE_ID_OFF)) }
}

/// A thread's scheduler counters as the task walk reads them.
#[inline(always)]
fn task_wait(task: *const u8) -> TaskWait {
    // SAFETY (all loads): BTF-checked loads from a task the kernel holds a reference to, and
    // the structures it points to, under RCU.
    TaskWait {
        tid: unsafe { load(task, global(&TASK_PID_OFF)) },
        tgid: unsafe { load(task, global(&TASK_TGID_OFF)) },
        start_time: unsafe { load(task, global(&TASK_START_TIME_OFF)) },
        cgroup: task_cgroup(task),
        run_delay: unsafe { load(task, global(&TASK_RUN_DELAY_OFF)) },
        pcount: unsafe { load(task, global(&TASK_PCOUNT_OFF)) },
    }
}

/// Each ended thread's last [`TaskWait`], for the task walk: what it waited since the
/// previous walk would otherwise go with it. 256 KiB: about 5 400 ends between two polls.
#[map]
static RUNQ_EXITS: RingBuf = RingBuf::with_byte_size(256 * 1024, 0);

/// `trace_sched_process_free(struct task_struct *p)` as a BTF tracepoint (5.5), from
/// `delayed_put_task_struct`: an RCU grace period after a thread was reaped, so after its
/// last context switch, with its scheduler counters final (a dying thread preempted by the
/// parent it wakes in `exit_notify` still waits for a CPU to finish dying; an earlier hook
/// would miss that wait). Its cgroup is still readable (`cgroup_free` comes after). Hands
/// the thread's last counters to the task walk; runs once per thread, never on a context
/// switch.
#[btf_tracepoint(function = "sched_process_free")]
pub fn runq_exit(ctx: BtfTracePointContext) -> i32 {
    let task: *const u8 = ctx.arg(0);
    if task.is_null() {
        return 0;
    }
    if RUNQ_EXITS.output::<TaskWait>(task_wait(task), 0).is_err() {
        lose(Loss::RunqExitFull);
    }
    0
}

/// `iter/task` (5.8): one [`TaskWait`] per thread of the host, written to the iterator's
/// `seq_file` each time user space reads a new iterator. This is how the run-queue delay is
/// measured by default: nothing runs on a context switch; the scheduler's own counters
/// (`sched_info.run_delay`, `sched_info.pcount`: schedstat's fields 2 and 3) are read once per
/// poll and user space takes each thread's growth since the previous walk.
///
/// The context is `struct bpf_iter__task { struct bpf_iter_meta *meta; struct task_struct
/// *task; }`, the task NULL on the last call; `meta->seq` is the `seq_file`.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub fn runq_tasks(ctx: *mut core::ffi::c_void) -> i32 {
    // SAFETY: context loads the verifier types from `bpf_iter__task`'s BTF.
    let meta: *const u8 = unsafe { core::ptr::read_volatile(ctx as *const *const u8) };
    let task: *const u8 = unsafe { core::ptr::read_volatile((ctx as *const *const u8).add(1)) };
    if task.is_null() || meta.is_null() {
        return 0;
    }
    // SAFETY: a BTF-checked load of the iterator's `seq_file`.
    let seq: *mut core::ffi::c_void = unsafe { load(meta, 0) };
    let rec = task_wait(task);
    // SAFETY: the helper copies `size_of::<TaskWait>()` bytes from the stack.
    unsafe {
        aya_ebpf::helpers::generated::bpf_seq_write(
            seq as *mut _,
            &rec as *const TaskWait as *const core::ffi::c_void,
            core::mem::size_of::<TaskWait>() as u32,
        );
    }
    0
}

/// `TASK_RUNNING` (`include/linux/sched.h`).
const TASK_RUNNING: u32 = 0;

/// Starts timing `task`'s wait for a CPU: it became runnable now. In place when the task is
/// known (the steady state: no lock, no allocation), inserted the first time it is seen.
#[inline(always)]
fn runq_enqueue(task: u64, now: u64) {
    if let Some(t) = RUNQ_TASKS.get_ptr_mut(task) {
        unsafe { (*t).start_ns = now };
        return;
    }
    let fresh = RunqTask {
        start_ns: now,
        ..RunqTask::default()
    };
    if RUNQ_TASKS.insert(task, fresh, 0).is_err() {
        lose(Loss::RunqStartFull);
    }
}

/// `trace_sched_wakeup(struct task_struct *p)`, from `ttwu_do_wakeup` once `p` is on a run
/// queue and TASK_RUNNING (2.6.x; raw since 4.17): its wait for a CPU starts.
#[raw_tracepoint(tracepoint = "sched_wakeup")]
pub fn sched_wakeup(ctx: RawTracePointContext) -> i32 {
    runq_enqueue(ctx.arg::<u64>(0), unsafe { bpf_ktime_get_ns() });
    0
}

/// `trace_sched_wakeup_new(struct task_struct *p)`, from `wake_up_new_task`: a new thread's
/// first wait for a CPU.
#[raw_tracepoint(tracepoint = "sched_wakeup_new")]
pub fn sched_wakeup_new(ctx: RawTracePointContext) -> i32 {
    runq_enqueue(ctx.arg::<u64>(0), unsafe { bpf_ktime_get_ns() });
    0
}

/// `trace_sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next[,
/// unsigned int prev_state])` (arguments 1 and 2 unchanged since 4.4; `prev_state` only
/// since 5.18, so the state is read from the task). Runs on every context switch, so it does
/// the least it can:
///
/// - `next` ends its wait: `now - start` is kept in its own entry as pending (no cgroup
///   lookup here);
/// - `prev` (still `current`) records the wait it ended at its own switch-in into its
///   cgroup's row, the cgroup and process read by the cheap `current` helpers
///   (`bpf_get_current_cgroup_id`, `bpf_get_current_pid_tgid`); and, when it leaves the CPU
///   still TASK_RUNNING (preempted), starts its next wait.
///
/// A wait is therefore recorded when its thread next leaves the CPU (a time slice later at
/// most), in the cgroup it is in then. What is timed is what schedstat's `run_delay` counts
/// (`sched_info_enqueue` on enqueue and on a still-running depart, `sched_info_arrive` at
/// switch-in) and libbpf-tools' runqlat times. Tasks are keyed by their `task_struct`
/// address, so no field is read to find them; the LRU map forgets exited ones.
///
/// This variant takes `prev`'s state from the tracepoint's fourth argument (5.18,
/// fa2c3254d7cf: `READ_ONCE(prev->__state)` at the top of `__schedule`), saving a probe
/// read; an older kernel refuses to attach it (the program reads past the tracepoint's
/// arguments) and gets [`sched_switch_old`].
///
/// These three programs are the fallback for kernels where [`runq_switch`] cannot run (no
/// BTF tracepoints, no CONFIG_SCHED_INFO), at about twice its cost per context switch.
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn sched_switch(ctx: RawTracePointContext) -> i32 {
    let state = ctx.arg::<u64>(3) as u32;
    on_switch(ctx.arg(1), ctx.arg(2), state == TASK_RUNNING);
    0
}

/// [`sched_switch`] for kernels before 5.18: `prev`'s state read from the task
/// (`task_struct.__state`, `state` before 5.14).
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn sched_switch_old(ctx: RawTracePointContext) -> i32 {
    let prev: u64 = ctx.arg(1);
    let running = read::<u32>(prev as *const u8, global(&TASK_STATE_OFF)) == Some(TASK_RUNNING);
    on_switch(prev, ctx.arg(2), running);
    0
}

#[inline(always)]
fn on_switch(prev: u64, next: u64, running: bool) {
    let now = unsafe { bpf_ktime_get_ns() };
    match RUNQ_TASKS.get_ptr_mut(prev) {
        Some(t) => unsafe {
            if (*t).pending != 0 {
                record_wait(current_key(), (*t).waited_ns);
                (*t).pending = 0;
            }
            if running {
                (*t).start_ns = now;
            }
        },
        None if running => runq_enqueue(prev, now),
        None => {}
    }
    if let Some(t) = RUNQ_TASKS.get_ptr_mut(next) {
        unsafe {
            let start = (*t).start_ns;
            if start != 0 {
                (*t).waited_ns = now.saturating_sub(start);
                (*t).pending = 1;
                (*t).start_ns = 0;
            }
        }
    }
}

/// The row of `current`: its cgroup v2 id, or `OWN_TGID_KEY` for the threads of the named
/// process.
#[inline(always)]
fn current_key() -> u64 {
    let own = global(&OWN_TGID) as u64;
    if own != 0 && bpf_get_current_pid_tgid() >> 32 == own {
        OWN_TGID_KEY
    } else {
        unsafe { bpf_get_current_cgroup_id() }
    }
}

/// Adds one wait to `key`'s row (a cgroup v2 id or `OWN_TGID_KEY`).
#[inline(always)]
fn record_wait(key: u64, waited_ns: u64) {
    let Some(slot) = runq_slot(key) else {
        return;
    };
    unsafe {
        (*slot).count += 1;
        (*slot).total_ns += waited_ns;
        (*slot).delay_us.0[log2_bucket(waited_ns / 1_000)] += 1;
    }
}

/// `key`'s run-queue stats on this CPU: its slot in [`RUNQ_SLOTS`], or its entry in [`RUNQ`]
/// (created zeroed if new) when another key holds the slot.
#[inline(always)]
fn runq_slot(key: u64) -> Option<*mut RunqStats> {
    let cpu = unsafe { aya_ebpf::helpers::generated::bpf_get_smp_processor_id() };
    let index = cpu
        .wrapping_mul(RUNQ_SLOTS_PER_CPU)
        .wrapping_add(key as u32 & (RUNQ_SLOTS_PER_CPU - 1));
    if let Some(slot) = RUNQ_SLOTS.get_ptr_mut(index) {
        // SAFETY: this CPU's slot; only this CPU's programs write it, one at a time.
        unsafe {
            if (*slot).key == key {
                return Some(&raw mut (*slot).stats);
            }
            if (*slot).key == 0 {
                (*slot).key = key;
                return Some(&raw mut (*slot).stats);
            }
        }
    }
    if let Some(s) = RUNQ.get_ptr_mut(key) {
        return Some(s);
    }
    let zero = ZERO_RUNQ.get_ptr(0)?;
    // BPF_NOEXIST: another CPU's insert meanwhile is as good as ours.
    insert_zero_runq(key, zero);
    let slot = RUNQ.get_ptr_mut(key);
    if slot.is_none() {
        lose(Loss::RunqMapFull);
    }
    slot
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// bpf_probe_read_kernel is GPL-only.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
