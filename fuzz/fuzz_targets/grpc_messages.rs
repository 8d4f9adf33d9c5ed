//! gRPC's length-prefixed message decoder on the fuzzer's bytes as a response body,
//! arriving in pieces, identity or gzip.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| herd_http::grpc::fuzz::messages(data));
