//! Durations as people write them: one parser for every duration on herd's command lines
//! and in scenarios, bounded so that no deadline can overflow.

use std::time::{Duration, Instant};

use tokio::sync::watch;

/// The longest duration herd accepts anywhere (a step, a timeout, a think time, `--grace`):
/// 366 days. A bound keeps every `Instant + Duration` in range (`18446744073709551615s` would
/// panic the first time a deadline is computed) and is far beyond any load test.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// Parses durations like `500ms`, `10s`, `2m` (humantime's syntax, as every Unix tool), up to
/// [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (write e.g. 500ms, 10s, 2m)"))?;
    if d > MAX_DURATION {
        return Err(
            "longer than the longest duration herd accepts, 366 days (`366d`); split a \
                    longer soak into several runs"
                .to_owned(),
        );
    }
    Ok(d)
}

/// `at + d`, at the latest [`MAX_DURATION`] after `at`: a deadline computed from a duration
/// that did not come through [`parse_duration`] cannot overflow.
pub fn deadline<T: std::ops::Add<Duration, Output = T>>(at: T, d: Duration) -> T {
    at + d.min(MAX_DURATION)
}

/// The shortest interval of a timeline: finer ones would be dominated by sampling cost.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Parses a timeline interval: a duration of [`MIN_INTERVAL`] or more.
pub fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < MIN_INTERVAL {
        return Err(format!("{s} is below the 100ms minimum interval"));
    }
    Ok(d)
}

/// Sleeps until `at`; false if the run halted first.
pub(crate) async fn sleep_until(at: Instant, halt: &mut watch::Receiver<bool>) -> bool {
    if *halt.borrow() {
        return false;
    }
    tokio::select! {
        _ = tokio::time::sleep_until(at.into()) => true,
        r = halt.wait_for(|h| *h) => r.is_err(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_beyond_a_year_are_refused_not_overflowed() {
        assert_eq!(parse_duration("366d"), Ok(MAX_DURATION));
        for huge in ["18446744073709551615s", "5124095576030431h", "367d"] {
            let e = parse_duration(huge).unwrap_err();
            assert!(e.contains("366 days"), "{huge}: {e}");
        }
        let now = std::time::Instant::now();
        assert_eq!(deadline(now, Duration::MAX), now + MAX_DURATION);
    }

    #[test]
    fn durations_parse_and_short_intervals_are_refused() {
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert!(
            parse_duration("soon")
                .unwrap_err()
                .contains("write e.g. 500ms")
        );
        assert_eq!(parse_interval("100ms"), Ok(Duration::from_millis(100)));
        assert!(
            parse_interval("50ms")
                .unwrap_err()
                .contains("100ms minimum")
        );
    }
}
