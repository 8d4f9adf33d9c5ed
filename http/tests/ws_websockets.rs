//! herd's WebSocket client (handshake, masked frames out, the frame reader, ping/pong, the
//! closing handshake) against Python's `websockets`, a server nobody here wrote, over
//! loopback TCP. The server counts per path what it received and sent, the pongs it got,
//! the sockets it dropped and the Close codes both ways; each test compares those counts
//! with the client's.

use std::collections::BTreeMap;

use herd_http::ws::{
    self, Close, CloseCode, DEFAULT_MAX_MESSAGE, Handshake, Masks, Message, Socket,
};
use herd_testkit::PyServer;
use serde_json::{Value, json};
use tokio::net::TcpStream;

async fn open(
    server: &PyServer,
    path: &str,
    protocols: &[&str],
) -> Result<(Socket<TcpStream>, ws::Accepted), ws::Error> {
    let tcp = TcpStream::connect(server.addr()).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let mut masks = Masks::new();
    let hs = Handshake::new(&server.addr().to_string(), path, &mut masks)?
        .protocols(protocols.iter().map(|p| p.to_string()).collect())?;
    Socket::connect(tcp, &hs, masks, DEFAULT_MAX_MESSAGE).await
}

/// The server's counters once `ready` holds for them: it counts a socket's Close codes
/// when its handler ends, a moment after the client has seen the close.
async fn counters_once(server: &mut PyServer, ready: impl Fn(&Value) -> bool) -> Value {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let c = server.counters();
        if ready(&c) || std::time::Instant::now() > until {
            return c;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn echo_of_every_length_form_then_a_clean_close() {
    let mut server = PyServer::websocket();
    let (mut ws, accepted) = open(&server, "/echo", &["herd.v2", "herd.v1"])
        .await
        .unwrap();
    assert_eq!(accepted.protocol.as_deref(), Some("herd.v1"));
    // 7-, 16- and 64-bit lengths, text and binary, a multi-byte character at the edges.
    let sizes = [0usize, 1, 125, 126, 65_535, 65_536, 300_000];
    for &n in &sizes {
        let text: String = "é".repeat(n / 2) + &"x".repeat(n % 2);
        ws.send_text(&text).await.unwrap();
        assert_eq!(ws.recv().await.unwrap(), Message::Text(text));
        let binary: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        ws.send_binary(&binary).await.unwrap();
        assert_eq!(ws.recv().await.unwrap(), Message::Binary(binary.into()));
    }
    // Our ping, the server's pong.
    ws.ping(b"are you there").await.unwrap();
    assert_eq!(
        ws.recv().await.unwrap(),
        Message::Pong("are you there".into())
    );
    let theirs = ws
        .close(Close::new(CloseCode::NORMAL, "done"))
        .await
        .unwrap();
    assert_eq!(theirs.code, CloseCode::NORMAL);
    let c = counters_once(&mut server, |c| c["echo"]["close_received"] != json!({})).await;
    let n = 2 * sizes.len();
    assert_eq!(c["echo"]["connections"], 1);
    assert_eq!(c["echo"]["received"], n);
    assert_eq!(c["echo"]["sent"], n);
    assert_eq!(c["echo"]["close_received"], json!({"1000": 1}));
}

#[tokio::test]
async fn pushed_events_in_fragments_count_by_type_as_sent() {
    let mut server = PyServer::websocket();
    let (mut ws, accepted) = open(
        &server,
        "/push?count=300&types=move,chat,score&fragments=3",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(accepted.protocol, None);
    let mut by_type: BTreeMap<String, u64> = BTreeMap::new();
    let mut last = 0;
    let close = loop {
        match ws.recv().await.unwrap() {
            Message::Text(t) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                *by_type
                    .entry(v["type"].as_str().unwrap().to_owned())
                    .or_default() += 1;
                assert_eq!(v["seq"], last + 1);
                last += 1;
            }
            Message::Close(c) => break c,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(close, Close::new(CloseCode::NORMAL, "done"));
    assert!(ws.is_closed());
    assert_eq!(
        by_type,
        BTreeMap::from([
            ("chat".into(), 100),
            ("move".into(), 100),
            ("score".into(), 100)
        ])
    );
    let c = counters_once(&mut server, |c| c["push"]["close_received"] != json!({})).await;
    assert_eq!(c["push"]["sent"], 300);
    // Our Close echoed the server's code.
    assert_eq!(c["push"]["close_received"], json!({"1000": 1}));
}

#[tokio::test]
async fn the_servers_pings_are_answered() {
    let mut server = PyServer::websocket();
    let (mut ws, _) = open(&server, "/ping?count=5", &[]).await.unwrap();
    let mut pings = 0;
    loop {
        match ws.recv().await.unwrap() {
            Message::Ping(p) => {
                assert_eq!(p, format!("p{pings}").as_bytes());
                pings += 1;
            }
            Message::Text(t) => assert_eq!(t, "pongs 5"),
            Message::Close(c) => {
                assert_eq!(c.code, CloseCode::NORMAL);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(pings, 5);
    let c = server.counters();
    assert_eq!(c["ping"]["pings"], 5);
    assert_eq!(c["ping"]["pongs"], 5);
}

#[tokio::test]
async fn a_dropped_socket_and_chosen_close_codes() {
    let mut server = PyServer::websocket();
    // Dropped after two echoes, with no Close: the connection is gone.
    let (mut ws, _) = open(&server, "/drop?after=2", &[]).await.unwrap();
    for i in 0..2 {
        ws.send_text(&format!("m{i}")).await.unwrap();
        assert_eq!(ws.recv().await.unwrap(), Message::Text(format!("m{i}")));
    }
    ws.send_text("one more").await.unwrap_or(());
    assert_eq!(ws.recv().await.unwrap_err(), ws::Error::Dropped);
    assert!(ws.is_closed());
    // Closed by the server with the codes it was told, reason and all.
    let mut seen = Vec::new();
    for (code, reason) in [
        (1001, "going"),
        (1011, "oops"),
        (1013, "later"),
        (4001, "kicked"),
    ] {
        let (mut ws, _) = open(
            &server,
            &format!("/close?code={code}&reason={reason}&after=1"),
            &[],
        )
        .await
        .unwrap();
        ws.send_binary(b"x").await.unwrap();
        assert_eq!(ws.recv().await.unwrap(), Message::Binary("x".into()));
        let Message::Close(c) = ws.recv().await.unwrap() else {
            panic!("no close")
        };
        assert_eq!(c.reason, reason);
        seen.push(c.code.name());
    }
    assert_eq!(
        seen,
        [
            "going_away",
            "internal_error",
            "try_again_later",
            "application"
        ]
    );
    // A refused upgrade.
    let e = open(&server, "/forbidden", &[]).await.unwrap_err();
    assert_eq!(
        e,
        ws::Error::Refused {
            status: 403,
            reason: "Forbidden".into()
        }
    );
    assert!(e.is_handshake());
    let c = counters_once(&mut server, |c| {
        c["close"]["close_received"].as_object().map(|o| o.len()) == Some(4)
    })
    .await;
    assert_eq!(c["drop"]["drops"], 1);
    assert_eq!(c["drop"]["received"], 2);
    assert_eq!(
        c["close"]["close_sent"],
        json!({"1001": 1, "1011": 1, "1013": 1, "4001": 1})
    );
    assert_eq!(
        c["close"]["close_received"],
        json!({"1001": 1, "1011": 1, "1013": 1, "4001": 1})
    );
    assert!(c.get("forbidden").is_none());
}

#[tokio::test]
async fn wss_over_tls_with_a_private_ca() {
    use rustls_pki_types::{CertificateDer, ServerName, pem::PemObject as _};

    let dir = herd_testkit::TempDir::new("wss");
    let ca = herd_testkit::TestCa::new();
    let (cert, key) = ca.server_cert(&["localhost"]).write_pem(dir.path());
    let mut server = PyServer::websocket_tls(&cert, &key);
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap())
        .unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    // HTTP/1.1 only: the upgrade is an HTTP/1.1 request (WebSocket over h2 is RFC 8441).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(server.addr()).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let mut masks = Masks::new();
    let hs = Handshake::new(&format!("localhost:{}", server.port()), "/echo", &mut masks).unwrap();
    let (mut ws, _) = Socket::connect(tls, &hs, masks, DEFAULT_MAX_MESSAGE)
        .await
        .unwrap();
    for i in 0..50 {
        let text = format!("over tls {i} {}", "x".repeat(i * 100));
        ws.send_text(&text).await.unwrap();
        assert_eq!(ws.recv().await.unwrap(), Message::Text(text));
    }
    let theirs = ws
        .close(Close::new(CloseCode::GOING_AWAY, ""))
        .await
        .unwrap();
    assert_eq!(theirs.code, CloseCode::GOING_AWAY);
    let c = counters_once(&mut server, |c| c["echo"]["close_received"] != json!({})).await;
    assert_eq!(c["echo"]["received"], 50);
    assert_eq!(c["echo"]["close_received"], json!({"1001": 1}));
}
