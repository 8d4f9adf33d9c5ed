//! A target whose port is closed from the start: the run says it measured nothing and exits 1
//! instead of 0 with "Findings: None".

use std::process::{Command, Stdio};

use herd_testkit::TempDir;

#[test]
fn a_run_in_which_every_connect_failed_says_so_and_exits_1() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = TempDir::new("unreachable");
    let file = dir.write(
        "s.toml",
        format!(
            "[target]\nurl = \"http://127.0.0.1:{port}/\"\n[player]\nthink = \"50ms\"\n\
             [[op]]\nname = \"ping\"\npath = \"/\"\n\
             [[step]]\nplayers = 2\nduration = \"500ms\"\narrival = \"burst\"\n"
        ),
    );
    for cmd in [
        &["drive"][..],
        &[
            "run",
            "--no-probe",
            "--out",
            dir.join("out").to_str().unwrap(),
        ],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_herd"))
            .args(cmd)
            .args(["--quiet", "--grace", "1s"])
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "herd {cmd:?}: {err}");
        assert!(
            err.contains(&format!(
                "connects to 127.0.0.1:{port} failed and none succeeded"
            )),
            "herd {cmd:?}: {err}"
        );
    }
}
