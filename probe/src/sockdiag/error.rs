//! The one error of sock_diag sampling; every variant names the namespace.

use std::{io, path::PathBuf};

use crate::netstat::ParseError;

/// Why a namespace could not be opened or read. Every variant names the namespace.
#[derive(Debug, thiserror::Error)]
pub enum SockDiagError {
    /// The namespace file could not be opened.
    #[error("opening network namespace {netns} ({path}): {source}")]
    Open {
        /// The namespace.
        netns: String,
        /// The file tried.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// Entering the namespace (in a helper thread) or creating something inside it failed.
    #[error("network namespace {netns}: {op}: {source}{hint}")]
    Enter {
        /// The namespace.
        netns: String,
        /// What was being done (`setns`, `creating the NETLINK_SOCK_DIAG socket`, `opening
        /// /proc/thread-self/net/netstat`, ...).
        op: String,
        /// The error.
        source: io::Error,
        /// What to do about it, when known.
        hint: &'static str,
    },
    /// Sending the dump request or receiving the reply failed.
    #[error("network namespace {netns}: sock_diag dump of {family} TCP sockets: {op}: {source}")]
    Io {
        /// The namespace.
        netns: String,
        /// `IPv4` or `IPv6`.
        family: &'static str,
        /// `send` or `recv`.
        op: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The kernel answered the dump with an error.
    #[error(
        "network namespace {netns}: the kernel refused the sock_diag dump of {family} TCP \
         sockets: {source}{hint}"
    )]
    Kernel {
        /// The namespace.
        netns: String,
        /// `IPv4` or `IPv6`.
        family: &'static str,
        /// The errno the kernel returned.
        source: io::Error,
        /// What to do about it, when known.
        hint: &'static str,
    },
    /// The reply did not follow the netlink/inet_diag format.
    #[error(
        "network namespace {netns}: malformed sock_diag reply for {family} TCP sockets: {what}"
    )]
    Malformed {
        /// The namespace.
        netns: String,
        /// `IPv4` or `IPv6`.
        family: &'static str,
        /// What was wrong.
        what: String,
    },
    /// A procfs file of the namespace could not be read.
    #[error("network namespace {netns}: reading {file}: {source}")]
    Read {
        /// The namespace.
        netns: String,
        /// The file (`net/netstat`, `ip_local_port_range`, ...).
        file: &'static str,
        /// The error.
        source: io::Error,
    },
    /// A procfs file of the namespace did not parse.
    #[error("network namespace {netns}: parsing {file}: {source}")]
    Parse {
        /// The namespace.
        netns: String,
        /// The file.
        file: &'static str,
        /// The error.
        source: ParseError,
    },
}
