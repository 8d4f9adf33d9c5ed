//! `https://` targets against a real TLS server with a certificate the test made: counts
//! over h2 and HTTP/1.1 over TLS, trust by `ca` and `insecure`, and TLS or ALPN failures as
//! classified outcomes of a run that still ends with results.

use std::{path::Path, sync::Arc};

use herd_driver::{Scenario, transport};
use herd_testkit::{Reply, Server, ServerCert, TempDir, TestCa};

use crate::support::{Held, Proto, TestServer, run};

const H2_AND_H1: &[&[u8]] = &[b"h2", b"http/1.1"];

/// A TLS server with `cert`, selecting from `alpn` (empty: no ALPN at all); every path
/// answers `{"ok":true}`. It counts handshakes, resumed ones and HTTP/2 requests.
type TlsServer = Held<()>;

async fn tls_server(cert: &ServerCert, alpn: &[&[u8]]) -> TlsServer {
    let server = Server::tls(cert, alpn)
        .fallback(Reply::ok().json(serde_json::json!({"ok": true})))
        .start()
        .await;
    Held::loaded(server, Arc::new(())).await
}

/// A scenario against `url`: `players` players for 600 ms, `extra` lines added to `[target]`.
fn scenario(url: &str, transport: &str, extra: &str, players: usize) -> Scenario {
    let src = format!(
        r#"
[target]
url = "{url}"
transport = "{transport}"
{extra}
[player]
think = "5ms"
[[op]]
name = "ok"
path = "/ok"
check = {{ json = {{ "/ok" = true }} }}
[[step]]
players = {players}
duration = "600ms"
arrival = "burst"
"#
    );
    Scenario::parse("test.toml", &src, &[]).unwrap_or_else(|e| panic!("{e}"))
}

fn ca_line(ca: &Path) -> String {
    format!("ca = {:?}", ca.display().to_string())
}

