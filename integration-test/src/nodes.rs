//! Several Docker engines on this one host as the nodes of one Docker Swarm, for the
//! multi-node tests (integration-test/tests/nodes.rs, docs/scale-out.md).
//!
//! Each node is a Debian `dockerd` in namespaces of its own, made by the test: a network
//! namespace (one veth to a bridge the test made on the host, an address in 198.18.0.0/15, no
//! route beyond that bridge), a UTS namespace (its hostname, `node-N`, is the swarm node's
//! name) and a mount namespace whose `/run` is the node's own directory (so its socket is at
//! `/var/run/docker.sock` *inside* the node, as on a real host, and its containerd's shim
//! sockets, `/run/containerd/s/…`, are its own). Its data-root, exec-root, pidfile and
//! `/run` are under `target/nodes/<pid>/N/`; its managed containerd is its child, in its
//! namespaces. Its containers' cgroups are under `--cgroup-parent /hn<pid>-N` (the nodes share
//! one kernel, so the test tells their containers apart by it). Its address pools are inside
//! 198.18.64.0/18 and exist only inside the node; it runs with `--iptables=false`: the nodes'
//! tasks use the host network (the node's namespace), and iptables=true would load
//! br_netfilter for the whole host.
//!
//! Node 1 is the swarm's manager, the others join it as workers, advertising their bridge
//! addresses; herd's image is built on every node from local files (no registry). The host
//! side (the bridge's address) is where the test's nginx and PostgreSQL listen.
//!
//! Everything is removed on drop — the engines and every process in each node's network
//! namespace, the containers' cgroups, the namespaces, the veths, the bridge and the nodes'
//! directories — also when a test panics. A test process killed with SIGKILL cannot run
//! drop: every name carries its pid, and [`Cluster::start`] first sweeps what a dead test
//! process left.

use std::{
    net::Ipv4Addr,
    os::{fd::AsRawFd as _, unix::process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

/// The third octet of the /24s the nodes' bridge may take: 198.18.64.0/20 (the nodes' own
/// pools come after it).
const SUBNETS: std::ops::Range<u8> = 64..80;
/// Each engine's local address pool (docker_gwbridge and any local network), inside the node.
const LOCAL_POOL: &str = "base=198.18.80.0/20,size=24";
/// The swarm's pool for its overlay networks (ingress): never Docker's default 10.0.0.0/8.
pub const SWARM_POOL: &str = "198.18.96.0/20";
/// How often a worker reports to the manager, and so how soon a lost node is marked down
/// (Docker's default is 5 s; about three periods pass before the manager gives up on it).
pub const HEARTBEAT: &str = "1s";

/// `cmd`'s stdout trimmed, or its stderr as the error.
fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn ip(args: &[&str]) -> Result<String> {
    output(Command::new("ip").args(args))
        .context("iproute2's `ip` (Debian package iproute2; `cargo xtask setup`)")
}

/// The network namespace inode of `pid`, if it still runs.
fn netns_of(pid: u32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(format!("/proc/{pid}/ns/net"))
        .ok()
        .map(|m| m.ino())
}

/// Every process whose network namespace is the one bound at `/run/netns/NAME`.
fn pids_in_netns(name: &str) -> Vec<u32> {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(ino) = std::fs::metadata(Path::new("/run/netns").join(name)).map(|m| m.ino()) else {
        return Vec::new();
    };
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| netns_of(pid) == Some(ino))
        .collect()
}

/// Every process in the cgroup v2 directory `dir` and below.
fn pids_in_cgroup(dir: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        out.extend(
            std::fs::read_to_string(d.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse::<u32>().ok()),
        );
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
    }
    out
}

/// The unified (cgroup v2) root: `/sys/fs/cgroup` on a pure v2 host, its `unified` on a
/// hybrid one.
fn unified_root() -> PathBuf {
    let hybrid = Path::new("/sys/fs/cgroup/unified");
    if hybrid.join("cgroup.procs").exists() {
        hybrid.to_owned()
    } else {
        PathBuf::from("/sys/fs/cgroup")
    }
}

