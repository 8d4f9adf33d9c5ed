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

use std::{
    collections::VecDeque,
    io,
    path::{Path, PathBuf},
};

use crate::cgroup::CgroupLayout;

/// The poll period the sampler is designed for: each poll closes one burst window, so the
/// burst is "the busiest 100 ms" only when the caller polls every 100 ms.
pub const POLL_NS: u64 = 100_000_000;

/// The span of the sustained (trailing) average.
pub const SUSTAINED_NS: u64 = 30_000_000_000;

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

/// Where the root cgroup's memory is read from (see [`MemorySource::Host`]).
pub const MEMINFO: &str = "/proc/meminfo";

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

/// Where CFS bandwidth (quota and throttling) is read from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum ThrottleSource {
    /// v2 cpu controller: `cpu.stat` (`nr_periods`, `nr_throttled`, `throttled_usec`) and
    /// `cpu.max` (`$QUOTA $PERIOD`, `max` for none).
    V2 {
        /// `<v2>/cpu.stat`.
        cpu_stat: PathBuf,
        /// `<v2>/cpu.max`.
        cpu_max: PathBuf,
    },
    /// v1 cpu controller: `cpu.stat` (`throttled_time` in ns), `cpu.cfs_quota_us` (-1 for
    /// none) and `cpu.cfs_period_us`.
    V1 {
        /// `<v1 cpu>/cpu.stat`.
        cpu_stat: PathBuf,
        /// `<v1 cpu>/cpu.cfs_quota_us`.
        quota: PathBuf,
        /// `<v1 cpu>/cpu.cfs_period_us`.
        period: PathBuf,
    },
    /// The container has no cpu controller directory of its own.
    Unavailable {
        /// Why, naming the paths tried.
        reason: String,
    },
}

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

/// A failed read: the cgroup is gone, or a real error.
enum Fail {
    Gone(PathBuf),
    Error(CgroupfsError),
}

impl From<CgroupfsError> for Fail {
    fn from(e: CgroupfsError) -> Self {
        Fail::Error(e)
    }
}

/// Reads and parses files of one cgroup, naming it in errors.
struct Reader<'a, F: ?Sized> {
    files: &'a F,
    cgroup: &'a Path,
}

impl<F: CgroupFiles + ?Sized> Reader<'_, F> {
    /// The file's text, `Ok(None)` when it does not exist.
    fn maybe(&self, file: &Path) -> Result<Option<String>, CgroupfsError> {
        match self.files.read(file) {
            Ok(s) => Ok(Some(s)),
            Err(e) if gone(&e) => Ok(None),
            Err(error) => Err(self.read_error(file, error)),
        }
    }

    fn text(&self, file: &Path) -> Result<String, Fail> {
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

    fn format(&self, file: &Path, problem: String) -> CgroupfsError {
        CgroupfsError::Format {
            cgroup: self.cgroup.to_owned(),
            file: file.to_owned(),
            problem,
        }
    }

    /// The value of `key` in a flat-keyed file (`key value` lines: `cpu.stat`,
    /// `cpuacct.stat`).
    fn key(&self, file: &Path, text: &str, key: &str) -> Result<u64, CgroupfsError> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .ok_or_else(|| self.format(file, format!("no `{key}` line in {text:?}")))?;
        line.trim()
            .parse()
            .map_err(|e| self.format(file, format!("`{key}` is {line:?}: {e}")))
    }

    /// A file holding one unsigned number (`memory.current`, `cpuacct.usage`, ...).
    fn number(&self, file: &Path) -> Result<u64, Fail> {
        let text = self.text(file)?;
        text.trim().parse().map_err(|e| {
            Fail::Error(self.format(file, format!("expected a number, found {text:?}: {e}")))
        })
    }
}

/// `cpu.max`: `$QUOTA $PERIOD`, quota `max` for none (cgroup v2, `cpu_max_show`).
fn parse_cpu_max(text: &str) -> Option<(Option<u64>, u64)> {
    let mut it = text.split_whitespace();
    let quota = match it.next()? {
        "max" => None,
        q => Some(q.parse().ok()?),
    };
    let period = it.next()?.parse().ok()?;
    it.next().is_none().then_some((quota, period))
}

