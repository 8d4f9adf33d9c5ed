//! Which file each of a container's numbers comes from, decided once from the directories it
//! may be in, and one reading of them all.

use std::path::{Path, PathBuf};

use super::{
    CgroupFiles, CgroupfsError, MemoryCounters, MemorySource, ThrottleCounters, ThrottleSource,
    UsageSource,
    files::{Fail, Reader},
};
use crate::cgroup::CgroupLayout;

/// The directories that may hold one container's cgroup files.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CgroupDirs {
    /// The cgroup v2 directory (absolute). It names the container in every error.
    pub unified: PathBuf,
    /// The v1 cpu directory, on hybrid hosts.
    pub cpu_v1: Option<PathBuf>,
    /// The v1 cpuacct directory, on hybrid hosts (CPU usage when v2 lacks it).
    pub cpuacct_v1: Option<PathBuf>,
    /// The v1 memory directory, on hybrid hosts.
    pub memory_v1: Option<PathBuf>,
    /// True for the root cgroup (the `host` pseudo-container).
    pub root: bool,
}

fn under(root: &Path, rel: &Path) -> PathBuf {
    if rel.as_os_str().is_empty() {
        root.to_owned()
    } else {
        root.join(rel)
    }
}

impl CgroupDirs {
    /// The directories of `cgroup`, given relative to the unified root (leading `/` allowed)
    /// or absolute under it. On hybrid hosts the v1 directories have the same relative path
    /// in their hierarchies: systemd and Docker's cgroupfs driver create a container's
    /// directory under the same name in every hierarchy. Whether they exist is decided by
    /// [`CgroupSources::resolve`].
    pub fn of(layout: &CgroupLayout, cgroup: &Path) -> Self {
        let rel = cgroup.strip_prefix(&layout.unified).unwrap_or(cgroup);
        let rel = rel.strip_prefix("/").unwrap_or(rel);
        // systemd's hybrid layout mounts v2 at <root>/unified beside the v1 hierarchies; a
        // pure v2 host has no v1 hierarchy to look in.
        let v1_root = layout
            .unified
            .file_name()
            .filter(|n| *n == "unified")
            .and_then(|_| layout.unified.parent());
        Self {
            unified: under(&layout.unified, rel),
            cpu_v1: layout.cpu_v1.as_deref().map(|r| under(r, rel)),
            cpuacct_v1: v1_root.map(|r| under(&r.join("cpuacct"), rel)),
            memory_v1: v1_root.map(|r| under(&r.join("memory"), rel)),
            root: rel.as_os_str().is_empty(),
        }
    }
}

/// Every file one container's numbers come from, resolved once when sampling starts.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CgroupSources {
    /// The container's cgroup v2 directory.
    pub cgroup: PathBuf,
    /// CPU usage.
    pub usage: UsageSource,
    /// Quota and throttling.
    pub throttle: ThrottleSource,
    /// Memory current and peak.
    pub memory: MemorySource,
}

impl CgroupSources {
    /// Decides, once, which file each number comes from by trying them: v2 `cpu.stat` for
    /// usage (v1 cpuacct if it lacks `usage_usec`), the v1 cpu directory for throttling when
    /// the host is hybrid and it exists (else v2 `cpu.max`), v2 memory files when the memory
    /// controller is enabled there (else the v1 memory directory). A missing throttling or
    /// memory source is not an error: it is recorded with its reason.
    pub fn resolve(files: &impl CgroupFiles, dirs: &CgroupDirs) -> Result<Self, CgroupfsError> {
        let cgroup = dirs.unified.clone();
        let r = Reader {
            files,
            cgroup: &cgroup,
        };
        // Every v2 cgroup, the root included, has cgroup.controllers: its absence means "no
        // such cgroup", not "no such counter".
        let controllers = cgroup.join("cgroup.controllers");
        if r.maybe(&controllers)?.is_none() {
            return Err(CgroupfsError::NoCgroup {
                cgroup,
                file: controllers,
            });
        }

        let usage = UsageSource::resolve(&r, dirs)?;
        let throttle = ThrottleSource::resolve(&r, dirs)?;
        let memory = MemorySource::resolve(&r, dirs)?;

        Ok(Self {
            cgroup,
            usage,
            throttle,
            memory,
        })
    }

    /// Reads every counter once. A cgroup removed since [`Self::resolve`] gives
    /// [`Reading::Ended`], not an error.
    pub fn read(&self, files: &impl CgroupFiles) -> Result<Reading, CgroupfsError> {
        match self.try_read(files) {
            Ok(r) => Ok(Reading::Live(r)),
            Err(Fail::Gone(file)) => Ok(Reading::Ended { file }),
            Err(Fail::Error(e)) => Err(e),
        }
    }

