//! Roll-ups in the store: as a run grows older, its driver and probe rows are merged into
//! coarser ones ([`herd_model::rollup`]: counters summed, histograms merged exactly, gauges
//! at their peak, least or last), so an hours-long run keeps a bounded number of rows. The
//! [`Policy`] says when: [`Policy::standard`] keeps the last 10 minutes at full resolution,
//! 1 s rows up to 2 hours back and 10 s rows before that.
//!
//! The writer of the rows rolls them up ([`crate::Recorder`]: `herd run`, each shard, each node
//! probe, the same on SQLite and PostgreSQL), one transaction per pass: the merged rows are
//! inserted and the rows they replace deleted together, so a run killed mid-pass keeps one or
//! the other, never both. A merged row takes the first replaced row's `seq` and the last one's
//! time, and is marked `rolled_up` in its body.
//!
//! Rows never merge across a phase boundary: driver rows split where their phase changes, and
//! probe rows whose time falls in a driver interval where the phase changed (the boundary lies
//! somewhere in it) stay as they are, so every probe row is counted in the phase it was.

use std::collections::VecDeque;

use anyhow::{Context as _, Result};
use herd_model::{DriverInterval, ProbeInterval};
use sqlx::Row as _;

use crate::{Source, Store};

/// One step of a [`Policy`]: rows older than `after_ns` (behind the newest row) merge into
/// rows of `every_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tier {
    /// Age (behind the run's newest row of the source) after which rows are merged, ns.
    pub after_ns: u64,
    /// The resolution they are merged to, ns.
    pub every_ns: u64,
}

/// When a run's rows are rolled up: tiers from the finest to the coarsest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// The tiers, each coarser and later than the one before.
    pub tiers: Vec<Tier>,
}

const S: u64 = 1_000_000_000;

impl Policy {
    /// herd's: full resolution for the last 10 minutes, 1 s rows up to 2 hours back, 10 s rows
    /// before that (docs/report.md, "Long runs").
    pub fn standard() -> Self {
        Self {
            tiers: vec![
                Tier {
                    after_ns: 600 * S,
                    every_ns: S,
                },
                Tier {
                    after_ns: 7_200 * S,
                    every_ns: 10 * S,
                },
            ],
        }
    }

    /// No roll-up: every row stays at full resolution.
    pub fn off() -> Self {
        Self { tiers: Vec::new() }
    }
}

/// Which timeline a [`Roller`] merges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Driver,
    Probe,
}

/// A row as the roller tracks it: enough to place it in a bucket without reading it.
#[derive(Clone, Copy, Debug)]
struct Slot {
    seq: u64,
    at_ns: u64,
    span_ns: u64,
}

impl Slot {
    fn mid(&self) -> u64 {
        self.at_ns.saturating_sub(self.span_ns / 2)
    }
}

/// Rolls up the rows of one source written by one writer, tier by tier. It remembers only
/// the rows still to be merged at each tier (bounded by the policy's windows) and the
/// driver's phase changes (one window per change).
pub(crate) struct Roller {
    policy: Policy,
    kind: Kind,
    source: String,
    shard: u32,
    mono0: u64,
    /// Per tier, the rows (oldest first) it has yet to merge.
    queues: Vec<VecDeque<Slot>>,
    /// Newest row time seen.
    newest_ns: u64,
    /// When the last pass ran (row time).
    last_pass_ns: u64,
    /// Driver intervals in which the phase changed, as (start, end] ns: probe rows with a
    /// time inside one stay unmerged.
    changes: Vec<(u64, u64)>,
    /// The driver's timeline reaches this far (end of its newest interval, ns).
    driver_end_ns: u64,
    /// The last driver interval's phase, to see a change.
    last_phase: Option<Option<usize>>,
}

/// What a roll-up pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rolled {
    /// Rows read.
    pub read: u64,
    /// Rows written in their place.
    pub written: u64,
}

impl Roller {
    pub(crate) fn new(policy: Policy, kind: Kind, source: String, shard: u32, mono0: u64) -> Self {
        let tiers = policy.tiers.len();
        Self {
            policy,
            kind,
            source,
            shard,
            mono0,
            queues: vec![VecDeque::new(); tiers],
            newest_ns: 0,
            last_pass_ns: 0,
            changes: Vec::new(),
            driver_end_ns: 0,
            last_phase: None,
        }
    }

    pub(crate) fn set_mono0(&mut self, mono0: u64) {
        self.mono0 = mono0;
    }

