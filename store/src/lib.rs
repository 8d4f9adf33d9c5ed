//! herd's run store: every interval of both timelines (driver and probe) is written as it
//! happens, so a run killed at any point leaves every completed interval readable.
//!
//! SQLite by default (a file next to the reports, WAL mode: a committed row survives the
//! process being killed), PostgreSQL when given a `postgres://` URL. Rows hold the interval as
//! JSON: the schema stays stable while the interval types grow, and old runs stay readable.
#![deny(missing_docs)]

use std::{collections::BTreeMap, path::Path};

use anyhow::{Context as _, Result};
use herd_model::{RunData, RunMeta};
use sqlx::{AnyPool, Row as _, any::AnyPoolOptions};

mod owner;
mod recorder;
pub mod rollup;
mod rows;
mod shards;
pub use owner::Owner;
pub use recorder::{
    FINAL_RETRY, FIRST_BACKOFF, KEEP_BYTES, MAX_BACKOFF, MAX_PENDING_BYTES, Recorder,
    WRITE_TIMEOUT, Writer,
};
pub use rows::{Continues, NODE_PROBE, Row, Rows, Source, merge_shards};
pub use shards::{
    LOST, MissingShards, START_LEAD, ShardUsageError, StoreClock, TEST_CLOCK_OFFSET, wall_now,
};

/// A connection to a run store (a pool: clones share it).
#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    url: String,
}

/// The URL without its password, for messages (one scrubber for every URL herd shows: the
/// run store's, the seed database's, the contour's).
pub use herd_seed::secret::redact;

/// The default store: `runs.db` (SQLite) inside `dir`.
pub fn default_url(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("runs.db").display())
}

/// A `--store` that names no store herd can open: bad input (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StoreUrlError(pub String);

/// A run id the store does not hold, or a store that holds no run yet: bad input (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NoSuchRun(pub String);

/// The URL to connect with and the one to show for a `--store`: a SQLite file is created when
/// missing (`mode=rwc` implied, as the documented `sqlite:PATH` promises, and never shown).
pub fn connect_url(url: &str) -> Result<(String, String), StoreUrlError> {
    let url = url.trim();
    const FORMS: &str = "sqlite:PATH (a file, created if missing) or \
                         postgres://USER[:PASSWORD]@HOST[:PORT]/DB";
    if url.is_empty() {
        return Err(StoreUrlError(format!(
            "the run store URL is empty: give {FORMS}"
        )));
    }
    if let Some(rest) = url.strip_prefix("sqlite:") {
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let params: Vec<&str> = query
            .split('&')
            .filter(|p| !p.is_empty() && *p != "mode=rwc")
            .collect();
        let shown = if params.is_empty() {
            format!("sqlite:{path}")
        } else {
            format!("sqlite:{path}?{}", params.join("&"))
        };
        let connect = if params.iter().any(|p| p.starts_with("mode=")) {
            shown.clone()
        } else if params.is_empty() {
            format!("{shown}?mode=rwc")
        } else {
            format!("{shown}&mode=rwc")
        };
        return Ok((connect, shown));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok((url.to_owned(), redact(url)));
    }
    Err(StoreUrlError(format!(
        "the run store URL {} is neither SQLite nor PostgreSQL: give {FORMS}",
        redact(url)
    )))
}

impl Store {
    /// Opens the store at `url` for reading what it holds (`herd report`, `herd compare`): a
    /// SQLite file that does not exist is a [`StoreUrlError`] saying how to record a run, and
    /// neither the file nor its directory is created.
    pub async fn open_existing(url: &str) -> Result<Self> {
        let (_, shown) = connect_url(url)?;
        if let Some(rest) = shown.strip_prefix("sqlite:")
            && !Path::new(rest.split('?').next().unwrap_or(rest)).exists()
        {
            return Err(StoreUrlError(format!(
                "there is no run store at {shown}: nothing was recorded there yet; \
                 `herd run SCENARIO` records a run into it (`herd demo` records two), or \
                 give the store that holds your runs with --store or --out"
            ))
            .into());
        }
        Self::open(url).await
    }

