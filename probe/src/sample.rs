//! From two map snapshots to one interval sample per container: the probe's typed output.

use std::{
    collections::{BTreeMap, HashMap},
    net::{IpAddr, SocketAddr},
    path::PathBuf,
};

use probe_common::{N_COUNTERS, OWN_TGID_KEY, PairStats, RunqStats};

use crate::{OWN_ROW, Snapshot, containers::ContainerSet, pair_addr};
use herd_model::{
    ContainerInterval, CountMap, CpuCell, Log2Summary, PairInterval, ProbeInterval, SocketCell,
    waits::{ContainerWaits, PairWaits, RetransWindowCell, RunqCell},
};

/// Why the row of herd's own process has only its run-queue delay.
pub const OWN_ROW_REASON: &str = "herd's own process: this row holds its threads' run-queue delay only; its CPU, sockets \
     and TCP counts are in its cgroup's row";

/// Turns cumulative snapshots into deltas per container and per pair. `paths` maps cgroup ids
/// to paths (for attributing descendants); ids missing from it count as `host`. `owners` maps
/// addresses to the container that owns them, to label destinations.
pub fn interval(
    prev: &Snapshot,
    cur: &Snapshot,
    set: &ContainerSet,
    paths: &HashMap<u64, PathBuf>,
    owners: &HashMap<IpAddr, String>,
) -> ProbeInterval {
    let names = set.names();
    let mut sums = vec![[0u64; N_COUNTERS]; names.len()];
    for (id, now) in &cur.by_cgroup {
        let before = prev.by_cgroup.get(id).copied().unwrap_or_default();
        let slot = &mut sums[set.attribute(*id, paths)];
        for i in 0..N_COUNTERS {
            // A cgroup's entry can be deleted and recreated; never report a negative delta.
            slot[i] += now[i].saturating_sub(before[i]);
        }
    }
    // Pairs: delta per kernel key, merged per (container, destination).
    let mut merged: BTreeMap<(usize, SocketAddr), PairStats> = BTreeMap::new();
    for (key, now) in &cur.pairs {
        let d = match prev.pairs.get(key) {
            Some(before) => now.delta(before),
            None => *now,
        };
        if d.connects == 0
            && d.established == 0
            && d.closed == 0
            && d.time_wait_entries == 0
            && d.retrans_segs == 0
        {
            continue;
        }
        let remote = SocketAddr::new(pair_addr(key), key.port);
        merged
            .entry((set.attribute(key.cgroup, paths), remote))
            .or_default()
            .add(&d);
    }
    // Retransmit windows: per (container, destination), cgroups of one container merged.
    let mut windows: BTreeMap<(usize, SocketAddr), BTreeMap<u64, RetransWindowCell>> =
        BTreeMap::new();
    for (key, span) in &cur.retrans_windows {
        let remote = SocketAddr::new(pair_addr(key), key.port);
        let w = windows
            .entry((set.attribute(key.cgroup, paths), remote))
            .or_default()
            .entry(span.start_ns)
            .or_insert(RetransWindowCell {
                start_ns: span.start_ns,
                end_ns: span.end_ns,
                ..RetransWindowCell::default()
            });
        w.retrans_segs += span.retrans_segs;
        w.syn_retrans += span.syn_retrans;
    }
    for k in windows.keys() {
        // A window that closed after its pair's last count of an earlier interval still
        // needs a row to be shown on.
        merged.entry(*k).or_default();
    }
    let pairs = merged
        .into_iter()
        .map(|((i, remote), st)| PairInterval {
            waits: PairWaits {
                retrans_segs: st.retrans_segs,
                syn_retrans: st.syn_retrans,
                windows: windows
                    .remove(&(i, remote))
                    .map(|w| w.into_values().collect())
                    .unwrap_or_default(),
            },
            container: names[i].to_owned(),
            remote,
            remote_container: owners.get(&remote.ip()).cloned(),
            connects: st.connects,
            established: st.established,
            time_wait_entries: st.time_wait_entries,
            closed: st.closed,
            connect_latency_us: Log2Summary::of(&st.connect_latency_us),
            lifetime_ms: Log2Summary::of(&st.lifetime_ms),
            connect_latency_buckets: st.connect_latency_us,
            lifetime_buckets: st.lifetime_ms,
            gauges: None,
        })
        .collect();
    // Run-queue delay: delta per key, summed per container; the named process's threads
    // (herd's own) in a row of their own.
    let mut runq = vec![RunqStats::default(); names.len()];
    let mut own: Option<RunqStats> = None;
    for (id, now) in &cur.runq {
        let d = match prev.runq.get(id) {
            Some(before) => now.delta(before),
            None => *now,
        };
        if *id == OWN_TGID_KEY {
            own.get_or_insert_default().add(&d);
        } else {
            runq[set.attribute(*id, paths)].add(&d);
        }
    }
    let runq_cell = |d: &RunqStats| match &cur.runq_unavailable {
        Some(reason) => RunqCell::Unavailable {
            reason: reason.clone(),
        },
        None if cur.runq_totals_only => RunqCell::totals(d),
        None => RunqCell::of(d),
    };
    let mut containers: Vec<ContainerInterval> = names
        .iter()
        .zip(sums)
        .zip(&runq)
        .map(|((n, c), r)| ContainerInterval {
            container: (*n).to_owned(),
            counts: CountMap(c),
            cpu: CpuCell::default(),
            sockets: SocketCell::default(),
            started_ns: None,
            ended_ns: None,
            waits: ContainerWaits {
                runq: runq_cell(r),
                ..ContainerWaits::default()
            },
        })
        .collect();
    if let Some(d) = own {
        containers.push(ContainerInterval {
            container: OWN_ROW.to_owned(),
            counts: CountMap::default(),
            cpu: CpuCell::Unavailable {
                reason: OWN_ROW_REASON.into(),
            },
            sockets: SocketCell::Unavailable {
                reason: OWN_ROW_REASON.into(),
            },
            started_ns: None,
            ended_ns: None,
            waits: ContainerWaits {
                runq: runq_cell(&d),
                ..ContainerWaits::default()
            },
        });
    }
    ProbeInterval {
        rolled_up: None,
        at_ns: cur.at_ns,
        interval_ns: cur.at_ns.saturating_sub(prev.at_ns),
        pairs,
        containers,
        lost: cur.lost().saturating_sub(prev.lost()),
        services: Vec::new(),
    }
}

