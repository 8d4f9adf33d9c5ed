//! CFS bandwidth: the quota and the throttling counters, from the v1 cpu directory on hybrid
//! hosts or v2's `cpu.stat` and `cpu.max`.

use std::path::PathBuf;

use super::{
    CgroupDirs, CgroupFiles, CgroupfsError,
    files::{Fail, Reader},
    usage::CpuStat,
};

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

impl ThrottleSource {
    /// The v1 cpu directory when the host is hybrid and the container has one, else v2
    /// `cpu.max`; neither is recorded with its reason.
    pub(super) fn resolve<F: CgroupFiles + ?Sized>(
        r: &Reader<'_, F>,
        dirs: &CgroupDirs,
    ) -> Result<Self, CgroupfsError> {
        let cgroup = r.cgroup;
        let cpu_max = cgroup.join("cpu.max");
        let v1_quota = dirs.cpu_v1.as_ref().map(|d| d.join("cpu.cfs_quota_us"));
        Ok(match &v1_quota {
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
        })
    }

    /// The counters and quota now; `v2_stat` is the `cpu.stat` usage was just read from, if it
    /// was, reused when it is this source's file.
    pub(super) fn read<F: CgroupFiles + ?Sized>(
        &self,
        r: &Reader<'_, F>,
        v2_stat: Option<&CpuStat>,
    ) -> Result<Option<ThrottleCounters>, Fail> {
        Ok(match self {
            ThrottleSource::V2 { cpu_stat, cpu_max } => {
                let text = match v2_stat {
                    Some((path, text)) if path == cpu_stat => text.clone(),
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
