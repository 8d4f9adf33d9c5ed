//! herd's kernel probe, user-space half.
//!
//! [`KernelProbe::load`] checks privileges, resolves the struct offsets the eBPF programs need
//! from the running kernel's BTF, loads and attaches the programs built from `probe-ebpf`, and
//! [`KernelProbe::snapshot`] reads their per-CPU maps into per-cgroup totals. Programs are
//! attached through file descriptors owned by this process and never pinned, so they detach
//! when the probe is dropped or the process dies, however it dies.
#![deny(missing_docs)]

pub mod addrs;
pub mod btf;
pub mod caps;
pub mod cgroup;
pub mod cgroupfs;
pub mod clock;
pub mod containers;
pub mod discover;
mod docker_events;
mod error;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod netstat;
mod runq_slots;
pub mod sample;
pub mod sampler;
pub mod sockdiag;
mod source;
mod task_walk;
mod tracefs;

use std::collections::HashMap;

use aya::{
    Ebpf, EbpfLoader, VerifierLogLevel,
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray, PerCpuHashMap},
    programs::{BtfTracePoint, ProgramError, RawTracePoint, TracePoint},
};
pub use error::ProbeError;
use probe_common::{
    CgroupCounters, Counter, Loss, N_COUNTERS, PairKey, PairStats, RETRANS_WINDOW_NS,
    RetransWindow, RetransWindowKey, RunqStats, globals,
};
pub use source::CounterSource;

/// The eBPF object built by `build.rs` from the `probe-ebpf` crate.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/probe-ebpf"));

