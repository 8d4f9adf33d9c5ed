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
fn an_unknown_container_cgroup_is_named_and_alternatives_listed_and_exits_2() {
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
    // Bad input: the README's exit code 2, not 1 (a failed run).
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("/no/such/cgroup") && err.contains("cgroups under"),
        "{err}"
    );
    assert!(
        !err.contains("(os error 2): No such file or directory (os error 2)"),
        "the cause once: {err}"
    );
    // What herd was doing, where the path is taken from, and no listed cgroup that reads as
    // missing (it printed `  /docker: No such file or directory` for a /docker that exists).
    assert!(
        err.contains("looking up the cgroup of --container gw=/no/such/cgroup")
            && err.contains("/proc/PID/cgroup")
            && err.contains("leave --container out"),
        "{err}"
    );
    for line in err.lines().filter(|l| l.starts_with("  /")) {
        assert!(
            !line.contains("No such file"),
            "a listed cgroup: {line:?}\n{err}"
        );
    }
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

#[test]
fn scenario_errors_exit_2_and_say_each_cause_once() {
    let dir = herd_testkit::TempDir::new("cli-scenario");
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[target]\nurl = \"http://127.0.0.1:1/\"\n[[op]\n").unwrap();
    let latin1 = dir.join("latin1.toml");
    std::fs::write(&latin1, b"# caf\xE9\n[target]\n").unwrap();
    let missing = dir.join("missing.toml");
    for (file, says) in [
        (&bad, "bad.toml:3:"),
        (
            &latin1,
            "latin1.toml:1:6: the scenario is not UTF-8: byte 0xE9 at byte offset 5",
        ),
        (
            &missing,
            "missing.toml: No such file or directory (os error 2)",
        ),
    ] {
        for cmd in ["drive", "run"] {
            let out = herd_cmd().arg(cmd).arg(file).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.code(),
                Some(2),
                "herd {cmd} {}: {err}",
                file.display()
            );
            assert!(err.contains(says), "herd {cmd}: {err}");
            let first = err.lines().next().unwrap_or_default();
            assert_eq!(
                first.matches("os error").count() + first.matches("not UTF-8").count(),
                usize::from(file != &bad),
                "one cause, once: {err}"
            );
        }
    }
}

/// `herd probe --no-runq`: nothing is attached to the scheduler's switch (the one hook that
/// costs every context switch of the host), and every container's run-queue cell says why
/// instead of showing 0; the rest of the probe runs as usual.
#[test]
fn no_runq_leaves_the_switch_alone_and_every_cell_says_why() {
    if !privileged("no_runq_leaves_the_switch_alone_and_every_cell_says_why") {
        return;
    }
    let dir = herd_testkit::TempDir::new("cli-no-runq");
    let out = dir.join("probe.jsonl");
    let mut child = herd_cmd()
        .args([
            "probe",
            "--no-runq",
            "--duration",
            "3s",
            "--interval",
            "1s",
            "--out",
        ])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The links the running probe holds, by the tracepoint they hang on.
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    let fdinfo = std::path::PathBuf::from(format!("/proc/{}/fdinfo", child.id()));
    let hooks: Vec<String> = std::fs::read_dir(&fdinfo)
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|info| {
            let tp = info.lines().find_map(|l| l.strip_prefix("tp_name:"))?;
            Some(tp.trim().to_owned())
        })
        .collect();
    assert!(child.wait().unwrap().success());
    assert!(
        hooks.iter().any(|h| h == "inet_sock_set_state"),
        "the socket programs stay: {hooks:?}"
    );
    assert!(
        !hooks.iter().any(|h| h.starts_with("sched_")),
        "--no-runq attached {hooks:?}"
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let mut cells = 0;
    for line in text.lines() {
        let iv: serde_json::Value = serde_json::from_str(line).unwrap();
        for c in iv["containers"].as_array().unwrap() {
            let runq = &c["waits"]["runq"];
            assert_eq!(runq["state"], "unavailable", "{c}");
            assert!(
                runq["reason"].as_str().unwrap().contains("--no-runq"),
                "{runq}"
            );
            cells += 1;
        }
    }
    assert!(cells >= 2, "{text}");
}
