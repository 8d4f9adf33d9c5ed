//! The comparison's tables, in the form docs/benchmarks.md keeps them.

use std::{fmt::Write as _, path::Path, process::Command};

use anyhow::Result;

use super::{
    Args,
    harness::{CLIENT_CORE, SERVER_CORE},
    tools::{CONNECTIONS, Sample, TOOLS, Tool},
};

/// Per client the medians and ranges over the repetitions, herd's ratios to wrk and h2load,
/// every repetition, and what was run.
pub(super) fn comparison(root: &Path, args: &Args, samples: &[(Tool, Sample)]) -> Result<String> {
    let mut t = String::new();
    writeln!(
        t,
        "| protocol | client | CPU-s per 100 000 requests (median) | range | requests/s (median) | range | client user share | server core busy | errors |"
    )?;
    writeln!(t, "|---|---|---:|---:|---:|---:|---:|---:|---:|")?;
    let mut per100k = std::collections::HashMap::new();
    for tool in TOOLS {
        let s: Vec<&Sample> = samples
            .iter()
            .filter(|(t, _)| *t == tool)
            .map(|(_, s)| s)
            .collect();
        let cpu: Vec<f64> = s.iter().map(|s| s.cpu_per_100k()).collect();
        let rate: Vec<f64> = s
            .iter()
            .map(|s| s.requests as f64 / args.seconds as f64)
            .collect();
        let user: Vec<f64> = s.iter().map(|s| s.user_s / s.cpu_s).collect();
        let server: Vec<f64> = s
            .iter()
            .map(|s| s.server_cpu_s / args.seconds as f64)
            .collect();
        let errors: u64 = s.iter().map(|s| s.errors).sum();
        per100k.insert(tool, median(&cpu));
        writeln!(
            t,
            "| {} | {} | {:.2} | {} | {} | {}–{} | {:.0} % | {:.0} % | {errors} |",
            tool.proto().label(),
            tool.name(),
            median(&cpu),
            range(&cpu, 2),
            thousands(median(&rate)),
            thousands(rate.iter().copied().fold(f64::INFINITY, f64::min)),
            thousands(rate.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
            100.0 * median(&user),
            100.0 * median(&server),
        )?;
    }
    writeln!(
        t,
        "\nherd / wrk (HTTP/1.1): {:.2}; herd / h2load --h1: {:.2}; herd / h2load (h2c): {:.2} (of the medians; goal ≤ 1 against wrk and h2load)",
        per100k[&Tool::HerdH1] / per100k[&Tool::Wrk],
        per100k[&Tool::HerdH1] / per100k[&Tool::H2loadH1],
        per100k[&Tool::HerdH2c] / per100k[&Tool::H2loadH2c],
    )?;
    writeln!(t, "\nPer repetition, CPU-s per 100 000 requests:\n")?;
    writeln!(t, "| protocol | client | repetitions |")?;
    writeln!(t, "|---|---|---|")?;
    for tool in TOOLS {
        let v: Vec<String> = samples
            .iter()
            .filter(|(t, _)| *t == tool)
            .map(|(_, s)| format!("{:.2}", s.cpu_per_100k()))
            .collect();
        writeln!(
            t,
            "| {} | {} | {} |",
            tool.proto().label(),
            tool.name(),
            v.join(", ")
        )?;
    }
    writeln!(
        t,
        "\nherd commit {}, {} repetitions × {} s, {} connections, nginx on core {SERVER_CORE}, clients on core {CLIENT_CORE}.",
        herd_commit(root),
        args.reps,
        args.seconds,
        CONNECTIONS
    )?;
    Ok(t)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn range(v: &[f64], decimals: usize) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{lo:.decimals$}–{hi:.decimals$}")
}

/// Groups digits by thousands with thin spaces, as docs/benchmarks.md writes numbers.
pub(super) fn thousands(n: f64) -> String {
    let s = format!("{:.0}", n);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// The commit herd was built from, marked when the driver or herd had uncommitted changes.
pub(super) fn herd_commit(root: &Path) -> String {
    let git = || {
        let mut c = Command::new("git");
        c.arg("-C").arg(root);
        c
    };
    let head = crate::output(git().args(["rev-parse", "--short", "HEAD"]))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| "unknown".into());
    let dirty = crate::output(git().args(["status", "--porcelain", "--", "driver", "herd"]))
        .is_some_and(|s| !s.trim().is_empty());
    if dirty {
        format!("{head} plus uncommitted changes to driver/ or herd/")
    } else {
        head
    }
}
