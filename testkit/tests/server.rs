//! The test server against hyper's own client (and a TLS client trusting the test CA): each
//! protocol, routes and their parameters, delays, streamed bodies, holds, resets, raw
//! sockets, and the counts a test reads back.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use herd_testkit::{Proto, Reply, Server, TempDir, TestCa};
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, body::Incoming, client::conn};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::{
    io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _},
    net::TcpStream,
};

/// One client connection, HTTP/1.1 or HTTP/2 as asked; dropping it closes the socket.
struct Client {
    send: Sender,
    conn: tokio::task::JoinHandle<()>,
}

enum Sender {
    H1(conn::http1::SendRequest<Full<Bytes>>),
    H2(conn::http2::SendRequest<Full<Bytes>>),
}

impl Drop for Client {
    fn drop(&mut self) {
        self.conn.abort();
    }
}

impl Client {
    async fn over<I>(io: I, h2: bool) -> Self
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let io = TokioIo::new(io);
        if h2 {
            let (send, c) = conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .unwrap();
            let conn = tokio::spawn(async move {
                let _ = c.await;
            });
            Self {
                send: Sender::H2(send),
                conn,
            }
        } else {
            let (send, c) = conn::http1::handshake(io).await.unwrap();
            let conn = tokio::spawn(async move {
                let _ = c.await;
            });
            Self {
                send: Sender::H1(send),
                conn,
            }
        }
    }

    async fn connect(server: &Server, proto: Proto) -> Self {
        let tcp = TcpStream::connect(server.addr()).await.unwrap();
        Self::over(tcp, proto == Proto::H2c).await
    }

    async fn send(&mut self, method: &str, path: &str, body: &str) -> hyper::Result<Reply_> {
        let req = Request::builder()
            .method(method)
            .uri(format!("http://127.0.0.1{path}"))
            .header("authorization", "Bearer t")
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap();
        let resp = match &mut self.send {
            Sender::H1(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
            Sender::H2(s) => {
                s.ready().await?;
                s.send_request(req).await?
            }
        };
        Ok(Reply_(resp))
    }

    async fn get(&mut self, path: &str) -> (u16, String) {
        let r = self.send("GET", path, "").await.unwrap();
        let status = r.0.status().as_u16();
        (status, r.text().await.unwrap())
    }
}

/// A response, its body not yet read.
struct Reply_(hyper::Response<Incoming>);

impl Reply_ {
    async fn text(self) -> Result<String, hyper::Error> {
        let b = self.0.into_body().collect().await?.to_bytes();
        Ok(String::from_utf8_lossy(&b).into_owned())
    }
}

async fn routes(proto: Proto) -> Server {
    Server::http(proto)
        .route("/ok", Reply::ok().json(serde_json::json!({"ok": true})))
        .route(
            "/teapot",
            Reply::new(418)
                .header("x-kind", "tea")
                .body("short and stout"),
        )
        .route_fn("/delay/{ms}", |req| async move {
            Reply::ok().after(Duration::from_millis(req.num("ms")))
        })
        .route_fn("/echo/{*rest}", |req| async move {
            Reply::ok().json(serde_json::json!({
                "rest": req.param("rest"),
                "pq": req.path_and_query(),
                "method": req.method.as_str(),
                "auth": req.header("authorization"),
                "body": String::from_utf8_lossy(&req.body),
                "n": req.number,
            }))
        })
        .start()
        .await
}

