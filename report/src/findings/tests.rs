use super::*;
use crate::model::{
    Cell, PairRow, RunSummary, SCHEMA_VERSION, Split, TimelineContainer, TimelinePoint,
};
use herd_model::{PairGauges, PairInterval, ProbeInterval};

/// Every number a finding's title states stands in its evidence: the digits of each number
/// (`342`, `0.53`, `16047`, `28232`) are found, as written, in some evidence row.
pub(crate) fn numbers_stand_in_the_evidence(f: &Finding) {
    let evidence = f.evidence.join("\n");
    let mut number = String::new();
    let check = |number: &mut String| {
        let n = number.trim_end_matches('.').to_owned();
        if !n.is_empty() {
            assert!(
                evidence.contains(&n),
                "{}: `{n}` is in the title but not in the evidence\n  title: {}\n  evidence: {:#?}",
                f.kind,
                f.title,
                f.evidence
            );
        }
        number.clear();
    };
    for c in f.title.chars() {
        if c.is_ascii_digit() || (c == '.' && !number.is_empty()) {
            number.push(c);
        } else {
            check(&mut number);
        }
    }
    check(&mut number);
}

fn report(pairs: Vec<PairRow>, requests: u64) -> Report {
    Report {
        schema_version: SCHEMA_VERSION,
        herd_version: "test".into(),
        expected: Default::default(),
        run: RunSummary {
            id: 1,
            name: "t".into(),
            scenario: "t.toml".into(),
            status: "finished".into(),
            started_unix_ms: 0,
            started_at: "1970-01-01T00:00:00Z".into(),
            duration_s: 60.0,
            requests,
            split: Split {
                ok: requests,
                ..Split::default()
            },
            errors: 0,
            saturated_intervals: 0,
            probe_intervals: 60,
            seeding: None,
        },
        ops: vec![],
        totals: vec![],
        streams: vec![],
        groups: vec![],
        open: vec![],
        containers: vec![],
        pairs,
        timeline: vec![],
        slo: vec![],
        findings: vec![],
        notes: vec![],
    }
}

fn pair(connects: u64, churn: f64) -> PairRow {
    PairRow {
        container: "gateway".into(),
        remote: "198.18.0.6:8082".into(),
        remote_container: "backend".into(),
        connects,
        connects_per_s: connects as f64 / 60.0,
        time_wait_entries: connects,
        time_wait_implied_peak: connects / 60 * 60,
        time_wait_peak: Cell::Missing("not sampled".into()),
        established_peak: Cell::Value(2.0),
        srtt_p50_us: Cell::Missing("not sampled".into()),
        srtt_p99_le_us: Cell::Missing("not sampled".into()),
        headroom_min: Cell::Missing("not sampled".into()),
        churn_ratio: Cell::Value(churn),
        connect_latency_us: Default::default(),
        lifetime_ms: Default::default(),
    }
}

/// One timeline point of `secs` s at `t` with the gateway's CPU and gauge as given.
fn point(t: f64, phase: usize, players: usize, rps: f64, gw: (f64, f64, f64)) -> TimelinePoint {
    let (cpu, quota, share) = gw;
    TimelinePoint {
        start_s: t,
        duration_s: 1.0,
        phase_index: Some(phase),
        phase: Some(format!("step {}", phase + 1)),
        players,
        req_per_s: rps,
        split: Split {
            ok: rps as u64,
            ..Split::default()
        },
        ops: vec![crate::model::TimelineOp {
            op: "game.state".into(),
            req_per_s: rps,
            p50_us: 4_000,
            p99_us: if share > 0.5 { 2_100_000 } else { 12_000 },
            split: Split::default(),
        }],
        stream_events_per_s: 0.0,
        late_starts: 0,
        dropped_starts: 0,
        driver: crate::model::DriverPoint {
            cpu_percent: 20.0,
            cores: 2,
            lag_p99_us: 1_000,
            saturated: None,
        },
        containers: vec![TimelineContainer {
            container: "gateway".into(),
            connects_per_s: 300.0,
            time_wait_entries_per_s: 300.0,
            time_wait: Some(16_047),
            port_range: Some(28_232),
            cpu_cores: Some(cpu),
            cpu_burst_cores: Some(quota),
            cpu_quota_cores: Some(quota),
            throttled_share: Some(share),
        }],
    }
}

#[test]
fn a_pool_flat_at_its_cap_while_latency_climbs_is_named() {
    let mut d = crate::model::tests::data();
    // Three steps of 2 s each; p99 20 ms, then 20 ms, then 400 ms.
    let base = d.phases[0].clone();
    d.phases = (0..3)
        .map(|k| {
            let mut s = base.clone();
            s.phase = format!("step {}", k + 1);
            s.index = Some(k);
            s.start_ms = k as u64 * 2000;
            s.duration_ms = 2000;
            s.ops[0].latency.p99_us = [20_000, 20_000, 400_000][k];
            s
        })
        .collect();
    let mono0 = d.meta.mono_start_ns as u64;
    let remote: std::net::SocketAddr = "198.18.0.6:5432".parse().unwrap();
    d.probe = (1..=6u64)
        .map(|i| ProbeInterval {
            rolled_up: None,
            at_ns: mono0 + i * 1_000_000_000 - 500_000_000,
            interval_ns: 1_000_000_000,
            containers: vec![],
            pairs: vec![PairInterval::gauges_only(
                "backend".into(),
                remote,
                Some("postgres".into()),
                PairGauges {
                    established: if i <= 2 { 10 } else { 25 },
                    ..PairGauges::default()
                },
            )],
            lost: 0,
            services: Vec::new(),
        })
        .collect();
    let mut r = report(vec![pair(500, 0.01)], 1000);
    r.pairs[0].container = "backend".into();
    r.pairs[0].remote = remote.to_string();
    r.pairs[0].remote_container = "postgres".into();
    let f = pool_pinned(&r, &d);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert!(
        f[0].title
            .contains("25 connections in every step from step 2"),
        "{}",
        f[0].title
    );
    assert!(f[0].title.contains("from 20ms to 400ms"), "{}", f[0].title);
    numbers_stand_in_the_evidence(&f[0]);
    // A catalog first does not shift the steps' peaks by one.
    let mut with_catalog = d.clone();
    let mut route = base.clone();
    route.phase = "catalog game.list".into();
    route.kind = herd_model::PhaseKind::Catalog;
    route.index = Some(0);
    route.start_ms = 0;
    route.duration_ms = 0;
    for (k, s) in with_catalog.phases.iter_mut().enumerate() {
        s.index = Some(k + 1);
    }
    with_catalog.phases.insert(0, route);
    assert_eq!(pool_pinned(&r, &with_catalog).len(), 1);
    // A pool that grows with the load is not pinned.
    for iv in &mut d.probe {
        let i = (iv.at_ns - mono0) / 1_000_000_000 + 1;
        iv.pairs[0].gauges.as_mut().unwrap().established = 10 * i;
    }
    assert!(pool_pinned(&r, &d).is_empty());
}

