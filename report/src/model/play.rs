//! What the player model and the load shapes add to a report: per phase × stream op events,
//! openings, reconnects, errors and time to first event; per phase groups; per open-model
//! (rate) phase its arrivals. Built from the driver's step totals; a run without streams,
//! groups or rate phases gets none of these rows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use herd_model::{PhaseKind, PhaseResult};

use super::cell::Cell;

/// One phase × stream (or long-poll) op.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StreamRow {
    /// Phase name (`step 1`, `rate 1`, `soak hold`, …).
    pub phase: String,
    /// Phase kind.
    pub kind: PhaseKind,
    /// Op name.
    pub op: String,
    /// `sse`, `ndjson`, `chunks` or `long_poll`.
    pub stream_kind: String,
    /// Events received, all types (long poll: answers, `no_news` included).
    pub events: u64,
    /// Events per second over the phase.
    pub events_per_s: f64,
    /// Events per type.
    pub by_type: BTreeMap<String, u64>,
    /// Openings that got a 2xx answer (long poll: polls answered).
    pub opened: u64,
    /// Openings after a player's first (long poll: re-issues after a failure).
    pub reconnects: u64,
    /// Openings in flight when their player stopped (sent, unanswered; not errors).
    pub cut_by_stop: u64,
    /// Failures per class (`ended`, `bad_event`, `transport_error.*`, `http_5xx`, …).
    pub errors: BTreeMap<String, u64>,
    /// Median time from the request to an opening's first event, µs.
    pub first_event_p50_us: Cell,
    /// 99th percentile of it, µs.
    pub first_event_p99_us: Cell,
}

/// One phase's groups.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GroupRow {
    /// Phase name.
    pub phase: String,
    /// Phase kind.
    pub kind: PhaseKind,
    /// Groups whose every member created or joined, so play began.
    pub formed: u64,
    /// Groups that met their finish condition.
    pub finished: u64,
    /// Groups whose create or a join did not end `ok`.
    pub failed: u64,
    /// Groups a member left before they finished.
    pub abandoned: u64,
}

/// One open-model (rate) phase's arrivals. Its ops' latencies count from each arrival's
/// intended send time, so a stall shows in every request due during it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OpenRow {
    /// Phase name (`rate 1`, …).
    pub phase: String,
    /// Target rate, arrivals per second.
    pub rate: f64,
    /// Seconds the phase ran.
    pub duration_s: f64,
    /// Arrivals whose intended time fell in the phase.
    pub scheduled: u64,
    /// Arrivals sent.
    pub sent: u64,
    /// Arrivals sent per second over the phase.
    pub sent_per_s: f64,
    /// Sent later than `late_after_us` after their intended time.
    pub late_starts: u64,
    /// Not sent: `max_in_flight` requests were already out.
    pub dropped_starts: u64,
    /// The in-flight bound.
    pub max_in_flight: u64,
    /// Most requests in flight at one arrival.
    pub peak_in_flight: u64,
    /// The lateness threshold, µs.
    pub late_after_us: u64,
}

/// The note under the open-model table.
pub const OPEN_NOTE: &str = "Open-model (rate) phases: each request's latency is measured from \
    its intended send time (start + i / rate), not from when the driver sent it, so a stall \
    shows in every request due during it (no coordinated omission). Every scheduled arrival \
    is either sent or dropped; late starts were sent, behind schedule.";

