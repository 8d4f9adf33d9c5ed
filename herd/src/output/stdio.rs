//! herd's stdout and stderr, which a reader that went away cannot crash.
//!
//! `println!` panics when its write fails, and Rust ignores SIGPIPE, so `herd drive … | head
//! -1` used to end in a panic (exit 101, a backtrace) before the `--json` file or the report
//! files were written. Every line herd prints goes through [`out`] and [`err`] instead (the
//! `outln!`, `out!` and `errln!` macros; `clippy::print_stdout` and `print_stderr` are denied
//! in this crate): once a write to a stream fails, the rest of that stream's output is
//! dropped, and the command carries on writing its files and exits as it would have.

use std::{
    fmt,
    io::Write as _,
    sync::atomic::{AtomicBool, Ordering},
};

/// Set once a write to stdout failed (its reader is gone): later output is dropped.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);
/// The same for stderr.
static STDERR_GONE: AtomicBool = AtomicBool::new(false);

/// Writes `args` to stdout; after a failed write (a closed pipe, a full disk) drops it, and
/// says once on stderr why unless the reader merely went away.
pub fn out(args: fmt::Arguments<'_>) {
    if STDOUT_GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut o = std::io::stdout().lock();
    if let Err(e) = o.write_fmt(args).and_then(|()| o.flush()) {
        STDOUT_GONE.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            tracing::warn!("writing to stdout failed ({e}): the rest of herd's output is dropped");
        }
    }
}

/// Writes `args` to stderr, dropping it (and the rest of stderr's output) once a write fails.
pub fn err(args: fmt::Arguments<'_>) {
    if STDERR_GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut e = std::io::stderr().lock();
    if e.write_fmt(args).is_err() {
        STDERR_GONE.store(true, Ordering::Relaxed);
    }
}

/// True once stdout's reader went away (or a write to it failed otherwise).
pub fn stdout_gone() -> bool {
    STDOUT_GONE.load(Ordering::Relaxed)
}
