//! PSI and OOM kills per container, against the cgroup's own files read by the test.
//!
//! One container with a 32 MiB memory limit and no swap runs a shell that doubles a string
//! until the OOM killer kills it (again, until the test has seen two kills), and two busy
//! loops pinned to one CPU (so CPU pressure is not zero). The OOM count must equal the
//! kernel's `oom_kill` (v2 `memory.events`, or v1 `memory.oom_control` on hybrid hosts),
//! and each PSI delta must lie between the file's totals read just before and just after
//! the sampler read it.
//!
//! A second container with a 16 MiB limit writes a 128 MiB file to disk and reads it again
//! and again: its page cache cannot hold it, so every read reclaims and refaults (PSI
//! memory). The probe's memory stall must lie between the file's readings, and the report
//! must name `memory_pressure` for it with that number.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use herd_model::{
    ContainerInterval, ProbeInterval,
    waits::{OomCell, PsiCell},
};
use herd_probe::{
    KernelProbe, ProbeOptions,
    cgroupfs::{PSI_RESOURCES, PressureTotals, parse_pressure},
    containers::ContainerSet,
    sampler::Sampler,
};
use herd_testbed::{Container, Sandbox, workload::pinned};
use integration_test::{kernel_release, privileged};

const LIMIT: u64 = 32 << 20;

/// The kernel's `oom_kill` for the container, and the file it came from.
fn oom_kills(c: &Container) -> (u64, PathBuf) {
    let (file, text) = match &c.memory_v1 {
        Some(v1) => {
            let f = v1.join("memory.oom_control");
            (f.clone(), std::fs::read_to_string(&f).unwrap())
        }
        None => {
            let f = c.cgroup.join("memory.events");
            (f.clone(), std::fs::read_to_string(&f).unwrap())
        }
    };
    let n = text
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .unwrap_or_else(|| panic!("no oom_kill in {}: {text}", file.display()))
        .trim()
        .parse()
        .unwrap();
    (n, file)
}

/// The cgroup's PSI totals; `None` when the kernel has PSI off (Debian's kernels are built
/// with CONFIG_PSI_DEFAULT_DISABLED: the files are absent or unreadable without `psi=1`).
fn psi(c: &Container) -> Option<Vec<PressureTotals>> {
    PSI_RESOURCES
        .iter()
        .map(|r| {
            let f = c.cgroup.join(format!("{r}.pressure"));
            let text = std::fs::read_to_string(&f).ok()?;
            Some(parse_pressure(&text).unwrap_or_else(|| panic!("{} unparsable", f.display())))
        })
        .collect()
}

/// The probe loaded and sampling the whole host, kept in `slot` (declared before the
/// sandbox, so that it is dropped after it).
fn sampler<'a>(slot: &'a mut Option<Sampler>, sb: &Sandbox) -> &'a mut Sampler {
    let probe = KernelProbe::load(&ProbeOptions::default())
        .unwrap_or_else(|e| panic!("loading the probe on Linux {}: {e}", kernel_release()));
    slot.insert(
        Sampler::new(
            probe,
            ContainerSet::default().with_discovery(),
            sb.layout().clone(),
        )
        .unwrap(),
    )
}

fn row<'a>(iv: &'a ProbeInterval, name: &str) -> &'a ContainerInterval {
    iv.containers
        .iter()
        .find(|c| c.container == name)
        .unwrap_or_else(|| panic!("no row {name}"))
}

fn set_limit(c: &Container) {
    set_limit_to(c, LIMIT);
}

fn set_limit_to(c: &Container, limit: u64) {
    let (file, value) = match &c.memory_v1 {
        Some(v1) => (v1.join("memory.limit_in_bytes"), limit.to_string()),
        None => (c.cgroup.join("memory.max"), limit.to_string()),
    };
    std::fs::write(&file, value).unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
    // No swap to escape into (cgroup v2 only; v1 without swap accounting has no such file).
    let swap = c.cgroup.join("memory.swap.max");
    if Path::new(&swap).exists() {
        std::fs::write(&swap, "0").unwrap();
    }
}

