//! The whole HTTP/2 client on a scripted socket whose server sends the fuzzer's bytes
//! (`herd_http::fuzzing::h2_client` says how the first bytes plan the calls).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    herd_http::fuzzing::h2_client(data);
});
