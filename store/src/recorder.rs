//! The one run writer: every row of a run (or of one node's probe) is written as it arrives
//! and committed on return while the store answers. A store that fails (PostgreSQL stopped,
//! a full disk) is retried with a bounded backoff, the rows kept in memory meanwhile and
//! written in order once it answers again; every row is also kept until the end, so a store
//! that never comes back costs no number of the report (the caller saves them for
//! `herd import`). `herd run`, each shard of a sharded run and the node probe
//! (`herd probe --store`) all write through it.

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use herd_model::{DriverEvent, ProbeInterval, RunMeta, RunResult};

use crate::{NODE_PROBE, Row, Rows, Source, Store};

/// The first retry's wait; each failure doubles it up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// The longest wait between two tries of a store that is down.
pub const MAX_BACKOFF: Duration = Duration::from_secs(4);
/// How long one write may take before the store counts as down.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the end of a run keeps trying a store that is down before giving up on it.
pub const FINAL_RETRY: Duration = Duration::from_secs(6);

/// Whose rows a [`Recorder`] writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Writer {
    /// The run's own process: a run of one process (`shard` None) or one shard of a sharded
    /// run. It closes the run (or its shard) when it finishes.
    Run {
        /// This process's shard index.
        shard: Option<u32>,
    },
    /// One node's probe writing into a run that others drive (`herd probe --store URL --run
    /// ID --node NODE`): its rows are the node's, and the run is not its to close.
    Node(String),
}

/// Writes one run's rows in order, buffering and retrying while the store is down.
pub struct Recorder {
    store: Store,
    run: i64,
    writer: Writer,
    /// CLOCK_MONOTONIC at the run's start: driver offsets become probe-comparable times.
    mono0: u64,
    /// Next sequence number per kind of row: driver intervals, phase ends, probe intervals.
    seq: [u64; 3],
    /// Every row so far, in order.
    rows: Rows,
    /// Rows not yet in the store (indices into `rows`), oldest first.
    pending: VecDeque<usize>,
    /// When the store stopped answering, while it does not.
    down_since: Option<Instant>,
    /// No write is tried before this.
    retry_at: Instant,
    backoff: Duration,
}

impl Recorder {
    /// A writer of `meta`'s rows into `store`.
    pub fn new(store: &Store, meta: RunMeta, writer: Writer) -> Self {
        Recorder {
            store: store.clone(),
            run: meta.id,
            writer,
            mono0: meta.mono_start_ns as u64,
            seq: [0; 3],
            rows: Rows {
                meta,
                rows: Vec::new(),
            },
            pending: VecDeque::new(),
            down_since: None,
            retry_at: Instant::now(),
            backoff: FIRST_BACKOFF,
        }
    }

    /// Moves the run's clock to `mono0` (CLOCK_MONOTONIC ns): a shard's plan starts at the
    /// common start its barrier gave, not when it registered.
    pub fn start_at(&mut self, mono0: u64) {
        self.mono0 = mono0;
    }

    /// Records one driver event; returns the final result when the event is the last.
    pub async fn driver_event(&mut self, e: DriverEvent) -> Result<Option<RunResult>> {
        let ms = |ms: u64| self.mono0 + ms * 1_000_000;
        match e {
            DriverEvent::Interval(iv) => {
                let at = ms(iv.end_ms);
                self.put(Source::Driver, 0, at, &iv).await?;
            }
            DriverEvent::PhaseEnd(p) => {
                let at = ms(p.start_ms + p.duration_ms);
                self.put(Source::Phase, 1, at, &p).await?;
            }
            DriverEvent::Done(r) => {
                let at = ms(r.duration_ms);
                self.keep(Source::Report.as_str().to_owned(), 0, at, &r)?;
                self.flush().await;
                return Ok(Some(*r));
            }
        }
        Ok(None)
    }

    /// Records one probe interval (a node's, under its node's source).
    pub async fn probe_interval(&mut self, iv: &ProbeInterval) -> Result<()> {
        self.put(Source::Probe, 2, iv.at_ns, iv).await
    }

