//! The sampler of one container: polled every 100 ms by its caller, closed into one
//! [`CpuInterval`] per interval.

use std::{
    collections::VecDeque,
    path::{Path, PathBuf},
};

use super::{
    CgroupDirs, CgroupFiles, CgroupReading, CgroupSources, CgroupfsError, HostFiles, MemorySource,
    Reading, SUSTAINED_NS, ThrottleSource, UsagePoint, Window, busier, cores, prune, share,
    trailing,
};
use crate::cgroup::CgroupLayout;
use herd_model::{CpuInterval, Memory, Throttling};

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

/// The shortest poll-to-poll window that competes for an interval's burst: half a poll.
pub const MIN_WINDOW_NS: u64 = super::POLL_NS / 2;

/// Samples one container's CPU, throttling and memory. The caller drives time: it calls
/// [`Self::poll`] every [`POLL_NS`](super::POLL_NS) with its clock's reading and [`Self::close_interval`] at
/// each interval boundary, so every container of a run shares the same timeline.
#[derive(Debug)]
pub struct CpuSampler<F> {
    files: F,
    sources: CgroupSources,
    start: Stamped,
    last: Stamped,
    polls: u32,
    busiest: Option<Window>,
    /// Where the window the next poll closes began: the last poll that closed one.
    window: UsagePoint,
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
            window: first.point(),
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
        // A window shorter than half a poll (after a late poll, or a poll repeated at once)
        // holds too little time to say how busy the container was (a 10 % quota runs a
        // whole core for a few ms): it joins the next one instead of competing.
        let w = Window::between(self.window, now.point());
        if w.len_ns() >= MIN_WINDOW_NS {
            self.busiest = busier(self.busiest, w);
            self.window = now.point();
        }
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
                working_set_bytes: m.working_set_bytes,
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
        self.window = self.last.point();
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
    use std::path::Path;

    use super::*;
    use crate::cgroupfs::fake::*;

    /// One second under a 10 ms / 100 ms quota, polled every 100 ms: the numbers an interval
    /// must show, computed by hand.
    #[test]
    fn a_window_shorter_than_half_a_poll_joins_the_next() {
        let fs = FakeFiles::default();
        let mut s = State {
            usage_ms: 0,
            periods: 0,
            throttled: 0,
            throttled_ms: 0,
            memory: 1 << 20,
            peak: 1 << 20,
        };
        write_hybrid(&fs, "c", s);
        let mut sampler = hybrid_sampler(&fs, "c");
        // A poll at 100 ms, one repeated 8 ms later that saw 4 ms used (0.5 core over 8 ms),
        // then one at 200 ms: the 8 ms belong to the window ending at 200 ms.
        for (at_ms, used_ms) in [(100, 10), (108, 4), (200, 8)] {
            s.usage_ms += used_ms;
            write_hybrid(&fs, "c", s);
            assert_eq!(sampler.poll(at_ms * MS).unwrap(), Polled::Sampled);
        }
        let i = sampler.close_interval().unwrap();
        assert_eq!(i.polls, 3);
        assert_eq!((i.burst_window_ns, i.burst_at_ns), (100 * MS, 200 * MS));
        assert_eq!(i.burst_cores, 0.12);
    }

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
                working_set_bytes: None,
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
}
