//! Quick mode's scenario: `herd drive URL -c 50 -z 10s`, the first command people type into
//! oha or wrk, without a scenario file. The options become a scenario's TOML text, which is
//! checked and compiled exactly as a file is (same engine, same tables, same report), and
//! which `--print-scenario` prints so it can be saved and run as a file.
//!
//! The options mean what oha's do: `concurrency` players running at once, each on its own
//! connection; `requests` in total across all of them; `duration` how long to send; `rate`
//! requests per second across all of them.
//!
//! Two more URL forms, for the users of ghz and websocat:
//! - `grpc://HOST:PORT/package.Service/Method` (or `grpcs://`) with `--proto FILE` and `-d`
//!   the request as JSON: one unary (or whole-stream) call per request, `-H` as metadata.
//! - `ws://HOST:PORT/PATH` (or `wss://`): with `-d`, each player sends that message and
//!   waits for the next one back (an echo, a ping/pong protocol); without it, each player
//!   holds its socket open and counts what the server pushes.

use std::{fmt::Write as _, time::Duration};

/// What a generated scenario is called in messages, tables and the heading.
pub const FILE: &str = "quick mode";

/// oha's default request count when neither a count nor a duration is given.
pub const DEFAULT_REQUESTS: u64 = 200;

/// oha's default concurrency.
pub const DEFAULT_CONCURRENCY: usize = 50;

/// The longest a counted run may take: a bound on every load loop, far beyond a quick check.
const MAX_COUNTED: &str = "1h";

/// Quick mode's options, as `herd drive URL` and `herd run URL` take them (`-c -n -z -q --h2c
/// --h2 -m -H -d`); absent ones take oha's defaults.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Quick {
    /// Players sending at once (`-c`).
    pub concurrency: Option<usize>,
    /// Requests in total across all players (`-n`).
    pub requests: Option<u64>,
    /// How long to send (`-z`).
    pub duration: Option<Duration>,
    /// Requests per second across all players (`-q`).
    pub rate: Option<f64>,
    /// HTTP/2 over cleartext with prior knowledge (`--h2c`).
    pub h2c: bool,
    /// HTTP/2 over TLS (`--h2`).
    pub h2: bool,
    /// The request's method (`-m`).
    pub method: Option<String>,
    /// Request headers as typed, `name: value` (`-H`).
    pub headers: Vec<String>,
    /// The request's body (`-d`): a gRPC call's request as JSON, a WebSocket message.
    pub body: Option<String>,
    /// gRPC: the `.proto` files (`--proto`).
    pub proto: Vec<String>,
    /// gRPC: directories the `.proto` files' imports are found in (`--proto-path`).
    pub proto_path: Vec<String>,
    /// gRPC: the method, `package.Service/Method` (`--call`), when the URL does not name it.
    pub call: Option<String>,
}

/// A URL or an option quick mode cannot make a scenario of: a usage error, with what to
/// write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuickError {
    /// The URL is not one herd can drive.
    #[error(
        "`{url}` is not a URL herd can drive: {why}; write e.g. `herd {command} http://127.0.0.1:8080/ -c 50 -z 10s`"
    )]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
        /// `drive` or `run`, for the example.
        command: String,
    },
    /// An option does not fit the URL.
    #[error("{0}")]
    Option(String),
}

/// The scenario file `url` and `q` describe, for `herd COMMAND` (named in the file's first
/// line and in errors).
pub fn scenario(url: &str, q: &Quick, command: &str) -> Result<String, QuickError> {
    let bad = |why: String| QuickError::Url {
        // Never the password: the refusal and every other reason show the URL without it.
        url: super::userinfo::hide(url),
        why,
        command: command.to_owned(),
    };
    if super::userinfo::userinfo_end(url).is_some() {
        return Err(bad(
            "it carries a user name or password; herd sends no credentials from a URL: send \
             them in a header, e.g. -H 'authorization: Basic BASE64' with BASE64 from \
             `printf %s 'USER:PASSWORD' | base64`"
                .into(),
        ));
    }
    let parsed = parse_url(url).map_err(bad)?;
    toml(&parsed, q, command).map_err(QuickError::Option)
}

/// A URL split the way a scenario wants it: `target.url` and the op's path.
#[derive(Debug, PartialEq)]
struct Url {
    https: bool,
    /// `http`, `grpc` or `ws`, whatever the TLS.
    kind: Kind,
    base: String,
    path: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Http,
    Grpc,
    Ws,
}

