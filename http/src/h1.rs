//! HTTP/1.1 run by hyper: over TLS, and for streams and long polls over plain TCP (a plain
//! connection's calls take `h1_raw`'s hand-written path until one of those hands it here).

use bytes::Bytes;
use http::{HeaderValue, header::HOST};
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::{
    Body, BoxFuture, Connection, Dial, Request, Response, Streaming, TransportError, from_hyper,
};

/// HTTP/1.1 over an open byte stream: plain TCP here, TLS in [`super::tls`].
pub(super) async fn handshake<S>(
    dial: &Dial,
    stream: S,
) -> Result<Box<dyn Connection>, TransportError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let host = HeaderValue::from_str(&dial.authority).map_err(|e| dial.failed(e.to_string()))?;
    let h = hyper_handshake(stream, host).await?;
    Ok(Box::new(h) as Box<dyn Connection>)
}

/// hyper's client connection on `stream`, driven by a task of its own.
pub(super) async fn hyper_handshake<S>(
    stream: S,
    host: HeaderValue,
) -> Result<Hyper, TransportError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (sender, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(from_hyper)?;
    tokio::spawn(async move {
        // The connection's own errors reach the request that was in flight.
        let _ = conn.await;
    });
    Ok(Hyper { sender, host })
}

/// An HTTP/1.1 connection run by hyper.
pub(super) struct Hyper {
    sender: http1::SendRequest<Full<Bytes>>,
    host: HeaderValue,
}

impl Hyper {
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

    pub(super) async fn open_stream(&mut self, req: Request) -> Result<Streaming, TransportError> {
        let (parts, body) = self.head(req).await?.into_parts();
        Ok(Streaming {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: Body::Hyper(body),
        })
    }

    pub(super) async fn send_whole(&mut self, req: Request) -> Result<Response, TransportError> {
        let resp = self.head(req).await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.map_err(from_hyper)?.to_bytes();
        Ok(Response {
            status: parts.status.as_u16(),
            headers: parts.headers.into(),
            body,
            trailers: None,
        })
    }

    pub(super) fn gone(&self) -> bool {
        self.sender.is_closed()
    }
}

impl Connection for Hyper {
    fn open(&mut self, req: Request) -> BoxFuture<'_, Result<Streaming, TransportError>> {
        Box::pin(self.open_stream(req))
    }

    fn send(&mut self, req: Request) -> BoxFuture<'_, Result<Response, TransportError>> {
        Box::pin(self.send_whole(req))
    }

    fn is_closed(&self) -> bool {
        self.gone()
    }

    fn share(&self) -> Option<Box<dyn Connection>> {
        None
    }
}
