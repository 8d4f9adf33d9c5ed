//! The exact merge of the results of several shards of one run (`--shard I/N`): counts add,
//! latency histograms merge (so percentiles are those of every sample, never averaged),
//! rates add (the shards ran over the same wall-clock window), players add.
//!
//! `herd report` merges a sharded run's stored rows with it; `herd merge A.json B.json`
//! merges `herd drive --json` results.

use std::collections::BTreeMap;

use crate::{
    driver::{
        CheckFailure, DriverHealth, DriverInterval, GroupStats, IntervalOp, OpStats, OpenStats,
        OutcomeStats, PhaseResult, PlayStats, RunResult, SLOWEST_PER_INTERVAL, SlowRequest,
        StreamStats,
    },
    histogram::{HistogramError, Latency, LatencyHistogram, latency},
};

/// Merges the phase totals of several shards: one row per phase (matched by index and name;
/// the hammer has no index), in the order they first appear.
pub fn phases<'a>(
    parts: impl IntoIterator<Item = &'a [PhaseResult]>,
) -> Result<Vec<PhaseResult>, HistogramError> {
    let mut groups: Vec<Vec<&PhaseResult>> = Vec::new();
    for part in parts {
        for p in part {
            match groups
                .iter_mut()
                .find(|g| g[0].index == p.index && g[0].phase == p.phase)
            {
                Some(g) => g.push(p),
                None => groups.push(vec![p]),
            }
        }
    }
    groups.into_iter().map(|g| phase(&g)).collect()
}

fn phase(ps: &[&PhaseResult]) -> Result<PhaseResult, HistogramError> {
    let first = ps[0];
    let start_ms = ps.iter().map(|p| p.start_ms).min().unwrap_or(0);
    let end_ms = ps
        .iter()
        .map(|p| p.start_ms + p.duration_ms)
        .max()
        .unwrap_or(0);
    let open: Vec<&OpenStats> = ps.iter().filter_map(|p| p.open.as_ref()).collect();
    Ok(PhaseResult {
        phase: first.phase.clone(),
        kind: first.kind,
        open: (!open.is_empty()).then(|| open_stats(&open)),
        index: first.index,
        players: ps.iter().map(|p| p.players).sum(),
        start_ms,
        duration_ms: end_ms - start_ms,
        ops: phase_ops(ps.iter().flat_map(|p| &p.ops))?,
        connects: ps.iter().map(|p| p.connects).sum(),
        reconnects: ps.iter().map(|p| p.reconnects).sum(),
        connect_errors: ps.iter().map(|p| p.connect_errors).sum(),
        play: play(ps.iter().map(|p| &p.play)),
    })
}

fn open_stats(os: &[&OpenStats]) -> OpenStats {
    let sum = |f: fn(&OpenStats) -> u64| os.iter().map(|o| f(o)).sum::<u64>();
    OpenStats {
        rate: os.iter().map(|o| o.rate).sum(),
        scheduled: sum(|o| o.scheduled),
        sent: sum(|o| o.sent),
        late_starts: sum(|o| o.late_starts),
        dropped_starts: sum(|o| o.dropped_starts),
        max_in_flight: os.iter().map(|o| o.max_in_flight).sum(),
        // The shards' peaks need not coincide: their sum bounds the run's peak from above.
        peak_in_flight: os.iter().map(|o| o.peak_in_flight).sum(),
        late_after_us: os[0].late_after_us,
    }
}

/// Groups items by name, keeping the order names first appear in.
fn by_name<'a, T>(
    items: impl IntoIterator<Item = &'a T>,
    name: impl Fn(&T) -> &str,
) -> Vec<Vec<&'a T>> {
    let mut groups: Vec<Vec<&T>> = Vec::new();
    for it in items {
        match groups.iter_mut().find(|g| name(g[0]) == name(it)) {
            Some(g) => g.push(it),
            None => groups.push(vec![it]),
        }
    }
    groups
}

