//! One module per subcommand.
pub mod compare;
#[cfg(feature = "demo")]
pub mod demo;
pub mod drive;
pub mod import;
pub mod probe;
pub mod report;
pub mod run;
pub mod seed;
