//! WebSocket (RFC 6455), client side: a player's socket to a `ws://` or `wss://` service.
//!
//! One file per layer: [`handshake`] the HTTP/1.1 upgrade and its checks, [`frame`] a
//! frame's head and the masked writer, [`reader`] the incremental reader that assembles
//! messages, [`close`] close codes and their names, and [`socket`] all of it over any byte
//! stream (TCP for `ws://`, TLS for `wss://`): ping answered with pong, the closing
//! handshake both ways. The first four do no I/O, so the fuzz target and the tests feed
//! them bytes directly; [`connect`] opens a socket over TCP or TLS ([`Connector`]).
//!
//! Not supported: extensions (permessage-deflate included: herd offers none, and a server
//! that turns one on anyway fails the handshake), and WebSocket over HTTP/2 (RFC 8441).

pub mod close;
pub mod connect;
pub mod frame;
#[doc(hidden)]
pub mod fuzz;
pub mod handshake;
pub mod reader;
pub mod socket;

pub use close::{Close, CloseCode};
pub use connect::{ConnectError, Connector, Stream};
pub use frame::{Masks, Opcode};
pub use handshake::{Accepted, Handshake};
pub use reader::{DEFAULT_MAX_MESSAGE, Message, Reader};
pub use socket::Socket;

/// What was wrong in the server's handshake or frames, or what became of the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The upgrade was answered with another status than 101.
    #[error("the server answered the upgrade with {status} {reason}, not 101")]
    Refused {
        /// The HTTP status.
        status: u16,
        /// Its reason phrase.
        reason: String,
    },
    /// The response head is not HTTP/1.1.
    #[error("a malformed response head: {0}")]
    Head(String),
    /// The response head did not end within the limit.
    #[error("no end to the response head within {0} bytes")]
    HeadTooLarge(usize),
    /// The 101 lacks `Upgrade: websocket` or `Connection: upgrade`.
    #[error("the 101's {header} header is `{value}`, without `{}`", token(header))]
    Upgrade {
        /// `Upgrade` or `Connection`.
        header: &'static str,
        /// Its value (empty without one).
        value: String,
    },
    /// `Sec-WebSocket-Accept` is not the one our key asks for.
    #[error(
        "Sec-WebSocket-Accept is `{got}`, not `{expected}` (base64 of SHA-1 of our key and the \
         GUID)"
    )]
    Accept {
        /// The value our key asks for.
        expected: String,
        /// The server's (empty without one).
        got: String,
    },
    /// The server chose a subprotocol that was not offered.
    #[error("the server chose subprotocol `{chosen}`, which we did not offer (offered: {})",
        if offered.is_empty() { "none".to_owned() } else { offered.join(", ") })]
    Subprotocol {
        /// Its choice.
        chosen: String,
        /// What we offered.
        offered: Vec<String>,
    },
    /// The server turned on an extension, which herd never offers.
    #[error(
        "the server turned on extension `{0}`, which herd did not offer (it speaks none, \
         permessage-deflate included)"
    )]
    Extension(String),
    /// Reserved bits set in a frame head.
    #[error("reserved bits {0:#04x} set, and no extension was negotiated")]
    ReservedBits(u8),
    /// A reserved opcode.
    #[error("opcode {0:#x} is reserved")]
    Opcode(u8),
    /// A masked frame, which a server must never send (§5.1).
    #[error("a masked frame from the server")]
    Masked,
    /// A length in more bytes than it needs (§5.2: the minimal encoding is a must).
    #[error("length {0} in a longer form than it needs")]
    LongLength(u64),
    /// A 64-bit length with its most significant bit set.
    #[error("a 64-bit length with its top bit set")]
    LengthTopBit,
    /// A control frame without FIN.
    #[error("a {0:?} frame in fragments")]
    FragmentedControl(Opcode),
    /// A control frame over 125 bytes.
    #[error("a {opcode:?} frame of {len} bytes, over 125")]
    ControlTooLong {
        /// Its opcode.
        opcode: Opcode,
        /// Its length.
        len: u64,
    },
    /// A message over the size limit.
    #[error("a message of {len} bytes, over the {max}-byte limit")]
    TooLarge {
        /// Its size so far, counting the frame that passes the limit.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// A continuation frame with no fragmented message open.
    #[error("a continuation frame with no message to continue")]
    Continuation,
    /// A new data message while a fragmented one is open.
    #[error("a new {new:?} message inside a fragmented {open:?} message")]
    Interleaved {
        /// The open message's opcode.
        open: Opcode,
        /// The new frame's.
        new: Opcode,
    },
    /// A text message that is not UTF-8.
    #[error("a text message that is not UTF-8 (from byte {offset})")]
    Utf8 {
        /// Where the valid prefix ends.
        offset: usize,
    },
    /// A Close frame with a 1-byte body.
    #[error("a Close frame with a 1-byte body (a code takes 2)")]
    CloseBody,
    /// A Close frame with a code that may not be sent.
    #[error("close code {0} may not be sent in a Close frame")]
    CloseCode(u16),
    /// A Close frame whose reason is not UTF-8.
    #[error("a close reason that is not UTF-8 (from byte {offset})")]
    CloseReason {
        /// Where the valid prefix ends.
        offset: usize,
    },
    /// A frame after the server's Close.
    #[error("a {0:?} frame after the server's Close")]
    AfterClose(Opcode),
    /// The connection ended without a Close frame (close code 1006, abnormal).
    #[error("the connection ended without a Close frame")]
    Dropped,
    /// Reading or writing the socket failed.
    #[error("{0}")]
    Io(String),
    /// The socket was used after it closed.
    #[error("the socket is closed")]
    Closed,
    /// The handshake request cannot be written: a path or host that a request line or
    /// `Host` header cannot carry. The caller's mistake, found before anything is sent.
    #[error("cannot ask for a WebSocket at {0}")]
    Request(String),
    /// [`Socket::send`] asked to send a Close or a bare continuation.
    #[error("{0:?} is not a message to send: Socket::close closes")]
    NotAMessage(Opcode),
}

