//! The probe's rows: one [`ProbeInterval`] per sample, per container and per source →
//! destination pair, with the CPU, memory and socket cells read beside the kernel counters.

use std::net::{IpAddr, SocketAddr};

use probe_common::{Counter, Log2Hist, Loss, N_COUNTERS, PairStats};

use crate::waits::{ContainerWaits, PairWaits};

/// Every kernel counter of one cgroup, indexed by [`Counter`].
pub type Counts = [u64; N_COUNTERS];

/// What one container did during one interval.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ContainerInterval {
    /// Container name (`host` for everything unnamed).
    pub container: String,
    /// Counter deltas over the interval, by [`Counter`] name.
    #[serde(flatten)]
    pub counts: CountMap,
    /// CPU, throttling and memory from cgroupfs (filled in by the probe's sampler).
    pub cpu: CpuCell,
    /// Socket gauges of the container's network namespace (filled in by the sampler).
    #[serde(default)]
    pub sockets: SocketCell,
    /// When the container's cgroup appeared (monotonic ns), if that happened while the probe
    /// ran; absent for containers that were already there (filled in by the sampler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ns: Option<u64>,
    /// When its cgroup disappeared (monotonic ns), once it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ns: Option<u64>,
    /// Kernel-side waits: run-queue delay and its 100 ms windows, PSI, OOM kills, listen
    /// drops, conntrack (the run-queue delay from the maps, the rest filled in by the
    /// sampler).
    #[serde(default)]
    pub waits: ContainerWaits,
}

/// A container's socket gauges at the end of an interval, or why there are none.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SocketCell {
    /// Read from the container's own network namespace (sock_diag and procfs).
    Measured {
        /// Sockets in ESTABLISHED.
        established: u64,
        /// Sockets in SYN_SENT.
        syn_sent: u64,
        /// TIME_WAIT as `ss` shows it (timewait sockets in the TIME_WAIT substate).
        time_wait: u64,
        /// Of `time_wait`, the sockets that entered TIME_WAIT before the probe started
        /// (left over from an earlier run): `time_wait - time_wait_baseline` is this run's.
        #[serde(default)]
        time_wait_baseline: u64,
        /// Every timewait socket (also those still waiting for the peer's FIN), = sockstat tw.
        timewait_sockets: u64,
        /// The fewest free ephemeral ports toward any one destination.
        min_headroom: Option<u64>,
        /// Usable ephemeral ports of the namespace.
        port_range: u64,
        /// Listen-queue overflows in the interval (TcpExt ListenOverflows).
        listen_overflows: u64,
        /// SYNs dropped at listeners in the interval (TcpExt ListenDrops).
        listen_drops: u64,
        /// Inbound sockets per local (listening) port, so a server's TIME_WAIT toward its
        /// clients is one row per port, not one per client port.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        inbound: Vec<InboundCell>,
    },
    /// Not available, with the reason.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// A container's inbound sockets on one local port.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InboundCell {
    /// The local port.
    pub local_port: u16,
    /// ESTABLISHED sockets on it.
    pub established: u64,
    /// TIME_WAIT sockets on it.
    pub time_wait: u64,
    /// Of those, the ones from before the probe started.
    #[serde(default)]
    pub time_wait_baseline: u64,
}

impl SocketCell {
    /// TIME_WAIT sockets that entered TIME_WAIT during the run (the baseline left out);
    /// `None` when not measured.
    pub fn time_wait_run(&self) -> Option<u64> {
        match self {
            SocketCell::Measured {
                time_wait,
                time_wait_baseline,
                ..
            } => Some(time_wait.saturating_sub(*time_wait_baseline)),
            SocketCell::Unavailable { .. } => None,
        }
    }
}

impl Default for SocketCell {
    fn default() -> Self {
        SocketCell::Unavailable {
            reason: "not sampled".into(),
        }
    }
}

/// A container's CPU numbers for an interval, or why there are none.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CpuCell {
    /// Sampled from cgroupfs.
    Measured(Box<CpuInterval>),
    /// Not available, with the reason.
    Unavailable {
        /// Why.
        reason: String,
    },
}

