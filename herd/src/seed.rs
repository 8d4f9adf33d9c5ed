//! Seeding: inserts a scenario's `[seed]` accounts and sessions into the target's own database
//! (PostgreSQL or SQLite) and removes exactly those rows afterwards.
//!
//! Every row herd adds is recorded, in the same transaction, in `herd_seeded` (seeding id,
//! template step, table, key column, key value) inside the target database, and every seeding
//! in `herd_seedings`. Cleanup deletes, per table, the rows whose key herd recorded — nothing
//! else — then its own bookkeeping, and drops both tables once no seeding is left, so the
//! database ends as herd found it. Before a batch is inserted herd checks that none of its
//! keys exists yet, so a key column that is not unique can never make cleanup delete a row
//! herd did not add.
//!
//! The database URL comes from the environment or a file (`[seed] url_env` / `url_file`) and
//! is never printed: messages show the host and the URL with its password replaced by `***`,
//! and every database error is scrubbed of the password before it is shown.

use std::{
    fmt,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, anyhow, bail};
use herd_driver::scenario::seed::{SeedRow, SeedSpec, SeedUrl, SeedValue, redact};
use sqlx::{
    AnyConnection, AnyPool, AssertSqlSafe, Connection as _, Row as _,
    any::{AnyArguments, AnyPoolOptions},
    query::Query,
};

/// The tracking tables, created in the target database by the first seeding and dropped by
/// the cleanup that empties them. Plain SQL both SQLite and PostgreSQL accept.
const TRACKING: [&str; 3] = [
    "CREATE TABLE IF NOT EXISTS herd_seedings (id BIGINT PRIMARY KEY, scenario TEXT NOT NULL, \
     started_unix_ms BIGINT NOT NULL, accounts BIGINT NOT NULL, guests BIGINT NOT NULL, \
     status TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS herd_seeded (seeding BIGINT NOT NULL, step BIGINT NOT NULL, \
     tbl TEXT NOT NULL, key_column TEXT NOT NULL, key_type TEXT NOT NULL, key_value TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS herd_seeded_by_seeding ON herd_seeded (seeding, step)",
];

/// Bound on reaching the database: an unreachable one fails in seconds, before any load.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A seed database URL read from where `[seed]` says. Neither `Debug` nor `Display` shows it.
struct Secret {
    url: String,
    /// The password as written in the URL and percent-decoded, to scrub from messages.
    passwords: Vec<String>,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact(&self.url))
    }
}

impl Secret {
    fn new(url: String) -> Self {
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
    fn scrub(&self, text: &str) -> String {
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

/// Reads the URL from where `[seed]` says; errors name the variable or file, never a value.
fn read_url(from: &SeedUrl) -> Result<Secret> {
    let url = match from {
        SeedUrl::Env(var) => match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => v.trim().to_owned(),
            Ok(_) | Err(std::env::VarError::NotPresent) => bail!(
                "{var} is not set: the scenario's [seed] reads the seed database's URL from it; \
                 export {var}=postgres://USER@HOST/DB (password in the URL, in PGPASSWORD or \
                 ~/.pgpass) or {var}=sqlite:PATH"
            ),
            Err(std::env::VarError::NotUnicode(_)) => {
                bail!("{var} is not valid UTF-8; it must hold the seed database's URL")
            }
        },
        SeedUrl::File(path) => {
            let text = std::fs::read_to_string(path).with_context(|| {
                format!(
                    "reading the seed database's URL from {} ([seed] url_file)",
                    path.display()
                )
            })?;
            text.lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_owned)
                .with_context(|| {
                    format!(
                        "{} holds no URL: write postgres://USER@HOST/DB or sqlite:PATH on its first line",
                        path.display()
                    )
                })?
        }
    };
    let secret = Secret::new(url);
    let lower = secret.url.to_ascii_lowercase();
    if !(lower.starts_with("postgres://")
        || lower.starts_with("postgresql://")
        || lower.starts_with("sqlite:"))
    {
        bail!(
            "the seed database URL from {from} ({}) is neither postgres://USER@HOST/DB nor sqlite:PATH",
            secret.scrub(&secret.url)
        );
    }
    Ok(secret)
}

/// Where the database is, for messages: `host:port` for PostgreSQL, the file for SQLite.
fn host_of(url: &str) -> String {
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

/// Rows per table, in template order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRows {
    /// The table.
    pub table: String,
    /// Rows inserted or deleted.
    pub rows: u64,
}

/// What a seeding inserted.
#[derive(Debug, Clone)]
pub struct Seeded {
    /// The seeding's id in `herd_seedings`.
    pub id: i64,
    /// Durable accounts.
    pub accounts: u64,
    /// Guests.
    pub guests: u64,
    /// Rows per table.
    pub tables: Vec<TableRows>,
    /// Wall time, tracking included.
    pub elapsed: Duration,
}

impl Seeded {
    /// Rows inserted into the target's tables (herd's own tracking rows not counted).
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|t| t.rows).sum()
    }

    /// One line for the run's output.
    pub fn line(&self, db: &str) -> String {
        let per: Vec<String> = self
            .tables
            .iter()
            .map(|t| format!("{} {}", t.table, t.rows))
            .collect();
        format!(
            "seeding {}: {} accounts + {} guests, {} rows ({}) into {db} in {:.2} s ({:.0} rows/s)",
            self.id,
            self.accounts,
            self.guests,
            self.rows(),
            per.join(", "),
            self.elapsed.as_secs_f64(),
            self.rows() as f64 / self.elapsed.as_secs_f64().max(1e-9)
        )
    }
}

