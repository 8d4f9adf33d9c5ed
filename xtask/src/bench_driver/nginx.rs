//! The server: Debian's nginx with a config of our own in the scratch directory, on
//! 127.0.0.1 only, pinned to its core, never the system service.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use super::harness::{SERVER_CORE, confine, nofile};

pub(super) const H1_PORT: u16 = 18_080;
pub(super) const H2C_PORT: u16 = 18_081;

/// nginx with a config of our own; stopped (and waited for) on drop.
pub(super) struct Nginx {
    child: std::process::Child,
    error_log: PathBuf,
}

/// Bytes per second of each scale-run stream; the file lasts [`STREAM_BYTES`] / this.
pub(super) const STREAM_RATE: usize = 256;
/// Size of the stream's file: 256 s at [`STREAM_RATE`], longer than any scale run.
const STREAM_BYTES: usize = 64 * 1024;

/// How nginx is set up for a run.
pub(super) struct Setup {
    /// Connections per worker.
    pub worker_connections: usize,
    /// Worker processes: more than one when the connections exceed one process's
    /// RLIMIT_NOFILE (each worker has its own; `reuseport` spreads connections over them).
    pub workers: usize,
    /// Log every request to `access.log` (the scale run's ground truth).
    pub access_log: bool,
}

fn nginx_config(dir: &Path, setup: &Setup) -> String {
    let d = dir.display();
    let nofile = nofile();
    let worker_connections = setup.worker_connections;
    let workers = setup.workers;
    let access_log = if setup.access_log {
        format!("access_log {d}/access.log combined buffer=256k flush=1s")
    } else {
        "access_log off".to_owned()
    };
    let reuseport = if workers > 1 { " reuseport" } else { "" };
    format!(
        "# Written by cargo xtask bench-driver; removed with its directory.
daemon off;
master_process on;
worker_processes {workers};
worker_rlimit_nofile {nofile};
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections {worker_connections};
    multi_accept on;
}}
http {{
    {access_log};
    keepalive_requests 1000000000;
    keepalive_timeout 300s;
    http2_max_concurrent_streams 128;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen 127.0.0.1:{H1_PORT} backlog=16384{reuseport};
        listen 127.0.0.1:{H2C_PORT} http2 backlog=16384{reuseport};
        location / {{
            default_type text/plain;
            return 200 \"ok\";
        }}
        # The scale run's open stream per player: a file sent at {STREAM_RATE} bytes/s, so
        # the response stays open for minutes and trickles chunks (each one an event).
        location = /stream {{
            alias {d}/stream.bin;
            # One descriptor for every stream: 10 000 open copies of the file would take
            # nginx past its RLIMIT_NOFILE beside 10 000 connections (500s).
            open_file_cache max=16 inactive=10m;
            default_type application/octet-stream;
            limit_rate {STREAM_RATE};
        }}
    }}
}}
"
    )
}

impl Nginx {
    pub(super) fn start(dir: &Path, setup: &Setup) -> Result<Self> {
        for port in [H1_PORT, H2C_PORT] {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                bail!("127.0.0.1:{port} is already taken; stop what listens there and rerun");
            }
        }
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, nginx_config(dir, setup))?;
        std::fs::write(dir.join("stream.bin"), vec![b'.'; STREAM_BYTES])?;
        let error_log = dir.join("error.log");
        let mut cmd = Command::new("nginx");
        cmd.arg("-c")
            .arg(&conf)
            .arg("-p")
            .arg(dir)
            .arg("-e")
            .arg(&error_log)
            .stdin(Stdio::null());
        confine(&mut cmd, SERVER_CORE, true);
        let child = cmd
            .spawn()
            .context("starting nginx (run `cargo xtask setup` to install it)")?;
        let mut nginx = Self { child, error_log };
        // Ready once both ports answer.
        let deadline = Instant::now() + Duration::from_secs(5);
        for port in [H1_PORT, H2C_PORT] {
            while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                if Instant::now() > deadline || nginx.child.try_wait()?.is_some() {
                    bail!(
                        "nginx did not listen on 127.0.0.1:{port} within 5s; its log: {}",
                        std::fs::read_to_string(&nginx.error_log).unwrap_or_default()
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(nginx)
    }

    /// Requests nginx logged (`access_log` on); complete once nginx has stopped.
    pub(super) fn logged(dir: &Path) -> Result<u64> {
        let log = std::fs::read(dir.join("access.log")).context("reading nginx's access log")?;
        Ok(log.iter().filter(|&&b| b == b'\n').count() as u64)
    }

    /// Every worker's pid (the master's children).
    pub(super) fn workers(&self) -> Vec<u32> {
        let pid = self.child.id();
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// The worker's pid (the master's only child).
    pub(super) fn worker(&self) -> Option<u32> {
        let pid = self.child.id();
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return; // already reaped: its pid may belong to someone else by now
        }
        // SIGTERM: fast shutdown of the master and its worker.
        // SAFETY: signalling our own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}