    /// A row of this source is in the store.
    pub(crate) fn written(&mut self, seq: u64, at_ns: u64, span_ns: u64) {
        self.newest_ns = self.newest_ns.max(at_ns);
        if let Some(q) = self.queues.first_mut() {
            q.push_back(Slot {
                seq,
                at_ns,
                span_ns,
            });
        }
    }

    /// A driver interval passed (the probe's roller needs the phase changes).
    pub(crate) fn driver_interval(&mut self, start_ns: u64, end_ns: u64, phase: Option<usize>) {
        if self.last_phase.is_some_and(|p| p != phase) {
            self.changes.push((start_ns, end_ns));
        }
        self.last_phase = Some(phase);
        self.driver_end_ns = self.driver_end_ns.max(end_ns);
    }

    /// True when a pass is due: a tenth of the finest tier's window has passed.
    pub(crate) fn due(&self) -> bool {
        match self.policy.tiers.first() {
            Some(t) => self.newest_ns >= self.last_pass_ns + (t.after_ns / 60).max(t.every_ns),
            None => false,
        }
    }

    fn unsafe_at(&self, at_ns: u64) -> bool {
        self.changes.iter().any(|&(a, b)| at_ns > a && at_ns <= b)
    }

    /// Merges every complete bucket old enough, tier by tier.
    pub(crate) async fn pass(&mut self, store: &Store, run: i64) -> Result<Rolled> {
        self.last_pass_ns = self.newest_ns;
        let mut done = Rolled::default();
        for t in 0..self.policy.tiers.len() {
            let tier = self.policy.tiers[t];
            let cutoff = self.newest_ns.saturating_sub(tier.after_ns);
            let bucket = |s: &Slot, mono0: u64| s.mid().saturating_sub(mono0) / tier.every_ns;
            // Rows whose bucket ends at or before the cutoff (and, for the probe, that the
            // driver's timeline already covers).
            let limit = if self.kind == Kind::Probe {
                cutoff.min(self.driver_end_ns)
            } else {
                cutoff
            };
            let q = &self.queues[t];
            let n = q
                .iter()
                .take_while(|s| {
                    let end = self.mono0 + (bucket(s, self.mono0) + 1) * tier.every_ns;
                    end <= limit && s.at_ns <= limit
                })
                .count();
            if n == 0 {
                continue;
            }
            let slots: Vec<Slot> = q.iter().take(n).copied().collect();
            // Groups: one bucket, one phase, no row in a phase change.
            let mut groups: Vec<Vec<Slot>> = Vec::new();
            let mut prev: Option<u64> = None;
            for s in &slots {
                let b = bucket(s, self.mono0);
                let alone = self.kind == Kind::Probe && self.unsafe_at(s.at_ns);
                if alone || prev != Some(b) || groups.last().is_none_or(|g| self.alone(g)) {
                    groups.push(vec![*s]);
                } else {
                    groups.last_mut().expect("pushed above").push(*s);
                }
                prev = if alone { None } else { Some(b) };
            }
            let out = self.merge(store, run, &groups, tier.every_ns).await?;
            done.read += out.0.read;
            done.written += out.0.written;
            self.queues[t].drain(..n);
            if let Some(next) = self.queues.get_mut(t + 1) {
                next.extend(out.1);
            }
        }
        Ok(done)
    }

    /// A probe group of one row in a phase change: nothing joins it.
    fn alone(&self, g: &[Slot]) -> bool {
        self.kind == Kind::Probe && g.len() == 1 && self.unsafe_at(g[0].at_ns)
    }

