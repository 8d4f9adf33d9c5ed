//! Quick mode: `herd drive URL -c 50 -z 10s`, the first command people type into oha or
//! wrk, without a scenario file. The flags become a scenario's TOML text, which is checked
//! and compiled exactly as a file is (same engine, same tables, same report), and which
//! `--print-scenario` prints so it can be saved and run as a file.
//!
//! The flags mean what oha's do: `-c` players running at once, each on its own connection;
//! `-n` requests in total across all of them; `-z` how long to send; `-q` requests per second
//! across all of them.

use std::{fmt::Write as _, path::Path, time::Duration};

use anyhow::Result;
use herd_driver::units::parse_duration;

/// What a generated scenario is called in messages, tables and the heading.
pub const FILE: &str = "quick mode";

/// oha's default request count when neither `-n` nor `-z` is given.
pub const DEFAULT_REQUESTS: u64 = 200;

/// oha's default concurrency.
pub const DEFAULT_CONCURRENCY: usize = 50;

/// The longest a `-n` run may take: a bound on every load loop, far beyond a quick check.
const MAX_COUNTED: &str = "1h";

/// Quick mode's options, shared by `herd drive` and `herd run`; they apply when SCENARIO is
/// an `http://` or `https://` URL.
#[derive(Debug, Default, Clone, clap::Args)]
#[command(next_help_heading = "Quick mode (SCENARIO is a URL)")]
pub struct QuickArgs {
    /// Players sending at once, each on its own connection (oha's and wrk's -c)
    /// [default: 50].
    #[arg(short = 'c', long = "concurrency", value_name = "N", value_parser = at_least_one)]
    pub concurrency: Option<usize>,
    /// Requests to send in total across all players, then stop (oha's -n) [default: 200
    /// unless -z is given].
    #[arg(short = 'n', long = "requests", value_name = "N", value_parser = at_least_one_u64, conflicts_with = "duration")]
    pub requests: Option<u64>,
    /// Send for this long, then stop (oha's -z, wrk's -d): e.g. 10s, 1m.
    #[arg(short = 'z', long = "duration", value_name = "DURATION", value_parser = longer_than_zero)]
    pub duration: Option<Duration>,
    /// Requests per second across all players (oha's -q), sent on schedule (open model,
    /// latency from the intended send time); at most -c in flight, later ones wait.
    #[arg(short = 'q', long = "rate", value_name = "REQ_PER_S", value_parser = a_rate)]
    pub rate: Option<f64>,
    /// HTTP/2 over cleartext with prior knowledge (http:// URLs) [default: HTTP/1.1].
    #[arg(long, conflicts_with = "h2")]
    pub h2c: bool,
    /// HTTP/2 over TLS, chosen by ALPN (https:// URLs) [default: HTTP/1.1].
    #[arg(long)]
    pub h2: bool,
    /// The request's method [default: GET].
    #[arg(short = 'm', long = "method", value_name = "METHOD")]
    pub method: Option<String>,
    /// A request header, `-H 'accept: application/json'`. Repeatable.
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// The request's body, sent as written.
    #[arg(short = 'd', long = "body", value_name = "BODY")]
    pub body: Option<String>,
    /// Print the scenario file these flags make and exit without sending anything; saved to
    /// a file, it runs the same load.
    #[arg(long)]
    pub print_scenario: bool,
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e} (write a count, e.g. 50)")),
    }
}

fn at_least_one_u64(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e} (write a count, e.g. 10000)")),
    }
}

fn longer_than_zero(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("must be longer than 0 (write e.g. 10s)".to_owned());
    }
    Ok(d)
}

fn a_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 && x <= 1_000_000.0 => Ok(x),
        _ => Err("a rate is requests per second, above 0 and at most 1000000 (e.g. 500)".into()),
    }
}

