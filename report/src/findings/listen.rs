//! Accept-queue overflows: a listener whose queue of finished handshakes is full drops the
//! client's SYN, and the client sends it again after 1 s, then 3 s, 7 s — connect latency in
//! steps of a second, the chain engineers lose days on when a throttled server accepts too
//! slowly.

use std::collections::BTreeMap;

use herd_model::waits::ListenerCell;
use herd_model::{Log2Hist, RunData};

use super::waits::{WHOLE_RUN, count, load, span};
use super::{Finding, n};

#[derive(Default)]
struct Acc {
    drops: u64,
    backlog: u64,
    queue_peak: u64,
    intervals: u64,
    first_s: Option<f64>,
    last_s: f64,
    phases: BTreeMap<String, u64>,
}

/// Connect latencies of the clients toward one listener, in the steps a SYN retry makes.
struct Steps {
    connects: u64,
    one_s: u64,
    three_s: u64,
    more: u64,
    sources: Vec<String>,
}

/// The steps of `h`: 512 ms–2.1 s (one SYN retry: 1 s), 2.1–4.2 s (two: 3 s), beyond.
fn steps(h: &Log2Hist) -> (u64, u64, u64) {
    let b = &h.0;
    (b[19] + b[20], b[21], b[22..].iter().sum::<u64>())
}

