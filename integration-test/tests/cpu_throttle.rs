//! CPU, CFS throttling and memory from cgroupfs (`herd_probe::cgroupfs`), checked against the
//! kernel's own `cpu.stat`, which the test reads itself, with its own parser, right before and
//! right after every poll of the sampler.
//!
//! Why brackets: the counters move while we read them (`nr_periods` at every period timer,
//! usage at every tick), so "the kernel's value at the moment the sampler read it" is pinned
//! between the test's two reads. Where both reads agree the sampler must agree exactly; the
//! test re-polls at interval boundaries until they do.

use std::{
    collections::HashMap,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use herd_model::{CpuInterval, Memory, Throttling};
use herd_probe::{
    cgroup::CgroupLayout,
    cgroupfs::{
        CgroupDirs, CgroupReading, CgroupSources, CpuSampler, HostFiles, MIN_WINDOW_NS,
        MemorySource, Polled, ThrottleSource,
    },
    clock::now_ns,
};
use herd_testbed::{Container, Sandbox};
use integration_test::privileged;

const QUOTA_US: u64 = 10_000;
const PERIOD_US: u64 = 100_000;
const QUOTA_CORES: f64 = QUOTA_US as f64 / PERIOD_US as f64;
const POLL: Duration = Duration::from_millis(100);
/// The scheduler tick of this kernel (1 / CONFIG_HZ), from its config; 10 ms (HZ=100, the
/// slowest) when the config is not readable. Two tick effects bound what a window can show:
/// CFS notices an exhausted quota in `update_curr`, which a busy loop that never enters the
/// kernel reaches only at a tick, so a period can overrun its quota by up to one tick
/// (`__account_cfs_rq_runtime`, kernel/sched/fair.c; the overrun is repaid from the next
/// period's runtime); and `cpu.stat` lacks the running task's time since its last tick (the
/// cgroup is charged in `update_curr` too), so a read inside a run lags by up to one tick.
fn tick_ns() -> u64 {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let config = Command::new("zcat")
        .arg("/proc/config.gz")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .or_else(|| std::fs::read_to_string(format!("/boot/config-{}", release.trim())).ok())
        .unwrap_or_default();
    let hz = config
        .lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ=")?.parse::<u64>().ok())
        .unwrap_or(100);
    1_000_000_000 / hz
}

/// How late "a tick" can be: one tick on a real machine. Under software emulation (QEMU's
/// TCG, `cargo xtask integration-test vm`) the host can preempt a vCPU's thread; guest time
/// (the TSC) keeps running meanwhile and CFS charges the whole gap to the task that was on
/// that vCPU, at its next tick. A window can then show that much more than the quota or
/// than wall time, so the VM runner names the preemption it allows in
/// `HERD_TEST_EMULATION_SLACK_MS`. The exact comparisons with `cpu.stat` never use it.
fn tick_slack_ns() -> u64 {
    let emulation_ms = std::env::var("HERD_TEST_EMULATION_SLACK_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    tick_ns() + emulation_ms * 1_000_000
}

/// The kernel's counters as the test reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Kernel {
    usage_ns: u64,
    nr_periods: u64,
    nr_throttled: u64,
    throttled_ns: u64,
}

impl Kernel {
    /// Same throttling counters (usage may tick between two reads).
    fn same_throttle(&self, o: &Kernel) -> bool {
        (self.nr_periods, self.nr_throttled, self.throttled_ns)
            == (o.nr_periods, o.nr_throttled, o.throttled_ns)
    }
}

/// `key value` lines, parsed independently of the code under test.
fn stat(path: &Path) -> HashMap<String, u64> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_owned(), v.trim().parse().ok()?))
        })
        .collect()
}

