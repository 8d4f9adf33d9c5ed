//! The live progress view of `herd drive` and `herd run`, built from the driver's
//! [`DriverEvent::Interval`](herd_model::DriverEvent) stream (and, in `herd run`, the
//! probe's intervals). Pure text: herd's `output::live` decides the style from stdout and
//! tells the view the terminal's width.
//!
//! On a terminal: a block redrawn in place every interval: elapsed against planned time with
//! a progress bar and the phase, this interval's rates beside the running totals, per op
//! p50/p99 and every outcome with its count, the probe's busiest containers (CPU against
//! quota, run-queue delay, TIME_WAIT against ports), the driver's own health and a warning when the driver
//! itself is the limit. Lines are cut to the terminal's width, re-read before every block.
//!
//! Anywhere else (a pipe, a file, CI logs): logfmt, one line for the interval and one per
//! op, with fixed units (`_ms` and `_s` plain numbers, counts as integers), each carrying the
//! interval's start and length:
//! `start_s=8.0 dur_s=1.0 phase="step 2" players=200 ops=1830 total_ops=14020 req_s=1830 ...`
//! `start_s=8.0 dur_s=1.0 op=game.state ops=1830 ... p50_ms=12.4 p99_ms=41 outcome.rate_limited=5`.

use std::{collections::BTreeMap, fmt::Write as _};

use herd_model::{DriverInterval, IntervalOp, Outcome, ProbeInterval};

use super::render;
use crate::{
    doc::{Column, Table, Value},
    units::latency,
};

/// How the view is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A block redrawn in place; lines are cut to `width` columns so none wraps (a wrapped
    /// line would break the count of lines to move back over).
    Terminal {
        /// Columns of the terminal.
        width: usize,
    },
    /// logfmt lines per interval.
    Lines,
}

/// Running totals of one op.
#[derive(Debug, Default, Clone)]
struct OpTotals {
    ops: u64,
    /// Outcomes other than `ok`, the HTTP status classes and `rate_limited` (which
    /// `statuses` details).
    outcomes: BTreeMap<String, u64>,
    statuses: BTreeMap<u16, u64>,
    /// `ok` outcomes with no status (streams and long polls).
    ok_without_status: u64,
}

/// The live view of one run.
#[derive(Debug)]
pub struct Live {
    style: Style,
    /// Phases in the plan.
    phases: usize,
    /// The plan's length in seconds (0: unknown, e.g. a catalog that lasts as long as its
    /// requests take).
    planned_s: f64,
    /// Lines of the block last drawn, to move back over.
    drawn: usize,
    total_ops: u64,
    total_errors: u64,
    ops: BTreeMap<String, OpTotals>,
    /// The probe's busiest containers, as lines, from its latest interval.
    containers: Vec<String>,
}

impl Live {
    /// A view in `style` for a plan of `phases` phases.
    pub fn new(style: Style, phases: usize) -> Self {
        Self {
            style,
            phases,
            planned_s: 0.0,
            drawn: 0,
            total_ops: 0,
            total_errors: 0,
            ops: BTreeMap::new(),
            containers: Vec::new(),
        }
    }

    /// The plan lasts `secs` (elapsed against it, with a progress bar).
    pub fn planned(mut self, secs: f64) -> Self {
        self.planned_s = secs;
        self
    }

    /// The terminal is now `width` columns wide (a resized window): the next block is cut
    /// to it, so no line wraps.
    pub fn set_width(&mut self, width: usize) {
        if let Style::Terminal { width: w } = &mut self.style {
            *w = width;
        }
    }

    /// Something else was written after the block (a message on stderr): the next block
    /// goes below it rather than over it.
    pub fn written_below(&mut self) {
        self.drawn = 0;
    }

    /// The probe's latest interval: its busiest containers go into the next block.
    pub fn probe(&mut self, iv: &ProbeInterval) {
        self.containers = top_containers(iv, 3);
    }

