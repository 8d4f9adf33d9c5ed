//! The opening handshake (RFC 6455 §4.1): an HTTP/1.1 GET with `Upgrade: websocket` and a
//! fresh `Sec-WebSocket-Key`, answered by `101 Switching Protocols` whose
//! `Sec-WebSocket-Accept` is base64(SHA-1(key + GUID)). Extensions are not offered
//! (permessage-deflate is not supported), so a server that names one fails the handshake.

use base64::Engine as _;
use http::{HeaderMap, HeaderName, HeaderValue};
use sha1::{Digest as _, Sha1};

use super::{Error, frame::Masks};

/// The GUID §1.3 appends to the key.
pub const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// The most response head bytes read before giving up on finding its end.
pub const MAX_HEAD: usize = 64 * 1024;
/// Response headers parsed at most.
const MAX_HEADERS: usize = 64;

/// `Sec-WebSocket-Accept` for a `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    let mut sha = Sha1::new();
    sha.update(key.as_bytes());
    sha.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(sha.finalize())
}

/// One opening handshake: what the request asks for, and the key its answer must match.
#[derive(Debug, Clone)]
pub struct Handshake {
    authority: String,
    path: String,
    protocols: Vec<String>,
    headers: HeaderMap,
    key: String,
}

/// What the server's 101 agreed to.
#[derive(Debug, Clone)]
pub struct Accepted {
    /// The subprotocol the server chose among those offered, if it chose one.
    pub protocol: Option<String>,
    /// The response's headers.
    pub headers: HeaderMap,
}

/// Headers the handshake writes itself; the caller's copies of them are left out.
const OWN: [&str; 7] = [
    "host",
    "upgrade",
    "connection",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "sec-websocket-extensions",
];

impl Handshake {
    /// A handshake for `path` (origin form, `/chat?room=1`) at `authority` (`host:port`,
    /// the `Host` header), with a fresh key from `masks`. A path or authority a request
    /// cannot carry (spaces, line breaks, no leading `/`) is [`Error::Request`].
    pub fn new(authority: &str, path: &str, masks: &mut Masks) -> Result<Self, Error> {
        let path = if path.is_empty() { "/" } else { path };
        if !path.starts_with('/') || path.parse::<http::uri::PathAndQuery>().is_err() {
            return Err(Error::Request(format!("path `{path}`")));
        }
        if authority.parse::<http::uri::Authority>().is_err() {
            return Err(Error::Request(format!("host `{authority}`")));
        }
        let mut nonce = [0u8; 16];
        nonce[..8].copy_from_slice(&masks.next_u64().to_ne_bytes());
        nonce[8..].copy_from_slice(&masks.next_u64().to_ne_bytes());
        Ok(Self {
            authority: authority.to_owned(),
            path: path.to_owned(),
            protocols: Vec::new(),
            headers: HeaderMap::new(),
            key: base64::engine::general_purpose::STANDARD.encode(nonce),
        })
    }

