//! HTTP/2 over cleartext TCP with prior knowledge: the client starts with the HTTP/2
//! preface, no `Upgrade` round trip, as gRPC-style and edge clients do.

use std::{
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering::Relaxed},
    },
    task::{Context, Poll},
};

use bytes::Bytes;
use http::uri::{Authority, Scheme};
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{
    BoxFuture, Connection, Dial, Request, Response, Streaming, Transport, TransportError,
    from_hyper,
};

/// The h2c transport.
pub(crate) struct H2c(pub Dial);

impl Transport for H2c {
    fn connect(&self) -> BoxFuture<'_, Result<Box<dyn Connection>, TransportError>> {
        Box::pin(async move { handshake(&self.0, self.0.tcp().await?, Scheme::HTTP).await })
    }

    fn multiplexed(&self) -> bool {
        true
    }
}

/// HTTP/2 over an open byte stream: cleartext TCP here, TLS after ALPN chose h2 in
/// [`super::tls`]; `scheme` is the `:scheme` every request carries.
pub(super) async fn handshake<S>(
    dial: &Dial,
    stream: S,
    scheme: Scheme,
) -> Result<Box<dyn Connection>, TransportError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let authority: Authority = dial
        .authority
        .parse()
        .map_err(|e: http::uri::InvalidUri| dial.failed(e.to_string()))?;
    let heard = Arc::new(AtomicBool::new(false));
    let stream = Heard {
        stream,
        heard: heard.clone(),
    };
    // A 0-byte HPACK decoding table (SETTINGS_HEADER_TABLE_SIZE): the server then indexes
    // nothing for us. Servers like nginx add every response's `date`, `server`,
    // `content-type` and `content-length` to the client's table, which then holds ~4 KiB of
    // entries per connection, churned on every response: at 10 000 players that was 60 MiB of
    // RSS, and 10 % of the CPU per request. The price is a few header bytes per response from
    // servers that would re-use their entries.
    let (sender, conn) = http2::Builder::new(TokioExecutor::new())
        .header_table_size(0)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|e| dial.failed(e.to_string()))?;
    tokio::spawn(async move {
        // The connection's own errors reach the streams that were open.
        let _ = conn.await;
    });
    Ok(Box::new(H2cConnection {
        sender,
        scheme,
        authority,
        heard,
        dead: Arc::default(),
    }) as Box<dyn Connection>)
}

#[derive(Clone)]
struct H2cConnection {
    sender: http2::SendRequest<Full<Bytes>>,
    scheme: Scheme,
    authority: Authority,
    heard: Arc<AtomicBool>,
    /// Set by any handle that saw a connection-level error, so every handle knows at once
    /// rather than when hyper's connection task gets round to ending.
    dead: Arc<AtomicBool>,
}

impl H2cConnection {
    /// An h2c server sends its SETTINGS as soon as it accepts, so a connection that closed
    /// without a single byte from the peer met a server that does not speak HTTP/2 (an
    /// HTTP/1.1 server closes on the preface): a protocol error, not a reset.
    fn error(&self, e: hyper::Error) -> TransportError {
        let (e, fatal) = from_hyper(e);
        if fatal {
            self.dead.store(true, Relaxed);
        }
        match e {
            TransportError::Reset(m) if !self.heard.load(Relaxed) => {
                TransportError::Protocol(format!(
                    "{m} (the server sent nothing back to the HTTP/2 preface: is it an HTTP/1.1 server?)"
                ))
            }
            other => other,
        }
    }
}

/// A byte stream that notes when the peer first sends a byte.
struct Heard<S> {
    stream: S,
    heard: Arc<AtomicBool>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Heard<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.stream).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.heard.store(true, Relaxed);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Heard<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl H2cConnection {
    async fn head(
        &mut self,
        req: Request,
    ) -> Result<http::Response<hyper::body::Incoming>, TransportError> {
        if let Err(e) = self.sender.ready().await {
            return Err(self.error(e));
        }
        let mut r = http::Request::new(Full::new(req.body));
        *r.method_mut() = req.method;
        // HTTP/2 carries scheme and authority as pseudo-headers, so the URI is absolute.
        *r.uri_mut() = http::Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(req.path.as_str())
            .build()
            .map_err(|e| TransportError::Protocol(format!("path `{}`: {e}", req.path)))?;
        *r.headers_mut() = req.headers;
        match self.sender.send_request(r).await {
            Ok(resp) => Ok(resp),
            Err(e) => Err(self.error(e)),
        }
    }
}

impl Connection for H2cConnection {
    fn open(&mut self, req: Request) -> BoxFuture<'_, Result<Streaming, TransportError>> {
        Box::pin(async move {
            let (parts, body) = self.head(req).await?.into_parts();
            Ok(Streaming {
                status: parts.status.as_u16(),
                headers: parts.headers,
                body,
            })
        })
    }

    fn send(&mut self, req: Request) -> BoxFuture<'_, Result<Response, TransportError>> {
        Box::pin(async move {
            let resp = self.head(req).await?;
            let (parts, body) = resp.into_parts();
            let body = match body.collect().await {
                Ok(b) => b.to_bytes(),
                Err(e) => return Err(self.error(e)),
            };
            Ok(Response {
                status: parts.status.as_u16(),
                headers: parts.headers.into(),
                body,
            })
        })
    }

    fn is_closed(&self) -> bool {
        self.dead.load(Relaxed) || self.sender.is_closed()
    }

    fn share(&self) -> Option<Box<dyn Connection>> {
        Some(Box::new(self.clone()))
    }
}
