//! Opening a player's socket: TCP (the endpoint's source addresses and connect timeout, as
//! every transport dials), TLS for `wss://` (ALPN `http/1.1` alone, the certificate checked
//! as for `https://`), then the upgrade. Failures keep the part that failed: the connect or
//! the TLS handshake as a [`TransportError`], the upgrade as a WebSocket [`Error`].

use std::{
    io,
    pin::Pin,
    task::{Context, Poll},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
};

use super::{Accepted, Error, Handshake, Masks, Socket};
use crate::{Dial, Endpoint, Protocol, TlsConfig, TransportError, tls::Tls};

/// The byte stream under a socket: TCP (`ws://`) or TLS over TCP (`wss://`).
#[derive(Debug)]
pub enum Stream {
    /// Plain TCP.
    Tcp(TcpStream),
    /// TLS over TCP.
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Stream {
    /// Waits until a read would find bytes (or the end), without reading: a socket that
    /// waits here holds no read buffer. Over TLS, where bytes may sit decrypted in the TLS
    /// layer already, it returns at once.
    pub async fn readable(&self) -> io::Result<()> {
        match self {
            Self::Tcp(s) => s.readable().await,
            Self::Tls(_) => Ok(()),
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Why a socket did not open.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConnectError {
    /// The TCP connect or the TLS handshake failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The server refused or botched the upgrade.
    #[error("the WebSocket upgrade failed: {0}")]
    Handshake(Error),
}

/// Opens sockets to one endpoint.
pub struct Connector {
    dial: Dial,
    tls: Option<Tls>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("authority", &self.dial.authority)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Connector {
    /// Sockets to `endpoint`, over TLS with `tls` when given (`wss://`).
    pub fn new(endpoint: &Endpoint, tls: Option<&TlsConfig>) -> Self {
        let dial = Dial::new(endpoint);
        let tls = tls.map(|t| Tls::new(dial.clone(), t, Protocol::H1));
        Self { dial, tls }
    }

    /// `host:port` as the upgrade's `Host` carries it.
    pub fn authority(&self) -> &str {
        &self.dial.authority
    }

    /// Connects and runs `handshake`, all within the endpoint's connect timeout; messages
    /// past `max_message` bytes fail the socket.
    pub async fn connect(
        &self,
        handshake: &Handshake,
        masks: Masks,
        max_message: usize,
    ) -> Result<(Socket<Stream>, Accepted), ConnectError> {
        let open = async {
            let stream = match &self.tls {
                None => Stream::Tcp(self.dial.tcp().await?),
                Some(tls) => Stream::Tls(Box::new(tls.stream().await?)),
            };
            Socket::connect(stream, handshake, masks, max_message)
                .await
                .map_err(|e| match e {
                    // A connection that ends before the 101 never became a WebSocket.
                    Error::Dropped | Error::Io(_) => ConnectError::Transport(
                        TransportError::Reset(format!("during the WebSocket upgrade: {e}")),
                    ),
                    e => ConnectError::Handshake(e),
                })
        };
        tokio::time::timeout(self.dial.timeout, open)
            .await
            .map_err(|_| {
                ConnectError::Transport(self.dial.failed(format!(
                    "no WebSocket upgrade within {:?}",
                    self.dial.timeout
                )))
            })?
    }
}
