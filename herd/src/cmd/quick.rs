//! Quick mode's flags (`herd drive URL -c 50 -z 10s`), shared by `herd drive` and `herd
//! run`: parsed and checked here, turned into a scenario by
//! [`herd_driver::scenario::quick`].

use std::{path::Path, time::Duration};

use anyhow::Result;
use herd_driver::{
    scenario::quick::{self, Quick},
    units::parse_duration,
};

pub use quick::FILE;

/// Quick mode's options, shared by `herd drive` and `herd run`; they apply when SCENARIO is
/// a URL: `http://` or `https://`, `grpc://` or `grpcs://` (with `--proto`), `ws://` or
/// `wss://`.
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
    /// The request's body, sent as written; for grpc:// the request message as JSON
    /// (ghz's -d), for ws:// the message each player sends and waits for a reply to (without
    /// it, each player holds its socket and counts what the server pushes).
    #[arg(short = 'd', long = "body", value_name = "BODY")]
    pub body: Option<String>,
    /// gRPC: a .proto file defining the method (ghz's --proto), compiled when the run
    /// starts. Repeatable.
    #[arg(long = "proto", value_name = "FILE")]
    pub proto: Vec<String>,
    /// gRPC: a directory the .proto files' imports are found in (ghz's --import-paths).
    /// Repeatable.
    #[arg(long = "proto-path", value_name = "DIR")]
    pub proto_path: Vec<String>,
    /// gRPC: the method, package.Service/Method (or ghz's package.Service.Method), when the
    /// URL does not end in it.
    #[arg(long = "call", value_name = "METHOD")]
    pub call: Option<String>,
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
    /// The options the flags give.
    fn options(&self) -> Quick {
        Quick {
            concurrency: self.concurrency,
            requests: self.requests,
            duration: self.duration,
            rate: self.rate,
            h2c: self.h2c,
            h2: self.h2,
            method: self.method.clone(),
            headers: self.headers.clone(),
            body: self.body.clone(),
            proto: self.proto.clone(),
            proto_path: self.proto_path.clone(),
            call: self.call.clone(),
        }
    }

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
            (!self.proto.is_empty(), "--proto"),
            (!self.proto_path.is_empty(), "--proto-path"),
            (self.call.is_some(), "--call"),
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
    quick::scenario(&s, &quick.options(), command)
        .map(Some)
        .map_err(|e| crate::environment(anyhow::Error::new(e)))
}

#[cfg(test)]
mod tests {
    use herd_driver::{
        Scenario,
        scenario::{
            PhaseWork,
            quick::{DEFAULT_CONCURRENCY, FILE},
        },
    };

    use super::*;

    fn quick() -> QuickArgs {
        QuickArgs::default()
    }

    fn scenario(url: &str, q: &QuickArgs) -> Scenario {
        let t = scenario_text(Path::new(url), q, "drive").unwrap().unwrap();
        Scenario::parse(FILE, &t, &[]).unwrap_or_else(|e| panic!("{e}\n{t}"))
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
    fn grpc_and_websocket_urls() {
        let proto = herd_testkit::py::arena_proto().display().to_string();
        let mut q = quick();
        q.proto = vec![proto.clone()];
        q.body = Some(r#"{"player": "x"}"#.into());
        q.headers = vec!["authorization: Bearer t".into()];
        q.requests = Some(100);
        let s = scenario("grpc://127.0.0.1:9/herd.arena.Arena/Join", &q);
        assert_eq!(s.ops[0].name, "Join");
        let herd_driver::scenario::Call::Grpc(call) = &s.ops[0].call else {
            panic!("{:?}", s.ops[0].call)
        };
        assert_eq!(call.method.name(), "herd.arena.Arena/Join");
        // ghz's dotted form, with --call.
        q.call = Some("herd.arena.Arena.Join".into());
        let s = scenario("grpcs://127.0.0.1:9", &q);
        assert!(s.target.tls.is_some());
        // A method the .proto lacks: the scenario's error, exit 2.
        q.call = Some("herd.arena.Arena/Leave".into());
        let t = scenario_text(Path::new("grpc://127.0.0.1:9"), &q, "drive")
            .unwrap()
            .unwrap();
        let e = Scenario::parse(FILE, &t, &[]).unwrap_err();
        assert!(e.to_string().contains("has no method `Leave`"), "{e}");
        q.proto.clear();
        q.call = None;
        let e = scenario_text(Path::new("grpc://127.0.0.1:9/a.B/C"), &q, "drive").unwrap_err();
        assert!(crate::error_text(&e).contains("--proto FILE"), "{e:#}");

        let mut q = quick();
        q.body = Some("hi {player}".into());
        q.duration = Some(Duration::from_secs(2));
        let s = scenario("ws://127.0.0.1:9/echo?room=1", &q);
        assert_eq!(s.target.base_path, "/echo?room=1");
        assert!(matches!(s.ops[0].call, herd_driver::scenario::Call::Ws(_)));
        q.body = None;
        q.concurrency = Some(3);
        let s = scenario("wss://127.0.0.1:9/feed", &q);
        assert!(s.ops[0].kind.is_background());
        assert_eq!(s.steps[0].players, 3);
        q.duration = None;
        let e = scenario_text(Path::new("ws://127.0.0.1:9/feed"), &q, "drive").unwrap_err();
        assert!(crate::error_text(&e).contains("-z"), "{e:#}");
        q.h2c = true;
        let e = scenario_text(Path::new("ws://127.0.0.1:9/"), &q, "drive").unwrap_err();
        assert_eq!(crate::exit_code(&e), crate::exit::USAGE);
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
