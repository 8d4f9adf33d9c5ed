//! Per phase × op rows and whole-run totals per op. Every latency here is read from the
//! histogram of exactly the samples the row describes: a phase's from that phase's
//! histograms, the whole run's from all its phases' histograms merged, never a mean of
//! percentiles. Outcomes split three ways: `ok`, the scenario's expected outcomes (part of
//! normal play, e.g. a game's `not_your_turn`), and errors.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::Cell;
use herd_model::RunData;
use herd_model::{Latency, LatencyHistogram, OpStats, Outcome, PhaseKind};

/// Latency figures of one set of samples, all from one histogram, in µs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Latencies {
    /// Mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Largest.
    pub max_us: u64,
}

impl Latencies {
    /// The figures of `h` (zeros for an empty one).
    pub fn of(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        // As the driver computes them: HdrHistogram's value at the quantile (the highest
        // value equivalent to the recorded one, 3 significant digits).
        let q = |q: f64| h.value_at_quantile(q);
        Self {
            mean_us: h.mean(),
            p50_us: q(0.5),
            p90_us: q(0.9),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: h.max(),
        }
    }

    /// The figures the driver computed for one phase from its histogram (results recorded
    /// before herd stored the histograms themselves).
    pub fn from_percentiles(l: &Latency) -> Self {
        Self {
            mean_us: l.mean_us,
            p50_us: l.p50_us,
            p90_us: l.p90_us,
            p99_us: l.p99_us,
            p999_us: l.p999_us,
            max_us: l.max_us,
        }
    }
}

/// How a set of outcomes splits: `ok`, expected (part of normal play), errors.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct Split {
    /// `ok` outcomes.
    pub ok: u64,
    /// Outcomes the scenario names as expected for the op.
    pub expected: u64,
    /// Everything else: transport errors, timeouts, statuses, unexpected domain codes, …
    pub errors: u64,
}

impl Split {
    /// Splits `outcomes` given the op's `expected` list.
    pub fn of<'a>(
        outcomes: impl IntoIterator<Item = (&'a Outcome, u64)>,
        expected: &[Outcome],
    ) -> Self {
        let mut s = Self::default();
        for (o, n) in outcomes {
            if o.is_ok() {
                s.ok += n;
            } else if expected.contains(o) {
                s.expected += n;
            } else {
                s.errors += n;
            }
        }
        s
    }

    /// Adds `o`.
    pub fn add(&mut self, o: Split) {
        self.ok += o.ok;
        self.expected += o.expected;
        self.errors += o.errors;
    }

    /// Every outcome.
    pub fn total(&self) -> u64 {
        self.ok + self.expected + self.errors
    }

    /// Errors as a share of every outcome (0 for none).
    pub fn error_share(&self) -> f64 {
        if self.total() == 0 {
            0.0
        } else {
            self.errors as f64 / self.total() as f64
        }
    }
}

/// One phase × op row.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OpRow {
    /// The phase's name: `step 1`, `soak hold`, `rate 1`, `catalog <op>`, `hammer`, …
    pub phase: String,
    /// The phase's kind.
    #[serde(default)]
    pub kind: PhaseKind,
    /// Players in the phase (hammer: workers; catalog: the route's concurrency; rate: 0).
    pub players: usize,
    /// What loaded the phase, in words: `10 players`, `4 workers`, `2 concurrent`,
    /// `50 req/s open`.
    #[serde(default)]
    pub load: String,
    /// Op name.
    pub op: String,
    /// Ops recorded.
    pub count: u64,
    /// Ops per second.
    pub rate: f64,
    /// Latency of every outcome together.
    pub latency: Latencies,
    /// ok / expected / errors.
    pub split: Split,
    /// Count per outcome.
    pub outcomes: BTreeMap<Outcome, u64>,
    /// The phase's histogram of the op (all outcomes); absent for results recorded before
    /// herd stored histograms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histogram: Option<LatencyHistogram>,
}

/// One op over the whole run: every phase it ran in (the hammer's requests kept apart, as
/// `hammer:<op>`: they are a different load).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OpTotal {
    /// Op name; `hammer:<op>` for the hammer's.
    pub op: String,
    /// The phases it ran in.
    pub phases: Vec<String>,
    /// Ops recorded.
    pub count: u64,
    /// Ops per second over the phases it ran in.
    pub rate: f64,
    /// ok / expected / errors.
    pub split: Split,
    /// Latency from the merged histogram of every phase, or why it cannot be computed.
    pub latency: LatencyCell,
    /// The merged histogram.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub histogram: Option<LatencyHistogram>,
    /// Its requests above its p99 and the kernel-side waits they were in flight during
    /// (absent without the probe, or for rows recorded before the driver kept its slowest
    /// requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slow: Option<super::attribution::SlowRequests>,
}

