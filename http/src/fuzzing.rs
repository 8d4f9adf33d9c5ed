//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz): each takes the fuzzer's bytes
//! and panics on a bug. Not an API: hidden from the docs and free to change with the
//! targets. A new target is one file in `fuzz/fuzz_targets/` calling one of these (or a
//! public parser such as herd_driver::Scenario::parse) and one line in `fuzz/Cargo.toml`.

pub use crate::h2::fuzz::{client as h2_client, frames as h2_frames, hpack};
