//! Exports for other tools: CSV of the per-phase × op table and of the timeline ([`csv`]),
//! CSV of the kernel-side waits ([`waits_csv`]),
//! HdrHistogram interval logs ([`hdr`]), and the Prometheus exposition a live run serves
//! ([`prometheus`]).

pub mod csv;
pub mod hdr;
pub mod prometheus;
pub mod waits_csv;
