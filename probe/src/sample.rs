//! From two map snapshots to one interval sample per container: the probe's typed output.

use std::{collections::HashMap, path::PathBuf};

use probe_common::{Counter, N_COUNTERS};

use crate::{Counts, Snapshot, containers::ContainerSet};

/// What one container did during one interval.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ContainerInterval {
    /// Container name (`host` for everything unnamed).
    pub container: String,
    /// Counter deltas over the interval, by [`Counter`] name.
    #[serde(flatten)]
    pub counts: CountMap,
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

/// One interval of the probe's timeline.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Interval {
    /// End of the interval on the shared monotonic clock.
    pub at_ns: u64,
    /// Length of the interval.
    pub interval_ns: u64,
    /// Per container, in [`ContainerSet::names`] order.
    pub containers: Vec<ContainerInterval>,
    /// Events the kernel programs could not record during the interval.
    pub lost: u64,
}

/// Turns cumulative snapshots into deltas per container. `paths` maps cgroup ids to paths (for
/// attributing descendants); ids missing from it count as `host`.
pub fn interval(
    prev: &Snapshot,
    cur: &Snapshot,
    set: &ContainerSet,
    paths: &HashMap<u64, PathBuf>,
) -> Interval {
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
    Interval {
        at_ns: cur.at_ns,
        interval_ns: cur.at_ns.saturating_sub(prev.at_ns),
        containers: names
            .iter()
            .zip(sums)
            .map(|(n, c)| ContainerInterval {
                container: (*n).to_owned(),
                counts: CountMap(c),
            })
            .collect(),
        lost: cur.lost().saturating_sub(prev.lost()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::containers::Container;

    fn counts(connects: u64, accepts: u64) -> crate::Counts {
        let mut c = [0; N_COUNTERS];
        c[Counter::Connects as usize] = connects;
        c[Counter::Accepts as usize] = accepts;
        c
    }

    #[test]
    fn deltas_are_attributed_and_add_up_to_the_host_total() {
        let mut set = ContainerSet::default();
        set.add(Container {
            name: "cli".into(),
            cgroup: "/c".into(),
            cgroup_id: 1,
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
            losses: [1, 0, 0, 0],
            ..Snapshot::default()
        };
        let i = interval(&prev, &cur, &set, &HashMap::new());
        assert_eq!(i.interval_ns, 1_000);
        assert_eq!(i.containers[0].counts.get(Counter::Connects), 3);
        assert_eq!(i.containers[1].container, "host");
        assert_eq!(i.containers[1].counts.get(Counter::Connects), 2);
        assert_eq!(i.containers[1].counts.get(Counter::Accepts), 3);
        assert_eq!(i.lost, 1);
        let json = serde_json::to_string(&i.containers[0]).unwrap();
        assert!(
            json.starts_with(
                r#"{"container":"cli","connects":3,"accepts":0,"time_wait_entries":0"#
            ),
            "{json}"
        );
    }
}