#[test]
fn a_latency_breach_without_errors_is_named_once_from_its_first_step() {
    let mut r = report(vec![], 1000);
    let row = |step: &str, ms: f64, errors: f64| crate::model::SloRow {
        phase: step.into(),
        op: "rpc".into(),
        objective: "p99 < 500ms".into(),
        measured: ms * 1e3,
        limit: 500e3,
        pass: ms < 500.0,
        error_share: errors,
    };
    r.slo = vec![
        row("step 1", 120.0, 0.0),
        row("step 2", 1671.0, 0.0),
        row("step 3", 16_000.0, 0.0),
    ];
    let f = slo_breach_without_errors(&r);
    assert_eq!(f.len(), 1);
    assert!(
        f[0].title
            .contains("broken from step 2 (1.67s) with 0 errors"),
        "{}",
        f[0].title
    );
    assert!(
        f[0].evidence[0].contains("step 3 16.00s"),
        "{:?}",
        f[0].evidence
    );
    numbers_stand_in_the_evidence(&f[0]);
    // With errors it is a failure, not a silent degradation.
    r.slo = vec![row("step 1", 900.0, 0.2)];
    assert!(slo_breach_without_errors(&r).is_empty());
}

#[test]
fn the_seeds_churn_is_named_with_its_numbers_and_a_pooled_pair_is_not() {
    let d = crate::model::tests::data();
    // 440 new connections/s for ~2x as many requests, as in the seed report.
    let mut r = report(vec![pair(26_400, 0.5), pair(50, 0.0)], 52_800);
    r.timeline = vec![point(0.0, 0, 10, 800.0, (0.3, 1.0, 0.0))];
    r.pairs[0].time_wait_peak = Cell::Value(26_012.0);
    let f = churn_cliff(&r, &d);
    assert_eq!(f.len(), 1);
    let t = &f[0].title;
    assert!(t.contains("a new connection for 50 % of requests"), "{t}");
    assert!(t.contains("440 new connections/s"), "{t}");
    assert!(t.contains("TIME_WAIT peak 26012"), "{t}");
    // 440/s × 60 s = 26 400 TIME_WAIT sockets: under the 28 232 ports, so no cliff yet.
    assert!(
        t.contains("settles near 26400 of its 28232 ephemeral ports (94 %)"),
        "{t}"
    );
    assert!(!t.contains("fail"), "no connect failed: {t}");
    numbers_stand_in_the_evidence(&f[0]);
    assert!(churn_cliff(&report(vec![pair(500, 0.01)], 50_000), &d).is_empty());
    // Past the port range the finding says when the ports run out, at the measured rate.
    let mut r = report(vec![pair(60_000, 0.9)], 66_000);
    r.timeline = vec![point(0.0, 0, 10, 800.0, (0.3, 1.0, 0.0))];
    let f = churn_cliff(&r, &d);
    assert!(
        f[0].title
            .contains("its 28232 ephemeral ports toward it run out after 28 s"),
        "{}",
        f[0].title
    );
    numbers_stand_in_the_evidence(&f[0]);
    // Without the source's port range the finding says so, and projects only against
    // Linux's default range, named as such.
    let f = churn_cliff(&report(vec![pair(60_000, 0.9)], 66_000), &d);
    assert!(
        f[0].title.contains(
            "gateway's port range was not sampled: with Linux's default 28232 ports toward it \
             they would run out after 28 s"
        ),
        "{}",
        f[0].title
    );
    numbers_stand_in_the_evidence(&f[0]);
    let f = churn_cliff(&report(vec![pair(6_000, 0.9)], 6_600), &d);
    assert!(
        f[0].title
            .contains("port range was not sampled, so when its ports run out is unknown"),
        "{}",
        f[0].title
    );
    numbers_stand_in_the_evidence(&f[0]);
}

/// The seeds' run: churn on gateway → backend, the gateway at its quota for 8 s in step 3,
/// req/s collapsing under 400 players — each named, and one chain heads them.
fn seeds_run() -> Report {
    let mut r = report(vec![pair(20_520, 0.53)], 38_640);
    r.pairs[0].time_wait_peak = Cell::Value(16_047.0);
    let mut t = Vec::new();
    for s in 0..30 {
        t.push(point(s as f64, 0, 200, 1_865.0, (0.31, 0.5, 0.0)));
    }
    for s in 30..38 {
        t.push(point(s as f64, 1, 400, 1_800.0, (0.4, 0.5, 0.1)));
    }
    for s in 38..46 {
        t.push(point(s as f64, 1, 400, 4.0, (0.5, 0.5, 1.0)));
    }
    r.timeline = t;
    r
}

/// An interval in which no request completed has no latency: the collapse says 0 req/s and
/// "no request completed", never a p99 of 0µs or a rate of "-0".
#[test]
fn a_collapse_to_nothing_completed_names_no_latency_for_it() {
    let mut r = seeds_run();
    for p in r.timeline.iter_mut().filter(|p| p.start_s >= 40.0) {
        p.req_per_s = 0.0;
        p.split = Split::default();
        p.ops.clear();
    }
    let col = throughput_collapse(&r);
    assert_eq!(col.len(), 1, "{col:#?}");
    let f = &col[0];
    assert!(
        f.title.starts_with(
            "step 2: req/s fell from 1800 to 0 while 400 players kept asking; the worst p99 \
             reached 2.10s"
        ),
        "{}",
        f.title
    );
    assert!(
        !f.title.contains("-0") && !f.title.contains("0µs"),
        "{}",
        f.title
    );
    assert!(
        f.evidence
            .iter()
            .any(|e| e.starts_with("t = 40–41 s: 0 req/s, 400 players, no request completed")),
        "{:#?}",
        f.evidence
    );
    numbers_stand_in_the_evidence(f);
    // Nothing completed in any collapsed interval: no latency is claimed at all.
    for p in r.timeline.iter_mut().filter(|p| p.start_s >= 38.0) {
        p.req_per_s = 0.0;
        p.ops.clear();
    }
    let col = throughput_collapse(&r);
    assert!(
        col[0].title.starts_with(
            "step 2: req/s fell from 1800 to 0 while 400 players kept asking; gateway"
        ),
        "{}",
        col[0].title
    );
}

