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
    cgroupfs::{CpuSampler, HostFiles},
    containers::ContainerSet,
    containers::HOST,
    prometheus::Exposition,
    sample::CpuCell,
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
    /// CPU samplers by container name; `host` samples the root cgroup (the whole machine).
    cpu: HashMap<String, CpuSampler<HostFiles>>,
    /// Why a container has no CPU sampler.
    cpu_missing: HashMap<String, String>,
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
            cpu: HashMap::new(),
            cpu_missing: HashMap::new(),
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
        let roots = self
            .set
            .containers()
            .iter()
            .filter(|c| c.ended_ns.is_none())
            .map(|c| (c.name.clone(), c.cgroup.clone()))
            .chain(std::iter::once((HOST.to_owned(), PathBuf::from("/"))));
        for (name, cgroup) in roots.collect::<Vec<_>>() {
            if self.cpu.contains_key(&name) || self.cpu_missing.contains_key(&name) {
                continue;
            }
            match CpuSampler::open(&self.layout, &cgroup, now_ns) {
                Ok(s) => {
                    self.cpu.insert(name, s);
                }
                Err(e) => {
                    self.cpu_missing.insert(name, e.to_string());
                }
            }
        }
        changes
    }

    /// Reads every container's CPU counters; call every [`crate::cgroupfs::POLL_NS`] (100 ms)
    /// so each interval knows its busiest 100 ms window. A failed read is skipped: the next
    /// poll covers the gap.
    pub fn poll_cpu(&mut self) {
        let now = crate::clock::now_ns();
        for s in self.cpu.values_mut() {
            let _ = s.poll(now);
        }
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
        self.poll_cpu();
        let mut iv = interval(&self.prev, &cur, &self.set, &self.paths, &self.owners);
        for c in &mut iv.containers {
            c.cpu = match self.cpu.get_mut(&c.container) {
                Some(s) => match s.close_interval() {
                    Some(ci) => CpuCell::Measured(Box::new(ci)),
                    None if s.ended() => CpuCell::Unavailable {
                        reason: "the container's cgroup ended".into(),
                    },
                    None => CpuCell::Unavailable {
                        reason: "no cgroupfs reading in this interval".into(),
                    },
                },
                None => CpuCell::Unavailable {
                    reason: self
                        .cpu_missing
                        .get(&c.container)
                        .cloned()
                        .unwrap_or_else(|| "the container has no cgroup to read".into()),
                },
            };
        }
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
            slot.1.add(&p.stats());
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
