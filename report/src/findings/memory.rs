//! Memory: a container whose processes the OOM killer ended (timeouts and resets to its
//! clients), and one that stalled in reclaim (PSI memory) — both look like a slow or flaky
//! service from outside.

use std::collections::BTreeMap;

use herd_model::waits::{OomCell, PsiCell};
use herd_model::{CpuCell, Memory, RunData};

use super::waits::{count, intervals, load, secs, span};
use super::{Finding, n};

/// The root cgroup's row: its count is the host's (`/proc/vmstat`), every container's kills
/// included.
const HOST: &str = "host";

/// Share of wall time some task of a container stalled on memory from which it is named.
const PRESSURE_SHARE: f64 = 0.10;

fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// A container's OOM kills over the run.
#[derive(Default)]
struct Kills {
    kills: u64,
    /// One evidence row per interval with kills.
    rows: Vec<String>,
    /// Its memory high-water mark.
    peak: Option<u64>,
    /// The phase of its first kill.
    first_phase: Option<String>,
}

/// A container's memory stalls in one phase.
struct Stalls {
    container: String,
    phase: String,
    wall_s: f64,
    some_us: u64,
    /// `None` once an interval had no `full` line.
    full_us: Option<u64>,
    from_s: f64,
    to_s: f64,
}

/// The container's memory in an interval: (charged now, high-water mark).
fn memory(c: &herd_model::ContainerInterval) -> Option<(u64, Option<u64>)> {
    match &c.cpu {
        CpuCell::Measured(ci) => match &ci.memory {
            Memory::Measured {
                current_bytes,
                peak_bytes,
                ..
            } => Some((*current_bytes, *peak_bytes)),
            Memory::Unavailable { .. } => None,
        },
        CpuCell::Unavailable { .. } => None,
    }
}

/// Processes the OOM killer killed, per container, over the whole run (before and after the
/// plan too: a kill is never warm-up); the host row only for kills outside every container.
pub fn oom_killed(d: &RunData) -> Vec<Finding> {
    let ats = intervals(d);
    let mut acc: BTreeMap<String, Kills> = BTreeMap::new();
    for a in &ats {
        for c in &a.iv.containers {
            let OomCell::Measured { oom_kills } = &c.waits.oom else {
                continue;
            };
            let e = acc.entry(c.container.clone()).or_default();
            let mem = memory(c);
            if let Some((_, Some(p))) = mem {
                e.peak = Some(e.peak.unwrap_or(0).max(p));
            }
            if *oom_kills == 0 {
                continue;
            }
            e.kills += oom_kills;
            e.first_phase.get_or_insert_with(|| a.phase.clone());
            e.rows.push(format!(
                "{} ({}): {} OOM kills in {}{}",
                span(a.start_s, a.end_s),
                a.phase,
                n(*oom_kills),
                c.container,
                match mem {
                    Some((cur, _)) => format!(", {} charged at the interval's end", mib(cur)),
                    None => String::new(),
                }
            ));
        }
    }
    let in_containers: u64 = acc
        .iter()
        .filter(|(k, _)| k.as_str() != HOST)
        .map(|(_, v)| v.kills)
        .sum();
    let mut found = Vec::new();
    for (name, k) in acc {
        let Kills {
            kills,
            mut rows,
            peak,
            first_phase: phase,
        } = k;
        let (kills, outside) = if name == HOST {
            (kills.saturating_sub(in_containers), true)
        } else {
            (kills, false)
        };
        if kills == 0 {
            continue;
        }
        let who = if outside {
            "processes outside the named containers".to_owned()
        } else {
            name.clone()
        };
        rows.truncate(12);
        let mut title = format!(
            "{who}: {} by the OOM killer",
            count(kills, "process killed", "processes killed")
        );
        if outside {
            rows.insert(
                0,
                format!(
                    "the host counted {} OOM kills beyond the {} in named containers",
                    n(kills),
                    n(in_containers)
                ),
            );
        } else {
            rows.insert(0, format!("{name}: {} OOM kills over the run", n(kills)));
            if let Some(p) = peak {
                title.push_str(&format!("; its memory peaked at {}", mib(p)));
                rows.push(format!("{name}: memory high-water mark {}", mib(p)));
            }
        }
        if let Some(ph) = &phase {
            title.push_str(&format!(" (first in {ph})"));
        }
        let f = Finding::new(
            "oom_killed",
            title,
            "The kernel killed a process that needed more memory than its cgroup's limit \
                 (memory.max) allows: its clients see resets and timeouts, a restarted service \
                 cold caches. Raise the limit, or find what grows (a cache without a bound, \
                 buffers per connection, a leak); the high-water mark above is the most it \
                 held.",
            rows,
        )
        .about(&name)
        .number("oom_kills", kills as f64);
        found.push(match &phase {
            Some(ph) => f.in_phase(ph),
            None => f,
        });
    }
    found
}

