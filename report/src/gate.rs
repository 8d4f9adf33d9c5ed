//! Regression gates for `herd compare --fail-on`: each gate names an op (or every op), a
//! whole-run figure and the change that fails the comparison, in the words of a pull request
//! review: `p99 +10%`, `game.state p99 +20ms`, `req/s -5%`, `errors +0.5pp`; or a container
//! (or every container) and one of its kernel-side waits: `runq_p99 +20%`, `gateway
//! retransmits +0`, `listen_drops +10`.
//!
//! ```text
//! GATE   := [SUBJECT] METRIC CHANGE
//! SUBJECT:= an op's name (op metrics) or a container's (wait metrics); omitted or `*`: every
//!           op, or every container, the two runs have
//! METRIC := p50 | p90 | p99 | p999 | max | mean    (latency, from the merged histogram)
//!         | req/s                                   (throughput over the run)
//!         | errors                                  (share of requests that are errors)
//!         | runq_p99                                (a container's run-queue wait p99, the log2
//!                                                    bound of its worst step)
//!         | runq                                    (its run-queue delay, ms/s, worst step)
//!         | retransmits | syn_retransmits           (segments it retransmitted, all / SYNs)
//!         | listen_drops | oom_kills                (over the load steps)
//! CHANGE := +N% | -N%        relative to the run before
//!         | +N<unit>         an absolute latency increase (us, ms, s): latencies, runq_p99
//!         | +Npp | -Npp      a change of the error share, in percentage points
//!         | +N               a rise of a count by more than N: retransmits, listen_drops, …
//! ```
//!
//! A `+` change fails when the figure grew by more than N, a `-` change when it fell by more
//! than N. A gate whose op is in neither run, or whose figure one run lacks, fails too, with the
//! reason: a gate that cannot be checked must not pass silently.

use std::{fmt, str::FromStr};

/// The syntax, for error messages and `--help`.
pub const SYNTAX: &str = "[OP|CONTAINER] METRIC CHANGE, e.g. `p99 +10%`, `game.state p99 +20ms`, \
     `req/s -5%`, `errors +0.5pp`, `gateway runq_p99 +20%`, `retransmits +0`; METRIC is p50, \
     p90, p99, p999, max, mean, req/s or errors of an op, or runq_p99, runq, retransmits, \
     syn_retransmits, listen_drops or oom_kills of a container; CHANGE is +N% or -N%, +N with a \
     latency unit (us, ms, s), ±Npp for errors, or +N for a count";

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
    /// A container's run-queue wait p99 (log2 bucket bound, µs), its worst step.
    RunqP99,
    /// A container's run-queue delay, ms per second, its worst step.
    Runq,
    /// Segments a container retransmitted (SYNs included), over the load steps.
    Retransmits,
    /// SYNs a container retransmitted, over the load steps.
    SynRetransmits,
    /// SYNs and handshake ACKs a container's listeners dropped, over the load steps.
    ListenDrops,
    /// A container's processes killed by the OOM killer, over the load steps.
    OomKills,
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
            Metric::RunqP99 => "runq_p99",
            Metric::Runq => "runq",
            Metric::Retransmits => "retransmits",
            Metric::SynRetransmits => "syn_retransmits",
            Metric::ListenDrops => "listen_drops",
            Metric::OomKills => "oom_kills",
        }
    }

    fn is_latency(self) -> bool {
        matches!(self, Metric::Latency(_) | Metric::Mean | Metric::RunqP99)
    }

    fn is_count(self) -> bool {
        matches!(
            self,
            Metric::Retransmits | Metric::SynRetransmits | Metric::ListenDrops | Metric::OomKills
        )
    }

    /// Whether the metric is a container's (its subject is a container, not an op).
    pub fn is_container(self) -> bool {
        self.is_count() || matches!(self, Metric::RunqP99 | Metric::Runq)
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
    /// A rise of a count by more than this many.
    Count(f64),
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
        "runq_p99" => Metric::RunqP99,
        "runq" => Metric::Runq,
        "retransmits" => Metric::Retransmits,
        "syn_retransmits" => Metric::SynRetransmits,
        "listen_drops" => Metric::ListenDrops,
        "oom_kills" => Metric::OomKills,
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
    if m.is_count() && body.parse::<f64>().is_ok() {
        if sign < 0.0 {
            return Err(format!(
                "`{s}`: a count gate fails on a rise; write +N or -N%"
            ));
        }
        return Ok(Change::Count(number(body)?));
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
    if m.is_count() {
        return Err(format!("`{s}`: `{}` changes by % or +N", m.name()));
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
            _ => None,
        }
    }
}

