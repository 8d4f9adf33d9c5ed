//! conntrack exhaustion: where a rule needs connection tracking (NAT for Docker's published
//! ports, a stateful firewall), a full table drops new connections silently — the NAT
//! counterpart of running out of ephemeral ports.

use std::collections::BTreeMap;

use herd_model::RunData;
use herd_model::waits::ConntrackCell;

use super::waits::{load, secs, span};
use super::{Finding, n};

/// Share of the table's limit from which a table is close to full.
const NEAR_FULL: f64 = 0.8;

/// A table that fills within this many seconds at its measured growth is named before it
/// is full.
const SOON_S: f64 = 600.0;

/// One network namespace's table over the load, as its containers' rows read it.
#[derive(Default, Clone, PartialEq)]
struct Table {
    /// (interval end s, entries, max) per interval.
    series: Vec<(f64, u64, u64)>,
    drop: u64,
    early_drop: u64,
    insert_failed: u64,
}

/// A conntrack table that dropped new connections because it was full, held 80 % of its
/// limit or more, or grew fast enough to fill within 10 minutes at the rate it grew over
/// the load: named with its entries against the limit, the rate and the time to full.
/// Containers that share a network namespace read the same table and are named together.
pub fn conntrack_exhaustion(d: &RunData) -> Vec<Finding> {
    let mut tables: BTreeMap<String, Table> = BTreeMap::new();
    for a in load(d) {
        for c in &a.iv.containers {
            let ConntrackCell::Measured {
                entries,
                max,
                drop,
                early_drop,
                insert_failed,
            } = &c.waits.conntrack
            else {
                continue;
            };
            let t = tables.entry(c.container.clone()).or_default();
            t.series.push((a.end_s, *entries, *max));
            t.drop += drop.unwrap_or(0);
            t.early_drop += early_drop.unwrap_or(0);
            t.insert_failed += insert_failed.unwrap_or(0);
        }
    }
    // One table per namespace: rows that read the very same numbers at the same moments.
    let mut groups: Vec<(Vec<String>, Table)> = Vec::new();
    for (name, t) in tables {
        match groups.iter_mut().find(|(_, g)| *g == t) {
            Some((names, _)) => names.push(name),
            None => groups.push((vec![name], t)),
        }
    }
    let mut found = Vec::new();
    for (names, t) in groups {
        let (Some(&(t0, e0, _)), Some(&(t1, e1, max))) = (t.series.first(), t.series.last()) else {
            continue;
        };
        let (peak, at_max) = t
            .series
            .iter()
            .map(|&(_, e, m)| (e, m))
            .max_by_key(|&(e, _)| e)
            .unwrap_or((0, max));
        let rate = if t1 > t0 {
            (e1 as f64 - e0 as f64) / (t1 - t0)
        } else {
            0.0
        };
        let to_full = (rate > 0.0).then(|| max.saturating_sub(e1) as f64 / rate);
        let near = at_max > 0 && peak as f64 >= NEAR_FULL * at_max as f64;
        let soon = to_full.is_some_and(|s| s <= SOON_S);
        if t.drop == 0 && !near && !soon {
            continue;
        }
        let who = names.join(", ");
        let pct = 100.0 * peak as f64 / at_max.max(1) as f64;
        let mut evidence = vec![format!(
            "conntrack of {who}'s network namespace: peak {} entries of a {} limit ({pct:.0} \
             %); {} at t = {t0:.0} s, {} at t = {t1:.0} s",
            n(peak),
            n(at_max),
            n(e0),
            n(e1)
        )];
        evidence.push(format!(
            "new connections dropped with the table full: {}, entries evicted early: {}, \
             inserts failed: {}",
            n(t.drop),
            n(t.early_drop),
            n(t.insert_failed)
        ));
        let mut title = format!(
            "conntrack table of {who}: {} entries of {} ({pct:.0} %)",
            n(peak),
            n(at_max)
        );
        if t.drop > 0 {
            title.push_str(&format!(
                ", {} new connections dropped because it was full",
                n(t.drop)
            ));
        }
        if let Some(s) = to_full {
            evidence.push(format!(
                "growth over {}: {rate:.1} entries/s; ({} − {}) ÷ {rate:.1}/s = {} to full",
                span(t0, t1),
                n(max),
                n(e1),
                secs(s)
            ));
            title.push_str(&format!(
                "; growing {rate:.1} entries/s, full in {} at this rate",
                secs(s)
            ));
        }
        let mut f = Finding::new(
            "conntrack_exhaustion",
            title,
            "Every connection through NAT or a stateful rule holds a conntrack entry, a closed \
             TCP connection for 120 s more (nf_conntrack_tcp_timeout_time_wait). When the table \
             is full the kernel drops new connections without a trace in the application: \
             clients see SYN timeouts. Keep connections open (fewer new ones), raise \
             net.netfilter.nf_conntrack_max, or take the path out of conntrack (host \
             networking, NOTRACK for trusted traffic).",
            evidence,
        )
        .about(&names[0])
        .number("entries", peak as f64)
        .number("max", at_max as f64)
        .number("dropped", t.drop as f64)
        .number("entries_per_s", rate);
        if let Some(s) = to_full {
            f = f.number("seconds_to_full", s);
        }
        found.push(f);
    }
    found
}
