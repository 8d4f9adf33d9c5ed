use std::path::Path;

use http::Method;

use super::{op::DEFAULT_TIMEOUT, *};
use herd_model::{Outcome, SloMetric};

const MINIMAL: &str = r#"
[target]
url = "http://127.0.0.1:8080/api/"
transport = "h2c"

[[op]]
name = "state"
path = "/state"

[[step]]
players = 5
duration = "2s"
"#;

fn diag(src: &str, sets: &[&str]) -> Diagnostic {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    match Scenario::parse("s.toml", src, &sets) {
        Ok(_) => panic!("expected an error"),
        Err(ScenarioError::Invalid(d)) => *d,
        Err(e) => panic!("expected a diagnostic, got {e}"),
    }
}

#[test]
fn minimal_scenario_and_defaults() {
    let s = Scenario::parse("s.toml", MINIMAL, &[]).unwrap();
    assert_eq!(s.target.authority, "127.0.0.1:8080");
    assert_eq!(s.target.base_path, "/api");
    assert_eq!(s.target.transport, TransportKind::H2c);
    assert_eq!(s.target.connections, Connections::PerPlayer);
    assert_eq!(s.ops[0].method, Method::GET);
    assert_eq!(s.ops[0].timeout, DEFAULT_TIMEOUT);
    assert_eq!(
        s.steps[0].arrival,
        Arrival::Gradual(Duration::from_millis(500))
    );
    assert_eq!(s.player.pace, Pace::None);
    assert!(s.player.honour_retry_after);
    assert_eq!(s.duration(), Duration::from_secs(2));
}

#[test]
fn unknown_key_names_file_line_column_and_valid_keys() {
    let src = MINIMAL.replace("transport = \"h2c\"", "trasnport = \"h2c\"");
    let d = diag(&src, &[]);
    assert_eq!((d.file.as_str(), d.line, d.column), ("s.toml", 4, 1));
    assert_eq!(d.key, "target.trasnport");
    assert!(
        d.message
            .starts_with("unknown key `trasnport`, valid keys are `url`, `transport`"),
        "{}",
        d.message
    );
    let shown = d.to_string();
    assert!(
        shown.starts_with("s.toml:4:1: target.trasnport: unknown key"),
        "{shown}"
    );
    assert!(
        shown.contains("4 | trasnport = \"h2c\"\n  | ^^^^^^^^^"),
        "{shown}"
    );
}

#[test]
fn unknown_value_lists_the_valid_values() {
    let d = diag(&MINIMAL.replace("\"h2c\"", "\"h3\""), &[]);
    assert_eq!((d.line, d.column), (4, 13));
    assert_eq!(d.key, "target.transport");
    assert_eq!(
        d.message,
        "unknown value `h3`, valid values are `h1`, `h2c`, `h2`, `grpc`, `ws`"
    );
}

#[test]
fn bad_duration_points_at_the_value() {
    let d = diag(&MINIMAL.replace("\"2s\"", "\"2 parsecs\""), &[]);
    assert_eq!(d.key, "step[0].duration");
    assert_eq!(d.line, 12);
    assert!(
        d.message.contains("invalid duration `2 parsecs`"),
        "{}",
        d.message
    );
}

#[test]
fn toml_syntax_error_is_located() {
    let d = diag("[target\nurl = 1\n", &[]);
    assert_eq!(d.line, 1);
    assert!(!d.message.is_empty());
}

#[test]
fn semantic_errors_are_located_too() {
    let src = format!("{MINIMAL}\n[hammer]\nop = \"stat\"\nworkers = 2\nduration = \"1s\"\n");
    let d = diag(&src, &[]);
    assert_eq!(d.key, "hammer.op");
    assert_eq!((d.line, d.column), (15, 6));
    assert_eq!(d.message, "no op named `stat`; ops are: state");

    let d = diag(
        &MINIMAL.replace("path = \"/state\"", "path = \"/g/{game_id}\""),
        &[],
    );
    assert_eq!(d.key, "op[0]");
    assert!(
        d.message
            .contains("reads `{game_id}`, which no setup op captures"),
        "{}",
        d.message
    );

    let d = diag(
        &MINIMAL.replace("transport = \"h2c\"", "connections = \"pool\""),
        &[],
    );
    assert_eq!(d.key, "target");
    assert!(d.message.contains("needs pool_size"), "{}", d.message);
}