/// Where a program attaches.
#[derive(Clone, Copy, Debug)]
enum Hook {
    /// A raw tracepoint, by tracepoint name (attached by name; no tracefs needed).
    Raw(&'static str),
    /// A classic tracepoint (category, name); its id is read from tracefs.
    Classic(&'static str, &'static str),
    /// A BTF-typed tracepoint (`tp_btf`), by tracepoint name: loaded against the running
    /// kernel's BTF (its `btf_trace_<name>` type), attached like a raw one (no tracefs).
    Btf(&'static str),
}

/// Each program, its hook, and what it needs from the kernel. One row per program.
const PROGRAMS: &[(&str, Hook, &str)] = &[
    (
        "inet_sock_set_state",
        Hook::Raw("inet_sock_set_state"),
        "raw tracepoints (4.17) and the inet_sock_set_state tracepoint (4.16)",
    ),
    (
        "tcp_send_reset",
        Hook::Raw("tcp_send_reset"),
        "raw tracepoints (4.17) and the tcp_send_reset tracepoint (4.15)",
    ),
    (
        "tcp_receive_reset",
        Hook::Raw("tcp_receive_reset"),
        "raw tracepoints (4.17) and the tcp_receive_reset tracepoint (4.15)",
    ),
    (
        "tcp_retransmit_skb",
        Hook::Raw("tcp_retransmit_skb"),
        "raw tracepoints (4.17) and the tcp_retransmit_skb tracepoint (4.15)",
    ),
    (
        "cgroup_mkdir",
        Hook::Classic("cgroup", "cgroup_mkdir"),
        "the cgroup_mkdir tracepoint (5.5 for its u64 id) and tracefs",
    ),
];

/// The connect() syscall tracepoints, attached only with
/// [`ProbeOptions::connect_syscalls`]: while any syscall tracepoint is attached, every syscall
/// of every task on the host takes the kernel's traced entry and exit path (measured: 13 %
/// more time per round trip of a pipe ping-pong, docs/benchmarks.md).
const SYSCALL_PROGRAMS: &[(&str, Hook, &str)] = &[
    (
        "sys_enter_connect",
        Hook::Classic("syscalls", "sys_enter_connect"),
        "syscall tracepoints (CONFIG_FTRACE_SYSCALLS) and tracefs",
    ),
    (
        "sys_exit_connect",
        Hook::Classic("syscalls", "sys_exit_connect"),
        "syscall tracepoints (CONFIG_FTRACE_SYSCALLS) and tracefs",
    ),
];

/// The run-queue program: optional. A kernel that refuses it (no BTF tracepoints, a BTF
/// without the scheduler fields it reads) gets [`RUNQ_RAW_PROGRAMS`] instead; one that
/// refuses those too loses the run-queue delay, with the reason in every interval, and keeps
/// everything else.
const RUNQ_PROGRAM: (&str, Hook, &str) = (
    "runq_switch",
    Hook::Btf("sched_switch"),
    "BTF tracepoints (5.5) and the sched_switch tracepoint",
);

/// Beside the task walk: each ended thread's last counters, so that what it waited since the
/// previous walk is not lost with it.
const RUNQ_EXIT_PROGRAM: (&str, Hook, &str) = (
    "runq_exit",
    Hook::Btf("sched_process_free"),
    "BTF tracepoints (5.5), BPF ring buffers (5.8) and the sched_process_free tracepoint",
);

/// The fallback run-queue programs: raw tracepoints that time each wait themselves.
const RUNQ_RAW_PROGRAMS: &[(&str, Hook, &str)] = &[
    (
        "sched_wakeup",
        Hook::Raw("sched_wakeup"),
        "raw tracepoints (4.17) and the sched_wakeup tracepoint",
    ),
    (
        "sched_wakeup_new",
        Hook::Raw("sched_wakeup_new"),
        "raw tracepoints (4.17) and the sched_wakeup_new tracepoint",
    ),
    (
        "sched_switch",
        Hook::Raw("sched_switch"),
        "raw tracepoints (4.17) and the sched_switch tracepoint (prev, next as arguments 1, 2: 4.4; prev_state as argument 3: 5.18)",
    ),
];

/// What a kernel before 5.18 attaches instead of the fallback `sched_switch` (no
/// `prev_state` argument).
const SCHED_SWITCH_OLD: (&str, Hook, &str) = (
    "sched_switch_old",
    Hook::Raw("sched_switch"),
    "raw tracepoints (4.17) and the sched_switch tracepoint (prev, next as arguments 1, 2: 4.4)",
);

/// The environment variable that forces the fallback run-queue programs (`raw`), as
/// [`RunqPrograms::Raw`] does: for measuring one design against the other with one binary.
pub const RUNQ_PROGRAMS_ENV: &str = "HERD_PROBE_RUNQ";

/// Which kernel programs measure the run-queue delay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RunqPrograms {
    /// `tp_btf/sched_switch` reading the scheduler's own `sched_info` (5.5, BTF,
    /// CONFIG_SCHED_INFO), or the raw tracepoints where the kernel refuses it.
    #[default]
    Auto,
    /// The raw tracepoints `sched_wakeup`, `sched_wakeup_new` and `sched_switch` (4.17),
    /// which time each wait themselves: about twice the cost per context switch.
    Raw,
}

/// Options for loading the probe.
#[derive(Clone, Debug, Default)]
pub struct ProbeOptions {
    /// Ask the verifier for its full log when a program is rejected (costly; for `--verbose`).
    pub verifier_log: bool,
    /// Also attach the connect() syscall tracepoints, which count the connect failures that
    /// precede any TCP state change (no route: ENETUNREACH/EHOSTUNREACH; a policy's
    /// EACCES/EPERM; any other errno). Without them, connect errors are the ones a socket
    /// shows: refused, timed out, ICMP unreachable, and no free local port (EADDRNOTAVAIL).
    /// Costly: see [`SYSCALL_PROGRAMS`].
    pub connect_syscalls: bool,
}

/// Options of the run-queue program ([`KernelProbe::load_with`]).
#[derive(Clone, Debug, Default)]
pub struct WaitOptions {
    /// A process (tgid) whose threads' run-queue delay is counted in a row of their own,
    /// [`OWN_ROW`], instead of in their cgroup's: herd's own pid when herd drives the load, so
    /// a driver starved of CPU shows in kernel truth.
    pub own_tgid: Option<u32>,
    /// Leave the run-queue measurement out: the run-queue delay is then unavailable with
    /// this reason.
    pub no_runq: bool,
    /// Time each wait with a program on every context switch (`--runq-waits`: a per-wait
    /// histogram, at a cost on every switch) instead of counting them from the scheduler's
    /// per-thread totals once per poll (the default: count and sum only).
    pub per_wait: bool,
    /// Which programs measure it (`HERD_PROBE_RUNQ=raw` in the environment forces
    /// [`RunqPrograms::Raw`] too).
    pub programs: RunqPrograms,
}

/// The name of the row that holds the threads of [`WaitOptions::own_tgid`].
pub const OWN_ROW: &str = "herd";

/// Counter totals of one cgroup, summed over CPUs since the probe was loaded.
pub use herd_model::Counts;

/// One reading of every kernel counter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// When the maps were read, on the shared monotonic clock ([`clock::now_ns`]).
    pub at_ns: u64,
    /// Totals by cgroup v2 id.
    pub by_cgroup: HashMap<u64, Counts>,
    /// Cgroup v2 directories created while the probe ran, by id (the `cgroup_mkdir`
    /// tracepoint; the newest [`probe_common::MAX_CREATED`]): how a cgroup that is gone
    /// before the tree is re-read (a one-shot container) still gets its path.
    pub created: HashMap<u64, std::path::PathBuf>,
    /// Events the programs could not record, by [`Loss`] index.
    pub losses: [u64; Loss::Count as usize],
    /// Totals by source container → destination pair (active sockets).
    pub pairs: HashMap<PairKey, PairStats>,
    /// Run-queue delay totals by cgroup v2 id ([`probe_common::OWN_TGID_KEY`] for the threads
    /// of [`WaitOptions::own_tgid`]).
    pub runq: HashMap<u64, RunqStats>,
    /// Why there is no run-queue delay, when there is none.
    pub runq_unavailable: Option<String>,
    /// The run-queue delay was counted from the scheduler's totals (the task walk): counts
    /// and sums, no per-wait histogram.
    pub runq_totals_only: bool,
    /// Retransmits per pair in the 100 ms windows that closed since the previous snapshot
    /// (each window is handed out once), oldest first.
    pub retrans_windows: Vec<(PairKey, RetransSpan)>,
}

/// Retransmits of one pair in one window of the monotonic clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetransSpan {
    /// Window start (ns).
    pub start_ns: u64,
    /// Window end (ns).
    pub end_ns: u64,
    /// Segments retransmitted, SYNs included.
    pub retrans_segs: u64,
    /// Of those, SYN retransmits.
    pub syn_retrans: u64,
}

impl Snapshot {
    /// The total of `counter` for `cgroup`, 0 if the cgroup saw no event.
    pub fn get(&self, cgroup: u64, counter: Counter) -> u64 {
        self.by_cgroup
            .get(&cgroup)
            .map_or(0, |c| c[counter as usize])
    }