/// `cpu.cfs_quota_us`: microseconds, `-1` for none (cgroup v1, `cpu_cfs_quota_read_s64`).
fn parse_v1_quota(text: &str) -> Option<Option<u64>> {
    match text.trim().parse::<i64>().ok()? {
        -1 => Some(None),
        q => u64::try_from(q).ok().map(Some),
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

        let v2_stat = cgroup.join("cpu.stat");
        let mut tried = vec![v2_stat.display().to_string()];
        let usage = match r.maybe(&v2_stat)? {
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
                            cgroup,
                            tried: tried.join(", "),
                        });
                    }
                }
            }
        };

        let cpu_max = cgroup.join("cpu.max");
        let v1_quota = dirs.cpu_v1.as_ref().map(|d| d.join("cpu.cfs_quota_us"));
        let throttle = match &v1_quota {
            Some(quota) if r.maybe(quota)?.is_some() => {
                let dir = quota.parent().expect("joined above");
                ThrottleSource::V1 {
                    cpu_stat: dir.join("cpu.stat"),
                    period: dir.join("cpu.cfs_period_us"),
                    quota: quota.clone(),
                }
            }
            _ if r.maybe(&cpu_max)?.is_some() => ThrottleSource::V2 {
                cpu_stat: cgroup.join("cpu.stat"),
                cpu_max,
            },
            _ => ThrottleSource::Unavailable {
                reason: match &v1_quota {
                    Some(quota) => format!(
                        "no v1 cpu cgroup ({} is missing) and no {}: the container has no CFS \
                         quota of its own",
                        quota.display(),
                        cpu_max.display()
                    ),
                    None => format!(
                        "no {}: the cpu controller is not enabled for this cgroup (its \
                         parent's cgroup.subtree_control lacks `cpu`) or it is the root cgroup",
                        cpu_max.display()
                    ),
                },
            },
        };

        let current = cgroup.join("memory.current");
        let meminfo = PathBuf::from(MEMINFO);
        let v1_usage = dirs
            .memory_v1
            .as_ref()
            .map(|d| d.join("memory.usage_in_bytes"));
        let memory = if dirs.root && r.maybe(&meminfo)?.is_some() {
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
        };

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
        let mut v2_stat: Option<(PathBuf, String)> = None;
        let (usage_ns, user_ns, system_ns) = match &self.usage {
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

        let throttle = match &self.throttle {
            ThrottleSource::V2 { cpu_stat, cpu_max } => {
                let text = match v2_stat {
                    Some((ref path, ref text)) if path == cpu_stat => text.clone(),
                    _ => r.text(cpu_stat)?,
                };
                let max = r.text(cpu_max)?;
                let (quota_us, period_us) = parse_cpu_max(&max).ok_or_else(|| {
                    r.format(cpu_max, format!("expected `$QUOTA $PERIOD`, found {max:?}"))
                })?;
                Some(ThrottleCounters {
                    nr_periods: r.key(cpu_stat, &text, "nr_periods")?,
                    nr_throttled: r.key(cpu_stat, &text, "nr_throttled")?,
                    throttled_ns: r
                        .key(cpu_stat, &text, "throttled_usec")?
                        .saturating_mul(1_000),
                    quota_us,
                    period_us,
                })
            }
            ThrottleSource::V1 {
                cpu_stat,
                quota,
                period,
            } => {
                let text = r.text(cpu_stat)?;
                let q = r.text(quota)?;
                let quota_us = parse_v1_quota(&q).ok_or_else(|| {
                    r.format(quota, format!("expected microseconds or -1, found {q:?}"))
                })?;
                Some(ThrottleCounters {
                    nr_periods: r.key(cpu_stat, &text, "nr_periods")?,
                    nr_throttled: r.key(cpu_stat, &text, "nr_throttled")?,
                    throttled_ns: r.key(cpu_stat, &text, "throttled_time")?,
                    quota_us,
                    period_us: r.number(period)?,
                })
            }
            ThrottleSource::Unavailable { .. } => None,
        };

        // Current before peak: the watermark never decreases (page_counter_charge raises it),
        // so every reading has peak >= current.
        let memory = match &self.memory {
            MemorySource::V2 { current, peak } => Some(MemoryCounters {
                current_bytes: r.number(current)?,
                peak_bytes: peak.as_deref().map(|p| r.number(p)).transpose()?,
            }),
            MemorySource::V1 { current, peak } => Some(MemoryCounters {
                current_bytes: r.number(current)?,
                peak_bytes: Some(r.number(peak)?),
            }),
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
                })
            }
            MemorySource::Unavailable { .. } => None,
        };

        Ok(CgroupReading {
            usage_ns,
            user_ns,
            system_ns,
            throttle,
            memory,
        })
    }
}

/// Cumulative CFS bandwidth counters and the current quota.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ThrottleCounters {
    /// Enforcement periods that elapsed while the cgroup had runnable tasks.
    pub nr_periods: u64,
    /// Periods in which the cgroup was throttled.
    pub nr_throttled: u64,
    /// Total time its per-CPU run queues spent throttled, in ns (summed over CPUs).
    pub throttled_ns: u64,
    /// CPU time allowed per period, in µs; `None` when unlimited.
    pub quota_us: Option<u64>,
    /// The period, in µs.
    pub period_us: u64,
}

