//! Regression gates for `herd compare --fail-on`: each gate names an op (or every op), a
//! whole-run figure and the change that fails the comparison, in the words of a pull request
//! review: `p99 +10%`, `game.state p99 +20ms`, `req/s -5%`, `errors +0.5pp`.
//!
//! ```text
//! GATE   := [OP] METRIC CHANGE
//! OP     := an op's name; omitted: every op the two runs share
//! METRIC := p50 | p90 | p99 | p999 | max | mean    (latency, from the merged histogram)
//!         | req/s                                   (throughput over the run)
//!         | errors                                  (share of requests that are errors)
//! CHANGE := +N% | -N%        relative to the run before
//!         | +N<unit>         an absolute latency increase (us, ms, s)
//!         | +Npp | -Npp      a change of the error share, in percentage points
//! ```
//!
//! A `+` change fails when the figure grew by more than N, a `-` change when it fell by more
//! than N. A gate whose op is in neither run, or whose figure one run lacks, fails too, with the
//! reason: a gate that cannot be checked must not pass silently.

use std::{fmt, str::FromStr};

/// The syntax, for error messages and `--help`.
pub const SYNTAX: &str = "[OP] METRIC CHANGE, e.g. `p99 +10%`, `game.state p99 +20ms`, \
     `req/s -5%`, `errors +0.5pp`; METRIC is p50, p90, p99, p999, max, mean, req/s or errors; \
     CHANGE is +N% or -N%, +N with a latency unit (us, ms, s), or ±Npp for errors";

/// A whole-run figure a gate can watch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// A latency percentile, in per mille (500 = p50, 999 = p99.9), or 1000 for max.
    Latency(u16),
    /// Mean latency.
    Mean,
    /// Requests per second.
    Rate,
    /// Share of requests that ended as errors (expected outcomes excluded).
    Errors,
}

impl Metric {
    fn name(self) -> &'static str {
        match self {
            Metric::Latency(500) => "p50",
            Metric::Latency(900) => "p90",
            Metric::Latency(990) => "p99",
            Metric::Latency(999) => "p999",
            Metric::Latency(_) => "max",
            Metric::Mean => "mean",
            Metric::Rate => "req/s",
            Metric::Errors => "errors",
        }
    }

    fn is_latency(self) -> bool {
        matches!(self, Metric::Latency(_) | Metric::Mean)
    }
}

/// How much change fails a gate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Change {
    /// A rise (`+`, positive) or fall (`-`, negative) relative to before, as a fraction.
    Relative(f64),
    /// A rise of a latency, µs.
    LatencyUs(f64),
    /// A change of the error share, percentage points (signed like `Relative`).
    Points(f64),
}

/// One `--fail-on` gate.
#[derive(Clone, Debug, PartialEq)]
pub struct Gate {
    /// The op, or None for every op.
    pub op: Option<String>,
    /// The figure.
    pub metric: Metric,
    /// The change that fails.
    pub change: Change,
    /// As written.
    pub text: String,
}

/// A gate that does not parse: what is wrong, and the syntax.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--fail-on `{text}`: {reason}; write {SYNTAX}")]
pub struct GateError {
    /// The gate as written.
    pub text: String,
    /// What is wrong with it.
    pub reason: String,
}

fn metric(s: &str) -> Option<Metric> {
    Some(match s {
        "p50" => Metric::Latency(500),
        "p90" => Metric::Latency(900),
        "p99" => Metric::Latency(990),
        "p999" | "p99.9" => Metric::Latency(999),
        "max" => Metric::Latency(1000),
        "mean" => Metric::Mean,
        "req/s" | "rps" => Metric::Rate,
        "errors" => Metric::Errors,
        _ => return None,
    })
}

fn change(s: &str, m: Metric) -> Result<Change, String> {
    let (sign, body) = match s.as_bytes().first() {
        Some(b'+') => (1.0, &s[1..]),
        Some(b'-') => (-1.0, &s[1..]),
        _ => return Err(format!("`{s}` needs a sign: + for a rise, - for a fall")),
    };
    let number = |t: &str| -> Result<f64, String> {
        t.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| format!("`{t}` is not a number"))
    };
    if let Some(n) = body.strip_suffix('%') {
        return Ok(Change::Relative(sign * number(n)? / 100.0));
    }
    if let Some(n) = body.strip_suffix("pp") {
        if m != Metric::Errors {
            return Err(format!(
                "pp (percentage points) is for errors; `{}` changes by % or a latency",
                m.name()
            ));
        }
        return Ok(Change::Points(sign * number(n)?));
    }
    for (unit, us) in [("us", 1.0), ("µs", 1.0), ("ms", 1e3), ("s", 1e6)] {
        if let Some(n) = body.strip_suffix(unit) {
            if !m.is_latency() {
                return Err(format!(
                    "`{s}` is a latency; `{}` changes by %{}",
                    m.name(),
                    if m == Metric::Errors { " or pp" } else { "" }
                ));
            }
            if sign < 0.0 {
                return Err(format!(
                    "`{s}`: a latency gate fails on a rise; write +N{unit}"
                ));
            }
            return Ok(Change::LatencyUs(number(n)? * us));
        }
    }
    Err(format!("`{s}` has no unit: write %, pp, us, ms or s"))
}

