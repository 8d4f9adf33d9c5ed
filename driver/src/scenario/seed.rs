//! `[seed]`: the accounts and sessions herd inserts into the target's own database before a
//! run, and removes after it.
//!
//! This module checks the section and compiles its SQL templates; `herd::seed` executes them.
//! The database URL is never part of the scenario: the section says where to read it (an
//! environment variable or a file), so a scenario can be committed and shared, and a URL with
//! a password written into the file by mistake is refused without being echoed.

use std::{ops::Range, path::PathBuf};

use serde::Deserialize;
use sha2::{Digest as _, Sha256};
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

/// The environment variable read when `[seed]` names neither `url_env` nor `url_file`.
pub const DEFAULT_URL_ENV: &str = "HERD_SEED_URL";

/// Bind parameters per statement: under SQLite's default limit (32 766) and PostgreSQL's
/// (65 535), so one multi-row `INSERT` never exceeds either.
pub const MAX_PARAMS: usize = 30_000;

/// Where the seed database's URL comes from; the URL itself never appears in a scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeedUrl {
    /// An environment variable holding the URL.
    Env(String),
    /// A file whose first line is the URL (relative paths are resolved against the
    /// scenario file's directory).
    File(PathBuf),
}

impl std::fmt::Display for SeedUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Env(v) => write!(f, "the environment variable {v}"),
            Self::File(p) => write!(f, "the file {}", p.display()),
        }
    }
}

/// How the target stores a session token, so herd writes what the target will look up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenHash {
    /// Lowercase hex of the SHA-256 of the token's bytes (64 characters).
    Sha256Hex,
    /// The token itself.
    Plain,
}

impl TokenHash {
    /// What the target stores for `token`.
    pub fn apply(self, token: &str) -> String {
        match self {
            Self::Plain => token.to_owned(),
            Self::Sha256Hex => {
                let digest = Sha256::digest(token.as_bytes());
                let mut hex = String::with_capacity(64);
                for b in digest {
                    use std::fmt::Write as _;
                    let _ = write!(hex, "{b:02x}");
                }
                hex
            }
        }
    }

    /// The name as written in the scenario.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha256Hex => "sha256_hex",
            Self::Plain => "plain",
        }
    }
}

/// A per-account value the SQL templates can bind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedVar {
    /// The account number `k` (0-based): the same `{account}` the players use
    /// (player `p` uses account `p % player.accounts`).
    Account,
    /// `id_start + k`.
    Id,
    /// `account_kind` for the first `accounts`, `guest_kind` for the `guests` after them.
    Kind,
    /// The `name` pattern, filled in.
    Name,
    /// The `token` pattern, filled in: what the players send.
    Token,
    /// `token_hash` applied to the token: what the target stores.
    TokenHash,
}

const VARS: [(&str, SeedVar); 6] = [
    ("account", SeedVar::Account),
    ("id", SeedVar::Id),
    ("kind", SeedVar::Kind),
    ("name", SeedVar::Name),
    ("token", SeedVar::Token),
    ("token_hash", SeedVar::TokenHash),
];

fn var_list() -> String {
    VARS.iter()
        .map(|(n, _)| format!("{{{n}}}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl SeedVar {
    /// The variable's name in templates.
    pub fn name(self) -> &'static str {
        VARS.iter().find(|(_, v)| *v == self).map_or("", |(n, _)| n)
    }

    /// Integers are bound as 64-bit integers, everything else as text.
    pub fn is_integer(self) -> bool {
        matches!(self, Self::Account | Self::Id)
    }
}

/// One bound value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedValue<'a> {
    /// A 64-bit integer.
    Int(i64),
    /// Text.
    Text(&'a str),
}

/// The values of one account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedRow {
    /// `{account}`.
    pub account: i64,
    /// `{id}`.
    pub id: i64,
    /// True for the guests, which come after the durable accounts.
    pub guest: bool,
    /// `{kind}`.
    pub kind: String,
    /// `{name}`.
    pub name: String,
    /// `{token}`.
    pub token: String,
    /// `{token_hash}`.
    pub token_hash: String,
}

