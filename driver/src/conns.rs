//! Where a player's connection comes from: its own, or a slot of the shared pool.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicUsize, Ordering::SeqCst},
};

use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::measure::aggregator::Counters;
use herd_http::{Connection, Duplex, Request, Response, Streaming, Transport, TransportError};

/// The first wait before connecting again after a failed connect; it doubles with each
/// consecutive failure up to [`BACKOFF_MAX`], and a successful connect resets it. Without it a
/// player of a closed port retries as fast as the kernel refuses (75 000 connects/s from two
/// players), which measures nothing and floods the target's host.
pub(crate) const BACKOFF_MIN: Duration = Duration::from_millis(50);
/// The longest wait between two connects of one player after consecutive failures.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(2);

/// The wait before the next connect after `failures` consecutive failed ones (none at 0).
pub(crate) fn backoff(failures: u32) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    BACKOFF_MIN
        .saturating_mul(1u32 << (failures - 1).min(16))
        .min(BACKOFF_MAX)
}

/// Counts one connect held back by the backoff, for `wait`.
fn held(counters: &Counters, wait: Duration) {
    counters.connects_held.fetch_add(1, SeqCst);
    counters
        .backoff_us
        .fetch_add(wait.as_micros() as u64, SeqCst);
}

/// One connection that is opened lazily and reopened after it is lost.
#[derive(Default)]
pub(crate) struct Slot {
    conn: Option<Box<dyn Connection>>,
    opened_before: bool,
    /// Consecutive failed connects, and when the last one failed.
    failures: u32,
    failed_at: Option<Instant>,
}

impl Slot {
    /// When the backoff after consecutive failed connects lets this slot connect again,
    /// while it holds a connect back (no open connection, the wait not over); else None.
    fn held_until(&self, now: Instant) -> Option<Instant> {
        if self.conn.as_ref().is_some_and(|c| !c.is_closed()) {
            return None;
        }
        let until = self.failed_at? + backoff(self.failures);
        (until > now).then_some(until)
    }

    async fn ready(
        &mut self,
        transport: &dyn Transport,
        counters: &Counters,
    ) -> Result<&mut Box<dyn Connection>, TransportError> {
        if self.conn.as_ref().is_some_and(|c| c.is_closed()) {
            self.conn = None;
        }
        if self.conn.is_none() {
            // Held back after consecutive failures; time the player spent elsewhere (think,
            // an op's timeout) since the last failure counts toward the wait. (A player's own
            // connection is waited for in `Conns::held` first, where a stop ends the wait.)
            let now = Instant::now();
            if let Some(until) = self.held_until(now) {
                held(counters, until - now);
                tokio::time::sleep_until(until.into()).await;
            }
            match transport.connect().await {
                Ok(c) => {
                    self.failures = 0;
                    self.failed_at = None;
                    counters.connects.fetch_add(1, SeqCst);
                    if self.opened_before {
                        counters.reconnects.fetch_add(1, SeqCst);
                    }
                    self.opened_before = true;
                    self.conn = Some(c);
                }
                Err(e) => {
                    self.failures = self.failures.saturating_add(1);
                    self.failed_at = Some(Instant::now());
                    counters.connect_errors.fetch_add(1, SeqCst);
                    return Err(e);
                }
            }
        }
        Ok(self.conn.as_mut().expect("connected above"))
    }

    /// Drops the connection unless it is a multiplexed one that is still open: after a
    /// failed or abandoned HTTP/1.1 exchange the connection's state is unknown.
    fn after_failure(&mut self) {
        if let Some(c) = &self.conn
            && (c.share().is_none() || c.is_closed())
        {
            self.conn = None;
        }
    }
}

/// A player's own connection. On a multiplexed transport (h2c) it sits behind a lock so
/// the player's streams can take a handle on it (the player's own calls never wait on it);
/// otherwise (HTTP/1.1, whose streams open connections of their own) it is the player's
/// alone, and a call pays for no lock.
pub(crate) enum Own {
    Alone(Slot),
    Shared(Arc<tokio::sync::Mutex<Slot>>),
}

impl Own {
    /// An unopened connection, for a multiplexed transport or not.
    pub fn new(multiplexed: bool) -> Self {
        if multiplexed {
            Self::Shared(Arc::default())
        } else {
            Self::Alone(Slot::default())
        }
    }

    pub async fn send(
        &mut self,
        transport: &dyn Transport,
        counters: &Counters,
        req: Request,
    ) -> Result<Response, TransportError> {
        match self {
            Self::Alone(slot) => send_on(slot, transport, counters, req).await,
            Self::Shared(slot) => send_on(&mut *slot.lock().await, transport, counters, req).await,
        }
    }
}

