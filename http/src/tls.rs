//! `https://` targets: HTTP/2 (`transport = "h2"`, chosen by ALPN) or HTTP/1.1
//! (`transport = "h1"`) over TLS, with rustls on the ring provider.
//!
//! The TLS handshake is part of opening a connection, like the TCP connect: it happens in
//! [`Transport::connect`], so its time lands where a connect's does, and its failures are
//! `transport_error.tls_*` outcomes naming the problem (unknown CA, name mismatch,
//! expired, any other handshake failure) or
//! `transport_error.protocol` (the server would not speak h2).

use std::{io, sync::Arc, time::Instant};

use rustls::{
    AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore,
    SignatureScheme,
    client::{
        Resumption,
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    },
    crypto::{CryptoProvider, ring, verify_tls12_signature, verify_tls13_signature},
    pki_types::{CertificateDer, ServerName, UnixTime},
};
use tokio_rustls::TlsConnector;

use crate::{BoxFuture, Connection, Dial, Protocol, TlsProblem, Transport, TransportError, h1, h2};

/// How a TLS transport checks the server's certificate.
#[derive(Debug, Clone, Default)]
pub struct TlsConfig {
    /// CA certificates trusted besides the system's roots (a private CA).
    pub ca_certs: Vec<CertificateDer<'static>>,
    /// Accept any certificate, self-signed or for another name; the handshake's signatures
    /// are still checked.
    pub insecure: bool,
}

/// What to do about a certificate from an unknown CA.
pub const TRUST_HINT: &str = "pass --insecure (or set target.insecure = true) to accept it, \
                          or target.ca = \"ca.pem\" to trust the CA that signed it";
/// What to do about any other certificate the driver refused.
pub const ACCEPT_HINT: &str = "pass --insecure (or set target.insecure = true) to accept it";

/// HTTP/1.1 or HTTP/2 over TLS to one target.
pub(crate) struct Tls {
    dial: Dial,
    connector: TlsConnector,
    /// SNI and the name the certificate must carry: the URL's host. An error if the host
    /// is neither a DNS name nor an IP address.
    name: Result<ServerName<'static>, String>,
    h2: bool,
}

impl Tls {
    /// A TLS transport trusting the system's roots plus `tls.ca_certs`, or anything with
    /// `tls.insecure`; `protocol` picks the protocol ALPN asks for.
    pub(crate) fn new(dial: Dial, tls: &TlsConfig, protocol: Protocol) -> Self {
        let provider = Arc::new(ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("the ring provider supports TLS 1.2 and 1.3");
        let mut config = if tls.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth()
        } else {
            let mut roots = RootCertStore::empty();
            // Unreadable system certificates only shrink the store: a target they would
            // have vouched for then fails as `transport_error.tls_unknown_ca`, whose hint says to use `ca`.
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            roots.add_parsable_certificates(tls.ca_certs.iter().cloned());
            builder.with_root_certificates(roots).with_no_client_auth()
        };
        // Players are distinct clients: a session one player's connect got must not let
        // another's skip the full handshake, or 10 000 players would cost the server one
        // handshake's work and many cheap resumptions. A reconnect does a full one too.
        config.resumption = Resumption::disabled();
        let h2 = protocol == Protocol::H2;
        // For h2, http/1.1 is offered too, so a server without HTTP/2 says what it speaks
        // instead of failing the handshake with no protocol in common.
        config.alpn_protocols = if h2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        let name = ServerName::try_from(dial.host.clone())
            .map_err(|e| format!("`{}` cannot be a TLS server name: {e}", dial.host));
        Self {
            dial,
            connector: TlsConnector::from(Arc::new(config)),
            name,
            h2,
        }
    }

    fn failed(&self, problem: TlsProblem, reason: String) -> TransportError {
        TransportError::Tls {
            addr: format!("{}:{}", self.dial.host, self.dial.port),
            problem,
            reason,
        }
    }