    /// What to write for this interval: the redrawn block (cursor moves included), or its
    /// lines; ends with a newline.
    pub fn interval(&mut self, iv: &DriverInterval) -> String {
        self.add(iv);
        match self.style {
            Style::Lines => {
                let mut out = String::new();
                for line in self.plain_lines(iv) {
                    out.push_str(&line);
                    out.push('\n');
                }
                out
            }
            Style::Terminal { width } => {
                let block = self.block(iv);
                let mut out = String::new();
                if self.drawn > 0 {
                    // Back to the start of the block's first line, then clear to the end of
                    // the screen: a shorter block leaves nothing behind.
                    let _ = write!(out, "\x1b[{}F\x1b[J", self.drawn);
                }
                for line in &block {
                    out.push_str(&cut(line, width.saturating_sub(1).max(20)));
                    out.push('\n');
                }
                self.drawn = block.len();
                out
            }
        }
    }

    fn add(&mut self, iv: &DriverInterval) {
        for op in &iv.ops {
            self.total_ops += op.count;
            self.total_errors += errors(op);
            let t = self.ops.entry(op.op.clone()).or_default();
            t.ops += op.count;
            let with_status: u64 = op.statuses.values().sum();
            for (o, n) in &op.outcomes {
                match o {
                    Outcome::Ok => {
                        t.ok_without_status += n.saturating_sub(with_status);
                    }
                    // A status class and a 429 are counted by exact code below.
                    Outcome::Http(_) | Outcome::RateLimited if with_status > 0 => {}
                    o => *t.outcomes.entry(o.name()).or_default() += n,
                }
            }
            for (code, n) in &op.statuses {
                *t.statuses.entry(*code).or_default() += n;
            }
        }
    }

    /// The logfmt lines of an interval: the interval, then one per op, stream and the
    /// groups.
    pub fn plain_lines(&self, iv: &DriverInterval) -> Vec<String> {
        let t = totals(iv);
        let when = format!(
            "start_s={} dur_s={}",
            secs(iv.end_ms.saturating_sub(iv.duration_ms)),
            secs(iv.duration_ms)
        );
        let mut line = format!("{when} elapsed_s={}", secs(iv.end_ms));
        if self.planned_s > 0.0 {
            let _ = write!(line, " planned_s={}", num(self.planned_s));
        }
        let _ = write!(
            line,
            " phase={} phase_num={} players={}",
            quote(iv.phase.as_deref().unwrap_or("-")),
            phase_num(iv, self.phases),
            iv.players
        );
        if iv.hammer_workers > 0 {
            let _ = write!(line, " hammer_workers={}", iv.hammer_workers);
        }
        if iv.phase.as_deref().is_some_and(|p| p.starts_with("rate"))
            || iv.in_flight + (iv.late_starts + iv.dropped_starts) as usize > 0
        {
            let _ = write!(
                line,
                " in_flight={} late_starts={} dropped_starts={}",
                iv.in_flight, iv.late_starts, iv.dropped_starts
            );
        }
        let _ = write!(
            line,
            " ops={} total_ops={} req_s={} p99_ms={} errors={} total_errors={} error_pct={} \
             connects={} connect_errors={} driver_cpu_pct={} saturated={}",
            t.ops,
            self.total_ops,
            num(t.rate),
            ms(t.p99_us),
            t.errors,
            self.total_errors,
            num(share(t.errors, t.ops)),
            iv.connects,
            iv.connect_errors,
            num(iv.driver.cpu_percent),
            u8::from(iv.driver.saturated)
        );
        if iv.driver.saturated {
            let _ = write!(line, " lag_p99_ms={}", ms(iv.driver.lag_p99_us));
        }
        let mut lines = vec![line];
        for op in &iv.ops {
            let mut l = format!(
                "{when} op={} ops={} total_ops={} req_s={} p50_ms={} p99_ms={} errors={}",
                quote(&op.op),
                op.count,
                self.ops.get(&op.op).map_or(0, |t| t.ops),
                num(op.rate),
                ms(op.latency.p50_us),
                ms(op.latency.p99_us),
                errors(op)
            );
            for (o, n) in &op.outcomes {
                let _ = write!(l, " outcome.{}={n}", key(&o.name()));
            }
            for (code, n) in &op.statuses {
                let _ = write!(l, " status.{code}={n}");
            }
            lines.push(l);
        }
        let interval_s = iv.duration_ms.max(1) as f64 / 1e3;
        for st in &iv.play.streams {
            lines.push(format!(
                "{when} stream={} events={} events_s={} opened={} reconnects={} errors={}",
                quote(&st.op),
                st.events,
                num(st.events as f64 / interval_s),
                st.opened,
                st.reconnects,
                st.errors.values().sum::<u64>()
            ));
        }
        let g = &iv.play.groups;
        if !g.is_zero() {
            lines.push(format!(
                "{when} groups_formed={} groups_finished={} groups_failed={} groups_abandoned={}",
                g.formed, g.finished, g.failed, g.abandoned
            ));
        }
        lines
    }

