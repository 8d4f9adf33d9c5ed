//! The demo contour's services as their own binary, for the contour's tests; `herd demo`
//! runs the same code as `herd contour …` from the one herd binary.
use clap::Parser as _;

#[derive(clap::Parser)]
#[command(name = "herd-contour")]
struct Cli {
    #[command(subcommand)]
    service: herd_contour::ContourCmd,
}

fn main() -> std::process::ExitCode {
    match herd_contour::run(&Cli::parse().service) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
