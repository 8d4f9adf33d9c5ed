//! Plain-text rendering of the result stream: one progress line per interval and the
//! per-step × op table at the end.

use std::fmt::Write as _;

use crate::{
    report::{IntervalReport, OpStats, RunReport, StepReport},
    scenario::PhaseKind,
};

mod play;

/// A latency in µs as a short human figure: `850µs`, `1.2ms`, `48ms`, `1.25s`.
pub fn duration_us(us: u64) -> String {
    match us {
        0..1_000 => format!("{us}µs"),
        1_000..10_000 => format!("{:.1}ms", us as f64 / 1e3),
        10_000..1_000_000 => format!("{}ms", (us as f64 / 1e3).round() as u64),
        _ => format!("{:.2}s", us as f64 / 1e6),
    }
}

/// A count with thin groups of three: `564 979`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// One progress line for an interval: time, step, players, req/s and per op its rate, p99
/// and every outcome other than `ok`; `SATURATED` when the driver was the limit.
pub fn progress_line(iv: &IntervalReport, steps: usize) -> String {
    let mut line = format!("{:>7.1}s", iv.end_ms as f64 / 1e3);
    match (iv.step, &iv.phase) {
        // A plan of steps alone reads `step 2/3`; other plans name the phase.
        (Some(k), Some(name)) if *name != format!("step {}", k + 1) => {
            let _ = write!(line, "  {name} ({}/{steps})", k + 1);
        }
        (Some(k), _) => {
            let _ = write!(line, "  step {}/{steps}", k + 1);
        }
        (None, _) => line.push_str("  --"),
    }
    let _ = write!(line, "  players {}", iv.players);
    if iv.in_flight > 0 {
        let _ = write!(line, " +{} in flight", iv.in_flight);
    }
    if iv.hammer_workers > 0 {
        let _ = write!(line, " +{} hammer", iv.hammer_workers);
    }
    // An empty f64 sum is -0.0, which would print as `-0`.
    let total: f64 = iv.ops.iter().map(|o| o.rate).sum::<f64>() + 0.0;
    let _ = write!(line, "  {total:.0} req/s");
    if iv.late_starts + iv.dropped_starts > 0 {
        let _ = write!(
            line,
            " (late starts {}, dropped starts {})",
            iv.late_starts, iv.dropped_starts
        );
    }
    for op in &iv.ops {
        let _ = write!(
            line,
            " | {} {:.0}/s p99 {}",
            op.op,
            op.rate,
            duration_us(op.latency.p99_us)
        );
        for (outcome, n) in op.outcomes.iter().filter(|(o, _)| o.as_str() != "ok") {
            let _ = write!(line, " {outcome} {n}");
        }
    }
    line.push_str(&play::progress(&iv.play, iv.duration_ms as f64 / 1e3));
    if iv.driver.saturated {
        let _ = write!(
            line,
            " | SATURATED driver cpu {:.0}% lag p99 {}",
            iv.driver.cpu_percent,
            duration_us(iv.driver.lag_p99_us)
        );
    }
    line
}