    /// The terminal block: where the run is, how it goes now and in total, one row per op,
    /// the probe's busiest containers, the driver's health, a warning when it was saturated.
    pub fn block(&self, iv: &DriverInterval) -> Vec<String> {
        let t = totals(iv);
        let elapsed = iv.end_ms as f64 / 1e3;
        let mut head = format!("herd {elapsed:>7.1}s");
        if self.planned_s > 0.0 {
            let done = (elapsed / self.planned_s).clamp(0.0, 1.0);
            let _ = write!(
                head,
                " / {:.1}s {} {:>3.0} %",
                self.planned_s,
                bar(done, 20),
                done * 100.0
            );
        }
        let _ = write!(head, "  phase {}", phase_num(iv, self.phases));
        if let Some(p) = &iv.phase {
            let _ = write!(head, " ({p})");
        }
        let _ = write!(head, "  players {}", iv.players);
        if iv.hammer_workers > 0 {
            let _ = write!(head, " + {} hammer", iv.hammer_workers);
        }
        head.push_str(&open_model(iv, ' '));
        let now = format!(
            "  now {} req/s  p99 {}  errors {:.2} %   total {} requests, {} errors ({:.2} %)",
            rate(t.rate),
            latency(t.p99_us),
            share(t.errors, t.ops),
            self.total_ops,
            self.total_errors,
            share(self.total_errors, self.total_ops)
        );
        let mut lines = vec![head, now];
        let mut table = Table::new(vec![
            Column::left("op"),
            Column::right("req/s"),
            Column::right("p50"),
            Column::right("p99"),
            Column::right("errors"),
            Column::right("total"),
            Column::left("outcomes (total)"),
        ]);
        for op in &iv.ops {
            let totals = self.ops.get(&op.op);
            // Status codes as oha shows them (`[404] 433`), then what has no status
            // (timeouts, transport errors) and domain codes, most frequent first.
            let mut outcomes: Vec<(String, u64)> = totals
                .map(|t| {
                    let mut v: Vec<(String, u64)> = t
                        .statuses
                        .iter()
                        .map(|(c, n)| (c.to_string(), *n))
                        .collect();
                    v.extend(t.outcomes.iter().map(|(o, n)| (o.clone(), *n)));
                    if t.ok_without_status > 0 {
                        v.push(("ok".to_owned(), t.ok_without_status));
                    }
                    v
                })
                .unwrap_or_default();
            outcomes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let outcomes: Vec<String> =
                outcomes.iter().map(|(o, n)| format!("[{o}] {n}")).collect();
            table.row(vec![
                Value::plain(op.op.clone()),
                Value::plain(rate(op.rate)),
                Value::plain(latency(op.latency.p50_us)),
                Value::plain(latency(op.latency.p99_us)),
                Value::plain(format!("{:.2} %", share(errors(op), op.count))),
                Value::plain(totals.map_or(0, |t| t.ops).to_string()),
                Value::plain(outcomes.join(" ")),
            ]);
        }
        lines.extend(render(&table).lines().map(|l| l.trim_end().to_owned()));
        if iv.ops.is_empty() {
            lines.push("  (no op finished in this interval)".to_owned());
        }
        let interval_s = iv.duration_ms.max(1) as f64 / 1e3;
        for st in &iv.play.streams {
            let mut l = format!(
                "  stream {}: {} ev/s, {} opened, {} reconnects",
                st.op,
                rate(st.events as f64 / interval_s),
                st.opened,
                st.reconnects
            );
            if let Some((class, n)) = st.errors.iter().max_by_key(|(_, n)| **n) {
                let _ = write!(
                    l,
                    ", errors {} (top: {class} {n})",
                    st.errors.values().sum::<u64>()
                );
            }
            lines.push(l);
        }
        let g = &iv.play.groups;
        if !g.is_zero() {
            lines.push(format!(
                "  groups: {} formed, {} finished, {} failed, {} abandoned",
                g.formed, g.finished, g.failed, g.abandoned
            ));
        }
        lines.extend(self.containers.iter().cloned());
        let d = &iv.driver;
        let mut driver = format!(
            "  driver: cpu {:.0} % of {} cores, rss {} MiB, lag p99 {}, connects +{}",
            d.cpu_percent,
            d.cores,
            d.rss_bytes / (1 << 20),
            latency(d.lag_p99_us),
            iv.connects
        );
        if iv.connect_errors > 0 {
            let _ = write!(driver, " ({} failed)", iv.connect_errors);
        }
        lines.push(driver);
        if d.saturated {
            lines.push(
                "  ! SATURATED: the driver, not the target, was the limit in this interval; \
                 its latencies include the driver's own delay"
                    .to_owned(),
            );
        }
        lines
    }
}

