//! `raw_tp/inet_sock_set_state`: per-cgroup connects and accepts, exact against the
//! workload's own counts.

use herd_probe::{KernelProbe, ProbeOptions};
use integration_test::{Pair, privileged};
use probe_common::Counter;

#[test]
fn connects_and_accepts_are_exact_per_container() {
    if !privileged("connects_and_accepts_are_exact_per_container") {
        return;
    }
    const N: u64 = 500;
    let mut pair = Pair::new("test").unwrap();
    let probe = KernelProbe::load(&ProbeOptions::default()).unwrap();
    let before = probe.snapshot().unwrap();
    pair.start_server(9000, &["--max-conns", &N.to_string()])
        .unwrap();
    let said = pair.run_client(9000, N, &[]).unwrap();
    assert_eq!(said, format!("connected {N} failed 0"));
    // The last ACKs are processed in softirq right after connect() returns.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let after = probe.snapshot().unwrap();
    let delta = |id: u64, c: Counter| after.get(id, c) - before.get(id, c);

    assert_eq!(delta(pair.client.cgroup_id, Counter::Connects), N);
    assert_eq!(delta(pair.server.cgroup_id, Counter::Accepts), N);
    // Softirq attribution: the server's container never gets the client's connects and vice
    // versa, even though the handshake's second half runs in whichever context the CPU had.
    assert_eq!(delta(pair.client.cgroup_id, Counter::Accepts), 0);
    assert_eq!(delta(pair.server.cgroup_id, Counter::Connects), 0);
    for c in Counter::ALL {
        assert_eq!(
            delta(pair.idle.cgroup_id, c),
            0,
            "idle container {}",
            c.name()
        );
    }
    assert_eq!(after.lost(), 0, "the probe lost events: {:?}", after.losses);
}

#[test]
fn refused_connects_still_count_as_active_opens() {
    if !privileged("refused_connects_still_count_as_active_opens") {
        return;
    }
    const N: u64 = 50;
    let mut pair = Pair::new("test").unwrap();
    let probe = KernelProbe::load(&ProbeOptions::default()).unwrap();
    let before = probe.snapshot().unwrap();
    // Nothing listens on 9001: every SYN is answered with a reset.
    let said = pair.run_client(9001, N, &[]).unwrap();
    assert_eq!(said, format!("connected 0 failed {N}"));
    std::thread::sleep(std::time::Duration::from_millis(100));
    let after = probe.snapshot().unwrap();
    let id = pair.client.cgroup_id;
    // Like the kernel's TcpActiveOpens, a connect counts when the SYN is sent.
    assert_eq!(
        after.get(id, Counter::Connects) - before.get(id, Counter::Connects),
        N
    );
    assert_eq!(
        after.get(pair.server.cgroup_id, Counter::Accepts)
            - before.get(pair.server.cgroup_id, Counter::Accepts),
        0
    );
}