impl FromStr for Gate {
    type Err = GateError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let err = |reason: String| GateError {
            text: text.to_owned(),
            reason,
        };
        let words: Vec<&str> = text.split_whitespace().collect();
        let (op, m, c) = match words.as_slice() {
            [m, c] => (None, *m, *c),
            [op, m, c] => (Some((*op).to_owned()), *m, *c),
            [] => return Err(err("it is empty".into())),
            _ => {
                return Err(err(format!(
                    "{} words; a gate has two or three",
                    words.len()
                )));
            }
        };
        let metric = metric(m).ok_or_else(|| err(format!("`{m}` is not a metric")))?;
        let change = change(c, metric).map_err(err)?;
        Ok(Gate {
            op: op.filter(|o| o != "*"),
            metric,
            change,
            text: text.to_owned(),
        })
    }
}

/// One op's whole-run figures in one run, for [`check`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpFigures {
    /// Latency percentiles and max, µs, by per mille (500, 900, 990, 999, 1000).
    pub latency_us: Vec<(u16, f64)>,
    /// Mean latency, µs.
    pub mean_us: Option<f64>,
    /// Requests per second.
    pub rate: Option<f64>,
    /// Share of requests that were errors (0–1).
    pub error_share: Option<f64>,
}

impl OpFigures {
    fn get(&self, m: Metric) -> Option<f64> {
        match m {
            Metric::Latency(q) => self.latency_us.iter().find(|(k, _)| *k == q).map(|x| x.1),
            Metric::Mean => self.mean_us,
            Metric::Rate => self.rate,
            Metric::Errors => self.error_share,
        }
    }
}

/// What one gate found for one op.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The gate as written.
    pub gate: String,
    /// The op it was checked on.
    pub op: String,
    /// Whether the comparison passes it.
    pub pass: bool,
    /// The figures and the change, in words.
    pub detail: String,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} `{}` on {}: {}",
            if self.pass { "pass" } else { "FAIL" },
            self.gate,
            self.op,
            self.detail
        )
    }
}

fn show(m: Metric, v: f64) -> String {
    match m {
        Metric::Latency(_) | Metric::Mean => crate::units::latency(v.round() as u64),
        Metric::Rate => format!("{v:.1} req/s"),
        Metric::Errors => format!("{:.2} %", v * 100.0),
    }
}

