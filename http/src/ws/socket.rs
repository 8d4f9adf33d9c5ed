//! A WebSocket over any byte stream: TCP for `ws://`, TLS (ALPN `http/1.1`) for `wss://`.
//!
//! The caller drives it, one call at a time, from the player's own task (no connection
//! task): [`Socket::recv`] reads until a message or control frame is whole, answering a
//! ping with its pong and a Close with the closing Close on the way; [`Socket::send`]
//! writes one masked frame. A protocol error in the server's bytes fails the connection
//! with the Close code §7.4.1 gives it (best effort), and every later call returns
//! [`Error::Closed`].

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

use super::{Accepted, Close, Error, Handshake, Masks, Message, Opcode, Reader, frame::write};

/// Read buffer room kept free before a read; a buffer grown past [`KEEP`] by a large
/// message is given back once it empties, so an idle socket holds little.
const READ_ROOM: usize = 4 * 1024;
const KEEP: usize = 64 * 1024;

/// Where the closing handshake stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    /// We sent Close and wait for the server's.
    CloseSent,
    /// Closed both ways, dropped, or failed.
    Closed,
}

/// One client WebSocket.
#[derive(Debug)]
pub struct Socket<S> {
    io: S,
    reader: Reader,
    wbuf: Vec<u8>,
    masks: Masks,
    state: State,
}

