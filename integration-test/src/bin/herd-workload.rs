//! The test workloads (herd-testbed's TCP servers and clients) as a binary the privileged
//! tests run inside their containers.
use clap::Parser as _;

#[derive(clap::Parser)]
#[command(name = "herd-workload")]
struct Cli {
    #[command(subcommand)]
    workload: herd_testbed::cli::WorkloadCmd,
}

fn main() -> std::process::ExitCode {
    match herd_testbed::cli::run(&Cli::parse().workload) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
