//! The probe's series: its cumulative kernel counters per container and per pair
//! ([`counters`]), and the gauges of its latest interval with the CPU and throttled time
//! summed over intervals ([`Gauges`]). Every series carries a `container` label (`host` for
//! everything unnamed).

use std::fmt::Write as _;

use herd_model::{
    Counter, CpuCell, HIST_BUCKETS, Log2Hist, Loss, PairStats, ProbeTotals, SocketCell,
};

use super::esc;

/// A per-pair counter family: name, help, and how to read it.
type PairCounter = (&'static str, &'static str, fn(&PairStats) -> u64);
/// A per-pair histogram family: name, help, unit in seconds, and its buckets.
type PairHistogram = (&'static str, &'static str, f64, fn(&PairStats) -> &Log2Hist);

/// Connect failures are one metric with an `errno` label.
fn errno_label(c: Counter) -> Option<&'static str> {
    Some(match c {
        Counter::ConnectRefused => "ECONNREFUSED",
        Counter::ConnectTimedOut => "ETIMEDOUT",
        Counter::ConnectAddrNotAvail => "EADDRNOTAVAIL",
        Counter::ConnectNetUnreach => "ENETUNREACH",
        Counter::ConnectHostUnreach => "EHOSTUNREACH",
        Counter::ConnectOtherError => "other",
        _ => return None,
    })
}

/// The probe's cumulative counters (`totals`) in the text format.
pub fn counters(totals: &ProbeTotals) -> String {
    let mut o = String::new();
    let simple = [
        (
            Counter::Connects,
            "herd_tcp_connects_total",
            "TCP active opens (SYN sent), by the socket's container.",
        ),
        (
            Counter::Accepts,
            "herd_tcp_accepts_total",
            "TCP passive opens completed (SYN_RECV -> ESTABLISHED).",
        ),
        (
            Counter::TimeWaitEntries,
            "herd_tcp_time_wait_entries_total",
            "Sockets that entered TIME_WAIT (timewait sockets created).",
        ),
        (
            Counter::ResetsSent,
            "herd_tcp_resets_sent_total",
            "TCP resets sent.",
        ),
        (
            Counter::ResetsReceived,
            "herd_tcp_resets_received_total",
            "TCP resets received.",
        ),
        (
            Counter::Retransmits,
            "herd_tcp_retransmits_total",
            "TCP segments retransmitted.",
        ),
    ];
    for (c, name, help) in simple {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter");
        for (container, counts) in &totals.containers {
            let _ = writeln!(
                o,
                "{name}{{container=\"{}\"}} {}",
                esc(container),
                counts[c as usize]
            );
        }
    }
    let name = "herd_tcp_connect_failures_total";
    let _ = writeln!(
        o,
        "# HELP {name} connect() failures by errno.\n# TYPE {name} counter"
    );
    for (container, counts) in &totals.containers {
        for c in Counter::ALL {
            if let Some(errno) = errno_label(c) {
                let _ = writeln!(
                    o,
                    "{name}{{container=\"{}\",errno=\"{errno}\"}} {}",
                    esc(container),
                    counts[c as usize]
                );
            }
        }
    }
    let pair_counters: [PairCounter; 6] = [
        (
            "herd_pair_connects_total",
            "New connections from a container to a destination.",
            |p| p.connects,
        ),
        (
            "herd_pair_established_total",
            "Handshakes completed toward a destination.",
            |p| p.established,
        ),
        (
            "herd_pair_time_wait_entries_total",
            "TIME_WAIT entries of connections to a destination.",
            |p| p.time_wait_entries,
        ),
        (
            "herd_pair_closed_total",
            "Connections to a destination that closed.",
            |p| p.closed,
        ),
        (
            "herd_pair_retransmits_total",
            "TCP segments retransmitted toward a destination (as TcpRetransSegs), SYNs included.",
            |p| p.retrans_segs,
        ),
        (
            "herd_pair_syn_retransmits_total",
            "SYNs retransmitted toward a destination (as TCPSynRetrans): connects retried.",
            |p| p.syn_retrans,
        ),
    ];
    let labels = |c: &str, r: &std::net::SocketAddr, rc: &Option<String>| {
        // Destinations beyond a container's busiest are summed under one series.
        let remote = if *r == herd_model::OTHER_REMOTE {
            "other".to_owned()
        } else {
            r.to_string()
        };
        format!(
            "container=\"{}\",remote=\"{remote}\",remote_container=\"{}\"",
            esc(c),
            esc(rc.as_deref().unwrap_or(""))
        )
    };
    for (name, help, f) in pair_counters {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter");
        for (c, r, rc, st) in &totals.pairs {
            let _ = writeln!(o, "{name}{{{}}} {}", labels(c, r, rc), f(st));
        }
    }
    let hists: [PairHistogram; 2] = [
        (
            "herd_pair_connect_latency_seconds",
            "SYN sent -> ESTABLISHED (log2 buckets).",
            1e-6,
            |p| &p.connect_latency_us,
        ),
        (
            "herd_pair_lifetime_seconds",
            "SYN sent -> CLOSE of closed connections (log2 buckets).",
            1e-3,
            |p| &p.lifetime_ms,
        ),
    ];
    for (name, help, unit, f) in hists {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (c, r, rc, st) in &totals.pairs {
            let b = &f(st).0;
            let l = labels(c, r, rc);
            let mut cum = 0u64;
            let mut sum = 0f64;
            for (i, n) in b.iter().enumerate().take(HIST_BUCKETS - 1) {
                cum += n;
                let le = (1u64 << (i + 1)) as f64 * unit;
                // The bucket's midpoint approximates its values for _sum.
                sum += *n as f64 * (1u64 << i) as f64 * 1.5 * unit;
                let _ = writeln!(o, "{name}_bucket{{{l},le=\"{le}\"}} {cum}");
            }
            cum += b[HIST_BUCKETS - 1];
            let _ = writeln!(o, "{name}_bucket{{{l},le=\"+Inf\"}} {cum}");
            let _ = writeln!(o, "{name}_sum{{{l}}} {sum}");
            let _ = writeln!(o, "{name}_count{{{l}}} {cum}");
        }
    }
    let name = "herd_probe_lost_events_total";
    let _ = writeln!(
        o,
        "# HELP {name} Kernel events the probe could not record.\n# TYPE {name} counter"
    );
    for l in Loss::ALL {
        let _ = writeln!(
            o,
            "{name}{{reason=\"{}\"}} {}",
            l.name(),
            totals.losses[l as usize]
        );
    }
    o
}

