//! One module per subcommand.
pub mod compact;
pub mod compare;
#[cfg(feature = "demo")]
pub mod demo;
pub mod drive;
pub mod import;
pub mod launch;
pub mod merge;
pub mod probe;
pub mod quick;
pub mod report;
pub mod run;
pub mod seed;

/// The run store a command reads: `--store` (or `HERD_STORE`), else `OUT/runs.db`.
pub(crate) fn store_url(store: &Option<String>, out: &std::path::Path) -> String {
    store
        .clone()
        .unwrap_or_else(|| herd_store::default_url(out))
}

/// The store URL of `--store URL` or `--store-file PATH` (a file holding the URL, as a
/// Docker or Kubernetes secret is mounted: /run/secrets/NAME), surrounding whitespace
/// trimmed.
pub(crate) fn store_or_file(
    store: &Option<String>,
    file: &Option<std::path::PathBuf>,
) -> anyhow::Result<Option<String>> {
    use anyhow::Context as _;
    let Some(path) = file else {
        return Ok(store.clone());
    };
    let url = std::fs::read_to_string(path)
        .with_context(|| {
            format!(
                "reading the run store's URL from {} (--store-file)",
                path.display()
            )
        })
        .map_err(crate::environment)?;
    Ok(Some(url.trim().to_owned()))
}

/// `--store URL` / `--store-file FILE`: the store of a command that reads or changes
/// recorded runs (`report`, `compare`, `import`, `compact`).
#[derive(Debug, clap::Args)]
pub struct StoreArg {
    /// Run store URL (default: sqlite:<out>/runs.db).
    #[arg(long, value_name = "URL", env = "HERD_STORE")]
    pub store: Option<String>,
    /// Read the run store URL from FILE (a mounted secret: /run/secrets/NAME), so that it
    /// is in no command line or environment.
    #[arg(long, value_name = "FILE", conflicts_with = "store")]
    pub store_file: Option<std::path::PathBuf>,
}

impl StoreArg {
    /// The URL to open: `--store`'s, `--store-file`'s, else `sqlite:<out>/runs.db`.
    pub(crate) fn url(&self, out: &std::path::Path) -> anyhow::Result<String> {
        Ok(store_url(
            &store_or_file(&self.store, &self.store_file)?,
            out,
        ))
    }
}

/// A single-threaded runtime for a command that only talks to the store; `what` names the
/// command in the error.
pub(crate) fn store_runtime(what: &str) -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context as _;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .with_context(|| format!("starting the {what}'s runtime"))
}
