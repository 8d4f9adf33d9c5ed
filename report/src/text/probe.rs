//! `herd probe`'s terminal lines: each interval's active containers and destinations, and
//! the totals table at the end.

use herd_model::{
    Counter, Counts, CpuCell, ProbeInterval, Throttling,
    waits::{ConntrackCell, ContainerWaits, ListenerCell, OomCell, PairWaits, PsiCell, RunqCell},
};

use super::render;
use crate::doc::{Column, Table, Value};

/// One interval's lines: a line per active container (TCP opens, TIME_WAIT entries, CPU
/// average / busiest 100 ms / quota, throttled share), then one line per active destination.
pub fn interval_lines(iv: &ProbeInterval, since_ns: u64, pair_rows: usize) -> Vec<String> {
    let secs = iv.interval_ns.max(1) as f64 / 1e9;
    let t = iv.at_ns.saturating_sub(since_ns) as f64 / 1e9;
    let mut lines = Vec::new();
    for c in &iv.containers {
        let (conn, acc, tw) = (
            c.counts.get(Counter::Connects),
            c.counts.get(Counter::Accepts),
            c.counts.get(Counter::TimeWaitEntries),
        );
        let cpu = match &c.cpu {
            CpuCell::Measured(ci) => {
                let quota = match &ci.throttle {
                    Throttling::Measured {
                        quota_cores: Some(q),
                        throttled_share,
                        ..
                    } => format!("/{q:.2} cap, throttled {:.0}%", throttled_share * 100.0),
                    _ => String::new(),
                };
                Some((
                    ci.cpu_cores,
                    format!(
                        "cpu {:.2} (burst {:.2}{quota})",
                        ci.cpu_cores, ci.burst_cores
                    ),
                ))
            }
            CpuCell::Unavailable { .. } => None,
        };
        let busy = cpu.as_ref().is_some_and(|(cores, _)| *cores >= 0.05);
        let waits = waits_text(&c.waits, iv.interval_ns);
        if conn + acc + tw == 0 && !busy && waits.is_none() {
            continue;
        }
        let errors: u64 = Counter::CONNECT_ERRORS
            .iter()
            .map(|k| c.counts.get(*k))
            .sum();
        let mut line = format!(
            "  {:<14} conn {:>6.0}/s  acc {:>6.0}/s  tw+ {:>6.0}/s",
            c.container,
            conn as f64 / secs,
            acc as f64 / secs,
            tw as f64 / secs
        );
        if errors > 0 {
            line.push_str(&format!("  connect errors {errors}"));
        }
        for text in [cpu.map(|(_, text)| text), waits].into_iter().flatten() {
            line.push_str("  ");
            line.push_str(&text);
        }
        lines.push(line);
    }
    let lost = if iv.lost > 0 {
        format!("  LOST {} events", iv.lost)
    } else {
        String::new()
    };
    let head = if lines.is_empty() {
        format!("{t:>7.1}s  (quiet){lost}")
    } else {
        format!("{t:>7.1}s{lost}")
    };
    let mut out = vec![head];
    out.extend(lines);
    out.extend(pair_lines(iv, pair_rows));
    out
}

/// One line per destination of the interval, the `limit` most active first (by new
/// connections plus TIME_WAIT entries), then one `other` line summing the rest: a server
/// host's thousands of destinations must not flood the view.
pub fn pair_lines(iv: &ProbeInterval, limit: usize) -> Vec<String> {
    let secs = iv.interval_ns.max(1) as f64 / 1e9;
    let mut pairs: Vec<&herd_model::PairInterval> = iv.pairs.iter().collect();
    pairs.sort_by_key(|p| std::cmp::Reverse(p.connects + p.time_wait_entries));
    let mut lines: Vec<String> = pairs
        .iter()
        .take(limit)
        .map(|p| {
            let to = match &p.remote_container {
                Some(c) => format!("{c} ({})", p.remote),
                None => p.remote.to_string(),
            };
            let mut line = format!(
                "    {} -> {to}: new {:.0}/s, tw+ {:.0}/s, connect p50 <= {}us, lifetime p50 <= {}ms",
                p.container,
                p.connects as f64 / secs,
                p.time_wait_entries as f64 / secs,
                p.connect_latency_us.p50_le,
                p.lifetime_ms.p50_le
            );
            if let Some(text) = pair_waits_text(&p.waits) {
                line.push_str(", ");
                line.push_str(&text);
            }
            line
        })
        .collect();
    let rest = &pairs[limit.min(pairs.len())..];
    if !rest.is_empty() {
        let connects: u64 = rest.iter().map(|p| p.connects).sum();
        let tw: u64 = rest.iter().map(|p| p.time_wait_entries).sum();
        lines.push(format!(
            "    other: {} more pairs, new {:.0}/s, tw+ {:.0}/s (--pair-rows shows more)",
            rest.len(),
            connects as f64 / secs,
            tw as f64 / secs
        ));
    }
    lines
}