    /// Opens (creating if needed) the store at `url`. A SQLite file that is not a database
    /// (or a damaged one) is a [`StoreUrlError`] naming the file and what to do.
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_any(url)
            .await
            .map_err(|e| match not_a_database(&e) {
                Some(what) => {
                    let shown = connect_url(url).map(|(_, s)| s).unwrap_or_default();
                    let file = shown.strip_prefix("sqlite:").unwrap_or(&shown);
                    let file = file.split('?').next().unwrap_or(file);
                    StoreUrlError(format!(
                        "the run store {file} is not a herd run store: SQLite says {what}; it is \
                     another kind of file, or a database that was damaged (a disk that filled \
                     up, a copy taken mid-write). Move it aside (`mv {file} {file}.bad`) and \
                     herd starts a new store there, or give another with --store or --out"
                    ))
                    .into()
                }
                None => e,
            })
    }

    async fn open_any(url: &str) -> Result<Self> {
        sqlx::any::install_default_drivers();
        let (connect, shown) = connect_url(url)?;
        let url = connect.as_str();
        let sqlite = url.starts_with("sqlite:");
        if sqlite && let Some(path) = url.strip_prefix("sqlite:") {
            let file = path.split('?').next().unwrap_or(path);
            if let Some(dir) = Path::new(file)
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
            {
                std::fs::create_dir_all(dir).with_context(|| {
                    format!("creating the run store's directory {}", dir.display())
                })?;
            }
        }
        // One connection first, outside the pool: the pool retries until its timeout and then
        // says only `pool timed out`, hiding the refusal or the wrong password behind it.
        probe_connect(url, &shown).await?;
        let pool = AnyPoolOptions::new()
            // SQLite has one writer anyway; one connection keeps the pragmas in force.
            .max_connections(if sqlite { 1 } else { 4 })
            .acquire_timeout(std::time::Duration::from_secs(10))
            .connect(url)
            .await
            .with_context(|| format!("opening the run store {shown}"))?;
        let store = Self { pool, url: shown };
        if sqlite {
            // A new store gives the pages that roll-ups free back to the file system
            // (`Store::release_free_pages`): an hours-long run's file holds what it keeps,
            // not its busiest ten minutes at full resolution. No effect on an existing store
            // (it takes a VACUUM to turn on).
            store.exec("PRAGMA auto_vacuum=INCREMENTAL").await?;
            store.exec("PRAGMA journal_mode=WAL").await?;
            store.exec("PRAGMA synchronous=NORMAL").await?;
        }
        store.create_schema().await?;
        Ok(store)
    }

    /// The run's status as recorded, or `interrupted` for a run still marked `running` whose
    /// process (same host, same boot, same pid and start time) is gone: killed, crashed, the
    /// host rebooted.
    async fn honest_status(&self, run: i64, status: String) -> Result<String> {
        if status != "running" {
            return Ok(status);
        }
        let shards = self.shard_infos(run).await?;
        if !shards.is_empty() {
            // A sharded run closes with its last shard; one that died leaves it open.
            if shards.iter().any(|s| s.status == "running") {
                return Ok(status);
            }
            let worst = ["failed", "interrupted", "stopped"]
                .into_iter()
                .find(|w| shards.iter().any(|s| s.status == *w))
                .unwrap_or("finished");
            return Ok(worst.to_owned());
        }
        let owner: Vec<Owner> = self.rows(run, Source::Owner).await?;
        Ok(match owner.first() {
            Some(o) if o.gone() => "interrupted".to_owned(),
            _ => status,
        })
    }

    async fn exec(&self, sql: &'static str) -> Result<()> {
        sqlx::query(sql)
            .execute(&self.pool)
            .await
            .with_context(|| format!("run store {}: {sql}", redact(&self.url)))?;
        Ok(())
    }

    /// Starts a run and returns its header.
    pub async fn begin(&self, name: &str, scenario: &str, mono_start_ns: u64) -> Result<RunMeta> {
        let started = shards::now_ms();
        // A transaction: on PostgreSQL the id's lock is held until the run's row commits.
        let mut tx = self.pool.begin().await.context("allocating a run id")?;
        let next = self
            .insert_run(&mut tx, name, scenario, started, mono_start_ns)
            .await?;
        tx.commit()
            .await
            .with_context(|| format!("recording run {next} in {}", redact(&self.url)))?;
        self.put(next, Source::Owner, 0, 0, &Owner::me()).await?;
        Ok(RunMeta {
            id: next,
            name: name.to_owned(),
            scenario: scenario.to_owned(),
            started_unix_ms: started,
            mono_start_ns: mono_start_ns as i64,
            finished_unix_ms: None,
            status: "running".into(),
            shards: Vec::new(),
        })
    }

    /// Allocates the next run id and records the run's header as `running`, in `tx` (a
    /// transaction: [`Store::begin`]'s, or a shard registration's). Returns the id.
    ///
    /// Safe when several runs start at once (issue #27: 4 of 6 `herd run`s started together
    /// failed on `UNIQUE constraint failed: herd_runs.id`, having read the same `MAX(id)`).
    /// The id is read and the row inserted in one statement, which SQLite runs under its one
    /// write lock; PostgreSQL's statements read a snapshot taken before they wait for a row
    /// lock, so there the transaction first takes an advisory lock, held until it commits.
    pub(crate) async fn insert_run(
        &self,
        tx: &mut sqlx::AnyConnection,
        name: &str,
        scenario: &str,
        started_unix_ms: i64,
        mono_start_ns: u64,
    ) -> Result<i64> {
        if self.url.starts_with("postgres") {
            sqlx::query("SELECT 1 AS one FROM (SELECT pg_advisory_xact_lock(7292884)) AS l")
                .fetch_all(&mut *tx)
                .await
                .context("allocating a run id")?;
        }
        let next: i64 = sqlx::query(
            "INSERT INTO herd_runs (id, name, scenario, started_unix_ms, mono_start_ns, status) \
             SELECT COALESCE(MAX(id), 0) + 1, $1, $2, $3, $4, 'running' FROM herd_runs \
             RETURNING id",
        )
        .bind(name)
        .bind(scenario)
        .bind(started_unix_ms)
        .bind(mono_start_ns as i64)
        .fetch_one(&mut *tx)
        .await
        .with_context(|| format!("recording a new run in {}", redact(&self.url)))?
        .try_get("id")?;
        Ok(next)
    }

    /// Appends one row (committed on return).
    pub async fn put(
        &self,
        run: i64,
        source: Source,
        seq: u64,
        at_ns: u64,
        body: &impl serde::Serialize,
    ) -> Result<()> {
        self.put_shard(run, 0, source, seq, at_ns, body).await
    }

    /// Appends one row of shard `shard` (committed on return).
    pub async fn put_shard(
        &self,
        run: i64,
        shard: u32,
        source: Source,
        seq: u64,
        at_ns: u64,
        body: &impl serde::Serialize,
    ) -> Result<()> {
        let body = serde_json::to_value(body).context("encoding a run row")?;
        self.put_row(run, shard, source.as_str(), seq, at_ns, &body)
            .await
    }

    /// Appends one row whose source is named `source` ([`Source::as_str`], or a node probe's
    /// `probe@NODE`), committed on return.
    pub async fn put_row(
        &self,
        run: i64,
        shard: u32,
        source: &str,
        seq: u64,
        at_ns: u64,
        body: &serde_json::Value,
    ) -> Result<()> {
        self.put_row_text(run, shard, source, seq, at_ns, &body.to_string())
            .await
    }

    /// [`Store::put_row`] of a body already encoded as JSON text.
    pub(crate) async fn put_row_text(
        &self,
        run: i64,
        shard: u32,
        source: &str,
        seq: u64,
        at_ns: u64,
        body: &str,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO herd_rows (run_id, source, seq, at_ns, body, shard) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(run)
        .bind(source)
        .bind(seq as i64)
        .bind(at_ns as i64)
        .bind(body)
        .bind(i64::from(shard))
        .execute(&self.pool)
        .await
        .with_context(|| format!("writing a {source} row of run {run}"))?;
        Ok(())
    }

    /// Marks the run finished with `status`.
    pub async fn finish(&self, run: i64, status: &str) -> Result<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        sqlx::query("UPDATE herd_runs SET finished_unix_ms = $1, status = $2 WHERE id = $3")
            .bind(now)
            .bind(status)
            .bind(run)
            .execute(&self.pool)
            .await
            .with_context(|| format!("closing run {run}"))?;
        if self.url.starts_with("sqlite:") {
            // Everything into runs.db itself, so the file alone (copied, mailed) holds the run.
            self.exec("PRAGMA wal_checkpoint(TRUNCATE)").await?;
        }
        Ok(())
    }

    /// Gives the pages that deleted rows left free back to the file system (SQLite stores
    /// made with incremental auto-vacuum; nothing otherwise, and nothing for PostgreSQL,
    /// whose autovacuum reuses them).
    pub(crate) async fn release_free_pages(&self) -> Result<()> {
        if self.url.starts_with("sqlite:") {
            self.exec("PRAGMA incremental_vacuum").await?;
        }
        Ok(())
    }

    /// The store's URL as herd shows it: no password, no implied `mode=rwc`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Closes the store's connections: SQLite folds the WAL into the database file and
    /// removes `-wal` and `-shm`.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// The header of run `id`, or of the latest run when `id` is None.
    pub async fn meta(&self, id: Option<i64>) -> Result<RunMeta> {
        let row = match id {
            Some(id) => {
                sqlx::query("SELECT * FROM herd_runs WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&self.pool)
                    .await?
            }
            None => {
                sqlx::query("SELECT * FROM herd_runs ORDER BY id DESC LIMIT 1")
                    .fetch_optional(&self.pool)
                    .await?
            }
        };
        let Some(row) = row else {
            return Err(NoSuchRun(match id {
                Some(id) => format!(
                    "run {id} is not in {}; `herd report --list` shows the runs there",
                    redact(&self.url)
                ),
                None => format!(
                    "{} holds no runs yet: `herd run SCENARIO` records one (`herd demo` records two)",
                    redact(&self.url)
                ),
            })
            .into());
        };
        Ok(RunMeta {
            id: row.try_get("id")?,
            name: row.try_get("name")?,
            scenario: row.try_get("scenario")?,
            started_unix_ms: row.try_get("started_unix_ms")?,
            mono_start_ns: row.try_get("mono_start_ns")?,
            finished_unix_ms: row.try_get("finished_unix_ms")?,
            status: self
                .honest_status(row.try_get("id")?, row.try_get("status")?)
                .await?,
            shards: self.shard_infos(row.try_get("id")?).await?,
        })
    }

    /// Every run's header, newest first.
    pub async fn list(&self) -> Result<Vec<RunMeta>> {
        let ids: Vec<i64> = sqlx::query("SELECT id FROM herd_runs ORDER BY id DESC")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| r.try_get("id"))
            .collect::<Result<_, _>>()?;
        let mut out = Vec::new();
        for id in ids {
            out.push(self.meta(Some(id)).await?);
        }
        Ok(out)
    }

    /// The rows of `source` for `run`, in order, decoded.
    pub async fn rows<T: serde::de::DeserializeOwned>(
        &self,
        run: i64,
        source: Source,
    ) -> Result<Vec<T>> {
        let rows = sqlx::query(
            "SELECT seq, body FROM herd_rows WHERE run_id = $1 AND (source = $2 OR source = $3) \
             ORDER BY shard, seq",
        )
        .bind(run)
        .bind(source.as_str())
        // The older name of the source's rows, where it has one (`Source::matches`).
        .bind(if source == Source::Phase {
            "step"
        } else {
            source.as_str()
        })
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading {} rows of run {run}", source.as_str()))?;
        rows.iter()
            .map(|r| {
                let seq: i64 = r.try_get("seq")?;
                let body: String = r.try_get("body")?;
                serde_json::from_str(&body).with_context(|| {
                    format!("run {run}: {} row {seq} does not decode", source.as_str())
                })
            })
            .collect()
    }

    /// Everything recorded for run `id` (the latest when None), for the report; a
    /// sharded run's shards merged into one ([`merge_shards`]).
    pub async fn load_run(&self, id: Option<i64>) -> Result<RunData> {
        let mut meta = self.meta(id).await?;
        let mut by_shard: BTreeMap<u32, Vec<(String, u64, String)>> = BTreeMap::new();
        let mut node_probe = Vec::new();
        let rows = sqlx::query(
            "SELECT shard, source, seq, body FROM herd_rows WHERE run_id = $1 ORDER BY shard, source, seq",
        )
        .bind(meta.id)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading the rows of run {}", meta.id))?;
        for r in &rows {
            let source: String = r.try_get("source")?;
            let node = source.strip_prefix(NODE_PROBE).map(str::to_owned);
            if node.is_none() && !Source::REPORTED.iter().any(|s| s.matches(&source)) {
                continue;
            }
            let body: String = r.try_get("body")?;
            let seq: i64 = r.try_get("seq")?;
            let bad = || format!("run {}: {source} row {seq} does not decode", meta.id);
            if let Some(node) = node {
                let mut iv: herd_model::ProbeInterval =
                    serde_json::from_str(&body).with_context(bad)?;
                iv.tag_node(&node);
                node_probe.push(iv);
                continue;
            }
            by_shard
                .entry(r.try_get::<i64, _>("shard")? as u32)
                .or_default()
                .push((source, seq as u64, body));
        }
        let with_nodes = |mut d: RunData| {
            if !node_probe.is_empty() {
                d.probe.extend(node_probe.iter().cloned());
                d.probe.sort_by_key(|iv| iv.at_ns);
                // The shards ran --no-probe because the node probes probe for them: the
                // report must not say the run had no probe.
                d.probe_missing = None;
            }
            d
        };
        if meta.shards.is_empty() {
            let rows = by_shard.into_values().flatten().collect();
            return Ok(with_nodes(rows::TextRows { meta, rows }.run_data()?));
        }
        let mut parts = Vec::new();
        for (index, rows) in by_shard {
            let data = rows::TextRows {
                meta: meta.clone(),
                rows,
            }
            .run_data()?;
            if let Some(s) = meta.shards.iter_mut().find(|s| s.index == index) {
                s.intervals = data.driver.len() as u64;
                s.phases = data.phases.len() as u64;
                s.finished = data.final_report.is_some();
            }
            parts.push(data);
        }
        Ok(with_nodes(merge_shards(meta, parts)?))
    }

    /// Writes a run saved by [`Rows::save`] (the store was down) into this store, under a new
    /// id; returns it.
    pub async fn import(&self, saved: &Rows) -> Result<i64> {
        let m = &saved.meta;
        if let Some(c) = saved.continues {
            let here = sqlx::query("SELECT name, started_unix_ms FROM herd_runs WHERE id = $1")
                .bind(c.run)
                .fetch_optional(&self.pool)
                .await?;
            let same = match &here {
                Some(r) => {
                    r.try_get::<String, _>("name")? == m.name
                        && r.try_get::<i64, _>("started_unix_ms")? == m.started_unix_ms
                }
                None => false,
            };
            if same {
                // The store the run was recorded in holds its start: the saved rows are its
                // end. Rows it already has (written just before it went down) stay once.
                for r in saved
                    .rows
                    .iter()
                    .filter(|r| r.source != Source::Owner.as_str())
                {
                    sqlx::query(
                        "INSERT INTO herd_rows (run_id, source, seq, at_ns, body, shard) \
                         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
                    )
                    .bind(c.run)
                    .bind(&r.source)
                    .bind(r.seq as i64)
                    .bind(r.at_ns as i64)
                    .bind(r.body.to_string())
                    .bind(i64::from(c.shard))
                    .execute(&self.pool)
                    .await
                    .with_context(|| format!("importing a {} row of run {}", r.source, c.run))?;
                }
                let status = if m.status == "running" {
                    "interrupted"
                } else {
                    m.status.as_str()
                };
                if m.shards.is_empty() {
                    self.finish(c.run, status).await?;
                } else {
                    self.finish_shard(c.run, c.shard, status).await?;
                }
                return Ok(c.run);
            }
            tracing::warn!(
                "{} does not hold run {} (recorded {} ms after the epoch): the saved rows are \
                 only its later part; they are imported as a run of their own",
                redact(&self.url),
                c.run,
                m.started_unix_ms
            );
        }
        let meta = self
            .begin(&m.name, &m.scenario, m.mono_start_ns as u64)
            .await?;
        sqlx::query("UPDATE herd_runs SET started_unix_ms = $1 WHERE id = $2")
            .bind(m.started_unix_ms)
            .bind(meta.id)
            .execute(&self.pool)
            .await
            .with_context(|| format!("importing run {} as run {}", m.id, meta.id))?;
        for r in saved
            .rows
            .iter()
            .filter(|r| r.source != Source::Owner.as_str())
        {
            sqlx::query(
                "INSERT INTO herd_rows (run_id, source, seq, at_ns, body) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(meta.id)
            .bind(&r.source)
            .bind(r.seq as i64)
            .bind(r.at_ns as i64)
            .bind(r.body.to_string())
            .execute(&self.pool)
            .await
            .with_context(|| format!("importing a {} row of run {}", r.source, m.id))?;
        }
        let status = if m.status == "running" {
            "interrupted"
        } else {
            m.status.as_str()
        };
        self.finish(meta.id, status).await?;
        Ok(meta.id)
    }

    /// Reads runs `a` (before) and `b` (after), for a comparison.
    pub async fn load_pair(&self, a: i64, b: i64) -> Result<(RunData, RunData)> {
        let before = self
            .load_run(Some(a))
            .await
            .with_context(|| format!("reading run {a}, the run before"))?;
        let after = self
            .load_run(Some(b))
            .await
            .with_context(|| format!("reading run {b}, the run after"))?;
        Ok((before, after))
    }
}

