//! What the player model adds to the numbers: stream and long-poll events by type, stream
//! errors and reconnects, time to first event, and groups formed / finished / failed — per
//! step, per interval and for the run.
//!
//! Stream tasks and players record straight into [`PlayAcc`] (one short lock per event);
//! the aggregator takes an interval's numbers at each tick and a step's when it reports it.

use std::{collections::BTreeMap, sync::Arc, sync::Mutex};

use hdrhistogram::Histogram;
use herd_model::{
    CheckFailure, GroupStats, PlayStats, StreamStats,
    histogram::{latency, new_histogram, record},
};

use super::gate::Gate;
use crate::scenario::{Call, Op, OpKind, StreamFormat};

/// What happened to a group, for [`PlayAcc::group`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GroupEvent {
    Formed,
    Finished,
    Failed,
    Abandoned,
}

/// The kind column of [`StreamStats`]: `sse`, `ndjson`, `chunks`, `long_poll`, `grpc` (a
/// gRPC server or bidi stream), `websocket` (a socket's pushes); empty for a request op.
pub(crate) fn stream_kind(op: &Op) -> &'static str {
    match (&op.call, &op.kind) {
        (_, OpKind::Request) => "",
        (Call::Grpc(_), _) => "grpc",
        (Call::Ws(_), _) => "websocket",
        (Call::Http, kind) => http_stream_kind(kind),
    }
}

fn http_stream_kind(kind: &OpKind) -> &'static str {
    match kind {
        OpKind::Request => "",
        OpKind::Stream { format, .. } => match format {
            StreamFormat::Sse => "sse",
            StreamFormat::Ndjson => "ndjson",
            StreamFormat::Chunks => "chunks",
        },
        OpKind::LongPoll { .. } => "long_poll",
    }
}

/// Distinct event types (and error classes) kept per op before the rest fold into `other`.
const MAX_TYPES: usize = 32;

#[derive(Default)]
struct StreamAcc {
    opened: u64,
    reconnects: u64,
    cut_by_stop: u64,
    events: u64,
    by_type: BTreeMap<Box<str>, u64>,
    errors: BTreeMap<String, u64>,
    /// Made on the first record, so request ops and quiet intervals cost no histogram.
    first: Option<Histogram<u64>>,
    touched: bool,
}

struct Acc {
    streams: Vec<StreamAcc>,
    groups: GroupStats,
    /// Per op, failed checks by resource.
    checks: BTreeMap<usize, BTreeMap<String, u64>>,
}

impl Acc {
    fn new(ops: usize) -> Self {
        Self {
            streams: (0..ops).map(|_| StreamAcc::default()).collect(),
            groups: GroupStats::default(),
            checks: BTreeMap::new(),
        }
    }