fn phase_ops<'a>(
    ops: impl IntoIterator<Item = &'a OpStats>,
) -> Result<Vec<OpStats>, HistogramError> {
    by_name(ops, |o| &o.op)
        .into_iter()
        .map(|g| {
            let mut outcomes: Vec<OutcomeStats> = Vec::new();
            let all: Vec<&OutcomeStats> = g.iter().flat_map(|o| &o.outcomes).collect();
            let mut seen: Vec<&crate::Outcome> = Vec::new();
            for o in &all {
                if !seen.contains(&&o.outcome) {
                    seen.push(&o.outcome);
                }
            }
            for outcome in seen {
                let same: Vec<&OutcomeStats> = all
                    .iter()
                    .copied()
                    .filter(|o| &o.outcome == outcome)
                    .collect();
                let (latency, histogram) = merged(
                    same.iter()
                        .map(|o| (o.latency, o.count, o.histogram.as_ref())),
                )?;
                outcomes.push(OutcomeStats {
                    outcome: outcome.clone(),
                    count: same.iter().map(|o| o.count).sum(),
                    latency,
                    histogram,
                });
            }
            outcomes.sort_by_key(|o| std::cmp::Reverse(o.count));
            let (latency, _) = merged(
                outcomes
                    .iter()
                    .map(|o| (o.latency, o.count, o.histogram.as_ref())),
            )?;
            Ok(OpStats {
                op: g[0].op.clone(),
                count: g.iter().map(|o| o.count).sum(),
                rate: g.iter().map(|o| o.rate).sum(),
                latency,
                outcomes,
            })
        })
        .collect()
}

/// The percentiles and histogram of several parts: exact when every part has its histogram;
/// otherwise (results from before herd kept them) the largest of each percentile, an upper
/// bound, and no histogram.
fn merged<'a>(
    parts: impl Iterator<Item = (Latency, u64, Option<&'a LatencyHistogram>)>,
) -> Result<(Latency, Option<LatencyHistogram>), HistogramError> {
    let parts: Vec<_> = parts.collect();
    let hs: Option<Vec<&LatencyHistogram>> = parts.iter().map(|p| p.2).collect();
    if let Some(hs) = hs {
        let h = LatencyHistogram::merge(hs)?;
        return Ok((latency(&h), Some(LatencyHistogram::encode(&h))));
    }
    Ok((upper(parts.iter().map(|p| (p.0, p.1))), None))
}

fn upper(parts: impl Iterator<Item = (Latency, u64)>) -> Latency {
    let mut l = Latency::default();
    let (mut weighted, mut n) = (0.0, 0u64);
    for (p, count) in parts {
        l.p50_us = l.p50_us.max(p.p50_us);
        l.p90_us = l.p90_us.max(p.p90_us);
        l.p99_us = l.p99_us.max(p.p99_us);
        l.p999_us = l.p999_us.max(p.p999_us);
        l.max_us = l.max_us.max(p.max_us);
        weighted += p.mean_us * count as f64;
        n += count;
    }
    l.mean_us = if n == 0 { 0.0 } else { weighted / n as f64 };
    l
}

pub(crate) fn play<'a>(ps: impl Iterator<Item = &'a PlayStats>) -> PlayStats {
    let ps: Vec<&PlayStats> = ps.collect();
    let mut groups = GroupStats::default();
    for p in &ps {
        groups.formed += p.groups.formed;
        groups.finished += p.groups.finished;
        groups.failed += p.groups.failed;
        groups.abandoned += p.groups.abandoned;
    }
    let streams = by_name(ps.iter().flat_map(|p| &p.streams), |s| &s.op)
        .into_iter()
        .map(|g| {
            let add = |f: fn(&StreamStats) -> &BTreeMap<String, u64>| {
                let mut m = BTreeMap::new();
                for s in &g {
                    for (k, v) in f(s) {
                        *m.entry(k.clone()).or_insert(0) += v;
                    }
                }
                m
            };
            let firsts: Vec<(Latency, u64)> = g
                .iter()
                .filter_map(|s| s.first_event.map(|l| (l, s.opened)))
                .collect();
            StreamStats {
                op: g[0].op.clone(),
                kind: g[0].kind.clone(),
                opened: g.iter().map(|s| s.opened).sum(),
                reconnects: g.iter().map(|s| s.reconnects).sum(),
                cut_by_stop: g.iter().map(|s| s.cut_by_stop).sum(),
                events: g.iter().map(|s| s.events).sum(),
                by_type: add(|s| &s.by_type),
                errors: add(|s| &s.errors),
                // Stream openings keep no histogram: the slowest shard's figures bound them.
                first_event: (!firsts.is_empty()).then(|| upper(firsts.into_iter())),
            }
        })
        .collect();
    // Failed checks add up per op and resource; the order is the shards' sorted.
    let mut checks: BTreeMap<(String, String), u64> = BTreeMap::new();
    for c in ps.iter().flat_map(|p| &p.check_failures) {
        *checks
            .entry((c.op.clone(), c.resource.clone()))
            .or_insert(0) += c.count;
    }
    let check_failures = checks
        .into_iter()
        .map(|((op, resource), count)| CheckFailure {
            op,
            resource,
            count,
        })
        .collect();
    PlayStats {
        streams,
        groups,
        check_failures,
    }
}