/// What SQLite said when the error is its "not a database" (SQLITE_NOTADB, 26) or "database
/// disk image is malformed" (SQLITE_CORRUPT, 11): the file is no store herd can use.
fn not_a_database(e: &anyhow::Error) -> Option<String> {
    e.chain()
        .find_map(|c| match c.downcast_ref::<sqlx::Error>() {
            Some(sqlx::Error::Database(d))
                if matches!(d.code().as_deref(), Some("26" | "11"))
                    || d.message().contains("file is not a database") =>
            {
                Some(format!("`{}`", d.message()))
            }
            _ => None,
        })
}

/// Connects once to `url` and says why not: refused, unreachable, rejected credentials.
async fn probe_connect(url: &str, shown: &str) -> Result<()> {
    use sqlx::Connection as _;
    let limit = std::time::Duration::from_secs(10);
    let what = || format!("opening the run store {shown}");
    match tokio::time::timeout(limit, sqlx::AnyConnection::connect(url)).await {
        Ok(Ok(c)) => {
            let _ = c.close().await;
            Ok(())
        }
        Ok(Err(sqlx::Error::Database(e))) => {
            let hint = match e.code().as_deref() {
                Some("28P01") | Some("28000") => {
                    ": check the user and password in the URL (percent-encode `@ : / ? #` in it)"
                }
                Some("3D000") => ": create the database first (`createdb`), or name another",
                _ => "",
            };
            Err(anyhow::anyhow!("{}{hint}", redact(e.message()))).with_context(what)
        }
        Ok(Err(sqlx::Error::Io(e))) => Err(anyhow::anyhow!(
            "{e}: is the server running at {} and reachable from here?",
            herd_seed::secret::host_of(url)
        ))
        .with_context(what),
        Ok(Err(e @ sqlx::Error::Configuration(_))) => Err(anyhow::anyhow!(
            "{}: percent-encode `@ : / ? #` in the user and password (`#` is %23, `/` is %2F)",
            redact(&e.to_string())
        ))
        .with_context(what),
        Ok(Err(e)) => Err(anyhow::anyhow!("{}", redact(&e.to_string()))).with_context(what),
        Err(_) => Err(anyhow::anyhow!(
            "no answer from {} within {}s: a firewall dropping packets, or the wrong host",
            herd_seed::secret::host_of(url),
            limit.as_secs()
        ))
        .with_context(what),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact("postgres://herd:s3cret@127.0.0.1:5432/herd"),
            "postgres://herd:***@127.0.0.1:5432/herd"
        );
        assert_eq!(redact("sqlite:runs.db"), "sqlite:runs.db");
    }

    #[tokio::test]
    async fn rows_survive_a_reopen_in_order() {
        let dir = herd_testkit::TempDir::new("store");
        let url = default_url(&dir);
        {
            let s = Store::open(&url).await.unwrap();
            let run = s.begin("t", "t.toml", 5).await.unwrap();
            for i in 0..3u64 {
                s.put(
                    run.id,
                    Source::Probe,
                    i,
                    i * 10,
                    &serde_json::json!({"i": i}),
                )
                .await
                .unwrap();
            }
            // Not finished: as if the process had been killed here.
        }
        let s = Store::open(&url).await.unwrap();
        let meta = s.meta(None).await.unwrap();
        assert_eq!((meta.status.as_str(), meta.mono_start_ns), ("running", 5));
        let rows: Vec<serde_json::Value> = s.rows(meta.id, Source::Probe).await.unwrap();
        assert_eq!(
            rows,
            vec![
                serde_json::json!({"i": 0}),
                serde_json::json!({"i": 1}),
                serde_json::json!({"i": 2})
            ]
        );
        assert!(
            s.meta(Some(99))
                .await
                .unwrap_err()
                .to_string()
                .contains("run 99 is not in")
        );
        s.finish(meta.id, "finished").await.unwrap();
        assert_eq!(s.list().await.unwrap()[0].status, "finished");
    }

    #[test]
    fn sqlite_urls_imply_rwc_and_never_show_it_and_bad_urls_say_the_forms() {
        let c = |u: &str| connect_url(u).unwrap();
        assert_eq!(
            c("sqlite:/tmp/x/new.db"),
            (
                "sqlite:/tmp/x/new.db?mode=rwc".into(),
                "sqlite:/tmp/x/new.db".into()
            )
        );
        assert_eq!(c("sqlite:/tmp/x.db?mode=rwc").1, "sqlite:/tmp/x.db");
        assert_eq!(
            c("sqlite:/tmp/x.db?mode=ro"),
            (
                "sqlite:/tmp/x.db?mode=ro".into(),
                "sqlite:/tmp/x.db?mode=ro".into()
            )
        );
        assert_eq!(
            c("postgres://u:pw@h/db"),
            (
                "postgres://u:pw@h/db".into(),
                "postgres://u:***@h/db".into()
            )
        );
        for (bad, says) in [
            ("", "the run store URL is empty: give sqlite:PATH"),
            ("runs.db", "runs.db is neither SQLite nor PostgreSQL"),
            ("u:s3cret@h/db", "u:***@h/db is neither"),
        ] {
            let e = connect_url(bad).unwrap_err().to_string();
            assert!(
                e.contains(says) && e.contains("postgres://USER"),
                "{bad}: {e}"
            );
        }
    }

    #[tokio::test]
    async fn a_finished_run_is_whole_in_runs_db_alone() {
        let dir = herd_testkit::TempDir::new("store-wal");
        // The documented form, for a file and a directory that do not exist yet.
        let url = format!("sqlite:{}", dir.join("new/runs.db").display());
        let s = Store::open(&url).await.unwrap();
        let run = s.begin("t", "t.toml", 1).await.unwrap();
        s.put(run.id, Source::Probe, 0, 0, &serde_json::json!({"i": 0}))
            .await
            .unwrap();
        s.finish(run.id, "finished").await.unwrap();
        s.close().await;
        for side in ["runs.db-wal", "runs.db-shm"] {
            assert!(!dir.join("new").join(side).exists(), "{side} left behind");
        }
        // Copied alone, as a user mails it.
        std::fs::copy(dir.join("new/runs.db"), dir.join("copy.db")).unwrap();
        let copy = Store::open(&format!("sqlite:{}", dir.join("copy.db").display()))
            .await
            .unwrap();
        let meta = copy.meta(None).await.unwrap();
        assert_eq!(meta.status, "finished");
        let rows: Vec<serde_json::Value> = copy.rows(meta.id, Source::Probe).await.unwrap();
        assert_eq!(rows.len(), 1);
    }

    #[tokio::test]
    async fn a_running_run_whose_process_is_gone_reads_interrupted() {
        let dir = herd_testkit::TempDir::new("store-owner");
        let s = Store::open(&default_url(&dir)).await.unwrap();
        let run = s.begin("t", "t.toml", 1).await.unwrap();
        // This process lives: still running.
        assert_eq!(s.meta(None).await.unwrap().status, "running");
        // A process that has exited: its pid and start time no longer match.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        let gone = Owner { pid, ..Owner::me() };
        sqlx::query("UPDATE herd_rows SET body = $1 WHERE run_id = $2 AND source = 'owner'")
            .bind(serde_json::to_string(&gone).unwrap())
            .bind(run.id)
            .execute(&s.pool)
            .await
            .unwrap();
        assert_eq!(s.meta(None).await.unwrap().status, "interrupted");
        assert_eq!(s.list().await.unwrap()[0].status, "interrupted");
        // The same pid seen from another PID namespace (a shard in a container with the
        // host's name): nothing can be told, and an owner row written before herd recorded
        // namespaces (no `pid_ns`) still reads as before.
        let me = Owner::me();
        assert!(me.pid_ns != 0);
        assert!(
            !Owner {
                pid,
                pid_ns: me.pid_ns + 1,
                ..Owner::me()
            }
            .gone()
        );
        let old: Owner = serde_json::from_str(&format!(
            r#"{{"pid":{pid},"host":"{}","boot_id":"{}","start_ticks":1}}"#,
            me.host, me.boot_id
        ))
        .unwrap();
        assert!(old.gone());
        // A finished run is what it says, whatever became of its process.
        s.finish(run.id, "stopped").await.unwrap();
        assert_eq!(s.meta(None).await.unwrap().status, "stopped");
    }
}
