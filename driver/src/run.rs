//! The plan runner: the plan's phases in order (catalog routes, steps of players with
//! gradual or burst arrival, soak steps, the stop spread, open-model rate steps; see
//! `Scenario::plan`), the hammer beside them, and a bounded stop.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst},
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use tokio::{
    sync::{mpsc, watch},
    task::JoinHandle,
};

use crate::{
    conns::{Conns, Own, Pool},
    groups::Lobby,
    measure::play::{PlayAcc, stream_kind},
    measure::{
        aggregator::{Aggregator, Counters, Live, Msg, Setup},
        gate::Gate,
        health,
    },
    player::{FilePlayer, HammerPlayer, Player, Role, Session, Shared},
    scenario::{Arrival, Connections, Hammer, Pace, PhaseWork, Scenario},
    shapes, transport,
    units::sleep_until,
};
use herd_model::{DriverEvent, RunResult, Shard};

/// How a run is watched and stopped.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Becomes true to stop the run early (Ctrl-C): no new ops start, in-flight ones get
    /// [`RunOptions::grace`], results are still reported.
    pub stop: Option<watch::Receiver<bool>>,
    /// Becomes true to end the grace at once (a second Ctrl-C): ops still in flight are
    /// recorded as `cancelled` and the results reported without waiting.
    pub hurry: Option<watch::Receiver<bool>>,
    /// How long in-flight ops may take to finish once the run stops (early or at its
    /// plan's end); ops still in flight after that are recorded as `cancelled`.
    pub grace: Duration,
    /// The timeline's interval.
    pub interval: Duration,
    /// Where to send the result stream, if anywhere.
    pub events: Option<mpsc::UnboundedSender<DriverEvent>>,
    /// Cores the driver may use, for the saturation flag.
    pub cores: usize,
    /// Which part of the plan this process runs (`--shard I/N`; the whole plan by default).
    pub shard: Shard,
    /// Keep every interval for the final [`RunResult::intervals`] (the default). A run that
    /// records its intervals as they pass (`herd run`: the store has them) turns it off, so
    /// the driver's memory does not grow with the run's length.
    pub keep_intervals: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        Self {
            stop: None,
            hurry: None,
            grace: Duration::from_secs(5),
            interval: Duration::from_secs(1),
            events: None,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            shard: Shard::WHOLE,
            keep_intervals: true,
        }
    }
}

/// Why a run failed (the target failing is not a run failure: it is counted as outcomes).
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The aggregator task panicked, so there is no report.
    #[error("the driver's aggregator failed: {0}")]
    Aggregator(#[from] tokio::task::JoinError),
}

/// Runs `scenario` with the players its file describes.
pub async fn run(scenario: Scenario, opts: RunOptions) -> Result<RunResult, DriverError> {
    let template = FilePlayer::new(&scenario);
    run_with(scenario, move |_| template.clone(), opts).await
}

