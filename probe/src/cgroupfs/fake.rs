//! A cgroupfs in memory and the containers the tests write into it.

use std::{
    cell::{Cell, RefCell},
    collections::{HashMap, HashSet},
    io,
    path::{Path, PathBuf},
};

use super::{CgroupDirs, CgroupFiles, CgroupSources, CpuSampler};
use crate::cgroup::CgroupLayout;

/// Cgroup files in memory: what a test writes is what the sampler reads.
#[derive(Debug, Default)]
pub(super) struct FakeFiles {
    pub(super) files: RefCell<HashMap<PathBuf, String>>,
    pub(super) denied: RefCell<HashSet<PathBuf>>,
    pub(super) reads: Cell<u64>,
}

impl FakeFiles {
    pub(super) fn set(&self, path: impl AsRef<Path>, text: impl Into<String>) {
        self.files
            .borrow_mut()
            .insert(path.as_ref().to_owned(), text.into());
    }

    /// `rmdir` of a cgroup: every file under `dir` disappears.
    pub(super) fn remove_dir(&self, dir: &str) {
        self.files.borrow_mut().retain(|p, _| !p.starts_with(dir));
    }
}

impl CgroupFiles for FakeFiles {
    fn read(&self, path: &Path) -> io::Result<String> {
        self.reads.set(self.reads.get() + 1);
        if self.denied.borrow().contains(path) {
            return Err(io::Error::from(io::ErrorKind::PermissionDenied));
        }
        self.files
            .borrow()
            .get(path)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }
}

pub(super) const MS: u64 = 1_000_000;

pub(super) fn hybrid_layout() -> CgroupLayout {
    CgroupLayout {
        unified: "/cg/unified".into(),
        cpu_v1: Some("/cg/cpu".into()),
    }
}

pub(super) fn pure_layout() -> CgroupLayout {
    CgroupLayout {
        unified: "/cg".into(),
        cpu_v1: None,
    }
}

/// Cumulative state of one fake container.
#[derive(Clone, Copy, Default)]
pub(super) struct State {
    pub(super) usage_ms: u64,
    pub(super) periods: u64,
    pub(super) throttled: u64,
    pub(super) throttled_ms: u64,
    pub(super) memory: u64,
    pub(super) peak: u64,
}

/// Writes a hybrid host's files for container `name`: usage in the v2 core cpu.stat,
/// throttling in the v1 cpu directory, memory in the v1 memory directory. User time is
/// 3/4 of usage.
pub(super) fn write_hybrid(fs: &FakeFiles, name: &str, s: State) {
    let us = s.usage_ms * 1_000;
    fs.set(format!("/cg/unified/{name}/cgroup.controllers"), "\n");
    fs.set(
        format!("/cg/unified/{name}/cpu.stat"),
        format!(
            "usage_usec {us}\nuser_usec {}\nsystem_usec {}\nnice_usec 0\n",
            us / 4 * 3,
            us / 4
        ),
    );
    fs.set(
        format!("/cg/cpu/{name}/cpu.stat"),
        format!(
            "nr_periods {}\nnr_throttled {}\nthrottled_time {}\nnr_bursts 0\nburst_time 0\n",
            s.periods,
            s.throttled,
            s.throttled_ms * MS
        ),
    );
    fs.set(format!("/cg/cpu/{name}/cpu.cfs_quota_us"), "10000\n");
    fs.set(format!("/cg/cpu/{name}/cpu.cfs_period_us"), "100000\n");
    fs.set(
        format!("/cg/memory/{name}/memory.usage_in_bytes"),
        format!("{}\n", s.memory),
    );
    fs.set(
        format!("/cg/memory/{name}/memory.max_usage_in_bytes"),
        format!("{}\n", s.peak),
    );
}

pub(super) fn hybrid_sampler<'a>(fs: &'a FakeFiles, name: &str) -> CpuSampler<&'a FakeFiles> {
    let dirs = CgroupDirs::of(&hybrid_layout(), Path::new(name));
    let sources = CgroupSources::resolve(fs, &dirs).unwrap();
    CpuSampler::start(fs, sources, 0).unwrap()
}