/// SIGKILLs every process of a node — in its network namespace `netns` or under its
/// containers' cgroup parent `parent` — until none is left (10 s at most); returns how many.
fn kill_node_processes(netns: &str, parent: &str) -> usize {
    let cgroup = unified_root().join(parent.trim_start_matches('/'));
    let mut killed = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut pids = pids_in_netns(netns);
        pids.extend(pids_in_cgroup(&cgroup));
        pids.retain(|&p| p != std::process::id());
        if pids.is_empty() || Instant::now() > deadline {
            return killed.len();
        }
        for p in pids {
            // SAFETY: kill(2) has no memory preconditions; every pid is a node's process.
            unsafe { libc::kill(p as i32, libc::SIGKILL) };
            killed.insert(p);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Removes the cgroup directory `parent` (and the containers' directories below it) from every
/// hierarchy the engine made it in; retries while killed processes are being reaped.
fn remove_cgroups(parent: &str) {
    let rel = parent.trim_start_matches('/');
    let roots: Vec<PathBuf> = std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .chain(std::iter::once(PathBuf::from("/sys/fs/cgroup")))
        .collect();
    for root in roots {
        let dir = root.join(rel);
        if !dir.is_dir() {
            continue;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            // Depth-first: children before their parent.
            let mut all = Vec::new();
            let mut stack = vec![dir.clone()];
            while let Some(d) = stack.pop() {
                for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        stack.push(e.path());
                    }
                }
                all.push(d);
            }
            all.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
            for d in &all {
                let _ = std::fs::remove_dir(d);
            }
            if !dir.exists() || Instant::now() > deadline {
                if dir.exists() {
                    eprintln!("nodes: could not remove the cgroup {}", dir.display());
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// One engine of the cluster.
pub struct Node {
    /// Its hostname and swarm node name: `node-1`, `node-2`, ….
    pub name: String,
    /// Its network namespace (`ip netns` name).
    pub netns: String,
    /// Its address on the cluster's bridge.
    pub addr: Ipv4Addr,
    /// Its containers' cgroup parent (`--cgroup-parent`), e.g. `/hn4242-2`.
    pub cgroup_parent: String,
    /// Its directory: `data/` (data-root), `exec/` (exec-root), `run/` (its `/run`).
    pub dir: PathBuf,
    host_veth: String,
    dockerd: Option<Child>,
}

impl Node {
    /// The engine's socket as the host sees it (inside the node: /var/run/docker.sock).
    pub fn socket(&self) -> PathBuf {
        self.dir.join("run/docker.sock")
    }

    /// `DOCKER_HOST` for this engine.
    pub fn docker_host(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// `docker -H THIS ARGS`, its stdout trimmed.
    pub fn try_docker(&self, args: &[&str]) -> Result<String> {
        output(
            Command::new("docker")
                .arg("-H")
                .arg(self.docker_host())
                .args(args),
        )
    }

    /// `docker -H THIS ARGS`, its stdout trimmed; panics with its stderr.
    pub fn docker(&self, args: &[&str]) -> String {
        self.try_docker(args)
            .unwrap_or_else(|e| panic!("{}: {e:#}", self.name))
    }

    /// True while its engine process runs.
    pub fn is_up(&self) -> bool {
        self.dockerd.is_some()
    }

    /// The ids of the containers whose cgroups are under this node's cgroup parent now.
    pub fn container_cgroups(&self) -> Vec<String> {
        let dir = unified_root().join(self.cgroup_parent.trim_start_matches('/'));
        let mut ids: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().to_str().map(str::to_owned))
            .collect();
        ids.sort();
        ids
    }

    /// Loses the node as a host that fails does: its link goes down (nothing more reaches
    /// the swarm from it, not even a TCP reset) and every process of it — the engine, its
    /// containerd and shims, its containers — is SIGKILLed. Returns how many processes.
    pub fn lose(&mut self) -> usize {
        let _ = ip(&["link", "set", &self.host_veth, "down"]);
        let n = kill_node_processes(&self.netns, &self.cgroup_parent);
        if let Some(mut c) = self.dockerd.take() {
            let _ = c.wait();
        }
        n
    }

    /// Starts the node's engine in its namespaces and waits (30 s at most) until it answers.
    fn start_engine(&mut self) -> Result<()> {
        for d in ["data", "exec", "run"] {
            std::fs::create_dir_all(self.dir.join(d))?;
        }
        let config = self.dir.join("daemon.json");
        // Never /etc/docker/daemon.json: the host's engine configuration is not the node's.
        std::fs::write(&config, "{}\n")?;
        let log = std::fs::File::create(self.dir.join("dockerd.log"))?;
        let mut cmd = Command::new("dockerd");
        cmd.arg("--config-file")
            .arg(&config)
            .arg("--data-root")
            .arg(self.dir.join("data"))
            .arg("--exec-root")
            .arg(self.dir.join("exec"))
            .arg("--pidfile")
            .arg(self.dir.join("docker.pid"))
            .args(["-H", "unix:///var/run/docker.sock"])
            .args([
                "--bridge",
                "none",
                "--default-address-pool",
                LOCAL_POOL,
                "--iptables=false",
                "--ip-masq=false",
                "--ip-forward=false",
                "--cgroup-parent",
                &self.cgroup_parent,
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let netns = std::fs::File::open(Path::new("/run/netns").join(&self.netns))
            .with_context(|| format!("opening netns {}", self.netns))?;
        let ns_fd = netns.as_raw_fd();
        let hostname = self.name.clone().into_bytes();
        let run_dir = std::ffi::CString::new(self.dir.join("run").as_os_str().as_encoded_bytes())?;
        let (slash, run) = (c"/", c"/run");
        // SAFETY: only async-signal-safe syscalls between fork and exec, on the fd opened and
        // the strings allocated above.
        unsafe {
            cmd.pre_exec(move || {
                let check = |rc: i32| {
                    if rc == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                };
                check(libc::setns(ns_fd, libc::CLONE_NEWNET))?;
                check(libc::unshare(libc::CLONE_NEWUTS | libc::CLONE_NEWNS))?;
                check(libc::sethostname(hostname.as_ptr().cast(), hostname.len()))?;
                // Nothing the node mounts reaches the host; the host's mounts still reach it.
                check(libc::mount(
                    std::ptr::null(),
                    slash.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_SLAVE,
                    std::ptr::null(),
                ))?;
                check(libc::mount(
                    run_dir.as_ptr(),
                    run.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND,
                    std::ptr::null(),
                ))
            });
        }
        let child = cmd
            .spawn()
            .context("starting dockerd (Debian package docker.io; `cargo xtask setup`)")?;
        drop(netns);
        self.dockerd = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while self
            .try_docker(&["version", "--format", "{{.Server.Version}}"])
            .is_err()
        {
            if let Some(st) = self
                .dockerd
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.dockerd = None;
                bail!(
                    "dockerd of {} exited ({st}); its log:\n{}",
                    self.name,
                    std::fs::read_to_string(self.dir.join("dockerd.log")).unwrap_or_default()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "dockerd of {} did not answer within 30 s; its log:\n{}",
                    self.name,
                    std::fs::read_to_string(self.dir.join("dockerd.log")).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// Stops everything of the node and removes its cgroups and directory; its namespace and
    /// veth stay (for [`Cluster::revive`] or the cluster's drop).
    pub fn wipe(&mut self) {
        self.lose();
        remove_cgroups(&self.cgroup_parent);
        if self.dir.exists()
            && let Err(e) = std::fs::remove_dir_all(&self.dir)
        {
            eprintln!("nodes: could not remove {}: {e}", self.dir.display());
        }
    }
}

/// Several engines joined into one swarm; everything removed on drop.
pub struct Cluster {
    /// `hn<pid>`: the prefix of every name it made.
    pub tag: String,
    /// Its directory (`target/nodes/<pid>`).
    pub dir: PathBuf,
    /// The bridge's /24 (first three octets) and its address, where the host side listens.
    pub host_addr: Ipv4Addr,
    /// The bridge's subnet as CIDR (`198.18.X.0/24`).
    pub subnet: String,
    /// The nodes; `nodes[0]` is the manager.
    pub nodes: Vec<Node>,
    /// herd's image, on every node.
    pub image: String,
    bridge: Option<String>,
    /// The image's build context (herd and its libraries), kept to rebuild on a revived node.
    context: PathBuf,
}

/// Everything the nodes of a test process that no longer runs left behind: their engines
/// and every process in their namespaces, cgroups, namespaces, bridge and directories.
pub fn sweep_stale(target: &Path) -> Vec<String> {
    let dead = |name: &str| -> Option<u32> {
        let rest = name.strip_prefix("hn")?;
        let pid: u32 = rest
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()?;
        (!Path::new(&format!("/proc/{pid}")).exists()).then_some(pid)
    };
    let mut removed = Vec::new();
    for e in std::fs::read_dir("/run/netns")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if dead(&name).is_some() && name.contains('-') {
            let parent = format!("/{name}");
            let n = kill_node_processes(&name, &parent);
            remove_cgroups(&parent);
            if ip(&["netns", "del", &name]).is_ok() {
                removed.push(format!("netns {name} ({n} processes)"));
            }
        }
    }
    // Cgroup parents whose namespace is already gone.
    for e in std::fs::read_dir(unified_root())
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if dead(&name).is_some() && name.contains('-') {
            let parent = format!("/{name}");
            kill_node_processes("", &parent);
            remove_cgroups(&parent);
            removed.push(format!("cgroup {parent}"));
        }
    }
    if let Ok(links) = ip(&["-o", "link", "show", "type", "bridge"]) {
        for l in links.lines() {
            let Some(name) = l
                .split(": ")
                .nth(1)
                .map(|n| n.split('@').next().unwrap_or(n))
            else {
                continue;
            };
            if name.ends_with("br") && dead(name).is_some() && ip(&["link", "del", name]).is_ok() {
                removed.push(format!("bridge {name}"));
            }
        }
    }
    for e in std::fs::read_dir(target.join("nodes"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Ok(pid) = name.parse::<u32>()
            && !Path::new(&format!("/proc/{pid}")).exists()
            && std::fs::remove_dir_all(e.path()).is_ok()
        {
            removed.push(format!("directory {}", e.path().display()));
        }
    }
    removed
}

/// The first /24 of 198.18.64.0/20 that no interface of this host's network namespace uses.
fn free_subnet() -> Result<u8> {
    let addrs = ip(&["-4", "-o", "addr", "show"])?;
    SUBNETS
        .clone()
        .find(|o| !addrs.contains(&format!("198.18.{o}.")))
        .context("every /24 of 198.18.64.0/20 is in use on this host")
}

impl Cluster {
    /// Makes `n` nodes under `target/nodes/<pid>/`, joins them into one swarm and builds herd's
    /// image (`herd` is the binary, built by this crate) on each.
    pub fn start(target: &Path, n: usize, herd: &Path) -> Result<Cluster> {
        let swept = sweep_stale(target);
        if !swept.is_empty() {
            eprintln!(
                "nodes: removed what a dead test process left: {}",
                swept.join(", ")
            );
        }
        let pid = std::process::id();
        let tag = format!("hn{pid}");
        let dir = target.join("nodes").join(pid.to_string());
        std::fs::create_dir_all(&dir)?;
        let octet = free_subnet()?;
        let mut c = Cluster {
            host_addr: Ipv4Addr::new(198, 18, octet, 1),
            subnet: format!("198.18.{octet}.0/24"),
            nodes: Vec::new(),
            image: format!("herd-nodes:{pid}"),
            bridge: None,
            context: dir.join("image"),
            dir,
            tag,
        };
        let bridge = format!("{}br", c.tag);
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        c.bridge = Some(bridge.clone());
        // No IPv6 (link-local autoconfiguration) on what the test made: IPv4 in 198.18.0.0/15 only.
        std::fs::write(
            format!("/proc/sys/net/ipv6/conf/{bridge}/disable_ipv6"),
            "1",
        )?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", c.host_addr),
            "dev",
            &bridge,
        ])?;
        ip(&["link", "set", &bridge, "up"])?;
        for i in 1..=n {
            c.add_node(i)?;
        }
        let t = Instant::now();
        c.image_context(herd)?;
        std::thread::scope(|s| {
            let handles: Vec<_> = c
                .nodes
                .iter()
                .map(|node| s.spawn(|| build_image(node, &c.image, &c.context)))
                .collect();
            handles
                .into_iter()
                .try_for_each(|h| h.join().expect("image build thread"))
        })?;
        eprintln!(
            "nodes: herd's image {} built on {} nodes in {:.1} s",
            c.image,
            n,
            t.elapsed().as_secs_f64()
        );
        c.init_swarm()?;
        for i in 1..n {
            c.join(i)?;
        }
        Ok(c)
    }

    /// Node `i` (1-based): namespace, veth to the bridge, address, engine.
    fn add_node(&mut self, i: usize) -> Result<()> {
        let netns = format!("{}-{i}", self.tag);
        let host_veth = format!("{}v{i}", self.tag);
        let o = self.host_addr.octets();
        let node = Node {
            name: format!("node-{i}"),
            addr: Ipv4Addr::new(o[0], o[1], o[2], 10 + i as u8),
            cgroup_parent: format!("/{netns}"),
            dir: self.dir.join(i.to_string()),
            netns: netns.clone(),
            host_veth: host_veth.clone(),
            dockerd: None,
        };
        let bridge = self.bridge.clone().context("the bridge")?;
        ip(&["netns", "add", &netns])?;
        // Pushed now: from here on the drop removes it.
        self.nodes.push(node);
        let node = self.nodes.last_mut().expect("just pushed");
        output(
            Command::new("ip")
                .args(["netns", "exec", &netns, "sh", "-c"])
                .arg(
                    "echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; \
             echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6",
                ),
        )?;
        ip(&[
            "link", "add", &host_veth, "type", "veth", "peer", "name", "eth0", "netns", &netns,
        ])?;
        std::fs::write(
            format!("/proc/sys/net/ipv6/conf/{host_veth}/disable_ipv6"),
            "1",
        )?;
        ip(&["link", "set", &host_veth, "master", &bridge])?;
        ip(&["link", "set", &host_veth, "up"])?;
        ip(&[
            "-n",
            &netns,
            "addr",
            "add",
            &format!("{}/24", node.addr),
            "dev",
            "eth0",
        ])?;
        ip(&["-n", &netns, "link", "set", "eth0", "up"])?;
        ip(&["-n", &netns, "link", "set", "lo", "up"])?;
        let t = Instant::now();
        node.start_engine()?;
        eprintln!(
            "nodes: {} ({}, netns {}, cgroup parent {}) answers after {:.1} s",
            node.name,
            node.addr,
            node.netns,
            node.cgroup_parent,
            t.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// herd's binary (debug info stripped) and the libraries `ldd` lists, FROM scratch.
    fn image_context(&self, herd: &Path) -> Result<()> {
        let root = self.context.join("rootfs");
        std::fs::create_dir_all(&root)?;
        let stripped = Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(root.join("herd"))
            .arg(herd)
            .status()
            .is_ok_and(|s| s.success());
        if !stripped {
            std::fs::copy(herd, root.join("herd"))?;
        }
        let ldd = output(Command::new("ldd").arg(herd))?;
        for line in ldd.lines() {
            let lib = match line.split_once("=>") {
                Some((_, rhs)) => rhs.split_whitespace().next(),
                None => line.split_whitespace().next(),
            };
            let Some(lib) = lib.filter(|l| l.starts_with('/')) else {
                continue;
            };
            let dest = root.join(lib.trim_start_matches('/'));
            std::fs::create_dir_all(dest.parent().context("a library's directory")?)?;
            std::fs::copy(lib, &dest).with_context(|| format!("copying {lib}"))?;
        }
        std::fs::write(
            self.context.join("Dockerfile"),
            "FROM scratch\nCOPY rootfs/ /\nENTRYPOINT [\"/herd\"]\n",
        )?;
        Ok(())
    }

    /// `docker swarm init` on node 1: advertising its bridge address, the overlay pool in
    /// 198.18.0.0/15, and a 1 s heartbeat so a lost node is marked down in seconds.
    fn init_swarm(&self) -> Result<()> {
        let m = &self.nodes[0];
        let addr = m.addr.to_string();
        m.try_docker(&[
            "swarm",
            "init",
            "--advertise-addr",
            &addr,
            "--listen-addr",
            &format!("{addr}:2377"),
            "--default-addr-pool",
            SWARM_POOL,
            "--default-addr-pool-mask-length",
            "24",
            "--dispatcher-heartbeat",
            HEARTBEAT,
        ])?;
        Ok(())
    }

    /// Node `i` (0-based) joins the swarm as a worker.
    fn join(&self, i: usize) -> Result<()> {
        let token = self.nodes[0].try_docker(&["swarm", "join-token", "-q", "worker"])?;
        let n = &self.nodes[i];
        let addr = n.addr.to_string();
        n.try_docker(&[
            "swarm",
            "join",
            "--token",
            &token,
            "--advertise-addr",
            &addr,
            "--listen-addr",
            &format!("{addr}:2377"),
            &format!("{}:2377", self.nodes[0].addr),
        ])?;
        Ok(())
    }

    /// The manager (node 1).
    pub fn manager(&self) -> &Node {
        &self.nodes[0]
    }

    /// `docker node ls` on the manager: (hostname, status) of every node.
    pub fn node_states(&self) -> Vec<(String, String)> {
        self.manager()
            .docker(&["node", "ls", "--format", "{{.Hostname}} {{.Status}}"])
            .lines()
            .filter_map(|l| {
                let (h, s) = l.split_once(' ')?;
                Some((h.to_owned(), s.to_owned()))
            })
            .collect()
    }

    /// Brings back a node that was lost ([`Node::lose`]): the manager forgets it, its
    /// leftovers (the dead containers' cgroups, its data-root) are removed, and a fresh
    /// engine joins the swarm again with herd's image built anew.
    pub fn revive(&mut self, i: usize) -> Result<()> {
        let t = Instant::now();
        let name = self.nodes[i].name.clone();
        // The lost node's entry, and any earlier one of the same name.
        let ids = self.manager().try_docker(&[
            "node",
            "ls",
            "--filter",
            &format!("name={name}"),
            "--format",
            "{{.ID}}",
        ])?;
        for id in ids.split_whitespace() {
            self.manager().try_docker(&["node", "rm", "--force", id])?;
        }
        let node = &mut self.nodes[i];
        node.wipe();
        ip(&["link", "set", &node.host_veth, "up"])?;
        node.start_engine()?;
        build_image(node, &self.image, &self.context)?;
        self.join(i)?;
        eprintln!(
            "nodes: {name} revived (wiped, engine restarted, image rebuilt, joined) in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        Ok(())
    }
}

/// Builds `tag` from `context` on `node`.
fn build_image(node: &Node, tag: &str, context: &Path) -> Result<()> {
    node.try_docker(&["build", "-q", "-t", tag, &context.to_string_lossy()])
        .map(|_| ())
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let t = Instant::now();
        for node in &mut self.nodes {
            // Nothing of a node is kept: SIGKILL is as good as a clean stop, and faster.
            node.wipe();
            // The killed processes' TCP sockets linger as orphans (FIN_WAIT, retried for
            // minutes toward peers that are gone) and each holds the namespace, and with it
            // the veth pair, alive: destroy them first (SOCK_DESTROY, CONFIG_INET_DIAG_DESTROY).
            let _ = output(
                Command::new("nsenter")
                    .arg(format!("--net=/run/netns/{}", node.netns))
                    .args(["ss", "-K", "-t", "-a"]),
            );
            if let Err(e) = ip(&["netns", "del", &node.netns]) {
                eprintln!("nodes: {e:#}");
            }
        }
        // The namespaces go once nothing holds them; their veths with them.
        let deadline = Instant::now() + Duration::from_secs(10);
        while self
            .nodes
            .iter()
            .any(|n| Path::new("/sys/class/net").join(&n.host_veth).exists())
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(100));
        }
        for n in &self.nodes {
            if Path::new("/sys/class/net").join(&n.host_veth).exists() {
                eprintln!(
                    "nodes: {} is still there: something holds the namespace {}",
                    n.host_veth, n.netns
                );
            }
        }
        if let Some(b) = self.bridge.take()
            && let Err(e) = ip(&["link", "del", &b])
        {
            eprintln!("nodes: {e:#}");
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            eprintln!("nodes: could not remove {}: {e}", self.dir.display());
        }
        // target/nodes itself, once no other test process has nodes in it.
        if let Some(parent) = self.dir.parent() {
            let _ = std::fs::remove_dir(parent);
        }
        eprintln!(
            "nodes: {} nodes, their namespaces and the bridge removed in {:.1} s",
            self.nodes.len(),
            t.elapsed().as_secs_f64()
        );
    }
}
