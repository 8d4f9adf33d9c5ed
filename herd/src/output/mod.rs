//! What herd shows while it runs: the live view on stdout ([`live`]) and the Prometheus
//! endpoint of `--listen` ([`metrics`]); the exposition text itself is
//! [`herd_report::export::prometheus`].

pub mod live;
pub mod metrics;
pub mod stdio;