    /// Offers these subprotocols (`Sec-WebSocket-Protocol`), in order of preference. A
    /// name must be an HTTP token (RFC 6455 §4.1): one that is not is [`Error::Request`].
    pub fn protocols(mut self, protocols: Vec<String>) -> Result<Self, Error> {
        let token = |p: &str| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        };
        if let Some(bad) = protocols.iter().find(|p| !token(p)) {
            return Err(Error::Request(format!(
                "subprotocol `{bad}` (not an HTTP token)"
            )));
        }
        self.protocols = protocols;
        Ok(self)
    }

    /// Adds headers to the request (`Origin`, `Authorization`, cookies); those the
    /// handshake writes itself are ignored.
    pub fn headers(mut self, headers: HeaderMap) -> Self {
        self.headers = headers;
        self
    }

    /// The request's `Sec-WebSocket-Key`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Appends the request to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"GET ");
        out.extend_from_slice(self.path.as_bytes());
        out.extend_from_slice(b" HTTP/1.1\r\n");
        let mut line = |name: &str, value: &[u8]| {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        };
        line("host", self.authority.as_bytes());
        line("upgrade", b"websocket");
        line("connection", b"Upgrade");
        line("sec-websocket-key", self.key.as_bytes());
        line("sec-websocket-version", b"13");
        if !self.protocols.is_empty() {
            line(
                "sec-websocket-protocol",
                self.protocols.join(", ").as_bytes(),
            );
        }
        for (name, value) in &self.headers {
            if !OWN.contains(&name.as_str()) {
                line(name.as_str(), value.as_bytes());
            }
        }
        out.extend_from_slice(b"\r\n");
    }

    /// The response at the front of `buf`, checked (§4.1, the client's checks): `Ok(None)`
    /// until its head is whole; with it, what the server agreed to and the head's length
    /// (bytes after it are already frames).
    pub fn read_response(&self, buf: &[u8]) -> Result<Option<(Accepted, usize)>, Error> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        let len = match resp.parse(buf) {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
                return Err(Error::HeadTooLarge(MAX_HEAD));
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => {
                return Err(Error::Head(format!(
                    "{e} in `{}`",
                    String::from_utf8_lossy(first_line(buf))
                )));
            }
        };
        let status = resp.code.unwrap_or(0);
        if status != 101 {
            return Err(Error::Refused {
                status,
                reason: resp.reason.unwrap_or("").to_owned(),
            });
        }
        let mut map = HeaderMap::with_capacity(resp.headers.len());
        for h in resp.headers.iter() {
            let name = HeaderName::from_bytes(h.name.as_bytes())
                .map_err(|_| Error::Head(format!("header name `{}`", h.name)))?;
            let value = HeaderValue::from_bytes(h.value)
                .map_err(|_| Error::Head(format!("the value of `{}`", h.name)))?;
            map.append(name, value);
        }
        let text = |name: &str| {
            map.get_all(name)
                .iter()
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let has_token = |name: &str, token: &str| {
            text(name)
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case(token))
        };
        if !has_token("upgrade", "websocket") {
            return Err(Error::Upgrade {
                header: "Upgrade",
                value: text("upgrade"),
            });
        }
        if !has_token("connection", "upgrade") {
            return Err(Error::Upgrade {
                header: "Connection",
                value: text("connection"),
            });
        }
        let expected = accept_key(&self.key);
        let got = text("sec-websocket-accept");
        if got.trim() != expected {
            return Err(Error::Accept { expected, got });
        }
        let extensions = text("sec-websocket-extensions");
        if !extensions.trim().is_empty() {
            return Err(Error::Extension(extensions));
        }
        let protocol = match map.get("sec-websocket-protocol") {
            None => None,
            Some(p) => {
                let p = String::from_utf8_lossy(p.as_bytes()).trim().to_owned();
                if !self.protocols.contains(&p) {
                    return Err(Error::Subprotocol {
                        chosen: p,
                        offered: self.protocols.clone(),
                    });
                }
                Some(p)
            }
        };
        Ok(Some((
            Accepted {
                protocol,
                headers: map,
            },
            len,
        )))
    }
}

