//! What herd's tests share, so each crate's tests stop carrying their own copy: one loopback
//! server ([`Server`]: HTTP/1.1, h2c or TLS, routes by path, counters the tests compare the
//! driver's counts with), real gRPC and WebSocket servers in Python ([`PyServer`]: grpcio,
//! websockets), a temporary directory removed on drop ([`TempDir`]) and a test CA
//! ([`TestCa`]). A dev-dependency only (and xtask's, for [`TempDir`] alone, without the
//! `server` feature): nothing here ships in herd.
#![deny(missing_docs)]

pub mod logfmt;
pub mod nchan;
#[cfg(feature = "server")]
pub mod prometheus;
#[cfg(feature = "server")]
pub mod py;
#[cfg(feature = "server")]
mod server;
mod tempdir;
#[cfg(feature = "server")]
mod tls;

#[cfg(feature = "server")]
pub use py::PyServer;
#[cfg(feature = "server")]
pub use server::{Builder, Chunks, Proto, Reply, Req, Server};
pub use tempdir::TempDir;
#[cfg(feature = "server")]
pub use tls::{ServerCert, TestCa};
