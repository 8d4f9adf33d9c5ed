//! A container's pressure stall information (PSI) and OOM kills: cumulative counters the
//! kernel keeps per cgroup, read once per interval.
//!
//! | number | pure v2 / hybrid (v2 at `unified/`) | root cgroup (`host`) | kernel minimum |
//! |---|---|---|---|
//! | PSI `some`/`full` totals (µs) | `<v2>/{cpu,memory,io}.pressure` (present in every non-root v2 cgroup when PSI is on, whichever hierarchy the controllers are bound to) | `/proc/pressure/{cpu,memory,io}` | 4.20 (`full` for cpu: 5.13) |
//! | OOM kills | `<v2>/memory.events` `oom_kill` (v2 memory controller), else `<v1 memory>/memory.oom_control` `oom_kill` | `/proc/vmstat` `oom_kill` | 4.13 |

use std::path::PathBuf;

use super::{
    CgroupDirs, CgroupFiles, CgroupfsError,
    files::{Fail, Reader},
};

/// The three PSI resources, in file order.
pub const PSI_RESOURCES: [&str; 3] = ["cpu", "memory", "io"];

/// Cumulative stall totals of one resource (`total=` of a pressure file's lines), µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PressureTotals {
    /// `some total=`.
    pub some_us: u64,
    /// `full total=`; `None` when the file has no `full` line.
    pub full_us: Option<u64>,
}

/// Parses a PSI file (`some avg10=0.00 avg60=0.00 avg300=0.00 total=123` and a `full` line).
pub fn parse_pressure(text: &str) -> Option<PressureTotals> {
    let total = |kind: &str| {
        text.lines()
            .find(|l| l.starts_with(kind))?
            .split_whitespace()
            .find_map(|w| w.strip_prefix("total="))?
            .parse::<u64>()
            .ok()
    };
    Some(PressureTotals {
        some_us: total("some ")?,
        full_us: total("full "),
    })
}

/// Where a container's waits are read from, decided once.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct WaitSources {
    /// The PSI files (cpu, memory, io), or why there are none.
    pub psi: Result<[PathBuf; 3], String>,
    /// The OOM kill counter.
    pub oom: OomSource,
}

/// Where the OOM kill counter is read from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "from", rename_all = "snake_case")]
pub enum OomSource {
    /// `<v2>/memory.events`, key `oom_kill` (hierarchical: descendants' kills included).
    V2 {
        /// The file.
        events: PathBuf,
    },
    /// `<v1 memory>/memory.oom_control`, key `oom_kill`.
    V1 {
        /// The file.
        oom_control: PathBuf,
    },
    /// The root cgroup: `/proc/vmstat` `oom_kill`, every OOM kill on the host.
    Host {
        /// The file.
        vmstat: PathBuf,
    },
    /// No counter, with the reason.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// One reading of a container's cumulative waits.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WaitReading {
    /// PSI totals per resource ([`PSI_RESOURCES`] order); `None` when PSI is unavailable.
    pub psi: Option<[Option<PressureTotals>; 3]>,
    /// OOM kills so far; `None` when unavailable.
    pub oom_kills: Option<u64>,
}

