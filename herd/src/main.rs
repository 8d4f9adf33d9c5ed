//! The `herd` binary: parse, run, exit.
use clap::Parser as _;

fn main() -> std::process::ExitCode {
    herd::run(herd::Cli::parse())
}
