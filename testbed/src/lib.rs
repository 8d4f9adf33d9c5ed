//! herd's test bed: containers made of cgroups + network namespaces + veth pairs on this host
//! ([`sandbox`]), and the small exact TCP workloads run inside them ([`workload`], with its
//! command line in [`cli`]). `herd demo` puts its contour in these containers; the privileged
//! integration tests put their clients and servers there. Nothing here is part of the probe
//! or the driver.
#![deny(missing_docs)]

pub mod cli;
pub mod sandbox;
pub mod workload;

pub use sandbox::{Container, Sandbox};
