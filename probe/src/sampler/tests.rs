//! The sampler over scripted kernel counters ([`FakeCounters`]) and a cgroup tree in a
//! temporary directory: what each interval attributes to which container, how pairs merge,
//! what the running totals (and their Prometheus exposition) add up to, and which cells say why they are
//! empty. The real counters are tested against the real kernel in `integration-test/`.

use std::{cell::Cell, net::SocketAddr, path::Path, time::Duration};

use herd_testkit::TempDir;
use probe_common::{Counter, Loss, PairStats};

use super::*;
use crate::{cgroup::cgroup_id, containers::Container, discover::Kind, fake::FakeCounters};
use herd_model::{ContainerInterval, Memory, PairInterval, Throttling};

const S: u64 = 1_000_000_000;

/// A cgroup tree: `gw` (with CPU, throttling and memory files), its child `gw/worker`,
/// `api` (also with files), `db` (none: the cpu and memory controllers are off for it) and
/// `other`, which no container names. The root has no files: host's CPU is unavailable.
struct Tree {
    dir: TempDir,
}

impl Tree {
    fn new() -> Self {
        let dir = TempDir::new("sampler");
        for c in ["gw/worker", "api", "db", "other"] {
            std::fs::create_dir_all(dir.join(c)).unwrap();
        }
        let t = Tree { dir };
        t.cpu("gw", 1_000, 10, 0, 4 << 20);
        t.cpu("api", 0, 0, 0, 1 << 20);
        t
    }

    /// Writes `name`'s cgroup v2 files: CPU used, CFS periods and throttled ones (half a
    /// core quota), memory in use (the peak twice that).
    fn cpu(&self, name: &str, usage_us: u64, periods: u64, throttled: u64, memory: u64) {
        let d = self.dir.join(name);
        std::fs::write(d.join("cgroup.controllers"), "cpu memory\n").unwrap();
        std::fs::write(
            d.join("cpu.stat"),
            format!(
                "usage_usec {usage_us}\nuser_usec {}\nsystem_usec {}\nnr_periods {periods}\n\
                 nr_throttled {throttled}\nthrottled_usec {}\n",
                usage_us / 2,
                usage_us / 2,
                throttled * 1_000
            ),
        )
        .unwrap();
        std::fs::write(d.join("cpu.max"), "50000 100000\n").unwrap();
        std::fs::write(d.join("memory.current"), format!("{memory}\n")).unwrap();
        std::fs::write(d.join("memory.peak"), format!("{}\n", 2 * memory)).unwrap();
    }

    fn id(&self, rel: &str) -> u64 {
        cgroup_id(&self.dir.join(rel)).unwrap()
    }

    fn layout(&self) -> CgroupLayout {
        CgroupLayout {
            unified: self.dir.path().to_owned(),
            cpu_v1: None,
        }
    }

    /// A sampler over `fake` for the named containers gw, api and db (then host).
    fn sampler(&self, fake: &FakeCounters) -> Sampler {
        let mut set = ContainerSet::default();
        for name in ["gw", "api", "db"] {
            set.add(Container {
                name: name.into(),
                cgroup: Path::new("/").join(name),
                cgroup_id: self.id(name),
                kind: Kind::Explicit,
                started_ns: None,
                ended_ns: None,
            })
            .unwrap();
        }
        Sampler::new(fake.clone(), set, self.layout()).unwrap()
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn pair(connects: u64, closed: u64) -> PairStats {
    let mut p = PairStats {
        connects,
        established: connects,
        time_wait_entries: closed,
        closed,
        ..PairStats::default()
    };
    // Every connect took between 64 and 128 µs.
    p.connect_latency_us.0[6] = connects;
    p
}

fn row<'a>(iv: &'a ProbeInterval, container: &str) -> &'a ContainerInterval {
    iv.containers
        .iter()
        .find(|c| c.container == container)
        .unwrap_or_else(|| panic!("no row for {container}: {iv:#?}"))
}

/// The pair rows the script made: the ones that counted something. (host's row also gets
/// gauge-only rows for whatever this test process has open in its own network namespace.)
fn counted(iv: &ProbeInterval) -> Vec<(&str, SocketAddr, u64, u64)> {
    iv.pairs
        .iter()
        .filter(|p| p.connects + p.established + p.closed + p.time_wait_entries > 0)
        .map(|p| (p.container.as_str(), p.remote, p.connects, p.closed))
        .collect()
}

