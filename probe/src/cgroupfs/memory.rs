//! Memory current and peak: the v2 or v1 memory cgroup, and for the root cgroup the host's
//! memory in use from `/proc/meminfo`.

use std::path::PathBuf;

use super::{
    CgroupDirs, CgroupFiles, CgroupfsError,
    files::{Fail, Reader},
};

/// Where the root cgroup's memory is read from (see [`MemorySource::Host`]).
pub const MEMINFO: &str = "/proc/meminfo";

/// Where memory is read from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum MemorySource {
    /// v2 memory controller.
    V2 {
        /// `<v2>/memory.current`.
        current: PathBuf,
        /// `<v2>/memory.peak` (kernel 5.19); `None` on older kernels.
        peak: Option<PathBuf>,
    },
    /// v1 memory controller.
    V1 {
        /// `<v1 memory>/memory.usage_in_bytes`.
        current: PathBuf,
        /// `<v1 memory>/memory.max_usage_in_bytes`.
        peak: PathBuf,
    },
    /// The root cgroup: the host's memory in use from `/proc/meminfo`, `MemTotal −
    /// MemAvailable` (what `free` calls used), because the root's own counters
    /// (`memory.usage_in_bytes` on v1; v2 has none) count every page of the page cache too
    /// and would show a busy host's RAM as all but full.
    Host {
        /// `/proc/meminfo`.
        meminfo: PathBuf,
    },
    /// The container has no memory cgroup of its own.
    Unavailable {
        /// Why, naming the paths tried.
        reason: String,
    },
}

/// Memory charged to the cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryCounters {
    /// Bytes charged now.
    pub current_bytes: u64,
    /// The kernel's high-water mark of `current_bytes`; `None` only on v2 kernels before 5.19
    /// (no `memory.peak`).
    pub peak_bytes: Option<u64>,
    /// The working set as `docker stats` and cAdvisor show it: `current_bytes` minus the
    /// inactive file pages of `memory.stat` (page cache the kernel reclaims first); `None`
    /// without a `memory.stat` (the root cgroup: the host's memory is already cache-free).
    pub working_set_bytes: Option<u64>,
}

impl MemorySource {
    /// `/proc/meminfo` for the root cgroup, v2 memory files when the controller is enabled
    /// there, else the v1 memory directory; none is recorded with its reason.
    pub(super) fn resolve<F: CgroupFiles + ?Sized>(
        r: &Reader<'_, F>,
        dirs: &CgroupDirs,
    ) -> Result<Self, CgroupfsError> {
        let cgroup = r.cgroup;
        let current = cgroup.join("memory.current");
        let meminfo = PathBuf::from(MEMINFO);
        let v1_usage = dirs
            .memory_v1
            .as_ref()
            .map(|d| d.join("memory.usage_in_bytes"));
        Ok(if dirs.root && r.maybe(&meminfo)?.is_some() {
            MemorySource::Host { meminfo }
        } else if r.maybe(&current)?.is_some() {
            let peak = cgroup.join("memory.peak");
            MemorySource::V2 {
                peak: r.maybe(&peak)?.map(|_| peak),
                current,
            }
        } else {
            match &v1_usage {
                Some(usage) if r.maybe(usage)?.is_some() => MemorySource::V1 {
                    peak: usage.with_file_name("memory.max_usage_in_bytes"),
                    current: usage.clone(),
                },
                Some(usage) => MemorySource::Unavailable {
                    reason: format!(
                        "no {} (the v2 memory controller is not enabled for this cgroup) and \
                         no v1 memory cgroup ({} is missing)",
                        current.display(),
                        usage.display()
                    ),
                },
                None => MemorySource::Unavailable {
                    reason: format!(
                        "no {}: the memory controller is not enabled for this cgroup (its \
                         parent's cgroup.subtree_control lacks `memory`) or it is the root \
                         cgroup",
                        current.display()
                    ),
                },
            }
        })
    }

    /// Bytes charged now, and the high-water mark where the kernel keeps one.
    pub(super) fn read<F: CgroupFiles + ?Sized>(
        &self,
        r: &Reader<'_, F>,
    ) -> Result<Option<MemoryCounters>, Fail> {
        // Current before peak: the watermark never decreases (page_counter_charge raises it),
        // so every reading has peak >= current.
        Ok(match self {
            MemorySource::V2 { current, peak } => {
                let current_bytes = r.number(current)?;
                Some(MemoryCounters {
                    current_bytes,
                    peak_bytes: peak.as_deref().map(|p| r.number(p)).transpose()?,
                    // v2 `inactive_file` is this cgroup's and its children's.
                    working_set_bytes: working_set(r, current, current_bytes, "inactive_file")?,
                })
            }
            MemorySource::V1 { current, peak } => {
                let current_bytes = r.number(current)?;
                Some(MemoryCounters {
                    current_bytes,
                    peak_bytes: Some(r.number(peak)?),
                    // v1 `inactive_file` is the cgroup's own pages; `total_` includes its
                    // children's, as `memory.usage_in_bytes` does.
                    working_set_bytes: working_set(
                        r,
                        current,
                        current_bytes,
                        "total_inactive_file",
                    )?,
                })
            }
            MemorySource::Host { meminfo } => {
                let text = r.text(meminfo)?;
                // `MemTotal:       24592880 kB`
                let kib = |key: &str| {
                    let line = text
                        .lines()
                        .find_map(|l| l.strip_prefix(key))
                        .ok_or_else(|| r.format(meminfo, format!("no `{key}` line")))?;
                    line.trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .map(|v| v.saturating_mul(1024))
                        .map_err(|e| r.format(meminfo, format!("`{key}` is {line:?}: {e}")))
                };
                Some(MemoryCounters {
                    current_bytes: kib("MemTotal:")?.saturating_sub(kib("MemAvailable:")?),
                    peak_bytes: None,
                    working_set_bytes: None,
                })
            }
            MemorySource::Unavailable { .. } => None,
        })
    }
}

