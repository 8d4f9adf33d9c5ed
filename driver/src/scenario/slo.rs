//! `[slo]`: an op's latency percentile or error share and the limit it must stay under.

/// One objective: an op's latency percentile (or its error share) must stay under a limit.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Slo {
    /// The op.
    pub op: String,
    /// What is measured.
    pub metric: SloMetric,
    /// The limit: microseconds for latencies, a share (0–1) for errors.
    pub limit: f64,
    /// The objective as written, e.g. `p99 < 500ms`.
    pub text: String,
}

/// What an [`Slo`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SloMetric {
    /// Median latency.
    P50,
    /// 90th percentile.
    P90,
    /// 99th percentile.
    P99,
    /// 99.9th percentile.
    P999,
    /// Largest latency.
    Max,
    /// Share of outcomes that are not `ok`.
    Errors,
}

/// Parses `p99 < 500ms`, `max < 2s`, `errors < 1%`.
pub(super) fn parse_slo(op: &str, text: &str) -> Result<Slo, String> {
    let (metric, limit) = text.split_once('<').ok_or_else(|| {
        format!("`{text}`: write `p99 < 500ms` (p50, p90, p99, p999, max) or `errors < 1%`")
    })?;
    let metric = match metric.trim() {
        "p50" => SloMetric::P50,
        "p90" => SloMetric::P90,
        "p99" => SloMetric::P99,
        "p999" | "p99.9" => SloMetric::P999,
        "max" => SloMetric::Max,
        "errors" => SloMetric::Errors,
        other => {
            return Err(format!(
                "`{other}` is not a metric; valid: p50, p90, p99, p999, max, errors"
            ));
        }
    };
    let limit = limit.trim();
    let limit = if metric == SloMetric::Errors {
        let pct = limit
            .strip_suffix('%')
            .and_then(|v| v.trim().parse::<f64>().ok())
            .ok_or_else(|| format!("`{limit}`: an error limit is a percentage, e.g. 1%"))?;
        pct / 100.0
    } else {
        humantime::parse_duration(limit)
            .map_err(|e| format!("`{limit}`: {e} (write e.g. 500ms)"))?
            .as_micros() as f64
    };
    Ok(Slo {
        op: op.to_owned(),
        metric,
        limit,
        text: text.trim().to_owned(),
    })
}
