//! Which BPF program types this kernel lets herd load and attach: the raw tracepoint herd's
//! probe is built on, and the types our CI hosts refuse (fentry/fexit under lockdown, kprobes
//! without `CONFIG_KPROBES`) but many production kernels offer. Each is a two-instruction
//! program (`r0 = 0; exit`) loaded with `bpf(BPF_PROG_LOAD)` and attached to `tcp_connect`
//! (or the `inet_sock_set_state` raw tracepoint), then closed, which detaches it.
//!
//! The outcome of each is printed as `matrix: program type <name>: <outcome>` (run with
//! `--nocapture` to see it); `cargo xtask integration-test vm` collects those lines per kernel
//! for docs/probes.md. The raw tracepoint must attach: it is herd's required path, and it
//! proves the syscalls below are built right, so a refusal of the others is the kernel's.

use std::{ffi::CString, os::fd::FromRawFd as _, os::fd::OwnedFd};

use herd_probe::btf::Btf;
use integration_test::privileged;

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const BPF_PROG_TYPE_KPROBE: u32 = 2;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
const BPF_PROG_TYPE_TRACING: u32 = 26;
const BPF_TRACE_FENTRY: u32 = 24;
const BPF_TRACE_FEXIT: u32 = 25;
/// `_IOW('$', 8, __u32)` and `_IO('$', 0)` from `include/uapi/linux/perf_event.h`.
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// The kernel function the kprobe and fentry programs attach to: TCP's active open, present
/// (and not inlined) in every kernel herd supports.
const FUNCTION: &str = "tcp_connect";

/// `union bpf_attr` for `BPF_PROG_LOAD`, up to `attach_btf_obj_fd` (kernel 5.10's layout;
/// newer kernels accept a shorter attr and zero the rest).
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
    prog_btf_fd: u32,
    func_info_rec_size: u32,
    func_info: u64,
    func_info_cnt: u32,
    line_info_rec_size: u32,
    line_info: u64,
    line_info_cnt: u32,
    attach_btf_id: u32,
    attach_btf_obj_fd: u32,
    _pad: u32,
}

/// `union bpf_attr` for `BPF_RAW_TRACEPOINT_OPEN`.
#[repr(C)]
#[derive(Default)]
struct RawTracepointAttr {
    name: u64,
    prog_fd: u32,
    _pad: u32,
}

/// `struct perf_event_attr` up to `config2` (`PERF_ATTR_SIZE_VER1`).
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    /// `kprobe_func`: the function's name.
    config1: u64,
    /// `probe_offset`.
    config2: u64,
}

/// What the kernel said.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Loaded and attached (then detached by closing).
    Attaches,
    /// `BPF_PROG_LOAD` failed.
    LoadRefused { errno: i32, log: String },
    /// Loaded, but attaching failed.
    AttachRefused { errno: i32 },
    /// The kernel lacks what the attach needs (a PMU, a BTF function).
    Missing(String),
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = |e: i32| {
            let symbol = match e {
                libc::EPERM => "EPERM",
                libc::EACCES => "EACCES",
                libc::ENOENT => "ENOENT",
                libc::EINVAL => "EINVAL",
                libc::EOPNOTSUPP => "EOPNOTSUPP",
                libc::EBUSY => "EBUSY",
                libc::E2BIG => "E2BIG",
                libc::EFAULT => "EFAULT",
                // The kernel's internal ENOTSUPP (include/linux/errno.h), which bpf returns.
                524 => "ENOTSUPP",
                _ => "errno",
            };
            format!("{symbol} ({e})")
        };
        match self {
            Outcome::Attaches => f.write_str("loads and attaches"),
            Outcome::LoadRefused { errno, log } => {
                write!(f, "load refused: {}", name(*errno))?;
                match log.lines().rev().find(|l| !l.trim().is_empty()) {
                    Some(last) => write!(f, " (verifier: {last})"),
                    None => Ok(()),
                }
            }
            Outcome::AttachRefused { errno } => {
                write!(f, "loads; attach refused: {}", name(*errno))
            }
            Outcome::Missing(what) => write!(f, "loads; cannot attach: {what}"),
        }
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> Result<OwnedFd, i32> {
    // SAFETY: attr is a live, fully initialised bpf_attr variant of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T,
            std::mem::size_of::<T>() as u32,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: the kernel just returned this descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Loads `r0 = 0; exit` as `prog_type`.
fn load(prog_type: u32, expected_attach_type: u32, attach_btf_id: u32) -> Result<OwnedFd, Outcome> {
    // struct bpf_insn: code, dst:4|src:4, off, imm. BPF_ALU64|BPF_MOV|BPF_K, then BPF_JMP|BPF_EXIT.
    let insns: [u64; 2] = [0xb7, 0x95];
    let license = c"GPL";
    let mut log = vec![0u8; 64 * 1024];
    let mut attr = ProgLoadAttr {
        prog_type,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        expected_attach_type,
        attach_btf_id,
        ..ProgLoadAttr::default()
    };
    attr.prog_name[..9].copy_from_slice(b"herd_type");
    bpf(BPF_PROG_LOAD, &mut attr).map_err(|errno| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        Outcome::LoadRefused {
            errno,
            log: String::from_utf8_lossy(&log[..end]).into_owned(),
        }
    })
}

