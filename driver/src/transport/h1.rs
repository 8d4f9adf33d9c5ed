//! HTTP/1.1: one request at a time per connection.

use bytes::Bytes;
use http::{HeaderValue, header::HOST};
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{BoxFuture, Connection, Dial, Request, Response, Streaming, Transport, TransportError};

/// The HTTP/1.1 transport.
pub(crate) struct H1(pub Dial);

impl Transport for H1 {
    fn connect(&self) -> BoxFuture<'_, Result<Box<dyn Connection>, TransportError>> {
        Box::pin(async move { handshake(&self.0, self.0.tcp().await?).await })
    }

    fn multiplexed(&self) -> bool {
        false
    }
}

/// HTTP/1.1 over an open byte stream: plain TCP here, TLS in [`super::tls`].
pub(super) async fn handshake<S>(
    dial: &Dial,
    stream: S,
) -> Result<Box<dyn Connection>, TransportError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| dial.failed(e.to_string()))?;
    tokio::spawn(async move {
        // The connection's own errors reach the request that was in flight.
        let _ = conn.await;
    });
    let host = HeaderValue::from_str(&dial.authority).map_err(|e| dial.failed(e.to_string()))?;
    Ok(Box::new(H1Connection { sender, host }) as Box<dyn Connection>)
}

struct H1Connection {
    sender: http1::SendRequest<Full<Bytes>>,
    host: HeaderValue,
}

/// Any failure ends an HTTP/1.1 connection's usefulness: the owner drops it.
fn from_hyper(e: hyper::Error) -> TransportError {
    super::from_hyper(e).0
}

impl H1Connection {
    async fn head(
        &mut self,
        req: Request,
    ) -> Result<http::Response<hyper::body::Incoming>, TransportError> {
        self.sender.ready().await.map_err(from_hyper)?;
        let mut r = http::Request::new(Full::new(req.body));
        *r.method_mut() = req.method;
        *r.uri_mut() = req
            .path
            .parse()
            .map_err(|e| TransportError::Protocol(format!("path `{}`: {e}", req.path)))?;
        *r.headers_mut() = req.headers;
        r.headers_mut().insert(HOST, self.host.clone());
        self.sender.send_request(r).await.map_err(from_hyper)
    }
}

impl Connection for H1Connection {
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
            let body = body.collect().await.map_err(from_hyper)?.to_bytes();
            Ok(Response {
                status: parts.status.as_u16(),
                headers: parts.headers,
                body,
            })
        })
    }

    fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }

    fn share(&self) -> Option<Box<dyn Connection>> {
        None
    }
}