#[test]
fn a_quota_held_for_seconds_is_saturation_and_heads_a_causal_chain_with_the_churn() {
    let d = crate::model::tests::data();
    let r = seeds_run();
    let sat = cpu_saturated(&r);
    assert_eq!(sat.len(), 1, "{sat:#?}");
    assert!(
        sat[0].title.starts_with(
            "gateway at its 0.50-core CPU quota for 8 s in a row (t = 38–46 s, step 2)"
        ),
        "{}",
        sat[0].title
    );
    numbers_stand_in_the_evidence(&sat[0]);
    let col = throughput_collapse(&r);
    assert_eq!(col.len(), 1, "{col:#?}");
    assert!(
        col[0].title.starts_with(
            "step 2: req/s fell from 1800 to 4 while 400 players kept asking; the worst p99 \
             reached 2.10s; gateway sat at its 0.50-core quota, throttled 100 %"
        ),
        "{}",
        col[0].title
    );
    numbers_stand_in_the_evidence(&col[0]);
    let all = detect(&r, &d);
    assert_eq!(all[0].kind, "causal_chain", "{all:#?}");
    assert!(
        all[0].title.starts_with(
            "Fix first: gateway → backend (198.18.0.6:8082) — its churn (342 new \
             connections/s, 53 % of requests) keeps gateway at its 0.50-core CPU quota for 8 s \
             in step 2, and req/s fell from 1800 to 4"
        ),
        "{}",
        all[0].title
    );
    for f in &all {
        numbers_stand_in_the_evidence(f);
    }
    // A quota hit in bursts only is not saturation.
    let mut bursts = seeds_run();
    bursts.timeline.truncate(40);
    assert!(cpu_saturated(&bursts).is_empty());
}

#[test]
fn a_saturated_driver_names_its_intervals_and_why() {
    let mut r = seeds_run();
    for p in &mut r.timeline[10..13] {
        p.driver.saturated = Some("CPU 187 % of 2 cores".into());
    }
    r.timeline[20].driver.saturated = Some("scheduler lag p99 15ms".into());
    let f = driver_saturated(&r);
    assert_eq!(f.len(), 1);
    assert!(
        f[0].title.starts_with(
            "the driver was saturated by its CPU and its scheduler's lag in 4 interval(s), t = \
             10.0–13.0 s, 20.0–21.0 s"
        ),
        "{}",
        f[0].title
    );
    assert_eq!(f[0].evidence.len(), 5, "a count and a row per interval");
    numbers_stand_in_the_evidence(&f[0]);
    assert!(driver_saturated(&seeds_run()).is_empty());
}

/// Every detector, run on every fixture that has them: each finding states only numbers its
/// evidence shows.
#[test]
fn every_finding_of_every_fixture_states_only_numbers_its_evidence_shows() {
    let mut kinds = std::collections::BTreeSet::new();
    for (name, d) in [
        ("model", crate::model::tests::data()),
        ("snapshot, bug", crate::snapshot_tests::fixture(false)),
        ("snapshot, fix", crate::snapshot_tests::fixture(true)),
    ] {
        let r = Report::build(&d);
        for f in &r.findings {
            kinds.insert(f.kind.clone());
            numbers_stand_in_the_evidence(f);
            assert!(!f.evidence.is_empty(), "{name}: {} has no evidence", f.kind);
        }
    }
    for r in [long_poll_bound(), cold_pool(true), nagle_run()] {
        for f in detect(&r, &crate::model::tests::data()) {
            kinds.insert(f.kind.clone());
            numbers_stand_in_the_evidence(&f);
        }
    }
    let r = long_poll_bound();
    for f in detect(&r, &crate::model::tests::data()) {
        kinds.insert(f.kind.clone());
        numbers_stand_in_the_evidence(&f);
    }
    let r = seeds_run();
    for f in detect(&r, &crate::model::tests::data()) {
        kinds.insert(f.kind.clone());
        numbers_stand_in_the_evidence(&f);
    }
    for d in [
        connecting(0, 23, 21, 14_350),
        connecting(160, 40, 0, 0),
        corrupted(),
        contended(0.0),
        lossy(),
        overflowing(),
        memory_starved(3),
        conntrack_filling(),
    ] {
        for f in Report::build(&d).findings {
            kinds.insert(f.kind.clone());
            numbers_stand_in_the_evidence(&f);
        }
    }
    for k in [
        "causal_chain",
        "churn_cliff",
        "cpu_saturated",
        "throughput_collapse",
        "throttling_bursts",
        "slo_breach_without_errors",
        "driver_saturated",
        "stream_storm",
        "target_unreachable",
        "integrity_failures",
        "latency_not_cpu",
        "cpu_contention",
        "packet_loss",
        "accept_queue_overflow",
        "oom_killed",
        "memory_pressure",
        "conntrack_exhaustion",
        "nagle_delayed_ack",
    ] {
        assert!(kinds.contains(k), "no fixture exercises {k}: {kinds:?}");
    }
}

/// A run of `data()` whose connects to 127.0.0.1:40123 went as given.
fn connecting(connects: u64, failed: u64, held: u64, held_ms: u64) -> RunData {
    let mut d = crate::model::tests::data();
    for p in &mut d.phases {
        p.connects = connects;
        p.connect_errors = failed;
    }
    d.final_report = Some(herd_model::RunResult {
        expected: Default::default(),
        scenario: "t.toml".into(),
        target: "127.0.0.1:40123".into(),
        transport: "h1".into(),
        connections: "per_player".into(),
        started_unix_ms: 0,
        duration_ms: 2000,
        stopped_early: false,
        requests: failed,
        connects,
        reconnects: 0,
        connect_errors: failed,
        connects_held: held,
        connect_backoff_ms: held_ms,
        saturated_intervals: 0,
        phases: d.phases.clone(),
        intervals: d.driver.clone(),
        play: Default::default(),
    });
    d
}