/// A raw tracepoint (`name`), or a BTF-typed tracing program (fentry/fexit) when `name` is
/// None: both attach through `BPF_RAW_TRACEPOINT_OPEN`.
fn raw_tracepoint_open(prog: &OwnedFd, name: Option<&str>) -> Outcome {
    use std::os::fd::AsRawFd as _;
    let name = name.map(|n| CString::new(n).expect("no NUL in a tracepoint name"));
    let mut attr = RawTracepointAttr {
        name: name.as_ref().map_or(0, |n| n.as_ptr() as u64),
        prog_fd: prog.as_raw_fd() as u32,
        _pad: 0,
    };
    match bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr) {
        Ok(_link) => Outcome::Attaches,
        Err(errno) => Outcome::AttachRefused { errno },
    }
}

fn raw_tp() -> Outcome {
    match load(BPF_PROG_TYPE_RAW_TRACEPOINT, 0, 0) {
        Ok(prog) => raw_tracepoint_open(&prog, Some("inet_sock_set_state")),
        Err(refused) => refused,
    }
}

fn tracing(btf: &Btf, attach_type: u32) -> Outcome {
    let Some(id) = btf.func_id(FUNCTION) else {
        return Outcome::Missing(format!("no BTF function {FUNCTION}"));
    };
    match load(BPF_PROG_TYPE_TRACING, attach_type, id) {
        Ok(prog) => raw_tracepoint_open(&prog, None),
        Err(refused) => refused,
    }
}

/// A kprobe through the kprobe PMU (`perf_event_open`, kernel 4.17), as libbpf does.
fn kprobe() -> Outcome {
    use std::os::fd::AsRawFd as _;
    let prog = match load(BPF_PROG_TYPE_KPROBE, 0, 0) {
        Ok(prog) => prog,
        Err(refused) => return refused,
    };
    let pmu = "/sys/bus/event_source/devices/kprobe/type";
    let Some(pmu_type) = std::fs::read_to_string(pmu)
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
    else {
        return Outcome::Missing(format!(
            "no kprobe PMU ({pmu} is missing: the kernel has no CONFIG_KPROBES)"
        ));
    };
    let func = CString::new(FUNCTION).expect("no NUL");
    let attr = PerfEventAttr {
        type_: pmu_type,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config1: func.as_ptr() as u64,
        ..PerfEventAttr::default()
    };
    // SAFETY: attr is initialised and sized; pid -1 with cpu 0 is a system-wide event.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            -1,
            0,
            -1,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Outcome::AttachRefused { errno: errno() };
    }
    // SAFETY: the kernel just returned this descriptor.
    let event = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // SAFETY: ioctls on a perf event fd we own, with a program fd we own.
    unsafe {
        if libc::ioctl(event.as_raw_fd(), PERF_EVENT_IOC_SET_BPF, prog.as_raw_fd()) != 0
            || libc::ioctl(event.as_raw_fd(), PERF_EVENT_IOC_ENABLE, 0) != 0
        {
            return Outcome::AttachRefused { errno: errno() };
        }
    }
    Outcome::Attaches
}

#[test]
fn each_program_type_loads_or_is_refused_by_the_kernel() {
    if !privileged("each_program_type_loads_or_is_refused_by_the_kernel") {
        return;
    }
    let btf = Btf::from_kernel().unwrap();
    let outcomes = [
        ("raw_tp", raw_tp()),
        ("fentry", tracing(&btf, BPF_TRACE_FENTRY)),
        ("fexit", tracing(&btf, BPF_TRACE_FEXIT)),
        ("kprobe", kprobe()),
    ];
    for (name, outcome) in &outcomes {
        println!("matrix: program type {name}: {outcome}");
    }
    assert_eq!(outcomes[0].1, Outcome::Attaches, "herd's own program type");
    // Every kernel herd supports knows these types and attaches; EINVAL, E2BIG or EFAULT
    // would mean this test built its attr wrong, not that the kernel refused the type.
    for (name, outcome) in &outcomes[1..] {
        if let Outcome::LoadRefused { errno, .. } | Outcome::AttachRefused { errno } = outcome {
            assert!(
                ![libc::EINVAL, libc::E2BIG, libc::EFAULT].contains(errno),
                "{name}: {outcome}"
            );
        }
    }
}