/// `current_bytes` minus `key` of the `memory.stat` beside `current`; `None` when there is
/// no `memory.stat` (a file herd does not need to report usage).
fn working_set<F: CgroupFiles + ?Sized>(
    r: &Reader<'_, F>,
    current: &std::path::Path,
    current_bytes: u64,
    key: &str,
) -> Result<Option<u64>, Fail> {
    let stat = current.with_file_name("memory.stat");
    let Some(text) = r.maybe(&stat)? else {
        return Ok(None);
    };
    let inactive = r.key(&stat, &text, key)?;
    Ok(Some(current_bytes.saturating_sub(inactive)))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::cgroupfs::{CgroupSources, Reading, fake::*};

    #[test]
    fn the_working_set_is_usage_minus_inactive_file_as_docker_stats_shows_it() {
        let fs = FakeFiles::default();
        let r = Reader {
            files: &fs,
            cgroup: Path::new("/cg/c"),
        };
        let v2 = MemorySource::V2 {
            current: "/cg/c/memory.current".into(),
            peak: None,
        };
        fs.set("/cg/c/memory.current", "61865984\n");
        let Ok(Some(m)) = v2.read(&r) else { panic!() };
        assert_eq!(
            m.working_set_bytes, None,
            "no memory.stat: no working set, never 0"
        );
        fs.set(
            "/cg/c/memory.stat",
            "anon 40000000\nfile 21000000\nactive_file 4000000\ninactive_file 17825792\n",
        );
        let Ok(Some(m)) = v2.read(&r) else { panic!() };
        assert_eq!(m.working_set_bytes, Some(61_865_984 - 17_825_792));
        let v1 = MemorySource::V1 {
            current: "/cg/m/memory.usage_in_bytes".into(),
            peak: "/cg/m/memory.max_usage_in_bytes".into(),
        };
        fs.set("/cg/m/memory.usage_in_bytes", "1000\n");
        fs.set("/cg/m/memory.max_usage_in_bytes", "2000\n");
        // v1: the hierarchical total, not the cgroup's own inactive_file.
        fs.set(
            "/cg/m/memory.stat",
            "inactive_file 100\ntotal_inactive_file 300\n",
        );
        let Ok(Some(m)) = v1.read(&r) else { panic!() };
        assert_eq!(m.working_set_bytes, Some(700));
        // More inactive file than usage (counters read at different instants): 0, not a wrap.
        fs.set("/cg/m/memory.stat", "total_inactive_file 5000\n");
        let Ok(Some(m)) = v1.read(&r) else { panic!() };
        assert_eq!(m.working_set_bytes, Some(0));
    }

    #[test]
    fn the_root_cgroup_reads_host_memory_from_meminfo_not_its_page_cache_counters() {
        let fs = FakeFiles::default();
        fs.set("/cg/unified/cgroup.controllers", "cpu memory\n");
        fs.set(
            "/cg/unified/cpu.stat",
            "usage_usec 5000\nuser_usec 3000\nsystem_usec 2000\nnice_usec 0\n",
        );
        fs.set(
            "/cg/cpu/cpu.stat",
            "nr_periods 0\nnr_throttled 0\nthrottled_time 0\n",
        );
        fs.set("/cg/cpu/cpu.cfs_quota_us", "-1\n");
        fs.set("/cg/cpu/cpu.cfs_period_us", "100000\n");
        // The v1 root counts the page cache: 23 GiB on a host using 2.
        fs.set(
            "/cg/memory/memory.usage_in_bytes",
            format!("{}\n", 23u64 << 30),
        );
        fs.set(
            "/cg/memory/memory.max_usage_in_bytes",
            format!("{}\n", 24u64 << 30),
        );
        let dirs = CgroupDirs::of(&hybrid_layout(), Path::new("/"));
        assert!(dirs.root);
        // Without /proc/meminfo (never on Linux) the root falls back to its own counters.
        let s = CgroupSources::resolve(&fs, &dirs).unwrap();
        assert!(
            matches!(s.memory, MemorySource::V1 { .. }),
            "{:?}",
            s.memory
        );
        fs.set(
            MEMINFO,
            "MemTotal:       24592880 kB\nMemFree:          300000 kB\n\
             MemAvailable:   22495728 kB\nBuffers:           1024 kB\n",
        );
        let s = CgroupSources::resolve(&fs, &dirs).unwrap();
        assert_eq!(
            s.memory,
            MemorySource::Host {
                meminfo: MEMINFO.into()
            }
        );
        let Reading::Live(r) = s.read(&fs).unwrap() else {
            panic!("the root exists");
        };
        assert_eq!(
            r.memory,
            Some(MemoryCounters {
                current_bytes: (24_592_880 - 22_495_728) * 1024,
                peak_bytes: None,
                working_set_bytes: None,
            })
        );
        // A container is never read from meminfo.
        assert!(!CgroupDirs::of(&hybrid_layout(), Path::new("c")).root);
        // A meminfo without MemAvailable is a format error naming the file.
        fs.set(MEMINFO, "MemTotal:       24592880 kB\n");
        let e = s.read(&fs).unwrap_err().to_string();
        assert!(
            e.contains("/proc/meminfo") && e.contains("MemAvailable"),
            "{e}"
        );
    }
}
