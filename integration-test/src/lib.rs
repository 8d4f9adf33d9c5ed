//! Fixtures for herd's privileged tests: containers made of cgroups + netns + veth (from
//! `herd_testbed::sandbox`), real client and server processes, and the privilege gate.
//!
//! Every test calls [`privileged`] first. Outside CI a host without root skips with a message
//! saying why; under `CI=true` the same condition fails the test, so CI never passes by
//! skipping.

use std::{
    io::{BufRead as _, BufReader},
    net::Ipv4Addr,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use herd_probe::{KernelProbe, ProbeOptions};

pub mod findings;
pub mod nodes;
use herd_testbed::{Container, Sandbox};

/// True when the test may run. Panics under `CI=true` when it may not.
pub fn privileged(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if root {
        return true;
    }
    let why =
        format!("{test}: needs root (loads eBPF programs, creates cgroups and network namespaces)");
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("{why}; CI must run the privileged tests as root");
    }
    eprintln!("SKIPPED {why}");
    false
}

/// Loads herd's probe into the running kernel, or panics with what the kernel refused: the
/// program and the verifier's log, or the BTF struct member this kernel lacks, and the kernel
/// release (the VM tests run the same binary on several kernels).
pub fn load_probe() -> KernelProbe {
    load_probe_with(&ProbeOptions::default())
}

/// [`load_probe`] with the connect() syscall tracepoints attached too
/// ([`ProbeOptions::connect_syscalls`]).
pub fn load_probe_with_connect_syscalls() -> KernelProbe {
    load_probe_with(&ProbeOptions {
        connect_syscalls: true,
        ..ProbeOptions::default()
    })
}

fn load_probe_with(opts: &ProbeOptions) -> KernelProbe {
    KernelProbe::load(opts).unwrap_or_else(|e| {
        let log = e
            .verifier_log()
            .map(|l| format!("\nverifier log:\n{l}"))
            .unwrap_or_default();
        panic!(
            "loading herd's probe on Linux {}: {e}{log}",
            kernel_release()
        )
    })
}

/// `uname -r` of the running kernel.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| r.trim().to_owned())
        .unwrap_or_else(|e| format!("(unknown: /proc/sys/kernel/osrelease: {e})"))
}

/// True when the running kernel is `major.minor` or newer.
pub fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = kernel_release();
    let mut it = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0)) >= (major, minor)
}

/// A client container and a server container joined by a veth pair, plus an idle bystander
/// container that must see nothing.
pub struct Pair {
    /// The sandbox; dropping it removes everything.
    pub sandbox: Sandbox,
    /// Where the client runs.
    pub client: Container,
    /// Where the server runs.
    pub server: Container,
    /// A container with no processes.
    pub idle: Container,
    /// The server's address.
    pub server_ip: Ipv4Addr,
}

impl Pair {
    /// Creates the three containers and the link.
    pub fn new(purpose: &str) -> Result<Self> {
        let mut sandbox = Sandbox::new(purpose)?;
        let client = sandbox.container("client", None)?;
        let server = sandbox.container("server", None)?;
        let idle = sandbox.container("idle", None)?;
        let (_, server_ip) = sandbox.link(&client, &server)?;
        Ok(Self {
            sandbox,
            client,
            server,
            idle,
            server_ip,
        })
    }

    /// Starts `herd-workload tcp-server` in the server container and waits until it listens.
    pub fn start_server(&mut self, port: u16, extra: &[&str]) -> Result<usize> {
        let mut cmd = workload_cmd();
        cmd.args(["tcp-server", "--listen"])
            .arg(format!("{}:{port}", self.server_ip))
            .args(extra)
            .stdout(Stdio::piped());
        let server = self.server.clone();
        let h = self.sandbox.spawn(&server, cmd)?;
        let out = self
            .sandbox
            .child(h)
            .stdout
            .take()
            .context("server stdout")?;
        let mut line = String::new();
        BufReader::new(out).read_line(&mut line)?;
        if !line.starts_with("ready") {
            bail!("test server did not start: {line:?}");
        }
        Ok(h)
    }

    /// Runs `herd-workload tcp-client` in the client container to completion and returns
    /// its report line (`connected N failed M`).
    pub fn run_client(&mut self, port: u16, count: u64, extra: &[&str]) -> Result<String> {
        let target = format!("{}:{port}", self.server_ip);
        let count = count.to_string();
        let mut args = vec!["tcp-client", "--target", &target, "--count", &count];
        args.extend_from_slice(extra);
        self.run_workload_in_client(&args)
    }