/// One container's figures in one run, for [`check_containers`]: `None` when not measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContainerFigures {
    /// Run-queue wait p99 of its worst step, µs (a log2 bucket's upper bound).
    pub runq_p99_us: Option<f64>,
    /// Run-queue delay of its worst step, ms per second.
    pub runq_ms_per_s: Option<f64>,
    /// Segments it retransmitted, SYNs included.
    pub retransmits: Option<f64>,
    /// SYNs it retransmitted.
    pub syn_retransmits: Option<f64>,
    /// SYNs and handshake ACKs its listeners dropped.
    pub listen_drops: Option<f64>,
    /// Processes the OOM killer killed.
    pub oom_kills: Option<f64>,
}

impl ContainerFigures {
    fn get(&self, m: Metric) -> Option<f64> {
        match m {
            Metric::RunqP99 => self.runq_p99_us,
            Metric::Runq => self.runq_ms_per_s,
            Metric::Retransmits => self.retransmits,
            Metric::SynRetransmits => self.syn_retransmits,
            Metric::ListenDrops => self.listen_drops,
            Metric::OomKills => self.oom_kills,
            _ => None,
        }
    }
}

/// What one gate found for one op.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The gate as written.
    pub gate: String,
    /// The op (or, for a wait metric, the container) it was checked on.
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
        Metric::RunqP99 => crate::units::bound(v.round() as u64, 1),
        Metric::Runq => format!("{v:.1} ms/s"),
        _ => format!("{v:.0}"),
    }
}

/// Checks every op gate against the ops of two runs: `ops` holds each op's figures before
/// and after (None when the op is missing from that run). Container gates are left to
/// [`check_containers`].
pub fn check(
    gates: &[Gate],
    ops: &[(String, Option<OpFigures>, Option<OpFigures>)],
) -> Vec<Verdict> {
    let gates: Vec<&Gate> = gates.iter().filter(|g| !g.metric.is_container()).collect();
    verdicts(&gates, ops, OpFigures::get, "op")
}

/// Checks every container gate (`runq_p99`, `retransmits`, …) against the containers of two
/// runs: `containers` holds each one's figures before and after (None when the container is
/// missing from that run).
pub fn check_containers(
    gates: &[Gate],
    containers: &[(String, Option<ContainerFigures>, Option<ContainerFigures>)],
) -> Vec<Verdict> {
    let gates: Vec<&Gate> = gates.iter().filter(|g| g.metric.is_container()).collect();
    verdicts(&gates, containers, ContainerFigures::get, "container")
}

/// What a figure's absence usually means, for the verdict: the run-queue p99 exists only
/// for runs probed with `--runq-waits`.
fn why_missing(m: Metric) -> &'static str {
    match m {
        Metric::RunqP99 => {
            " (a run-queue wait p99 needs `herd run --runq-waits`: by default the probe counts \
             the waits and sums them, it does not time each one; `runq` gates the delay per \
             second)"
        }
        _ => "",
    }
}