/// Memory charged to the cgroup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryCounters {
    /// Bytes charged now.
    pub current_bytes: u64,
    /// The kernel's high-water mark of `current_bytes`; `None` only on v2 kernels before 5.19
    /// (no `memory.peak`).
    pub peak_bytes: Option<u64>,
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

/// A point of the CPU usage timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsagePoint {
    /// When, on the caller's monotonic clock (ns).
    pub at_ns: u64,
    /// Cumulative CPU time used by then (ns).
    pub usage_ns: u64,
}

/// A stretch of time and the CPU time used in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Start (ns).
    pub start_ns: u64,
    /// End (ns), never before the start.
    pub end_ns: u64,
    /// CPU time used in between (ns).
    pub used_ns: u64,
}

impl Window {
    /// The window between two points. A counter that went backwards (the cgroup was removed
    /// and recreated under the same path) counts as 0, never as a huge delta.
    pub fn between(a: UsagePoint, b: UsagePoint) -> Self {
        Self {
            start_ns: a.at_ns,
            end_ns: b.at_ns.max(a.at_ns),
            used_ns: b.usage_ns.saturating_sub(a.usage_ns),
        }
    }

    /// Its length (ns).
    pub fn len_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }

    /// Average cores used over it.
    pub fn cores(&self) -> f64 {
        cores(self.used_ns, self.len_ns())
    }
}

/// Average cores: CPU time over wall time; 0 for an empty span.
pub fn cores(used_ns: u64, over_ns: u64) -> f64 {
    if over_ns == 0 {
        0.0
    } else {
        used_ns as f64 / over_ns as f64
    }
}

/// `part / whole`, 0 when `whole` is 0 (no period elapsed: nothing could be throttled).
pub fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// The busier of the busiest window so far and `next`, compared exactly (cross-multiplied in
/// integers, no float rounding); an empty window never wins, and on a tie the earlier stays.
pub fn busier(busiest: Option<Window>, next: Window) -> Option<Window> {
    if next.len_ns() == 0 {
        return busiest;
    }
    match busiest {
        Some(b)
            if u128::from(b.used_ns) * u128::from(next.len_ns())
                >= u128::from(next.used_ns) * u128::from(b.len_ns()) =>
        {
            Some(b)
        }
        _ => Some(next),
    }
}

/// Drops points older than `span_ns` before the newest, keeping at least one.
pub fn prune(history: &mut VecDeque<UsagePoint>, span_ns: u64) {
    let Some(newest) = history.back().copied() else {
        return;
    };
    while history.len() > 1
        && history
            .front()
            .is_some_and(|p| p.at_ns.saturating_add(span_ns) < newest.at_ns)
    {
        history.pop_front();
    }
}

/// The window from the oldest to the newest point of a pruned history: the trailing average
/// over at most [`prune`]'s span (shorter while the history is younger than that).
pub fn trailing(history: &VecDeque<UsagePoint>) -> Option<Window> {
    Some(Window::between(*history.front()?, *history.back()?))
}

/// Throttling over one interval.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Throttling {
    /// Read from the container's cpu controller.
    Measured {
        /// Enforcement periods that elapsed (while the cgroup had runnable tasks).
        nr_periods: u64,
        /// Periods in which the cgroup was throttled.
        nr_throttled: u64,
        /// Time its run queues spent throttled, summed over CPUs (can exceed the interval
        /// when several CPUs are throttled at once), in ns.
        throttled_ns: u64,
        /// `nr_throttled / nr_periods`; 0 when no period elapsed.
        throttled_share: f64,
        /// The quota in cores (quota / period) at the end of the interval; `None` when
        /// unlimited.
        quota_cores: Option<f64>,
        /// The quota, in µs per period; `None` when unlimited.
        quota_us: Option<u64>,
        /// The period, in µs.
        period_us: u64,
    },
    /// The container has no cpu controller directory of its own.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// Memory at the end of one interval.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Memory {
    /// Read from the container's memory cgroup.
    Measured {
        /// Bytes charged at the end of the interval.
        current_bytes: u64,
        /// The kernel's high-water mark since the cgroup was created (or last reset);
        /// `None` only on v2 kernels before 5.19.
        peak_bytes: Option<u64>,
    },
    /// The container has no memory cgroup of its own.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// CPU, throttling and memory of one container over one interval.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CpuInterval {
    /// End of the interval (the last poll), on the caller's monotonic clock (ns).
    pub at_ns: u64,
    /// Length of the interval (ns).
    pub interval_ns: u64,
    /// Polls (windows) in the interval.
    pub polls: u32,
    /// CPU time used in the interval (ns).
    pub usage_ns: u64,
    /// Average cores used.
    pub cpu_cores: f64,
    /// Average cores used in user mode.
    pub user_cores: f64,
    /// Average cores used in kernel mode.
    pub system_cores: f64,
    /// Cores used in the busiest window (poll to poll: 100 ms when polled every 100 ms).
    pub burst_cores: f64,
    /// Length of that window (ns).
    pub burst_window_ns: u64,
    /// End of that window (ns).
    pub burst_at_ns: u64,
    /// Average cores over the trailing [`SUSTAINED_NS`] (less while the sampler is younger).
    pub sustained_cores: f64,
    /// Length of the sustained window (ns).
    pub sustained_window_ns: u64,
    /// Throttling deltas and quota.
    pub throttle: Throttling,
    /// Memory at the end of the interval.
    pub memory: Memory,
}