    /// Total events lost for any reason.
    pub fn lost(&self) -> u64 {
        self.losses.iter().sum()
    }

    /// Cumulative stats of the pair `cgroup` → `addr:port`, zero if never seen.
    pub fn pair(&self, cgroup: u64, addr: std::net::IpAddr, port: u16) -> PairStats {
        self.pairs
            .get(&pair_key(cgroup, addr, port))
            .copied()
            .unwrap_or_default()
    }
}

/// The loaded and attached kernel programs. Dropping it detaches everything.
pub struct KernelProbe {
    ebpf: Ebpf,
    /// Why the run-queue program is not attached, when it is not.
    runq_unavailable: Option<String>,
    /// The run-queue programs attached (`tp_btf` or `raw_tp`), when they are.
    runq_hook: Option<&'static str>,
    /// `RETRANS_WINDOWS`, taken out of `ebpf`: reading it also removes what was read.
    retrans_windows: std::sync::Mutex<RetransWindows>,
    /// `RUNQ_SLOTS`, mapped; `None` when the run-queue programs are not attached.
    runq_slots: Option<runq_slots::RunqSlots>,
    /// The task walk, when it measures the run-queue delay (the default).
    walk: Option<std::sync::Mutex<task_walk::TaskWalk>>,
}

type RetransWindows = PerCpuHashMap<MapData, RetransWindowKey, RetransWindow>;

impl KernelProbe {
    /// Checks privileges and kernel support, then loads and attaches every program, the
    /// run-queue one with default [`WaitOptions`] (no process counted apart).
    pub fn load(opts: &ProbeOptions) -> Result<Self, ProbeError> {
        Self::load_with(opts, &WaitOptions::default())
    }

    /// [`Self::load`], with the run-queue program's options: herd passes its own pid as
    /// [`WaitOptions::own_tgid`] when it drives the load.
    pub fn load_with(opts: &ProbeOptions, waits: &WaitOptions) -> Result<Self, ProbeError> {
        caps::require_bpf()?;
        let btf = btf::Btf::from_kernel()?;
        let offsets = [
            (
                globals::SOCK_CGROUP,
                btf.member_offset("sock", &["sk_cgrp_data", "cgroup"])?,
            ),
            (globals::CGROUP_KN, btf.member_offset("cgroup", &["kn"])?),
            (
                globals::KERNFS_NODE_ID,
                btf.member_offset("kernfs_node", &["id"])?,
            ),
            (globals::SOCK_ERR, btf.member_offset("sock", &["sk_err"])?),
            (
                globals::SOCK_PROTOCOL,
                btf.member_offset("sock", &["sk_protocol"])?,
            ),
            (
                globals::SKC_DADDR,
                btf.member_offset("sock_common", &["skc_daddr"])?,
            ),
            (
                globals::SKC_V6_DADDR,
                btf.member_offset("sock_common", &["skc_v6_daddr"])?,
            ),
            (
                globals::SKC_DPORT,
                btf.member_offset("sock_common", &["skc_dport"])?,
            ),
            (
                globals::SKC_FAMILY,
                btf.member_offset("sock_common", &["skc_family"])?,
            ),
            (
                globals::SKC_STATE,
                btf.member_offset("sock_common", &["skc_state"])?,
            ),
            (globals::SKB_CB, btf.member_offset("sk_buff", &["cb"])?),
            (
                globals::TCP_SKB_CB_FLAGS,
                btf.member_offset("tcp_skb_cb", &["tcp_flags"])?,
            ),
            (
                globals::TCP_SKB_CB_GSO_SEGS,
                btf.member_offset("tcp_skb_cb", &["tcp_gso_segs"])?,
            ),
            (
                globals::TCP_SEGS_OUT,
                btf.member_offset("tcp_sock", &["segs_out"])?,
            ),
        ];
        // The run-queue programs: `runq_switch` where the kernel has what it reads, else the
        // raw ones; a kernel refusing both loses only the run-queue delay.
        let raw_forced = waits.programs == RunqPrograms::Raw
            || std::env::var_os(RUNQ_PROGRAMS_ENV).is_some_and(|v| v == "raw");
        let own_tgid = u64::from(waits.own_tgid.unwrap_or(0));
        raise_memlock();
        if waits.no_runq {
            let why = "the run-queue program was left out (--no-runq)".to_owned();
            return Self::load_once(opts, &offsets, own_tgid, Runq::Off(why));
        }
        if !waits.per_wait && !raw_forced {
            let runq = match sched_info_on().and_then(|()| walk_offsets(&btf)) {
                Ok(fields) => Runq::Walk(fields),
                Err(why) => Runq::Off(format!("{why}; --runq-waits may still measure it")),
            };
            return Self::load_once(opts, &offsets, own_tgid, runq);
        }
        let btf_refused = if raw_forced {
            format!("{RUNQ_PROGRAMS_ENV}=raw or RunqPrograms::Raw asked for the raw tracepoints")
        } else {
            match sched_info_on().and_then(|()| runq_offsets(&btf)) {
                Ok(fields) => {
                    let probe = Self::load_once(opts, &offsets, own_tgid, Runq::Btf(fields))?;
                    match &probe.runq_unavailable {
                        None => return Ok(probe),
                        Some(why) => why.clone(),
                    }
                }
                Err(why) => why,
            }
        };
        // `__state` replaced `state` in 5.14 (2f064a59a11f); both are read as their low 32
        // bits.
        let state = btf
            .member_offset("task_struct", &["__state"])
            .or_else(|_| btf.member_offset("task_struct", &["state"]));
        let runq = match state {
            Ok(off) => Runq::Raw(off, btf_refused),
            Err(e) => Runq::Off(format!(
                "{btf_refused}; and this kernel's BTF lacks a field the raw tracepoints read: {e}"
            )),
        };
        Self::load_once(opts, &offsets, own_tgid, runq)
    }