fn connects(iv: &ProbeInterval, container: &str) -> u64 {
    row(iv, container).counts.get(Counter::Connects)
}

#[test]
fn deltas_per_interval_become_per_container_counts_and_pairs_merge_per_destination() {
    let t = Tree::new();
    let (gw, worker, db, other) = (t.id("gw"), t.id("gw/worker"), t.id("db"), t.id("other"));
    let backend = addr("198.18.0.2:5432");
    let fake = FakeCounters::new();
    fake.push(
        Snapshot::at(S)
            .with_count(gw, Counter::Connects, 5)
            .with_count(worker, Counter::Connects, 1)
            .with_count(db, Counter::Accepts, 3)
            .with_count(other, Counter::Connects, 2)
            .with_pair(gw, backend, pair(4, 1))
            .with_pair(worker, backend, pair(1, 0)),
    );
    let mut sampler = t.sampler(&fake);
    t.cpu("gw", 251_000, 30, 6, 5 << 20);
    // A cgroup the tree has never seen (created and gone between two reads) is host's.
    fake.push(
        Snapshot::at(2 * S)
            .with_count(gw, Counter::Connects, 8)
            .with_count(worker, Counter::Connects, 4)
            .with_count(db, Counter::Accepts, 10)
            .with_count(other, Counter::Connects, 7)
            .with_count(999_999_999, Counter::Connects, 2)
            .with_count(gw, Counter::TimeWaitEntries, 4)
            .with_pair(gw, backend, pair(10, 5))
            .with_pair(worker, backend, pair(3, 2))
            .with_pair(other, addr("198.18.0.3:80"), pair(1, 1))
            .with_loss(Loss::CgroupMapFull, 1)
            .with_loss(Loss::PairMapFull, 2),
    );
    let iv = sampler.sample().unwrap();

    assert_eq!((iv.at_ns, iv.interval_ns), (2 * S, S));
    let names: Vec<&str> = iv.containers.iter().map(|c| c.container.as_str()).collect();
    assert_eq!(names, ["gw", "api", "db", "host"]);
    // gw: its own 3 and its child cgroup's 3.
    assert_eq!(connects(&iv, "gw"), 6);
    assert_eq!(row(&iv, "gw").counts.get(Counter::TimeWaitEntries), 4);
    assert_eq!(row(&iv, "db").counts.get(Counter::Accepts), 7);
    assert_eq!(connects(&iv, "api"), 0);
    // host: the unnamed cgroup's 5 and the unknown one's 2.
    assert_eq!(connects(&iv, "host"), 7);
    // The child's pair merges into gw's: one row per (container, destination).
    assert_eq!(
        counted(&iv),
        [
            ("gw", backend, 6 + 2, 4 + 2),
            ("host", addr("198.18.0.3:80"), 1, 1)
        ]
    );
    let p: &PairInterval = iv.pairs.iter().find(|p| p.remote == backend).unwrap();
    assert_eq!(
        (p.connect_latency_us.count, p.connect_latency_us.p99_le),
        (8, 128)
    );
    assert_eq!(
        p.remote_container, None,
        "no process to read addresses through"
    );
    assert_eq!(iv.lost, 3);

    // CPU from the tree's files: gw's deltas, the others' reasons.
    let CpuCell::Measured(cpu) = &row(&iv, "gw").cpu else {
        panic!("gw has CPU files: {:?}", row(&iv, "gw").cpu);
    };
    assert_eq!((cpu.usage_ns, cpu.polls), (250_000_000, 1));
    assert!(
        matches!(
            cpu.throttle,
            Throttling::Measured {
                nr_periods: 20,
                nr_throttled: 6,
                throttled_ns: 6_000_000,
                quota_us: Some(50_000),
                ..
            }
        ),
        "{:?}",
        cpu.throttle
    );
    assert_eq!(
        cpu.memory,
        Memory::Measured {
            current_bytes: 5 << 20,
            peak_bytes: Some(10 << 20),
            working_set_bytes: None,
        }
    );
    for (c, file) in [
        ("db", "db/cgroup.controllers"),
        ("host", "cgroup.controllers"),
    ] {
        let CpuCell::Unavailable { reason } = &row(&iv, c).cpu else {
            panic!("{c} has no CPU files: {:?}", row(&iv, c).cpu);
        };
        let path = t.dir.join(file).display().to_string();
        assert!(reason.contains(&path), "{c}: {reason}");
    }
    // A container's own network namespace needs one of its processes (there is none).
    let SocketCell::Unavailable { reason } = &row(&iv, "gw").sockets else {
        panic!("gw has no process: {:?}", row(&iv, "gw").sockets);
    };
    assert!(reason.contains("no process in the container"), "{reason}");
}