/// Whether a container's row says nothing: it ended at or before `since` (the interval's
/// start) and nothing was counted or measured for it in the interval.
pub(crate) fn gone(c: &ContainerInterval, since: u64) -> bool {
    c.ended_ns.is_some_and(|e| e <= since)
        && c.counts.0.iter().all(|&n| n == 0)
        && !matches!(c.cpu, CpuCell::Measured(_))
        && c.waits.runq.total_ns().unwrap_or(0) == 0
        && c.waits.windows.iter().all(|w| w.runq_count == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use probe_common::Counter;

    use crate::containers::Container;

    #[test]
    fn an_ended_container_leaves_the_rows_once_it_has_nothing_to_say() {
        let row = |ended_ns, connects| ContainerInterval {
            container: "gw".into(),
            counts: CountMap(counts(connects, 0)),
            cpu: CpuCell::default(),
            sockets: SocketCell::default(),
            started_ns: None,
            ended_ns,
            waits: ContainerWaits::default(),
        };
        // Running, or ended in this interval: kept.
        assert!(!gone(&row(None, 0), 100));
        assert!(!gone(&row(Some(150), 0), 100));
        // Ended before: gone, unless the kernel still counted for it.
        assert!(gone(&row(Some(100), 0), 100));
        assert!(gone(&row(Some(50), 0), 100));
        assert!(!gone(&row(Some(50), 1), 100));
    }

    fn counts(connects: u64, accepts: u64) -> crate::Counts {
        let mut c = [0; N_COUNTERS];
        c[Counter::Connects as usize] = connects;
        c[Counter::Accepts as usize] = accepts;
        c
    }

    #[test]
    fn pairs_merge_per_container_and_destination_with_owner_labels() {
        let mut set = ContainerSet::default();
        set.add(Container {
            name: "gw".into(),
            cgroup: "/gw".into(),
            cgroup_id: 1,
            kind: crate::discover::Kind::Explicit,
            started_ns: None,
            ended_ns: None,
        })
        .unwrap();
        let ip: IpAddr = "198.18.0.2".parse().unwrap();
        let key = crate::pair_key(1, ip, 8080);
        let child = crate::pair_key(2, ip, 8080); // a child cgroup of gw
        let paths = HashMap::from([(2, PathBuf::from("/gw/worker"))]);
        let stats = |c| PairStats {
            connects: c,
            closed: c,
            ..PairStats::default()
        };
        let prev = Snapshot {
            pairs: HashMap::from([(key, stats(10))]),
            ..Snapshot::default()
        };
        let cur = Snapshot {
            at_ns: 1,
            pairs: HashMap::from([(key, stats(25)), (child, stats(5))]),
            ..Snapshot::default()
        };
        let owners = HashMap::from([(ip, "backend".to_owned())]);
        let i = interval(&prev, &cur, &set, &paths, &owners);
        assert_eq!(i.pairs.len(), 1);
        let p = &i.pairs[0];
        assert_eq!((p.container.as_str(), p.connects, p.closed), ("gw", 20, 20));
        assert_eq!(p.remote_container.as_deref(), Some("backend"));
        assert_eq!(p.remote, "198.18.0.2:8080".parse().unwrap());
    }

    #[test]
    fn deltas_are_attributed_and_add_up_to_the_host_total() {
        let mut set = ContainerSet::default();
        set.add(Container {
            name: "cli".into(),
            cgroup: "/c".into(),
            cgroup_id: 1,
            kind: crate::discover::Kind::Explicit,
            started_ns: None,
            ended_ns: None,
        })
        .unwrap();
        let prev = Snapshot {
            at_ns: 1_000,
            by_cgroup: HashMap::from([(1, counts(5, 0)), (7, counts(1, 1))]),
            ..Snapshot::default()
        };
        let cur = Snapshot {
            at_ns: 2_000,
            by_cgroup: HashMap::from([(1, counts(8, 0)), (7, counts(1, 4)), (9, counts(2, 0))]),
            losses: [1, 0, 0, 0, 0, 0, 0, 0, 0],
            ..Snapshot::default()
        };
        let i = interval(&prev, &cur, &set, &HashMap::new(), &HashMap::new());
        assert_eq!(i.interval_ns, 1_000);
        assert_eq!(i.containers[0].counts.get(Counter::Connects), 3);
        assert_eq!(i.containers[1].container, "host");
        assert_eq!(i.containers[1].counts.get(Counter::Connects), 2);
        assert_eq!(i.containers[1].counts.get(Counter::Accepts), 3);
        assert_eq!(i.lost, 1);
        let json = serde_json::to_string(&i.containers[0]).unwrap();
        let back: ContainerInterval = serde_json::from_str(&json).unwrap();
        assert_eq!(back, i.containers[0]);
        let whole: ProbeInterval =
            serde_json::from_str(&serde_json::to_string(&i).unwrap()).unwrap();
        assert_eq!(whole, i);
        assert!(
            json.starts_with(
                r#"{"container":"cli","connects":3,"accepts":0,"time_wait_entries":0"#
            ),
            "{json}"
        );
    }
}