fn parse_url(s: &str) -> Result<Url, String> {
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("it contains a space or a control character".into());
    }
    let (scheme, rest) = s
        .split_once("://")
        .ok_or("it has no scheme (http://, https://, grpc://, ws://, …)")?;
    let scheme = scheme.to_ascii_lowercase();
    let (https, kind) = match scheme.as_str() {
        "http" => (false, Kind::Http),
        "https" => (true, Kind::Http),
        "grpc" => (false, Kind::Grpc),
        "grpcs" => (true, Kind::Grpc),
        "ws" => (false, Kind::Ws),
        "wss" => (true, Kind::Ws),
        other => {
            return Err(format!(
                "the scheme `{other}` is none of http, https, grpc, grpcs, ws, wss"
            ));
        }
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.is_empty() {
        return Err("it has no host".into());
    }
    if authority.contains('@') {
        return Err("it carries a user name or password; send credentials with -H".into());
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (addr, after) = v6.split_once(']').ok_or("its IPv6 address has no `]`")?;
            if addr.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(format!("`{addr}` is not an IPv6 address"));
            }
            match after {
                "" => (authority, None),
                p => (
                    &authority[..authority.len() - p.len()],
                    Some(p.strip_prefix(':').ok_or("junk after its IPv6 address")?),
                ),
            }
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Err("it has no host".into());
    }
    if !host.starts_with('[')
        && !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        return Err(format!("`{host}` is not a host name or address"));
    }
    if let Some(p) = port
        && p.parse::<u16>().map_or(true, |p| p == 0)
    {
        return Err(format!("`{p}` is not a port (1-65535)"));
    }
    let tail = tail.split('#').next().unwrap_or_default();
    let path = match tail {
        "" => "/".to_owned(),
        t if t.starts_with('?') => format!("/{t}"),
        t => t.to_owned(),
    };
    let scheme = match (kind, https) {
        (Kind::Http, false) => "http",
        (Kind::Http, true) => "https",
        (Kind::Grpc, false) => "grpc",
        (Kind::Grpc, true) => "grpcs",
        (Kind::Ws, false) => "ws",
        (Kind::Ws, true) => "wss",
    };
    Ok(Url {
        https,
        kind,
        base: format!("{scheme}://{authority}"),
        path,
    })
}

/// A TOML basic string: `"`, `\` and control characters escaped.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `s` as a template that reads no variable: quick mode sends what was typed, so a `{`
/// that would start a `{name}` (or a `{{`) is doubled.
fn literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '{'
            && chars
                .peek()
                .is_some_and(|&n| n == '{' || n == '_' || n.is_ascii_alphabetic())
        {
            out.push('{');
        }
    }
    out
}

/// The whole scenario file the flags describe.
fn toml(url: &Url, q: &Quick, command: &str) -> Result<String, String> {
    if url.kind != Kind::Grpc {
        for (set, flag) in [
            (!q.proto.is_empty(), "--proto"),
            (!q.proto_path.is_empty(), "--proto-path"),
            (q.call.is_some(), "--call"),
        ] {
            if set {
                return Err(format!(
                    "{flag} is for gRPC: write the URL as grpc://HOST:PORT/package.Service/Method"
                ));
            }
        }
    }
    if url.kind != Kind::Http {
        for (set, flag) in [(q.h2c, "--h2c"), (q.h2, "--h2"), (q.method.is_some(), "-m")] {
            if set {
                return Err(format!(
                    "{flag} is for http:// and https:// URLs; {} speaks its own protocol",
                    url.base
                ));
            }
        }
    }
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# made by `herd {command}` quick mode: {}",
        flags_line(url, q)
    );
    let target = match url.kind {
        // The socket's path and query are the target's.
        Kind::Ws => format!("{}{}", url.base, literal(&url.path)),
        _ => url.base.clone(),
    };
    let _ = writeln!(t, "[target]\nurl = {}", quoted(&target));
    let c = q.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
    match url.kind {
        Kind::Http => http_op(&mut t, url, q)?,
        Kind::Grpc => grpc_op(&mut t, url, q)?,
        Kind::Ws => {
            if ws_op(&mut t, url, q)? {
                // Held sockets: no requests to count or pace, only time.
                if q.requests.is_some() || q.rate.is_some() {
                    return Err(format!(
                        "without -d each player holds its socket and counts what {} pushes: -n and -q count and pace messages sent, so give -d the message to send",
                        url.base
                    ));
                }
                let z = q.duration.ok_or_else(|| {
                    "without -d each player holds its socket open: say how long with -z (e.g. -z 30s), or give -d a message to send".to_owned()
                })?;
                let _ = writeln!(
                    t,
                    "\n[[step]]\nplayers = {c}\nduration = {}\narrival = \"burst\"",
                    quoted(&humantime::format_duration(z).to_string())
                );
                return Ok(t);
            }
        }
    }
    t.push('\n');
    load(&mut t, q, c);
    Ok(t)
}