/// The outcome of one poll.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Polled {
    /// The counters were read.
    Sampled,
    /// The cgroup is gone; later polls return this again without reading.
    Ended {
        /// The file whose absence showed it.
        file: PathBuf,
    },
}

#[derive(Clone, Debug)]
struct Stamped {
    at_ns: u64,
    reading: CgroupReading,
}

impl Stamped {
    fn point(&self) -> UsagePoint {
        UsagePoint {
            at_ns: self.at_ns,
            usage_ns: self.reading.usage_ns,
        }
    }
}

/// Samples one container's CPU, throttling and memory. The caller drives time: it calls
/// [`Self::poll`] every [`POLL_NS`] with its clock's reading and [`Self::close_interval`] at
/// each interval boundary, so every container of a run shares the same timeline.
#[derive(Debug)]
pub struct CpuSampler<F> {
    files: F,
    sources: CgroupSources,
    start: Stamped,
    last: Stamped,
    polls: u32,
    busiest: Option<Window>,
    history: VecDeque<UsagePoint>,
    ended: Option<PathBuf>,
}

impl CpuSampler<HostFiles> {
    /// Resolves the sources of `cgroup` (relative to the unified root, or absolute under it)
    /// on this host and takes the first reading at `at_ns`.
    pub fn open(layout: &CgroupLayout, cgroup: &Path, at_ns: u64) -> Result<Self, CgroupfsError> {
        let sources = CgroupSources::resolve(&HostFiles, &CgroupDirs::of(layout, cgroup))?;
        Self::start(HostFiles, sources, at_ns)
    }
}

impl<F: CgroupFiles> CpuSampler<F> {
    /// Takes the first reading at `at_ns`: the start of the first interval. A cgroup that is
    /// already gone is an error here (unlike in [`Self::poll`]).
    pub fn start(files: F, sources: CgroupSources, at_ns: u64) -> Result<Self, CgroupfsError> {
        let reading = match sources.read(&files)? {
            Reading::Live(r) => r,
            Reading::Ended { file } => {
                return Err(CgroupfsError::NoCgroup {
                    cgroup: sources.cgroup.clone(),
                    file,
                });
            }
        };
        let first = Stamped { at_ns, reading };
        Ok(Self {
            history: VecDeque::from([first.point()]),
            files,
            sources,
            start: first.clone(),
            last: first,
            polls: 0,
            busiest: None,
            ended: None,
        })
    }

    /// Reads the counters at `at_ns` (a time earlier than the previous poll's counts as equal
    /// to it). The window since the previous poll competes for the interval's burst. An error
    /// leaves the sampler as it was; the caller may poll again.
    pub fn poll(&mut self, at_ns: u64) -> Result<Polled, CgroupfsError> {
        if let Some(file) = &self.ended {
            return Ok(Polled::Ended { file: file.clone() });
        }
        let reading = match self.sources.read(&self.files)? {
            Reading::Live(r) => r,
            Reading::Ended { file } => {
                self.ended = Some(file.clone());
                return Ok(Polled::Ended { file });
            }
        };
        let now = Stamped {
            at_ns: at_ns.max(self.last.at_ns),
            reading,
        };
        self.busiest = busier(
            self.busiest,
            Window::between(self.last.point(), now.point()),
        );
        self.history.push_back(now.point());
        prune(&mut self.history, SUSTAINED_NS);
        self.last = now;
        self.polls += 1;
        Ok(Polled::Sampled)
    }

