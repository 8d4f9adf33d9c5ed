//! The one error of cgroupfs sampling; every variant names the cgroup.

use std::{io, path::PathBuf};

/// Why a container's cgroup files could not be used.
#[derive(Debug, thiserror::Error)]
pub enum CgroupfsError {
    /// The cgroup does not exist when sampling starts.
    #[error(
        "cgroup {}: no such cgroup ({} is missing); check the path, or list cgroups with \
         `find {} -maxdepth 3 -type d`",
        .cgroup.display(), .file.display(), .cgroup.parent().unwrap_or(.cgroup).display()
    )]
    NoCgroup {
        /// The cgroup v2 directory.
        cgroup: PathBuf,
        /// The file whose absence showed it.
        file: PathBuf,
    },
    /// A file could not be read for a reason other than the cgroup being gone.
    #[error("cgroup {}: reading {}: {error}", .cgroup.display(), .file.display())]
    Read {
        /// The cgroup v2 directory.
        cgroup: PathBuf,
        /// The file.
        file: PathBuf,
        /// The error (not a `source`: its text is already in this message).
        error: io::Error,
    },
    /// A file's content is not what this kernel interface documents.
    #[error("cgroup {}: {}: {problem}", .cgroup.display(), .file.display())]
    Format {
        /// The cgroup v2 directory.
        cgroup: PathBuf,
        /// The file.
        file: PathBuf,
        /// What was wrong.
        problem: String,
    },
    /// No CPU usage counter exists for the cgroup.
    #[error(
        "cgroup {}: no CPU usage counter (tried {tried}); herd needs a kernel with cgroup v2 \
         cpu.stat (4.15+) or the v1 cpuacct controller",
        .cgroup.display()
    )]
    NoUsage {
        /// The cgroup v2 directory.
        cgroup: PathBuf,
        /// The files tried.
        tried: String,
    },
}
