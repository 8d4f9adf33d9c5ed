//! HdrHistogram interval logs: one file per op, one line per driver interval, in the format
//! HdrHistogram's own `HistogramLogProcessor` (and the Rust crate's `IntervalLogIterator`)
//! read. Values are microseconds; `Interval_Max` is written in milliseconds
//! (`#[MaxValueDivisor: 1000.000]`), so `HistogramLogProcessor -i FILE
//! -outputValueUnitRatio 1000` prints percentiles in milliseconds.

use std::{
    path::{Path, PathBuf},
    time::{Duration, UNIX_EPOCH},
};

use hdrhistogram::serialization::{V2DeflateSerializer, interval_log::IntervalLogWriterBuilder};

use herd_model::LatencyHistogram;
use herd_model::RunData;

/// Why an interval log could not be written.
#[derive(Debug, thiserror::Error)]
pub enum HdrLogError {
    /// The file could not be created or written.
    #[error("writing the HdrHistogram log {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A stored histogram does not decode.
    #[error("run {run}, interval {interval}, op {op}: {source}")]
    Histogram {
        /// The run.
        run: i64,
        /// The driver interval's index.
        interval: u64,
        /// The op.
        op: String,
        /// The cause.
        source: herd_model::HistogramError,
    },
}

/// A file name for `op` (`game.state`, `hammer:game.move`): letters, digits, `.`, `-` and `_`
/// kept, anything else `_`.
fn file_stem(op: &str) -> String {
    op.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes `run-<id>-<op>.hlog` into `dir` for every op with recorded intervals; returns the
/// files. Intervals recorded before herd kept histograms have none and are left out (the
/// file's header says how many).
pub fn write_logs(d: &RunData, dir: &Path) -> Result<Vec<PathBuf>, HdrLogError> {
    let mut ops: Vec<&str> = Vec::new();
    for iv in &d.driver {
        for o in &iv.ops {
            if !ops.contains(&o.op.as_str()) {
                ops.push(&o.op);
            }
        }
    }
    let start = UNIX_EPOCH + Duration::from_millis(d.meta.started_unix_ms.max(0) as u64);
    let mut files = Vec::new();
    for op in ops {
        let path = dir.join(format!("run-{}-{}.hlog", d.meta.id, file_stem(op)));
        let io = |source| HdrLogError::Io {
            path: path.clone(),
            source,
        };
        let mut buf = Vec::new();
        let mut serializer = V2DeflateSerializer::new();
        let missing = d
            .driver
            .iter()
            .flat_map(|iv| &iv.ops)
            .filter(|o| o.op == op && o.histogram.is_none())
            .count();
        {
            let mut b = IntervalLogWriterBuilder::new();
            b.add_comment(&format!(
                "herd run {} ({}), op {op}: latency in microseconds, one histogram per {} interval",
                d.meta.id, d.meta.name, "driver"
            ))
            .with_start_time(start)
            .with_base_time(start)
            .with_max_value_divisor(1000.0);
            if missing > 0 {
                b.add_comment(&format!(
                    "{missing} interval(s) recorded without a histogram are left out"
                ));
            }
            let mut w = b.begin_log_with(&mut buf, &mut serializer).map_err(io)?;
            for iv in &d.driver {
                let Some(o) = iv.ops.iter().find(|o| o.op == op) else {
                    continue;
                };
                let Some(h) = &o.histogram else { continue };
                let hist = decode(d, iv.index, op, h)?;
                let start = Duration::from_millis(iv.end_ms.saturating_sub(iv.duration_ms));
                w.write_histogram(&hist, start, Duration::from_millis(iv.duration_ms), None)
                    .map_err(|e| {
                        io(std::io::Error::other(format!(
                            "encoding interval {}: {e}",
                            iv.index
                        )))
                    })?;
            }
        }
        crate::write_whole(&path, &buf).map_err(io)?;
        files.push(path);
    }
    Ok(files)
}

fn decode(
    d: &RunData,
    interval: u64,
    op: &str,
    h: &LatencyHistogram,
) -> Result<hdrhistogram::Histogram<u64>, HdrLogError> {
    h.decode().map_err(|source| HdrLogError::Histogram {
        run: d.meta.id,
        interval,
        op: op.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use hdrhistogram::serialization::{
        Deserializer,
        interval_log::{IntervalLogIterator, LogEntry},
    };
    use herd_model::histogram::{new_histogram, record};

    use super::*;

    #[test]
    fn each_op_gets_a_log_that_hdrhistograms_own_reader_reads_back_exactly() {
        let mut d = crate::model::tests::data();
        let mut all = new_histogram();
        for (k, iv) in d.driver.iter_mut().enumerate() {
            for o in &mut iv.ops {
                let mut h = new_histogram();
                for v in 0..o.count {
                    let us = 1_000 + (v * 7_919 + k as u64 * 104_729) % 90_000;
                    record(&mut h, us);
                    record(&mut all, us);
                }
                o.histogram = Some(LatencyHistogram::encode(&h));
            }
        }
        let dir = herd_testkit::TempDir::new("hdr");
        let files = write_logs(&d, &dir).unwrap();
        assert_eq!(
            files,
            vec![dir.join(format!("run-{}-game.state.hlog", d.meta.id))]
        );
        let text = std::fs::read(&files[0]).unwrap();
        let mut merged = new_histogram();
        let mut starts = Vec::new();
        for e in IntervalLogIterator::new(&text) {
            if let LogEntry::Interval(i) = e.unwrap() {
                let bytes = base64::Engine::decode(
                    &base64::engine::general_purpose::STANDARD,
                    i.encoded_histogram(),
                )
                .unwrap();
                let h: hdrhistogram::Histogram<u64> = Deserializer::new()
                    .deserialize(&mut bytes.as_slice())
                    .unwrap();
                merged.add(h).unwrap();
                starts.push((i.start_timestamp(), i.duration()));
            }
        }
        // Every interval, in order, at its real start and length; together exactly the run.
        let want: Vec<_> = d
            .driver
            .iter()
            .map(|iv| {
                (
                    Duration::from_millis(iv.end_ms - iv.duration_ms),
                    Duration::from_millis(iv.duration_ms),
                )
            })
            .collect();
        assert_eq!(starts, want);
        assert_eq!(merged, all);
        let head = String::from_utf8_lossy(&text);
        assert!(head.contains("#[BaseTime: "), "{head}");
        assert!(head.contains("#[MaxValueDivisor: 1000.000]"), "{head}");
    }

    #[test]
    fn a_directory_that_cannot_be_written_is_named() {
        let d = crate::model::tests::data();
        let e = write_logs(&d, Path::new("/proc/herd-no-such-dir")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("writing the HdrHistogram log /proc/herd-no-such-dir/run-"),
            "{e}"
        );
    }

    #[test]
    fn op_names_become_safe_file_names() {
        assert_eq!(file_stem("hammer:game.move"), "hammer_game.move");
        assert_eq!(file_stem("a b/c"), "a_b_c");
    }
}
