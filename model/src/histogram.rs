//! HdrHistograms in microseconds, their percentile summaries, and their encoded form
//! ([`LatencyHistogram`]) that every driver row carries, the store keeps and the report merges.

use base64::Engine as _;
use hdrhistogram::{
    Histogram,
    serialization::{Deserializer, Serializer as _, V2DeflateSerializer},
};
use serde::{Deserialize, Serialize};

/// Latency percentiles in microseconds, from an HdrHistogram with 3 significant digits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50_us: u64,
    /// 90th percentile.
    pub p90_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Largest.
    pub max_us: u64,
    /// Mean.
    pub mean_us: f64,
}

/// A latency histogram (µs) in HdrHistogram's standard compressed V2 encoding, base64 — the
/// form HdrHistogram's own log tools read. Phase and interval results carry one, the store
/// keeps it and exports write it, so any set of them merges into the exact histogram of
/// their samples; percentiles are read from that, never averaged.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct LatencyHistogram(String);

/// A [`LatencyHistogram`] that does not decode (a store row edited by hand, or cut short).
#[derive(Debug, thiserror::Error)]
#[error("a stored latency histogram does not decode: {0}")]
pub struct HistogramError(String);

impl LatencyHistogram {
    /// Encodes `h`.
    pub fn encode(h: &Histogram<u64>) -> Self {
        let mut bytes = Vec::new();
        V2DeflateSerializer::new()
            .serialize(h, &mut bytes)
            .expect("a u64 histogram always encodes into memory");
        Self(base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    /// The histogram itself.
    pub fn decode(&self) -> Result<Histogram<u64>, HistogramError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&self.0)
            .map_err(|e| HistogramError(e.to_string()))?;
        Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|e| HistogramError(format!("{e:?}")))
    }

    /// The base64 text, as an HdrHistogram interval log line carries it.
    pub fn as_base64(&self) -> &str {
        &self.0
    }

    /// The exact histogram of every sample of `hs`: an empty one when `hs` is.
    pub fn merge<'a>(
        hs: impl IntoIterator<Item = &'a LatencyHistogram>,
    ) -> Result<Histogram<u64>, HistogramError> {
        let mut all = new_histogram();
        for h in hs {
            all.add(h.decode()?)
                .expect("auto-resizing histograms always merge");
        }
        Ok(all)
    }
}

impl schemars::JsonSchema for LatencyHistogram {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "LatencyHistogram".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "contentEncoding": "base64",
            "description": "An HdrHistogram of latencies in microseconds, in HdrHistogram's compressed V2 encoding (base64), as an HdrHistogram interval log carries it."
        })
    }
}

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
    fn encoded_histograms_decode_and_merge_exactly() {
        let (mut a, mut b, mut all) = (new_histogram(), new_histogram(), new_histogram());
        for v in 0..5_000u64 {
            let us = (v * 7919) % 2_000_000 + 1;
            record(if v % 3 == 0 { &mut a } else { &mut b }, us);
            record(&mut all, us);
        }
        let (ea, eb) = (LatencyHistogram::encode(&a), LatencyHistogram::encode(&b));
        assert_eq!(ea.decode().unwrap(), a);
        let merged = LatencyHistogram::merge([&ea, &eb]).unwrap();
        assert_eq!(merged, all);
        assert_eq!(latency(&merged), latency(&all));
        // Compressed: a few hundred bytes, not the tens of KiB the counts array takes.
        assert!(ea.as_base64().len() < 8_000, "{}", ea.as_base64().len());
        let json = serde_json::to_string(&ea).unwrap();
        assert_eq!(serde_json::from_str::<LatencyHistogram>(&json).unwrap(), ea);
        assert!(
            LatencyHistogram("bm90IGEgaGlzdG9ncmFt".into())
                .decode()
                .is_err()
        );
        assert_eq!(LatencyHistogram::merge([]).unwrap().len(), 0);
    }

    #[test]
    fn empty_is_zero() {
        assert_eq!(latency(&new_histogram()), Latency::default());
    }
}
