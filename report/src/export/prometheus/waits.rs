//! The probe's waits' series ([`herd_model::waits`]): run-queue delay, PSI, OOM kills, listen drops and
//! queues, conntrack. Counters are the intervals' deltas summed since the probe started;
//! gauges are the latest interval's. Names follow the module's rule: `herd_<subject>_<what>`,
//! `_total` for counters, base units (seconds, bytes).

use std::{collections::BTreeMap, fmt::Write as _};

use herd_model::{
    HIST_BUCKETS, Log2Hist, ProbeInterval,
    waits::{ConntrackCell, ListenerCell, OomCell, PsiCell, RunqCell},
};

use super::esc;

/// Running totals of one container's waits.
#[derive(Clone, Debug, Default)]
struct Totals {
    runq_ns: u64,
    runq_count: u64,
    /// `None` once an interval without a per-wait histogram was added.
    runq_us: Option<Log2Hist>,
    runq: bool,
    /// PSI stall seconds: (resource, kind) → µs.
    psi_us: BTreeMap<(&'static str, &'static str), u64>,
    oom_kills: Option<u64>,
    conntrack_drops: Option<u64>,
    /// Listen drops per port.
    listen_drops: BTreeMap<u16, u64>,
}

/// The waits' running totals per container.
#[derive(Clone, Debug, Default)]
pub(super) struct WaitTotals {
    by_container: BTreeMap<String, Totals>,
}

impl WaitTotals {
    /// Drops a container's totals (it ended long ago).
    pub(super) fn forget(&mut self, container: &str) {
        self.by_container.remove(container);
    }

    /// Adds one interval's deltas.
    pub(super) fn add(&mut self, iv: &ProbeInterval) {
        for c in &iv.containers {
            let t = self
                .by_container
                .entry(c.container.clone())
                .or_insert_with(|| Totals {
                    runq_us: Some(Log2Hist::default()),
                    ..Totals::default()
                });
            let w = &c.waits;
            if let RunqCell::Measured {
                count,
                total_ns,
                delay_buckets,
                ..
            } = &w.runq
            {
                t.runq = true;
                t.runq_ns += total_ns;
                t.runq_count += count;
                // The histogram family only while every interval timed its waits.
                match (t.runq_us.as_mut(), delay_buckets) {
                    (Some(h), Some(b)) => h.add(b),
                    _ => t.runq_us = None,
                }
            }
            if let PsiCell::Measured { cpu, memory, io } = &w.psi {
                for (res, p) in [("cpu", cpu), ("memory", memory), ("io", io)] {
                    if let Some(p) = p {
                        *t.psi_us.entry((res, "some")).or_default() += p.some_us;
                        if let Some(full) = p.full_us {
                            *t.psi_us.entry((res, "full")).or_default() += full;
                        }
                    }
                }
            }
            if let OomCell::Measured { oom_kills } = w.oom {
                *t.oom_kills.get_or_insert(0) += oom_kills;
            }
            if let ConntrackCell::Measured { drop: Some(d), .. } = w.conntrack {
                *t.conntrack_drops.get_or_insert(0) += d;
            }
            if let ListenerCell::Measured { ports } = &w.listeners {
                for p in ports {
                    *t.listen_drops.entry(p.local_port).or_default() += p.drops;
                }
            }
        }
    }