/// What a cleanup removed.
#[derive(Debug, Clone)]
pub struct Cleaned {
    /// The seeding removed.
    pub id: i64,
    /// Rows deleted per table, in deletion order.
    pub tables: Vec<TableRows>,
    /// Rows herd recorded but found already gone (the target deleted them, or a cascade
    /// from an earlier table did).
    pub gone: u64,
    /// Wall time.
    pub elapsed: Duration,
}

impl Cleaned {
    /// Rows deleted from the target's tables.
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|t| t.rows).sum()
    }

    /// One line for the output.
    pub fn line(&self) -> String {
        let per: Vec<String> = self
            .tables
            .iter()
            .map(|t| format!("{} {}", t.table, t.rows))
            .collect();
        let gone = if self.gone > 0 {
            format!("; {} recorded rows were already gone", self.gone)
        } else {
            String::new()
        };
        format!(
            "removed seeding {}: {} rows ({}) in {:.2} s{gone}",
            self.id,
            self.rows(),
            per.join(", "),
            self.elapsed.as_secs_f64()
        )
    }
}

/// One recorded seeding.
#[derive(Debug, Clone)]
pub struct Seeding {
    /// Its id.
    pub id: i64,
    /// The scenario it came from.
    pub scenario: String,
    /// When it started, ms since the epoch.
    pub started_unix_ms: i64,
    /// Durable accounts.
    pub accounts: i64,
    /// Guests.
    pub guests: i64,
    /// `seeding` while (or if interrupted while) inserting, `seeded` once complete.
    pub status: String,
    /// Rows herd recorded for it.
    pub rows: i64,
}

/// A connection to the database a scenario seeds.
pub struct SeedDb {
    pool: AnyPool,
    secret: Secret,
    sqlite: bool,
    /// The URL with its password replaced by `***`.
    shown: String,
    /// Where the URL came from, for messages.
    from: String,
}

