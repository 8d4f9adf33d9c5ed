//! One module per subcommand.
pub mod compare;
pub mod demo;
pub mod drive;
pub mod probe;
pub mod report;
pub mod run;
pub mod seed;
pub mod workload;
