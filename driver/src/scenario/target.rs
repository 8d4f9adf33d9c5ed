//! `[target]`: the URL, the transport and who owns the connections; gRPC's and
//! WebSocket's own keys are checked in `protocols.rs`.

use std::{fmt, time::Duration};

use serde::Deserialize;

use super::{
    Invalid, Tls, at, key, positive,
    raw::{RawConnections, RawTarget},
    tls,
};

/// How requests travel to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    /// HTTP/1.1, one request at a time per connection.
    H1,
    /// HTTP/2 over cleartext TCP with prior knowledge (no upgrade), many streams per
    /// connection.
    H2c,
    /// HTTP/2 over TLS, chosen by ALPN (`https://` targets only).
    H2,
    /// gRPC over HTTP/2: h2c for `grpc://` (or `http://`), h2 over TLS for `grpcs://` (or
    /// `https://`).
    Grpc,
    /// WebSocket (RFC 6455, an HTTP/1.1 upgrade): `ws://`, or `wss://` over TLS.
    Ws,
}

/// Who owns the connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connections {
    /// Each player (and each hammer worker) opens and keeps its own connection, like real
    /// clients do.
    PerPlayer,
    /// All players share this many connections, opened when the run starts.
    Pool(usize),
}

/// Where the load goes.
#[derive(Debug, Clone)]
pub struct Target {
    /// Host to connect to, as written in the URL.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// `host:port`, the request authority.
    pub authority: String,
    /// Path prefix from the URL, prepended to every op's path (empty for `/`).
    pub base_path: String,
    /// HTTP/1.1, h2c or h2.
    pub transport: TransportKind,
    /// For `https://`: how the server's certificate is checked; none for `http://`.
    pub tls: Option<Tls>,
    /// Per player or a shared pool.
    pub connections: Connections,
    /// Bound on opening one connection.
    pub connect_timeout: Duration,
    /// gRPC: the compiled `.proto` files and how messages travel; `None` for other
    /// transports.
    pub grpc: Option<super::protocols::GrpcTarget>,
    /// WebSocket: the socket's path, subprotocols and handshake headers; `None` for other
    /// transports.
    pub ws: Option<super::protocols::WsTarget>,
    /// Local addresses connections are opened from, in turn (empty: the kernel's choice).
    /// One source address gives ≈ 28 000 ephemeral ports toward one destination; N give N×.
    /// Keep each under half of that: connect() takes even ports first, and past the even
    /// half every connect from that address scans them all in the kernel first (at 16 667
    /// connections an address, 79 % of a shard's CPU; docs/benchmarks.md, scale-out).
    pub source_addrs: Vec<std::net::IpAddr>,
}

const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What compiling `[target]` leaves for the rest of the file: the target, and a WebSocket
/// target's handshake headers, whose templates read the file's variables.
pub(super) struct CompiledTarget {
    pub target: Target,
    pub ws_headers: Option<std::collections::BTreeMap<String, String>>,
}

