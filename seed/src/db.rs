//! The executor: inserts a scenario's `[seed]` accounts and sessions into the target's own database
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

use crate::{
    secret::{Secret, host_of},
    seeded::{Cleaned, Seeded, Seeding, TableRows},
    spec::{Insert, MAX_PARAMS, SeedRow, SeedSpec, SeedUrl, SeedValue},
};
use anyhow::{Context as _, Result, anyhow, bail};
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

/// A connection to the database a scenario seeds.
pub struct SeedDb {
    pool: AnyPool,
    secret: Secret,
    sqlite: bool,
    /// The URL with its password replaced by `***`.
    shown: String,
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
        })
    }

    /// The URL with its password replaced by `***`.
    pub fn shown(&self) -> &str {
        &self.shown
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
                for chunk in keys.chunks(MAX_PARAMS) {
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
        ins: &Insert,
        keys: &[SeedValue<'_>],
    ) -> Result<()> {
        for chunk in keys.chunks(MAX_PARAMS) {
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
    pub async fn start(
        spec: Option<&SeedSpec>,
        scenario: &str,
        stop: &dyn Fn() -> bool,
    ) -> Result<Option<Self>> {
        let Some(spec) = spec else { return Ok(None) };
        let db = SeedDb::connect(spec)
            .await
            .context("seeding before the load (nothing was started)")?;
        match db.seed(spec, scenario, stop).await {
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
