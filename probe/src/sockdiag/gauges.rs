//! What one dump says about one namespace: sockets per state, listeners, and per
//! destination the sockets, the ephemeral ports they hold and the headroom left.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    net::{IpAddr, SocketAddr},
};

use super::{SrttSummary, TcpSocket, TcpState};
use crate::netstat::{NetCounters, PortRange};

/// Sockets per TCP state, as `ss -tan` would count them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StateCounts {
    /// ESTABLISHED.
    pub established: u64,
    /// SYN_SENT.
    pub syn_sent: u64,
    /// SYN_RECV (request sockets included).
    pub syn_recv: u64,
    /// FIN_WAIT1.
    pub fin_wait1: u64,
    /// FIN_WAIT2, timewait sockets with substate FIN_WAIT2 included.
    pub fin_wait2: u64,
    /// TIME_WAIT (timewait sockets with substate TIME_WAIT).
    pub time_wait: u64,
    /// CLOSE.
    pub close: u64,
    /// CLOSE_WAIT.
    pub close_wait: u64,
    /// LAST_ACK.
    pub last_ack: u64,
    /// LISTEN.
    pub listen: u64,
    /// CLOSING.
    pub closing: u64,
}

impl StateCounts {
    /// The count of `state`.
    pub fn get(&self, state: TcpState) -> u64 {
        match state {
            TcpState::Established => self.established,
            TcpState::SynSent => self.syn_sent,
            TcpState::SynRecv => self.syn_recv,
            TcpState::FinWait1 => self.fin_wait1,
            TcpState::FinWait2 => self.fin_wait2,
            TcpState::TimeWait => self.time_wait,
            TcpState::Close => self.close,
            TcpState::CloseWait => self.close_wait,
            TcpState::LastAck => self.last_ack,
            TcpState::Listen => self.listen,
            TcpState::Closing => self.closing,
        }
    }

    fn slot(&mut self, state: TcpState) -> &mut u64 {
        match state {
            TcpState::Established => &mut self.established,
            TcpState::SynSent => &mut self.syn_sent,
            TcpState::SynRecv => &mut self.syn_recv,
            TcpState::FinWait1 => &mut self.fin_wait1,
            TcpState::FinWait2 => &mut self.fin_wait2,
            TcpState::TimeWait => &mut self.time_wait,
            TcpState::Close => &mut self.close,
            TcpState::CloseWait => &mut self.close_wait,
            TcpState::LastAck => &mut self.last_ack,
            TcpState::Listen => &mut self.listen,
            TcpState::Closing => &mut self.closing,
        }
    }
}

/// A listening socket.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Listener {
    /// The address it listens on.
    pub local: SocketAddr,
    /// Connections completed and waiting for `accept()` (`sk_ack_backlog`).
    pub accept_queue: u32,
    /// The accept queue's limit (`sk_max_ack_backlog`: `listen()`'s backlog capped by
    /// `net.core.somaxconn`); the queue is full at `backlog + 1` (`sk_acceptq_is_full`).
    pub backlog: u32,
    /// The socket cookie: which listener this is from one sample to the next.
    pub cookie: u64,
    /// Drops on this listener since it was created (`sk_drops`); `None` when the kernel did
    /// not send `INET_DIAG_SKMEMINFO`.
    pub drops: Option<u32>,
}

/// Gauges of the outbound sockets of one namespace toward one remote address and port.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DestinationGauges {
    /// The remote address and port.
    pub remote: SocketAddr,
    /// ESTABLISHED sockets.
    pub established: u64,
    /// SYN_SENT sockets (connects in flight).
    pub syn_sent: u64,
    /// TIME_WAIT sockets (substate TIME_WAIT, as `ss`).
    pub time_wait: u64,
    /// Of those, the sockets that entered TIME_WAIT before the sampling started (left over
    /// from before the run): a baseline, not this run's churn. 0 when no start was given.
    pub time_wait_baseline: u64,
    /// Sockets in every other state (FIN_WAIT1/2, CLOSE_WAIT, LAST_ACK, CLOSING): they hold
    /// their port too.
    pub other: u64,
    /// Ephemeral ports held toward this destination: outbound sockets whose local port is in
    /// the usable range, counted per local address and the largest taken (a connect needs a
    /// 4-tuple that is unique, `__inet_check_established`).
    pub ports_in_use: u64,
    /// Ports a new connect to this destination can still pick: usable range − ports in use.
    pub headroom: u64,
    /// srtt of the ESTABLISHED sockets; `None` when there are none.
    pub srtt: Option<SrttSummary>,
}

