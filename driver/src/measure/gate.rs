//! The gate between the phases of the plan and the ops counted in them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};

/// Decides which phase an op belongs to, without a lock and without losing an op at a
/// phase boundary.
///
/// A player bumps `started[k]` and then re-reads the current phase; if it moved on, it
/// takes the bump back and retries. The runner moves the phase before it tells the
/// aggregator the old one closed, so once the aggregator has seen the close, every op
/// counted in `started[k]` is one it will receive: `recorded == started` then means the
/// phase is complete (all reads and writes are SeqCst).
#[derive(Debug)]
pub(crate) struct Gate {
    current: AtomicUsize,
}

const CLOSED: usize = usize::MAX;

impl Gate {
    pub fn closed() -> Self {
        Self {
            current: AtomicUsize::new(CLOSED),
        }
    }

    pub fn enter(&self, started: &[AtomicU64]) -> Option<usize> {
        loop {
            let k = self.current.load(SeqCst);
            if k == CLOSED {
                return None;
            }
            started[k].fetch_add(1, SeqCst);
            if self.current.load(SeqCst) == k {
                return Some(k);
            }
            started[k].fetch_sub(1, SeqCst);
        }
    }

    pub fn open(&self, phase: usize) {
        self.current.store(phase, SeqCst);
    }

    pub fn close(&self) {
        self.current.store(CLOSED, SeqCst);
    }

    pub fn current(&self) -> Option<usize> {
        Some(self.current.load(SeqCst)).filter(|&k| k != CLOSED)
    }
}
