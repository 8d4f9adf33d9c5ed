//! Where the driver meets its HTTP client (herd-http): a scenario's target made into a
//! transport, and the client's failures made into outcomes.

use std::sync::Arc;

use herd_http::{Endpoint, ErrorKind, Protocol, TlsConfig, Transport, TransportError};
use herd_model::{Outcome, TlsProblem, TransportErrorKind};

use crate::scenario::{Target, TransportKind};

/// The transport `target` asks for: its protocol, over TLS for `https://` targets.
pub fn for_target(target: &Target) -> Arc<dyn Transport> {
    let endpoint = endpoint(target);
    let protocol = match target.transport {
        // A WebSocket's upgrade is HTTP/1.1's (`ws.rs` dials its sockets itself).
        TransportKind::H1 | TransportKind::Ws => Protocol::H1,
        TransportKind::H2c => Protocol::H2c,
        TransportKind::H2 => Protocol::H2,
        TransportKind::Grpc if target.tls.is_some() => Protocol::H2,
        TransportKind::Grpc => Protocol::H2c,
    };
    let tls = target.tls.as_ref().map(|t| TlsConfig {
        ca_certs: t.ca_certs.clone(),
        insecure: t.insecure,
    });
    herd_http::connector(&endpoint, protocol, tls.as_ref())
}

/// What opens the players' sockets on a WebSocket target; `None` for other targets.
pub fn ws_connector(target: &Target) -> Option<herd_http::ws::Connector> {
    (target.transport == TransportKind::Ws).then(|| {
        let tls = target.tls.as_ref().map(|t| TlsConfig {
            ca_certs: t.ca_certs.clone(),
            insecure: t.insecure,
        });
        herd_http::ws::Connector::new(&endpoint(target), tls.as_ref())
    })
}

fn endpoint(target: &Target) -> Endpoint {
    Endpoint {
        host: target.host.clone(),
        port: target.port,
        authority: target.authority.clone(),
        connect_timeout: target.connect_timeout,
        source_addrs: target.source_addrs.clone(),
    }
}

/// The outcome of an op whose connection failed with `e`.
pub fn outcome(e: &TransportError) -> Outcome {
    Outcome::TransportError(kind(e.kind()))
}

/// The outcome's name for a failed part of the exchange.
pub fn kind(k: ErrorKind) -> TransportErrorKind {
    match k {
        ErrorKind::Connect => TransportErrorKind::Connect,
        ErrorKind::Reset => TransportErrorKind::Reset,
        ErrorKind::Protocol => TransportErrorKind::Protocol,
        ErrorKind::Tls(p) => TransportErrorKind::Tls(match p {
            herd_http::TlsProblem::UnknownCa => TlsProblem::UnknownCa,
            herd_http::TlsProblem::NameMismatch => TlsProblem::NameMismatch,
            herd_http::TlsProblem::Expired => TlsProblem::Expired,
            herd_http::TlsProblem::Handshake => TlsProblem::Handshake,
        }),
    }
}
