//! The CLI's contract for bad input and missing privileges.

use std::os::unix::process::CommandExt as _;

use integration_test::{herd_cmd, privileged};

#[test]
fn without_capabilities_the_probe_says_which_and_exits_2() {
    if !privileged("without_capabilities_the_probe_says_which_and_exits_2") {
        return;
    }
    let mut cmd = herd_cmd();
    cmd.args(["probe", "--duration", "1s"]);
    // SAFETY: setgid/setuid between fork and exec; drops every capability (uid 65534).
    unsafe {
        cmd.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(65534) != 0
                || libc::setuid(65534) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("CAP_BPF") && err.contains("CAP_PERFMON") && err.contains("sudo"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line, got: {err}");
}

#[test]
fn an_unknown_container_cgroup_is_named_and_alternatives_listed() {
    let out = herd_cmd()
        .args([
            "probe",
            "--container",
            "gw=/no/such/cgroup",
            "--duration",
            "1s",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("/no/such/cgroup") && err.contains("cgroups under"),
        "{err}"
    );
}

#[test]
fn a_too_short_interval_is_refused_by_the_parser() {
    let out = herd_cmd()
        .args(["probe", "--interval", "10ms"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("100ms minimum"), "{err}");
}
