//! The arithmetic of CPU usage over time: windows between two readings, the busiest of them
//! (burst) and the trailing average (sustained). Pure functions.

use std::collections::VecDeque;

/// A point of the CPU usage timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsagePoint {
    /// When, on the caller's monotonic clock (ns).
    pub at_ns: u64,
    /// Cumulative CPU time used by then (ns).
    pub usage_ns: u64,
}

/// A stretch of time and the CPU time used in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Start (ns).
    pub start_ns: u64,
    /// End (ns), never before the start.
    pub end_ns: u64,
    /// CPU time used in between (ns).
    pub used_ns: u64,
}

impl Window {
    /// The window between two points. A counter that went backwards (the cgroup was removed
    /// and recreated under the same path) counts as 0, never as a huge delta.
    pub fn between(a: UsagePoint, b: UsagePoint) -> Self {
        Self {
            start_ns: a.at_ns,
            end_ns: b.at_ns.max(a.at_ns),
            used_ns: b.usage_ns.saturating_sub(a.usage_ns),
        }
    }

    /// Its length (ns).
    pub fn len_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }

    /// Average cores used over it.
    pub fn cores(&self) -> f64 {
        cores(self.used_ns, self.len_ns())
    }
}

/// Average cores: CPU time over wall time; 0 for an empty span.
pub fn cores(used_ns: u64, over_ns: u64) -> f64 {
    if over_ns == 0 {
        0.0
    } else {
        used_ns as f64 / over_ns as f64
    }
}

/// `part / whole`, 0 when `whole` is 0 (no period elapsed: nothing could be throttled).
pub fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// The busier of the busiest window so far and `next`, compared exactly (cross-multiplied in
/// integers, no float rounding); an empty window never wins, and on a tie the earlier stays.
pub fn busier(busiest: Option<Window>, next: Window) -> Option<Window> {
    if next.len_ns() == 0 {
        return busiest;
    }
    match busiest {
        Some(b)
            if u128::from(b.used_ns) * u128::from(next.len_ns())
                >= u128::from(next.used_ns) * u128::from(b.len_ns()) =>
        {
            Some(b)
        }
        _ => Some(next),
    }
}

/// Drops points older than `span_ns` before the newest, keeping at least one.
pub fn prune(history: &mut VecDeque<UsagePoint>, span_ns: u64) {
    let Some(newest) = history.back().copied() else {
        return;
    };
    while history.len() > 1
        && history
            .front()
            .is_some_and(|p| p.at_ns.saturating_add(span_ns) < newest.at_ns)
    {
        history.pop_front();
    }
}

/// The window from the oldest to the newest point of a pruned history: the trailing average
/// over at most [`prune`]'s span (shorter while the history is younger than that).
pub fn trailing(history: &VecDeque<UsagePoint>) -> Option<Window> {
    Some(Window::between(*history.front()?, *history.back()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroupfs::fake::MS;

    #[test]
    fn window_arithmetic() {
        let p = |at_ms: u64, used_ms: u64| UsagePoint {
            at_ns: at_ms * MS,
            usage_ns: used_ms * MS,
        };
        let w = Window::between(p(100, 10), p(200, 35));
        assert_eq!(
            (w.len_ns(), w.used_ns, w.cores()),
            (100 * MS, 25 * MS, 0.25)
        );
        // A late poll's longer window is compared by rate, not by CPU time.
        let long = Window::between(p(200, 35), p(350, 65)); // 30 ms in 150 ms = 0.2
        assert_eq!(busier(Some(w), long), Some(w));
        let faster = Window::between(p(350, 65), p(400, 80)); // 15 ms in 50 ms = 0.3
        assert_eq!(busier(Some(w), faster), Some(faster));
        // Ties keep the earlier window; empty windows never win.
        let same = Window::between(p(400, 80), p(500, 105));
        assert_eq!(busier(Some(w), same), Some(w));
        let empty = Window::between(p(500, 105), p(500, 105));
        assert_eq!(busier(None, empty), None);
        assert_eq!(busier(Some(w), empty), Some(w));
        // Exact comparison where floats would tie: 1/3 vs 333_333_333/1e9.
        let third = Window {
            start_ns: 0,
            end_ns: 3,
            used_ns: 1,
        };
        let almost = Window {
            start_ns: 0,
            end_ns: 1_000_000_000,
            used_ns: 333_333_333,
        };
        assert_eq!(busier(Some(almost), third), Some(third));

        assert_eq!(cores(5, 0), 0.0);
        assert_eq!(share(0, 0), 0.0);
        assert_eq!(share(3, 4), 0.75);

        let mut h: VecDeque<UsagePoint> = (0..=10).map(|k| p(k * 1_000, k * 100)).collect();
        prune(&mut h, 4_000 * MS);
        assert_eq!(h.front(), Some(&p(6_000, 600)));
        assert_eq!(trailing(&h).unwrap().cores(), 0.1);
        let mut one = VecDeque::from([p(5, 5)]);
        prune(&mut one, 0);
        assert_eq!(one.len(), 1);
        assert_eq!(trailing(&one).unwrap().len_ns(), 0);
        assert_eq!(trailing(&VecDeque::new()), None);
    }
}
