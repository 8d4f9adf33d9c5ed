//! `raw_tp/inet_sock_set_state` (+ the reset, retransmit and connect-exit programs): per-cgroup
//! counts and per-destination pairs, exact against the workloads' own counts.

use std::{net::IpAddr, time::Duration};

use herd_probe::{KernelProbe, ProbeOptions, Snapshot};
use integration_test::{Pair, privileged};
use probe_common::{Counter, HIST_BUCKETS};

/// Waits for the softirq half of the last handshakes and closes, then reads the maps.
fn settle(probe: &KernelProbe) -> Snapshot {
    std::thread::sleep(Duration::from_millis(300));
    probe.snapshot().unwrap()
}

fn delta(before: &Snapshot, after: &Snapshot, id: u64, c: Counter) -> u64 {
    after.get(id, c) - before.get(id, c)
}

fn parse(said: &str, field: &str) -> u64 {
    let words: Vec<&str> = said.split_whitespace().collect();
    let i = words
        .iter()
        .position(|w| *w == field)
        .unwrap_or_else(|| panic!("{said}"));
    words[i + 1].parse().unwrap()
}

#[test]
fn connects_accepts_and_time_wait_entries_are_exact_per_container_and_pair() {
    if !privileged("connects_accepts_and_time_wait_entries_are_exact") {
        return;
    }
    const N: u64 = 500;
    let mut pair = Pair::new("test").unwrap();
    let probe = KernelProbe::load(&ProbeOptions::default()).unwrap();
    let before = probe.snapshot().unwrap();
    pair.start_server(9000, &["--max-conns", &N.to_string()])
        .unwrap();
    // The client closes first: every client socket goes through TIME_WAIT.
    let said = pair.run_client(9000, N, &[]).unwrap();
    assert_eq!(said, format!("connected {N} failed 0"));
    let after = settle(&probe);
    let (cli, srv, idle) = (
        pair.client.cgroup_id,
        pair.server.cgroup_id,
        pair.idle.cgroup_id,
    );

    assert_eq!(delta(&before, &after, cli, Counter::Connects), N);
    assert_eq!(delta(&before, &after, srv, Counter::Accepts), N);
    assert_eq!(delta(&before, &after, cli, Counter::TimeWaitEntries), N);
    // Softirq attribution: the server's container never gets the client's connects or
    // TIME_WAIT entries, though the FIN that completes them is processed in softirq.
    assert_eq!(delta(&before, &after, cli, Counter::Accepts), 0);
    assert_eq!(delta(&before, &after, srv, Counter::Connects), 0);
    assert_eq!(delta(&before, &after, srv, Counter::TimeWaitEntries), 0);
    for c in Counter::ALL {
        assert_eq!(
            delta(&before, &after, idle, c),
            0,
            "idle container {}",
            c.name()
        );
    }
    let p = after.pair(cli, IpAddr::V4(pair.server_ip), 9000);
    assert_eq!(
        (p.connects, p.established, p.time_wait_entries, p.closed),
        (N, N, N, N)
    );
    assert_eq!(p.connect_latency_us.count(), N);
    assert_eq!(p.lifetime_ms.count(), N);
    // A veth handshake takes microseconds, not seconds.
    assert_eq!(p.connect_latency_us.0[HIST_BUCKETS - 1], 0);
    // The server side keeps no pair (accepted sockets), and nothing was lost.
    assert!(after.pairs.keys().all(|k| k.cgroup != srv));
    assert_eq!(after.lost(), 0, "the probe lost events: {:?}", after.losses);
}

#[test]
fn refused_connects_are_counted_as_econnrefused_with_their_resets() {
    if !privileged("refused_connects_are_counted_as_econnrefused") {
        return;
    }
    const N: u64 = 50;
    let mut pair = Pair::new("test").unwrap();
    let probe = KernelProbe::load(&ProbeOptions::default()).unwrap();
    let before = probe.snapshot().unwrap();
    // Nothing listens on 9001: every SYN is answered with a reset.
    let said = pair.run_client(9001, N, &[]).unwrap();
    assert_eq!(said, format!("connected 0 failed {N}"));
    let after = settle(&probe);
    let cli = pair.client.cgroup_id;
    // Like the kernel's TcpActiveOpens, a connect counts when the SYN is sent.
    assert_eq!(delta(&before, &after, cli, Counter::Connects), N);
    assert_eq!(delta(&before, &after, cli, Counter::ConnectRefused), N);
    assert_eq!(delta(&before, &after, cli, Counter::ResetsReceived), N);
    for other in [
        Counter::ConnectTimedOut,
        Counter::ConnectOtherError,
        Counter::ConnectAddrNotAvail,
    ] {
        assert_eq!(delta(&before, &after, cli, other), 0, "{}", other.name());
    }
    // The resets were sent by no socket (closed port): counted for cgroup 0, reported as host.
    assert!(delta(&before, &after, 0, Counter::ResetsSent) >= N);
    let p = after.pair(cli, IpAddr::V4(pair.server_ip), 9001);
    assert_eq!((p.connects, p.established, p.closed), (N, 0, N));
}

