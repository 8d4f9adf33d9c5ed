//! Small, exact TCP workloads that herd runs inside its own containers: the demo's traffic and
//! the privileged tests' ground truth. Each reports what it did on stdout, one line, so the
//! caller can compare the probe's counts with the workload's own.

use std::{
    io::{Read as _, Write as _},
    net::{Shutdown, SocketAddr, TcpListener, TcpStream},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

/// Reports a line on stdout. The reader may already have stopped listening (a test that only
/// waited for `ready`), which is not the workload's failure.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// Who closes a connection first; the side that closes first enters TIME_WAIT.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Closer {
    /// The client closes first (client-side TIME_WAIT, as with an HTTP client that churns).
    Client,
    /// The server closes first.
    Server,
}

/// Serves TCP on `listen`: for each connection reads until EOF (or, with `Closer::Server`,
/// reads one byte and closes). Prints `ready <addr>` once listening, then `accepted N` when
/// `max_conns` connections were handled or `deadline` passed.
pub fn tcp_server(
    listen: SocketAddr,
    max_conns: u64,
    closer: Closer,
    deadline: Duration,
) -> Result<()> {
    let listener = TcpListener::bind(listen)
        .with_context(|| format!("binding the test server to {listen}"))?;
    listener.set_nonblocking(true)?;
    say(&format!("ready {}", listener.local_addr()?));
    let end = Instant::now() + deadline;
    let mut accepted = 0u64;
    let mut buf = [0u8; 64];
    while accepted < max_conns && Instant::now() < end {
        match listener.accept() {
            Ok((mut s, _)) => {
                accepted += 1;
                s.set_nonblocking(false)?;
                s.set_read_timeout(Some(Duration::from_secs(5)))?;
                match closer {
                    // Wait for the client's FIN so the client is the active closer.
                    Closer::Client => while matches!(s.read(&mut buf), Ok(n) if n > 0) {},
                    Closer::Server => {
                        let _ = s.read(&mut buf);
                        let _ = s.shutdown(Shutdown::Both);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(e) => return Err(e).context("accepting"),
        }
    }
    say(&format!("accepted {accepted}"));
    Ok(())
}

/// Opens `count` connections to `target`, one after another: connect, send one byte, and
/// (with `Closer::Client`) close first, else wait for the server's close. Prints
/// `connected N failed M`. Bounded by `count` and `deadline`.
pub fn tcp_client(
    target: SocketAddr,
    count: u64,
    closer: Closer,
    deadline: Duration,
) -> Result<()> {
    if count > 1_000_000 {
        bail!("--count {count} is above the 1 000 000 bound of the test client");
    }
    let end = Instant::now() + deadline;
    let (mut ok, mut failed) = (0u64, 0u64);
    let mut buf = [0u8; 8];
    for _ in 0..count {
        if Instant::now() >= end {
            break;
        }
        match TcpStream::connect_timeout(&target, Duration::from_secs(2)) {
            Ok(mut s) => {
                ok += 1;
                let _ = s.write_all(b"x");
                if closer == Closer::Server {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
                }
                drop(s);
            }
            Err(_) => failed += 1,
        }
    }
    say(&format!("connected {ok} failed {failed}"));
    Ok(())
}