/// Usage from the v2 core `cpu.stat` (µs); throttling from the v1 cpu `cpu.stat` on hybrid
/// hosts (`throttled_time`, ns) or the v2 one on pure v2 hosts (`throttled_usec`).
fn kernel(c: &Container) -> Kernel {
    let v2 = stat(&c.cgroup.join("cpu.stat"));
    let (t, throttled_ns) = match &c.cpu_v1 {
        Some(dir) => {
            let t = stat(&dir.join("cpu.stat"));
            let ns = t["throttled_time"];
            (t, ns)
        }
        None => (v2.clone(), v2["throttled_usec"] * 1_000),
    };
    Kernel {
        usage_ns: v2["usage_usec"] * 1_000,
        nr_periods: t["nr_periods"],
        nr_throttled: t["nr_throttled"],
        throttled_ns,
    }
}

fn as_kernel(r: &CgroupReading) -> Kernel {
    let t = r.throttle.expect("the container has a cpu controller");
    Kernel {
        usage_ns: r.usage_ns,
        nr_periods: t.nr_periods,
        nr_throttled: t.nr_throttled,
        throttled_ns: t.throttled_ns,
    }
}

/// One poll (or the start) between two kernel reads.
#[derive(Clone, Copy, Debug)]
struct Moment {
    at_ns: u64,
    before: Kernel,
    sampled: Kernel,
    after: Kernel,
}

impl Moment {
    /// No throttling counter moved while the sampler read: the kernel's value is known.
    fn exact(&self) -> bool {
        self.before.same_throttle(&self.after)
    }

    /// The sampler's values lie between the two kernel reads, and equal them when they agree.
    fn check(&self) {
        let (b, s, a) = (self.before, self.sampled, self.after);
        for (name, b, s, a) in [
            ("usage_ns", b.usage_ns, s.usage_ns, a.usage_ns),
            ("nr_periods", b.nr_periods, s.nr_periods, a.nr_periods),
            (
                "nr_throttled",
                b.nr_throttled,
                s.nr_throttled,
                a.nr_throttled,
            ),
            (
                "throttled_ns",
                b.throttled_ns,
                s.throttled_ns,
                a.throttled_ns,
            ),
        ] {
            assert!(b <= s && s <= a, "{name}: kernel {b}..{a}, sampler {s}");
        }
    }
}

