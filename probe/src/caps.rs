//! Privilege checks done before anything touches the kernel, so a user without them gets one
//! clear line instead of an `EPERM` from deep inside the loader.

use crate::ProbeError;

/// `include/uapi/linux/capability.h`
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The effective capability mask of this process, from `/proc/self/status`.
pub fn effective() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

/// The capabilities missing from `mask` for loading and attaching tracing programs:
/// CAP_BPF + CAP_PERFMON (kernel ≥ 5.8), or CAP_SYS_ADMIN, which implies both.
pub fn missing_for_bpf(mask: u64) -> Vec<&'static str> {
    let has = |cap: u32| mask & (1u64 << cap) != 0;
    if has(CAP_SYS_ADMIN) {
        return Vec::new();
    }
    let mut missing = Vec::new();
    if !has(CAP_BPF) {
        missing.push("CAP_BPF");
    }
    if !has(CAP_PERFMON) {
        missing.push("CAP_PERFMON");
    }
    missing
}

/// Fails with [`ProbeError::MissingCapability`] unless this process may load the probe.
pub fn require_bpf() -> Result<(), ProbeError> {
    let missing = missing_for_bpf(effective());
    if missing.is_empty() {
        Ok(())
    } else {
        Err(ProbeError::MissingCapability(missing))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sys_admin_implies_bpf_and_perfmon() {
        assert!(missing_for_bpf(1 << CAP_SYS_ADMIN).is_empty());
        assert!(missing_for_bpf((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_empty());
        assert_eq!(missing_for_bpf(1 << CAP_BPF), vec!["CAP_PERFMON"]);
        assert_eq!(missing_for_bpf(0), vec!["CAP_BPF", "CAP_PERFMON"]);
    }
}