    fn stats(&self, ops: &[(String, &'static str)]) -> PlayStats {
        let streams = self
            .streams
            .iter()
            .enumerate()
            .filter(|(_, s)| s.touched)
            .map(|(i, s)| StreamStats {
                op: ops[i].0.clone(),
                kind: ops[i].1.to_owned(),
                opened: s.opened,
                reconnects: s.reconnects,
                cut_by_stop: s.cut_by_stop,
                events: s.events,
                by_type: s.by_type.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                errors: s.errors.clone(),
                first_event: s.first.as_ref().map(latency),
            })
            .collect();
        let check_failures = self
            .checks
            .iter()
            .flat_map(|(op, by)| {
                by.iter().map(|(resource, count)| CheckFailure {
                    op: ops[*op].0.clone(),
                    resource: resource.clone(),
                    count: *count,
                })
            })
            .collect();
        PlayStats {
            streams,
            groups: self.groups,
            check_failures,
        }
    }
}

struct Inner {
    total: Acc,
    phases: Vec<Acc>,
    interval: Acc,
}

/// The run's stream and group counters.
pub(crate) struct PlayAcc {
    /// Per op: name and stream kind (`sse`, `long_poll`, ...; empty for requests).
    ops: Vec<(String, &'static str)>,
    gate: Arc<Gate>,
    inner: Mutex<Inner>,
}

impl PlayAcc {
    /// Counters for `ops` (name, kind) over `steps` steps, phased by `gate`.
    pub fn new(ops: Vec<(String, &'static str)>, steps: usize, gate: Arc<Gate>) -> Self {
        let n = ops.len();
        Self {
            ops,
            gate,
            inner: Mutex::new(Inner {
                total: Acc::new(n),
                phases: (0..steps).map(|_| Acc::new(n)).collect(),
                interval: Acc::new(n),
            }),
        }
    }

    fn each(&self, mut f: impl FnMut(&mut Acc)) {
        let phase = self.gate.current();
        let mut inner = self
            .inner
            .lock()
            .expect("the play counters' lock is never held across a panic");
        let inner = &mut *inner;
        f(&mut inner.total);
        f(&mut inner.interval);
        if let Some(p) = phase.and_then(|k| inner.phases.get_mut(k)) {
            f(p);
        }
    }

    fn stream(&self, op: usize, mut f: impl FnMut(&mut StreamAcc)) {
        self.each(|a| {
            let s = &mut a.streams[op];
            s.touched = true;
            f(s);
        });
    }

    /// Op `op` opened (got a 2xx head).
    pub fn opened(&self, op: usize) {
        self.stream(op, |s| s.opened += 1);
    }

    /// An opening of op `op` was in flight when the player stopped.
    pub fn cut_by_stop(&self, op: usize) {
        self.stream(op, |s| s.cut_by_stop += 1);
    }

    /// Op `op` is being reopened (or, for a long poll, re-issued after a failure).
    pub fn reconnect(&self, op: usize) {
        self.stream(op, |s| s.reconnects += 1);
    }

    /// One event of type `kind`.
    pub fn event(&self, op: usize, kind: &str) {
        self.stream(op, |s| {
            s.events += 1;
            if let Some(n) = s.by_type.get_mut(kind) {
                *n += 1;
            } else if s.by_type.len() < MAX_TYPES {
                s.by_type.insert(kind.into(), 1);
            } else {
                *s.by_type.entry("other".into()).or_default() += 1;
            }
        });
    }

    /// The first event of an opening, `us` after the request was sent.
    pub fn first_event(&self, op: usize, us: u64) {
        self.stream(op, |s| {
            record(s.first.get_or_insert_with(new_histogram), us)
        });
    }

    /// A failure of class `class`.
    pub fn error(&self, op: usize, class: &str) {
        self.stream(op, |s| {
            let key = if s.errors.len() < MAX_TYPES || s.errors.contains_key(class) {
                class
            } else {
                "other"
            };
            *s.errors.entry(key.to_owned()).or_default() += 1;
        });
    }

    /// A response to op `op` on `resource` failed a check.
    pub fn check_failed(&self, op: usize, resource: String) {
        self.each(|a| {
            let by = a.checks.entry(op).or_default();
            let key = if by.len() < MAX_TYPES || by.contains_key(&resource) {
                resource.as_str()
            } else {
                "other"
            };
            *by.entry(key.to_owned()).or_default() += 1;
        });
    }

    /// Something happened to a group.
    pub fn group(&self, e: GroupEvent) {
        self.each(|a| {
            let g = &mut a.groups;
            match e {
                GroupEvent::Formed => g.formed += 1,
                GroupEvent::Finished => g.finished += 1,
                GroupEvent::Failed => g.failed += 1,
                GroupEvent::Abandoned => g.abandoned += 1,
            }
        });
    }

    /// The interval's numbers, starting the next interval from zero.
    pub fn take_interval(&self) -> PlayStats {
        let mut inner = self
            .inner
            .lock()
            .expect("the play counters' lock is never held across a panic");
        let n = self.ops.len();
        let acc = std::mem::replace(&mut inner.interval, Acc::new(n));
        drop(inner);
        acc.stats(&self.ops)
    }

    /// Step `k`'s numbers so far (empty for the hammer).
    pub fn phase(&self, k: usize) -> PlayStats {
        let inner = self
            .inner
            .lock()
            .expect("the play counters' lock is never held across a panic");
        inner
            .phases
            .get(k)
            .map(|a| a.stats(&self.ops))
            .unwrap_or_default()
    }

    /// The run's numbers.
    pub fn total(&self) -> PlayStats {
        let inner = self
            .inner
            .lock()
            .expect("the play counters' lock is never held across a panic");
        inner.total.stats(&self.ops)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_land_in_total_interval_and_the_open_step() {
        let gate = Arc::new(Gate::closed());
        let acc = PlayAcc::new(
            vec![("req".into(), ""), ("sub".into(), "sse")],
            2,
            gate.clone(),
        );
        gate.open(1);
        acc.opened(1);
        acc.event(1, "move");
        acc.event(1, "move");
        acc.first_event(1, 1_500);
        acc.error(1, "ended");
        acc.reconnect(1);
        acc.opened(1);
        acc.group(GroupEvent::Formed);
        let iv = acc.take_interval();
        assert_eq!(iv.streams.len(), 1);
        let s = &iv.streams[0];
        assert_eq!((s.op.as_str(), s.kind.as_str()), ("sub", "sse"));
        assert_eq!((s.opened, s.reconnects, s.events), (2, 1, 2));
        assert_eq!(s.by_type.get("move"), Some(&2));
        assert_eq!(s.errors.get("ended"), Some(&1));
        assert!(s.first_event.is_some());
        assert_eq!(iv.groups.formed, 1);
        assert!(acc.take_interval().is_empty());
        assert!(acc.phase(0).is_empty());
        assert_eq!(acc.phase(1).stream("sub").map(|s| s.events), Some(2));
        assert_eq!(acc.total().groups.formed, 1);
        for i in 0..MAX_TYPES + 3 {
            acc.event(1, &format!("t{i}"));
        }
        assert_eq!(acc.total().streams[0].by_type.len(), MAX_TYPES + 1);
    }
}