#[test]
fn a_target_never_reached_is_named_with_its_failed_connects_and_the_backoff() {
    let f = target_unreachable(&connecting(0, 23, 21, 14_350)).expect("named");
    assert_eq!(f.kind, "target_unreachable");
    assert_eq!(
        f.title,
        "every one of the run's 23 connects to 127.0.0.1:40123 failed: the run measured \
         nothing about the target"
    );
    assert!(
        f.evidence
            .iter()
            .any(|e| e == "connect backoff: 21 connects held back, 14350 ms waited in all"),
        "{:#?}",
        f.evidence
    );
    numbers_stand_in_the_evidence(&f);
    let r = Report::build(&connecting(0, 23, 21, 14_350));
    assert_eq!(
        r.findings[0].kind, "target_unreachable",
        "{:#?}",
        r.findings
    );

    // A share: 40 of 200 tried failed.
    let f = target_unreachable(&connecting(160, 40, 0, 0)).expect("named");
    assert_eq!(
        f.title,
        "20 % of the connects to 127.0.0.1:40123 failed (40 of 200)"
    );
    numbers_stand_in_the_evidence(&f);

    // A few resets in a run that connected, or a small share, are play.
    assert!(target_unreachable(&connecting(200, 9, 0, 0)).is_none());
    assert!(target_unreachable(&connecting(1000, 40, 0, 0)).is_none());
    assert!(target_unreachable(&connecting(200, 0, 0, 0)).is_none());
}

/// A run of `data()` whose first op had 3 responses of one blob fail their sha256 check.
fn corrupted() -> RunData {
    let mut d = connecting(200, 0, 0, 0);
    let op = &mut d.phases[0].ops[0];
    op.count += 3;
    op.outcomes.push(herd_model::OutcomeStats {
        outcome: herd_model::Outcome::CheckFailed,
        count: 3,
        latency: Default::default(),
        histogram: None,
    });
    let name = op.op.clone();
    let fin = d.final_report.as_mut().expect("connecting() has one");
    fin.phases = d.phases.clone();
    fin.play.check_failures = vec![herd_model::CheckFailure {
        op: name,
        resource: "/v2/seed/broken/blobs/sha256:ab12".into(),
        count: 3,
    }];
    d
}

#[test]
fn failed_checks_are_named_by_op_and_resource() {
    let d = corrupted();
    let r = Report::build(&d);
    let f = r
        .findings
        .iter()
        .find(|f| f.kind == "integrity_failures")
        .unwrap_or_else(|| panic!("{:#?}", r.findings));
    let op = &d.phases[0].ops[0].op;
    assert_eq!(
        f.title,
        format!("3 responses failed their integrity check, on 1 distinct resources ({op} 3)")
    );
    assert!(
        f.evidence
            .contains(&format!("{op} /v2/seed/broken/blobs/sha256:ab12: 3 failed")),
        "{:#?}",
        f.evidence
    );
    assert_eq!(f.numbers["check_failed"], 3.0);
    numbers_stand_in_the_evidence(f);
    // A run whose checks all held names nothing.
    assert!(
        integrity_failures(
            &Report::build(&connecting(200, 0, 0, 0)),
            &connecting(200, 0, 0, 0)
        )
        .is_none()
    );
}

/// Seed 003's soft ramp: `read`'s delivery p99 broke 500 ms in soak 3 while the chat
/// container used 0.62 of its 2 cores.
fn long_poll_bound() -> Report {
    let mut r = Report::build(&crate::snapshot_tests::fixture(false));
    let mut c = r
        .containers
        .first()
        .cloned()
        .expect("the fixture has containers");
    c.phase = "soak 3".into();
    c.container = "chat".into();
    c.cpu_sustained = Cell::Value(0.62);
    c.cpu_cap = Cell::Value(2.0);
    r.containers = vec![c];
    r.slo = vec![crate::model::SloRow {
        phase: "soak 3".into(),
        op: "read".into(),
        objective: "p99 < 500ms".into(),
        measured: 1_671_000.0,
        limit: 500_000.0,
        pass: false,
        error_share: 0.0,
    }];
    r
}

#[test]
fn a_latency_objective_broken_with_cpu_to_spare_says_cores_will_not_help() {
    let r = long_poll_bound();
    let f = latency_not_cpu(&r, &crate::model::tests::data()).expect("named");
    assert_eq!(
        f.title,
        "read broke `p99 < 500ms` in soak 3 (measured 1.67s) while every container's CPU \
         stayed at or under 31 % of its cap: adding cores will not help"
    );
    assert_eq!(f.numbers["measured_us"], 1_671_000.0);
    numbers_stand_in_the_evidence(&f);
    // At its cap, the CPU may well be why: nothing is said.
    let mut hot = r.clone();
    hot.containers[0].cpu_sustained = Cell::Value(1.9);
    assert!(latency_not_cpu(&hot, &crate::model::tests::data()).is_none());
    // The host (the root cgroup, uncapped) is read in every probed run: it has no cap to be
    // under, so it does not keep the finding from a capped container well under its own.
    let mut with_host = r.clone();
    let mut host = r.containers[0].clone();
    host.container = "host".into();
    host.cpu_sustained = Cell::Value(1.5);
    host.cpu_cap = Cell::Missing("unlimited: no CPU quota".into());
    with_host.containers.push(host);
    assert_eq!(
        latency_not_cpu(&with_host, &crate::model::tests::data()).map(|f| f.title),
        Some(f.title)
    );
    // Without container readings (no probe) nothing is claimed.
    let mut blind = r.clone();
    blind.containers.clear();
    assert!(latency_not_cpu(&blind, &crate::model::tests::data()).is_none());
}