/// Merges the timelines of several shards interval by interval (matched by index: the
/// shards' intervals are timed from one agreed start).
pub fn intervals<'a>(
    parts: impl IntoIterator<Item = &'a [DriverInterval]>,
) -> Result<Vec<DriverInterval>, HistogramError> {
    let mut by_index: BTreeMap<u64, Vec<&DriverInterval>> = BTreeMap::new();
    for part in parts {
        for iv in part {
            by_index.entry(iv.index).or_default().push(iv);
        }
    }
    by_index.into_values().map(|g| interval(&g)).collect()
}

fn interval(ivs: &[&DriverInterval]) -> Result<DriverInterval, HistogramError> {
    let first = ivs[0];
    let sum = |f: fn(&DriverInterval) -> u64| ivs.iter().map(|i| f(i)).sum::<u64>();
    let ops = by_name(ivs.iter().flat_map(|i| &i.ops), |o| &o.op)
        .into_iter()
        .map(|g| {
            let (latency, histogram) =
                merged(g.iter().map(|o| (o.latency, o.count, o.histogram.as_ref())))?;
            let mut outcomes = BTreeMap::new();
            let mut statuses = BTreeMap::new();
            for o in &g {
                for (k, v) in &o.outcomes {
                    *outcomes.entry(k.clone()).or_insert(0) += v;
                }
                for (k, v) in &o.statuses {
                    *statuses.entry(*k).or_insert(0) += v;
                }
            }
            Ok(IntervalOp {
                op: g[0].op.clone(),
                count: g.iter().map(|o| o.count).sum(),
                rate: g.iter().map(|o| o.rate).sum(),
                latency,
                histogram,
                outcomes,
                statuses,
                slowest: slowest(g.iter().map(|o| o.slowest.as_slice())),
            })
        })
        .collect::<Result<_, HistogramError>>()?;
    let health = DriverHealth {
        cpu_percent: ivs.iter().map(|i| i.driver.cpu_percent).sum(),
        cores: ivs.iter().map(|i| i.driver.cores).sum(),
        rss_bytes: ivs.iter().map(|i| i.driver.rss_bytes).sum(),
        lag_p99_us: ivs.iter().map(|i| i.driver.lag_p99_us).max().unwrap_or(0),
        lag_max_us: ivs.iter().map(|i| i.driver.lag_max_us).max().unwrap_or(0),
        saturated: ivs.iter().any(|i| i.driver.saturated),
    };
    Ok(DriverInterval {
        index: first.index,
        end_ms: ivs.iter().map(|i| i.end_ms).max().unwrap_or(0),
        duration_ms: ivs.iter().map(|i| i.duration_ms).max().unwrap_or(0),
        phase_index: first.phase_index,
        phase: first.phase.clone(),
        late_starts: sum(|i| i.late_starts),
        dropped_starts: sum(|i| i.dropped_starts),
        in_flight: ivs.iter().map(|i| i.in_flight).sum(),
        players: ivs.iter().map(|i| i.players).sum(),
        hammer_workers: ivs.iter().map(|i| i.hammer_workers).sum(),
        ops,
        connects: sum(|i| i.connects),
        reconnects: sum(|i| i.reconnects),
        connect_errors: sum(|i| i.connect_errors),
        play: play(ivs.iter().map(|i| &i.play)),
        driver: health,
        // The shards' intervals cover the same time: the run's row stands for as many.
        rolled_up: ivs
            .iter()
            .filter_map(|i| i.rolled_up)
            .max_by_key(|r| r.intervals),
        // Shards on several hosts have clocks of their own: one origin only when they agree.
        clock_start_ns: first
            .clock_start_ns
            .filter(|c| ivs.iter().all(|i| i.clock_start_ns == Some(*c))),
    })
}

/// The slowest requests of several parts: the [`SLOWEST_PER_INTERVAL`] slowest of their
/// union, which are exactly the slowest of all their requests (each part kept its own
/// slowest), slowest first.
pub fn slowest<'a>(parts: impl IntoIterator<Item = &'a [SlowRequest]>) -> Vec<SlowRequest> {
    let mut all: Vec<SlowRequest> = parts.into_iter().flatten().copied().collect();
    all.sort_by(|a, b| {
        b.latency_us
            .cmp(&a.latency_us)
            .then(a.start_us.cmp(&b.start_us))
    });
    all.truncate(SLOWEST_PER_INTERVAL);
    all
}