    /// Records a row of which a run has one (its objectives, its seeding, …).
    pub async fn put_once(&mut self, source: Source, body: &impl serde::Serialize) -> Result<()> {
        self.keep(source.as_str().to_owned(), 0, 0, body)?;
        self.flush().await;
        Ok(())
    }

    async fn put(
        &mut self,
        source: Source,
        kind: usize,
        at_ns: u64,
        body: &impl serde::Serialize,
    ) -> Result<()> {
        let n = self.seq[kind];
        self.seq[kind] += 1;
        let name = match (&self.writer, source) {
            (Writer::Node(node), Source::Probe) => format!("{NODE_PROBE}{node}"),
            _ => source.as_str().to_owned(),
        };
        self.keep(name, n, at_ns, body)?;
        self.flush().await;
        Ok(())
    }

    fn keep(
        &mut self,
        source: String,
        seq: u64,
        at_ns: u64,
        body: &impl serde::Serialize,
    ) -> Result<()> {
        let body = serde_json::to_value(body).context("encoding a run row")?;
        self.pending.push_back(self.rows.rows.len());
        self.rows.rows.push(Row {
            source,
            seq,
            at_ns,
            body,
        });
        Ok(())
    }

    /// Writes the pending rows in order, unless the store is down and its next try not due.
    async fn flush(&mut self) {
        if self.pending.is_empty() || Instant::now() < self.retry_at {
            return;
        }
        let shard = match self.writer {
            Writer::Run { shard } => shard.unwrap_or(0),
            Writer::Node(_) => 0,
        };
        while let Some(&i) = self.pending.front() {
            let r = &self.rows.rows[i];
            let write = self
                .store
                .put_row(self.run, shard, &r.source, r.seq, r.at_ns, &r.body);
            let result = match tokio::time::timeout(WRITE_TIMEOUT, write).await {
                Ok(r) => r,
                Err(_) => Err(anyhow::anyhow!("no answer within {WRITE_TIMEOUT:?}")),
            };
            match result {
                Ok(()) => {
                    self.pending.pop_front();
                }
                Err(e) => {
                    if self.down_since.is_none() {
                        tracing::warn!(
                            "the run store {} failed ({e:#}); keeping the run's rows in memory \
                             and retrying every {}s at most",
                            self.store.url(),
                            MAX_BACKOFF.as_secs()
                        );
                        self.down_since = Some(Instant::now());
                    }
                    self.retry_at = Instant::now() + self.backoff;
                    self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                    return;
                }
            }
        }
        if let Some(since) = self.down_since.take() {
            tracing::info!(
                "the run store {} is back after {:.1}s; every buffered row is written",
                self.store.url(),
                since.elapsed().as_secs_f64()
            );
        }
        self.backoff = FIRST_BACKOFF;
    }

    /// Writes what is pending and closes the run (or this shard) with `status`; a node's
    /// writer only writes. Returns every row when the store is still down after
    /// [`FINAL_RETRY`].
    pub async fn finish(mut self, status: &str) -> Option<Rows> {
        let give_up = Instant::now() + FINAL_RETRY;
        loop {
            self.retry_at = Instant::now();
            self.flush().await;
            if self.pending.is_empty() {
                let close = async {
                    match self.writer {
                        Writer::Run { shard: Some(i) } => {
                            self.store.finish_shard(self.run, i, status).await
                        }
                        Writer::Run { shard: None } => self.store.finish(self.run, status).await,
                        Writer::Node(_) => Ok(()),
                    }
                };
                match tokio::time::timeout(WRITE_TIMEOUT, close).await {
                    Ok(Ok(())) => return None,
                    Ok(Err(e)) => tracing::warn!("closing the run: {e:#}"),
                    Err(_) => tracing::warn!("closing the run: no answer from the store"),
                }
            }
            if Instant::now() >= give_up {
                break;
            }
            tokio::time::sleep(self.backoff).await;
        }
        let mut rows = self.rows;
        rows.meta.status = status.to_owned();
        Some(rows)
    }
}
