//! Freed memory handed back to the kernel once a minute in the long-running commands
//! (`run`, `drive`, `probe`). glibc keeps what a burst freed in its arenas — a host whose
//! containers and sockets came and went, a slow store's backlog — so without this an
//! hours-long run's RSS only ever rises, to its busiest moment; `malloc_trim` returns the
//! free pages of every arena (docs/benchmarks.md, "Long runs").

use std::time::Duration;

/// How often the free pages are handed back.
const EVERY: Duration = Duration::from_secs(60);

/// Starts the thread that trims every [`EVERY`]; it ends with the process.
pub fn trim_periodically() {
    #[cfg(target_env = "gnu")]
    {
        let spawned = std::thread::Builder::new()
            .name("herd-trim".into())
            .spawn(|| {
                loop {
                    std::thread::sleep(EVERY);
                    // SAFETY: takes only the padding to keep; callable from any thread.
                    unsafe { libc::malloc_trim(0) };
                }
            });
        if let Err(e) = spawned {
            tracing::debug!("no memory trim thread: {e}");
        }
    }
}