/// The busiest containers of a probe interval (by CPU), each with its CPU against its quota,
/// its run-queue delay and its TIME_WAIT against its ports.
fn top_containers(iv: &ProbeInterval, n: usize) -> Vec<String> {
    use herd_model::{CpuCell, SocketCell, Throttling, waits::RunqCell};
    let mut rows: Vec<(f64, String)> = iv
        .containers
        .iter()
        .map(|c| {
            let mut l = format!("  {}:", c.container);
            let mut cores = 0.0;
            match &c.cpu {
                CpuCell::Measured(cpu) => {
                    cores = cpu.cpu_cores;
                    let _ = write!(l, " cpu {:.2}", cpu.cpu_cores);
                    if let Throttling::Measured {
                        quota_cores,
                        throttled_share,
                        ..
                    } = cpu.throttle
                    {
                        match quota_cores {
                            Some(q) => {
                                let _ = write!(l, " of {q:.2} cores");
                            }
                            None => l.push_str(" cores (no quota)"),
                        }
                        if throttled_share > 0.0 {
                            let _ = write!(l, ", throttled {:.0} %", throttled_share * 100.0);
                        }
                    } else {
                        l.push_str(" cores");
                    }
                }
                CpuCell::Unavailable { .. } => l.push_str(" cpu -"),
            }
            // Waiting for a CPU without a quota in sight: thread-time per second of the
            // interval, and the p99 of one wait as its log2 bucket's bound.
            if let RunqCell::Measured {
                total_ns,
                delay_us,
                count,
                ..
            } = &c.waits.runq
            {
                let ms_per_s = *total_ns as f64 / 1e6 / (iv.interval_ns.max(1) as f64 / 1e9);
                let _ = write!(l, ", run-queue {ms_per_s:.1} ms/s");
                match delay_us {
                    Some(d) if *count > 0 => {
                        let _ = write!(l, " (p99 {})", crate::units::bound(d.p99_le, 1));
                    }
                    None if *count > 0 => {
                        let mean_us = *total_ns as f64 / 1e3 / *count as f64;
                        let _ = write!(l, " (mean {mean_us:.0} µs)");
                    }
                    _ => {}
                }
            }
            if let SocketCell::Measured {
                time_wait,
                port_range,
                ..
            } = &c.sockets
            {
                let _ = write!(l, ", TIME_WAIT {time_wait} of {port_range} ports");
            }
            (cores, l)
        })
        .collect();
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    rows.into_iter().take(n).map(|(_, l)| l).collect()
}

fn cut(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_owned();
    }
    let mut s: String = line.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// `done` (0–1) as a bar of `width` cells.
fn bar(done: f64, width: usize) -> String {
    let full = (done * width as f64).round() as usize;
    format!(
        "[{}{}]",
        "#".repeat(full.min(width)),
        "-".repeat(width - full.min(width))
    )
}

/// All ops of the interval together.
struct Totals {
    ops: u64,
    rate: f64,
    /// The worst op's p99: percentiles of different ops do not add up, and the slowest op
    /// is the one to watch.
    p99_us: u64,
    errors: u64,
}