/// Why results do not merge.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// Nothing to merge.
    #[error("there are no results to merge")]
    Empty,
    /// The results are of different scenarios or targets: not shards of one run.
    #[error(
        "result {index} is of {theirs}, the first of {ours}: only shards of one run (one \
         scenario against one target) merge"
    )]
    NotOneRun {
        /// Which result (0-based).
        index: usize,
        /// What the first result ran.
        ours: String,
        /// What this one ran.
        theirs: String,
    },
    /// A stored histogram does not decode.
    #[error(transparent)]
    Histogram(#[from] HistogramError),
}

/// Merges the final reports of a run's shards into the report one process would have
/// written.
pub fn runs(parts: &[RunResult]) -> Result<RunResult, MergeError> {
    let first = parts.first().ok_or(MergeError::Empty)?;
    let what = |r: &RunResult| format!("{} against {}", r.scenario, r.target);
    for (index, r) in parts.iter().enumerate() {
        if r.target != first.target || r.scenario != first.scenario {
            return Err(MergeError::NotOneRun {
                index,
                ours: what(first),
                theirs: what(r),
            });
        }
    }
    let sum = |f: fn(&RunResult) -> u64| parts.iter().map(f).sum::<u64>();
    let start = parts.iter().map(|r| r.started_unix_ms).min().unwrap_or(0);
    let end = parts
        .iter()
        .map(|r| r.started_unix_ms + r.duration_ms)
        .max()
        .unwrap_or(0);
    let mut expected = BTreeMap::new();
    for r in parts {
        for (k, v) in &r.expected {
            expected.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    Ok(RunResult {
        scenario: first.scenario.clone(),
        target: first.target.clone(),
        transport: first.transport.clone(),
        connections: first.connections.clone(),
        started_unix_ms: start,
        duration_ms: end - start,
        stopped_early: parts.iter().any(|r| r.stopped_early),
        requests: sum(|r| r.requests),
        connects: sum(|r| r.connects),
        reconnects: sum(|r| r.reconnects),
        connect_errors: sum(|r| r.connect_errors),
        connects_held: sum(|r| r.connects_held),
        connect_backoff_ms: sum(|r| r.connect_backoff_ms),
        phases: phases(parts.iter().map(|r| r.phases.as_slice()))?,
        expected,
        intervals: intervals(parts.iter().map(|r| r.intervals.as_slice()))?,
        saturated_intervals: 0,
        play: play(parts.iter().map(|r| &r.play)),
    })
    .map(|mut r: RunResult| {
        r.saturated_intervals = if r.intervals.is_empty() {
            // Results stored without their timeline (the store's rows hold it): the shard
            // saturated longest bounds the run's count from below.
            parts
                .iter()
                .map(|p| p.saturated_intervals)
                .max()
                .unwrap_or(0)
        } else {
            r.intervals.iter().filter(|i| i.driver.saturated).count() as u64
        };
        r
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slow(start_us: u64, latency_us: u64) -> SlowRequest {
        SlowRequest {
            start_us,
            latency_us,
        }
    }

    #[test]
    fn the_slowest_of_several_shards_are_the_slowest_of_all_their_requests() {
        // Two shards, each with its own bounded set: the merge is bounded too and keeps the
        // slowest of the union, slowest first.
        let a: Vec<SlowRequest> = (0..SLOWEST_PER_INTERVAL as u64)
            .map(|i| slow(i, 1_000 + 2 * i))
            .collect();
        let b: Vec<SlowRequest> = (0..SLOWEST_PER_INTERVAL as u64)
            .map(|i| slow(100 + i, 1_001 + 2 * i))
            .collect();
        let m = slowest([a.as_slice(), b.as_slice()]);
        assert_eq!(m.len(), SLOWEST_PER_INTERVAL);
        let mut all: Vec<u64> = a.iter().chain(&b).map(|r| r.latency_us).collect();
        all.sort_unstable_by(|x, y| y.cmp(x));
        all.truncate(SLOWEST_PER_INTERVAL);
        assert_eq!(m.iter().map(|r| r.latency_us).collect::<Vec<_>>(), all);
        assert_eq!(m[0], slow(100 + 31, 1_001 + 62));
        // Written as [start_us, latency_us]; an interval without them reads as none.
        assert_eq!(serde_json::to_string(&m[0]).unwrap(), "[131,1063]");
        let back: SlowRequest = serde_json::from_str("[131,1063]").unwrap();
        assert_eq!(back, m[0]);
    }
}