#[test]
fn running_totals_and_their_exposition_add_up_every_interval() {
    let t = Tree::new();
    let (gw, other) = (t.id("gw"), t.id("other"));
    let backend = addr("198.18.0.2:5432");
    let fake = FakeCounters::new();
    fake.push(Snapshot::at(S).with_pair(gw, backend, pair(2, 0)));
    let mut sampler = t.sampler(&fake);
    for (k, total) in [10u64, 25, 25, 40].into_iter().enumerate() {
        let k = k as u64 + 2;
        fake.push(
            Snapshot::at(k * S)
                .with_count(gw, Counter::Connects, total)
                .with_count(other, Counter::Retransmits, k)
                .with_pair(gw, backend, pair(2 + total, total / 5))
                .with_loss(Loss::SockMapFull, k),
        );
    }
    let ivs: Vec<ProbeInterval> = (0..4).map(|_| sampler.sample().unwrap()).collect();
    let per: Vec<u64> = ivs.iter().map(|iv| connects(iv, "gw")).collect();
    assert_eq!(per, [10, 15, 0, 15]);
    // A pair with nothing new in an interval has no row in it.
    let pairs: Vec<usize> = ivs.iter().map(|iv| counted(iv).len()).collect();
    assert_eq!(pairs, [1, 1, 0, 1]);
    assert_eq!(
        ivs.iter().map(|iv| iv.lost).collect::<Vec<_>>(),
        [2, 1, 1, 1]
    );

    let totals = sampler.totals();
    let names: Vec<&str> = totals.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["gw", "api", "db", "host"], "host last");
    assert_eq!(totals[0].1[Counter::Connects as usize], 40);
    // host: 2, 3, 4, 5 retransmits, minus the 0 before the first interval.
    assert_eq!(totals[3].1[Counter::Retransmits as usize], 5);
    let e = sampler.running_totals();
    assert_eq!(e.containers, totals);
    let (c, remote, _, st) = e
        .pairs
        .iter()
        .find(|p| p.1 == backend)
        .expect("the pair's totals");
    assert_eq!(
        (c.as_str(), *remote, st.connects, st.closed),
        ("gw", backend, 40, 8)
    );
    assert_eq!(e.losses[Loss::SockMapFull as usize], 5);
    let text = herd_report::export::prometheus::counters(&e);
    assert!(
        text.contains(r#"herd_tcp_connects_total{container="gw"} 40"#),
        "{text}"
    );
}

#[test]
fn a_failed_read_loses_nothing_and_an_ended_container_keeps_its_row() {
    let t = Tree::new();
    let (gw, api) = (t.id("gw"), t.id("api"));
    let fake = FakeCounters::new();
    fake.push(Snapshot::at(S).with_count(gw, Counter::Connects, 1));
    let mut sampler = t.sampler(&fake);
    fake.push_error(ProbeError::MissingMap("CGROUP_COUNTERS"));
    fake.push(
        Snapshot::at(3 * S)
            .with_count(gw, Counter::Connects, 9)
            .with_count(api, Counter::Connects, 2),
    );
    let e = sampler.sample().unwrap_err();
    assert!(e.to_string().contains("CGROUP_COUNTERS"), "{e}");
    // The next interval covers the gap, from the last reading that worked.
    let iv = sampler.sample().unwrap();
    assert_eq!((iv.interval_ns, connects(&iv, "gw")), (2 * S, 8));
    assert_eq!(connects(&iv, "api"), 2);

    // api's cgroup goes; its counts stay in the kernel's map (the socket outlived it).
    std::fs::remove_dir_all(t.dir.join("api")).unwrap();
    fake.push(
        Snapshot::at(4 * S)
            .with_count(gw, Counter::Connects, 9)
            .with_count(api, Counter::Connects, 3),
    );
    let iv = sampler.sample().unwrap();
    let ended = sampler
        .containers()
        .containers()
        .iter()
        .find(|c| c.name == "api")
        .unwrap();
    assert!(ended.ended_ns.is_some(), "{ended:?}");
    assert_eq!(connects(&iv, "api"), 1, "an ended container keeps its row");
    assert_eq!(
        row(&iv, "api").cpu,
        CpuCell::Unavailable {
            reason: "the container's cgroup ended".into()
        }
    );
    let SocketCell::Unavailable { reason } = &row(&iv, "api").sockets else {
        panic!("api ended: {:?}", row(&iv, "api").sockets);
    };
    assert_eq!(reason, "the container ended");
    // With no new reading the counters stand still: an interval of zeros, not an error.
    let iv = sampler.sample().unwrap();
    assert_eq!((iv.interval_ns, connects(&iv, "gw"), iv.lost), (0, 0, 0));
}

