//! Exact TCP gauges per network namespace, read from user space through NETLINK_SOCK_DIAG
//! (what `ss` uses) and the namespace's own procfs files.
//!
//! The eBPF programs count events; they cannot say how many sockets sit in TIME_WAIT right
//! now (`tcp_time_wait()` creates the timewait socket without a tracepoint, see
//! KERNEL-NOTES.md). A sock_diag dump can, exactly, and it also gives every socket's 4-tuple
//! and smoothed RTT. A dump only sees the network namespace its netlink socket was created in
//! (`sock_net(skb->sk)` in `inet_diag_dump_icsk`), so [`Netns`] creates one socket inside each
//! container's namespace and keeps it.
//!
//! One [`Netns::sample`] = two dumps (IPv4 and IPv6, every state, `INET_DIAG_INFO` for srtt),
//! the namespace's counters and its ephemeral-port range, aggregated by [`aggregate`] into
//! state counts, per-destination gauges and port headroom.
//!
//! The parts: `codec.rs` builds the dump request and parses the reply, `netns.rs` enters a
//! namespace and keeps its socket and files ([`Netns`], [`NetnsCache`]), `gauges.rs` turns a
//! dump into per-state and per-destination gauges, `srtt.rs` summarises a destination's srtt.

mod codec;
mod error;
mod gauges;
mod netns;
mod srtt;

use std::net::SocketAddr;

pub use error::SockDiagError;
pub use gauges::{
    DestinationGauges, InboundGauges, Listener, MinHeadroom, NetnsSample, SocketGauges,
    StateCounts, TCP_TIMEWAIT_LEN_MS, aggregate, aggregate_since, entered_before,
};
pub use netns::{ConntrackReading, Netns, NetnsCache, NetnsTarget, parse_conntrack_stat};
pub use srtt::SrttSummary;

/// TCP states as the kernel numbers them (`include/net/tcp_states.h`) and `ss` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[repr(u8)]
pub enum TcpState {
    /// `TCP_ESTABLISHED`.
    Established = 1,
    /// `TCP_SYN_SENT`: a connect waiting for the SYN-ACK.
    SynSent = 2,
    /// `TCP_SYN_RECV`, and request sockets (`TCP_NEW_SYN_RECV`), which inet_diag reports as
    /// SYN_RECV (`inet_req_diag_fill`).
    SynRecv = 3,
    /// `TCP_FIN_WAIT1`.
    FinWait1 = 4,
    /// `TCP_FIN_WAIT2`, including timewait sockets whose substate is FIN_WAIT2 (as `ss`).
    FinWait2 = 5,
    /// `TCP_TIME_WAIT`: timewait sockets whose substate is TIME_WAIT (as `ss`).
    TimeWait = 6,
    /// `TCP_CLOSE`.
    Close = 7,
    /// `TCP_CLOSE_WAIT`.
    CloseWait = 8,
    /// `TCP_LAST_ACK`.
    LastAck = 9,
    /// `TCP_LISTEN`.
    Listen = 10,
    /// `TCP_CLOSING`.
    Closing = 11,
}

impl TcpState {
    /// Every state a dump asks for, in kernel order.
    pub const ALL: [TcpState; 11] = [
        TcpState::Established,
        TcpState::SynSent,
        TcpState::SynRecv,
        TcpState::FinWait1,
        TcpState::FinWait2,
        TcpState::TimeWait,
        TcpState::Close,
        TcpState::CloseWait,
        TcpState::LastAck,
        TcpState::Listen,
        TcpState::Closing,
    ];

    /// The state numbered `n` by the kernel.
    pub fn from_kernel(n: u8) -> Option<Self> {
        Self::ALL.get(usize::from(n).checked_sub(1)?).copied()
    }

    fn bit(self) -> u32 {
        1 << self as u32
    }
}

/// One TCP socket of a dump.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TcpSocket {
    /// State; for timewait sockets their substate, as `ss` shows it.
    pub state: TcpState,
    /// Local address and port (IPv4-mapped IPv6 addresses are given as IPv4).
    pub local: SocketAddr,
    /// Remote address and port (unspecified for listeners).
    pub remote: SocketAddr,
    /// True for a timewait socket (`struct inet_timewait_sock`): substate TIME_WAIT or
    /// FIN_WAIT2. These are what sockstat's `tw` counts.
    pub timewait: bool,
    /// Smoothed RTT in µs (`tcpi_rtt`, what `ss -ti` prints as `rtt:`), for ESTABLISHED
    /// sockets only.
    pub srtt_us: Option<u32>,
    /// RTT variance in µs (`tcpi_rttvar`), for ESTABLISHED sockets only.
    pub rttvar_us: Option<u32>,
    /// `idiag_rqueue`: bytes unread, or for a listener its accept-queue length.
    pub recv_q: u32,
    /// `idiag_wqueue`: bytes unsent, or for a listener its backlog.
    pub send_q: u32,
    /// The socket cookie (stable for the socket's life, kept by its timewait socket).
    pub cookie: u64,
    /// `idiag_expires`: ms until the socket's pending timer fires. For a timewait socket it
    /// is what is left of its `TCP_TIMEWAIT_LEN` (60 s, `inet_twsk_diag_fill`), so it says
    /// when the socket entered TIME_WAIT.
    pub expires_ms: u32,
    /// `SK_MEMINFO_DROPS` of `INET_DIAG_SKMEMINFO` (`sk_drops`), for listeners only: every
    /// `tcp_listendrop()` on this listener since it was created (a full accept queue's SYN or
    /// handshake-completing ACK, and the rarer drops ListenDrops counts).
    pub drops: Option<u32>,
}
