//! One module per subcommand.
pub mod compare;
#[cfg(feature = "demo")]
pub mod demo;
pub mod drive;
pub mod import;
pub mod launch;
pub mod merge;
pub mod probe;
pub mod report;
pub mod run;
pub mod seed;

/// The run store a command reads: `--store` (or `HERD_STORE`), else `OUT/runs.db`.
pub(crate) fn store_url(store: &Option<String>, out: &std::path::Path) -> String {
    store
        .clone()
        .unwrap_or_else(|| herd_store::default_url(out))
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