#[test]
fn watch_takes_a_last_interval_when_the_load_is_over() {
    let t = Tree::new();
    let gw = t.id("gw");
    let fake = FakeCounters::new();
    fake.push(Snapshot::at(S));
    let mut sampler = t.sampler(&fake);
    for k in 2..=4 {
        fake.push(Snapshot::at(k * S).with_count(gw, Counter::Connects, k));
    }
    let seen = Cell::new(0u64);
    let until = || seen.get() >= 2;
    let w = Watch {
        every: Duration::from_millis(20),
        total: Duration::from_secs(30),
        until: &until,
        stop: &|| false,
    };
    let mut got = Vec::new();
    watch::<ProbeError>(&mut sampler, &w, |iv, _| {
        got.push(connects(iv, "gw"));
        seen.set(seen.get() + 1);
        Ok(())
    })
    .unwrap();
    // Two intervals while the load ran, and the one after it said it was over.
    assert_eq!(got, [2, 1, 1]);
}

fn runq(count: u64, total_ms: u64) -> probe_common::RunqStats {
    let mut s = probe_common::RunqStats {
        count,
        total_ns: total_ms * 1_000_000,
        ..Default::default()
    };
    // Every wait between 1 and 2 ms.
    s.delay_us.0[10] = count;
    s
}

#[test]
fn runq_delay_is_attributed_like_the_counters_with_windows_and_herds_own_row() {
    use herd_model::waits::RunqCell;
    use probe_common::OWN_TGID_KEY;
    let t = Tree::new();
    let (gw, worker, other) = (t.id("gw"), t.id("gw/worker"), t.id("other"));
    let fake = FakeCounters::new();
    let at = |n: u64| {
        std::collections::HashMap::from([
            (gw, runq(n, 10 * n)),
            (worker, runq(n, 5 * n)),
            (other, runq(n, n)),
            (OWN_TGID_KEY, runq(n, 2 * n)),
        ])
    };
    fake.push(Snapshot::at(S));
    fake.push_runq(at(0));
    let mut sampler = t.sampler(&fake);
    // Three 100 ms polls, each seeing one more wait per key.
    for n in 1..=3 {
        fake.push_runq(at(n));
        sampler.poll_cpu();
    }
    let mut last = Snapshot::at(2 * S);
    last.runq = at(3);
    fake.push(last);
    let iv = sampler.sample().unwrap();
    let runq_of = |name: &str| match &row(&iv, name).waits.runq {
        RunqCell::Measured {
            count, total_ns, ..
        } => (*count, *total_ns),
        other => panic!("{name}: {other:?}"),
    };
    // gw: its own and its child's; host: the unnamed cgroup's; herd: the named process's.
    assert_eq!(runq_of("gw"), (6, 45_000_000));
    assert_eq!(runq_of("host"), (3, 3_000_000));
    assert_eq!(runq_of("api"), (0, 0));
    assert_eq!(runq_of(crate::OWN_ROW), (3, 6_000_000));
    // The windows: the first poll (reading 0) starts them, each later one closes one, the
    // sample's own poll (reading 3) the last.
    let ws = &row(&iv, "gw").waits.windows;
    let per: Vec<(Option<u64>, u64)> = ws.iter().map(|w| (w.runq_ns, w.runq_count)).collect();
    assert_eq!(per, [(Some(15_000_000), 2); 3]);
    assert!(ws.windows(2).all(|w| w[0].end_ns == w[1].start_ns));
    // gw has cpu.stat throttling: each window says how much (none here).
    assert!(ws.iter().all(|w| w.throttled_ns == Some(0)), "{ws:?}");
    let own = row(&iv, crate::OWN_ROW);
    assert_eq!(own.waits.windows.len(), 3);
    assert!(matches!(own.cpu, CpuCell::Unavailable { .. }));
    assert!(matches!(own.sockets, SocketCell::Unavailable { .. }));
    // A row stored before the waits existed reads with them unavailable.
    let mut json = serde_json::to_value(row(&iv, "gw")).unwrap();
    json.as_object_mut().unwrap().remove("waits");
    let old: ContainerInterval = serde_json::from_value(json).unwrap();
    assert!(matches!(old.waits.runq, RunqCell::Unavailable { .. }));
}

