//! Run-queue delay (`tp_btf/sched_switch`) per container, checked against the kernel's own
//! per-task schedstat: `/proc/PID/task/TID/schedstat` field 2, `run_delay`, the ns each
//! thread spent runnable and waiting for a CPU (`sched_info_arrive` and
//! `sched_info_dequeue`, kernel/sched/stats.h), and field 3, `pcount`, the switch-ins that
//! ended such a wait (6.1+: `sched_info_arrive` returns early for the others), summed over
//! the container's threads.
//!
//! Three containers, no quota on any: `noisy` spins on CPU 0 and on CPU 1, `victim` runs a
//! pipe (`yes | while read`) on CPU 0, so its threads wait both after wakeups and after
//! preemptions, and `mover` spins while the test moves it between CPU 0 and CPU 1 every
//! 10 ms (`sched_setaffinity`), so it is often migrated while it waits: the kernel then adds
//! the wait so far to `run_delay` at the migration (`sched_info_dequeue`), a part the
//! enqueue stamp alone does not show. Those threads live for the whole test, so the sum over
//! `cgroup.threads` read before and after covers every wait. A fourth, `churner`, runs short
//! processes one after another on CPU 0 (each spins a few ms and exits), whose waits end with
//! them: `herd-workload churn` starts each, reads its final schedstat while it is a zombie
//! (a dying process preempted by the parent it wakes still waits for a CPU to finish dying),
//! writes it to a file, then reaps it. The churner's truth at a read is its live threads'
//! schedstat plus the lines of the processes that ended.

use std::{collections::HashMap, path::Path, time::Duration};

use herd_model::{ProbeInterval, waits::RunqCell};
use herd_probe::{
    KernelProbe, OWN_ROW, ProbeOptions, RunqPrograms, WaitOptions, containers::ContainerSet,
    sampler::Sampler,
};
use herd_testbed::{
    Container, Sandbox,
    workload::{pin, pinned},
};
use integration_test::{kernel_release, privileged, workload_cmd};

/// Sums of `run_delay` (ns) and `pcount` over every thread of the cgroup.
fn schedstat(c: &Container) -> (u64, u64) {
    threads(c)
        .into_iter()
        // A thread is in /proc/<tid> too (hidden from readdir, but reachable by name).
        .map(|tid| task_schedstat(&Path::new("/proc").join(tid)))
        .fold((0, 0), |(d, n), (a, b)| (d + a, n + b))
}

/// The thread ids of the cgroup (`cgroup.threads`).
fn threads(c: &Container) -> Vec<String> {
    std::fs::read_to_string(c.cgroup.join("cgroup.threads"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `run_delay` and `pcount` of one task (`/proc/PID`), or zeros when it is gone.
fn task_schedstat(proc: &Path) -> (u64, u64) {
    std::fs::read_to_string(proc.join("schedstat"))
        .ok()
        .and_then(|s| {
            let mut f = s.split_whitespace().skip(1);
            Some((
                f.next()?.parse::<u64>().ok()?,
                f.next()?.parse::<u64>().ok()?,
            ))
        })
        .unwrap_or((0, 0))
}

/// The `PID RUN_DELAY PCOUNT` lines `herd-workload churn` wrote, by pid.
fn ended(path: &Path) -> HashMap<String, (u64, u64)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let pid = f.next()?.to_owned();
            Some((pid, (f.next()?.parse().ok()?, f.next()?.parse().ok()?)))
        })
        .collect()
}

