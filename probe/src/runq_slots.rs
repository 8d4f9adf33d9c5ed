//! The `RUNQ_SLOTS` array read through a read-only shared mapping: the run-queue program's
//! direct-mapped per-CPU slots (`probe_common::RUNQ_SLOTS_PER_CPU` per possible CPU), read
//! every 100 ms poll without a system call per slot.

use std::{collections::HashMap, os::fd::AsRawFd as _, ptr::NonNull};

use probe_common::{RUNQ_SLOTS_PER_CPU, RunqSlot, RunqStats};

/// A read-only mapping of the array's values.
pub(crate) struct RunqSlots {
    base: NonNull<RunqSlot>,
    slots: usize,
    len: usize,
}

// SAFETY: the mapping is read-only from this side and lives as long as the value; the
// kernel writes it concurrently, which reads of aligned u64s tolerate (each field only grows).
unsafe impl Send for RunqSlots {}
// SAFETY: as above; `&self` only reads.
unsafe impl Sync for RunqSlots {}

/// How many slots the array has on this machine: one set per possible CPU.
pub(crate) fn entries() -> std::io::Result<u32> {
    let cpus = aya::util::nr_cpus()
        .map_err(|(path, e)| std::io::Error::new(e.kind(), format!("reading {path}: {e}")))?;
    Ok(RUNQ_SLOTS_PER_CPU * cpus as u32)
}

impl RunqSlots {
    /// Maps the array behind `fd` (created `BPF_F_MMAPABLE` with `slots` entries).
    pub(crate) fn map(fd: &impl std::os::fd::AsFd, slots: u32) -> std::io::Result<Self> {
        let slots = slots as usize;
        let page = 4096;
        let len = (slots * size_of::<RunqSlot>()).div_ceil(page) * page;
        // SAFETY: a shared read-only mapping of a BPF array fd; the kernel checks the length
        // against the array's pages.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<RunqSlot>()).ok_or_else(std::io::Error::last_os_error)?;
        Ok(Self { base, slots, len })
    }

    /// Adds every held slot's waits to `out`, by key.
    pub(crate) fn add_to(&self, out: &mut HashMap<u64, RunqStats>) {
        for i in 0..self.slots {
            // SAFETY: `i` is within the mapping; volatile, since the kernel writes it.
            let slot = unsafe { self.base.as_ptr().add(i) };
            let key = unsafe { std::ptr::read_volatile(&raw const (*slot).key) };
            if key == 0 {
                continue;
            }
            let stats = unsafe { std::ptr::read_volatile(&raw const (*slot).stats) };
            out.entry(key).or_default().add(&stats);
        }
    }
}

impl Drop for RunqSlots {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}
