use std::collections::BTreeMap;

use super::{render::*, *};
use herd_model::{
    LatencyHistogram, PhaseKind,
    histogram::{new_histogram, record},
};

use hdrhistogram::Histogram;

use crate::model::{Latencies, Log2Row, OpRow, SCHEMA_VERSION, Split, totals};

fn summary(id: i64, requests: u64, errors: u64, probe_intervals: u64) -> RunSummary {
    RunSummary {
        id,
        name: format!("demo-{id}"),
        scenario: "demo.toml".into(),
        status: "finished".into(),
        started_unix_ms: 0,
        started_at: "1970-01-01T00:00:00Z".into(),
        duration_s: 60.0,
        requests,
        split: Split {
            ok: requests - errors,
            expected: 0,
            errors,
        },
        errors,
        saturated_intervals: 0,
        probe_intervals,
        seeding: None,
    }
}

/// `count` samples in ms: half at `p[0]`, up to 99 % at `p[1]`, the rest at `p[2]`.
fn samples(count: u64, p: [u64; 3]) -> Histogram<u64> {
    let mut h = new_histogram();
    for i in 0..count {
        let ms = if i < count / 2 {
            p[0]
        } else if i < count * 99 / 100 {
            p[1]
        } else {
            p[2]
        };
        record(&mut h, ms * 1000);
    }
    h
}

fn op(step: &str, name: &str, count: u64, rate: f64, p: [u64; 3], not_ok: u64) -> OpRow {
    let mut outcomes = BTreeMap::from([(herd_model::Outcome::Ok, count - not_ok)]);
    if not_ok > 0 {
        outcomes.insert("transport_error".into(), not_ok);
    }
    let h = samples(count, p);
    OpRow {
        phase: step.into(),
        kind: PhaseKind::Step,
        players: 10,
        load: "10 players".into(),
        op: name.into(),
        count,
        rate,
        latency: Latencies::of(&h),
        split: Split {
            ok: count - not_ok,
            expected: 0,
            errors: not_ok,
        },
        outcomes,
        histogram: Some(LatencyHistogram::encode(&h)),
    }
}

/// A report of these rows, with the whole-run totals they make.
fn with(mut r: Report) -> Report {
    r.totals = totals(&r.ops);
    r
}

fn container(step: &str, name: &str, burst: f64, share: f64, mem: Cell) -> ContainerRow {
    let unused = || Cell::Missing("not part of the comparison".into());
    ContainerRow {
        phase: step.into(),
        container: name.into(),
        cpu_burst: Cell::Value(burst),
        cpu_sustained: Cell::Value(burst / 2.0),
        cpu_avg: unused(),
        cpu_cap: Cell::Value(3.0),
        throttled_share: Cell::Value(share),
        throttled_ms: unused(),
        working_set_mib: Cell::Missing("not sampled".into()),
        started_s: None,
        ended_s: None,
        mem_peak_mib: mem,
        connects_per_s: unused(),
        time_wait_per_s: unused(),
        connect_errors: unused(),
        time_wait_peak: unused(),
        established_peak: unused(),
        headroom_min: unused(),
        listen_overflows: unused(),
        waits: Default::default(),
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "one argument per column of the pair row"
)]
fn pair(
    src: &str,
    remote: &str,
    remote_container: &str,
    connects_per_s: f64,
    time_wait_peak: Cell,
    implied_peak: u64,
    churn: Cell,
    established: f64,
) -> PairRow {
    PairRow {
        container: src.into(),
        remote: remote.into(),
        remote_container: remote_container.into(),
        connects: (connects_per_s * 60.0) as u64,
        connects_per_s,
        time_wait_entries: (connects_per_s * 60.0) as u64,
        time_wait_implied_peak: implied_peak,
        churn_ratio: churn,
        time_wait_peak,
        established_peak: Cell::Value(established),
        srtt_p50_us: Cell::Missing("not part of the comparison".into()),
        srtt_p99_le_us: Cell::Missing("not part of the comparison".into()),
        headroom_min: Cell::Missing("not part of the comparison".into()),
        connect_latency_us: Log2Row::default(),
        lifetime_ms: Log2Row::default(),
    }
}

