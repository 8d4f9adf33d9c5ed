//! A response's header section, as cheap as the transport can hand it over.
//!
//! hyper and h2 give a [`HeaderMap`]; the HTTP/1.1 fast path ([`super::h1_raw`]) keeps the
//! raw head instead and looks a header up only when asked. Building a map of every
//! response's headers (a name lookup, a value check, a hash insert and two allocations per
//! response) was a tenth of the driver's own CPU per request, and the driver reads one
//! header (`Retry-After`, on a 429) of one response in thousands.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};

/// Response headers: a map, or an HTTP/1.1 head parsed only on demand.
#[derive(Debug, Clone, Default)]
pub struct Headers(Repr);

#[derive(Debug, Clone)]
enum Repr {
    Map(HeaderMap),
    /// The whole head: status line, header lines and the blank line, as received and
    /// already checked by the parser.
    Head(Bytes),
}

impl Default for Repr {
    fn default() -> Self {
        Self::Map(HeaderMap::new())
    }
}

impl From<HeaderMap> for Headers {
    fn from(map: HeaderMap) -> Self {
        Self(Repr::Map(map))
    }
}

impl Headers {
    /// The headers of an HTTP/1.1 head that `httparse` accepted.
    pub(super) fn from_head(head: Bytes) -> Self {
        Self(Repr::Head(head))
    }

    /// The first value of header `name` (any case), without surrounding whitespace.
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        match &self.0 {
            Repr::Map(m) => m.get(name).map(HeaderValue::as_bytes),
            Repr::Head(h) => head_lines(h)
                .find(|(n, _)| n.eq_ignore_ascii_case(name.as_bytes()))
                .map(|(_, v)| v),
        }
    }

    /// The headers as a map, borrowed when they already are one (HTTP/2), built from the
    /// head otherwise.
    pub fn as_map(&self) -> std::borrow::Cow<'_, HeaderMap> {
        match &self.0 {
            Repr::Map(m) => std::borrow::Cow::Borrowed(m),
            Repr::Head(_) => std::borrow::Cow::Owned(self.to_map()),
        }
    }

    /// Every header as a map (names lower-cased; repeated names keep every value).
    pub fn to_map(&self) -> HeaderMap {
        match &self.0 {
            Repr::Map(m) => m.clone(),
            Repr::Head(h) => {
                let mut map = HeaderMap::new();
                for (n, v) in head_lines(h) {
                    // The parser accepted these bytes; a name or value http rejects
                    // anyway (it is stricter about a few bytes) is left out.
                    if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(n), HeaderValue::from_bytes(v))
                    {
                        map.append(n, v);
                    }
                }
                map
            }
        }
    }
}

/// `(name, value)` of each header line of a parsed head: the status line and the blank
/// line are skipped; values are trimmed. The parser rejected obsolete line folding, so
/// every header is one line.
fn head_lines(head: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    head.split(|&b| b == b'\n').skip(1).filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        Some((&line[..colon], line[colon + 1..].trim_ascii()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &[u8] = b"HTTP/1.1 429 Too Many Requests\r\nServer: test\r\nRetry-After:  7 \r\nSet-Cookie: a=1\r\nset-cookie: b=2\r\nX-Empty:\r\n\r\n";

    #[test]
    fn a_raw_head_answers_like_its_map() {
        let raw = Headers::from_head(Bytes::from_static(HEAD));
        assert_eq!(raw.get("retry-after"), Some(&b"7"[..]));
        assert_eq!(raw.get("RETRY-AFTER"), Some(&b"7"[..]));
        assert_eq!(raw.get("set-cookie"), Some(&b"a=1"[..]));
        assert_eq!(raw.get("x-empty"), Some(&b""[..]));
        assert_eq!(raw.get("content-length"), None);
        let map = raw.to_map();
        assert_eq!(map.len(), 5);
        let cookies: Vec<_> = map.get_all("set-cookie").iter().collect();
        assert_eq!(cookies, ["a=1", "b=2"]);
        let from_map = Headers::from(map);
        for name in ["retry-after", "server", "set-cookie", "x-empty", "absent"] {
            assert_eq!(from_map.get(name), raw.get(name), "{name}");
        }
    }

    #[test]
    fn bare_newlines_are_line_ends_too() {
        let raw = Headers::from_head(Bytes::from_static(
            b"HTTP/1.1 200 OK\nRetry-After: 3\nServer: x\n\n",
        ));
        assert_eq!(raw.get("retry-after"), Some(&b"3"[..]));
        assert_eq!(raw.to_map().len(), 2);
    }
}
