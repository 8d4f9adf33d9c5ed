//! The TLS half of `[target]`: which transports go over `https://`, and what the driver
//! trusts (the system's roots, `ca`, or anything with `insecure`).

use std::path::{Path, PathBuf};

use rustls_pki_types::{CertificateDer, pem::PemObject as _};

use super::{Invalid, TransportKind, at, key};

/// How an `https://` target's certificate is checked. The server name (SNI and the name the
/// certificate must carry) is the URL's host.
#[derive(Debug, Clone, Default)]
pub struct Tls {
    /// `target.ca`: a PEM file of CA certificates trusted besides the system's roots, as
    /// resolved against the scenario's directory.
    pub ca: Option<PathBuf>,
    /// The certificates read from `ca` when the scenario was checked.
    pub ca_certs: Vec<CertificateDer<'static>>,
    /// `target.insecure` (or `--insecure`): accept any certificate, self-signed or for
    /// another name. The handshake's signatures are still checked.
    pub insecure: bool,
}

/// Checks the transport against the scheme and reads `ca`; `None` for `http://`.
pub(super) fn compile(
    file: &str,
    https: bool,
    transport: TransportKind,
    ca: Option<String>,
    insecure: Option<bool>,
) -> Result<Option<Tls>, Invalid> {
    let transport_path = [key("target"), key("transport")];
    if !https {
        if transport == TransportKind::H2 {
            return Err(at(
                &transport_path,
                "h2 is HTTP/2 over TLS and needs an https:// url; \
                 for HTTP/2 over cleartext TCP use transport = \"h2c\"",
            ));
        }
        if ca.is_some() {
            return Err(at(
                &[key("target"), key("ca")],
                "ca is for https:// targets; this url is http://",
            ));
        }
        // `insecure = false` says nothing an http:// target could contradict.
        if insecure == Some(true) {
            return Err(at(
                &[key("target"), key("insecure")],
                "insecure is for https:// targets; this url is http://",
            ));
        }
        return Ok(None);
    }
    if transport == TransportKind::H2c {
        return Err(at(
            &transport_path,
            "h2c is HTTP/2 over cleartext TCP; over https:// use transport = \"h2\" \
             (HTTP/2 by ALPN) or \"h1\" (HTTP/1.1 over TLS)",
        ));
    }
    let (ca, ca_certs) = match ca {
        None => (None, Vec::new()),
        Some(ca) => {
            let path = relative_to(file, &ca);
            let certs = read_ca(&path).map_err(|m| at(&[key("target"), key("ca")], m))?;
            (Some(path), certs)
        }
    };
    Ok(Some(Tls {
        ca,
        ca_certs,
        insecure: insecure.unwrap_or(false),
    }))
}

/// `path` as written, or beside the scenario file when relative, so a scenario and its CA
/// can travel together.
pub(super) fn relative_to(file: &str, path: &str) -> PathBuf {
    let p = Path::new(path);
    match Path::new(file).parent() {
        Some(dir) if p.is_relative() => dir.join(p),
        _ => p.to_owned(),
    }
}

/// Every certificate in a PEM file; at least one.
fn read_ca(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let shown = path.display();
    let pem = std::fs::read(path).map_err(|e| format!("cannot read the CA file {shown}: {e}"))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{shown} is not a PEM certificate file: {e}"))?;
    if certs.is_empty() {
        return Err(format!(
            "{shown} holds no `-----BEGIN CERTIFICATE-----` block; ca wants the CA's certificate in PEM"
        ));
    }
    Ok(certs)
}

impl super::Target {
    /// `--insecure`: accept any certificate from this `https://` target. False, and
    /// nothing changed, for an `http://` one.
    pub fn accept_any_certificate(&mut self) -> bool {
        match &mut self.tls {
            Some(tls) => {
                tls.insecure = true;
                true
            }
            None => false,
        }
    }
}