    /// Renders every waits family; `latest` gives the gauges.
    pub(super) fn render(&self, o: &mut String, latest: Option<&ProbeInterval>) {
        let family = |o: &mut String, name: &str, kind: &str, help: &str| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        let name = "herd_container_runq_delay_seconds";
        family(
            o,
            name,
            "histogram",
            "Time the container's threads waited runnable for a CPU, one observation per wait (log2 buckets; _sum is exact).",
        );
        for (c, t) in self.by_container.iter().filter(|(_, t)| t.runq) {
            let l = format!("container=\"{}\"", esc(c));
            // Without per-wait timing (no `--runq-waits`) only the +Inf bucket: the count
            // and the sum are exact, where each wait fell is not known.
            let mut cum = 0u64;
            if let Some(h) = &t.runq_us {
                for (i, n) in h.0.iter().enumerate().take(HIST_BUCKETS - 1) {
                    cum += n;
                    let le = (1u64 << (i + 1)) as f64 * 1e-6;
                    let _ = writeln!(o, "{name}_bucket{{{l},le=\"{le}\"}} {cum}");
                }
                cum += h.0[HIST_BUCKETS - 1];
            } else {
                cum = t.runq_count;
            }
            let _ = writeln!(o, "{name}_bucket{{{l},le=\"+Inf\"}} {cum}");
            let _ = writeln!(o, "{name}_sum{{{l}}} {}", t.runq_ns as f64 / 1e9);
            let _ = writeln!(o, "{name}_count{{{l}}} {cum}");
        }
        let name = "herd_container_pressure_stalled_seconds_total";
        family(
            o,
            name,
            "counter",
            "PSI stall time of the container's cgroup: kind=some (at least one task stalled) or full (all non-idle tasks), per resource.",
        );
        for (c, t) in &self.by_container {
            for ((res, kind), us) in &t.psi_us {
                let _ = writeln!(
                    o,
                    "{name}{{container=\"{}\",resource=\"{res}\",kind=\"{kind}\"}} {}",
                    esc(c),
                    *us as f64 / 1e6
                );
            }
        }
        type Counter = (&'static str, &'static str, fn(&Totals) -> Option<u64>);
        let counters: [Counter; 2] = [
            (
                "herd_container_oom_kills_total",
                "Processes of the container's memory cgroup killed by the OOM killer.",
                |t| t.oom_kills,
            ),
            (
                "herd_container_conntrack_drops_total",
                "New connections conntrack dropped in the container's network namespace (table full).",
                |t| t.conntrack_drops,
            ),
        ];
        for (name, help, f) in counters {
            family(o, name, "counter", help);
            for (c, t) in &self.by_container {
                if let Some(v) = f(t) {
                    let _ = writeln!(o, "{name}{{container=\"{}\"}} {v}", esc(c));
                }
            }
        }
        let name = "herd_listener_drops_total";
        family(
            o,
            name,
            "counter",
            "SYNs and handshake ACKs dropped by a listening port of the container's network namespace (accept queue full).",
        );
        for (c, t) in &self.by_container {
            for (port, v) in &t.listen_drops {
                let _ = writeln!(o, "{name}{{container=\"{}\",port=\"{port}\"}} {v}", esc(c));
            }
        }
        let Some(iv) = latest else {
            return;
        };
        for (name, help, backlog) in [
            (
                "herd_listener_accept_queue",
                "Connections waiting in a listening port's accept queues at the end of the last interval.",
                false,
            ),
            (
                "herd_listener_backlog",
                "The accept queues' limit of a listening port (listen() backlog, capped by somaxconn).",
                true,
            ),
        ] {
            family(o, name, "gauge", help);
            for c in &iv.containers {
                if let ListenerCell::Measured { ports } = &c.waits.listeners {
                    for p in ports {
                        let v = if backlog { p.backlog } else { p.accept_queue };
                        let _ = writeln!(
                            o,
                            "{name}{{container=\"{}\",port=\"{}\"}} {v}",
                            esc(&c.container),
                            p.local_port
                        );
                    }
                }
            }
        }
        for (name, help, max) in [
            (
                "herd_container_conntrack_entries",
                "conntrack entries of the container's network namespace.",
                false,
            ),
            (
                "herd_container_conntrack_max",
                "The conntrack table's limit (nf_conntrack_max, host-wide).",
                true,
            ),
        ] {
            family(o, name, "gauge", help);
            for c in &iv.containers {
                if let ConntrackCell::Measured {
                    entries, max: m, ..
                } = &c.waits.conntrack
                {
                    let v = if max { m } else { entries };
                    let _ = writeln!(o, "{name}{{container=\"{}\"}} {v}", esc(&c.container));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use herd_model::{
        ContainerInterval, CountMap, CpuCell, ProbeInterval, SocketCell,
        waits::{
            ConntrackCell, ContainerWaits, ListenerCell, ListenerWaits, OomCell, Pressure, PsiCell,
            RunqCell,
        },
    };

    use crate::export::prometheus::Gauges;

    fn interval(runq_ms: u64, drops: u64) -> ProbeInterval {
        let mut h = herd_model::Log2Hist::default();
        h.0[10] = 4;
        ProbeInterval {
            rolled_up: None,
            at_ns: 1,
            interval_ns: 1,
            containers: vec![ContainerInterval {
                container: "gw".into(),
                counts: CountMap::default(),
                cpu: CpuCell::default(),
                sockets: SocketCell::default(),
                started_ns: None,
                ended_ns: None,
                waits: ContainerWaits {
                    runq: RunqCell::of(&herd_model::RunqStats {
                        count: 4,
                        total_ns: runq_ms * 1_000_000,
                        delay_us: h,
                    }),
                    windows: Vec::new(),
                    psi: PsiCell::Measured {
                        cpu: Some(Pressure {
                            some_us: 250_000,
                            full_us: Some(0),
                        }),
                        memory: None,
                        io: None,
                    },
                    oom: OomCell::Measured { oom_kills: 1 },
                    listeners: ListenerCell::Measured {
                        ports: vec![ListenerWaits {
                            local_port: 8080,
                            sockets: 1,
                            drops,
                            accept_queue: 5,
                            backlog: 4,
                        }],
                    },
                    conntrack: ConntrackCell::Measured {
                        entries: 10,
                        max: 262_144,
                        drop: Some(0),
                        early_drop: None,
                        insert_failed: None,
                    },
                },
            }],
            pairs: Vec::new(),
            lost: 0,
            services: Vec::new(),
        }
    }

    #[test]
    fn waits_render_as_counters_summed_over_intervals_and_the_latest_gauges() {
        let mut g = Gauges::default();
        g.add(&interval(6, 2));
        g.add(&interval(4, 3));
        let t = g.render();
        for line in [
            "herd_container_runq_delay_seconds_sum{container=\"gw\"} 0.01\n",
            "herd_container_runq_delay_seconds_count{container=\"gw\"} 8\n",
            "herd_container_runq_delay_seconds_bucket{container=\"gw\",le=\"0.001024\"} 0\n",
            "herd_container_runq_delay_seconds_bucket{container=\"gw\",le=\"0.002048\"} 8\n",
            "herd_container_pressure_stalled_seconds_total{container=\"gw\",resource=\"cpu\",kind=\"some\"} 0.5\n",
            "herd_container_pressure_stalled_seconds_total{container=\"gw\",resource=\"cpu\",kind=\"full\"} 0\n",
            "herd_container_oom_kills_total{container=\"gw\"} 2\n",
            "herd_listener_drops_total{container=\"gw\",port=\"8080\"} 5\n",
            "herd_listener_accept_queue{container=\"gw\",port=\"8080\"} 5\n",
            "herd_listener_backlog{container=\"gw\",port=\"8080\"} 4\n",
            "herd_container_conntrack_entries{container=\"gw\"} 10\n",
            "herd_container_conntrack_max{container=\"gw\"} 262144\n",
            "herd_container_conntrack_drops_total{container=\"gw\"} 0\n",
        ] {
            assert!(t.contains(line), "missing {line:?} in\n{t}");
        }
    }
}
