//! Text for streams, long polls and groups: lines under a step's op table, and a short
//! tail for the progress line.

use std::fmt::Write as _;

use herd_model::{PlayStats, StreamStats};

use super::count;
use crate::units::latency as duration_us;

/// `  stream events.subscribe (sse): 1 204 events (move 1 000, chat 204), first event p50
/// 1.2ms p99 4.0ms, 50 opened, 3 reconnects, errors: ended 3` and
/// `  groups: 12 formed, 10 finished, 1 failed, 1 abandoned`, one line each.
pub fn lines(p: &PlayStats) -> String {
    let mut out = String::new();
    for s in &p.streams {
        let _ = writeln!(out, "  {}", stream_line(s));
    }
    if !p.groups.is_zero() {
        let g = &p.groups;
        let _ = writeln!(
            out,
            "  groups: {} formed, {} finished, {} failed, {} abandoned",
            count(g.formed),
            count(g.finished),
            count(g.failed),
            count(g.abandoned)
        );
    }
    // A failed check names what it was about: which blob of which image was damaged.
    for c in p.check_failures.iter().take(5) {
        let _ = writeln!(
            out,
            "  check failed: {} {}: {}",
            c.op,
            c.resource,
            count(c.count)
        );
    }
    if p.check_failures.len() > 5 {
        let _ = writeln!(
            out,
            "  check failed on {} more resources",
            count((p.check_failures.len() - 5) as u64)
        );
    }
    out
}

fn stream_line(s: &StreamStats) -> String {
    let what = if s.kind == "long_poll" {
        "long poll"
    } else {
        "stream"
    };
    let mut l = format!("{what} {} ({}): {} events", s.op, s.kind, count(s.events));
    if !s.by_type.is_empty() {
        let mut types: Vec<(&String, &u64)> = s.by_type.iter().collect();
        types.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
        let types: Vec<String> = types
            .iter()
            .map(|(t, n)| format!("{t} {}", count(**n)))
            .collect();
        let _ = write!(l, " ({})", types.join(", "));
    }
    if let Some(f) = &s.first_event {
        let _ = write!(
            l,
            ", first event p50 {} p99 {}",
            duration_us(f.p50_us),
            duration_us(f.p99_us)
        );
    }
    let _ = write!(
        l,
        ", {} opened, {} reconnects",
        count(s.opened),
        count(s.reconnects)
    );
    if s.cut_by_stop > 0 {
        let _ = write!(l, ", {} cut by the stop", count(s.cut_by_stop));
    }
    if !s.errors.is_empty() {
        let errors: Vec<String> = s
            .errors
            .iter()
            .map(|(c, n)| format!("{c} {}", count(*n)))
            .collect();
        let _ = write!(l, ", errors: {}", errors.join(", "));
    }
    l
}

#[cfg(test)]
mod tests {
    use super::*;
    use herd_model::{GroupStats, Latency};

    #[test]
    fn a_stream_and_groups() {
        let p = PlayStats {
            streams: vec![StreamStats {
                op: "sub".into(),
                kind: "sse".into(),
                opened: 4,
                reconnects: 2,
                cut_by_stop: 3,
                events: 1_204,
                by_type: [("chat".to_owned(), 204), ("move".to_owned(), 1_000)].into(),
                errors: [("ended".to_owned(), 2)].into(),
                first_event: Some(Latency {
                    p50_us: 1_200,
                    p99_us: 4_000,
                    ..Latency::default()
                }),
            }],
            groups: GroupStats {
                formed: 12,
                finished: 10,
                failed: 1,
                abandoned: 1,
            },
            check_failures: vec![herd_model::CheckFailure {
                op: "layer.get".into(),
                resource: "/v2/app/blobs/sha256:ab".into(),
                count: 3,
            }],
        };
        assert_eq!(
            lines(&p),
            "  stream sub (sse): 1 204 events (move 1 000, chat 204), first event p50 1.2ms p99 4.0ms, 4 opened, 2 reconnects, 3 cut by the stop, errors: ended 2\n  groups: 12 formed, 10 finished, 1 failed, 1 abandoned\n  check failed: layer.get /v2/app/blobs/sha256:ab: 3\n"
        );
    }
}
