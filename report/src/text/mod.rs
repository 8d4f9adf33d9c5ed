//! Plain text for a terminal: the end-of-run table of a driver result (per phase × op), the
//! play lines under it, and [`render`], which turns any [`Table`] of the report's one table
//! model into aligned columns — the live view ([`live`]) renders through it too.

use std::fmt::Write as _;

use herd_model::{OpStats, Outcome, PhaseKind, PhaseResult, RunResult};

pub mod live;
pub mod play;
pub mod probe;
mod shapes;
pub mod tls;

pub use shapes::open_heading;

use crate::{
    doc::{Align, Column, Row, Table, Value},
    units::latency as duration_us,
};

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

/// Outcomes as `ok 1 200, not_your_turn 40 (3.20 %, expected), timeout 3 (0.24 %)`:
/// counts, most frequent first, with the share of each outcome that is not `ok`, and the
/// outcomes the scenario expects (part of normal play) marked so.
fn outcomes(op: &OpStats, expected: &[Outcome]) -> String {
    op.outcomes
        .iter()
        .map(|o| {
            if o.outcome.is_ok() {
                format!("ok {}", count(o.count))
            } else {
                let share = o.count as f64 * 100.0 / op.count.max(1) as f64;
                let expected = if expected.contains(&o.outcome) {
                    ", expected"
                } else {
                    ""
                };
                format!(
                    "{} {} ({share:.2} %{expected})",
                    o.outcome.name(),
                    count(o.count)
                )
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// An op's figures as every table prints them: count, req/s, p50, p99, max and outcomes
/// (`expected`: the op's expected outcomes).
pub fn op_cells(o: &OpStats, expected: &[Outcome]) -> [Value; 6] {
    [
        Value::plain(count(o.count)),
        Value::plain(format!("{:.1}", o.rate)),
        Value::plain(duration_us(o.latency.p50_us)),
        Value::plain(duration_us(o.latency.p99_us)),
        Value::plain(duration_us(o.latency.max_us)),
        Value::plain(outcomes(o, expected)),
    ]
}

/// The columns of an op table after its first (`op`, `route`, …): the figures of
/// [`op_cells`].
pub fn op_columns() -> [Column; 6] {
    [
        Column::right("count"),
        Column::right("req/s"),
        Column::right("p50"),
        Column::right("p99"),
        Column::right("max"),
        Column::left("outcomes"),
    ]
}

/// A table's lines for a terminal: the header, then every row, each column as wide as its
/// widest cell. Left columns (names, outcomes) read left to right, right columns (numbers)
/// line up on the right; the last column is not padded. A group row is its title alone.
pub fn render(t: &Table) -> String {
    let n = t.columns.len();
    let header: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
    let rows: Vec<Vec<&str>> = std::iter::once(header)
        .chain(t.rows.iter().filter_map(|r| match r {
            Row::Cells(cells) => Some(cells.iter().map(|c| c.text.as_str()).collect()),
            Row::Group(_) => None,
        }))
        .collect();
    let mut width = vec![0usize; n];
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |out: &mut String, r: &[&str]| {
        out.push(' ');
        for (i, c) in r.iter().enumerate() {
            out.push_str(if i == 0 { " " } else { "  " });
            let pad = " ".repeat(width[i] - c.chars().count());
            match t.columns[i].align {
                Align::Right => {
                    out.push_str(&pad);
                    out.push_str(c);
                }
                Align::Left if i == n - 1 => out.push_str(c),
                Align::Left => {
                    out.push_str(c);
                    out.push_str(&pad);
                }
            }
        }
        out.push('\n');
    };
    let mut out = String::new();
    line(&mut out, &rows[0]);
    let mut cells = rows[1..].iter();
    for r in &t.rows {
        match r {
            Row::Cells(_) => line(&mut out, cells.next().expect("one per cell row")),
            Row::Group(title) => {
                let _ = writeln!(out, "  {title}");
            }
        }
    }
    out
}

fn step_heading(s: &PhaseResult) -> String {
    if let Some(h) = open_heading(s) {
        return h;
    }
    let who = if s.index.is_some() {
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
pub fn table(report: &RunResult) -> String {
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
        // A recorded run's result leaves its intervals to the store: the count alone.
        let of = match report.intervals.len() {
            0 => String::new(),
            n => format!(" of {n}"),
        };
        let _ = writeln!(
            out,
            "warning: the driver was saturated in {}{of} intervals; their latencies include the driver's own delay",
            report.saturated_intervals,
        );
    }
    if report.connects_held > 0 {
        let _ = writeln!(
            out,
            "connect backoff: {} connects held back after failed ones, {:.1}s waited in all \
             (50ms doubling to 2s per player, reset by a success)",
            count(report.connects_held),
            report.connect_backoff_ms as f64 / 1e3
        );
    }
    out.push_str(&shapes::catalog_table(report));
    for s in report
        .phases
        .iter()
        .filter(|s| s.kind != PhaseKind::Catalog)
    {
        let _ = writeln!(out, "\n{}", step_heading(s));
        if s.ops.is_empty() {
            out.push_str("  (no ops)\n");
            out.push_str(&play::lines(&s.play));
            continue;
        }
        let mut t = Table::new(
            std::iter::once(Column::left("op"))
                .chain(op_columns())
                .collect(),
        );
        for o in &s.ops {
            t.row(
                std::iter::once(Value::plain(o.op.clone()))
                    .chain(op_cells(o, report.expected_of(&o.op)))
                    .collect(),
            );
        }
        out.push_str(&render(&t));
        out.push_str(&play::lines(&s.play));
    }
    out
}

#[cfg(test)]
mod tests {

    use super::*;
    use herd_model::{Latency, OutcomeStats};

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
        // Latencies: units::tests::latencies_read_like_wrk_and_k6.
        assert_eq!(count(564_979), "564 979");
        assert_eq!(count(12), "12");
        assert_eq!(count(1_000_000), "1 000 000");
    }

    #[test]
    fn table_matches_the_seed_layout() {
        let ok = |n, l| OutcomeStats {
            histogram: None,
            outcome: "ok".into(),
            count: n,
            latency: l,
        };
        let report = RunResult {
            expected: Default::default(),
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
            connects_held: 0,
            connect_backoff_ms: 0,
            saturated_intervals: 0,
            phases: vec![
                PhaseResult {
                    phase: "step 1".into(),
                    kind: PhaseKind::Step,
                    open: None,
                    index: Some(0),
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
                                histogram: None,
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
                PhaseResult {
                    phase: "hammer".into(),
                    kind: PhaseKind::Hammer,
                    open: None,
                    index: None,
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
                                histogram: None,
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
}
