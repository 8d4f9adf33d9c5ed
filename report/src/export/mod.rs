//! Exports for other tools: CSV of the per-phase × op table and of the timeline ([`csv`]),
//! HdrHistogram interval logs ([`hdr`]).

pub mod csv;
pub mod hdr;