async fn routes_and_counts(proto: Proto) {
    let server = routes(proto).await;
    let mut c = Client::connect(&server, proto).await;
    assert_eq!(c.get("/ok").await, (200, r#"{"ok":true}"#.into()));
    let r = c.send("GET", "/teapot", "").await.unwrap();
    assert_eq!(r.0.status(), 418);
    assert_eq!(r.0.headers()["x-kind"], "tea");
    assert_eq!(r.text().await.unwrap(), "short and stout");
    let t = Instant::now();
    assert_eq!(c.get("/delay/60").await.0, 200);
    assert!(
        t.elapsed() >= Duration::from_millis(60),
        "{:?}",
        t.elapsed()
    );
    let r = c.send("PUT", "/echo/a/b?x=1", "hi").await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&r.text().await.unwrap()).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"rest": "a/b", "pq": "/echo/a/b?x=1", "method": "PUT",
            "auth": "Bearer t", "body": "hi", "n": 4})
    );
    // `{*rest}` matches nothing too.
    let (status, echo) = c.get("/echo").await;
    assert!(status == 200 && echo.contains(r#""rest":"""#), "{echo}");
    assert_eq!(c.get("/nowhere").await, (404, String::new()));
    assert_eq!(c.get("/ok").await.0, 200);
    // Keep-alive (HTTP/1.1) or one connection's streams (h2c): one connection for all.
    assert_eq!(server.connections(), 1);
    assert_eq!(server.requests(), 7);
    let h2 = if proto == Proto::H2c { 7 } else { 0 };
    assert_eq!(server.h2_requests(), h2);
    assert_eq!(server.path_count("/ok"), 2);
    assert_eq!(server.path_count("/echo/a/b"), 1);
    assert_eq!(server.route_count("/echo/{*rest}"), 2);
    assert_eq!(server.route_count("/delay/{ms}"), 1);
    assert!(server.last_at("/ok").unwrap() > server.last_at("/teapot").unwrap());
    assert_eq!(server.last_at("/never"), None);
    assert_eq!(server.accepted().len(), 1);
    assert!(server.url().starts_with("http://127.0.0.1:"));
}

#[tokio::test]
async fn routes_answer_and_are_counted_in_each_protocol() {
    for proto in Proto::ALL {
        routes_and_counts(proto).await;
    }
}

/// SSE-like chunks with each ending: clean, broken, held open until the client leaves.
async fn streams(proto: Proto) {
    let left = Arc::new(tokio::sync::Notify::new());
    let l = left.clone();
    let server = Server::http(proto)
        .route_fn("/stream/{how}", move |req| {
            let l = l.clone();
            async move {
                let how = req.param("how").to_owned();
                Reply::ok()
                    .header("content-type", "text/event-stream")
                    .stream(move |c| {
                        let (how, l) = (how.clone(), l.clone());
                        async move {
                            for i in 0..3 {
                                assert!(c.send(format!("data: {i}\n\n")).await);
                            }
                            match how.as_str() {
                                "end" => {}
                                "break" => {
                                    tokio::time::sleep(Duration::from_millis(30)).await;
                                    c.fail().await;
                                }
                                _ => {
                                    c.closed().await;
                                    l.notify_one();
                                }
                            }
                        }
                    })
            }
        })
        .start()
        .await;
    let mut c = Client::connect(&server, proto).await;
    let r = c.send("GET", "/stream/end", "").await.unwrap();
    assert_eq!(r.0.headers()["content-type"], "text/event-stream");
    assert_eq!(r.text().await.unwrap(), "data: 0\n\ndata: 1\n\ndata: 2\n\n");
    let r = c.send("GET", "/stream/break", "").await.unwrap();
    let mut body = r.0.into_body();
    let mut got = Vec::new();
    let err = loop {
        match body.frame().await {
            Some(Ok(f)) => got.extend_from_slice(&f.into_data().unwrap()),
            Some(Err(e)) => break e,
            None => panic!("the broken stream ended cleanly"),
        }
    };
    assert_eq!(got, b"data: 0\n\ndata: 1\n\ndata: 2\n\n", "{err}");
    // A held stream: its writer sees the client go away.
    let mut c = Client::connect(&server, proto).await;
    let r = c.send("GET", "/stream/hold", "").await.unwrap();
    let mut body = r.0.into_body();
    let first = body.frame().await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), "data: 0\n\n");
    drop(body);
    drop(c);
    tokio::time::timeout(Duration::from_secs(5), left.notified())
        .await
        .expect("the stream's writer saw the client leave");
}

#[tokio::test]
async fn streams_end_break_or_stay_open_in_each_protocol() {
    for proto in Proto::ALL {
        streams(proto).await;
    }
}

