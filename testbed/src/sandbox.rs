//! Containers that herd makes for itself on this host: a cgroup v2 directory (plus the v1 cpu
//! directory on hybrid hosts, where CFS quotas live) and a network namespace, joined by veth
//! pairs. The demo contour and the privileged tests run their processes in these.
//!
//! Everything a [`Sandbox`] creates is removed when it is dropped — processes killed, netns
//! (and with them their veth ends) deleted, cgroups removed — also when a test panics. A run
//! killed with SIGKILL cannot run `Drop`, so every name carries the creating process's pid and
//! [`sweep_stale`] removes whatever a dead herd process left behind.

use std::{
    net::Ipv4Addr,
    os::{fd::AsRawFd as _, unix::process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use herd_probe::cgroup::{CgroupLayout, cgroup_id};

/// Prefix of every cgroup, netns and interface herd creates.
pub const PREFIX: &str = "herd";

static NEXT_SANDBOX: AtomicU32 = AtomicU32::new(0);

/// One container: where its processes run.
#[derive(Clone, Debug)]
pub struct Container {
    /// Short name given by the caller (`client`, `gateway`, ...).
    pub name: String,
    /// The cgroup v2 directory (absolute).
    pub cgroup: PathBuf,
    /// The cgroup v2 id (directory inode), as the probe sees it.
    pub cgroup_id: u64,
    /// The v1 cpu cgroup directory on hybrid hosts.
    pub cpu_v1: Option<PathBuf>,
    /// The v1 memory cgroup directory on hybrid hosts (memory.usage_in_bytes and peak).
    pub memory_v1: Option<PathBuf>,
    /// Network namespace name (`ip netns` name, under /run/netns).
    pub netns: String,
}

/// A set of containers and links that is removed as a whole.
pub struct Sandbox {
    tag: String,
    layout: CgroupLayout,
    containers: Vec<Container>,
    children: Vec<Child>,
    links: u32,
    seq: u32,
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.stdin(Stdio::null()).output().with_context(|| {
        format!("running {cmd:?} (is iproute2 installed? `cargo xtask setup` installs it)")
    })?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn ip(args: &[&str]) -> Result<()> {
    run(Command::new("ip").args(args))
}

impl Sandbox {
    /// Starts an empty sandbox. Removes leftovers of dead herd processes first.
    pub fn new(purpose: &str) -> Result<Self> {
        if !nix_is_root() {
            bail!(
                "creating containers (cgroups, network namespaces) for the {purpose} needs root; \
                 run herd with sudo"
            );
        }
        sweep_stale();
        let layout = CgroupLayout::detect()?;
        let n = NEXT_SANDBOX.fetch_add(1, Ordering::Relaxed);
        Ok(Self {
            tag: format!("{PREFIX}-{}-{n}", std::process::id()),
            layout,
            containers: Vec::new(),
            children: Vec::new(),
            links: 0,
            seq: n,
        })
    }

    /// The host's cgroup layout.
    pub fn layout(&self) -> &CgroupLayout {
        &self.layout
    }

    /// Creates a container named `name`, with an optional CFS quota (`quota_us` per
    /// `period_us`). Its network namespace has loopback up and nothing else until linked.
    pub fn container(&mut self, name: &str, cpu_quota: Option<(u64, u64)>) -> Result<Container> {
        let full = format!("{}-{name}", self.tag);
        let cgroup = self.layout.unified.join(&full);
        std::fs::create_dir(&cgroup)
            .with_context(|| format!("creating cgroup {}", cgroup.display()))?;
        let mut c = Container {
            name: name.to_owned(),
            cgroup_id: cgroup_id(&cgroup)?,
            cgroup,
            cpu_v1: None,
            memory_v1: None,
            netns: full.clone(),
        };
        // Register before anything else can fail, so Drop removes what exists.
        self.containers.push(c.clone());
        let cpu_dir = match &self.layout.cpu_v1 {
            Some(root) => {
                let dir = root.join(&full);
                std::fs::create_dir(&dir)
                    .with_context(|| format!("creating cpu cgroup {}", dir.display()))?;
                c.cpu_v1 = Some(dir.clone());
                self.containers.last_mut().expect("just pushed").cpu_v1 = Some(dir.clone());
                dir
            }
            None => c.cgroup.clone(),
        };
        // Hybrid hosts keep memory accounting in v1 only; without its own directory the
        // container's memory would be charged to whoever started it.
        let memory_root = Path::new("/sys/fs/cgroup/memory");
        if self.layout.cpu_v1.is_some() && memory_root.join("memory.usage_in_bytes").exists() {
            let dir = memory_root.join(&full);
            std::fs::create_dir(&dir)
                .with_context(|| format!("creating memory cgroup {}", dir.display()))?;
            c.memory_v1 = Some(dir.clone());
            self.containers.last_mut().expect("just pushed").memory_v1 = Some(dir);
        }
        if let Some((quota, period)) = cpu_quota {
            set_quota(&cpu_dir, self.layout.cpu_v1.is_some(), quota, period)?;
        }
        ip(&["netns", "add", &full])?;
        ip(&["-n", &full, "link", "set", "lo", "up"])?;
        Ok(c)
    }

    /// Joins two containers with a veth pair and returns their addresses. Addresses come from
    /// 198.18.0.0/15 (RFC 2544, reserved for benchmarking); they exist only inside the two
    /// namespaces, so traffic between them never reaches the host's network.
    pub fn link(&mut self, a: &Container, b: &Container) -> Result<(Ipv4Addr, Ipv4Addr)> {
        let n = self.links;
        self.links += 1;
        if n >= 16_000 {
            bail!("too many links in one sandbox");
        }
        let (hi, lo) = ((n * 4) / 256, (n * 4) % 256);
        let addr_a = Ipv4Addr::new(198, 18, hi as u8, lo as u8 + 1);
        let addr_b = Ipv4Addr::new(198, 18, hi as u8, lo as u8 + 2);
        let (if_a, if_b) = (format!("hv{n}a"), format!("hv{n}b"));
        ip(&[
            "link", "add", "name", &if_a, "netns", &a.netns, "type", "veth", "peer", "name", &if_b,
            "netns", &b.netns,
        ])?;
        for (ns, ifname, addr) in [(&a.netns, &if_a, addr_a), (&b.netns, &if_b, addr_b)] {
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{addr}/30"),
                "dev",
                ifname,
            ])?;
            ip(&["-n", ns, "link", "set", ifname, "up"])?;
        }
        Ok((addr_a, addr_b))
    }

    /// Joins herd's own network namespace to container `c` with a veth pair (one end stays
    /// here) and returns (herd's address, the container's address), from 198.18.0.0/15. The
    /// route covers only the /30 of the pair, so nothing else on the host is redirected; the
    /// pair disappears with the container's namespace.
    pub fn link_host(&mut self, c: &Container) -> Result<(Ipv4Addr, Ipv4Addr)> {
        let n = self.links;
        self.links += 1;
        // Host-side names must be unique on the host: other sandboxes may exist at once.
        let id = (std::process::id() % 10_000) * 100 + self.seq % 100;
        // The host's routes are shared by every sandbox on it: each gets its own /24.
        let hi = 64 + (std::process::id().wrapping_mul(7).wrapping_add(self.seq) % 190);
        let lo = (n * 4) % 256;
        let host_ip = Ipv4Addr::new(198, 19, hi as u8, lo as u8 + 1);
        let c_ip = Ipv4Addr::new(198, 19, hi as u8, lo as u8 + 2);
        let (if_host, if_c) = (format!("hh{id}x{n}"), format!("hv{n}c"));
        ip(&[
            "link", "add", "name", &if_host, "type", "veth", "peer", "name", &if_c, "netns",
            &c.netns,
        ])?;
        let setup = (|| {
            ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &if_host])?;
            ip(&["link", "set", &if_host, "up"])?;
            ip(&[
                "-n",
                &c.netns,
                "addr",
                "add",
                &format!("{c_ip}/30"),
                "dev",
                &if_c,
            ])?;
            ip(&["-n", &c.netns, "link", "set", &if_c, "up"])
        })();
        if let Err(e) = setup {
            let _ = ip(&["link", "del", &if_host]);
            return Err(e);
        }
        Ok((host_ip, c_ip))
    }

    /// Starts `cmd` inside container `c` (its cgroups and network namespace). The child is
    /// killed when the sandbox is dropped if it is still running. Returns its handle for
    /// [`Self::child`].
    pub fn spawn(&mut self, c: &Container, mut cmd: Command) -> Result<usize> {
        let netns = std::fs::File::open(Path::new("/run/netns").join(&c.netns))
            .with_context(|| format!("opening netns {}", c.netns))?;
        let mut procs = vec![open_procs(&c.cgroup)?];
        for v1 in [&c.cpu_v1, &c.memory_v1].into_iter().flatten() {
            procs.push(open_procs(v1)?);
        }
        let ns_fd = netns.as_raw_fd();
        let proc_fds: Vec<i32> = procs.iter().map(|f| f.as_raw_fd()).collect();
        // SAFETY: only async-signal-safe syscalls between fork and exec, on fds opened above.
        unsafe {
            cmd.pre_exec(move || {
                for fd in &proc_fds {
                    if libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if libc::setns(ns_fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {cmd:?} in container {}", c.name))?;
        drop((netns, procs));
        self.children.push(child);
        Ok(self.children.len() - 1)
    }

    /// A child started by [`Self::spawn`].
    pub fn child(&mut self, handle: usize) -> &mut Child {
        &mut self.children[handle]
    }

    /// Containers created so far.
    pub fn containers(&self) -> &[Container] {
        &self.containers
    }

    fn teardown(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.children.clear();
        for c in self.containers.drain(..).rev() {
            let _ = ip(&["netns", "del", &c.netns]);
            remove_cgroup(&c.cgroup);
            for v1 in [&c.cpu_v1, &c.memory_v1].into_iter().flatten() {
                remove_cgroup(v1);
            }
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.teardown();
    }
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn open_procs(dir: &Path) -> Result<std::fs::File> {
    let p = dir.join("cgroup.procs");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .with_context(|| format!("opening {}", p.display()))
}

fn set_quota(dir: &Path, v1: bool, quota_us: u64, period_us: u64) -> Result<()> {
    let write = |file: &str, value: String| {
        let p = dir.join(file);
        std::fs::write(&p, &value).with_context(|| format!("writing {value} to {}", p.display()))
    };
    if v1 {
        write("cpu.cfs_period_us", period_us.to_string())?;
        write("cpu.cfs_quota_us", quota_us.to_string())
    } else {
        write("cpu.max", format!("{quota_us} {period_us}"))
    }
}

/// Kills every process in the cgroup and removes it, retrying while the kernel finishes
/// tearing the processes down.
fn remove_cgroup(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                // SAFETY: kill has no memory preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        match std::fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                tracing::warn!("herd: could not remove cgroup {}: {e}", dir.display());
                return;
            }
        }
    }
}

/// The pid encoded in a name `herd-<pid>-...`, if any.
fn owner_pid(name: &str) -> Option<i32> {
    name.strip_prefix("herd-")?.split('-').next()?.parse().ok()
}

fn pid_alive(pid: i32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Removes netns and cgroups named by herd processes that no longer exist (a run killed with
/// SIGKILL). Returns what it removed.
pub fn sweep_stale() -> Vec<String> {
    let mut removed = Vec::new();
    let stale = |name: &str| owner_pid(name).is_some_and(|p| !pid_alive(p));
    if let Ok(entries) = std::fs::read_dir("/run/netns") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if stale(&name) && ip(&["netns", "del", &name]).is_ok() {
                removed.push(format!("netns {name}"));
            }
        }
    }
    if let Ok(layout) = CgroupLayout::detect() {
        let roots = std::iter::once(layout.unified.clone())
            .chain(layout.cpu_v1.clone())
            .chain(Some(PathBuf::from("/sys/fs/cgroup/memory")).filter(|p| p.exists()));
        for root in roots {
            let Ok(entries) = std::fs::read_dir(&root) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if stale(&name) && e.path().is_dir() {
                    remove_cgroup(&e.path());
                    removed.push(format!("cgroup {}", e.path().display()));
                }
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pid_reads_only_herd_names() {
        assert_eq!(owner_pid("herd-1234-0-client"), Some(1234));
        assert_eq!(owner_pid("herd-x-0"), None);
        assert_eq!(owner_pid("docker-1234"), None);
    }
}
