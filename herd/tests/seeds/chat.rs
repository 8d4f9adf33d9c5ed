//! Seed 003 against nginx with the nchan pub/sub module (Debian's libnginx-mod-nchan): the
//! test writes a temporary nginx.conf (a registration route, a publisher, a long-poll
//! subscriber that buffers, /presence, /healthz), runs examples/seeds/chat.toml shortened, and checks herd's counts
//! against nginx's access log, that the roles held (senders only send, readers only read,
//! each reader on the inbox its join captured and shared with its sender), and that the
//! read op's latency is the messages' delivery latency.

use std::process::Command;

use herd_testkit::{TempDir, nchan};

use super::support::{Proc, count, free_port, herd_run, outcome, report, say, seed_file};

fn lines(log: &std::path::Path, path: &str, status: &str) -> u64 {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter(|l| {
            l.contains(&format!("\"{path}")) && l.contains(&format!("HTTP/1.1\" {status} "))
        })
        .count() as u64
}

#[test]
fn chat_pairs_deliver_through_nchan_and_the_counts_match_nginxs_log() {
    assert!(
        std::path::Path::new(nchan::MODULE).exists(),
        "{} is missing: `cargo xtask setup` installs libnginx-mod-nchan",
        nchan::MODULE
    );
    let dir = TempDir::new("seed-chat");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let file = dir.write(
        "nginx.conf",
        nchan::conf(
            dir.path(),
            &format!("127.0.0.1:{port}"),
            nchan::Processes::MasterAndWorker,
        ),
    );
    let mut nginx = Proc::spawn(
        "nginx",
        Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&file)
            .stdout(std::fs::File::create(dir.join("stdout.log")).unwrap())
            .stderr(std::fs::File::create(dir.join("stderr.log")).unwrap()),
    );
    nginx.term_first = true;
    nginx.wait_ready(&addr, "/healthz", &dir.join("error.log"));
    let log = dir.join("access.log");
    let before = std::fs::read_to_string(&log).unwrap().lines().count();
    assert_eq!(before, lines(&log, "GET /healthz", "200") as usize);

    let out = dir.join("out");
    let sets: Vec<String> = [
        format!("target.url=http://{addr}"),
        "soak.every=1s".into(),
        "soak.up_to=12".into(),
        "soak.hold=3s".into(),
        "rate[0].rate=[50, 100, 200]".into(),
        "rate[0].duration=1s".into(),
        // The file's `p99 < 500ms` breaks by design (the reader's 600 ms poll pause; the
        // privileged seed_chat.rs checks that finding): here only the counts are checked.
        "slo.read=p99 < 30s".into(),
    ]
    .into();
    let run = herd_run(&seed_file("chat.toml"), &sets, &out);
    assert_eq!(run.status.code(), Some(0), "{}", say(&run));
    let r = report(&out);

    // Every request op herd counted is a line in nginx's log, by route.
    let healthz = lines(&log, "GET /healthz", "200") - before as u64;
    assert_eq!(healthz, count(&r, "healthz"), "{}", say(&run));
    assert_eq!(
        lines(&log, "POST /register", "200"),
        count(&r, "register.sender") + count(&r, "register.reader")
    );
    assert_eq!(lines(&log, "GET /presence", "204"), count(&r, "presence"));
    let sent = lines(&log, "POST /pub", "201") + lines(&log, "POST /pub", "202");
    assert_eq!(sent, count(&r, "send"));
    assert_eq!(outcome(&r, "send", "ok"), sent);
    // Long polls answered: nginx's 200s on /sub are herd's read samples (a poll the run's
    // end cut short is nginx's 499 and not herd's sample).
    let read = outcome(&r, "read", "ok");
    assert_eq!(lines(&log, "GET /sub", "200"), read, "{}", say(&run));
    eprintln!(
        "nginx: {healthz} healthz, {sent} published, {read} long polls answered; herd: {} healthz, {} send, {read} read",
        count(&r, "healthz"),
        count(&r, "send")
    );
    // Roles: 6 pairs at the top; readers received what their senders published to the
    // inbox the readers' join captured. nchan buffers what a reader's poll pause would miss
    // and the next poll asks for it by its cursor, so every message is read but those still
    // buffered when the run stopped (at most a few per pair).
    assert!(
        sent >= 15 && read <= sent && read + 6 * 4 >= sent,
        "{sent} sent, {read} read"
    );
    assert_eq!(
        outcome(&r, "read", "ok"),
        count(&r, "read"),
        "no failed polls"
    );

    // The read op's latency is the delivery latency, from the message's send time: set by
    // the poll cycle (a message sent during the reader's 600 ms pause waits for the next
    // poll), not by loopback (well under 1 ms) nor by nginx.
    let soak = r["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["op"] == "read" && o["phase"] == "soak hold")
        .unwrap_or_else(|| panic!("{:#}", r["ops"]));
    let p50 = soak["latency"]["p50_us"].as_u64().unwrap();
    let max = soak["latency"]["max_us"].as_u64().unwrap();
    eprintln!("delivery latency p50 {p50} µs, max {max} µs in soak hold");
    assert!(
        p50 < 600_000 && max < 5_000_000,
        "delivery p50 {p50} µs, max {max} µs"
    );
    // The objective on it held, so herd exited 0 and the report says so.
    assert!(
        r["slo"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["op"] == "read"),
        "{:#}",
        r["slo"]
    );
}
