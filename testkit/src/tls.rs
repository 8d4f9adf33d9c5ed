//! A private CA made fresh by each test (rcgen) and the server certificates it signs: valid
//! ones for the names asked, and an expired one for the tests of that outcome.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A self-signed certificate authority.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}

impl TestCa {
    /// A new CA, `herd test CA`, with a key of its own.
    pub fn new() -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "herd test CA");
        let key = KeyPair::generate().expect("a CA key");
        let issuer = CertifiedIssuer::self_signed(params, key).expect("a self-signed CA");
        Self { issuer }
    }

    /// The CA's certificate in PEM: what a client is told to trust (`target.ca`).
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// Writes the CA's certificate to `ca.pem` in `dir` and returns its path.
    pub fn write_pem(&self, dir: &Path) -> PathBuf {
        let file = dir.join("ca.pem");
        std::fs::write(&file, self.pem())
            .unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
        file
    }

    /// A server certificate for `names` (DNS names or IP addresses), valid now.
    pub fn server_cert(&self, names: &[&str]) -> ServerCert {
        self.sign(names, None)
    }

    /// A server certificate for `names` that expired on 1 January 2020.
    pub fn expired_cert(&self, names: &[&str]) -> ServerCert {
        self.sign(names, Some((2019, 2020)))
    }

    fn sign(&self, names: &[&str], years: Option<(i32, i32)>) -> ServerCert {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names).expect("server certificate names");
        if let Some((from, to)) = years {
            params.not_before = rcgen::date_time_ymd(from, 1, 1);
            params.not_after = rcgen::date_time_ymd(to, 1, 1);
        }
        let key = KeyPair::generate().expect("a server key");
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("a CA-signed certificate");
        ServerCert {
            pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
            key: PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
        }
    }
}

/// A server certificate and its key.
pub struct ServerCert {
    /// The certificate in PEM.
    pub pem: String,
    /// Its private key in PEM (PKCS#8).
    pub key_pem: String,
    der: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
}

impl ServerCert {
    /// Writes `server.pem` and `server.key` into `dir`; returns both paths.
    pub fn write_pem(&self, dir: &Path) -> (PathBuf, PathBuf) {
        let (cert, key) = (dir.join("server.pem"), dir.join("server.key"));
        for (file, text) in [(&cert, &self.pem), (&key, &self.key_pem)] {
            std::fs::write(file, text)
                .unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
        }
        (cert, key)
    }

    /// The certificate chain and key as rustls takes them.
    pub(crate) fn rustls(&self) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
        (vec![self.der.clone()], self.key.clone_key())
    }
}
