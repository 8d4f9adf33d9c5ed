//! The one run writer: every row of a run (or of one node's probe) is written as it arrives
//! and committed on return while the store answers. A store that fails (PostgreSQL stopped,
//! a full disk) is retried with a bounded backoff, the rows not yet written kept meanwhile
//! (in memory up to [`MAX_PENDING_BYTES`], then in a spill file on disk, in order) and
//! written in order once it answers again. Of the rows the store took, only the newest
//! [`KEEP_BYTES`] are kept, so the writer's memory stays flat however long the run. A store
//! that never comes back: [`Recorder::finish`] returns the kept rows and every row the store
//! never took, which the caller saves for `herd import` — the whole run when it was short,
//! its later part otherwise ([`Rows::continues`]: `herd import` appends it to the run in the
//! store that holds its start).
//! The writer also rolls its older rows up ([`crate::rollup`]). `herd run`, each shard of a
//! sharded run and the node probe (`herd probe --store`) all write through it.

use std::{
    collections::VecDeque,
    io::{BufRead as _, Seek as _, Write as _},
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use herd_model::{DriverEvent, ProbeInterval, RunMeta, RunResult};

use crate::{
    NODE_PROBE, Row, Rows, Source, Store,
    rollup::{Kind, Policy, Roller},
};

/// Rows waiting for a store that is down are kept in memory up to this many bytes (of their
/// JSON); past it they go, in order, to a spill file on disk.
pub const MAX_PENDING_BYTES: usize = 16 << 20;
/// Rows the store took are also kept, newest first, up to this many bytes: a short run whose
/// store is lost saves every row, a long one its newest rows and every row the store never
/// took ([`Rows::continues`] then names the run they continue).
pub const KEEP_BYTES: usize = 8 << 20;

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
    /// The run's header.
    meta: RunMeta,
    /// Rows not yet in the store, oldest first: in memory, then (older ones) spilled.
    pending: Backlog,
    /// The newest rows the store took, up to [`KEEP_BYTES`], as JSON text (a decoded row
    /// takes several times its text's size).
    kept: VecDeque<(String, u64, u64, String)>,
    kept_bytes: usize,
    /// False once a row the store took was dropped from `kept`.
    kept_all: bool,
    /// Roll-ups of the driver's and the probe's rows, when the writer rolls up.
    rollers: Option<[Roller; 2]>,
    /// A roll-up failed: said once.
    rollup_failed: bool,
    /// When the store stopped answering, while it does not.
    down_since: Option<Instant>,
    /// No write is tried before this.
    retry_at: Instant,
    backoff: Duration,
}

impl Recorder {
    /// A writer of `meta`'s rows into `store`.
    pub fn new(store: &Store, meta: RunMeta, writer: Writer) -> Self {
        let mono0 = meta.mono_start_ns as u64;
        let shard = match writer {
            Writer::Run { shard } => shard.unwrap_or(0),
            Writer::Node(_) => 0,
        };
        // A node's probe keeps its rows whole: its clock is its host's, and the phase
        // changes that bound a merge are on the driver's.
        let policy = match writer {
            Writer::Run { .. } => Policy::standard(),
            Writer::Node(_) => Policy::off(),
        };
        let spill = std::env::temp_dir().join(format!(
            "herd-run-{}-{}-{}.rows.jsonl",
            meta.id,
            shard,
            std::process::id()
        ));
        Recorder {
            store: store.clone(),
            run: meta.id,
            rollers: Some(Self::rollers(&policy, shard, mono0)),
            rollup_failed: false,
            writer,
            mono0,
            seq: [0; 3],
            meta,
            pending: Backlog::new(spill),
            kept: VecDeque::new(),
            kept_bytes: 0,
            kept_all: true,
            down_since: None,
            retry_at: Instant::now(),
            backoff: FIRST_BACKOFF,
        }
    }

    /// Moves the run's clock to `mono0` (CLOCK_MONOTONIC ns): a shard's plan starts at the
    /// common start its barrier gave, not when it registered.
    pub fn start_at(&mut self, mono0: u64) {
        self.mono0 = mono0;
        for r in self.rollers.iter_mut().flatten() {
            r.set_mono0(mono0);
        }
    }

