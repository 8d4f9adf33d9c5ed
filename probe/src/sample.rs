//! From two map snapshots to one interval sample per container: the probe's typed output.

use std::{
    collections::{BTreeMap, HashMap},
    net::{IpAddr, SocketAddr},
    path::PathBuf,
};

use probe_common::{N_COUNTERS, PairStats};

use crate::{Snapshot, containers::ContainerSet, pair_addr};
use herd_model::{
    ContainerInterval, CountMap, CpuCell, Log2Summary, PairInterval, ProbeInterval, SocketCell,
};

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
        if d.connects == 0 && d.established == 0 && d.closed == 0 && d.time_wait_entries == 0 {
            continue;
        }
        let remote = SocketAddr::new(pair_addr(key), key.port);
        merged
            .entry((set.attribute(key.cgroup, paths), remote))
            .or_default()
            .add(&d);
    }
    let pairs = merged
        .into_iter()
        .map(|((i, remote), st)| PairInterval {
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
    ProbeInterval {
        rolled_up: None,
        at_ns: cur.at_ns,
        interval_ns: cur.at_ns.saturating_sub(prev.at_ns),
        pairs,
        containers: names
            .iter()
            .zip(sums)
            .map(|(n, c)| ContainerInterval {
                container: (*n).to_owned(),
                counts: CountMap(c),
                cpu: CpuCell::default(),
                sockets: SocketCell::default(),
                started_ns: None,
                ended_ns: None,
            })
            .collect(),
        lost: cur.lost().saturating_sub(prev.lost()),
        services: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use probe_common::Counter;

    use crate::containers::Container;

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
            losses: [1, 0, 0, 0, 0],
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
