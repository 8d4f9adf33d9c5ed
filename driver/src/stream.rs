//! A player's background ops: long-lived streams (server-sent events, newline-delimited
//! JSON, raw chunks) and long-poll loops, each in its own task beside the player's calls.
//!
//! On h2c a stream is one more HTTP/2 stream on the player's own connection; on HTTP/1.1 a
//! response in progress holds its connection, so a stream gets a second connection of its
//! own. Every opening is recorded as an op sample (latency to the response head, outcome);
//! events, stream errors, reconnects and time to first event go to [`PlayAcc`].

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering::SeqCst},
    },
    task::{Context, Poll, Wake, Waker},
    time::{Duration, Instant},
};

use bytes::{Bytes, BytesMut};
use tokio::sync::watch;

use crate::{
    conns::SideConn,
    measure::{aggregator::Msg, play::PlayAcc},
    outcome::classify,
    player::{Session, Shared},
    scenario::{Backoff, OpKind, StreamFormat},
    template::{GROUP_PREFIX, Vars},
};
use herd_http::{Request, Streaming};
use herd_model::Outcome;

/// Longest partial line (or SSE event) kept while waiting for its end; a stream that sends
/// more without a line break is counted as a `bad_event` and its buffer dropped.
const MAX_PENDING: usize = 1 << 20;

/// The background ops a session has running.
#[derive(Default)]
pub(crate) struct Backgrounds {
    running: Vec<Running>,
}

/// A stream or long poll running for the player; its task ends when `stop` says so.
struct Running {
    op: usize,
    stop: watch::Sender<bool>,
}

impl Backgrounds {
    fn stop_where(&mut self, mut pred: impl FnMut(usize) -> bool) {
        self.running.retain(|r| {
            if pred(r.op) {
                r.stop.send_replace(true);
                false
            } else {
                true
            }
        });
    }
}

impl Drop for Backgrounds {
    fn drop(&mut self) {
        for r in &self.running {
            r.stop.send_replace(true);
        }
    }
}

impl Session {
    /// Opens every stream and long-poll op of the scenario that this player has not open
    /// yet and whose variables it has; returns how many it opened. Each runs in the
    /// background until the player stops or [`Session::close_streams`] ends it, reopening
    /// (with the op's backoff) when it breaks.
    pub fn open_streams(&mut self) -> usize {
        let shared = self.shared.clone();
        if shared.scenario.target.ws.is_some() {
            // A WebSocket's stream op is its socket's pushes (`ws.rs`).
            return usize::from(self.hold_socket());
        }
        let mut opened = 0;
        for (i, op) in shared.scenario.ops.iter().enumerate() {
            if !op.kind.is_background()
                || self.bg.running.iter().any(|r| r.op == i)
                || !self.role_opens(i)
            {
                continue;
            }
            let built = match &op.call {
                crate::scenario::Call::Grpc(call) => {
                    let target = shared.scenario.target.grpc.as_ref().expect("a gRPC target");
                    // No grpc-timeout: a stream is held open; the op's timeout bounds its
                    // opening only.
                    crate::grpc::frames(call, target, &self.vars).and_then(|frames| {
                        Some((
                            crate::grpc::request(op, call, target, &self.vars, None)?,
                            frames,
                        ))
                    })
                }
                _ => self
                    .request(op, &shared.scenario.target.base_path)
                    .map(|r| (r, Vec::new())),
            };
            let Some((req, frames)) = built else {
                continue;
            };
            let (stop, stop_rx) = watch::channel(false);
            tokio::spawn(
                Task {
                    shared: shared.clone(),
                    gate: self.role.gate.clone(),
                    op: i,
                    req,
                    frames,
                    vars: self.vars.clone(),
                    conn: self.conns.side(),
                    halt: self.halt.clone(),
                    retire: self.retire.clone(),
                    stop: stop_rx,
                    cursor: Vec::new(),
                }
                .run(),
            );
            self.bg.running.push(Running { op: i, stop });
            opened += 1;
        }
        opened
    }

