//! herd's protocol clients, knowing nothing of who drives them: the scenario, the players
//! and the report live in the driver, which maps this crate's errors to its outcomes.
//!
//! - [`grpc`]: gRPC's layer over HTTP/2 — message framing, status, deadlines, and messages
//!   from `.proto` files compiled at load time, read and written as JSON.
//! - [`ws`]: WebSocket (RFC 6455), client side — the HTTP/1.1 upgrade, frames both ways,
//!   and a socket over any byte stream (TCP or TLS).
#![deny(missing_docs)]

pub mod grpc;
pub mod ws;
