//! The comparison's rows: pairs matched by container names, containers, ops over the whole run
//! and per step, each side a value or why there is none.

use super::*;

/// The figures of a pair compared.
#[derive(Clone, Copy)]
pub(super) enum PairMetric {
    Connects,
    TimeWait,
    Churn,
    Established,
}

/// Per destination pair: new connections/s, TIME_WAIT peak, churn ratio, ESTABLISHED peak.
pub(super) fn pair_rows(a: &Report, b: &Report, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    let ids = [a.run.id, b.run.id];
    // A destination is named by its container when either run knows it, so a backend that
    // came up at another address in the second run still lines up with the first.
    let mut names: BTreeMap<&str, &str> = BTreeMap::new();
    for p in a.pairs.iter().chain(&b.pairs) {
        if p.remote_container != "-" {
            names.insert(p.remote.as_str(), p.remote_container.as_str());
        }
    }
    let dest = |p: &PairRow| -> (String, bool) {
        match names.get(p.remote.as_str()) {
            Some(n) => ((*n).to_owned(), true),
            None => (p.remote.clone(), false),
        }
    };
    let mut by_key: BTreeMap<(String, String), [Vec<&PairRow>; 2]> = BTreeMap::new();
    let mut by_address = false;
    // Sockets of unrelated local processes show up as gauge-only pairs (no new connection,
    // not on the request path); comparing them is noise. A pair that mattered in either run
    // stays, with both sides.
    let relevant: Vec<(String, String)> = a
        .pairs
        .iter()
        .chain(&b.pairs)
        .filter(|p| p.connects > 0 || p.churn_ratio.value().is_some())
        .map(|p| (p.container.clone(), dest(p).0))
        .collect();
    for (i, r) in [a, b].into_iter().enumerate() {
        for p in &r.pairs {
            let (d, named) = dest(p);
            if !relevant.contains(&(p.container.clone(), d.clone())) {
                continue;
            }
            by_address |= !named;
            by_key.entry((p.container.clone(), d)).or_default()[i].push(p);
        }
    }
    // The busiest pair first: that is where churn shows.
    let mut keys: Vec<((String, String), f64)> = by_key
        .iter()
        .map(|(k, sides)| {
            let busiest = sides
                .iter()
                .map(|ps| ps.iter().map(|p| p.connects_per_s).sum::<f64>())
                .fold(0.0, f64::max);
            (k.clone(), busiest)
        })
        .collect();
    keys.sort_by(|x, y| y.1.total_cmp(&x.1).then_with(|| x.0.cmp(&y.0)));

    for ((src, dst), _) in keys {
        let sides = &by_key[&(src.clone(), dst.clone())];
        let subject = format!("{src} → {dst}");
        let reports = [a, b];
        // Several rows under one key (one destination container on two ports) add up: counts
        // and rates exactly, gauge peaks as an upper bound (their peaks may not coincide).
        let side = |i: usize, metric: PairMetric| -> Side {
            let ps = &sides[i];
            if ps.is_empty() {
                if let Some(why) = probe_missing(reports[i]) {
                    return Side::missing(why);
                }
                // The probe counts every connect of every container, so a pair with no row
                // opened no connection in that run; its gauges were never read.
                return match metric {
                    PairMetric::Connects => Side::of(Cell::Value(0.0)),
                    _ => Side::missing(format!(
                        "no connection from {src} to {dst} in run {}",
                        ids[i]
                    )),
                };
            }
            match metric {
                PairMetric::Connects => {
                    Side::of(Cell::Value(ps.iter().map(|p| p.connects_per_s).sum()))
                }
                PairMetric::TimeWait => {
                    let implied = ps.iter().any(|p| p.time_wait_peak.value().is_none());
                    let total = ps
                        .iter()
                        .map(|p| {
                            p.time_wait_peak
                                .value()
                                .unwrap_or(p.time_wait_implied_peak as f64)
                        })
                        .sum();
                    Side {
                        value: Cell::Value(total),
                        implied,
                        quota_cores: None,
                    }
                }
                PairMetric::Churn => Side::of(sum(ps.iter().map(|p| &p.churn_ratio))),
                PairMetric::Established => Side::of(sum(ps.iter().map(|p| &p.established_peak))),
            }
        };
        for (metric, key, unit, better) in [
            (
                "new connections/s",
                PairMetric::Connects,
                Unit::PerSecond,
                Better::Lower,
            ),
            (
                "TIME_WAIT peak",
                PairMetric::TimeWait,
                Unit::Count,
                Better::Lower,
            ),
            (
                "churn ratio (new connections per request)",
                PairMetric::Churn,
                Unit::Ratio,
                Better::Lower,
            ),
            (
                "ESTABLISHED peak",
                PairMetric::Established,
                Unit::Count,
                Better::Neither,
            ),
        ] {
            rows.push(row(
                Section::Pair,
                &subject,
                metric,
                unit,
                better,
                [side(0, key), side(1, key)],
                ids,
            ));
        }
    }
    if rows.iter().any(|r| r.before.implied || r.after.implied) {
        notes.push(format!(
            "TIME_WAIT peak is the gauge of the source's network namespace toward the \
             destination; ≈ … (implied) marks a peak implied from the busiest second's TIME_WAIT \
             entries × {TIME_WAIT_S} s, where the gauge was not sampled."
        ));
    }
    if by_address {
        notes.push("Destinations no run names a container for are matched by address:port.".into());
    }
}

