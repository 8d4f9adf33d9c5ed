//! Network waits against the kernel's own counters in the namespaces the test made:
//! retransmits per pair (SYN retries apart) against `nstat`'s `TcpRetransSegs` and
//! `TcpExtTCPSynRetrans` in the client's namespace, listen drops per port against the server
//! namespace's `ListenDrops`/`ListenOverflows`, and conntrack against its own files.
//!
//! Loss is made by `iptables -m statistic --mode random` in the *server's* namespace (this
//! kernel has no netem): the client's segments are dropped on arrival, so every
//! retransmission leaves the client's stack (a drop on the client's own OUTPUT chain fails
//! the send, which the kernel counts in TcpRetransSegs and TCPRetransFail but does not
//! trace). The rules live in namespaces the test created and go with them.

use std::{
    collections::HashMap,
    net::SocketAddr,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use herd_model::{
    PairInterval, ProbeInterval, SocketCell,
    waits::{ConntrackCell, ListenerCell},
};
use herd_probe::{KernelProbe, ProbeOptions, containers::ContainerSet, sampler::Sampler};
use integration_test::{Pair, kernel_release, privileged, workload_cmd};

/// `ip netns exec NS ARGS`, its stdout; panics with stderr on failure.
fn in_ns(ns: &str, args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {args:?} in {ns}: {e}"));
    assert!(
        out.status.success(),
        "{args:?} in {ns}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `nstat -saz` of a namespace: every counter, absolute, history untouched.
fn nstat(ns: &str) -> HashMap<String, u64> {
    in_ns(ns, &["nstat", "-saz"])
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.to_owned(), w.next()?.parse().ok()?))
        })
        .collect()
}

/// The namespace's `TcpExt` counters from its `/proc/net/netstat` (what nstat reads; the
/// guests of the VM suite have no nstat).
fn tcp_ext(ns: &str) -> HashMap<String, u64> {
    let text = in_ns(ns, &["cat", "/proc/net/netstat"]);
    herd_probe::netstat::parse_two_line(&text).unwrap()["TcpExt"]
        .iter()
        .map(|(k, v)| (k.clone(), *v as u64))
        .collect()
}

/// The two tests of this file one at a time: each sampler discovers every container of this
/// process, so the other test's containers (and their retransmits and dropped SYNs) would be
/// in its rows, and whichever test made its containers first got the names "client" and
/// "server" (the listen test once read the other test's server, port 9000, for its own).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn sampler(pair: &Pair) -> Sampler {
    let probe = KernelProbe::load(&ProbeOptions::default())
        .unwrap_or_else(|e| panic!("loading the probe on Linux {}: {e}", kernel_release()));
    Sampler::new(
        probe,
        ContainerSet::default().with_discovery(),
        pair.sandbox.layout().clone(),
    )
    .unwrap()
}

/// The name the sampler gives `c`: "client" or "server" unless another test of this file,
/// running at the same time in this process, made its own first (then `server#2`).
fn name_of(sampler: &Sampler, c: &herd_testbed::Container) -> String {
    sampler
        .containers()
        .containers()
        .iter()
        .find(|k| k.cgroup_id == c.cgroup_id)
        .map(|k| k.name.clone())
        .unwrap_or_else(|| panic!("the sampler has no container for {}", c.name))
}

fn pair_row<'a>(
    iv: &'a ProbeInterval,
    client: &str,
    remote: SocketAddr,
) -> Option<&'a PairInterval> {
    iv.pairs
        .iter()
        .find(|p| p.container == client && p.remote == remote)
}