impl Default for CpuCell {
    fn default() -> Self {
        CpuCell::Unavailable {
            reason: "not sampled".into(),
        }
    }
}

/// Counter values keyed by their stable names, for output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CountMap(pub Counts);

impl CountMap {
    /// The value of `c`.
    pub fn get(&self, c: Counter) -> u64 {
        self.0[c as usize]
    }
}

impl<'de> serde::Deserialize<'de> for CountMap {
    /// Reads the counters by name; unknown names (counters a newer herd added, or the other
    /// fields of a flattened row) are ignored, missing ones are 0.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = CountMap;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of counter names to values")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut m: A,
            ) -> Result<CountMap, A::Error> {
                let mut c = [0u64; N_COUNTERS];
                while let Some(k) = m.next_key::<String>()? {
                    match Counter::ALL.iter().find(|x| x.name() == k) {
                        Some(x) => c[*x as usize] = m.next_value()?,
                        None => {
                            m.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(CountMap(c))
            }
        }
        d.deserialize_map(V)
    }
}

impl serde::Serialize for CountMap {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut m = s.serialize_map(Some(N_COUNTERS))?;
        for c in Counter::ALL {
            m.serialize_entry(c.name(), &self.0[c as usize])?;
        }
        m.end()
    }
}

// A pair row leaves out what is zero or empty (most pairs of an interval count nothing but
// their open sockets): the row reads back the same, in a third of the bytes.
fn zero(n: &u64) -> bool {
    *n == 0
}

fn empty_summary(s: &Log2Summary) -> bool {
    s.count == 0 && *s == Log2Summary::default()
}

fn empty_hist(h: &Log2Hist) -> bool {
    h.0.iter().all(|&n| n == 0)
}

fn no_waits(w: &PairWaits) -> bool {
    *w == PairWaits::default()
}

/// Percentiles read off a log2 histogram: each value is the upper bound of the bucket the
/// percentile falls in (so "p99 ≤ 128 µs"), which is all a log2 histogram can say honestly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Log2Summary {
    /// Samples in the histogram.
    pub count: u64,
    /// Upper bound of the median's bucket.
    pub p50_le: u64,
    /// Upper bound of the 99th percentile's bucket.
    pub p99_le: u64,
    /// Upper bound of the highest non-empty bucket (`u64::MAX` when it is the open last one).
    pub max_le: u64,
}

impl Log2Summary {
    /// Summarises a log2 histogram.
    pub fn of(h: &Log2Hist) -> Self {
        Self {
            count: h.count(),
            p50_le: h.quantile_le(500).unwrap_or(0),
            p99_le: h.quantile_le(990).unwrap_or(0),
            max_le: h.max_le().unwrap_or(0),
        }
    }
}

/// What one container did toward one destination during one interval.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PairInterval {
    /// Source container.
    pub container: String,
    /// Destination address and port.
    pub remote: SocketAddr,
    /// The container that owns the destination address, when known.
    pub remote_container: Option<String>,
    /// New connections (SYNs sent).
    #[serde(default, skip_serializing_if = "zero")]
    pub connects: u64,
    /// Handshakes completed.
    #[serde(default, skip_serializing_if = "zero")]
    pub established: u64,
    /// TIME_WAIT entries of these connections.
    #[serde(default, skip_serializing_if = "zero")]
    pub time_wait_entries: u64,
    /// Connections closed (with a known open time).
    #[serde(default, skip_serializing_if = "zero")]
    pub closed: u64,
    /// Connect latency (SYN sent → ESTABLISHED), microseconds.
    #[serde(default, skip_serializing_if = "empty_summary")]
    pub connect_latency_us: Log2Summary,
    /// Lifetime (SYN sent → CLOSE) of connections closed in the interval, milliseconds.
    #[serde(default, skip_serializing_if = "empty_summary")]
    pub lifetime_ms: Log2Summary,
    /// Connect latency histogram (µs), for merging intervals exactly.
    #[serde(default, skip_serializing_if = "empty_hist")]
    pub connect_latency_buckets: Log2Hist,
    /// Lifetime histogram (ms), for merging intervals exactly.
    #[serde(default, skip_serializing_if = "empty_hist")]
    pub lifetime_buckets: Log2Hist,
    /// Gauges toward this destination at the end of the interval (source netns's sockets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gauges: Option<PairGauges>,
    /// Retransmits toward the destination, SYN retries apart, with their 100 ms windows.
    #[serde(default, skip_serializing_if = "no_waits")]
    pub waits: PairWaits,
}

