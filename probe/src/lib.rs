//! herd's kernel probe, user-space half.
//!
//! [`KernelProbe::load`] checks privileges, resolves the struct offsets the eBPF programs need
//! from the running kernel's BTF, loads and attaches the programs built from `probe-ebpf`, and
//! [`KernelProbe::snapshot`] reads their per-CPU maps into per-cgroup totals. Programs are
//! attached through file descriptors owned by this process and never pinned, so they detach
//! when the probe is dropped or the process dies, however it dies.
#![deny(missing_docs)]

pub mod btf;
pub mod caps;
pub mod cgroup;
pub mod clock;
pub mod containers;
mod error;
pub mod sample;

use std::collections::HashMap;

use aya::{
    Ebpf, EbpfLoader, VerifierLogLevel,
    maps::{MapData, PerCpuArray, PerCpuHashMap},
    programs::{ProgramError, RawTracePoint},
};
pub use error::ProbeError;
use probe_common::{CgroupCounters, Counter, Loss, N_COUNTERS, globals};

/// The eBPF object built by `build.rs` from the `probe-ebpf` crate.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/probe-ebpf"));

/// Each program, the raw tracepoint it attaches to, and what it needs from the kernel.
const PROGRAMS: &[(&str, &str, &str)] = &[(
    "inet_sock_set_state",
    "inet_sock_set_state",
    "raw tracepoints (4.17) and the inet_sock_set_state tracepoint (4.16)",
)];

/// Options for loading the probe.
#[derive(Clone, Debug, Default)]
pub struct ProbeOptions {
    /// Ask the verifier for its full log when a program is rejected (costly; for `--verbose`).
    pub verifier_log: bool,
}

/// Counter totals of one cgroup, summed over CPUs since the probe was loaded.
pub type Counts = [u64; N_COUNTERS];

/// One reading of every kernel counter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// When the maps were read, on the shared monotonic clock ([`clock::now_ns`]).
    pub at_ns: u64,
    /// Totals by cgroup v2 id.
    pub by_cgroup: HashMap<u64, Counts>,
    /// Events the programs could not record, by [`Loss`] index.
    pub losses: [u64; Loss::Count as usize],
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
}

/// The loaded and attached kernel programs. Dropping it detaches everything.
pub struct KernelProbe {
    ebpf: Ebpf,
}

impl KernelProbe {
    /// Checks privileges and kernel support, then loads and attaches every program.
    pub fn load(opts: &ProbeOptions) -> Result<Self, ProbeError> {
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
        ];
        raise_memlock();
        let mut loader = EbpfLoader::new();
        loader.verifier_log_level(if opts.verifier_log {
            VerifierLogLevel::VERBOSE | VerifierLogLevel::STATS
        } else {
            VerifierLogLevel::default()
        });
        for (name, value) in &offsets {
            loader.override_global(name, value, true);
        }
        let mut ebpf = loader.load(EBPF_OBJECT).map_err(ProbeError::Object)?;
        for (program, tracepoint, needs) in PROGRAMS {
            let prog: &mut RawTracePoint = ebpf
                .program_mut(program)
                .ok_or(ProbeError::MissingProgram(program))?
                .try_into()
                .map_err(|source| ProbeError::load(program, needs, source))?;
            prog.load()
                .map_err(|source| ProbeError::load(program, needs, source))?;
            prog.attach(tracepoint)
                .map_err(|source: ProgramError| ProbeError::Attach {
                    program,
                    tracepoint,
                    source,
                })?;
        }
        Ok(Self { ebpf })
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
        Ok(Snapshot {
            at_ns,
            by_cgroup,
            losses,
        })
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