/// Polls between two kernel reads. With `exact`, repeats (1 ms apart, at most 50 times) until
/// no throttling counter moved during the bracket. Every poll the sampler took is pushed on
/// `all`: the repeats are polls too, with windows of their own.
fn poll(
    sampler: &mut CpuSampler<HostFiles>,
    c: &Container,
    exact: bool,
    all: &mut Vec<Moment>,
) -> Moment {
    for _ in 0..50 {
        let before = kernel(c);
        let at_ns = now_ns();
        assert_eq!(sampler.poll(at_ns).unwrap(), Polled::Sampled);
        let after = kernel(c);
        let m = Moment {
            at_ns,
            before,
            sampled: as_kernel(sampler.last_reading().1),
            after,
        };
        m.check();
        all.push(m);
        if !exact || m.exact() {
            return m;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the kernel's counters moved during 50 consecutive brackets");
}

/// Starts a sampler on `c` at an exact moment.
fn start(layout: &CgroupLayout, c: &Container) -> (CpuSampler<HostFiles>, Moment) {
    let dirs = CgroupDirs::of(layout, &c.cgroup);
    assert_eq!(dirs.unified, c.cgroup);
    assert_eq!(
        dirs.cpu_v1, c.cpu_v1,
        "v1 cpu dir = layout.cpu_v1 + relative path"
    );
    let sources = CgroupSources::resolve(&HostFiles, &dirs).unwrap();
    for _ in 0..50 {
        let before = kernel(c);
        let at_ns = now_ns();
        let sampler = CpuSampler::start(HostFiles, sources.clone(), at_ns).unwrap();
        let after = kernel(c);
        let m = Moment {
            at_ns,
            before,
            sampled: as_kernel(sampler.last_reading().1),
            after,
        };
        m.check();
        if m.exact() {
            return (sampler, m);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("the kernel's counters moved during 50 consecutive brackets");
}

/// Polls every 100 ms on an absolute schedule for `intervals` × 1 s, closing an interval every
/// 10 polls. Returns every scheduled poll's moment, per interval every poll the sampler took
/// (repeats included), and the intervals.
fn sample(
    sampler: &mut CpuSampler<HostFiles>,
    c: &Container,
    intervals: usize,
) -> (Vec<Moment>, Vec<Vec<Moment>>, Vec<CpuInterval>) {
    let t0 = Instant::now();
    let mut moments = Vec::new();
    let (mut all, mut each) = (Vec::new(), Vec::new());
    let mut out = Vec::new();
    for k in 1..=intervals * 10 {
        let next = t0 + POLL * k as u32;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        moments.push(poll(sampler, c, k % 10 == 0, &mut each));
        if k % 10 == 0 {
            out.push(
                sampler
                    .close_interval()
                    .expect("ten polls since the last close"),
            );
            all.push(std::mem::take(&mut each));
        }
    }
    (moments, all, out)
}

/// The busiest window's cores as the kernel saw it: each poll-to-poll window's usage lies
/// between the inner and the outer difference of the brackets around its two polls. Also
/// returns the ms used in each window, as the sampler read them.
fn kernel_burst(start: Moment, polls: &[Moment]) -> (f64, f64, String) {
    let mut prev = start;
    let (mut lo, mut hi) = (0f64, 0f64);
    let mut each = Vec::new();
    for m in polls {
        // As the sampler does: a window under half a poll (a repeated poll's) joins the next.
        if m.at_ns - prev.at_ns < MIN_WINDOW_NS {
            continue;
        }
        let len = (m.at_ns - prev.at_ns) as f64;
        lo = lo.max(m.before.usage_ns.saturating_sub(prev.after.usage_ns) as f64 / len);
        hi = hi.max((m.after.usage_ns - prev.before.usage_ns) as f64 / len);
        each.push(format!(
            "{:.1}",
            (m.sampled.usage_ns - prev.sampled.usage_ns) as f64 / 1e6
        ));
        prev = *m;
    }
    (lo, hi, each.join(" "))
}

fn measured(i: &CpuInterval) -> (u64, u64, u64, f64, Option<f64>, Option<u64>, u64) {
    match i.throttle {
        Throttling::Measured {
            nr_periods,
            nr_throttled,
            throttled_ns,
            throttled_share,
            quota_cores,
            quota_us,
            period_us,
        } => (
            nr_periods,
            nr_throttled,
            throttled_ns,
            throttled_share,
            quota_cores,
            quota_us,
            period_us,
        ),
        Throttling::Unavailable { ref reason } => panic!("throttling unavailable: {reason}"),
    }
}

/// Memory of a sandbox container: its own memory cgroup (v2 with the memory controller, or
/// the v1 memory directory the sandbox creates on hybrid hosts), otherwise unavailable with a
/// reason naming where it looked — never 0.
fn check_memory(i: &CpuInterval, sources: &CgroupSources) {
    match (&i.memory, &sources.memory) {
        (
            Memory::Measured {
                current_bytes,
                peak_bytes,
                ..
            },
            MemorySource::V2 { current, peak },
        ) => {
            assert!(*current_bytes > 0, "a running shell charges memory");
            // memory.peak exists from 5.19 on: the sampler must read it wherever the kernel
            // has it, and say "no peak" (not 0) where it does not.
            let file = current.with_file_name("memory.peak");
            assert_eq!(peak.as_ref(), file.exists().then_some(&file));
            assert_eq!(peak_bytes.is_some(), file.exists());
            if let Some(p) = peak_bytes {
                assert!(p >= current_bytes, "peak {p} < current {current_bytes}");
            }
            println!(
                "matrix: memory from memory.current and {}",
                match peak_bytes {
                    Some(_) => "memory.peak (pure cgroup v2)",
                    None => "no memory.peak: this kernel has none (before 5.19)",
                }
            );
        }
        (
            Memory::Measured {
                current_bytes,
                peak_bytes,
                ..
            },
            MemorySource::V1 { .. },
        ) => {
            assert!(*current_bytes > 0, "a running shell charges memory");
            assert!(
                peak_bytes.is_some_and(|p| p >= *current_bytes),
                "{peak_bytes:?}"
            );
        }
        (Memory::Unavailable { reason }, MemorySource::Unavailable { .. }) => {
            assert!(reason.contains("memory"), "{reason}")
        }
        other => panic!("memory {other:?}"),
    }
}

#[test]
fn throttling_matches_cpu_stat_exactly_and_burst_reflects_the_quota() {
    if !privileged("throttling_matches_cpu_stat_exactly_and_burst_reflects_the_quota") {
        return;
    }
    let mut sandbox = Sandbox::new("cpu throttle test").unwrap();
    let busy = sandbox
        .container("busy", Some((QUOTA_US, PERIOD_US)))
        .unwrap();
    // Bounded by itself: `timeout` ends the loop after 3 s even if the test dies.
    let mut cmd = Command::new("timeout");
    cmd.args(["3", "sh", "-c", "while :; do :; done"]);
    sandbox.spawn(&busy, cmd).unwrap();
    // Let exec of timeout and sh settle so every window sees the loop alone.
    std::thread::sleep(Duration::from_millis(200));

    let layout = sandbox.layout().clone();
    let tick = tick_slack_ns() as f64;
    eprintln!(
        "scheduler tick {:.1} ms, allowed {:.1} ms",
        tick_ns() as f64 / 1e6,
        tick / 1e6
    );
    let (mut sampler, m0) = start(&layout, &busy);
    // Pure v2 hosts keep the quota in cpu.max and the counters in the v2 cpu.stat; hybrid
    // hosts in the v1 cpu hierarchy.
    match (&layout.cpu_v1, &sampler.sources().throttle) {
        (None, ThrottleSource::V2 { .. }) => println!(
            "matrix: throttling from cpu.max and cpu.stat nr_periods/nr_throttled/throttled_usec \
             (pure cgroup v2)"
        ),
        (Some(_), ThrottleSource::V1 { .. }) => println!(
            "matrix: throttling from cpu.cfs_quota_us and v1 cpu.stat throttled_time (hybrid)"
        ),
        other => panic!("the throttling source does not match the layout: {other:?}"),
    }
    let (moments, polls, intervals) = sample(&mut sampler, &busy, 2);
    assert_eq!(intervals.len(), 2);

    let mut bounds = vec![m0];
    bounds.extend(moments.iter().copied().filter(Moment::exact));
    let mut starts = vec![m0];
    starts.extend(moments.iter().skip(9).step_by(10).copied());
    for (j, i) in intervals.iter().enumerate() {
        let (a, b) = (starts[j], starts[j + 1]);
        assert!(a.exact() && b.exact());
        assert_eq!(i.at_ns, b.at_ns);
        assert_eq!(i.interval_ns, b.at_ns - a.at_ns);
        let (nr_periods, nr_throttled, throttled_ns, share, quota_cores, quota_us, period_us) =
            measured(i);
        let k_periods = b.before.nr_periods - a.before.nr_periods;
        let k_throttled = b.before.nr_throttled - a.before.nr_throttled;
        let k_time = b.before.throttled_ns - a.before.throttled_ns;
        eprintln!(
            "interval {j}: {} polls over {:.1} ms: sampler nr_periods {nr_periods} \
             nr_throttled {nr_throttled} throttled_ns {throttled_ns} | kernel nr_periods \
             {k_periods} nr_throttled {k_throttled} throttled_ns {k_time} | cpu {:.4} burst \
             {:.4} over {:.1} ms, sustained {:.4}",
            i.polls,
            i.interval_ns as f64 / 1e6,
            i.cpu_cores,
            i.burst_cores,
            i.burst_window_ns as f64 / 1e6,
            i.sustained_cores,
        );

        // Exact means exact.
        assert_eq!(nr_throttled, k_throttled, "nr_throttled delta");
        assert_eq!(nr_periods, k_periods, "nr_periods delta");
        let err = (throttled_ns as f64 - k_time as f64).abs() / k_time as f64;
        assert!(err <= 0.01, "throttled time off by {:.3} %", err * 100.0);

        // A loop that always wants a whole core under a 0.1-core quota exhausts the quota in
        // (nearly) every period: ~10 periods per second, each throttled. One period at each
        // edge of the interval can fall either side.
        assert!((9..=11).contains(&nr_periods), "nr_periods {nr_periods}");
        assert!(
            nr_throttled + 1 >= nr_periods,
            "{nr_throttled}/{nr_periods}"
        );
        assert!(share >= 0.8, "throttled share {share}");
        assert!(throttled_ns > 0);
        assert_eq!(quota_us, Some(QUOTA_US));
        assert_eq!(period_us, PERIOD_US);
        assert_eq!(quota_cores, Some(QUOTA_CORES));

        // Usage over the interval: more than 0 and at most the quota. An interval of length T
        // can hold the runtime of ceil(T / period) + 1 periods' grants at its edges, plus one
        // tick of overrun and a tick of read lag; the CFS debt makes the long-run rate
        // exactly the quota.
        let t = i.interval_ns as f64;
        let max_cores = (QUOTA_CORES * (t + PERIOD_US as f64 * 1e3) + 2.0 * tick) / t;
        assert!(
            i.usage_ns > 0 && i.cpu_cores <= max_cores,
            "cpu {} > {max_cores}",
            i.cpu_cores
        );
        assert!(i.cpu_cores >= 0.5 * QUOTA_CORES, "cpu {}", i.cpu_cores);
        // cputime_adjust keeps user + system == usage in ns; cpu.stat truncates each to µs,
        // so user + system can exceed usage by 1 µs per interval.
        assert!(
            i.user_cores + i.system_cores <= i.cpu_cores + (1e3 + 1.0) / t,
            "user {} + system {} > cpu {}",
            i.user_cores,
            i.system_cores,
            i.cpu_cores
        );

        // The burst is the busiest poll-to-poll window of the kernel's own usage.
        let (lo, hi, each) = kernel_burst(a, &polls[j]);
        eprintln!("  ms used per window: {each}");
        assert!(
            lo <= i.burst_cores && i.burst_cores <= hi,
            "burst {} outside the kernel's {lo}..{hi}",
            i.burst_cores
        );
        // And it reflects the quota. A window W ≈ 100 ms holds one period's grant (10 ms),
        // more only by a tick of overrun, a tick of read lag at its start edge, or the part
        // of W beyond one period (poll jitter); and at least the interval's average (it is
        // the busiest window). With HZ=250: at most 18 ms per 100 ms, 0.18 core.
        let w = i.burst_window_ns as f64;
        let burst_max =
            (QUOTA_US as f64 * 1e3 + 2.0 * tick + (w - PERIOD_US as f64 * 1e3).max(0.0)) / w;
        assert!(
            i.burst_cores >= i.cpu_cores && i.burst_cores <= burst_max,
            "burst {} not within {}..{burst_max}",
            i.burst_cores,
            i.cpu_cores
        );
        assert!(
            (i.burst_window_ns as f64 - 1e8).abs() < 0.5e8,
            "polled every 100 ms"
        );
        check_memory(i, sampler.sources());
    }

    // Every exact moment, not only interval boundaries, agrees with the kernel exactly.
    for m in &bounds {
        assert_eq!(m.sampled.nr_throttled, m.before.nr_throttled);
        assert_eq!(m.sampled.throttled_ns, m.before.throttled_ns);
    }
    eprintln!(
        "{} of {} polls had no counter move during their bracket",
        bounds.len() - 1,
        moments.len()
    );
}

#[test]
fn a_container_without_quota_is_never_throttled() {
    if !privileged("a_container_without_quota_is_never_throttled") {
        return;
    }
    let mut sandbox = Sandbox::new("cpu throttle test").unwrap();
    let free = sandbox.container("free", None).unwrap();
    let mut cmd = Command::new("timeout");
    cmd.args(["2", "sh", "-c", "while :; do :; done"]);
    sandbox.spawn(&free, cmd).unwrap();
    std::thread::sleep(Duration::from_millis(200));

    let layout = sandbox.layout().clone();
    let (mut sampler, m0) = start(&layout, &free);
    let (moments, polls, intervals) = sample(&mut sampler, &free, 1);
    let i = &intervals[0];
    let end = moments.last().unwrap();
    let (nr_periods, nr_throttled, throttled_ns, share, quota_cores, quota_us, period_us) =
        measured(i);
    eprintln!(
        "no quota: cpu {:.4} burst {:.4} nr_periods {nr_periods} nr_throttled {nr_throttled} \
         throttled_ns {throttled_ns} (kernel: {} {} {})",
        i.cpu_cores,
        i.burst_cores,
        end.before.nr_periods - m0.before.nr_periods,
        end.before.nr_throttled - m0.before.nr_throttled,
        end.before.throttled_ns - m0.before.throttled_ns,
    );
    assert_eq!((quota_cores, quota_us), (None, None));
    assert_eq!(period_us, PERIOD_US, "the kernel's default period");
    // Without a quota the period timer never runs: no periods, no throttling, and the
    // kernel agrees.
    assert_eq!(
        (nr_periods, nr_throttled, throttled_ns, share),
        (0, 0, 0, 0.0)
    );
    assert_eq!(end.before.nr_throttled, 0);
    assert_eq!(end.before.throttled_ns, 0);
    let (lo, hi, each) = kernel_burst(m0, &polls[0]);
    eprintln!("  ms used per window: {each}");
    assert!(
        lo <= i.burst_cores && i.burst_cores <= hi,
        "burst {} outside the kernel's {lo}..{hi}",
        i.burst_cores
    );
    // The same loop that showed ~0.1 core under the quota now takes what the host gives it:
    // a whole core when idle, never more than one (one thread), give or take a tick of read
    // lag. Other work on a 2-core host (a parallel build) takes its fair share, so the floor
    // is twice the quota: still clearly not quota-bound, and true unless more than eight
    // other threads compete per core.
    let tick = tick_slack_ns() as f64;
    let t = i.interval_ns as f64;
    assert!(i.cpu_cores <= (t + tick) / t, "cpu {}", i.cpu_cores);
    let w = i.burst_window_ns as f64;
    assert!(i.burst_cores <= (w + tick) / w, "burst {}", i.burst_cores);
    assert!(
        i.burst_cores >= 2.0 * QUOTA_CORES,
        "burst {}",
        i.burst_cores
    );
    check_memory(i, sampler.sources());

    // What a poll of one container costs (for docs/probes.md; not asserted).
    let (n, t) = (200u32, Instant::now());
    for _ in 0..n {
        sampler.poll(now_ns()).unwrap();
    }
    eprintln!(
        "one poll of a container took {:.1} µs",
        t.elapsed().as_secs_f64() * 1e6 / f64::from(n)
    );
}

#[test]
fn a_removed_container_ends_its_sampler() {
    if !privileged("a_removed_container_ends_its_sampler") {
        return;
    }
    let mut sandbox = Sandbox::new("cpu throttle test").unwrap();
    let gone = sandbox
        .container("gone", Some((QUOTA_US, PERIOD_US)))
        .unwrap();
    let stays = sandbox.container("stays", None).unwrap();
    let layout = sandbox.layout().clone();
    let (mut a, _) = start(&layout, &gone);
    let (mut b, _) = start(&layout, &stays);
    std::thread::sleep(POLL);
    assert_eq!(a.poll(now_ns()).unwrap(), Polled::Sampled);
    // The container's runtime removes it mid-run (empty cgroups can be rmdir'ed; the
    // sandbox's teardown tolerates the directories being gone).
    if let Some(cpu) = &gone.cpu_v1 {
        std::fs::remove_dir(cpu).unwrap();
    }
    std::fs::remove_dir(&gone.cgroup).unwrap();
    std::thread::sleep(POLL);
    let at = now_ns();
    let Polled::Ended { file } = a.poll(at).unwrap() else {
        panic!("the cgroup is gone");
    };
    assert!(
        file.starts_with(&gone.cgroup) || gone.cpu_v1.as_ref().is_some_and(|d| file.starts_with(d)),
        "{}",
        file.display()
    );
    assert_eq!(b.poll(at).unwrap(), Polled::Sampled, "the others continue");
    let i = a.close_interval().expect("one poll before the end");
    assert_eq!(i.polls, 1);
    assert_eq!(a.close_interval(), None);
    assert_eq!(b.close_interval().map(|i| i.polls), Some(1));
}

#[test]
fn every_source_on_this_host_parses_for_the_root_cgroup() {
    if !privileged("every_source_on_this_host_parses_for_the_root_cgroup") {
        return;
    }
    let layout = CgroupLayout::detect().unwrap();
    let dirs = CgroupDirs::of(&layout, Path::new("/"));
    let sources = CgroupSources::resolve(&HostFiles, &dirs).unwrap();
    eprintln!("root cgroup sources: {sources:?}");
    let mut sampler = CpuSampler::start(HostFiles, sources.clone(), now_ns()).unwrap();
    // Give the host (this test at least) some CPU time to count.
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(30) {
        std::hint::black_box(0u64);
    }
    let v2_before = stat(&dirs.unified.join("cpu.stat"))["usage_usec"] * 1_000;
    assert_eq!(sampler.poll(now_ns()).unwrap(), Polled::Sampled);
    let v2_after = stat(&dirs.unified.join("cpu.stat"))["usage_usec"] * 1_000;
    let (_, r) = sampler.last_reading();
    assert!(v2_before <= r.usage_ns && r.usage_ns <= v2_after);
    let i = sampler.close_interval().unwrap();
    assert!(i.usage_ns > 0);

    // What a poll costs (for docs/probes.md; not asserted: timing is the host's business).
    let (n, t) = (200u32, Instant::now());
    for _ in 0..n {
        sampler.poll(now_ns()).unwrap();
    }
    eprintln!(
        "one poll of the root cgroup (every source) took {:.1} µs",
        t.elapsed().as_secs_f64() * 1e6 / f64::from(n)
    );

    match (&sources.throttle, &i.throttle) {
        // The v1 root has cpu.cfs_quota_us = -1: measured, no quota.
        (ThrottleSource::V1 { .. }, Throttling::Measured { quota_us, .. }) => {
            assert_eq!(*quota_us, None)
        }
        // The v2 root has no cpu.max.
        (ThrottleSource::Unavailable { .. }, Throttling::Unavailable { reason }) => {
            assert!(reason.contains("root cgroup"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // The root's memory is the host's in use (MemTotal − MemAvailable), bracketed by two
    // reads of /proc/meminfo around the sample, never the page-cache-inclusive root counters.
    let meminfo = |key: &str| -> u64 {
        let text = std::fs::read_to_string("/proc/meminfo").unwrap();
        let line = text.lines().find_map(|l| l.strip_prefix(key)).unwrap();
        line.trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .unwrap()
            * 1024
    };
    let total = meminfo("MemTotal:");
    match (&sources.memory, &i.memory) {
        (
            MemorySource::Host { .. },
            Memory::Measured {
                current_bytes,
                peak_bytes,
                ..
            },
        ) => {
            assert!(
                *current_bytes > 0 && *current_bytes < total,
                "{current_bytes} of {total}"
            );
            assert_eq!(*peak_bytes, None);
            let used_now = total - meminfo("MemAvailable:");
            // The host moves while the test runs; 256 MiB is a wide, honest bracket.
            assert!(
                current_bytes.abs_diff(used_now) < 256 << 20,
                "sampled {current_bytes}, meminfo now {used_now}"
            );
        }
        other => panic!("{other:?}"),
    }
}
