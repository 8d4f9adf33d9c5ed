//! A container's CPU, CFS throttling and memory, read from cgroupfs: the kernel's own exact
//! counters, no eBPF.
//!
//! Where each number lives depends on the host (the full table, with caveats, is in
//! `docs/probes.md`):
//!
//! | number | pure v2 | hybrid (v2 at `unified/`, controllers on v1) |
//! |---|---|---|
//! | CPU usage, user, system | `<v2>/cpu.stat` `usage_usec`, `user_usec`, `system_usec` | the same file; v1 `cpuacct.usage` + `cpuacct.stat` only if it lacks them |
//! | periods, throttles, throttled time | `<v2>/cpu.stat` `nr_periods`, `nr_throttled`, `throttled_usec` | `<v1 cpu>/cpu.stat` `nr_periods`, `nr_throttled`, `throttled_time` (ns) |
//! | quota, period | `<v2>/cpu.max` | `<v1 cpu>/cpu.cfs_quota_us`, `cpu.cfs_period_us` |
//! | memory current, peak | `<v2>/memory.current`, `memory.peak` | `<v1 memory>/memory.usage_in_bytes`, `memory.max_usage_in_bytes` |
//!
//! [`CpuSampler`] is polled every 100 ms ([`POLL_NS`]) by its caller, which owns the clock: each
//! poll closes one window, and [`CpuSampler::close_interval`] turns the polls since the last
//! close into one [`CpuInterval`] — average cores, the busiest window (burst), the trailing 30 s
//! average (sustained), throttling deltas, quota and memory. Every read goes through
//! [`CgroupFiles`], so the arithmetic is unit-tested against a deterministic fake; the real
//! files are tested privileged, against the kernel's own `cpu.stat`, in
//! `integration-test/tests/cpu_throttle.rs`.
//!
//! One file per concern: `files.rs` reads (the [`CgroupFiles`] seam and the reader that names
//! the cgroup and file in every error), `sources.rs` decides once which file each number comes
//! from and reads them all, `usage.rs`, `throttle.rs` and `memory.rs` hold each number's v1 and
//! v2 files, `window.rs` the burst and sustained arithmetic, `sampler.rs` the 100 ms sampler.

mod error;
mod files;
mod memory;
mod pressure;
mod sampler;
mod sources;
mod throttle;
mod usage;
mod window;

#[cfg(test)]
mod fake;

pub use error::CgroupfsError;
pub use files::{CgroupFiles, HostFiles};
pub use memory::{MEMINFO, MemoryCounters, MemorySource};
pub use pressure::{
    OomSource, PSI_RESOURCES, PressureTotals, WaitReading, WaitSources, parse_pressure,
};
pub use sampler::{CpuSampler, MIN_WINDOW_NS, Polled};
pub use sources::{CgroupDirs, CgroupReading, CgroupSources, Reading};
pub use throttle::{ThrottleCounters, ThrottleSource};
pub use usage::UsageSource;
pub use window::{UsagePoint, Window, busier, cores, prune, share, trailing};

/// The poll period the sampler is designed for: each poll closes one burst window, so the
/// burst is "the busiest 100 ms" only when the caller polls every 100 ms.
pub const POLL_NS: u64 = 100_000_000;

/// The span of the sustained (trailing) average.
pub const SUSTAINED_NS: u64 = 30_000_000_000;