/// Checks every gate against the ops of two runs: `ops` holds each op's figures before and
/// after (None when the op is missing from that run).
pub fn check(
    gates: &[Gate],
    ops: &[(String, Option<OpFigures>, Option<OpFigures>)],
) -> Vec<Verdict> {
    let mut out = Vec::new();
    for g in gates {
        let matching: Vec<_> = ops
            .iter()
            .filter(|(op, _, _)| g.op.as_ref().is_none_or(|want| want == op))
            .collect();
        if matching.is_empty() {
            out.push(Verdict {
                gate: g.text.clone(),
                op: g.op.clone().unwrap_or_else(|| "every op".into()),
                pass: false,
                detail: "no such op in either run".into(),
            });
        }
        for (op, before, after) in matching {
            let m = g.metric;
            let (b, a) = (
                before.as_ref().and_then(|f| f.get(m)),
                after.as_ref().and_then(|f| f.get(m)),
            );
            let (Some(b), Some(a)) = (b, a) else {
                let which = match (before.is_some(), after.is_some()) {
                    (false, _) => "the run before has no such op",
                    (_, false) => "the run after has no such op",
                    _ => "a run has no value for it",
                };
                out.push(Verdict {
                    gate: g.text.clone(),
                    op: op.clone(),
                    pass: false,
                    detail: format!("cannot be checked: {which}"),
                });
                continue;
            };
            let (pass, moved) = match g.change {
                Change::Relative(limit) => {
                    let rel = if b == 0.0 {
                        if a == 0.0 { 0.0 } else { f64::INFINITY }
                    } else {
                        a / b - 1.0
                    };
                    let pass = if limit >= 0.0 {
                        rel <= limit
                    } else {
                        rel >= limit
                    };
                    (pass, format!("{:+.1} %", rel * 100.0))
                }
                Change::LatencyUs(limit) => (
                    a - b <= limit,
                    format!(
                        "{}{}",
                        if a >= b { "+" } else { "-" },
                        show(m, (a - b).abs())
                    ),
                ),
                Change::Points(limit) => {
                    let pp = (a - b) * 100.0;
                    let pass = if limit >= 0.0 {
                        pp <= limit
                    } else {
                        pp >= limit
                    };
                    (pass, format!("{pp:+.2} pp"))
                }
            };
            out.push(Verdict {
                gate: g.text.clone(),
                op: op.clone(),
                pass,
                detail: format!("{} {} → {} ({moved})", m.name(), show(m, b), show(m, a)),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(p99_ms: f64, rate: f64, errors: f64) -> OpFigures {
        OpFigures {
            latency_us: vec![(990, p99_ms * 1e3)],
            mean_us: Some(p99_ms * 500.0),
            rate: Some(rate),
            error_share: Some(errors),
        }
    }

    #[test]
    fn gates_parse_as_a_review_says_them() {
        let g: Gate = "p99 +10%".parse().unwrap();
        assert_eq!(
            (g.op, g.metric, g.change),
            (None, Metric::Latency(990), Change::Relative(0.1))
        );
        let g: Gate = "game.state p99 +20ms".parse().unwrap();
        assert_eq!(g.op.as_deref(), Some("game.state"));
        assert_eq!(g.change, Change::LatencyUs(20_000.0));
        assert_eq!(
            "req/s -5%".parse::<Gate>().unwrap().change,
            Change::Relative(-0.05)
        );
        assert_eq!(
            "errors +0.5pp".parse::<Gate>().unwrap().change,
            Change::Points(0.5)
        );
        assert_eq!("* max +1s".parse::<Gate>().unwrap().op, None);
    }

    #[test]
    fn a_gate_that_does_not_parse_says_why_and_shows_the_syntax() {
        for (text, why) in [
            ("p99", "1 words; a gate has two or three"),
            ("p98 +10%", "`p98` is not a metric"),
            ("p99 10%", "needs a sign"),
            ("p99 +ten%", "`ten` is not a number"),
            ("req/s +5ms", "`+5ms` is a latency; `req/s` changes by %"),
            ("p99 +1pp", "pp (percentage points) is for errors"),
            ("p99 -5ms", "a latency gate fails on a rise"),
            ("p99 +5", "has no unit"),
            ("", "it is empty"),
        ] {
            let e = text.parse::<Gate>().unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
            assert!(e.contains("e.g. `p99 +10%`"), "{e}");
        }
    }

    #[test]
    fn gates_fail_on_the_change_they_name_and_on_what_they_cannot_check() {
        let ops = vec![
            (
                "game.state".to_owned(),
                Some(figures(100.0, 400.0, 0.001)),
                Some(figures(115.0, 370.0, 0.008)),
            ),
            (
                "game.move".to_owned(),
                Some(figures(50.0, 100.0, 0.0)),
                Some(figures(52.0, 100.0, 0.0)),
            ),
            ("lobby".to_owned(), Some(figures(9.0, 10.0, 0.0)), None),
        ];
        let gates: Vec<Gate> = [
            "game.state p99 +10%",
            "game.move p99 +10%",
            "game.state p99 +20ms",
            "req/s -5%",
            "errors +0.5pp",
            "nope p99 +1%",
        ]
        .iter()
        .map(|g| g.parse().unwrap())
        .collect();
        let v = check(&gates, &ops);
        let verdict = |gate: &str, op: &str| {
            v.iter()
                .find(|x| x.gate == gate && x.op == op)
                .unwrap_or_else(|| panic!("no verdict for {gate} on {op}: {v:?}"))
        };
        let p99 = verdict("game.state p99 +10%", "game.state");
        assert!(!p99.pass, "{p99}");
        assert_eq!(p99.detail, "p99 100ms → 115ms (+15.0 %)");
        assert!(verdict("game.move p99 +10%", "game.move").pass);
        assert!(verdict("game.state p99 +20ms", "game.state").pass);
        assert!(
            !verdict("req/s -5%", "game.state").pass,
            "400 → 370 is -7.5 %"
        );
        assert!(verdict("req/s -5%", "game.move").pass);
        let lobby = verdict("req/s -5%", "lobby");
        assert!(
            !lobby.pass && lobby.detail == "cannot be checked: the run after has no such op",
            "{lobby}"
        );
        let e = verdict("errors +0.5pp", "game.state");
        assert!(!e.pass && e.detail.ends_with("(+0.70 pp)"), "{e}");
        let none = verdict("nope p99 +1%", "nope");
        assert!(!none.pass && none.detail == "no such op in either run");
        assert_eq!(
            p99.to_string(),
            "FAIL `game.state p99 +10%` on game.state: p99 100ms → 115ms (+15.0 %)"
        );
    }
}
