//! The `[seed]` section of a scenario file: herd-seed checks it ([`herd_seed::spec::compile`]);
//! this module places its errors in the file, refuses a database URL written into the
//! scenario without echoing it, and ties `[player] accounts` to the seeded accounts.

use std::ops::Range;

use herd_seed::{
    SeedSpec,
    secret::{looks_like_url, redact},
    spec::DEFAULT_URL_ENV,
};
use toml::{
    Spanned,
    de::{DeTable, DeValue},
};

use super::{
    Invalid, ScenarioError, at,
    error::Locator,
    key,
    overrides::{Seg, path_string},
};

pub(super) use herd_seed::spec::RawSeed;

/// Checks `[seed]` with herd-seed; its errors are placed under `seed.<key>`.
pub(super) fn compile(file: &str, raw: RawSeed) -> Result<SeedSpec, Invalid> {
    herd_seed::spec::compile(file, raw).map_err(|e| at(&[key("seed"), Seg::Key(e.key)], e.message))
}

/// The players' account count with seeding: unset, it becomes every seeded account; set, it
/// may not exceed them, or players would present tokens herd never seeded.
pub(super) fn player_accounts(set: Option<u64>, seed: &SeedSpec) -> Result<Option<u64>, Invalid> {
    match set {
        None => Ok(Some(seed.total())),
        Some(n) if n > seed.total() => Err(at(
            &[key("player"), key("accounts")],
            format!(
                "{n} accounts, but [seed] seeds {} (accounts + guests): players {} and up would use accounts herd did not seed",
                seed.total(),
                seed.total()
            ),
        )),
        Some(n) => Ok(Some(n)),
    }
}

/// Refuses a database URL written into `[seed]` — before serde, whose errors would quote the
/// line — pointing at the `[seed]` header, never at the value, and redacting a `--set`.
pub(super) fn refuse_urls(doc: &DeTable<'_>, loc: &Locator<'_>) -> Result<(), ScenarioError> {
    let Some(seed) = doc.get("seed") else {
        return Ok(());
    };
    let Some(table) = seed.get_ref().as_table() else {
        return Ok(());
    };
    for (k, v) in table {
        let k = k.get_ref().as_ref();
        let text = match v.get_ref() {
            DeValue::String(s) => s.as_ref(),
            _ => "",
        };
        let message = if k == "url" {
            Some(format!(
                "the database URL never goes in the scenario (it would be committed and shared): put it in an environment variable named by url_env (default {DEFAULT_URL_ENV}) or a file named by url_file"
            ))
        } else if (k == "url_env" || k == "url_file") && looks_like_url(text) {
            Some(format!(
                "{k} names where the URL is ({}), not the URL itself; the URL never goes in the scenario",
                if k == "url_env" {
                    "an environment variable, e.g. HERD_SEED_URL"
                } else {
                    "a file holding it"
                }
            ))
        } else if text.contains("://") && text.contains('@') {
            Some(
                "looks like a URL with credentials; the database URL never goes in the scenario: use url_env or url_file".to_owned(),
            )
        } else {
            None
        };
        let Some(message) = message else { continue };
        let key = path_string(&[key("seed"), Seg::Key(k.to_owned())]);
        return Err(located(seed, v, loc, key, message));
    }
    Ok(())
}

fn located(
    seed: &Spanned<DeValue<'_>>,
    value: &Spanned<DeValue<'_>>,
    loc: &Locator<'_>,
    key: String,
    message: String,
) -> ScenarioError {
    let len = loc.source.len();
    let span: Range<usize> = value.span();
    if span.start > len {
        let n = span.start - len - 1;
        let arg = loc.overrides.get(n).map_or_else(String::new, |a| redact(a));
        return ScenarioError::Override {
            arg,
            reason: format!("{key}: {message}"),
        };
    }
    // The table's own span: a `[seed]` header line is quoted; a dotted key or an inline
    // table starts on the line holding the secret, so only its position is given.
    let header = seed.span();
    let d = loc.diagnostic(Some(header.clone()), key, message);
    let is_header = loc
        .source
        .get(header.start.min(len)..)
        .is_some_and(|rest| rest.starts_with('['));
    ScenarioError::Invalid(Box::new(if is_header { d } else { d.without_snippet() }))
}