/// Waits for every child of the sandbox started after `first` to exit (30 s at most).
fn wait_children(pair: &mut Pair, handles: &[usize]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for h in handles {
        loop {
            if pair.sandbox.child(*h).try_wait().unwrap().is_some() {
                break;
            }
            assert!(Instant::now() < deadline, "a client did not finish in 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn retransmits_per_pair_and_syn_retries_equal_nstat_and_conntrack_its_files() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !privileged("retransmits_per_pair_equal_nstat") {
        return;
    }
    let mut pair = Pair::new("retrans").unwrap();
    let (cli_ns, srv_ns) = (pair.client.netns.clone(), pair.server.netns.clone());
    let ip = pair.server_ip;
    // 8 % of the client's segments to the echo port are lost on arrival; every SYN to the
    // silent port is. The client gives up a SYN after one retry (1 s, then 2 s).
    in_ns(
        &srv_ns,
        &[
            "iptables",
            "-A",
            "INPUT",
            "-p",
            "tcp",
            "--dport",
            "9000",
            "-m",
            "statistic",
            "--mode",
            "random",
            "--probability",
            "0.08",
            "-j",
            "DROP",
        ],
    );
    in_ns(
        &srv_ns,
        &[
            "iptables", "-A", "INPUT", "-p", "tcp", "--syn", "--dport", "9001", "-j", "DROP",
        ],
    );
    // A conntrack rule in the client's namespace: conntrack tracks its connections.
    in_ns(
        &cli_ns,
        &[
            "iptables",
            "-A",
            "OUTPUT",
            "-m",
            "conntrack",
            "--ctstate",
            "INVALID",
            "-j",
            "DROP",
        ],
    );
    pair.start_server(9000, &["--echo", "0s", "--deadline", "60s"])
        .unwrap();
    let mut sampler = sampler(&pair);
    let before = nstat(&cli_ns);
    sampler.sample().unwrap();

    let t = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..2 {
        let mut cmd = workload_cmd();
        cmd.args([
            "tcp-client",
            "--target",
            &format!("{ip}:9001"),
            "--count",
            "1",
        ])
        .args(["--connect-timeout", "1500ms"])
        .stdout(Stdio::null());
        let client = pair.client.clone();
        handles.push(pair.sandbox.spawn(&client, cmd).unwrap());
    }
    let said = pair
        .run_workload_in_client(&[
            "tcp-pool-client",
            "--target",
            &format!("{ip}:9000"),
            "--requests",
            "300",
            "--concurrency",
            "4",
            "--max-idle",
            "4",
            "--deadline",
            "20s",
        ])
        .unwrap();
    wait_children(&mut pair, &handles);
    eprintln!("pool client: {said} in {:?}", t.elapsed());
    // Let the last windows close (100 ms) and the last ACKs land.
    std::thread::sleep(Duration::from_millis(300));
    let iv = sampler.sample().unwrap();
    let after = nstat(&cli_ns);
    let d = |k: &str| after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0);
    let (segs, syns) = (d("TcpRetransSegs"), d("TcpExtTCPSynRetrans"));
    eprintln!("client netns: TcpRetransSegs {segs}, TCPSynRetrans {syns}");
    assert!(
        segs > syns,
        "the loss made no data retransmit: {segs} segs, {syns} SYNs"
    );
    assert!(syns >= 2, "the silent port made {syns} SYN retries");

    let client = name_of(&sampler, &pair.client);
    let echo =
        pair_row(&iv, &client, SocketAddr::from((ip, 9000))).expect("a pair toward the echo port");
    let silent = pair_row(&iv, &client, SocketAddr::from((ip, 9001)))
        .expect("a pair toward the silent port");
    let probe_segs = echo.waits.retrans_segs + silent.waits.retrans_segs;
    let probe_syns = echo.waits.syn_retrans + silent.waits.syn_retrans;
    assert_eq!(
        (probe_segs, probe_syns),
        (segs, syns),
        "pairs: echo {:?}, silent {:?}",
        echo.waits,
        silent.waits
    );
    // Each silent connect sent its SYN twice: one retry each, no data.
    assert_eq!(
        (silent.waits.syn_retrans, silent.waits.data_retrans()),
        (2, 0)
    );
    // The windows hold every retransmit, each in a closed 100 ms window of the interval.
    for p in [echo, silent] {
        let (ws, wsyn): (u64, u64) = p
            .waits
            .windows
            .iter()
            .fold((0, 0), |(a, b), w| (a + w.retrans_segs, b + w.syn_retrans));
        assert_eq!((ws, wsyn), (p.waits.retrans_segs, p.waits.syn_retrans));
        for w in &p.waits.windows {
            assert_eq!(w.end_ns - w.start_ns, 100_000_000);
            assert!(w.end_ns <= iv.at_ns && w.start_ns + iv.interval_ns >= iv.at_ns - 100_000_000);
        }
    }
    // The report names the lossy pair, and only it, with the retransmits nstat counted.
    let found = integration_test::findings::of_probe(vec![iv.clone()]);
    let loss: Vec<_> = found.iter().filter(|f| f.kind == "packet_loss").collect();
    assert_eq!(loss.len(), 1, "{found:#?}");
    assert!(
        loss[0].title.starts_with(&format!("{client} → "))
            && loss[0].title.contains(&format!("{ip}:9000")),
        "{}",
        loss[0].title
    );
    assert_eq!(
        loss[0].numbers["retrans_segs"],
        (segs - silent.waits.retrans_segs) as f64
    );
    eprintln!("{}", loss[0].title);
    // The SYN retries of the silent port: one second after the first SYN.
    let silent_windows: Vec<u64> = silent.waits.windows.iter().map(|w| w.start_ns).collect();
    assert!(!silent_windows.is_empty());

    // conntrack of the client's namespace: the gauge against its file, read right after.
    let count: u64 = in_ns(
        &cli_ns,
        &["cat", "/proc/sys/net/netfilter/nf_conntrack_count"],
    )
    .trim()
    .parse()
    .unwrap();
    let max: u64 = in_ns(
        &cli_ns,
        &["cat", "/proc/sys/net/netfilter/nf_conntrack_max"],
    )
    .trim()
    .parse()
    .unwrap();
    let cli = iv
        .containers
        .iter()
        .find(|c| c.container == client)
        .unwrap();
    match &cli.waits.conntrack {
        ConntrackCell::Measured {
            entries,
            max: m,
            drop,
            ..
        } => {
            assert_eq!((*entries, *m), (count, max));
            assert!(
                *entries >= 6,
                "the client's connections are tracked: {entries}"
            );
            assert_eq!(*drop, Some(0));
        }
        other => panic!("client conntrack: {other:?}"),
    }
    assert_eq!(iv.lost, 0);
}

/// A listener with a backlog of 4 in the server's namespace, accepting one connection every
/// `every`, for at most `accepts` connections: made by a thread of this test that enters the
/// namespace (the socket stays in it). The socket stays open until the returned sender is
/// dropped (30 s at most), so a sample taken after the last accept still sees it.
fn slow_listener(
    netns: &str,
    addr: SocketAddr,
    every: Duration,
    accepts: usize,
) -> std::sync::mpsc::Sender<()> {
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let ns = std::fs::File::open(format!("/run/netns/{netns}")).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::os::fd::{AsRawFd as _, FromRawFd as _};
        // SAFETY: setns on a valid fd changes only this thread's network namespace.
        assert_eq!(
            unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) },
            0
        );
        let std::net::IpAddr::V4(ip) = addr.ip() else {
            unreachable!()
        };
        // SAFETY: plain socket calls on a socket this thread owns.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
        let sa = libc::sockaddr_in {
            sin_family: libc::AF_INET as u16,
            sin_port: addr.port().to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(ip).to_be(),
            },
            sin_zero: [0; 8],
        };
        unsafe {
            assert_eq!(
                libc::bind(
                    fd,
                    (&sa as *const libc::sockaddr_in).cast(),
                    size_of::<libc::sockaddr_in>() as u32
                ),
                0
            );
            assert_eq!(libc::listen(fd, 4), 0);
        }
        let listener = unsafe { std::net::TcpListener::from_raw_fd(fd) };
        tx.send(()).unwrap();
        for _ in 0..accepts {
            std::thread::sleep(every);
            if listener.accept().is_err() {
                break;
            }
        }
        let _ = done_rx.recv_timeout(Duration::from_secs(30));
        drop(listener);
    });
    rx.recv().unwrap();
    done_tx
}

