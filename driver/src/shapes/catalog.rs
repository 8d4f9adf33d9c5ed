//! The route catalog (seed 003's first layer): each route alone, K requests at concurrency
//! C, so every route gets a row measured without the others' load.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
    time::Instant,
};

use tokio::task::JoinHandle;

use super::Ctx;
use herd_model::Shard;

use crate::scenario::CatalogRoute;

/// This shard's requests of route `r`: its round-robin share of `r.requests`.
fn requests(r: &CatalogRoute, shard: Shard) -> u64 {
    shard.share(r.requests)
}

/// This shard's workers for route `r`: its share of the concurrency, at least one while it
/// has requests to send and never more than it has requests.
pub(crate) fn workers(r: &CatalogRoute, shard: Shard) -> usize {
    match requests(r, shard) {
        0 => 0,
        own => shard.share(r.concurrency as u64).clamp(1, own) as usize,
    }
}

/// Sends `r.requests` of the route's op from `r.concurrency` workers, back to back, until
/// they are all sent, `r.max_duration` passes (no new request starts after it) or the run
/// stops. Workers still in flight when the run stops go to `tasks`, for the stop's grace.
pub(crate) async fn route(ctx: &Ctx, r: &CatalogRoute, tasks: &mut Vec<JoinHandle<()>>) {
    let remaining = Arc::new(AtomicU64::new(requests(r, ctx.shard)));
    let deadline = Instant::now() + r.max_duration;
    let (n, i) = (u64::from(ctx.shard.count), u64::from(ctx.shard.index));
    let mut workers: Vec<JoinHandle<()>> = (0..workers(r, ctx.shard))
        .map(|w| {
            // `{player}` stays unique across the shards of one run.
            let mut session = ctx.session(w as u64 * n + i);
            let (remaining, live, op) = (remaining.clone(), ctx.live.clone(), r.op);
            tokio::spawn(async move {
                live.players.fetch_add(1, SeqCst);
                while Instant::now() < deadline
                    && remaining
                        .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
                        .is_ok()
                {
                    if session.call(op).await.is_err() {
                        break;
                    }
                }
                live.players.fetch_sub(1, SeqCst);
            })
        })
        .collect();
    let mut halt = ctx.halt.subscribe();
    tokio::select! {
        _ = async {
            while let Some(w) = workers.last_mut() {
                let _ = w.await;
                workers.pop();
            }
        } => {}
        _ = halt.wait_for(|h| *h) => {}
    }
    tasks.extend(workers);
}