fn token(header: &str) -> &'static str {
    if header == "Upgrade" {
        "websocket"
    } else {
        "upgrade"
    }
}

impl Error {
    /// The code a client fails the connection with for this error (§7.4.1): 1007 for text
    /// that is not UTF-8, 1009 for a message too big, 1002 for the other frame errors;
    /// `None` where there is no WebSocket to close (the handshake failed, the connection
    /// is gone).
    pub fn close_code(&self) -> Option<CloseCode> {
        match self {
            Self::Utf8 { .. } | Self::CloseReason { .. } => Some(CloseCode::INVALID_PAYLOAD),
            Self::TooLarge { .. } => Some(CloseCode::MESSAGE_TOO_BIG),
            Self::ReservedBits(_)
            | Self::Opcode(_)
            | Self::Masked
            | Self::LongLength(_)
            | Self::LengthTopBit
            | Self::FragmentedControl(_)
            | Self::ControlTooLong { .. }
            | Self::Continuation
            | Self::Interleaved { .. }
            | Self::CloseBody
            | Self::CloseCode(_)
            | Self::AfterClose(_) => Some(CloseCode::PROTOCOL_ERROR),
            Self::Refused { .. }
            | Self::Head(_)
            | Self::HeadTooLarge(_)
            | Self::Upgrade { .. }
            | Self::Accept { .. }
            | Self::Subprotocol { .. }
            | Self::Extension(_)
            | Self::Dropped
            | Self::Io(_)
            | Self::Closed
            | Self::Request(_)
            | Self::NotAMessage(_) => None,
        }
    }

    /// True for a failed opening handshake.
    pub fn is_handshake(&self) -> bool {
        matches!(
            self,
            Self::Refused { .. }
                | Self::Head(_)
                | Self::HeadTooLarge(_)
                | Self::Upgrade { .. }
                | Self::Accept { .. }
                | Self::Subprotocol { .. }
                | Self::Extension(_)
        )
    }
}
