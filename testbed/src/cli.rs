//! The `herd-workload` command line: the processes the privileged tests run inside their
//! containers (integration-test builds it as a binary).

use std::{net::SocketAddr, time::Duration};

use anyhow::Result;

use herd_driver::units::parse_duration;

use crate::workload;

/// Which workload to run.
#[derive(Debug, clap::Subcommand)]
pub enum WorkloadCmd {
    /// connect() an AF_UNIX socket to a path, `count` times, as glibc's nscd lookups do;
    /// prints `unix connects N failed F`.
    UnixConnect {
        /// The socket path (one that does not exist makes every connect fail with ENOENT).
        #[arg(long)]
        path: std::path::PathBuf,
        /// Connects to make.
        #[arg(long, default_value_t = 1)]
        count: u64,
    },
    /// Start short processes one after another (`sh -c SCRIPT`, pinned to `cpu`), each its
    /// own child: when one has exited, read its final `/proc/PID/schedstat` while it is a
    /// zombie (`waitid(WNOWAIT)`), append `PID RUN_DELAY PCOUNT` to `out`, then reap it.
    /// The ground truth of run-queue waits that end with their process.
    Churn {
        /// The file the lines are appended to.
        #[arg(long)]
        out: std::path::PathBuf,
        /// What each process runs.
        #[arg(
            long,
            default_value = "i=0; while [ $i -lt 1500 ]; do i=$((i+1)); done"
        )]
        script: String,
        /// The CPU each process is pinned to.
        #[arg(long, default_value_t = 0)]
        cpu: usize,
        /// Stop after this long at most.
        #[arg(long, default_value = "1m", value_parser = parse_duration)]
        deadline: Duration,
    },
    /// Accept and drain TCP connections.
    TcpServer {
        /// Address to listen on.
        #[arg(long)]
        listen: SocketAddr,
        /// Stop after this many connections; 0 listens with a one-slot accept queue and never
        /// accepts (to make clients time out).
        #[arg(long, default_value_t = 1_000_000)]
        max_conns: u64,
        /// Which side closes first.
        #[arg(long, value_enum, default_value_t = workload::Closer::Client)]
        closer: workload::Closer,
        /// Answer every byte with one byte until the client closes (keep-alive), each after
        /// this service time (e.g. 0s, 2ms).
        #[arg(long, value_parser = parse_duration)]
        echo: Option<Duration>,
        /// Stop after this long at most.
        #[arg(long, default_value = "5m", value_parser = parse_duration)]
        deadline: Duration,
    },
    /// Keep-alive requests through a bounded idle pool (Go http.Transport semantics).
    TcpPoolClient {
        /// Server address (an `--echo` server).
        #[arg(long)]
        target: SocketAddr,
        /// Requests to make in total.
        #[arg(long)]
        requests: u64,
        /// Concurrent workers.
        #[arg(long, default_value_t = 1)]
        concurrency: u64,
        /// Idle connections kept for reuse; 2 is Go's DefaultMaxIdleConnsPerHost.
        #[arg(long, default_value_t = 2)]
        max_idle: usize,
        /// Pause of each worker between its requests.
        #[arg(long, default_value = "0s", value_parser = parse_duration)]
        think: Duration,
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
        /// How long each connect may take.
        #[arg(long, default_value = "2s", value_parser = parse_duration)]
        connect_timeout: Duration,
        /// Stop after this long at most.
        #[arg(long, default_value = "5m", value_parser = parse_duration)]
        deadline: Duration,
    },
}

/// Runs a workload.
pub fn run(cmd: &WorkloadCmd) -> Result<()> {
    match *cmd {
        WorkloadCmd::Churn {
            ref out,
            ref script,
            cpu,
            deadline,
        } => workload::churn(out, script, cpu, deadline),
        WorkloadCmd::UnixConnect { ref path, count } => {
            let failed = (0..count)
                .filter(|_| std::os::unix::net::UnixStream::connect(path).is_err())
                .count();
            println!("unix connects {count} failed {failed}");
            Ok(())
        }
        WorkloadCmd::TcpServer {
            listen,
            max_conns,
            closer,
            echo,
            deadline,
        } => workload::tcp_server(listen, max_conns, closer, echo, deadline),
        WorkloadCmd::TcpPoolClient {
            target,
            requests,
            concurrency,
            max_idle,
            think,
            deadline,
        } => workload::tcp_pool_client(target, requests, concurrency, max_idle, think, deadline),
        WorkloadCmd::TcpClient {
            target,
            count,
            closer,
            connect_timeout,
            deadline,
        } => workload::tcp_client(target, count, closer, connect_timeout, deadline),
    }
}
