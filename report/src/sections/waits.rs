//! The kernel-side waits: a per step × container table (run-queue delay, PSI, OOM kills,
//! listen drops per port, conntrack), a per step × pair table of retransmits (SYN apart from
//! data), and their charts (run-queue delay by container, retransmits per pair). A column
//! no row measured is left out, with why in a sentence; a cell a row lacks says why.

use super::*;
use crate::model::{ContainerRow, WaitsRow};

/// One column of the waits table: its header and its cell of a row.
type WaitColumn = (&'static str, fn(&WaitsRow) -> Value, fn(&WaitsRow) -> &Cell);

fn ms(c: &Cell) -> Value {
    with_unit(c, 1, "ms")
}

fn runq_total(w: &WaitsRow) -> Value {
    match (&w.runq_total_ms, &w.runq_ms_per_s) {
        (Cell::Value(t), Cell::Value(r)) => Value::plain(format!("{t:.1} ms ({r:.1} ms/s)")),
        (Cell::Missing(why), _) | (_, Cell::Missing(why)) => Value::missing(why.clone()),
    }
}

/// One wait's p99 when the waits were timed one by one (`--runq-waits`), else their mean
/// (total over count), said as such.
pub(crate) fn runq_wait(w: &WaitsRow) -> Value {
    match (&w.runq_p99_le_us, &w.runq_total_ms, &w.runq_waits) {
        (Cell::Missing(why), Cell::Value(t), Cell::Value(n))
            if why == herd_model::waits::NO_PER_WAIT && *n > 0.0 =>
        {
            let us = t * 1e3 / n;
            if us < 1000.0 {
                Value::plain(format!("mean {us:.0} µs"))
            } else {
                Value::plain(format!("mean {:.1} ms", us / 1e3))
            }
        }
        _ => le_cell(&w.runq_p99_le_us),
    }
}

fn listen_drops(w: &WaitsRow) -> Value {
    let Cell::Value(total) = &w.listen_drops else {
        return num(&w.listen_drops, 0);
    };
    if w.listeners.is_empty() {
        return Value::plain("0 (no listening port)");
    }
    let ports: Vec<String> = w
        .listeners
        .iter()
        .map(|l| {
            format!(
                ":{} {}, queue peak {} of {}",
                l.port, l.drops, l.accept_queue_peak, l.backlog
            )
        })
        .collect();
    Value::plain(format!("{total:.0} ({})", ports.join("; ")))
}

fn conntrack(w: &WaitsRow) -> Value {
    let v = pair_of(num(&w.conntrack_peak, 0), num(&w.conntrack_max, 0));
    match &w.conntrack_drops {
        Cell::Value(d) if *d > 0.0 && !matches!(v.kind, ValueKind::Missing(_)) => {
            Value::plain(format!("{} ({d:.0} dropped, table full)", v.text))
        }
        _ => v,
    }
}

const COLUMNS: [WaitColumn; 9] = [
    ("run-queue delay", runq_total, |w| &w.runq_total_ms),
    ("run-queue wait p99 (log2 bound) or mean", runq_wait, |w| {
        &w.runq_total_ms
    }),
    (
        "PSI cpu some",
        |w| ms(&w.psi_cpu_some_ms),
        |w| &w.psi_cpu_some_ms,
    ),
    (
        "PSI cpu full",
        |w| ms(&w.psi_cpu_full_ms),
        |w| &w.psi_cpu_full_ms,
    ),
    (
        "PSI memory some / full",
        |w| pair_of(ms(&w.psi_memory_some_ms), ms(&w.psi_memory_full_ms)),
        |w| &w.psi_memory_some_ms,
    ),
    (
        "PSI io some / full",
        |w| pair_of(ms(&w.psi_io_some_ms), ms(&w.psi_io_full_ms)),
        |w| &w.psi_io_some_ms,
    ),
    ("OOM kills", |w| num(&w.oom_kills, 0), |w| &w.oom_kills),
    ("listen drops by port", listen_drops, |w| &w.listen_drops),
    ("conntrack peak / limit", conntrack, |w| &w.conntrack_peak),
];

/// The rows the waits tables show.
fn rows(r: &Report) -> impl Iterator<Item = &ContainerRow> {
    r.containers.iter()
}

/// The per step × container table of waits, and the per step × pair table of retransmits.
pub(super) fn tables(b: &mut Vec<Block>, r: &Report) {
    let columns: Vec<&WaitColumn> = COLUMNS
        .iter()
        .filter(|c| rows(r).any(|row| c.2(&row.waits).value().is_some()))
        .collect();
    b.push(Block::Heading(
        2,
        "Kernel waits per step and container".into(),
    ));
    if r.run.probe_intervals == 0 {
        // One sentence for both tables: without the probe there is nothing per container.
        let why = r
            .notes
            .iter()
            .find_map(|n| n.strip_prefix("Kernel probe: "))
            .unwrap_or("the probe recorded no interval");
        b.push(Block::Para(Text::plain(format!(
            "Not measured (run-queue delay, PSI, OOM kills, listen drops, conntrack, \
             retransmits per pair): {why}."
        ))));
        return;
    }
    if columns.is_empty() {
        let why = rows(r)
            .find_map(|row| match &row.waits.runq_total_ms {
                Cell::Missing(why) => Some(why.clone()),
                Cell::Value(_) => None,
            })
            .unwrap_or_else(|| "the probe recorded no interval".into());
        b.push(Block::Para(Text::plain(format!(
            "No wait was measured: {why}."
        ))));
    } else {
        let left_out: Vec<String> = COLUMNS
            .iter()
            .filter(|c| !columns.iter().any(|k| k.0 == c.0))
            .map(|c| {
                let why = rows(r)
                    .find_map(|row| match c.2(&row.waits) {
                        Cell::Missing(why) => Some(why.clone()),
                        Cell::Value(_) => None,
                    })
                    .unwrap_or_default();
                format!("{}: {why}", c.0)
            })
            .collect();
        b.push(Block::Para(Text::plain(
            "Run-queue delay is thread-time spent runnable and not running (two threads waiting \
             1 s each are 2 s), with ms per second of the step beside it; its p99 is the upper \
             bound of the log2 bucket holding the 99th percentile of one wait in the step's \
             merged histogram. PSI is the cgroup's stall time in the step.",
        )));
        let mut heads = vec![Column::left("step"), Column::left("container")];
        heads.extend(columns.iter().map(|c| Column::right(c.0)));
        let mut t = Table::new(heads);
        let mut unmeasured: Vec<String> = Vec::new();
        for row in rows(r) {
            if !row.waits.any_measured() {
                let why = match &row.waits.runq_total_ms {
                    Cell::Missing(why) => why.clone(),
                    Cell::Value(_) => String::new(),
                };
                let line = format!("{} ({why})", row.container);
                if !unmeasured.contains(&line) {
                    unmeasured.push(line);
                }
                continue;
            }
            let mut cells = vec![row.phase.clone().into(), row.container.clone().into()];
            cells.extend(columns.iter().map(|c| c.1(&row.waits)));
            t.row(cells);
        }
        b.push(Block::Table(t));
        if !unmeasured.is_empty() {
            b.push(Block::Para(Text::plain(format!(
                "No wait measured, so no row: {}.",
                unmeasured.join(", ")
            ))));
        }
        if !left_out.is_empty() {
            b.push(Block::Para(Text::plain(format!(
                "Not measured in any step, so left out: {}.",
                left_out.join("; ")
            ))));
        }
    }
    retransmits(b, r);
}

fn retransmits(b: &mut Vec<Block>, r: &Report) {
    b.push(Block::Heading(
        2,
        "Retransmits per step, source → destination".into(),
    ));
    let measured: Vec<&ContainerRow> = rows(r)
        .filter(|row| row.waits.retransmits_missing.is_none())
        .collect();
    if measured.is_empty() {
        let why = rows(r)
            .find_map(|row| row.waits.retransmits_missing.clone())
            .unwrap_or_else(|| "the probe recorded no interval".into());
        b.push(Block::Para(Text::plain(format!(
            "Retransmits per pair were not counted: {why}."
        ))));
        return;
    }
    if measured.iter().all(|row| row.waits.retransmits.is_empty()) {
        b.push(Block::Para(Text::plain(
            "None: no container retransmitted a segment toward any destination.",
        )));
        return;
    }
    let mut t = Table::new(vec![
        Column::left("step"),
        Column::left("source"),
        Column::left("destination"),
        Column::right("SYN retransmits"),
        Column::right("data retransmits"),
    ]);
    for row in measured {
        for x in &row.waits.retransmits {
            t.row(vec![
                row.phase.clone().into(),
                row.container.clone().into(),
                destination(&x.remote_container, &x.remote).into(),
                x.syn.to_string().into(),
                x.data.to_string().into(),
            ]);
        }
    }
    b.push(Block::Table(t));
    b.push(Block::Para(Text::plain(
        "Every pair that retransmitted anywhere in the run, in every step. A SYN retransmit \
         adds the SYN timeout (1 s, then 2 s, 4 s …) to a connect; a data retransmit at \
         least the retransmission timeout (200 ms or more) to the request waiting for it.",
    )));
}

fn destination(container: &str, remote: &str) -> String {
    if container == "-" {
        remote.to_owned()
    } else {
        format!("{container} ({remote})")
    }
}

/// The containers' rows in run order, per container (node sums left out: their nodes have
/// their own rows).
fn by_container(r: &Report) -> Vec<(String, Vec<&ContainerRow>)> {
    let mut out: Vec<(String, Vec<&ContainerRow>)> = Vec::new();
    for row in r
        .containers
        .iter()
        .filter(|c| !c.container.ends_with(" nodes)"))
    {
        match out.iter_mut().find(|(n, _)| *n == row.container) {
            Some((_, v)) => v.push(row),
            None => out.push((row.container.clone(), vec![row])),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn sorted(mut v: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// The run-queue delay chart (one line per container) and one retransmits chart per pair
/// that retransmitted.
pub(super) fn charts(b: &mut Vec<Block>, r: &Report) {
    let t = &r.timeline;
    let containers = by_container(r);
    let mut series = Vec::new();
    for (i, (name, rows)) in containers.iter().enumerate() {
        let points = sorted(
            rows.iter()
                .flat_map(|row| &row.waits.runq_points)
                .map(|p| (p.t_s, p.ms_per_s))
                .collect(),
        );
        let why = rows
            .iter()
            .find_map(|row| match &row.waits.runq_total_ms {
                Cell::Missing(why) => Some(why.clone()),
                Cell::Value(_) => None,
            })
            .unwrap_or_else(|| "no run-queue reading".into());
        series.push(Series::new(name.clone(), i, points).or_why(why));
    }
    let mut c = timeline_chart(
        t,
        "Run-queue delay, by container (thread-time waiting for a CPU per second)",
        "ms/s",
        series,
    );
    if c.series.iter().all(|s| s.points.is_empty()) {
        c.empty = Some(
            c.series
                .first()
                .and_then(|s| s.why_empty.clone())
                .unwrap_or_else(|| "the probe recorded no interval".into()),
        );
        c.series.clear();
    }
    b.push(Block::Chart(c));
    for (name, rows) in &containers {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for x in rows.iter().flat_map(|row| &row.waits.retransmits) {
            let key = (x.remote.clone(), x.remote_container.clone());
            if !pairs.contains(&key) {
                pairs.push(key);
            }
        }
        for (remote, remote_container) in pairs {
            let of = |f: fn(&crate::model::RetransPoint) -> f64| {
                sorted(
                    rows.iter()
                        .flat_map(|row| &row.waits.retransmits)
                        .filter(|x| x.remote == remote)
                        .flat_map(|x| &x.points)
                        .map(|p| (p.t_s, f(p)))
                        .collect(),
                )
            };
            b.push(Block::Chart(timeline_chart(
                t,
                &format!(
                    "Retransmits per second, {name} → {}",
                    destination(&remote_container, &remote)
                ),
                "segments/s",
                vec![
                    Series::new("SYN retransmits", 1, of(|p| p.syn_per_s)),
                    Series::new("data retransmits", 3, of(|p| p.data_per_s)),
                ],
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn markdown_of(d: &herd_model::RunData) -> String {
        crate::sections::markdown(&Report::build(d))
    }

    #[test]
    fn without_the_probe_the_waits_are_one_sentence_with_the_reason() {
        let mut d = crate::snapshot_tests::fixture(false);
        d.probe.clear();
        d.probe_missing = Some("the run was started with --no-probe".into());
        let md = markdown_of(&d);
        assert!(
            md.contains(
                "Not measured (run-queue delay, PSI, OOM kills, listen drops, conntrack, \
                 retransmits per pair): the run was started with --no-probe."
            ),
            "{md}"
        );
        assert!(!md.contains("Retransmits per step"), "{md}");
    }

    #[test]
    fn rows_recorded_before_the_waits_say_so_instead_of_zeros() {
        let mut d = crate::snapshot_tests::fixture(false);
        for iv in &mut d.probe {
            for c in &mut iv.containers {
                c.waits = Default::default();
            }
            for p in &mut iv.pairs {
                p.waits = Default::default();
            }
        }
        let md = markdown_of(&d);
        assert!(md.contains("No wait was measured: not sampled."), "{md}");
        assert!(md.contains(&format!(
            "Retransmits per pair were not counted: {}.",
            crate::model::waits::RETRANS_NOT_RECORDED
        )));
        let html = crate::sections::html(&Report::build(&d));
        assert!(html.contains("no data: not sampled"), "the chart says why");
    }
}