    /// Ends the interval at the last successful poll and returns it; `None` when there was no
    /// poll since the last close (nothing to report). After the cgroup ended, the first call
    /// returns the partial interval up to its last poll.
    pub fn close_interval(&mut self) -> Option<CpuInterval> {
        if self.polls == 0 {
            return None;
        }
        let (a, b) = (&self.start.reading, &self.last.reading);
        let interval_ns = self.last.at_ns - self.start.at_ns;
        let usage_ns = b.usage_ns.saturating_sub(a.usage_ns);
        let burst = self.busiest.unwrap_or(Window {
            start_ns: self.start.at_ns,
            end_ns: self.last.at_ns,
            used_ns: usage_ns,
        });
        let sustained = trailing(&self.history).unwrap_or(burst);
        let throttle = match (&self.sources.throttle, a.throttle, b.throttle) {
            (_, Some(a), Some(b)) => {
                let nr_periods = b.nr_periods.saturating_sub(a.nr_periods);
                let nr_throttled = b.nr_throttled.saturating_sub(a.nr_throttled);
                Throttling::Measured {
                    nr_periods,
                    nr_throttled,
                    throttled_ns: b.throttled_ns.saturating_sub(a.throttled_ns),
                    throttled_share: share(nr_throttled, nr_periods),
                    quota_cores: b.quota_us.map(|q| cores(q, b.period_us)),
                    quota_us: b.quota_us,
                    period_us: b.period_us,
                }
            }
            (ThrottleSource::Unavailable { reason }, _, _) => Throttling::Unavailable {
                reason: reason.clone(),
            },
            _ => unreachable!("a resolved throttle source always yields counters"),
        };
        let memory = match (&self.sources.memory, b.memory) {
            (_, Some(m)) => Memory::Measured {
                current_bytes: m.current_bytes,
                peak_bytes: m.peak_bytes,
            },
            (MemorySource::Unavailable { reason }, None) => Memory::Unavailable {
                reason: reason.clone(),
            },
            (_, None) => unreachable!("a resolved memory source always yields counters"),
        };
        let out = CpuInterval {
            at_ns: self.last.at_ns,
            interval_ns,
            polls: self.polls,
            usage_ns,
            cpu_cores: cores(usage_ns, interval_ns),
            user_cores: cores(b.user_ns.saturating_sub(a.user_ns), interval_ns),
            system_cores: cores(b.system_ns.saturating_sub(a.system_ns), interval_ns),
            burst_cores: burst.cores(),
            burst_window_ns: burst.len_ns(),
            burst_at_ns: burst.end_ns,
            sustained_cores: sustained.cores(),
            sustained_window_ns: sustained.len_ns(),
            throttle,
            memory,
        };
        self.start = self.last.clone();
        self.polls = 0;
        self.busiest = None;
        Some(out)
    }

    /// Where each number comes from.
    pub fn sources(&self) -> &CgroupSources {
        &self.sources
    }

    /// The last successful reading and its time (ns).
    pub fn last_reading(&self) -> (u64, &CgroupReading) {
        (self.last.at_ns, &self.last.reading)
    }

