//! The probe's timeline: a [`Sampler`] owns the loaded programs and the container set, and
//! turns map readings into one [`Interval`] per call, keeping running totals. The CLI, the
//! demo and the run recorder all consume this one typed stream.

use std::{
    collections::{BTreeMap, HashMap},
    net::{IpAddr, SocketAddr},
    path::PathBuf,
};

use probe_common::{N_COUNTERS, PairStats};

use crate::{
    Counts, KernelProbe, ProbeError, Snapshot, addrs,
    cgroup::{CgroupLayout, walk},
    containers::ContainerSet,
    prometheus::Exposition,
    sample::{Interval, interval},
};

/// Samples the kernel maps into intervals.
pub struct Sampler {
    probe: KernelProbe,
    set: ContainerSet,
    layout: CgroupLayout,
    paths: HashMap<u64, PathBuf>,
    owners: HashMap<IpAddr, String>,
    prev: Snapshot,
    totals: Vec<(String, Counts)>,
    pair_totals: BTreeMap<(String, SocketAddr), (Option<String>, PairStats)>,
}

impl Sampler {
    /// Starts sampling: the first interval begins now.
    pub fn new(
        probe: KernelProbe,
        set: ContainerSet,
        layout: CgroupLayout,
    ) -> Result<Self, ProbeError> {
        let prev = probe.snapshot()?;
        let mut s = Self {
            probe,
            set,
            paths: HashMap::new(),
            owners: HashMap::new(),
            layout,
            prev,
            totals: Vec::new(),
            pair_totals: BTreeMap::new(),
        };
        s.refresh(crate::clock::now_ns());
        Ok(s)
    }

    /// Re-reads the cgroup tree: picks up new containers, marks vanished ones ended, and
    /// relabels destination addresses. Returns (appeared, ended) container names.
    pub fn refresh(&mut self, now_ns: u64) -> (Vec<String>, Vec<String>) {
        self.paths = walk(&self.layout.unified);
        let changes = self.set.refresh(&self.paths, now_ns);
        // Sticky: a container whose processes all exited keeps the addresses learned while it
        // had one, until the container itself ends.
        let live: Vec<&str> = self
            .set
            .containers()
            .iter()
            .filter(|c| c.ended_ns.is_none())
            .map(|c| c.name.as_str())
            .collect();
        self.owners.retain(|_, name| live.contains(&name.as_str()));
        for (addr, name) in addrs::owners(&self.set, &self.layout.unified) {
            self.owners.insert(addr, name);
        }
        changes
    }

    /// Reads the maps and returns the interval since the previous call.
    pub fn sample(&mut self) -> Result<Interval, ProbeError> {
        let cur = self.probe.snapshot()?;
        // Unknown cgroup ids mean new cgroups: the tree is re-read only then, or when a
        // container could have ended (cheap: one readdir per cgroup directory).
        if cur.by_cgroup.keys().any(|id| !self.paths.contains_key(id))
            || self.set.containers().iter().any(|c| {
                c.ended_ns.is_none()
                    && !std::path::Path::new(&self.layout.unified_path(&c.cgroup)).exists()
            })
        {
            self.refresh(cur.at_ns);
        }
        let iv = interval(&self.prev, &cur, &self.set, &self.paths, &self.owners);
        for c in &iv.containers {
            match self.totals.iter_mut().find(|(n, _)| *n == c.container) {
                Some((_, t)) => {
                    for (t, v) in t.iter_mut().zip(c.counts.0) {
                        *t += v;
                    }
                }
                None => self.totals.push((c.container.clone(), c.counts.0)),
            }
        }
        for p in &iv.pairs {
            let key = (p.container.clone(), p.remote);
            let slot = self.pair_totals.entry(key).or_default();
            slot.0 = p.remote_container.clone();
            slot.1.add(&p.stats);
        }
        self.prev = cur;
        Ok(iv)
    }

    /// Cumulative counters for the Prometheus endpoint.
    pub fn exposition(&self) -> Exposition {
        Exposition {
            containers: self.totals(),
            pairs: self
                .pair_totals
                .iter()
                .map(|((c, r), (rc, st))| (c.clone(), *r, rc.clone(), *st))
                .collect(),
            losses: self.prev.losses,
        }
    }

    /// Totals per container since the sampler started, host last.
    pub fn totals(&self) -> Vec<(String, Counts)> {
        let mut t = self.totals.clone();
        if let Some(i) = t.iter().position(|(n, _)| n == crate::containers::HOST) {
            let host = t.remove(i);
            t.push(host);
        }
        t
    }

    /// The container set.
    pub fn containers(&self) -> &ContainerSet {
        &self.set
    }

    /// An all-zero counter row.
    pub fn zero() -> Counts {
        [0; N_COUNTERS]
    }
}