fn first_line(buf: &[u8]) -> &[u8] {
    let end = buf
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(buf.len())
        .min(120);
    &buf[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handshake() -> Handshake {
        let mut h = Handshake::new("example.com:80", "/chat", &mut Masks::new()).unwrap();
        // RFC 6455 §1.3's key, so its accept value is the RFC's.
        h.key = "dGhlIHNhbXBsZSBub25jZQ==".to_owned();
        h
    }

    const OK: &str = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                      Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";

    #[test]
    fn the_rfc_example_key() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn a_fresh_key_is_16_bytes_in_base64() {
        let mut m = Masks::new();
        let a = Handshake::new("h", "/", &mut m).unwrap();
        let b = Handshake::new("h", "/", &mut m).unwrap();
        assert_ne!(a.key(), b.key());
        let raw = base64::engine::general_purpose::STANDARD
            .decode(a.key())
            .unwrap();
        assert_eq!(raw.len(), 16);
    }

    #[test]
    fn the_request() {
        let mut extra = HeaderMap::new();
        extra.insert("origin", "http://example.com".parse().unwrap());
        extra.insert("upgrade", "h2c".parse().unwrap());
        let h = handshake()
            .protocols(vec!["chat".into(), "superchat".into()])
            .unwrap()
            .headers(extra);
        let mut out = Vec::new();
        h.write(&mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /chat HTTP/1.1\r\nhost: example.com:80\r\nupgrade: websocket\r\n\
             connection: Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
             sec-websocket-version: 13\r\nsec-websocket-protocol: chat, superchat\r\n\
             origin: http://example.com\r\n\r\n"
        );
    }

    #[test]
    fn a_good_response_and_the_frames_after_it() {
        let h = handshake();
        let mut buf = OK.as_bytes().to_vec();
        buf.extend_from_slice(&[0x81, 0]);
        for cut in 0..OK.len() {
            assert!(h.read_response(&buf[..cut]).unwrap().is_none(), "{cut}");
        }
        let (a, len) = h.read_response(&buf).unwrap().unwrap();
        assert_eq!(len, OK.len());
        assert_eq!(a.protocol, None);
    }

    fn refused(response: &str) -> String {
        handshake()
            .protocols(vec!["chat".into()])
            .unwrap()
            .read_response(response.as_bytes())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn each_check_fails_with_what_was_wrong() {
        assert_eq!(
            refused("HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n"),
            "the server answered the upgrade with 403 Forbidden, not 101"
        );
        assert_eq!(
            refused(&OK.replace("Upgrade: websocket", "Upgrade: h2c")),
            "the 101's Upgrade header is `h2c`, without `websocket`"
        );
        assert_eq!(
            refused(&OK.replace("Connection: Upgrade", "Connection: keep-alive")),
            "the 101's Connection header is `keep-alive`, without `upgrade`"
        );
        assert_eq!(
            refused(&OK.replace("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", "wrong=")),
            "Sec-WebSocket-Accept is `wrong=`, not `s3pPLMBiTxaQ9kYGzzhZRbK+xOo=` \
             (base64 of SHA-1 of our key and the GUID)"
        );
        assert_eq!(
            refused(&OK.replace("\r\n\r\n", "\r\nSec-WebSocket-Protocol: other\r\n\r\n")),
            "the server chose subprotocol `other`, which we did not offer (offered: chat)"
        );
        assert_eq!(
            refused(&OK.replace(
                "\r\n\r\n",
                "\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n"
            )),
            "the server turned on extension `permessage-deflate`, which herd did not offer \
             (it speaks none, permessage-deflate included)"
        );
        assert!(refused("SSH-2.0-OpenSSH\r\n\r\n").starts_with("a malformed response head: "));
    }

    #[test]
    fn tokens_are_case_insensitive_and_the_chosen_protocol_is_kept() {
        let h = handshake().protocols(vec!["a".into(), "b".into()]).unwrap();
        let r = OK
            .replace("Upgrade: websocket", "upgrade: WebSocket")
            .replace("Connection: Upgrade", "Connection: keep-alive, UPGRADE")
            .replace("\r\n\r\n", "\r\nsec-websocket-protocol: b\r\n\r\n");
        let (a, _) = h.read_response(r.as_bytes()).unwrap().unwrap();
        assert_eq!(a.protocol.as_deref(), Some("b"));
    }

    #[test]
    fn a_request_that_cannot_be_written_is_refused_before_it_is() {
        let mut m = Masks::new();
        for (host, path) in [
            ("h:1", "/a b"),
            ("h:1", "/a\r\nx: y"),
            ("h:1", "chat"),
            ("h 1", "/"),
        ] {
            let e = Handshake::new(host, path, &mut m).unwrap_err();
            assert!(matches!(e, Error::Request(_)), "{host} {path}: {e}");
        }
        assert_eq!(Handshake::new("h:1", "", &mut m).unwrap().path, "/");
        let e = handshake().protocols(vec!["a b".into()]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot ask for a WebSocket at subprotocol `a b` (not an HTTP token)"
        );
    }

    #[test]
    fn a_head_that_never_ends_is_refused() {
        let h = handshake();
        let mut buf = b"HTTP/1.1 101 Switching Protocols\r\n".to_vec();
        while buf.len() <= MAX_HEAD {
            buf.extend_from_slice(b"x-pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        assert!(matches!(
            h.read_response(&buf),
            Err(Error::Head(_) | Error::HeadTooLarge(_))
        ));
    }
}