    /// True once a poll found the cgroup gone.
    pub fn ended(&self) -> bool {
        self.ended.is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::{
        cell::{Cell, RefCell},
        collections::{HashMap, HashSet},
    };

    use super::*;

    /// Cgroup files in memory: what a test writes is what the sampler reads.
    #[derive(Debug, Default)]
    struct FakeFiles {
        files: RefCell<HashMap<PathBuf, String>>,
        denied: RefCell<HashSet<PathBuf>>,
        reads: Cell<u64>,
    }

    impl FakeFiles {
        fn set(&self, path: impl AsRef<Path>, text: impl Into<String>) {
            self.files
                .borrow_mut()
                .insert(path.as_ref().to_owned(), text.into());
        }

        /// `rmdir` of a cgroup: every file under `dir` disappears.
        fn remove_dir(&self, dir: &str) {
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

    const MS: u64 = 1_000_000;

    fn hybrid_layout() -> CgroupLayout {
        CgroupLayout {
            unified: "/cg/unified".into(),
            cpu_v1: Some("/cg/cpu".into()),
        }
    }

    fn pure_layout() -> CgroupLayout {
        CgroupLayout {
            unified: "/cg".into(),
            cpu_v1: None,
        }
    }

    /// Cumulative state of one fake container.
    #[derive(Clone, Copy, Default)]
    struct State {
        usage_ms: u64,
        periods: u64,
        throttled: u64,
        throttled_ms: u64,
        memory: u64,
        peak: u64,
    }

    /// Writes a hybrid host's files for container `name`: usage in the v2 core cpu.stat,
    /// throttling in the v1 cpu directory, memory in the v1 memory directory. User time is
    /// 3/4 of usage.
    fn write_hybrid(fs: &FakeFiles, name: &str, s: State) {
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

    fn hybrid_sampler<'a>(fs: &'a FakeFiles, name: &str) -> CpuSampler<&'a FakeFiles> {
        let dirs = CgroupDirs::of(&hybrid_layout(), Path::new(name));
        let sources = CgroupSources::resolve(fs, &dirs).unwrap();
        CpuSampler::start(fs, sources, 0).unwrap()
    }

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
                }),
            }
        );
        // One read of cpu.stat serves usage and throttling: cpu.stat, cpu.max,
        // memory.current, memory.peak.
        let before = fs.reads.get();
        s.read(&fs).unwrap();
        assert_eq!(fs.reads.get() - before, 4);

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

    #[test]
    fn cpu_max_and_v1_quota_parse_every_documented_form() {
        assert_eq!(parse_cpu_max("max 100000\n"), Some((None, 100_000)));
        assert_eq!(
            parse_cpu_max("10000 100000\n"),
            Some((Some(10_000), 100_000))
        );
        assert_eq!(parse_cpu_max("10000\n"), None);
        assert_eq!(parse_cpu_max("10000 100000 7\n"), None);
        assert_eq!(parse_cpu_max("x 100000\n"), None);
        assert_eq!(parse_v1_quota("-1\n"), Some(None));
        assert_eq!(parse_v1_quota("250000\n"), Some(Some(250_000)));
        assert_eq!(parse_v1_quota("-2\n"), None);
        assert_eq!(parse_v1_quota(""), None);
    }

    /// One second under a 10 ms / 100 ms quota, polled every 100 ms: the numbers an interval
    /// must show, computed by hand.
    #[test]
    fn an_interval_has_average_burst_sustained_and_throttling_deltas() {
        let fs = FakeFiles::default();
        let mut s = State {
            usage_ms: 500,
            periods: 40,
            throttled: 30,
            throttled_ms: 2_000,
            memory: 1 << 20,
            peak: 3 << 20,
        };
        write_hybrid(&fs, "c", s);
        let mut sampler = hybrid_sampler(&fs, "c");
        // The fourth window is the burst: 32 ms in 100 ms.
        let used = [10, 10, 10, 32, 10, 10, 10, 10, 10, 8];
        for (k, ms) in used.iter().enumerate() {
            s.usage_ms += ms;
            s.periods += 1;
            if k % 5 != 0 {
                s.throttled += 1;
                s.throttled_ms += 90;
            }
            s.memory += 4096;
            write_hybrid(&fs, "c", s);
            assert_eq!(
                sampler.poll((k as u64 + 1) * 100 * MS).unwrap(),
                Polled::Sampled
            );
        }
        let i = sampler.close_interval().unwrap();
        assert_eq!(i.at_ns, 1_000 * MS);
        assert_eq!(i.interval_ns, 1_000 * MS);
        assert_eq!(i.polls, 10);
        assert_eq!(i.usage_ns, 120 * MS);
        assert_eq!(i.cpu_cores, 0.12);
        assert_eq!(i.user_cores, 0.09);
        assert_eq!(i.system_cores, 0.03);
        assert_eq!(i.burst_cores, 0.32);
        assert_eq!((i.burst_window_ns, i.burst_at_ns), (100 * MS, 400 * MS));
        // Younger than 30 s: the sustained window is the sampler's whole life.
        assert_eq!(
            (i.sustained_cores, i.sustained_window_ns),
            (0.12, 1_000 * MS)
        );
        assert_eq!(
            i.throttle,
            Throttling::Measured {
                nr_periods: 10,
                nr_throttled: 8,
                throttled_ns: 720 * MS,
                throttled_share: 0.8,
                quota_cores: Some(0.1),
                quota_us: Some(10_000),
                period_us: 100_000,
            }
        );
        assert_eq!(
            i.memory,
            Memory::Measured {
                current_bytes: (1 << 20) + 10 * 4096,
                peak_bytes: Some(3 << 20),
            }
        );
        // The output contract: these names are what JSON lines, the recorder and the
        // Prometheus endpoint use.
        assert_eq!(
            serde_json::to_string(&i).unwrap(),
            r#"{"at_ns":1000000000,"interval_ns":1000000000,"polls":10,"usage_ns":120000000,"cpu_cores":0.12,"user_cores":0.09,"system_cores":0.03,"burst_cores":0.32,"burst_window_ns":100000000,"burst_at_ns":400000000,"sustained_cores":0.12,"sustained_window_ns":1000000000,"throttle":{"state":"measured","nr_periods":10,"nr_throttled":8,"throttled_ns":720000000,"throttled_share":0.8,"quota_cores":0.1,"quota_us":10000,"period_us":100000},"memory":{"state":"measured","current_bytes":1089536,"peak_bytes":3145728}}"#
        );

        // The next interval starts where this one ended; nothing polled, nothing to report.
        assert_eq!(sampler.close_interval(), None);
        s.usage_ms += 5;
        write_hybrid(&fs, "c", s);
        sampler.poll(1_100 * MS).unwrap();
        let i = sampler.close_interval().unwrap();
        assert_eq!((i.usage_ns, i.interval_ns, i.polls), (5 * MS, 100 * MS, 1));
        assert_eq!(i.burst_cores, 0.05);
        assert_eq!(i.sustained_window_ns, 1_100 * MS);
    }

    #[test]
    fn sustained_is_the_trailing_30_seconds() {
        let fs = FakeFiles::default();
        let mut s = State::default();
        write_hybrid(&fs, "c", s);
        let mut sampler = hybrid_sampler(&fs, "c");
        let mut at = 0;
        let mut last = None;
        // 30 s at 0.2 cores, then 10 s at 1 core, closing an interval every second.
        for k in 1..=400u64 {
            at = k * 100 * MS;
            s.usage_ms += if k <= 300 { 20 } else { 100 };
            write_hybrid(&fs, "c", s);
            sampler.poll(at).unwrap();
            if k % 10 == 0 {
                last = sampler.close_interval();
                if k == 50 {
                    let i = last.as_ref().unwrap();
                    assert_eq!(i.sustained_window_ns, 5_000 * MS);
                    assert!((i.sustained_cores - 0.2).abs() < 1e-12, "{i:?}");
                }
            }
        }
        let i = last.unwrap();
        assert_eq!(i.at_ns, at);
        assert_eq!(i.sustained_window_ns, SUSTAINED_NS);
        // From 10 s to 40 s: 20 s at 0.2 + 10 s at 1.0, over 30 s.
        assert!(
            (i.sustained_cores - 14.0 / 30.0).abs() < 1e-12,
            "{}",
            i.sustained_cores
        );
        assert_eq!((i.cpu_cores, i.burst_cores), (1.0, 1.0));
        assert_eq!(
            sampler.history.len(),
            301,
            "30 s of 100 ms polls, both ends"
        );
    }

    #[test]
    fn a_cgroup_that_disappears_ends_without_stopping_the_others() {
        let fs = FakeFiles::default();
        let mut s = State::default();
        write_hybrid(&fs, "a", s);
        write_hybrid(&fs, "b", s);
        let mut a = hybrid_sampler(&fs, "a");
        let mut b = hybrid_sampler(&fs, "b");
        for k in 1..=3 {
            s.usage_ms += 10;
            write_hybrid(&fs, "a", s);
            write_hybrid(&fs, "b", s);
            assert_eq!(a.poll(k * 100 * MS).unwrap(), Polled::Sampled);
            assert_eq!(b.poll(k * 100 * MS).unwrap(), Polled::Sampled);
        }
        // `a` is removed (its v1 cpu directory first, as a runtime tears down).
        fs.remove_dir("/cg/cpu/a");
        fs.remove_dir("/cg/unified/a");
        fs.remove_dir("/cg/memory/a");
        let ended = a.poll(400 * MS).unwrap();
        let Polled::Ended { file } = &ended else {
            panic!("{ended:?}");
        };
        assert!(file.starts_with("/cg/unified/a") || file.starts_with("/cg/cpu/a"));
        assert!(a.ended());
        s.usage_ms += 10;
        write_hybrid(&fs, "b", s);
        assert_eq!(b.poll(400 * MS).unwrap(), Polled::Sampled);

        // Ended is sticky and costs no more reads.
        let reads = fs.reads.get();
        assert_eq!(a.poll(500 * MS).unwrap(), ended);
        assert_eq!(fs.reads.get(), reads);

        // The partial interval up to the last good poll, then nothing.
        let i = a.close_interval().unwrap();
        assert_eq!((i.at_ns, i.polls, i.usage_ns), (300 * MS, 3, 30 * MS));
        assert_eq!(a.close_interval(), None);
        let i = b.close_interval().unwrap();
        assert_eq!((i.at_ns, i.polls, i.usage_ns), (400 * MS, 4, 40 * MS));

        // A cgroup already gone when sampling starts is an error, not an ended sampler.
        let dirs = CgroupDirs::of(&hybrid_layout(), Path::new("b"));
        let sources = CgroupSources::resolve(&fs, &dirs).unwrap();
        fs.remove_dir("/cg/cpu/b");
        let e = CpuSampler::start(&fs, sources, 0).unwrap_err();
        assert!(
            matches!(&e, CgroupfsError::NoCgroup { file, .. } if file.starts_with("/cg/cpu/b")),
            "{e:?}"
        );
    }

    #[test]
    fn counters_that_go_backwards_count_as_zero() {
        let fs = FakeFiles::default();
        let mut s = State {
            usage_ms: 100,
            periods: 10,
            throttled: 5,
            throttled_ms: 50,
            ..State::default()
        };
        write_hybrid(&fs, "c", s);
        let mut sampler = hybrid_sampler(&fs, "c");
        // Removed and recreated under the same path between two polls.
        s = State {
            usage_ms: 3,
            periods: 1,
            ..State::default()
        };
        write_hybrid(&fs, "c", s);
        sampler.poll(100 * MS).unwrap();
        let i = sampler.close_interval().unwrap();
        assert_eq!((i.usage_ns, i.cpu_cores, i.burst_cores), (0, 0.0, 0.0));
        let Throttling::Measured {
            nr_periods,
            nr_throttled,
            throttled_ns,
            ..
        } = i.throttle
        else {
            panic!()
        };
        assert_eq!((nr_periods, nr_throttled, throttled_ns), (0, 0, 0));
    }

    #[test]
    fn a_clock_that_goes_backwards_makes_an_empty_window() {
        let fs = FakeFiles::default();
        let mut s = State::default();
        write_hybrid(&fs, "c", s);
        let mut sampler = hybrid_sampler(&fs, "c");
        s.usage_ms = 10;
        write_hybrid(&fs, "c", s);
        sampler.poll(200 * MS).unwrap();
        s.usage_ms = 15;
        write_hybrid(&fs, "c", s);
        sampler.poll(150 * MS).unwrap();
        let i = sampler.close_interval().unwrap();
        // The late reading lands at 200 ms; its 5 ms count in the average, and the empty
        // window cannot be the burst.
        assert_eq!(
            (i.at_ns, i.usage_ns, i.burst_at_ns),
            (200 * MS, 15 * MS, 200 * MS)
        );
        assert_eq!(i.burst_cores, 0.05);
    }

    #[test]
    fn window_arithmetic() {
        let p = |at_ms: u64, used_ms: u64| UsagePoint {
            at_ns: at_ms * MS,
            usage_ns: used_ms * MS,
        };
        let w = Window::between(p(100, 10), p(200, 35));
        assert_eq!(
            (w.len_ns(), w.used_ns, w.cores()),
            (100 * MS, 25 * MS, 0.25)
        );
        // A late poll's longer window is compared by rate, not by CPU time.
        let long = Window::between(p(200, 35), p(350, 65)); // 30 ms in 150 ms = 0.2
        assert_eq!(busier(Some(w), long), Some(w));
        let faster = Window::between(p(350, 65), p(400, 80)); // 15 ms in 50 ms = 0.3
        assert_eq!(busier(Some(w), faster), Some(faster));
        // Ties keep the earlier window; empty windows never win.
        let same = Window::between(p(400, 80), p(500, 105));
        assert_eq!(busier(Some(w), same), Some(w));
        let empty = Window::between(p(500, 105), p(500, 105));
        assert_eq!(busier(None, empty), None);
        assert_eq!(busier(Some(w), empty), Some(w));
        // Exact comparison where floats would tie: 1/3 vs 333_333_333/1e9.
        let third = Window {
            start_ns: 0,
            end_ns: 3,
            used_ns: 1,
        };
        let almost = Window {
            start_ns: 0,
            end_ns: 1_000_000_000,
            used_ns: 333_333_333,
        };
        assert_eq!(busier(Some(almost), third), Some(third));

        assert_eq!(cores(5, 0), 0.0);
        assert_eq!(share(0, 0), 0.0);
        assert_eq!(share(3, 4), 0.75);

        let mut h: VecDeque<UsagePoint> = (0..=10).map(|k| p(k * 1_000, k * 100)).collect();
        prune(&mut h, 4_000 * MS);
        assert_eq!(h.front(), Some(&p(6_000, 600)));
        assert_eq!(trailing(&h).unwrap().cores(), 0.1);
        let mut one = VecDeque::from([p(5, 5)]);
        prune(&mut one, 0);
        assert_eq!(one.len(), 1);
        assert_eq!(trailing(&one).unwrap().len_ns(), 0);
        assert_eq!(trailing(&VecDeque::new()), None);
    }
}
