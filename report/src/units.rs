//! Cells in the units people use — the one place herd turns a number into text: a latency
//! as wrk and k6 print it (`850µs`, `1.2ms`, `1.25s`), a share with the digits that make it readable (0.0046 %,
//! 3.2 %), a ratio with significant digits (0.0046, 0.53), CPU in cores with the share of the
//! quota beside it, and a log2 bucket's bound as a duration (`≤ 1.0s`).

/// A latency in µs as one short figure, the way wrk, k6 and oha print them: `850µs`,
/// `1.2ms`, `48ms`, `1.25s`. Every human-readable latency herd prints goes through here.
pub fn latency(us: u64) -> String {
    match us {
        0..1_000 => format!("{us}µs"),
        1_000..10_000 => format!("{:.1}ms", us as f64 / 1e3),
        10_000..1_000_000 => format!("{}ms", (us as f64 / 1e3).round() as u64),
        _ => format!("{:.2}s", us as f64 / 1e6),
    }
}

/// A percentage with two significant digits below 1 % (`0.0046 %`, `0.25 %`) and one
/// decimal above (`3.2 %`, `100.0 %`).
pub fn percent(pct: f64) -> String {
    format!("{} %", significant(pct, 1.0, 1))
}

/// A ratio with two significant digits below 0.1 (`0.0046`, `0.032`) and two decimals
/// above (`0.53`, `1.02`): small ratios do not read as `0.00`.
pub fn ratio(v: f64) -> String {
    significant(v, 0.1, 2)
}

/// `v` with two significant digits when it is below `small`, `decimals` decimals otherwise;
/// 0 is `0`.
fn significant(v: f64, small: f64, decimals: usize) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if v.abs() >= small {
        return format!("{v:.decimals$}");
    }
    // Two significant digits: as many decimals as the first non-zero digit needs, plus one.
    let digits = (-v.abs().log10()).ceil() as usize + 1;
    format!("{v:.digits$}")
}

/// CPU in cores, with the share of the quota when there is one: `0.71 cores (142 % of
/// 0.50)`, `0.12 cores`.
pub fn cores(used: f64, quota: Option<f64>) -> String {
    match quota {
        Some(q) if q > 0.0 => format!("{used:.2} cores ({:.0} % of {q:.2})", 100.0 * used / q),
        _ => format!("{used:.2} cores"),
    }
}

/// A log2 bucket's upper bound in `unit_us` microseconds as a duration: `≤ 128µs`,
/// `≤ 1.05s`; the open last bucket is `> 33.6s` (2^25 units).
pub fn bound(v: u64, unit_us: u64) -> String {
    if v == u64::MAX {
        return format!("> {}", latency((1u64 << 25).saturating_mul(unit_us)));
    }
    format!("≤ {}", latency(v.saturating_mul(unit_us)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_read_like_wrk_and_k6() {
        assert_eq!(latency(850), "850µs");
        assert_eq!(latency(1_234), "1.2ms");
        assert_eq!(latency(48_400), "48ms");
        assert_eq!(latency(1_250_000), "1.25s");
    }

    #[test]
    fn small_figures_keep_their_digits() {
        assert_eq!(ratio(0.0046), "0.0046");
        assert_eq!(ratio(0.032), "0.032");
        assert_eq!(ratio(0.53), "0.53");
        assert_eq!(ratio(0.0), "0");
        assert_eq!(percent(0.46), "0.46 %");
        assert_eq!(percent(3.24), "3.2 %");
        assert_eq!(percent(100.0), "100.0 %");
        assert_eq!(cores(0.71, Some(0.5)), "0.71 cores (142 % of 0.50)");
        assert_eq!(cores(0.12, None), "0.12 cores");
        assert_eq!(bound(128, 1), "≤ 128µs");
        assert_eq!(bound(1 << 20, 1), "≤ 1.05s");
        assert_eq!(bound(16_384, 1_000), "≤ 16.38s");
        assert_eq!(bound(u64::MAX, 1), "> 33.55s");
    }
}