fn totals(iv: &DriverInterval) -> Totals {
    Totals {
        ops: iv.ops.iter().map(|o| o.count).sum(),
        // A fold from +0.0: an empty f64 `sum()` is -0.0, which prints as `-0.0`.
        rate: iv.ops.iter().fold(0.0, |sum, o| sum + o.rate),
        p99_us: iv.ops.iter().map(|o| o.latency.p99_us).max().unwrap_or(0),
        errors: iv.ops.iter().map(errors).sum(),
    }
}

/// Ops that did not end `ok`.
fn errors(op: &IntervalOp) -> u64 {
    op.outcomes
        .iter()
        .filter(|(o, _)| !o.is_ok())
        .map(|(_, n)| n)
        .sum()
}

fn share(part: u64, whole: u64) -> f64 {
    part as f64 * 100.0 / whole.max(1) as f64
}

fn phase_num(iv: &DriverInterval, phases: usize) -> String {
    match iv.phase_index {
        Some(k) => format!("{}/{phases}", k + 1),
        None => "-".to_owned(),
    }
}

/// Open-model figures (`in_flight 12 late_starts 3 dropped_starts 0`), only in rate phases.
fn open_model(iv: &DriverInterval, sep: char) -> String {
    if iv.in_flight + (iv.late_starts + iv.dropped_starts) as usize == 0
        && !iv.phase.as_deref().is_some_and(|p| p.starts_with("rate"))
    {
        return String::new();
    }
    format!(
        " in_flight{sep}{} late_starts{sep}{} dropped_starts{sep}{}",
        iv.in_flight, iv.late_starts, iv.dropped_starts
    )
}

