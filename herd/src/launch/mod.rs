//! Launchers: herd's processes started on an engine users already have — a Docker Swarm
//! ([`swarm`]: the sharded run's job, a probe service, and the probe sidecar of `herd probe
//! --via-engine`), Kubernetes manifests ([`k8s`]) — and the Docker CLI, its cleanup guards
//! and herd's image FROM scratch they share with the demo ([`docker`]).

pub mod docker;
pub mod k8s;
pub mod swarm;