/// Sends `req` on `slot`'s connection, (re)opening it first if need be.
async fn send_on(
    slot: &mut Slot,
    transport: &dyn Transport,
    counters: &Counters,
    req: Request,
) -> Result<Response, TransportError> {
    let mut guard = FailGuard(slot, true);
    let conn = guard.0.ready(transport, counters).await?;
    let r = conn.send(req).await;
    guard.1 = r.is_err();
    r
}

/// Runs [`Slot::after_failure`] unless the exchange completed, so a timeout that drops the
/// future mid-request also retires the connection.
struct FailGuard<'a>(&'a mut Slot, bool);

impl Drop for FailGuard<'_> {
    fn drop(&mut self) {
        if self.1 {
            self.0.after_failure();
        }
    }
}

/// N connections shared by all players.
pub(crate) struct Pool {
    slots: Vec<tokio::sync::Mutex<Slot>>,
    multiplexed: bool,
    next: AtomicUsize,
    /// HTTP/1.1 only: slots with no request in flight, and a permit per idle slot, so a
    /// player waits in FIFO order for the next free connection as a client pool does.
    idle: Mutex<Vec<usize>>,
    permits: Semaphore,
}

impl Pool {
    /// Opens `n` connections at once, so the pool is at its size before the first op.
    /// A slot whose connect fails is opened again by the op that next uses it.
    pub async fn open(transport: &dyn Transport, counters: &Counters, n: usize) -> Self {
        let mut slots: Vec<Slot> = (0..n).map(|_| Slot::default()).collect();
        let opened = futures_join_all(slots.iter_mut().map(|s| async {
            let _ = s.ready(transport, counters).await;
        }));
        opened.await;
        let multiplexed = transport.multiplexed();
        Self {
            slots: slots.into_iter().map(tokio::sync::Mutex::new).collect(),
            multiplexed,
            next: AtomicUsize::new(0),
            idle: Mutex::new((0..n).rev().collect()),
            permits: Semaphore::new(n),
        }
    }

    pub async fn send(
        &self,
        transport: &dyn Transport,
        counters: &Counters,
        req: Request,
    ) -> Result<Response, TransportError> {
        if self.multiplexed {
            // Round robin, holding the slot only to (re)connect and take a handle: the
            // requests themselves run side by side as streams of the one connection.
            let i = self.next.fetch_add(1, SeqCst) % self.slots.len();
            let mut handle = {
                let mut slot = self.slots[i].lock().await;
                let conn = slot.ready(transport, counters).await?;
                conn.share().expect("a multiplexed connection shares")
            };
            return handle.send(req).await;
        }
        let _permit = self
            .permits
            .acquire()
            .await
            .expect("the pool's semaphore is never closed");
        let i = self
            .idle
            .lock()
            .expect("the idle list lock is never held across a panic")
            .pop()
            .expect("a permit guarantees an idle slot");
        let checkout = Checkout {
            pool: self,
            slot: i,
        };
        let mut slot = checkout.pool.slots[i].lock().await;
        let mut guard = FailGuard(&mut slot, true);
        let conn = guard.0.ready(transport, counters).await?;
        let r = conn.send(req).await;
        guard.1 = r.is_err();
        r
    }
}

/// Puts an HTTP/1.1 slot back on the idle list however the exchange ends.
struct Checkout<'a> {
    pool: &'a Pool,
    slot: usize,
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        self.pool
            .idle
            .lock()
            .expect("the idle list lock is never held across a panic")
            .push(self.slot);
    }
}