#[test]
fn an_exhausted_ephemeral_range_shows_as_eaddrnotavail() {
    if !privileged("an_exhausted_ephemeral_range_shows_as_eaddrnotavail") {
        return;
    }
    let mut pair = Pair::new("test").unwrap();
    // Ten ephemeral ports, each parked in TIME_WAIT after one client-first close: the 11th
    // connect to the same destination finds no port (no tw_reuse on a non-loopback path).
    let client = pair.client.clone();
    pair.sysctl(&client, "net.ipv4.ip_local_port_range", "40000 40009")
        .unwrap();
    let probe = KernelProbe::load(&ProbeOptions::default()).unwrap();
    let before = probe.snapshot().unwrap();
    pair.start_server(9002, &["--max-conns", "10"]).unwrap();
    let said = pair.run_client(9002, 15, &[]).unwrap();
    assert_eq!(said, "connected 10 failed 5");
    let after = settle(&probe);
    let cli = pair.client.cgroup_id;
    assert_eq!(delta(&before, &after, cli, Counter::ConnectAddrNotAvail), 5);
    assert_eq!(delta(&before, &after, cli, Counter::TimeWaitEntries), 10);
    assert_eq!(delta(&before, &after, cli, Counter::ConnectRefused), 0);
}

#[test]
fn a_destination_without_route_shows_as_enetunreach() {
    if !privileged("a_destination_without_route_shows_as_enetunreach") {
        return;
    }
    let mut pair = Pair::new("test").unwrap();
    let probe = KernelProbe::load(&ProbeOptions::default()).unwrap();
    let before = probe.snapshot().unwrap();
    // The client's netns has only its /30 link: the route lookup fails inside connect(), so no
    // packet is ever sent.
    let said = pair
        .run_workload_in_client(&["tcp-client", "--target", "198.19.255.1:80", "--count", "7"])
        .unwrap();
    assert_eq!(said, "connected 0 failed 7");
    let after = settle(&probe);
    let cli = pair.client.cgroup_id;
    assert_eq!(delta(&before, &after, cli, Counter::ConnectNetUnreach), 7);
    assert_eq!(delta(&before, &after, cli, Counter::Connects), 0);
}

#[test]
fn syns_dropped_by_a_full_accept_queue_time_out_as_etimedout() {
    if !privileged("syns_dropped_by_a_full_accept_queue_time_out") {
        return;
    }
    let mut pair = Pair::new("test").unwrap();
    let client = pair.client.clone();
    // One SYN retry: ETIMEDOUT after ~3 s instead of ~2 min.
    pair.sysctl(&client, "net.ipv4.tcp_syn_retries", "1")
        .unwrap();
    let probe = KernelProbe::load(&ProbeOptions::default()).unwrap();
    let before = probe.snapshot().unwrap();
    pair.start_server(9003, &["--max-conns", "0", "--deadline", "20s"])
        .unwrap();
    // The first connection fills the one-slot accept queue; the next two time out.
    let said = pair
        .run_client(9003, 3, &["--connect-timeout", "10s"])
        .unwrap();
    assert_eq!(said, "connected 1 failed 2");
    let after = settle(&probe);
    let cli = pair.client.cgroup_id;
    assert_eq!(delta(&before, &after, cli, Counter::ConnectTimedOut), 2);
    assert_eq!(delta(&before, &after, cli, Counter::Connects), 3);
    // Each timed-out connect retransmitted its SYN once.
    assert!(delta(&before, &after, cli, Counter::Retransmits) >= 2);
}

#[test]
fn a_keep_alive_pool_connects_once_per_connection_and_a_two_idle_pool_churns() {
    if !privileged("a_keep_alive_pool_connects_once_per_connection") {
        return;
    }
    let mut pair = Pair::new("test").unwrap();
    let probe = KernelProbe::load(&ProbeOptions::default()).unwrap();
    // 2 ms of service time per request, so concurrent requests really overlap.
    pair.start_server(9004, &["--echo", "2ms"]).unwrap();
    let target = format!("{}:9004", pair.server_ip);
    let cli = pair.client.cgroup_id;

    // R requests from 50 concurrent callers through a pool that can keep all 50 idle: every
    // connection is reused, so connects == pool size, not R.
    let run = |pair: &mut Pair, max_idle: &str| {
        pair.run_workload_in_client(&[
            "tcp-pool-client",
            "--target",
            &target,
            "--requests",
            "2000",
            "--concurrency",
            "50",
            "--max-idle",
            max_idle,
            "--think",
            "2ms",
        ])
        .unwrap()
    };
    let before = probe.snapshot().unwrap();
    let said = run(&mut pair, "50");
    let after = settle(&probe);
    assert_eq!(parse(&said, "requests"), 2000, "{said}");
    let own = parse(&said, "connects");
    assert!(own <= 50, "{said}");
    assert_eq!(delta(&before, &after, cli, Counter::Connects), own);

    // The seeds' bug, same load: 2 idle slots. A connection returned while 2 are idle is
    // closed, and a caller finding none idle dials: the pool churns.
    let before = after;
    let said = run(&mut pair, "2");
    let after = settle(&probe);
    assert_eq!(parse(&said, "requests"), 2000, "{said}");
    let own = parse(&said, "connects");
    let connects = delta(&before, &after, cli, Counter::Connects);
    assert_eq!(connects, own, "probe vs the client's own count: {said}");
    // Measured here: ~870 connects for 2000 requests (churn ratio ~0.43) vs <= 50 above.
    assert!(
        connects > 500,
        "a 2-idle pool under concurrency 50 should churn: {said}"
    );
    // Every churned connection was closed by the client: one TIME_WAIT entry each.
    assert_eq!(
        delta(&before, &after, cli, Counter::TimeWaitEntries),
        connects
    );
}
