//! Real servers nobody here wrote, for the protocols herd drives beyond HTTP: Python's
//! `grpcio` ([`PyServer::grpc`], serving `testkit/py/arena.proto`) and `websockets`
//! ([`PyServer::websocket`]), run from the venv `cargo xtask setup` makes at `target/py`.
//!
//! Each listens on a port of 127.0.0.1 it picked itself and says which on its first line,
//! so there is no race for a free port. It counts what it served; [`PyServer::counters`]
//! asks it over its stdin and reads the answer from its stdout. Dropping the [`PyServer`]
//! kills it; if the test process dies first, the server sees its stdin end and stops.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::{Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    sync::mpsc,
    time::Duration,
};

/// How long a server may take to start listening (grpcio compiles its .proto first).
const START: Duration = Duration::from_secs(30);
/// How long a server may take to answer a command.
const ANSWER: Duration = Duration::from_secs(10);

/// A running Python test server.
#[derive(Debug)]
pub struct PyServer {
    child: Child,
    stdin: ChildStdin,
    /// The answers; `None` while a reader thread holds it.
    stdout: Option<BufReader<ChildStdout>>,
    port: u16,
    what: &'static str,
}

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit lives in the workspace")
        .to_owned()
}

/// The venv's python; a clear failure if setup has not made it.
fn python() -> PathBuf {
    let p = root().join("target/py/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run `cargo xtask setup`, which makes the venv the Python test \
         servers (grpcio, websockets) run from",
        p.display()
    );
    p
}

/// `testkit/py/`: the servers and the `.proto` the gRPC one serves.
pub fn py_dir() -> PathBuf {
    root().join("testkit/py")
}

/// The `.proto` the gRPC server serves (package `herd.arena`, service `Arena`).
pub fn arena_proto() -> PathBuf {
    py_dir().join("arena.proto")
}

impl PyServer {
    /// Python's grpcio serving `herd.arena.Arena` (see `testkit/py/grpc_server.py`).
    pub fn grpc() -> Self {
        Self::start("grpc_server.py", &[], "the grpcio server")
    }

    /// Python's websockets server (see `testkit/py/ws_server.py` for its paths).
    pub fn websocket() -> Self {
        Self::start("ws_server.py", &[], "the websockets server")
    }

    /// The same over TLS (`wss://`), with this certificate and key (PEM files: a
    /// [`crate::ServerCert`] written with `write_pem`).
    pub fn websocket_tls(cert: &Path, key: &Path) -> Self {
        let (cert, key) = (cert.display().to_string(), key.display().to_string());
        Self::start(
            "ws_server.py",
            &["--cert", &cert, "--key", &key],
            "the websockets server (TLS)",
        )
    }

    fn start(script: &str, args: &[&str], what: &'static str) -> Self {
        let mut cmd = Command::new(python());
        cmd.arg(py_dir().join(script));
        if script == "grpc_server.py" {
            cmd.arg("--proto").arg(arena_proto());
        }
        let mut child = cmd
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}"));
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut server = Self {
            child,
            stdin,
            stdout: Some(stdout),
            port: 0,
            what,
        };
        let first = server.line(START, "to start listening");
        server.port = first["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or_else(|| panic!("{what} said {first} instead of its port"));
        server
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        (Ipv4Addr::LOCALHOST, self.port).into()
    }

    /// Its counters, as it keeps them (per method for gRPC, per path for WebSocket).
    pub fn counters(&mut self) -> serde_json::Value {
        self.command("counters")
    }

    /// Sends a command (see the server's docstring) and returns its answer.
    pub fn command(&mut self, command: &str) -> serde_json::Value {
        writeln!(self.stdin, "{command}")
            .and_then(|()| self.stdin.flush())
            .unwrap_or_else(|e| panic!("telling {} `{command}`: {e}", self.what));
        let answer = self.line(ANSWER, "to answer");
        if let Some(e) = answer.get("error") {
            panic!("{} refused `{command}`: {e}", self.what);
        }
        answer
    }

    /// The next line the server prints, as JSON, within `within`.
    fn line(&mut self, within: Duration, doing: &str) -> serde_json::Value {
        let mut stdout = self.stdout.take().expect("one command at a time");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let r = stdout.read_line(&mut line).map(|_| line);
            let _ = tx.send((r, stdout));
        });
        let Ok((line, stdout)) = rx.recv_timeout(within) else {
            let _ = self.child.kill();
            panic!("{} took over {within:?} {doing}", self.what);
        };
        self.stdout = Some(stdout);
        let line = line.unwrap_or_else(|e| panic!("reading {}: {e}", self.what));
        if line.is_empty() {
            let status = self.child.wait().ok();
            panic!(
                "{} exited ({status:?}) before it said a word (its error is above)",
                self.what
            );
        }
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{} printed `{}`: {e}", self.what, line.trim()))
    }
}

impl Drop for PyServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