    /// Loads the object with `offsets` and the run-queue programs `runq`, and attaches.
    fn load_once(
        opts: &ProbeOptions,
        offsets: &[(&str, u64)],
        own_tgid: u64,
        runq: Runq,
    ) -> Result<Self, ProbeError> {
        // The kernel's BTF, one copy for the loader and the BTF tracepoint (it is large: two
        // copies alive at once showed as 13 MiB more peak RSS). `EbpfLoader::new` parses its
        // own: dropped before ours is parsed.
        let mut loader = EbpfLoader::new();
        loader.btf(None);
        let kbtf = aya::Btf::from_sys_fs().ok();
        loader.btf(kbtf.as_ref());
        loader.verifier_log_level(if opts.verifier_log {
            VerifierLogLevel::VERBOSE | VerifierLogLevel::STATS
        } else {
            VerifierLogLevel::default()
        });
        for (name, value) in offsets {
            loader.override_global(name, value, true);
        }
        // One slot per thread id the kernel can hand out (up to 2^20): no two live threads
        // share a slot where pid_max is within it (32768 on a kernel's default).
        let base_slots = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .unwrap_or(probe_common::MAX_RUNQ_BASE_SLOTS)
            .clamp(1, probe_common::MAX_RUNQ_BASE_SLOTS)
            .next_power_of_two();
        let base_mask = u64::from(base_slots - 1);
        // The per-thread map of the programs that do not run holds one entry.
        // A ring buffer is at least a page; only the task walk reads `RUNQ_EXITS`.
        // SAFETY: sysconf has no preconditions.
        let page = u32::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        if !matches!(runq, Runq::Walk(_)) {
            loader.map_max_entries("RUNQ_EXITS", page);
        }
        match &runq {
            Runq::Walk(fields) => {
                for (name, value) in fields {
                    loader.override_global(name, value, true);
                }
                loader.map_max_entries("RUNQ_TASKS", 1);
                loader.map_max_entries("RUNQ_BASE", 1);
            }
            Runq::Btf(fields) => {
                for (name, value) in fields {
                    loader.override_global(name, value, true);
                }
                loader.map_max_entries("RUNQ_TASKS", 1);
                loader.map_max_entries("RUNQ_BASE", base_slots);
                loader.override_global(globals::RUNQ_BASE_MASK, &base_mask, true);
            }
            Runq::Raw(state, _) => {
                loader.override_global(globals::TASK_STATE, state, true);
                loader.map_max_entries("RUNQ_BASE", 1);
            }
            Runq::Off(_) => {
                loader.map_max_entries("RUNQ_TASKS", 1);
                loader.map_max_entries("RUNQ_BASE", 1);
            }
        }
        loader.override_global(globals::OWN_TGID, &own_tgid, true);
        let connect_syscalls = u64::from(opts.connect_syscalls);
        loader.override_global(globals::CONNECT_SYSCALLS, &connect_syscalls, true);
        if !opts.connect_syscalls {
            loader.map_max_entries("CONNECTING", 1);
            loader.map_max_entries("NON_INET_CONNECT", 1);
        }
        let slots = runq_slots::entries().map_err(ProbeError::Cpus)?;
        loader.map_max_entries("RUNQ_SLOTS", slots);
        let mut ebpf = loader.load(EBPF_OBJECT).map_err(ProbeError::Object)?;
        let syscalls = if opts.connect_syscalls {
            SYSCALL_PROGRAMS
        } else {
            &[]
        };
        for &(program, hook, needs) in PROGRAMS.iter().chain(syscalls) {
            attach(&mut ebpf, program, hook, needs, kbtf.as_ref())?;
        }
        let mut walk = None;
        let (runq_hook, runq_unavailable) = match runq {
            Runq::Off(why) => (None, Some(why)),
            Runq::Walk(_) => match start_walk(&mut ebpf, kbtf.as_ref(), own_tgid as u32) {
                Ok(w) => {
                    walk = Some(std::sync::Mutex::new(w));
                    (Some("iter/task"), None)
                }
                Err(e) => (
                    None,
                    Some(format!(
                        "this kernel refused the task iterator runq_tasks (BPF task \
                         iterators: 5.8, BTF): {e}; --runq-waits may still measure it"
                    )),
                ),
            },
            Runq::Btf(_) => {
                let (program, hook, needs) = RUNQ_PROGRAM;
                match attach(&mut ebpf, program, hook, needs, kbtf.as_ref()) {
                    Ok(()) => (Some("tp_btf"), None),
                    Err(e) => (None, Some(format!("this kernel refused {program}: {e}"))),
                }
            }
            Runq::Raw(_, btf_refused) => match attach_raw_runq(&mut ebpf, kbtf.as_ref()) {
                Ok(()) => (Some("raw_tp"), None),
                Err(e) => (None, Some(format!("{btf_refused}; and {e}"))),
            },
        };
        let map = ebpf
            .take_map("RETRANS_WINDOWS")
            .ok_or(ProbeError::MissingMap("RETRANS_WINDOWS"))?;
        let retrans_windows = RetransWindows::try_from(map)
            .map_err(|source| ProbeError::Map("RETRANS_WINDOWS", source))?;
        let mut runq_unavailable = runq_unavailable;
        let runq_slots = match (&runq_unavailable, ebpf.map("RUNQ_SLOTS")) {
            (None, Some(aya::maps::Map::Array(data))) if walk.is_none() => {
                match runq_slots::RunqSlots::map(data.fd(), slots) {
                    Ok(m) => Some(m),
                    Err(e) => {
                        runq_unavailable = Some(format!(
                            "the run-queue slots (RUNQ_SLOTS) could not be mapped: {e}"
                        ));
                        None
                    }
                }
            }
            _ => None,
        };
        Ok(Self {
            runq_slots,
            walk,
            ebpf,
            runq_unavailable,
            runq_hook,
            retrans_windows: std::sync::Mutex::new(retrans_windows),
        })
    }
}

