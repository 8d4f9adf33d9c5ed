//! The probe's timeline: a [`Sampler`] owns the loaded programs and the container set, and
//! turns map readings into one [`ProbeInterval`] per call, keeping running totals. The CLI, the
//! demo and the run recorder all consume this one typed stream.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    net::{IpAddr, SocketAddr},
    os::unix::fs::MetadataExt as _,
    path::PathBuf,
    time::{Duration, Instant},
};

use probe_common::{OWN_TGID_KEY, PairStats, RunqStats};

use crate::{
    CounterSource, Counts, ProbeError, Snapshot, addrs,
    cgroup::{CgroupLayout, walk},
    cgroupfs::{CgroupDirs, CpuSampler, HostFiles, WaitReading, WaitSources},
    containers::{ContainerSet, HOST},
    netstat::NetCounters,
    sample::interval,
    sockdiag::{DestinationGauges, NetnsCache, NetnsTarget, TcpState},
};
use herd_model::{
    CpuCell, InboundCell, PairGauges, ProbeInterval, ProbeTotals, SocketCell,
    waits::{
        ConntrackCell, ListenerCell, ListenerWaits, OomCell, Pressure, PsiCell, WaitWindow,
        push_window,
    },
};

/// Most pairs per container and interval known only from open sockets (no kernel event in
/// the interval): the busiest by sockets (docs/probes-sockets.md).
pub const MAX_GAUGE_PAIRS: usize = 16;

/// Most ended containers whose running totals are kept by name (the Prometheus counters,
/// `herd probe`'s totals table). Older ones are summed into one row of the table and leave
/// the container set: an hours-long run on a host where containers come and go keeps a
/// bounded state (docs/probes.md, "Long runs").
pub const MAX_ENDED_TOTALS: usize = 64;

/// Most destinations per container with running totals of their own; beyond them, the
/// destination counted least recently is summed into the container's
/// [`herd_model::OTHER_REMOTE`].
pub const MAX_PAIR_TOTALS: usize = 64;

/// A pair's running totals.
#[derive(Default)]
struct PairTotal {
    remote_container: Option<String>,
    stats: PairStats,
    /// The interval it last counted in ([`Sampler::seq`]).
    last: u64,
}

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
    /// Ended containers with totals of their own, oldest first (at most
    /// [`MAX_ENDED_TOTALS`]).
    ended: VecDeque<String>,
    /// How many ended containers were retired, and their totals summed.
    retired: (usize, Counts),
    pair_totals: BTreeMap<(String, SocketAddr), PairTotal>,
    /// Intervals sampled.
    seq: u64,
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
    /// The sub-second windows of run-queue delay and throttling.
    windows: WaitWindows,
    /// Where each container's PSI and OOM kills come from, or why they cannot be read.
    wait_sources: HashMap<String, Result<WaitSources, String>>,
    /// Each container's previous PSI and OOM reading, for deltas.
    wait_prev: HashMap<String, WaitReading>,
    /// Each listener's drops at the previous sample, by (netns inode, socket cookie).
    listener_prev: HashMap<(u64, u64), u32>,
    /// conntrack's drop counters at the previous sample, by netns inode.
    conntrack_prev: HashMap<u64, [Option<u64>; 3]>,
}