impl QuickArgs {
    /// The flags given, by name, for the error when SCENARIO is a file.
    fn given(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let flags = [
            (self.concurrency.is_some(), "-c"),
            (self.requests.is_some(), "-n"),
            (self.duration.is_some(), "-z"),
            (self.rate.is_some(), "-q"),
            (self.h2c, "--h2c"),
            (self.h2, "--h2"),
            (self.method.is_some(), "-m"),
            (!self.headers.is_empty(), "-H"),
            (self.body.is_some(), "-d"),
            (self.print_scenario, "--print-scenario"),
        ];
        for (on, name) in flags {
            if on {
                v.push(name);
            }
        }
        v
    }
}

/// The scenario TOML for `arg` when it is a URL (quick mode), `None` when it names a scenario
/// file. Quick-mode flags beside a file, and a URL herd cannot drive, are usage errors
/// (exit 2) that show a command that works.
pub fn scenario_text(arg: &Path, quick: &QuickArgs, command: &str) -> Result<Option<String>> {
    let s = arg.to_string_lossy();
    let looks_like_url = s.contains("://");
    if !looks_like_url && (arg.exists() || quick.given().is_empty()) {
        if !quick.given().is_empty() {
            return Err(crate::environment(anyhow::anyhow!(
                "{} apply only when SCENARIO is a URL (quick mode); the scenario file {} sets \
                 its own load: change it there or with --set",
                quick.given().join(", "),
                arg.display()
            )));
        }
        return Ok(None);
    }
    let url = parse_url(&s).map_err(|why| {
        crate::environment(anyhow::anyhow!(
            "`{s}` is not a URL herd can drive: {why}; write e.g. `herd {command} \
             http://127.0.0.1:8080/ -c 50 -z 10s`"
        ))
    })?;
    toml(&url, quick, command)
        .map(Some)
        .map_err(crate::environment)
}

/// A URL split the way a scenario wants it: `target.url` and the op's path.
#[derive(Debug, PartialEq)]
struct Url {
    https: bool,
    base: String,
    path: String,
}