/// The totals table: one row per container, one column per counter that is non-zero
/// somewhere (connects, accepts and TIME_WAIT entries always).
pub fn totals_table(totals: &[(String, Counts)]) -> String {
    let always = [
        Counter::Connects,
        Counter::Accepts,
        Counter::TimeWaitEntries,
    ];
    let cols: Vec<Counter> = Counter::ALL
        .into_iter()
        .filter(|c| always.contains(c) || totals.iter().any(|(_, s)| s[*c as usize] > 0))
        .collect();
    let mut t = Table::new(
        std::iter::once(Column::left("container"))
            .chain(cols.iter().map(|c| Column::right(c.name())))
            .collect(),
    );
    for (n, s) in totals {
        t.row(
            std::iter::once(Value::plain(n.clone()))
                .chain(
                    cols.iter()
                        .map(|c| Value::plain(s[*c as usize].to_string())),
                )
                .collect(),
        );
    }
    render(&t)
}

/// A short text of a container's waits for the live view's line: run-queue delay, PSI,
/// OOM kills, listen drops and conntrack when they say something; `None` when all are
/// quiet.
pub fn waits_text(w: &ContainerWaits, interval_ns: u64) -> Option<String> {
    let mut parts = Vec::new();
    if let RunqCell::Measured {
        count,
        total_ns,
        delay_us,
        ..
    } = &w.runq
        && *total_ns > 0
    {
        let per_s = *total_ns as f64 / 1e6 / (interval_ns.max(1) as f64 / 1e9);
        parts.push(match delay_us {
            Some(d) => format!("runq {per_s:.0} ms/s (p99 <= {} us)", d.p99_le),
            None => format!(
                "runq {per_s:.0} ms/s (mean {:.0} us)",
                *total_ns as f64 / 1e3 / (*count).max(1) as f64
            ),
        });
    }
    if let PsiCell::Measured { cpu, memory, io } = &w.psi {
        for (name, p) in [("cpu", cpu), ("mem", memory), ("io", io)] {
            if let Some(p) = p
                && p.some_us > 0
            {
                parts.push(format!("psi {name} {} ms", p.some_us / 1000));
            }
        }
    }
    if let OomCell::Measured { oom_kills } = w.oom
        && oom_kills > 0
    {
        parts.push(format!("OOM KILLS {oom_kills}"));
    }
    if let ListenerCell::Measured { ports } = &w.listeners {
        for l in ports.iter().filter(|l| l.drops > 0) {
            parts.push(format!(
                "listen :{} drops {} (queue {}/{})",
                l.local_port, l.drops, l.accept_queue, l.backlog
            ));
        }
    }
    if let ConntrackCell::Measured {
        entries, max, drop, ..
    } = &w.conntrack
        && (*entries * 10 >= *max * 8 || drop.unwrap_or(0) > 0)
    {
        parts.push(format!(
            "conntrack {entries}/{max} drops {}",
            drop.unwrap_or(0)
        ));
    }
    (!parts.is_empty()).then(|| parts.join("  "))
}

/// A short text of a pair's retransmits for the live view's pair line; `None` when none.
pub fn pair_waits_text(w: &PairWaits) -> Option<String> {
    (w.retrans_segs > 0).then(|| format!("retrans {} (syn {})", w.retrans_segs, w.syn_retrans))
}

#[cfg(test)]
mod tests {
    use herd_model::{PairInterval, ProbeInterval};

    #[test]
    fn the_live_view_shows_the_busiest_pairs_and_one_other_line() {
        let pair = |i: u64| PairInterval {
            container: "gateway".into(),
            remote: format!("198.18.1.{}:80", i + 1).parse().unwrap(),
            remote_container: None,
            connects: i,
            established: 0,
            time_wait_entries: 1,
            closed: 0,
            connect_latency_us: Default::default(),
            lifetime_ms: Default::default(),
            connect_latency_buckets: Default::default(),
            lifetime_buckets: Default::default(),
            gauges: None,
            waits: Default::default(),
        };
        let iv = ProbeInterval {
            rolled_up: None,
            at_ns: 1_000_000_000,
            interval_ns: 1_000_000_000,
            containers: vec![],
            pairs: (0..100).map(pair).collect(),
            lost: 0,
            services: vec![],
        };
        let lines = super::pair_lines(&iv, 3);
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(
            lines[0].contains("198.18.1.100:80: new 99/s"),
            "{}",
            lines[0]
        );
        assert!(lines[2].contains("198.18.1.98:80"), "{}", lines[2]);
        // 0 + 1 + … + 96 new connections and 97 TIME_WAIT entries in the other 97 pairs.
        assert_eq!(
            lines[3],
            "    other: 97 more pairs, new 4656/s, tw+ 97/s (--pair-rows shows more)"
        );
        assert_eq!(
            super::pair_lines(&iv, 100).len(),
            100,
            "no other line when all fit"
        );
    }
}