fn finding(kind: &str) -> Finding {
    Finding {
        kind: kind.into(),
        title: format!("{kind} title"),
        detail: String::new(),
        evidence: vec![],
        numbers: BTreeMap::new(),
        phase: None,
        container: None,
    }
}

/// The seeds' buggy pass: the gateway churns ~440 connections/s to the backend, 26 500
/// sockets in TIME_WAIT, CPU bursts to 1.75 cores, game.state p99 500 ms.
fn buggy() -> Report {
    with(Report {
        schema_version: SCHEMA_VERSION,
        herd_version: "test".into(),
        expected: BTreeMap::new(),
        totals: vec![],
        run: summary(1, 4000, 40, 60),
        streams: vec![],
        groups: vec![],
        open: vec![],
        ops: vec![
            op("step 1", "game.state", 1000, 100.0, [20, 200, 400], 10),
            op("step 2", "game.state", 3000, 150.0, [100, 600, 900], 30),
        ],
        containers: vec![
            container("step 1", "gateway", 0.9, 0.02, Cell::Value(40.0)),
            container("step 2", "gateway", 1.75, 0.12, Cell::Value(80.0)),
            // Clean-up after the last step: not load, so not the peak.
            container("after", "gateway", 2.5, 0.5, Cell::Value(90.0)),
            container("step 1", "backend", 0.7, 0.0, Cell::Value(50.0)),
        ],
        pairs: vec![
            pair(
                "gateway",
                "198.18.0.6:8082",
                "backend",
                440.0,
                Cell::Value(26_500.0),
                26_400,
                Cell::Value(0.5),
                2.0,
            ),
            pair(
                "host",
                "127.0.0.1:8080",
                "gateway",
                1.0,
                Cell::Missing("the source's network namespace was not sampled".into()),
                60,
                Cell::Value(0.01),
                500.0,
            ),
        ],
        timeline: vec![],
        slo: vec![],
        findings: vec![finding("churn_cliff"), finding("throttling_bursts")],
        notes: vec![],
    })
}

/// The fixed pass: the backend came up at another address, the pool keeps ~225
/// connections, TIME_WAIT is gone, game.state p99 200 ms, a new op and a DNS pair appear.
fn fixed() -> Report {
    with(Report {
        schema_version: SCHEMA_VERSION,
        herd_version: "test".into(),
        expected: BTreeMap::new(),
        totals: vec![],
        run: summary(2, 4500, 0, 60),
        streams: vec![],
        groups: vec![],
        open: vec![],
        ops: vec![
            op("step 1", "game.state", 1000, 100.0, [10, 200, 250], 0),
            op("step 2", "game.state", 3000, 150.0, [20, 200, 260], 0),
            op("step 2", "game.evaluate", 500, 25.0, [1, 200, 193], 0),
        ],
        containers: vec![
            container("step 1", "gateway", 0.2, 0.0, Cell::Value(45.0)),
            container("step 2", "gateway", 0.26, 0.0, Cell::Value(45.0)),
            container(
                "step 1",
                "backend",
                0.7,
                0.0,
                Cell::Missing("memory.peak needs kernel 5.19".into()),
            ),
        ],
        pairs: vec![
            pair(
                "gateway",
                "198.18.0.10:8082",
                "backend",
                3.75,
                Cell::Value(0.0),
                0,
                Cell::Value(0.004),
                225.0,
            ),
            pair(
                "gateway",
                "10.0.0.9:53",
                "-",
                0.5,
                Cell::Value(0.0),
                0,
                Cell::Missing("not on the request path".into()),
                0.0,
            ),
        ],
        timeline: vec![],
        slo: vec![],
        findings: vec![],
        notes: vec![],
    })
}

fn find<'a>(c: &'a Comparison, subject: &str, metric: &str) -> &'a Row {
    c.rows
        .iter()
        .find(|r| r.subject == subject && r.metric.starts_with(metric))
        .unwrap_or_else(|| panic!("no row {subject} / {metric}"))
}