/// State of the 100 ms windows between two intervals.
#[derive(Default)]
struct WaitWindows {
    /// Run-queue totals per cgroup id at the last poll.
    runq_prev: HashMap<u64, RunqStats>,
    /// Per container: the last poll's time and throttled total.
    last: HashMap<String, (u64, Option<u64>)>,
    /// Per container: the windows closed since the last interval.
    open: HashMap<String, Vec<WaitWindow>>,
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
            ended: VecDeque::new(),
            retired: (0, Counts::default()),
            pair_totals: BTreeMap::new(),
            seq: 0,
            cpu: HashMap::new(),
            cpu_missing: HashMap::new(),
            netns: NetnsCache::default(),
            net_prev: HashMap::new(),
            own_netns: std::fs::metadata("/proc/self/ns/net").map_or(0, |m| m.ino()),
            windows: WaitWindows::default(),
            wait_sources: HashMap::new(),
            wait_prev: HashMap::new(),
            listener_prev: HashMap::new(),
            conntrack_prev: HashMap::new(),
        };
        s.windows.runq_prev = s.prev.runq.clone();
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
            if !self.wait_sources.contains_key(&name) {
                let dirs = CgroupDirs::of(&self.layout, &cgroup);
                let sources = WaitSources::resolve(&HostFiles, &dirs).map_err(|e| e.to_string());
                if let Ok(s) = &sources {
                    self.wait_prev.insert(name.clone(), s.read(&HostFiles));
                }
                self.wait_sources.insert(name.clone(), sources);
            }
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
        self.poll(false);
    }

    /// [`Self::poll_cpu`]; `closing`: the interval ends, so its windows close whatever the
    /// walk's budget says.
    fn poll(&mut self, closing: bool) {
        let now = crate::clock::now_ns();
        for s in self.cpu.values_mut() {
            let _ = s.poll(now);
        }
        self.poll_windows(now, closing);
    }

    /// Closes one sub-second window per container: the run-queue delay that ended since the
    /// last poll (the kernel map's per-cgroup deltas, attributed as the interval's are) and
    /// the throttled time its CPU sampler just read.
    fn poll_windows(&mut self, now: u64, closing: bool) {
        // A walk not due yet (many threads): the windows stay open, the next poll closes them.
        if !closing && !self.probe.runq_poll_due() {
            return;
        }
        let runq = self.probe.runq().ok().flatten();
        let names = self.set.names();
        let mut per: HashMap<&str, (u64, u64)> = HashMap::new();
        if let Some(runq) = &runq {
            for (id, cur) in runq {
                let d = match self.windows.runq_prev.get(id) {
                    Some(before) => cur.delta(before),
                    None => *cur,
                };
                let name = if *id == OWN_TGID_KEY {
                    crate::OWN_ROW
                } else {
                    names[self.set.attribute(*id, &self.paths)]
                };
                let slot = per.entry(name).or_default();
                slot.0 += d.total_ns;
                slot.1 += d.count;
            }
        }
        let own = runq.as_ref().is_some_and(|r| r.contains_key(&OWN_TGID_KEY));
        // An ended container's windows stop with its end (its row leaves after it).
        let ended: Vec<&str> = self
            .set
            .containers()
            .iter()
            .filter(|c| c.ended_ns.is_some_and(|e| e < now))
            .map(|c| c.name.as_str())
            .collect();
        for name in names
            .iter()
            .copied()
            .filter(|n| !ended.contains(n))
            .chain(own.then_some(crate::OWN_ROW))
        {
            let throttled = self
                .cpu
                .get(name)
                .and_then(|s| s.last_reading().1.throttle.map(|t| t.throttled_ns));
            let Some((start, before)) = self.windows.last.insert(name.to_owned(), (now, throttled))
            else {
                continue;
            };
            let (runq_ns, runq_count) = match (&runq, per.get(name)) {
                (None, _) => (None, 0),
                (Some(_), Some((ns, n))) => (Some(*ns), *n),
                (Some(_), None) => (Some(0), 0),
            };
            let w = WaitWindow {
                start_ns: start,
                end_ns: now,
                runq_ns,
                runq_count,
                throttled_ns: throttled.zip(before).map(|(a, b)| a.saturating_sub(b)),
            };
            push_window(self.windows.open.entry(name.to_owned()).or_default(), w);
        }
        if let Some(runq) = runq {
            self.windows.runq_prev = runq;
        }
    }

    /// PSI and OOM deltas of one container since the previous interval.
    fn fill_psi_oom(&mut self, name: &str) -> (PsiCell, OomCell) {
        let sources = match self.wait_sources.get(name) {
            Some(Ok(s)) => s,
            Some(Err(reason)) => {
                return (
                    PsiCell::Unavailable {
                        reason: reason.clone(),
                    },
                    OomCell::Unavailable {
                        reason: reason.clone(),
                    },
                );
            }
            None => {
                let reason = "the container has no cgroup to read".to_owned();
                return (
                    PsiCell::Unavailable {
                        reason: reason.clone(),
                    },
                    OomCell::Unavailable { reason },
                );
            }
        };
        let now = sources.read(&HostFiles);
        let before = self.wait_prev.insert(name.to_owned(), now.clone());
        let psi = match (&sources.psi, &now.psi) {
            (Err(reason), _) => PsiCell::Unavailable {
                reason: reason.clone(),
            },
            (Ok(_), None) => PsiCell::Unavailable {
                reason: "the pressure files could not be read".into(),
            },
            (Ok(_), Some(cur)) => {
                let prev = before.as_ref().and_then(|b| b.psi);
                let d = |i: usize| {
                    let c = cur[i]?;
                    let p = prev.and_then(|p| p[i]).unwrap_or(c);
                    Some(Pressure {
                        some_us: c.some_us.saturating_sub(p.some_us),
                        full_us: c.full_us.map(|f| f.saturating_sub(p.full_us.unwrap_or(f))),
                    })
                };
                PsiCell::Measured {
                    cpu: d(0),
                    memory: d(1),
                    io: d(2),
                }
            }
        };
        let oom = match (&sources.oom, now.oom_kills) {
            (crate::cgroupfs::OomSource::Unavailable { reason }, _) => OomCell::Unavailable {
                reason: reason.clone(),
            },
            (_, None) => OomCell::Unavailable {
                reason: "the OOM counter could not be read".into(),
            },
            (_, Some(k)) => OomCell::Measured {
                oom_kills: k.saturating_sub(before.and_then(|b| b.oom_kills).unwrap_or(k)),
            },
        };
        (psi, oom)
    }

    /// Reads the maps and returns the interval since the previous call.
    pub fn sample(&mut self) -> Result<ProbeInterval, ProbeError> {
        let cur = self.probe.snapshot()?;
        for (id, path) in &cur.created {
            if crate::discover::classify(path).is_some() {
                self.created.entry(*id).or_insert_with(|| path.clone());
            }
        }
        // The kernel's record is an LRU map: what it no longer lists is not kept here either.
        self.created.retain(|id, _| cur.created.contains_key(id));
        self.set
            .prune_retired_ids(|id| cur.created.contains_key(&id));
        // Every interval: a container that makes no TCP event (idle, CPU-only) has no cgroup
        // id in the maps, yet must appear within one interval (one readdir per cgroup
        // directory and a few procfs reads per container).
        self.refresh(cur.at_ns);
        self.poll(true);
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
        for c in &mut iv.containers {
            c.waits.windows = self.windows.open.remove(&c.container).unwrap_or_default();
            if c.container == crate::OWN_ROW {
                let reason = crate::sample::OWN_ROW_REASON.to_owned();
                c.waits.psi = PsiCell::Unavailable {
                    reason: reason.clone(),
                };
                c.waits.oom = OomCell::Unavailable { reason };
                continue;
            }
            (c.waits.psi, c.waits.oom) = self.fill_psi_oom(&c.container);
        }
        // A container that ended in an earlier interval leaves the rows, unless the kernel
        // still counts for it (its sockets closing after it): an hours-long run on a host
        // where containers come and go does not carry every one of them in every row.
        let since = self.prev.at_ns;
        let mut left = Vec::new();
        iv.containers.retain(|c| {
            let gone = crate::sample::gone(c, since);
            if gone {
                left.push(c.container.clone());
            }
            !gone
        });
        // What was kept to sample them goes with them (their running totals stay: counters).
        for name in &left {
            self.windows.open.remove(name);
            self.windows.last.remove(name);
            self.cpu.remove(name);
            self.cpu_missing.remove(name);
            self.wait_sources.remove(name);
            self.wait_prev.remove(name);
            // Every interval until it is retired: once in the queue. Its destinations'
            // totals go now (up to 64 of ~700 bytes each: a host running a test suite kept
            // megabytes of them); its own totals stay with it.
            if !self.ended.contains(name) {
                self.ended.push_back(name.clone());
                self.pair_totals.retain(|(c, _), _| c != name);
            }
        }
        self.retire_ended();
        self.seq += 1;
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
        // Running totals of the pairs the kernel counted something for (a pair known only
        // from open sockets adds nothing to a counter).
        for p in iv
            .pairs
            .iter()
            .filter(|p| p.stats() != PairStats::default())
        {
            let key = (p.container.clone(), p.remote);
            let slot = self.pair_totals.entry(key).or_default();
            slot.remote_container = p.remote_container.clone();
            slot.stats.add(&p.stats());
            slot.last = self.seq;
        }
        for c in &iv.containers {
            self.cap_pairs(&c.container);
        }
        self.prev = cur;
        Ok(iv)
    }

    /// Sums the totals of the ended containers beyond the [`MAX_ENDED_TOTALS`] most recent
    /// into the retired row, drops their pairs' totals and retires them from the set.
    fn retire_ended(&mut self) {
        while self.ended.len() > MAX_ENDED_TOTALS {
            let Some(name) = self.ended.pop_front() else {
                break;
            };
            if let Some(i) = self.totals.iter().position(|(n, _)| *n == name) {
                let (_, counts) = self.totals.remove(i);
                self.retired.0 += 1;
                for (t, v) in self.retired.1.iter_mut().zip(counts) {
                    *t += v;
                }
            }
            self.pair_totals.retain(|(c, _), _| *c != name);
            self.set.retire(&name);
        }
    }

    /// Keeps a container's [`MAX_PAIR_TOTALS`] most recently counted destinations and sums
    /// the others into its [`herd_model::OTHER_REMOTE`].
    fn cap_pairs(&mut self, container: &str) {
        let other = herd_model::OTHER_REMOTE;
        let mut own: Vec<(u64, SocketAddr)> = self
            .pair_totals
            .range((container.to_owned(), other)..)
            .take_while(|((c, _), _)| c == container)
            .filter(|((_, r), _)| *r != other)
            .map(|((_, r), t)| (t.last, *r))
            .collect();
        if own.len() <= MAX_PAIR_TOTALS {
            return;
        }
        own.sort_unstable();
        let excess = own.len() - MAX_PAIR_TOTALS;
        for (_, r) in own.into_iter().take(excess) {
            let Some(t) = self.pair_totals.remove(&(container.to_owned(), r)) else {
                continue;
            };
            let slot = self
                .pair_totals
                .entry((container.to_owned(), other))
                .or_default();
            slot.stats.add(&t.stats);
            slot.last = slot.last.max(t.last);
        }
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
            if c.container == crate::OWN_ROW {
                let reason = crate::sample::OWN_ROW_REASON.to_owned();
                c.waits.listeners = ListenerCell::Unavailable {
                    reason: reason.clone(),
                };
                c.waits.conntrack = ConntrackCell::Unavailable { reason };
                continue;
            }
            let target = match self.netns_target(&c.container) {
                Ok(t) => t,
                Err(reason) => {
                    c.waits.listeners = ListenerCell::Unavailable {
                        reason: reason.clone(),
                    };
                    c.waits.conntrack = ConntrackCell::Unavailable {
                        reason: reason.clone(),
                    };
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
                    let first = !self.net_prev.contains_key(&s.netns_inode);
                    let ns_drops = self.net_prev.get(&s.netns_inode).map_or(0, |p| {
                        s.counters.listen_drops.saturating_sub(p.listen_drops)
                    });
                    c.waits.listeners = self.listener_cell(&s, first, ns_drops);
                    c.waits.conntrack = self.conntrack_cell(&s, first);
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
                    let reason = e.to_string();
                    c.waits.listeners = ListenerCell::Unavailable {
                        reason: reason.clone(),
                    };
                    c.waits.conntrack = ConntrackCell::Unavailable {
                        reason: reason.clone(),
                    };
                    c.sockets = SocketCell::Unavailable { reason }
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
            // Destinations the kernel saw no event for in the interval (open connections
            // only): the busiest MAX_GAUGE_PAIRS of them. A host holding connections to
            // thousands of ports would otherwise put thousands of pairs in every row; the
            // container's row keeps the totals and the tightest headroom whatever is left out.
            let mut quiet: Vec<&crate::sockdiag::DestinationGauges> = s
                .gauges
                .destinations
                .iter()
                .filter(|d| {
                    !iv.pairs
                        .iter()
                        .any(|p| &p.container == container && p.remote == d.remote)
                })
                .collect();
            quiet.sort_by_key(|d| {
                std::cmp::Reverse((
                    d.established + d.syn_sent + d.time_wait + d.other,
                    d.ports_in_use,
                ))
            });
            quiet.truncate(MAX_GAUGE_PAIRS);
            for d in quiet {
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
            self.conntrack_prev.remove(&inode);
            self.listener_prev.retain(|(ns, _), _| *ns != inode);
        }
    }

    /// Listeners of a namespace per local port: drops since the previous sample (each
    /// listener's `sk_drops` delta; a listener new since then counts all of its drops, and
    /// the first sample of a namespace is its baseline), accept queue and backlog now.
    ///
    /// `sk_drops` counts a handshake-completing ACK that found the accept queue full twice
    /// (`tcp_listendrop` in `tcp_v4_syn_recv_sock`, then `sk_drops_add` on `tcp_v4_rcv`'s
    /// discard path) where ListenDrops counts it once; so no port shows more drops than the
    /// namespace's ListenDrops delta (`ns_drops`) of the same interval.
    fn listener_cell(
        &mut self,
        s: &crate::sockdiag::NetnsSample,
        first: bool,
        ns_drops: u64,
    ) -> ListenerCell {
        let mut ports: BTreeMap<u16, ListenerWaits> = BTreeMap::new();
        let mut seen = Vec::new();
        for l in &s.gauges.listeners {
            let key = (s.netns_inode, l.cookie);
            seen.push(key);
            let drops = match l.drops {
                Some(now) => {
                    let before = self.listener_prev.insert(key, now);
                    match before {
                        Some(b) => u64::from(now.wrapping_sub(b)),
                        None if first => 0,
                        None => u64::from(now),
                    }
                }
                None => {
                    return ListenerCell::Unavailable {
                        reason: "this kernel sent no INET_DIAG_SKMEMINFO for the listeners".into(),
                    };
                }
            };
            let p = ports.entry(l.local.port()).or_insert(ListenerWaits {
                local_port: l.local.port(),
                ..ListenerWaits::default()
            });
            p.sockets += 1;
            p.drops += drops;
            p.accept_queue += u64::from(l.accept_queue);
            p.backlog += u64::from(l.backlog);
        }
        self.listener_prev
            .retain(|k, _| k.0 != s.netns_inode || seen.contains(k));
        for p in ports.values_mut() {
            p.drops = p.drops.min(ns_drops);
        }
        ListenerCell::Measured {
            ports: ports.into_values().collect(),
        }
    }

    /// A namespace's conntrack entries and limit now, and its drop counters' deltas.
    fn conntrack_cell(&mut self, s: &crate::sockdiag::NetnsSample, first: bool) -> ConntrackCell {
        match &s.conntrack {
            crate::sockdiag::ConntrackReading::Unavailable { reason } => {
                ConntrackCell::Unavailable {
                    reason: reason.clone(),
                }
            }
            crate::sockdiag::ConntrackReading::Read {
                entries,
                max,
                drop,
                early_drop,
                insert_failed,
            } => {
                let now = [*drop, *early_drop, *insert_failed];
                let before = self.conntrack_prev.insert(s.netns_inode, now);
                let d = |i: usize| {
                    let n = now[i]?;
                    let b = if first {
                        n
                    } else {
                        before.and_then(|b| b[i]).unwrap_or(n)
                    };
                    Some(n.saturating_sub(b))
                };
                ConntrackCell::Measured {
                    entries: *entries,
                    max: *max,
                    drop: d(0),
                    early_drop: d(1),
                    insert_failed: d(2),
                }
            }
        }
    }

    /// Cumulative counters for the Prometheus endpoint: running containers and the most
    /// recently ended ones (a retired container's series ends, as a scraped target's would).
    pub fn running_totals(&self) -> ProbeTotals {
        ProbeTotals {
            containers: self.totals_kept(),
            pairs: self
                .pair_totals
                .iter()
                .map(|((c, r), t)| (c.clone(), *r, t.remote_container.clone(), t.stats))
                .collect(),
            losses: self.prev.losses,
        }
    }

    /// Totals per container since the sampler started, host last; the ended containers
    /// retired from the set (beyond the [`MAX_ENDED_TOTALS`] most recent) summed in one row
    /// before host, named for how many they are.
    pub fn totals(&self) -> Vec<(String, Counts)> {
        let mut t = self.totals_kept();
        if self.retired.0 > 0 {
            let n = self.retired.0;
            let row = (format!("({n} earlier ended)"), self.retired.1);
            t.insert(t.len().saturating_sub(1), row);
        }
        t
    }

    /// Totals of the containers kept by name, host last.
    fn totals_kept(&self) -> Vec<(String, Counts)> {
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
