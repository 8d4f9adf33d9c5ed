//! `herd demo`: the options, turned into a [`DemoConfig`] for [`demo::run`]; prints each
//! run's findings and the comparison.

use std::{path::PathBuf, time::Duration};

use anyhow::Result;
use herd_driver::units::parse_duration;

use crate::demo::{self, DemoConfig};

/// Options of `herd demo`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  sudo herd demo                             # the sandbox contour, reports in herd-out/demo/
  sudo herd demo --docker                    # the same contour as Docker containers (+ docker-compose.yml)
  sudo herd demo --steps 20,60 --step-duration 5s   # a shorter pass
  sudo herd demo --max-idle 2,64             # the bug against a smaller fix

Two runs of 3 steps × 15 s each by default; `cargo xtask demo` builds herd first.")]
pub struct DemoArgs {
    /// Where the run store, the reports and the comparison go.
    #[arg(long, default_value = "herd-out/demo")]
    pub out: PathBuf,
    /// Players per step, gradual arrival; the last step arrives all at once (a burst).
    #[arg(long, default_value = "50,200,400", value_delimiter = ',')]
    pub steps: Vec<usize>,
    /// Length of each step.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub step_duration: Duration,
    /// Pause of each player between its calls.
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    pub think: Duration,
    /// The gateway's CPU quota, in cores.
    #[arg(long, default_value_t = 0.5)]
    pub gateway_cpus: f64,
    /// The backend's CPU quota, in cores.
    #[arg(long, default_value_t = 1.0)]
    pub backend_cpus: f64,
    /// Time the backend takes per call (a wait standing for its own downstream work), which
    /// sets how many gateway→backend calls are in flight at once.
    #[arg(long, default_value = "5ms", value_parser = parse_duration)]
    pub backend_service_time: Duration,
    /// Idle backend connections per host for the two runs: the bug, then the fix.
    #[arg(long, default_value = "2,512", value_delimiter = ',')]
    pub max_idle: Vec<usize>,
    /// Run the contour as Docker containers (an image herd builds from its own binary, a
    /// network it creates in 198.19.32.0/19) instead of herd's sandbox, and write
    /// docker-compose.yml describing it. Needs a Docker engine (DOCKER_HOST or
    /// /var/run/docker.sock).
    #[arg(long)]
    pub docker: bool,
}

impl DemoArgs {
    /// The demo these options describe.
    pub fn config(&self) -> DemoConfig {
        DemoConfig {
            out: self.out.clone(),
            steps: self.steps.clone(),
            step_duration: self.step_duration,
            think: self.think,
            gateway_cpus: self.gateway_cpus,
            backend_cpus: self.backend_cpus,
            backend_service_time: self.backend_service_time,
            max_idle: self.max_idle.clone(),
            docker: self.docker,
        }
    }
}

/// Runs `herd demo`.
pub fn run(args: &DemoArgs) -> Result<()> {
    let done = demo::run(&args.config())?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let s = herd_store::Store::open(&done.store).await?;
            outln!();
            for &id in &done.runs {
                let r = herd_report::Report::build(&s.load_run(Some(id)).await?);
                outln!(
                    "run {} ({}): {} findings",
                    r.run.id,
                    r.run.name,
                    r.findings.len()
                );
                for f in &r.findings {
                    outln!("  - {}: {}", f.kind, f.title);
                }
            }
            anyhow::Ok(())
        })?;
    if let Some(c) = &done.comparison {
        outln!("\n{}", herd_report::compare::table(c));
    }
    for f in &done.files {
        outln!("wrote {}", f.display());
    }
    Ok(())
}
