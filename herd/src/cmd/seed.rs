//! `herd seed`: insert a scenario's `[seed]` accounts and sessions into the target's database,
//! list herd's seedings there, or remove exactly their rows (docs/seed.md).

use std::path::PathBuf;

use anyhow::{Context as _, Result, bail};
use herd_driver::Scenario;

use herd_seed::SeedDb;

use crate::signals;

/// Options of `herd seed`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
The database URL is read from the environment variable or file that [seed] names (url_env, \
default HERD_SEED_URL; or url_file), never from the scenario, and never printed.

Examples:
  HERD_SEED_URL=postgres://game@127.0.0.1/game herd seed game.toml
  herd seed game.toml --list
  herd seed game.toml --cleanup            # the last seeding's rows, nothing else
  herd seed game.toml --reset              # every previous herd seeding, then seed again")]
pub struct SeedArgs {
    /// The scenario whose `[seed]` section says what to insert (docs/seed.md).
    #[arg(value_name = "SCENARIO")]
    pub scenario: PathBuf,
    /// Override one scenario key, e.g. `--set seed.accounts=500`. Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Remove exactly the rows of the last seeding (or of --seeding ID) instead of seeding.
    #[arg(long, conflicts_with_all = ["reset", "list"])]
    pub cleanup: bool,
    /// With --cleanup: the seeding to remove (ids from --list).
    #[arg(long, value_name = "ID", requires = "cleanup")]
    pub seeding: Option<i64>,
    /// Remove every herd seeding this database holds, then seed.
    #[arg(long, conflicts_with = "list")]
    pub reset: bool,
    /// List the herd seedings this database holds.
    #[arg(long)]
    pub list: bool,
}

/// Runs `herd seed`.
pub fn run(args: &SeedArgs) -> Result<()> {
    let scenario = crate::signals::at_once(|| Scenario::load(&args.scenario, &args.set))?;
    let Some(spec) = &scenario.seed else {
        return Err(crate::environment(anyhow::anyhow!(
            "{} has no [seed] section: add one to say which accounts to insert and where (docs/seed.md)",
            args.scenario.display()
        )));
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the seeding runtime")?
        .block_on(async {
            let db = SeedDb::connect(spec).await?;
            let result = async {
                if args.list {
                    let all = db.seedings().await?;
                    if all.is_empty() {
                        outln!("{} holds no herd seeding", db.shown());
                    }
                    for s in all {
                        outln!(
                            "seeding {}: {} accounts + {} guests, {} rows recorded, {} ({}), from {}",
                            s.id,
                            s.accounts,
                            s.guests,
                            s.rows,
                            s.status,
                            humantime::format_rfc3339_seconds(
                                std::time::UNIX_EPOCH
                                    + std::time::Duration::from_millis(s.started_unix_ms.max(0) as u64)
                            ),
                            s.scenario
                        );
                    }
                    return Ok(());
                }
                if args.cleanup {
                    match db.cleanup(args.seeding).await? {
                        Some(c) => outln!("herd seed: {}", c.line()),
                        None => match args.seeding {
                            Some(id) => bail!(
                                "{} holds no herd seeding {id} (see `herd seed {} --list`)",
                                db.shown(),
                                args.scenario.display()
                            ),
                            None => outln!("herd seed: {} holds no herd seeding; nothing to remove", db.shown()),
                        },
                    }
                    return Ok(());
                }
                if args.reset {
                    for c in db.reset().await? {
                        outln!("herd seed: {}", c.line());
                    }
                }
                let seeded = db
                    .seed(spec, &args.scenario.display().to_string(), &signals::stop_requested)
                    .await?;
                outln!("herd seed: {}", seeded.line(db.shown()));
                outln!(
                    "remove them with: herd seed {} --cleanup --seeding {}",
                    args.scenario.display(),
                    seeded.id
                );
                Ok(())
            }
            .await;
            db.close().await;
            result
        })
}