#[test]
fn without_the_scheduler_programs_every_row_says_why() {
    use herd_model::waits::RunqCell;
    let t = Tree::new();
    let fake = FakeCounters::new();
    let mut s = Snapshot::at(S);
    s.runq_unavailable = Some("this kernel refused sched_switch".into());
    fake.push(s.clone());
    let mut sampler = t.sampler(&fake);
    s.at_ns = 2 * S;
    fake.push(s);
    let iv = sampler.sample().unwrap();
    for c in &iv.containers {
        assert_eq!(
            c.waits.runq,
            RunqCell::Unavailable {
                reason: "this kernel refused sched_switch".into()
            }
        );
        assert!(c.waits.windows.iter().all(|w| w.runq_ns.is_none()));
    }
}

#[test]
fn retransmits_merge_per_pair_and_their_windows_stay_on_it() {
    let t = Tree::new();
    let (gw, worker) = (t.id("gw"), t.id("gw/worker"));
    let backend = addr("198.18.0.2:5432");
    let fake = FakeCounters::new();
    fake.push(Snapshot::at(S));
    let mut sampler = t.sampler(&fake);
    let retrans = |segs, syn| PairStats {
        retrans_segs: segs,
        syn_retrans: syn,
        ..PairStats::default()
    };
    let key = |cg| crate::pair_key(cg, backend.ip(), backend.port());
    let span = |w: u64, segs, syn| crate::RetransSpan {
        start_ns: w * 100_000_000,
        end_ns: (w + 1) * 100_000_000,
        retrans_segs: segs,
        syn_retrans: syn,
    };
    let mut s = Snapshot::at(2 * S)
        .with_pair(gw, backend, retrans(3, 1))
        .with_pair(worker, backend, retrans(2, 0));
    s.retrans_windows = vec![
        (key(gw), span(12, 1, 1)),
        (key(worker), span(12, 2, 0)),
        (key(gw), span(15, 2, 0)),
    ];
    fake.push(s);
    let iv = sampler.sample().unwrap();
    let p = iv.pairs.iter().find(|p| p.remote == backend).unwrap();
    assert_eq!(p.container, "gw");
    assert_eq!(
        (
            p.waits.retrans_segs,
            p.waits.syn_retrans,
            p.waits.data_retrans()
        ),
        (5, 1, 4)
    );
    let ws: Vec<(u64, u64, u64)> = p
        .waits
        .windows
        .iter()
        .map(|w| (w.start_ns, w.retrans_segs, w.syn_retrans))
        .collect();
    assert_eq!(ws, [(1_200_000_000, 3, 1), (1_500_000_000, 2, 0)]);
    // Running totals and the exposition carry them.
    let text = herd_report::export::prometheus::counters(&sampler.running_totals());
    assert!(
        text.contains("herd_pair_syn_retransmits_total{container=\"gw\",remote=\"198.18.0.2:5432\",remote_container=\"\"} 1\n"),
        "{text}"
    );
}