/// Seed 003's ladder on /healthz: p99 376 ms at 50 req/s, then about 125 ms at 100 and 200
/// (`cold`), or the reverse order of latencies (degradation); `p99 < 250ms` broken where it
/// was slow.
fn cold_pool(cold: bool) -> Report {
    let mut r = Report::build(&crate::snapshot_tests::fixture(false));
    let base = r.ops.first().cloned().expect("the fixture has op rows");
    let p99s = if cold {
        [376_000, 125_000, 124_000]
    } else {
        [124_000, 125_000, 376_000]
    };
    r.ops = [50.0, 100.0, 200.0]
        .iter()
        .zip(p99s)
        .enumerate()
        .map(|(i, (rate, p99))| {
            let mut o = base.clone();
            o.phase = format!("rate {}", i + 1);
            o.kind = herd_model::PhaseKind::Rate;
            o.op = "healthz".into();
            o.rate = *rate;
            o.count = (*rate * 5.0) as u64;
            o.latency.p99_us = p99;
            o
        })
        .collect();
    r.slo = r
        .ops
        .iter()
        .map(|o| crate::model::SloRow {
            phase: o.phase.clone(),
            op: "healthz".into(),
            objective: "p99 < 250ms".into(),
            measured: o.latency.p99_us as f64,
            limit: 250_000.0,
            pass: o.latency.p99_us < 250_000,
            error_share: 0.0,
        })
        .collect();
    r.containers.clear();
    r
}

#[test]
fn a_cold_pool_is_warm_up_and_not_an_objective_broken_by_load() {
    let r = cold_pool(true);
    let f = warm_up_across_phases(&r, &[]);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(
        f[0].title,
        "healthz: p99 376ms at 50 req/s in rate 1, 124ms at 200 req/s in rate 3: latency fell \
         as the load rose, warm-up, not degradation"
    );
    numbers_stand_in_the_evidence(&f[0]);
    assert!(
        slo_breach_without_errors(&r).is_empty(),
        "the breach is the warm-up's"
    );
    // Latency that rises with the load is degradation: no warm-up, the breach is named.
    let r = cold_pool(false);
    assert!(warm_up_across_phases(&r, &[]).is_empty());
    let b = slo_breach_without_errors(&r);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].phase.as_deref(), Some("rate 3"));
}

// ---- Findings on the probe's waits: run-queue delay, retransmits, listen drops, OOM, PSI,
// conntrack. Each fixture is `data()`'s one step (t = 0–2 s) with two probe intervals.

use herd_model::waits::{
    ConntrackCell, ContainerWaits, ListenerCell, ListenerWaits, OomCell, PairWaits, Pressure,
    PsiCell, RetransWindowCell, RunqCell,
};
use herd_model::{
    ContainerInterval, CountMap, CpuCell, CpuInterval, Log2Hist, Memory, RunqStats, SocketCell,
    Throttling,
};

/// A CPU cell: `cores` used, a quota or none, `share` of periods throttled.
fn cpu_cell(cores: f64, quota: Option<f64>, share: f64) -> CpuCell {
    CpuCell::Measured(Box::new(CpuInterval {
        at_ns: 0,
        interval_ns: 1_000_000_000,
        polls: 10,
        usage_ns: (cores * 1e9) as u64,
        cpu_cores: cores,
        user_cores: cores,
        system_cores: 0.0,
        burst_cores: cores,
        burst_window_ns: 100_000_000,
        burst_at_ns: 0,
        sustained_cores: cores,
        sustained_window_ns: 30_000_000_000,
        throttle: Throttling::Measured {
            nr_periods: 10,
            nr_throttled: (share * 10.0) as u64,
            throttled_ns: (share * 1e9) as u64,
            throttled_share: share,
            quota_cores: quota,
            quota_us: quota.map(|q| (q * 100_000.0) as u64),
            period_us: 100_000,
        },
        memory: Memory::Measured {
            current_bytes: 30 << 20,
            peak_bytes: Some(36 << 20),
            working_set_bytes: None,
        },
    }))
}

/// `waits` run-queue waits summing `total_ms`, every one in log2 bucket `bucket` (µs).
fn runq(total_ms: u64, waits: u64, bucket: usize) -> RunqCell {
    let mut h = Log2Hist::default();
    h.0[bucket] = waits;
    RunqCell::of(&RunqStats {
        count: waits,
        total_ns: total_ms * 1_000_000,
        delay_us: h,
    })
}

fn row(name: &str, cpu: CpuCell, waits: ContainerWaits) -> ContainerInterval {
    ContainerInterval {
        container: name.into(),
        counts: CountMap::default(),
        cpu,
        sockets: SocketCell::Unavailable {
            reason: "no netns".into(),
        },
        started_ns: None,
        ended_ns: None,
        waits,
    }
}

/// `data()` with its two probe intervals (i = 1, 2) made by `f`.
fn waits_run(f: impl Fn(u64) -> (Vec<ContainerInterval>, Vec<PairInterval>)) -> RunData {
    let mut d = crate::model::tests::data();
    for (k, iv) in d.probe.iter_mut().enumerate() {
        let (containers, pairs) = f(k as u64 + 1);
        iv.containers = containers;
        iv.pairs = pairs;
    }
    d
}

/// victim (no quota) waits 1.3 s per second for a CPU in waits of 4–8 ms while noisy spins
/// at 0.98 cores; noisy's own waits are short; host waits a lot but is not a container.
fn contended(victim_share: f64) -> RunData {
    waits_run(|_| {
        let w = |r| ContainerWaits {
            runq: r,
            ..ContainerWaits::default()
        };
        let quota = (victim_share > 0.0).then_some(0.5);
        (
            vec![
                row(
                    "victim",
                    cpu_cell(0.3, quota, victim_share),
                    w(runq(1300, 275, 12)),
                ),
                row("noisy", cpu_cell(0.98, None, 0.0), w(runq(100, 100, 9))),
                row("host", cpu_cell(0.1, None, 0.0), w(runq(5000, 900, 14))),
            ],
            vec![],
        )
    })
}