    /// Ends this player's streams and long polls (all, or only those that read a group
    /// variable, which must reopen for the next group).
    pub fn close_streams(&mut self, group_only: bool) {
        let shared = self.shared.clone();
        let vars = &shared.scenario.vars;
        self.bg.stop_where(|op| {
            !group_only
                || crate::scenario::op_reads(&shared.scenario.ops[op])
                    .any(|s| vars.name(s).starts_with(GROUP_PREFIX))
        });
    }
}

struct Task {
    shared: Arc<Shared>,
    gate: Arc<crate::measure::gate::Gate>,
    op: usize,
    req: Request,
    /// A gRPC stream's request messages, framed.
    frames: Vec<Bytes>,
    vars: Vars,
    conn: SideConn,
    halt: watch::Receiver<bool>,
    retire: Option<watch::Receiver<bool>>,
    stop: watch::Receiver<bool>,
    /// The last answer's `Last-Modified` and `Etag`, sent back as `If-Modified-Since` and
    /// `If-None-Match` by a `conditional` long poll.
    cursor: Vec<(http::HeaderName, http::HeaderValue)>,
}

/// How one opening ended.
enum End {
    /// The player stopped: no error, no reopening.
    Stopped,
    /// An answer came (a long poll's): re-issue at once.
    Again,
    /// A failure: reopen after the backoff; `delivered` if it gave events first.
    Failed { delivered: bool },
}

impl Task {
    fn stopping(&self) -> bool {
        *self.halt.borrow()
            || *self.stop.borrow()
            || self.retire.as_ref().is_some_and(|r| *r.borrow())
    }