/// Inbound sockets of one namespace on one local (listening) port: accepted connections and
/// the TIME_WAIT they leave when the server closes first, grouped per port rather than per
/// client port (one row per client would be one row per connection).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct InboundGauges {
    /// The local port.
    pub local_port: u16,
    /// ESTABLISHED sockets.
    pub established: u64,
    /// TIME_WAIT sockets (substate TIME_WAIT).
    pub time_wait: u64,
    /// Of those, the ones that entered TIME_WAIT before the sampling started.
    pub time_wait_baseline: u64,
    /// Sockets in every other state.
    pub other: u64,
}

/// The destination closest to running out of ephemeral ports.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MinHeadroom {
    /// The destination.
    pub remote: SocketAddr,
    /// Its ports in use.
    pub ports_in_use: u64,
    /// Its headroom.
    pub headroom: u64,
}

/// What one dump says about one namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct SocketGauges {
    /// Sockets in the dump.
    pub sockets: u64,
    /// Sockets per state, as `ss` reports them.
    pub states: StateCounts,
    /// Timewait sockets whatever their substate (TIME_WAIT or FIN_WAIT2): what sockstat's
    /// `tw` counts.
    pub timewait_sockets: u64,
    /// Of `states.time_wait`, the sockets that entered TIME_WAIT before the sampling
    /// started (0 when no start was given).
    pub time_wait_baseline: u64,
    /// Listening sockets, by local address.
    pub listeners: Vec<Listener>,
    /// Outbound sockets grouped by remote address and port, ascending.
    pub destinations: Vec<DestinationGauges>,
    /// Inbound sockets grouped by local port, ascending.
    pub inbound: Vec<InboundGauges>,
    /// The destination with the least headroom; `None` without outbound sockets.
    pub min_headroom: Option<MinHeadroom>,
}

impl SocketGauges {
    /// The gauges toward `remote`, if any socket goes there.
    pub fn destination(&self, remote: SocketAddr) -> Option<&DestinationGauges> {
        self.destinations.iter().find(|d| d.remote == remote)
    }
}

#[derive(Default)]
struct DestinationAcc {
    established: u64,
    syn_sent: u64,
    time_wait: u64,
    time_wait_baseline: u64,
    other: u64,
    ports_by_local: HashMap<IpAddr, u64>,
    srtt: Vec<u32>,
}

/// Linux keeps a socket in TIME_WAIT for `TCP_TIMEWAIT_LEN`, 60 s (include/net/tcp.h); a
/// timewait socket's `idiag_expires` counts down from it.
pub const TCP_TIMEWAIT_LEN_MS: u64 = 60_000;

/// How much earlier than `age_ms` a socket must have entered TIME_WAIT to be a baseline: the
/// timer counts in jiffies (up to 10 ms each at HZ=100) and `jiffies` lags the clock by up to
/// one, so a socket of this run's first milliseconds can look a little older than it is.
pub const BASELINE_SLACK_MS: u64 = 20;

/// True when a timewait socket with `expires_ms` left entered TIME_WAIT clearly (by more than
/// [`BASELINE_SLACK_MS`]) more than `age_ms` ago: `TCP_TIMEWAIT_LEN - expires` is how long it
/// has been waiting.
pub fn entered_before(expires_ms: u32, age_ms: u64) -> bool {
    TCP_TIMEWAIT_LEN_MS.saturating_sub(u64::from(expires_ms)) > age_ms + BASELINE_SLACK_MS
}

/// Aggregates a dump; no socket is a baseline (see [`aggregate_since`]).
pub fn aggregate(sockets: &[TcpSocket], range: &PortRange) -> SocketGauges {
    aggregate_since(sockets, range, None)
}

