//! Where cgroups live on this host and how their ids map to paths.
//!
//! A cgroup id, as the kernel hands it to BPF (`kn->id`), is the inode number of the cgroup's
//! directory in its hierarchy (kernfs, kernel ≥ 5.5), so `stat()` maps ids to paths.
//! Hosts come in two layouts: pure cgroup v2 (`/sys/fs/cgroup` is cgroup2, CPU quotas in
//! `cpu.max`) and hybrid (v2 at `/sys/fs/cgroup/unified` for socket ownership, the cpu
//! controller on v1 at `/sys/fs/cgroup/cpu`).

use std::{
    collections::HashMap,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

/// `CGROUP2_SUPER_MAGIC` from `include/uapi/linux/magic.h`.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// The host's cgroup layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupLayout {
    /// Root of the unified (v2) hierarchy: sockets are owned by cgroups of this tree.
    pub unified: PathBuf,
    /// Root of the v1 cpu hierarchy on hybrid hosts; `None` on pure v2 hosts.
    pub cpu_v1: Option<PathBuf>,
}

/// Why the cgroup layout or a cgroup could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No cgroup2 mount was found.
    #[error(
        "no cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified; herd attributes \
         sockets to cgroup v2 directories (mount one with `mount -t cgroup2 none /sys/fs/cgroup/unified`)"
    )]
    NoUnified,
    /// A cgroup path could not be read.
    #[error("cgroup {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn fs_type(path: &Path) -> Option<i64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid NUL-terminated path, st a valid out-pointer.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    (rc == 0).then_some(st.f_type as i64)
}

impl CgroupLayout {
    /// Detects the layout of this host.
    pub fn detect() -> Result<Self, CgroupError> {
        let root = Path::new("/sys/fs/cgroup");
        if fs_type(root) == Some(CGROUP2_SUPER_MAGIC) {
            return Ok(Self {
                unified: root.to_owned(),
                cpu_v1: None,
            });
        }
        let unified = root.join("unified");
        if fs_type(&unified) != Some(CGROUP2_SUPER_MAGIC) {
            return Err(CgroupError::NoUnified);
        }
        let cpu_v1 = ["cpu", "cpu,cpuacct"]
            .iter()
            .map(|d| root.join(d))
            .find(|p| p.join("cpu.cfs_quota_us").exists());
        Ok(Self { unified, cpu_v1 })
    }

    /// Absolute path of a cgroup given relative to the unified root (leading `/` allowed).
    pub fn unified_path(&self, rel: &Path) -> PathBuf {
        self.unified.join(rel.strip_prefix("/").unwrap_or(rel))
    }
}

/// The cgroup id of a cgroup v2 directory: its inode number.
pub fn cgroup_id(dir: &Path) -> Result<u64, CgroupError> {
    std::fs::metadata(dir)
        .map(|m| m.ino())
        .map_err(|source| CgroupError::Io {
            path: dir.to_owned(),
            source,
        })
}

/// Every cgroup under `root` (inclusive), by id, with its path relative to `root` (`/` for the
/// root itself). Cgroups that vanish during the walk are skipped.
pub fn walk(root: &Path) -> HashMap<u64, PathBuf> {
    let mut out = HashMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&dir) else {
            continue;
        };
        let rel = Path::new("/").join(dir.strip_prefix(root).unwrap_or(Path::new("")));
        out.insert(meta.ino(), rel);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_this_hosts_layout_and_maps_the_root() {
        let layout = CgroupLayout::detect().expect("herd's hosts mount cgroup v2");
        let id = cgroup_id(&layout.unified).unwrap();
        let all = walk(&layout.unified);
        assert_eq!(all.get(&id).map(PathBuf::as_path), Some(Path::new("/")));
        assert_eq!(
            layout.unified_path(Path::new("/a/b")),
            layout.unified.join("a/b")
        );
    }
}