#[cfg(test)]
mod tests {
    use herd_seed::spec::{MAX_PARAMS, SeedUrl, SeedVar, TokenHash};

    use super::*;
    use crate::scenario::{Diagnostic, Scenario};

    const BASE: &str = r#"[target]
url = "http://127.0.0.1:8080"

[[op]]
name = "state"
path = "/state"
headers = { authorization = "Bearer token-{account}" }

[[step]]
players = 5
duration = "2s"

[seed]
accounts = 90
guests = 10
account = "INSERT INTO accounts (id, name, kind) VALUES ({id}, {name}, {kind})"
session = "INSERT INTO sessions (token_hash, account_id) VALUES ({token_hash}, {id})"
"#;

    fn diag(src: &str, sets: &[&str]) -> Diagnostic {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        match Scenario::parse("dir/s.toml", src, &sets) {
            Ok(_) => panic!("expected an error"),
            Err(ScenarioError::Invalid(d)) => *d,
            Err(e) => panic!("expected a diagnostic, got {e}"),
        }
    }

    #[test]
    fn a_seed_section_compiles_with_its_defaults() {
        let s = Scenario::parse("dir/s.toml", BASE, &[]).unwrap();
        let seed = s.seed.unwrap();
        assert_eq!(seed.url, SeedUrl::Env("HERD_SEED_URL".into()));
        assert_eq!((seed.accounts, seed.guests, seed.batch), (90, 10, 1000));
        assert_eq!(seed.token_hash, TokenHash::Sha256Hex);
        // Players spread over every seeded account unless told otherwise.
        assert_eq!(s.player.accounts, Some(100));
        let [acc, ses] = &seed.inserts[..] else {
            panic!("two templates")
        };
        assert_eq!(
            (acc.table.as_str(), acc.key_column.as_str()),
            ("accounts", "id")
        );
        assert_eq!(acc.key, SeedVar::Id);
        assert_eq!(
            acc.sql(2),
            "INSERT INTO accounts (id, name, kind) VALUES ($1, $2, $3), ($4, $5, $6)"
        );
        assert_eq!(
            acc.params().collect::<Vec<_>>(),
            [SeedVar::Id, SeedVar::Name, SeedVar::Kind]
        );
        assert_eq!(ses.key, SeedVar::TokenHash);
        assert_eq!(ses.rows_per_statement(), MAX_PARAMS / 2);
    }

    #[test]
    fn rows_carry_the_players_account_numbers_and_the_targets_hash() {
        let s = Scenario::parse("s.toml", BASE, &[]).unwrap();
        let seed = s.seed.unwrap();
        let first = seed.row(0);
        assert_eq!((first.account, first.id, first.guest), (0, 1, false));
        assert_eq!(
            (
                first.name.as_str(),
                first.token.as_str(),
                first.kind.as_str()
            ),
            ("player-0", "token-0", "durable")
        );
        // sha256("token-0"), computed independently (Python's hashlib).
        assert_eq!(
            first.token_hash,
            "6c02cf2083469e72758a38be0b7c6eabe9bc58580774daf6b2cf4b6ea1469722"
        );
        let guest = seed.row(90);
        assert_eq!(
            (guest.guest, guest.kind.as_str(), guest.id),
            (true, "guest", 91)
        );
        assert_eq!(TokenHash::Plain.apply("t-1"), "t-1");
    }

