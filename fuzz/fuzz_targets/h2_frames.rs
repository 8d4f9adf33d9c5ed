//! The HTTP/2 frame reader on the fuzzer's bytes, arriving a few at a time.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| herd_http::fuzzing::h2_frames(data));