/// Splits a Markdown table line into cells, keeping escaped `\|` inside its cell.
fn cells(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut prev = ' ';
    for ch in line.trim().trim_start_matches('|').chars() {
        if ch == '|' && prev != '\\' {
            out.push(String::new());
        } else {
            out.last_mut().unwrap().push(ch);
        }
        prev = ch;
    }
    if line.trim().ends_with('|') {
        out.pop();
    }
    out
}

#[test]
fn the_seeds_fix_reads_as_before_and_after_with_deltas_and_ratios() {
    let c = compare(&buggy(), &fixed());

    // Order: pairs (busiest first), containers, ops, run totals.
    let sections: Vec<Section> = c.rows.iter().map(|r| r.section).collect();
    assert!(sections.windows(2).all(|w| w[0] <= w[1]), "{sections:?}");
    assert_eq!(c.rows[0].subject, "gateway → backend");
    assert_eq!(c.rows.last().unwrap().section, Section::Run);

    // Matched by destination container although the backend's address changed.
    let tw = find(&c, "gateway → backend", "TIME_WAIT peak");
    assert_eq!(tw.before.value, Cell::Value(26_500.0));
    assert_eq!(tw.after.value, Cell::Value(0.0));
    assert_eq!(tw.delta, Cell::Value(-26_500.0));
    assert_eq!(tw.ratio, Cell::Value(0.0));
    let conn = find(&c, "gateway → backend", "new connections/s");
    assert_eq!(conn.delta, Cell::Value(3.75 - 440.0));
    assert_eq!(conn.ratio, Cell::Value(3.75 / 440.0));
    let est = find(&c, "gateway → backend", "ESTABLISHED peak");
    assert_eq!(
        (est.before.value.value(), est.after.value.value()),
        (Some(2.0), Some(225.0))
    );
    assert_eq!(est.ratio, Cell::Value(112.5));

    // The driver's pair has no gauge in run 1 (implied peak) and no row in run 2.
    let host_tw = find(&c, "host → gateway", "TIME_WAIT peak");
    assert!(host_tw.before.implied);
    assert_eq!(host_tw.before.value, Cell::Value(60.0));
    assert!(
        matches!(&host_tw.after.value, Cell::Missing(w) if w.contains("no connection from host to gateway in run 2")),
        "{:?}",
        host_tw.after
    );
    assert_eq!(host_tw.delta, Cell::Missing("run 2 has no value".into()));
    let host_conn = find(&c, "host → gateway", "new connections/s");
    assert_eq!(host_conn.after.value, Cell::Value(0.0));
    assert_eq!(host_conn.ratio, Cell::Value(0.0));

    // A destination with no container is keyed by address; run 1 opened nothing to it.
    let dns = find(&c, "gateway → 10.0.0.9:53", "new connections/s");
    assert_eq!(dns.before.value, Cell::Value(0.0));
    assert_eq!(dns.ratio, Cell::Missing("before is 0".into()));
    let dns_tw = find(&c, "gateway → 10.0.0.9:53", "TIME_WAIT peak");
    assert_eq!(dns_tw.ratio, Cell::Missing("run 1 has no value".into()));

    // Containers: peaks over load steps only (the 2.5-core clean-up burst is left out).
    let cpu = find(&c, "gateway", "CPU burst peak");
    assert_eq!(cpu.before.value, Cell::Value(1.75));
    assert_eq!(cpu.after.value, Cell::Value(0.26));
    let thr = find(&c, "gateway", "throttled share");
    assert_eq!(thr.before.value, Cell::Value(0.12));
    let mem = find(&c, "backend", "memory peak");
    assert_eq!(mem.before.value, Cell::Value(50.0));
    assert_eq!(
        mem.after.value,
        Cell::Missing("memory.peak needs kernel 5.19".into())
    );

    // Ops over the whole run, from the merged histogram: exactly the percentiles of
    // every sample of both steps, recorded in one histogram here.
    let mut all = samples(1000, [20, 200, 400]);
    all.add(samples(3000, [100, 600, 900])).unwrap();
    let whole = Latencies::of(&all);
    let p99 = find(&c, "game.state", "p99");
    assert_eq!(p99.before.value, Cell::Value(whole.p99_us as f64));
    // 600 ms: 3 000 of the 4 000 samples sit at 100 and 600 ms, so the 99th percentile
    // is the second step's p99, not a mean of the two steps' p99s (500 ms).
    assert!(whole.p99_us.abs_diff(600_000) <= 600, "{whole:?}");
    let mut after = samples(1000, [10, 200, 250]);
    after.add(samples(3000, [20, 200, 260])).unwrap();
    assert_eq!(
        p99.after.value,
        Cell::Value(Latencies::of(&after).p99_us as f64)
    );
    assert_eq!(
        find(&c, "game.state", "p50").before.value,
        Cell::Value(whole.p50_us as f64)
    );
    assert_eq!(
        find(&c, "game.state", "max").before.value,
        Cell::Value(whole.max_us as f64)
    );
    let errs = find(&c, "game.state", "error share");
    assert_eq!(errs.before.value, Cell::Value(0.01));
    assert_eq!(errs.ratio, Cell::Value(0.0));
    // 4000 requests over 10 s + 20 s of steps.
    let rate = find(&c, "game.state", "req/s");
    assert!((rate.before.value.value().unwrap() - 4000.0 / 30.0).abs() < 1e-9);
    let eval = find(&c, "game.evaluate", "p99");
    assert_eq!(
        eval.before.value,
        Cell::Missing("op not run in run 1".into())
    );

    // Totals and findings by kind.
    let churn = find(&c, "run", "findings: churn_cliff");
    assert_eq!(
        (churn.before.value.value(), churn.after.value.value()),
        (Some(1.0), Some(0.0))
    );
    assert_eq!(find(&c, "run", "findings").before.value, Cell::Value(2.0));
    assert_eq!(find(&c, "run", "errors").ratio, Cell::Value(0.0));

    // The rendered table says it the seeds' way, with no empty cell.
    let md = markdown(&c);
    for needle in [
        "| pair gateway → backend | TIME_WAIT peak | 26500 | 0 | -26500 | → 0 |",
        "| container gateway | CPU burst peak (busiest 100 ms) | 1.75 cores (58 % of 3.00) | 0.26 cores (9 % of 3.00) | -1.49 cores | ÷6.73 |",
        "| op game.state | p99 | 600 ms | 200 ms | -400 ms | ÷3.00 |",
        "| run | findings: churn_cliff | 1 | 0 | -1 | → 0 |",
        "| pair gateway → 10.0.0.9:53 | new connections/s | 0.0 | 0.5 | +0.5 | n/a (before is 0) |",
        "| pair host → gateway | TIME_WAIT peak | ≈ 60 (implied) | n/a (no connection from host to gateway in run 2) |",
        "| op game.state | error share (errors / count; expected outcomes apart) | 1.0 % | 0.0 % | -1.0 pp | → 0 |",
        "| pair gateway → backend | ESTABLISHED peak | 2 | 225 | +223 | ×112 |",
        "| pair gateway → backend | churn ratio (new connections per request) | 0.50 | 0.0040 | -0.50 | ÷125 |",
    ] {
        assert!(md.contains(needle), "missing {needle:?} in:\n{md}");
    }
    let lines: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(lines.len(), c.rows.len() + 2);
    for line in lines {
        let cs = cells(line);
        assert_eq!(cs.len(), 6, "{line}");
        assert!(
            cs.iter().all(|c| !c.trim().is_empty()),
            "empty cell in: {line}"
        );
    }
    assert!(
        md.contains("### run 1 (before)\n\n- **churn_cliff** — "),
        "{md}"
    );
    assert!(md.contains("### run 2 (after)\n\nNone."), "{md}");

    // The JSON form keeps raw numbers and units, and flags implied values.
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["rows"][0]["section"], "pair");
    assert_eq!(json["rows"][1]["before"]["value"], 26_500.0);
    assert_eq!(json["rows"][1]["unit"], "count");
    assert!(json["rows"][1]["before"].get("implied").is_none());
    let host = c
        .rows
        .iter()
        .position(|r| std::ptr::eq(r, host_tw))
        .unwrap();
    assert_eq!(json["rows"][host]["before"]["implied"], true);
    let back: Comparison = serde_json::from_value(json).unwrap();
    assert_eq!(back.rows, c.rows);

    let page = html(&c);
    assert!(
        page.contains("<td class=better>-26500<td class=better>→ 0"),
        "{page}"
    );
    assert!(!page.contains("<script") && !page.contains("http://") && !page.contains("https://"));
    assert!(!page.contains("<td></td>") && !page.contains("<td><td"));
}

