//! The gateway's live event channel: each `GET /v1/subscribe` is a long-lived streamed
//! response of newline-delimited JSON events (ticks, and game events that other players'
//! calls through this gateway cause). Bounded: at most `max` subscriptions, each with a
//! fixed-size queue; an event for a full queue is dropped and counted, never buffered.

use std::{
    collections::HashMap,
    convert::Infallible,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use hyper::body::{Body, Frame};
use tokio::{sync::mpsc, time::Interval};

/// Why a subscription was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubscribeError {
    /// The gateway holds its maximum of subscriptions.
    #[error("the gateway already holds its maximum of {0} subscriptions")]
    Full(usize),
    /// The gateway is shutting down.
    #[error("the gateway is shutting down")]
    Closed,
}

/// Event counters.
#[derive(Debug, Default)]
pub struct EventCounters {
    /// Events queued to a subscriber (ticks included).
    pub sent: AtomicU64,
    /// Events dropped because the subscriber's queue was full.
    pub dropped: AtomicU64,
}

#[derive(Debug, Default)]
struct HubState {
    closed: bool,
    next_id: u64,
    open: usize,
    by_account: HashMap<i64, Vec<(u64, mpsc::Sender<Bytes>)>>,
}

/// Every open subscription, by account.
#[derive(Debug)]
pub struct Hub {
    state: Mutex<HubState>,
    max: usize,
    queue: usize,
    tick: Duration,
    /// What was sent and dropped.
    pub counters: EventCounters,
}

impl Hub {
    /// A hub of at most `max` subscriptions, each queueing up to `queue` events, each sent a
    /// tick every `tick`.
    pub fn new(max: usize, queue: usize, tick: Duration) -> Arc<Hub> {
        Arc::new(Hub {
            state: Mutex::new(HubState::default()),
            max,
            queue: queue.max(1),
            tick,
            counters: EventCounters::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens a subscription for `account`; its stream starts with `first`.
    pub fn subscribe(
        self: &Arc<Self>,
        account: i64,
        first: Bytes,
    ) -> Result<EventStream, SubscribeError> {
        let (tx, rx) = mpsc::channel(self.queue);
        let id = {
            let mut st = self.lock();
            if st.closed {
                return Err(SubscribeError::Closed);
            }
            if st.open >= self.max {
                return Err(SubscribeError::Full(self.max));
            }
            st.next_id += 1;
            st.open += 1;
            let id = st.next_id;
            st.by_account.entry(account).or_default().push((id, tx));
            id
        };
        let start = tokio::time::Instant::now() + self.tick;
        let mut tick = tokio::time::interval_at(start, self.tick);
        // A subscriber that fell behind gets the next tick on time, not a burst of late ones.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.counters.sent.fetch_add(1, Ordering::Relaxed);
        Ok(EventStream {
            rx,
            tick,
            seq: 0,
            first: Some(first),
            _guard: Guard {
                hub: self.clone(),
                account,
                id,
            },
        })
    }

    /// Queues `event` (one JSON line) to every subscription of `account`.
    pub fn publish(&self, account: i64, event: &serde_json::Value) {
        let st = self.lock();
        let Some(subs) = st.by_account.get(&account) else {
            return;
        };
        let line = line(event);
        for (_, tx) in subs {
            match tx.try_send(line.clone()) {
                Ok(()) => self.counters.sent.fetch_add(1, Ordering::Relaxed),
                Err(_) => self.counters.dropped.fetch_add(1, Ordering::Relaxed),
            };
        }
    }

    /// Ends every stream and refuses new ones: dropping the senders makes each stream's next
    /// poll return its end, so HTTP/2 streams finish cleanly inside the shutdown grace.
    pub fn close(&self) {
        let mut st = self.lock();
        st.closed = true;
        st.by_account.clear();
    }

    /// Subscriptions open now.
    pub fn open(&self) -> usize {
        self.lock().open
    }
}

/// One JSON value as a newline-terminated line.
pub fn line(event: &serde_json::Value) -> Bytes {
    let mut s = event.to_string();
    s.push('\n');
    Bytes::from(s)
}

/// Unregisters a subscription when its stream is dropped: the client went away (stream reset,
/// connection closed) or the gateway shut down.
#[derive(Debug)]
struct Guard {
    hub: Arc<Hub>,
    account: i64,
    id: u64,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut st = self.hub.lock();
        st.open = st.open.saturating_sub(1);
        if let Some(subs) = st.by_account.get_mut(&self.account) {
            subs.retain(|(id, _)| *id != self.id);
            if subs.is_empty() {
                st.by_account.remove(&self.account);
            }
        }
    }
}

/// The response body of one subscription.
#[derive(Debug)]
pub struct EventStream {
    rx: mpsc::Receiver<Bytes>,
    tick: Interval,
    seq: u64,
    first: Option<Bytes>,
    _guard: Guard,
}

impl Body for EventStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        match this.rx.poll_recv(cx) {
            Poll::Ready(Some(event)) => return Poll::Ready(Some(Ok(Frame::data(event)))),
            // The hub closed: the gateway is shutting down.
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        match this.tick.poll_tick(cx) {
            Poll::Ready(_) => {
                this.seq += 1;
                this._guard
                    .hub
                    .counters
                    .sent
                    .fetch_add(1, Ordering::Relaxed);
                let ev = serde_json::json!({ "event": "tick", "seq": this.seq });
                Poll::Ready(Some(Ok(Frame::data(line(&ev)))))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

    use super::*;

    async fn next_line(s: &mut EventStream) -> Option<serde_json::Value> {
        let frame = s.frame().await?.expect("infallible");
        let data = frame.into_data().expect("a data frame");
        Some(serde_json::from_slice(&data).expect("a JSON line"))
    }

    #[tokio::test]
    async fn a_stream_sends_its_greeting_events_and_ticks_until_the_hub_closes() {
        let hub = Hub::new(10, 4, Duration::from_millis(20));
        let mut s = hub
            .subscribe(7, line(&serde_json::json!({"event": "subscribed"})))
            .unwrap();
        assert_eq!(next_line(&mut s).await.unwrap()["event"], "subscribed");
        hub.publish(7, &serde_json::json!({"event": "opponent_moved"}));
        hub.publish(8, &serde_json::json!({"event": "not_for_7"}));
        assert_eq!(next_line(&mut s).await.unwrap()["event"], "opponent_moved");
        let tick = next_line(&mut s).await.unwrap();
        assert_eq!(
            (tick["event"].as_str(), tick["seq"].as_u64()),
            (Some("tick"), Some(1))
        );
        assert_eq!(hub.open(), 1);
        hub.close();
        assert!(next_line(&mut s).await.is_none());
        assert_eq!(
            hub.subscribe(7, Bytes::new()).unwrap_err(),
            SubscribeError::Closed
        );
        drop(s);
        assert_eq!(hub.open(), 0);
    }

    #[tokio::test]
    async fn subscriptions_and_queues_are_bounded() {
        let hub = Hub::new(1, 2, Duration::from_secs(1));
        let s = hub.subscribe(1, Bytes::new()).unwrap();
        assert_eq!(
            hub.subscribe(2, Bytes::new()).unwrap_err(),
            SubscribeError::Full(1)
        );
        for _ in 0..5 {
            hub.publish(1, &serde_json::json!({"event": "x"}));
        }
        assert_eq!(hub.counters.dropped.load(Ordering::Relaxed), 3);
        drop(s);
        assert_eq!(hub.open(), 0);
        assert!(hub.subscribe(2, Bytes::new()).is_ok());
    }
}
