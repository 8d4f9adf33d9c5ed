//! Database URLs in messages: one scrubber for every URL herd shows (the run store's, the
//! seed database's, the demo contour's), and [`Secret`], a URL that never prints itself.

use std::fmt;

/// Replaces the password of every `scheme://user:password@host` in `text` with `***`.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        // The authority ends at the first `/`, `?`, `#` or whitespace; `@` marks userinfo.
        let end = tail
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                let userinfo = &authority[..at];
                match userinfo.split_once(':') {
                    Some((user, _)) => {
                        out.push_str(user);
                        out.push_str(":***");
                    }
                    None => out.push_str(userinfo),
                }
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
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
        if let Some((_, rest)) = url.split_once("://") {
            let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
            if let Some((userinfo, _)) = authority.rsplit_once('@')
                && let Some((_, pw)) = userinfo.split_once(':')
                && !pw.is_empty()
            {
                passwords.push(pw.to_owned());
                let decoded = percent_decode(pw);
                if decoded != pw {
                    passwords.push(decoded);
                }
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
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
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