/// Runs `scenario`'s plan with players made by `new_player(player_id)`. The hammer, if
/// any, still runs its op from the file.
pub async fn run_with<P, F>(
    scenario: Scenario,
    new_player: F,
    opts: RunOptions,
) -> Result<RunResult, DriverError>
where
    P: Player,
    F: Fn(u64) -> P + Send + Sync + 'static,
{
    let scenario = Arc::new(scenario);
    let transport = transport::for_target(&scenario.target);
    let counters = Arc::new(Counters::default());
    let live = Arc::new(Live::default());
    let plan = scenario.plan();
    let started: Arc<[AtomicU64]> = (0..=plan.len()).map(|_| AtomicU64::new(0)).collect();
    let step_gate = Arc::new(Gate::closed());
    let hammer_gate = Arc::new(Gate::closed());
    let play = Arc::new(PlayAcc::new(
        scenario
            .ops
            .iter()
            .map(|o| (o.name.clone(), stream_kind(o)))
            .collect(),
        // One slot per plan phase: the gate opens plan indexes (catalog routes come first).
        plan.len(),
        step_gate.clone(),
    ));
    let (tx, rx) = mpsc::unbounded_channel();
    let (lag_tx, lag_rx) = mpsc::unbounded_channel();
    let halt = Arc::new(watch::channel(false).0);
    let (abort_tx, abort_rx) = watch::channel(false);
    let stopped_early = Arc::new(AtomicBool::new(false));

    // The pool opens before the clock starts, so its connects are not step 1's latency.
    let pool = match scenario.target.connections {
        Connections::Pool(n) => Some(Arc::new(Pool::open(&*transport, &counters, n).await)),
        Connections::PerPlayer => None,
    };

    let shard = opts.shard;
    let t0 = Instant::now();
    let started_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let aggregator = tokio::spawn(
        Aggregator::new(Setup {
            scenario_file: scenario.file.clone(),
            target: scenario.target.authority.clone(),
            transport: scenario.target.transport.to_string(),
            connections: match scenario.target.connections {
                Connections::PerPlayer => "per_player".into(),
                Connections::Pool(n) => format!("pool of {n}"),
            },
            op_names: scenario.ops.iter().map(|o| o.name.clone()).collect(),
            expected: scenario.expected_outcomes(),
            steps: plan.len(),
            phases: plan.iter().map(|p| (p.name.clone(), p.kind)).collect(),
            started: started.clone(),
            counters: counters.clone(),
            live: live.clone(),
            step_gate: step_gate.clone(),
            play: play.clone(),
            events: opts.events.clone(),
            interval: opts.interval,
            cores: opts.cores,
            keep_intervals: opts.keep_intervals,
            t0,
            started_unix_ms,
        })
        .run(rx, lag_rx),
    );
    let lag = tokio::spawn(health::lag_probe(lag_tx));
    let forward = opts.stop.clone().map(|mut stop| {
        let (halt, stopped_early) = (halt.clone(), stopped_early.clone());
        tokio::spawn(async move {
            if stop.wait_for(|s| *s).await.is_ok() {
                stopped_early.store(true, SeqCst);
                halt.send_replace(true);
            }
        })
    });

    let shared = Arc::new(Shared {
        scenario: scenario.clone(),
        transport,
        tx: tx.clone(),
        started,
        counters,
        abort: abort_rx,
        lobby: Lobby::new(&scenario, play.clone()).map(Arc::new),
        play,
        ws: transport::ws_connector(&scenario.target).map(Arc::new),
    });
    let multiplexed = shared.transport.multiplexed();
    let conns = move |pool: &Option<Arc<Pool>>| match pool {
        Some(p) => Conns::Pool(p.clone()),
        None => Conns::Own(Own::new(multiplexed)),
    };

    let mut tasks: Vec<JoinHandle<()>> = Vec::new();
    if let Some(h) = scenario.hammer.clone() {
        tasks.push(tokio::spawn(hammer(
            shared.clone(),
            h,
            hammer_gate,
            conns,
            pool.clone(),
            halt.subscribe(),
            live.clone(),
            t0,
            shard,
        )));
    }

    // Every player of the whole plan, in arrival order (as one process would have them), and
    // for this shard's own the task and its retire switch: steps retire the newest players of
    // the whole plan, whichever shard runs them.
    type Here = Option<(JoinHandle<()>, watch::Sender<bool>)>;
    let mut players: Vec<(u64, Here)> = Vec::new();
    let block = scenario.group.as_ref().map_or(1, |g| g.max as u64);
    let mut next_id = 0u64;
    let mut step_start = t0;
    let mut halt_rx = halt.subscribe();
    let mut last_opened = None;
    let ctx = shapes::Ctx {
        shared: shared.clone(),
        gate: step_gate.clone(),
        pool: pool.clone(),
        halt: halt.clone(),
        live: live.clone(),
        shard,
    };
    let mut open = shapes::open::Open::new(scenario.random_seed);
    // The plan's phases run one after another (Scenario::plan orders them).
    for (k, phase) in plan.iter().enumerate() {
        if *halt_rx.borrow() {
            break;
        }
        if !matches!(phase.work, PhaseWork::Players(_)) {
            // Players do not outlive the player steps: a rate step or a route is measured
            // alone. They leave before its phase opens, so none of their ops lands in it.
            for (h, retire) in players.drain(..).filter_map(|(_, here)| here) {
                retire.send_replace(true);
                tasks.push(h);
            }
        }
        // One reading of the connection counters is the previous phase's close and this
        // one's open, taken as the gate turns and before this phase's players start.
        let counters = shared.counters.read();
        step_gate.open(k);
        if let Some(prev) = last_opened {
            let _ = tx.send(Msg::PhaseClosed {
                phase: prev,
                counters,
            });
        }
        let _ = tx.send(Msg::PhaseOpened {
            phase: k,
            counters,
            players: match phase.work {
                PhaseWork::Players(i) => {
                    let want = scenario.steps[i].players;
                    let kept = players.len().min(want);
                    let new = (want - kept) as u64;
                    players[..kept].iter().filter(|(_, h)| h.is_some()).count()
                        + (next_id..next_id + new)
                            .filter(|&id| shard.owns_player(id, block))
                            .count()
                }
                PhaseWork::Route(i) => shapes::catalog::workers(&scenario.shapes.catalog[i], shard),
                PhaseWork::Rate(_) => 0,
            },
        });
        last_opened = Some(k);
        let PhaseWork::Players(i) = phase.work else {
            step_start =
                shapes::run_phase(&ctx, &mut open, k, phase.work, step_start, &mut tasks).await;
            continue;
        };
        let step = &scenario.steps[i];
        // Retire the newest players first, so the longest-lived ones keep their state.
        let mut leaving = Vec::new();
        while players.len() > step.players {
            let (_, here) = players.pop().expect("len > players ≥ 0");
            if let Some((h, retire)) = here {
                leaving.push(retire);
                tasks.push(h);
            }
        }
        tasks.extend(shapes::leave(
            leaving,
            step_start,
            step.leave,
            halt.subscribe(),
        ));
        let new = step.players - players.len();
        let spacing = match step.arrival {
            Arrival::Burst => Duration::ZERO,
            Arrival::Gradual(ramp) => ramp / new.max(1) as u32,
        };
        for i in 0..new {
            let id = next_id;
            next_id += 1;
            if !shard.owns_player(id, block) {
                players.push((id, None));
                continue;
            }
            if !spacing.is_zero()
                && !sleep_until(step_start + spacing * i as u32, &mut halt_rx).await
            {
                break;
            }
            let account = scenario.player.accounts.map_or(id, |a| id % a);
            let (retire_tx, retire_rx) = watch::channel(false);
            let session = Session::new(
                shared.clone(),
                Role {
                    gate: step_gate.clone(),
                    player: id,
                    account,
                    honour_retry_after: scenario.player.honour_retry_after,
                    max_ops: scenario.player.max_ops,
                },
                conns(&pool),
                halt.subscribe(),
                Some(retire_rx),
            );
            let h = tokio::spawn(drive(
                new_player(id),
                session,
                scenario.player.pace,
                live.clone(),
                false,
            ));
            players.push((id, Some((h, retire_tx))));
        }
        step_start += step.duration;
        sleep_until(step_start, &mut halt_rx).await;
    }
    let counters = shared.counters.read();
    step_gate.close();
    tasks.push(open.finish());
    if let Some(k) = last_opened {
        let _ = tx.send(Msg::PhaseClosed { phase: k, counters });
    }
    // A hammer that outlasts the steps runs to its own end.
    sleep_until(t0 + scenario.duration(), &mut halt_rx).await;
    halt.send_replace(true);

    tasks.extend(
        players
            .into_iter()
            .filter_map(|(_, here)| here.map(|(h, _)| h)),
    );
    let mut join = Box::pin(async {
        for h in &mut tasks {
            let _ = h.await;
        }
    });
    let mut hurry = opts.hurry.clone();
    let cut = async {
        match hurry.as_mut() {
            Some(h) => {
                if h.wait_for(|h| *h).await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
            None => std::future::pending().await,
        }
    };
    let within_grace = tokio::select! {
        r = tokio::time::timeout(opts.grace, &mut join) => r.is_ok(),
        () = cut => false,
    };
    if !within_grace {
        abort_tx.send_replace(true);
        // Every call ends at once on the abort; this bound only covers player code that
        // keeps a turn going without calling.
        if tokio::time::timeout(Duration::from_secs(1), &mut join)
            .await
            .is_err()
        {
            drop(join);
            for h in &tasks {
                h.abort();
            }
        }
    }
    if let Some(f) = forward {
        f.abort();
    }
    let _ = tx.send(Msg::Finish {
        stopped_early: stopped_early.load(SeqCst),
    });
    let report = aggregator.await;
    lag.abort();
    Ok(report?)
}

/// One player's life: turns, paced, until it is stopped.
async fn drive<P: Player>(
    mut player: P,
    mut session: Session,
    pace: Pace,
    live: Arc<Live>,
    hammer: bool,
) {
    let count: &AtomicUsize = if hammer {
        &live.hammer_workers
    } else {
        &live.players
    };
    count.fetch_add(1, SeqCst);
    let _alive = Alive(count);
    let mut next = Instant::now();
    loop {
        // Boxed: tokio keeps a task's future at its largest state for the task's whole life,
        // and a turn (a call through the transport) is the largest; a player spends most of
        // its life pacing, so the box (one allocation per turn) shrinks every player's task
        // from 2 112 to 1 328 bytes (release build): 7.7 MiB at 10 000 players.
        if Box::pin(player.turn(&mut session)).await.is_err() || session.stopping() {
            return;
        }
        let paused = match pace {
            Pace::None => Ok(()),
            Pace::Think(d) => session.sleep(d).await,
            Pace::Tick(d) => {
                // Like a client's ticker: a turn that overran its tick starts the next one
                // at once rather than queueing the missed ticks.
                next = (next + d).max(Instant::now());
                session.sleep_until(next).await
            }
        };
        if paused.is_err() {
            return;
        }
    }
}

/// Counts a player as alive until its task ends, however it ends.
struct Alive<'a>(&'a AtomicUsize);

