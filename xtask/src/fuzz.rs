//! `cargo xtask fuzz [--seconds N] [TARGET]`: builds the fuzz targets in `fuzz/` with
//! cargo-fuzz on the pinned nightly (libFuzzer, AddressSanitizer, debug assertions) and runs
//! each for a bounded time, from its committed seeds (`fuzz/seeds/<target>/`) and the corpus
//! earlier runs grew (`target/fuzz/corpus/<target>/`). A crash, a hang or a leak fails the
//! task, naming the input libFuzzer saved (`target/fuzz/artifacts/<target>/`).
//!
//! A target is a file in `fuzz/fuzz_targets/` (and its line in `fuzz/Cargo.toml`): every
//! file there is run, so a new one needs no change here.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

/// Options of `cargo xtask fuzz`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds each target runs.
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
    /// Only this target (a file name in fuzz/fuzz_targets/, without `.rs`).
    pub target: Option<String>,
}

/// Inputs up to this size: enough for request bodies past a window and header blocks in
/// CONTINUATIONs, small enough for thousands of runs a second.
const MAX_LEN: usize = 64 * 1024;
/// One input running longer than this is a hang.
const HANG_SECONDS: u64 = 10;

/// The targets, by file name.
pub fn targets(root: &Path) -> Result<Vec<String>> {
    let dir = root.join("fuzz/fuzz_targets");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .collect();
    names.sort();
    Ok(names)
}

/// Builds and runs the targets `args` names for `args.seconds` each.
pub fn fuzz(root: &Path, nightly: &str, args: &Args) -> Result<()> {
    let all = targets(root)?;
    let run: Vec<&String> = match &args.target {
        Some(t) if !all.contains(t) => bail!(
            "no fuzz target `{t}`: the targets are the files in {} ({})",
            root.join("fuzz/fuzz_targets").display(),
            all.join(", ")
        ),
        Some(t) => vec![t],
        None => all.iter().collect(),
    };
    let cargo_fuzz = root.join("target/tools/bin/cargo-fuzz");
    if !cargo_fuzz.exists() {
        bail!(
            "{} is missing: run `cargo xtask setup`, which installs it",
            cargo_fuzz.display()
        );
    }
    for t in run {
        let corpus = root.join("target/fuzz/corpus").join(t);
        let artifacts = root.join("target/fuzz/artifacts").join(t);
        for d in [&corpus, &artifacts] {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let before = saved(&artifacts);
        let mut cmd = Command::new(&cargo_fuzz);
        cmd.current_dir(root)
            .args(["fuzz", "run", "--fuzz-dir"])
            .arg(root.join("fuzz"))
            .arg("--target-dir")
            .arg(root.join("target/fuzz/build"))
            .arg(t)
            .arg(&corpus);
        let seeds = root.join("fuzz/seeds").join(t);
        if seeds.is_dir() {
            cmd.arg(&seeds);
        }
        cmd.arg("--")
            .arg(format!("-max_total_time={}", args.seconds))
            .arg(format!("-timeout={HANG_SECONDS}"))
            .arg(format!("-max_len={MAX_LEN}"))
            .arg(format!("-artifact_prefix={}/", artifacts.display()))
            .arg("-print_final_stats=1")
            // cargo-fuzz runs cargo itself: on the nightly, not the stable that runs xtask.
            .env("RUSTUP_TOOLCHAIN", nightly)
            .env_remove("CARGO")
            .env_remove("RUSTC")
            .env_remove("RUSTC_WORKSPACE_WRAPPER");
        if let Err(e) = crate::status(&mut cmd) {
            let found: Vec<String> = saved(&artifacts)
                .into_iter()
                .filter(|p| !before.contains(p))
                .map(|p| p.display().to_string())
                .collect();
            if found.is_empty() {
                return Err(e.context(format!("fuzz target {t}")));
            }
            bail!(
                "fuzz target {t} failed on the input saved at {}: replay it with \
                 `RUSTUP_TOOLCHAIN={nightly} target/tools/bin/cargo-fuzz fuzz run --fuzz-dir \
                 fuzz {t} <input>`, fix the bug, and keep the input as a unit test beside the \
                 harness (the h2 ones: driver/src/transport/h2/tests/fuzzed.rs)",
                found.join(", ")
            );
        }
    }
    Ok(())
}

/// The inputs libFuzzer saved in `dir` (crash-…, timeout-…, leak-…, oom-…).
fn saved(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}
