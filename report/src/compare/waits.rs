//! The comparison's kernel-side waits: per container its run-queue delay (worst step's ms/s
//! and log2 p99 bound), listen drops, OOM kills and conntrack peak; per source → destination
//! its SYN and data retransmits; and the figures the container `--fail-on` gates read.
//! A row only when either run measured it: runs recorded before the waits add no rows of
//! reasons.

use super::*;
use crate::gate::ContainerFigures;
use crate::model::WaitsRow;

type Pick = fn(&WaitsRow) -> Cell;

/// The container metrics compared: name, unit, whether summed over the steps (else the worst
/// step), and the cell.
const METRICS: [(&str, Unit, bool, Pick); 5] = [
    (
        "run-queue delay, ms per second (worst step)",
        Unit::PerSecond,
        false,
        |w| w.runq_ms_per_s.clone(),
    ),
    (
        "run-queue wait p99, µs (log2 bucket bound, worst step)",
        Unit::Count,
        false,
        |w| w.runq_p99_le_us.clone(),
    ),
    ("listen drops (load steps)", Unit::Count, true, |w| {
        w.listen_drops.clone()
    }),
    ("OOM kills (load steps)", Unit::Count, true, |w| {
        w.oom_kills.clone()
    }),
    ("conntrack entries peak", Unit::Count, false, |w| {
        w.conntrack_peak.clone()
    }),
];

fn rows_of<'a>(r: &'a Report, name: &str) -> Vec<&'a ContainerRow> {
    compared_containers(r)
        .into_iter()
        .filter(|c| c.container == name)
        .collect()
}

fn fold(rows: &[&ContainerRow], pick: Pick, add: bool) -> Option<Cell> {
    let cells: Vec<Cell> = rows.iter().map(|c| pick(&c.waits)).collect();
    if add {
        // A total with a step missing is no total.
        if let Some(m) = cells.iter().find(|c| c.value().is_none()) {
            return Some(m.clone());
        }
        (!cells.is_empty()).then(|| sum(cells.iter()))
    } else {
        peak(cells.iter())
    }
}

/// Per container: run-queue delay, its p99, listen drops, OOM kills, conntrack peak.
pub(super) fn container_wait_rows(a: &Report, b: &Report, rows: &mut Vec<Row>) {
    let ids = [a.run.id, b.run.id];
    let reports = [a, b];
    let names = union_in_order(
        compared_containers(a).iter().map(|c| c.container.as_str()),
        compared_containers(b).iter().map(|c| c.container.as_str()),
    );
    for name in &names {
        for (metric, unit, add, pick) in METRICS {
            let side = |i: usize| -> Side {
                if let Some(why) = probe_missing(reports[i]) {
                    return Side::missing(why);
                }
                Side::of(
                    fold(&rows_of(reports[i], name), pick, add).unwrap_or_else(|| {
                        Cell::Missing(format!("no container {name} in run {}", ids[i]))
                    }),
                )
            };
            let sides = [side(0), side(1)];
            if sides.iter().all(|s| s.value.value().is_none()) {
                continue;
            }
            rows.push(row(
                Section::Container,
                name,
                metric,
                unit,
                Better::Lower,
                sides,
                ids,
            ));
        }
    }
}

/// Each run's retransmits per (source, destination), the destination named by its container
/// when the probe knew it; None when the run did not count them.
fn retransmits(r: &Report) -> Option<BTreeMap<(String, String), (u64, u64)>> {
    let rows = compared_containers(r);
    if rows.is_empty() || rows.iter().any(|c| c.waits.retransmits_missing.is_some()) {
        return None;
    }
    let mut out: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for c in rows {
        for x in &c.waits.retransmits {
            let dst = if x.remote_container == "-" {
                x.remote.clone()
            } else {
                x.remote_container.clone()
            };
            let e = out.entry((c.container.clone(), dst)).or_default();
            e.0 += x.syn;
            e.1 += x.data;
        }
    }
    Some(out)
}

/// Per source → destination that retransmitted in either run: SYN and data retransmits over
/// the load steps (0 in a run that counted them and had none).
pub(super) fn retransmit_rows(a: &Report, b: &Report, rows: &mut Vec<Row>) {
    let ids = [a.run.id, b.run.id];
    let sides = [retransmits(a), retransmits(b)];
    let mut keys: Vec<&(String, String)> = sides.iter().flatten().flat_map(|m| m.keys()).collect();
    keys.sort();
    keys.dedup();
    for (src, dst) in keys {
        for (metric, syn) in [("SYN retransmits", true), ("data retransmits", false)] {
            let side = |i: usize| -> Side {
                match &sides[i] {
                    None => {
                        Side::missing(format!("run {} did not count retransmits per pair", ids[i]))
                    }
                    Some(m) => {
                        let (s, d) = m
                            .get(&(src.clone(), dst.clone()))
                            .copied()
                            .unwrap_or_default();
                        Side::of(Cell::Value(if syn { s } else { d } as f64))
                    }
                }
            };
            rows.push(row(
                Section::Pair,
                &format!("{src} → {dst}"),
                metric,
                Unit::Count,
                Better::Lower,
                [side(0), side(1)],
                ids,
            ));
        }
    }
}

