//! The probe's timeline: a [`Sampler`] owns the loaded programs and the container set, and
//! turns map readings into one [`ProbeInterval`] per call, keeping running totals. The CLI, the
//! demo and the run recorder all consume this one typed stream.

use std::{
    collections::{BTreeMap, HashMap},
    net::{IpAddr, SocketAddr},
    os::unix::fs::MetadataExt as _,
    path::PathBuf,
    time::{Duration, Instant},
};

use probe_common::PairStats;

use crate::{
    CounterSource, Counts, ProbeError, Snapshot, addrs,
    cgroup::{CgroupLayout, walk},
    cgroupfs::{CpuSampler, HostFiles},
    containers::{ContainerSet, HOST},
    netstat::NetCounters,
    sample::interval,
    sockdiag::{DestinationGauges, NetnsCache, NetnsTarget, TcpState},
};
use herd_model::{CpuCell, InboundCell, PairGauges, ProbeInterval, ProbeTotals, SocketCell};

/// Samples the kernel maps into intervals.
pub struct Sampler {
    /// The kernel probe, or a fake in tests; read once per interval, so a virtual call is
    /// nothing next to the map walk behind it.
    probe: Box<dyn CounterSource>,
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
    /// Open network namespaces, by inode.
    netns: NetnsCache,
    /// The previous interval's counters per netns inode, for deltas.
    net_prev: HashMap<u64, NetCounters>,
    /// This process's netns inode: containers in it share the host's row.
    own_netns: u64,
    /// When sampling started (monotonic ns): TIME_WAIT sockets older than this are a
    /// baseline left by an earlier run, not this run's.
    start_ns: u64,
    /// Docker containers' addresses, names and published ports, re-read from the engine when
    /// containers appear or end (a running container's ports do not change).
    services: Vec<herd_model::Service>,
    /// Container cgroups the kernel saw created (`cgroup_mkdir`), kept after their directory
    /// is gone: a one-shot container's events are its own, not `host`'s.
    created: HashMap<u64, PathBuf>,
}

impl Sampler {
    /// Starts sampling: the first interval begins now.
    pub fn new(
        probe: impl CounterSource + 'static,
        set: ContainerSet,
        layout: CgroupLayout,
    ) -> Result<Self, ProbeError> {
        let prev = probe.snapshot()?;
        let start_ns = crate::clock::now_ns();
        let mut s = Self {
            start_ns,
            services: Vec::new(),
            created: HashMap::new(),
            probe: Box::new(probe),
            set,
            paths: HashMap::new(),
            owners: HashMap::new(),
            layout,
            prev,
            totals: Vec::new(),
            pair_totals: BTreeMap::new(),
            cpu: HashMap::new(),
            cpu_missing: HashMap::new(),
            netns: NetnsCache::default(),
            net_prev: HashMap::new(),
            own_netns: std::fs::metadata("/proc/self/ns/net").map_or(0, |m| m.ino()),
        };
        s.refresh(start_ns);
        Ok(s)
    }