/// Every request the driver counts reached the server over the protocol asked for, on one
/// connection per player (or the pool's).
async fn counts(transport: &str, trust: &str, pool: Option<usize>) {
    let test_ca = TestCa::new();
    let dir = TempDir::new("driver-tls");
    let ca = test_ca.write_pem(&dir);
    let server = tls_server(&test_ca.server_cert(&["localhost", "127.0.0.1"]), H2_AND_H1).await;
    let mut extra = match trust {
        "ca" => ca_line(&ca),
        _ => "insecure = true".to_owned(),
    };
    if let Some(n) = pool {
        extra.push_str(&format!("\nconnections = \"pool\"\npool_size = {n}"));
    }
    let report = run(scenario(&server.url(), transport, &extra, 5)).await;
    let served = server.requests();
    assert_eq!(report.requests, served, "driver vs server request count");
    assert!(
        report.requests >= 5 * 20,
        "only {} requests",
        report.requests
    );
    assert_eq!(report.outcome_count("ok", "ok"), report.requests);
    let h2 = server.h2_requests();
    assert_eq!(
        h2,
        if transport == "h2" { served } else { 0 },
        "h2 requests"
    );
    let want = pool.unwrap_or(5) as u64;
    assert_eq!(server.connections(), want);
    assert_eq!(server.handshakes(), want);
    // Players are distinct clients: none resumes a session another player's connect got.
    assert_eq!(server.resumed(), 0, "resumed handshakes");
    assert_eq!(
        (report.connects, report.reconnects, report.connect_errors),
        (want, 0, 0)
    );
    assert_eq!(report.transport, transport);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_over_tls_with_the_ca_counts_match_the_server() {
    counts("h2", "ca", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_over_tls_with_the_ca_counts_match_the_server() {
    counts("h1", "ca", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_over_tls_insecure_pool_counts_match_the_server() {
    counts("h2", "insecure", Some(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h1_over_tls_insecure_counts_match_the_server() {
    counts("h1", "insecure", None).await;
}

/// The first connect's error, as the driver words it.
async fn connect_error(s: &Scenario) -> String {
    match transport::for_target(&s.target).connect().await {
        Ok(_) => panic!("the connect succeeded"),
        Err(e) => e.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_is_a_tls_outcome_for_every_op() {
    let test_ca = TestCa::new();
    let server = tls_server(&test_ca.server_cert(&["localhost", "127.0.0.1"]), H2_AND_H1).await;
    for transport in ["h2", "h1"] {
        let s = scenario(&server.url(), transport, "", 3);
        let msg = connect_error(&s).await;
        assert!(
            msg.contains("signed by a CA the driver does not trust")
                && msg.contains("--insecure")
                && msg.contains("target.ca"),
            "{msg}"
        );
        let report = run(s).await;
        assert!(report.requests >= 3, "{} requests", report.requests);
        assert_eq!(
            report.outcome_count("ok", "transport_error.tls_unknown_ca"),
            report.requests,
            "{transport}: every op is a TLS error"
        );
        assert_eq!(report.connect_errors, report.requests);
        assert!(
            !report.intervals.is_empty(),
            "the run still has its timeline"
        );
    }
    assert_eq!(server.handshakes(), 0);
    assert_eq!(server.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_is_a_tls_outcome() {
    let test_ca = TestCa::new();
    let dir = TempDir::new("driver-tls");
    let ca = test_ca.write_pem(&dir);
    let server = tls_server(&test_ca.server_cert(&["elsewhere.test"]), H2_AND_H1).await;
    let s = scenario(&server.url(), "h2", &ca_line(&ca), 2);
    let msg = connect_error(&s).await;
    assert!(
        msg.contains("not valid for `127.0.0.1`") && msg.contains("--insecure"),
        "{msg}"
    );
    let report = run(s).await;
    assert!(report.requests >= 2);
    assert_eq!(
        report.outcome_count("ok", "transport_error.tls_name_mismatch"),
        report.requests
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_is_its_own_tls_outcome() {
    let test_ca = TestCa::new();
    let dir = TempDir::new("driver-tls");
    let ca = test_ca.write_pem(&dir);
    let server = tls_server(&test_ca.expired_cert(&["127.0.0.1"]), H2_AND_H1).await;
    let s = scenario(&server.url(), "h1", &ca_line(&ca), 2);
    let msg = connect_error(&s).await;
    assert!(
        msg.contains("out of its validity period") && msg.contains("--insecure"),
        "{msg}"
    );
    let report = run(s).await;
    assert!(report.requests >= 2);
    assert_eq!(
        report.outcome_count("ok", "transport_error.tls_expired"),
        report.requests
    );
    // The hint printed under the tables for it: herd_report::text::tls's tests.
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_against_an_http1_only_server_is_a_protocol_error_naming_its_choice() {
    let cert = TestCa::new().server_cert(&["127.0.0.1"]);
    let server = tls_server(&cert, &[b"http/1.1"]).await;
    let s = scenario(&server.url(), "h2", "insecure = true", 2);
    let msg = connect_error(&s).await;
    assert!(
        msg.contains("asked for h2 by ALPN and the server selected `http/1.1`")
            && msg.contains("transport = \"h1\""),
        "{msg}"
    );
    let report = run(s).await;
    assert!(report.requests >= 2);
    assert_eq!(
        report.outcome_count("ok", "transport_error.protocol"),
        report.requests
    );
    assert_eq!(server.requests(), 0);

    // A server without ALPN at all gets the same verdict, worded for it.
    let plain = tls_server(&cert, &[]).await;
    let s = scenario(&plain.url(), "h2", "insecure = true", 1);
    let msg = connect_error(&s).await;
    assert!(msg.contains("the server selected no protocol"), "{msg}");
    // ... while HTTP/1.1 over TLS needs no ALPN.
    let report = run(scenario(&plain.url(), "h1", "insecure = true", 1)).await;
    assert_eq!(report.outcome_count("ok", "ok"), report.requests);
    assert_eq!(report.requests, plain.requests());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_to_a_cleartext_server_is_a_tls_outcome() {
    let server = TestServer::start(Proto::H1).await;
    let url = server.url().replace("http://", "https://");
    let s = scenario(&url, "h1", "insecure = true", 1);
    let msg = connect_error(&s).await;
    assert!(msg.contains("does the port serve TLS?"), "{msg}");
    let report = run(s).await;
    assert!(report.requests >= 1);
    assert_eq!(
        report.outcome_count("ok", "transport_error.tls_handshake"),
        report.requests
    );
}

#[test]
fn tls_keys_are_checked_against_the_scheme() {
    let err = |src: &str| match Scenario::parse("t.toml", src, &[]) {
        Ok(_) => panic!("accepted:\n{src}"),
        Err(e) => e.to_string(),
    };
    let base = "[[op]]\nname = \"a\"\npath = \"/\"\n[[step]]\nplayers = 1\nduration = \"1s\"\n";
    let msg = err(&format!(
        "[target]\nurl = \"http://127.0.0.1:1\"\ntransport = \"h2\"\n{base}"
    ));
    assert!(
        msg.contains(
            "t.toml:3:13: target.transport: h2 is HTTP/2 over TLS and needs an https:// url"
        ),
        "{msg}"
    );
    let msg = err(&format!(
        "[target]\nurl = \"https://127.0.0.1:1\"\ntransport = \"h2c\"\n{base}"
    ));
    assert!(
        msg.contains("target.transport: h2c is HTTP/2 over cleartext TCP"),
        "{msg}"
    );
    let msg = err(&format!(
        "[target]\nurl = \"http://127.0.0.1:1\"\ninsecure = true\n{base}"
    ));
    assert!(
        msg.contains("target.insecure: insecure is for https://"),
        "{msg}"
    );
    let msg = err(&format!(
        "[target]\nurl = \"https://127.0.0.1:1\"\nca = \"no-such-ca.pem\"\n{base}"
    ));
    assert!(
        msg.contains("t.toml:3:6: target.ca: cannot read the CA file no-such-ca.pem"),
        "{msg}"
    );
    let dir = TempDir::new("driver-tls");
    let not_pem = dir.write("not-pem.pem", "hello\n");
    let msg = err(&format!(
        "[target]\nurl = \"https://127.0.0.1:1\"\nca = {:?}\n{base}",
        not_pem.display().to_string()
    ));
    assert!(
        msg.contains("holds no `-----BEGIN CERTIFICATE-----` block"),
        "{msg}"
    );
    // https defaults to port 443 and keeps h1 as the default transport.
    let s = Scenario::parse(
        "t.toml",
        &format!("[target]\nurl = \"https://example.test\"\n{base}"),
        &[],
    )
    .unwrap();
    assert_eq!(s.target.port, 443);
    assert!(s.target.tls.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_insecure_flag_accepts_what_the_file_alone_refuses() {
    let cert = TestCa::new().server_cert(&["127.0.0.1"]);
    let server = tls_server(&cert, H2_AND_H1).await;
    let mut s = scenario(&server.url(), "h2", "", 2);
    // What `herd drive --insecure` does after the file is checked.
    assert!(s.target.accept_any_certificate());
    let report = run(s).await;
    assert!(report.requests >= 2);
    assert_eq!(report.outcome_count("ok", "ok"), report.requests);
    assert_eq!(report.requests, server.requests());
    let mut plain = scenario("http://127.0.0.1:1", "h1", "", 1);
    assert!(
        !plain.target.accept_any_certificate(),
        "http:// has no certificate"
    );
}

/// Each connect is a full handshake: players are distinct clients, so one player's connect
/// must not resume a session another one's got (which would hide the server's handshake
/// cost at 10 000 players).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_connect_resumes_an_earlier_session() {
    let cert = TestCa::new().server_cert(&["127.0.0.1"]);
    let server = tls_server(&cert, H2_AND_H1).await;
    for kind in ["h2", "h1"] {
        let s = scenario(&server.url(), kind, "insecure = true", 1);
        let t = transport::for_target(&s.target);
        for _ in 0..3 {
            let mut c = t.connect().await.unwrap();
            let req = herd_http::Request {
                method: http::Method::GET,
                path: "/ok".into(),
                headers: http::HeaderMap::new(),
                body: bytes::Bytes::new(),
            };
            // A response read also reads the session tickets the server sent after the
            // handshake.
            assert_eq!(c.send(req).await.unwrap().status, 200);
        }
    }
    assert_eq!(server.handshakes(), 6);
    assert_eq!(server.resumed(), 0);
}
