//! Real signals to the real binary: a second Ctrl-C ends the grace at once.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use herd_testkit::{Proto, Reply, Server, TempDir};

#[test]
fn a_second_ctrl_c_ends_the_grace_at_once() {
    // Never answers: every request is still in flight when the stop comes.
    let server = Server::http(Proto::H1)
        .fallback(Reply::hold())
        .start_blocking();
    let dir = TempDir::new("signals-hurry");
    let file = dir.write(
        "s.toml",
        format!(
            "[target]\nurl = \"{}\"\n[[op]]\nname = \"wait\"\npath = \"/\"\ntimeout = \"60s\"\n\
             [[step]]\nplayers = 3\nduration = \"60s\"\narrival = \"burst\"\n",
            server.url()
        ),
    );
    let json = dir.join("run.json");
    let mut child = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["drive", "--quiet", "--grace", "60s", "--json"])
        .arg(&json)
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.connections() < 3 {
        assert!(Instant::now() < deadline, "the players never connected");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = child.id() as libc::pid_t;
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid, libc::SIGINT) };
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first Ctrl-C starts the 60 s grace"
    );
    let second = Instant::now();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGINT) };
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if second.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("still waiting out the grace 10 s after the second Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        second.elapsed() < Duration::from_secs(5),
        "{:?}",
        second.elapsed()
    );
    assert!(status.success(), "{text}");
    assert!(
        text.contains("second signal: ending the grace now"),
        "{text}"
    );
    assert!(text.contains("stopped early by a signal"), "{text}");
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["stopped_early"], true);
    assert!(
        report.to_string().contains("cancelled"),
        "the three held requests are recorded as cancelled"
    );
}
