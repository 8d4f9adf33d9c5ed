//! Database URLs in messages: one scrubber for every URL herd shows (the run store's, the
//! seed database's, the demo contour's), and [`Secret`], a URL that never prints itself.

use std::fmt;

/// Replaces the password of every URL in `text` with `***`: `scheme://user:password@host`,
/// also when the password holds an unencoded `#`, `/`, `?`, `:` or `@`, when the scheme is
/// missing (`user:password@host/db`), and for every URL of a message.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        // A URL holds no whitespace: each word is looked at on its own.
        let ws = rest
            .find(|c: char| !c.is_whitespace())
            .unwrap_or(rest.len());
        out.push_str(&rest[..ws]);
        rest = &rest[ws..];
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let word = &rest[..end];
        match userinfo(word) {
            Some(u) => {
                out.push_str(&word[..u.password.start]);
                out.push_str("***");
                out.push_str(&word[u.password.end..]);
            }
            None => out.push_str(word),
        }
        rest = &rest[end..];
    }
    out
}

/// Where a URL's userinfo sits in `word` (byte ranges).
struct Userinfo {
    /// The password, between the user's `:` and the `@` before the host.
    password: std::ops::Range<usize>,
    /// The host and port after that `@`.
    host: std::ops::Range<usize>,
}

/// The one parser behind [`redact`], [`Secret`] and [`host_of`]. The userinfo starts after
/// `scheme://` (or at the word's first letter when there is no scheme) and ends at the last
/// `@` that a host follows: a password's own `#`, `/`, `?` or `@` do not end it early.
fn userinfo(word: &str) -> Option<Userinfo> {
    let start = match word.find("://") {
        Some(i) => i + 3,
        // No scheme: `user:password@host…`, after any quote or bracket the message put there.
        None => word.find(|c: char| c.is_alphanumeric() || c == '_')?,
    };
    if word[start..].starts_with("sqlite:") {
        return None;
    }
    let tail = &word[start..];
    let host_char = |c: char| c.is_alphanumeric() || ".-_[]:%".contains(c);
    let at = tail
        .char_indices()
        .filter(|&(_, c)| c == '@')
        .map(|(i, _)| i)
        .rfind(|&i| {
            let host = &tail[i + 1..];
            let end = host.find(['/', '?', '#', '@']).unwrap_or(host.len());
            let host = host[..end].trim_end_matches(|c: char| ",;.)'\"`>]".contains(c));
            !host.is_empty() && host.chars().all(host_char)
        })?;
    let user_end = tail[..at].find(':')?;
    // Without a scheme, `user:` must look like a user name, not prose (`error: x@y`).
    if !word.contains("://")
        && !tail[..user_end]
            .chars()
            .all(|c| c.is_alphanumeric() || "-_.".contains(c))
    {
        return None;
    }
    if user_end + 1 == at {
        return None;
    }
    let host = &tail[at + 1..];
    let host_end = host.find(['/', '?', '#', '@']).unwrap_or(host.len());
    Some(Userinfo {
        password: start + user_end + 1..start + at,
        host: start + at + 1..start + at + 1 + host_end,
    })
}

/// True when `s` looks like a database URL (a scheme, or `sqlite:`/`postgres…`).
pub fn looks_like_url(s: &str) -> bool {
    let s = s.trim().to_ascii_lowercase();
    s.contains("://") || s.starts_with("sqlite:") || s.starts_with("postgres")
}

/// A seed database URL read from where `[seed]` says. Neither `Debug` nor `Display` shows it.
pub struct Secret {
    /// The URL itself: pass it to a driver, never to a message.
    pub url: String,
    /// The password as written in the URL and percent-decoded, to scrub from messages.
    passwords: Vec<String>,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.url))
    }
}

impl Secret {
    /// Wraps `url`, remembering its password as written and percent-decoded.
    pub fn new(url: String) -> Self {
        let mut passwords = Vec::new();
        if let Some(u) = userinfo(url.trim()) {
            let pw = &url.trim()[u.password];
            passwords.push(pw.to_owned());
            let decoded = percent_decode(pw);
            if decoded != pw {
                passwords.push(decoded);
            }
        }
        Self { url, passwords }
    }