#[test]
fn captures_in_setup_feed_loop_ops() {
    let src = r#"
[target]
url = "http://127.0.0.1:1"
[vars]
variant = "en"
[player]
setup = ["create"]
think = "10ms"
[[op]]
name = "create"
method = "POST"
path = "/games?variant={variant}"
weight = 0
capture = { game_id = "/game/id" }
[[op]]
name = "state"
path = "/games/{game_id}"
check = { status = 200, json = { "/ok" = true }, sha256 = "{digest}" }
[[step]]
players = 1
duration = "1s"
"#;
    let d = diag(src, &[]);
    assert!(d.message.contains("`{digest}`"), "{}", d.message);
    let src = src.replace(
        "variant = \"en\"",
        "variant = \"en\"\ndigest = \"sha256:00\"",
    );
    let s = Scenario::parse("s.toml", &src, &[]).unwrap();
    assert_eq!(s.player.setup, vec![0]);
    assert_eq!(s.player.pace, Pace::Think(Duration::from_millis(10)));
    assert_eq!(s.ops[1].check.status, Some(200));
    assert_eq!(
        s.ops[1].check.json,
        vec![("/ok".to_owned(), serde_json::Value::Bool(true))]
    );
    assert_eq!(
        s.ops[0].captures,
        vec![(s.vars.slot("game_id").unwrap(), "/game/id".to_owned())]
    );
}

#[test]
fn overrides_apply_before_checking() {
    let s = Scenario::parse(
        "s.toml",
        MINIMAL,
        &[
            "target.transport=h1".into(),
            "step[0].players=9".into(),
            "op[state].weight=3".into(),
        ],
    )
    .unwrap();
    assert_eq!(s.target.transport, TransportKind::H1);
    assert_eq!(s.steps[0].players, 9);
    assert_eq!(s.ops[0].weight, 3);
}

#[test]
fn override_errors_name_the_override() {
    let d = diag(MINIMAL, &["target.transport=h3"]);
    assert_eq!(d.from_override.as_deref(), Some("target.transport=h3"));
    assert_eq!(
        d.to_string(),
        "s.toml: --set target.transport=h3: target.transport: unknown value `h3`, valid values are `h1`, `h2c`, `h2`, `grpc`, `ws`"
    );
    let d = diag(MINIMAL, &["target.trasnport=h1"]);
    assert_eq!(d.from_override.as_deref(), Some("target.trasnport=h1"));
    assert!(
        d.message.starts_with("unknown key `trasnport`"),
        "{}",
        d.message
    );
    let e = Scenario::parse("s.toml", MINIMAL, &["step[4].players=1".into()]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "--set step[4].players=1: `step` has 1 entries, indexed from 0"
    );
}

#[test]
fn objectives_parse_and_bad_ones_point_at_their_key() {
    let src = format!("{MINIMAL}\n[slo]\nstate = [\"p99 < 500ms\", \"errors < 1%\"]\n");
    let s = Scenario::parse("s.toml", &src, &[]).unwrap();
    assert_eq!(s.slo.len(), 2);
    assert_eq!(
        (s.slo[0].metric, s.slo[0].limit),
        (SloMetric::P99, 500_000.0)
    );
    assert_eq!((s.slo[1].metric, s.slo[1].limit), (SloMetric::Errors, 0.01));
    assert_eq!(s.slo[0].text, "p99 < 500ms");

    let d = diag(&format!("{MINIMAL}\n[slo]\nstate = \"p98 < 1s\"\n"), &[]);
    assert_eq!(d.key, "slo.state");
    assert!(
        d.message
            .contains("valid: p50, p90, p99, p999, max, errors"),
        "{}",
        d.message
    );
    let d = diag(&format!("{MINIMAL}\n[slo]\nnope = \"p99 < 1s\"\n"), &[]);
    assert!(
        d.message.contains("no op named `nope`; ops are: state"),
        "{}",
        d.message
    );
    // An A/B run can tighten an objective without editing the file.
    let s = Scenario::parse("s.toml", &src, &["slo.state=\"p99 < 50ms\"".into()]).unwrap();
    assert_eq!(s.slo[0].limit, 50_000.0);
}