fn parse_url(s: &str) -> Result<Url, String> {
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("it contains a space or a control character".into());
    }
    let (scheme, rest) = s
        .split_once("://")
        .ok_or("it has no scheme (http:// or https://)")?;
    let https = match scheme.to_ascii_lowercase().as_str() {
        "http" => false,
        "https" => true,
        other => return Err(format!("the scheme `{other}` is neither http nor https")),
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
    Ok(Url {
        https,
        base: format!("{}://{authority}", if https { "https" } else { "http" }),
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
fn toml(url: &Url, q: &QuickArgs, command: &str) -> Result<String> {
    if q.h2c && url.https {
        anyhow::bail!(
            "--h2c is HTTP/2 over cleartext, for http:// URLs; for {} use --h2",
            url.base
        );
    }
    if q.h2 && !url.https {
        anyhow::bail!(
            "--h2 is HTTP/2 over TLS, for https:// URLs; for {} use --h2c",
            url.base
        );
    }
    let method = q.method.as_deref().unwrap_or("GET").to_ascii_uppercase();
    let c = q.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
    let name = format!("{method} {}", url.path.split('?').next().unwrap_or("/"));
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# made by `herd {command}` quick mode: {}",
        flags_line(url, q)
    );
    let _ = writeln!(t, "[target]\nurl = {}", quoted(&url.base));
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
    if !q.headers.is_empty() {
        let mut pairs = Vec::new();
        for h in &q.headers {
            let (k, v) = h
                .split_once(':')
                .filter(|(k, _)| !k.trim().is_empty())
                .ok_or_else(|| {
                    anyhow::anyhow!("-H `{h}` is not a header: write -H 'name: value'")
                })?;
            pairs.push(format!(
                "{} = {}",
                quoted(k.trim()),
                quoted(&literal(v.trim()))
            ));
        }
        let _ = writeln!(t, "headers = {{ {} }}", pairs.join(", "));
    }
    if let Some(b) = &q.body {
        let _ = writeln!(t, "body = {}", quoted(&literal(b)));
    }
    t.push('\n');
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
    Ok(t)
}

/// The quick-mode flags as typed, for the generated file's first line.
fn flags_line(url: &Url, q: &QuickArgs) -> String {
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
    // Headers and the body may hold secrets: the comment does not repeat them.
    s
}

#[cfg(test)]
mod tests {
    use herd_driver::{Scenario, scenario::PhaseWork};

    use super::*;

    fn quick() -> QuickArgs {
        QuickArgs::default()
    }

    fn scenario(url: &str, q: &QuickArgs) -> Scenario {
        let t = scenario_text(Path::new(url), q, "drive").unwrap().unwrap();
        Scenario::parse(FILE, &t, &[]).unwrap_or_else(|e| panic!("{e}\n{t}"))
    }

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
    fn duration_is_a_burst_of_players_and_count_is_a_catalog() {
        let mut q = quick();
        q.concurrency = Some(7);
        q.duration = Some(Duration::from_secs(3));
        let s = scenario("http://127.0.0.1:9/x?y=1", &q);
        assert_eq!(s.steps.len(), 1);
        assert_eq!(s.steps[0].players, 7);
        assert_eq!(s.steps[0].duration, Duration::from_secs(3));
        assert_eq!(s.ops[0].name, "GET /x");

        let mut q = quick();
        q.requests = Some(1234);
        let s = scenario("http://127.0.0.1:9/", &q);
        let c = &s.shapes.catalog[0];
        assert_eq!((c.requests, c.concurrency), (1234, DEFAULT_CONCURRENCY));
        assert!(matches!(s.plan()[0].work, PhaseWork::Route(0)));
    }

    #[test]
    fn a_rate_with_a_count_schedules_exactly_the_count() {
        for (n, rate) in [(10_000u64, 3.0), (7, 1000.0), (999_999, 777_777.7)] {
            let mut q = quick();
            q.requests = Some(n);
            q.rate = Some(rate);
            let s = scenario("http://127.0.0.1:9/", &q);
            let r = &s.shapes.rates[0];
            assert_eq!((r.rate * r.duration.as_secs_f64()).round() as u64, n);
        }
    }

    #[test]
    fn headers_and_body_are_sent_as_typed() {
        let mut q = quick();
        q.method = Some("post".into());
        q.headers = vec!["content-type: application/json".into(), "x-a:{b}".into()];
        q.body = Some(r#"{"player": {player}, "q": "a\"b"}"#.into());
        let t = scenario_text(Path::new("http://127.0.0.1:9/{id}"), &q, "drive")
            .unwrap()
            .unwrap();
        assert!(t.contains(r#"path = "/{{id}""#), "{t}");
        assert!(
            t.contains(r#"body = "{\"player\": {{player}, \"q\": \"a\\\"b\"}""#),
            "{t}"
        );
        let s = Scenario::parse(FILE, &t, &[]).unwrap();
        assert_eq!(s.ops[0].method, "POST");
    }

    #[test]
    fn wrong_inputs_are_usage_errors_with_an_example() {
        let e = scenario_text(Path::new("http://:80/"), &quick(), "drive").unwrap_err();
        assert_eq!(crate::exit_code(&e), crate::exit::USAGE);
        assert!(
            crate::error_text(&e).contains("herd drive http://127.0.0.1:8080/ -c 50 -z 10s"),
            "{e:#}"
        );
        let mut q = quick();
        q.h2c = true;
        let e = scenario_text(Path::new("https://127.0.0.1/"), &q, "run").unwrap_err();
        assert_eq!(crate::exit_code(&e), crate::exit::USAGE);
        q.h2c = false;
        q.concurrency = Some(3);
        let e = scenario_text(Path::new("Cargo.toml"), &q, "run").unwrap_err();
        assert!(crate::error_text(&e).contains("-c apply only"), "{e:#}");
        // A file path with no quick flags is a scenario file, whether or not it exists.
        assert!(
            scenario_text(Path::new("nope.toml"), &quick(), "run")
                .unwrap()
                .is_none()
        );
        assert!(at_least_one("0").is_err());
        assert!(longer_than_zero("0s").is_err());
        assert!(a_rate("0").is_err());
    }
}