/// A rate with no false precision: `1830`, `12.5`.
fn rate(r: f64) -> String {
    if r >= 100.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

/// A number for logfmt: at most 3 decimals, no trailing zeros, no unit, never `-0`.
fn num(x: f64) -> String {
    let s = format!("{:.3}", x + 0.0);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

/// A latency in milliseconds for logfmt (`0.85`, `41`, `2500`).
fn ms(us: u64) -> String {
    num(us as f64 / 1e3)
}

/// Milliseconds as seconds with at least one decimal: `8.0`, `1.2`, `2.503`.
fn secs(ms: u64) -> String {
    let frac = format!("{:03}", ms % 1000);
    let frac = frac.trim_end_matches('0');
    format!("{}.{}", ms / 1000, if frac.is_empty() { "0" } else { frac })
}

/// A logfmt value: bare when it is a plain word, else quoted with `"` and `\` escaped.
fn quote(v: &str) -> String {
    if !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '=' && c != '\\')
    {
        v.to_owned()
    } else {
        format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// A logfmt key from an outcome name: anything but letters, digits, `.`, `_`, `-` becomes
/// `_` (a domain code comes from a response body).
fn key(v: &str) -> String {
    v.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use herd_model::{DriverHealth, Latency, Outcome};

    use super::*;

    fn op(name: &str, count: u64, rate: f64, p99_us: u64, bad: &[(&str, u64)]) -> IntervalOp {
        let mut outcomes = BTreeMap::new();
        let bad_total: u64 = bad.iter().map(|(_, n)| n).sum();
        outcomes.insert(Outcome::Ok, count - bad_total);
        let mut statuses = BTreeMap::from([(200, count - bad_total)]);
        for (o, n) in bad {
            outcomes.insert((*o).into(), *n);
            match *o {
                "rate_limited" => *statuses.entry(429).or_default() += n,
                "http_4xx" => *statuses.entry(404).or_default() += n,
                _ => {}
            }
        }
        IntervalOp {
            statuses,
            slowest: Vec::new(),
            histogram: None,
            op: name.to_owned(),
            count,
            rate,
            latency: Latency {
                p50_us: p99_us / 4,
                p99_us,
                ..Latency::default()
            },
            outcomes,
        }
    }

    /// Three intervals of a 2-step plan: ramping, a saturated one with errors, and the
    /// drain after the last step.
    fn sequence() -> Vec<DriverInterval> {
        let base = DriverInterval {
            rolled_up: None,
            index: 0,
            end_ms: 1_000,
            duration_ms: 1_000,
            phase_index: Some(0),
            players: 50,
            hammer_workers: 0,
            ops: vec![
                op("game.state", 900, 900.0, 12_400, &[]),
                op("game.move", 100, 100.0, 850, &[]),
            ],
            connects: 50,
            reconnects: 0,
            connect_errors: 0,
            driver: DriverHealth {
                cpu_percent: 35.4,
                cores: 2,
                rss_bytes: 40 << 20,
                lag_p99_us: 300,
                lag_max_us: 900,
                saturated: false,
            },
            play: Default::default(),
            phase: None,
            late_starts: 0,
            dropped_starts: 0,
            in_flight: 0,
            clock_start_ns: None,
        };
        let mut second = base.clone();
        second.index = 1;
        second.end_ms = 2_000;
        second.phase_index = Some(1);
        second.players = 200;
        second.hammer_workers = 4;
        second.ops = vec![
            op(
                "game.state",
                1_830,
                1_830.0,
                41_000,
                &[("transport_error.reset", 2), ("rate_limited", 5)],
            ),
            op(
                "hammer:game.move",
                400,
                400.0,
                2_500_000,
                &[("rate_limited", 380)],
            ),
        ];
        second.connect_errors = 3;
        second.driver.cpu_percent = 191.0;
        second.driver.lag_p99_us = 15_000;
        second.driver.saturated = true;
        let mut third = base.clone();
        third.index = 2;
        third.end_ms = 2_500;
        third.duration_ms = 500;
        third.phase_index = None;
        third.players = 0;
        third.ops = vec![];
        vec![base, second, third]
    }

    use herd_testkit::logfmt::parse as logfmt;

    #[test]
    fn plain_lines_are_logfmt_with_fixed_units_and_the_intervals_start() {
        let mut live = Live::new(Style::Lines, 2).planned(2.0);
        let seq = sequence();
        let out: String = seq.iter().map(|iv| live.interval(iv)).collect();
        assert_eq!(
            out,
            "start_s=0.0 dur_s=1.0 elapsed_s=1.0 planned_s=2 phase=- phase_num=1/2 players=50 ops=1000 total_ops=1000 req_s=1000 p99_ms=12.4 errors=0 total_errors=0 error_pct=0 connects=50 connect_errors=0 driver_cpu_pct=35.4 saturated=0\n\
             start_s=0.0 dur_s=1.0 op=game.state ops=900 total_ops=900 req_s=900 p50_ms=3.1 p99_ms=12.4 errors=0 outcome.ok=900 status.200=900\n\
             start_s=0.0 dur_s=1.0 op=game.move ops=100 total_ops=100 req_s=100 p50_ms=0.212 p99_ms=0.85 errors=0 outcome.ok=100 status.200=100\n\
             start_s=1.0 dur_s=1.0 elapsed_s=2.0 planned_s=2 phase=- phase_num=2/2 players=200 hammer_workers=4 ops=2230 total_ops=3230 req_s=2230 p99_ms=2500 errors=387 total_errors=387 error_pct=17.354 connects=50 connect_errors=3 driver_cpu_pct=191 saturated=1 lag_p99_ms=15\n\
             start_s=1.0 dur_s=1.0 op=game.state ops=1830 total_ops=2730 req_s=1830 p50_ms=10.25 p99_ms=41 errors=7 outcome.ok=1823 outcome.transport_error.reset=2 outcome.rate_limited=5 status.200=1823 status.429=5\n\
             start_s=1.0 dur_s=1.0 op=hammer:game.move ops=400 total_ops=400 req_s=400 p50_ms=625 p99_ms=2500 errors=380 outcome.ok=20 outcome.rate_limited=380 status.200=20 status.429=380\n\
             start_s=2.0 dur_s=0.5 elapsed_s=2.5 planned_s=2 phase=- phase_num=- players=0 ops=0 total_ops=3230 req_s=0 p99_ms=0 errors=0 total_errors=387 error_pct=0 connects=50 connect_errors=0 driver_cpu_pct=35.4 saturated=0\n"
        );
        // Parsed back: every field is key=value, units are in the keys and never in the
        // values, counts are integers, and start + duration is the interval's end.
        let mut ops = 0;
        for line in out.lines() {
            let f = logfmt(line);
            for (k, v) in &f {
                if k.ends_with("_ms") || k.ends_with("_s") || k.ends_with("_pct") {
                    assert!(v.parse::<f64>().is_ok(), "{k}={v} in {line}");
                } else if k == "ops"
                    || k.contains("total")
                    || k.contains("errors")
                    || k.starts_with("outcome.")
                    || k == "players"
                {
                    assert!(v.parse::<u64>().is_ok(), "{k}={v} in {line}");
                }
            }
            let start: f64 = f["start_s"].parse().unwrap();
            let dur: f64 = f["dur_s"].parse().unwrap();
            if let Some(end) = f.get("elapsed_s") {
                assert!(
                    (start + dur - end.parse::<f64>().unwrap()).abs() < 1e-9,
                    "{line}"
                );
            }
            if f.contains_key("op") {
                ops += f["ops"].parse::<u64>().unwrap();
            }
        }
        assert_eq!(ops, 3230);
    }

    #[test]
    fn names_and_outcomes_that_are_not_words_stay_parseable() {
        let mut iv = sequence().remove(0);
        iv.phase = Some("catalog GET /a b".into());
        iv.ops = vec![op("GET /a \"b\"", 3, 3.0, 900, &[("not your=turn", 1)])];
        let lines = Live::new(Style::Lines, 1).plain_lines(&iv);
        let head = logfmt(&lines[0]);
        assert_eq!(head["phase"], "catalog GET /a b");
        let f = logfmt(&lines[1]);
        assert_eq!(f["op"], "GET /a \"b\"");
        assert_eq!(f["outcome.not_your_turn"], "1");
    }

    #[test]
    fn status_codes_count_exactly_not_by_class() {
        let mut iv = sequence().remove(0);
        iv.ops = vec![op(
            "get",
            1000,
            1000.0,
            900,
            &[("http_4xx", 433), ("timeout", 2)],
        )];
        let mut live = Live::new(Style::Lines, 1);
        let lines = live.plain_lines(&iv);
        let f = logfmt(&lines[1]);
        assert_eq!(
            (f["status.404"].as_str(), f["status.200"].as_str()),
            ("433", "565")
        );
        live.add(&iv);
        live.add(&iv);
        let b = live.block(&iv);
        assert!(
            b[3].ends_with("2000  [200] 1130 [404] 866 [timeout] 4"),
            "{b:?}"
        );
    }

    #[test]
    fn a_rate_phase_shows_its_open_model_figures() {
        let mut iv = sequence().remove(0);
        iv.phase_index = Some(2);
        iv.phase = Some("rate 1".into());
        iv.players = 0;
        iv.in_flight = 12;
        iv.late_starts = 3;
        let lines = Live::new(Style::Lines, 3).plain_lines(&iv);
        let f = logfmt(&lines[0]);
        assert_eq!(
            (
                f["phase"].as_str(),
                f["in_flight"].as_str(),
                f["late_starts"].as_str()
            ),
            ("rate 1", "12", "3")
        );
        let head = &Live::new(Style::Lines, 3).block(&iv)[0];
        assert!(
            head.contains("phase 3/3 (rate 1)  players 0 in_flight 12 late_starts 3"),
            "{head}"
        );
    }

    #[test]
    fn streams_and_groups_show_per_interval() {
        let mut iv = sequence().remove(0);
        iv.play.streams.push(herd_model::StreamStats {
            op: "events".into(),
            kind: "ndjson".into(),
            opened: 50,
            reconnects: 2,
            cut_by_stop: 0,
            events: 400,
            by_type: Default::default(),
            errors: [("ended".to_owned(), 2)].into_iter().collect(),
            first_event: None,
        });
        iv.play.groups.formed = 25;
        let lines = Live::new(Style::Lines, 2).plain_lines(&iv);
        assert!(
            lines.iter().any(|l| l.ends_with(
                "stream=events events=400 events_s=400 opened=50 reconnects=2 errors=2"
            )),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.ends_with(
                "groups_formed=25 groups_finished=0 groups_failed=0 groups_abandoned=0"
            )),
            "{lines:?}"
        );
        let b = Live::new(Style::Lines, 2).block(&iv);
        assert!(
            b.iter().any(|l| l
                == "  stream events: 400 ev/s, 50 opened, 2 reconnects, errors 2 (top: ended 2)"),
            "{b:?}"
        );
    }

    #[test]
    fn the_terminal_block_shows_progress_totals_and_outcomes() {
        let mut live = Live::new(Style::Terminal { width: 160 }, 2).planned(4.0);
        let frames: Vec<String> = sequence().iter().map(|iv| live.interval(iv)).collect();
        insta::assert_snapshot!("first_frame", frames[0]);
        insta::assert_snapshot!("saturated_frame", frames[1]);
        // Back over the 6 lines drawn, clear, then the new block.
        assert!(frames[1].starts_with("\x1b[6F\x1b[J"), "{:?}", frames[1]);
        assert!(frames[2].starts_with("\x1b[7F\x1b[J"), "{:?}", frames[2]);
        assert!(frames[2].contains("(no op finished in this interval)"));
        // After a message under the block, the next block starts below it.
        live.written_below();
        assert!(live.interval(&sequence()[0]).starts_with("herd "));
    }

    #[test]
    fn terminal_lines_are_cut_to_the_width() {
        for width in [40, 80] {
            let mut live = Live::new(Style::Terminal { width }, 2).planned(4.0);
            let out = live.interval(&sequence()[1]);
            for line in out.lines() {
                let line = line.trim_start_matches(|c: char| c != 'h' && line.starts_with('\x1b'));
                assert!(line.chars().count() < width, "{line:?}");
            }
            assert!(out.lines().next().unwrap().ends_with('…'));
        }
    }

    /// A gateway using 0.48 of its 0.5-core quota, throttled in 40 % of its periods.
    const GATEWAY_CPU: &str = r#"{"state": "measured", "at_ns": 2000000000,
        "interval_ns": 1000000000, "polls": 10, "usage_ns": 480000000, "cpu_cores": 0.48,
        "user_cores": 0.4, "system_cores": 0.08, "burst_cores": 0.5, "burst_window_ns": 100000000,
        "burst_at_ns": 1500000000, "sustained_cores": 0.45, "sustained_window_ns": 2000000000,
        "throttle": {"state": "measured", "nr_periods": 10, "nr_throttled": 4,
            "throttled_ns": 200000000, "throttled_share": 0.4, "quota_cores": 0.5,
            "quota_us": 50000, "period_us": 100000},
        "memory": {"state": "measured", "current_bytes": 1000000, "peak_bytes": null}}"#;

    #[test]
    fn the_busiest_containers_show_cpu_against_quota_run_queue_delay_and_time_wait_against_ports() {
        let iv: ProbeInterval = serde_json::from_value(serde_json::json!({
            "at_ns": 2_000_000_000u64,
            "interval_ns": 1_000_000_000u64,
            "containers": [
                {"container": "idle", "cpu": {"state": "unavailable", "reason": "gone"}},
                {"container": "gateway",
                 "sockets": {"state": "measured", "established": 3, "syn_sent": 0,
                    "time_wait": 1200, "timewait_sockets": 1200, "min_headroom": 27000,
                    "port_range": 28232, "listen_overflows": 0, "listen_drops": 0},
                 "cpu": serde_json::from_str::<serde_json::Value>(GATEWAY_CPU).unwrap(),
                 "waits": {"runq": {"state": "measured", "count": 40, "total_ns": 78_400_000u64,
                    "delay_us": {"count": 40, "p50_le": 512, "p99_le": 4096, "max_le": 4096},
                    "delay_buckets": vec![0u64; herd_model::HIST_BUCKETS]}}}
            ],
            "pairs": [],
            "lost": 0
        }))
        .unwrap();
        let mut live = Live::new(Style::Lines, 1);
        live.probe(&iv);
        let b = live.block(&sequence()[0]);
        assert!(
            b.contains(
                &"  gateway: cpu 0.48 of 0.50 cores, throttled 40 %, run-queue 78.4 ms/s (p99 ≤ 4.1ms), \
                  TIME_WAIT 1200 of 28232 ports"
                    .to_owned()
            ),
            "{b:?}"
        );
        assert!(b.contains(&"  idle: cpu -".to_owned()), "{b:?}");
    }
}
