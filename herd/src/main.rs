//! The `herd` binary: parse, run, exit.
fn main() -> std::process::ExitCode {
    herd::run(herd::usage::parse())
}