#[test]
fn expected_outcomes_join_the_ops_and_bad_ones_point_at_their_entry() {
    let src = r#"
[target]
url = "http://127.0.0.1:8080"

[outcome]
code = "/error/code"
expected = ["not_your_turn", "rate_limited"]

[[op]]
name = "move"
path = "/move"
expected = ["game_finished", "not_your_turn"]

[[op]]
name = "state"
path = "/state"

[[step]]
players = 1
duration = "1s"
"#;
    let s = Scenario::parse("s.toml", src, &[]).unwrap();
    let mv = &s.ops[0];
    assert_eq!(
        mv.expected,
        [
            Outcome::Domain("not_your_turn".into()),
            Outcome::RateLimited,
            Outcome::Domain("game_finished".into())
        ]
    );
    assert!(mv.expects(&Outcome::RateLimited) && !mv.expects(&Outcome::Timeout));
    assert_eq!(s.ops[1].expected.len(), 2, "the scenario's list, no more");

    // `ok`, a misspelt herd class, and a domain code no op can read: each at its entry.
    let minimal_with = |outcome: &str| format!("{MINIMAL}\n[outcome]\n{outcome}\n");
    let d = diag(&minimal_with(r#"expected = ["timeout", "ok"]"#), &[]);
    // MINIMAL is 14 lines; the list is on line 15 and `"ok"` starts at column 24.
    assert_eq!(
        (d.key.as_str(), d.line, d.column),
        ("outcome.expected[1]", 15, 24),
        "{d:?}"
    );
    assert!(
        d.message.contains("`ok` is what the other outcomes"),
        "{}",
        d.message
    );
    let d = diag(&minimal_with(r#"expected = ["transport_error"]"#), &[]);
    assert!(
        d.message.contains("transport_error.connect"),
        "{}",
        d.message
    );
    let d = diag(&minimal_with(r#"expected = ["not_your_turn"]"#), &[]);
    assert!(
        d.message
            .contains("no op reads a code, so it can never be an outcome"),
        "{}",
        d.message
    );
    let d = diag(
        &MINIMAL.replace(
            "path = \"/state\"",
            "path = \"/state\"\nexpected = [\"busy\"]",
        ),
        &[],
    );
    assert_eq!(d.key, "op[0].expected[0]");
    assert!(
        d.message.contains("op `state` reads no code"),
        "{}",
        d.message
    );
}

#[test]
fn a_scenario_that_is_not_utf8_names_line_column_and_byte_offset() {
    let dir = herd_testkit::TempDir::new("scenario-latin1");
    // `é` in Latin-1 (0xE9) on line 7, after `name = "caf`.
    let mut bytes = MINIMAL.replace("\"state\"", "\"cafX\"").into_bytes();
    let at = bytes.iter().position(|&b| b == b'X').unwrap();
    bytes[at] = 0xE9;
    let path = dir.join("s.toml");
    std::fs::write(&path, &bytes).unwrap();
    let e = Scenario::load(&path, &[]).unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(
            e,
            ScenarioError::NotUtf8 { line: 7, column: 12, byte: 0xE9, offset, .. } if offset == at
        ),
        "{text}"
    );
    assert!(
        text.contains("s.toml:7:12") && text.contains(&format!("byte offset {at}")),
        "{text}"
    );
    assert!(text.contains("iconv"), "says what to do: {text}");
}

#[test]
fn a_missing_scenario_says_what_the_os_said_once() {
    let e = Scenario::load(Path::new("/no/such/scenario.toml"), &[]).unwrap_err();
    assert!(
        std::error::Error::source(&e).is_none(),
        "the io::Error is not a second cause, printed again by a chain: {e}"
    );
    let text = e.to_string();
    assert!(
        text.contains("/no/such/scenario.toml: No such file"),
        "{text}"
    );
}

#[test]
fn a_duration_no_instant_can_hold_is_refused_at_its_line() {
    for huge in ["18446744073709551615s", "5124095576030431h"] {
        let d = diag(&MINIMAL.replace("\"2s\"", &format!("\"{huge}\"")), &[]);
        assert!(d.message.contains("366 days"), "{huge}: {}", d.message);
        assert_eq!((d.line, d.key.as_str()), (12, "step[0].duration"), "{huge}");
    }
}

#[test]
fn a_scenario_file_over_a_mebibyte_is_refused_before_it_is_read() {
    let dir = herd_testkit::TempDir::new("scenario-huge");
    let op = "[[op]]\nname = \"o\"\npath = \"/\"\n";
    let mut src = MINIMAL.to_owned();
    while src.len() as u64 <= MAX_FILE_BYTES {
        src.push_str(op);
    }
    let path = dir.join("huge.toml");
    std::fs::write(&path, &src).unwrap();
    let start = std::time::Instant::now();
    let e = Scenario::load(&path, &[]).unwrap_err();
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
    let text = e.to_string();
    assert!(
        matches!(e, ScenarioError::TooLarge { .. })
            && text.contains(&format!("{} bytes", src.len()))
            && text.contains("1 MiB"),
        "{text}"
    );
}

/// Checking a scenario is linear in its ops: four times the ops take about four times as
/// long, not sixteen (a scan of the ops seen so far for a duplicate name made 20 000 ops take
/// seconds). The best of three runs of each keeps a busy host's noise out.
#[test]
fn checking_is_linear_in_the_number_of_ops() {
    let src = |n: usize| {
        let mut s = MINIMAL.to_owned();
        for i in 0..n {
            s.push_str(&format!("[[op]]\nname = \"o{i}\"\npath = \"/p{i}\"\n"));
        }
        s
    };
    let best = |s: &str| {
        (0..3)
            .map(|_| {
                let t = std::time::Instant::now();
                Scenario::parse("big.toml", s, &[]).unwrap();
                t.elapsed()
            })
            .min()
            .unwrap()
    };
    let (small, large) = (src(3_000), src(12_000));
    let ratio = best(&large).as_secs_f64() / best(&small).as_secs_f64();
    assert!(
        ratio < 8.0,
        "4× the ops took {ratio:.1}× as long (linear ≈ 4, quadratic ≈ 16)"
    );
}

const CHAIN: &str = r#"
[target]
url = "http://127.0.0.1:8080"

[[op]]
name = "list"
path = "/list"
then = ["item"]

[[op]]
name = "item"
path = "/item/{item}"
for_each = "/items/*/id"

[[step]]
players = 1
duration = "1s"
"#;

#[test]
fn a_chain_compiles_and_its_mistakes_are_located() {
    let s = Scenario::parse("s.toml", CHAIN, &[]).unwrap();
    assert_eq!(s.ops[0].then.len(), 1);
    assert_eq!(s.ops[1].weight, 0, "a for_each op runs only in its chain");
    let f = s.ops[0].then[0].for_each.as_ref().unwrap();
    assert_eq!((f.pointer.as_str(), f.max_items), ("/items/*/id", 100));

    let d = diag(&CHAIN.replace("then = [\"item\"]", ""), &[]);
    assert_eq!(
        (d.key.as_str(), d.line, d.column),
        ("op[1].for_each", 13, 12)
    );
    assert!(
        d.message.contains("no op names it in `then`"),
        "{}",
        d.message
    );

    let d = diag(
        &CHAIN.replace("then = [\"item\"]", "then = [\"iten\"]"),
        &[],
    );
    assert_eq!(d.key, "op[0].then[0]");
    assert_eq!(d.message, "no op named `iten`; ops are: list, item");

    let d = diag(&CHAIN.replace("/items/*/id", "/items/0/id"), &[]);
    assert!(
        d.message.contains("put a `*` where the list is"),
        "{}",
        d.message
    );

    let d = diag(
        &CHAIN.replace("for_each = \"/items/*/id\"", "then = [\"list\"]\npath2 = 1"),
        &[],
    );
    assert_eq!(d.key, "op[1].path2");

    let d = diag(
        &CHAIN.replace(
            "for_each = \"/items/*/id\"",
            "for_each = \"/items/*/id\"\nthen = [\"list\"]",
        ),
        &[],
    );
    assert!(d.message.contains("comes back to itself"), "{}", d.message);

    let d = diag(&CHAIN.replace("/item/{item}", "/item/{other}"), &[]);
    assert_eq!(d.key, "op[1]");
    assert!(
        d.message
            .contains("runs after `list` (its then) but reads `{other}`"),
        "{}",
        d.message
    );

    let d = diag(
        &CHAIN.replace("path = \"/list\"", "path = \"/list\"\nmax_items = 3"),
        &[],
    );
    assert_eq!(d.key, "op[0].max_items");
}

#[test]
fn roles_take_seats_in_order_and_a_role_no_member_takes_is_located() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/seeds/chat.toml");
    let src = std::fs::read_to_string(path).unwrap();
    let s = Scenario::parse("chat.toml", &src, &[]).unwrap();
    let g = s.group.as_ref().unwrap();
    assert!(g.shared, "the reader's join shares group.inbox");
    assert_eq!(g.role_of(0).unwrap().name, "sender");
    assert_eq!(g.role_of(1).unwrap().name, "reader");
    let third = "[[group.role]]\nname = \"lurker\"\nops = [\"read\"]\n\n[[op]]\nname = \"healthz\"";
    let d = diag(&src.replacen("[[op]]\nname = \"healthz\"", third, 1), &[]);
    assert_eq!(d.key, "group.role[2]");
    let line = src
        .lines()
        .position(|l| l.starts_with("name = \"healthz\""))
        .unwrap()
        + 1;
    assert_eq!((d.file.as_str(), d.line, d.column), ("s.toml", line - 1, 1));
    assert!(
        d.message.starts_with(
            "no member takes role `lurker`: the roles before it fill seats 1–2, and a group has 2"
        ),
        "{}",
        d.message
    );
    let d = diag(&src.replace("ops = [\"read\"]", "ops = [\"healthz\"]"), &[]);
    assert_eq!(d.key, "group.role[1].ops");
    assert!(d.message.contains("has no op to run"), "{}", d.message);
}
