//! Booting QEMU on the initramfs and reading the tests' results off its second serial port.

use super::*;

/// QEMU, killed if still running when dropped.
pub(super) struct Qemu(Child);

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where the decision "KVM does not boot a guest here" is remembered, keyed by the host's
/// kernel and QEMU's version, so later runs do not wait for a stuck KVM boot again.
pub(super) fn accel_memo() -> PathBuf {
    vm_dir().join("accel")
}

pub(super) fn host_key() -> String {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let qemu = output(Command::new("qemu-system-x86_64").arg("--version")).unwrap_or_default();
    format!(
        "{} {}",
        release.trim(),
        qemu.lines().next().unwrap_or("").trim()
    )
}

/// Lines from the guest's test port, `\r` stripped, as they arrive.
pub(super) enum Event {
    Line(String),
    Closed,
}

pub(super) struct Boot {
    qemu: Qemu,
    lines: mpsc::Receiver<Event>,
    started: Instant,
}

/// The guest kernel's command line. `cgroup_no_v1=all`: no controller can be bound to a v1
/// hierarchy, as on a pure v2 host. Under TCG the TSC is QEMU's virtual clock, steady and
/// shared by the vCPUs, so the guest may use it as its clocksource (it picks the HPET
/// otherwise, and then CLOCK_MONOTONIC and the scheduler's clock drift apart). Parameters the
/// kernel does not know reach `/init` as environment variables: the emulation allowance of
/// the CPU tests (`cpu_throttle.rs`, `tick_slack_ns`). `softlockup_panic=1`: a guest whose
/// vCPUs lock up (seen under TCG while the kernel patched its own code) panics after the
/// watchdog's 20 s instead of hanging to the run's timeout, so the stage can boot it once more.
pub(super) fn command_line(accel: &str) -> String {
    let mut line = String::from("console=ttyS0 quiet panic=-1 cgroup_no_v1=all");
    if accel == "tcg" {
        line.push_str(&format!(
            " clocksource=tsc tsc=reliable softlockup_panic=1 \
             HERD_TEST_EMULATION_SLACK_MS={TCG_SLACK_MS}"
        ));
    }
    line
}

pub(super) fn spawn_qemu(
    kernel: &Kernel,
    initrd: &Path,
    console: &Path,
    accel: &str,
) -> Result<Boot> {
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-accel", accel, "-m", "2048", "-smp", "2"]);
    cmd.arg("-kernel")
        .arg(kernel.dir.join("vmlinuz"))
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(command_line(accel))
        .args([
            "-display",
            "none",
            "-monitor",
            "none",
            "-no-reboot",
            "-nic",
            "none",
            "-serial",
        ])
        .arg(format!("file:{}", console.display()))
        .args(["-serial", "stdio"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    eprintln!("xtask: {}", show(&cmd));
    let mut child = cmd
        .spawn()
        .context("starting qemu-system-x86_64 (`cargo xtask setup` installs qemu-system-x86)")?;
    let stdout = child.stdout.take().context("qemu stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).split(b'\n') {
            let Ok(line) = line else { break };
            let line = String::from_utf8_lossy(&line)
                .trim_end_matches('\r')
                .to_owned();
            if tx.send(Event::Line(line)).is_err() {
                return;
            }
        }
        let _ = tx.send(Event::Closed);
    });
    Ok(Boot {
        qemu: Qemu(child),
        lines: rx,
        started: Instant::now(),
    })
}

pub(super) fn qemu_stderr(qemu: &mut Qemu) -> String {
    let mut err = String::new();
    if let Some(mut e) = qemu.0.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    err.trim().to_owned()
}

/// Waits for the guest's first line. `Err` carries why it did not come.
pub(super) fn wait_booted(boot: &mut Boot, timeout: Duration) -> Result<String, String> {
    let deadline = boot.started + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match boot.lines.recv_timeout(left) {
            Ok(Event::Line(l)) if l.starts_with("herd-vm: booted") => return Ok(l),
            Ok(Event::Line(_)) => {}
            Ok(Event::Closed) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                let _ = boot.qemu.0.wait();
                return Err(format!("qemu exited: {}", qemu_stderr(&mut boot.qemu)));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = boot.qemu.0.kill();
                let _ = boot.qemu.0.wait();
                return Err(format!(
                    "no output from the guest in {}s",
                    timeout.as_secs()
                ));
            }
        }
    }
}

