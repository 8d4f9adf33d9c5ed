//! Players: the [`Player`] trait for flows the scenario file cannot express, the
//! [`Session`] through which a player sends ops, and the file's own player.

use std::{
    future::{Future, poll_fn},
    pin::Pin,
    sync::{Arc, atomic::Ordering::SeqCst},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use tokio::{sync::watch, time::Sleep};

use crate::{
    conns::Conns,
    measure::{
        aggregator::{Counters, Msg},
        gate::Gate,
    },
    outcome::classify,
    scenario::{Call, Op, Scenario},
    template::Vars,
};
use herd_http::{Request, Transport};
use herd_model::Outcome;

/// Returned when a player must end its turn: the run is stopping, its step retired it, its
/// phase is over or it reached `max_ops`. Propagate it with `?`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the player was told to stop")]
pub struct Stopped;

/// A place held for one op in a phase ([`Session::enter`]); spend it with
/// [`Session::call_entered`].
#[derive(Debug)]
#[must_use = "a place not spent keeps its phase from completing"]
pub(crate) struct Entered(usize);

/// A player's logic, called turn after turn until the player is stopped. The driver paces
/// turns (`think` or `tick` from the scenario), measures every op and counts outcomes.
///
/// Implement it with an `async fn`:
///
/// ```
/// use herd_driver::{Player, Session, Stopped};
///
/// /// Polls the state until the game is over, then leaves.
/// struct Watcher;
///
/// impl Player for Watcher {
///     async fn turn(&mut self, session: &mut Session) -> Result<(), Stopped> {
///         let state = session.op("state").expect("the scenario has a `state` op");
///         let reply = session.call(state).await?;
///         if reply.body.as_ref() == b"finished" {
///             return Err(Stopped);
///         }
///         Ok(())
///     }
/// }
/// ```
pub trait Player: Send + 'static {
    /// One turn: any number of [`Session::call`]s. Returning [`Stopped`] ends the player.
    fn turn(&mut self, session: &mut Session) -> impl Future<Output = Result<(), Stopped>> + Send;
}

/// What an op returned, for player logic to branch on.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The outcome recorded for the op.
    pub outcome: Outcome,
    /// HTTP status, if a response arrived.
    pub status: Option<u16>,
    /// The response body (empty without a response).
    pub body: Bytes,
    /// The latency recorded for the op.
    pub latency: Duration,
}

/// Everything the players of one run share.
pub(crate) struct Shared {
    pub scenario: Arc<Scenario>,
    pub transport: Arc<dyn Transport>,
    pub tx: tokio::sync::mpsc::UnboundedSender<Msg>,
    pub started: Arc<[std::sync::atomic::AtomicU64]>,
    pub counters: Arc<Counters>,
    pub abort: watch::Receiver<bool>,
    pub play: Arc<crate::measure::play::PlayAcc>,
    pub lobby: Option<Arc<crate::groups::Lobby>>,
    /// Opens the players' sockets, on a WebSocket target.
    pub ws: Option<Arc<herd_http::ws::Connector>>,
}

/// How one session behaves, by role (player or hammer worker).
pub(crate) struct Role {
    pub gate: Arc<Gate>,
    pub player: u64,
    pub account: u64,
    pub honour_retry_after: bool,
    pub max_ops: Option<u64>,
}

/// One player's connection, variables and measurement; the handle a [`Player`] works
/// through.
pub struct Session {
    pub(crate) shared: Arc<Shared>,
    pub(crate) role: Role,
    pub(crate) conns: Conns,
    pub(crate) vars: Vars,
    rng: u64,
    ops_done: u64,
    pub(crate) halt: watch::Receiver<bool>,
    pub(crate) retire: Option<watch::Receiver<bool>>,
    /// Streams and long polls running for this player (`stream.rs`).
    pub(crate) bg: crate::stream::Backgrounds,
    /// The player's group (`groups.rs`).
    pub(crate) group: crate::groups::Membership,
    /// Ends calls at their timeout or the run's abort; made by the first call.
    watchdog: Option<Watchdog>,
    /// The player's WebSocket, on a WebSocket target: opened by its first op or stream.
    pub(crate) ws: Option<crate::ws::Socket>,
}

