//! One module per subcommand.
pub mod demo;
pub mod probe;
pub mod workload;
