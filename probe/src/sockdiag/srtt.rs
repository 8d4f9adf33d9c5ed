//! The srtt of a destination's ESTABLISHED sockets, summarised.

use probe_common::Log2Hist;

/// srtt of the ESTABLISHED sockets toward one destination.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SrttSummary {
    /// Sockets with an srtt.
    pub count: u64,
    /// Smallest srtt, µs.
    pub min_us: u32,
    /// Median (the lower middle value), µs.
    pub p50_us: u32,
    /// Largest srtt, µs.
    pub max_us: u32,
    /// Mean, µs (rounded down).
    pub mean_us: u32,
    /// The log2 histogram of the values.
    pub log2: Log2Hist,
}

impl SrttSummary {
    /// Summarises srtt values; `None` when there are none.
    pub fn of(values: &mut [u32]) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        let n = values.len();
        let sum: u64 = values.iter().map(|&v| u64::from(v)).sum();
        let mut log2 = Log2Hist::default();
        for &v in values.iter() {
            log2.record(u64::from(v));
        }
        Some(Self {
            count: n as u64,
            min_us: values[0],
            p50_us: values[(n - 1) / 2],
            max_us: values[n - 1],
            mean_us: (sum / n as u64) as u32,
            log2,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srtt_histogram_buckets_are_powers_of_two() {
        let s = SrttSummary::of(&mut [0, 1, 2, 3, 4, 1000, 1023, 1024]).unwrap();
        // Buckets `[2^i, 2^(i+1))` as everywhere in herd (0 and 1 share the first).
        let b: Vec<(u64, u64)> = (0..probe_common::HIST_BUCKETS)
            .filter(|&i| s.log2.0[i] > 0)
            .map(|i| (Log2Hist::upper(i), s.log2.0[i]))
            .collect();
        assert_eq!(b, vec![(2, 2), (4, 2), (8, 1), (1024, 2), (2048, 1)]);
        assert_eq!((s.min_us, s.p50_us, s.max_us), (0, 3, 1024));
        assert!(SrttSummary::of(&mut []).is_none());
    }
}
