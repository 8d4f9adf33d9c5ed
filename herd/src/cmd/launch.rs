//! `herd launch`: start a sharded run on an engine users already run. `k8s` writes the
//! Kubernetes manifests ([`crate::k8s`]) for `kubectl apply`.

use std::path::PathBuf;

use anyhow::{Context as _, Result};

/// Options of `herd launch`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  herd launch k8s game.toml --shards 3 --store-secret herd-store --image registry.local/herd:1
  kubectl apply -f herd-out/game-<time>.yaml  # what it wrote: ConfigMap, Indexed Job, DaemonSet

docs/scale-out.md walks through it; Docker Swarm is not a launcher yet.")]
pub struct LaunchArgs {
    /// The engine.
    #[command(subcommand)]
    pub engine: Engine,
}

/// Engines herd launches on.
#[derive(Debug, clap::Subcommand)]
pub enum Engine {
    /// Write the manifests of a sharded run on Kubernetes: an Indexed Job of driver shards,
    /// a DaemonSet of probes, the scenario as a ConfigMap, the store URL from a Secret.
    K8s(K8sArgs),
}

/// Options of `herd launch k8s`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  herd launch k8s game.toml --shards 3 --store-secret herd-store
  herd launch k8s game.toml --shards 6 --store-secret herd-store --namespace load --no-probe")]
pub struct K8sArgs {
    /// The scenario: a TOML file (docs/scenario.md), checked here before it is written.
    #[arg(value_name = "SCENARIO")]
    pub scenario: PathBuf,
    /// Driver shards: the Job's completions, one `herd run --shard I/N` each.
    #[arg(long)]
    pub shards: u32,
    /// The Secret in the namespace whose key `url` is the PostgreSQL run store's URL
    /// (`kubectl create secret generic NAME --from-literal=url=postgres://…`).
    #[arg(long, value_name = "NAME")]
    pub store_secret: String,
    /// herd's image, as the nodes pull it.
    #[arg(long, default_value = "herd:latest")]
    pub image: String,
    /// The run's name: the objects' names and the shards' --run-key (default: the
    /// scenario's file stem and the time, so every launch is a new run).
    #[arg(long)]
    pub name: Option<String>,
    /// The namespace.
    #[arg(long, default_value = "default")]
    pub namespace: String,
    /// Leave out the probe DaemonSet (nodes without eBPF for it).
    #[arg(long)]
    pub no_probe: bool,
    /// Directory the manifests are written into.
    #[arg(long, default_value = "herd-out")]
    pub out: PathBuf,
}

/// Runs `herd launch`.
pub fn run(args: &LaunchArgs) -> Result<()> {
    match &args.engine {
        Engine::K8s(a) => k8s(a),
    }
}

fn k8s(a: &K8sArgs) -> Result<()> {
    // Checked here, where the error points at the file's line, not in N pods.
    herd_driver::Shard::new(0, a.shards)?;
    herd_driver::Scenario::load(&a.scenario, &[])?;
    let text = std::fs::read_to_string(&a.scenario)
        .with_context(|| format!("reading {}", a.scenario.display()))?;
    let stem = a
        .scenario
        .file_stem()
        .map_or_else(|| "run".into(), |s| s.to_string_lossy().to_lowercase());
    let name = a.name.clone().unwrap_or_else(|| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        format!("herd-{stem}-{secs}")
    });
    let run = crate::k8s::K8sRun {
        scenario_name: a.scenario.file_name().map_or_else(
            || "scenario.toml".into(),
            |s| s.to_string_lossy().into_owned(),
        ),
        scenario: text,
        name: name.clone(),
        shards: a.shards,
        store_secret: a.store_secret.clone(),
        image: a.image.clone(),
        namespace: a.namespace.clone(),
        no_probe: a.no_probe,
    };
    let path = run.write(&a.out)?;
    let ns = &a.namespace;
    println!("wrote {}", path.display());
    println!(
        "next: kubectl apply -f {p}\n      kubectl -n {ns} wait --for=condition=complete --timeout=1h job/{name}\n      \
         herd report --store \"$(kubectl -n {ns} get secret {s} -o jsonpath='{{.data.url}}' | base64 -d)\"\n      \
         kubectl delete -f {p}",
        p = path.display(),
        s = a.store_secret
    );
    Ok(())
}