impl Drop for Alive<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "one call site; a struct would only rename them"
)]
async fn hammer(
    shared: Arc<Shared>,
    h: Hammer,
    gate: Arc<Gate>,
    conns: impl Fn(&Option<Arc<Pool>>) -> Conns,
    pool: Option<Arc<Pool>>,
    mut halt: watch::Receiver<bool>,
    live: Arc<Live>,
    t0: Instant,
    shard: Shard,
) {
    if !sleep_until(t0 + h.start, &mut halt).await {
        return;
    }
    let phase = shared.scenario.plan().len();
    let counters = shared.counters.read();
    gate.open(phase);
    let _ = shared.tx.send(Msg::PhaseOpened {
        phase,
        counters,
        players: shard.share(h.workers as u64) as usize,
    });
    let workers: Vec<JoinHandle<()>> = (0..h.workers)
        .filter(|&w| shard.owns(w as u64))
        .map(|w| {
            let session = Session::new(
                shared.clone(),
                Role {
                    gate: gate.clone(),
                    player: w as u64,
                    account: h.account,
                    honour_retry_after: h.honour_retry_after,
                    max_ops: None,
                },
                conns(&pool),
                halt.clone(),
                None,
            );
            tokio::spawn(drive(
                HammerPlayer { op: h.op },
                session,
                Pace::None,
                live.clone(),
                true,
            ))
        })
        .collect();
    sleep_until(
        crate::units::deadline(t0, h.start.saturating_add(h.duration)),
        &mut halt,
    )
    .await;
    let counters = shared.counters.read();
    gate.close();
    let _ = shared.tx.send(Msg::PhaseClosed { phase, counters });
    for w in workers {
        let _ = w.await;
    }
}