/// A container some task of which stalled on memory (PSI `memory` `some`: reclaim, refaults,
/// swap-in) for at least a tenth of a phase's wall time: named with its worst phase.
pub fn memory_pressure(d: &RunData) -> Vec<Finding> {
    let mut acc: Vec<Stalls> = Vec::new();
    for a in load(d) {
        for c in &a.iv.containers {
            if c.container == HOST {
                continue;
            }
            let PsiCell::Measured {
                memory: Some(m), ..
            } = &c.waits.psi
            else {
                continue;
            };
            let i = match acc
                .iter()
                .position(|x| x.container == c.container && x.phase == a.phase)
            {
                Some(i) => i,
                None => {
                    acc.push(Stalls {
                        container: c.container.clone(),
                        phase: a.phase.clone(),
                        wall_s: 0.0,
                        some_us: 0,
                        full_us: Some(0),
                        from_s: a.start_s,
                        to_s: a.end_s,
                    });
                    acc.len() - 1
                }
            };
            let x = &mut acc[i];
            x.wall_s += a.secs();
            x.some_us += m.some_us;
            x.full_us = match (x.full_us, m.full_us) {
                (Some(s), Some(f)) => Some(s + f),
                _ => None,
            };
            x.to_s = a.end_s;
        }
    }
    let mut found: Vec<(f64, Finding)> = Vec::new();
    let mut names: Vec<&str> = acc.iter().map(|x| x.container.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        let worst = acc
            .iter()
            .filter(|x| x.container == name && x.wall_s >= 1.0)
            .map(|x| (x.some_us as f64 / 1e6 / x.wall_s, x))
            .filter(|(share, _)| *share >= PRESSURE_SHARE)
            .max_by(|a, b| a.0.total_cmp(&b.0));
        let Some((share, x)) = worst else {
            continue;
        };
        let pct = share * 100.0;
        let some = secs(x.some_us as f64 / 1e6);
        let full = x.full_us.map(|f| secs(f as f64 / 1e6));
        let row = format!(
            "{name} in {}, {} ({} of wall time): memory pressure some {some} ({pct:.0} %), \
             full {}",
            x.phase,
            span(x.from_s, x.to_s),
            secs(x.wall_s),
            full.clone().unwrap_or_else(|| "not measured".into())
        );
        let title = format!(
            "{name} stalled on memory {some} of {} in {} ({pct:.0} % of the time){}",
            secs(x.wall_s),
            x.phase,
            match &full {
                Some(f) => format!(", every task at once {f}"),
                None => String::new(),
            }
        );
        found.push((
            share,
            Finding::new(
                "memory_pressure",
                title,
                "Some of the container's tasks waited for memory — reclaim near its limit, \
                 pages read back in, swap-in — rather than running: requests slow down with no \
                 CPU or network cause, and an OOM kill may follow. Raise the memory limit, or \
                 shrink what it holds (caches, per-connection buffers).",
                vec![row],
            )
            .about(name)
            .in_phase(&x.phase)
            .number("memory_some_share", share)
            .number("memory_some_s", x.some_us as f64 / 1e6),
        ));
    }
    found.sort_by(|a, b| b.0.total_cmp(&a.0));
    found.into_iter().map(|(_, f)| f).collect()
}