    /// Resolves when the player stops; owns its receivers, so it can race a borrow of
    /// the task.
    fn stopped(&self) -> impl std::future::Future<Output = ()> + use<> {
        let (mut halt, mut stop, retire) =
            (self.halt.clone(), self.stop.clone(), self.retire.clone());
        async move {
            let retire = async move {
                match retire {
                    Some(mut r) => until_true(&mut r).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = until_true(&mut halt) => {}
                _ = until_true(&mut stop) => {}
                _ = retire => {}
            }
        }
    }

    fn play(&self) -> &PlayAcc {
        &self.shared.play
    }

    /// Records an opening's (or a long poll's) sample in the phase current at its end, so
    /// a wait the stop cuts short is never left in flight.
    fn sample(&self, outcome: Outcome, latency: Duration) {
        let n_ops = self.shared.scenario.ops.len();
        if let Some(phase) = self.gate.enter(&self.shared.started) {
            // Openings and polls count by outcome; their statuses are not kept.
            let _ = self.shared.tx.send(Msg::Sample {
                row: (phase * n_ops + self.op) as u32,
                outcome,
                status: None,
                latency_us: latency.as_micros() as u64,
                ended: Instant::now(),
            });
        }
    }

    async fn run(mut self) {
        let shared = self.shared.clone();
        let op = &shared.scenario.ops[self.op];
        let (reconnect, timeout, repoll) = match &op.kind {
            OpKind::Stream {
                reconnect, pause, ..
            } => (*reconnect, op.timeout, *pause),
            OpKind::LongPoll {
                reconnect, pause, ..
            } => (*reconnect, op.timeout, *pause),
            OpKind::Request => return,
        };
        let Backoff { min, max } = reconnect;
        let mut pause = min;
        let mut first = true;
        let mut after_failure = false;
        // A gRPC stream that ended with status ok was a call that completed: its reopening
        // is the next call, not a reconnect (an HTTP stream's end always breaks it).
        let completes = matches!(op.call, crate::scenario::Call::Grpc(_));
        while !self.stopping() {
            if !first && (after_failure || (matches!(op.kind, OpKind::Stream { .. }) && !completes))
            {
                self.play().reconnect(self.op);
            }
            first = false;
            let end = self.once(timeout).await;
            match end {
                End::Stopped => return,
                End::Again => {
                    after_failure = false;
                    pause = min;
                    if !repoll.is_zero() {
                        tokio::select! {
                            _ = tokio::time::sleep(repoll) => {}
                            _ = self.stopped() => return,
                        }
                    }
                }
                End::Failed { delivered } => {
                    after_failure = true;
                    if delivered {
                        pause = min;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = self.stopped() => return,
                    }
                    pause = (pause * 2).min(max);
                }
            }
        }
    }

    /// One opening: the request, then (stream) its events until it ends, or (long poll)
    /// its one answer.
    async fn once(&mut self, timeout: Duration) -> End {
        let shared = self.shared.clone();
        let op = &shared.scenario.ops[self.op];
        if let crate::scenario::Call::Grpc(call) = &op.call {
            return self.grpc_once(call, op, timeout).await;
        }
        let sent = Instant::now();
        let stopped = self.stopped();
        let mut req = self.req.clone();
        for (k, v) in &self.cursor {
            req.headers.insert(k.clone(), v.clone());
        }
        let open = tokio::time::timeout(
            timeout,
            self.conn.open(&*shared.transport, &shared.counters, req),
        );
        let head = tokio::select! {
            r = open => r,
            _ = stopped => return self.cut(),
        };
        let head = match head {
            Err(_) => return self.failed(Outcome::Timeout, sent.elapsed()),
            Ok(Err(e)) => return self.failed(crate::transport::outcome(&e), sent.elapsed()),
            Ok(Ok(h)) => h,
        };
        match &op.kind {
            OpKind::Stream {
                format, event_type, ..
            } => {
                if !(200..300).contains(&head.status) {
                    let outcome = status_outcome(head.status);
                    return self.failed(outcome, sent.elapsed());
                }
                self.sample(Outcome::Ok, sent.elapsed());
                self.play().opened(self.op);
                self.events(head, *format, event_type.as_deref(), sent)
                    .await
            }
            OpKind::LongPoll { event_type, .. } => {
                self.answer(head, event_type.as_deref(), sent, timeout)
                    .await
            }
            OpKind::Request => End::Stopped,
        }
    }

    /// The player stopped while this opening was in flight: the request went out, so it
    /// is counted (not as an error, and not as an op sample: its phase may be over).
    fn cut(&self) -> End {
        self.play().cut_by_stop(self.op);
        End::Stopped
    }

    fn failed(&self, outcome: Outcome, latency: Duration) -> End {
        self.play().error(self.op, &outcome.to_string());
        self.sample(outcome, latency);
        End::Failed { delivered: false }
    }

    async fn events(
        &mut self,
        mut head: Streaming,
        format: StreamFormat,
        event_type: Option<&str>,
        sent: Instant,
    ) -> End {
        let mut parser = Parser::new(format, event_type);
        let mut delivered = false;
        let mut stopped = Gated::new(self.stopped());
        loop {
            let frame = tokio::select! {
                f = head.body.chunk() => f,
                _ = &mut stopped => return End::Stopped,
            };
            let class = match frame {
                None => "ended".to_owned(),
                Some(Err(e)) => crate::transport::outcome(&e).to_string(),
                Some(Ok(data)) => {
                    let play = &self.shared.play;
                    let op = self.op;
                    parser.push(&data, &mut |ev| match ev {
                        Ok(kind) => {
                            if !delivered {
                                delivered = true;
                                play.first_event(op, sent.elapsed().as_micros() as u64);
                            }
                            play.event(op, kind);
                        }
                        Err(()) => play.error(op, "bad_event"),
                    });
                    continue;
                }
            };
            self.play().error(self.op, &class);
            return End::Failed { delivered };
        }
    }

    async fn answer(
        &mut self,
        head: Streaming,
        event_type: Option<&str>,
        sent: Instant,
        timeout: Duration,
    ) -> End {
        let left = timeout.saturating_sub(sent.elapsed());
        let stopped = self.stopped();
        let body = tokio::select! {
            b = tokio::time::timeout(left, head.body.collect()) => b,
            _ = stopped => return self.cut(),
        };
        let body = match body {
            Err(_) => return self.failed(Outcome::Timeout, sent.elapsed()),
            Ok(Err(e)) => return self.failed(crate::transport::outcome(&e), sent.elapsed()),
            Ok(Ok(b)) => b,
        };
        let waited = sent.elapsed();
        let mut latency = waited;
        let op = &self.shared.scenario.ops[self.op];
        if head.status == 204 || ((200..300).contains(&head.status) && body.is_empty()) {
            self.sample(Outcome::Ok, latency);
            self.answered("no_news", latency);
            return End::Again;
        }
        if let OpKind::LongPoll {
            conditional: true, ..
        } = &op.kind
        {
            use http::header::{ETAG, IF_MODIFIED_SINCE, IF_NONE_MATCH, LAST_MODIFIED};
            let cursor: Vec<_> = [(LAST_MODIFIED, IF_MODIFIED_SINCE), (ETAG, IF_NONE_MATCH)]
                .into_iter()
                .filter_map(|(from, to)| Some((to, head.headers.get(from)?.clone())))
                .collect();
            if !cursor.is_empty() {
                self.cursor = cursor;
            }
        }
        let headers = head.headers.into();
        let (outcome, _) = classify(op, head.status, &headers, &body, &mut self.vars);
        match outcome {
            Outcome::Ok | Outcome::Domain(_) => {
                let kind = match (&outcome, event_type) {
                    (Outcome::Domain(c), _) => c.to_string(),
                    (_, Some(ptr)) => match json_type(&body, ptr) {
                        Some(k) => k,
                        None => {
                            self.play().error(self.op, "bad_event");
                            "unknown".to_owned()
                        }
                    },
                    (_, None) => "news".to_owned(),
                };
                // The message says when it was sent: its delivery latency is the op's, not
                // how long this poll happened to wait. One without a send time counts as
                // `bad_event` and keeps the poll's own latency.
                if let OpKind::LongPoll {
                    delivery: Some(ptr),
                    ..
                } = &op.kind
                {
                    match sent_us(&body, ptr) {
                        Some(at) => {
                            latency =
                                Duration::from_micros(crate::template::unix_us().saturating_sub(at))
                        }
                        None => self.play().error(self.op, "bad_event"),
                    }
                }
                self.sample(outcome, latency);
                // First event stays the poll's own wait, as for every long poll.
                self.answered(&kind, waited);
                End::Again
            }
            other => self.failed(other, latency),
        }
    }

    /// One opening of a gRPC stream: a server-streaming call (its message sent whole) or a
    /// bidi one (its messages sent after the head, the request left open until the stream
    /// ends or the player stops); then its messages counted as events until the trailers.
    async fn grpc_once(
        &mut self,
        call: &crate::scenario::GrpcCall,
        op: &crate::scenario::Op,
        timeout: Duration,
    ) -> End {
        use herd_http::grpc::{self, Head, Streaming as Flow};
        let shared = self.shared.clone();
        let sent = Instant::now();
        let stopped = self.stopped();
        let mut req = self.req.clone();
        let mut body_open = None;
        let open = async {
            if call.method.streaming() == Flow::Bidi {
                let mut d = self
                    .conn
                    .duplex(&*shared.transport, &shared.counters, req)
                    .await?;
                for _ in 0..call.repeat {
                    for f in &self.frames {
                        d.send.send(f.clone())?;
                    }
                }
                body_open = Some(d.send);
                d.response.head().await
            } else {
                let mut body = BytesMut::new();
                for f in &self.frames {
                    body.extend_from_slice(f);
                }
                req.body = body.freeze();
                self.conn
                    .open(&*shared.transport, &shared.counters, req)
                    .await
            }
        };
        let head = tokio::select! {
            r = tokio::time::timeout(timeout, open) => r,
            _ = stopped => return self.cut(),
        };
        let mut head = match head {
            Err(_) => return self.failed(Outcome::Timeout, sent.elapsed()),
            Ok(Err(e)) => return self.failed(crate::transport::outcome(&e), sent.elapsed()),
            Ok(Ok(h)) => h,
        };
        let encoding = match grpc::head(head.status, &head.headers) {
            Ok(Head::Messages(e)) => e,
            Ok(Head::TrailersOnly(status)) => {
                let o = crate::grpc::status_outcome(status.code);
                if o.is_ok() {
                    // Over before it began: a call that completed with no message.
                    self.sample(Outcome::Ok, sent.elapsed());
                    self.play().opened(self.op);
                    return End::Again;
                }
                return self.failed(o, sent.elapsed());
            }
            Err(e) => return self.failed(crate::grpc::error_outcome(&e).0, sent.elapsed()),
        };
        self.sample(Outcome::Ok, sent.elapsed());
        self.play().opened(self.op);
        let event_type = match &op.kind {
            OpKind::Stream { event_type, .. } => event_type.as_deref(),
            _ => None,
        };
        let json = shared
            .scenario
            .target
            .grpc
            .as_ref()
            .expect("a gRPC target")
            .json;
        let mut decoder = grpc::Decoder::new(grpc::DEFAULT_MAX_MESSAGE, encoding);
        let mut delivered = false;
        let mut stopped = Gated::new(self.stopped());
        let class = loop {
            let chunk = tokio::select! {
                c = head.body.chunk() => c,
                _ = &mut stopped => return End::Stopped,
            };
            let data = match chunk {
                None => {
                    break match head
                        .body
                        .trailers()
                        .map(|t| grpc::Status::from_trailers(&t))
                    {
                        Some(Ok(status)) => match crate::grpc::status_outcome(status.code) {
                            Outcome::Ok => return End::Again,
                            o => o.name(),
                        },
                        _ => {
                            Outcome::TransportError(herd_model::TransportErrorKind::Protocol).name()
                        }
                    };
                }
                Some(Err(e)) => break crate::transport::outcome(&e).name(),
                Some(Ok(data)) => data,
            };
            decoder.push(&data);
            loop {
                let m = match decoder.next() {
                    Ok(Some(m)) => m,
                    Ok(None) => break,
                    Err(_) => {
                        let o = Outcome::TransportError(herd_model::TransportErrorKind::Protocol);
                        self.play().error(self.op, &o.name());
                        return End::Failed { delivered };
                    }
                };
                if !delivered {
                    delivered = true;
                    self.play()
                        .first_event(self.op, sent.elapsed().as_micros() as u64);
                }
                match event_type {
                    None => {
                        if call.method.check_response(&m).is_ok() {
                            self.play().event(self.op, "message");
                        } else {
                            self.play().error(self.op, "bad_event");
                        }
                    }
                    Some(ptr) => {
                        let kind = call
                            .method
                            .decode_response(&m, json)
                            .ok()
                            .and_then(|v| v.pointer(ptr).and_then(scalar));
                        match kind {
                            Some(k) => self.play().event(self.op, &k),
                            None => self.play().error(self.op, "bad_event"),
                        }
                    }
                }
            }
        };
        drop(body_open);
        self.play().error(self.op, &class);
        End::Failed { delivered }
    }

    fn answered(&self, kind: &str, latency: Duration) {
        self.play().opened(self.op);
        self.play().first_event(self.op, latency.as_micros() as u64);
        self.play().event(self.op, kind);
    }
}

/// The send time (Unix µs) at `ptr` in a JSON body: a number, or a string of digits.
fn sent_us(body: &[u8], ptr: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    match v.pointer(ptr)? {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn status_outcome(status: u16) -> Outcome {
    if status == 429 {
        Outcome::RateLimited
    } else {
        Outcome::Http((status / 100) as u8)
    }
}

/// A JSON scalar as an event type.
fn scalar(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The event's type: the JSON scalar at `ptr`.
fn json_type(data: &[u8], ptr: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(data).ok()?;
    match v.pointer(ptr)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// `F`, polled again only after one of its own wakers fired. Beside a stream's reads,
/// `select!` would poll the stop signal at every chunk: three watch receivers, each a lock
/// on its waiter list and a waker compared, for a signal that fires once.
struct Gated<F> {
    inner: Pin<Box<F>>,
    flag: Arc<Flag>,
    /// Handed to `inner`: sets [`Flag::woken`], then wakes the task.
    waker: Waker,
    polled: bool,
}

#[derive(Default)]
struct Flag {
    woken: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, SeqCst);
        let task = self
            .task
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(w) = task {
            w.wake();
        }
    }
}

impl<F: Future> Gated<F> {
    fn new(inner: F) -> Self {
        let flag = Arc::new(Flag::default());
        Self {
            inner: Box::pin(inner),
            waker: Waker::from(flag.clone()),
            flag,
            polled: false,
        }
    }
}

impl<F: Future> Future for Gated<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        // The task's waker first, then the flag: a wake in between finds the waker.
        {
            let mut task = this
                .flag
                .task
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match &mut *task {
                Some(w) if w.will_wake(cx.waker()) => {}
                t => *t = Some(cx.waker().clone()),
            }
        }
        if this.polled && !this.flag.woken.swap(false, SeqCst) {
            return Poll::Pending;
        }
        this.polled = true;
        this.inner
            .as_mut()
            .poll(&mut Context::from_waker(&this.waker))
    }
}

/// Resolves when `rx` holds true; never, if its sender is gone without saying so.
async fn until_true(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Cuts a body into events.
pub(crate) struct Parser<'a> {
    format: StreamFormat,
    event_type: Option<&'a str>,
    pending: BytesMut,
    /// SSE: the event being assembled.
    sse_type: Option<String>,
    sse_data: Vec<u8>,
    sse_has_data: bool,
    /// SSE: the previous chunk ended in `\r`, so a leading `\n` belongs to it.
    after_cr: bool,
}

impl<'a> Parser<'a> {
    pub fn new(format: StreamFormat, event_type: Option<&'a str>) -> Self {
        Self {
            format,
            event_type,
            pending: BytesMut::new(),
            sse_type: None,
            sse_data: Vec::new(),
            sse_has_data: false,
            after_cr: false,
        }
    }

