//! Open-model rate steps: arrivals at intended times `start + i / rate`, sent whether or
//! not earlier requests have answered, each measured from its intended time, so a stalled
//! target shows in the latencies instead of silently slowing the driver down (coordinated
//! omission; wrk2's and k6's constant-arrival-rate model).
//!
//! Each request in flight holds an arrival slot: a [`Session`] with its own connection
//! (`connections = "per_player"`) or the shared pool. Slots are made on demand, up to
//! `max_in_flight`, and reused by later arrivals and later rate steps, so a steady rate
//! settles on the connections its concurrency needs.

use std::{
    sync::atomic::Ordering::SeqCst,
    time::{Duration, Instant},
};

use tokio::{sync::mpsc, task::JoinSet};

use super::Ctx;
use crate::{
    measure::aggregator::Msg,
    player::Session,
    scenario::{RateStep, WhenFull},
    units::sleep_until,
};
use herd_model::OpenStats;

/// The arrival slots of a run's rate steps and the requests they have in flight.
pub(crate) struct Open {
    free: Vec<Slot>,
    made: usize,
    back_tx: mpsc::UnboundedSender<Slot>,
    back_rx: mpsc::UnboundedReceiver<Slot>,
    in_flight: JoinSet<()>,
    rng: u64,
}

/// One arrival slot: a session, and whether it has run `[player] setup`.
struct Slot {
    session: Session,
    set_up: bool,
}

impl Slot {
    /// Runs the setup ops in order, once; false (and again at the next arrival) if one
    /// does not end `ok`.
    async fn setup(&mut self, ops: &[usize]) -> bool {
        if self.set_up {
            return true;
        }
        for &op in ops {
            match self.session.call(op).await {
                Ok(r) if r.outcome.is_ok() => {}
                _ => return false,
            }
        }
        self.set_up = true;
        true
    }
}

impl Open {
    pub fn new(seed: u64) -> Self {
        let (back_tx, back_rx) = mpsc::unbounded_channel();
        Self {
            free: Vec::new(),
            made: 0,
            back_tx,
            back_rx,
            in_flight: JoinSet::new(),
            rng: seed ^ 0x6A09_E667_F3BC_C908,
        }
    }

    /// Slots whose request has ended go back to the free list.
    fn reclaim(&mut self) {
        while let Ok(s) = self.back_rx.try_recv() {
            self.free.push(s);
        }
        while self.in_flight.try_join_next().is_some() {}
    }

    fn busy(&self) -> usize {
        self.made - self.free.len()
    }

    fn pick(&mut self, ops: &[(usize, u32)]) -> usize {
        // splitmix64, as the players use.
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let total: u64 = ops.iter().map(|&(_, w)| u64::from(w)).sum();
        let mut x = z % total.max(1);
        for &(op, w) in ops {
            if x < u64::from(w) {
                return op;
            }
            x -= u64::from(w);
        }
        ops[0].0
    }

    /// Runs rate step `r` as phase `k` from `start` until `start + r.duration` (or a stop),
    /// then reports its [`OpenStats`] to the aggregator.
    pub async fn run(&mut self, ctx: &Ctx, k: usize, r: &RateStep, start: Instant) {
        let total = (r.rate * r.duration.as_secs_f64()).round() as u64;
        let period = 1.0 / r.rate;
        let mut halt = ctx.halt.subscribe();
        let shard = ctx.shard;
        // Each shard sends every N-th arrival of the whole plan's schedule, at its intended
        // time: N shards interleave into the plan's rate, none bunches its arrivals. The
        // in-flight bound is shared out like the rate.
        let max_in_flight = (shard.share(r.max_in_flight as u64) as usize).max(1);
        let mut st = OpenStats {
            rate: r.rate / f64::from(shard.count),
            scheduled: 0,
            sent: 0,
            late_starts: 0,
            dropped_starts: 0,
            max_in_flight,
            peak_in_flight: 0,
            late_after_us: r.late_after.as_micros() as u64,
        };
        let mut halted = false;
        let setup: Option<std::sync::Arc<[usize]>> = r
            .setup
            .then(|| ctx.shared.scenario.player.setup.clone().into());
        for i in 0..total {
            if !shard.owns(i) {
                // Another shard's arrival: its op is drawn here too, so every shard's picks
                // follow the one sequence the seed gives the whole plan.
                self.pick(&r.ops);
                continue;
            }
            let at = start + Duration::from_secs_f64(i as f64 * period);
            // Behind schedule, there is nothing to wait for: send at once.
            let due = at <= Instant::now() && !*halt.borrow();
            if !due && !sleep_until(at, &mut halt).await {
                halted = true;
                break;
            }
            st.scheduled += 1;
            self.reclaim();
            if self.busy() >= max_in_flight {
                match r.when_full {
                    WhenFull::Drop => {
                        st.dropped_starts += 1;
                        ctx.live.dropped_starts.fetch_add(1, SeqCst);
                        continue;
                    }
                    WhenFull::Queue => {
                        // Wait for a slot; the arrival goes out late, still timed from `at`.
                        while self.busy() >= max_in_flight {
                            tokio::select! {
                                s = self.back_rx.recv() => {
                                    self.free.extend(s);
                                }
                                _ = halt.wait_for(|h| *h) => {
                                    halted = true;
                                    break;
                                }
                            }
                        }
                        if halted {
                            st.scheduled -= 1;
                            break;
                        }
                    }
                }
            }
            if Instant::now().saturating_duration_since(at) > r.late_after {
                st.late_starts += 1;
                ctx.live.late_starts.fetch_add(1, SeqCst);
            }
            let mut slot = match self.free.pop() {
                Some(s) => s,
                None => {
                    self.made += 1;
                    Slot {
                        session: ctx.session(
                            (self.made as u64 - 1) * u64::from(shard.count)
                                + u64::from(shard.index),
                        ),
                        set_up: false,
                    }
                }
            };
            // The arrival's place in this phase is taken now: its task may first run after
            // the phase closed (a busy host), and it must still go out, counted here.
            let Some(entered) = slot.session.enter() else {
                self.free.push(slot);
                halted = true;
                break;
            };
            st.sent += 1;
            st.peak_in_flight = st.peak_in_flight.max(self.busy());
            let op = self.pick(&r.ops);
            let back = self.back_tx.clone();
            let setup = setup.clone();
            let live = ctx.live.clone();
            live.in_flight.fetch_add(1, SeqCst);
            self.in_flight.spawn(async move {
                // A failed setup leaves the op's variables unset: it ends `var_missing`, and
                // the slot's next arrival tries the setup again.
                if let Some(ops) = setup {
                    slot.setup(&ops).await;
                }
                let _ = slot.session.call_entered(op, Some(at), entered).await;
                live.in_flight.fetch_sub(1, SeqCst);
                let _ = back.send(slot);
            });
        }
        if !halted {
            sleep_until(start + r.duration, &mut halt).await;
        }
        let _ = ctx.shared.tx.send(Msg::Open {
            phase: k,
            stats: Box::new(st),
        });
    }

    /// The requests still in flight, as one task that ends with the last of them (aborting
    /// it aborts them).
    pub fn finish(mut self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move { while self.in_flight.join_next().await.is_some() {} })
    }
}