/// Per-container and per-pair gauges from the latest interval (CPU, quota, throttling,
/// memory, socket states, port headroom), plus the CPU and throttled time summed over the
/// intervals seen: what the kernel counters alone do not say.
#[derive(Clone, Debug, Default)]
pub struct Gauges {
    /// CPU seconds and throttled seconds per container, summed over intervals.
    cpu: std::collections::BTreeMap<String, (f64, f64)>,
    latest: Option<herd_model::ProbeInterval>,
    /// Run-queue delay, PSI, OOM kills, listen drops, conntrack drops, summed.
    waits: super::waits::WaitTotals,
    /// Intervals added, and the last one each container was in: the containers gone longest
    /// beyond [`ENDED_KEPT`] are forgotten.
    seq: u64,
    seen: std::collections::BTreeMap<String, u64>,
}

/// Containers no longer in the intervals whose summed series are kept (the probe keeps its
/// running counters for as many): an hours-long run on a host where containers come and go
/// exposes, and holds, a bounded number of series.
pub const ENDED_KEPT: usize = 64;

impl Gauges {
    /// Adds an interval and keeps it as the latest.
    pub fn add(&mut self, iv: &herd_model::ProbeInterval) {
        self.seq += 1;
        for c in &iv.containers {
            self.seen.insert(c.container.clone(), self.seq);
        }
        let mut gone: Vec<(u64, String)> = (self.seen.iter())
            .filter(|(_, at)| **at < self.seq)
            .map(|(n, at)| (*at, n.clone()))
            .collect();
        if gone.len() > ENDED_KEPT {
            gone.sort_unstable();
            for (_, name) in gone.into_iter().rev().skip(ENDED_KEPT) {
                self.seen.remove(&name);
                self.cpu.remove(&name);
                self.waits.forget(&name);
            }
        }
        for c in &iv.containers {
            if let herd_model::CpuCell::Measured(cpu) = &c.cpu {
                let e = self.cpu.entry(c.container.clone()).or_default();
                e.0 += cpu.usage_ns as f64 / 1e9;
                if let herd_model::Throttling::Measured { throttled_ns, .. } = cpu.throttle {
                    e.1 += throttled_ns as f64 / 1e9;
                }
            }
        }
        self.waits.add(iv);
        self.latest = Some(iv.clone());
    }