/// The report's stream, group and open-model rows, in phase order.
pub fn rows(steps: &[PhaseResult]) -> (Vec<StreamRow>, Vec<GroupRow>, Vec<OpenRow>) {
    let (mut streams, mut groups, mut open) = (Vec::new(), Vec::new(), Vec::new());
    for s in steps {
        let secs = (s.duration_ms as f64 / 1e3).max(1e-3);
        for st in &s.play.streams {
            let first = |f: fn(&herd_model::Latency) -> u64| match &st.first_event {
                Some(l) => Cell::Value(f(l) as f64),
                None => Cell::Missing("no opening received an event".into()),
            };
            streams.push(StreamRow {
                phase: s.phase.clone(),
                kind: s.kind,
                op: st.op.clone(),
                stream_kind: st.kind.clone(),
                events: st.events,
                events_per_s: st.events as f64 / secs,
                by_type: st.by_type.clone(),
                opened: st.opened,
                reconnects: st.reconnects,
                cut_by_stop: st.cut_by_stop,
                errors: st.errors.clone(),
                first_event_p50_us: first(|l| l.p50_us),
                first_event_p99_us: first(|l| l.p99_us),
            });
        }
        if !s.play.groups.is_zero() {
            let g = s.play.groups;
            groups.push(GroupRow {
                phase: s.phase.clone(),
                kind: s.kind,
                formed: g.formed,
                finished: g.finished,
                failed: g.failed,
                abandoned: g.abandoned,
            });
        }
        if let Some(o) = &s.open {
            open.push(OpenRow {
                phase: s.phase.clone(),
                rate: o.rate,
                duration_s: s.duration_ms as f64 / 1e3,
                scheduled: o.scheduled,
                sent: o.sent,
                sent_per_s: o.sent as f64 / secs,
                late_starts: o.late_starts,
                dropped_starts: o.dropped_starts,
                max_in_flight: o.max_in_flight as u64,
                peak_in_flight: o.peak_in_flight as u64,
                late_after_us: o.late_after_us,
            });
        }
    }
    (streams, groups, open)
}