#[test]
fn listen_drops_per_port_equal_the_namespaces_listen_drops_and_connects_wait_a_second() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !privileged("listen_drops_per_port_equal_listen_drops") {
        return;
    }
    const CONNECTS: u64 = 12;
    let mut pair = Pair::new("listen").unwrap();
    let addr = SocketAddr::from((pair.server_ip, 9002));
    let server = slow_listener(
        &pair.server.netns.clone(),
        addr,
        Duration::from_millis(250),
        CONNECTS as usize,
    );
    let mut sampler = sampler(&pair);
    let srv_ns = pair.server.netns.clone();
    let before = tcp_ext(&srv_ns);
    sampler.sample().unwrap();
    // Connections one after another, the client closing each at once: they pile up in the
    // accept queue (5 fit: backlog + 1), then each SYN that finds it full is dropped and sent
    // again a second later.
    let said = pair
        .run_client(9002, CONNECTS, &["--connect-timeout", "5s"])
        .unwrap();
    assert_eq!(said, format!("connected {CONNECTS} failed 0"));
    let iv = sampler.sample().unwrap();
    let after = tcp_ext(&srv_ns);
    let d = |k: &str| after[k] - before[k];
    let (drops, overflows) = (d("ListenDrops"), d("ListenOverflows"));
    eprintln!("server netns: ListenDrops {drops}, ListenOverflows {overflows}");
    assert!(
        drops >= 2,
        "the accept queue never overflowed: {drops} drops"
    );

    let srv = iv
        .containers
        .iter()
        .find(|c| c.container == name_of(&sampler, &pair.server))
        .unwrap();
    let ListenerCell::Measured { ports } = &srv.waits.listeners else {
        panic!("listeners: {:?}", srv.waits.listeners);
    };
    let port = ports
        .iter()
        .find(|p| p.local_port == 9002)
        .unwrap_or_else(|| panic!("no listener on 9002: {ports:?}"));
    assert_eq!(port.drops, drops, "{port:?}");
    assert_eq!((port.sockets, port.backlog), (1, 4));
    // The namespace's own counters, as the socket row reads them, agree.
    let SocketCell::Measured {
        listen_drops,
        listen_overflows,
        ..
    } = &srv.sockets
    else {
        panic!("{:?}", srv.sockets);
    };
    assert_eq!((*listen_drops, *listen_overflows), (drops, overflows));
    // The client's connect latency shows the 1 s SYN retry: connects of 0.5 s or more.
    let p = pair_row(&iv, &name_of(&sampler, &pair.client), addr).unwrap();
    let slow: u64 = p.connect_latency_buckets.0[19..].iter().sum();
    assert!(
        slow >= 1 && slow <= drops,
        "connects of 512 ms or more: {slow}, drops {drops}: {:?}",
        p.connect_latency_buckets
    );
    eprintln!(
        "connect latency p50 <= {} us, max <= {} us; {slow} connects waited for a SYN retry",
        p.connect_latency_us.p50_le, p.connect_latency_us.max_le
    );
    // The report names the listener, with the namespace's drops and the 1 s step.
    let found = integration_test::findings::of_probe(vec![iv.clone()]);
    let named: Vec<_> = found
        .iter()
        .filter(|f| f.kind == "accept_queue_overflow")
        .collect();
    assert_eq!(named.len(), 1, "{found:#?}");
    assert!(
        named[0].title.starts_with(&format!(
            "{} port 9002: the accept queue (backlog 4) overflowed",
            name_of(&sampler, &pair.server)
        )),
        "{}",
        named[0].title
    );
    assert_eq!(named[0].numbers["drops"], drops as f64);
    eprintln!("{}", named[0].title);
    // The client's connects that waited for a SYN retry are the finding's 1 s (and 3 s) steps.
    let steps = named[0].numbers["connects_1s"] + named[0].numbers["connects_3s"];
    assert!(
        steps >= 1.0 && steps <= slow as f64,
        "{} ({slow} connects of 512 ms or more)",
        named[0].title
    );
    // The listener thread ends when this is dropped; it is not joined, so a failure above
    // cannot hang the test.
    drop(server);
}