/// A destination's socket gauges in the source container's network namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PairGauges {
    /// ESTABLISHED sockets toward the destination.
    pub established: u64,
    /// TIME_WAIT sockets toward it (all of them, as `ss` counts).
    pub time_wait: u64,
    /// Of those, the sockets that entered TIME_WAIT before the probe started: a baseline
    /// left by an earlier run, not this run's churn.
    #[serde(default)]
    pub time_wait_baseline: u64,
    /// Local ports in use toward it (any state).
    pub ports_in_use: u64,
    /// Ephemeral ports still free toward it.
    pub headroom: u64,
    /// Median srtt of the established sockets, µs (`ss -ti` rtt).
    pub srtt_p50_us: Option<u32>,
    /// Largest srtt, µs.
    pub srtt_max_us: Option<u32>,
    /// The srtt histogram of the established sockets, µs.
    #[serde(default)]
    pub srtt_log2: Log2Hist,
}

impl PairGauges {
    /// TIME_WAIT sockets toward the destination that entered TIME_WAIT during the run.
    pub fn time_wait_run(&self) -> u64 {
        self.time_wait.saturating_sub(self.time_wait_baseline)
    }
}

/// Where a container is reached from outside it, as its engine (Docker) reports it: what
/// the report follows from a driver's target (a published host port, a DNS name) to the
/// container that serves it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Service {
    /// The container (its report name).
    pub container: String,
    /// Names it answers to in its networks' DNS: its name, its Compose service, its network
    /// aliases.
    #[serde(default)]
    pub names: Vec<String>,
    /// Its addresses in its networks.
    #[serde(default)]
    pub addrs: Vec<IpAddr>,
    /// Host ports published to it.
    #[serde(default)]
    pub published: Vec<PublishedPort>,
}

/// One host port forwarded to a container port (docker-proxy or DNAT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PublishedPort {
    /// The host address and port; an unspecified address (`0.0.0.0`, `::`) is every address
    /// of the host.
    pub host: SocketAddr,
    /// The container's port it leads to.
    pub container_port: u16,
}

impl Service {
    /// True when a connection to `target` (`host:port` as a driver was given it, `localhost`
    /// allowed) reaches this container: a published port or one of its DNS names.
    pub fn serves(&self, target: &str) -> Option<u16> {
        let (host, port) = target.rsplit_once(':')?;
        let port: u16 = port.parse().ok()?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let ip: Option<IpAddr> = if host == "localhost" {
            Some(IpAddr::from([127, 0, 0, 1]))
        } else {
            host.parse().ok()
        };
        match ip {
            Some(ip) => self
                .published
                .iter()
                .find(|p| {
                    p.host.port() == port
                        && (p.host.ip() == ip
                            || p.host.ip().is_unspecified()
                            || (ip.is_loopback() && p.host.ip().is_loopback()))
                })
                .map(|p| p.container_port)
                .or_else(|| self.addrs.contains(&ip).then_some(port)),
            None => self.names.iter().any(|n| n == host).then_some(port),
        }
    }
}

impl PairInterval {
    /// A row with gauges and no kernel counts in the interval: a destination the socket
    /// walk saw that no connect, close or TIME_WAIT entry touched.
    pub fn gauges_only(
        container: String,
        remote: SocketAddr,
        remote_container: Option<String>,
        gauges: PairGauges,
    ) -> Self {
        Self {
            container,
            remote,
            remote_container,
            connects: 0,
            established: 0,
            time_wait_entries: 0,
            closed: 0,
            connect_latency_us: Default::default(),
            lifetime_ms: Default::default(),
            connect_latency_buckets: Default::default(),
            lifetime_buckets: Default::default(),
            gauges: Some(gauges),
            waits: PairWaits::default(),
        }
    }

