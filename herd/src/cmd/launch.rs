//! `herd launch`: start a sharded run on an engine users already run. `k8s` writes the
//! Kubernetes manifests ([`crate::launch::k8s`]) for `kubectl apply`; `swarm` runs the shards and the
//! probes on a Docker Swarm, waits and prints the merged report ([`crate::launch::swarm`]).

use std::path::PathBuf;

use anyhow::{Context as _, Result};

/// Options of `herd launch`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  herd launch k8s game.toml --shards 3 --store-secret herd-store --image registry.local/herd:1
  kubectl apply -f herd-out/game-<time>.yaml  # what it wrote: ConfigMap, Indexed Job, DaemonSet
  herd launch swarm game.toml --shards 3 --store-file ~/.config/herd/store-url

docs/scale-out.md walks through both.")]
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
    /// Run a sharded run on the Docker Swarm this engine manages: a replicated service of
    /// driver shards and a global probe service, waited for, reported, and removed.
    Swarm(SwarmArgs),
}

/// Options of `herd launch swarm`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  docker swarm init --advertise-addr 127.0.0.1 --default-addr-pool 198.19.48.0/20  # once
  herd launch swarm game.toml --shards 3 --store-file ~/.config/herd/store-url
  export HERD_STORE=postgres://herd:PASSWORD@db:5432/herd   # or in the environment, not in argv
  herd launch swarm game.toml --shards 6 --image herd:1 --no-probe
  herd launch swarm game.toml --shards 8 --image registry.local/herd:1 \\
      --node-socket /var/run/docker.sock        # a swarm of several nodes

The store URL's password: give it with --store-file or HERD_STORE. `--store URL` keeps the
URL, password included, on herd's command line for the whole run, where every user of the
host reads it (`ps`, /proc/PID/cmdline).

It builds herd's image from this binary (FROM scratch, no registry) unless --image names one
every node has, puts the scenario in a Docker config and the store URL in a Docker secret,
runs `herd run --shard-slot {{.Task.Slot}}/N` as a replicated service and a probe per node as
a global service, waits, prints the merged report (also written into --out) and removes all of
it, also on an error or Ctrl-C. A shard whose node the swarm marks down is lost: said at once,
closed `lost`, and the report holds what it recorded. Exit codes: 0 done, 1 failed (a shard
failed or was lost: the report is still written), 2 bad input or no swarm.")]
pub struct SwarmArgs {
    /// The scenario: a TOML file (docs/scenario.md), checked here before anything is created.
    #[arg(value_name = "SCENARIO")]
    pub scenario: PathBuf,
    /// Driver shards: the shard service's tasks, one `herd run --shard I/N` each.
    #[arg(long)]
    pub shards: u32,
    /// The PostgreSQL run store every node reaches (postgres://USER:PASSWORD@HOST/DB); it goes
    /// to the tasks as a Docker secret. Given here, the password stays on herd's command
    /// line for the whole run, visible in `ps` to every user of the host: prefer
    /// --store-file or the HERD_STORE environment variable.
    #[arg(long, value_name = "URL", env = "HERD_STORE")]
    pub store: Option<String>,
    /// Read the run store URL from FILE (e.g. a file only you can read), so that it is in
    /// no command line or environment.
    #[arg(long, value_name = "FILE", conflicts_with = "store")]
    pub store_file: Option<PathBuf>,
    /// herd's image, present on every node (default: build one from this binary, removed
    /// at the end unless --keep-image).
    #[arg(long, value_name = "TAG")]
    pub image: Option<String>,
    /// Keep the image herd built.
    #[arg(long)]
    pub keep_image: bool,
    /// The Docker socket's path on the nodes, mounted into each node's probe (default:
    /// DOCKER_HOST's path when it names a unix socket, else /var/run/docker.sock).
    #[arg(long, value_name = "PATH")]
    pub node_socket: Option<String>,
    /// The run's name: the services', config's and secret's name prefix and the shards'
    /// --run-key (default: herd-<scenario's file stem>-<time>).
    #[arg(long)]
    pub name: Option<String>,
    /// No probe service (nodes where eBPF cannot be loaded).
    #[arg(long)]
    pub no_probe: bool,
    /// How long the shards may take in all before herd gives up and removes them.
    #[arg(long, default_value = "1h", value_parser = herd_driver::units::parse_duration)]
    pub timeout: std::time::Duration,
    /// Directory the merged report's files are written into.
    #[arg(long, default_value = "herd-out")]
    pub out: PathBuf,
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
    /// (`kubectl create secret generic NAME --from-file=url=FILE`, FILE holding the URL).
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
        Engine::Swarm(a) => swarm(a),
    }
}

/// The run's name unless given: the scenario's file stem and the time, so every launch is a
/// new run.
fn default_name(scenario: &std::path::Path) -> String {
    // Lowercase letters, digits and `-`: what Kubernetes objects, Docker services and image
    // tags all accept.
    let stem: String = scenario
        .file_stem()
        .map_or_else(|| "run".into(), |s| s.to_string_lossy().to_lowercase())
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .take(24)
        .collect();
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("herd-{stem}-{secs}")
}

fn swarm(a: &SwarmArgs) -> Result<()> {
    crate::launch::swarm::launch(&crate::launch::swarm::Launch {
        scenario: a.scenario.clone(),
        shards: a.shards,
        store: super::store_or_file(&a.store, &a.store_file)?,
        image: a.image.clone(),
        node_socket: a.node_socket.clone(),
        name: a.name.clone().unwrap_or_else(|| default_name(&a.scenario)),
        no_probe: a.no_probe,
        timeout: a.timeout,
        keep_image: a.keep_image,
        out: a.out.clone(),
    })
    .map(|_| ())
}

fn k8s(a: &K8sArgs) -> Result<()> {
    // Checked here, where the error points at the file's line, not in N pods.
    herd_model::Shard::new(0, a.shards)?;
    herd_driver::Scenario::load(&a.scenario, &[])?;
    let text = std::fs::read_to_string(&a.scenario)
        .with_context(|| format!("reading {}", a.scenario.display()))?;
    let name = a.name.clone().unwrap_or_else(|| default_name(&a.scenario));
    let run = crate::launch::k8s::K8sRun {
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
    outln!("wrote {}", path.display());
    outln!(
        "next: kubectl apply -f {p}\n      kubectl -n {ns} wait --for=condition=complete --timeout=1h job/{name}\n      \
         HERD_STORE=\"$(kubectl -n {ns} get secret {s} -o jsonpath='{{.data.url}}' | base64 -d)\" herd report\n      \
         kubectl delete -f {p}",
        p = path.display(),
        s = a.store_secret
    );
    Ok(())
}
