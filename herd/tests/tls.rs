//! `herd drive` against an `https://` server on 127.0.0.1 whose certificate a CA the test
//! made signed: refused without `--insecure` (a classified outcome, the run still reports),
//! accepted with it, over h2 chosen by ALPN.

use std::process::{Command, Output, Stdio};

use herd_testkit::{Reply, Server, TempDir, TestCa};

/// An https server (h2 or HTTP/1.1 by ALPN) with a certificate for 127.0.0.1 from a test CA
/// herd is not told about; counts HTTP/2 requests.
fn serve() -> Server {
    let cert = TestCa::new().server_cert(&["127.0.0.1"]);
    Server::tls(&cert, &[b"h2", b"http/1.1"])
        .fallback(Reply::ok().body("ok"))
        .start_blocking()
}

fn drive(file: &std::path::Path, json: &std::path::Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["drive", file.to_str().unwrap(), "--quiet", "--grace", "1s"])
        .args(["--json", json.to_str().unwrap()])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn report(json: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap()
}

/// Count of `outcome` over all phases of a `--json` report.
fn outcome(r: &serde_json::Value, outcome: &str) -> u64 {
    r["phases"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["ops"].as_array().unwrap())
        .flat_map(|o| o["outcomes"].as_array().unwrap())
        .filter(|o| o["outcome"] == outcome)
        .map(|o| o["count"].as_u64().unwrap())
        .sum()
}

#[test]
fn insecure_accepts_an_untrusted_certificate_that_is_refused_without_it() {
    let server = serve();
    let url = server.url();
    let dir = TempDir::new("tls-cli");
    let file = dir.write(
        "tls.toml",
        format!(
            "[target]\nurl = \"{url}\"\ntransport = \"h2\"\n[player]\nthink = \"10ms\"\n\
             [[op]]\nname = \"ping\"\npath = \"/\"\n\
             [[step]]\nplayers = 2\nduration = \"500ms\"\narrival = \"burst\"\n"
        ),
    );
    let json = dir.join("run.json");

    let refused = drive(&file, &json, &[]);
    let stdout = String::from_utf8_lossy(&refused.stdout);
    // Every handshake failed, so no connect succeeded: the run still ends with its tables
    // and JSON, and exits 1 saying it measured nothing (issue #13, cell 9).
    assert_eq!(
        refused.status.code(),
        Some(1),
        "the run still ends with results: {stdout}"
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("failed and none succeeded"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(stdout.contains("over h2 (TLS)"), "{stdout}");
    let r = report(&json);
    let requests = r["requests"].as_u64().unwrap();
    assert!(requests >= 2, "{stdout}");
    assert_eq!(
        outcome(&r, "transport_error.tls_unknown_ca"),
        requests,
        "{stdout}"
    );
    // Under the tables: what the outcome means and what to do.
    assert!(
        stdout.contains("transport_error.tls_unknown_ca: the server's certificate chains to no CA")
            && stdout.contains("--insecure"),
        "{stdout}"
    );
    assert_eq!(server.h2_requests(), 0);

    let accepted = drive(&file, &json, &["--insecure"]);
    let stdout = String::from_utf8_lossy(&accepted.stdout);
    assert!(accepted.status.success(), "{stdout}");
    assert!(
        stdout.contains("over h2 (TLS, any certificate accepted)"),
        "{stdout}"
    );
    let r = report(&json);
    let requests = r["requests"].as_u64().unwrap();
    assert!(requests > 10, "{stdout}");
    assert_eq!(outcome(&r, "ok"), requests, "{stdout}");
    assert_eq!(
        server.h2_requests(),
        requests,
        "every request came over HTTP/2"
    );
}