    /// `text` with every URL's password and this URL's password replaced by `***`.
    pub fn scrub(&self, text: &str) -> String {
        let mut s = redact(text);
        for pw in &self.passwords {
            s = s.replace(pw.as_str(), "***");
        }
        s
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where the database is, for messages: `host:port` for PostgreSQL, the file for SQLite.
pub fn host_of(url: &str) -> String {
    if let Some(rest) = url.strip_prefix("sqlite:") {
        let path = rest.trim_start_matches("//");
        return path.split('?').next().unwrap_or(path).to_owned();
    }
    let host = match userinfo(url) {
        Some(u) => &url[u.host],
        None => {
            let rest = url.split_once("://").map_or(url, |(_, r)| r);
            let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
            authority.rsplit_once('@').map_or(authority, |(_, h)| h)
        }
    };
    if host.is_empty() {
        "the local PostgreSQL socket".into()
    } else {
        host.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_removes_every_password() {
        assert_eq!(
            redact("a postgres://u:p%40ss@h:5/db?x=1 b postgresql://v:q@h2/d"),
            "a postgres://u:***@h:5/db?x=1 b postgresql://v:***@h2/d"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            redact("sqlite:/tmp/x.db?mode=rwc"),
            "sqlite:/tmp/x.db?mode=rwc"
        );
        assert_eq!(redact("postgres://u:p@ss@h/db"), "postgres://u:***@h/db");
    }

    #[test]
    fn passwords_with_unencoded_delimiters_or_no_scheme_are_redacted_whole() {
        for (url, shown) in [
            ("postgres://u:pa#ss@h:5/db", "postgres://u:***@h:5/db"),
            ("postgres://u:pa/ss@h/db", "postgres://u:***@h/db"),
            (
                "postgres://u:pa?ss@h/db?sslmode=off",
                "postgres://u:***@h/db?sslmode=off",
            ),
            ("postgres://u:p@s#s/x?@h/db", "postgres://u:***@h/db"),
            ("postgres://u:p:w@h/db", "postgres://u:***@h/db"),
            (
                "u:s3cret@db.internal:5432/game",
                "u:***@db.internal:5432/game",
            ),
            ("'postgres://u:x#y@h/db'", "'postgres://u:***@h/db'"),
            ("(u:x/y@h)", "(u:***@h)"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
        let s = Secret::new("postgres://u:pa#ss@h/db".into());
        assert_eq!(
            s.scrub("the server said: pa#ss rejected"),
            "the server said: *** rejected"
        );
        assert_eq!(
            redact("store postgres://a:one#1@h1/x failed, seed b:two/2@h2/y too"),
            "store postgres://a:***@h1/x failed, seed b:***@h2/y too"
        );
        // Prose is left alone.
        for prose in [
            "error: mail me at x@y.z",
            "see user@host",
            "a:b c@d",
            "sqlite:/tmp/x.db",
            "sqlite:/tmp/a@b.db",
        ] {
            assert_eq!(redact(prose), prose);
        }
        assert_eq!(host_of("postgres://u:pa/ss@db:5432/game"), "db:5432");
    }

    #[test]
    fn scrubbing_catches_the_password_in_any_form() {
        let s = Secret::new("postgres://herd:p%40ss@db:5432/game".into());
        assert_eq!(
            s.scrub("auth failed for p@ss and p%40ss at postgres://herd:p%40ss@db:5432/game"),
            "auth failed for *** and *** at postgres://herd:***@db:5432/game"
        );
        assert_eq!(format!("{s:?}"), "postgres://herd:***@db:5432/game");
        assert_eq!(host_of("postgres://u:p@db:5432/game"), "db:5432");
        assert_eq!(host_of("sqlite:/var/lib/x.db?mode=rw"), "/var/lib/x.db");
        assert_eq!(host_of("postgres:///game"), "the local PostgreSQL socket");
    }
}