/// SYNs (or handshake ACKs) each container's listening port dropped at its full accept queue
/// over the load, where it dropped any.
pub(super) fn listener_drops(ats: &[super::waits::At<'_>]) -> BTreeMap<(String, u16), u64> {
    let mut out = BTreeMap::new();
    for a in ats {
        for c in &a.iv.containers {
            let ListenerCell::Measured { ports } = &c.waits.listeners else {
                continue;
            };
            for p in ports.iter().filter(|p| p.drops > 0) {
                *out.entry((c.container.clone(), p.local_port)).or_default() += p.drops;
            }
        }
    }
    out
}

/// A listening port of a container that dropped SYNs (or handshake ACKs) at its full accept
/// queue in the load: named with its drops, its backlog and the fullest queue seen, and the
/// connect latency of the pairs toward it in the steps a SYN retry makes (~1 s, ~3 s, more),
/// when the probe traced those clients.
pub fn accept_queue_overflow(d: &RunData) -> Vec<Finding> {
    let ats = load(d);
    let mut acc: BTreeMap<(String, u16), Acc> = BTreeMap::new();
    for a in &ats {
        for c in &a.iv.containers {
            let ListenerCell::Measured { ports } = &c.waits.listeners else {
                continue;
            };
            for p in ports {
                let e = acc.entry((c.container.clone(), p.local_port)).or_default();
                e.backlog = e.backlog.max(p.backlog);
                e.queue_peak = e.queue_peak.max(p.accept_queue);
                if p.drops > 0 {
                    e.drops += p.drops;
                    e.intervals += 1;
                    e.first_s = Some(e.first_s.map_or(a.start_s, |f: f64| f.min(a.start_s)));
                    e.last_s = e.last_s.max(a.end_s);
                    *e.phases.entry(a.phase.clone()).or_default() += p.drops;
                }
            }
        }
    }
    let mut found: Vec<(u64, Finding)> = Vec::new();
    for ((container, port), e) in acc {
        let Some(first) = e.first_s else {
            continue;
        };
        // The clients the probe traced toward this listener.
        let mut h = Log2Hist::default();
        let mut sources: Vec<String> = Vec::new();
        for a in &ats {
            for p in &a.iv.pairs {
                if p.remote.port() == port && p.remote_container.as_deref() == Some(&container) {
                    h.add(&p.connect_latency_buckets);
                    if !sources.contains(&p.container) {
                        sources.push(p.container.clone());
                    }
                }
            }
        }
        // None resolved to this container (the probe could not map its address, e.g. a
        // listener whose cgroup holds no process): the pairs toward its port whose
        // destination is unresolved, said as such.
        let mut unresolved = false;
        if sources.is_empty() {
            for a in &ats {
                for p in &a.iv.pairs {
                    if p.remote.port() == port && p.remote_container.is_none() {
                        unresolved = true;
                        h.add(&p.connect_latency_buckets);
                        if !sources.contains(&p.container) {
                            sources.push(p.container.clone());
                        }
                    }
                }
            }
        }
        let (one_s, three_s, more) = steps(&h);
        let st = Steps {
            connects: h.count(),
            one_s,
            three_s,
            more,
            sources,
        };
        let phase = e
            .phases
            .iter()
            .max_by_key(|(_, v)| **v)
            .map_or(WHOLE_RUN.to_owned(), |(k, _)| k.clone());
        let mut evidence = vec![format!(
            "{container} port {port}: {} {} dropped at the listener in {} {}, {}; backlog {}, \
             fullest accept queue seen {}",
            n(e.drops),
            if e.drops == 1 {
                "SYN or handshake ACK"
            } else {
                "SYNs or handshake ACKs"
            },
            n(e.intervals),
            if e.intervals == 1 {
                "interval"
            } else {
                "intervals"
            },
            span(first, e.last_s),
            n(e.backlog),
            n(e.queue_peak)
        )];
        let per: Vec<String> = e
            .phases
            .iter()
            .map(|(k, v)| format!("{k} {}", n(*v)))
            .collect();
        evidence.push(format!("drops per phase: {}", per.join(", ")));
        let mut title = format!(
            "{container} port {port}: the accept queue (backlog {}) overflowed, {} dropped \
             ({})",
            n(e.backlog),
            count(e.drops, "SYN", "SYNs"),
            span(first, e.last_s)
        );
        if st.connects > 0 {
            let toward = if unresolved {
                format!("port {port} (a destination not resolved to a container)")
            } else {
                format!("{container}:{port}")
            };
            evidence.push(format!(
                "connect latency toward {toward} from {}: {} connects, {} took 512ms–2.1s (one \
                 SYN retry: 1 s), {} took 2.1–4.2s (two: 3 s), {} longer",
                st.sources.join(", "),
                n(st.connects),
                n(st.one_s),
                n(st.three_s),
                n(st.more)
            ));
            if st.one_s + st.three_s + st.more > 0 {
                title.push_str(&format!(
                    "; of {} connects toward it, {} took 512ms–2.1s (one SYN retry: 1 s), {} \
                     2.1–4.2s (two: 3 s)",
                    n(st.connects),
                    n(st.one_s),
                    n(st.three_s)
                ));
                if st.more > 0 {
                    title.push_str(&format!(", {} longer", n(st.more)));
                }
            }
        } else {
            evidence.push(format!(
                "no client of {container}:{port} was traced (the clients are not on this host, \
                 or connected before the probe): their connect latency is not in the rows"
            ));
        }
        let f = Finding::new(
            "accept_queue_overflow",
            title,
            format!(
                "The server accepts connections more slowly than they arrive: when the accept \
                 queue (the backlog given to listen(), capped by net.core.somaxconn) is full, \
                 the kernel drops the client's SYN and the client sends it again after 1 s, \
                 then 3 s in all, 7 s — connects that take whole seconds while the server looks \
                 idle. Find why {container} accepts slowly (its CPU quota, a busy accept loop, \
                 too few acceptor threads), and raise the backlog (and somaxconn) so bursts \
                 wait in the queue rather than for a retry."
            ),
            evidence,
        )
        .about(&container)
        .in_phase(&phase)
        .number("port", f64::from(port))
        .number("drops", e.drops as f64)
        .number("backlog", e.backlog as f64)
        .number("accept_queue_peak", e.queue_peak as f64)
        .number("connects_1s", st.one_s as f64)
        .number("connects_3s", st.three_s as f64);
        found.push((e.drops, f));
    }
    found.sort_by_key(|x| std::cmp::Reverse(x.0));
    found.into_iter().map(|(_, f)| f).collect()
}