    #[test]
    fn expressions_around_variables_and_explicit_keys() {
        let src = BASE
            .replace(
                "session = \"INSERT INTO sessions (token_hash, account_id) VALUES ({token_hash}, {id})\"",
                "session = \"INSERT INTO auth.sessions (account_id, token_hash, created) VALUES (CAST({id} AS BIGINT), {token_hash}, now())\"\nsession_key = \"token_hash\"\nurl_file = \"secrets/seed-url\"\ntoken = \"tok_{id}\"\ntoken_hash = \"plain\"",
            );
        let s = Scenario::parse("dir/s.toml", &src, &[]).unwrap();
        let seed = s.seed.unwrap();
        assert_eq!(seed.url, SeedUrl::File("dir/secrets/seed-url".into()));
        assert_eq!(seed.row(4).token_hash, "tok_5");
        let ses = &seed.inserts[1];
        assert_eq!(
            ses.sql(1),
            "INSERT INTO auth.sessions (account_id, token_hash, created) VALUES (CAST($1 AS BIGINT), $2, now())"
        );
        assert_eq!(
            (ses.key_column.as_str(), ses.key),
            ("token_hash", SeedVar::TokenHash)
        );
        // Braces and commas inside quotes or parentheses are SQL, not variables or columns.
        let src = BASE.replace(
            "VALUES ({id}, {name}, {kind})",
            "VALUES ({id}, coalesce({name}, 'a,b'), '{\\\"x\\\": 1}')",
        );
        let s = Scenario::parse("s.toml", &src, &[]).unwrap();
        assert_eq!(
            s.seed.unwrap().inserts[0].sql(1),
            "INSERT INTO accounts (id, name, kind) VALUES ($1, coalesce($2, 'a,b'), '{\"x\": 1}')"
        );
    }

    #[test]
    fn templates_herd_cannot_track_are_refused_with_the_key() {
        let cases = [
            (
                "INSERT INTO accounts (id) VALUES ({id}) ON CONFLICT DO NOTHING",
                "`ON CONFLICT DO NOTHING` after the row",
            ),
            ("UPDATE accounts SET x = 1", "herd inserts rows"),
            (
                "INSERT INTO accounts (id, name) VALUES ({id}, 'p-{account}')",
                "`{account}` inside quotes",
            ),
            (
                "INSERT INTO accounts (id) VALUES ({uid})",
                "valid: {account}, {id}",
            ),
            (
                "INSERT INTO accounts (id, name) VALUES ({id})",
                "2 columns but 1 values",
            ),
            (
                "INSERT INTO accounts (kind, id) VALUES ({kind}, {id})",
                "set account_key",
            ),
            (
                "INSERT INTO accounts (id) VALUES ({id} + 1)",
                "exactly one per-account",
            ),
        ];
        for (sql, want) in cases {
            let line = format!("account = \"{sql}\"");
            let src = BASE.replace(
                "account = \"INSERT INTO accounts (id, name, kind) VALUES ({id}, {name}, {kind})\"",
                &line,
            );
            let d = diag(&src, &[]);
            assert_eq!(d.key, "seed.account", "{sql}");
            assert_eq!(d.line, 16, "{sql}");
            assert!(d.message.contains(want), "{sql}: {}", d.message);
        }
        let d = diag(
            &BASE.replace("guests = 10", "guests = 10\naccount_key = \"nme\""),
            &[],
        );
        assert_eq!(d.key, "seed.account_key");
        assert!(d.message.contains("id, name, kind"), "{}", d.message);
    }