    fn rollers(policy: &Policy, shard: u32, mono0: u64) -> [Roller; 2] {
        let roller = |kind, source: Source| {
            Roller::new(
                policy.clone(),
                kind,
                source.as_str().to_owned(),
                shard,
                mono0,
            )
        };
        [
            roller(Kind::Driver, Source::Driver),
            roller(Kind::Probe, Source::Probe),
        ]
    }

    /// Rolls the run's older rows up by `policy` instead of herd's standard one
    /// ([`Policy::off`]: keep every row at full resolution).
    pub fn roll_up(&mut self, policy: Policy) {
        let shard = match self.writer {
            Writer::Run { shard } => shard.unwrap_or(0),
            Writer::Node(_) => 0,
        };
        self.rollers = Some(Self::rollers(&policy, shard, self.mono0));
    }

    /// Writes rows the store did not take to `path` (JSON lines) once they pass
    /// [`MAX_PENDING_BYTES`] in memory, instead of a file in the system's temporary directory.
    pub fn spill_to(&mut self, path: PathBuf) {
        self.pending.path = path;
    }

    /// Records one driver event; returns the final result when the event is the last.
    pub async fn driver_event(&mut self, e: DriverEvent) -> Result<Option<RunResult>> {
        let ms = |ms: u64| self.mono0 + ms * 1_000_000;
        match e {
            DriverEvent::Interval(iv) => {
                let at = ms(iv.end_ms);
                if let Some([_, probe]) = &mut self.rollers {
                    probe.driver_interval(
                        ms(iv.end_ms.saturating_sub(iv.duration_ms)),
                        at,
                        iv.phase_index,
                    );
                }
                self.put(Source::Driver, 0, at, &iv).await?;
            }
            DriverEvent::PhaseEnd(p) => {
                let at = ms(p.start_ms + p.duration_ms);
                self.put(Source::Phase, 1, at, &p).await?;
            }
            DriverEvent::Done(r) => {
                let at = ms(r.duration_ms);
                // The timeline is in the driver rows already: the final row does not repeat it.
                let stored = herd_model::RunResult {
                    intervals: Vec::new(),
                    ..(*r).clone()
                };
                self.keep(Source::Report.as_str().to_owned(), 0, at, &stored)?;
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
        let text = body.to_string();
        self.pending.push(
            Row {
                source,
                seq,
                at_ns,
                body,
            },
            text,
        )
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
        loop {
            let (r, text) = match self.pending.front() {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    tracing::error!("reading back the run's spilled rows: {e:#}");
                    return;
                }
            };
            let write = self
                .store
                .put_row_text(self.run, shard, &r.source, r.seq, r.at_ns, text);
            let result = match tokio::time::timeout(WRITE_TIMEOUT, write).await {
                Ok(r) => r,
                Err(_) => Err(anyhow::anyhow!("no answer within {WRITE_TIMEOUT:?}")),
            };
            match result {
                Ok(()) => {
                    let (r, text) = self.pending.pop();
                    self.written(r, text);
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
        self.roll().await;
    }

    /// A row is in the store: the roll-ups may merge it later, and it is kept while the
    /// newest rows fit in [`KEEP_BYTES`].
    fn written(&mut self, r: Row, body: String) {
        self.roll_on(&r);
        self.kept_bytes += body.len() + 64;
        self.kept.push_back((r.source, r.seq, r.at_ns, body));
        while self.kept_bytes > KEEP_BYTES {
            match self.kept.pop_front() {
                Some(k) => {
                    self.kept_bytes -= k.3.len() + 64;
                    self.kept_all = false;
                }
                None => break,
            }
        }
    }

    fn roll_on(&mut self, r: &Row) {
        let Some(rollers) = &mut self.rollers else {
            return;
        };
        let (i, span_ns) = if r.source == Source::Driver.as_str() {
            let ms = r.body.get("duration_ms").and_then(|v| v.as_u64());
            (0, ms.unwrap_or(0) * 1_000_000)
        } else if r.source == Source::Probe.as_str() {
            (
                1,
                r.body
                    .get("interval_ns")
                    .and_then(|v| v.as_u64())
                    .unwrap_or(0),
            )
        } else {
            return;
        };
        rollers[i].written(r.seq, r.at_ns, span_ns);
    }

    /// Runs the roll-ups that are due; a failure is said once and the rows stay as they are.
    async fn roll(&mut self) {
        let Some(rollers) = &mut self.rollers else {
            return;
        };
        for r in rollers.iter_mut() {
            if !r.due() {
                continue;
            }
            match tokio::time::timeout(WRITE_TIMEOUT * 4, r.pass(&self.store, self.run)).await {
                Ok(Ok(_)) => {
                    // What the pass deleted leaves the file; a failure only keeps the pages.
                    let _ = self.store.release_free_pages().await;
                }
                Ok(Err(e)) if !self.rollup_failed => {
                    self.rollup_failed = true;
                    tracing::warn!("rolling up the run's older rows: {e:#}; they stay as they are");
                }
                Err(_) if !self.rollup_failed => {
                    self.rollup_failed = true;
                    tracing::warn!("rolling up the run's older rows: no answer from the store");
                }
                _ => {}
            }
        }
    }

    /// Writes what is pending and closes the run (or this shard) with `status`; a node's
    /// writer only writes. Returns the rows the store never took when it is still down after
    /// [`FINAL_RETRY`] (`continues` names the run they belong to).
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
        let mut meta = self.meta.clone();
        meta.status = status.to_owned();
        let mut rows: Vec<Row> = std::mem::take(&mut self.kept)
            .into_iter()
            .filter_map(|(source, seq, at_ns, body)| {
                Some(Row {
                    source,
                    seq,
                    at_ns,
                    body: serde_json::from_str(&body).ok()?,
                })
            })
            .collect();
        match self.pending.drain() {
            Ok(rest) => rows.extend(rest),
            Err(e) => tracing::error!("reading back the run's spilled rows: {e:#}"),
        }
        let continues = (!self.kept_all).then(|| crate::Continues {
            run: self.run,
            shard: match self.writer {
                Writer::Run { shard } => shard.unwrap_or(0),
                Writer::Node(_) => 0,
            },
        });
        Some(Rows {
            meta,
            rows,
            continues,
        })
    }
}

/// Rows the store has not taken yet, oldest first: in memory while they are few, then
/// appended to a spill file (JSON lines) and read back from it in order.
struct Backlog {
    /// Rows with their JSON text.
    memory: VecDeque<(Row, String)>,
    bytes: usize,
    /// Bytes of rows kept in memory before they spill ([`MAX_PENDING_BYTES`]).
    limit: usize,
    path: PathBuf,
    /// The spill file while it holds rows not yet written: its reader and rows left in it.
    spill: Option<Spill>,
}

struct Spill {
    file: std::fs::File,
    reader: std::io::BufReader<std::fs::File>,
    left: u64,
    /// The next row, read but not yet taken, with its body's text.
    next: Option<(Row, String)>,
}

impl Backlog {
    fn new(path: PathBuf) -> Self {
        Self {
            memory: VecDeque::new(),
            bytes: 0,
            limit: MAX_PENDING_BYTES,
            path,
            spill: None,
        }
    }

    fn is_empty(&self) -> bool {
        self.memory.is_empty() && self.spill.is_none()
    }

    fn push(&mut self, r: Row, text: String) -> Result<()> {
        let size = text.len() + 64;
        if self.spill.is_none() && self.bytes + size <= self.limit {
            self.bytes += size;
            self.memory.push_back((r, text));
            return Ok(());
        }
        if self.spill.is_none() {
            // Two descriptors, two offsets: rows are appended at the end while they are read
            // back from the front.
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(&self.path)
                .with_context(|| format!("creating the spill file {}", self.path.display()))?;
            let reader = std::fs::File::open(&self.path)
                .with_context(|| format!("opening the spill file {}", self.path.display()))?;
            tracing::warn!(
                "the run store is still down and {} MiB of rows wait for it: the rows go to {} \
                 until it answers",
                self.limit >> 20,
                self.path.display()
            );
            let reader = std::io::BufReader::new(reader);
            self.spill = Some(Spill {
                file,
                reader,
                left: 0,
                next: None,
            });
        }
        let spill = self.spill.as_mut().expect("opened above");
        let mut w = std::io::BufWriter::new(&spill.file);
        w.seek(std::io::SeekFrom::End(0))?;
        for (r, _) in self.memory.drain(..).chain(std::iter::once((r, text))) {
            serde_json::to_writer(&mut w, &r)?;
            w.write_all(b"\n")?;
            spill.left += 1;
        }
        w.flush()
            .with_context(|| format!("writing the spill file {}", self.path.display()))?;
        self.bytes = 0;
        Ok(())
    }

    /// The oldest row and its body's text, without taking it.
    fn front(&mut self) -> Result<Option<(&Row, &str)>> {
        if let Some(spill) = &mut self.spill {
            if spill.next.is_none() {
                let mut line = String::new();
                spill.reader.read_line(&mut line)?;
                let row: Row = serde_json::from_str(&line).context("a spilled row")?;
                let text = row.body.to_string();
                spill.next = Some((row, text));
            }
            return Ok(spill.next.as_ref().map(|(r, t)| (r, t.as_str())));
        }
        Ok(self.memory.front().map(|(r, t)| (r, t.as_str())))
    }

    /// Takes the oldest row ([`Backlog::front`] first), with its body's text.
    fn pop(&mut self) -> (Row, String) {
        if let Some(spill) = &mut self.spill {
            let r = spill.next.take().expect("front() read it");
            spill.left -= 1;
            if spill.left == 0 {
                self.spill = None;
                let _ = std::fs::remove_file(&self.path);
            }
            return r;
        }
        let r = self.memory.pop_front().expect("front() saw it");
        self.bytes = self.bytes.saturating_sub(r.1.len() + 64);
        r
    }

    /// Every row left, oldest first.
    fn drain(&mut self) -> Result<Vec<Row>> {
        let mut rows = Vec::new();
        while self.front()?.is_some() {
            rows.push(self.pop().0);
        }
        Ok(rows)
    }
}

impl Drop for Backlog {
    fn drop(&mut self) {
        if self.spill.is_some() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows past the memory bound go to the spill file and come back in order, the file
    /// removed once drained; new rows queue behind the spilled ones.
    #[test]
    fn a_long_outage_spills_rows_to_disk_and_reads_them_back_in_order() {
        let dir = herd_testkit::TempDir::new("backlog");
        let path = dir.join("spill.jsonl");
        let mut b = Backlog::new(path.clone());
        b.limit = 4_000;
        let row = |seq: u64| {
            let body = serde_json::json!({ "seq": seq, "pad": "x".repeat(900) });
            let text = body.to_string();
            (
                Row {
                    source: "driver".into(),
                    seq,
                    at_ns: seq,
                    body,
                },
                text,
            )
        };
        for seq in 0..3 {
            let (r, t) = row(seq);
            b.push(r, t).unwrap();
        }
        assert!(!path.exists(), "three rows fit in memory");
        for seq in 3..10 {
            let (r, t) = row(seq);
            b.push(r, t).unwrap();
        }
        assert!(
            path.exists() && b.memory.is_empty(),
            "past the bound every row is on disk"
        );
        // The store comes back for a while: the oldest rows are taken first.
        for want in 0..4 {
            let (r, t) = b.front().unwrap().unwrap();
            assert_eq!((r.seq, t.len()), (want, row(want).1.len()));
            assert_eq!(b.pop().0.seq, want);
        }
        // It goes down again: new rows queue behind the spilled ones.
        let (r, t) = row(10);
        b.push(r, t).unwrap();
        let seqs: Vec<u64> = b.drain().unwrap().iter().map(|r| r.seq).collect();
        assert_eq!(seqs, (4..=10).collect::<Vec<_>>());
        assert!(
            b.is_empty() && !path.exists(),
            "the spill file is removed once drained"
        );
    }
}
