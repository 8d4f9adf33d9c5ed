//! Packet loss on a pair: segments the source retransmitted toward one destination, SYN
//! retries (each a connect that waited a second or more) apart from data retransmits (each
//! a request stalled for a retransmission timeout, 200 ms at least, unless a fast
//! retransmit repaired it sooner).

use std::collections::BTreeMap;

use herd_model::{Log2Hist, RunData};

use super::waits::{WHOLE_RUN, count, load, secs, span};
use super::{Finding, n};

/// Retransmitted segments under which a pair is left alone: a connect or two retried is
/// the target's failure (`target_unreachable`), not loss; five stalls of 200 ms or more are.
const MIN_RETRANS: u64 = 5;

/// Retransmits per second of the load under which a pair is left alone (a long run's
/// handful is not loss worth a finding).
const MIN_PER_S: f64 = 0.05;

/// Linux's minimum retransmission timeout (`TCP_RTO_MIN`), ms: what a data segment lost
/// and not repaired by a fast retransmit costs at least.
const MIN_RTO_MS: u64 = 200;

/// The first connect-latency bucket of a SYN retried once (`[2^19, 2^20)` µs: 512 ms or
/// more); the 1 s retry lands there or in the next.
pub(super) const SLOW_CONNECT_BUCKET: usize = 19;

#[derive(Default)]
struct Acc {
    remote_container: Option<String>,
    retrans: u64,
    syn: u64,
    connects: u64,
    latency: Log2Hist,
    windows: u64,
    first_s: Option<f64>,
    last_s: f64,
    srtt_p50_us: Option<u32>,
    phases: BTreeMap<String, u64>,
}

/// Connects of `h` that took 512 ms or more: a SYN that was sent again.
pub(super) fn slow_connects(h: &Log2Hist) -> u64 {
    h.0[SLOW_CONNECT_BUCKET..].iter().sum()
}

