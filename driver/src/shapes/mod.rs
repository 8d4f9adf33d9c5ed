//! Running the load shapes beside the player steps: open-model rate steps (`open.rs`), the
//! route catalog (`catalog.rs`) and the staggered leaving of players; [`OpenStats`] is what
//! a rate phase reports besides its histograms.
//!
//! The plan runner (`run.rs`) walks [`crate::Scenario::plan`] and hands every phase that
//! is not a player step to `run_phase`.

pub(crate) mod catalog;
pub(crate) mod open;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use tokio::{sync::watch, task::JoinHandle};

use crate::{
    conns::{Conns, Own, Pool},
    measure::{aggregator::Live, gate::Gate},
    player::{Role, Session, Shared},
    scenario::PhaseWork,
};

/// What the shapes' runners share with the plan runner.
pub(crate) struct Ctx {
    pub shared: Arc<Shared>,
    pub gate: Arc<Gate>,
    pub pool: Option<Arc<Pool>>,
    pub halt: Arc<watch::Sender<bool>>,
    pub live: Arc<Live>,
    /// This process's part of the plan.
    pub shard: herd_model::Shard,
}

impl Ctx {
    /// A session for an arrival slot or a catalog worker: no setup, no `Retry-After` pause
    /// (these shapes measure the target as it answers), `{player}` = `id`.
    fn session(&self, id: u64) -> Session {
        let conns = match &self.pool {
            Some(p) => Conns::Pool(p.clone()),
            None => Conns::Own(Own::new(self.shared.transport.multiplexed())),
        };
        let account = self.shared.scenario.player.accounts.map_or(id, |a| id % a);
        Session::new(
            self.shared.clone(),
            Role {
                gate: self.gate.clone(),
                player: id,
                account,
                honour_retry_after: false,
                max_ops: None,
            },
            conns,
            self.halt.subscribe(),
            None,
        )
    }
}

/// Runs phase `k` (a catalog route or a rate step) from `start`; returns when the next
/// phase starts.
pub(crate) async fn run_phase(
    ctx: &Ctx,
    open: &mut open::Open,
    k: usize,
    work: PhaseWork,
    start: Instant,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Instant {
    match work {
        PhaseWork::Route(i) => {
            catalog::route(ctx, &ctx.shared.scenario.shapes.catalog[i], tasks).await;
            Instant::now()
        }
        PhaseWork::Rate(i) => {
            let r = ctx.shared.scenario.shapes.rates[i].clone();
            open.run(ctx, k, &r, start).await;
            start + r.duration
        }
        PhaseWork::Players(_) => start,
    }
}

/// Tells the `leaving` players to leave, evenly spread over `over` from `from` (the first at
/// once), or all at once for a zero spread. The task it may return ends with the last.
pub(crate) fn leave(
    leaving: Vec<watch::Sender<bool>>,
    from: Instant,
    over: Duration,
    mut halt: watch::Receiver<bool>,
) -> Option<JoinHandle<()>> {
    if over.is_zero() || leaving.len() <= 1 {
        for r in &leaving {
            r.send_replace(true);
        }
        return None;
    }
    let spacing = over / leaving.len() as u32;
    Some(tokio::spawn(async move {
        for (i, r) in leaving.iter().enumerate() {
            let at = from + spacing * i as u32;
            // A halt stops every player anyway; the rest leave with it.
            if !crate::units::sleep_until(at, &mut halt).await {
                break;
            }
            r.send_replace(true);
        }
    }))
}
