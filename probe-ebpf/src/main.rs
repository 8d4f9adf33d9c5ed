//! herd's kernel programs.
//!
//! Only program types that load on locked-down hosts are used here (see
//! `docs/build.md`): raw tracepoints need neither kprobes nor tracefs, and every struct offset
//! they dereference is resolved from the running kernel's BTF by the loader and handed in as a
//! read-only global, so nothing of the build machine's kernel is baked into this object.
#![no_std]
#![no_main]

use aya_ebpf::{
    helpers::bpf_probe_read_kernel,
    macros::{map, raw_tracepoint},
    maps::{PerCpuArray, PerCpuHashMap},
    programs::RawTracePointContext,
};
use probe_common::{CgroupCounters, Counter, Loss, MAX_CGROUPS, tcp_state};

/// Per-cgroup TCP counters, keyed by cgroup v2 id. Per-CPU so increments need no atomics
/// (`fetch_add` does not exist on the BPF target); user space sums the CPUs.
#[map]
static CGROUP_COUNTERS: PerCpuHashMap<u64, CgroupCounters> =
    PerCpuHashMap::with_max_entries(MAX_CGROUPS, 0);

/// Events that could not be recorded, indexed by [`Loss`]. Never silent: user space reports them.
#[map]
static LOSSES: PerCpuArray<u64> = PerCpuArray::with_max_entries(Loss::Count as u32, 0);

// Struct-member offsets from the running kernel's BTF (see `probe_common::globals`). Zero means
// "not resolved": the loader refuses to attach in that case, so zero never reaches a read.
#[unsafe(no_mangle)]
static SOCK_CGROUP_OFF: u64 = 0;
#[unsafe(no_mangle)]
static CGROUP_KN_OFF: u64 = 0;
#[unsafe(no_mangle)]
static KERNFS_NODE_ID_OFF: u64 = 0;

#[inline(always)]
fn global(v: &'static u64) -> u64 {
    // read_volatile keeps the compiler from folding the zero initialiser into the code; the
    // loader rewrites .rodata before the verifier sees it.
    unsafe { core::ptr::read_volatile(v) }
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
    unsafe {
        let cgrp: *const u8 =
            bpf_probe_read_kernel(sk.add(global(&SOCK_CGROUP_OFF) as usize) as *const *const u8)
                .ok()?;
        if cgrp.is_null() {
            return None;
        }
        let kn: *const u8 =
            bpf_probe_read_kernel(cgrp.add(global(&CGROUP_KN_OFF) as usize) as *const *const u8)
                .ok()?;
        if kn.is_null() {
            return None;
        }
        bpf_probe_read_kernel(kn.add(global(&KERNFS_NODE_ID_OFF) as usize) as *const u64).ok()
    }
}

#[inline(always)]
fn count(cgroup: u64, counter: Counter) {
    if let Some(c) = CGROUP_COUNTERS.get_ptr_mut(cgroup) {
        unsafe { (*c).v[counter as usize] += 1 };
        return;
    }
    let mut fresh = CgroupCounters::default();
    fresh.v[counter as usize] = 1;
    // BPF_NOEXIST: another CPU may have inserted the key meanwhile; then add to ours.
    if CGROUP_COUNTERS.insert(cgroup, fresh, 1).is_err() {
        match CGROUP_COUNTERS.get_ptr_mut(cgroup) {
            Some(c) => unsafe { (*c).v[counter as usize] += 1 },
            None => lose(Loss::CgroupMapFull),
        }
    }
}

/// `trace_inet_sock_set_state(const struct sock *sk, int oldstate, int newstate)`, fired from
/// `inet_sk_state_store`/`inet_sk_set_state` for every TCP state change (kernel ≥ 4.16).
#[raw_tracepoint(tracepoint = "inet_sock_set_state")]
pub fn inet_sock_set_state(ctx: RawTracePointContext) -> i32 {
    let sk: *const u8 = ctx.arg(0);
    let old: i32 = ctx.arg::<u64>(1) as i32;
    let new: i32 = ctx.arg::<u64>(2) as i32;
    let counter = match (old, new) {
        // tcp_v4_connect/tcp_v6_connect: CLOSE → SYN_SENT, the kernel's TcpActiveOpens.
        (tcp_state::CLOSE, tcp_state::SYN_SENT) => Counter::Connects,
        // tcp_rcv_state_process on the child socket: the handshake completed.
        (tcp_state::SYN_RECV, tcp_state::ESTABLISHED) => Counter::Accepts,
        _ => return 0,
    };
    match sock_cgroup_id(sk) {
        Some(cgroup) => count(cgroup, counter),
        None => lose(Loss::CgroupUnreadable),
    }
    0
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
