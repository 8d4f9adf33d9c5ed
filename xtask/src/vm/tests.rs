use super::*;

#[test]
fn module_names_and_dependencies() {
    assert_eq!(
        module_name(Path::new("/x/tcp_diag.ko.xz")).as_deref(),
        Some("tcp_diag")
    );
    assert_eq!(
        module_name(Path::new("/x/nf-nat.ko")).as_deref(),
        Some("nf_nat")
    );
    assert_eq!(module_name(Path::new("/x/modules.dep")), None);
    let ko = b"\x7fELF...\0license=GPL\0depends=inet_diag,foo\0intree=Y\0";
    assert_eq!(modinfo_depends(ko), ["inet_diag", "foo"]);
    assert!(modinfo_depends(b"\0depends=\0").is_empty());
    assert!(modinfo_depends(b"no modinfo").is_empty());
}

#[test]
fn lines_match_only_their_kernel_images_and_the_core_names_the_suite() {
    let (v61, v612) = (&LINES[0], &LINES[1]);
    assert!(v61.full && v61.matches("linux-image-6.1.0-57-cloud-amd64"));
    for other in [
        "linux-image-6.1.0-57-cloud-amd64-dbg",
        "linux-image-6.1.0-57-cloud-amd64-unsigned",
        "linux-image-6.1.0--cloud-amd64",
        "linux-image-6.12.117+deb12-cloud-amd64",
    ] {
        assert!(!v61.matches(other), "{other}");
    }
    assert!(v612.matches("linux-image-6.12.117+deb12-cloud-amd64"));
    assert!(!v612.matches("linux-image-6.12-cloud-amd64"));
    for (name, _) in CORE {
        assert!(SUITE.iter().any(|(n, _)| n == name), "{name}");
    }
    let core = suite_for(false, &[], None);
    let inet = core
        .iter()
        .find(|r| r.name == "inet_sock_set_state")
        .unwrap();
    assert_eq!(inet.expect, Some(2));
    assert!(inet.args.contains(&"--exact".to_owned()));
    let types = core.iter().find(|r| r.name == "program_types").unwrap();
    assert_eq!(types.expect, None);
    let full = suite_for(true, &["cpu_throttle".into()], None);
    assert_eq!(full.len(), 1);
    assert_eq!(full[0].expect, None);
    assert!(!full[0].args.contains(&"--exact".to_owned()));
}

#[test]
fn libtest_closing_lines_are_counted() {
    assert_eq!(
        test_result(
            "test result: ok. 5 passed; 0 failed; 0 ignored; 0 measured; 1 filtered out; \
             finished in 19.89s"
        ),
        Some((5, 0))
    );
    assert_eq!(
        test_result("test result: FAILED. 4 passed; 2 failed; 0 ignored; 0 measured"),
        Some((4, 2))
    );
    assert_eq!(test_result("test a ... ok"), None);
}

#[test]
fn cpio_entries_are_newc_and_aligned() {
    let dir = herd_testkit::TempDir::new("cpio");
    let path = dir.join("a.cpio");
    let mut c = Cpio::create(&path).unwrap();
    c.bytes("/a/b/c", 0o644, b"hello").unwrap();
    c.finish().unwrap();
    let data = fs::read(&path).unwrap();
    // Entries a, a/b, a/b/c, the trailer; every header starts 4-aligned.
    let magic = b"070701";
    let at: Vec<usize> = data
        .windows(6)
        .enumerate()
        .filter(|(_, w)| w == magic)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(at.len(), 4);
    assert!(at.iter().all(|i| i % 4 == 0), "{at:?}");
    let text = String::from_utf8_lossy(&data);
    assert!(text.contains("a/b/c\0") && text.contains("hello"));
    assert!(text.contains("TRAILER!!!"));
    assert_eq!(data.len() % 4, 0);
}

#[test]
fn a_tcg_guest_that_panicked_or_locked_up_is_an_emulation_fault_and_a_failed_test_is_not() {
    let report = |accel, problem: &str| GuestReport {
        release: "6.1.0-57-cloud-amd64".into(),
        accel,
        boot: Duration::ZERO,
        total: Duration::ZERO,
        passed: 3,
        failed: 0,
        matrix: Vec::new(),
        problems: vec![problem.to_owned()],
    };
    // The console tails of the two faults seen in CI.
    let panic = "the guest stopped before it finished; qemu: ; its console:\n\
                 [ 12.1] Kernel panic - not syncing: softlockup: hung tasks";
    let lockup = "the guest did not finish in 240s and was killed while running lifecycle; \
                  its console:\n[ 76.6] watchdog: BUG: soft lockup - CPU#0 stuck for 26s! \
                  [programs_detach:1251]";
    assert_eq!(emulation_fault(&report("tcg", panic)), Some("panicked"));
    assert_eq!(emulation_fault(&report("tcg", lockup)), Some("locked up"));
    assert_eq!(emulation_fault(&report("kvm", panic)), None);
    let failed = "lifecycle failed (exit code 101); its output in the guest:\nassertion failed";
    assert_eq!(emulation_fault(&report("tcg", failed)), None);
    // A lockup whose line is above the console's last 40 lines (a 6.1 guest in CI): the
    // tail keeps it, so the guest is booted again.
    let console = format!(
        "[ 52.1] watchdog: BUG: soft lockup - CPU#1 stuck for 22s!\n{}",
        "[ 80.5]  ? do_syscall_64+0x69/0x90\n".repeat(60)
    );
    let kept = super::qemu::tail(&console, 40);
    assert!(
        kept.starts_with("[ 52.1] watchdog: BUG: soft lockup"),
        "{kept}"
    );
    assert_eq!(kept.lines().count(), 42);
    let stopped = format!("the guest stopped before it finished; qemu: ; its console:\n{kept}");
    assert_eq!(emulation_fault(&report("tcg", &stopped)), Some("locked up"));
}