fn io_error(e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof
        | std::io::ErrorKind::ConnectionReset
        | std::io::ErrorKind::BrokenPipe
        | std::io::ErrorKind::ConnectionAborted => Error::Dropped,
        _ => Error::Io(e.to_string()),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Socket<S> {
    /// Runs the opening handshake on `io` (a fresh connection) and returns the open socket
    /// and what the server agreed to. Messages past `max_message` bytes fail the socket.
    pub async fn connect(
        mut io: S,
        handshake: &Handshake,
        masks: Masks,
        max_message: usize,
    ) -> Result<(Self, Accepted), Error> {
        let mut wbuf = Vec::with_capacity(256);
        handshake.write(&mut wbuf);
        io.write_all(&wbuf).await.map_err(io_error)?;
        io.flush().await.map_err(io_error)?;
        let mut reader = Reader::new(max_message);
        loop {
            let buf = reader.buffer();
            if let Some((accepted, len)) = handshake.read_response(buf)? {
                // Frames the server sent right behind its 101 stay for recv.
                let _ = buf.split_to(len);
                wbuf.clear();
                let socket = Self {
                    io,
                    reader,
                    wbuf,
                    masks,
                    state: State::Open,
                };
                return Ok((socket, accepted));
            }
            buf.reserve(READ_ROOM);
            if io.read_buf(buf).await.map_err(io_error)? == 0 {
                return Err(Error::Dropped);
            }
        }
    }

    /// True once the socket can carry no more messages.
    pub fn is_closed(&self) -> bool {
        self.state != State::Open
    }

    /// Sends a text message.
    pub async fn send_text(&mut self, text: &str) -> Result<(), Error> {
        self.send(Opcode::Text, text.as_bytes()).await
    }

    /// Sends a binary message.
    pub async fn send_binary(&mut self, data: &[u8]) -> Result<(), Error> {
        self.send(Opcode::Binary, data).await
    }

    /// Sends a ping; its pong comes back through [`Socket::recv`]. A payload over 125
    /// bytes is refused ([`Error::ControlTooLong`]) and sends nothing.
    pub async fn ping(&mut self, payload: &[u8]) -> Result<(), Error> {
        self.send(Opcode::Ping, payload).await
    }

    /// Sends one frame with FIN set: a whole text or binary message, a ping or a pong. Not
    /// a Close: [`Socket::close`] runs the closing handshake.
    pub async fn send(&mut self, opcode: Opcode, payload: &[u8]) -> Result<(), Error> {
        if self.state != State::Open {
            return Err(Error::Closed);
        }
        if opcode.is_control() && payload.len() > super::frame::MAX_CONTROL {
            return Err(Error::ControlTooLong {
                opcode,
                len: payload.len() as u64,
            });
        }
        if matches!(opcode, Opcode::Close | Opcode::Continuation) {
            return Err(Error::NotAMessage(opcode));
        }
        self.wbuf.clear();
        let key = self.masks.key();
        write(&mut self.wbuf, true, opcode, payload, Some(key));
        self.flush().await
    }

    async fn flush(&mut self) -> Result<(), Error> {
        let r = async {
            self.io.write_all(&self.wbuf).await?;
            self.io.flush().await
        }
        .await;
        if self.wbuf.capacity() > KEEP {
            self.wbuf = Vec::new();
        }
        r.map_err(|e| {
            self.state = State::Closed;
            io_error(e)
        })
    }

    /// The next message or control frame from the server. A ping is answered with its
    /// pong before it is returned; the server's Close is answered with ours (its code
    /// echoed) and returned, and the socket is then closed. A connection that ends without
    /// a Close is [`Error::Dropped`]; an error in the server's bytes fails the socket.
    pub async fn recv(&mut self) -> Result<Message, Error> {
        if self.state == State::Closed {
            return Err(Error::Closed);
        }
        loop {
            let m = match self.reader.next() {
                Ok(Some(m)) => m,
                Ok(None) => {
                    self.fill().await?;
                    continue;
                }
                Err(e) => {
                    self.fail(&e).await;
                    return Err(e);
                }
            };
            if self.reader.buffered() == 0 && self.reader.buffer().capacity() > KEEP {
                *self.reader.buffer() = bytes::BytesMut::new();
            }
            match &m {
                Message::Ping(p) if self.state == State::Open => {
                    self.wbuf.clear();
                    let key = self.masks.key();
                    write(&mut self.wbuf, true, Opcode::Pong, p, Some(key));
                    self.flush().await?;
                }
                Message::Close(c) => {
                    if self.state == State::Open {
                        // §5.5.1: echo the code; a Close without one is answered without.
                        let echo = Close::new(c.code, "");
                        self.write_close(&echo).await;
                    }
                    self.state = State::Closed;
                    let _ = self.io.shutdown().await;
                }
                _ => {}
            }
            return Ok(m);
        }
    }

    /// Reads more bytes; the end of the stream is [`Error::Dropped`].
    async fn fill(&mut self) -> Result<(), Error> {
        let buf = self.reader.buffer();
        if buf.capacity() - buf.len() < READ_ROOM / 4 {
            buf.reserve(READ_ROOM);
        }
        match self.io.read_buf(buf).await {
            Ok(0) => {
                self.state = State::Closed;
                Err(Error::Dropped)
            }
            Ok(_) => Ok(()),
            Err(e) => {
                self.state = State::Closed;
                Err(io_error(e))
            }
        }
    }

    /// Fails the connection for an error in the server's bytes: a Close with the code
    /// for it, then the end of our side (§7.1.7).
    async fn fail(&mut self, e: &Error) {
        if self.state == State::Open
            && let Some(code) = e.close_code()
        {
            self.write_close(&Close::new(code, "")).await;
        }
        self.state = State::Closed;
        let _ = self.io.shutdown().await;
    }

    async fn write_close(&mut self, close: &Close) {
        self.wbuf.clear();
        let key = self.masks.key();
        write(
            &mut self.wbuf,
            true,
            Opcode::Close,
            &close.payload(),
            Some(key),
        );
        // Best effort: the server may already be gone.
        let _ = self.flush().await;
    }

    /// The closing handshake from our side: sends `close`, then reads (and drops) what the
    /// server still sends until its Close, which is returned. Bound it with a timeout: a
    /// server that never answers holds it.
    pub async fn close(&mut self, close: Close) -> Result<Close, Error> {
        if self.state != State::Open {
            return Err(Error::Closed);
        }
        self.write_close(&close).await;
        if self.state == State::Closed {
            return Err(Error::Dropped);
        }
        self.state = State::CloseSent;
        loop {
            match self.recv().await? {
                Message::Close(c) => return Ok(c),
                _ => continue,
            }
        }
    }

    /// Bytes received and not yet read as a frame.
    pub fn buffered(&self) -> usize {
        self.reader.buffered()
    }

    /// Gives back the read buffer when nothing is left in it: a socket that waits long
    /// between messages (a held player) then holds none. The next read takes a new one.
    pub fn shrink(&mut self) {
        if self.reader.buffered() == 0 {
            *self.reader.buffer() = bytes::BytesMut::new();
        }
    }

    /// The byte stream.
    pub fn get_ref(&self) -> &S {
        &self.io
    }

    /// The byte stream, for a caller that shuts it down itself.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.io
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, DuplexStream, duplex};

    use super::*;
    use crate::ws::{CloseCode, frame::apply_mask, handshake::accept_key};

    /// A scripted server end: reads the request head, answers 101 for its key.
    async fn accept(server: &mut DuplexStream, extra: &[u8]) -> String {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            server.read_exact(&mut b).await.unwrap();
            head.push(b[0]);
        }
        let text = String::from_utf8(head).unwrap();
        let key = text
            .lines()
            .find_map(|l| l.strip_prefix("sec-websocket-key: "))
            .unwrap()
            .to_owned();
        let mut resp = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {}\r\n\r\n",
            accept_key(&key)
        )
        .into_bytes();
        resp.extend_from_slice(extra);
        server.write_all(&resp).await.unwrap();
        text
    }

    /// One masked frame from the client: its opcode and unmasked payload.
    async fn client_frame(server: &mut DuplexStream) -> (u8, Vec<u8>) {
        let mut h = [0u8; 2];
        server.read_exact(&mut h).await.unwrap();
        assert_eq!(h[1] & 0x80, 0x80, "client frames are masked");
        let len = match h[1] & 0x7f {
            126 => u64::from(server.read_u16().await.unwrap()),
            127 => server.read_u64().await.unwrap(),
            n => u64::from(n),
        };
        let mut key = [0u8; 4];
        server.read_exact(&mut key).await.unwrap();
        let mut p = vec![0u8; len as usize];
        server.read_exact(&mut p).await.unwrap();
        apply_mask(&mut p, key);
        (h[0], p)
    }

    #[tokio::test]
    async fn pings_are_ponged_and_a_close_is_echoed() {
        let (client, mut server) = duplex(1 << 16);
        let hs = Handshake::new("h:1", "/", &mut Masks::new()).unwrap();
        // A ping and a text right behind the 101, in the same write.
        let server_task = tokio::spawn(async move {
            accept(&mut server, &[0x89, 2, b'h', b'i', 0x81, 2, b'o', b'k']).await;
            let pong = client_frame(&mut server).await;
            let text = client_frame(&mut server).await;
            server.write_all(&[0x88, 2, 0x0f, 0xa0]).await.unwrap();
            let close = client_frame(&mut server).await;
            (pong, text, close)
        });
        let (mut ws, accepted) = Socket::connect(client, &hs, Masks::new(), 1024)
            .await
            .unwrap();
        assert_eq!(accepted.protocol, None);
        assert_eq!(ws.recv().await.unwrap(), Message::Ping("hi".into()));
        assert_eq!(ws.recv().await.unwrap(), Message::Text("ok".into()));
        ws.send_text("back").await.unwrap();
        assert_eq!(
            ws.recv().await.unwrap(),
            Message::Close(Close::new(CloseCode(4000), ""))
        );
        assert!(ws.is_closed());
        assert_eq!(ws.recv().await.unwrap_err(), Error::Closed);
        let (pong, text, close) = server_task.await.unwrap();
        assert_eq!(pong, (0x8a, b"hi".to_vec()));
        assert_eq!(text, (0x81, b"back".to_vec()));
        assert_eq!(close, (0x88, vec![0x0f, 0xa0]));
    }

    #[tokio::test]
    async fn a_protocol_error_fails_with_its_close_code() {
        let (client, mut server) = duplex(1 << 16);
        let hs = Handshake::new("h:1", "/", &mut Masks::new()).unwrap();
        let server_task = tokio::spawn(async move {
            accept(&mut server, &[0x81, 1, 0xff]).await;
            client_frame(&mut server).await
        });
        let (mut ws, _) = Socket::connect(client, &hs, Masks::new(), 1024)
            .await
            .unwrap();
        assert_eq!(ws.recv().await.unwrap_err(), Error::Utf8 { offset: 0 });
        assert_eq!(server_task.await.unwrap(), (0x88, vec![0x03, 0xef]));
        assert_eq!(ws.send_text("x").await.unwrap_err(), Error::Closed);
    }

    #[tokio::test]
    async fn an_end_without_close_is_dropped_and_our_close_waits_for_theirs() {
        let (client, mut server) = duplex(1 << 16);
        let hs = Handshake::new("h:1", "/", &mut Masks::new()).unwrap();
        let server_task = tokio::spawn(async move {
            accept(&mut server, &[]).await;
            drop(server);
        });
        let (mut ws, _) = Socket::connect(client, &hs, Masks::new(), 1024)
            .await
            .unwrap();
        server_task.await.unwrap();
        assert_eq!(ws.recv().await.unwrap_err(), Error::Dropped);

        let (client, mut server) = duplex(1 << 16);
        let server_task = tokio::spawn(async move {
            accept(&mut server, &[]).await;
            let close = client_frame(&mut server).await;
            // A message still in flight, then the answer.
            server
                .write_all(&[0x82, 1, 7, 0x88, 2, 0x03, 0xe8])
                .await
                .unwrap();
            close
        });
        let (mut ws, _) = Socket::connect(client, &hs, Masks::new(), 1024)
            .await
            .unwrap();
        let theirs = ws.close(Close::new(CloseCode(4001), "bye")).await.unwrap();
        assert_eq!(theirs, Close::new(CloseCode::NORMAL, ""));
        assert_eq!(server_task.await.unwrap(), (0x88, b"\x0f\xa1bye".to_vec()));
    }
}
