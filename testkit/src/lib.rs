//! What herd's tests share, so each crate's tests stop carrying their own copy: one loopback
//! server ([`Server`]: HTTP/1.1, h2c or TLS, routes by path, counters the tests compare the
//! driver's counts with), a temporary directory removed on drop ([`TempDir`]) and a test CA
//! ([`TestCa`]). A dev-dependency only: nothing here ships in herd.

mod server;
mod tempdir;
mod tls;

pub use server::{Builder, Chunks, Proto, Reply, Req, Server};
pub use tempdir::TempDir;
pub use tls::{ServerCert, TestCa};