impl SeedRow {
    /// The value of `v` for this account.
    pub fn get(&self, v: SeedVar) -> SeedValue<'_> {
        match v {
            SeedVar::Account => SeedValue::Int(self.account),
            SeedVar::Id => SeedValue::Int(self.id),
            SeedVar::Kind => SeedValue::Text(&self.kind),
            SeedVar::Name => SeedValue::Text(&self.name),
            SeedVar::Token => SeedValue::Text(&self.token),
            SeedVar::TokenHash => SeedValue::Text(&self.token_hash),
        }
    }
}

/// A text pattern over `{account}` and `{id}`, e.g. `token-{account}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    pieces: Vec<Piece>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Var(SeedVar),
}

impl Pattern {
    fn parse(src: &str) -> Result<Self, String> {
        let mut pieces = Vec::new();
        let mut rest = src;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                pieces.push(Piece::Text(rest[..open].to_owned()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| format!("`{src}`: `{{` without `}}`"))?
                + open;
            let name = &rest[open + 1..close];
            let var = match name {
                "account" => SeedVar::Account,
                "id" => SeedVar::Id,
                other => {
                    return Err(format!(
                        "`{{{other}}}` is not available here: a pattern uses {{account}} and {{id}}"
                    ));
                }
            };
            pieces.push(Piece::Var(var));
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_owned()));
        }
        if !pieces.iter().any(|p| matches!(p, Piece::Var(_))) {
            return Err(format!(
                "`{src}` must contain {{account}} or {{id}}, or every account would get the same value"
            ));
        }
        Ok(Self { pieces })
    }

    /// The pattern filled in for one account.
    pub fn render(&self, account: i64, id: i64) -> String {
        let mut s = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => s.push_str(t),
                Piece::Var(SeedVar::Id) => s.push_str(&id.to_string()),
                Piece::Var(_) => s.push_str(&account.to_string()),
            }
        }
        s
    }
}

/// One value expression of an `INSERT` template: SQL text and bound variables.
#[derive(Debug, Clone, PartialEq, Eq)]
enum SqlPiece {
    Text(String),
    Param(SeedVar),
}

/// A checked `INSERT INTO table (columns) VALUES (values)` template, one row per account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insert {
    /// Which template: `account` or `session`.
    pub template: &'static str,
    /// The table, as written (`name` or `schema.name`).
    pub table: String,
    /// The columns, in order.
    pub columns: Vec<String>,
    values: Vec<Vec<SqlPiece>>,
    /// The column that identifies a row herd inserted; cleanup deletes by it.
    pub key_column: String,
    /// The variable whose value the key column receives.
    pub key: SeedVar,
}

impl Insert {
    /// The variables bound for one row, in parameter order.
    pub fn params(&self) -> impl Iterator<Item = SeedVar> + '_ {
        self.values.iter().flatten().filter_map(|p| match p {
            SqlPiece::Param(v) => Some(*v),
            SqlPiece::Text(_) => None,
        })
    }

    /// How many rows one statement may carry within [`MAX_PARAMS`].
    pub fn rows_per_statement(&self) -> usize {
        (MAX_PARAMS / self.params().count().max(1)).max(1)
    }

    /// The statement inserting `rows` rows: `$1, $2, …` numbered across the rows (both
    /// SQLite and PostgreSQL accept `$N`).
    pub fn sql(&self, rows: usize) -> String {
        let mut s = format!(
            "INSERT INTO {} ({}) VALUES ",
            self.table,
            self.columns.join(", ")
        );
        let mut n = 0;
        for r in 0..rows {
            if r > 0 {
                s.push_str(", ");
            }
            s.push('(');
            for (i, value) in self.values.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                for piece in value {
                    match piece {
                        SqlPiece::Text(t) => s.push_str(t),
                        SqlPiece::Param(_) => {
                            n += 1;
                            s.push('$');
                            s.push_str(&n.to_string());
                        }
                    }
                }
            }
            s.push(')');
        }
        s
    }
}

