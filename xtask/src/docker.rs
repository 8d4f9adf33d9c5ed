//! A Docker engine for the privileged tests: the one `DOCKER_HOST` names (or the default
//! socket) when it answers, else a private `dockerd` that xtask starts and stops itself.
//!
//! The private engine never touches another engine's configuration: its data-root,
//! exec-root, pidfile and socket are under `target/docker/`, it creates no default bridge
//! (`--bridge none`: the tests attach every container to a network they create, with an
//! explicit subnet), its default address pool is 198.19.16.0/20 (inside 198.18.0.0/15, clear
//! of herd's sandbox, which takes 198.18.0.0/16 and /30s in 198.19.64.0–198.19.253.255), and it
//! leaves the host's iptables,
//! masquerading and ip_forward alone (containers on one bridge reach each other and the host
//! without them; the tests send nothing beyond their own networks).

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

/// The default engine socket.
const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

/// The private engine's directory.
pub fn dir(root: &Path) -> PathBuf {
    root.join("target/docker")
}

/// An engine the tests can use; a private one is stopped on drop.
pub struct Engine {
    host: String,
    started: Option<Child>,
    dir: PathBuf,
}

impl Engine {
    /// What to put in `DOCKER_HOST` for the tests (herd's discovery reads it too).
    pub fn host(&self) -> &str {
        &self.host
    }
}

/// True when the engine at `host` answers `docker version` within 10 s.
fn answers(host: &str) -> bool {
    Command::new("timeout")
        .args(["10", "docker", "-H", host, "version", "--format"])
        .arg("{{.Server.Version}}")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The engine to test against: `DOCKER_HOST`'s when set (an error when it does not answer:
/// the user asked for that one), else the default socket's, else a private `dockerd` started
/// now (root only; without root `None`, and the Docker tests skip themselves or fail under
/// CI=true).
pub fn ensure(root: &Path, is_root: bool) -> Result<Option<Engine>> {
    let dir = dir(root);
    if let Ok(host) = std::env::var("DOCKER_HOST") {
        if !answers(&host) {
            bail!(
                "DOCKER_HOST={host} does not answer `docker version`; start that engine, or \
                 unset DOCKER_HOST so xtask starts its own under {}",
                dir.display()
            );
        }
        eprintln!("xtask: Docker tests use the engine at DOCKER_HOST={host}");
        return Ok(Some(Engine {
            host,
            started: None,
            dir,
        }));
    }
    if answers(DEFAULT_HOST) {
        eprintln!("xtask: Docker tests use the running engine at {DEFAULT_HOST}");
        return Ok(Some(Engine {
            host: DEFAULT_HOST.into(),
            started: None,
            dir,
        }));
    }
    if !is_root {
        eprintln!("xtask: no Docker engine answers and dockerd needs root: not starting one");
        return Ok(None);
    }
    start(&dir).map(Some)
}

/// Starts the private engine and waits until it answers.
fn start(dir: &Path) -> Result<Engine> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    stop_stale(dir);
    // A namespace an earlier run's dockerd left bound (before herd released them).
    release_netns(dir);
    let sock = dir.join("docker.sock");
    let _ = std::fs::remove_file(&sock);
    let host = format!("unix://{}", sock.display());
    let log_path = dir.join("dockerd.log");
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let mut cmd = Command::new("dockerd");
    cmd.arg("--data-root")
        .arg(dir.join("data"))
        .arg("--exec-root")
        .arg(dir.join("exec"))
        .arg("--pidfile")
        .arg(dir.join("docker.pid"))
        .args(["-H", &host])
        .args([
            "--bridge",
            "none",
            "--default-address-pool",
            "base=198.19.16.0/20,size=24",
            "--iptables=false",
            "--ip-masq=false",
            "--ip-forward=false",
        ])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    eprintln!("xtask: {}", crate::show(&cmd));
    let mut child = cmd
        .spawn()
        .context("starting dockerd (Debian package docker.io; `cargo xtask setup` installs it)")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if answers(&host) {
            break;
        }
        if let Some(st) = child.try_wait()? {
            bail!(
                "dockerd exited ({st}) before answering on {host}; its log ({}):\n{}",
                log_path.display(),
                tail(&log_path)
            );
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "dockerd did not answer on {host} within 60 s; its log ({}):\n{}",
                log_path.display(),
                tail(&log_path)
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!("xtask: private Docker engine up: DOCKER_HOST={host}");
    Ok(Engine {
        host,
        started: Some(child),
        dir: dir.to_owned(),
    })
}

fn tail(path: &Path) -> String {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// A dockerd left by an interrupted xtask (its pidfile names a live dockerd): stopped, so
/// the new one can take the data-root.
fn stop_stale(dir: &Path) {
    let Some(pid) = std::fs::read_to_string(dir.join("docker.pid"))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
    else {
        return;
    };
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    if comm.trim() != "dockerd" {
        return;
    }
    eprintln!("xtask: stopping the private dockerd {pid} an earlier run left");
    terminate(pid, Duration::from_secs(30));
}

/// Unmounts the network namespaces dockerd leaves bound under its exec-root: with a swarm
/// (the swarm tests make one) libnetwork binds its ingress sandbox at `exec/netns/default`
/// and does not release it when dockerd stops. Each is a namespace kept alive by the mount.
fn release_netns(dir: &Path) {
    let root = dir.join("exec");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    for point in mounts.lines().filter_map(|l| l.split(' ').nth(1)) {
        let path = Path::new(point);
        if !path.starts_with(&root) {
            continue;
        }
        let Ok(c) = std::ffi::CString::new(point) else {
            continue;
        };
        // SAFETY: umount2 with a valid NUL-terminated path; MNT_DETACH as the namespace's
        // holders (none once dockerd is gone) would only delay it.
        if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
            let _ = std::fs::remove_file(path);
            eprintln!("xtask: released the network namespace dockerd left at {point}");
        } else {
            eprintln!(
                "xtask: could not unmount {point} ({}); `umount {point}` releases it",
                std::io::Error::last_os_error()
            );
        }
    }
}

/// SIGTERM, then SIGKILL after `grace`.
fn terminate(pid: i32, grace: Duration) {
    // SAFETY: kill has no memory preconditions; pid is a dockerd this module started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + grace;
    while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    if Path::new(&format!("/proc/{pid}")).exists() {
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let Some(mut child) = self.started.take() else {
            return;
        };
        // SIGTERM: dockerd stops its containers, unmounts its data-root and removes its
        // socket and pidfile; what the tests made they removed themselves.
        // SAFETY: kill has no memory preconditions; the pid is our child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                eprintln!(
                    "xtask: private Docker engine stopped ({})",
                    self.dir.display()
                );
                release_netns(&self.dir);
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("xtask: dockerd ignored SIGTERM for 30 s; killing it");
        let _ = child.kill();
        let _ = child.wait();
        release_netns(&self.dir);
    }
}