    /// Re-reads the cgroup tree: picks up new containers, marks vanished ones ended, and
    /// relabels destination addresses. Returns (appeared, ended) container names.
    pub fn refresh(&mut self, now_ns: u64) -> (Vec<String>, Vec<String>) {
        let walked = walk(&self.layout.unified);
        // Cgroups created and already removed since the last re-read are discovered from the
        // kernel's record, then ended at once (their directory is gone).
        let mut all = walked.clone();
        for (id, path) in &self.created {
            all.entry(*id).or_insert_with(|| path.clone());
        }
        let mut changes = self.set.refresh(&all, now_ns);
        let (_, gone) = self.set.refresh(&walked, now_ns);
        changes.1.extend(gone);
        self.paths = all;
        if !changes.0.is_empty() || !changes.1.is_empty() {
            self.services = self.set.docker_services();
        }
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
    pub fn sample(&mut self) -> Result<ProbeInterval, ProbeError> {
        let cur = self.probe.snapshot()?;
        for (id, path) in &cur.created {
            if crate::discover::classify(path).is_some() {
                self.created.entry(*id).or_insert_with(|| path.clone());
            }
        }
        // Every interval: a container that makes no TCP event (idle, CPU-only) has no cgroup
        // id in the maps, yet must appear within one interval (one readdir per cgroup
        // directory and a few procfs reads per container).
        self.refresh(cur.at_ns);
        self.poll_cpu();
        let mut iv = interval(&self.prev, &cur, &self.set, &self.paths, &self.owners);
        iv.services = self.services.clone();
        for c in &mut iv.containers {
            if let Some(k) = self.set.containers().iter().find(|k| k.name == c.container) {
                (c.started_ns, c.ended_ns) = (k.started_ns, k.ended_ns);
            }
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
        self.attach_sockets(&mut iv);
        for p in &iv.pairs {
            let key = (p.container.clone(), p.remote);
            let slot = self.pair_totals.entry(key).or_default();
            slot.0 = p.remote_container.clone();
            slot.1.add(&p.stats());
        }
        self.prev = cur;
        Ok(iv)
    }

    /// Which network namespace a container's row reads: host reads this process's; a
    /// container reads its own through one of its processes (or, for herd's own containers,
    /// its named netns), unless it shares the host's.
    fn netns_target(&self, name: &str) -> Result<NetnsTarget, String> {
        if name == HOST {
            return Ok(NetnsTarget::Pid(std::process::id()));
        }
        let c = self
            .set
            .containers()
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| "unknown container".to_owned())?;
        if c.ended_ns.is_some() {
            return Err("the container ended".into());
        }
        let procs = self.layout.unified_path(&c.cgroup).join("cgroup.procs");
        let pid = std::fs::read_to_string(&procs)
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.trim().parse::<u32>().ok()));
        let target = match pid {
            Some(pid) => NetnsTarget::Pid(pid),
            None => {
                let named = c
                    .cgroup
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned());
                match named.filter(|n| std::path::Path::new("/run/netns").join(n).exists()) {
                    Some(n) => NetnsTarget::Named(n),
                    None => {
                        return Err(
                            "no process in the container to reach its network namespace".into()
                        );
                    }
                }
            }
        };
        if let NetnsTarget::Pid(pid) = target
            && std::fs::metadata(format!("/proc/{pid}/ns/net")).map_or(0, |m| m.ino())
                == self.own_netns
        {
            return Err(
                "shares the host's network namespace (its sockets are in host's row)".into(),
            );
        }
        Ok(target)
    }

    /// Fills every row's socket gauges and every pair's destination gauges, adding rows for
    /// destinations that only have gauges (long-lived connections opened before the interval).
    fn attach_sockets(&mut self, iv: &mut ProbeInterval) {
        let mut samples: HashMap<String, crate::sockdiag::NetnsSample> = HashMap::new();
        for c in &mut iv.containers {
            let target = match self.netns_target(&c.container) {
                Ok(t) => t,
                Err(reason) => {
                    c.sockets = SocketCell::Unavailable { reason };
                    continue;
                }
            };
            let sample = self
                .netns
                .get(&target)
                .and_then(|n| n.sample_since(Some(self.start_ns)));
            match sample {
                Ok(s) => {
                    let prev = self.net_prev.insert(s.netns_inode, s.counters.clone());
                    let delta = |now: u64, f: fn(&NetCounters) -> u64| {
                        prev.as_ref().map_or(0, |p| now.saturating_sub(f(p)))
                    };
                    c.sockets = SocketCell::Measured {
                        established: s.gauges.states.get(TcpState::Established),
                        syn_sent: s.gauges.states.get(TcpState::SynSent),
                        time_wait: s.gauges.states.get(TcpState::TimeWait),
                        time_wait_baseline: s.gauges.time_wait_baseline,
                        timewait_sockets: s.gauges.timewait_sockets,
                        min_headroom: s.gauges.min_headroom.as_ref().map(|m| m.headroom),
                        port_range: u64::from(s.port_range.usable),
                        listen_overflows: delta(s.counters.listen_overflows, |p| {
                            p.listen_overflows
                        }),
                        listen_drops: delta(s.counters.listen_drops, |p| p.listen_drops),
                        inbound: s
                            .gauges
                            .inbound
                            .iter()
                            .map(|i| InboundCell {
                                local_port: i.local_port,
                                established: i.established,
                                time_wait: i.time_wait,
                                time_wait_baseline: i.time_wait_baseline,
                            })
                            .collect(),
                    };
                    samples.insert(c.container.clone(), s);
                }
                Err(e) => {
                    c.sockets = SocketCell::Unavailable {
                        reason: e.to_string(),
                    }
                }
            }
        }
        for p in &mut iv.pairs {
            if let Some(d) = samples
                .get(&p.container)
                .and_then(|s| s.gauges.destination(p.remote))
            {
                p.gauges = Some(pair_gauges(d));
            }
        }
        for (container, s) in &samples {
            for d in &s.gauges.destinations {
                if iv
                    .pairs
                    .iter()
                    .any(|p| &p.container == container && p.remote == d.remote)
                {
                    continue;
                }
                iv.pairs.push(herd_model::PairInterval::gauges_only(
                    container.clone(),
                    d.remote,
                    self.owners.get(&d.remote.ip()).cloned(),
                    pair_gauges(d),
                ));
            }
        }
        // Namespaces of ended containers are released, so a deleted netns can really go.
        let live: Vec<u64> = samples.values().map(|s| s.netns_inode).collect();
        let stale: Vec<u64> = self
            .net_prev
            .keys()
            .filter(|k| !live.contains(k))
            .copied()
            .collect();
        for inode in stale {
            self.net_prev.remove(&inode);
            self.netns.remove(inode);
        }
    }

    /// Cumulative counters for the Prometheus endpoint.
    pub fn running_totals(&self) -> ProbeTotals {
        ProbeTotals {
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
}

fn pair_gauges(d: &DestinationGauges) -> PairGauges {
    PairGauges {
        established: d.established,
        time_wait: d.time_wait,
        time_wait_baseline: d.time_wait_baseline,
        ports_in_use: d.ports_in_use,
        headroom: d.headroom,
        srtt_p50_us: d.srtt.as_ref().map(|s| s.p50_us),
        srtt_max_us: d.srtt.as_ref().map(|s| s.max_us),
        srtt_log2: d.srtt.as_ref().map(|s| s.log2).unwrap_or_default(),
    }
}

/// When [`watch`] stops.
pub struct Watch<'a> {
    /// The interval length.
    pub every: Duration,
    /// Stop once this much time has passed.
    pub total: Duration,
    /// Stop after the next interval once this says so (the load is over).
    pub until: &'a dyn Fn() -> bool,
    /// Stop at once, taking a last interval, when this says so (a signal arrived).
    pub stop: &'a dyn Fn() -> bool,
}

