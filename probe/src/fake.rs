//! A deterministic stand-in for the kernel probe's counters: snapshots scripted by the test,
//! read back in order. The real source is tested for real in `integration-test/`.

use std::{
    collections::{HashMap, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use probe_common::{Counter, Loss, PairStats, RunqStats};

use crate::{CounterSource, ProbeError, Snapshot, pair_key};

/// Scripted readings. Clones share the script, so a test keeps one to push more readings
/// after handing the other to a [`crate::sampler::Sampler`].
#[derive(Clone, Default)]
pub struct FakeCounters {
    script: Arc<Mutex<Script>>,
}

#[derive(Default)]
struct Script {
    queue: VecDeque<Result<Snapshot, ProbeError>>,
    /// Run-queue readings for the 100 ms polls, in order; the last one repeats.
    runq: VecDeque<HashMap<u64, RunqStats>>,
    last_runq: Option<HashMap<u64, RunqStats>>,
    /// The last reading handed out, repeated once the queue is empty (counters at rest).
    last: Snapshot,
}

impl FakeCounters {
    /// A source with no reading queued: it reads an empty snapshot until one is pushed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues the next reading.
    pub fn push(&self, s: Snapshot) {
        self.lock().queue.push_back(Ok(s));
    }

    /// Queues the next run-queue reading a 100 ms poll gets.
    pub fn push_runq(&self, r: HashMap<u64, RunqStats>) {
        self.lock().runq.push_back(r);
    }

    /// Queues a failed read (the next reading after it continues the script).
    pub fn push_error(&self, e: ProbeError) {
        self.lock().queue.push_back(Err(e));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().expect("the fake's script lock")
    }
}

impl CounterSource for FakeCounters {
    fn snapshot(&self) -> Result<Snapshot, ProbeError> {
        let mut s = self.lock();
        match s.queue.pop_front() {
            Some(Ok(next)) => {
                s.last = next.clone();
                Ok(next)
            }
            Some(Err(e)) => Err(e),
            None => Ok(s.last.clone()),
        }
    }

    fn runq(&self) -> Result<Option<HashMap<u64, RunqStats>>, ProbeError> {
        let mut s = self.lock();
        if let Some(next) = s.runq.pop_front() {
            s.last_runq = Some(next);
        }
        Ok(s.last_runq.clone())
    }
}

/// Builders for scripted readings.
impl Snapshot {
    /// An empty reading taken at `at_ns`.
    pub fn at(at_ns: u64) -> Self {
        Self {
            at_ns,
            ..Self::default()
        }
    }

    /// Sets `cgroup`'s total of `counter`.
    pub fn with_count(mut self, cgroup: u64, counter: Counter, total: u64) -> Self {
        self.by_cgroup.entry(cgroup).or_default()[counter as usize] = total;
        self
    }

    /// Sets the totals of the pair `cgroup` → `remote`.
    pub fn with_pair(mut self, cgroup: u64, remote: SocketAddr, stats: PairStats) -> Self {
        self.pairs
            .insert(pair_key(cgroup, remote.ip(), remote.port()), stats);
        self
    }

    /// Sets `cgroup`'s run-queue totals.
    pub fn with_runq(mut self, cgroup: u64, stats: RunqStats) -> Self {
        self.runq.insert(cgroup, stats);
        self
    }

    /// Sets the events lost for `reason`.
    pub fn with_loss(mut self, reason: Loss, total: u64) -> Self {
        self.losses[reason as usize] = total;
        self
    }
}
