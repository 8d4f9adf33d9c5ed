//! `herd drive` against an `https://` server on 127.0.0.1 whose self-signed certificate the
//! test makes: refused without `--insecure` (a classified outcome, the run still reports),
//! accepted with it, over h2 chosen by ALPN.

use std::{
    convert::Infallible,
    path::PathBuf,
    process::{Command, Output, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, server::conn, service::service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::{
    ServerConfig,
    crypto::ring,
    pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer},
};
use tokio_rustls::TlsAcceptor;

/// A directory removed with everything in it when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An https server (h2 or HTTP/1.1 by ALPN) with a self-signed certificate for 127.0.0.1;
/// counts HTTP/2 requests.
fn serve(rt: &tokio::runtime::Runtime) -> (String, Arc<AtomicU64>) {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let key = PrivateKeyDer::from(PrivatePkcs8KeyDer::from(cert.signing_key.serialize_der()));
    let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let h2_requests = Arc::new(AtomicU64::new(0));
    let count = h2_requests.clone();
    rt.spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, count) = (acceptor.clone(), count.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    if req.version() == hyper::Version::HTTP_2 {
                        count.fetch_add(1, SeqCst);
                    }
                    async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("ok")))) }
                });
                let io = TokioIo::new(tls);
                let _ = conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(io, svc)
                    .await;
            });
        }
    });
    (url, h2_requests)
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
fn insecure_accepts_a_self_signed_certificate_that_is_refused_without_it() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (url, h2_requests) = serve(&rt);
    let dir = TempDir(std::env::temp_dir().join(format!("herd-tls-cli-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let file = dir.0.join("tls.toml");
    std::fs::write(
        &file,
        format!(
            "[target]\nurl = \"{url}\"\ntransport = \"h2\"\n[player]\nthink = \"10ms\"\n\
             [[op]]\nname = \"ping\"\npath = \"/\"\n\
             [[step]]\nplayers = 2\nduration = \"500ms\"\narrival = \"burst\"\n"
        ),
    )
    .unwrap();
    let json = dir.0.join("run.json");

    let refused = drive(&file, &json, &[]);
    let stdout = String::from_utf8_lossy(&refused.stdout);
    assert!(
        refused.status.success(),
        "the run still ends with results: {stdout}"
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
    assert_eq!(h2_requests.load(SeqCst), 0);

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
        h2_requests.load(SeqCst),
        requests,
        "every request came over HTTP/2"
    );
}
