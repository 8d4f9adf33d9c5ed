//! Quick mode (`herd drive URL -c N -n N | -z D`), from the real binary against a loopback
//! server that counts what it served: the requests herd reports are the requests the server
//! answered, over HTTP/1.1 and h2c, for a count and for a duration; the printed scenario runs
//! the same load as a file; bad flags exit 2 before any load.

use std::{
    path::Path,
    process::{Command, Output, Stdio},
};

use herd_testkit::{Proto, Reply, Server, TempDir};

fn serve(proto: Proto) -> Server {
    Server::http(proto)
        .fallback(Reply::ok().body("ok"))
        .start_blocking()
}

fn herd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn requests(json: &Path) -> u64 {
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    report["requests"].as_u64().unwrap()
}

#[test]
fn a_count_sends_exactly_that_many_requests_over_h1_and_h2c() {
    for proto in Proto::ALL {
        let server = serve(proto);
        let dir = TempDir::new("quick-n");
        let json = dir.join("run.json");
        let url = format!("{}/count?x=1", server.url());
        let mut args = vec![
            "drive",
            &url,
            "-c",
            "7",
            "-n",
            "1003",
            "--quiet",
            "--json",
            json.to_str().unwrap(),
        ];
        if proto == Proto::H2c {
            args.push("--h2c");
        }
        ok(&herd(&args));
        assert_eq!(server.requests(), 1003, "{proto:?}");
        assert_eq!(server.path_count("/count"), 1003, "{proto:?}");
        assert_eq!(requests(&json), 1003, "{proto:?}");
        if proto == Proto::H2c {
            assert_eq!(server.h2_requests(), 1003);
        }
        // One connection per player, as oha's -c.
        assert_eq!(server.connections(), 7, "{proto:?}");
    }
}

#[test]
fn a_duration_counts_what_the_server_served_over_h1_and_h2c() {
    for proto in Proto::ALL {
        let server = serve(proto);
        let dir = TempDir::new("quick-z");
        let json = dir.join("run.json");
        let url = server.url();
        let mut args = vec![
            "drive",
            &url,
            "-c",
            "3",
            "-z",
            "700ms",
            "--quiet",
            "--json",
            json.to_str().unwrap(),
        ];
        if proto == Proto::H2c {
            args.push("--h2c");
        }
        let stdout = ok(&herd(&args));
        let n = requests(&json);
        assert!(n > 30, "{proto:?}: {n} requests\n{stdout}");
        assert_eq!(n, server.requests(), "{proto:?}");
        assert_eq!(server.connections(), 3, "{proto:?}");
    }
}

#[test]
fn a_rate_with_a_count_sends_the_count() {
    let server = serve(Proto::H1);
    let url = server.url();
    ok(&herd(&[
        "drive", &url, "-c", "4", "-n", "60", "-q", "200", "--quiet",
    ]));
    assert_eq!(server.requests(), 60);
}

#[test]
fn the_printed_scenario_runs_the_same_load_as_a_file() {
    let server = serve(Proto::H1);
    let dir = TempDir::new("quick-print");
    let url = format!("{}/p", server.url());
    let text = ok(&herd(&[
        "drive",
        &url,
        "-c",
        "5",
        "-n",
        "321",
        "-m",
        "POST",
        "-H",
        "x-test: {yes}",
        "-d",
        r#"{"a": {"b": 1}}"#,
        "--print-scenario",
    ]));
    assert_eq!(server.requests(), 0, "--print-scenario sends nothing");
    assert!(
        text.contains("[catalog]\nrequests = 321\nconcurrency = 5\n"),
        "{text}"
    );
    let file = dir.write("quick.toml", &text);
    let json = dir.join("run.json");
    ok(&herd(&[
        "drive",
        file.to_str().unwrap(),
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]));
    assert_eq!(server.requests(), 321);
    assert_eq!(server.path_count("/p"), 321);
    assert_eq!(requests(&json), 321);
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(report.to_string().contains("POST /p"), "the op's name");
}

#[test]
fn herd_run_drives_a_url_and_records_it() {
    let server = serve(Proto::H1);
    let dir = TempDir::new("quick-run");
    let url = server.url();
    let out = dir.join("out");
    let stdout = ok(&herd(&[
        "run",
        &url,
        "-c",
        "2",
        "-n",
        "150",
        "--no-probe",
        "--quiet",
        "--interval",
        "200ms",
        "--out",
        out.to_str().unwrap(),
    ]));
    assert_eq!(server.requests(), 150, "{stdout}");
    assert!(stdout.contains("wrote "), "{stdout}");
}

/// Exit 2 and a message containing `want`, with nothing sent.
fn usage(args: &[&str], want: &str) {
    let out = herd(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(want), "{args:?}: {stderr}");
}

#[test]
fn bad_flags_exit_2_before_any_load() {
    let server = serve(Proto::H1);
    let url = server.url();
    usage(
        &["drive", "htp:/127.0.0.1:8080", "-c", "5"],
        "herd drive http://127.0.0.1:8080/ -c 50 -z 10s",
    );
    usage(
        &["run", "http://127.0.0.1:99999/", "--no-probe"],
        "herd run http://127.0.0.1:8080/ -c 50 -z 10s",
    );
    usage(&["drive", &url, "-c", "0"], "must be at least 1");
    usage(&["drive", &url, "-z", "0s"], "must be longer than 0");
    usage(
        &["drive", &url, "-n", "5", "-z", "1s"],
        "cannot be used with",
    );
    usage(&["drive", &url, "--h2"], "--h2 is HTTP/2 over TLS");
    usage(&["drive", &url, "-H", "no-colon"], "write -H 'name: value'");
    assert_eq!(server.requests(), 0);
}
