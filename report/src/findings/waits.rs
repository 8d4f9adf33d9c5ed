//! What the findings on the probe's waits share: which probe intervals are the load's, the
//! phase each falls in, and its time since the start, all read from the rows.

use herd_model::{PhaseResult, ProbeInterval, RunData};

use crate::model::phase_at;

/// The name a run without phases (a probe-only run) gives its intervals.
pub(super) const WHOLE_RUN: &str = "the run";

/// One probe interval with the phase it fell in and its start and end in seconds since the
/// run's start.
pub(super) struct At<'a> {
    /// The interval.
    pub iv: &'a ProbeInterval,
    /// Its phase (`before` / `after` outside the plan, [`WHOLE_RUN`] without phases).
    pub phase: String,
    /// Start, s since the run's start.
    pub start_s: f64,
    /// End, s since the run's start.
    pub end_s: f64,
}

impl At<'_> {
    /// The interval's length, s.
    pub fn secs(&self) -> f64 {
        self.end_s - self.start_s
    }

    /// True outside the plan's phases (before its first, after its last).
    pub fn outside(&self) -> bool {
        self.phase == "before" || self.phase == "after"
    }
}

/// Every probe interval with its phase, in order. The phases are the plan's (steps, soak,
/// rate steps, routes); a run without any (the probe alone) has one, [`WHOLE_RUN`].
pub(super) fn intervals(d: &RunData) -> Vec<At<'_>> {
    let mono0 = d.meta.mono_start_ns.max(0) as u64;
    let steps: Vec<&PhaseResult> = d.phases.iter().filter(|s| s.index.is_some()).collect();
    d.probe
        .iter()
        .map(|iv| {
            let end = iv.at_ns.saturating_sub(mono0);
            let start = iv
                .at_ns
                .saturating_sub(iv.interval_ns)
                .saturating_sub(mono0);
            let phase = if steps.is_empty() {
                WHOLE_RUN.to_owned()
            } else {
                phase_at(&steps, end / 1_000_000).0
            };
            At {
                iv,
                phase,
                start_s: start as f64 / 1e9,
                end_s: end as f64 / 1e9,
            }
        })
        .collect()
}

/// The intervals of the load: those in the plan's phases ([`WHOLE_RUN`]'s all).
pub(super) fn load(d: &RunData) -> Vec<At<'_>> {
    intervals(d).into_iter().filter(|a| !a.outside()).collect()
}

/// `t = a–b s` of a stretch of intervals, to a tenth of a second under 10 s.
pub(super) fn span(a: f64, b: f64) -> String {
    if b < 10.0 {
        format!("t = {a:.1}–{b:.1} s")
    } else {
        format!("t = {a:.0}–{b:.0} s")
    }
}

/// Seconds as a finding writes them: one decimal under 10 s, whole seconds above.
pub(super) fn secs(s: f64) -> String {
    if s < 10.0 {
        format!("{s:.1} s")
    } else {
        format!("{s:.0} s")
    }
}

/// `n` and its noun, singular for one: `1 SYN retry`, `3 SYN retries`.
pub(super) fn count(v: u64, one: &str, many: &str) -> String {
    format!("{v} {}", if v == 1 { one } else { many })
}
