//! The default run-queue measurement: a walk of every thread of the host, once per poll, by
//! the `runq_tasks` task iterator (`iter/task`, 5.8), which writes each thread's scheduler
//! counters (`sched_info.run_delay` and `pcount`: `/proc/PID/schedstat`'s fields 2 and 3).
//! A thread's growth since the previous walk is added to its cgroup's row (or herd's own).
//! Nothing runs on a context switch, so the cost is a walk per poll, whatever the switch
//! rate; the price is that the waits are counted and summed, not timed one by one (no
//! per-wait histogram: `--runq-waits` attaches the switch program for that).
//!
//! Exact against schedstat, also for threads that come and go between walks: a thread born
//! since the first walk that no walk saw counts from its birth, and one that ends hands its final counters
//! to the walk through `runq_exit` (`tp_btf/sched_process_free`, once per thread, a grace
//! period after it was reaped) and the `RUNQ_EXITS` ring buffer, drained at the start of
//! each walk; what the walks last saw of a thread is kept [`GONE_KEEP_NS`] after it leaves
//! the iteration, for that record. Where the kernel refuses that program, a thread that
//! ends takes what it waited since the previous walk with it (at most one poll's worth).

use std::{
    collections::HashMap,
    io::Read as _,
    os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd},
};

use aya::maps::{MapData, RingBuf};
use probe_common::{OWN_TGID_KEY, RunqStats, TaskWait};

/// `BPF_LINK_CREATE` (`include/uapi/linux/bpf.h`).
const BPF_LINK_CREATE: libc::c_long = 28;
/// `BPF_ITER_CREATE`.
const BPF_ITER_CREATE: libc::c_long = 33;
/// `BPF_TRACE_ITER` (`enum bpf_attach_type`).
const BPF_TRACE_ITER: u32 = 28;

/// One `bpf(2)` call with `attr` (zero-padded: the kernel refuses non-zero bytes it does not
/// know); the new file descriptor.
fn bpf_fd(cmd: libc::c_long, attr: &[u32; 16]) -> std::io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid, fully initialised `union bpf_attr` prefix of its length.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.as_ptr(),
            std::mem::size_of_val(attr) as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor the kernel just handed us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The share of a CPU the walks between interval ends may take: a walk is due once the time
/// since the previous one is 1 / `WALK_BUDGET` times what that one cost. About 0.75 µs of CPU
/// per thread per walk on a 2-vCPU VM (the iteration itself, then 40 bytes per thread): every
/// 100 ms poll up to about 1 300 threads, every 0.5 s with 5 000. The walk at each interval's end is always taken.
pub const WALK_BUDGET: f64 = 0.01;

/// How long a thread is remembered after the last walk that listed it, for its final
/// counters (which come an RCU grace period after it was reaped: milliseconds, longer under
/// load).
pub const GONE_KEEP_NS: u64 = 5_000_000_000;

/// The CPU time this thread has used (user and system), ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer; CLOCK_THREAD_CPUTIME_ID always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What a thread looked like at the last walk that listed it.
#[derive(Clone, Copy)]
struct Seen {
    run_delay: u64,
    pcount: u64,
    /// When that walk started; a thread no walk listed since is kept [`GONE_KEEP_NS`] for
    /// its final record.
    walked_at: u64,
}

/// The walk's state: the iterator's link, every thread as last seen, and the totals per
/// cgroup since the first walk.
pub(crate) struct TaskWalk {
    link: OwnedFd,
    own_tgid: u32,
    /// Every thread as last seen, by thread id and start time (a thread id is reused once
    /// its thread has been reaped, maybe before that thread's final record is read).
    seen: HashMap<(u32, u64), Seen>,
    /// Monotonic time the previous walk started, `None` before the first.
    walked_at: Option<u64>,
    /// Monotonic time the first walk started: a thread born since counts from its birth.
    first_at: Option<u64>,
    /// CPU time the previous walk took, ns.
    cost_ns: u64,
    totals: HashMap<u64, RunqStats>,
    buf: Vec<u8>,
    /// The exiting threads' last counters (`RUNQ_EXITS`), where `runq_exit` is attached.
    exits: Option<RingBuf<MapData>>,
}