/// A pair that retransmitted at least 5 segments, and at least one every 20 s of the load:
/// named with its SYN retries (and the connects that took 512 ms or more) apart from its
/// data retransmits, when they happened, and the path's round-trip time beside them.
pub fn packet_loss(d: &RunData) -> Vec<Finding> {
    let ats = load(d);
    let wall: f64 = ats.iter().map(|a| a.secs()).sum();
    let mono0 = d.meta.mono_start_ns.max(0) as u64;
    let mut acc: BTreeMap<(String, String), Acc> = BTreeMap::new();
    for a in &ats {
        for p in &a.iv.pairs {
            let e = acc
                .entry((p.container.clone(), p.remote.to_string()))
                .or_default();
            if p.remote_container.is_some() {
                e.remote_container = p.remote_container.clone();
            }
            e.retrans += p.waits.retrans_segs;
            e.syn += p.waits.syn_retrans;
            e.connects += p.connects;
            e.latency.add(&p.connect_latency_buckets);
            if let Some(g) = &p.gauges
                && g.srtt_p50_us.is_some()
            {
                e.srtt_p50_us = g.srtt_p50_us;
            }
            if p.waits.retrans_segs > 0 {
                *e.phases.entry(a.phase.clone()).or_default() += p.waits.retrans_segs;
            }
            for w in p.waits.windows.iter().filter(|w| w.retrans_segs > 0) {
                e.windows += 1;
                let (s, t) = (
                    w.start_ns.saturating_sub(mono0) as f64 / 1e9,
                    w.end_ns.saturating_sub(mono0) as f64 / 1e9,
                );
                e.first_s = Some(e.first_s.map_or(s, |f: f64| f.min(s)));
                e.last_s = e.last_s.max(t);
            }
        }
    }
    // SYN retries a full accept queue at the destination explains are its overflow
    // (accept_queue_overflow), not loss: each pair toward a listener that dropped SYNs is
    // credited its share of those drops, the pairs' SYN retries toward it in proportion.
    let drops = super::listen::listener_drops(&ats);
    let listener = |remote: &str, rc: &Option<String>| -> Option<(String, u16)> {
        let port = remote.parse::<std::net::SocketAddr>().ok()?.port();
        match rc {
            Some(c) => drops
                .contains_key(&(c.clone(), port))
                .then(|| (c.clone(), port)),
            // An unresolved destination, matched by its port as accept_queue_overflow does,
            // when exactly one listener with drops has it.
            None => {
                let mut on_port = drops.keys().filter(|(_, p)| *p == port);
                match (on_port.next(), on_port.next()) {
                    (Some(k), None) => Some(k.clone()),
                    _ => None,
                }
            }
        }
    };
    let mut syn_toward: BTreeMap<(String, u16), u64> = BTreeMap::new();
    for ((_, remote), e) in &acc {
        if let Some(l) = listener(remote, &e.remote_container) {
            *syn_toward.entry(l).or_default() += e.syn.min(e.retrans);
        }
    }
    let mut found: Vec<(f64, Finding)> = Vec::new();
    for ((src, remote), e) in acc {
        let all_syn = e.syn.min(e.retrans);
        let overflow = listener(&remote, &e.remote_container).map(|l| {
            let (d, s) = (drops[&l], syn_toward[&l]);
            let explained = if s == 0 {
                0
            } else {
                (u128::from(all_syn) * u128::from(d.min(s)) / u128::from(s)) as u64
            };
            (l, d, explained)
        });
        let explained = overflow.as_ref().map_or(0, |o| o.2);
        let syn = all_syn - explained;
        let data = e.retrans - all_syn;
        let lost = syn + data;
        let rate = lost as f64 / wall.max(1e-9);
        if lost < MIN_RETRANS || rate < MIN_PER_S {
            continue;
        }
        let dest = match &e.remote_container {
            Some(rc) => format!("{rc} ({remote})"),
            None => remote.clone(),
        };
        let slow = slow_connects(&e.latency);
        let phase = e
            .phases
            .iter()
            .max_by_key(|(_, v)| **v)
            .map_or(WHOLE_RUN.to_owned(), |(k, _)| k.clone());
        let mut evidence = vec![format!(
            "pair {src} → {dest}, over {} of load: {} segments retransmitted ({:.2}/s), of \
             which {} SYN retries and {} data retransmits; {} connects",
            secs(wall),
            n(e.retrans),
            e.retrans as f64 / wall.max(1e-9),
            n(e.syn),
            n(data),
            n(e.connects)
        )];
        if let Some(((c, port), d, explained)) = &overflow
            && *explained > 0
        {
            evidence.push(format!(
                "{} of its SYN retries match the {} SYNs {c}:{port} dropped at its full \
                 accept queue (accept_queue_overflow); the other {} retransmits ({rate:.2}/s) \
                 are loss",
                n(*explained),
                n(*d),
                n(lost)
            ));
        }
        if e.latency.count() > 0 {
            evidence.push(format!(
                "{src} → {dest} connect latency: {} of {} connects took 512ms or more (a SYN \
                 sent again: the first retry waits 1 s), p99 {}",
                n(slow),
                n(e.latency.count()),
                crate::units::bound(e.latency.quantile_le(990).unwrap_or(0), 1)
            ));
        }
        if let Some(first) = e.first_s {
            evidence.push(format!(
                "retransmits fell in {} windows of 100 ms, {}",
                n(e.windows),
                span(first, e.last_s)
            ));
        }
        if !e.phases.is_empty() {
            let per: Vec<String> = e
                .phases
                .iter()
                .map(|(k, v)| format!("{k} {}", n(*v)))
                .collect();
            evidence.push(format!("retransmits per phase: {}", per.join(", ")));
        }
        let srtt = e.srtt_p50_us.map(|v| crate::units::latency(u64::from(v)));
        if let Some(s) = &srtt {
            evidence.push(format!("{src} → {dest}: srtt p50 {s}"));
        }
        let mut title = format!(
            "{src} → {dest}: {} segments retransmitted ({rate:.2}/s over {} of load) — {}, {}",
            n(lost),
            secs(wall),
            count(syn, "SYN retry", "SYN retries"),
            count(data, "data retransmit", "data retransmits")
        );
        if explained > 0 {
            title.push_str(&format!(
                " (besides {} the destination's full accept queue explains)",
                count(explained, "SYN retry", "SYN retries")
            ));
        }
        if slow > 0 {
            title.push_str(&format!(
                "; {} of {} connects took 512ms or more",
                n(slow),
                n(e.latency.count())
            ));
        }
        if data > 0 {
            evidence.push(format!(
                "a data retransmit after a timeout waits at least Linux's minimum RTO, \
                 {MIN_RTO_MS} ms (TCP_RTO_MIN)"
            ));
            title.push_str(&format!(
                "; each data retransmit after a timeout stalls its request {MIN_RTO_MS} ms or more"
            ));
            if let Some(s) = &srtt {
                title.push_str(&format!(" on a path whose srtt p50 is {s}"));
            }
        }
        let f = Finding::new(
            "packet_loss",
            title,
            "Segments toward this destination were lost and sent again. A SYN retry adds the \
             SYN timeout to its connect (1 s, then 2 s, 4 s …); a lost data segment stalls its \
             request for a retransmission timeout (200 ms at least, however short the path) \
             unless three duplicate ACKs or a tail-loss probe repair it sooner. Look for what \
             drops: a full queue on a link or a NIC (`tc -s qdisc`, `ip -s link`), a firewall \
             or rate limit, an overloaded middlebox. A SYN retried because the listener's \
             accept queue was full is named apart (accept_queue_overflow).",
            evidence,
        )
        .about(&src)
        .in_phase(&phase)
        .number("retrans_segs", e.retrans as f64)
        .number("syn_retrans", e.syn as f64)
        .number("overflow_syn_retrans", explained as f64)
        .number("data_retrans", data as f64)
        .number("retrans_per_s", rate)
        .number("slow_connects", slow as f64);
        found.push((rate, f));
    }
    found.sort_by(|a, b| b.0.total_cmp(&a.0));
    found.into_iter().map(|(_, f)| f).collect()
}