    #[test]
    fn bad_values_point_at_their_key() {
        let d = diag(
            &BASE.replace("guests = 10", "guests = 10\ntoken_hash = \"md5\""),
            &[],
        );
        assert_eq!(d.key, "seed.token_hash");
        assert_eq!(
            d.message,
            "unknown value `md5`, expected `sha256_hex` or `plain`"
        );
        let d = diag(
            &BASE.replace("guests = 10", "guests = 10\ntoken = \"static\""),
            &[],
        );
        assert_eq!(d.key, "seed.token");
        assert!(
            d.message.contains("must contain {account} or {id}"),
            "{}",
            d.message
        );
        let d = diag(&BASE.replace("accounts = 90", "acounts = 90"), &[]);
        assert_eq!(d.key, "seed.acounts");
        assert!(
            d.message.contains("valid keys are `url_env`"),
            "{}",
            d.message
        );
        let d = diag(BASE, &["seed.batch=0"]);
        assert_eq!(d.key, "seed.batch");
        let d = diag(
            &BASE.replace(
                "duration = \"2s\"",
                "duration = \"2s\"\n[player]\naccounts = 101",
            ),
            &[],
        );
        assert_eq!(d.key, "player.accounts");
        assert!(d.message.contains("seeds 100"), "{}", d.message);
        let d = diag(
            &BASE.replace("guests = 10", "guests = 10\nurl_env = \"SEED URL\""),
            &[],
        );
        assert_eq!(d.key, "seed.url_env");
        let d = diag(
            &BASE.replace(
                "guests = 10",
                "guests = 10\nurl_env = \"A\"\nurl_file = \"f\"",
            ),
            &[],
        );
        assert_eq!(d.key, "seed.url_file");
    }

    #[test]
    fn a_url_in_the_scenario_is_refused_without_echoing_its_password() {
        for line in [
            "url = \"postgres://herd:s3cret@db:5432/game\"",
            "url_env = \"postgres://herd:s3cret@db:5432/game\"",
            "account_kind = \"postgres://herd:s3cret@db:5432/game\"",
        ] {
            let src = BASE.replace("guests = 10", &format!("guests = 10\n{line}"));
            let d = diag(&src, &[]);
            let shown = d.to_string();
            assert!(!shown.contains("s3cret"), "{shown}");
            // It points at the [seed] header, not at the line holding the secret.
            assert_eq!((d.line, d.column), (13, 1), "{shown}");
            assert!(d.key.starts_with("seed."), "{shown}");
            assert!(shown.contains("never goes in the scenario"), "{shown}");
        }
        // Dotted keys and inline tables put the secret on the line the table starts on:
        // no snippet of it is shown then.
        for src in [
            format!(
                "seed.url = \"postgres://herd:s3cret@db/game\"\nseed.accounts = 1\nseed.account = \"x\"\n{}",
                &BASE[..BASE.find("[seed]").unwrap()]
            ),
            format!(
                "seed = {{ url = \"postgres://herd:s3cret@db/game\", accounts = 1, account = \"x\" }}\n{}",
                &BASE[..BASE.find("[seed]").unwrap()]
            ),
        ] {
            let shown = Scenario::parse("s.toml", &src, &[])
                .unwrap_err()
                .to_string();
            assert!(!shown.contains("s3cret"), "{shown}");
            assert!(
                shown.contains("seed.url: the database URL never goes"),
                "{shown}"
            );
        }
        let sets = ["seed.url=postgres://herd:s3cret@db/game".to_owned()];
        let e = Scenario::parse("s.toml", BASE, &sets).unwrap_err();
        let shown = e.to_string();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("--set seed.url=postgres://herd:***@db/game"),
            "{shown}"
        );
    }
}

#[cfg(test)]
mod doc_tests {
    use crate::scenario::Scenario;

    #[test]
    fn every_full_scenario_in_docs_seed_md_parses() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/seed.md");
        let doc = std::fs::read_to_string(path).unwrap();
        let mut full = 0;
        for (i, block) in doc.split("```toml\n").skip(1).enumerate() {
            let block = block.split("```").next().unwrap();
            if block.contains("[target]") {
                let s = Scenario::parse(&format!("docs/seed.md block {i}"), block, &[])
                    .unwrap_or_else(|e| panic!("{e}"));
                assert!(s.seed.is_some());
                full += 1;
            } else {
                // The key listing is a [seed] section that fits any scenario.
                let with = format!(
                    "[target]\nurl = \"http://127.0.0.1:1\"\n[[op]]\nname = \"a\"\npath = \"/\"\n[[step]]\nplayers = 1\nduration = \"1s\"\n{block}"
                );
                Scenario::parse(&format!("docs/seed.md block {i}"), &with, &[])
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
        assert!(full >= 1, "no full scenario in docs/seed.md");
    }
}