/// The container rows to compare: those of the load steps (all rows when there are none).
/// Without the probe a report holds one placeholder row per step (container `all`) whose cells
/// carry the reason; the reason is used instead, so `all` is no container to compare.
pub(super) fn compared_containers(r: &Report) -> Vec<&ContainerRow> {
    if probe_missing(r).is_some() {
        return Vec::new();
    }
    let in_steps: Vec<&ContainerRow> = r
        .containers
        .iter()
        .filter(|c| c.phase != "before" && c.phase != "after")
        .collect();
    if in_steps.is_empty() {
        r.containers.iter().collect()
    } else {
        in_steps
    }
}

/// Per container: CPU burst and sustained peaks, throttled share, memory peak.
pub(super) fn container_rows(a: &Report, b: &Report, rows: &mut Vec<Row>) {
    let ids = [a.run.id, b.run.id];
    let reports = [a, b];
    let sides = [compared_containers(a), compared_containers(b)];
    let names = union_in_order(
        sides[0].iter().map(|c| c.container.as_str()),
        sides[1].iter().map(|c| c.container.as_str()),
    );
    type Pick = fn(&ContainerRow) -> &Cell;
    let metrics: [(&str, Unit, Pick); 4] = [
        ("CPU burst peak (busiest 100 ms)", Unit::Cores, |c| {
            &c.cpu_burst
        }),
        ("CPU sustained peak (30 s)", Unit::Cores, |c| {
            &c.cpu_sustained
        }),
        (
            "throttled share of periods (worst step)",
            Unit::Share,
            |c| &c.throttled_share,
        ),
        ("memory peak", Unit::Mib, |c| &c.mem_peak_mib),
    ];
    for name in &names {
        for (metric, unit, pick) in metrics {
            let side = |i: usize| -> Side {
                if let Some(why) = probe_missing(reports[i]) {
                    return Side::missing(why);
                }
                let mine = || sides[i].iter().filter(|c| &c.container == name);
                let mut s = Side::of(peak(mine().map(|c| pick(c))).unwrap_or_else(|| {
                    Cell::Missing(format!("no container {name} in run {}", ids[i]))
                }));
                if unit == Unit::Cores {
                    s.quota_cores = peak(mine().map(|c| &c.cpu_cap)).and_then(|c| c.value());
                }
                s
            };
            rows.push(row(
                Section::Container,
                name,
                metric,
                unit,
                Better::Lower,
                [side(0), side(1)],
                ids,
            ));
        }
    }
}