/// Aggregates a dump. A socket is inbound when its local port is a listening port of the
/// namespace (an accepted socket shares its listener's port, and `__inet_hash_connect` never
/// hands `connect()` a port that `bind()` holds), or, once the listener is gone, when its
/// remote port is in the ephemeral range and its local port is not (a server's TIME_WAIT
/// toward its clients); every other socket but a listener is outbound. With `age_ms` (how
/// long ago the sampling started), TIME_WAIT sockets that entered TIME_WAIT before then are
/// counted apart as the baseline.
pub fn aggregate_since(
    sockets: &[TcpSocket],
    range: &PortRange,
    age_ms: Option<u64>,
) -> SocketGauges {
    let mut g = SocketGauges {
        sockets: sockets.len() as u64,
        ..SocketGauges::default()
    };
    let mut listening: HashSet<u16> = HashSet::new();
    for s in sockets.iter().filter(|s| s.state == TcpState::Listen) {
        listening.insert(s.local.port());
        g.listeners.push(Listener {
            local: s.local,
            accept_queue: s.recv_q,
            backlog: s.send_q,
            cookie: s.cookie,
            drops: s.drops,
        });
    }
    g.listeners.sort_by_key(|l| l.local);
    let mut dest: BTreeMap<SocketAddr, DestinationAcc> = BTreeMap::new();
    let mut inbound: BTreeMap<u16, InboundGauges> = BTreeMap::new();
    for s in sockets {
        *g.states.slot(s.state) += 1;
        g.timewait_sockets += u64::from(s.timewait);
        let baseline = s.state == TcpState::TimeWait
            && s.timewait
            && age_ms.is_some_and(|age| entered_before(s.expires_ms, age));
        g.time_wait_baseline += u64::from(baseline);
        if s.state == TcpState::Listen {
            continue;
        }
        let is_inbound = listening.contains(&s.local.port())
            || (range.contains(s.remote.port()) && !range.contains(s.local.port()));
        if is_inbound {
            let i = inbound.entry(s.local.port()).or_insert(InboundGauges {
                local_port: s.local.port(),
                established: 0,
                time_wait: 0,
                time_wait_baseline: 0,
                other: 0,
            });
            match s.state {
                TcpState::Established => i.established += 1,
                TcpState::TimeWait => {
                    i.time_wait += 1;
                    i.time_wait_baseline += u64::from(baseline);
                }
                _ => i.other += 1,
            }
            continue;
        }
        let d = dest.entry(s.remote).or_default();
        match s.state {
            TcpState::Established => {
                d.established += 1;
                d.srtt.extend(s.srtt_us);
            }
            TcpState::SynSent => d.syn_sent += 1,
            TcpState::TimeWait => {
                d.time_wait += 1;
                d.time_wait_baseline += u64::from(baseline);
            }
            _ => d.other += 1,
        }
        if range.contains(s.local.port()) {
            *d.ports_by_local.entry(s.local.ip()).or_default() += 1;
        }
    }
    g.inbound = inbound.into_values().collect();
    let usable = u64::from(range.usable);
    for (remote, mut d) in dest {
        let ports_in_use = d.ports_by_local.values().copied().max().unwrap_or(0);
        let headroom = usable.saturating_sub(ports_in_use);
        if g.min_headroom
            .as_ref()
            .is_none_or(|m| headroom < m.headroom)
        {
            g.min_headroom = Some(MinHeadroom {
                remote,
                ports_in_use,
                headroom,
            });
        }
        g.destinations.push(DestinationGauges {
            remote,
            established: d.established,
            syn_sent: d.syn_sent,
            time_wait: d.time_wait,
            time_wait_baseline: d.time_wait_baseline,
            other: d.other,
            ports_in_use,
            headroom,
            srtt: SrttSummary::of(&mut d.srtt),
        });
    }
    g
}

