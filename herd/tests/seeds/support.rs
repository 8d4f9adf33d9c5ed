//! What the seed tests share: a server process started on a free loopback port and killed
//! when dropped, a plain HTTP/1.1 client for filling servers, and `herd run`.

use std::{
    io::{Read, Write},
    net::{Shutdown, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

/// A server process the test started; killed and reaped when dropped, so a failed assertion
/// leaves nothing running.
pub struct Proc {
    pub child: Child,
    pub what: &'static str,
    /// Stop with SIGTERM first: nginx's master then stops its workers, which a SIGKILL to
    /// the master would leave running (holding the port and the test's pipes).
    pub term_first: bool,
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.term_first {
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    /// Starts `cmd`, or panics saying what to install: a seed test never passes by skipping.
    pub fn spawn(what: &'static str, cmd: &mut Command) -> Self {
        let child = cmd.stdin(Stdio::null()).spawn().unwrap_or_else(|e| {
            panic!("starting {what} ({cmd:?}): {e}; `cargo xtask setup` installs it from Debian")
        });
        Self {
            child,
            what,
            term_first: false,
        }
    }

    /// Waits until `addr` answers `GET path`, or panics after 20 s with what the log says.
    pub fn wait_ready(&mut self, addr: &str, path: &str, log: &Path) {
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            if let Some(st) = self.child.try_wait().unwrap() {
                panic!(
                    "{} exited with {st} before it served: {}",
                    self.what,
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            if request(addr, "GET", path, &[], b"").is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "{} did not answer on {addr} within 20 s: {}",
            self.what,
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
}

/// A loopback port nothing listens on now (the kernel's pick for a socket bound to port 0).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A response: status, headers (names lowercase) and body.
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 exchange on its own connection (`Connection: close`, body read to EOF).
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Resp> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let _ = s.shutdown(Shutdown::Both);
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of head"))?;
    let text = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = text.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("no status"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(Resp {
        status,
        headers,
        body: raw[end + 4..].to_vec(),
    })
}

/// The repository's `examples/seeds/<name>`.
pub fn seed_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/seeds")
        .join(name)
}

/// `herd run FILE --no-probe --quiet` with `sets`, writing its report under `out`.
pub fn herd_run(file: &Path, sets: &[String], out: &Path) -> Output {
    herd_run_env(file, sets, out, &[])
}

/// [`herd_run`] with environment variables set (a seed URL).
pub fn herd_run_env(file: &Path, sets: &[String], out: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_herd"));
    cmd.arg("run")
        .arg(file)
        .args([
            "--no-probe",
            "--quiet",
            "--interval",
            "500ms",
            "--grace",
            "5s",
        ])
        .arg("--out")
        .arg(out);
    for s in sets {
        cmd.arg("--set").arg(s);
    }
    cmd.envs(env.iter().copied());
    cmd.stdin(Stdio::null()).output().unwrap()
}

/// The JSON report `herd run` wrote under `out`.
pub fn report(out: &Path) -> serde_json::Value {
    let path = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("run-") && name.ends_with(".json") && !name.contains("-rows")
        })
        .expect("herd run wrote its JSON report");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

pub fn say(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Count of `outcome` for `op` over every phase of the report.
pub fn outcome(report: &serde_json::Value, op: &str, outcome: &str) -> u64 {
    report["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["op"] == op)
        .filter_map(|r| r["outcomes"][outcome].as_u64())
        .sum()
}

/// Ops recorded for `op` over every phase.
pub fn count(report: &serde_json::Value, op: &str) -> u64 {
    report["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["op"] == op)
        .filter_map(|r| r["count"].as_u64())
        .sum()
}
