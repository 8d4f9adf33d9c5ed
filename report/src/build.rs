//! Building a [`Report`] from a run's rows: the model's tables, then the findings over them.

use herd_model::RolledUp;
use herd_model::{PhaseResult, RunData};

use crate::{
    findings,
    model::{
        Cell, NO_HISTOGRAM, Report, RunSummary, SCHEMA_VERSION, Split, attribution, containers,
        ops, pairs, play, secs, slo, timeline,
    },
};

impl Report {
    /// Builds the report of `d`, with at most [`pairs::DEFAULT_PAIR_ROWS`] pair rows.
    pub fn build(d: &RunData) -> Self {
        Self::build_with_pair_rows(d, pairs::DEFAULT_PAIR_ROWS)
    }

    /// Builds the report of `d` with the `pair_rows` most active pairs (and those on the
    /// request path); the rest are one `other` row of sums.
    pub fn build_with_pair_rows(d: &RunData, pair_rows: usize) -> Self {
        let load_phases: Vec<&PhaseResult> =
            d.phases.iter().filter(|s| s.index.is_some()).collect();
        let probe_note = d.probe_missing.clone().unwrap_or_else(|| {
            if d.probe.is_empty() {
                "the probe recorded no interval".into()
            } else {
                String::new()
            }
        });
        let missing = |what: &str| Cell::Missing(format!("{what}: {probe_note}"));

        let ops = ops::rows(d);
        let mut totals = ops::totals(&ops);
        let containers = containers::rows(d, &load_phases, &missing);
        let duration_s: f64 = d
            .driver
            .iter()
            .map(|i| i.duration_ms as f64 / 1e3)
            .sum::<f64>()
            .max(d.probe.iter().map(secs).sum::<f64>());
        let timeline = timeline::points(d);
        let requests: u64 = d.driver.iter().flat_map(|i| &i.ops).map(|o| o.count).sum();
        let mut split = Split::default();
        for p in &timeline {
            split.add(p.split);
        }
        let pairs = pairs::bound(
            d,
            pairs::rows(d, duration_s, requests),
            pair_rows,
            duration_s,
        );

        attribution::attribute(d, &mut totals, &pairs);

        let mut notes = Vec::new();
        if !probe_note.is_empty() {
            notes.push(format!("Kernel probe: {probe_note}"));
        }
        if d.final_report.is_none() {
            notes.push(format!(
                "The run did not finish (status `{}`): the report covers every interval recorded \
                 before it stopped; phase totals exist only for phases that ended.",
                d.meta.status
            ));
        }
        notes.extend(shard_notes(&d.meta.shards));
        notes.extend(super::model::resolution::note(d));
        if ops.iter().any(|o| o.histogram.is_none()) {
            notes.push(format!(
                "Some latencies were {NO_HISTOGRAM}: their phase rows show the percentiles the \
                 driver computed, and whole-run figures that would need them are missing."
            ));
        }
        let (streams, groups, open) = play::rows(&d.phases);
        let slo = slo::rows(&d.slo, &d.phases, &d.expected);
        if !d.slo.is_empty() && slo.is_empty() {
            notes.push(
                "The scenario has objectives, but no phase finished: nothing to check.".into(),
            );
        }
        let mut report = Report {
            schema_version: SCHEMA_VERSION,
            herd_version: env!("CARGO_PKG_VERSION").into(),
            expected: d.expected.clone(),
            run: RunSummary {
                id: d.meta.id,
                name: d.meta.name.clone(),
                scenario: d.meta.scenario.clone(),
                status: d.meta.status.clone(),
                started_unix_ms: d.meta.started_unix_ms,
                started_at: rfc3339(d.meta.started_unix_ms),
                duration_s,
                requests,
                errors: split.errors,
                split,
                // A rolled-up row says how many intervals it holds and how many saturated.
                saturated_intervals: d
                    .driver
                    .iter()
                    .map(|i| RolledUp::of_driver(i).saturated)
                    .sum(),
                probe_intervals: d
                    .probe
                    .iter()
                    .map(|i| RolledUp::of_probe(i).intervals)
                    .sum(),
                seeding: d
                    .seeded
                    .clone()
                    .map(|s| crate::seeding::Seeding::new(s, d.seed_cleanup.clone())),
            },
            ops,
            totals,
            streams,
            groups,
            open,
            containers,
            pairs,
            timeline,
            slo,
            findings: Vec::new(),
            notes,
        };
        report.findings = findings::detect(&report, d);
        report
    }
}

/// RFC 3339 (UTC, seconds) of `ms` since the epoch.
fn rfc3339(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// What a sharded run's report says about its shards: how many merged, how far apart their
/// clocks started, and which did not run to the end with what they recorded.
pub(crate) fn shard_notes(shards: &[herd_model::ShardInfo]) -> Vec<String> {
    let Some(first) = shards.first() else {
        return Vec::new();
    };
    let count = first.count;
    let starts: Vec<i64> = shards.iter().filter_map(|s| s.started_unix_ns).collect();
    let ahead: Vec<i64> = shards.iter().filter_map(|s| s.clock_ahead_ns).collect();
    let skew = match (starts.iter().min(), starts.iter().max()) {
        (Some(a), Some(b)) if starts.len() > 1 && ahead.len() == starts.len() => {
            let (lo, hi) = (
                ahead.iter().min().copied().unwrap_or(0),
                ahead.iter().max().copied().unwrap_or(0),
            );
            format!(
                "; their plans' clocks started within {:.1} ms of each other on the run store's \
                 clock (their hosts' clocks read {:+.1} to {:+.1} ms off the run store's, \
                 which they corrected for)",
                (b - a) as f64 / 1e6,
                lo as f64 / 1e6,
                hi as f64 / 1e6
            )
        }
        (Some(a), Some(b)) if starts.len() > 1 => {
            format!(
                "; their plans' clocks started within {:.1} ms of each other (read on each \
                 host's wall clock, so across hosts it includes their clocks' offset)",
                (b - a) as f64 / 1e6
            )
        }
        _ => String::new(),
    };
    let mut notes = vec![format!(
        "Merged from {} of {count} shards: counts add and latency histograms merge exactly{skew}.",
        shards.len()
    )];
    for i in 0..count {
        if !shards.iter().any(|s| s.index == i) {
            notes.push(format!(
                "Shard {i}/{count} never registered: it recorded nothing."
            ));
        }
    }
    for s in shards.iter().filter(|s| !s.finished) {
        notes.push(format!(
            "Shard {}/{count} ({}, pid {}) is missing: it is `{}` and recorded {} intervals and \
             {} phase totals before it stopped, which the tables include; phases it did not \
             end lack its share.",
            s.index, s.host, s.pid, s.status, s.intervals, s.phases
        ));
    }
    notes
}
