//! Types that cross the kernel/user boundary of herd's probe.
//!
//! Every type here is `#[repr(C)]`, `Copy`, made of fixed-width integers with no implicit
//! padding, and defined once: the eBPF programs in `probe-ebpf` write them into maps and the
//! user-space loader in `probe` reads them back. The `user` feature adds `aya::Pod`.
#![no_std]
#![deny(missing_docs)]

/// One per-cgroup TCP counter. The discriminant is the index into [`CgroupCounters::v`].
///
/// Adding a counter: add a variant before `Count`, bump nothing else; the map value grows
/// with it and user space reads it by name through [`Counter::ALL`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// TCP active opens: a socket entered SYN_SENT (the kernel's `TcpActiveOpens`).
    Connects = 0,
    /// TCP passive opens completed: a child socket went SYN_RECV → ESTABLISHED.
    Accepts = 1,
    /// Number of counters; not a counter.
    Count = 2,
}

impl Counter {
    /// Every real counter, in index order.
    pub const ALL: [Counter; Counter::Count as usize] = [Counter::Connects, Counter::Accepts];

    /// The stable, snake_case name used in JSON output and metric names.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::Connects => "connects",
            Counter::Accepts => "accepts",
            Counter::Count => "count",
        }
    }
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
    /// Number of drop reasons; not a reason.
    Count = 2,
}

impl Loss {
    /// Every drop reason, in index order.
    pub const ALL: [Loss; Loss::Count as usize] = [Loss::CgroupMapFull, Loss::CgroupUnreadable];

    /// The stable, snake_case name used in output.
    pub const fn name(self) -> &'static str {
        match self {
            Loss::CgroupMapFull => "cgroup_map_full",
            Loss::CgroupUnreadable => "cgroup_unreadable",
            Loss::Count => "count",
        }
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

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), only u64 fields, no padding; every bit pattern is a valid value.
    unsafe impl aya::Pod for super::CgroupCounters {}
}