/// Latency figures, or why there are none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum LatencyCell {
    /// The figures.
    Value(Latencies),
    /// Why they are missing.
    Missing(String),
}

impl LatencyCell {
    /// The figures, if any.
    pub fn value(&self) -> Option<&Latencies> {
        match self {
            Self::Value(l) => Some(l),
            Self::Missing(_) => None,
        }
    }

    /// One figure as a cell.
    pub fn get(&self, f: impl Fn(&Latencies) -> f64) -> Cell {
        match self {
            Self::Value(l) => Cell::Value(f(l)),
            Self::Missing(why) => Cell::Missing(why.clone()),
        }
    }
}

/// Why a histogram is missing: the run was recorded before herd kept them.
pub const NO_HISTOGRAM: &str = "recorded before herd stored latency histograms";

fn histogram(o: &OpStats) -> Option<LatencyHistogram> {
    match o.histogram()? {
        Ok(h) => Some(LatencyHistogram::encode(&h)),
        Err(_) => None,
    }
}

/// What loaded a phase, in words.
pub(crate) fn load(kind: PhaseKind, players: usize, rate: Option<f64>) -> String {
    crate::model::play::load(kind, players, rate)
}

/// Per phase × op.
pub(crate) fn rows(d: &RunData) -> Vec<OpRow> {
    d.phases
        .iter()
        .flat_map(|s| {
            s.ops.iter().map(move |o| {
                let expected = d.expected.get(&o.op).map_or(&[][..], Vec::as_slice);
                let hist = histogram(o);
                OpRow {
                    phase: s.phase.clone(),
                    kind: s.kind,
                    players: s.players,
                    load: load(s.kind, s.players, s.open.as_ref().map(|x| x.rate)),
                    op: o.op.clone(),
                    count: o.count,
                    rate: o.rate,
                    latency: match hist.as_ref().and_then(|h| h.decode().ok()) {
                        Some(h) => Latencies::of(&h),
                        None => Latencies::from_percentiles(&o.latency),
                    },
                    split: Split::of(o.outcomes.iter().map(|x| (&x.outcome, x.count)), expected),
                    outcomes: o
                        .outcomes
                        .iter()
                        .map(|x| (x.outcome.clone(), x.count))
                        .collect(),
                    histogram: hist,
                }
            })
        })
        .collect()
}

/// Whole-run totals per op, in the order ops first appear. Each row's time is its count
/// over its rate (the phase's length).
pub fn totals(rows: &[OpRow]) -> Vec<OpTotal> {
    let mut order: Vec<String> = Vec::new();
    let key = |r: &OpRow| {
        if r.kind == PhaseKind::Hammer {
            format!("hammer:{}", r.op)
        } else {
            r.op.clone()
        }
    };
    for r in rows {
        let k = key(r);
        if !order.contains(&k) {
            order.push(k);
        }
    }
    order
        .into_iter()
        .map(|k| {
            let mine: Vec<&OpRow> = rows.iter().filter(|r| key(r) == k).collect();
            let count: u64 = mine.iter().map(|r| r.count).sum();
            let secs: f64 = mine
                .iter()
                .filter(|r| r.rate > 0.0)
                .map(|r| r.count as f64 / r.rate)
                .sum();
            let mut split = Split::default();
            for r in &mine {
                split.add(r.split);
            }
            let hists: Option<Vec<&LatencyHistogram>> =
                mine.iter().map(|r| r.histogram.as_ref()).collect();
            let merged = hists.map(LatencyHistogram::merge);
            let (latency, histogram) = match merged {
                Some(Ok(h)) => (
                    LatencyCell::Value(Latencies::of(&h)),
                    Some(LatencyHistogram::encode(&h)),
                ),
                Some(Err(e)) => (LatencyCell::Missing(e.to_string()), None),
                None if mine.len() == 1 => (LatencyCell::Value(mine[0].latency.clone()), None),
                None => (LatencyCell::Missing(NO_HISTOGRAM.into()), None),
            };
            OpTotal {
                op: k,
                phases: mine.iter().map(|r| r.phase.clone()).collect(),
                count,
                rate: count as f64 / secs.max(1e-3),
                split,
                latency,
                histogram,
                slow: None,
            }
        })
        .collect()
}