/// A run's run-queue delay per container, (seconds since its start, ms/s) per probe interval,
/// for the overlaid chart.
pub(super) fn runq_series(r: &Report) -> RunqSeries {
    let mut out: RunqSeries = Vec::new();
    for c in r
        .containers
        .iter()
        .filter(|c| !c.container.ends_with(" nodes)"))
    {
        let points = c.waits.runq_points.iter().map(|p| (p.t_s, p.ms_per_s));
        match out.iter_mut().find(|(n, _)| *n == c.container) {
            Some((_, v)) => v.extend(points),
            None => out.push((c.container.clone(), points.collect())),
        }
    }
    for (_, v) in &mut out {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// Both runs' run-queue delay by container on one chart, each container in the colour the
/// other overlaid charts give it (`names`: their order).
pub(super) fn runq_overlay(c: &Comparison, names: &[String]) -> Chart {
    render::overlay_runs(c, "Run-queue delay, by container", "ms/s", &|i| {
        names
            .iter()
            .enumerate()
            .filter_map(|(k, n)| {
                let (_, points) = c.runq[i].iter().find(|(m, _)| m == n)?;
                (!points.is_empty()).then(|| Series::new(n.clone(), k, points.clone()))
            })
            .collect()
    })
}

/// A run's per-container figures for the container gates.
pub(super) fn container_figures(r: &Report) -> Vec<(String, ContainerFigures)> {
    let names = union_in_order(
        compared_containers(r).iter().map(|c| c.container.as_str()),
        std::iter::empty(),
    );
    let retrans = retransmits(r);
    names
        .into_iter()
        .map(|name| {
            let rows = rows_of(r, &name);
            let get = |k: usize| fold(&rows, METRICS[k].3, METRICS[k].2).and_then(|c| c.value());
            let (syn, data) = match &retrans {
                Some(m) => {
                    let (s, d) = m
                        .iter()
                        .filter(|((src, _), _)| *src == name)
                        .fold((0, 0), |(s, d), (_, (x, y))| (s + x, d + y));
                    (Some(s as f64), Some(d as f64))
                }
                None => (None, None),
            };
            let f = ContainerFigures {
                runq_ms_per_s: get(0),
                runq_p99_us: get(1),
                listen_drops: get(2),
                oom_kills: get(3),
                syn_retransmits: syn,
                retransmits: syn.zip(data).map(|(s, d)| s + d),
            };
            (name, f)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_gates_read_the_containers_of_both_runs() {
        let build = |fixed| Report::build(&crate::snapshot_tests::fixture(fixed));
        let (buggy, fixed) = (build(false), build(true));
        let gates: Vec<Gate> = [
            "gateway retransmits +0",
            "runq_p99 +20%",
            "gateway runq +10%",
            "gateway listen_drops +0",
        ]
        .iter()
        .map(|g| g.parse().unwrap())
        .collect();
        // The fix: loss, drops and run-queue delay all fell; every gate passes.
        let mut c = compare(&buggy, &fixed);
        assert!(apply_gates(&mut c, &gates), "{:#?}", c.gates);
        let r = c
            .gates
            .iter()
            .find(|g| g.gate == "gateway retransmits +0")
            .unwrap();
        assert_eq!(r.detail, "retransmits 23 → 0 (-23)");
        let q = c
            .gates
            .iter()
            .find(|g| g.gate == "gateway runq +10%")
            .unwrap();
        assert_eq!(q.detail, "runq 77.3 ms/s → 65.3 ms/s (-15.5 %)");
        // The other way round is a regression: the retransmits, run-queue and drops gates fail.
        let mut back = compare(&fixed, &buggy);
        assert!(!apply_gates(&mut back, &gates));
        let failed: Vec<(&str, &str)> = back
            .gates
            .iter()
            .filter(|g| !g.pass)
            .map(|g| (g.gate.as_str(), g.op.as_str()))
            .collect();
        assert_eq!(
            failed,
            [
                ("gateway retransmits +0", "gateway"),
                ("gateway runq +10%", "gateway"),
                ("gateway listen_drops +0", "gateway")
            ]
        );
        // For every container: the host measured nothing, so it is skipped; the backend has
        // no listener reading in either run either. Named, a container that cannot be checked
        // fails and says why.
        let gates: Vec<Gate> = ["listen_drops +0", "backend listen_drops +0"]
            .iter()
            .map(|g| g.parse().unwrap())
            .collect();
        let mut c = compare(&buggy, &fixed);
        assert!(!apply_gates(&mut c, &gates));
        let v: Vec<(&str, bool, &str)> = c
            .gates
            .iter()
            .map(|g| (g.op.as_str(), g.pass, g.detail.as_str()))
            .collect();
        assert_eq!(
            v,
            [
                ("gateway", true, "listen_drops 1 → 0 (-1)"),
                (
                    "backend",
                    false,
                    "cannot be checked: a run has no value for it"
                ),
            ]
        );
        let none: Gate = "oom_kills +0".parse().unwrap();
        let mut c = compare(&buggy, &fixed);
        c.containers[0]
            .iter_mut()
            .for_each(|(_, f)| f.oom_kills = None);
        c.containers[1]
            .iter_mut()
            .for_each(|(_, f)| f.oom_kills = None);
        assert!(!apply_gates(&mut c, &[none]));
        assert_eq!(
            c.gates[0].detail,
            "no container has oom_kills in either run"
        );
    }
}
