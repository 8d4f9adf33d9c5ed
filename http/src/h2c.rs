//! HTTP/2 over cleartext TCP with prior knowledge: the client starts with the HTTP/2
//! preface, no `Upgrade` round trip, as gRPC-style and edge clients do. The protocol itself
//! is [`super::h2`]'s, shared with h2 over TLS.

use super::{BoxFuture, Connection, Dial, Transport, TransportError, h2};

/// The h2c transport.
pub(crate) struct H2c(pub Dial);

impl Transport for H2c {
    fn connect(&self) -> BoxFuture<'_, Result<Box<dyn Connection>, TransportError>> {
        Box::pin(async move { h2::handshake(&self.0, self.0.tcp().await?, false).await })
    }

    fn multiplexed(&self) -> bool {
        true
    }
}