/// A checked `[seed]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedSpec {
    /// Where the database URL comes from.
    pub url: SeedUrl,
    /// Durable accounts: account numbers `0 .. accounts`.
    pub accounts: u64,
    /// Guests: account numbers `accounts .. accounts + guests`.
    pub guests: u64,
    /// `{id}` of account 0.
    pub id_start: i64,
    /// `{name}`.
    pub name: Pattern,
    /// `{kind}` of a durable account.
    pub account_kind: String,
    /// `{kind}` of a guest.
    pub guest_kind: String,
    /// `{token}`: what the players send.
    pub token: Pattern,
    /// How the target stores the token.
    pub token_hash: TokenHash,
    /// The templates, in insertion order (`account`, then `session` if given); cleanup runs
    /// them in reverse.
    pub inserts: Vec<Insert>,
    /// Accounts per transaction.
    pub batch: usize,
}

impl SeedSpec {
    /// Accounts and guests together.
    pub fn total(&self) -> u64 {
        self.accounts + self.guests
    }

    /// The values of account `k` (`0 .. total()`).
    pub fn row(&self, k: u64) -> SeedRow {
        let account = k as i64;
        let id = self.id_start + account;
        let guest = k >= self.accounts;
        let token = self.token.render(account, id);
        SeedRow {
            account,
            id,
            guest,
            kind: if guest {
                self.guest_kind.clone()
            } else {
                self.account_kind.clone()
            },
            name: self.name.render(account, id),
            token_hash: self.token_hash.apply(&token),
            token,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSeed {
    url_env: Option<String>,
    url_file: Option<String>,
    accounts: u64,
    #[serde(default)]
    guests: u64,
    #[serde(default = "default_id_start")]
    id_start: i64,
    name: Option<String>,
    account_kind: Option<String>,
    guest_kind: Option<String>,
    token: Option<String>,
    token_hash: Option<TokenHash>,
    account: String,
    account_key: Option<String>,
    session: Option<String>,
    session_key: Option<String>,
    batch: Option<usize>,
}

fn default_id_start() -> i64 {
    1
}

const DEFAULT_BATCH: usize = 1_000;
const MAX_BATCH: usize = 100_000;

fn here(k: &str) -> Vec<Seg> {
    vec![key("seed"), key(k)]
}

fn is_env_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Checks `[seed]`; `file` is the scenario file, against whose directory `url_file` resolves.
pub(super) fn compile(file: &str, raw: RawSeed) -> Result<SeedSpec, Invalid> {
    let url = match (raw.url_env, raw.url_file) {
        (Some(_), Some(_)) => {
            return Err(at(&here("url_file"), "set url_env or url_file, not both"));
        }
        (Some(v), None) if is_env_name(&v) => SeedUrl::Env(v),
        (Some(v), None) => {
            return Err(at(
                &here("url_env"),
                format!(
                    "`{v}` is not an environment variable name: url_env names the variable that holds the URL, e.g. {DEFAULT_URL_ENV}"
                ),
            ));
        }
        (None, Some(f)) if f.trim().is_empty() => {
            return Err(at(&here("url_file"), "must name a file"));
        }
        (None, Some(f)) => {
            let dir = std::path::Path::new(file)
                .parent()
                .unwrap_or(std::path::Path::new(""));
            SeedUrl::File(dir.join(f))
        }
        (None, None) => SeedUrl::Env(DEFAULT_URL_ENV.to_owned()),
    };
    let total = raw.accounts.saturating_add(raw.guests);
    if total == 0 {
        return Err(at(
            &here("accounts"),
            "seed at least one account: accounts + guests must be 1 or more",
        ));
    }
    if i64::try_from(total)
        .ok()
        .and_then(|t| raw.id_start.checked_add(t))
        .is_none()
    {
        return Err(at(
            &here("id_start"),
            "id_start + accounts + guests does not fit a 64-bit integer",
        ));
    }
    let pattern = |src: Option<String>, default: &str, k: &str| {
        Pattern::parse(src.as_deref().unwrap_or(default)).map_err(|m| at(&here(k), m))
    };
    let name = pattern(raw.name, "player-{account}", "name")?;
    let token = pattern(raw.token, "token-{account}", "token")?;
    let batch = raw.batch.unwrap_or(DEFAULT_BATCH);
    if !(1..=MAX_BATCH).contains(&batch) {
        return Err(at(
            &here("batch"),
            format!(
                "{batch} accounts per transaction: write 1 to {MAX_BATCH} (default {DEFAULT_BATCH})"
            ),
        ));
    }
    let mut inserts = vec![parse_insert(
        "account",
        &raw.account,
        raw.account_key.as_deref(),
    )?];
    match (raw.session, raw.session_key) {
        (Some(sql), key) => inserts.push(parse_insert("session", &sql, key.as_deref())?),
        (None, Some(_)) => {
            return Err(at(
                &here("session_key"),
                "session_key needs a session template",
            ));
        }
        (None, None) => {}
    }
    Ok(SeedSpec {
        url,
        accounts: raw.accounts,
        guests: raw.guests,
        id_start: raw.id_start,
        name,
        account_kind: raw.account_kind.unwrap_or_else(|| "durable".into()),
        guest_kind: raw.guest_kind.unwrap_or_else(|| "guest".into()),
        token,
        token_hash: raw.token_hash.unwrap_or(TokenHash::Sha256Hex),
        inserts,
        batch,
    })
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

fn is_sql_ident(s: &str) -> bool {
    !s.is_empty() && s.split('.').count() <= 2 && s.split('.').all(super::is_ident)
}

const SHAPE: &str = "write INSERT INTO table (column, ...) VALUES ({variable}, ...)";

/// Parses `INSERT INTO table (c, ...) VALUES (e, ...)`. Anything after the row (`ON
/// CONFLICT`, `RETURNING`, a second statement) is refused: a row that is not inserted, or
/// one inserted by a clause herd cannot see, could not be tracked and removed.
fn parse_insert(
    template: &'static str,
    sql: &str,
    key_column: Option<&str>,
) -> Result<Insert, Invalid> {
    let path = here(template);
    let err = |m: String| at(&path, m);
    let s = sql.trim();
    let s = s.strip_suffix(';').unwrap_or(s).trim_end();
    let mut words = s.splitn(3, char::is_whitespace);
    let (insert, into) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    if !insert.eq_ignore_ascii_case("insert") || !into.eq_ignore_ascii_case("into") {
        return Err(err(format!("herd inserts rows: {SHAPE}")));
    }
    let rest = words.next().unwrap_or("").trim_start();
    let open = rest
        .find('(')
        .ok_or_else(|| err(format!("no column list: {SHAPE}")))?;
    let table = rest[..open].trim();
    if !is_sql_ident(table) {
        return Err(err(format!(
            "`{table}` is not a table name herd can track: use letters, digits and _ (optionally schema.table)"
        )));
    }
    let close = rest[open..]
        .find(')')
        .ok_or_else(|| err(format!("the column list has no `)`: {SHAPE}")))?
        + open;
    let columns: Vec<String> = rest[open + 1..close]
        .split(',')
        .map(|c| c.trim().to_owned())
        .collect();
    if let Some(bad) = columns.iter().find(|c| !super::is_ident(c)) {
        return Err(err(format!(
            "`{bad}` is not a plain column name (letters, digits and _)"
        )));
    }
    let after = rest[close + 1..].trim_start();
    let values_kw = after.get(..6).unwrap_or("");
    if !values_kw.eq_ignore_ascii_case("values") {
        return Err(err(format!("expected VALUES after the columns: {SHAPE}")));
    }
    let tuple = after[6..].trim_start();
    if !tuple.starts_with('(') {
        return Err(err(format!("expected `(` after VALUES: {SHAPE}")));
    }
    let (exprs, tail) = split_tuple(tuple).map_err(&err)?;
    if !tail.trim().is_empty() {
        return Err(err(format!(
            "`{}` after the row: herd inserts exactly one plain row per account, so every row it adds can be tracked and removed; drop the clause",
            tail.trim()
        )));
    }
    if exprs.len() != columns.len() {
        return Err(err(format!(
            "{} columns but {} values",
            columns.len(),
            exprs.len()
        )));
    }
    let mut values = Vec::new();
    for e in &exprs {
        values.push(parse_expr(e).map_err(&err)?);
    }
    let key_column = key_column.unwrap_or(&columns[0]).to_owned();
    let key_path = here(&format!("{template}_key"));
    let Some(ki) = columns.iter().position(|c| *c == key_column) else {
        return Err(at(
            &key_path,
            format!(
                "`{key_column}` is not one of the template's columns: {}",
                columns.join(", ")
            ),
        ));
    };
    let key = match values[ki].as_slice() {
        [SqlPiece::Param(v)] if *v != SeedVar::Kind => *v,
        _ => {
            let which = if key_column == columns[0] {
                format!("`{key_column}` (the first column, the default key)")
            } else {
                format!("`{key_column}`")
            };
            return Err(at(
                if key_column == columns[0] {
                    &path
                } else {
                    &key_path
                },
                format!(
                    "{which} must receive exactly one per-account variable ({{id}}, {{account}}, {{name}}, {{token}} or {{token_hash}}) so herd knows which rows it added; set {template}_key to such a column"
                ),
            ));
        }
    };
    Ok(Insert {
        template,
        table: table.to_owned(),
        columns,
        values,
        key_column,
        key,
    })
}

/// Splits `(a, f(b, c), 'x,y') rest` into its top-level expressions and `rest`.
fn split_tuple(s: &str) -> Result<(Vec<String>, &str), String> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut exprs = Vec::new();
    let mut start = 1;
    for (i, c) in s.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => {
                depth -= 1;
                if depth == 0 {
                    exprs.push(s[start..i].trim().to_owned());
                    return Ok((exprs, &s[i + 1..]));
                }
            }
            (None, ',') if depth == 1 => {
                exprs.push(s[start..i].trim().to_owned());
                start = i + 1;
            }
            _ => {}
        }
    }
    Err(format!("the VALUES row has no closing `)`: {SHAPE}"))
}

/// Splits one value expression into SQL text and `{variable}` parameters.
fn parse_expr(e: &str) -> Result<Vec<SqlPiece>, String> {
    if e.is_empty() {
        return Err(format!("an empty value: {SHAPE}"));
    }
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut quote: Option<char> = None;
    let mut chars = e.char_indices();
    while let Some((i, c)) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                quote = None;
                text.push(c);
            }
            (Some(_), '{') => {
                // Inside quotes a variable would be spliced into the SQL text, not bound.
                if let Some(name) = e[i + 1..].split('}').next()
                    && VARS.iter().any(|(n, _)| *n == name)
                {
                    return Err(format!(
                        "`{{{name}}}` inside quotes: write it bare ({{{name}}}, not '{{{name}}}'); herd binds it as a parameter, never splices it into the SQL"
                    ));
                }
                text.push(c);
            }
            (Some(_), _) => text.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                text.push(c);
            }
            (None, '{') => {
                let close = e[i..]
                    .find('}')
                    .ok_or_else(|| format!("`{e}`: `{{` without `}}`"))?
                    + i;
                let name = &e[i + 1..close];
                let var = VARS
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| *v)
                    .ok_or_else(|| {
                        format!("`{{{name}}}` is not a seed variable; valid: {}", var_list())
                    })?;
                if !text.is_empty() {
                    pieces.push(SqlPiece::Text(std::mem::take(&mut text)));
                }
                pieces.push(SqlPiece::Param(var));
                for _ in i..close {
                    chars.next();
                }
            }
            (None, _) => text.push(c),
        }
    }
    if !text.is_empty() {
        pieces.push(SqlPiece::Text(text));
    }
    Ok(pieces)
}

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

fn looks_like_url(s: &str) -> bool {
    let s = s.trim().to_ascii_lowercase();
    s.contains("://") || s.starts_with("sqlite:") || s.starts_with("postgres")
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