#[test]
fn a_long_run_on_a_busy_host_keeps_bounded_totals_that_still_add_up() {
    // 70 one-shot containers that each connect once and end, and a gateway that talks to 70
    // destinations, one a second: the kind of churn a host running a test suite makes.
    let t = Tree::new();
    let gw = t.id("gw");
    let n = MAX_ENDED_TOTALS + 6;
    let mut set = ContainerSet::default();
    let mut ids = Vec::new();
    for i in 0..n {
        let name = format!("job{i}");
        std::fs::create_dir_all(t.dir.join(&name)).unwrap();
        ids.push(t.id(&name));
        set.add(Container {
            name: name.clone(),
            cgroup: Path::new("/").join(&name),
            cgroup_id: t.id(&name),
            kind: Kind::Explicit,
            started_ns: None,
            ended_ns: None,
        })
        .unwrap();
    }
    set.add(Container {
        name: "gw".into(),
        cgroup: Path::new("/gw").into(),
        cgroup_id: gw,
        kind: Kind::Explicit,
        started_ns: None,
        ended_ns: None,
    })
    .unwrap();
    let fake = FakeCounters::new();
    fake.push(Snapshot::at(S));
    let mut sampler = Sampler::new(fake.clone(), set, t.layout()).unwrap();
    let backends: Vec<SocketAddr> = (0..n)
        .map(|i| addr(&format!("198.18.0.2:{}", 8000 + i)))
        .collect();
    let mut snap = Snapshot::at(S);
    for k in 0..n {
        // Interval k: job k connects once, then its cgroup goes; gw makes one connection to
        // backend k.
        snap = snap
            .with_count(ids[k], Counter::Connects, 1)
            .with_pair(ids[k], addr("198.18.0.9:80"), pair(1, 1))
            .with_pair(gw, backends[k], pair(1, 1));
        snap.at_ns = (k as u64 + 2) * S;
        fake.push(snap.clone());
        sampler.sample().unwrap();
        std::fs::remove_dir(t.dir.join(format!("job{k}"))).unwrap();
    }
    // Two more intervals: the last job ends and leaves the rows.
    for k in [n + 2, n + 3] {
        snap.at_ns = k as u64 * S;
        fake.push(snap.clone());
        sampler.sample().unwrap();
    }

    let totals = sampler.totals();
    let names: Vec<&str> = totals.iter().map(|(n, _)| n.as_str()).collect();
    let kept = names.iter().filter(|n| n.starts_with("job")).count();
    assert_eq!(kept, MAX_ENDED_TOTALS, "{names:?}");
    let retired = n - MAX_ENDED_TOTALS;
    let row = totals
        .iter()
        .find(|(name, _)| *name == format!("({retired} earlier ended)"))
        .unwrap_or_else(|| panic!("the retired row: {names:?}"));
    assert_eq!(row.1[Counter::Connects as usize], retired as u64);
    assert_eq!(names.last(), Some(&"host"));
    let all: u64 = totals
        .iter()
        .map(|(_, c)| c[Counter::Connects as usize])
        .sum();
    assert_eq!(all, n as u64, "every connect is in exactly one row");
    // The set forgot the retired containers; the oldest kept one is job6.
    let set_names = sampler.containers().names();
    assert!(!set_names.contains(&"job0"), "{set_names:?}");
    assert!(set_names.contains(&format!("job{retired}").as_str()));
    // The Prometheus counters have no retired row; the pairs: 64 destinations and `other`.
    let e = sampler.running_totals();
    assert!(e.containers.iter().all(|(n, _)| !n.starts_with('(')));
    // An ended container's destinations leave with it.
    assert!(
        e.pairs.iter().all(|p| !p.0.starts_with("job")),
        "{:?}",
        e.pairs
    );
    let gw_pairs: Vec<_> = e.pairs.iter().filter(|p| p.0 == "gw").collect();
    assert_eq!(gw_pairs.len(), MAX_PAIR_TOTALS + 1);
    let other = gw_pairs
        .iter()
        .find(|p| p.1 == herd_model::OTHER_REMOTE)
        .expect("the other destination");
    assert_eq!(other.3.connects, (n - MAX_PAIR_TOTALS) as u64);
    assert_eq!(gw_pairs.iter().map(|p| p.3.connects).sum::<u64>(), n as u64);
    // The least recently counted went to `other`: backend 0 did, the last one did not.
    assert!(gw_pairs.iter().all(|p| p.1 != backends[0]));
    assert!(gw_pairs.iter().any(|p| p.1 == backends[n - 1]));
    let text = herd_report::export::prometheus::counters(&e);
    assert!(
        text.contains(
            r#"herd_pair_connects_total{container="gw",remote="other",remote_container=""} 6"#
        ),
        "{text}"
    );
}