impl WaitSources {
    /// Finds the files of the container at `dirs`.
    pub fn resolve(files: &impl CgroupFiles, dirs: &CgroupDirs) -> Result<Self, CgroupfsError> {
        let r = Reader {
            files,
            cgroup: &dirs.unified,
        };
        let base = if dirs.root {
            PathBuf::from("/proc/pressure")
        } else {
            dirs.unified.clone()
        };
        let psi_files = PSI_RESOURCES.map(|res| {
            if dirs.root {
                base.join(res)
            } else {
                base.join(format!("{res}.pressure"))
            }
        });
        // A PSI file exists but fails to read with EOPNOTSUPP when PSI is compiled in and
        // disabled at boot (`psi=0`, CONFIG_PSI_DEFAULT_DISABLED).
        let psi = match files.read(&psi_files[0]) {
            Ok(_) => Ok(psi_files),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
                "no {}: this kernel has no PSI (CONFIG_PSI, 4.20+)",
                psi_files[0].display()
            )),
            Err(e) => Err(format!(
                "{} unreadable ({e}): PSI is disabled (boot with psi=1)",
                psi_files[0].display()
            )),
        };
        let events = dirs.unified.join("memory.events");
        let vmstat = PathBuf::from("/proc/vmstat");
        let oom = if dirs.root {
            OomSource::Host { vmstat }
        } else if r.maybe(&events)?.is_some() {
            OomSource::V2 { events }
        } else {
            match dirs
                .memory_v1
                .as_ref()
                .map(|d| d.join("memory.oom_control"))
            {
                Some(f) if r.maybe(&f)?.is_some_and(|t| t.contains("oom_kill ")) => {
                    OomSource::V1 { oom_control: f }
                }
                Some(f) => OomSource::Unavailable {
                    reason: format!(
                        "no {} (the v2 memory controller is not enabled for this cgroup) and \
                         no `oom_kill` in {} (kernel 4.13+)",
                        events.display(),
                        f.display()
                    ),
                },
                None => OomSource::Unavailable {
                    reason: format!(
                        "no {}: the memory controller is not enabled for this cgroup (its \
                         parent's cgroup.subtree_control lacks `memory`)",
                        events.display()
                    ),
                },
            }
        };
        Ok(Self { psi, oom })
    }

    /// Reads every counter once. A file that fails to read gives `None` for its number (a
    /// cgroup removed meanwhile ends its row through the CPU sampler).
    pub fn read(&self, files: &impl CgroupFiles) -> WaitReading {
        let r = Reader {
            files,
            cgroup: std::path::Path::new(""),
        };
        let psi = self.psi.as_ref().ok().map(|paths| {
            paths
                .clone()
                .map(|p| files.read(&p).ok().and_then(|t| parse_pressure(&t)))
        });
        let key = |file: &PathBuf| -> Option<u64> {
            let text = match r.text(file) {
                Ok(t) => t,
                Err(Fail::Gone(_) | Fail::Error(_)) => return None,
            };
            r.key(file, &text, "oom_kill").ok()
        };
        let oom_kills = match &self.oom {
            OomSource::V2 { events } => key(events),
            OomSource::V1 { oom_control } => key(oom_control),
            OomSource::Host { vmstat } => key(vmstat),
            OomSource::Unavailable { .. } => None,
        };
        WaitReading { psi, oom_kills }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::cgroupfs::fake::*;

    #[test]
    fn pressure_files_parse_with_and_without_full() {
        let t = "some avg10=1.00 avg60=0.50 avg300=0.10 total=123456\n\
                 full avg10=0.00 avg60=0.00 avg300=0.00 total=789\n";
        assert_eq!(
            parse_pressure(t),
            Some(PressureTotals {
                some_us: 123_456,
                full_us: Some(789)
            })
        );
        let cpu_before_5_13 = "some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n";
        assert_eq!(
            parse_pressure(cpu_before_5_13),
            Some(PressureTotals {
                some_us: 5,
                full_us: None
            })
        );
        assert_eq!(parse_pressure("garbage"), None);
    }

    #[test]
    fn hybrid_reads_v2_psi_and_v1_oom_control_pure_v2_reads_memory_events() {
        let fs = FakeFiles::default();
        write_hybrid(&fs, "c", State::default());
        for res in PSI_RESOURCES {
            fs.set(
                format!("/cg/unified/c/{res}.pressure"),
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=4\n",
            );
        }
        fs.set(
            "/cg/memory/c/memory.oom_control",
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        );
        let s =
            WaitSources::resolve(&fs, &CgroupDirs::of(&hybrid_layout(), Path::new("c"))).unwrap();
        assert_eq!(
            s.oom,
            OomSource::V1 {
                oom_control: "/cg/memory/c/memory.oom_control".into()
            }
        );
        let r = s.read(&fs);
        assert_eq!(r.oom_kills, Some(2));
        let psi = r.psi.unwrap();
        assert_eq!(psi[1].unwrap().full_us, Some(4));

        let fs = FakeFiles::default();
        fs.set("/cg/c/cgroup.controllers", "cpu memory\n");
        fs.set(
            "/cg/c/memory.events",
            "low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\noom_group_kill 0\n",
        );
        let s = WaitSources::resolve(&fs, &CgroupDirs::of(&pure_layout(), Path::new("c"))).unwrap();
        assert!(matches!(s.oom, OomSource::V2 { .. }));
        assert_eq!(s.read(&fs).oom_kills, Some(1));
        // No pressure files: PSI unavailable, with the reason.
        let Err(reason) = &s.psi else { panic!() };
        assert!(reason.contains("cpu.pressure"), "{reason}");
        assert_eq!(s.read(&fs).psi, None);
    }
}
