//! The HPACK decoder on the fuzzer's header blocks, through one dynamic table.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| herd_http::fuzzing::hpack(data));