/// `[[op]]` for an HTTP URL.
fn http_op(t: &mut String, url: &Url, q: &Quick) -> Result<(), String> {
    if q.h2c && url.https {
        return Err(format!(
            "--h2c is HTTP/2 over cleartext, for http:// URLs; for {} use --h2",
            url.base
        ));
    }
    if q.h2 && !url.https {
        return Err(format!(
            "--h2 is HTTP/2 over TLS, for https:// URLs; for {} use --h2c",
            url.base
        ));
    }
    let method = q.method.as_deref().unwrap_or("GET").to_ascii_uppercase();
    let name = format!("{method} {}", url.path.split('?').next().unwrap_or("/"));
    if q.h2c {
        t.push_str("transport = \"h2c\"\n");
    } else if q.h2 {
        t.push_str("transport = \"h2\"\n");
    }
    let _ = writeln!(
        t,
        "\n[[op]]\nname = {}\nmethod = {}\npath = {}",
        quoted(&name),
        quoted(&method),
        quoted(&literal(&url.path))
    );
    headers(t, q)?;
    if let Some(b) = &q.body {
        let _ = writeln!(t, "body = {}", quoted(&literal(b)));
    }
    Ok(())
}

/// `[[op]]` for a gRPC URL: the method from the URL's path or `--call`, the `.proto` files
/// in `[target]`.
fn grpc_op(t: &mut String, url: &Url, q: &Quick) -> Result<(), String> {
    let from_url = url.path.trim_start_matches('/');
    let call = match (&q.call, from_url) {
        (Some(c), "") => c.clone(),
        (None, "") => {
            return Err(format!(
                "name the method to call: {}/package.Service/Method (or --call package.Service/Method)",
                url.base
            ));
        }
        (None, m) => m.to_owned(),
        (Some(_), _) => {
            return Err("the URL names the method already; leave --call out".to_owned());
        }
    };
    // ghz writes `package.Service.Method`: the last dot is the slash.
    let call = match call.split_once('/') {
        Some(_) => call,
        None => match call.rsplit_once('.') {
            Some((svc, m)) => format!("{svc}/{m}"),
            None => call,
        },
    };
    if q.proto.is_empty() {
        return Err("gRPC needs the service's .proto: --proto FILE (repeatable; imports from --proto-path DIR), as ghz's --proto".to_owned());
    }
    let list = |v: &[String]| v.iter().map(|p| quoted(p)).collect::<Vec<_>>().join(", ");
    let _ = writeln!(t, "proto = [{}]", list(&q.proto));
    if !q.proto_path.is_empty() {
        let _ = writeln!(t, "proto_path = [{}]", list(&q.proto_path));
    }
    let _ = writeln!(
        t,
        "\n[[op]]\nname = {}\ncall = {}",
        quoted(call.rsplit('/').next().unwrap_or(&call)),
        quoted(&call)
    );
    headers(t, q)?;
    let _ = writeln!(
        t,
        "body = {}",
        quoted(&literal(q.body.as_deref().unwrap_or("{}")))
    );
    Ok(())
}

/// `[[op]]` for a WebSocket URL: with `-d`, a message sent and its reply waited for; else a
/// stream op holding the socket. True when the players only hold their sockets.
fn ws_op(t: &mut String, _url: &Url, q: &Quick) -> Result<bool, String> {
    if !q.headers.is_empty() {
        let mut pairs = Vec::new();
        for h in &q.headers {
            let (k, v) = header(h)?;
            pairs.push(format!("{} = {}", quoted(k), quoted(&literal(v))));
        }
        let _ = writeln!(t, "headers = {{ {} }}", pairs.join(", "));
    }
    match &q.body {
        Some(b) => {
            let _ = writeln!(
                t,
                "\n[[op]]\nname = \"message\"\nbody = {}\nreply = \"next\"",
                quoted(&literal(b))
            );
            Ok(false)
        }
        None => {
            t.push_str("\n[[op]]\nname = \"pushes\"\nkind = \"stream\"\n");
            Ok(true)
        }
    }
}

/// `name: value` from `-H`.
fn header(h: &str) -> Result<(&str, &str), String> {
    h.split_once(':')
        .filter(|(k, _)| !k.trim().is_empty())
        .map(|(k, v)| (k.trim(), v.trim()))
        .ok_or_else(|| format!("-H `{h}` is not a header: write -H 'name: value'"))
}