#[test]
fn a_run_without_the_probe_says_why_in_every_probe_cell() {
    let mut b = fixed();
    b.run.probe_intervals = 0;
    b.pairs.clear();
    b.containers = vec![container("step 1", "all", 0.0, 0.0, Cell::Value(0.0))];
    b.notes = vec!["Kernel probe: needs root or CAP_BPF".into()];
    let c = compare(&buggy(), &b);
    let why = Cell::Missing("no probe data in run 2: needs root or CAP_BPF".into());
    for r in c
        .rows
        .iter()
        .filter(|r| matches!(r.section, Section::Pair | Section::Container))
    {
        assert_eq!(r.after.value, why, "{} / {}", r.subject, r.metric);
        assert_eq!(r.delta, Cell::Missing("run 2 has no value".into()));
    }
    // The placeholder container of a probe-less report is no container.
    assert!(!c.rows.iter().any(|r| r.subject == "all"));
    assert!(c.notes.iter().any(|n| n.contains("needs root or CAP_BPF")));
    // Reasons with a `|` stay inside their cell.
    let mut b2 = b.clone();
    b2.notes = vec!["Kernel probe: a | b".into()];
    let md = table(&compare(&buggy(), &b2));
    assert!(md.contains("a \\| b"));
    for line in md.lines() {
        assert_eq!(cells(line).len(), 6, "{line}");
    }
}