    fn try_read<F: CgroupFiles + ?Sized>(&self, files: &F) -> Result<CgroupReading, Fail> {
        let r = Reader {
            files,
            cgroup: &self.cgroup,
        };
        // On pure v2 hosts usage and throttling come from the same cpu.stat: read it once so
        // both are one snapshot.
        let ((usage_ns, user_ns, system_ns), v2_stat) = self.usage.read(&r)?;
        let throttle = self.throttle.read(&r, v2_stat.as_ref())?;
        let memory = self.memory.read(&r)?;

        Ok(CgroupReading {
            usage_ns,
            user_ns,
            system_ns,
            throttle,
            memory,
        })
    }
}

/// One reading of a container's cumulative counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CgroupReading {
    /// CPU time used, in ns.
    pub usage_ns: u64,
    /// Of which in user mode.
    pub user_ns: u64,
    /// Of which in kernel mode.
    pub system_ns: u64,
    /// `None` when [`CgroupSources::throttle`] is unavailable.
    pub throttle: Option<ThrottleCounters>,
    /// `None` when [`CgroupSources::memory`] is unavailable.
    pub memory: Option<MemoryCounters>,
}

/// The result of reading a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reading {
    /// The counters.
    Live(CgroupReading),
    /// The cgroup was removed: this file no longer exists.
    Ended {
        /// The missing file.
        file: PathBuf,
    },
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use herd_model::{Memory, Throttling};

    use crate::cgroupfs::{CpuSampler, Polled, fake::*};

    #[test]
    fn dirs_follow_the_same_relative_path_in_every_hierarchy() {
        let d = CgroupDirs::of(&hybrid_layout(), Path::new("/system.slice/gw.service"));
        assert_eq!(d.unified, Path::new("/cg/unified/system.slice/gw.service"));
        assert_eq!(
            d.cpu_v1.as_deref(),
            Some(Path::new("/cg/cpu/system.slice/gw.service"))
        );
        assert_eq!(
            d.cpuacct_v1.as_deref(),
            Some(Path::new("/cg/cpuacct/system.slice/gw.service"))
        );
        assert_eq!(
            d.memory_v1.as_deref(),
            Some(Path::new("/cg/memory/system.slice/gw.service"))
        );
        // Absolute under the unified root, and the root itself, without a trailing slash.
        let abs = CgroupDirs::of(&hybrid_layout(), Path::new("/cg/unified/a"));
        assert_eq!(abs.cpu_v1.as_deref(), Some(Path::new("/cg/cpu/a")));
        let root = CgroupDirs::of(&hybrid_layout(), Path::new("/"));
        assert_eq!(root.unified, Path::new("/cg/unified"));
        assert_eq!(root.memory_v1.as_deref(), Some(Path::new("/cg/memory")));
        // A pure v2 host has no v1 hierarchy to look in.
        let pure = CgroupDirs::of(&pure_layout(), Path::new("a/b"));
        assert_eq!(pure.unified, Path::new("/cg/a/b"));
        assert_eq!(
            (pure.cpu_v1, pure.cpuacct_v1, pure.memory_v1),
            (None, None, None)
        );
    }

    #[test]
    fn hybrid_host_reads_usage_from_v2_and_throttling_and_memory_from_v1() {
        let fs = FakeFiles::default();
        write_hybrid(&fs, "c", State::default());
        let dirs = CgroupDirs::of(&hybrid_layout(), Path::new("c"));
        let s = CgroupSources::resolve(&fs, &dirs).unwrap();
        assert_eq!(
            s.usage,
            UsageSource::V2 {
                cpu_stat: "/cg/unified/c/cpu.stat".into()
            }
        );
        assert_eq!(
            s.throttle,
            ThrottleSource::V1 {
                cpu_stat: "/cg/cpu/c/cpu.stat".into(),
                quota: "/cg/cpu/c/cpu.cfs_quota_us".into(),
                period: "/cg/cpu/c/cpu.cfs_period_us".into(),
            }
        );
        assert_eq!(
            s.memory,
            MemorySource::V1 {
                current: "/cg/memory/c/memory.usage_in_bytes".into(),
                peak: "/cg/memory/c/memory.max_usage_in_bytes".into(),
            }
        );
    }

    #[test]
    fn pure_v2_host_reads_everything_from_the_v2_directory() {
        let fs = FakeFiles::default();
        fs.set("/cg/c/cgroup.controllers", "cpu memory\n");
        fs.set(
            "/cg/c/cpu.stat",
            "usage_usec 5000\nuser_usec 3000\nsystem_usec 2000\nnice_usec 0\n\
             nr_periods 7\nnr_throttled 3\nthrottled_usec 250\nnr_bursts 0\nburst_usec 0\n",
        );
        fs.set("/cg/c/cpu.max", "max 100000\n");
        fs.set("/cg/c/memory.current", "4096\n");
        fs.set("/cg/c/memory.peak", "8192\n");
        let dirs = CgroupDirs::of(&pure_layout(), Path::new("/c"));
        let s = CgroupSources::resolve(&fs, &dirs).unwrap();
        let Reading::Live(r) = s.read(&fs).unwrap() else {
            panic!("the cgroup exists");
        };
        assert_eq!(
            r,
            CgroupReading {
                usage_ns: 5_000_000,
                user_ns: 3_000_000,
                system_ns: 2_000_000,
                throttle: Some(ThrottleCounters {
                    nr_periods: 7,
                    nr_throttled: 3,
                    throttled_ns: 250_000,
                    quota_us: None,
                    period_us: 100_000,
                }),
                memory: Some(MemoryCounters {
                    current_bytes: 4096,
                    peak_bytes: Some(8192),
                    working_set_bytes: None,
                }),
            }
        );
        // One read of cpu.stat serves usage and throttling: cpu.stat, cpu.max,
        // memory.current, memory.peak, and memory.stat for the working set (absent here).
        let before = fs.reads.get();
        s.read(&fs).unwrap();
        assert_eq!(fs.reads.get() - before, 5);

        // Before 5.19 there is no memory.peak: the peak is None, never 0.
        fs.files.borrow_mut().remove(Path::new("/cg/c/memory.peak"));
        let s = CgroupSources::resolve(&fs, &dirs).unwrap();
        let Reading::Live(r) = s.read(&fs).unwrap() else {
            panic!("the cgroup exists");
        };
        assert_eq!(r.memory.unwrap().peak_bytes, None);
        assert_eq!(
            s.memory,
            MemorySource::V2 {
                current: "/cg/c/memory.current".into(),
                peak: None
            }
        );
    }

    #[test]
    fn missing_controllers_are_reported_with_a_reason_never_as_zero() {
        let fs = FakeFiles::default();
        write_hybrid(&fs, "c", State::default());
        fs.remove_dir("/cg/cpu/c");
        fs.remove_dir("/cg/memory/c");
        let dirs = CgroupDirs::of(&hybrid_layout(), Path::new("c"));
        let s = CgroupSources::resolve(&fs, &dirs).unwrap();
        let mut sampler = CpuSampler::start(&fs, s, 0).unwrap();
        assert_eq!(sampler.poll(100 * MS).unwrap(), Polled::Sampled);
        let i = sampler.close_interval().unwrap();
        let Throttling::Unavailable { reason } = &i.throttle else {
            panic!("{:?}", i.throttle);
        };
        assert!(
            reason.contains("/cg/cpu/c/cpu.cfs_quota_us")
                && reason.contains("/cg/unified/c/cpu.max"),
            "{reason}"
        );
        let Memory::Unavailable { reason } = &i.memory else {
            panic!("{:?}", i.memory);
        };
        assert!(
            reason.contains("/cg/unified/c/memory.current")
                && reason.contains("/cg/memory/c/memory.usage_in_bytes"),
            "{reason}"
        );
        let json = serde_json::to_value(&i).unwrap();
        assert_eq!(json["memory"]["state"], "unavailable");
        assert_eq!(json["throttle"]["state"], "unavailable");

        // Pure v2 without the controllers enabled: the reason names subtree_control.
        let fs = FakeFiles::default();
        fs.set("/cg/c/cgroup.controllers", "\n");
        fs.set(
            "/cg/c/cpu.stat",
            "usage_usec 1\nuser_usec 1\nsystem_usec 0\n",
        );
        let s =
            CgroupSources::resolve(&fs, &CgroupDirs::of(&pure_layout(), Path::new("c"))).unwrap();
        let (ThrottleSource::Unavailable { reason: t }, MemorySource::Unavailable { reason: m }) =
            (&s.throttle, &s.memory)
        else {
            panic!("{s:?}");
        };
        assert!(
            t.contains("/cg/c/cpu.max") && t.contains("subtree_control"),
            "{t}"
        );
        assert!(
            m.contains("/cg/c/memory.current") && m.contains("subtree_control"),
            "{m}"
        );
    }

    #[test]
    fn a_missing_cgroup_is_an_error_naming_it() {
        let fs = FakeFiles::default();
        let dirs = CgroupDirs::of(&hybrid_layout(), Path::new("/no/such"));
        let e = CgroupSources::resolve(&fs, &dirs).unwrap_err();
        assert!(matches!(e, CgroupfsError::NoCgroup { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("/cg/unified/no/such") && msg.contains("cgroup.controllers"),
            "{msg}"
        );
    }
}