/// `a 3, b 1` for a count map (event types, outcomes), most frequent first, or `none`.
pub fn counts<K: std::fmt::Display + Ord>(m: &BTreeMap<K, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    let mut v: Vec<(String, u64)> = m.iter().map(|(k, n)| (k.to_string(), *n)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a phase × op row's load column says: players, workers, a route's concurrency or an
/// open-model rate.
pub fn load(kind: PhaseKind, players: usize, rate: Option<f64>) -> String {
    match (kind, rate) {
        (PhaseKind::Rate, Some(r)) => format!("{r} req/s open"),
        (PhaseKind::Rate, None) => "open model".into(),
        (PhaseKind::Hammer, _) => format!("{players} workers"),
        (PhaseKind::Catalog, _) => format!("{players} concurrent"),
        _ => format!("{players} players"),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use herd_model::{
        CleanupRecord, GroupStats, Latency, OpenStats, PlayStats, RunData, SeedRecord, StreamStats,
        TableCount,
    };

    use super::*;
    use crate::{Report, model::Cell};

    /// Every `|` row of `md` has no empty cell.
    fn no_empty_cells(md: &str) {
        for line in md.lines().filter(|l| l.starts_with('|')) {
            let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
            assert!(
                cells.iter().all(|c| !c.trim().is_empty()),
                "empty cell in: {line}"
            );
        }
    }

    /// The Markdown table row whose first cell is `first` and second `second`.
    fn row<'a>(md: &'a str, first: &str, second: &str) -> Vec<&'a str> {
        md.lines()
            .map(|l| {
                l.trim_matches('|')
                    .split('|')
                    .map(str::trim)
                    .collect::<Vec<_>>()
            })
            .find(|c| c.len() > 2 && c[0] == first && c[1] == second)
            .unwrap_or_else(|| panic!("no row {first} | {second} in\n{md}"))
    }

    /// The test run's step 1 with a stream, a long poll that got nothing, and groups; then a
    /// rate phase and two catalog routes.
    fn data() -> RunData {
        let mut d = crate::model::tests::data();
        let step = &mut d.phases[0];
        step.play = PlayStats {
            streams: vec![
                StreamStats {
                    op: "events".into(),
                    kind: "sse".into(),
                    opened: 12,
                    reconnects: 2,
                    cut_by_stop: 0,
                    events: 340,
                    by_type: BTreeMap::from([("move".into(), 300), ("chat".into(), 40)]),
                    errors: BTreeMap::from([("ended".into(), 2)]),
                    first_event: Some(Latency {
                        p50_us: 1_500,
                        p99_us: 12_000,
                        ..Latency::default()
                    }),
                },
                StreamStats {
                    op: "lobby.wait".into(),
                    kind: "long_poll".into(),
                    opened: 0,
                    reconnects: 3,
                    cut_by_stop: 0,
                    events: 0,
                    by_type: BTreeMap::new(),
                    errors: BTreeMap::from([("timeout".into(), 3)]),
                    first_event: None,
                },
            ],
            groups: GroupStats {
                formed: 5,
                finished: 3,
                failed: 1,
                abandoned: 2,
            },
            ..Default::default()
        };
        let mut rate = d.phases[0].clone();
        rate.phase = "rate 1".into();
        rate.kind = PhaseKind::Rate;
        rate.index = Some(1);
        rate.players = 0;
        rate.start_ms = 2000;
        rate.duration_ms = 2000;
        rate.play = PlayStats::default();
        rate.open = Some(OpenStats {
            rate: 50.0,
            scheduled: 100,
            sent: 97,
            late_starts: 4,
            dropped_starts: 3,
            max_in_flight: 8,
            peak_in_flight: 8,
            late_after_us: 10_000,
        });
        let mut routes = Vec::new();
        for (k, op) in ["game.state", "game.list"].iter().enumerate() {
            let mut c = d.phases[0].clone();
            c.phase = format!("catalog {op}");
            c.kind = PhaseKind::Catalog;
            c.index = Some(2 + k);
            c.players = 4;
            c.play = PlayStats::default();
            c.ops[0].op = (*op).into();
            c.ops[0].count = 50 + k as u64;
            routes.push(c);
        }
        d.phases.push(rate);
        d.phases.extend(routes);
        d.seeded = Some(SeedRecord {
            id: 3,
            accounts: 10,
            guests: 2,
            tables: vec![
                TableCount {
                    table: "users".into(),
                    rows: 12,
                },
                TableCount {
                    table: "wallets".into(),
                    rows: 10,
                },
            ],
            seconds: 0.25,
        });
        d.seed_cleanup = Some(CleanupRecord::Removed {
            tables: vec![TableCount {
                table: "users".into(),
                rows: 22,
            }],
            gone: 0,
            seconds: 0.05,
        });
        d
    }

    #[test]
    fn streams_and_groups_get_a_row_per_phase_and_op() {
        let r = Report::build(&data());
        assert_eq!(r.streams.len(), 2);
        let s = &r.streams[0];
        assert_eq!((s.phase.as_str(), s.kind), ("step 1", PhaseKind::Step));
        assert_eq!((s.events, s.opened, s.reconnects), (340, 12, 2));
        assert_eq!(s.events_per_s, 170.0);
        assert_eq!(s.first_event_p99_us, Cell::Value(12_000.0));
        assert_eq!(
            r.streams[1].first_event_p50_us,
            Cell::Missing("no opening received an event".into())
        );
        assert_eq!(r.groups.len(), 1, "only the phase with groups");
        assert_eq!(r.groups[0].abandoned, 2);

        let md = crate::sections::markdown(&r);
        no_empty_cells(&md);
        let ev = row(&md, "step 1", "events");
        assert_eq!(
            ev[2..],
            [
                "sse",
                "340",
                "170.0",
                "move 300, chat 40",
                "12",
                "2",
                "ended 2",
                "1.5ms",
                "12ms"
            ]
        );
        let lp = row(&md, "step 1", "lobby.wait");
        assert_eq!(lp[9], "n/a (no opening received an event)");
        assert_eq!(row(&md, "step 1", "5")[2..], ["3", "1", "2"]);
        let html = crate::sections::html(&r);
        assert!(html.contains("Stream and long-poll events per second"));
        assert!(html.contains("<td class=l>step 1<td class=l>events<td class=l>sse<td>340"));
        assert!(html.contains("<h2>Groups per phase</h2>"));
    }

    #[test]
    fn rate_phases_show_their_arrivals_and_say_where_latency_counts_from() {
        let r = Report::build(&data());
        assert_eq!(r.open.len(), 1);
        let o = &r.open[0];
        assert_eq!(
            (o.scheduled, o.sent, o.late_starts, o.dropped_starts),
            (100, 97, 4, 3)
        );
        let md = crate::sections::markdown(&r);
        no_empty_cells(&md);
        let row_ = row(&md, "rate 1", "50");
        assert_eq!(
            row_[2..],
            ["2.0 s", "100", "97", "48.5", "4 (> 10ms)", "3", "8", "8"]
        );
        // The per-step table names the phase and its kind, and says what loaded it.
        let op = row(&md, "rate 1", "rate");
        assert_eq!((op[2], op[3]), ("50 req/s open", "game.state"));
        let op = row(&md, "step 1", "step");
        assert_eq!(op[2], "10 players");
        assert_eq!(md.matches("intended send time").count(), 1, "{md}");
        let html = crate::sections::html(&r);
        assert!(html.contains("Open-model starts behind schedule"));
        assert!(html.contains("<h2>Open-model phases</h2>"));
    }

    #[test]
    fn the_route_catalog_is_one_table_with_a_row_per_route() {
        let r = Report::build(&data());
        let md = crate::sections::markdown(&r);
        let per_step = md
            .split("## Per step and op")
            .nth(1)
            .and_then(|s| s.split("\n## ").next())
            .unwrap();
        assert!(!per_step.contains("catalog"), "{per_step}");
        assert!(md.contains("## Route catalog\n\n2 routes"));
        assert_eq!(row(&md, "game.state", "4")[1..3], ["4", "50"]);
        assert_eq!(row(&md, "game.list", "4")[1..3], ["4", "51"]);
        assert!(crate::sections::html(&r).contains("<h2>Route catalog</h2>"));
    }

    #[test]
    fn seeding_is_in_the_header_and_a_run_without_streams_has_no_such_sections() {
        let r = Report::build(&data());
        let md = crate::sections::markdown(&r);
        assert!(
            md.contains(
                "Seeded before the load (seeding 3): 10 accounts + 2 guests, 22 rows (users 12, wallets 10) in 0.25 s; removed after the run: 22 rows in 0.05 s."
            ),
            "{md}"
        );
        assert!(crate::sections::html(&r).contains("Seeded before the load (seeding 3)"));
        let mut d = data();
        d.seed_cleanup = Some(CleanupRecord::Kept);
        assert!(
            crate::sections::markdown(&Report::build(&d))
                .contains("kept after the run (--keep-seed)")
        );

        let plain = Report::build(&crate::model::tests::data());
        let md = crate::sections::markdown(&plain);
        for absent in [
            "Seeded",
            "Streams",
            "Groups",
            "Open-model",
            "Route catalog",
            "intended send time",
        ] {
            assert!(!md.contains(absent), "{absent} in\n{md}");
        }
        let html = crate::sections::html(&plain);
        assert!(!html.contains("events per second") && !html.contains("behind schedule"));
        let json = serde_json::to_value(&plain).unwrap();
        assert!(json["run"].get("seeding").is_none());
    }

    #[test]
    fn streams_that_keep_reopening_are_a_finding_with_their_row_and_a_few_reopenings_are_not() {
        let r = Report::build(&data());
        assert!(
            r.findings.iter().all(|f| f.kind != "stream_storm"),
            "2 reconnects"
        );
        let mut d = data();
        let s = &mut d.phases[0].play.streams[0];
        s.reconnects = 40;
        s.errors = BTreeMap::from([("ended".into(), 30), ("transport_error.reset".into(), 10)]);
        let r = Report::build(&d);
        let f: Vec<_> = r
            .findings
            .iter()
            .filter(|f| f.kind == "stream_storm")
            .collect();
        assert_eq!(f.len(), 1, "{:?}", r.findings);
        // 40 reconnects / 10 players / (2 s = 1/30 min) = 120 per player per minute.
        assert!(
            f[0].title.starts_with(
                "events (sse) in step 1: 40 reconnects in 2 s for 10 players (120.0 per player per minute), 40 stream errors (ended 30, transport_error.reset 10)"
            ),
            "{}",
            f[0].title
        );
        assert_eq!(
            f[0].evidence,
            [
                "step 1 / events: opened 12, reconnects 40, events 340, errors 40 (ended 30, \
                 transport_error.reset 10), over 2 s with 10 players: 120.0 reconnects per player \
                 per minute"
            ]
        );
        assert!(crate::sections::markdown(&r).contains("**stream_storm**"));
    }
}
