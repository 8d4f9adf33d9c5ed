//! Opening the TCP connection under every transport: the connect timeout, Nagle off, and
//! the turn of source addresses.

use std::{
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::net::TcpStream;

use crate::TransportError;

/// Where a transport connects and how long it may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host to connect to: a DNS name or an IP address (also the TLS server name).
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// `host:port` as the requests carry it (`Host`, `:authority`).
    pub authority: String,
    /// Bound on opening one connection (TCP connect and handshake).
    pub connect_timeout: Duration,
    /// Local addresses connections are opened from, in turn; empty for the kernel's choice.
    pub source_addrs: Vec<IpAddr>,
}

/// An [`Endpoint`] as the transports dial it, with the turn of its source addresses.
#[derive(Debug, Clone)]
pub(crate) struct Dial {
    pub host: String,
    pub port: u16,
    pub authority: String,
    pub timeout: Duration,
    /// The endpoint's source addresses, taken in turn.
    pub sources: Arc<[IpAddr]>,
    pub next_source: Arc<AtomicUsize>,
}

impl Dial {
    /// Dials `e`, its source addresses taken in turn from the first.
    pub fn new(e: &Endpoint) -> Self {
        Self {
            host: e.host.clone(),
            port: e.port,
            authority: e.authority.clone(),
            timeout: e.connect_timeout,
            sources: e.source_addrs.clone().into(),
            next_source: Arc::default(),
        }
    }

    /// A TCP connection with Nagle off: a request is one small write that must not wait for
    /// the previous segment's ACK.
    pub async fn tcp(&self) -> Result<TcpStream, TransportError> {
        let connect = async {
            if self.sources.is_empty() {
                return TcpStream::connect((self.host.as_str(), self.port)).await;
            }
            let n = self.next_source.fetch_add(1, Ordering::Relaxed);
            self.tcp_from(self.sources[n % self.sources.len()]).await
        };
        let stream = tokio::time::timeout(self.timeout, connect)
            .await
            .map_err(|_| self.failed(format!("no answer within {:?}", self.timeout)))?
            .map_err(|e| self.failed(e.to_string()))?;
        stream
            .set_nodelay(true)
            .map_err(|e| self.failed(e.to_string()))?;
        Ok(stream)
    }

    /// Connects from source address `src`: the first of the host's addresses of its family.
    async fn tcp_from(&self, src: IpAddr) -> std::io::Result<TcpStream> {
        let to = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await?
            .find(|a| a.is_ipv4() == src.is_ipv4())
            .ok_or_else(|| {
                std::io::Error::other(format!(
                    "{} has no {} address for source address {src}",
                    self.host,
                    if src.is_ipv4() { "IPv4" } else { "IPv6" }
                ))
            })?;
        let socket = if src.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        // Without IP_BIND_ADDRESS_NO_PORT, bind() to port 0 picks the port there and then,
        // unique for the source address whatever the destination (inet_csk_get_port), so one
        // source address would cap every destination together at the ephemeral range; with
        // it the port is picked at connect() per 4-tuple (__inet_hash_connect), as for an
        // unbound socket. Linux ≥ 4.2.
        let on: libc::c_int = 1;
        // SAFETY: setsockopt on a socket this function owns, with a c_int option value.
        let rc = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&socket),
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        socket
            .bind(std::net::SocketAddr::new(src, 0))
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "binding source address {src} (target.source_addrs; is it local?): {e}"
                    ),
                )
            })?;
        socket.connect(to).await
    }

    pub fn failed(&self, reason: String) -> TransportError {
        TransportError::Connect {
            addr: format!("{}:{}", self.host, self.port),
            reason,
        }
    }
}