#[test]
fn threads_waiting_for_a_cpu_without_a_quota_are_contention_and_not_latency_not_cpu() {
    let d = contended(0.0);
    let f = cpu_contention(&d);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].container.as_deref(), Some("victim"));
    assert_eq!(
        f[0].title,
        "victim's threads waited 2.6 s for a CPU over 2.0 s of step 1 (t = 0.0–2.0 s) with no \
         CPU quota: one wait's p99 ≤ 8.2ms; meanwhile noisy 0.98 cores, host 0.10 cores"
    );
    assert_eq!(f[0].numbers["runq_p99_le_us"], 8192.0);
    numbers_stand_in_the_evidence(&f[0]);
    // Under a quota it never reaches, the same waits are contention, said so.
    let d = contended(0.02);
    let f = cpu_contention(&d);
    assert!(
        f[0].title
            .contains("while under its 0.50-core quota (throttled in under 5 % of periods)"),
        "{}",
        f[0].title
    );
    numbers_stand_in_the_evidence(&f[0]);
    // Throttled, its waits are the quota's: the throttling findings name those.
    assert!(cpu_contention(&contended(0.6)).is_empty());
    // Counted from the scheduler's totals (the default probe): no p99, the mean said
    // instead (1300 ms in 275 waits: 4.7 ms), and the number the evidence shows.
    let mut d = contended(0.0);
    for iv in &mut d.probe {
        for c in &mut iv.containers {
            if let RunqCell::Measured {
                delay_us,
                delay_buckets,
                ..
            } = &mut c.waits.runq
            {
                (*delay_us, *delay_buckets) = (None, None);
            }
        }
    }
    let f = cpu_contention(&d);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert!(
        f[0].title.ends_with(
            "with no CPU quota: one wait's mean 4.7 ms; meanwhile noisy 0.98 cores, host 0.10 cores"
        ),
        "{}",
        f[0].title
    );
    assert!(!f[0].numbers.contains_key("runq_p99_le_us"));
    numbers_stand_in_the_evidence(&f[0]);
    assert!(
        f[0].evidence[0].contains("mean 4.7 ms (no per-wait p99 without --runq-waits)"),
        "{:?}",
        f[0].evidence
    );
    // Many short waits: 0.8 s a second in waits of 256–512 µs is contention too (a TCG
    // guest's pipe ping-pong waited so), 0.3 s a second of them is not.
    for (ms, named) in [(800, true), (300, false)] {
        let d = waits_run(|_| {
            let w = ContainerWaits {
                runq: runq(ms, 2_000, 8),
                ..ContainerWaits::default()
            };
            (vec![row("victim", cpu_cell(0.3, None, 0.0), w)], vec![])
        });
        let f = cpu_contention(&d);
        assert_eq!(f.len(), usize::from(named), "{ms} ms/s: {f:#?}");
    }

    // An objective broken while every capped container is far under its cap: without
    // run-queue delay that is latency_not_cpu; with victim waiting for a CPU in that phase,
    // adding cores would help, so it is not said.
    let r = long_poll_bound();
    let soak = |mut d: RunData| {
        d.phases[0].phase = "soak 3".into();
        d
    };
    assert!(latency_not_cpu(&r, &soak(crate::model::tests::data())).is_some());
    assert!(latency_not_cpu(&r, &soak(contended(0.0))).is_none());
    assert!(latency_not_cpu(&r, &soak(contended(0.02))).is_none());
}

/// client → server: 17 data retransmits a second toward the echo port (srtt 50 µs), and
/// one SYN retry a second toward a silent port, its connects taking a second (2 in all:
/// under the 5 a pair needs to be named).
fn lossy() -> RunData {
    let server: std::net::SocketAddr = "198.18.0.2:9000".parse().unwrap();
    let silent: std::net::SocketAddr = "198.18.0.2:9001".parse().unwrap();
    let mono0 = crate::model::tests::data().meta.mono_start_ns as u64;
    waits_run(|i| {
        let window = |retrans, syn| RetransWindowCell {
            start_ns: mono0 + (i - 1) * 1_000_000_000 + 300_000_000,
            end_ns: mono0 + (i - 1) * 1_000_000_000 + 400_000_000,
            retrans_segs: retrans,
            syn_retrans: syn,
        };
        let mut echo = PairInterval::gauges_only(
            "client".into(),
            server,
            Some("server".into()),
            PairGauges {
                established: 4,
                srtt_p50_us: Some(50),
                ..PairGauges::default()
            },
        );
        echo.waits = PairWaits {
            retrans_segs: 17,
            syn_retrans: 0,
            windows: vec![window(17, 0)],
        };
        let mut quiet = PairInterval::gauges_only(
            "client".into(),
            silent,
            Some("server".into()),
            PairGauges::default(),
        );
        quiet.connects = 1;
        quiet.connect_latency_buckets.0[19] = 1;
        quiet.waits = PairWaits {
            retrans_segs: 1,
            syn_retrans: 1,
            windows: vec![window(1, 1)],
        };
        (vec![], vec![echo, quiet])
    })
}

#[test]
fn retransmits_name_the_lossy_pair_only_with_syn_retries_apart() {
    let f = packet_loss(&lossy());
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(
        f[0].title,
        "client → server (198.18.0.2:9000): 34 segments retransmitted (17.00/s over 2.0 s of \
         load) — 0 SYN retries, 34 data retransmits; each data retransmit after a timeout \
         stalls its request 200 ms or more on a path whose srtt p50 is 50µs"
    );
    assert_eq!(f[0].numbers["data_retrans"], 34.0);
    numbers_stand_in_the_evidence(&f[0]);
    // The same loss as SYN retries: the connects that took a second are counted.
    let mut d = lossy();
    for iv in &mut d.probe {
        let p = &mut iv.pairs[1];
        p.connects = 6;
        p.connect_latency_buckets.0[19] = 5;
        p.connect_latency_buckets.0[6] = 1;
        p.waits.retrans_segs = 5;
        p.waits.syn_retrans = 5;
    }
    let f = packet_loss(&d);
    assert_eq!(f.len(), 2, "{f:#?}");
    let silent = f.iter().find(|f| f.title.contains(":9001")).unwrap();
    assert!(
        silent.title.ends_with(
            "10 segments retransmitted (5.00/s over 2.0 s of load) — 10 SYN retries, 0 data \
             retransmits; 10 of 12 connects took 512ms or more"
        ),
        "{}",
        silent.title
    );
    numbers_stand_in_the_evidence(silent);
}

/// server's listener on 9002 (backlog 4) drops 2 SYNs in the first second; the client's 12
/// connects to it: 10 in µs, 2 after the 1 s SYN retry.
fn overflowing() -> RunData {
    let addr: std::net::SocketAddr = "198.18.0.2:9002".parse().unwrap();
    waits_run(|i| {
        let listeners = ListenerCell::Measured {
            ports: vec![ListenerWaits {
                local_port: 9002,
                sockets: 1,
                drops: if i == 1 { 2 } else { 0 },
                accept_queue: if i == 1 { 5 } else { 0 },
                backlog: 4,
            }],
        };
        let mut p = PairInterval::gauges_only(
            "client".into(),
            addr,
            Some("server".into()),
            PairGauges::default(),
        );
        if i == 1 {
            p.connects = 12;
            p.connect_latency_buckets.0[6] = 10;
            p.connect_latency_buckets.0[19] = 2;
        }
        (
            vec![row(
                "server",
                cpu_cell(0.2, None, 0.0),
                ContainerWaits {
                    listeners,
                    ..ContainerWaits::default()
                },
            )],
            vec![p],
        )
    })
}

