//! Load shapes against a real loopback server: open-model rate steps (coordinated
//! omission), the soak, the route catalog, the plan order and the staggered stop.

use std::time::Duration;

use herd_driver::Scenario;
use herd_model::{DriverEvent, OpenStats, PhaseKind, PhaseResult, RunResult};

use crate::{
    shapes_server::{self, ShapeServer},
    support::{Proto, QUIET, options, scenario_at},
};

fn parse(src: &str, server: &ShapeServer) -> Scenario {
    scenario_at(src, &server.url())
}

async fn run(src: &str, server: &ShapeServer) -> RunResult {
    herd_driver::run(parse(src, server), options())
        .await
        .unwrap()
}

/// Each phase's name and kind, in the order the report lists them.
fn phases(report: &RunResult) -> Vec<(&str, PhaseKind)> {
    report
        .phases
        .iter()
        .map(|s| (s.phase.as_str(), s.kind))
        .collect()
}

fn open(s: &PhaseResult) -> &OpenStats {
    s.open.as_ref().expect("a rate phase reports its arrivals")
}

const STALL_AFTER: Duration = Duration::from_millis(500);
const STALL: Duration = Duration::from_secs(1);

/// 200 arrivals/s for 2 s against a server that stalls for 1 s once, 0.5 s in.
fn open_src(when_full: &str, max_in_flight: usize) -> String {
    format!(
        r#"
[target]
url = "{{url}}"
[[op]]
name = "stall"
path = "/stall"
[[rate]]
rate = 200
duration = "2s"
max_in_flight = {max_in_flight}
when_full = "{when_full}"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_model_shows_a_stall_that_a_closed_model_hides() {
    // Timing matters here: nothing else runs beside it.
    let _quiet = QUIET.write().await;

    // Drop: 40 requests wait out the stall, the arrivals after them are dropped.
    let server = shapes_server::start(Proto::H1, STALL_AFTER, STALL).await;
    let report = run(&open_src("drop", 40), &server).await;
    let phase = &report.phases[0];
    let o = open(phase);
    assert_eq!(
        (phase.phase.as_str(), phase.kind),
        ("rate 1", PhaseKind::Rate)
    );
    assert_eq!(o.scheduled, 400, "rate × duration arrivals");
    assert_eq!(o.sent + o.dropped_starts, o.scheduled);
    assert_eq!(report.requests, server.requests(), "driver vs server");
    assert_eq!(report.requests, o.sent);
    // ~160 arrivals fall in the stall after the 40 slots fill.
    assert!(o.dropped_starts >= 80, "{o:?}");
    assert_eq!(o.peak_in_flight, 40);
    assert!(server.connections() <= 40);
    let drop_p99 = phase.ops[0].latency.p99_us;
    assert!(drop_p99 >= 700_000, "open model (drop) p99 {drop_p99} µs");
    let dropped_in_timeline: u64 = report.intervals.iter().map(|i| i.dropped_starts).sum();
    assert_eq!(dropped_in_timeline, o.dropped_starts);
    let in_flight = report.intervals.iter().map(|i| i.in_flight).max();
    assert_eq!(
        in_flight,
        Some(40),
        "the timeline shows the stalled requests in flight"
    );

    eprintln!("open model, drop: {o:?}, p99 {drop_p99} µs");

    // Queue with 2 slots: both wait out the stall, and the ~200 arrivals due meanwhile go
    // out late, after it, answered at once. Timed from their actual send, only the 2 stalled
    // requests would be slow (0.5 %, below p99); timed from their intended send time, half
    // the step is.
    let server = shapes_server::start(Proto::H1, STALL_AFTER, STALL).await;
    let report = run(&open_src("queue", 2), &server).await;
    let phase = &report.phases[0];
    let o = open(phase);
    assert_eq!((o.scheduled, o.sent, o.dropped_starts), (400, 400, 0));
    assert_eq!(report.requests, server.requests());
    assert_eq!(report.requests, 400);
    assert!(o.late_starts >= 80, "{o:?}");
    let late_in_timeline: u64 = report.intervals.iter().map(|i| i.late_starts).sum();
    assert_eq!(late_in_timeline, o.late_starts);
    let queue_p99 = phase.ops[0].latency.p99_us;
    assert!(
        queue_p99 >= 700_000,
        "open model (queue) p99 {queue_p99} µs"
    );
    assert!(server.connections() <= 2);
    eprintln!(
        "open model, queue: {o:?}, p50 {} µs, p99 {queue_p99} µs",
        phase.ops[0].latency.p50_us
    );
    let text = herd_report::text::table(&report);
    assert!(text.contains("late starts"), "{text}");

    // Closed model, same server: 4 players back to back. Only the 4 requests caught in the
    // stall see it, so the maximum shows it and p99 does not.
    let server = shapes_server::start(Proto::H1, STALL_AFTER, STALL).await;
    let src = "[target]\nurl = \"{url}\"\n[player]\nthink = \"5ms\"\n[[op]]\nname = \"stall\"\npath = \"/stall\"\n[[step]]\nplayers = 4\nduration = \"2s\"\narrival = \"burst\"\n";
    let report = run(src, &server).await;
    let op = &report.phases[0].ops[0];
    eprintln!(
        "closed model: {} requests, p99 {} µs, max {} µs",
        op.count, op.latency.p99_us, op.latency.max_us
    );
    assert_eq!(report.requests, server.requests());
    assert!(
        op.latency.max_us >= 700_000,
        "the stall reached the players"
    );
    assert!(
        op.latency.p99_us * 2 < drop_p99.min(queue_p99),
        "closed p99 {} µs vs open {drop_p99} / {queue_p99} µs",
        op.latency.p99_us
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_steps_send_rate_times_duration_and_the_server_counts_them_all() {
    let _load = QUIET.read().await;
    for (proto, conns) in [
        (Proto::H1, ""),
        (Proto::H2c, "connections = \"pool\"\npool_size = 2"),
    ] {
        let server = shapes_server::plain(proto).await;
        let src = format!(
            r#"
[target]
url = "{{url}}"
transport = "{}"
{conns}
[[op]]
name = "a"
path = "/a"
weight = 3
[[op]]
name = "b"
path = "/b"
[[rate]]
rate = [100, 250]
duration = "800ms"
"#,
            proto.name()
        );
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let opts = herd_driver::RunOptions {
            events: Some(tx),
            ..options()
        };
        let report = herd_driver::run(parse(&src, &server), opts).await.unwrap();
        let names: Vec<&str> = report.phases.iter().map(|s| s.phase.as_str()).collect();
        assert_eq!(names, vec!["rate 1", "rate 2"]);
        let scheduled: Vec<u64> = report.phases.iter().map(|s| open(s).scheduled).collect();
        assert_eq!(scheduled, vec![80, 200], "rate × duration");
        let sent: u64 = report.phases.iter().map(|s| open(s).sent).sum();
        assert_eq!(sent, 280, "{proto:?}: nothing dropped at the default bound");
        assert_eq!(report.requests, 280);
        assert_eq!(server.requests(), 280, "{proto:?}: the server's own count");
        assert_eq!(server.path_count("/a") + server.path_count("/b"), 280);
        assert_eq!(report.op_count("a"), server.path_count("/a"));
        // Weighted 3:1 by the ops' weights.
        assert!(
            server.path_count("/a") > server.path_count("/b"),
            "a {} b {}",
            server.path_count("/a"),
            server.path_count("/b")
        );
        if conns.is_empty() {
            let peak = report
                .phases
                .iter()
                .map(|s| open(s).peak_in_flight)
                .max()
                .unwrap();
            assert!(
                server.connections() as usize <= peak,
                "a connection per arrival slot"
            );
        } else {
            assert_eq!(server.connections(), 2, "the pool");
        }
        let ends: Vec<Option<OpenStats>> = std::iter::from_fn(|| rx.try_recv().ok())
            .filter_map(|e| match e {
                DriverEvent::PhaseEnd(s) => Some(s.open),
                _ => None,
            })
            .collect();
        assert_eq!(ends.len(), 2);
        assert!(
            ends.iter()
                .all(|o| o.as_ref().is_some_and(|o| o.sent == o.scheduled))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soak_adds_players_every_period_then_holds() {
    let _load = QUIET.read().await;
    let server = shapes_server::plain(Proto::H2c).await;
    let src = r#"
[target]
url = "{url}"
transport = "h2c"
[player]
think = "10ms"
[[op]]
name = "ok"
path = "/ok"
[soak]
add = 2
every = "300ms"
up_to = 5
hold = "400ms"
"#;
    let scenario = parse(src, &server);
    let players: Vec<usize> = scenario.steps.iter().map(|s| s.players).collect();
    assert_eq!(players, vec![2, 4, 5]);
    let report = herd_driver::run(scenario, options()).await.unwrap();
    let phases: Vec<(&str, PhaseKind, usize)> = report
        .phases
        .iter()
        .map(|s| (s.phase.as_str(), s.kind, s.players))
        .collect();
    assert_eq!(
        phases,
        vec![
            ("soak 1", PhaseKind::Soak, 2),
            ("soak 2", PhaseKind::Soak, 4),
            ("soak hold", PhaseKind::Soak, 5)
        ]
    );
    assert_eq!(report.requests, server.requests());
    assert_eq!(server.connections(), 5, "one connection per player");
    assert!(report.phases.iter().all(|s| s.ops[0].count > 0));
    let live: Vec<usize> = report.intervals.iter().map(|i| i.players).collect();
    assert_eq!(live.iter().max(), Some(&5), "{live:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalog_runs_each_route_k_times_then_the_steps_then_the_rates() {
    let _load = QUIET.read().await;
    let server = shapes_server::plain(Proto::H1).await;
    let src = r#"
[target]
url = "{url}"
[player]
think = "10ms"
[[op]]
name = "home"
path = "/home"
[[op]]
name = "slow"
path = "/delay/5"
weight = 0
[[op]]
name = "missing"
path = "/status/404"
weight = 0
[catalog]
requests = 25
concurrency = 3
[[step]]
players = 2
duration = "300ms"
arrival = "burst"
[[rate]]
rate = 50
duration = "400ms"
ops = ["slow"]
"#;
    let report = run(src, &server).await;
    assert_eq!(
        phases(&report),
        vec![
            ("catalog home", PhaseKind::Catalog),
            ("catalog slow", PhaseKind::Catalog),
            ("catalog missing", PhaseKind::Catalog),
            ("step 1", PhaseKind::Step),
            ("rate 1", PhaseKind::Rate),
        ]
    );
    for (k, (op, outcome)) in [("home", "ok"), ("slow", "ok"), ("missing", "http_4xx")]
        .into_iter()
        .enumerate()
    {
        let s = &report.phases[k];
        assert_eq!(s.ops.len(), 1, "one route per catalog phase");
        assert_eq!((s.ops[0].op.as_str(), s.ops[0].count), (op, 25));
        assert_eq!(s.ops[0].outcomes[0].outcome, outcome.into());
        assert_eq!(s.players, 3);
    }
    // Exact per route: the catalog's 25, the step's players (home only), the rate's 20.
    assert_eq!(server.path_count("/status/404"), 25);
    assert_eq!(server.path_count("/delay/5"), 25 + 20);
    assert_eq!(server.path_count("/home"), report.op_count("home"));
    assert_eq!(report.requests, server.requests());
    // The players left before the rate step: its table holds only its own op.
    let rate: Vec<&str> = report.phases[4].ops.iter().map(|o| o.op.as_str()).collect();
    assert_eq!(rate, vec!["slow"]);
    assert_eq!(open(&report.phases[4]).sent, 20);
    // One after another.
    for w in report.phases.windows(2) {
        assert!(
            w[0].start_ms + w[0].duration_ms <= w[1].start_ms + 5,
            "{} then {}",
            w[0].phase,
            w[1].phase
        );
    }
    let text = herd_report::text::table(&report);
    assert!(text.contains("catalog: 3 routes"), "{text}");
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("catalog:"))
        .skip(2)
        .take(3)
        .collect();
    assert!(rows[0].trim_start().starts_with("home"), "{text}");
    assert!(rows[2].contains("http_4xx 25"), "{text}");
}

/// Step 1: 4 players, each requesting its own path. Step 2 shrinks to 2, the 2 leaving
/// spread over `leave`; the stop then spreads the last 2 over `spread`.
fn stagger_src(leave: &str, stop: &str) -> String {
    format!(
        r#"
[target]
url = "{{url}}"
transport = "h2c"
[player]
think = "10ms"
[[op]]
name = "mine"
path = "/p/{{player}}"
[[step]]
players = 4
duration = "300ms"
arrival = "burst"
[[step]]
players = 2
duration = "600ms"
{leave}
{stop}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staggered_stop_spreads_the_leaving() {
    let _load = QUIET.read().await;
    let server = shapes_server::plain(Proto::H2c).await;
    let report = run(
        &stagger_src("leave = \"400ms\"", "[stop]\nspread = \"600ms\""),
        &server,
    )
    .await;
    assert_eq!(report.requests, server.requests());
    assert_eq!(
        phases(&report),
        vec![
            ("step 1", PhaseKind::Step),
            ("step 2", PhaseKind::Step),
            ("stop", PhaseKind::Stop)
        ]
    );
    let last = |p: u64| server.last_at(&format!("/p/{p}")).unwrap();
    // Newest first: player 3 at step 2's start, player 2 200 ms later; then player 1 at
    // the stop's start, player 0 300 ms later.
    let gap_step = last(2) - last(3);
    let gap_stop = last(0) - last(1);
    assert!(
        last(2) > last(3) && gap_step >= Duration::from_millis(120),
        "{gap_step:?}"
    );
    assert!(
        last(0) > last(1) && gap_stop >= Duration::from_millis(180),
        "{gap_stop:?}"
    );
    assert!(last(1) > last(2));
    eprintln!("staggered: step 2 leaving {gap_step:?} apart, stop {gap_stop:?} apart");

    // Without the spread, the two of step 2 leave together.
    let server = shapes_server::plain(Proto::H2c).await;
    let report = run(&stagger_src("", ""), &server).await;
    assert_eq!(report.requests, server.requests());
    let last = |p: u64| server.last_at(&format!("/p/{p}")).unwrap();
    let gap = if last(2) > last(3) {
        last(2) - last(3)
    } else {
        last(3) - last(2)
    };
    assert!(gap < Duration::from_millis(100), "{gap:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shape_examples_run_shortened() {
    let _load = QUIET.read().await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/scenarios");
    for (file, proto, sets, phases) in [
        (
            "rate.toml",
            Proto::H2c,
            &[
                "rate[0].rate=[50, 100]",
                "rate[0].duration=300ms",
                "rate[0].max_in_flight=20",
            ][..],
            vec!["rate 1", "rate 2"],
        ),
        (
            "catalog.toml",
            Proto::H1,
            &[
                "catalog.requests=5",
                "player.think=20ms",
                "step[0].players=2",
                "step[0].duration=200ms",
                "step[0].ramp=100ms",
                "step[1].players=3",
                "step[1].duration=200ms",
                "rate[0].rate=50",
                "rate[0].duration=200ms",
            ][..],
            vec![
                "catalog health",
                "catalog games.list",
                "catalog profile",
                "step 1",
                "step 2",
                "rate 1",
            ],
        ),
        (
            "soak.toml",
            Proto::H2c,
            &[
                "player.tick=20ms",
                "soak.add=2",
                "soak.every=150ms",
                "soak.up_to=4",
                "soak.hold=200ms",
                "stop.spread=200ms",
            ][..],
            vec!["soak 1", "soak hold", "stop"],
        ),
    ] {
        let server = shapes_server::plain(proto).await;
        let mut sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        sets.push(format!("target.url={}", server.url()));
        let scenario = Scenario::load(&dir.join(file), &sets).unwrap_or_else(|e| panic!("{e}"));
        let report = herd_driver::run(scenario, options()).await.unwrap();
        let names: Vec<&str> = report.phases.iter().map(|s| s.phase.as_str()).collect();
        assert_eq!(names, phases, "{file}");
        assert!(report.requests > 0, "{file}");
        assert_eq!(report.requests, server.requests(), "{file}");
        assert_eq!(
            report.outcome_count("games.list", "ok"),
            server.path_count("/v1/games"),
            "{file}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_slots_run_the_player_setup_once_each() {
    let server = crate::support::TestServer::start(Proto::H1).await;
    let src = r#"
[target]
url = "{url}"
[player]
setup = ["create"]
[[op]]
name = "create"
method = "POST"
path = "/game/new"
weight = 0
capture = { game = "/game/id" }
[[op]]
name = "echo"
path = "/echo/{game}"
check = { status = 200 }
[[rate]]
rate = 100
duration = "500ms"
max_in_flight = 5
when_full = "queue"
setup = true
"#;
    let report = crate::support::run(crate::support::scenario(src, &server)).await;
    let o = open(&report.phases[0]);
    assert_eq!((o.scheduled, o.sent), (50, 50));
    assert_eq!(
        report.outcome_count("echo", "ok"),
        50,
        "every arrival had its game"
    );
    // One setup per slot, and each slot is one connection.
    let creates = report.outcome_count("create", "ok");
    assert!((1..=5).contains(&creates), "{creates} setups");
    assert_eq!(creates, server.connections());
    assert_eq!(report.requests, 50 + creates);
    assert_eq!(report.requests, server.requests());
}

/// A stop in the middle of a rate step or a catalog route: no new arrival or request, the
/// ones in flight get the grace, then count as `cancelled`, and the report is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_ends_a_rate_step_or_a_route_within_the_grace() {
    let _load = QUIET.read().await;
    for shape in [
        "[[rate]]\nrate = 50\nduration = \"10s\"",
        "[catalog]\nrequests = 1000\nconcurrency = 3",
    ] {
        let server = shapes_server::plain(Proto::H2c).await;
        let src = format!(
            "[target]\nurl = \"{{url}}\"\ntransport = \"h2c\"\n[[op]]\nname = \"stuck\"\npath = \"/delay/5000\"\n{shape}\n"
        );
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            tx.send_replace(true);
        });
        let opts = herd_driver::RunOptions {
            stop: Some(rx),
            grace: Duration::from_millis(300),
            ..options()
        };
        let t = std::time::Instant::now();
        let report = herd_driver::run(parse(&src, &server), opts).await.unwrap();
        let took = t.elapsed();
        assert!(report.stopped_early, "{shape}");
        assert!(
            took < Duration::from_millis(2_000),
            "{shape}: took {took:?}"
        );
        assert_eq!(report.requests, server.requests(), "{shape}");
        let cancelled = report.outcome_count("stuck", "cancelled");
        assert_eq!(cancelled, report.requests, "{shape}: all were in flight");
        assert!(cancelled >= 3, "{shape}: {cancelled}");
        if let Some(o) = &report.phases[0].open {
            // Arrivals stopped at the stop: ~15 of the 500 planned.
            assert!(o.scheduled < 50 && o.sent == o.scheduled, "{o:?}");
        }
    }
}