/// The run-queue programs one load of the object attaches.
#[allow(clippy::large_enum_variant)] // one value per load, on the stack
enum Runq {
    /// The task iterator `runq_tasks` (the default), with the offsets it reads.
    Walk([(&'static str, u64); 7]),
    /// `runq_switch`, with the offsets it reads.
    Btf([(&'static str, u64); 11]),
    /// The raw tracepoints, with `task_struct.__state`'s offset and why `runq_switch` is not
    /// used.
    Raw(u64, String),
    /// None, and why.
    Off(String),
}

/// Attaches the fallback run-queue programs, `sched_switch_old` where the kernel refuses
/// `sched_switch` (before 5.18); on a refusal, unloads all of them (half of them would time
/// waits that never end) and says which.
fn attach_raw_runq(ebpf: &mut Ebpf, kbtf: Option<&aya::Btf>) -> Result<(), String> {
    for &(program, hook, needs) in RUNQ_RAW_PROGRAMS {
        let mut attached = attach(ebpf, program, hook, needs, kbtf);
        if attached.is_err() && program == "sched_switch" {
            let (old, hook, needs) = SCHED_SWITCH_OLD;
            attached = attach(ebpf, old, hook, needs, kbtf);
        }
        if let Err(e) = attached {
            for &(p, ..) in RUNQ_RAW_PROGRAMS.iter().chain([&SCHED_SWITCH_OLD]) {
                if let Some(prog) = ebpf.program_mut(p) {
                    let raw: Result<&mut RawTracePoint, _> = prog.try_into();
                    if let Ok(raw) = raw {
                        let _ = raw.unload();
                    }
                }
            }
            return Err(format!("this kernel refused {program}: {e}"));
        }
    }
    Ok(())
}

/// Whether the scheduler keeps `sched_info` (what `runq_switch` reads): the kernel has
/// CONFIG_SCHED_INFO (`/proc/<pid>/schedstat` exists) and collects it. Before 5.14
/// (c5895d3f06cb) a kernel without CONFIG_SCHEDSTATS and with delay accounting off at boot
/// skipped it, and its schedstat files read `0 0 0`; this process has run, so a 0 runtime
/// means that.
fn sched_info_on() -> Result<(), String> {
    let s = std::fs::read_to_string("/proc/self/schedstat")
        .map_err(|e| format!("/proc/self/schedstat: {e} (the kernel lacks CONFIG_SCHED_INFO)"))?;
    match s
        .split_whitespace()
        .next()
        .and_then(|f| f.parse::<u64>().ok())
    {
        Some(0) | None => Err(format!(
            "the scheduler keeps no sched_info (/proc/self/schedstat says {:?}: a kernel before \
             5.14 without CONFIG_SCHEDSTATS and with delay accounting off)",
            s.trim()
        )),
        Some(_) => Ok(()),
    }
}

/// Loads `runq_tasks` as a task iterator and takes the first walk.
fn start_walk(
    ebpf: &mut Ebpf,
    kbtf: Option<&aya::Btf>,
    own_tgid: u32,
) -> Result<task_walk::TaskWalk, String> {
    let prog = ebpf
        .program_mut("runq_tasks")
        .ok_or("the object has no runq_tasks program")?;
    let prog: &mut aya::programs::Iter = prog.try_into().map_err(|e| format!("{e}"))?;
    let parsed;
    let btf = match kbtf {
        Some(b) => b,
        None => {
            parsed = aya::Btf::from_sys_fs().map_err(|e| format!("the kernel's BTF: {e}"))?;
            &parsed
        }
    };
    prog.load("task", btf).map_err(|e| {
        let mut msg = format!("{e}");
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            msg.push_str(&format!(": {s}"));
            src = s.source();
        }
        msg
    })?;
    let fd = prog
        .fd()
        .map_err(|e| format!("{e}"))?
        .try_clone()
        .map_err(|e| format!("{e}"))?;
    // The exits' ring buffer, where the kernel takes its program: without it a thread that
    // exits between two walks takes what it waited since the first with it.
    let (program, hook, needs) = RUNQ_EXIT_PROGRAM;
    let exits = match attach(ebpf, program, hook, needs, kbtf) {
        Ok(()) => ebpf
            .take_map("RUNQ_EXITS")
            .and_then(|m| aya::maps::RingBuf::try_from(m).ok()),
        Err(_) => None,
    };
    task_walk::TaskWalk::new(std::os::fd::AsFd::as_fd(&fd), own_tgid, exits)
        .map_err(|e| format!("linking or reading the task iterator: {e}"))
}

/// A kernel field a scheduler program reads: the program global its offset goes into, the
/// struct and the path to the field, and the kernel option that provides it.
type Field = (
    &'static str,
    &'static str,
    &'static [&'static str],
    Option<&'static str>,
);

const RUN_DELAY: Field = (
    globals::TASK_RUN_DELAY,
    "task_struct",
    &["sched_info", "run_delay"],
    Some("CONFIG_SCHED_INFO"),
);
const PCOUNT: Field = (
    globals::TASK_PCOUNT,
    "task_struct",
    &["sched_info", "pcount"],
    Some("CONFIG_SCHED_INFO"),
);
const LAST_QUEUED: Field = (
    globals::TASK_LAST_QUEUED,
    "task_struct",
    &["sched_info", "last_queued"],
    Some("CONFIG_SCHED_INFO"),
);
const START_TIME: Field = (
    globals::TASK_START_TIME,
    "task_struct",
    &["start_time"],
    None,
);
const TGID: Field = (globals::TASK_TGID, "task_struct", &["tgid"], None);
const PID: Field = (globals::TASK_PID, "task_struct", &["pid"], None);
const CGROUPS: Field = (
    globals::TASK_CGROUPS,
    "task_struct",
    &["cgroups"],
    Some("CONFIG_CGROUPS"),
);
const DFL_CGRP: Field = (
    globals::CSS_SET_DFL_CGRP,
    "css_set",
    &["dfl_cgrp"],
    Some("CONFIG_CGROUPS"),
);
const SE_CFS_RQ: Field = (
    globals::TASK_SE_CFS_RQ,
    "task_struct",
    &["se", "cfs_rq"],
    Some("CONFIG_FAIR_GROUP_SCHED"),
);
const CFS_RQ_RQ: Field = (
    globals::CFS_RQ_RQ,
    "cfs_rq",
    &["rq"],
    Some("CONFIG_FAIR_GROUP_SCHED"),
);
const RQ_CLOCK: Field = (globals::RQ_CLOCK, "rq", &["clock"], None);
const RQ_IDLE: Field = (globals::RQ_IDLE, "rq", &["idle"], None);

/// The offsets of `fields` in this kernel, or why its BTF cannot give them (with the kernel
/// option that provides the field); `reader` names the program in the error.
fn offsets<const N: usize>(
    btf: &btf::Btf,
    reader: &str,
    fields: [Field; N],
) -> Result<[(&'static str, u64); N], String> {
    let mut out = [("", 0); N];
    for (slot, (global, st, path, config)) in out.iter_mut().zip(fields) {
        let offset = btf.member_offset(st, path).map_err(|e| {
            let needs = config.map_or(String::new(), |c| format!(", which needs {c}"));
            format!("this kernel's BTF lacks a field {reader} reads ({e}{needs})")
        })?;
        *slot = (global, offset);
    }
    Ok(out)
}

/// The offsets `runq_tasks` reads.
fn walk_offsets(btf: &btf::Btf) -> Result<[(&'static str, u64); 7], String> {
    offsets(
        btf,
        "the task walk",
        [RUN_DELAY, PCOUNT, START_TIME, TGID, PID, CGROUPS, DFL_CGRP],
    )
}

/// The offsets `runq_switch` reads.
fn runq_offsets(btf: &btf::Btf) -> Result<[(&'static str, u64); 11], String> {
    offsets(
        btf,
        "the run-queue program",
        [
            LAST_QUEUED,
            RUN_DELAY,
            START_TIME,
            SE_CFS_RQ,
            CFS_RQ_RQ,
            RQ_CLOCK,
            RQ_IDLE,
            TGID,
            PID,
            CGROUPS,
            DFL_CGRP,
        ],
    )
}

/// Loads and attaches one program (`kbtf`: the kernel's BTF, which a BTF tracepoint needs).
fn attach(
    ebpf: &mut Ebpf,
    program: &'static str,
    hook: Hook,
    needs: &'static str,
    kbtf: Option<&aya::Btf>,
) -> Result<(), ProbeError> {
    {
        {
            let prog = ebpf
                .program_mut(program)
                .ok_or(ProbeError::MissingProgram(program))?;
            let attached = match hook {
                Hook::Raw(tp) => {
                    let prog: &mut RawTracePoint = prog
                        .try_into()
                        .map_err(|source| ProbeError::load(program, needs, source))?;
                    prog.load()
                        .map_err(|source| ProbeError::load(program, needs, source))?;
                    prog.attach(tp).map(drop)
                }
                Hook::Classic(category, name) => {
                    let prog: &mut TracePoint = prog
                        .try_into()
                        .map_err(|source| ProbeError::load(program, needs, source))?;
                    prog.load()
                        .map_err(|source| ProbeError::load(program, needs, source))?;
                    tracefs::with_tracefs(|| prog.attach(category, name).map(drop))
                        .map_err(ProbeError::Tracefs)?
                }
                Hook::Btf(tp) => {
                    let prog: &mut BtfTracePoint = prog
                        .try_into()
                        .map_err(|source| ProbeError::load(program, needs, source))?;
                    let parsed;
                    let btf = match kbtf {
                        Some(b) => b,
                        None => {
                            parsed = aya::Btf::from_sys_fs().map_err(|e| {
                                ProbeError::load(program, needs, ProgramError::Btf(e))
                            })?;
                            &parsed
                        }
                    };
                    prog.load(tp, btf)
                        .map_err(|source| ProbeError::load(program, needs, source))?;
                    prog.attach().map(drop)
                }
            };
            attached.map_err(|source: ProgramError| ProbeError::Attach {
                program,
                hook: format!("{hook:?}"),
                source,
            })?;
        }
    }
    Ok(())
}

impl KernelProbe {
    /// Why the run-queue delay is not measured, or `None` when it is.
    pub fn runq_unavailable(&self) -> Option<&str> {
        self.runq_unavailable.as_deref()
    }

    /// How the run-queue delay is measured: `iter/task` (the default: a walk of the host's
    /// threads per poll), `tp_btf` (`--runq-waits`: one program on `sched_switch` reading the
    /// scheduler's own accounting) or `raw_tp` (its fallback raw tracepoints), `None` when
    /// it is not.
    pub fn runq_hook(&self) -> Option<&'static str> {
        self.runq_hook
    }

    /// Run-queue delay totals by cgroup v2 id: by default one walk of the host's threads
    /// (their growth since the previous walk added in); with the switch programs, one walk
    /// of the per-CPU `RUNQ` map (the keys whose direct-mapped slot another key holds) and one
    /// read of the mapped `RUNQ_SLOTS`. Cheap enough for every 100 ms poll.
    pub fn runq(&self) -> Result<HashMap<u64, RunqStats>, ProbeError> {
        if let Some(walk) = &self.walk {
            let mut w = walk.lock().unwrap_or_else(|e| e.into_inner());
            return w.walk().cloned().map_err(ProbeError::TaskWalk);
        }
        let map = self
            .ebpf
            .map("RUNQ")
            .ok_or(ProbeError::MissingMap("RUNQ"))?;
        let runq = PerCpuHashMap::<&MapData, u64, RunqStats>::try_from(map)
            .map_err(|source| ProbeError::Map("RUNQ", source))?;
        let mut out = HashMap::new();
        for entry in runq.iter() {
            let (key, per_cpu) = entry.map_err(|source| ProbeError::Map("RUNQ", source))?;
            let mut total = RunqStats::default();
            for cpu in per_cpu.iter() {
                total.add(cpu);
            }
            out.insert(key, total);
        }
        if let Some(slots) = &self.runq_slots {
            slots.add_to(&mut out);
        }
        Ok(out)
    }

    /// Whether a sub-second poll should walk the threads now: the walk keeps to
    /// [`task_walk::WALK_BUDGET`] of a CPU between interval ends (always true with the
    /// switch programs, which cost nothing to read).
    pub fn runq_poll_due(&self) -> bool {
        match &self.walk {
            Some(w) => w
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .due(clock::now_ns()),
            None => true,
        }
    }

    /// Removes and returns the retransmit windows that closed before `now_ns`.
    fn drain_retrans_windows(
        &self,
        now_ns: u64,
    ) -> Result<Vec<(PairKey, RetransSpan)>, ProbeError> {
        let open = now_ns / RETRANS_WINDOW_NS;
        let mut windows = self
            .retrans_windows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut closed = Vec::new();
        for entry in windows.iter() {
            let (key, per_cpu) =
                entry.map_err(|source| ProbeError::Map("RETRANS_WINDOWS", source))?;
            if key.window >= open {
                continue;
            }
            let mut span = RetransSpan {
                start_ns: key.window * RETRANS_WINDOW_NS,
                end_ns: (key.window + 1) * RETRANS_WINDOW_NS,
                ..RetransSpan::default()
            };
            for cpu in per_cpu.iter() {
                span.retrans_segs += cpu.retrans_segs;
                span.syn_retrans += cpu.syn_retrans;
            }
            closed.push((key, span));
        }
        // A closed window gets no more writes (its time has passed), so removing it after
        // reading loses nothing.
        for (key, _) in &closed {
            let _ = windows.remove(key);
        }
        let mut out: Vec<(PairKey, RetransSpan)> =
            closed.into_iter().map(|(k, s)| (k.pair, s)).collect();
        out.sort_by_key(|(_, s)| s.start_ns);
        Ok(out)
    }

    /// Reads every counter. Cheap: one map walk per call, no per-event work.
    pub fn snapshot(&self) -> Result<Snapshot, ProbeError> {
        let at_ns = clock::now_ns();
        let map = self
            .ebpf
            .map("CGROUP_COUNTERS")
            .ok_or(ProbeError::MissingMap("CGROUP_COUNTERS"))?;
        let counters = PerCpuHashMap::<&MapData, u64, CgroupCounters>::try_from(map)
            .map_err(|source| ProbeError::Map("CGROUP_COUNTERS", source))?;
        let mut by_cgroup = HashMap::new();
        for entry in counters.iter() {
            let (cgroup, per_cpu) =
                entry.map_err(|source| ProbeError::Map("CGROUP_COUNTERS", source))?;
            let mut total = [0u64; N_COUNTERS];
            for cpu in per_cpu.iter() {
                for (t, v) in total.iter_mut().zip(cpu.v) {
                    *t += v;
                }
            }
            by_cgroup.insert(cgroup, total);
        }
        let map = self
            .ebpf
            .map("LOSSES")
            .ok_or(ProbeError::MissingMap("LOSSES"))?;
        let losses_map = PerCpuArray::<&MapData, u64>::try_from(map)
            .map_err(|source| ProbeError::Map("LOSSES", source))?;
        let mut losses = [0u64; Loss::Count as usize];
        for (i, slot) in losses.iter_mut().enumerate() {
            let per_cpu = losses_map
                .get(&(i as u32), 0)
                .map_err(|source| ProbeError::Map("LOSSES", source))?;
            *slot = per_cpu.iter().sum();
        }
        losses[Loss::RecursionMiss as usize] = self.recursion_misses();
        let map = self
            .ebpf
            .map("PAIRS")
            .ok_or(ProbeError::MissingMap("PAIRS"))?;
        let pair_map = PerCpuHashMap::<&MapData, PairKey, PairStats>::try_from(map)
            .map_err(|source| ProbeError::Map("PAIRS", source))?;
        let mut pairs = HashMap::new();
        for entry in pair_map.iter() {
            let (key, per_cpu) = entry.map_err(|source| ProbeError::Map("PAIRS", source))?;
            let mut total = PairStats::default();
            for cpu in per_cpu.iter() {
                total.add(cpu);
            }
            pairs.insert(key, total);
        }
        let map = self
            .ebpf
            .map("CREATED")
            .ok_or(ProbeError::MissingMap("CREATED"))?;
        let created_map = BpfHashMap::<&MapData, u64, probe_common::CgroupPath>::try_from(map)
            .map_err(|source| ProbeError::Map("CREATED", source))?;
        let mut created = HashMap::new();
        // An LRU map may drop an entry while it is walked: skip what fails, the rest is good.
        for (id, path) in created_map.iter().flatten() {
            if let Some(p) = path.as_str() {
                created.insert(id, std::path::PathBuf::from(p));
            }
        }
        let runq = match self.runq_unavailable {
            None => self.runq()?,
            Some(_) => HashMap::new(),
        };
        Ok(Snapshot {
            at_ns,
            by_cgroup,
            created,
            losses,
            pairs,
            runq,
            runq_unavailable: self.runq_unavailable.clone(),
            runq_totals_only: self.walk.is_some(),
            retrans_windows: self.drain_retrans_windows(at_ns)?,
        })
    }
}

impl KernelProbe {
    /// Events the kernel did not hand to one of our programs because that program was already
    /// running on the CPU: a softirq (a packet, a timer) interrupting it in process context
    /// changes TCP state too, and `__bpf_trace_run` skips the nested run rather than recurse,
    /// counting it in the program's `recursion_misses` (kernel/trace/bpf_trace.c; in fdinfo
    /// since 5.12, 0 where the kernel does not say). Rare on hardware; under software emulation
    /// the programs run slowly enough that it happens every few hundred connections.
    fn recursion_misses(&self) -> u64 {
        use std::os::fd::{AsFd as _, AsRawFd as _};
        PROGRAMS
            .iter()
            .chain([&RUNQ_PROGRAM, &RUNQ_EXIT_PROGRAM])
            .chain(RUNQ_RAW_PROGRAMS)
            .chain([&SCHED_SWITCH_OLD])
            .filter_map(|(name, ..)| self.ebpf.program(name)?.fd().ok())
            .map(|fd| {
                let info = std::fs::read_to_string(format!(
                    "/proc/self/fdinfo/{}",
                    fd.as_fd().as_raw_fd()
                ))
                .unwrap_or_default();
                fdinfo_field(&info, "recursion_misses").unwrap_or(0)
            })
            .sum()
    }
}

/// The value of `key:` in a `/proc/<pid>/fdinfo/<fd>` text (`key:\tvalue` lines).
fn fdinfo_field(info: &str, key: &str) -> Option<u64> {
    info.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
}

/// The map key the programs use for `cgroup` → `addr:port`.
pub fn pair_key(cgroup: u64, addr: std::net::IpAddr, port: u16) -> PairKey {
    let mut key = PairKey {
        cgroup,
        port,
        ..PairKey::default()
    };
    match addr {
        std::net::IpAddr::V4(a) => {
            key.family = 2;
            key.addr[..4].copy_from_slice(&a.octets());
        }
        std::net::IpAddr::V6(a) => {
            key.family = 10;
            key.addr = a.octets();
        }
    }
    key
}

/// The remote address of a pair key.
pub fn pair_addr(key: &PairKey) -> std::net::IpAddr {
    if key.family == 10 {
        std::net::IpAddr::from(key.addr)
    } else {
        std::net::IpAddr::from([key.addr[0], key.addr[1], key.addr[2], key.addr[3]])
    }
}

/// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; newer ones use the memory cgroup.
/// Raising the limit is best effort: where it is locked (as on our CI hosts) the load still
/// works on a 5.11+ kernel, and on an older one the load error says so.
fn raise_memlock() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: a valid rlimit struct; failure is tolerated.
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_programs_fdinfo() {
        // As Linux 6.1 prints it for a raw tracepoint program.
        let info = "pos:\t0\nflags:\t02000002\nprog_type:\t17\nprog_id:\t20\nrun_cnt:\t0\n\
                    recursion_misses:\t20\nverified_insns:\t6200\n";
        assert_eq!(fdinfo_field(info, "recursion_misses"), Some(20));
        assert_eq!(fdinfo_field(info, "prog_id"), Some(20));
        // Kernels before 5.12 have no such line.
        assert_eq!(
            fdinfo_field("pos:\t0\nprog_id:\t3\n", "recursion_misses"),
            None
        );
    }
}
