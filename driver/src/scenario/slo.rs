//! `[slo]`: an op's latency percentile or error share and the limit it must stay under.

use herd_model::{Slo, SloMetric};

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