    /// Reads the groups' rows, merges each group of two or more, and replaces them in one
    /// transaction. Returns what it did and the rows as they now are, in order.
    async fn merge(
        &self,
        store: &Store,
        run: i64,
        groups: &[Vec<Slot>],
        every_ns: u64,
    ) -> Result<(Rolled, Vec<Slot>)> {
        let every_ms = every_ns / 1_000_000;
        let lo = groups[0][0].seq;
        let hi = groups.last().and_then(|g| g.last()).map_or(lo, |s| s.seq);
        let rows = sqlx::query(
            "SELECT seq, body FROM herd_rows WHERE run_id = $1 AND shard = $2 AND source = $3 \
             AND seq >= $4 AND seq <= $5 ORDER BY seq",
        )
        .bind(run)
        .bind(i64::from(self.shard))
        .bind(&self.source)
        .bind(lo as i64)
        .bind(hi as i64)
        .fetch_all(&store.pool)
        .await
        .with_context(|| format!("reading {} rows of run {run} to roll up", self.source))?;
        let mut bodies: std::collections::BTreeMap<u64, String> = Default::default();
        for r in &rows {
            bodies.insert(r.try_get::<i64, _>("seq")? as u64, r.try_get("body")?);
        }
        let mut out = Vec::new();
        let mut writes: Vec<(u64, u64, u64, String)> = Vec::new(); // first seq, last seq, at, body
        let mut done = Rolled::default();
        for g in groups {
            let (first, last) = (g[0], g[g.len() - 1]);
            if g.len() < 2 || g.iter().any(|s| !bodies.contains_key(&s.seq)) {
                out.extend(g.iter().copied());
                continue;
            }
            let merged = match self.kind {
                Kind::Driver => {
                    let ivs: Vec<DriverInterval> = g
                        .iter()
                        .map(|s| serde_json::from_str(&bodies[&s.seq]))
                        .collect::<Result<_, _>>()
                        .context("decoding driver rows to roll up")?;
                    // Split where the phase changes: each part merges on its own.
                    let mut parts: Vec<(Vec<DriverInterval>, Vec<Slot>)> = Vec::new();
                    for (iv, s) in ivs.into_iter().zip(g) {
                        match parts.last_mut() {
                            Some((p, ss)) if p[0].phase_index == iv.phase_index => {
                                p.push(iv);
                                ss.push(*s);
                            }
                            _ => parts.push((vec![iv], vec![*s])),
                        }
                    }
                    let mut m = Vec::new();
                    for (p, ss) in parts {
                        if p.len() < 2 {
                            out.extend(ss);
                            continue;
                        }
                        match herd_model::rollup::driver(&p) {
                            Ok(mut iv) => {
                                if let Some(r) = &mut iv.rolled_up {
                                    r.every_ms = every_ms;
                                }
                                let at = self.mono0 + iv.end_ms * 1_000_000;
                                let slot = Slot {
                                    seq: ss[0].seq,
                                    at_ns: at,
                                    span_ns: iv.duration_ms * 1_000_000,
                                };
                                m.push((slot, ss[ss.len() - 1].seq, serde_json::to_string(&iv)?));
                            }
                            // Older rows without histograms stay as they are.
                            Err(_) => out.extend(ss),
                        }
                    }
                    m
                }
                Kind::Probe => {
                    let ivs: Vec<ProbeInterval> = g
                        .iter()
                        .map(|s| serde_json::from_str(&bodies[&s.seq]))
                        .collect::<Result<_, _>>()
                        .context("decoding probe rows to roll up")?;
                    let mut iv = herd_model::rollup::probe(&ivs)?;
                    if let Some(r) = &mut iv.rolled_up {
                        r.every_ms = every_ms;
                    }
                    let slot = Slot {
                        seq: first.seq,
                        at_ns: iv.at_ns,
                        span_ns: iv.interval_ns,
                    };
                    vec![(slot, last.seq, serde_json::to_string(&iv)?)]
                }
            };
            for (slot, last_seq, body) in merged {
                done.read += g
                    .iter()
                    .filter(|s| s.seq >= slot.seq && s.seq <= last_seq)
                    .count() as u64;
                done.written += 1;
                writes.push((slot.seq, last_seq, slot.at_ns, body));
                out.push(slot);
            }
        }
        out.sort_by_key(|s| s.seq);
        if writes.is_empty() {
            return Ok((done, out));
        }
        let mut tx = store.pool.begin().await.context("starting a roll-up")?;
        for (first, last, at, body) in &writes {
            sqlx::query(
                "DELETE FROM herd_rows WHERE run_id = $1 AND shard = $2 AND source = $3 \
                 AND seq >= $4 AND seq <= $5",
            )
            .bind(run)
            .bind(i64::from(self.shard))
            .bind(&self.source)
            .bind(*first as i64)
            .bind(*last as i64)
            .execute(&mut *tx)
            .await
            .context("removing rolled-up rows")?;
            sqlx::query(
                "INSERT INTO herd_rows (run_id, source, seq, at_ns, body, shard) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(run)
            .bind(&self.source)
            .bind(*first as i64)
            .bind(*at as i64)
            .bind(body)
            .bind(i64::from(self.shard))
            .execute(&mut *tx)
            .await
            .context("writing a rolled-up row")?;
        }
        tx.commit().await.context("committing a roll-up")?;
        Ok((done, out))
    }
}

impl Store {
    /// Rolls every driver and probe row of the finished run `run` up to `every_ns` (`herd
    /// compact`): the same merge as the running roll-up (counters summed, histograms merged
    /// exactly, never across a phase boundary), applied to the whole run at once, shard by
    /// shard, a page of rows at a time. Rows already as coarse stay as they are. SQLite's
    /// file keeps its size until [`Store::vacuum`].
    pub async fn compact(&self, run: i64, every_ns: u64) -> Result<Rolled> {
        let meta = self.meta(Some(run)).await?;
        let mono0 = meta.mono_start_ns as u64;
        let policy = Policy {
            tiers: vec![Tier {
                after_ns: 0,
                every_ns,
            }],
        };
        let shards: Vec<i64> =
            sqlx::query("SELECT DISTINCT shard FROM herd_rows WHERE run_id = $1 ORDER BY shard")
                .bind(run)
                .fetch_all(&self.pool)
                .await
                .with_context(|| format!("listing the shards of run {run}"))?
                .iter()
                .map(|r| r.try_get("shard"))
                .collect::<Result<_, _>>()?;
        let mut done = Rolled::default();
        for shard in shards {
            let roller = |kind, source: Source| {
                Roller::new(
                    policy.clone(),
                    kind,
                    source.as_str().to_owned(),
                    shard as u32,
                    mono0,
                )
            };
            // Driver rows first: the probe's roller needs every phase change before it
            // merges the rows around them.
            let mut driver = roller(Kind::Driver, Source::Driver);
            let mut phases = Vec::new();
            self.compact_source(run, shard, &mut driver, Some(&mut phases), &mut done)
                .await?;
            let mut probe = roller(Kind::Probe, Source::Probe);
            for (start, end, phase) in phases {
                probe.driver_interval(start, end, phase);
            }
            self.compact_source(run, shard, &mut probe, None, &mut done)
                .await?;
        }
        Ok(done)
    }

