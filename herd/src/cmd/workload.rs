//! `herd workload`: hidden; the processes herd runs inside its own containers.

use std::{net::SocketAddr, time::Duration};

use anyhow::Result;

use crate::{cmd::probe::parse_duration, workload};

/// Which workload to run.
#[derive(Debug, clap::Subcommand)]
pub enum WorkloadCmd {
    /// Accept and drain TCP connections.
    TcpServer {
        /// Address to listen on.
        #[arg(long)]
        listen: SocketAddr,
        /// Stop after this many connections.
        #[arg(long, default_value_t = 1_000_000)]
        max_conns: u64,
        /// Which side closes first.
        #[arg(long, value_enum, default_value_t = workload::Closer::Client)]
        closer: workload::Closer,
        /// Stop after this long at most.
        #[arg(long, default_value = "5m", value_parser = parse_duration)]
        deadline: Duration,
    },
    /// Open connections one after another.
    TcpClient {
        /// Server address.
        #[arg(long)]
        target: SocketAddr,
        /// Connections to open.
        #[arg(long)]
        count: u64,
        /// Which side closes first.
        #[arg(long, value_enum, default_value_t = workload::Closer::Client)]
        closer: workload::Closer,
        /// Stop after this long at most.
        #[arg(long, default_value = "5m", value_parser = parse_duration)]
        deadline: Duration,
    },
}

/// Runs a workload.
pub fn run(cmd: &WorkloadCmd) -> Result<()> {
    match *cmd {
        WorkloadCmd::TcpServer {
            listen,
            max_conns,
            closer,
            deadline,
        } => workload::tcp_server(listen, max_conns, closer, deadline),
        WorkloadCmd::TcpClient {
            target,
            count,
            closer,
            deadline,
        } => workload::tcp_client(target, count, closer, deadline),
    }
}