impl SeedDb {
    /// Reads the URL from where `spec` says and connects, failing within seconds with the
    /// host (never the password) and what to do when the database cannot be reached.
    pub async fn connect(spec: &SeedSpec) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let secret = read_url(&spec.url)?;
        let shown = secret.scrub(&secret.url);
        let from = spec.url.to_string();
        let sqlite = secret.url.to_ascii_lowercase().starts_with("sqlite:");
        let unreachable = |why: String| {
            let what = if sqlite {
                "; the target's database must exist (herd seeds its tables, it does not create them)"
            } else {
                "; start it, or fix the URL"
            };
            anyhow!(
                "cannot reach the seed database at {} ({shown}, URL from {from}): {}{what}",
                host_of(&secret.url),
                secret.scrub(&why)
            )
        };
        // One plain connection first: a pool retries until its timeout and then reports only
        // that it timed out, while this says why (refused, unknown host, authentication).
        match tokio::time::timeout(CONNECT_TIMEOUT, AnyConnection::connect(&secret.url)).await {
            Ok(Ok(c)) => {
                let _ = c.close().await;
            }
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
            Err(_) => {
                return Err(unreachable(format!(
                    "no answer within {}s",
                    CONNECT_TIMEOUT.as_secs()
                )));
            }
        }
        let pool = AnyPoolOptions::new()
            // One connection: the batches are sequential, and SQLite has one writer anyway.
            .max_connections(1)
            .acquire_timeout(CONNECT_TIMEOUT)
            .connect(&secret.url)
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        Ok(Self {
            pool,
            secret,
            sqlite,
            shown,
            from,
        })
    }

    /// The URL with its password replaced by `***`.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Where the URL came from (`the environment variable HERD_SEED_URL`, …).
    pub fn url_source(&self) -> &str {
        &self.from
    }

    /// Closes the connection.
    pub async fn close(self) {
        self.pool.close().await;
    }

    /// A database error, scrubbed, with what herd was doing.
    fn err(&self, what: impl fmt::Display, e: sqlx::Error) -> anyhow::Error {
        anyhow!(
            "{what} in {}: {}",
            self.shown,
            self.secret.scrub(&e.to_string())
        )
    }

    async fn exec(&self, sql: &'static str) -> Result<u64> {
        sqlx::query(sql)
            .execute(&self.pool)
            .await
            .map(|r| r.rows_affected())
            .map_err(|e| self.err(format_args!("running `{sql}`"), e))
    }

    async fn tracking_exists(&self) -> Result<bool> {
        let sql = if self.sqlite {
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'herd_seedings'"
        } else {
            "SELECT COUNT(*) FROM pg_catalog.pg_tables WHERE tablename = 'herd_seedings' \
             AND schemaname = ANY (current_schemas(false))"
        };
        let n: i64 = sqlx::query(sql)
            .fetch_one(&self.pool)
            .await
            .and_then(|r| r.try_get(0))
            .map_err(|e| self.err("looking for herd's tracking tables", e))?;
        Ok(n > 0)
    }

    /// The seedings this database holds, oldest first.
    pub async fn seedings(&self) -> Result<Vec<Seeding>> {
        if !self.tracking_exists().await? {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(
            "SELECT s.id, s.scenario, s.started_unix_ms, s.accounts, s.guests, s.status, \
             (SELECT COUNT(*) FROM herd_seeded d WHERE d.seeding = s.id) \
             FROM herd_seedings s ORDER BY s.id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.err("listing herd's seedings", e))?;
        rows.iter()
            .map(|r| {
                Ok(Seeding {
                    id: r.try_get(0)?,
                    scenario: r.try_get(1)?,
                    started_unix_ms: r.try_get(2)?,
                    accounts: r.try_get(3)?,
                    guests: r.try_get(4)?,
                    status: r.try_get(5)?,
                    rows: r.try_get(6)?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(|e| self.err("reading herd's seedings", e))
    }

    /// Inserts `spec`'s accounts in batches of `spec.batch`, one transaction each, recording
    /// every row. `stop` is polled between batches; when it says stop, or anything fails,
    /// the rows already committed are removed before the error is returned.
    pub async fn seed(
        &self,
        spec: &SeedSpec,
        scenario: &str,
        stop: &dyn Fn() -> bool,
    ) -> Result<Seeded> {
        let started = Instant::now();
        for sql in TRACKING {
            self.exec(sql).await?;
        }
        let id: i64 = sqlx::query("SELECT COALESCE(MAX(id), 0) + 1 FROM herd_seedings")
            .fetch_one(&self.pool)
            .await
            .and_then(|r| r.try_get(0))
            .map_err(|e| self.err("numbering the seeding", e))?;
        sqlx::query(
            "INSERT INTO herd_seedings (id, scenario, started_unix_ms, accounts, guests, status) \
             VALUES ($1, $2, $3, $4, $5, 'seeding')",
        )
        .bind(id)
        .bind(scenario.to_owned())
        .bind(now_ms())
        .bind(spec.accounts as i64)
        .bind(spec.guests as i64)
        .execute(&self.pool)
        .await
        .map_err(|e| self.err("recording the seeding", e))?;
        let mut tables: Vec<TableRows> = spec
            .inserts
            .iter()
            .map(|i| TableRows {
                table: i.table.clone(),
                rows: 0,
            })
            .collect();
        match self.batches(spec, id, stop, &mut tables).await {
            Ok(()) => {}
            Err(e) => {
                // Leave nothing half-seeded behind: remove what the committed batches added.
                return Err(match self.cleanup(Some(id)).await {
                    Ok(_) => e.context(format!(
                        "seeding {id} stopped; the rows it had added are removed"
                    )),
                    Err(c) => e.context(format!(
                        "seeding {id} stopped, and removing the rows it had added failed too ({c:#}); \
                         run `herd seed SCENARIO --cleanup --seeding {id}` once the database is back"
                    )),
                });
            }
        }
        sqlx::query("UPDATE herd_seedings SET status = 'seeded' WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(|e| self.err("marking the seeding complete", e))?;
        Ok(Seeded {
            id,
            accounts: spec.accounts,
            guests: spec.guests,
            tables,
            elapsed: started.elapsed(),
        })
    }

    async fn batches(
        &self,
        spec: &SeedSpec,
        id: i64,
        stop: &dyn Fn() -> bool,
        tables: &mut [TableRows],
    ) -> Result<()> {
        let total = spec.total();
        let mut k = 0u64;
        while k < total {
            if stop() {
                bail!("interrupted after {k} of {total} accounts");
            }
            let end = (k + spec.batch as u64).min(total);
            let rows: Vec<SeedRow> = (k..end).map(|a| spec.row(a)).collect();
            let mut tx = self
                .pool
                .begin()
                .await
                .map_err(|e| self.err("starting a seeding transaction", e))?;
            for (step, ins) in spec.inserts.iter().enumerate() {
                let keys: Vec<SeedValue<'_>> = rows.iter().map(|r| r.get(ins.key)).collect();
                self.refuse_existing(&mut tx, id, ins, &keys).await?;
                for chunk in rows.chunks(ins.rows_per_statement()) {
                    let sql = ins.sql(chunk.len());
                    let mut q = sqlx::query(AssertSqlSafe(sql));
                    for r in chunk {
                        for v in ins.params() {
                            q = bind(q, r.get(v));
                        }
                    }
                    q.execute(&mut *tx).await.map_err(|e| {
                        self.err(
                            format_args!(
                                "inserting accounts {k}..{} into {} ([seed] {})",
                                k + chunk.len() as u64,
                                ins.table,
                                ins.template
                            ),
                            e,
                        )
                    })?;
                }
                // The tracking rows: constants are herd's own validated names and numbers,
                // the key values are bound.
                let key_type = if ins.key.is_integer() { "int" } else { "text" };
                for chunk in keys.chunks(herd_driver::scenario::seed::MAX_PARAMS) {
                    let mut sql = String::from(
                        "INSERT INTO herd_seeded (seeding, step, tbl, key_column, key_type, key_value) VALUES ",
                    );
                    for n in 1..=chunk.len() {
                        if n > 1 {
                            sql.push_str(", ");
                        }
                        sql.push_str(&format!(
                            "({id}, {step}, '{}', '{}', '{key_type}', ${n})",
                            ins.table, ins.key_column
                        ));
                    }
                    let mut q = sqlx::query(AssertSqlSafe(sql));
                    for key in chunk {
                        q = q.bind(key_text(*key));
                    }
                    q.execute(&mut *tx)
                        .await
                        .map_err(|e| self.err("recording seeded rows in herd_seeded", e))?;
                }
                tables[step].rows += rows.len() as u64;
            }
            tx.commit()
                .await
                .map_err(|e| self.err("committing a seeding batch", e))?;
            k = end;
        }
        Ok(())
    }

    /// Fails if a row with one of `keys` already exists in the template's table: herd would
    /// otherwise record, and later delete, a key it does not own.
    async fn refuse_existing(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        id: i64,
        ins: &herd_driver::scenario::seed::Insert,
        keys: &[SeedValue<'_>],
    ) -> Result<()> {
        for chunk in keys.chunks(herd_driver::scenario::seed::MAX_PARAMS) {
            let marks: Vec<String> = (1..=chunk.len()).map(|n| format!("${n}")).collect();
            let sql = format!(
                "SELECT COUNT(*) FROM {} WHERE {} IN ({})",
                ins.table,
                ins.key_column,
                marks.join(", ")
            );
            let mut q = sqlx::query(AssertSqlSafe(sql));
            for key in chunk {
                q = bind(q, *key);
            }
            let n: i64 = q
                .fetch_one(&mut **tx)
                .await
                .and_then(|r| r.try_get(0))
                .map_err(|e| {
                    self.err(
                        format_args!("checking {} ([seed] {})", ins.table, ins.template),
                        e,
                    )
                })?;
            if n > 0 {
                // On the transaction: the pool's only connection is the one it holds.
                let others: Vec<i64> =
                    sqlx::query("SELECT id FROM herd_seedings WHERE id <> $1 ORDER BY id")
                        .bind(id)
                        .fetch_all(&mut **tx)
                        .await
                        .map_err(|e| self.err("listing herd's seedings", e))?
                        .iter()
                        .filter_map(|r| r.try_get::<i64, _>(0).ok())
                        .collect();
                let previous = if others.is_empty() {
                    String::new()
                } else {
                    let ids: Vec<String> = others.iter().map(i64::to_string).collect();
                    format!(
                        " This database still holds herd seeding(s) {}: remove them with `herd seed SCENARIO --cleanup` or seed with --reset.",
                        ids.join(", ")
                    )
                };
                bail!(
                    "{} already holds {n} rows whose {} herd was about to insert (seeding {id}); herd never \
                     inserts a key it does not own, since cleanup deletes by that key.{previous} If they \
                     are the target's own rows, move id_start (or the name/token pattern) past them.",
                    ins.table,
                    ins.key_column
                );
            }
        }
        Ok(())
    }

    /// Removes exactly the rows herd recorded for seeding `id` (the last one if `None`),
    /// tables in reverse template order, in one transaction; drops the tracking tables when
    /// no seeding is left. `Ok(None)` when there is nothing to remove.
    pub async fn cleanup(&self, id: Option<i64>) -> Result<Option<Cleaned>> {
        let started = Instant::now();
        if !self.tracking_exists().await? {
            return Ok(None);
        }
        let id: Option<i64> = match id {
            Some(id) => sqlx::query("SELECT id FROM herd_seedings WHERE id = $1")
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .and_then(|r| r.map(|r| r.try_get(0)).transpose()),
            None => sqlx::query("SELECT MAX(id) FROM herd_seedings")
                .fetch_one(&self.pool)
                .await
                .and_then(|r| r.try_get(0)),
        }
        .map_err(|e| self.err("finding the seeding to remove", e))?;
        let Some(id) = id else {
            return Ok(None);
        };
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(|e| self.err("starting the cleanup transaction", e))?;
        let steps = sqlx::query(
            "SELECT step, tbl, key_column, key_type, COUNT(*) FROM herd_seeded WHERE seeding = $1 \
             GROUP BY step, tbl, key_column, key_type ORDER BY step DESC",
        )
        .bind(id)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| self.err(format_args!("reading what seeding {id} added"), e))?;
        let mut tables = Vec::new();
        let mut gone = 0u64;
        for r in &steps {
            let (step, tbl, key_column, key_type, recorded): (i64, String, String, String, i64) = (
                r.try_get(0)
                    .map_err(|e| self.err("reading herd_seeded", e))?,
                r.try_get(1)
                    .map_err(|e| self.err("reading herd_seeded", e))?,
                r.try_get(2)
                    .map_err(|e| self.err("reading herd_seeded", e))?,
                r.try_get(3)
                    .map_err(|e| self.err("reading herd_seeded", e))?,
                r.try_get(4)
                    .map_err(|e| self.err("reading herd_seeded", e))?,
            );
            // The names were checked as plain identifiers when the seeding recorded them;
            // a row edited by hand to hold anything else is refused, not spliced.
            if !ident(&tbl) || !ident(&key_column) {
                bail!(
                    "herd_seeded names `{tbl}`.`{key_column}`, which is not a plain table and column name; refusing to build a DELETE from it"
                );
            }
            let value = if key_type == "int" {
                "CAST(key_value AS BIGINT)"
            } else {
                "key_value"
            };
            let sql = format!(
                "DELETE FROM {tbl} WHERE {key_column} IN (SELECT {value} FROM herd_seeded \
                 WHERE seeding = $1 AND step = $2)"
            );
            let deleted = sqlx::query(AssertSqlSafe(sql))
                .bind(id)
                .bind(step)
                .execute(&mut *tx)
                .await
                .map_err(|e| {
                    self.err(
                        format_args!(
                            "deleting seeding {id}'s rows from {tbl} (a foreign key from rows the load created may \
                             block it: the target's schema decides whether they cascade)"
                        ),
                        e,
                    )
                })?
                .rows_affected();
            gone += (recorded as u64).saturating_sub(deleted);
            tables.push(TableRows {
                table: tbl,
                rows: deleted,
            });
        }
        for (sql, what) in [
            ("DELETE FROM herd_seeded WHERE seeding = $1", "herd_seeded"),
            ("DELETE FROM herd_seedings WHERE id = $1", "herd_seedings"),
        ] {
            sqlx::query(sql)
                .bind(id)
                .execute(&mut *tx)
                .await
                .map_err(|e| self.err(format_args!("removing seeding {id} from {what}"), e))?;
        }
        let left: i64 = sqlx::query("SELECT COUNT(*) FROM herd_seedings")
            .fetch_one(&mut *tx)
            .await
            .and_then(|r| r.try_get(0))
            .map_err(|e| self.err("counting the seedings left", e))?;
        if left == 0 {
            // Nothing of herd's is left in the target: its bookkeeping goes too.
            for sql in ["DROP TABLE herd_seeded", "DROP TABLE herd_seedings"] {
                sqlx::query(sql)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| self.err("dropping herd's tracking tables", e))?;
            }
        }
        tx.commit()
            .await
            .map_err(|e| self.err(format_args!("committing the removal of seeding {id}"), e))?;
        Ok(Some(Cleaned {
            id,
            tables,
            gone,
            elapsed: started.elapsed(),
        }))
    }

    /// Removes every seeding this database holds, newest first.
    pub async fn reset(&self) -> Result<Vec<Cleaned>> {
        let mut done = Vec::new();
        while let Some(c) = self.cleanup(None).await? {
            done.push(c);
        }
        Ok(done)
    }
}

/// A seeding made for one `herd run`: seeded before the probe attaches and the load starts,
/// removed when the run ends, however it ends (unless kept).
pub struct RunSeeding {
    db: SeedDb,
    /// What was inserted.
    pub seeded: Seeded,
}

impl RunSeeding {
    /// Connects and seeds; `Ok(None)` when the scenario has no `[seed]`. Fails, before any
    /// load, when the database cannot be reached or the seeding cannot complete.
    pub async fn start(spec: Option<&SeedSpec>, scenario: &str) -> Result<Option<Self>> {
        let Some(spec) = spec else { return Ok(None) };
        let db = SeedDb::connect(spec)
            .await
            .context("seeding before the load (nothing was started)")?;
        match db
            .seed(spec, scenario, &crate::signals::stop_requested)
            .await
        {
            Ok(seeded) => Ok(Some(Self { db, seeded })),
            Err(e) => {
                db.close().await;
                Err(e.context("seeding before the load (nothing was started)"))
            }
        }
    }

    /// The database, password replaced by `***`.
    pub fn shown(&self) -> &str {
        self.db.shown()
    }

    /// Removes the seeding's rows, or with `keep` leaves them and says how to remove them.
    /// Returns the cleanup (None when kept) and a line for the run's output.
    pub async fn finish(self, keep: bool, scenario: &str) -> Result<(Option<Cleaned>, String)> {
        let id = self.seeded.id;
        let out = if keep {
            Ok((
                None,
                format!(
                    "kept seeding {id} ({} rows) in {} (--keep-seed); remove it with `herd seed {scenario} --cleanup --seeding {id}`",
                    self.seeded.rows(),
                    self.db.shown()
                ),
            ))
        } else {
            match self.db.cleanup(Some(id)).await {
                Ok(Some(c)) => {
                    let line = c.line();
                    Ok((Some(c), line))
                }
                Ok(None) => Ok((
                    None,
                    format!("seeding {id} was already removed from {}", self.db.shown()),
                )),
                Err(e) => Err(e.context(format!(
                    "removing seeding {id} after the run; run `herd seed {scenario} --cleanup --seeding {id}`"
                ))),
            }
        };
        self.db.close().await;
        out
    }
}

fn ident(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').count() <= 2
        && s.split('.').all(|p| {
            let mut c = p.chars();
            c.next()
                .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
                && c.all(|c| c == '_' || c.is_ascii_alphanumeric())
        })
}

fn bind<'q>(
    q: Query<'q, sqlx::Any, AnyArguments>,
    v: SeedValue<'_>,
) -> Query<'q, sqlx::Any, AnyArguments> {
    match v {
        SeedValue::Int(i) => q.bind(i),
        SeedValue::Text(t) => q.bind(t.to_owned()),
    }
}

fn key_text(v: SeedValue<'_>) -> String {
    match v {
        SeedValue::Int(i) => i.to_string(),
        SeedValue::Text(t) => t.to_owned(),
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::contour::store::{Store, StoreOptions, token_hash};

    /// A temporary directory holding a SQLite database with the demo contour's real schema
    /// (created by the backend's own `Store::open`) and a file with its URL.
    struct Db {
        dir: PathBuf,
        url: String,
    }

    impl Db {
        async fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("herd-seed-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let url = format!("sqlite:{}", dir.join("target.db").display());
            let opts = StoreOptions {
                max_connections: 1,
                timeout: Duration::from_secs(5),
                max_moves: 100,
            };
            let store = Store::open(&format!("{url}?mode=rwc"), opts).await.unwrap();
            store.close().await;
            std::fs::write(dir.join("seed-url"), format!("{url}\n")).unwrap();
            Db { dir, url }
        }

        /// A scenario seeding `accounts` + `guests` from `id_start`, URL from the file; names
        /// and tokens are numbered by `{account}`, or by `{id}` when seedings must not overlap.
        fn spec(&self, accounts: u64, guests: u64, id_start: i64, batch: usize) -> SeedSpec {
            self.spec_by(accounts, guests, id_start, batch, "{account}")
        }

        fn spec_by(
            &self,
            accounts: u64,
            guests: u64,
            id_start: i64,
            batch: usize,
            by: &str,
        ) -> SeedSpec {
            let src = format!(
                r#"[target]
url = "http://127.0.0.1:1"
[[op]]
name = "state"
path = "/state"
[[step]]
players = 1
duration = "1s"
[seed]
url_file = "seed-url"
accounts = {accounts}
guests = {guests}
id_start = {id_start}
batch = {batch}
name = "player-{by}"
token = "token-{by}"
account = "INSERT INTO accounts (id, name, kind) VALUES ({{id}}, {{name}}, {{kind}})"
session = "INSERT INTO sessions (token_hash, account_id) VALUES ({{token_hash}}, {{id}})"
"#
            );
            let file = self.dir.join("s.toml");
            Scenario::parse(&file.display().to_string(), &src, &[])
                .unwrap()
                .seed
                .unwrap()
        }

        async fn pool(&self) -> sqlx::SqlitePool {
            sqlx::SqlitePool::connect(&self.url).await.unwrap()
        }

        /// Every row of accounts and sessions, and whether herd's tables exist.
        async fn snapshot(&self) -> (Vec<(i64, String, String)>, Vec<(String, i64)>, i64) {
            let p = self.pool().await;
            let a = sqlx::query_as("SELECT id, name, kind FROM accounts ORDER BY id")
                .fetch_all(&p)
                .await
                .unwrap();
            let s =
                sqlx::query_as("SELECT token_hash, account_id FROM sessions ORDER BY token_hash")
                    .fetch_all(&p)
                    .await
                    .unwrap();
            let (t,): (i64,) = sqlx::query_as(
                "SELECT COUNT(*) FROM sqlite_master WHERE name IN ('herd_seeded', 'herd_seedings')",
            )
            .fetch_one(&p)
            .await
            .unwrap();
            p.close().await;
            (a, s, t)
        }
    }

    impl Drop for Db {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    use herd_driver::Scenario;

    fn never() -> bool {
        false
    }

    #[tokio::test]
    async fn seeds_accounts_and_guests_whose_tokens_the_backend_accepts() {
        let db = Db::new("tokens").await;
        let spec = db.spec(90, 10, 1, 32);
        let seed = SeedDb::connect(&spec).await.unwrap();
        let done = seed.seed(&spec, "s.toml", &never).await.unwrap();
        assert_eq!(done.id, 1);
        assert_eq!(
            done.tables,
            [
                TableRows {
                    table: "accounts".into(),
                    rows: 100
                },
                TableRows {
                    table: "sessions".into(),
                    rows: 100
                },
            ]
        );
        let (accounts, sessions, tracking) = db.snapshot().await;
        assert_eq!((accounts.len(), sessions.len(), tracking), (100, 100, 2));
        assert_eq!(accounts[0], (1, "player-0".into(), "durable".into()));
        assert_eq!(accounts[89].2, "durable");
        assert_eq!(accounts[90], (91, "player-90".into(), "guest".into()));
        // The hash is the backend's: its own session lookup finds account k + 1 for the token
        // player k will send.
        assert!(sessions.contains(&(token_hash("token-41"), 42)));
        let store = Store::open(
            &db.url,
            StoreOptions {
                max_connections: 1,
                timeout: Duration::from_secs(5),
                max_moves: 100,
            },
        )
        .await
        .unwrap();
        assert_eq!(store.account_for_token("token-41").await.unwrap(), Some(42));
        let guest = store.session("token-95").await.unwrap().unwrap();
        assert_eq!((guest.id, guest.kind.as_str()), (96, "guest"));
        store.close().await;
        let list = seed.seedings().await.unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!((list[0].status.as_str(), list[0].rows), ("seeded", 200));
        seed.close().await;
    }

    #[tokio::test]
    async fn cleanup_removes_exactly_herds_rows_and_its_tables() {
        let db = Db::new("cleanup").await;
        // The target's own rows, including a game the load would create and a seat of a
        // pre-existing player in it.
        let p = db.pool().await;
        for sql in [
            "INSERT INTO accounts (id, name, kind) VALUES (50000, 'alice', 'durable'), (50001, 'bob', 'guest')",
            "INSERT INTO sessions (token_hash, account_id) VALUES ('h-alice', 50000), ('h-bob', 50001)",
            "INSERT INTO games (id, seats, seats_taken, status, created_ms) VALUES (1, 2, 1, 'waiting', 0)",
            "INSERT INTO game_players (game_id, seat, account_id) VALUES (1, 0, 50000)",
        ] {
            sqlx::query(sql).execute(&p).await.unwrap();
        }
        p.close().await;
        let before = db.snapshot().await;
        assert_eq!(before.2, 0);
        // The seeds' shape: 10 000 accounts + 1 000 guests with sessions.
        let spec = db.spec(10_000, 1_000, 1, 1_000);
        let seed = SeedDb::connect(&spec).await.unwrap();
        let done = seed.seed(&spec, "s.toml", &never).await.unwrap();
        // Reported, never asserted: tests do not time things.
        eprintln!("SQLite: {}", done.line(seed.shown()));
        assert_eq!(db.snapshot().await.0.len(), 11_002);
        let cleaned = seed.cleanup(None).await.unwrap().unwrap();
        eprintln!("SQLite: {}", cleaned.line());
        assert_eq!((cleaned.id, cleaned.rows(), cleaned.gone), (1, 22_000, 0));
        // Sessions first (they reference accounts), then accounts.
        assert_eq!(cleaned.tables[0].table, "sessions");
        let after = db.snapshot().await;
        assert_eq!(
            after, before,
            "the target's own rows, and only they, remain"
        );
        let p = db.pool().await;
        let (seats,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM game_players")
            .fetch_one(&p)
            .await
            .unwrap();
        assert_eq!(seats, 1);
        p.close().await;
        // Nothing left to remove is not an error.
        assert!(seed.cleanup(None).await.unwrap().is_none());
        seed.close().await;
    }

    #[tokio::test]
    async fn cleanup_takes_the_last_or_a_given_seeding_and_reset_takes_all() {
        let db = Db::new("reset").await;
        let seed = SeedDb::connect(&db.spec(1, 0, 1, 10)).await.unwrap();
        for start in [1, 101, 201] {
            let spec = db.spec_by(50, 5, start, 20, "{id}");
            seed.seed(&spec, "s.toml", &never).await.unwrap();
        }
        let ids = |l: Vec<Seeding>| l.iter().map(|s| s.id).collect::<Vec<_>>();
        assert_eq!(ids(seed.seedings().await.unwrap()), [1, 2, 3]);
        // The last one by default.
        assert_eq!(seed.cleanup(None).await.unwrap().unwrap().id, 3);
        // A given one.
        let c = seed.cleanup(Some(1)).await.unwrap().unwrap();
        assert_eq!((c.id, c.rows()), (1, 110));
        assert!(seed.cleanup(Some(1)).await.unwrap().is_none());
        let (accounts, _, tables) = db.snapshot().await;
        assert_eq!(accounts.first().map(|a| a.0), Some(101));
        assert_eq!((accounts.len(), tables), (55, 2));
        // Seeding the same ids again collides with seeding 2 and says how to get rid of it.
        let spec = db.spec_by(50, 5, 101, 20, "{id}");
        let e = format!(
            "{:#}",
            seed.seed(&spec, "s.toml", &never).await.unwrap_err()
        );
        assert!(
            e.contains("accounts already holds 20 rows whose id")
                && e.contains("still holds herd seeding(s) 2")
                && e.contains("--reset"),
            "{e}"
        );
        // --reset: every previous seeding goes, then the new one is the only one.
        assert_eq!(seed.reset().await.unwrap().len(), 1);
        let (accounts, sessions, tables) = db.snapshot().await;
        assert_eq!((accounts.len(), sessions.len(), tables), (0, 0, 0));
        seed.seed(&spec, "s.toml", &never).await.unwrap();
        assert_eq!(ids(seed.seedings().await.unwrap()), [1]);
        seed.close().await;
    }

    #[tokio::test]
    async fn a_failed_or_interrupted_seeding_leaves_nothing_behind() {
        let db = Db::new("partial").await;
        let p = db.pool().await;
        sqlx::query("INSERT INTO accounts (id, name) VALUES (45, 'owned-by-the-target')")
            .execute(&p)
            .await
            .unwrap();
        p.close().await;
        let before = db.snapshot().await;
        // Batches 1..=4 commit, batch 5 meets id 45: the whole seeding is rolled back out.
        let spec = db.spec(100, 0, 1, 10);
        let seed = SeedDb::connect(&spec).await.unwrap();
        let e = format!(
            "{:#}",
            seed.seed(&spec, "s.toml", &never).await.unwrap_err()
        );
        assert!(
            e.contains("seeding 1 stopped; the rows it had added are removed")
                && e.contains("accounts already holds 1 rows whose id"),
            "{e}"
        );
        assert_eq!(db.snapshot().await, before);
        // Ctrl-C between batches: the same.
        let spec = db.spec(40, 0, 1, 10);
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let stop = || calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 2;
        let e = format!("{:#}", seed.seed(&spec, "s.toml", &stop).await.unwrap_err());
        assert!(e.contains("interrupted after 20 of 40 accounts"), "{e}");
        assert_eq!(db.snapshot().await, before);
        seed.close().await;
    }

    #[tokio::test]
    async fn unreachable_or_missing_databases_fail_clearly_without_the_password() {
        let db = Db::new("bad").await;
        let spec = db.spec(1, 0, 1, 10);
        let url_file = db.dir.join("seed-url");
        let connect = |url: &str| {
            std::fs::write(&url_file, url).unwrap();
            SeedDb::connect(&spec)
        };
        // Nothing listens on port 1 of loopback.
        let e = format!(
            "{:#}",
            connect("postgres://herd:s3cr%65t@127.0.0.1:1/game")
                .await
                .err()
                .unwrap()
        );
        assert!(!e.contains("s3cr"), "{e}");
        assert!(
            e.contains("cannot reach the seed database at 127.0.0.1:1")
                && e.contains("postgres://herd:***@127.0.0.1:1/game")
                && e.contains(&format!("the file {}", url_file.display()))
                && e.contains("start it, or fix the URL"),
            "{e}"
        );
        let missing = db.dir.join("nope.db");
        let e = format!(
            "{:#}",
            connect(&format!("sqlite:{}", missing.display()))
                .await
                .err()
                .unwrap()
        );
        assert!(
            e.contains(&missing.display().to_string()) && e.contains("must exist"),
            "{e}"
        );
        let e = format!("{:#}", connect("mysql://u:pw@h/db").await.err().unwrap());
        assert!(
            e.contains("neither postgres://")
                && e.contains("mysql://u:***@h/db")
                && !e.contains("pw@"),
            "{e}"
        );
        std::fs::remove_file(&url_file).unwrap();
        let e = format!("{:#}", SeedDb::connect(&spec).await.err().unwrap());
        assert!(e.contains("url_file") && e.contains("seed-url"), "{e}");
        let mut by_env = spec.clone();
        by_env.url = SeedUrl::Env("HERD_TEST_SEED_URL_NEVER_SET".into());
        let e = format!("{:#}", SeedDb::connect(&by_env).await.err().unwrap());
        assert!(
            e.starts_with("HERD_TEST_SEED_URL_NEVER_SET is not set"),
            "{e}"
        );
    }

    /// `herd run` against the demo contour's real backend on loopback: the run seeds before the
    /// load (every player's token is accepted), prints and returns the counts, and removes the
    /// rows at the end; with --keep-seed they stay until `herd seed --cleanup`.
    #[test]
    fn herd_run_seeds_before_the_load_and_cleans_up_after_it() {
        use crate::{
            cmd::{run, seed as seed_cmd},
            contour::backend::{Backend, BackendArgs},
            store::{Source, Store as RunStore},
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let db = rt.block_on(Db::new("run"));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let addr = rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let backend = Backend::start(
                &BackendArgs {
                    listen: "127.0.0.1:0".parse().unwrap(),
                    db: db.url.clone(),
                    workers: 1,
                    db_max_connections: 2,
                    db_timeout: Duration::from_secs(5),
                    max_connections: 64,
                    max_body: 65536,
                    max_moves: 100,
                    max_history: 100,
                    grace: Duration::from_secs(1),
                    verbose: true,
                    service_time: Duration::ZERO,
                },
                listener,
            )
            .await
            .unwrap();
            let addr = backend.local_addr();
            tokio::spawn(backend.serve(async {
                let _ = stop_rx.await;
            }));
            addr
        });
        let file = db.dir.join("run.toml");
        std::fs::write(
            &file,
            format!(
                r#"[target]
url = "http://{addr}"
[player]
think = "20ms"
max_ops = 20
[[op]]
name = "session"
path = "/v1/session"
headers = {{ authorization = "Bearer token-{{account}}" }}
check = {{ status = 200 }}
[[step]]
players = 10
duration = "600ms"
arrival = "burst"
[seed]
url_file = "seed-url"
accounts = 8
guests = 2
account = "INSERT INTO accounts (id, name, kind) VALUES ({{id}}, {{name}}, {{kind}})"
session = "INSERT INTO sessions (token_hash, account_id) VALUES ({{token_hash}}, {{id}})"
"#
            ),
        )
        .unwrap();
        let args = |keep_seed: bool| run::RunArgs {
            scenario: file.clone(),
            set: Vec::new(),
            name: None,
            out: db.dir.join("out"),
            store: None,
            containers: Vec::new(),
            no_probe: true,
            interval: Duration::from_millis(200),
            grace: Duration::from_secs(1),
            quiet: true,
            keep_seed,
            insecure: false,
        };
        let outcome = run::execute(&args(false)).unwrap();
        let seeded = outcome.seeded.as_ref().unwrap();
        assert_eq!((seeded.accounts, seeded.guests, seeded.rows()), (8, 2, 20));
        assert_eq!(outcome.seed_cleaned.as_ref().unwrap().rows(), 20);
        // The report's header says what was seeded and that it was removed, never where.
        let md_of = |o: &run::RunOutcome| {
            let md = o
                .files
                .iter()
                .find(|f| f.extension().is_some_and(|e| e == "md"));
            std::fs::read_to_string(md.unwrap()).unwrap()
        };
        let md = md_of(&outcome);
        let id = seeded.id;
        assert!(
            md.contains(&format!(
                "Seeded before the load (seeding {id}): 8 accounts + 2 guests, 20 rows (accounts 10, sessions 10) in "
            )) && md.contains("; removed after the run: 20 rows in "),
            "{md}"
        );
        assert!(!md.contains("target.db") && !md.contains("sqlite:"), "{md}");
        let report: herd_driver::RunReport = rt.block_on(async {
            let store = RunStore::open(&outcome.store).await.unwrap();
            store
                .rows(outcome.run_id, Source::Report)
                .await
                .unwrap()
                .pop()
                .unwrap()
        });
        // All ten players, guests included, were let in with the tokens herd seeded.
        assert!(report.requests >= 10, "{} requests", report.requests);
        assert_eq!(report.outcome_count("session", "ok"), report.requests);
        let (accounts, sessions, tables) = rt.block_on(db.snapshot());
        assert_eq!((accounts.len(), sessions.len(), tables), (0, 0, 0));

        let kept = run::execute(&args(true)).unwrap();
        assert!(kept.seed_cleaned.is_none());
        let md = md_of(&kept);
        assert!(
            md.contains(&format!(
                "kept after the run (--keep-seed): remove with `herd seed <scenario> --cleanup --seeding {}`",
                kept.seeded.as_ref().unwrap().id
            )),
            "{md}"
        );
        assert_eq!(rt.block_on(db.snapshot()).0.len(), 10);
        seed_cmd::run(&seed_cmd::SeedArgs {
            scenario: file.clone(),
            set: Vec::new(),
            cleanup: true,
            seeding: None,
            reset: false,
            list: false,
        })
        .unwrap();
        assert_eq!(rt.block_on(db.snapshot()), (vec![], vec![], 0));
        let _ = stop_tx.send(());
    }

    /// An unreachable seed database stops `herd run` before anything starts: no run is
    /// recorded, and the message names the host, not the password.
    #[test]
    fn herd_run_fails_before_the_load_when_the_seed_database_is_unreachable() {
        use crate::{cmd::run, store::Store as RunStore};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let db = rt.block_on(Db::new("run-unreachable"));
        std::fs::write(
            db.dir.join("seed-url"),
            "postgres://herd:s3cret@127.0.0.1:1/game\n",
        )
        .unwrap();
        let file = db.dir.join("run.toml");
        std::fs::write(
            &file,
            "[target]\nurl = \"http://127.0.0.1:1\"\n[[op]]\nname = \"a\"\npath = \"/\"\n\
             [[step]]\nplayers = 1\nduration = \"1s\"\n[seed]\nurl_file = \"seed-url\"\n\
             accounts = 1\naccount = \"INSERT INTO accounts (id) VALUES ({id})\"\n",
        )
        .unwrap();
        let out = db.dir.join("out");
        let e = run::execute(&run::RunArgs {
            scenario: file,
            set: Vec::new(),
            name: None,
            out: out.clone(),
            store: None,
            containers: Vec::new(),
            no_probe: true,
            interval: Duration::from_millis(200),
            grace: Duration::from_secs(1),
            quiet: true,
            keep_seed: false,
            insecure: false,
        })
        .err()
        .unwrap();
        let e = format!("{e:#}");
        assert!(
            e.starts_with("seeding before the load (nothing was started): cannot reach the seed database at 127.0.0.1:1")
                && !e.contains("s3cret"),
            "{e}"
        );
        let runs = rt.block_on(async {
            RunStore::open(&crate::store::default_url(&out))
                .await
                .unwrap()
                .list()
                .await
                .unwrap()
        });
        assert!(runs.is_empty(), "a run was recorded: {runs:?}");
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