#[tokio::test]
async fn a_reset_breaks_the_connection_and_a_hold_never_answers() {
    for proto in Proto::ALL {
        let server = Server::http(proto)
            .route("/reset", Reply::reset())
            .route("/hold", Reply::hold())
            .fallback(Reply::ok().body("fallback"))
            .start()
            .await;
        let mut c = Client::connect(&server, proto).await;
        assert_eq!(c.get("/anything").await, (200, "fallback".into()));
        let held = tokio::time::timeout(Duration::from_millis(200), c.get("/hold")).await;
        assert!(held.is_err(), "{proto:?}: the hold answered");
        let mut c = Client::connect(&server, proto).await;
        let e = c.send("GET", "/reset", "").await.err();
        assert!(e.is_some(), "{proto:?}: the reset answered");
        // The next request needs a new connection.
        let mut c = Client::connect(&server, proto).await;
        assert_eq!(c.get("/x").await.0, 200);
        assert_eq!(server.connections(), 3);
        assert_eq!(server.route_count("/reset"), 1);
    }
}

#[tokio::test]
async fn tls_picks_h2_or_http1_by_alpn_with_a_certificate_from_the_test_ca() {
    let ca = TestCa::new();
    let dir = TempDir::new("testkit-tls");
    let pem = ca.write_pem(&dir);
    assert!(
        std::fs::read_to_string(&pem)
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
    let (cert_file, key_file) = ca.server_cert(&["127.0.0.1"]).write_pem(&dir);
    assert!(
        std::fs::read_to_string(key_file)
            .unwrap()
            .contains("PRIVATE KEY")
    );
    assert!(cert_file.exists());

    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject as _};
    roots
        .add(CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap())
        .unwrap();
    let client = |alpn: &[&[u8]]| {
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        tokio_rustls::TlsConnector::from(Arc::new(config))
    };
    let name = ServerName::try_from("127.0.0.1").unwrap();

    let server = Server::tls(
        &ca.server_cert(&["127.0.0.1", "localhost"]),
        &[b"h2", b"http/1.1"],
    )
    .route("/ok", Reply::ok().body("ok"))
    .start()
    .await;
    assert!(server.url().starts_with("https://127.0.0.1:"));
    for (alpn, h2) in [(&[&b"h2"[..]][..], true), (&[&b"http/1.1"[..]][..], false)] {
        let tcp = TcpStream::connect(server.addr()).await.unwrap();
        let tls = client(alpn).connect(name.clone(), tcp).await.unwrap();
        let mut c = Client::over(tls, h2).await;
        assert_eq!(c.get("/ok").await, (200, "ok".into()));
    }
    assert_eq!((server.connections(), server.handshakes()), (2, 2));
    assert_eq!((server.requests(), server.h2_requests()), (2, 1));
    assert_eq!(server.resumed(), 0);

    // An expired certificate is refused by the client; the handshake is not counted.
    let expired = Server::tls(&ca.expired_cert(&["127.0.0.1"]), &[])
        .start()
        .await;
    let tcp = TcpStream::connect(expired.addr()).await.unwrap();
    let e = client(&[]).connect(name, tcp).await.unwrap_err();
    assert!(e.to_string().contains("expired"), "{e}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!((expired.connections(), expired.handshakes()), (1, 0));
}

#[tokio::test]
async fn a_raw_server_sends_what_it_is_told_and_a_dropped_server_stops_listening() {
    let server = Server::raw(|mut s| async move {
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf).await;
        // One byte at a time, then garbage where a status line belongs.
        for b in b"SSH-2.0-herd\r\n" {
            let _ = s.write_all(&[*b]).await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .start()
    .await;
    let mut s = TcpStream::connect(server.addr()).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"SSH-2.0-herd\r\n");
    assert_eq!((server.connections(), server.requests()), (1, 0));

    let addr = server.addr();
    drop(server);
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).await.is_ok() {
        assert!(Instant::now() < deadline, "still listening after the drop");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn a_blocking_server_serves_a_test_without_a_runtime() {
    let server = Server::http(Proto::H1)
        .route("/", Reply::ok().body("ok"))
        .start_blocking();
    let mut s = std::net::TcpStream::connect(server.addr()).unwrap();
    use std::io::{Read as _, Write as _};
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut got = String::new();
    s.read_to_string(&mut got).unwrap();
    assert!(
        got.starts_with("HTTP/1.1 200 OK\r\n") && got.ends_with("\r\n\r\nok"),
        "{got}"
    );
    assert_eq!(server.requests(), 1);
}