    /// Runs `herd-workload <args>` in the client container to completion (60 s at most) and
    /// returns its report line.
    pub fn run_workload_in_client(&mut self, args: &[&str]) -> Result<String> {
        let mut cmd = workload_cmd();
        cmd.args(args).stdout(Stdio::piped());
        let client = self.client.clone();
        let h = self.sandbox.spawn(&client, cmd)?;
        let child = self.sandbox.child(h);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = child.try_wait()? {
                let mut out = String::new();
                std::io::Read::read_to_string(
                    child.stdout.as_mut().context("client stdout")?,
                    &mut out,
                )?;
                if !st.success() {
                    bail!("test client failed ({st}): {out}");
                }
                return Ok(out.trim().to_owned());
            }
            if Instant::now() > deadline {
                bail!("test client did not finish in 60 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sets a per-netns sysctl (`net.ipv4.*`) inside `c`'s network namespace.
    pub fn sysctl(&self, c: &Container, key: &str, value: &str) -> Result<()> {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        let out = Command::new("ip")
            .args(["netns", "exec", &c.netns, "sh", "-c"])
            .arg(format!("echo '{value}' > {path}"))
            .output()?;
        if !out.status.success() {
            bail!(
                "setting {key}={value} in {}: {}",
                c.netns,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }
}

/// The herd CLI built by this crate (`src/bin/herd.rs`).
pub fn herd_cmd() -> Command {
    bin_cmd("herd")
}

/// The test workloads' command line built by this crate (`src/bin/herd-workload.rs`).
pub fn workload_cmd() -> Command {
    bin_cmd("herd-workload")
}

/// A binary of this crate. Cargo puts it next to the test binaries' `deps/` directory;
/// `CARGO_BIN_EXE_<name>` only exists inside test crates, so the library finds it the same
/// way at run time.
fn bin_cmd(name: &str) -> Command {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("tests run from target/<profile>/deps");
    let bin = dir.join(name);
    assert!(
        bin.exists(),
        "{} is missing; run the tests through `cargo test -p integration-test`, which builds it",
        bin.display()
    );
    Command::new(bin)
}

/// Ids of every BPF program loaded in the kernel right now.
pub fn loaded_program_ids() -> Vec<u32> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .map(|p| p.id())
        .collect()
}

/// Ids of the BPF programs process `pid` holds file descriptors to (from
/// `/proc/<pid>/fdinfo`, whose `prog_id:` line names the program behind each bpf fd).
pub fn program_ids_of(pid: u32) -> Vec<u32> {
    let dir = Path::new("/proc").join(pid.to_string()).join("fdinfo");
    let mut ids = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if let Ok(s) = std::fs::read_to_string(e.path()) {
                ids.extend(
                    s.lines()
                        .filter_map(|l| l.strip_prefix("prog_id:"))
                        .filter_map(|v| v.trim().parse::<u32>().ok()),
                );
            }
        }
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// A throwaway PostgreSQL server: a fresh cluster in a temporary directory, listening on
/// 127.0.0.1 only, trust authentication, run as the `postgres` user (the server refuses root).
/// Stopped and deleted on drop, also when the test panics.
pub struct Postgres {
    /// Removed after [`Drop`] has stopped the server.
    dir: herd_testkit::TempDir,
    bin: std::path::PathBuf,
    /// `postgres://postgres@127.0.0.1:PORT/postgres`
    pub url: String,
}

impl Postgres {
    /// Creates and starts the cluster.
    pub fn start() -> Result<Self> {
        Self::start_listening(None)
    }

    /// Creates and starts the cluster listening on `addr` too (an address of a bridge the test
    /// made, in 198.18.0.0/15), trusting clients from `clients` (a CIDR inside 198.18.0.0/15);
    /// its URL names `addr`, so processes in other network namespaces on that bridge reach it.
    pub fn start_on(addr: Ipv4Addr, clients: &str) -> Result<Self> {
        Self::start_listening(Some((addr, clients)))
    }

    fn start_listening(on: Option<(Ipv4Addr, &str)>) -> Result<Self> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .context("PostgreSQL is not installed (`cargo xtask setup` installs it)")?
            .flatten()
            .map(|e| e.path().join("bin"))
            .find(|b| b.join("initdb").exists())
            .context("no initdb under /usr/lib/postgresql/*/bin")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let host = on.map_or(Ipv4Addr::LOCALHOST, |(a, _)| a);
        let pg = Postgres {
            url: format!("postgres://postgres@{host}:{port}/postgres"),
            dir: herd_testkit::TempDir::new(&format!("pg-{port}")),
            bin: bin.clone(),
        };
        let dir = pg.dir.path();
        let chown = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir)
            .status()?;
        if !chown.success() {
            bail!("chown of {} to postgres failed", dir.display());
        }
        let as_postgres = |tool: &str| {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(bin.join(tool));
            c
        };
        let data = dir.join("data");
        let out = as_postgres("initdb")
            .args(["-A", "trust", "-U", "postgres", "-D"])
            .arg(&data)
            .output()?;
        if !out.status.success() {
            bail!("initdb: {}", String::from_utf8_lossy(&out.stderr));
        }
        let mut listen = "127.0.0.1".to_owned();
        if let Some((addr, clients)) = on {
            listen.push_str(&format!(",{addr}"));
            let hba = data.join("pg_hba.conf");
            let mut text = std::fs::read_to_string(&hba)?;
            text.push_str(&format!("host all all {clients} trust\n"));
            std::fs::write(&hba, text)?;
        }
        let out = as_postgres("pg_ctl")
            .arg("-D")
            .arg(&data)
            .args(["-w", "-t", "30", "-l"])
            .arg(dir.join("log"))
            .arg("-o")
            .arg(format!(
                "-p {port} -k {} -c listen_addresses={listen} -c fsync=off",
                dir.display()
            ))
            .arg("start")
            .output()?;
        if !out.status.success() {
            let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
            bail!(
                "pg_ctl start: {}{log}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(pg)
    }
}

impl Postgres {
    /// Stops the server at once (`pg_ctl stop -m immediate`: every connection is cut, as when
    /// the database host dies), leaving its files for [`Drop`] to remove.
    pub fn stop(&self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `docker ARGS`, its stdout trimmed; panics with its stderr on failure.
pub fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("running docker {args:?}: {e} (Debian package docker.io; `cargo xtask setup`)")
        });
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// True when a Docker engine answers; under CI=true its absence fails the test.
pub fn docker_engine(test: &str) -> bool {
    let ok = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return true;
    }
    let why = format!(
        "{test}: no Docker engine answers at DOCKER_HOST={:?} (or /var/run/docker.sock); \
         `cargo xtask integration-test docker` (or `swarm`) starts a private one",
        std::env::var("DOCKER_HOST").ok()
    );
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("{why}; CI must run the Docker tests");
    }
    eprintln!("SKIPPED {why}");
    false
}

/// nginx with a config of our own on a free loopback port, every request in its access log;
/// stopped (SIGQUIT to the master, which waits for its workers) and waited for on drop.
pub struct Nginx {
    child: std::process::Child,
    /// Its port.
    pub port: u16,
    /// The address it listens on (127.0.0.1 unless [`Nginx::start_on`]).
    pub addr: Ipv4Addr,
    dir: herd_testkit::TempDir,
}

/// One line of [`Nginx`]'s access log.
#[derive(Clone, Debug, PartialEq)]
pub struct Access {
    /// When nginx logged it (`$msec`: seconds since the epoch, ms resolution).
    pub at: f64,
    /// The client's address (`$remote_addr`).
    pub from: Ipv4Addr,
    /// The connection's serial number (`$connection`): one per TCP connection nginx accepted.
    pub connection: u64,
    /// The path asked for (`$uri`).
    pub uri: String,
}

impl Nginx {
    /// Starts it on a free loopback port; `purpose` names its temporary directory.
    pub fn start(purpose: &str) -> Nginx {
        Self::start_on(purpose, Ipv4Addr::LOCALHOST)
    }

    /// Starts it on a free port of `addr` (127.0.0.1, or an address of a bridge the test made
    /// in 198.18.0.0/15).
    pub fn start_on(purpose: &str, addr: Ipv4Addr) -> Nginx {
        let dir = herd_testkit::TempDir::new(purpose);
        let port = std::net::TcpListener::bind((addr, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let d = dir.path().display();
        let conf = dir.write(
            "nginx.conf",
            format!(
                "daemon off;\nmaster_process on;\nworker_processes 1;\npid {d}/nginx.pid;\n\
                 error_log {d}/error.log warn;\nevents {{ worker_connections 4096; }}\n\
                 http {{\n  log_format herd '$msec $remote_addr $connection $uri';\n  \
                 access_log {d}/access.log herd;\n  client_body_temp_path {d}/body;\n  \
                 proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  \
                 uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  \
                 server {{\n    listen {addr}:{port};\n    \
                 location / {{ default_type text/plain; return 200 \"ok\"; }}\n  }}\n}}\n"
            ),
        );
        let child = Command::new("nginx")
            .arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdin(std::process::Stdio::null())
            .spawn()
            .expect("starting nginx (`cargo xtask setup` installs it)");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::net::TcpStream::connect((addr, port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "nginx did not listen on {port}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // The readiness connect above is no request: nginx logs none for it.
        Nginx {
            child,
            port,
            addr,
            dir,
        }
    }

    /// Every request nginx has logged so far.
    pub fn accesses(&self) -> Vec<Access> {
        std::fs::read_to_string(self.dir.join("access.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut f = l.split(' ');
                Some(Access {
                    at: f.next()?.parse().ok()?,
                    from: f.next()?.parse().ok()?,
                    connection: f.next()?.parse().ok()?,
                    uri: f.next()?.to_owned(),
                })
            })
            .collect()
    }

    /// Requests nginx has logged so far.
    pub fn logged(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("access.log"))
            .unwrap_or_default()
            .lines()
            .count() as u64
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGQUIT) };
        let _ = self.child.wait();
    }
}

/// A tmpfs of `size` (e.g. `256k`) mounted on a fresh directory, unmounted and removed on drop:
/// a real filesystem that fills up.
pub struct Tmpfs {
    dir: herd_testkit::TempDir,
}

impl Tmpfs {
    /// Mounts it (needs root).
    pub fn mount(purpose: &str, size: &str) -> Result<Self> {
        let dir = herd_testkit::TempDir::new(purpose);
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "herd-test",
            ])
            .arg(dir.path())
            .output()?;
        if !out.status.success() {
            bail!("mount -t tmpfs: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(Tmpfs { dir })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).output();
    }
}
