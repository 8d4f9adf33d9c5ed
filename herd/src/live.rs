//! The live progress view of `herd drive` and `herd run`, built from the driver's
//! [`DriverEvent::Interval`](herd_driver::DriverEvent) stream.
//!
//! On a terminal: a compact block redrawn in place every interval (step, players, req/s,
//! p99 and errors per op, the driver's own CPU, memory and lag, a warning when the driver
//! itself is the limit). Anywhere else (a pipe, a file, CI logs): one plain `key=value` line
//! per interval that grep and awk can take apart, e.g.
//! `t=12.0s step=2/3 players=200 ops=1830 req/s=1830 p99=41ms errors=0.10% | game.state ...`.

use std::{fmt::Write as _, io::IsTerminal as _};

use herd_driver::report::{IntervalOp, IntervalReport};

/// How the view is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A block redrawn in place; lines are cut to `width` columns so none wraps (a wrapped
    /// line would break the count of lines to move back over).
    Terminal {
        /// Columns of the terminal.
        width: usize,
    },
    /// One line per interval.
    Lines,
}

/// The live view of one run.
#[derive(Debug)]
pub struct Live {
    style: Style,
    steps: usize,
    /// Lines of the block last drawn, to move back over.
    drawn: usize,
    /// Re-read the terminal's width before each block, so a resized window does not wrap.
    track_width: bool,
}

impl Live {
    /// A view in `style` for a plan of `steps` steps.
    pub fn new(style: Style, steps: usize) -> Self {
        Self {
            style,
            steps,
            drawn: 0,
            track_width: false,
        }
    }

    /// The block on a terminal stdout, plain lines otherwise.
    pub fn for_stdout(steps: usize) -> Self {
        let out = std::io::stdout();
        let style = if out.is_terminal() {
            Style::Terminal {
                width: terminal_width().unwrap_or(100),
            }
        } else {
            Style::Lines
        };
        let mut live = Self::new(style, steps);
        live.track_width = true;
        live
    }

    /// Something else was written after the block (a message on stderr): the next block
    /// goes below it rather than over it.
    pub fn written_below(&mut self) {
        self.drawn = 0;
    }

