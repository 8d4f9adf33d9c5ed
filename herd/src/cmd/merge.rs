//! `herd merge`: the `herd drive --shard I/N --json` results of one run's shards merged into
//! the result one process would have written (counts add, histograms merge), for runs
//! without a store.

use std::{
    io::{BufWriter, Write as _},
    path::PathBuf,
};

use anyhow::{Context as _, Result};
use herd_model::RunResult;
use herd_report::text;

/// Options of `herd merge`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  herd drive game.toml --shard 0/2 --json shard-0.json   # on one host
  herd drive game.toml --shard 1/2 --json shard-1.json   # on another, started together
  herd merge shard-0.json shard-1.json                   # one table, counts added, histograms merged
  herd merge shard-*.json --json merged.json

With a PostgreSQL store, `herd run --shard I/N --run-key KEY` starts the shards together and
`herd report` merges them (docs/scale-out.md).")]
pub struct MergeArgs {
    /// The `herd drive --json` files of the shards.
    #[arg(value_name = "RESULT.json", required = true, num_args = 2..)]
    pub results: Vec<PathBuf>,
    /// Also write the merged result as JSON (the form `herd drive --json` writes).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// A result file that is not one `herd merge` can read, or results of different runs.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MergeInputError(String);

/// Runs `herd merge`.
pub fn run(args: &MergeArgs) -> Result<()> {
    let mut parts = Vec::new();
    for path in &args.results {
        let bytes = std::fs::read(path)
            .with_context(|| format!("reading the result {}", path.display()))?;
        let r: RunResult = serde_json::from_slice(&bytes).map_err(|e| {
            MergeInputError(format!(
                "{} is not a `herd drive --json` result ({e}); give the files the shards' \
                 --json wrote",
                path.display()
            ))
        })?;
        parts.push(r);
    }
    let merged = herd_model::merge::runs(&parts).map_err(|e| match e {
        e @ herd_model::merge::MergeError::NotOneRun { .. } => {
            anyhow::Error::from(MergeInputError(e.to_string()))
        }
        e => anyhow::Error::from(e),
    })?;
    outln!(
        "herd merge: {} results, {} requests",
        parts.len(),
        merged.requests
    );
    out!("\n{}", text::table(&merged));
    if let Some(path) = &args.json {
        let write = || -> Result<()> {
            let mut w = BufWriter::new(std::fs::File::create(path)?);
            serde_json::to_writer_pretty(&mut w, &merged)?;
            w.flush()?;
            Ok(())
        };
        write().with_context(|| format!("writing the merged result to {}", path.display()))?;
        outln!("wrote {}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use herd_testkit::{Proto, Reply, Server, TempDir};

    use super::*;
    use crate::cmd::drive::{DriveArgs, run as drive};

    #[test]
    fn shards_driven_apart_merge_to_the_servers_count() {
        let dir = TempDir::new("merge");
        let file = dir.write(
            "ok.toml",
            "[target]\nurl = \"http://127.0.0.1:1\"\n[player]\nmax_ops = 4\n[[op]]\nname = \"ok\"\npath = \"/\"\n[[step]]\nplayers = 5\nduration = \"300ms\"\narrival = \"burst\"\n[[rate]]\nrate = 50\nduration = \"400ms\"\n",
        );
        let server = Server::http(Proto::H1)
            .fallback(Reply::ok().body("ok"))
            .start_blocking();
        let results: Vec<PathBuf> = (0..2)
            .map(|i| {
                let out = dir.join(format!("shard-{i}.json"));
                drive(&DriveArgs {
                    scenario: file.clone(),
                    set: vec![format!("target.url={}", server.url())],
                    json: Some(out.clone()),
                    grace: std::time::Duration::from_secs(1),
                    interval: std::time::Duration::from_millis(200),
                    quiet: true,
                    insecure: false,
                    shard: Some(herd_model::Shard::new(i, 2).unwrap()),
                    listen: None,
                    quick: Default::default(),
                })
                .unwrap();
                out
            })
            .collect();
        let out = dir.join("merged.json");
        run(&MergeArgs {
            results: results.clone(),
            json: Some(out.clone()),
        })
        .unwrap();
        let merged: RunResult = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        assert_eq!(merged.requests, 5 * 4 + 20);
        assert_eq!(merged.requests, server.requests());
        assert_eq!(merged.phases[0].players, 5);

        let other = dir.write(
            "other.json",
            std::fs::read_to_string(&results[0])
                .unwrap()
                .replace("ok.toml", "other.toml"),
        );
        let e = run(&MergeArgs {
            results: vec![results[0].clone(), other],
            json: None,
        })
        .unwrap_err();
        assert!(e.is::<MergeInputError>(), "{e:#}");
        assert!(e.to_string().contains("only shards of one run"), "{e:#}");
    }
}