/// What a guest kernel prints when it faults itself: a panic, a lockup, an RCU stall.
pub(super) const KERNEL_FAULTS: [&str; 4] = [
    "Kernel panic",
    "soft lockup",
    "hard LOCKUP",
    "detected stalls",
];

/// The last `n` lines of a console, after the lines above them that name a kernel fault:
/// what says why a guest stopped is often further up than its backtrace (a 6.1 guest's
/// soft-lockup line was above the 40 lines kept, and the stage did not boot it again).
pub(super) fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(n);
    let faults: Vec<&str> = lines[..from]
        .iter()
        .copied()
        .filter(|l| KERNEL_FAULTS.iter().any(|f| l.contains(f)))
        .take(4)
        .collect();
    let mut out = String::new();
    if !faults.is_empty() {
        out = faults.join("\n") + "\n…\n";
    }
    out + &lines[from..].join("\n")
}

pub(super) fn run_guest(
    kernel: &Kernel,
    initrd: &Path,
    dir: &Path,
    suite: &Suite,
    accel: Accel,
) -> Result<GuestReport> {
    let console = dir.join("console.log");
    let key = host_key();
    let memo = fs::read_to_string(accel_memo()).unwrap_or_default();
    let try_kvm = match accel {
        Accel::Kvm => true,
        Accel::Tcg => false,
        Accel::Auto => {
            Path::new("/dev/kvm").exists() && !memo.lines().any(|l| l == format!("tcg {key}"))
        }
    };
    let tag = format!("[{}]", kernel.release);
    let (mut boot, accel_name, first) = 'boot: {
        if try_kvm {
            let mut boot = spawn_qemu(kernel, initrd, &console, "kvm")?;
            match wait_booted(&mut boot, BOOT_TIMEOUT_KVM) {
                Ok(first) => break 'boot (boot, "kvm", first),
                Err(why) if accel == Accel::Auto => {
                    eprintln!(
                        "xtask: vm {}: KVM did not boot the guest ({why}); using TCG, and \
                         remembering that in {} for this host kernel and QEMU",
                        kernel.release,
                        accel_memo().display()
                    );
                    let _ = fs::write(accel_memo(), format!("tcg {key}\n"));
                }
                Err(why) => bail!(
                    "vm {}: KVM did not boot the guest: {why}\nconsole:\n{}",
                    kernel.release,
                    tail(&fs::read_to_string(&console).unwrap_or_default(), 40)
                ),
            }
        }
        let mut boot = spawn_qemu(kernel, initrd, &console, "tcg")?;
        match wait_booted(&mut boot, BOOT_TIMEOUT_TCG) {
            Ok(first) => (boot, "tcg", first),
            Err(why) => bail!(
                "vm {} ({}): the guest did not boot: {why}\nconsole:\n{}",
                kernel.release,
                kernel.package,
                tail(&fs::read_to_string(&console).unwrap_or_default(), 40)
            ),
        }
    };
    let booted = boot.started.elapsed();
    println!("{tag} {first}");

    let mut report = GuestReport {
        release: kernel.release.clone(),
        accel: accel_name,
        boot: booted,
        total: Duration::ZERO,
        passed: 0,
        failed: 0,
        matrix: Vec::new(),
        problems: Vec::new(),
    };
    // The output of the binary running now, kept to show when it fails.
    let mut current: Option<(String, Vec<String>)> = None;
    // Tests run per binary (passed + failed), from its closing line.
    let mut ran: BTreeMap<String, u32> = BTreeMap::new();
    let deadline = Instant::now() + RUN_TIMEOUT;
    let mut done = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = match boot.lines.recv_timeout(left) {
            Ok(Event::Line(l)) => l,
            Ok(Event::Closed) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let _ = boot.qemu.0.kill();
                report.problems.push(format!(
                    "the guest did not finish in {}s and was killed{}; its console:\n{}",
                    RUN_TIMEOUT.as_secs(),
                    current
                        .as_ref()
                        .map(|(n, out)| format!(
                            " while running {n}, whose output was:\n{}",
                            out.join("\n")
                        ))
                        .unwrap_or_default(),
                    tail(&fs::read_to_string(&console).unwrap_or_default(), 40)
                ));
                break;
            }
        };
        println!("{tag} +{:.1}s {line}", boot.started.elapsed().as_secs_f64());
        if let Some(name) = line.strip_prefix("herd-vm: run ") {
            current = Some((name.to_owned(), Vec::new()));
        } else if let Some(rest) = line.strip_prefix("herd-vm: exit ") {
            let (name, code) = rest.split_once(' ').unwrap_or((rest, "?"));
            ran.entry(name.to_owned()).or_default();
            let out = current.take().map(|(_, o)| o).unwrap_or_default();
            if code != "0" {
                let why = if code == "137" {
                    format!("killed after {BINARY_TIMEOUT_S}s in the guest")
                } else {
                    format!("exit code {code}")
                };
                report.problems.push(format!(
                    "{name} failed ({why}); its output in the guest:\n{}",
                    failures_or_all(&out)
                ));
            }
        } else if line == "herd-vm: done" {
            done = true;
        } else if let Some(p) = line.strip_prefix("herd-vm: problem: ") {
            report.problems.push(p.to_owned());
        } else {
            if let Some((passed, failed)) = test_result(&line) {
                report.passed += passed;
                report.failed += failed;
                if let Some((name, _)) = &current {
                    *ran.entry(name.clone()).or_default() += passed + failed;
                }
            } else if let Some(m) = line.find("matrix: ") {
                // With --nocapture a line can follow libtest's `test name ... ` on one line.
                let m = line[m + "matrix: ".len()..].to_owned();
                if !report.matrix.contains(&m) {
                    report.matrix.push(m);
                }
            }
            if let Some((_, out)) = current.as_mut() {
                out.push(line);
            }
        }
    }
    // poweroff -f ends QEMU (-no-reboot); give it a moment before the guard kills it.
    let stop = Instant::now() + Duration::from_secs(10);
    while boot.qemu.0.try_wait()?.is_none() && Instant::now() < stop {
        std::thread::sleep(Duration::from_millis(50));
    }
    report.total = boot.started.elapsed();
    if !done && report.problems.is_empty() {
        report.problems.push(format!(
            "the guest stopped before it finished; qemu: {}; its console:\n{}",
            qemu_stderr(&mut boot.qemu),
            tail(&fs::read_to_string(&console).unwrap_or_default(), 40)
        ));
    }
    for run in suite.iter().filter(|_| done) {
        match (ran.get(run.name), run.expect) {
            (None, _) => report
                .problems
                .push(format!("{} never ran in the guest", run.name)),
            (Some(&n), Some(want)) if n != want => report.problems.push(format!(
                "{} ran {n} of the {want} tests the suite names (renamed? see CORE in \
                 xtask/src/vm/mod.rs)",
                run.name
            )),
            _ => {}
        }
    }
    Ok(report)
}

/// `(passed, failed)` from libtest's closing line, `test result: ok. 5 passed; 0 failed; …`.
pub(super) fn test_result(line: &str) -> Option<(u32, u32)> {
    let rest = line.strip_prefix("test result: ")?;
    let count = |what: &str| {
        rest.split(';')
            .find_map(|part| part.trim().rsplit_once(' ').filter(|(_, w)| *w == what))
            .and_then(|(n, _)| n.rsplit(' ').next()?.parse().ok())
    };
    Some((count("passed")?, count("failed")?))
}

/// The failure section of a libtest run (each failed test's captured output and panic), or
/// the whole output when there is none (a crash, a kill).
pub(super) fn failures_or_all(out: &[String]) -> String {
    match out.iter().position(|l| l == "failures:") {
        Some(i) => out[i..].join("\n"),
        None => out.join("\n"),
    }
}