/// The op's `headers` from `-H`.
fn headers(t: &mut String, q: &Quick) -> Result<(), String> {
    if !q.headers.is_empty() {
        let mut pairs = Vec::new();
        for h in &q.headers {
            let (k, v) = header(h)?;
            pairs.push(format!("{} = {}", quoted(k), quoted(&literal(v))));
        }
        let _ = writeln!(t, "headers = {{ {} }}", pairs.join(", "));
    }
    Ok(())
}

/// The load: a burst held for `-z`, a rate step for `-q`, a counted catalog for `-n`.
fn load(t: &mut String, q: &Quick, c: usize) {
    match (q.duration, q.rate) {
        (Some(z), None) => {
            // oha starts every worker at once: a burst, held for the duration.
            let _ = writeln!(
                t,
                "[[step]]\nplayers = {c}\nduration = {}\narrival = \"burst\"",
                quoted(&humantime::format_duration(z).to_string())
            );
        }
        (Some(z), Some(rate)) => {
            let _ = writeln!(
                t,
                "[[rate]]\nrate = {rate}\nduration = {}\nmax_in_flight = {c}\nwhen_full = \"queue\"",
                quoted(&humantime::format_duration(z).to_string())
            );
        }
        (None, None) => {
            let n = q.requests.unwrap_or(DEFAULT_REQUESTS);
            let _ = writeln!(
                t,
                "[catalog]\nrequests = {n}\nconcurrency = {c}\nmax_duration = \"{MAX_COUNTED}\""
            );
        }
        (None, Some(rate)) => {
            // A rate step schedules round(rate × duration) arrivals: to the nanosecond,
            // n / rate gives back exactly n.
            let n = q.requests.unwrap_or(DEFAULT_REQUESTS);
            let ns = (n as f64 / rate * 1e9).round() as u64;
            let _ = writeln!(
                t,
                "[[rate]]\nrate = {rate}\nduration = \"{ns}ns\"\nmax_in_flight = {c}\nwhen_full = \"queue\""
            );
        }
    }
}

/// The quick-mode flags as typed, for the generated file's first line.
fn flags_line(url: &Url, q: &Quick) -> String {
    let mut s = format!("{}{}", url.base, url.path);
    if let Some(c) = q.concurrency {
        let _ = write!(s, " -c {c}");
    }
    if let Some(n) = q.requests {
        let _ = write!(s, " -n {n}");
    }
    if let Some(z) = q.duration {
        let _ = write!(s, " -z {}", humantime::format_duration(z));
    }
    if let Some(r) = q.rate {
        let _ = write!(s, " -q {r}");
    }
    if q.h2c {
        s.push_str(" --h2c");
    }
    if q.h2 {
        s.push_str(" --h2");
    }
    if let Some(m) = &q.method {
        let _ = write!(s, " -m {m}");
    }
    for p in &q.proto {
        let _ = write!(s, " --proto {p}");
    }
    for p in &q.proto_path {
        let _ = write!(s, " --proto-path {p}");
    }
    if let Some(c) = &q.call {
        let _ = write!(s, " --call {c}");
    }
    // Headers and the body may hold secrets: the comment does not repeat them.
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_target_and_path() {
        let u = parse_url("http://127.0.0.1:8080").unwrap();
        assert_eq!(
            (u.base.as_str(), u.path.as_str()),
            ("http://127.0.0.1:8080", "/")
        );
        let u = parse_url("HTTPS://[::1]:8443/a/b?x=1#frag").unwrap();
        assert_eq!(
            (u.base.as_str(), u.path.as_str()),
            ("https://[::1]:8443", "/a/b?x=1")
        );
        assert!(u.https);
        assert_eq!(parse_url("http://h?q=1").unwrap().path, "/?q=1");
        for bad in [
            "http//x",
            "ftp://x/",
            "http:///x",
            "http://x:99999/",
            "http://x:0/",
            "http://a b/",
            "http://u:p@x/",
            "http://[::1/",
            "http://ex%ample/",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_url_with_a_password_is_refused_without_it() {
        for url in [
            "http://alice:S3cret@127.0.0.1:8080/",
            "http://alice:S3%23cret@127.0.0.1:8080/x",
            // Unencoded, `/` and `#` end the authority early: the password would be read as a
            // port, and that reason would quote it.
            "http://alice:S3c/r#et@127.0.0.1:8080/",
        ] {
            let e = scenario(url, &Quick::default(), "drive")
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("`http://***@127.0.0.1:8080/"), "{e}");
            assert!(e.contains("-H 'authorization: Basic BASE64'"), "{e}");
            assert!(!e.contains("S3") && !e.contains("alice"), "{e}");
        }
    }
}