    /// The row as kernel pair stats (counters and histograms), for summing intervals.
    pub fn stats(&self) -> PairStats {
        PairStats {
            connects: self.connects,
            established: self.established,
            time_wait_entries: self.time_wait_entries,
            closed: self.closed,
            connect_latency_us: self.connect_latency_buckets,
            lifetime_ms: self.lifetime_buckets,
            retrans_segs: self.waits.retrans_segs,
            syn_retrans: self.waits.syn_retrans,
        }
    }
}

/// One interval of the probe's timeline.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ProbeInterval {
    /// End of the interval on the shared monotonic clock.
    pub at_ns: u64,
    /// Length of the interval.
    pub interval_ns: u64,
    /// Per container, in the probe's container order.
    pub containers: Vec<ContainerInterval>,
    /// Per source container → destination, for pairs active in the interval.
    pub pairs: Vec<PairInterval>,
    /// Events the kernel programs could not record during the interval.
    pub lost: u64,
    /// Containers reachable through published ports or DNS names (Docker), as known at the
    /// end of the interval: what lets the report follow a driver's target to its container.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<Service>,
    /// Set on a row that merges several intervals of the timeline (an hours-long run's
    /// older part, `herd_model::rollup`): how many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_up: Option<crate::rollup::RolledUp>,
}

impl ProbeInterval {
    /// Names every container of the interval `NAME@node`: the interval of one node of
    /// several (`herd probe --store URL --run ID --node NODE`), whose containers the report
    /// shows per node.
    pub fn tag_node(&mut self, node: &str) {
        let tag = |name: &mut String| *name = format!("{name}@{node}");
        self.containers
            .iter_mut()
            .for_each(|c| tag(&mut c.container));
        for p in &mut self.pairs {
            tag(&mut p.container);
            if let Some(r) = &mut p.remote_container {
                tag(r);
            }
        }
        self.services.iter_mut().for_each(|s| tag(&mut s.container));
    }
}

/// CPU, throttling and memory of one container over one interval.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CpuInterval {
    /// End of the interval (the last poll), on the caller's monotonic clock (ns).
    pub at_ns: u64,
    /// Length of the interval (ns).
    pub interval_ns: u64,
    /// Polls (windows) in the interval.
    pub polls: u32,
    /// CPU time used in the interval (ns).
    pub usage_ns: u64,
    /// Average cores used.
    pub cpu_cores: f64,
    /// Average cores used in user mode.
    pub user_cores: f64,
    /// Average cores used in kernel mode.
    pub system_cores: f64,
    /// Cores used in the busiest window (poll to poll: 100 ms when polled every 100 ms).
    pub burst_cores: f64,
    /// Length of that window (ns).
    pub burst_window_ns: u64,
    /// End of that window (ns).
    pub burst_at_ns: u64,
    /// Average cores over the trailing [`SUSTAINED_NS`] (less while the sampler is younger).
    pub sustained_cores: f64,
    /// Length of the sustained window (ns).
    pub sustained_window_ns: u64,
    /// Throttling deltas and quota.
    pub throttle: Throttling,
    /// Memory at the end of the interval.
    pub memory: Memory,
}

/// Throttling over one interval.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Throttling {
    /// Read from the container's cpu controller.
    Measured {
        /// Enforcement periods that elapsed (while the cgroup had runnable tasks).
        nr_periods: u64,
        /// Periods in which the cgroup was throttled.
        nr_throttled: u64,
        /// Time its run queues spent throttled, summed over CPUs (can exceed the interval
        /// when several CPUs are throttled at once), in ns.
        throttled_ns: u64,
        /// `nr_throttled / nr_periods`; 0 when no period elapsed.
        throttled_share: f64,
        /// The quota in cores (quota / period) at the end of the interval; `None` when
        /// unlimited.
        quota_cores: Option<f64>,
        /// The quota, in µs per period; `None` when unlimited.
        quota_us: Option<u64>,
        /// The period, in µs.
        period_us: u64,
    },
    /// The container has no cpu controller directory of its own.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// Memory at the end of one interval.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Memory {
    /// Read from the container's memory cgroup.
    Measured {
        /// Bytes charged at the end of the interval.
        current_bytes: u64,
        /// The kernel's high-water mark since the cgroup was created (or last reset);
        /// `None` only on v2 kernels before 5.19.
        peak_bytes: Option<u64>,
        /// Usage minus inactive file pages, what `docker stats` and cAdvisor call memory
        /// usage; `current_bytes` includes that page cache.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        working_set_bytes: Option<u64>,
    },
    /// The container has no memory cgroup of its own.
    Unavailable {
        /// Why.
        reason: String,
    },
}