/// One sample of one network namespace.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NetnsSample {
    /// The namespace (its `ip netns` name or path).
    pub netns: String,
    /// Its inode number.
    pub netns_inode: u64,
    /// When the dump started, on the shared monotonic clock ([`crate::clock::now_ns`]).
    pub at_ns: u64,
    /// What the dumps cost, µs of wall time.
    pub dump_us: u64,
    /// Socket gauges.
    #[serde(flatten)]
    pub gauges: SocketGauges,
    /// The ephemeral-port range the headroom is computed against.
    pub port_range: PortRange,
    /// The namespace's TCP counters, read right after the dump.
    pub counters: NetCounters,
    /// The namespace's connection tracking.
    pub conntrack: super::ConntrackReading,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netstat;

    fn v4(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn sock(state: TcpState, local: &str, remote: &str) -> TcpSocket {
        TcpSocket {
            state,
            local: v4(local),
            remote: v4(remote),
            timewait: matches!(state, TcpState::TimeWait),
            srtt_us: None,
            rttvar_us: None,
            recv_q: 0,
            send_q: 0,
            cookie: 0,
            expires_ms: 0,
            drops: None,
        }
    }

    #[test]
    fn aggregate_splits_inbound_from_outbound_and_computes_headroom() {
        let range = netstat::port_range(40000, 40099, &[(40090, 40099)], 2);
        assert_eq!(range.usable, 90);
        let mut listener = sock(TcpState::Listen, "0.0.0.0:8080", "0.0.0.0:0");
        listener.recv_q = 3;
        listener.send_q = 128;
        let mut est = sock(TcpState::Established, "10.0.0.1:40001", "10.0.0.2:80");
        est.srtt_us = Some(100);
        let mut est2 = sock(TcpState::Established, "10.0.0.1:40002", "10.0.0.2:80");
        est2.srtt_us = Some(300);
        let mut tw_fin = sock(TcpState::FinWait2, "10.0.0.1:40004", "10.0.0.2:80");
        tw_fin.timewait = true;
        let sockets = vec![
            listener,
            // Inbound: accepted on the listening port, in any state.
            sock(TcpState::Established, "10.0.0.1:8080", "10.0.0.9:50000"),
            sock(TcpState::TimeWait, "10.0.0.1:8080", "10.0.0.9:50001"),
            est,
            est2,
            sock(TcpState::TimeWait, "10.0.0.1:40003", "10.0.0.2:80"),
            tw_fin,
            sock(TcpState::SynSent, "10.0.0.1:40005", "10.0.0.2:80"),
            // Reserved and out-of-range local ports hold no ephemeral port.
            sock(TcpState::TimeWait, "10.0.0.1:40095", "10.0.0.2:80"),
            sock(TcpState::TimeWait, "10.0.0.1:2000", "10.0.0.2:80"),
            // A second local address: its ports are counted on their own.
            sock(TcpState::TimeWait, "10.0.1.1:40001", "10.0.0.2:80"),
            sock(TcpState::TimeWait, "10.0.0.1:40001", "10.0.0.3:5432"),
        ];
        let g = aggregate(&sockets, &range);
        assert_eq!(g.sockets, 12);
        assert_eq!(g.states.listen, 1);
        assert_eq!(g.states.established, 3);
        assert_eq!(g.states.time_wait, 6);
        assert_eq!(g.states.fin_wait2, 1);
        assert_eq!(g.states.syn_sent, 1);
        assert_eq!(g.timewait_sockets, 7);
        assert_eq!(
            g.listeners,
            vec![Listener {
                local: v4("0.0.0.0:8080"),
                accept_queue: 3,
                backlog: 128,
                cookie: 0,
                drops: None,
            }]
        );
        assert_eq!(g.destinations.len(), 2);
        let d = g.destination(v4("10.0.0.2:80")).unwrap();
        assert_eq!(
            (d.established, d.syn_sent, d.time_wait, d.other),
            (2, 1, 4, 1)
        );
        // 10.0.0.1 holds 40001..=40005 (5 ports); 10.0.1.1 holds 1.
        assert_eq!(d.ports_in_use, 5);
        assert_eq!(d.headroom, 85);
        let srtt = d.srtt.as_ref().unwrap();
        assert_eq!(
            (
                srtt.count,
                srtt.min_us,
                srtt.p50_us,
                srtt.max_us,
                srtt.mean_us
            ),
            (2, 100, 100, 300, 200)
        );
        let other = g.destination(v4("10.0.0.3:5432")).unwrap();
        assert_eq!((other.ports_in_use, other.headroom), (1, 89));
        assert!(other.srtt.is_none());
        assert_eq!(
            g.min_headroom,
            Some(MinHeadroom {
                remote: v4("10.0.0.2:80"),
                ports_in_use: 5,
                headroom: 85
            })
        );
        assert!(g.destination(v4("10.0.0.9:50000")).is_none());
        assert_eq!(
            g.inbound,
            vec![InboundGauges {
                local_port: 8080,
                established: 1,
                time_wait: 1,
                time_wait_baseline: 0,
                other: 0
            }]
        );
        assert_eq!(g.time_wait_baseline, 0, "no start given: no baseline");
    }

    #[test]
    fn a_gone_listeners_time_wait_is_grouped_per_local_port_not_per_client() {
        let range = netstat::port_range(32768, 60999, &[], 2);
        // The server closed first and its listener is gone: 300 TIME_WAIT sockets from
        // 8081 toward 300 client ports must not become 300 destinations.
        let sockets: Vec<TcpSocket> = (0..300)
            .map(|i| {
                sock(
                    TcpState::TimeWait,
                    "198.18.0.2:8081",
                    &format!("198.18.0.1:{}", 40000 + i),
                )
            })
            .chain([sock(
                TcpState::TimeWait,
                "198.18.0.2:40001",
                "198.18.0.3:5432",
            )])
            .collect();
        let g = aggregate(&sockets, &range);
        assert_eq!(g.destinations.len(), 1, "{:?}", g.destinations);
        assert_eq!(g.destinations[0].remote, v4("198.18.0.3:5432"));
        assert_eq!(g.inbound.len(), 1);
        assert_eq!(
            (g.inbound[0].local_port, g.inbound[0].time_wait),
            (8081, 300)
        );
    }

    #[test]
    fn time_wait_sockets_from_before_the_start_are_a_baseline() {
        let range = netstat::port_range(32768, 60999, &[], 2);
        let tw = |port: u16, expires_ms: u32| {
            let mut s = sock(
                TcpState::TimeWait,
                &format!("10.0.0.1:{port}"),
                "10.0.0.2:80",
            );
            s.expires_ms = expires_ms;
            s
        };
        // Sampling started 10 s ago: a socket with 55 s left entered 5 s ago (this run),
        // one with 45 s left entered 15 s ago (before it), one with 50.01 s left 9.99 s ago.
        let sockets = [tw(40000, 55_000), tw(40001, 45_000), tw(40002, 50_010)];
        let g = aggregate_since(&sockets, &range, Some(10_000));
        assert_eq!((g.states.time_wait, g.time_wait_baseline), (3, 1));
        let d = g.destination(v4("10.0.0.2:80")).unwrap();
        assert_eq!((d.time_wait, d.time_wait_baseline), (3, 1));
        assert!(entered_before(0, 59_979));
        assert!(
            !entered_before(0, 59_980),
            "within the jiffies slack: this run's"
        );
        assert!(
            !entered_before(60_000 - 10_015, 10_000),
            "15 ms before the start: this run's"
        );
        assert!(!entered_before(60_000, 0));
        assert!(
            !entered_before(u32::MAX, 0),
            "a re-armed or odd timer is never older"
        );
    }

    #[test]
    fn samples_serialize_with_stable_snake_case_names() {
        let range = netstat::port_range(32768, 60999, &[], 2);
        let mut est = sock(TcpState::Established, "10.0.0.1:40000", "10.0.0.2:80");
        est.srtt_us = Some(50);
        let s = NetnsSample {
            netns: "gw".into(),
            netns_inode: 4026532000,
            at_ns: 1,
            dump_us: 2,
            gauges: aggregate(&[est], &range),
            port_range: range,
            counters: NetCounters::default(),
            conntrack: super::super::ConntrackReading::Unavailable {
                reason: "not loaded".into(),
            },
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["conntrack"]["state"], "unavailable");
        assert_eq!(v["states"]["established"], 1);
        assert_eq!(v["states"]["time_wait"], 0);
        assert_eq!(v["timewait_sockets"], 0);
        assert_eq!(v["destinations"][0]["remote"], "10.0.0.2:80");
        assert_eq!(v["destinations"][0]["headroom"], 28_231);
        assert_eq!(v["destinations"][0]["srtt"]["p50_us"], 50);
        assert_eq!(v["min_headroom"]["headroom"], 28_231);
        assert_eq!(v["port_range"]["usable"], 28_232);
        assert_eq!(v["counters"]["listen_overflows"], 0);
        assert!(v["counters"]["time_wait_overflows"].is_null());
    }
}