fn verdicts<F>(
    gates: &[&Gate],
    subjects: &[(String, Option<F>, Option<F>)],
    get: fn(&F, Metric) -> Option<f64>,
    kind: &str,
) -> Vec<Verdict> {
    let mut out = Vec::new();
    for g in gates {
        let named = |op: &String| g.op.as_ref().is_none_or(|want| want == op);
        // A gate over every container skips the containers neither run measured it for (a
        // cgroup without PSI, the host's row): they cannot regress. Named, one still fails.
        let measured = |(_, b, a): &&(String, Option<F>, Option<F>)| {
            g.op.is_some()
                || kind != "container"
                || [b, a]
                    .iter()
                    .any(|f| f.as_ref().and_then(|f| get(f, g.metric)).is_some())
        };
        let matching: Vec<_> = subjects
            .iter()
            .filter(|(op, _, _)| named(op))
            .filter(measured)
            .collect();
        if matching.is_empty() && g.op.is_none() && kind == "container" {
            out.push(Verdict {
                gate: g.text.clone(),
                op: "every container".into(),
                pass: false,
                detail: format!(
                    "no container has {} in either run{}",
                    g.metric.name(),
                    why_missing(g.metric)
                ),
            });
        } else if matching.is_empty() {
            out.push(Verdict {
                gate: g.text.clone(),
                op: g.op.clone().unwrap_or_else(|| format!("every {kind}")),
                pass: false,
                detail: format!("no such {kind} in either run"),
            });
        }
        for (op, before, after) in matching {
            let m = g.metric;
            let (b, a) = (
                before.as_ref().and_then(|f| get(f, m)),
                after.as_ref().and_then(|f| get(f, m)),
            );
            let (Some(b), Some(a)) = (b, a) else {
                let which = match (before.is_some(), after.is_some()) {
                    (false, _) => format!("the run before has no such {kind}"),
                    (_, false) => format!("the run after has no such {kind}"),
                    _ => format!("a run has no value for it{}", why_missing(m)),
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
                        crate::units::latency((a - b).abs().round() as u64)
                    ),
                ),
                Change::Count(limit) => (a - b <= limit, format!("{:+.0}", a - b)),
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

    #[test]
    fn wait_gates_parse_with_a_container_or_for_every_container() {
        let g: Gate = "runq_p99 +20%".parse().unwrap();
        assert_eq!(
            (g.op, g.metric, g.change),
            (None, Metric::RunqP99, Change::Relative(0.2))
        );
        let g: Gate = "gateway runq_p99 +1ms".parse().unwrap();
        assert_eq!(
            (g.op.as_deref(), g.change),
            (Some("gateway"), Change::LatencyUs(1_000.0))
        );
        assert_eq!(
            "gateway retransmits +0".parse::<Gate>().unwrap().change,
            Change::Count(0.0)
        );
        assert_eq!(
            "listen_drops +10".parse::<Gate>().unwrap().metric,
            Metric::ListenDrops
        );
        assert_eq!(
            "syn_retransmits +50%".parse::<Gate>().unwrap().change,
            Change::Relative(0.5)
        );
        assert_eq!(
            "* oom_kills +0".parse::<Gate>().unwrap().metric,
            Metric::OomKills
        );
        assert_eq!(
            "runq -10%".parse::<Gate>().unwrap().change,
            Change::Relative(-0.1)
        );
        for (text, why) in [
            ("retransmits -3", "a count gate fails on a rise"),
            (
                "retransmits +3ms",
                "`+3ms` is a latency; `retransmits` changes by %",
            ),
            ("runq +5", "has no unit"),
            ("oom_kills +1pp", "pp (percentage points) is for errors"),
            ("listen_drops +many", "`listen_drops` changes by % or +N"),
            ("runq_p98 +10%", "`runq_p98` is not a metric"),
        ] {
            let e = text.parse::<Gate>().unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
            assert!(e.contains("`gateway runq_p99 +20%`"), "{e}");
        }
    }

    #[test]
    fn wait_gates_are_checked_on_containers_and_op_gates_on_ops_only() {
        let fig = |p99: f64, retrans: f64| ContainerFigures {
            runq_p99_us: Some(p99),
            runq_ms_per_s: Some(10.0),
            retransmits: Some(retrans),
            syn_retransmits: Some(0.0),
            listen_drops: Some(0.0),
            oom_kills: None,
        };
        let containers = vec![
            (
                "gateway".to_owned(),
                Some(fig(512.0, 0.0)),
                Some(fig(1024.0, 3.0)),
            ),
            (
                "backend".to_owned(),
                Some(fig(64.0, 2.0)),
                Some(fig(64.0, 2.0)),
            ),
        ];
        let gates: Vec<Gate> = [
            "runq_p99 +20%",
            "gateway retransmits +0",
            "backend retransmits +0",
            "oom_kills +0",
            "p99 +10%",
            "db listen_drops +0",
        ]
        .iter()
        .map(|g| g.parse().unwrap())
        .collect();
        let v = check_containers(&gates, &containers);
        let verdict = |gate: &str, on: &str| {
            v.iter()
                .find(|x| x.gate == gate && x.op == on)
                .unwrap_or_else(|| panic!("no verdict for {gate} on {on}: {v:?}"))
        };
        let p99 = verdict("runq_p99 +20%", "gateway");
        assert!(!p99.pass, "{p99}");
        assert_eq!(p99.detail, "runq_p99 ≤ 512µs → ≤ 1.0ms (+100.0 %)");
        assert!(verdict("runq_p99 +20%", "backend").pass);
        let r = verdict("gateway retransmits +0", "gateway");
        assert!(!r.pass && r.detail == "retransmits 0 → 3 (+3)", "{r}");
        assert!(verdict("backend retransmits +0", "backend").pass);
        // No container has it: one failing verdict for the gate, not a pass by skipping.
        let oom = verdict("oom_kills +0", "every container");
        assert!(!oom.pass && oom.detail == "no container has oom_kills in either run");
        let db = verdict("db listen_drops +0", "db");
        assert!(!db.pass && db.detail == "no such container in either run");
        assert!(
            !v.iter().any(|x| x.gate == "p99 +10%"),
            "an op gate is not checked on containers"
        );
        assert!(check(&gates, &[]).iter().all(|x| x.gate == "p99 +10%"));
    }
}
