//! Shards of one run (`herd run --shard I/N --run-key KEY`): they find their run by its key,
//! register, wait for each other and start at one wall-clock instant; each writes its rows
//! tagged with its index, and a report merges them.
//!
//! No shard leads: the first to register creates the run, every one computes the same start
//! from the registrations once all N are in (the last registration plus [`START_LEAD`]).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, Result};
use herd_model::{RunMeta, Shard, ShardInfo};
use sqlx::Row as _;

use crate::{Owner, Source, Store, redact};

/// Between the last shard's registration and the common start: long enough for every shard
/// to see it (they poll every [`POLL`]) and be asleep before it comes.
pub const START_LEAD: Duration = Duration::from_millis(1500);

/// How often a waiting shard looks for the others.
const POLL: Duration = Duration::from_millis(100);

/// Bad usage of shards (exit 2): the shard's number, the run's count, the store.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ShardUsageError(pub String);

/// The shards of a run did not all register in time.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MissingShards(pub String);

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A shard's status once its node was lost (`herd launch swarm`: the swarm marked the node
/// down); the run then closes `interrupted`.
pub const LOST: &str = "lost";

/// **A test knob, not a setting**: milliseconds (negative: behind) added to every wall-clock
/// reading a shard times itself by — its registration, its wait for the common start, its
/// recorded start — as if its host's clock were that far off. The multi-node tests give it
/// to the shards of one node (docs/scale-out.md).
pub const TEST_CLOCK_OFFSET: &str = "HERD_TEST_CLOCK_OFFSET_MS";

/// This host's wall clock as a shard reads it: the system's, plus [`TEST_CLOCK_OFFSET`].
pub fn wall_now() -> SystemTime {
    let now = SystemTime::now();
    match std::env::var(TEST_CLOCK_OFFSET)
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
    {
        Some(ms) if ms >= 0 => now + Duration::from_millis(ms as u64),
        Some(ms) => now - Duration::from_millis(ms.unsigned_abs()),
        None => now,
    }
}