    /// Renders the text format.
    pub fn render(&self) -> String {
        use herd_model::{Memory, Throttling};
        let mut o = String::new();
        let family = |o: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        let line = |o: &mut String, name: &str, labels: &str, v: f64| {
            let _ = writeln!(o, "{name}{{{labels}}} {v}");
        };
        for (i, (name, help)) in [
            (
                "herd_container_cpu_seconds_total",
                "CPU time the container's cgroup used.",
            ),
            (
                "herd_container_cpu_throttled_seconds_total",
                "Time the container's run queues spent throttled by its CFS quota, summed over CPUs.",
            ),
        ]
        .into_iter()
        .enumerate()
        {
            family(&mut o, name, "counter", help);
            for (c, v) in &self.cpu {
                let v = if i == 0 { v.0 } else { v.1 };
                line(&mut o, name, &format!("container=\"{}\"", esc(c)), v);
            }
        }
        self.waits.render(&mut o, self.latest.as_ref());
        let Some(iv) = &self.latest else {
            return o;
        };
        type Cell = fn(&herd_model::ContainerInterval) -> Option<f64>;
        let containers: [(&str, &str, Cell); 13] = [
            (
                "herd_container_cpu_cores",
                "CPU used over the last interval, in cores.",
                |c| match &c.cpu {
                    CpuCell::Measured(cpu) => Some(cpu.cpu_cores),
                    CpuCell::Unavailable { .. } => None,
                },
            ),
            (
                "herd_container_cpu_burst_cores",
                "CPU over the busiest 100 ms of the last interval, in cores.",
                |c| match &c.cpu {
                    CpuCell::Measured(cpu) => Some(cpu.burst_cores),
                    CpuCell::Unavailable { .. } => None,
                },
            ),
            (
                "herd_container_cpu_quota_cores",
                "The CFS quota in cores (absent when unlimited).",
                |c| match &c.cpu {
                    CpuCell::Measured(cpu) => match cpu.throttle {
                        Throttling::Measured { quota_cores, .. } => quota_cores,
                        Throttling::Unavailable { .. } => None,
                    },
                    CpuCell::Unavailable { .. } => None,
                },
            ),
            (
                "herd_container_cpu_throttled_ratio",
                "Share of the last interval's CFS periods that were throttled (0-1).",
                |c| match &c.cpu {
                    CpuCell::Measured(cpu) => match cpu.throttle {
                        Throttling::Measured {
                            throttled_share, ..
                        } => Some(throttled_share),
                        Throttling::Unavailable { .. } => None,
                    },
                    CpuCell::Unavailable { .. } => None,
                },
            ),
            (
                "herd_container_memory_usage_bytes",
                "Memory charged to the cgroup (page cache included).",
                |c| match &c.cpu {
                    CpuCell::Measured(cpu) => match cpu.memory {
                        Memory::Measured { current_bytes, .. } => Some(current_bytes as f64),
                        Memory::Unavailable { .. } => None,
                    },
                    CpuCell::Unavailable { .. } => None,
                },
            ),
            (
                "herd_container_memory_working_set_bytes",
                "Usage minus inactive file pages (what docker stats shows).",
                |c| match &c.cpu {
                    CpuCell::Measured(cpu) => match cpu.memory {
                        Memory::Measured {
                            working_set_bytes, ..
                        } => working_set_bytes.map(|b| b as f64),
                        Memory::Unavailable { .. } => None,
                    },
                    CpuCell::Unavailable { .. } => None,
                },
            ),
            (
                "herd_container_sockets_established",
                "Sockets in ESTABLISHED in the container's network namespace.",
                |c| match &c.sockets {
                    SocketCell::Measured { established, .. } => Some(*established as f64),
                    SocketCell::Unavailable { .. } => None,
                },
            ),
            (
                "herd_container_sockets_syn_sent",
                "Sockets in SYN_SENT in the container's network namespace.",
                |c| match &c.sockets {
                    SocketCell::Measured { syn_sent, .. } => Some(*syn_sent as f64),
                    SocketCell::Unavailable { .. } => None,
                },
            ),
            (
                "herd_container_sockets_time_wait",
                "Sockets in TIME_WAIT (as ss counts them) in the container's network namespace.",
                |c| match &c.sockets {
                    SocketCell::Measured { time_wait, .. } => Some(*time_wait as f64),
                    SocketCell::Unavailable { .. } => None,
                },
            ),
            (
                "herd_container_sockets_time_wait_baseline",
                "Of those, sockets already in TIME_WAIT when the probe started.",
                |c| match &c.sockets {
                    SocketCell::Measured {
                        time_wait_baseline, ..
                    } => Some(*time_wait_baseline as f64),
                    SocketCell::Unavailable { .. } => None,
                },
            ),
            (
                "herd_container_ephemeral_ports",
                "Usable ephemeral ports of the container's network namespace.",
                |c| match &c.sockets {
                    SocketCell::Measured { port_range, .. } => Some(*port_range as f64),
                    SocketCell::Unavailable { .. } => None,
                },
            ),
            (
                "herd_container_port_headroom_min",
                "The fewest free ephemeral ports toward any one destination.",
                |c| match &c.sockets {
                    SocketCell::Measured { min_headroom, .. } => min_headroom.map(|h| h as f64),
                    SocketCell::Unavailable { .. } => None,
                },
            ),
            (
                "herd_container_listen_overflows",
                "Listen-queue overflows in the last interval.",
                |c| match &c.sockets {
                    SocketCell::Measured {
                        listen_overflows, ..
                    } => Some(*listen_overflows as f64),
                    SocketCell::Unavailable { .. } => None,
                },
            ),
        ];
        for (name, help, f) in containers {
            family(&mut o, name, "gauge", help);
            for c in &iv.containers {
                if let Some(v) = f(c) {
                    line(
                        &mut o,
                        name,
                        &format!("container=\"{}\"", esc(&c.container)),
                        v,
                    );
                }
            }
        }
        type PairCell = fn(&herd_model::PairGauges) -> u64;
        let pairs: [(&str, &str, PairCell); 4] = [
            (
                "herd_pair_sockets_established",
                "ESTABLISHED sockets from a container to a destination.",
                |g| g.established,
            ),
            (
                "herd_pair_sockets_time_wait",
                "TIME_WAIT sockets from a container to a destination.",
                |g| g.time_wait,
            ),
            (
                "herd_pair_ports_in_use",
                "Ephemeral ports a container holds toward a destination.",
                |g| g.ports_in_use,
            ),
            (
                "herd_pair_port_headroom",
                "Ephemeral ports still free toward a destination.",
                |g| g.headroom,
            ),
        ];
        for (name, help, f) in pairs {
            family(&mut o, name, "gauge", help);
            for p in &iv.pairs {
                if let Some(g) = &p.gauges {
                    let l = format!(
                        "container=\"{}\",remote=\"{}\",remote_container=\"{}\"",
                        esc(&p.container),
                        p.remote,
                        esc(p.remote_container.as_deref().unwrap_or(""))
                    );
                    line(&mut o, name, &l, f(g) as f64);
                }
            }
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_stable_names_and_labels() {
        let mut counts = [0; herd_model::N_COUNTERS];
        counts[Counter::Connects as usize] = 440;
        counts[Counter::ConnectAddrNotAvail as usize] = 3;
        let mut st = PairStats {
            connects: 440,
            ..PairStats::default()
        };
        st.connect_latency_us.0[4] = 440; // [16, 32) us
        let e = ProbeTotals {
            containers: vec![("gate\"way".into(), counts)],
            pairs: vec![(
                "gw".into(),
                "198.18.0.2:8080".parse().unwrap(),
                Some("backend".into()),
                st,
            )],
            losses: [0, 0, 0, 1, 0, 0, 0, 0, 0],
        };
        let t = counters(&e);
        assert!(
            t.contains("herd_tcp_connects_total{container=\"gate\\\"way\"} 440\n"),
            "{t}"
        );
        assert!(t.contains(
            "herd_tcp_connect_failures_total{container=\"gate\\\"way\",errno=\"EADDRNOTAVAIL\"} 3\n"
        ));
        assert!(t.contains("herd_pair_connects_total{container=\"gw\",remote=\"198.18.0.2:8080\",remote_container=\"backend\"} 440\n"));
        assert!(t.contains("herd_pair_connect_latency_seconds_bucket{container=\"gw\",remote=\"198.18.0.2:8080\",remote_container=\"backend\",le=\"0.000016\"} 0\n"), "{t}");
        assert!(t.contains("le=\"0.000032\"} 440\n"));
        assert!(t.contains("le=\"+Inf\"} 440\n"));
        assert!(t.contains("herd_probe_lost_events_total{reason=\"pair_map_full\"} 1\n"));
        // Every sample line belongs to a declared metric family.
        for line in t.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            let family = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(t.contains(&format!("# TYPE {family} ")), "{name}");
        }
    }

    #[test]
    fn gauges_keep_the_series_of_a_bounded_number_of_ended_containers() {
        let row = |name: &str| herd_model::ContainerInterval {
            container: name.into(),
            counts: herd_model::CountMap::default(),
            cpu: CpuCell::Unavailable { reason: "-".into() },
            sockets: SocketCell::Unavailable { reason: "-".into() },
            started_ns: None,
            ended_ns: None,
            waits: herd_model::waits::ContainerWaits::default(),
        };
        let mut g = Gauges::default();
        // A one-shot container per interval beside one that runs throughout.
        for i in 0..(ENDED_KEPT + 30) {
            g.add(&herd_model::ProbeInterval {
                at_ns: i as u64,
                interval_ns: 1,
                containers: vec![row("gw"), row(&format!("job{i}"))],
                pairs: Vec::new(),
                lost: 0,
                services: Vec::new(),
                rolled_up: None,
            });
        }
        assert_eq!(
            g.seen.len(),
            ENDED_KEPT + 2,
            "gw, the current job and 64 ended"
        );
        assert!(g.seen.contains_key("gw"));
        assert!(!g.seen.contains_key("job0"));
        assert!(g.seen.contains_key(&format!("job{}", 29)));
    }
}