/// A file removed when the test ends, also when it fails.
struct Removed(std::path::PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn runq_of(iv: &ProbeInterval, name: &str) -> (u64, u64) {
    let c = iv
        .containers
        .iter()
        .find(|c| c.container == name)
        .unwrap_or_else(|| panic!("no row {name} in {:?}", names(iv)));
    match &c.waits.runq {
        RunqCell::Measured {
            total_ns, count, ..
        } => (*total_ns, *count),
        RunqCell::Unavailable { reason } => {
            panic!(
                "run-queue delay of {name} unavailable on Linux {}: {reason}",
                kernel_release()
            )
        }
    }
}

fn names(iv: &ProbeInterval) -> Vec<&str> {
    iv.containers.iter().map(|c| c.container.as_str()).collect()
}

#[test]
fn runq_delay_per_container_matches_schedstat_and_herds_own_threads_have_their_row() {
    if !privileged("runq_delay_per_container_matches_schedstat") {
        return;
    }
    check(RunqPrograms::Auto, true, "tp_btf");
}

/// The default: no program on a context switch, a walk of the host's threads per poll that
/// reads the scheduler's counters themselves (the same ones schedstat prints).
#[test]
fn runq_delay_of_the_task_walk_matches_schedstat() {
    if !privileged("runq_delay_of_the_task_walk_matches_schedstat") {
        return;
    }
    check(RunqPrograms::Auto, false, "iter/task");
}

/// The fallback raw tracepoints, which kernels without BTF tracepoints or CONFIG_SCHED_INFO
/// get, against the same truth.
#[test]
fn runq_delay_of_the_raw_tracepoint_fallback_matches_schedstat() {
    if !privileged("runq_delay_of_the_raw_tracepoint_fallback_matches_schedstat") {
        return;
    }
    check(RunqPrograms::Raw, true, "raw_tp");
}

/// One test at a time: both pin busy loops to the same CPUs.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn check(programs: RunqPrograms, per_wait: bool, hook: &str) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Declared before the sandbox so that it is dropped after it (see the end).
    let mut slot: Option<Sampler> = None;
    let mut sb = Sandbox::new(&format!("runq-{}", hook.replace('/', "-"))).unwrap();
    let victim = sb.container("victim", None).unwrap();
    let noisy = sb.container("noisy", None).unwrap();
    let mover = sb.container("mover", None).unwrap();
    sb.spawn(&noisy, pinned(0, "while :; do :; done")).unwrap();
    sb.spawn(&noisy, pinned(1, "while :; do :; done")).unwrap();
    sb.spawn(&victim, pinned(0, "yes | while read l; do :; done"))
        .unwrap();
    let moving = sb.spawn(&mover, pinned(0, "while :; do :; done")).unwrap();
    let moving = sb.child(moving).id() as i32;
    let churner = sb.container("churner", None).unwrap();
    let lines = Removed(std::env::temp_dir().join(format!(
        "herd-runq-churn-{}-{}",
        std::process::id(),
        hook.replace('/', "-")
    )));
    let mut churn = workload_cmd();
    churn
        .arg("churn")
        .arg("--out")
        .arg(&lines.0)
        .args(["--deadline", "60s"]);
    sb.spawn(&churner, churn).unwrap();
    let probe = KernelProbe::load_with(
        &ProbeOptions::default(),
        &WaitOptions {
            own_tgid: Some(std::process::id()),
            programs,
            per_wait,
            ..WaitOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("loading the probe on Linux {}: {e}", kernel_release()));
    assert_eq!(probe.runq_unavailable(), None);
    assert_eq!(
        probe.runq_hook(),
        Some(hook),
        "run-queue programs on Linux {}",
        kernel_release()
    );
    let sampler = slot.insert(
        Sampler::new(
            probe,
            ContainerSet::default().with_discovery(),
            sb.layout().clone(),
        )
        .unwrap(),
    );
    // Let the processes settle into their pipe and be discovered.
    std::thread::sleep(Duration::from_millis(300));
    let all = [
        ("victim", &victim),
        ("noisy", &noisy),
        ("mover", &mover),
        ("churner", &churner),
    ];
    // The churner's truth: its live threads' schedstat, read first, then the lines of the
    // processes that ended (taken for a process that ended between the two).
    let read = || -> HashMap<&str, (u64, u64)> {
        all.iter()
            .map(|(n, c)| match *n {
                "churner" => {
                    let live: Vec<(String, (u64, u64))> = threads(c)
                        .into_iter()
                        .map(|tid| {
                            let s = task_schedstat(&Path::new("/proc").join(&tid));
                            (tid, s)
                        })
                        .collect();
                    let ended = ended(&lines.0);
                    let (d, k) = live
                        .into_iter()
                        .filter(|(tid, _)| !ended.contains_key(tid))
                        .map(|(_, s)| s)
                        .chain(ended.values().copied())
                        .fold((0, 0), |(d, n), (a, b)| (d + a, n + b));
                    (*n, (d, k))
                }
                _ => (*n, schedstat(c)),
            })
            .collect()
    };
    let before = read();
    sampler.sample().unwrap();
    let mut cpu = 0;
    for _ in 0..20 {
        for _ in 0..10 {
            std::thread::sleep(Duration::from_millis(10));
            cpu = 1 - cpu;
            pin(moving, cpu).unwrap();
        }
        sampler.poll_cpu();
    }
    // Read right before the sample, as `before` was: the sample reads the kernel map first
    // thing, then spends a while on cgroupfs and the namespaces (long under emulation), which
    // must not fall inside one bracket and outside the other.
    let after = read();
    let iv = sampler.sample().unwrap();
    for (name, _) in all {
        let truth = after[name].0 - before[name].0;
        let switch_ins = after[name].1 - before[name].1;
        let (probe_ns, count) = runq_of(&iv, name);
        eprintln!(
            "{hook} {name}: probe {:.1} ms in {count} waits, schedstat run_delay {:.1} ms in {switch_ins}",
            probe_ns as f64 / 1e6,
            truth as f64 / 1e6
        );
        // Three or four busy threads per CPU for 2 s: each waits more than half the time.
        assert!(truth > 500_000_000, "{name} hardly waited: {truth} ns");
        let diff = probe_ns.abs_diff(truth) as f64 / truth as f64;
        // The fallback times a wait with one global clock (`bpf_ktime_get_ns`); schedstat
        // adds a migrated wait's two parts on the two CPUs' run-queue clocks. Under software
        // emulation (a TCG guest, whose vCPU threads the host preempts while guest time runs
        // on) those clocks drift apart: the mover's fallback total came out 4–19 % above
        // schedstat's there, never on the host. The design `herd` runs by default reads the
        // run-queue clocks themselves and keeps 10 % everywhere.
        let emulated = std::env::var_os("HERD_TEST_EMULATION_SLACK_MS").is_some();
        let allowed = if emulated && hook == "raw_tp" && name == "mover" {
            0.25
        } else {
            0.10
        };
        assert!(
            diff <= allowed,
            "{name}: run-queue delay {probe_ns} ns vs schedstat {truth} ns ({:.1} % apart)",
            diff * 100.0
        );
        assert!(
            count.abs_diff(switch_ins) as f64 <= 0.10 * switch_ins as f64,
            "{name}: {count} waits vs schedstat's {switch_ins} switch-ins that ended one"
        );
        // The 100 ms windows add up to the interval (each read of the map is a few µs away
        // from the snapshot's).
        let c = iv.containers.iter().find(|c| c.container == name).unwrap();
        let windows: u64 = c.waits.windows.iter().filter_map(|w| w.runq_ns).sum();
        // One per 100 ms poll; the walk keeps to 1 % of a CPU, so where a walk is slow (a
        // TCG guest) the polls
        // between walks leave their windows open and fewer, longer windows hold the same sum.
        eprintln!("{hook} {name}: {} windows", c.waits.windows.len());
        let min_windows = if emulated && hook == "iter/task" {
            4
        } else {
            15
        };
        assert!(
            c.waits.windows.len() >= min_windows,
            "{name}: {} windows",
            c.waits.windows.len()
        );
        assert!(
            windows.abs_diff(probe_ns) as f64 <= 0.10 * probe_ns as f64,
            "{name}: windows sum {windows} ns, interval {probe_ns} ns"
        );
        // One window per poll, back to back, ending with the interval (how late a poll comes
        // is the test's doing, not the probe's: under emulation one came a second late).
        for w in c.waits.windows.windows(2) {
            assert!(
                w[0].start_ns < w[0].end_ns && w[0].end_ns == w[1].start_ns,
                "{w:?}"
            );
        }
        let last = c.waits.windows.last().unwrap();
        assert!(last.end_ns >= iv.at_ns, "{last:?} ends before the interval");
    }
    // The report over the interval: victim waited for a CPU with no quota anywhere —
    // cpu_contention names it, with the delay schedstat saw; nothing says "not the CPU" or
    // blames a quota.
    let found = integration_test::findings::of_probe(vec![iv.clone()]);
    let kinds = integration_test::findings::kinds(&found);
    let named = found
        .iter()
        .find(|f| f.kind == "cpu_contention" && f.container.as_deref() == Some("victim"))
        .unwrap_or_else(|| panic!("no cpu_contention for victim: {found:#?}"));
    eprintln!("{}", named.title);
    let truth = (after["victim"].0 - before["victim"].0) as f64;
    let said = named.numbers["runq_total_s"] * 1e9;
    assert!(
        (said - truth).abs() <= 0.10 * truth,
        "cpu_contention says {said} ns, schedstat {truth} ns"
    );
    for k in ["latency_not_cpu", "cpu_saturated", "throttling_bursts"] {
        assert!(!kinds.contains(&k), "{k} named: {found:#?}");
    }
    // This test's own threads (sleeping and waking every 100 ms) are herd's row, not host's.
    let (_, own_waits) = runq_of(&iv, OWN_ROW);
    assert!(own_waits > 0, "no wait of this process was counted apart");
    assert_eq!(iv.lost, 0, "the probe lost events");
    // The spinning processes go before the programs are detached: under software emulation
    // (the VM suite's TCG guests) unpatching the scheduler's tracepoints while CPU 0 is
    // saturated took Linux 6.1 over 20 s (a soft lockup); on the host it is immediate.
    drop(sb);
    drop(slot);
}
