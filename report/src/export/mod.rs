//! Exports for other tools: HdrHistogram interval logs ([`hdr`]).

pub mod hdr;