pub(super) fn compile_target(file: &str, t: RawTarget) -> Result<CompiledTarget, Invalid> {
    let p = [key("target")];
    let url_path = [key("target"), key("url")];
    // A WebSocket URL's path and query may read variables (`?player={player}`), which a
    // URI cannot hold: only its scheme and authority are parsed as one.
    let origin = match t.url.split_once("://") {
        Some((scheme, rest))
            if scheme.eq_ignore_ascii_case("ws") || scheme.eq_ignore_ascii_case("wss") =>
        {
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            format!("{scheme}://{}/", &rest[..end])
        }
        _ => t.url.clone(),
    };
    let uri: http::Uri = origin
        .parse()
        .map_err(|e| at(&url_path, format!("`{}` is not a URL: {e}", t.url)))?;
    let scheme = uri.scheme_str().unwrap_or_default().to_ascii_lowercase();
    let (https, by_scheme) = match scheme.as_str() {
        "http" => (false, None),
        "https" => (true, None),
        "grpc" => (false, Some(TransportKind::Grpc)),
        "grpcs" => (true, Some(TransportKind::Grpc)),
        "ws" => (false, Some(TransportKind::Ws)),
        "wss" => (true, Some(TransportKind::Ws)),
        _ => {
            return Err(at(
                &url_path,
                format!(
                    "`{}` needs the http://, https://, grpc://, grpcs://, ws:// or wss:// scheme",
                    t.url
                ),
            ));
        }
    };
    let transport = match (by_scheme, t.transport) {
        (None, None) => TransportKind::H1,
        (None, Some(k)) | (Some(k), None) => k,
        (Some(k), Some(given)) if k == given => k,
        (Some(k), Some(given)) => {
            return Err(at(
                &[key("target"), key("transport")],
                format!(
                    "the {scheme}:// scheme is transport \"{k}\"; transport = \"{given}\" contradicts it: leave transport out"
                ),
            ));
        }
    };
    let tls = tls::compile(file, https, transport, t.ca, t.insecure)?;
    let host = uri
        .host()
        .ok_or_else(|| at(&url_path, format!("`{}` has no host", t.url)))?
        .trim_matches(['[', ']'])
        .to_owned();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    if uri.query().is_some() {
        return Err(at(
            &url_path,
            "the target URL takes no query; put it in each op's path",
        ));
    }
    let base_path = match transport {
        // The socket's path and query, as the upgrade asks for them.
        TransportKind::Ws => {
            // http::Uri decodes nothing: what was written is what goes out.
            let raw = t.url.split_once("://").map_or("", |(_, r)| r);
            let start = raw.find(['/', '?']).unwrap_or(raw.len());
            let tail = raw[start..].split('#').next().unwrap_or_default();
            match tail {
                "" => "/".to_owned(),
                t if t.starts_with('?') => format!("/{t}"),
                t => t.to_owned(),
            }
        }
        TransportKind::Grpc if !matches!(uri.path(), "" | "/") => {
            return Err(at(
                &url_path,
                format!(
                    "`{}`: a gRPC target is a host and port; each op's `call` names its method",
                    t.url
                ),
            ));
        }
        _ => uri.path().trim_end_matches('/').to_owned(),
    };
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .unwrap_or_default();
    let connections = match (t.connections, t.pool_size) {
        (RawConnections::PerPlayer, None) => Connections::PerPlayer,
        (RawConnections::PerPlayer, Some(_)) => {
            return Err(at(
                &[key("target"), key("pool_size")],
                "pool_size needs connections = \"pool\"",
            ));
        }
        (RawConnections::Pool, None) => {
            return Err(at(&p, "connections = \"pool\" needs pool_size = N (N ≥ 1)"));
        }
        (RawConnections::Pool, Some(0)) => {
            return Err(at(&[key("target"), key("pool_size")], "must be at least 1"));
        }
        (RawConnections::Pool, Some(n)) => Connections::Pool(n),
    };
    let connect_timeout = positive(
        t.connect_timeout,
        DEFAULT_CONNECT_TIMEOUT,
        &[key("target"), key("connect_timeout")],
    )?;
    let source_addrs = t
        .source_addrs
        .iter()
        .map(|a| {
            a.parse::<std::net::IpAddr>().map_err(|_| {
                at(
                    &[key("target"), key("source_addrs")],
                    format!("`{a}` is not an IP address (e.g. \"127.0.0.2\", a local address)"),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let grpc = super::protocols::compile_grpc_target(
        file,
        transport,
        super::protocols::RawGrpcTarget {
            proto: t.proto.map(super::raw::OneOrMany::into_vec),
            proto_path: t.proto_path,
            compression: t.compression,
            field_names: t.field_names,
        },
    )?;
    let ws_headers = super::protocols::check_ws_target(
        transport,
        &t.subprotocols,
        t.headers.as_ref(),
        connections,
    )?;
    let ws = (transport == TransportKind::Ws).then(|| super::protocols::WsTarget {
        path: crate::template::Template::literal(&base_path),
        subprotocols: t.subprotocols.clone(),
        headers: Vec::new(),
    });
    Ok(CompiledTarget {
        target: Target {
            host,
            port,
            authority,
            base_path,
            transport,
            tls,
            connections,
            connect_timeout,
            grpc,
            ws,
            source_addrs,
        },
        ws_headers: ws_headers.then_some(t.headers.unwrap_or_default()),
    })
}

impl fmt::Display for TransportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::H1 => "h1",
            Self::H2c => "h2c",
            Self::H2 => "h2",
            Self::Grpc => "grpc",
            Self::Ws => "ws",
        })
    }
}