    /// What to write for this interval: the redrawn block (cursor moves included), or one
    /// line; ends with a newline.
    pub fn interval(&mut self, iv: &IntervalReport) -> String {
        match self.style {
            Style::Lines => {
                let mut line = plain_line(iv, self.steps);
                line.push('\n');
                line
            }
            Style::Terminal { mut width } => {
                if self.track_width
                    && let Some(w) = terminal_width()
                {
                    width = w;
                }
                let block = block(iv, self.steps);
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
}

/// Columns of the terminal on stdout.
fn terminal_width() -> Option<usize> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the pointed-to struct, which lives for
    // the call.
    let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_col > 0).then_some(usize::from(ws.ws_col))
}

fn cut(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_owned();
    }
    let mut s: String = line.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
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

fn totals(iv: &IntervalReport) -> Totals {
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

fn step(iv: &IntervalReport, steps: usize) -> String {
    match iv.phase_index {
        Some(k) => format!("{}/{steps}", k + 1),
        None => "-".to_owned(),
    }
}

/// The phase's name when the plan is more than steps (`rate-1`, `catalog-game.state`,
/// `soak-hold`), spaces made dashes so a plain line stays `key=value`; none for `step N`.
fn phase(iv: &IntervalReport) -> Option<String> {
    match (iv.phase_index, &iv.phase) {
        (Some(k), Some(name)) if *name != format!("step {}", k + 1) => Some(name.replace(' ', "-")),
        _ => None,
    }
}

/// Open-model figures (`in_flight=12 late_starts=3 dropped_starts=0`), only in rate phases.
fn open_model(iv: &IntervalReport, sep: char) -> String {
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

/// A latency in ASCII milliseconds (`0.85ms`, `4.2ms`, `41ms`, `1.25s`), so a plain line
/// needs no UTF-8 to grep.
fn ms(us: u64) -> String {
    match us {
        0..1_000 => format!("{:.2}ms", us as f64 / 1e3),
        1_000..10_000 => format!("{:.1}ms", us as f64 / 1e3),
        10_000..1_000_000 => format!("{}ms", (us as f64 / 1e3).round() as u64),
        _ => format!("{:.2}s", us as f64 / 1e6),
    }
}

/// Milliseconds as exact seconds, no trailing zeros: `12`, `1.2`, `2.503`. A run's last
/// interval is cut short, so its end is rarely a round tenth.
fn seconds(ms: u64) -> String {
    let frac = format!("{:03}", ms % 1000);
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        format!("{}", ms / 1000)
    } else {
        format!("{}.{frac}", ms / 1000)
    }
}

/// Outcomes other than `ok`, most frequent first.
fn failures(op: &IntervalOp) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = op
        .outcomes
        .iter()
        .filter(|(o, _)| !o.is_ok())
        .map(|(o, n)| (o.name(), *n))
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// One `key=value` line: totals first, then `| op key=value…` per op, then the driver.
pub fn plain_line(iv: &IntervalReport, steps: usize) -> String {
    let t = totals(iv);
    let mut line = format!(
        "t={}s step={} players={}",
        seconds(iv.end_ms),
        step(iv, steps),
        iv.players
    );
    if let Some(p) = phase(iv) {
        let _ = write!(line, " phase={p}");
    }
    line.push_str(&open_model(iv, '='));
    if iv.hammer_workers > 0 {
        let _ = write!(line, " hammer={}", iv.hammer_workers);
    }
    let _ = write!(
        line,
        " ops={} req/s={} p99={} errors={:.2}%",
        t.ops,
        rate(t.rate),
        ms(t.p99_us),
        share(t.errors, t.ops)
    );
    if iv.connect_errors > 0 {
        let _ = write!(line, " connect_errors={}", iv.connect_errors);
    }
    for op in &iv.ops {
        let _ = write!(
            line,
            " | {} ops={} req/s={} p99={} errors={:.2}%",
            op.op,
            op.count,
            rate(op.rate),
            ms(op.latency.p99_us),
            share(errors(op), op.count)
        );
        for (outcome, n) in failures(op) {
            let _ = write!(line, " {outcome}={n}");
        }
    }
    let secs = iv.duration_ms.max(1) as f64 / 1e3;
    for st in &iv.play.streams {
        let errors: u64 = st.errors.values().sum();
        let _ = write!(
            line,
            " | {} events={} ev/s={} opened={} reconnects={} errors={errors}",
            st.op,
            st.events,
            rate(st.events as f64 / secs),
            st.opened,
            st.reconnects
        );
    }
    let g = &iv.play.groups;
    if !g.is_zero() {
        let _ = write!(
            line,
            " | groups formed={} finished={} failed={} abandoned={}",
            g.formed, g.finished, g.failed, g.abandoned
        );
    }
    let _ = write!(line, " | driver_cpu={:.0}%", iv.driver.cpu_percent);
    if iv.driver.saturated {
        let _ = write!(line, " SATURATED lag_p99={}", ms(iv.driver.lag_p99_us));
    }
    line
}

/// The terminal block: a heading, one row per op, the driver's health, a warning line when
/// the driver was saturated.
pub fn block(iv: &IntervalReport, steps: usize) -> Vec<String> {
    let t = totals(iv);
    let mut head = format!(
        "herd {:>7.1}s  step {}  players {}",
        iv.end_ms as f64 / 1e3,
        step(iv, steps),
        iv.players
    );
    if let Some(p) = phase(iv) {
        let _ = write!(head, " ({p})");
    }
    if iv.hammer_workers > 0 {
        let _ = write!(head, " + {} hammer", iv.hammer_workers);
    }
    head.push_str(&open_model(iv, ' '));
    let _ = write!(
        head,
        "  {} req/s  p99 {}  errors {:.2} %",
        rate(t.rate),
        ms(t.p99_us),
        share(t.errors, t.ops)
    );
    let width = iv
        .ops
        .iter()
        .map(|o| o.op.chars().count())
        .max()
        .unwrap_or(0)
        .max(2);
    let mut lines = vec![
        head,
        format!(
            "  {:<width$}  {:>9}  {:>8}  {:>8}  top error",
            "op", "req/s", "p99", "errors"
        ),
    ];
    for op in &iv.ops {
        let top = failures(op)
            .first()
            .map(|(o, n)| format!("{o} {n}"))
            .unwrap_or_default();
        lines.push(
            format!(
                "  {:<width$}  {:>9}  {:>8}  {:>6.2} %  {top}",
                op.op,
                rate(op.rate),
                ms(op.latency.p99_us),
                share(errors(op), op.count)
            )
            .trim_end()
            .to_owned(),
        );
    }
    if iv.ops.is_empty() {
        lines.push("  (no op finished in this interval)".to_owned());
    }
    let secs = iv.duration_ms.max(1) as f64 / 1e3;
    for st in &iv.play.streams {
        let mut l = format!(
            "  stream {}: {} ev/s, {} opened, {} reconnects",
            st.op,
            rate(st.events as f64 / secs),
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
    let d = &iv.driver;
    let mut driver = format!(
        "  driver: cpu {:.0} % of {} cores, rss {} MiB, lag p99 {}, connects +{}",
        d.cpu_percent,
        d.cores,
        d.rss_bytes / (1 << 20),
        ms(d.lag_p99_us),
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use herd_driver::{
        Outcome,
        report::{DriverHealth, Latency},
    };

    use super::*;

    fn op(name: &str, count: u64, rate: f64, p99_us: u64, bad: &[(&str, u64)]) -> IntervalOp {
        let mut outcomes = BTreeMap::new();
        let bad_total: u64 = bad.iter().map(|(_, n)| n).sum();
        outcomes.insert(Outcome::Ok, count - bad_total);
        for (o, n) in bad {
            outcomes.insert((*o).into(), *n);
        }
        IntervalOp {
            histogram: None,
            op: name.to_owned(),
            count,
            rate,
            latency: Latency {
                p99_us,
                ..Latency::default()
            },
            outcomes,
        }
    }

    /// Three intervals of a 2-step plan: ramping, a saturated one with errors, and the
    /// drain after the last step.
    fn sequence() -> Vec<IntervalReport> {
        let base = IntervalReport {
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

    #[test]
    fn a_rate_phase_is_named_with_its_open_model_figures() {
        let mut iv = sequence().remove(0);
        iv.phase_index = Some(2);
        iv.phase = Some("rate 1".into());
        iv.players = 0;
        iv.in_flight = 12;
        iv.late_starts = 3;
        let line = Live::new(Style::Lines, 3).interval(&iv);
        assert!(
            line.starts_with(
                "t=1s step=3/3 players=0 phase=rate-1 in_flight=12 late_starts=3 dropped_starts=0 ops=1000"
            ),
            "{line}"
        );
        // A plain step keeps its short form.
        iv.phase_index = Some(0);
        iv.phase = Some("step 1".into());
        iv.in_flight = 0;
        iv.late_starts = 0;
        let line = Live::new(Style::Lines, 3).interval(&iv);
        assert!(
            line.starts_with("t=1s step=1/3 players=0 ops=1000"),
            "{line}"
        );
        let head = &block(
            &{
                let mut r = iv.clone();
                r.phase = Some("catalog game.state".into());
                r
            },
            3,
        )[0];
        assert!(
            head.contains("step 1/3  players 0 (catalog-game.state)"),
            "{head}"
        );
    }

    #[test]
    fn streams_and_groups_show_per_interval() {
        let mut iv = sequence().remove(0);
        iv.play.streams.push(herd_driver::report::StreamStats {
            op: "events".into(),
            kind: "ndjson".into(),
            opened: 50,
            reconnects: 2,
            events: 400,
            by_type: Default::default(),
            errors: [("ended".to_owned(), 2)].into_iter().collect(),
            first_event: None,
        });
        iv.play.groups.formed = 25;
        let line = Live::new(Style::Lines, 2).interval(&iv);
        assert!(
            line.contains(
                " | events events=400 ev/s=400 opened=50 reconnects=2 errors=2 | groups formed=25 finished=0 failed=0 abandoned=0 | driver_cpu="
            ),
            "{line}"
        );
        let b = block(&iv, 2);
        assert!(
            b.iter().any(|l| l
                == "  stream events: 400 ev/s, 50 opened, 2 reconnects, errors 2 (top: ended 2)"),
            "{b:?}"
        );
        assert!(
            b.iter()
                .any(|l| l == "  groups: 25 formed, 0 finished, 0 failed, 0 abandoned"),
            "{b:?}"
        );
    }

    #[test]
    fn plain_lines_are_key_value_per_interval() {
        let mut live = Live::new(Style::Lines, 2);
        let out: String = sequence().iter().map(|iv| live.interval(iv)).collect();
        assert_eq!(
            out,
            "t=1s step=1/2 players=50 ops=1000 req/s=1000 p99=12ms errors=0.00% \
             | game.state ops=900 req/s=900 p99=12ms errors=0.00% \
             | game.move ops=100 req/s=100 p99=0.85ms errors=0.00% | driver_cpu=35%\n\
             t=2s step=2/2 players=200 hammer=4 ops=2230 req/s=2230 p99=2.50s errors=17.35% connect_errors=3 \
             | game.state ops=1830 req/s=1830 p99=41ms errors=0.38% rate_limited=5 transport_error.reset=2 \
             | hammer:game.move ops=400 req/s=400 p99=2.50s errors=95.00% rate_limited=380 \
             | driver_cpu=191% SATURATED lag_p99=15ms\n\
             t=2.5s step=- players=0 ops=0 req/s=0.0 p99=0.00ms errors=0.00% | driver_cpu=35%\n"
        );
    }

    #[test]
    fn the_terminal_block_is_redrawn_in_place() {
        let mut live = Live::new(Style::Terminal { width: 120 }, 2);
        let seq = sequence();
        let first = live.interval(&seq[0]);
        assert_eq!(
            first,
            "herd     1.0s  step 1/2  players 50  1000 req/s  p99 12ms  errors 0.00 %\n\
             \x20 op              req/s       p99    errors  top error\n\
             \x20 game.state        900      12ms    0.00 %\n\
             \x20 game.move         100    0.85ms    0.00 %\n\
             \x20 driver: cpu 35 % of 2 cores, rss 40 MiB, lag p99 0.30ms, connects +50\n"
        );
        let second = live.interval(&seq[1]);
        // Back over the 5 lines drawn, clear, then the new block.
        assert!(second.starts_with("\x1b[5F\x1b[J"), "{second:?}");
        let lines: Vec<&str> = second["\x1b[5F\x1b[J".len()..].lines().collect();
        assert_eq!(
            lines,
            [
                "herd     2.0s  step 2/2  players 200 + 4 hammer  2230 req/s  p99 2.50s  errors 17.35 %",
                "  op                    req/s       p99    errors  top error",
                "  game.state             1830      41ms    0.38 %  rate_limited 5",
                "  hammer:game.move        400     2.50s   95.00 %  rate_limited 380",
                "  driver: cpu 191 % of 2 cores, rss 40 MiB, lag p99 15ms, connects +50 (3 failed)",
                "  ! SATURATED: the driver, not the target, was the limit in this interval; its latencies include the driver's own delay",
            ]
        );
        let third = live.interval(&seq[2]);
        assert!(third.starts_with("\x1b[6F\x1b[J"), "{third:?}");
        assert!(
            third.contains("(no op finished in this interval)"),
            "{third}"
        );
        // After a message under the block, the next block starts below it.
        live.written_below();
        assert!(live.interval(&seq[0]).starts_with("herd "));
    }

    #[test]
    fn terminal_lines_are_cut_to_the_width() {
        let mut live = Live::new(Style::Terminal { width: 40 }, 2);
        let out = live.interval(&sequence()[1]);
        for line in out.lines() {
            assert!(line.chars().count() <= 39, "{line:?}");
        }
        assert!(out.lines().next().unwrap().ends_with('…'));
    }
}