/// Awaits all futures concurrently on this task.
async fn futures_join_all<F: std::future::Future<Output = ()>>(futs: impl Iterator<Item = F>) {
    let mut set: Vec<std::pin::Pin<Box<F>>> = futs.map(Box::pin).collect();
    std::future::poll_fn(|cx| {
        set.retain_mut(|f| f.as_mut().poll(cx).is_pending());
        if set.is_empty() {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
}

/// A player's connection source.
pub(crate) enum Conns {
    Own(Own),
    Pool(Arc<Pool>),
}

impl Conns {
    /// When a connect of this player's own connection is held back by the backoff after
    /// failed ones: the instant it may be tried, counted as held (as `Slot::ready` counts
    /// it). The player waits it out where a stop can end the wait — a run's stop, or its
    /// step retiring it — so a stop is not delayed by up to the backoff's 2 s, and the op,
    /// which sent nothing, is not tried. None for a pool's connections (their wait holds
    /// the slot for every player) and while a connection shared with the player's streams
    /// is busy.
    pub fn held(&self, counters: &Counters) -> Option<Instant> {
        let now = Instant::now();
        let until = match self {
            Self::Own(Own::Alone(slot)) => slot.held_until(now),
            Self::Own(Own::Shared(slot)) => slot.try_lock().ok()?.held_until(now),
            Self::Pool(_) => None,
        }?;
        held(counters, until - now);
        Some(until)
    }

    /// Where this player's streams and long polls open: on its own connection when that
    /// is multiplexed (h2c: one more stream beside its calls), on the pool's connections
    /// (h2c pool), else (HTTP/1.1, where a response in progress holds the connection) on
    /// a connection of their own.
    pub fn side(&self) -> SideConn {
        match self {
            Self::Own(Own::Shared(slot)) => SideConn::Shared(slot.clone()),
            Self::Pool(p) if p.multiplexed => SideConn::Pool(p.clone()),
            _ => SideConn::Own(Slot::default()),
        }
    }

    pub async fn send(
        &mut self,
        transport: &dyn Transport,
        counters: &Counters,
        req: Request,
    ) -> Result<Response, TransportError> {
        match self {
            Self::Own(o) => o.send(transport, counters, req).await,
            Self::Pool(p) => p.send(transport, counters, req).await,
        }
    }
}

impl Conns {
    /// Opens `req` as a duplex stream (a gRPC client or bidi call whose messages go out
    /// after its head) on this player's connection, (re)opened first if need be.
    pub async fn duplex(
        &mut self,
        transport: &dyn Transport,
        counters: &Counters,
        req: Request,
    ) -> Result<Duplex, TransportError> {
        let mut handle = match self {
            Self::Own(Own::Shared(slot)) => {
                let mut slot = slot.lock().await;
                let conn = slot.ready(transport, counters).await?;
                conn.share().expect("a multiplexed connection shares")
            }
            Self::Own(Own::Alone(slot)) => {
                let conn = slot.ready(transport, counters).await?;
                return conn.duplex(req).await;
            }
            Self::Pool(p) => {
                let i = p.next.fetch_add(1, SeqCst) % p.slots.len();
                let mut slot = p.slots[i].lock().await;
                let conn = slot.ready(transport, counters).await?;
                match conn.share() {
                    Some(h) => h,
                    None => return conn.duplex(req).await,
                }
            }
        };
        handle.duplex(req).await
    }
}

/// A stream's or long poll's connection source, from [`Conns::side`].
pub(crate) enum SideConn {
    Shared(Arc<tokio::sync::Mutex<Slot>>),
    Pool(Arc<Pool>),
    Own(Slot),
}

impl SideConn {
    /// A handle on the shared or pooled multiplexed connection a call goes out on (the
    /// connection (re)opened first if it is gone); `None` for the side's own connection.
    async fn shared(
        &mut self,
        transport: &dyn Transport,
        counters: &Counters,
    ) -> Result<Option<Box<dyn Connection>>, TransportError> {
        let slot = match self {
            Self::Shared(slot) => slot,
            Self::Pool(p) => &p.slots[p.next.fetch_add(1, SeqCst) % p.slots.len()],
            Self::Own(_) => return Ok(None),
        };
        let mut slot = slot.lock().await;
        let conn = slot.ready(transport, counters).await?;
        Ok(Some(conn.share().expect("a multiplexed connection shares")))
    }

    /// Sends `req` and returns at the response head; the connection is (re)opened first if
    /// it is gone.
    pub async fn open(
        &mut self,
        transport: &dyn Transport,
        counters: &Counters,
        req: Request,
    ) -> Result<Streaming, TransportError> {
        if let Some(mut handle) = self.shared(transport, counters).await? {
            return handle.open(req).await;
        }
        let Self::Own(slot) = self else {
            unreachable!("only an own connection is not shared")
        };
        let mut guard = FailGuard(slot, true);
        let conn = guard.0.ready(transport, counters).await?;
        let r = conn.open(req).await;
        guard.1 = r.is_err();
        r
    }

    /// Opens `req` as a duplex stream (a gRPC bidi stream op), as [`SideConn::open`] opens
    /// a response.
    pub async fn duplex(
        &mut self,
        transport: &dyn Transport,
        counters: &Counters,
        req: Request,
    ) -> Result<Duplex, TransportError> {
        if let Some(mut handle) = self.shared(transport, counters).await? {
            return handle.duplex(req).await;
        }
        let Self::Own(slot) = self else {
            unreachable!("only an own connection is not shared")
        };
        let mut guard = FailGuard(slot, true);
        let conn = guard.0.ready(transport, counters).await?;
        let r = conn.duplex(req).await;
        guard.1 = r.is_err();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connect_backoff_doubles_from_50ms_to_2s() {
        let ms: Vec<u128> = (0..9).map(|n| backoff(n).as_millis()).collect();
        assert_eq!(ms, [0, 50, 100, 200, 400, 800, 1600, 2000, 2000]);
        assert_eq!(
            backoff(u32::MAX),
            BACKOFF_MAX,
            "no overflow however long it fails"
        );
    }
}