/// Per op over the whole run, from each run's merged histograms: mean, p50, p90, p99,
/// p99.9, max, error share (expected outcomes are not errors), req/s.
pub(super) fn op_rows(a: &Report, b: &Report, rows: &mut Vec<Row>) {
    let ids = [a.run.id, b.run.id];
    let names = union_in_order(
        a.totals.iter().map(|o| o.op.as_str()),
        b.totals.iter().map(|o| o.op.as_str()),
    );
    for op in &names {
        let totals = [
            a.totals.iter().find(|t| t.op == *op),
            b.totals.iter().find(|t| t.op == *op),
        ];
        type Metric = fn(&OpTotal) -> Cell;
        let metrics: [(&str, Unit, Better, Metric); 8] = [
            ("mean", Unit::Micros, Better::Lower, |t| {
                t.latency.get(|l| l.mean_us)
            }),
            ("p50", Unit::Micros, Better::Lower, |t| {
                t.latency.get(|l| l.p50_us as f64)
            }),
            ("p90", Unit::Micros, Better::Lower, |t| {
                t.latency.get(|l| l.p90_us as f64)
            }),
            ("p99", Unit::Micros, Better::Lower, |t| {
                t.latency.get(|l| l.p99_us as f64)
            }),
            ("p99.9", Unit::Micros, Better::Lower, |t| {
                t.latency.get(|l| l.p999_us as f64)
            }),
            ("max", Unit::Micros, Better::Lower, |t| {
                t.latency.get(|l| l.max_us as f64)
            }),
            (
                "error share (errors / count; expected outcomes apart)",
                Unit::Share,
                Better::Lower,
                |t| Cell::Value(t.split.error_share()),
            ),
            ("req/s", Unit::PerSecond, Better::Higher, |t| {
                Cell::Value(t.rate)
            }),
        ];
        for (metric, unit, better, f) in metrics {
            let side = |i: usize| -> Side {
                match totals[i] {
                    None => Side::missing(format!("op not run in run {}", ids[i])),
                    Some(t) if t.count == 0 && metric != "req/s" => {
                        Side::missing("no requests recorded")
                    }
                    Some(t) => Side::of(f(t)),
                }
            };
            rows.push(row(
                Section::Op,
                op,
                metric,
                unit,
                better,
                [side(0), side(1)],
                ids,
            ));
        }
    }
}

/// Per phase × op, for every phase name either run has: p50, p99, error share and req/s,
/// each from that phase's histogram of the op. A new contour keeps its plan, so phases line
/// up by name (`step 2` with `step 2`).
pub(super) fn step_rows(a: &Report, b: &Report, rows: &mut Vec<Row>) {
    let ids = [a.run.id, b.run.id];
    let mut keys: Vec<(String, String)> = Vec::new();
    for o in a.ops.iter().chain(&b.ops) {
        let k = (o.phase.clone(), o.op.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    type Metric = fn(&OpRow) -> Cell;
    let metrics: [(&str, Unit, Better, Metric); 4] = [
        ("p50", Unit::Micros, Better::Lower, |o| {
            Cell::Value(o.latency.p50_us as f64)
        }),
        ("p99", Unit::Micros, Better::Lower, |o| {
            Cell::Value(o.latency.p99_us as f64)
        }),
        (
            "error share (errors / count; expected outcomes apart)",
            Unit::Share,
            Better::Lower,
            |o| Cell::Value(o.split.error_share()),
        ),
        ("req/s", Unit::PerSecond, Better::Higher, |o| {
            Cell::Value(o.rate)
        }),
    ];
    for (phase, op) in keys {
        let found = [a, b].map(|r| r.ops.iter().find(|o| o.phase == phase && o.op == op));
        for (metric, unit, better, f) in metrics {
            let side = |i: usize| -> Side {
                match found[i] {
                    None => Side::missing(format!("op not run in {phase} of run {}", ids[i])),
                    Some(o) if o.count == 0 && metric != "req/s" => {
                        Side::missing("no requests recorded")
                    }
                    Some(o) => Side::of(f(o)),
                }
            };
            let mut r = row(
                Section::Phase,
                &op,
                metric,
                unit,
                better,
                [side(0), side(1)],
                ids,
            );
            r.phase = Some(phase.clone());
            rows.push(r);
        }
    }
}