/// `t` moved by `ns` (later when positive).
fn shift(t: SystemTime, ns: i64) -> SystemTime {
    if ns >= 0 {
        t + Duration::from_nanos(ns as u64)
    } else {
        t - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn unix_ns(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// How this host's wall clock, as a shard reads it ([`wall_now`]), stands against the run
/// store's: the shards of a run, on hosts whose clocks differ, time their common start on
/// the store's clock, which they all read through the same server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreClock {
    /// How far this host's clock reads ahead of the store's, ns (negative: behind).
    pub ahead_ns: i64,
    /// The round trip of the query that read the store's clock, ns: the offset is known to
    /// half of it.
    pub rtt_ns: i64,
}

impl StoreClock {
    /// Now, on the store's clock.
    pub fn now(&self) -> SystemTime {
        self.to_store(wall_now())
    }

    /// The local wall-clock instant of `t` on the store's clock.
    pub fn to_local(&self, t: SystemTime) -> SystemTime {
        shift(t, self.ahead_ns)
    }

    /// The store-clock instant of the local wall-clock instant `t`.
    pub fn to_store(&self, t: SystemTime) -> SystemTime {
        shift(t, -self.ahead_ns)
    }
}

/// Reads of the store's clock whose best (shortest round trip) gives the offset.
const CLOCK_READS: usize = 5;

impl Store {
    /// The store's tables, created if missing, and the `shard` column added to rows written
    /// before it existed (those read as shard 0 of a run of one). One transaction, and on
    /// PostgreSQL under an advisory lock: N shards opening a fresh store at once would
    /// otherwise race on `CREATE TABLE IF NOT EXISTS` (it is not atomic there: the loser
    /// fails on a duplicate type name).
    pub(crate) async fn create_schema(&self) -> Result<()> {
        let what = || {
            format!(
                "creating herd's tables in the run store {}",
                redact(&self.url)
            )
        };
        let mut tx = self.pool.begin().await.with_context(what)?;
        if self.is_postgres() {
            sqlx::query("SELECT 1 AS one FROM (SELECT pg_advisory_xact_lock(7292882)) AS l")
                .fetch_all(&mut *tx)
                .await
                .with_context(what)?;
        }
        for sql in [
            "CREATE TABLE IF NOT EXISTS herd_runs (id BIGINT PRIMARY KEY, name TEXT NOT NULL, \
             scenario TEXT NOT NULL, started_unix_ms BIGINT NOT NULL, mono_start_ns BIGINT NOT NULL, \
             finished_unix_ms BIGINT, status TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS herd_rows (run_id BIGINT NOT NULL, source TEXT NOT NULL, \
             seq BIGINT NOT NULL, at_ns BIGINT NOT NULL, body TEXT NOT NULL, \
             shard BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (run_id, shard, source, seq))",
            "CREATE TABLE IF NOT EXISTS herd_run_keys (run_key TEXT PRIMARY KEY, \
             run_id BIGINT NOT NULL, shards BIGINT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS herd_shards (run_id BIGINT NOT NULL, shard BIGINT NOT NULL, \
             shards BIGINT NOT NULL, host TEXT NOT NULL, pid BIGINT NOT NULL, \
             registered_unix_ms BIGINT NOT NULL, started_unix_ns BIGINT, status TEXT NOT NULL, \
             clock_ahead_ns BIGINT, PRIMARY KEY (run_id, shard))",
        ] {
            sqlx::query(sql)
                .execute(&mut *tx)
                .await
                .with_context(what)?;
        }
        let count = if self.is_postgres() {
            "SELECT COUNT(*) AS n FROM information_schema.columns \
             WHERE table_name = 'herd_rows' AND column_name = 'shard'"
        } else {
            "SELECT COUNT(*) AS n FROM pragma_table_info('herd_rows') WHERE name = 'shard'"
        };
        let has_column: i64 = sqlx::query(count)
            .fetch_one(&mut *tx)
            .await
            .with_context(what)?
            .try_get("n")?;
        if has_column == 0 {
            sqlx::query("ALTER TABLE herd_rows ADD COLUMN shard BIGINT NOT NULL DEFAULT 0")
                .execute(&mut *tx)
                .await
                .with_context(what)?;
            if self.is_postgres() {
                // Shards number their rows independently: the key needs the shard. (SQLite
                // keeps its old key: a SQLite store holds runs of one shard only.)
                sqlx::query(
                    "ALTER TABLE herd_rows DROP CONSTRAINT IF EXISTS herd_rows_pkey, \
                     ADD PRIMARY KEY (run_id, shard, source, seq)",
                )
                .execute(&mut *tx)
                .await
                .with_context(what)?;
            }
        }
        // Each shard's clock against the store's, since shards start on the store's clock.
        let count = if self.is_postgres() {
            "SELECT COUNT(*) AS n FROM information_schema.columns \
             WHERE table_name = 'herd_shards' AND column_name = 'clock_ahead_ns'"
        } else {
            "SELECT COUNT(*) AS n FROM pragma_table_info('herd_shards') WHERE name = 'clock_ahead_ns'"
        };
        let has_column: i64 = sqlx::query(count)
            .fetch_one(&mut *tx)
            .await
            .with_context(what)?
            .try_get("n")?;
        if has_column == 0 {
            sqlx::query("ALTER TABLE herd_shards ADD COLUMN clock_ahead_ns BIGINT")
                .execute(&mut *tx)
                .await
                .with_context(what)?;
        }
        tx.commit().await.with_context(what)?;
        Ok(())
    }

    fn is_postgres(&self) -> bool {
        self.url.starts_with("postgres")
    }

    /// This host's wall clock against the store's: on PostgreSQL, the server's
    /// `clock_timestamp()` read [`CLOCK_READS`] times, the read with the shortest round trip
    /// taken at its midpoint (as NTP does); a SQLite store is a file on this host, whose clock
    /// is this host's system clock.
    pub async fn clock(&self) -> Result<StoreClock> {
        if !self.is_postgres() {
            return Ok(StoreClock {
                ahead_ns: unix_ns(wall_now()) - unix_ns(SystemTime::now()),
                rtt_ns: 0,
            });
        }
        let mut best: Option<StoreClock> = None;
        for _ in 0..CLOCK_READS {
            let (sent, t0) = (wall_now(), std::time::Instant::now());
            let us: i64 = sqlx::query(
                "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT) AS us",
            )
            .fetch_one(&self.pool)
            .await
            .with_context(|| format!("reading the clock of the run store {}", redact(&self.url)))?
            .try_get("us")?;
            let rtt = t0.elapsed().as_nanos() as i64;
            let read = StoreClock {
                ahead_ns: unix_ns(sent) + rtt / 2 - us * 1000,
                rtt_ns: rtt,
            };
            if best.is_none_or(|b| read.rtt_ns < b.rtt_ns) {
                best = Some(read);
            }
        }
        best.context("no read of the store's clock")
    }

    /// Shard `shard` of the run named `key`: creates the run if it is the first to come,
    /// registers the shard, and returns the run's header. Bad usage ([`ShardUsageError`]): a
    /// SQLite store with more than one shard, another shard count than the run's, an index
    /// already taken.
    pub async fn join(
        &self,
        key: &str,
        shard: Shard,
        name: &str,
        scenario: &str,
        mono_start_ns: u64,
    ) -> Result<RunMeta> {
        if !self.is_postgres() && !shard.is_whole() {
            return Err(ShardUsageError(format!(
                "--shard {shard}: the shards of a run write to one shared store, and {} is a \
                 SQLite file on this host; give --store postgres://USER:PASSWORD@HOST/DB, \
                 reachable from every shard",
                redact(&self.url)
            ))
            .into());
        }
        let mut tx = self.pool.begin().await?;
        if self.is_postgres() {
            // One run per key even when every shard comes at once.
            sqlx::query("SELECT 1 AS one FROM (SELECT pg_advisory_xact_lock(7292883)) AS l")
                .fetch_all(&mut *tx)
                .await?;
        }
        let found = sqlx::query("SELECT run_id, shards FROM herd_run_keys WHERE run_key = $1")
            .bind(key)
            .fetch_optional(&mut *tx)
            .await
            .with_context(|| format!("looking up run key {key}"))?;
        let run = match found {
            Some(row) => {
                let (run, count): (i64, i64) = (row.try_get("run_id")?, row.try_get("shards")?);
                if count != i64::from(shard.count) {
                    return Err(ShardUsageError(format!(
                        "--shard {shard} --run-key {key}: run {run} of that key has {count} \
                         shards, not {}; give every shard of one run the same N",
                        shard.count
                    ))
                    .into());
                }
                run
            }
            None => {
                let next = self
                    .insert_run(&mut tx, name, scenario, now_ms(), mono_start_ns)
                    .await?;
                sqlx::query(
                    "INSERT INTO herd_run_keys (run_key, run_id, shards) VALUES ($1, $2, $3)",
                )
                .bind(key)
                .bind(next)
                .bind(i64::from(shard.count))
                .execute(&mut *tx)
                .await?;
                next
            }
        };
        let taken = sqlx::query(
            "SELECT host, pid, status FROM herd_shards WHERE run_id = $1 AND shard = $2",
        )
        .bind(run)
        .bind(i64::from(shard.index))
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(t) = taken {
            let (host, pid, status): (String, i64, String) =
                (t.try_get("host")?, t.try_get("pid")?, t.try_get("status")?);
            return Err(ShardUsageError(format!(
                "--shard {shard} --run-key {key}: shard {} of run {run} is already taken (by pid \
                 {pid} on {host}, {status}); give each shard its own index, and a new --run-key \
                 for a new run",
                shard.index
            ))
            .into());
        }
        let me = Owner::me();
        // On the store's clock: the common start is computed from every shard's registration.
        let registered = self.clock().await?.now();
        sqlx::query(
            "INSERT INTO herd_shards (run_id, shard, shards, host, pid, registered_unix_ms, status) \
             VALUES ($1, $2, $3, $4, $5, $6, 'running')",
        )
        .bind(run)
        .bind(i64::from(shard.index))
        .bind(i64::from(shard.count))
        .bind(&me.host)
        .bind(i64::from(me.pid))
        .bind(unix_ns(registered) / 1_000_000)
        .execute(&mut *tx)
        .await?;
        tx.commit()
            .await
            .with_context(|| format!("registering shard {shard} of run {run}"))?;
        self.put_shard(run, shard.index, Source::Owner, 0, 0, &me)
            .await?;
        let mut meta = self.meta(Some(run)).await?;
        meta.mono_start_ns = mono_start_ns as i64;
        Ok(meta)
    }

    /// The run the shards of `key` record, once its first shard has created it; fails
    /// after `timeout`.
    pub async fn wait_for_key(&self, key: &str, timeout: Duration) -> Result<i64> {
        let give_up = std::time::Instant::now() + timeout;
        loop {
            let row = sqlx::query("SELECT run_id FROM herd_run_keys WHERE run_key = $1")
                .bind(key)
                .fetch_optional(&self.pool)
                .await
                .with_context(|| format!("looking up run key {key}"))?;
            if let Some(r) = row {
                return Ok(r.try_get("run_id")?);
            }
            if std::time::Instant::now() >= give_up {
                return Err(MissingShards(format!(
                    "no shard of run key {key} registered in {} within {}s: start the shards \
                     (herd run --shard I/N --run-key {key}) against the same store",
                    redact(&self.url),
                    timeout.as_secs()
                ))
                .into());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until all of the run's shards have registered, then returns the instant they all
    /// start at, on the store's clock ([`Store::clock`]). Fails after `timeout` naming the
    /// shards that did not come.
    pub async fn barrier(&self, run: i64, shard: Shard, timeout: Duration) -> Result<SystemTime> {
        let give_up = std::time::Instant::now() + timeout;
        loop {
            let rows = sqlx::query(
                "SELECT shard, registered_unix_ms FROM herd_shards WHERE run_id = $1 ORDER BY shard",
            )
            .bind(run)
            .fetch_all(&self.pool)
            .await
            .with_context(|| format!("waiting for the shards of run {run}"))?;
            let mut here = Vec::new();
            let mut last = 0i64;
            for r in &rows {
                here.push(r.try_get::<i64, _>("shard")? as u32);
                last = last.max(r.try_get("registered_unix_ms")?);
            }
            if here.len() as u32 >= shard.count {
                return Ok(UNIX_EPOCH + Duration::from_millis(last as u64) + START_LEAD);
            }
            if std::time::Instant::now() >= give_up {
                let missing: Vec<String> = (0..shard.count)
                    .filter(|i| !here.contains(i))
                    .map(|i| format!("{i}/{}", shard.count))
                    .collect();
                return Err(MissingShards(format!(
                    "shard {shard} of run {run} waited {}s for the other shards to register in {}; \
                     missing: {} — start them with the same --run-key and --store, or raise \
                     --shard-timeout",
                    timeout.as_secs(),
                    redact(&self.url),
                    missing.join(", ")
                ))
                .into());
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Records when shard `index`'s plan clock started, on the store's clock, and how far its
    /// host's clock read ahead of the store's.
    pub async fn shard_started(
        &self,
        run: i64,
        index: u32,
        at: SystemTime,
        clock: StoreClock,
    ) -> Result<()> {
        sqlx::query(
            "UPDATE herd_shards SET started_unix_ns = $1, clock_ahead_ns = $2 \
             WHERE run_id = $3 AND shard = $4",
        )
        .bind(unix_ns(at))
        .bind(clock.ahead_ns)
        .bind(run)
        .bind(i64::from(index))
        .execute(&self.pool)
        .await
        .with_context(|| format!("recording shard {index}'s start in run {run}"))?;
        Ok(())
    }

    /// Closes shard `index` with `status`; the run is closed once its last shard is, with the
    /// worst of their statuses.
    pub async fn finish_shard(&self, run: i64, index: u32, status: &str) -> Result<()> {
        sqlx::query("UPDATE herd_shards SET status = $1 WHERE run_id = $2 AND shard = $3")
            .bind(status)
            .bind(run)
            .bind(i64::from(index))
            .execute(&self.pool)
            .await
            .with_context(|| format!("closing shard {index} of run {run}"))?;
        let statuses: Vec<String> = sqlx::query("SELECT status FROM herd_shards WHERE run_id = $1")
            .bind(run)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| r.try_get("status"))
            .collect::<Result<_, _>>()?;
        if statuses.iter().any(|s| s == "running") {
            return Ok(());
        }
        // A lost shard's run is interrupted, as a killed one's.
        let worst = ["failed", "interrupted", LOST, "stopped"]
            .into_iter()
            .find(|w| statuses.iter().any(|s| s == w))
            .map_or("finished", |w| if w == LOST { "interrupted" } else { w });
        self.finish(run, worst).await
    }

    /// The run's shards as registered, with their statuses made honest (a shard still
    /// `running` whose process on this host is gone is `interrupted`); empty for a run of
    /// one process.
    pub(crate) async fn shard_infos(&self, run: i64) -> Result<Vec<ShardInfo>> {
        let rows = sqlx::query(
            "SELECT shard, shards, host, pid, started_unix_ns, clock_ahead_ns, status \
             FROM herd_shards WHERE run_id = $1 ORDER BY shard",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await
        .with_context(|| format!("reading the shards of run {run}"))?;
        let owners = self.owners(run).await?;
        let mut out = Vec::new();
        for r in &rows {
            let index = r.try_get::<i64, _>("shard")? as u32;
            let mut status: String = r.try_get("status")?;
            if status == "running" && owners.iter().any(|(i, o)| *i == index && o.gone()) {
                status = "interrupted".into();
            }
            out.push(ShardInfo {
                index,
                count: r.try_get::<i64, _>("shards")? as u32,
                host: r.try_get("host")?,
                pid: r.try_get::<i64, _>("pid")? as u32,
                status,
                started_unix_ns: r.try_get("started_unix_ns")?,
                clock_ahead_ns: r.try_get("clock_ahead_ns")?,
                ..ShardInfo::default()
            });
        }
        Ok(out)
    }

    /// Each shard's owner row.
    async fn owners(&self, run: i64) -> Result<Vec<(u32, Owner)>> {
        let rows = sqlx::query(
            "SELECT shard, body FROM herd_rows WHERE run_id = $1 AND source = 'owner' ORDER BY shard",
        )
        .bind(run)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let body: String = r.try_get("body")?;
                Ok((
                    r.try_get::<i64, _>("shard")? as u32,
                    serde_json::from_str(&body).context("an owner row does not decode")?,
                ))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_store_from_before_shards_reads_its_rows_as_shard_0() {
        let dir = herd_testkit::TempDir::new("store-old");
        let url = crate::default_url(&dir);
        {
            // The tables as herd wrote them before shards existed.
            sqlx::any::install_default_drivers();
            let pool = sqlx::AnyPool::connect(&format!("{url}?mode=rwc"))
                .await
                .unwrap();
            for sql in [
                "CREATE TABLE herd_runs (id BIGINT PRIMARY KEY, name TEXT NOT NULL, \
                 scenario TEXT NOT NULL, started_unix_ms BIGINT NOT NULL, mono_start_ns BIGINT NOT NULL, \
                 finished_unix_ms BIGINT, status TEXT NOT NULL)",
                "CREATE TABLE herd_rows (run_id BIGINT NOT NULL, source TEXT NOT NULL, \
                 seq BIGINT NOT NULL, at_ns BIGINT NOT NULL, body TEXT NOT NULL, \
                 PRIMARY KEY (run_id, source, seq))",
                "INSERT INTO herd_runs VALUES (1, 'old', 'old.toml', 0, 0, 1, 'finished')",
                "INSERT INTO herd_rows VALUES (1, 'probe_missing', 0, 0, '\"no probe\"')",
            ] {
                sqlx::query(sql).execute(&pool).await.unwrap();
            }
            pool.close().await;
        }
        let s = Store::open(&url).await.unwrap();
        let data = s.load_run(Some(1)).await.unwrap();
        assert_eq!(data.probe_missing.as_deref(), Some("no probe"));
        assert!(data.meta.shards.is_empty());
        // New runs go in beside it.
        let run = s.begin("new", "new.toml", 1).await.unwrap();
        assert_eq!(run.id, 2);
        s.put(run.id, Source::ProbeMissing, 0, 0, &"x")
            .await
            .unwrap();
    }

    #[test]
    fn the_store_clock_moves_instants_between_the_two_clocks() {
        let c = StoreClock {
            ahead_ns: 800_000_000,
            rtt_ns: 1_000_000,
        };
        let t = UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(c.to_local(t), t + Duration::from_millis(800));
        assert_eq!(c.to_store(c.to_local(t)), t);
        let behind = StoreClock {
            ahead_ns: -250_000_000,
            rtt_ns: 0,
        };
        assert_eq!(behind.to_local(t), t - Duration::from_millis(250));
    }

    #[tokio::test]
    async fn a_store_from_before_clock_offsets_gets_the_column() {
        let dir = herd_testkit::TempDir::new("store-old-shards");
        let url = crate::default_url(&dir);
        {
            sqlx::any::install_default_drivers();
            let pool = sqlx::AnyPool::connect(&format!("{url}?mode=rwc"))
                .await
                .unwrap();
            sqlx::query(
                "CREATE TABLE herd_shards (run_id BIGINT NOT NULL, shard BIGINT NOT NULL, \
                 shards BIGINT NOT NULL, host TEXT NOT NULL, pid BIGINT NOT NULL, \
                 registered_unix_ms BIGINT NOT NULL, started_unix_ns BIGINT, status TEXT NOT NULL, \
                 PRIMARY KEY (run_id, shard))",
            )
            .execute(&pool)
            .await
            .unwrap();
            pool.close().await;
        }
        let s = Store::open(&url).await.unwrap();
        let meta = s.join("k", Shard::WHOLE, "n", "s.toml", 0).await.unwrap();
        let clock = s.clock().await.unwrap();
        // A SQLite store is on this host: its clock is this host's.
        assert_eq!(clock.rtt_ns, 0);
        s.shard_started(meta.id, 0, clock.now(), clock)
            .await
            .unwrap();
        let shards = s.meta(Some(meta.id)).await.unwrap().shards;
        assert_eq!(shards[0].clock_ahead_ns, Some(clock.ahead_ns));
        assert!(shards[0].started_unix_ns.is_some());
    }

    #[tokio::test]
    async fn shards_need_a_shared_store_not_a_sqlite_file() {
        let dir = herd_testkit::TempDir::new("store-shard-sqlite");
        let s = Store::open(&crate::default_url(&dir)).await.unwrap();
        let e = s
            .join("k", Shard::new(1, 2).unwrap(), "n", "s.toml", 0)
            .await
            .unwrap_err();
        assert!(e.is::<ShardUsageError>(), "{e:#}");
        assert!(e.to_string().contains("one shared store"), "{e:#}");
        // One shard of one is a run like any other, also in SQLite.
        let meta = s.join("k", Shard::WHOLE, "n", "s.toml", 0).await.unwrap();
        assert_eq!(meta.shards.len(), 1);
        let at = s
            .barrier(meta.id, Shard::WHOLE, Duration::from_secs(1))
            .await
            .unwrap();
        assert!(at > SystemTime::now() - Duration::from_secs(5));
        s.finish_shard(meta.id, 0, "finished").await.unwrap();
        assert_eq!(s.meta(Some(meta.id)).await.unwrap().status, "finished");
    }
}
