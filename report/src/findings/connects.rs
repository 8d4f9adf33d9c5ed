//! Findings about reaching the target at all: connects that failed, every one of them or a
//! large share.

use super::{Finding, n};
use herd_model::{
    FAILED_CONNECTS_MIN as MIN_FAILED, FAILED_CONNECTS_SHARE as FAILED_SHARE, RunData,
};

/// Connects to the target failed: all of them (the run measured nothing about it), or at
/// least 5 % of at least 10. Names the target, the counts, each phase's failures and what the
/// connect backoff held back.
pub fn target_unreachable(d: &RunData) -> Option<Finding> {
    let fin = d.final_report.as_ref();
    // The final report counts the pool's opening too; phase totals are what a killed run has.
    let (connects, failed) = fin.map_or_else(
        || {
            d.phases
                .iter()
                .fold((0, 0), |(c, e), p| (c + p.connects, e + p.connect_errors))
        },
        |f| (f.connects, f.connect_errors),
    );
    let tried = connects + failed;
    if failed == 0 {
        return None;
    }
    let share = failed as f64 / tried as f64;
    if connects > 0 && (failed < MIN_FAILED || share < FAILED_SHARE) {
        return None;
    }
    let target = fin.map_or("the target", |f| f.target.as_str());
    let pct = share * 100.0;
    let mut evidence = vec![format!(
        "connects to {target}: {} tried, {} opened, {} failed ({pct:.0} %)",
        n(tried),
        n(connects),
        n(failed)
    )];
    evidence.extend(d.phases.iter().filter(|p| p.connect_errors > 0).map(|p| {
        format!(
            "{}: {} connects, {} connect errors",
            p.phase,
            n(p.connects),
            n(p.connect_errors)
        )
    }));
    let (held, held_ms) = fin.map_or((0, 0), |f| (f.connects_held, f.connect_backoff_ms));
    if held > 0 {
        evidence.push(format!(
            "connect backoff: {} connects held back, {} ms waited in all",
            n(held),
            n(held_ms)
        ));
    }
    let title = if connects == 0 {
        format!(
            "every one of the run's {} connects to {target} failed: the run measured nothing \
             about the target",
            n(failed)
        )
    } else {
        format!(
            "{pct:.0} % of the connects to {target} failed ({} of {})",
            n(failed),
            n(tried)
        )
    };
    Some(
        Finding::new(
            "target_unreachable",
            title,
            format!(
                "Is the target up and listening at {target}, and reachable from the driver? \
                 The `transport_error.connect` rows say how each connect failed (refused, timed \
                 out, no route). After consecutive failed connects each player waits 50 ms, \
                 doubling to 2 s, before it tries again, so a target that is down is not \
                 flooded and the failed count is far below what the players would have tried."
            ),
            evidence,
        )
        .number("connects", connects as f64)
        .number("connect_errors", failed as f64)
        .number("failed_share", share)
        .number("connects_held", held as f64)
        .number("connect_backoff_ms", held_ms as f64),
    )
}