#[test]
fn a_full_accept_queue_is_named_with_its_connect_steps_and_chained_to_a_throttled_server() {
    let d = overflowing();
    let f = accept_queue_overflow(&d);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(
        f[0].title,
        "server port 9002: the accept queue (backlog 4) overflowed, 2 SYNs dropped (t = \
         0.0–1.0 s); of 12 connects toward it, 2 took 512ms–2.1s (one SYN retry: 1 s), 0 \
         2.1–4.2s (two: 3 s)"
    );
    numbers_stand_in_the_evidence(&f[0]);
    // A client pair whose destination the probe did not resolve to a container is matched by
    // the port, and said so.
    let mut blind = overflowing();
    for iv in &mut blind.probe {
        iv.pairs[0].remote_container = None;
    }
    let g = accept_queue_overflow(&blind);
    assert_eq!(g[0].title, f[0].title);
    assert!(
        g[0].evidence.iter().any(|e| e.starts_with(
            "connect latency toward port 9002 (a destination not resolved to a container) from \
             client: 12 connects"
        )),
        "{:#?}",
        g[0].evidence
    );
    // The listener's container at its quota: the chain says to give it CPU first.
    let mut r = seeds_run();
    r.pairs.clear();
    for p in &mut r.timeline {
        p.containers[0].container = "server".into();
    }
    let all = detect(&r, &d);
    assert_eq!(all[0].kind, "causal_chain", "{all:#?}");
    assert!(
        all[0].title.starts_with(
            "Fix first: server's CPU — at its 0.50-core CPU quota for 8 s in step 2, it accepts \
             too slowly: its accept queue on port 9002 overflowed and dropped 2 SYNs"
        ),
        "{}",
        all[0].title
    );
    for f in &all {
        numbers_stand_in_the_evidence(f);
    }
    // The same listener on the gateway that churns: the churn chain heads them, the
    // overflow is what its clients saw.
    let mut d = overflowing();
    for iv in &mut d.probe {
        iv.containers[0].container = "gateway".into();
        iv.pairs[0].remote_container = Some("gateway".into());
    }
    let mut r = report(vec![pair(20_520, 0.53)], 38_640);
    r.timeline = (0..20)
        .map(|s| point(s as f64, 0, 200, 1_800.0, (0.5, 0.5, 0.9)))
        .collect();
    let all = detect(&r, &d);
    assert!(
        all[0].title.starts_with("Fix first: gateway → backend")
            && all[0]
                .title
                .ends_with("and its accept queue on port 9002 dropped 2 SYNs"),
        "{all:#?}"
    );
    for f in &all {
        numbers_stand_in_the_evidence(f);
    }
}

/// hog: 2 OOM kills in the second interval, memory pressure 0.3 s a second (full 0.1 s);
/// the host counts `host_kills` (the hog's among them).
fn memory_starved(host_kills: u64) -> RunData {
    waits_run(|i| {
        let psi = |some, full| PsiCell::Measured {
            cpu: None,
            memory: Some(Pressure {
                some_us: some,
                full_us: Some(full),
            }),
            io: None,
        };
        let kills = |k| OomCell::Measured { oom_kills: k };
        (
            vec![
                row(
                    "hog",
                    cpu_cell(0.4, None, 0.0),
                    ContainerWaits {
                        oom: kills(if i == 2 { 2 } else { 0 }),
                        psi: psi(300_000, 100_000),
                        ..ContainerWaits::default()
                    },
                ),
                row(
                    "host",
                    cpu_cell(0.1, None, 0.0),
                    ContainerWaits {
                        oom: kills(if i == 2 { host_kills } else { 0 }),
                        psi: psi(900_000, 0),
                        ..ContainerWaits::default()
                    },
                ),
            ],
            vec![],
        )
    })
}

#[test]
fn oom_kills_and_memory_stalls_are_named_for_the_container() {
    let f = oom_killed(&memory_starved(2));
    assert_eq!(f.len(), 1, "the host's count holds the hog's: {f:#?}");
    assert_eq!(
        f[0].title,
        "hog: 2 processes killed by the OOM killer; its memory peaked at 36 MiB (first in step \
         1)"
    );
    numbers_stand_in_the_evidence(&f[0]);
    let f = oom_killed(&memory_starved(3));
    assert_eq!(f.len(), 2, "{f:#?}");
    assert!(
        f.iter().any(|f| f.title
            == "processes outside the named containers: 1 process killed by the OOM killer \
                (first in step 1)"),
        "{f:#?}"
    );
    for x in &f {
        numbers_stand_in_the_evidence(x);
    }
    let f = memory_pressure(&memory_starved(2));
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(
        f[0].title,
        "hog stalled on memory 0.6 s of 2.0 s in step 1 (30 % of the time), every task at once \
         0.2 s"
    );
    numbers_stand_in_the_evidence(&f[0]);
}

/// The host's table (gateway in the same namespace) grows from 50 000 to 60 000 entries of
/// 65 536 in a second, 3 connections dropped; client's namespace holds 6.
fn conntrack_filling() -> RunData {
    waits_run(|i| {
        let ct = |entries, drop| ContainerWaits {
            conntrack: ConntrackCell::Measured {
                entries,
                max: 65_536,
                drop: Some(drop),
                early_drop: Some(0),
                insert_failed: Some(0),
            },
            ..ContainerWaits::default()
        };
        let host = ct(40_000 + 10_000 * i, if i == 2 { 3 } else { 0 });
        (
            vec![
                row("host", cpu_cell(0.1, None, 0.0), host.clone()),
                row("gateway", cpu_cell(0.1, None, 0.0), host),
                row("client", cpu_cell(0.1, None, 0.0), ct(6, 0)),
            ],
            vec![],
        )
    })
}