/// Samples every `w.every` until `w.total` elapsed, `w.until` or `w.stop` says so, calling
/// `sink` with each interval. The last interval is taken even when stopped early, so
/// nothing counted is lost. CPU counters are polled every 100 ms in between, so each
/// interval knows its busiest 100 ms window; the kernel maps are read once per interval.
pub fn watch<E: From<ProbeError>>(
    sampler: &mut Sampler,
    w: &Watch<'_>,
    mut sink: impl FnMut(&ProbeInterval, &Sampler) -> Result<(), E>,
) -> Result<(), E> {
    let start = Instant::now();
    let mut next = start + w.every;
    let poll = Duration::from_nanos(crate::cgroupfs::POLL_NS);
    // Sleeps up to `d` in slices short enough that a stop is seen within 20 ms.
    let nap = |d: Duration| {
        let end = Instant::now() + d;
        while !(w.stop)() {
            let now = Instant::now();
            if now >= end {
                return;
            }
            std::thread::sleep((end - now).min(Duration::from_millis(20)));
        }
    };
    loop {
        let finished = (w.until)();
        if !finished {
            while Instant::now() + poll < next && !(w.stop)() {
                nap(poll);
                sampler.poll_cpu();
            }
            nap(next.saturating_duration_since(Instant::now()));
        }
        next += w.every;
        let iv = sampler.sample()?;
        sink(&iv, sampler)?;
        if finished || (w.stop)() || start.elapsed() >= w.total {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests;
