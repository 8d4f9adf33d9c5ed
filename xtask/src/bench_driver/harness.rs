//! What every run needs from the OS: a core of its own and enough descriptors for each
//! process, Ctrl-C turned into an error that still cleans up, a scratch directory, and what
//! a client process cost (`wait4`'s rusage) or a live one has used so far.

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::atomic::{AtomicBool, Ordering::SeqCst},
    time::Instant,
};

use anyhow::{Context as _, Result, bail};
use herd_testkit::TempDir;

/// The core nginx runs on; the clients get [`CLIENT_CORE`].
pub(super) const SERVER_CORE: usize = 0;
pub(super) const CLIENT_CORE: usize = 1;
/// File descriptors wanted for nginx and the clients: the scale run holds 10 000 connections
/// on each side. Capped at the hard limit, which a container may not let root raise.
const NOFILE: u64 = 65_536;

pub(super) fn nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-parameter.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    NOFILE.min(lim.rlim_max)
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, SeqCst);
}

/// Ctrl-C reaches the client in the foreground (it stops) and this flag; nginx runs in its
/// own session so it does not see it, and is stopped by [`Nginx`](super::nginx::Nginx)'s drop once the bench
/// returns its error.
fn catch_sigint() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
}

fn check_interrupted() -> Result<()> {
    if INTERRUPTED.load(SeqCst) {
        bail!("interrupted by Ctrl-C; nginx and the temporary directory are removed");
    }
    Ok(())
}

/// In the child before exec: run on `core` only, with [`nofile`] descriptors, and (for a
/// server) in a session of its own and killed if the bench dies.
pub(super) fn confine(cmd: &mut Command, core: usize, server: bool) {
    let nofile = nofile();
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(core, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let lim = libc::rlimit {
                rlim_cur: nofile,
                rlim_max: nofile,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if server {
                libc::setsid();
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            }
            Ok(())
        });
    }
}

/// utime + stime of a live process, in seconds.
pub(super) fn proc_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

/// What one client process cost.
pub(super) struct Exit {
    pub(super) stdout: String,
    pub(super) cpu_s: f64,
    pub(super) user_s: f64,
    pub(super) peak_rss_kib: u64,
    pub(super) wall_s: f64,
    /// Time it was runnable but waited for a CPU (`/proc/PID/schedstat`, the last reading
    /// before it exited): the share other processes on its core took.
    pub(super) run_delay_s: f64,
}

/// Seconds `pid` has waited on a run queue, from `/proc/PID/schedstat`.
fn run_delay(pid: libc::pid_t) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
    let ns: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(ns as f64 / 1e9)
}

/// Runs `cmd` on the client core and reaps it with `wait4`, which hands back its rusage.
pub(super) fn run_client(cmd: &mut Command, out: &Path) -> Result<Exit> {
    run_client_on(cmd, out, CLIENT_CORE)
}

/// [`run_client`] on core `core`.
pub(super) fn run_client_on(cmd: &mut Command, out: &Path, core: usize) -> Result<Exit> {
    let file = std::fs::File::create(out)?;
    cmd.stdout(file).stderr(Stdio::piped()).stdin(Stdio::null());
    confine(cmd, core, false);
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", crate::show(cmd)))?;
    let stderr = child.stderr.take().context("client stderr")?;
    let errs = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut { stderr }, &mut s);
        s
    });
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut delay = 0.0;
    loop {
        // Not blocking: the child's run queue wait can only be read while it exists.
        // SAFETY: waiting for our own child; status and usage are valid out-parameters.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        if r == 0 {
            delay = run_delay(pid).unwrap_or(delay);
            std::thread::sleep(std::time::Duration::from_millis(100));
            continue;
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e).context("wait4 on the client");
        }
    }
    let wall_s = started.elapsed().as_secs_f64();
    let stderr = errs.join().unwrap_or_default();
    check_interrupted()?;
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!(
            "`{}` failed (wait status {status}): {stderr}",
            crate::show(cmd)
        );
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Exit {
        stdout: std::fs::read_to_string(out)?,
        cpu_s: secs(usage.ru_utime) + secs(usage.ru_stime),
        user_s: secs(usage.ru_utime),
        peak_rss_kib: usage.ru_maxrss as u64,
        wall_s,
        run_delay_s: delay,
    })
}

pub(super) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What both runs need first: two cores, Ctrl-C caught, the path of herd's release binary
/// and a scratch directory.
pub(super) fn prepare(root: &Path) -> Result<(PathBuf, TempDir)> {
    if cores() < 2 {
        bail!("the driver benchmark pins the server and the client to separate cores: it needs 2");
    }
    catch_sigint();
    Ok((
        root.join("target/release/herd"),
        TempDir::try_new("bench-driver")?,
    ))
}
