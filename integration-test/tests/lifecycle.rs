//! Nothing herd loads outlives it: programs detach on normal exit, SIGINT, SIGTERM, SIGKILL
//! and panic, and nothing is pinned.

use std::{
    io::Read as _,
    process::Stdio,
    time::{Duration, Instant},
};

use integration_test::{herd_cmd, load_probe, loaded_program_ids, privileged, program_ids_of};

/// Waits (5 s at most) until none of `ids` is loaded. The kernel frees a program after an RCU
/// grace period once its last reference is gone, so "gone" is not instantaneous.
fn wait_until_unloaded(ids: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let loaded = loaded_program_ids();
        let left: Vec<_> = ids.iter().filter(|id| loaded.contains(id)).collect();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "programs {left:?} are still loaded"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts `herd probe`, waits until it holds its programs, stops it with `signal` (or lets it
/// finish when None) and checks its programs are gone from the kernel.
fn probe_process_leaves_nothing(signal: Option<i32>) {
    let mut child = herd_cmd()
        .args(["probe", "--duration", "3s", "--interval", "100ms"])
        // Never read: on a host with many containers 30 intervals fill a pipe, and a probe
        // blocked writing its summary never exits.
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let deadline = Instant::now() + Duration::from_secs(20);
    let ids = loop {
        let ids = program_ids_of(pid);
        if !ids.is_empty() {
            break ids;
        }
        assert!(
            Instant::now() < deadline,
            "herd probe never loaded its programs"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let loaded = loaded_program_ids();
    assert!(
        ids.iter().all(|id| loaded.contains(id)),
        "{ids:?} not in {loaded:?}"
    );
    if let Some(sig) = signal {
        // SAFETY: plain kill(2) of our own child.
        unsafe { libc::kill(pid as i32, sig) };
    }
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    match signal {
        None | Some(libc::SIGINT) | Some(libc::SIGTERM) => {
            assert!(status.success(), "herd probe exited with {status}: {err}")
        }
        _ => assert!(!status.success()),
    }
    wait_until_unloaded(&ids);
    assert!(
        std::fs::read_dir("/sys/fs/bpf")
            .map(|d| d.count() == 0)
            .unwrap_or(true),
        "something is pinned under /sys/fs/bpf"
    );
}

#[test]
fn programs_detach_when_the_probe_finishes() {
    if privileged("programs_detach_when_the_probe_finishes") {
        probe_process_leaves_nothing(None);
    }
}

#[test]
fn programs_detach_on_sigint() {
    if privileged("programs_detach_on_sigint") {
        probe_process_leaves_nothing(Some(libc::SIGINT));
    }
}

#[test]
fn programs_detach_on_sigterm() {
    if privileged("programs_detach_on_sigterm") {
        probe_process_leaves_nothing(Some(libc::SIGTERM));
    }
}

#[test]
fn programs_detach_on_sigkill() {
    if privileged("programs_detach_on_sigkill") {
        probe_process_leaves_nothing(Some(libc::SIGKILL));
    }
}

#[test]
fn programs_detach_when_a_panic_unwinds_past_the_probe() {
    if !privileged("programs_detach_when_a_panic_unwinds_past_the_probe") {
        return;
    }
    let result = std::panic::catch_unwind(|| {
        let _probe = load_probe();
        // Only this test loads programs inside this process; the others use subprocesses.
        let mine = program_ids_of(std::process::id());
        assert!(!mine.is_empty());
        std::panic::panic_any(mine);
    });
    let mine = *result.unwrap_err().downcast::<Vec<u32>>().unwrap();
    wait_until_unloaded(&mine);
}
