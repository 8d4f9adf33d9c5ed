//! Durations and latencies as people write and read them: one parser for every duration on
//! herd's command lines and one formatter for every latency herd prints.

use std::time::Duration;

/// Parses durations like `500ms`, `10s`, `2m` (humantime's syntax, as every Unix tool).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (write e.g. 500ms, 10s, 2m)"))
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

#[cfg(test)]
mod tests {
    use super::*;

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
