//! Exists so the eBPF crate has a library target that host-side tooling (cargo metadata,
//! rust-analyzer) can check; the programs themselves live in `main.rs`.
#![no_std]
