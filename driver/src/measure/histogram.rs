//! HdrHistograms in microseconds and their percentile summaries.

use hdrhistogram::Histogram;

use crate::report::Latency;

/// Significant digits: 0.1 % resolution at any magnitude, a few hundred KiB per histogram
/// at most, whatever the number of samples.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// An empty latency histogram in microseconds that grows to any latency it is given.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new(SIGNIFICANT_DIGITS).expect("3 significant digits is within hdrhistogram's 0..=5")
}

/// Records one latency; a value past what an auto-resizing histogram can hold (centuries)
/// is clamped rather than lost.
pub fn record(h: &mut Histogram<u64>, us: u64) {
    if h.record(us).is_err() {
        h.saturating_record(us);
    }
}

/// The percentiles a report shows.
pub fn latency(h: &Histogram<u64>) -> Latency {
    if h.is_empty() {
        return Latency::default();
    }
    Latency {
        p50_us: h.value_at_quantile(0.5),
        p90_us: h.value_at_quantile(0.9),
        p99_us: h.value_at_quantile(0.99),
        p999_us: h.value_at_quantile(0.999),
        max_us: h.max(),
        mean_us: h.mean(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_within_three_digits() {
        let mut h = new_histogram();
        for v in 1..=10_000u64 {
            record(&mut h, v * 10);
        }
        let l = latency(&h);
        let near =
            |got: u64, want: u64| (got as f64 - want as f64).abs() <= want as f64 * 0.001 + 1.0;
        assert!(near(l.p50_us, 50_000), "{l:?}");
        assert!(near(l.p90_us, 90_000), "{l:?}");
        assert!(near(l.p99_us, 99_000), "{l:?}");
        assert!(near(l.p999_us, 99_900), "{l:?}");
        assert!(near(l.max_us, 100_000), "{l:?}");
    }

    #[test]
    fn merged_histograms_equal_one_histogram() {
        let (mut a, mut b, mut all) = (new_histogram(), new_histogram(), new_histogram());
        for v in 0..5_000u64 {
            let us = (v * 7919) % 200_000 + 1;
            record(if v % 2 == 0 { &mut a } else { &mut b }, us);
            record(&mut all, us);
        }
        a.add(&b).unwrap();
        assert_eq!(latency(&a), latency(&all));
        assert_eq!(a.len(), 5_000);
    }

    #[test]
    fn empty_is_zero() {
        assert_eq!(latency(&new_histogram()), Latency::default());
    }
}
