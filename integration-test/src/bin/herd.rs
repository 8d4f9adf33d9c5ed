//! The herd CLI, built inside this crate so its tests can run it (`CARGO_BIN_EXE_herd`):
//! the same `herd::run` as the real binary, nothing else.
use clap::Parser as _;

fn main() -> std::process::ExitCode {
    herd::run(herd::Cli::parse())
}