    /// Feeds one chunk; `emit` gets each complete event's type, or `Err` for one that
    /// cannot be read.
    pub fn push(&mut self, chunk: &Bytes, emit: &mut dyn FnMut(Result<&str, ()>)) {
        if self.format == StreamFormat::Chunks {
            if !chunk.is_empty() {
                emit(Ok("chunk"));
            }
            return;
        }
        let mut chunk: &[u8] = chunk;
        if self.after_cr {
            self.after_cr = false;
            chunk = chunk.strip_prefix(b"\n").unwrap_or(chunk);
        }
        self.pending.extend_from_slice(chunk);
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n' || b == b'\r') {
            let line = self.pending.split_to(end).freeze();
            let sep = self.pending.split_to(1);
            if sep[0] == b'\r' {
                if self.pending.first() == Some(&b'\n') {
                    let _ = self.pending.split_to(1);
                } else if self.pending.is_empty() {
                    self.after_cr = true;
                }
            }
            self.line(&line, emit);
        }
        if self.pending.len() + self.sse_data.len() > MAX_PENDING {
            self.pending.clear();
            self.sse_data.clear();
            self.sse_has_data = false;
            emit(Err(()));
        }
    }

    fn line(&mut self, line: &[u8], emit: &mut dyn FnMut(Result<&str, ()>)) {
        match self.format {
            StreamFormat::Chunks => {}
            StreamFormat::Ndjson => {
                if line.iter().all(u8::is_ascii_whitespace) {
                    return;
                }
                match self.event_type {
                    None => match serde_json::from_slice::<serde::de::IgnoredAny>(line) {
                        Ok(_) => emit(Ok("event")),
                        Err(_) => emit(Err(())),
                    },
                    Some(ptr) => match json_type(line, ptr) {
                        Some(t) => emit(Ok(&t)),
                        None => emit(Err(())),
                    },
                }
            }
            StreamFormat::Sse => {
                if line.is_empty() {
                    self.dispatch(emit);
                    return;
                }
                if line[0] == b':' {
                    return; // a comment, e.g. a keep-alive
                }
                let (field, value) = match line.iter().position(|&b| b == b':') {
                    Some(i) => {
                        let v = &line[i + 1..];
                        (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
                    }
                    None => (line, &b""[..]),
                };
                match field {
                    b"event" => self.sse_type = Some(String::from_utf8_lossy(value).into_owned()),
                    b"data" => {
                        if self.sse_has_data {
                            self.sse_data.push(b'\n');
                        }
                        self.sse_data.extend_from_slice(value);
                        self.sse_has_data = true;
                    }
                    _ => {} // id, retry and unknown fields
                }
            }
        }
    }

    fn dispatch(&mut self, emit: &mut dyn FnMut(Result<&str, ()>)) {
        let sse_type = self.sse_type.take();
        if !std::mem::take(&mut self.sse_has_data) {
            return; // no data: not an event (the spec drops it)
        }
        let data = std::mem::take(&mut self.sse_data);
        match self.event_type {
            Some(ptr) => match json_type(&data, ptr) {
                Some(t) => emit(Ok(&t)),
                None => emit(Err(())),
            },
            None => match sse_type.as_deref() {
                Some(t) if !t.is_empty() => emit(Ok(t)),
                _ => emit(Ok("message")),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts its polls; ready once `ready` is set, after which it is woken by hand.
    struct Counted {
        polls: Arc<std::sync::atomic::AtomicUsize>,
        ready: Arc<AtomicBool>,
        waker: Arc<Mutex<Option<Waker>>>,
    }

    impl Future for Counted {
        type Output = ();

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, SeqCst);
            if self.ready.load(SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn gated_polls_again_only_after_its_own_wake() {
        let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let ready = Arc::new(AtomicBool::new(false));
        let inner_waker = Arc::new(Mutex::new(None::<Waker>));
        let mut gated = Gated::new(Counted {
            polls: polls.clone(),
            ready: ready.clone(),
            waker: inner_waker.clone(),
        });
        let task = Arc::new(Flag::default());
        let task_waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&task_waker);
        for _ in 0..5 {
            assert!(Pin::new(&mut gated).poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(SeqCst), 1, "re-polled without a wake");
        ready.store(true, SeqCst);
        inner_waker.lock().unwrap().take().unwrap().wake();
        assert!(task.woken.load(SeqCst), "the task was not woken");
        assert!(Pin::new(&mut gated).poll(&mut cx).is_ready());
        assert_eq!(polls.load(SeqCst), 2);
    }

    fn parse(format: StreamFormat, ptr: Option<&str>, chunks: &[&str]) -> Vec<String> {
        let mut p = Parser::new(format, ptr);
        let mut out = Vec::new();
        for c in chunks {
            p.push(&Bytes::copy_from_slice(c.as_bytes()), &mut |e| {
                out.push(e.map_or("ERR".to_owned(), str::to_owned))
            });
        }
        out
    }

    #[test]
    fn sse_events_by_field_and_by_pointer_across_chunk_boundaries() {
        let chunks = [
            ": keep-alive\n\nevent: move\ndata: {\"t\":",
            "\"a\"}\n\ndata: x\r",
            "\n\r\nevent: chat\ndata: 1\ndata: 2\n\nevent: empty\n\n",
        ];
        assert_eq!(
            parse(StreamFormat::Sse, None, &chunks),
            vec!["move", "message", "chat"]
        );
        assert_eq!(
            parse(StreamFormat::Sse, Some("/t"), &chunks),
            vec!["a", "ERR", "ERR"]
        );
    }

    #[test]
    fn ndjson_lines_and_chunks() {
        let chunks = [
            "{\"type\":\"move\"}\n{\"ty",
            "pe\":\"chat\"}\n\nnot json\n{\"type\":1}\n",
        ];
        assert_eq!(
            parse(StreamFormat::Ndjson, Some("/type"), &chunks),
            vec!["move", "chat", "ERR", "1"]
        );
        assert_eq!(
            parse(StreamFormat::Ndjson, None, &chunks),
            vec!["event", "event", "ERR", "event"]
        );
        assert_eq!(
            parse(StreamFormat::Chunks, None, &chunks),
            vec!["chunk", "chunk"]
        );
    }
}
