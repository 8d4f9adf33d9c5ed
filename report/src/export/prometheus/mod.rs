//! Prometheus text exposition (format 0.0.4) of a run while it lasts: the driver's series
//! ([`driver`]) and the probe's ([`probe`]), one naming rule for both. Every name starts with
//! `herd_`; counters end in `_total`; a measurement carries its unit (`_seconds`, `_bytes`,
//! `_cores`, `_ratio`); labels are `op`, `outcome`, `class`, `phase`, `container`, `remote`,
//! `remote_container`, `errno`, `reason`. docs/metrics.md lists every series, and
//! docs/grafana/herd.json queries them.

pub mod driver;
pub mod probe;
mod waits;

pub use driver::DriverTotals;
pub use probe::{Gauges, counters};

/// Escapes a label value (backslash, quote, newline).
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