#[test]
fn a_conntrack_table_near_its_limit_is_named_once_with_its_time_to_full() {
    let f = conntrack_exhaustion(&conntrack_filling());
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(
        f[0].title,
        "conntrack table of gateway, host: 60000 entries of 65536 (92 %), 3 new connections \
         dropped because it was full; growing 10000.0 entries/s, full in 0.6 s at this rate"
    );
    numbers_stand_in_the_evidence(&f[0]);
}

/// A one-step run: the gateway churns and sits at its quota the whole step, with no
/// objective and no earlier phase to compare with.
#[test]
fn a_one_step_run_at_its_quota_with_churn_names_the_chain() {
    let mut r = report(vec![pair(20_520, 0.53)], 38_640);
    r.timeline = (0..20)
        .map(|s| point(s as f64, 0, 200, 1_800.0, (0.5, 0.5, 0.9)))
        .collect();
    let d = crate::model::tests::data();
    let all = detect(&r, &d);
    assert_eq!(all[0].kind, "causal_chain", "{all:#?}");
    assert!(
        all[0].title.starts_with(
            "Fix first: gateway → backend (198.18.0.6:8082) — its churn (342 new \
             connections/s, 53 % of requests) keeps gateway at its 0.50-core CPU quota for 20 \
             s in step 1"
        ),
        "{}",
        all[0].title
    );
    assert!(
        all[0]
            .detail
            .contains("a larger idle pool) before sizing gateway's CPU"),
        "{}",
        all[0].detail
    );
    for f in &all {
        numbers_stand_in_the_evidence(f);
    }
}

/// Every wait at once beside the seeds' churn: the churn stays first, the waits follow the
/// quota and the collapse.
#[test]
fn the_churn_cliff_stays_first_among_the_waits() {
    let mut d = contended(0.0);
    for (a, b) in d.probe.iter_mut().zip(overflowing().probe) {
        a.containers.extend(b.containers);
        a.pairs.extend(b.pairs);
    }
    for (a, b) in d.probe.iter_mut().zip(lossy().probe) {
        a.pairs.extend(b.pairs);
    }
    let mut r = report(vec![pair(26_400, 0.5)], 52_800);
    r.timeline = vec![point(0.0, 0, 10, 800.0, (0.3, 1.0, 0.0))];
    let all = detect(&r, &d);
    let kinds: Vec<&str> = all.iter().map(|f| f.kind.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "churn_cliff",
            "accept_queue_overflow",
            "packet_loss",
            "cpu_contention"
        ],
        "{all:#?}"
    );
    for f in &all {
        numbers_stand_in_the_evidence(f);
    }
}

/// game.state at 41 ms p50 (43 ms p90) over 400 requests on a request path whose srtt p50
/// is 50 µs.
fn nagle_run() -> Report {
    let mut r = Report::build(&crate::snapshot_tests::fixture(false));
    let mut o = r.ops.first().cloned().expect("the fixture has op rows");
    o.phase = "step 1".into();
    o.op = "game.state".into();
    o.count = 400;
    o.latency.p50_us = 41_000;
    o.latency.p90_us = 43_000;
    o.latency.p99_us = 47_000;
    r.ops = vec![o];
    let mut p = pair(500, 0.01);
    p.srtt_p50_us = Cell::Value(50.0);
    r.pairs = vec![p];
    r
}

#[test]
fn requests_at_the_delayed_ack_timer_on_a_sub_millisecond_path_are_named_as_nagle() {
    let r = nagle_run();
    let f = nagle_delayed_ack(&r);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(
        f[0].title,
        "game.state in step 1: p50 41ms, p90 43ms on a path whose srtt p50 is 50µs — the 40ms \
         of a delayed ACK behind Nagle's algorithm, likely"
    );
    numbers_stand_in_the_evidence(&f[0]);
    // A path whose round trip is itself milliseconds long: nothing is said.
    let mut far = nagle_run();
    far.pairs[0].srtt_p50_us = Cell::Value(20_000.0);
    assert!(nagle_delayed_ack(&far).is_empty());
    // Latencies spread wide are not one timer.
    let mut wide = nagle_run();
    wide.ops[0].latency.p90_us = 90_000;
    assert!(nagle_delayed_ack(&wide).is_empty());
    // Without an srtt reading on the request path there is no evidence.
    let mut blind = nagle_run();
    blind.pairs[0].srtt_p50_us = Cell::Missing("not sampled".into());
    assert!(nagle_delayed_ack(&blind).is_empty());
}

#[test]
fn syn_retries_a_full_accept_queue_explains_are_not_named_packet_loss() {
    // The listener drops 6 SYNs; its client retried `syn` SYNs toward it.
    let run = |syn: u64| {
        let mut d = overflowing();
        for iv in &mut d.probe {
            for c in &mut iv.containers {
                if let ListenerCell::Measured { ports } = &mut c.waits.listeners {
                    ports[0].drops = ports[0].drops.min(1) * 6;
                }
            }
            let p = &mut iv.pairs[0];
            if p.connects > 0 {
                p.waits.retrans_segs = syn;
                p.waits.syn_retrans = syn;
                let mono0 = crate::model::tests::data().meta.mono_start_ns as u64;
                p.waits.windows = vec![RetransWindowCell {
                    start_ns: mono0 + 300_000_000,
                    end_ns: mono0 + 400_000_000,
                    retrans_segs: syn,
                    syn_retrans: syn,
                }];
            }
        }
        d
    };
    // Every retry is the overflow's: accept_queue_overflow names it, packet_loss does not.
    assert!(packet_loss(&run(6)).is_empty());
    assert_eq!(accept_queue_overflow(&run(6)).len(), 1);
    // 4 beyond the drops: under the 5 a finding needs.
    assert!(packet_loss(&run(10)).is_empty());
    // 8 beyond them: loss, said apart from the overflow's.
    let f = packet_loss(&run(14));
    assert_eq!(f.len(), 1, "{f:#?}");
    assert!(
        f[0].title.starts_with(
            "client → server (198.18.0.2:9002): 8 segments retransmitted (4.00/s over 2.0 s of \
             load) — 8 SYN retries, 0 data retransmits (besides 6 SYN retries the \
             destination's full accept queue explains)"
        ),
        "{}",
        f[0].title
    );
    assert_eq!(f[0].numbers["overflow_syn_retrans"], 6.0);
    numbers_stand_in_the_evidence(&f[0]);
}
