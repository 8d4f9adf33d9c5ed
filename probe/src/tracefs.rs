//! tracefs for the classic tracepoints herd attaches (`syscalls/sys_{enter,exit}_connect`,
//! `cgroup/cgroup_mkdir`).
//!
//! aya reads a tracepoint's id from tracefs at attach time; after that the perf event holds
//! the tracepoint and tracefs is no longer needed. Many hosts mount tracefs already (systemd
//! does); where it is missing, herd mounts it for the attach and unmounts it right after, so the
//! host is left as it was found.

use std::{ffi::CString, path::Path, sync::Mutex};

const MOUNT_POINT: &str = "/sys/kernel/tracing";

/// Serialises mount/attach/unmount within this process.
static LOCK: Mutex<()> = Mutex::new(());

fn mounted(p: &Path) -> bool {
    // aya's own test: the directory exists and is not empty.
    std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_some())
}

/// Runs `f` with tracefs reachable at one of aya's known paths.
pub(crate) fn with_tracefs<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mp = Path::new(MOUNT_POINT);
    if mounted(mp) || mounted(Path::new("/sys/kernel/debug/tracing")) {
        return Ok(f());
    }
    let target = CString::new(MOUNT_POINT).expect("no NUL");
    let fstype = CString::new("tracefs").expect("no NUL");
    // SAFETY: valid NUL-terminated strings; no data argument.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "tracefs is not mounted and mounting it at {MOUNT_POINT} failed ({}); herd needs it \
             to attach the classic tracepoints (cgroup/cgroup_mkdir): mount it with `mount -t tracefs nodev {MOUNT_POINT}`",
            std::io::Error::last_os_error()
        ));
    }
    let out = f();
    // MNT_DETACH: an open file under it (ours or another tool's) must not make us fail.
    // SAFETY: valid NUL-terminated string.
    unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    Ok(out)
}