/// The destination under which a container's running pair totals sum the destinations
/// beyond its busiest (see the probe's `MAX_PAIR_TOTALS`): `remote="other"` in Prometheus.
pub const OTHER_REMOTE: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::UNSPECIFIED,
    0,
));

/// The probe's cumulative counters since it started: what a live endpoint exposes between
/// intervals (`herd probe --listen`, `herd run --listen`).
#[derive(Clone, Debug, Default)]
pub struct ProbeTotals {
    /// Counter totals per container (running, or among the most recently ended), `host` last.
    pub containers: Vec<(String, Counts)>,
    /// Totals per (source container, destination, destination's container); destinations
    /// beyond a container's busiest are summed under [`OTHER_REMOTE`].
    pub pairs: Vec<(String, SocketAddr, Option<String>, PairStats)>,
    /// Events the kernel programs could not record, by [`Loss`].
    pub losses: [u64; Loss::Count as usize],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_row_leaves_out_its_zeros_and_reads_back_the_same() {
        let quiet = PairInterval::gauges_only(
            "host".into(),
            "127.0.0.1:8080".parse().unwrap(),
            None,
            PairGauges {
                established: 20,
                ports_in_use: 20,
                headroom: 28_212,
                ..PairGauges::default()
            },
        );
        let json = serde_json::to_string(&quiet).unwrap();
        for gone in [
            "connects",
            "closed",
            "lifetime_buckets",
            "connect_latency_us",
            "waits",
        ] {
            assert!(!json.contains(gone), "{gone} in {json}");
        }
        assert!(json.len() < 400, "{} bytes: {json}", json.len());
        assert_eq!(serde_json::from_str::<PairInterval>(&json).unwrap(), quiet);
        let mut busy = quiet.clone();
        busy.connects = 3;
        busy.connect_latency_buckets.record(70);
        busy.connect_latency_us = Log2Summary::of(&busy.connect_latency_buckets);
        busy.waits.syn_retrans = 1;
        let json = serde_json::to_string(&busy).unwrap();
        assert_eq!(serde_json::from_str::<PairInterval>(&json).unwrap(), busy);
    }

    #[test]
    fn log2_percentiles_are_bucket_upper_bounds() {
        let mut b = Log2Hist::default();
        b.0[3] = 98; // [8, 16)
        b.0[10] = 2; // [1024, 2048)
        let s = Log2Summary::of(&b);
        assert_eq!(
            (s.count, s.p50_le, s.p99_le, s.max_le),
            (100, 16, 2048, 2048)
        );
        assert_eq!(
            Log2Summary::of(&Log2Hist::default()),
            Log2Summary::default()
        );
        b.0[probe_common::HIST_BUCKETS - 1] = 1;
        assert_eq!(Log2Summary::of(&b).max_le, u64::MAX);
    }

    #[test]
    fn srtt_histograms_recorded_as_upper_bound_pairs_still_read() {
        let g: PairGauges = serde_json::from_str(
            r#"{"established":2,"time_wait":0,"ports_in_use":2,"headroom":9,"srtt_p50_us":40,"srtt_max_us":70,"srtt_log2":[[64,1],[128,1]]}"#,
        )
        .unwrap();
        let mut want = Log2Hist::default();
        want.record(40);
        want.record(70);
        assert_eq!(g.srtt_log2, want);
        let again: PairGauges = serde_json::from_str(&serde_json::to_string(&g).unwrap()).unwrap();
        assert_eq!(again, g);
    }
}
