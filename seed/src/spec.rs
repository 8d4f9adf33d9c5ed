//! The `[seed]` section, checked: where the database URL comes from, the accounts and guests,
//! the name and token patterns, and the `INSERT` templates compiled into multi-row statements
//! with bound parameters. [`compile`] turns the section's raw keys into a [`SeedSpec`];
//! the scenario loader (herd-driver) places its [`SpecError`]s at their file, line and
//! column. Executing a spec is [`crate::db`]'s job.

use std::path::PathBuf;

use serde::Deserialize;
use sha2::{Digest as _, Sha256};

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

/// The `[seed]` keys as written, before [`compile`] checks them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSeed {
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

/// A problem in `[seed]`: the key under `[seed]` it is about, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("seed.{key}: {message}")]
pub struct SpecError {
    /// The key under `[seed]`, e.g. `batch` or `account_key`.
    pub key: String,
    /// What is wrong and what to write instead.
    pub message: String,
}

fn at(key: &str, message: impl Into<String>) -> SpecError {
    SpecError {
        key: key.to_owned(),
        message: message.into(),
    }
}

/// ASCII letters, digits and `_`, not starting with a digit: what a SQL table or column name,
/// an environment variable's name and a scenario variable's name may be.
pub fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// Checks `[seed]`; `file` is the scenario file, against whose directory `url_file` resolves.
pub fn compile(file: &str, raw: RawSeed) -> Result<SeedSpec, SpecError> {
    let url = match (raw.url_env, raw.url_file) {
        (Some(_), Some(_)) => {
            return Err(at("url_file", "set url_env or url_file, not both"));
        }
        (Some(v), None) if is_ident(&v) => SeedUrl::Env(v),
        (Some(v), None) => {
            return Err(at(
                "url_env",
                format!(
                    "`{v}` is not an environment variable name: url_env names the variable that holds the URL, e.g. {DEFAULT_URL_ENV}"
                ),
            ));
        }
        (None, Some(f)) if f.trim().is_empty() => {
            return Err(at("url_file", "must name a file"));
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
            "accounts",
            "seed at least one account: accounts + guests must be 1 or more",
        ));
    }
    if i64::try_from(total)
        .ok()
        .and_then(|t| raw.id_start.checked_add(t))
        .is_none()
    {
        return Err(at(
            "id_start",
            "id_start + accounts + guests does not fit a 64-bit integer",
        ));
    }
    let pattern = |src: Option<String>, default: &str, k: &str| {
        Pattern::parse(src.as_deref().unwrap_or(default)).map_err(|m| at(k, m))
    };
    let name = pattern(raw.name, "player-{account}", "name")?;
    let token = pattern(raw.token, "token-{account}", "token")?;
    let batch = raw.batch.unwrap_or(DEFAULT_BATCH);
    if !(1..=MAX_BATCH).contains(&batch) {
        return Err(at(
            "batch",
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
            return Err(at("session_key", "session_key needs a session template"));
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

fn is_sql_ident(s: &str) -> bool {
    !s.is_empty() && s.split('.').count() <= 2 && s.split('.').all(is_ident)
}

const SHAPE: &str = "write INSERT INTO table (column, ...) VALUES ({variable}, ...)";

/// Parses `INSERT INTO table (c, ...) VALUES (e, ...)`. Anything after the row (`ON
/// CONFLICT`, `RETURNING`, a second statement) is refused: a row that is not inserted, or
/// one inserted by a clause herd cannot see, could not be tracked and removed.
fn parse_insert(
    template: &'static str,
    sql: &str,
    key_column: Option<&str>,
) -> Result<Insert, SpecError> {
    let path = template;
    let err = |m: String| at(path, m);
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
    if let Some(bad) = columns.iter().find(|c| !is_ident(c)) {
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
    let key_path = format!("{template}_key");
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
                    path
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