#[test]
fn oom_kills_equal_the_memory_cgroups_count_and_psi_deltas_match_the_pressure_files() {
    if !privileged("oom_kills_equal_the_memory_cgroups_count") {
        return;
    }
    // Declared before the sandbox so that it is dropped after it: the spinning processes
    // stop before the programs are detached (under the VM suite's software emulation,
    // unpatching the scheduler's tracepoints while CPU 0 is saturated took Linux 6.1 over
    // 20 s, a soft lockup; on the host it is immediate).
    let mut slot: Option<Sampler> = None;
    let mut sb = Sandbox::new("oom").unwrap();
    let c = sb.container("hog", None).unwrap();
    set_limit(&c);
    for _ in 0..2 {
        sb.spawn(&c, pinned(0, "while :; do :; done")).unwrap();
    }
    let sampler = sampler(&mut slot, &sb);
    let (kills0, file) = oom_kills(&c);
    let psi_before_first = psi(&c);
    sampler.sample().unwrap();
    let psi_after_first = psi(&c);

    // Each hog doubles a string until the OOM killer ends it; the next one starts.
    let deadline = Instant::now() + Duration::from_secs(20);
    while oom_kills(&c).0 < kills0 + 2 {
        assert!(
            Instant::now() < deadline,
            "no OOM kill in 20 s ({})",
            file.display()
        );
        let h = sb
            .spawn(&c, {
                let mut cmd = Command::new("sh");
                cmd.args(["-c", "x=0123456789abcdef; while :; do x=\"$x$x\"; done"]);
                cmd
            })
            .unwrap();
        let _ = sb.child(h).wait();
    }
    std::thread::sleep(Duration::from_millis(200));
    let psi_before_second = psi(&c);
    let iv = sampler.sample().unwrap();
    let psi_after_second = psi(&c);
    let (kills1, _) = oom_kills(&c);

    let hog = row(&iv, "hog");
    match &hog.waits.oom {
        OomCell::Measured { oom_kills } => assert_eq!(
            *oom_kills,
            kills1 - kills0,
            "probe vs {} ({} → {kills1})",
            file.display(),
            kills0
        ),
        other => panic!("OOM kills unavailable: {other:?}"),
    }
    eprintln!("OOM kills {} (from {})", kills1 - kills0, file.display());
    // The report names the container with the kernel's count.
    let found = integration_test::findings::of_probe(vec![iv.clone()]);
    let named = found
        .iter()
        .find(|f| f.kind == "oom_killed" && f.container.as_deref() == Some("hog"))
        .unwrap_or_else(|| panic!("no oom_killed for hog: {found:#?}"));
    assert_eq!(named.numbers["oom_kills"], (kills1 - kills0) as f64);
    eprintln!("{}", named.title);
    // The host row reads /proc/vmstat (and /proc/pressure).
    match row(&iv, "host").waits.oom {
        OomCell::Measured { oom_kills } => assert!(oom_kills >= kills1 - kills0),
        ref other => panic!("host OOM kills: {other:?}"),
    }
    let (
        Some(psi_before_first),
        Some(psi_after_first),
        Some(psi_before_second),
        Some(psi_after_second),
    ) = (
        psi_before_first,
        psi_after_first,
        psi_before_second,
        psi_after_second,
    )
    else {
        // The kernel's truth is "no PSI": the probe must say so, with the reason.
        let PsiCell::Unavailable { reason } = &hog.waits.psi else {
            panic!("no pressure files, yet PSI measured: {:?}", hog.waits.psi);
        };
        assert!(reason.contains("PSI"), "{reason}");
        eprintln!("PSI off on Linux {}: {reason}", kernel_release());
        return;
    };
    let PsiCell::Measured { cpu, memory, io } = &hog.waits.psi else {
        panic!("PSI unavailable: {:?}", hog.waits.psi);
    };
    for (i, (name, got)) in [("cpu", cpu), ("memory", memory), ("io", io)]
        .into_iter()
        .enumerate()
    {
        let got = got.unwrap_or_else(|| panic!("no {name} pressure"));
        // The sampler read the first totals between `psi_before_first` and
        // `psi_after_first`, the second between `psi_before_second` and `psi_after_second`.
        let lo = psi_before_second[i]
            .some_us
            .saturating_sub(psi_after_first[i].some_us);
        let hi = psi_after_second[i].some_us - psi_before_first[i].some_us;
        assert!(
            (lo..=hi).contains(&got.some_us),
            "{name} some: probe {} µs, files say {lo}..{hi}",
            got.some_us
        );
        eprintln!(
            "{name} pressure some {} µs, full {:?} µs",
            got.some_us, got.full_us
        );
    }
    // Two spinning loops on one CPU: half the time one of them waits.
    assert!(cpu.unwrap().some_us > 100_000, "cpu pressure {cpu:?}");
    let host = row(&iv, "host");
    assert!(
        matches!(host.waits.psi, PsiCell::Measured { .. }),
        "{:?}",
        host.waits.psi
    );
}

