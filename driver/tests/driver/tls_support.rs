//! A TLS test server on 127.0.0.1:0 with a certificate made by the test (rcgen): a private
//! CA signs a server certificate for the names asked. ALPN picks HTTP/2 or HTTP/1.1 per
//! connection, as a real https server does; every path answers `{"ok":true}`.

use std::{
    convert::Infallible,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::{
    ServerConfig,
    crypto::ring,
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer},
};
use tokio_rustls::TlsAcceptor;

use crate::support::{Proto, QUIET, Server, serve};

/// A CA and one server certificate it signed.
pub struct Pki {
    /// The CA's certificate in PEM, what `target.ca` points at.
    pub ca_pem: String,
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

impl Pki {
    /// A fresh CA and a server certificate for `names` (DNS names or IP addresses).
    pub fn new(names: &[&str]) -> Self {
        Self::with(names, false)
    }

    /// The same, with a server certificate that expired in 2020 when `expired`.
    pub fn with(names: &[&str], expired: bool) -> Self {
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "herd test CA");
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        if expired {
            params.not_before = rcgen::date_time_ymd(2019, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        }
        let cert = params.signed_by(&key, &ca).unwrap();
        Self {
            ca_pem: ca.pem(),
            cert: cert.der().clone(),
            key: PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
        }
    }
}

/// A file removed when dropped: the CA file a scenario's `ca` names.
pub struct TempFile(pub PathBuf);

impl TempFile {
    pub fn new(name: &str, contents: &str) -> Self {
        let path = std::env::temp_dir().join(format!("herd-tls-{}-{name}", std::process::id()));
        std::fs::write(&path, contents).unwrap();
        Self(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What the server counted besides [`Counts`](crate::support::Counts) (TCP connections
/// accepted, requests answered in all protocols).
#[derive(Default)]
pub struct TlsStats {
    /// TLS handshakes that completed.
    pub handshakes: AtomicU64,
    /// Of those, abbreviated ones that resumed an earlier session.
    pub resumed: AtomicU64,
    /// Of those, requests that came as HTTP/2.
    pub h2_requests: AtomicU64,
}

/// The server of this file: every path answers `{"ok":true}`.
pub type TlsServer = Server<TlsStats>;

impl Server<TlsStats> {
    /// Serves TLS with `pki`'s certificate, selecting from `alpn` (empty: no ALPN at all).
    pub async fn start(pki: &Pki, alpn: &[&[u8]]) -> Self {
        let load = QUIET.read().await;
        let mut config = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![pki.cert.clone()], pki.key.clone_key())
            .unwrap();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let stats = Arc::new(TlsStats::default());
        let s = stats.clone();
        Server::listen("https", stats, Some(load), move |tcp, counts| {
            let (acceptor, s, counts) = (acceptor.clone(), s.clone(), counts.clone());
            async move {
                // A client that refuses the certificate aborts the handshake here.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                s.handshakes.fetch_add(1, SeqCst);
                if tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                    s.resumed.fetch_add(1, SeqCst);
                }
                let proto = if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
                    Proto::H2c
                } else {
                    Proto::H1
                };
                serve(tls, proto, counts, move |req| answer(req, s.clone())).await;
            }
        })
        .await
    }

    pub fn count(&self, what: fn(&TlsStats) -> &AtomicU64) -> u64 {
        what(&self.stats).load(SeqCst)
    }
}

async fn answer(
    req: Request<hyper::body::Incoming>,
    stats: Arc<TlsStats>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.version() == hyper::Version::HTTP_2 {
        stats.h2_requests.fetch_add(1, SeqCst);
    }
    let mut r = Response::new(Full::new(Bytes::from_static(br#"{"ok":true}"#)));
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    Ok(r)
}
