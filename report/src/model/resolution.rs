//! Which resolution each part of the timeline has: an hours-long run's older rows are rolled
//! up into 1 s and 10 s rows (herd-store's roll-up policy), the newest kept as recorded.

use herd_model::{DriverInterval, RolledUp, RunData};

use crate::units;

/// One stretch of the timeline at one resolution.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Stretch {
    /// Seconds since the run's start.
    pub from_s: f64,
    /// Seconds since the run's start.
    pub to_s: f64,
    /// The rows' resolution, ms; None at the run's own interval (not rolled up).
    pub every_ms: Option<u64>,
}

/// The stretches of the driver's timeline, in order.
pub(crate) fn stretches(driver: &[DriverInterval]) -> Vec<Stretch> {
    let mut out: Vec<Stretch> = Vec::new();
    for iv in driver {
        let every_ms = iv.rolled_up.map(|r| r.every_ms.max(1));
        let from_s = iv.end_ms.saturating_sub(iv.duration_ms) as f64 / 1e3;
        let to_s = iv.end_ms as f64 / 1e3;
        match out.last_mut() {
            Some(s) if s.every_ms == every_ms => s.to_s = to_s,
            _ => out.push(Stretch {
                from_s,
                to_s,
                every_ms,
            }),
        }
    }
    out
}

/// A note saying each stretch's resolution, when any part of the run was rolled up.
pub(crate) fn note(d: &RunData) -> Option<String> {
    let parts = stretches(&d.driver);
    if parts.iter().all(|s| s.every_ms.is_none()) {
        return None;
    }
    // The run's own interval: the commonest length of the rows that were not rolled up.
    let mut lengths: Vec<u64> = d
        .driver
        .iter()
        .filter(|i| i.rolled_up.is_none())
        .map(|i| i.duration_ms)
        .collect();
    lengths.sort_unstable();
    let own = lengths.get(lengths.len() / 2).copied();
    let intervals: u64 = d
        .driver
        .iter()
        .map(|i| RolledUp::of_driver(i).intervals)
        .sum();
    let said: Vec<String> = parts
        .iter()
        .map(|s| {
            let at = match s.every_ms {
                Some(ms) => format!("{} rows", units::latency(ms * 1000)),
                None => match own {
                    Some(ms) => format!("the run's own {} intervals", units::latency(ms * 1000)),
                    None => "the run's own intervals".into(),
                },
            };
            format!("{:.0}–{:.0} s: {at}", s.from_s, s.to_s)
        })
        .collect();
    Some(format!(
        "Timeline resolution: the run's older intervals were rolled up as it ran ({} rows \
         hold its {intervals} intervals): {}. Rolled-up rows merge their intervals exactly \
         (counts summed, latency histograms merged, gauges at their peak), so every table \
         is what the full resolution gives; a chart point or a timeline row stands for its \
         row's length.",
        d.driver.len(),
        said.join("; ")
    ))
}