    /// Sorts a failed handshake: ALPN with no protocol in common is the server refusing
    /// the protocol, everything else is TLS itself.
    fn handshake_error(&self, e: io::Error) -> TransportError {
        let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
            return self.failed(
                TlsProblem::Handshake,
                format!(
                    "{e} during the handshake (does the port serve TLS? an http:// server closes \
                 or answers a TLS ClientHello with plain HTTP)"
                ),
            );
        };
        match tls {
            rustls::Error::AlertReceived(AlertDescription::NoApplicationProtocol) => {
                TransportError::Protocol(format!(
                    "{}:{}: the server accepts none of the ALPN protocols offered ({}); {}",
                    self.dial.host,
                    self.dial.port,
                    if self.h2 { "h2, http/1.1" } else { "http/1.1" },
                    if self.h2 {
                        "it does not serve HTTP/2 over TLS here"
                    } else {
                        "it does not serve HTTP/1.1 over TLS here; try transport = \"h2\""
                    }
                ))
            }
            rustls::Error::InvalidCertificate(c) => {
                let (problem, what) = match c {
                    CertificateError::UnknownIssuer => (
                        TlsProblem::UnknownCa,
                        "the server's certificate is signed by a CA the driver does not trust \
                         (self-signed or a private CA)"
                            .to_owned(),
                    ),
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. } => (
                        TlsProblem::NameMismatch,
                        format!(
                            "the server's certificate is not valid for `{}` ({tls})",
                            self.dial.host
                        ),
                    ),
                    CertificateError::Expired
                    | CertificateError::ExpiredContext { .. }
                    | CertificateError::NotValidYet
                    | CertificateError::NotValidYetContext { .. } => (
                        TlsProblem::Expired,
                        format!("the server's certificate is out of its validity period ({tls})"),
                    ),
                    _ => (
                        TlsProblem::Handshake,
                        format!("the server's certificate was refused: {tls}"),
                    ),
                };
                let remedy = match problem {
                    TlsProblem::UnknownCa => TRUST_HINT,
                    TlsProblem::NameMismatch => {
                        "use a host it names in target.url, or pass --insecure \
                         (or set target.insecure = true) to accept it"
                    }
                    _ => ACCEPT_HINT,
                };
                self.failed(problem, format!("{what}; {remedy}"))
            }
            rustls::Error::InvalidMessage(_) => self.failed(
                TlsProblem::Handshake,
                format!(
                    "{tls} (does the port serve TLS? an http:// server answers a TLS \
                     ClientHello with plain HTTP)"
                ),
            ),
            other => self.failed(TlsProblem::Handshake, other.to_string()),
        }
    }
}

impl Tls {
    /// A TCP connection with TLS over it, within the endpoint's connect timeout (TCP
    /// connect and TLS handshake together); its failures sorted as [`Tls::handshake_error`]
    /// sorts them.
    pub(crate) async fn stream(
        &self,
    ) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, TransportError> {
        let started = Instant::now();
        let tcp = self.dial.tcp().await?;
        let name = self
            .name
            .clone()
            .map_err(|m| self.failed(TlsProblem::Handshake, m))?;
        // One bound for the whole open: TCP connect and TLS handshake together.
        let left = self.dial.timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, self.connector.connect(name, tcp)).await {
            Err(_) => Err(self
                .dial
                .failed(format!("no TLS handshake within {:?}", self.dial.timeout))),
            Ok(Err(e)) => Err(self.handshake_error(e)),
            Ok(Ok(s)) => Ok(s),
        }
    }
}

impl Transport for Tls {
    fn connect(&self) -> BoxFuture<'_, Result<Box<dyn Connection>, TransportError>> {
        Box::pin(async move {
            let stream = self.stream().await?;
            let alpn = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
            if !self.h2 {
                // A server that ignores ALPN speaks HTTP/1.1 by default.
                return h1::handshake(&self.dial, stream).await;
            }
            if alpn.as_deref() == Some(b"h2") {
                return h2::handshake(&self.dial, stream, true).await;
            }
            let selected = match alpn {
                Some(p) => format!("selected `{}`", String::from_utf8_lossy(&p)),
                None => "selected no protocol".to_owned(),
            };
            Err(TransportError::Protocol(format!(
                "{}:{}: asked for h2 by ALPN and the server {selected}: it does not serve \
                 HTTP/2 over TLS here; use transport = \"h1\" for HTTP/1.1 over TLS",
                self.dial.host, self.dial.port
            )))
        })
    }

    fn multiplexed(&self) -> bool {
        self.h2
    }
}

/// `insecure`: any certificate chain is accepted, but the handshake signatures are still
/// verified, so the session is at least bound to the key the server presented.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