impl TaskWalk {
    /// Links the loaded `runq_tasks` program (its fd) as a task iterator and takes the first
    /// walk (the baseline: what threads waited before the probe does not count); `exits` is
    /// `runq_exit`'s ring buffer where that program is attached.
    pub(crate) fn new(
        prog: std::os::fd::BorrowedFd<'_>,
        own_tgid: u32,
        exits: Option<RingBuf<MapData>>,
    ) -> std::io::Result<Self> {
        // `link_create`: prog_fd, target_fd (0), attach_type, flags (0), iter_info (none).
        let mut attr = [0u32; 16];
        attr[0] = prog.as_raw_fd() as u32;
        attr[2] = BPF_TRACE_ITER;
        let link = bpf_fd(BPF_LINK_CREATE, &attr)?;
        let mut w = TaskWalk {
            link,
            own_tgid,
            seen: HashMap::new(),
            walked_at: None,
            first_at: None,
            cost_ns: 0,
            totals: HashMap::new(),
            buf: Vec::with_capacity(64 << 10),
            exits,
        };
        w.walk()?;
        Ok(w)
    }

    /// Whether a walk at `now` keeps the walks within [`WALK_BUDGET`] of a CPU.
    pub(crate) fn due(&self, now: u64) -> bool {
        let wait = (self.cost_ns as f64 / WALK_BUDGET) as u64;
        self.walked_at
            .is_none_or(|at| now >= at.saturating_add(wait))
    }

    /// Adds what `t` waited since it was `seen` to its cgroup's totals (or herd's own); all
    /// of it when it was never seen and was born since the first walk at `first_at` (a
    /// thread that lived and ended between two walks). A thread older than the first walk
    /// that no walk saw is only a baseline: what it waited before the probe does not count.
    fn add(
        totals: &mut HashMap<u64, RunqStats>,
        own_tgid: u32,
        first_at: Option<u64>,
        seen: Option<Seen>,
        t: &TaskWait,
    ) {
        let base = match seen {
            Some(s) => (s.run_delay, s.pcount),
            None if first_at.is_some_and(|at| t.start_time > at) => (0, 0),
            None => return,
        };
        let key = if own_tgid != 0 && t.tgid == own_tgid {
            OWN_TGID_KEY
        } else {
            t.cgroup
        };
        let d_ns = t.run_delay.saturating_sub(base.0);
        let d_n = t.pcount.saturating_sub(base.1);
        if d_ns > 0 || d_n > 0 {
            let e = totals.entry(key).or_default();
            e.total_ns += d_ns;
            e.count += d_n;
        }
    }

    /// Walks every thread once and returns the totals per cgroup v2 id (and
    /// [`OWN_TGID_KEY`]) since the first walk.
    pub(crate) fn walk(&mut self) -> std::io::Result<&HashMap<u64, RunqStats>> {
        let now = crate::clock::now_ns();
        let cpu0 = thread_cpu_ns();
        let size = std::mem::size_of::<TaskWait>();
        // The threads that ended since the previous walk first: their final counters against
        // what the walks last saw of them. Drained before the iteration, so that a thread in
        // the ring is no longer in it.
        if let Some(exits) = &mut self.exits {
            while let Some(item) = exits.next() {
                if item.len() < size {
                    continue;
                }
                // SAFETY: as below; the program outputs whole records.
                let t: TaskWait = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
                drop(item);
                let seen = self.seen.remove(&(t.tid, t.start_time));
                Self::add(&mut self.totals, self.own_tgid, self.first_at, seen, &t);
            }
        }
        let mut attr = [0u32; 16];
        attr[0] = self.link.as_fd().as_raw_fd() as u32;
        let iter = bpf_fd(BPF_ITER_CREATE, &attr)?;
        let mut file = std::fs::File::from(iter);
        self.buf.clear();
        file.read_to_end(&mut self.buf)?;
        for chunk in self.buf.chunks_exact(size) {
            // SAFETY: `TaskWait` is `repr(C)` plain data, every bit pattern valid; the
            // program writes whole records.
            let t: TaskWait = unsafe { std::ptr::read_unaligned(chunk.as_ptr().cast()) };
            let now_seen = Seen {
                run_delay: t.run_delay,
                pcount: t.pcount,
                walked_at: now,
            };
            let before = self.seen.insert((t.tid, t.start_time), now_seen);
            Self::add(&mut self.totals, self.own_tgid, self.first_at, before, &t);
        }
        // A thread this walk did not list has ended: its final record comes with a later
        // drain (if runq_exit is attached), to be taken against what it was last seen as.
        let keep_ns = if self.exits.is_some() {
            GONE_KEEP_NS
        } else {
            0
        };
        self.seen
            .retain(|_, s| s.walked_at == now || now.saturating_sub(s.walked_at) < keep_ns);
        self.walked_at = Some(now);
        self.first_at.get_or_insert(now);
        self.cost_ns = thread_cpu_ns().saturating_sub(cpu0);
        Ok(&self.totals)
    }
}
