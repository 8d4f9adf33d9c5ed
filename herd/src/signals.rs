//! SIGINT/SIGTERM become a flag that loops poll, so every command stops starting work, runs
//! its cleanup (`Drop` of probes and sandboxes) and writes what it has.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicU32 = AtomicU32::new(0);
static COUNT: AtomicU32 = AtomicU32::new(0);
/// Set while herd holds nothing to clean up (reading and checking the scenario): a signal
/// then ends the process at once instead of waiting for a loop that would poll it.
static AT_ONCE: AtomicBool = AtomicBool::new(false);

/// What a signal prints when it ends herd at once.
const AT_ONCE_MESSAGE: &[u8] =
    b"herd: stopped by a signal while reading the scenario; nothing had started\n";

extern "C" fn on_signal(sig: libc::c_int) {
    if AT_ONCE.load(Ordering::SeqCst) {
        // SAFETY: write(2) and _exit(2) are async-signal-safe; nothing is held to release.
        unsafe {
            libc::write(2, AT_ONCE_MESSAGE.as_ptr().cast(), AT_ONCE_MESSAGE.len());
            libc::_exit(128 + sig);
        }
    }
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

/// Runs `f`, which must hold nothing that needs cleanup, so that a stop signal during it
/// ends the process at once (exit 128 + the signal): checking a big scenario polls no flag.
/// A signal that came before it ends the process the same way.
pub fn at_once<T>(f: impl FnOnce() -> T) -> T {
    AT_ONCE.store(true, Ordering::SeqCst);
    if let Some(sig) = received() {
        on_signal(sig);
    }
    let out = f();
    AT_ONCE.store(false, Ordering::SeqCst);
    out
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
