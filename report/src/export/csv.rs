//! CSV for spreadsheets and notebooks: the per-phase × op table (with each op's whole-run
//! row) and the timeline, one row per driver interval. Numbers are raw numbers (µs, req/s,
//! cores, shares in 0..=1) with the unit in the column's header; text is quoted per RFC 4180
//! when it needs it; lines end in CRLF. A value herd does not have (no probe, no quota, no
//! histogram) is an empty cell: the JSON report and the Markdown say why.

use crate::model::{Latencies, Report, TimelinePoint};

/// `s` as one RFC 4180 field: quoted, with quotes doubled, when it holds a comma, a quote
/// or a line break.
pub fn field(s: &str) -> String {
    if s.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

pub(crate) fn line(out: &mut String, fields: impl IntoIterator<Item = String>) {
    let fields: Vec<String> = fields.into_iter().collect();
    out.push_str(&fields.join(","));
    out.push_str("\r\n");
}

pub(crate) fn num(v: f64) -> String {
    if v.is_finite() {
        // Shortest form that reads back as the same number.
        format!("{v}")
    } else {
        String::new()
    }
}

fn opt(v: Option<f64>) -> String {
    v.map(num).unwrap_or_default()
}

fn latencies(l: Option<&Latencies>) -> Vec<String> {
    match l {
        Some(l) => vec![
            num(l.mean_us),
            l.p50_us.to_string(),
            l.p90_us.to_string(),
            l.p99_us.to_string(),
            l.p999_us.to_string(),
            l.max_us.to_string(),
        ],
        None => vec![String::new(); 6],
    }
}

/// The per-phase × op table, then one `run` row per op over the whole run (phase empty;
/// latencies from the merged histogram).
pub fn ops(r: &Report) -> String {
    let mut s = String::new();
    line(
        &mut s,
        [
            "scope",
            "phase",
            "op",
            "count",
            "ok",
            "expected",
            "errors",
            "error share (0-1)",
            "req/s",
            "mean (us)",
            "p50 (us)",
            "p90 (us)",
            "p99 (us)",
            "p99.9 (us)",
            "max (us)",
        ]
        .map(String::from),
    );
    for o in &r.ops {
        let mut f = vec![
            "phase".to_owned(),
            field(&o.phase),
            field(&o.op),
            o.count.to_string(),
            o.split.ok.to_string(),
            o.split.expected.to_string(),
            o.split.errors.to_string(),
            num(o.split.error_share()),
            num(o.rate),
        ];
        f.extend(latencies((o.count > 0).then_some(&o.latency)));
        line(&mut s, f);
    }
    for t in &r.totals {
        let mut f = vec![
            "run".to_owned(),
            String::new(),
            field(&t.op),
            t.count.to_string(),
            t.split.ok.to_string(),
            t.split.expected.to_string(),
            t.split.errors.to_string(),
            num(t.split.error_share()),
            num(t.rate),
        ];
        f.extend(latencies(t.latency.value()));
        line(&mut s, f);
    }
    s
}

/// Every name `f` gives a point, in order of first appearance.
fn names(t: &[TimelinePoint], f: impl Fn(&TimelinePoint) -> Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for p in t {
        for n in f(p) {
            if !out.contains(&n) {
                out.push(n);
            }
        }
    }
    out
}

/// The timeline: one row per driver interval, run-wide columns first, then per op
/// (`<op> req/s`, `<op> p50 (us)`, `<op> p99 (us)`, `<op> errors`) and per container
/// (connects/s, TIME_WAIT, port range, CPU, burst CPU and quota in cores, throttled share).
/// A rate is over the interval's own length, also for a short last one.
pub fn timeline(r: &Report) -> String {
    let t = &r.timeline;
    let ops = names(t, |p| p.ops.iter().map(|o| o.op.clone()).collect());
    let containers = names(t, |p| {
        p.containers.iter().map(|c| c.container.clone()).collect()
    });
    let mut header: Vec<String> = [
        "start (s)",
        "duration (s)",
        "phase",
        "players",
        "req/s",
        "ok",
        "expected",
        "errors",
        "late starts",
        "dropped starts",
        "driver CPU (% of one core)",
        "driver saturated",
    ]
    .map(String::from)
    .to_vec();
    for o in &ops {
        for m in ["req/s", "p50 (us)", "p99 (us)", "errors"] {
            header.push(field(&format!("{o} {m}")));
        }
    }
    for c in &containers {
        for m in [
            "connects/s",
            "TIME_WAIT entries/s",
            "TIME_WAIT (sockets)",
            "ephemeral ports",
            "CPU (cores)",
            "CPU burst (cores)",
            "CPU quota (cores)",
            "throttled share (0-1)",
        ] {
            header.push(field(&format!("{c} {m}")));
        }
    }
    let mut s = String::new();
    line(&mut s, header);
    for p in t {
        let mut f = vec![
            num(p.start_s),
            num(p.duration_s),
            p.phase.as_deref().map(field).unwrap_or_default(),
            p.players.to_string(),
            num(p.req_per_s),
            p.split.ok.to_string(),
            p.split.expected.to_string(),
            p.split.errors.to_string(),
            p.late_starts.to_string(),
            p.dropped_starts.to_string(),
            num(p.driver.cpu_percent),
            p.driver.saturated.as_deref().map(field).unwrap_or_default(),
        ];
        for name in &ops {
            match p.ops.iter().find(|o| &o.op == name) {
                // An op with no request in the interval has a rate of 0 and no latency.
                None => f.extend(["0".into(), String::new(), String::new(), "0".into()]),
                Some(o) => f.extend([
                    num(o.req_per_s),
                    o.p50_us.to_string(),
                    o.p99_us.to_string(),
                    o.split.errors.to_string(),
                ]),
            }
        }
        for name in &containers {
            match p.containers.iter().find(|c| &c.container == name) {
                None => f.extend(vec![String::new(); 8]),
                Some(c) => f.extend([
                    num(c.connects_per_s),
                    num(c.time_wait_entries_per_s),
                    opt(c.time_wait.map(|v| v as f64)),
                    opt(c.port_range.map(|v| v as f64)),
                    opt(c.cpu_cores),
                    opt(c.cpu_burst_cores),
                    opt(c.cpu_quota_cores),
                    opt(c.throttled_share),
                ]),
            }
        }
        line(&mut s, f);
    }
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal RFC 4180 reader: fields of each record, quotes undone.
    pub(crate) fn parse(csv: &str) -> Vec<Vec<String>> {
        let mut rows = Vec::new();
        let (mut row, mut cur, mut quoted) = (Vec::new(), String::new(), false);
        let mut chars = csv.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    cur.push('"');
                    chars.next();
                }
                ('"', _) => quoted = !quoted,
                (',', false) => row.push(std::mem::take(&mut cur)),
                ('\r', false) => {}
                ('\n', false) => {
                    row.push(std::mem::take(&mut cur));
                    rows.push(std::mem::take(&mut row));
                }
                (c, _) => cur.push(c),
            }
        }
        rows
    }

    #[test]
    fn fields_are_quoted_only_when_they_must_be() {
        assert_eq!(field("step 1"), "step 1");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(
            parse("a,\"b,\"\"c\"\"\",\r\n"),
            vec![vec!["a", "b,\"c\"", ""]]
        );
    }

    #[test]
    fn the_fixtures_tables_read_back_as_numbers_of_one_width() {
        let r = Report::build(&crate::snapshot_tests::fixture(false));
        for (csv, rows) in [
            (ops(&r), r.ops.len() + r.totals.len()),
            (timeline(&r), r.timeline.len()),
        ] {
            assert!(csv.ends_with("\r\n"));
            let t = parse(&csv);
            assert_eq!(t.len(), rows + 1, "{csv}");
            let width = t[0].len();
            assert!(t.iter().all(|r| r.len() == width), "{csv}");
            for row in &t[1..] {
                for (h, v) in t[0].iter().zip(row) {
                    let numeric = h.contains("(us)")
                        || h.ends_with("req/s")
                        || h.contains("(cores)")
                        || h.contains("(0-1)")
                        || h.contains("(s)");
                    if numeric && !v.is_empty() {
                        assert!(v.parse::<f64>().is_ok(), "{h} = {v:?}");
                    }
                }
            }
        }
        // The whole-run rows carry the merged histograms' figures.
        let t = parse(&ops(&r));
        let p99 = t[0].iter().position(|h| h == "p99 (us)").unwrap();
        for (row, total) in t.iter().filter(|row| row[0] == "run").zip(&r.totals) {
            assert_eq!(row[2], total.op);
            let want = total.latency.value().map(|l| l.p99_us.to_string());
            assert_eq!(Some(&row[p99]), want.as_ref().or(Some(&String::new())));
        }
        // The fixture's quota: the gateway's 1 core, in cores.
        let tl = parse(&timeline(&r));
        let q = tl[0]
            .iter()
            .position(|h| h == "gateway CPU quota (cores)")
            .expect("a quota column");
        assert!(tl[1..].iter().any(|row| row[q] == "1"), "{tl:?}");
    }
}
