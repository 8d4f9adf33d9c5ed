//! The WebSocket frame reader on the fuzzer's bytes as a server's frames, arriving in
//! pieces: read as frames (each must write back to its own bytes) and as messages.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| herd_http::ws::fuzz::frames(data));