    /// Feeds `roller` its source's rows of one shard, 2000 at a time, merging what is
    /// complete after each page and the rest at the end; driver rows' spans and phases are
    /// kept in `phases`.
    async fn compact_source(
        &self,
        run: i64,
        shard: i64,
        roller: &mut Roller,
        mut phases: Option<&mut Vec<(u64, u64, Option<usize>)>>,
        done: &mut Rolled,
    ) -> Result<()> {
        let source = roller.source.clone();
        let mut after: i64 = -1;
        loop {
            let rows = sqlx::query(
                "SELECT seq, at_ns, body FROM herd_rows WHERE run_id = $1 AND shard = $2 \
                 AND source = $3 AND seq > $4 ORDER BY seq LIMIT 2000",
            )
            .bind(run)
            .bind(shard)
            .bind(&source)
            .bind(after)
            .fetch_all(&self.pool)
            .await
            .with_context(|| format!("reading run {run}'s {source} rows to compact"))?;
            let Some(last) = rows.last() else { break };
            after = last.try_get("seq")?;
            for r in &rows {
                let seq = r.try_get::<i64, _>("seq")? as u64;
                let at_ns = r.try_get::<i64, _>("at_ns")? as u64;
                let body: String = r.try_get("body")?;
                let undecodable = || format!("run {run}: {source} row {seq} does not decode");
                let span = match roller.kind {
                    Kind::Driver => {
                        let iv: DriverInterval =
                            serde_json::from_str(&body).with_context(undecodable)?;
                        let span = iv.duration_ms * 1_000_000;
                        if let Some(p) = phases.as_deref_mut() {
                            p.push((at_ns.saturating_sub(span), at_ns, iv.phase_index));
                        }
                        span
                    }
                    Kind::Probe => {
                        let iv: ProbeInterval =
                            serde_json::from_str(&body).with_context(undecodable)?;
                        iv.interval_ns
                    }
                };
                roller.written(seq, at_ns, span);
            }
            let r = roller.pass(self, run).await?;
            done.read += r.read;
            done.written += r.written;
        }
        // The run is over: its last bucket is complete too.
        roller.newest_ns = roller.newest_ns.saturating_add(roller_every(roller));
        roller.driver_end_ns = u64::MAX;
        let r = roller.pass(self, run).await?;
        done.read += r.read;
        done.written += r.written;
        Ok(())
    }

    /// Gives SQLite's free pages back to the file system (`VACUUM`); nothing on PostgreSQL,
    /// which reuses them.
    pub async fn vacuum(&self) -> Result<()> {
        if self.url.starts_with("sqlite:") {
            sqlx::query("VACUUM")
                .execute(&self.pool)
                .await
                .context("VACUUM of the SQLite store")?;
        }
        Ok(())
    }
}

/// The coarsest resolution `roller` merges to.
fn roller_every(roller: &Roller) -> u64 {
    roller.policy.tiers.last().map_or(0, |t| t.every_ns)
}
