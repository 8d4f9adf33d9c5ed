//! Text for the shapes: a rate phase's heading with its arrivals, and the catalog's table
//! (one row per route).

use herd_model::{PhaseKind, PhaseResult, RunResult};

use super::{count, op_cells, op_columns, render};
use crate::{
    doc::{Column, Table, Value},
    units::latency as duration_us,
};

/// A rate phase's heading: target and sent rate, late and dropped starts.
pub fn open_heading(s: &PhaseResult) -> Option<String> {
    let o = s.open.as_ref()?;
    let secs = (s.duration_ms as f64 / 1e3).max(1e-3);
    Some(format!(
        "{}: {} req/s open model, {:.1}s: {} of {} arrivals sent ({:.1}/s), {} late starts (> {}), {} dropped starts (max {} in flight, peak {}), {} connects",
        s.phase,
        trim(o.rate),
        s.duration_ms as f64 / 1e3,
        count(o.sent),
        count(o.scheduled),
        o.sent as f64 / secs,
        count(o.late_starts),
        duration_us(o.late_after_us),
        count(o.dropped_starts),
        count(o.max_in_flight as u64),
        count(o.peak_in_flight as u64),
        count(s.connects),
    ))
}

fn trim(x: f64) -> String {
    if x.fract() == 0.0 {
        count(x as u64)
    } else {
        format!("{x}")
    }
}

/// The catalog: one row per route with concurrency, count, req/s, p50, p99, max and
/// outcomes; empty without catalog phases.
pub(crate) fn catalog_table(report: &RunResult) -> String {
    let routes: Vec<&PhaseResult> = report
        .phases
        .iter()
        .filter(|s| s.kind == PhaseKind::Catalog)
        .collect();
    if routes.is_empty() {
        return String::new();
    }
    let mut t = Table::new(
        [Column::left("route"), Column::right("conc")]
            .into_iter()
            .chain(op_columns())
            .collect(),
    );
    for s in &routes {
        let route = s.phase.strip_prefix("catalog ").unwrap_or(&s.phase);
        let head = [Value::plain(route), Value::plain(s.players.to_string())];
        match s.ops.first() {
            Some(o) => t.row(
                head.into_iter()
                    .chain(op_cells(o, report.expected_of(&o.op)))
                    .collect(),
            ),
            None => t.row(
                head.into_iter()
                    .chain(["0", "-", "-", "-", "-", "(no requests)"].map(Value::plain))
                    .collect(),
            ),
        }
    }
    let mut out = format!("\ncatalog: {} routes, one after another\n", routes.len());
    out.push_str(&render(&t));
    out
}

#[cfg(test)]
mod tests {
    use herd_model::{
        Latency, OpStats, OpenStats, OutcomeStats, PhaseKind, PhaseResult, RunResult,
    };

    use crate::text::table;

    fn phase(
        name: &str,
        kind: PhaseKind,
        players: usize,
        count: u64,
        outcome: &str,
    ) -> PhaseResult {
        let latency = Latency {
            p50_us: 800,
            p90_us: 1_500,
            p99_us: 2_000,
            p999_us: 9_000,
            max_us: 9_000,
            mean_us: 900.0,
        };
        PhaseResult {
            phase: name.into(),
            kind,
            open: None,
            play: Default::default(),
            index: Some(0),
            players,
            start_ms: 0,
            duration_ms: 2_000,
            ops: vec![OpStats {
                op: name.rsplit(' ').next().unwrap().into(),
                count,
                rate: count as f64 / 2.0,
                latency,
                outcomes: vec![OutcomeStats {
                    histogram: None,
                    outcome: outcome.into(),
                    count,
                    latency,
                }],
            }],
            connects: 4,
            reconnects: 0,
            connect_errors: 0,
        }
    }

    #[test]
    fn catalog_rows_and_the_rate_heading() {
        let mut rate = phase("rate 1", PhaseKind::Rate, 0, 390, "ok");
        rate.ops[0].op = "state".into();
        rate.open = Some(OpenStats {
            rate: 200.0,
            scheduled: 400,
            sent: 390,
            late_starts: 3,
            dropped_starts: 10,
            max_in_flight: 50,
            peak_in_flight: 50,
            late_after_us: 10_000,
        });
        let report = RunResult {
            expected: Default::default(),
            play: Default::default(),
            scenario: "s.toml".into(),
            target: "127.0.0.1:1".into(),
            transport: "h1".into(),
            connections: "per_player".into(),
            started_unix_ms: 0,
            duration_ms: 6_000,
            stopped_early: false,
            requests: 440,
            connects: 12,
            reconnects: 0,
            connect_errors: 0,
            connects_held: 0,
            connect_backoff_ms: 0,
            saturated_intervals: 0,
            phases: vec![
                phase("catalog home", PhaseKind::Catalog, 4, 25, "ok"),
                phase("catalog missing", PhaseKind::Catalog, 4, 25, "http_4xx"),
                rate,
            ],
            intervals: vec![],
        };
        let want = "\
s.toml → 127.0.0.1:1 (h1, per_player): 440 requests in 6.0s

catalog: 2 routes, one after another
  route    conc  count  req/s    p50    p99    max  outcomes
  home        4     25   12.5  800µs  2.0ms  9.0ms  ok 25
  missing     4     25   12.5  800µs  2.0ms  9.0ms  http_4xx 25 (100.00 %)

rate 1: 200 req/s open model, 2.0s: 390 of 400 arrivals sent (195.0/s), 3 late starts (> 10ms), 10 dropped starts (max 50 in flight, peak 50), 4 connects
  op     count  req/s    p50    p99    max  outcomes
  state    390  195.0  800µs  2.0ms  9.0ms  ok 390
";
        assert_eq!(table(&report), want);
    }
}
