//! The Nagle × delayed-ACK stall: a server that writes a response in two small writes
//! (headers, then body) on a socket without TCP_NODELAY holds the second write until the
//! first is acknowledged, and the client delays that ACK up to 40 ms — so requests take
//! about 40 ms on a path whose round trip is far under a millisecond. What the rows show is
//! the signature (a tight ~40 ms latency over a path whose srtt is a tenth of that or less),
//! not the writes.

use super::Finding;
use crate::model::Report;
use crate::units::latency;

/// Linux's delayed-ACK timer at its minimum (`TCP_DELACK_MIN`), µs.
const DELACK_US: u64 = 40_000;

/// The p50 band of the stall, µs: the timer plus a few ms of service time.
const BAND_US: std::ops::Range<u64> = 39_000..50_000;

/// p90 at most this multiple of p50: the stall is the same for every request.
const TIGHT: f64 = 1.25;

/// Requests of an op in a phase under which its percentiles say little.
const MIN_COUNT: u64 = 50;

/// A request-path pair's srtt p50 under this (µs), a tenth of the timer, cannot explain a
/// 40 ms request (a loopback or veth path's is µs; a datacenter's, one or two ms).
const SUB_MS_US: f64 = 4_000.0;

/// An op whose p50 sits at the delayed-ACK timer (39–50 ms) with its p90 within 25 % of it,
/// in a phase of at least 50 requests, while every request-path pair with an srtt reading
/// has an srtt p50 under 4 ms: named as the likely Nagle × delayed-ACK stall, once per op
/// (its first such phase).
pub fn nagle_delayed_ack(r: &Report) -> Vec<Finding> {
    let paths: Vec<(String, f64)> = r
        .pairs
        .iter()
        .filter(|p| p.churn_ratio.value().is_some())
        .filter_map(|p| {
            Some((
                format!("{} → {}", p.container, super::sockets::destination(p)),
                p.srtt_p50_us.value()?,
            ))
        })
        .collect();
    if paths.is_empty() || paths.iter().any(|(_, s)| *s >= SUB_MS_US) {
        return Vec::new();
    }
    let (path, srtt) = paths
        .iter()
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .cloned()
        .expect("not empty");
    let mut seen: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for o in &r.ops {
        let l = &o.latency;
        if o.count < MIN_COUNT
            || !BAND_US.contains(&l.p50_us)
            || l.p90_us as f64 > TIGHT * l.p50_us as f64
            || seen.contains(&o.op.as_str())
        {
            continue;
        }
        seen.push(&o.op);
        let (p50, p90) = (latency(l.p50_us), latency(l.p90_us));
        let rtt = latency(srtt as u64);
        let delack = latency(DELACK_US);
        out.push(
            Finding::new(
                "nagle_delayed_ack",
                format!(
                    "{} in {}: p50 {p50}, p90 {p90} on a path whose srtt p50 is {rtt} — the \
                     {delack} of a delayed ACK behind Nagle's algorithm, likely",
                    o.op, o.phase
                ),
                "Nearly every request takes the delayed-ACK timer while the network round trip \
                 is far under a millisecond: the signature of a response written in two small \
                 writes (headers, then body) on a socket without TCP_NODELAY — Nagle holds the \
                 second write until the first is acknowledged, and the client delays its ACK. \
                 Set TCP_NODELAY on the server's sockets (most HTTP servers do), or write each \
                 response in one write (writev, a buffered writer). A server that really needs \
                 this long per request shows the same numbers: check with `ss -ti` (unacked \
                 data, ato) or a packet capture.",
                vec![
                    format!(
                        "{} in {}: {} requests, p50 {p50}, p90 {p90}, p99 {}",
                        o.op,
                        o.phase,
                        o.count,
                        latency(l.p99_us)
                    ),
                    format!("request path {path}: srtt p50 {rtt} (the slowest of its pairs)"),
                    format!("Linux's delayed-ACK timer: {delack} at least (TCP_DELACK_MIN)"),
                ],
            )
            .in_phase(&o.phase)
            .number("p50_us", l.p50_us as f64)
            .number("p90_us", l.p90_us as f64)
            .number("srtt_p50_us", srtt),
        );
    }
    out
}