#[test]
fn a_container_thrashing_its_page_cache_stalls_on_memory_as_its_pressure_file_says() {
    if !privileged("a_container_thrashing_its_page_cache_stalls_on_memory") {
        return;
    }
    let mut slot: Option<Sampler> = None;
    let mut sb = Sandbox::new("thrash").unwrap();
    let c = sb.container("reader", None).unwrap();
    set_limit_to(&c, 16 << 20);
    if psi(&c).is_none() {
        // No PSI on this kernel: nothing to compare (the OOM test checks the reason).
        eprintln!("PSI off on Linux {}", kernel_release());
        return;
    }
    let dir = herd_testkit::TempDir::new("it-thrash");
    let file = dir.join("big");
    let sampler = sampler(&mut slot, &sb);
    let before_first = psi(&c).unwrap();
    sampler.sample().unwrap();
    let after_first = psi(&c).unwrap();
    // Written from inside the container, so its pages are the container's to reclaim.
    let h = sb
        .spawn(&c, {
            let mut cmd = Command::new("sh");
            cmd.arg("-c").arg(format!(
                "dd if=/dev/zero of={f} bs=1M count=128 status=none && sync && \
                 end=$(($(date +%s) + 4)); while [ $(date +%s) -lt $end ]; do cat {f} > /dev/null; done",
                f = file.display()
            ));
            cmd
        })
        .unwrap();
    let st = sb.child(h).wait().unwrap();
    assert!(st.success(), "the reader failed: {st}");
    let before_second = psi(&c).unwrap();
    let iv = sampler.sample().unwrap();
    let after_second = psi(&c).unwrap();
    let row = row(&iv, "reader");
    let PsiCell::Measured {
        memory: Some(memory),
        ..
    } = &row.waits.psi
    else {
        panic!("memory pressure unavailable: {:?}", row.waits.psi);
    };
    let m = PSI_RESOURCES.iter().position(|r| *r == "memory").unwrap();
    let lo = before_second[m]
        .some_us
        .saturating_sub(after_first[m].some_us);
    let hi = after_second[m].some_us - before_first[m].some_us;
    let wall_s = iv.interval_ns as f64 / 1e9;
    eprintln!(
        "reader: memory some {} µs in {wall_s:.1} s (files {lo}..{hi} µs)",
        memory.some_us
    );
    assert!(
        (lo..=hi).contains(&memory.some_us),
        "memory some: probe {} µs, files say {lo}..{hi}",
        memory.some_us
    );
    // The premise: re-reading a file eight times the limit stalls on reclaim (about 15 %
    // of the time here).
    assert!(
        lo as f64 / 1e6 >= 0.10 * wall_s,
        "the reader stalled on memory only {lo} µs in {wall_s:.1} s: the test made no pressure"
    );
    let found = integration_test::findings::of_probe(vec![iv.clone()]);
    let named = found
        .iter()
        .find(|f| f.kind == "memory_pressure" && f.container.as_deref() == Some("reader"))
        .unwrap_or_else(|| panic!("no memory_pressure for reader: {found:#?}"));
    eprintln!("{}", named.title);
    let _ = std::fs::remove_file(&file);
}
