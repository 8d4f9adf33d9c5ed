//! CPU usage, user and system: v2's core `cpu.stat`, which every v2 cgroup has, or v1
//! cpuacct on kernels before 4.15.

use std::path::PathBuf;

use super::{
    CgroupDirs, CgroupFiles, CgroupfsError,
    files::{Fail, Reader},
};

/// Where CPU usage is read from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum UsageSource {
    /// The core `cpu.stat` of the v2 directory (`usage_usec`, `user_usec`, `system_usec`).
    /// Every v2 cgroup has it, with or without the cpu controller ("This file exists whether
    /// the controller is enabled or not", Documentation/admin-guide/cgroup-v2.rst; kernel
    /// 4.15, `cgroup_base_stat_cputime_show`); verified on 6.18 where v2 has no cpu controller.
    V2 {
        /// `<v2>/cpu.stat`.
        cpu_stat: PathBuf,
    },
    /// v1 cpuacct: `cpuacct.usage` (ns) and `cpuacct.stat` (`user`/`system` in USER_HZ ticks).
    V1 {
        /// `<cpuacct>/cpuacct.usage`.
        usage: PathBuf,
        /// `<cpuacct>/cpuacct.stat`.
        stat: PathBuf,
        /// Ticks per second of `cpuacct.stat` (`sysconf(_SC_CLK_TCK)`).
        user_hz: u64,
    },
}

/// CPU time used, of which in user and in kernel mode (ns).
type CpuTimes = (u64, u64, u64);

/// v2 `cpu.stat` as one read found it: its path and text.
pub(super) type CpuStat = (PathBuf, String);

impl UsageSource {
    /// v2 `cpu.stat` when it counts `usage_usec`, else v1 cpuacct; neither is an error that
    /// names every file tried.
    pub(super) fn resolve<F: CgroupFiles + ?Sized>(
        r: &Reader<'_, F>,
        dirs: &CgroupDirs,
    ) -> Result<Self, CgroupfsError> {
        let cgroup = r.cgroup;
        let v2_stat = cgroup.join("cpu.stat");
        let mut tried = vec![v2_stat.display().to_string()];
        Ok(match r.maybe(&v2_stat)? {
            Some(text) if text.lines().any(|l| l.starts_with("usage_usec ")) => {
                UsageSource::V2 { cpu_stat: v2_stat }
            }
            _ => {
                let acct = dirs
                    .cpuacct_v1
                    .as_ref()
                    .map(|d| (d.join("cpuacct.usage"), d.join("cpuacct.stat")));
                match acct {
                    Some((usage, stat)) if r.maybe(&usage)?.is_some() => UsageSource::V1 {
                        usage,
                        stat,
                        user_hz: user_hz(),
                    },
                    other => {
                        tried.extend(other.map(|(u, _)| u.display().to_string()));
                        return Err(CgroupfsError::NoUsage {
                            cgroup: cgroup.to_owned(),
                            tried: tried.join(", "),
                        });
                    }
                }
            }
        })
    }

    /// CPU time used, of which in user and in kernel mode (ns); with v2 `cpu.stat`'s path and
    /// text when they came from it, so throttling can be read from the same snapshot.
    pub(super) fn read<F: CgroupFiles + ?Sized>(
        &self,
        r: &Reader<'_, F>,
    ) -> Result<(CpuTimes, Option<CpuStat>), Fail> {
        let mut v2_stat: Option<CpuStat> = None;
        let usage = match self {
            UsageSource::V2 { cpu_stat } => {
                let text = r.text(cpu_stat)?;
                let us = |k| r.key(cpu_stat, &text, k).map(|v| v.saturating_mul(1_000));
                let out = (us("usage_usec")?, us("user_usec")?, us("system_usec")?);
                v2_stat = Some((cpu_stat.clone(), text));
                out
            }
            UsageSource::V1 {
                usage,
                stat,
                user_hz,
            } => {
                let total = r.number(usage)?;
                let text = r.text(stat)?;
                let ticks = |k| {
                    r.key(stat, &text, k)
                        .map(|t| (u128::from(t) * 1_000_000_000 / u128::from(*user_hz)) as u64)
                };
                (total, ticks("user")?, ticks("system")?)
            }
        };
        Ok((usage, v2_stat))
    }
}

/// Ticks per second of `cpuacct.stat` and `/proc/<pid>/stat`.
fn user_hz() -> u64 {
    // SAFETY: sysconf has no memory preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    // USER_HZ is 100 on every architecture herd builds for; sysconf can only fail on a
    // broken libc.
    u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::cgroupfs::{CgroupSources, Reading, fake::*};

    #[test]
    fn cpuacct_is_the_fallback_when_v2_has_no_usage() {
        let fs = FakeFiles::default();
        write_hybrid(&fs, "c", State::default());
        // A kernel before 4.15: the v2 directory has no core cpu.stat.
        fs.files
            .borrow_mut()
            .remove(Path::new("/cg/unified/c/cpu.stat"));
        fs.set("/cg/cpuacct/c/cpuacct.usage", "123456789\n");
        fs.set("/cg/cpuacct/c/cpuacct.stat", "user 9\nsystem 3\n");
        let dirs = CgroupDirs::of(&hybrid_layout(), Path::new("c"));
        let s = CgroupSources::resolve(&fs, &dirs).unwrap();
        let UsageSource::V1 { user_hz, .. } = s.usage else {
            panic!("expected cpuacct, got {:?}", s.usage);
        };
        let Reading::Live(r) = s.read(&fs).unwrap() else {
            panic!("the cgroup exists");
        };
        assert_eq!(r.usage_ns, 123_456_789);
        assert_eq!(r.user_ns, 9 * 1_000_000_000 / user_hz);
        assert_eq!(r.system_ns, 3 * 1_000_000_000 / user_hz);

        // Neither source: an error naming the cgroup and what was tried.
        fs.remove_dir("/cg/cpuacct/c");
        let e = CgroupSources::resolve(&fs, &dirs).unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, CgroupfsError::NoUsage { .. })
                && msg.contains("/cg/unified/c:")
                && msg.contains("/cg/unified/c/cpu.stat")
                && msg.contains("/cg/cpuacct/c/cpuacct.usage"),
            "{msg}"
        );
    }
}