/// Outcomes as `ok 1 200, timeout 3 (0.2 %)`: counts, most frequent first, with the share
/// of each outcome that is not `ok`.
fn outcomes(op: &OpStats) -> String {
    op.outcomes
        .iter()
        .map(|o| {
            if o.outcome == "ok" {
                format!("ok {}", count(o.count))
            } else {
                let share = o.count as f64 * 100.0 / op.count.max(1) as f64;
                format!("{} {} ({share:.2} %)", o.outcome, count(o.count))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn step_heading(s: &StepReport) -> String {
    if let Some(h) = crate::shapes::text::open_heading(s) {
        return h;
    }
    let who = if s.step.is_some() {
        "players"
    } else {
        "workers"
    };
    format!(
        "{}: {} {who}, {:.1}s, {} connects, {} reconnects, {} connect errors",
        s.phase,
        s.players,
        s.duration_ms as f64 / 1e3,
        count(s.connects),
        count(s.reconnects),
        count(s.connect_errors)
    )
}

/// The end-of-run table: per step (and the hammer), one row per op with count, req/s,
/// p50, p99, max and outcomes.
pub fn table(report: &RunReport) -> String {
    let mut out = format!(
        "{} → {} ({}, {}): {} requests in {:.1}s{}\n",
        report.scenario,
        report.target,
        report.transport,
        report.connections,
        count(report.requests),
        report.duration_ms as f64 / 1e3,
        if report.stopped_early {
            ", stopped early"
        } else {
            ""
        }
    );
    if report.saturated_intervals > 0 {
        let _ = writeln!(
            out,
            "warning: the driver was saturated in {} of {} intervals; their latencies include the driver's own delay",
            report.saturated_intervals,
            report.intervals.len()
        );
    }
    let header = ["op", "count", "req/s", "p50", "p99", "max", "outcomes"];
    out.push_str(&crate::shapes::text::catalog_table(report, outcomes));
    for s in report.steps.iter().filter(|s| s.kind != PhaseKind::Catalog) {
        let _ = writeln!(out, "\n{}", step_heading(s));
        let rows: Vec<[String; 7]> = s
            .ops
            .iter()
            .map(|o| {
                [
                    o.op.clone(),
                    count(o.count),
                    format!("{:.1}", o.rate),
                    duration_us(o.latency.p50_us),
                    duration_us(o.latency.p99_us),
                    duration_us(o.latency.max_us),
                    outcomes(o),
                ]
            })
            .collect();
        if rows.is_empty() {
            out.push_str("  (no ops)\n");
            out.push_str(&play::lines(&s.play));
            continue;
        }
        let mut width = header.map(|h| h.chars().count());
        for r in &rows {
            for (w, c) in width.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let mut l = String::from(" ");
            for (i, c) in cells.iter().enumerate() {
                let pad = width[i] - c.chars().count();
                // Names and outcomes read left to right; numbers line up on the right.
                match i {
                    0 => {
                        let _ = write!(l, " {c}{}", " ".repeat(pad));
                    }
                    6 => {
                        let _ = write!(l, "  {c}");
                    }
                    _ => {
                        let _ = write!(l, "  {}{c}", " ".repeat(pad));
                    }
                }
            }
            l.push('\n');
            l
        };
        out.push_str(&line(&header.map(String::from)));
        for r in &rows {
            out.push_str(&line(r));
        }
        out.push_str(&play::lines(&s.play));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::report::{DriverHealth, IntervalOp, Latency, OutcomeStats};

    fn lat(p50: u64, p99: u64, max: u64) -> Latency {
        Latency {
            p50_us: p50,
            p90_us: p99,
            p99_us: p99,
            p999_us: max,
            max_us: max,
            mean_us: p50 as f64,
        }
    }

    #[test]
    fn figures() {
        assert_eq!(duration_us(850), "850µs");
        assert_eq!(duration_us(1_234), "1.2ms");
        assert_eq!(duration_us(48_400), "48ms");
        assert_eq!(duration_us(1_250_000), "1.25s");
        assert_eq!(count(564_979), "564 979");
        assert_eq!(count(12), "12");
        assert_eq!(count(1_000_000), "1 000 000");
    }

    #[test]
    fn table_matches_the_seed_layout() {
        let ok = |n, l| OutcomeStats {
            outcome: "ok".into(),
            count: n,
            latency: l,
        };
        let report = RunReport {
            scenario: "game.toml".into(),
            target: "127.0.0.1:8081".into(),
            transport: "h2c".into(),
            connections: "per_player".into(),
            started_unix_ms: 0,
            duration_ms: 20_000,
            stopped_early: false,
            requests: 1_600,
            connects: 50,
            reconnects: 0,
            connect_errors: 0,
            saturated_intervals: 0,
            steps: vec![
                StepReport {
                    phase: "step 1".into(),
                    kind: PhaseKind::Step,
                    open: None,
                    step: Some(0),
                    players: 50,
                    start_ms: 0,
                    duration_ms: 10_000,
                    ops: vec![OpStats {
                        op: "game.state".into(),
                        count: 1_000,
                        rate: 100.0,
                        latency: lat(1_000, 12_000, 40_000),
                        outcomes: vec![
                            ok(998, lat(1_000, 12_000, 40_000)),
                            OutcomeStats {
                                outcome: "transport_error.reset".into(),
                                count: 2,
                                latency: lat(5, 5, 5),
                            },
                        ],
                    }],
                    connects: 50,
                    reconnects: 0,
                    connect_errors: 0,
                    play: Default::default(),
                },
                StepReport {
                    phase: "hammer".into(),
                    kind: PhaseKind::Hammer,
                    open: None,
                    step: None,
                    players: 20,
                    start_ms: 0,
                    duration_ms: 1_000,
                    ops: vec![OpStats {
                        op: "games.list".into(),
                        count: 600,
                        rate: 600.0,
                        latency: lat(900, 2_000, 53_000),
                        outcomes: vec![
                            OutcomeStats {
                                outcome: "rate_limited".into(),
                                count: 590,
                                latency: lat(900, 2_000, 53_000),
                            },
                            ok(10, lat(900, 900, 900)),
                        ],
                    }],
                    connects: 0,
                    reconnects: 0,
                    connect_errors: 0,
                    play: Default::default(),
                },
            ],
            intervals: vec![],
            play: Default::default(),
        };
        let want = "\
game.toml → 127.0.0.1:8081 (h2c, per_player): 1 600 requests in 20.0s

step 1: 50 players, 10.0s, 50 connects, 0 reconnects, 0 connect errors
  op          count  req/s    p50   p99   max  outcomes
  game.state  1 000  100.0  1.0ms  12ms  40ms  ok 998, transport_error.reset 2 (0.20 %)

hammer: 20 workers, 1.0s, 0 connects, 0 reconnects, 0 connect errors
  op          count  req/s    p50    p99   max  outcomes
  games.list    600  600.0  900µs  2.0ms  53ms  rate_limited 590 (98.33 %), ok 10
";
        assert_eq!(table(&report), want);
    }

    #[test]
    fn progress_line_shows_errors_per_op() {
        let iv = IntervalReport {
            index: 2,
            end_ms: 3_000,
            duration_ms: 1_000,
            step: Some(1),
            phase: Some("step 2".into()),
            late_starts: 0,
            dropped_starts: 0,
            in_flight: 0,
            players: 200,
            hammer_workers: 20,
            ops: vec![IntervalOp {
                op: "game.state".into(),
                count: 400,
                rate: 400.0,
                latency: lat(1_000, 12_300, 20_000),
                outcomes: BTreeMap::from([("ok".into(), 397), ("timeout".into(), 3)]),
            }],
            connects: 0,
            reconnects: 0,
            connect_errors: 0,
            play: Default::default(),
            driver: DriverHealth {
                cpu_percent: 195.0,
                cores: 2,
                rss_bytes: 0,
                lag_p99_us: 900,
                lag_max_us: 900,
                saturated: true,
            },
        };
        assert_eq!(
            progress_line(&iv, 3),
            "    3.0s  step 2/3  players 200 +20 hammer  400 req/s | game.state 400/s p99 12ms timeout 3 | SATURATED driver cpu 195% lag p99 900µs"
        );
    }
}
