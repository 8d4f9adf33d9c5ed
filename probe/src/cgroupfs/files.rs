//! Reading cgroup files: the [`CgroupFiles`] seam tests put a fake behind, the host's files,
//! and the reader that tells a removed cgroup from a real error and names the cgroup and file
//! in every error.

use std::{
    io,
    path::{Path, PathBuf},
};

use super::CgroupfsError;

/// Reads cgroup files. The real implementation is [`HostFiles`]; tests put a fake in front.
pub trait CgroupFiles {
    /// Reads the whole of one file. A missing file is `io::ErrorKind::NotFound`.
    fn read(&self, path: &Path) -> io::Result<String>;
}

impl<T: CgroupFiles + ?Sized> CgroupFiles for &T {
    fn read(&self, path: &Path) -> io::Result<String> {
        (**self).read(path)
    }
}

/// The host's cgroupfs.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostFiles;

impl CgroupFiles for HostFiles {
    fn read(&self, path: &Path) -> io::Result<String> {
        // kernfs renders a cgroup file into its seq_file buffer once per open (the first
        // read), so one open-and-read is one consistent snapshot of the file's lines.
        std::fs::read_to_string(path)
    }
}

/// True when a read failed because the file (and so, once resolved, the cgroup) is gone:
/// ENOENT by path, ENODEV through a descriptor opened before the `rmdir`
/// (`kernfs_fop_read_iter` on a deactivated node).
fn gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENODEV)
}

/// A failed read: the cgroup is gone, or a real error.
pub(super) enum Fail {
    Gone(PathBuf),
    Error(CgroupfsError),
}

impl From<CgroupfsError> for Fail {
    fn from(e: CgroupfsError) -> Self {
        Fail::Error(e)
    }
}

/// Reads and parses files of one cgroup, naming it in errors.
pub(super) struct Reader<'a, F: ?Sized> {
    pub(super) files: &'a F,
    pub(super) cgroup: &'a Path,
}

impl<F: CgroupFiles + ?Sized> Reader<'_, F> {
    /// The file's text, `Ok(None)` when it does not exist.
    pub(super) fn maybe(&self, file: &Path) -> Result<Option<String>, CgroupfsError> {
        match self.files.read(file) {
            Ok(s) => Ok(Some(s)),
            Err(e) if gone(&e) => Ok(None),
            Err(error) => Err(self.read_error(file, error)),
        }
    }

    pub(super) fn text(&self, file: &Path) -> Result<String, Fail> {
        match self.files.read(file) {
            Ok(s) => Ok(s),
            Err(e) if gone(&e) => Err(Fail::Gone(file.to_owned())),
            Err(error) => Err(Fail::Error(self.read_error(file, error))),
        }
    }

    fn read_error(&self, file: &Path, error: io::Error) -> CgroupfsError {
        CgroupfsError::Read {
            cgroup: self.cgroup.to_owned(),
            file: file.to_owned(),
            error,
        }
    }

    pub(super) fn format(&self, file: &Path, problem: String) -> CgroupfsError {
        CgroupfsError::Format {
            cgroup: self.cgroup.to_owned(),
            file: file.to_owned(),
            problem,
        }
    }

    /// The value of `key` in a flat-keyed file (`key value` lines: `cpu.stat`,
    /// `cpuacct.stat`).
    pub(super) fn key(&self, file: &Path, text: &str, key: &str) -> Result<u64, CgroupfsError> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .ok_or_else(|| self.format(file, format!("no `{key}` line in {text:?}")))?;
        line.trim()
            .parse()
            .map_err(|e| self.format(file, format!("`{key}` is {line:?}: {e}")))
    }

    /// A file holding one unsigned number (`memory.current`, `cpuacct.usage`, ...).
    pub(super) fn number(&self, file: &Path) -> Result<u64, Fail> {
        let text = self.text(file)?;
        text.trim().parse().map_err(|e| {
            Fail::Error(self.format(file, format!("expected a number, found {text:?}: {e}")))
        })
    }
}

#[cfg(test)]
mod tests {
    use herd_model::Throttling;

    use crate::cgroupfs::{CgroupfsError, Polled, fake::*};

    #[test]
    fn unreadable_and_malformed_files_are_errors_naming_cgroup_and_file() {
        let fs = FakeFiles::default();
        write_hybrid(&fs, "c", State::default());
        let mut sampler = hybrid_sampler(&fs, "c");

        fs.denied.borrow_mut().insert("/cg/cpu/c/cpu.stat".into());
        let e = sampler.poll(100 * MS).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, CgroupfsError::Read { .. }), "{e:?}");
        assert!(
            msg.contains("cgroup /cg/unified/c") && msg.contains("/cg/cpu/c/cpu.stat"),
            "{msg}"
        );
        fs.denied.borrow_mut().clear();

        fs.set("/cg/cpu/c/cpu.stat", "nr_periods 1\nnr_throttled x\n");
        let msg = sampler.poll(100 * MS).unwrap_err().to_string();
        assert!(
            msg.contains("/cg/cpu/c/cpu.stat") && msg.contains("`nr_throttled`"),
            "{msg}"
        );
        fs.set(
            "/cg/cpu/c/cpu.stat",
            "nr_periods 1\nnr_throttled 1\nthrottled_time 5\n",
        );
        fs.set("/cg/cpu/c/cpu.cfs_quota_us", "-7\n");
        let msg = sampler.poll(100 * MS).unwrap_err().to_string();
        assert!(
            msg.contains("cpu.cfs_quota_us") && msg.contains("-7"),
            "{msg}"
        );

        // Errors left the sampler untouched: the next good poll is its first window.
        fs.set("/cg/cpu/c/cpu.cfs_quota_us", "-1\n");
        assert_eq!(sampler.poll(100 * MS).unwrap(), Polled::Sampled);
        let i = sampler.close_interval().unwrap();
        assert_eq!(i.polls, 1);
        let Throttling::Measured {
            quota_cores,
            quota_us,
            nr_throttled,
            ..
        } = i.throttle
        else {
            panic!("{:?}", i.throttle);
        };
        assert_eq!((quota_cores, quota_us, nr_throttled), (None, None, 1));
    }
}
