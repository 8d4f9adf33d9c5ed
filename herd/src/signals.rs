//! SIGINT/SIGTERM become a flag that loops poll, so every command stops starting work, runs
//! its cleanup (`Drop` of probes and sandboxes) and writes what it has.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicU32 = AtomicU32::new(0);
static COUNT: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // A second Ctrl-C ends the driver's grace ([`hurry_requested`]) but not cleanup: cleanup
    // is bounded and must finish, or pinned/attached state and cgroups would be left behind.
    STOP.store(true, Ordering::SeqCst);
    SIGNAL.store(sig as u32, Ordering::SeqCst);
    COUNT.fetch_add(1, Ordering::SeqCst);
}

/// Installs the handlers for SIGINT, SIGTERM and SIGHUP.
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to atomics, which is async-signal-safe.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// True once a stop signal arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// True once a second stop signal arrived: the user wants out now, not after the grace.
pub fn hurry_requested() -> bool {
    COUNT.load(Ordering::SeqCst) >= 2
}

/// The signal that requested the stop, if any.
pub fn received() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s as i32),
    }
}

/// Sleeps up to `d`, waking early when a stop is requested. Returns false if stopped.
pub fn sleep(d: std::time::Duration) -> bool {
    let end = herd_driver::units::deadline(std::time::Instant::now(), d);
    while !stop_requested() {
        let now = std::time::Instant::now();
        if now >= end {
            return true;
        }
        std::thread::sleep((end - now).min(std::time::Duration::from_millis(20)));
    }
    false
}