#[test]
fn sockets_of_unrelated_local_processes_are_left_out() {
    let mut a = buggy();
    // A gauge-only pair: no new connection, not on the request path.
    a.pairs.push(pair(
        "host",
        "127.0.0.1:38495",
        "-",
        0.0,
        Cell::Value(2.0),
        0,
        Cell::Missing("not on the request path".into()),
        0.0,
    ));
    let c = compare(&a, &fixed());
    assert!(
        c.rows
            .iter()
            .all(|r| !r.subject.contains("127.0.0.1:38495")),
        "{:#?}",
        c.rows
    );
    assert!(c.rows.iter().any(|r| r.subject.contains("backend")));
}

#[test]
fn numbers_show_in_their_units() {
    assert_eq!(show(Unit::Share, 0.0007, false), "0.07 %");
    assert_eq!(show(Unit::Share, -0.02, true), "-2.0 pp");
    assert_eq!(show(Unit::Cores, 0.71, false), "0.71 cores");
    assert_eq!(show(Unit::Cores, -1.49, true), "-1.49 cores");
    assert_eq!(show(Unit::Micros, 1500.0, false), "1.5 ms");
    assert_eq!(show(Unit::Count, 0.2, true), "0");
    assert_eq!(show(Unit::Mib, 2.0, true), "+2.0 MiB");
    assert_eq!(show(Unit::Ratio, 0.004, false), "0.0040");
    assert_eq!(show(Unit::Ratio, 0.05, false), "0.050");
    assert_eq!(show_ratio(&Cell::Value(1.0)), "×1.00");
    assert_eq!(show_ratio(&Cell::Value(0.9995)), "×1.00");
    assert_eq!(show_ratio(&Cell::Value(0.99)), "÷1.01");
    assert_eq!(show_ratio(&Cell::Value(0.0001)), "÷10000");
    assert_eq!(show_ratio(&Cell::Missing("both 0".into())), "n/a (both 0)");
}
