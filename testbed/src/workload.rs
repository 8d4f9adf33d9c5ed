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

/// Serves TCP on `listen`, one thread per connection. Without `echo`, each connection is read
/// until EOF (or, with `Closer::Server`, one byte is read and the server closes). With `echo`,
/// every byte read is answered with one byte until the client closes (a keep-alive
/// request/response protocol). Prints `ready <addr>` once listening, then `accepted N` when
/// `max_conns` connections were accepted or `deadline` passed.
pub fn tcp_server(
    listen: SocketAddr,
    max_conns: u64,
    closer: Closer,
    echo: Option<Duration>,
    deadline: Duration,
) -> Result<()> {
    let listener = TcpListener::bind(listen)
        .with_context(|| format!("binding the test server to {listen}"))?;
    listener.set_nonblocking(true)?;
    // std listens with a fixed backlog (128 on older toolchains): a storm of 10 000
    // connects/s overflows a small one whenever the accept loop is descheduled for a few ms,
    // and each dropped SYN stalls its client for the 1 s retransmit. The kernel caps the
    // request at net.core.somaxconn.
    // SAFETY: a valid listening fd; listen() again only resizes the backlog.
    unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&listener), 65_535) };
    let end = Instant::now() + deadline;
    if max_conns == 0 {
        // A listener that never accepts, with an accept queue of one: once that slot is taken
        // the kernel drops further SYNs (tcp_conn_request: ListenOverflows), so clients time
        // out. Calling listen() again on a listening socket just resizes its backlog; `ready`
        // is said after it, so no client connects against the old backlog.
        // SAFETY: a valid listening fd.
        unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&listener), 0) };
        say(&format!("ready {}", listener.local_addr()?));
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
        say("accepted 0");
        return Ok(());
    }
    say(&format!("ready {}", listener.local_addr()?));
    let mut accepted = 0u64;
    let mut handlers = Vec::new();
    // Drain-only connections are swept, not given a thread each: at 10 000+ connects/s a
    // thread per connection would let the accept queue overflow and the benchmark would
    // measure SYN retries instead of the kernel.
    let mut draining: Vec<TcpStream> = Vec::new();
    let mut buf = [0u8; 64];
    while accepted < max_conns && Instant::now() < end {
        let mut idle = true;
        match listener.accept() {
            Ok((s, _)) => {
                idle = false;
                accepted += 1;
                match (echo, closer) {
                    (None, Closer::Client) => {
                        s.set_nonblocking(true)?;
                        draining.push(s);
                    }
                    _ => {
                        handlers.push(std::thread::spawn(move || serve_one(s, closer, echo)));
                        handlers.retain(|h| !h.is_finished());
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e).context("accepting"),
        }
        // Keep a connection until the client's FIN (read returns 0), so the client is the
        // active closer and its side enters TIME_WAIT.
        draining.retain_mut(|s| still_open(s, &mut buf));
        if idle {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    // Let the last clients close first.
    let grace = Instant::now() + Duration::from_secs(2);
    while !draining.is_empty() && Instant::now() < grace {
        draining.retain_mut(|s| still_open(s, &mut buf));
        std::thread::sleep(Duration::from_millis(5));
    }
    for h in handlers {
        let _ = h.join();
    }
    say(&format!("accepted {accepted}"));
    Ok(())
}

/// Reads what a non-blocking connection has; false once the peer closed or it failed.
fn still_open(s: &mut TcpStream, buf: &mut [u8]) -> bool {
    match s.read(buf) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
    }
}

fn serve_one(mut s: TcpStream, closer: Closer, echo: Option<Duration>) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = [0u8; 64];
    if let Some(delay) = echo {
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 {
                break;
            }
            // The service time of a request: what makes requests overlap and pools matter.
            if !delay.is_zero() {
                std::thread::sleep(delay);
            }
            if s.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        return;
    }
    match closer {
        // Wait for the client's FIN so the client is the active closer.
        Closer::Client => while matches!(s.read(&mut buf), Ok(n) if n > 0) {},
        Closer::Server => {
            let _ = s.read(&mut buf);
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// A keep-alive client with a bounded idle pool, the way Go's `http.Transport` behaves:
/// `concurrency` workers share the pool; a worker takes an idle connection if there is one,
/// else connects; after its request (one byte out, one byte back) it returns the connection to
/// the pool if fewer than `max_idle` are idle, else closes it. `max_idle = 2` is Go's
/// `DefaultMaxIdleConnsPerHost`, the seeds' churn bug. Between requests a worker waits
/// `think`: while it does, the connection it returned can be taken or closed, as when a
/// gateway's callers, not its connections, drive the request rate. Prints
/// `requests R connects C failed F`.
pub fn tcp_pool_client(
    target: SocketAddr,
    requests: u64,
    concurrency: u64,
    max_idle: usize,
    think: Duration,
    deadline: Duration,
) -> Result<()> {
    use std::sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    };
    if requests > 1_000_000 || concurrency == 0 || concurrency > 1_000 {
        bail!("--requests must be at most 1 000 000 and --concurrency between 1 and 1 000");
    }
    let end = Instant::now() + deadline;
    let pool: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
    let next = Arc::new(AtomicU64::new(0));
    let connects = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (pool, next, connects, failed, done) = (
                pool.clone(),
                next.clone(),
                connects.clone(),
                failed.clone(),
                done.clone(),
            );
            std::thread::spawn(move || {
                let mut byte = [0u8; 1];
                while next.fetch_add(1, Ordering::Relaxed) < requests && Instant::now() < end {
                    let idle = pool.lock().map(|mut p| p.pop()).unwrap_or(None);
                    let mut conn = match idle {
                        Some(c) => c,
                        None => match TcpStream::connect_timeout(&target, Duration::from_secs(2)) {
                            Ok(c) => {
                                connects.fetch_add(1, Ordering::Relaxed);
                                let _ = c.set_nodelay(true);
                                let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
                                c
                            }
                            Err(_) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                        },
                    };
                    if conn.write_all(b"r").is_err() || conn.read_exact(&mut byte).is_err() {
                        failed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut p) = pool.lock()
                        && p.len() < max_idle
                    {
                        p.push(conn);
                    }
                    if !think.is_zero() {
                        std::thread::sleep(think);
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    // Close the idle connections client-first, like a transport shutting down.
    pool.lock().map(|mut p| p.clear()).ok();
    say(&format!(
        "requests {} connects {} failed {}",
        done.load(Ordering::Relaxed),
        connects.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    ));
    Ok(())
}

/// Opens `count` connections to `target`, one after another: connect, send one byte, and
/// (with `Closer::Client`) close first, else wait for the server's close. Prints
/// `connected N failed M`. Bounded by `count` and `deadline`; each connect waits at most
/// `connect_timeout` (make it longer than the kernel's SYN retries to see ETIMEDOUT).
pub fn tcp_client(
    target: SocketAddr,
    count: u64,
    closer: Closer,
    connect_timeout: Duration,
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
        match TcpStream::connect_timeout(&target, connect_timeout) {
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

/// Pins thread or process `pid` (0: the caller) to `cpu`.
pub fn pin(pid: i32, cpu: usize) -> std::io::Result<()> {
    // SAFETY: sched_setaffinity is async-signal-safe; the set is built on this stack.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(pid, size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `sh -c SCRIPT` pinned to `cpu`.
pub fn pinned(cpu: usize, script: &str) -> std::process::Command {
    use std::os::unix::process::CommandExt as _;
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", script]);
    // SAFETY: only sched_setaffinity runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || pin(0, cpu));
    }
    cmd
}

/// Starts `sh -c script` pinned to `cpu`, one process after another, until `deadline`; for
/// each, once it has exited, reads its final schedstat while it is a zombie (so after its
/// last wait for a CPU: a dying process preempted by the parent it wakes still waits to
/// finish dying), appends `PID RUN_DELAY PCOUNT` to `out`, and reaps it.
pub fn churn(out: &std::path::Path, script: &str, cpu: usize, deadline: Duration) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out)
        .with_context(|| format!("opening {}", out.display()))?;
    let end = Instant::now() + deadline;
    let mut started = 0u64;
    while Instant::now() < end {
        let mut child = pinned(cpu, script).spawn().context("starting sh")?;
        let pid = child.id();
        // SAFETY: `info` is a valid out-pointer; WNOWAIT leaves the zombie in place.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        if unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) } != 0
        {
            bail!("waitid({pid}): {}", std::io::Error::last_os_error());
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
            .with_context(|| format!("reading the schedstat of zombie {pid}"))?;
        let mut f = stat.split_whitespace().skip(1);
        let (delay, count) = (f.next().unwrap_or("0"), f.next().unwrap_or("0"));
        writeln!(file, "{pid} {delay} {count}")?;
        child.wait()?;
        started += 1;
    }
    println!("churned {started} processes");
    Ok(())
}