impl Session {
    pub(crate) fn new(
        shared: Arc<Shared>,
        role: Role,
        conns: Conns,
        halt: watch::Receiver<bool>,
        retire: Option<watch::Receiver<bool>>,
    ) -> Self {
        let vars = Vars::new(role.player, role.account, &shared.scenario.var_defaults);
        let rng = shared.scenario.random_seed
            ^ role.player.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ 0x2545_F491_4F6C_DD1D;
        Self {
            shared,
            role,
            conns,
            vars,
            rng,
            ops_done: 0,
            halt,
            retire,
            bg: Default::default(),
            group: Default::default(),
            watchdog: None,
            ws: None,
        }
    }

    /// The player's id: 0, 1, 2, ... in order of arrival (hammer workers count apart).
    pub fn player(&self) -> u64 {
        self.role.player
    }

    /// The player's account.
    pub fn account(&self) -> u64 {
        self.role.account
    }

    /// The scenario the player runs.
    pub fn scenario(&self) -> &Scenario {
        &self.shared.scenario
    }

    /// The index of the op named `name`, for [`Session::call`].
    pub fn op(&self, name: &str) -> Option<usize> {
        self.shared.scenario.op(name)
    }

    /// A variable's current value.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.vars.get(self.shared.scenario.vars.slot(name)?)
    }

    /// Sets a variable the scenario names (in `[vars]`, a capture or a template); returns
    /// false for a name the scenario does not know.
    pub fn set_var(&mut self, name: &str, value: impl Into<String>) -> bool {
        match self.shared.scenario.vars.slot(name) {
            Some(slot) => {
                self.vars.set(slot, value.into());
                true
            }
            None => false,
        }
    }

    /// A pseudo-random number from the player's own generator (seeded by the scenario's
    /// `seed` and the player's id, so a run's choices repeat).
    pub fn random(&mut self) -> u64 {
        // splitmix64: one add and three multiply-xorshifts, good enough to pick ops.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True once the player should start nothing new.
    pub fn stopping(&self) -> bool {
        *self.halt.borrow() || self.retire.as_ref().is_some_and(|r| *r.borrow())
    }

    /// Sleeps `d`, waking early (with [`Stopped`]) when the player is stopped.
    pub async fn sleep(&mut self, d: Duration) -> Result<(), Stopped> {
        self.sleep_until(crate::units::deadline(Instant::now(), d))
            .await
    }

    pub(crate) async fn sleep_until(&mut self, at: Instant) -> Result<(), Stopped> {
        self.until(tokio::time::sleep_until(at.into())).await
    }

    /// Awaits `f`, ending early (with [`Stopped`]) when the player is stopped.
    pub(crate) async fn until<F: Future>(&mut self, f: F) -> Result<F::Output, Stopped> {
        if self.stopping() {
            return Err(Stopped);
        }
        let retire = async {
            match &mut self.retire {
                Some(r) => until_true(r).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = f => Ok(r),
            _ = until_true(&mut self.halt) => Err(Stopped),
            _ = retire => Err(Stopped),
        }
    }

    /// Sends op `op` (an index from [`Session::op`]), records its latency and outcome, takes
    /// its captures, and for an honoured 429 pauses the player for `Retry-After`.
    pub async fn call(&mut self, op: usize) -> Result<Reply, Stopped> {
        self.call_from(op, None).await
    }

    /// Takes a place for one op in the phase open now, to be sent later by
    /// [`Session::call_entered`]: an open-model arrival belongs to the phase it was
    /// scheduled in, however late its task first runs. `None` when no phase is open.
    pub(crate) fn enter(&self) -> Option<Entered> {
        self.role.gate.enter(&self.shared.started).map(Entered)
    }

    /// [`Session::call`] whose latency counts from `intended` when given (an open-model
    /// arrival's scheduled send time), not from the moment it was sent.
    pub(crate) async fn call_from(
        &mut self,
        op: usize,
        intended: Option<Instant>,
    ) -> Result<Reply, Stopped> {
        if self.stopping() {
            return Err(Stopped);
        }
        let entered = self.enter().ok_or(Stopped)?;
        self.call_entered(op, intended, entered).await
    }

    /// Sends op `op` in the phase `entered` holds a place in. The op goes out even when the
    /// phase closed or the run began to stop since (it was due inside its phase; the stop's
    /// grace covers it, and the abort after the grace cancels it), so what was dispatched
    /// is what is recorded.
    pub(crate) async fn call_entered(
        &mut self,
        op: usize,
        intended: Option<Instant>,
        Entered(phase): Entered,
    ) -> Result<Reply, Stopped> {
        let shared = self.shared.clone();
        if self.role.max_ops.is_some_and(|m| self.ops_done >= m) {
            // Give the place back: the phase is complete without this op.
            shared.started[phase].fetch_sub(1, SeqCst);
            return Err(Stopped);
        }
        let n_ops = shared.scenario.ops.len();
        self.ops_done += 1;
        let row = (phase * n_ops + op) as u32;
        let o = &shared.scenario.ops[op];
        self.sync_group();
        let (outcome, status, body, pause, latency) = match &o.call {
            Call::Http => {
                let Some(req) = self.request(o, &shared.scenario.target.base_path) else {
                    return Ok(self.record(
                        row,
                        Outcome::VarMissing,
                        None,
                        Bytes::new(),
                        Duration::ZERO,
                    ));
                };
                // Kept only where a check can fail: a failed one is reported with the
                // resource it was about (which layer of which image), not only the op's name.
                let c = &o.check;
                let resource = (c.status.is_some()
                    || !c.json.is_empty()
                    || c.sha256.is_some()
                    || c.sha256_header.is_some())
                .then(|| req.path.clone());
                let sent = Instant::now();
                let start = intended.unwrap_or(sent);
                let deadline = crate::units::deadline(sent, o.timeout);
                // A connect the backoff holds back is waited for here, inside the op (its
                // latency and timeout count the wait), where a stop ends the wait
                // (`Conns::held`).
                let held = self
                    .conns
                    .held(&shared.counters)
                    .map(|until| (until, self.halt.clone(), self.retire.clone()));
                let watchdog = self
                    .watchdog
                    .get_or_insert_with(|| Watchdog::new(shared.abort.clone()));
                let conns = &mut self.conns;
                // Boxed: inline, it would take the turn's future (boxed per turn in
                // `run.rs`) past the 1 KiB that glibc's per-thread cache serves; two cached
                // allocations cost less than one from the main heap (which showed in the
                // profile). Dropped at the end of `guarded`, before the outcome is
                // recorded: a timed out or aborted exchange retires its connection then
                // (`conns.rs`).
                let exchange = Box::pin(async {
                    if !wait_held(held).await {
                        return None;
                    }
                    Some(conns.send(&*shared.transport, &shared.counters, req).await)
                });
                let result = watchdog.guard(deadline, exchange).await;
                let latency = start.elapsed();
                let (outcome, status, body, pause) = match result {
                    Err(ended) => (ended.outcome(), None, Bytes::new(), None),
                    // Stopped while the backoff held its connect back: nothing was sent, so
                    // nothing is recorded, and the phase is complete without it.
                    Ok(None) => {
                        shared.started[phase].fetch_sub(1, SeqCst);
                        return Err(Stopped);
                    }
                    Ok(Some(Err(e))) => (crate::transport::outcome(&e), None, Bytes::new(), None),
                    Ok(Some(Ok(r))) => {
                        let (outcome, pause) =
                            classify(o, r.status, &r.headers, &r.body, &mut self.vars);
                        (outcome, Some(r.status), r.body, pause)
                    }
                };
                if outcome == Outcome::CheckFailed
                    && let Some(r) = resource
                {
                    shared.play.check_failed(op, r);
                }
                (outcome, status, body, pause, latency)
            }
            Call::Grpc(call) => {
                let target = shared.scenario.target.grpc.as_ref().expect("a gRPC target");
                let built = crate::grpc::frames(call, target, &self.vars).and_then(|frames| {
                    let req = crate::grpc::request(o, call, target, &self.vars, Some(o.timeout))?;
                    Some((req, frames))
                });
                let Some((req, frames)) = built else {
                    return Ok(self.record(
                        row,
                        Outcome::VarMissing,
                        None,
                        Bytes::new(),
                        Duration::ZERO,
                    ));
                };
                let sent = Instant::now();
                let start = intended.unwrap_or(sent);
                let deadline = crate::units::deadline(sent, o.timeout);
                // As for HTTP: a connect the backoff holds back is waited for inside the op,
                // where a stop ends the wait.
                let held = self
                    .conns
                    .held(&shared.counters)
                    .map(|until| (until, self.halt.clone(), self.retire.clone()));
                let watchdog = self
                    .watchdog
                    .get_or_insert_with(|| Watchdog::new(shared.abort.clone()));
                let conns = &mut self.conns;
                let exchange = Box::pin(async {
                    if !wait_held(held).await {
                        return None;
                    }
                    Some(
                        crate::grpc::exchange(
                            conns,
                            &*shared.transport,
                            &shared.counters,
                            call,
                            req,
                            frames,
                        )
                        .await,
                    )
                });
                let result = watchdog.guard(deadline, exchange).await;
                let latency = start.elapsed();
                let want_body = !o.then.is_empty() || shared.lobby.is_some();
                let (outcome, status, body) = match result {
                    Err(ended) => (ended.outcome(), None, Bytes::new()),
                    // Stopped while the backoff held its connect back: nothing was sent.
                    Ok(None) => {
                        shared.started[phase].fetch_sub(1, SeqCst);
                        return Err(Stopped);
                    }
                    Ok(Some(Err(e))) => (crate::transport::outcome(&e), None, Bytes::new()),
                    Ok(Some(Ok(answer))) => crate::grpc::judge_answer(
                        o,
                        call,
                        target,
                        answer,
                        &mut self.vars,
                        want_body,
                    ),
                };
                (outcome, status, body, None, latency)
            }
            Call::Ws(send) => {
                let Some(message) = self.ws_message(o) else {
                    return Ok(self.record(
                        row,
                        Outcome::VarMissing,
                        None,
                        Bytes::new(),
                        Duration::ZERO,
                    ));
                };
                let sent = Instant::now();
                let start = intended.unwrap_or(sent);
                let deadline = crate::units::deadline(sent, o.timeout);
                let watchdog = self
                    .watchdog
                    .get_or_insert_with(|| Watchdog::new(shared.abort.clone()));
                let ws = self.ws.get_or_insert_with(|| {
                    crate::ws::Socket::start(
                        shared.clone(),
                        &self.vars,
                        self.halt.clone(),
                        self.retire.clone(),
                    )
                });
                let exchange = Box::pin(ws.call(send, message, o.timeout));
                let result = watchdog.guard(deadline, exchange).await;
                let (outcome, body, at) = match result {
                    Err(ended) => (ended.outcome(), Bytes::new(), None),
                    Ok(r) => crate::ws::judge_answer(o, r, &mut self.vars),
                };
                let latency = at
                    .unwrap_or_else(Instant::now)
                    .saturating_duration_since(start);
                (outcome, None, body, None, latency)
            }
        };
        if outcome.is_ok() {
            self.publish_group(op);
        }
        let reply = self.record(row, outcome, status, body, latency);
        if let Some(d) = pause
            && self.role.honour_retry_after
        {
            // The reply is recorded; a stop during the pause shows at the next call.
            // Boxed, as is the exchange above: it is rare, and inline it would take every
            // call's future past glibc's per-thread cache.
            let _ = Box::pin(self.sleep(d)).await;
        }
        Ok(reply)
    }

    /// Records an outcome for op `op` that sent nothing (a `for_each` cut off at its
    /// `max_items`), in the phase open now.
    pub(crate) fn note(&mut self, op: usize, outcome: Outcome) -> Result<(), Stopped> {
        let Entered(phase) = self.enter().ok_or(Stopped)?;
        let row = (phase * self.shared.scenario.ops.len() + op) as u32;
        self.record(row, outcome, None, Bytes::new(), Duration::ZERO);
        Ok(())
    }

    fn record(
        &self,
        row: u32,
        outcome: Outcome,
        status: Option<u16>,
        body: Bytes,
        latency: Duration,
    ) -> Reply {
        // The aggregator outlives every player; a failed send means the run is being torn
        // down and the sample has nowhere to go.
        let _ = self.shared.tx.send(Msg::Sample {
            row,
            outcome: outcome.clone(),
            status,
            latency_us: latency.as_micros() as u64,
            ended: Instant::now(),
        });
        Reply {
            outcome,
            status,
            body,
            latency,
        }
    }

    /// The op's request, or `None` if a variable it reads is missing or cannot be sent.
    pub(crate) fn request(&self, o: &Op, base_path: &str) -> Option<Request> {
        let mut path = String::with_capacity(base_path.len() + 32);
        path.push_str(base_path);
        o.path.render_into(&self.vars, &mut path).ok()?;
        // A value with a space or a line break goes out percent-encoded, as in a browser.
        crate::scenario::encode_unsendable(&mut path);
        let mut headers = HeaderMap::with_capacity(o.headers.len());
        for (name, t) in &o.headers {
            let v = t.render(&self.vars).ok()?;
            headers.insert(name.clone(), HeaderValue::from_str(&v).ok()?);
        }
        let body = match &o.body {
            Some(t) => Bytes::from(t.render(&self.vars).ok()?),
            None => Bytes::new(),
        };
        Some(Request {
            method: o.method.clone(),
            path,
            headers,
            body,
        })
    }
}

/// What ends a call before its response: the op's timeout, or the run aborting the calls
/// still in flight once its grace is over. One per session, kept between calls: a timer
/// armed and an abort waiter registered per call (`tokio::time::timeout` and a `select!`
/// on a watch channel) cost a timer-wheel insert and removal and two waiter-list locks per
/// request, a tenth of the driver's own CPU per HTTP/1.1 request. This timer is re-armed
/// only when it fires before the current call's deadline.
struct Watchdog {
    timer: Pin<Box<Sleep>>,
    /// When `timer` fires.
    armed: Instant,
    /// Resolves when the run aborts; `None` once it has.
    abort: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
}

/// Why [`Watchdog::poll`] ended a call.
enum Ended {
    TimedOut,
    Aborted,
}

impl Ended {
    fn outcome(&self) -> Outcome {
        match self {
            Self::TimedOut => Outcome::Timeout,
            Self::Aborted => Outcome::Cancelled,
        }
    }
}

impl Watchdog {
    fn new(abort: watch::Receiver<bool>) -> Self {
        // Armed by the first call; until then, later than any deadline.
        let armed = Instant::now() + Duration::from_secs(365 * 24 * 3600);
        Self {
            timer: Box::pin(tokio::time::sleep_until(armed.into())),
            armed,
            abort: Some(Box::pin(async move {
                let mut abort = abort;
                until_true(&mut abort).await;
            })),
        }
    }

    /// Awaits `exchange` until `deadline` or the run's abort, whichever comes first; the
    /// exchange is dropped (and with it its request) if it does not finish.
    async fn guard<F: Future + Unpin>(
        &mut self,
        deadline: Instant,
        mut exchange: F,
    ) -> Result<F::Output, Ended> {
        self.arm(deadline);
        poll_fn(|cx| match Pin::new(&mut exchange).poll(cx) {
            Poll::Ready(r) => Poll::Ready(Ok(r)),
            Poll::Pending => self.poll(cx, deadline).map(Err),
        })
        .await
    }

    /// Makes sure the timer fires no later than `deadline`.
    fn arm(&mut self, deadline: Instant) {
        if self.armed > deadline {
            self.timer.as_mut().reset(deadline.into());
            self.armed = deadline;
        }
    }

    /// Ready once the run aborted or `deadline` passed; an earlier firing (armed by an
    /// earlier call) re-arms the timer for `deadline`.
    fn poll(&mut self, cx: &mut Context<'_>, deadline: Instant) -> Poll<Ended> {
        match &mut self.abort {
            None => return Poll::Ready(Ended::Aborted),
            Some(a) => {
                if a.as_mut().poll(cx).is_ready() {
                    self.abort = None;
                    return Poll::Ready(Ended::Aborted);
                }
            }
        }
        while self.timer.as_mut().poll(cx).is_ready() {
            if Instant::now() >= deadline {
                return Poll::Ready(Ended::TimedOut);
            }
            self.timer.as_mut().reset(deadline.into());
            self.armed = deadline;
        }
        Poll::Pending
    }
}

/// Resolves when `rx` holds true; never, if its sender is gone without saying so.
/// Waits out a connect the backoff holds back ([`crate::conns::Conns::held`]: until when, and
/// the player's stop and retire signals); false when a stop or the step retiring the player
/// came first (nothing was sent).
async fn wait_held(
    held: Option<(
        Instant,
        watch::Receiver<bool>,
        Option<watch::Receiver<bool>>,
    )>,
) -> bool {
    let Some((until, mut halt, mut retire)) = held else {
        return true;
    };
    let retired = async {
        match &mut retire {
            Some(r) => until_true(r).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = tokio::time::sleep_until(until.into()) => true,
        () = until_true(&mut halt) => false,
        () = retired => false,
    }
}

async fn until_true(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Running weight totals and their ops, for a weighted pick.
type Weights = Arc<[(u64, usize)]>;

/// The player the scenario file describes: its setup ops once, in order (retrying a setup
/// op that does not end `ok`), then ops picked by weight.
#[derive(Debug, Clone)]
pub struct FilePlayer {
    setup: Arc<[usize]>,
    next_setup: usize,
    cumulative: Weights,
    /// Per `[[group.role]]`, the same over the role's ops.
    roles: Arc<[Weights]>,
    /// Streams and the group (`groups.rs`).
    turns: crate::groups::FileTurns,
}

impl FilePlayer {
    /// A player for `scenario`.
    pub fn new(scenario: &Scenario) -> Self {
        let weights = |only: Option<&[usize]>| -> Weights {
            let mut total = 0;
            scenario
                .ops
                .iter()
                .enumerate()
                .filter(|(i, o)| o.weight > 0 && only.is_none_or(|l| l.contains(i)))
                .map(|(i, o)| {
                    total += u64::from(o.weight);
                    (total, i)
                })
                .collect()
        };
        let roles = scenario
            .group
            .iter()
            .flat_map(|g| &g.roles)
            .map(|r| weights(Some(&r.ops)))
            .collect();
        Self {
            setup: scenario.player.setup.clone().into(),
            next_setup: 0,
            cumulative: weights(None),
            roles,
            turns: Default::default(),
        }
    }

    fn pick(&self, r: u64) -> Option<usize> {
        pick_in(&self.cumulative, r)
    }
}

fn pick_in(cumulative: &[(u64, usize)], r: u64) -> Option<usize> {
    let total = cumulative.last()?.0;
    let x = r % total;
    let i = cumulative.partition_point(|&(c, _)| c <= x);
    Some(cumulative[i].1)
}

impl Player for FilePlayer {
    async fn turn(&mut self, session: &mut Session) -> Result<(), Stopped> {
        if let Some(&op) = self.setup.get(self.next_setup) {
            if session.call(op).await?.outcome.is_ok() {
                self.next_setup += 1;
            }
            return Ok(());
        }
        if !self.turns.ready(session).await? {
            return Ok(());
        }
        let r = session.random();
        let op = match session.role() {
            Some(role) => match pick_in(&self.roles[role], r) {
                Some(op) => op,
                // A role of streams and long polls only: they run by themselves.
                None => return session.wait_group_end().await,
            },
            None => match self.pick(r) {
                Some(op) => op,
                // Streams only (a dashboard that watches): they run by themselves.
                None => return session.until(std::future::pending::<()>()).await,
            },
        };
        let reply = session.call(op).await?;
        self.turns.after(session, op, &reply);
        if reply.outcome.is_ok() && !session.shared.scenario.ops[op].then.is_empty() {
            self.chain(session, op, &reply.body).await?;
        }
        Ok(())
    }
}

/// One op a chain still has to run, with the `{item}` it binds (slot, value).
type Link = (usize, Option<(usize, String)>);

impl FilePlayer {
    /// Runs the chain after op `op` answered `body`, depth first: each `then` op once, or
    /// once per item its `for_each` selects, and after each one that ends `ok` its own
    /// `then`. A stack, not recursion: the chain's depth is the file's, bounded since
    /// chains cannot loop (checked when the file loads).
    async fn chain(&mut self, s: &mut Session, op: usize, body: &Bytes) -> Result<(), Stopped> {
        let scenario = s.shared.scenario.clone();
        let mut stack = vec![links(s, &scenario, op, body)?.into_iter()];
        while let Some(top) = stack.last_mut() {
            let Some((next, item)) = top.next() else {
                stack.pop();
                continue;
            };
            if let Some((slot, v)) = item {
                s.vars.set(slot, v);
            }
            let reply = s.call(next).await?;
            self.turns.after(s, next, &reply);
            if reply.outcome.is_ok() && !scenario.ops[next].then.is_empty() {
                stack.push(links(s, &scenario, next, &reply.body)?.into_iter());
            }
        }
        Ok(())
    }
}

/// The links that follow op `op`'s answer `body`. A `for_each` with more items than its
/// `max_items` keeps the first ones and records one `truncated` for the op; with `sample`,
/// that many items are drawn at random from the player's generator.
fn links(
    s: &mut Session,
    scenario: &Scenario,
    op: usize,
    body: &[u8],
) -> Result<Vec<Link>, Stopped> {
    let then = &scenario.ops[op].then;
    let json: Option<serde_json::Value> = then
        .iter()
        .any(|t| t.for_each.is_some())
        .then(|| serde_json::from_slice(body).ok())
        .flatten();
    let mut out = Vec::new();
    for t in then {
        let Some(f) = &t.for_each else {
            out.push((t.op, None));
            continue;
        };
        let mut items = json.as_ref().map(|j| f.items(j)).unwrap_or_default();
        if let Some(n) = f.sample {
            // A partial Fisher–Yates shuffle: the first n are a uniform draw.
            let n = n.min(items.len());
            for k in 0..n {
                let j = k + (s.random() % (items.len() - k) as u64) as usize;
                items.swap(k, j);
            }
            items.truncate(n);
        } else if items.len() > f.max_items {
            items.truncate(f.max_items);
            s.note(t.op, Outcome::Truncated)?;
        }
        out.extend(items.into_iter().map(|v| (t.op, Some((f.item, v)))));
    }
    Ok(out)
}

/// A hammer worker: the one op, back to back.
pub(crate) struct HammerPlayer {
    pub op: usize,
}

impl Player for HammerPlayer {
    async fn turn(&mut self, session: &mut Session) -> Result<(), Stopped> {
        session.call(self.op).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_pick_follows_weights() {
        let src = "[target]\nurl = \"http://127.0.0.1:1\"\n[[op]]\nname = \"a\"\npath = \"/a\"\nweight = 3\n[[op]]\nname = \"setup\"\npath = \"/s\"\nweight = 0\n[[op]]\nname = \"b\"\npath = \"/b\"\n[[step]]\nplayers = 1\nduration = \"1s\"\n";
        let s = Scenario::parse("t.toml", src, &[]).unwrap();
        let p = FilePlayer::new(&s);
        let mut counts = [0u32; 3];
        for r in 0..4000u64 {
            counts[p.pick(r).unwrap()] += 1;
        }
        assert_eq!(counts, [3000, 0, 1000]);
    }
}
