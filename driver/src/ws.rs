//! A player's WebSocket: one socket per player, held by a task of its own beside the
//! player's, so what the server pushes is read (and pings answered) while the player thinks.
//!
//! The player's ops reach the socket through a channel ([`Socket::call`]): the task writes
//! the op's frame, then hands back the first message that answers it — the next one, the one
//! whose JSON carries the same correlation id, or the pong of a ping — with the moment it
//! arrived, so the op's latency is send → reply. Messages that answer no op are the pushes:
//! counted by type as the events of the target's stream op, if it has one.
//!
//! The socket opens at the player's first op, or at once when a stream op holds it; an
//! opening is a connect (or a reconnect), not an op: the stream op counts it as `opened`,
//! and the pushes as its events. A Close
//! from the server under an op is that op's outcome (`ws_<close code>`); a connection that
//! ends without one is `transport_error.reset`. Either way the socket reopens (at once for a
//! held one, with the connect backoff after failures; else at the next op), and the reopening
//! counts as a reconnect. A refused upgrade is its HTTP status's outcome (`http_4xx`), a
//! botched one `transport_error.protocol`. At the player's end the socket closes with 1001
//! (going away), within a second.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use bytes::Bytes;
use herd_http::ws::{
    self, Close, CloseCode, ConnectError, DEFAULT_MAX_MESSAGE, Handshake, Masks, Message, Opcode,
    Stream,
};
use herd_model::{Outcome, TransportErrorKind};
use http::{HeaderMap, HeaderValue};
use tokio::sync::{mpsc, oneshot, watch};

use crate::{
    conns::backoff,
    outcome::{domain_code, judge, needs_json},
    player::{Session, Shared},
    scenario::{Op, OpKind, WsFrame, WsReply, WsSend},
    template::Vars,
};

/// How long the closing handshake at a player's end may take.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// A handle on a player's socket task.
pub(crate) struct Socket {
    cmds: mpsc::UnboundedSender<Cmd>,
}

/// One op for the socket: a frame to send and what answers it.
struct Cmd {
    opcode: Opcode,
    payload: Bytes,
    want: Want,
    timeout: Duration,
    done: oneshot::Sender<Answer>,
}

/// What answers an op.
enum Want {
    None,
    Next,
    Pong(Bytes),
    Correlate(String, serde_json::Value),
}

/// How an op on the socket ended.
pub(crate) enum Answer {
    /// The message that answered it, and when it arrived.
    Reply { data: Bytes, at: Instant },
    /// Written, with no reply to wait for.
    Sent { at: Instant },
    /// The server closed the socket under it, with this code.
    Closed(CloseCode),
    /// It failed with this outcome (the socket did not open, or broke).
    Failed(Outcome),
}

impl Socket {
    /// Starts the socket task of a player with variables `vars` (its URL's and headers'
    /// values); the socket opens now if the target has a stream op, else at the first op.
    pub fn start(
        shared: Arc<Shared>,
        vars: &Vars,
        halt: watch::Receiver<bool>,
        retire: Option<watch::Receiver<bool>>,
    ) -> Self {
        let scenario = &shared.scenario;
        let target = scenario.target.ws.as_ref().expect("a WebSocket target");
        let path = target.path.render(vars).unwrap_or_else(|_| "/".to_owned());
        let mut headers = HeaderMap::with_capacity(target.headers.len());
        for (name, t) in &target.headers {
            if let Some(v) = t
                .render(vars)
                .ok()
                .and_then(|v| HeaderValue::from_str(&v).ok())
            {
                headers.insert(name.clone(), v);
            }
        }
        let stream_op = scenario.ops.iter().position(|o| o.kind.is_background());
        let subscribe = stream_op
            .and_then(|i| scenario.ops[i].body.as_ref())
            .and_then(|b| b.render(vars).ok())
            .map(Bytes::from);
        let (tx, rx) = mpsc::unbounded_channel();
        let task = Task {
            shared: shared.clone(),
            halt,
            retire,
            path,
            headers,
            stream_op,
            subscribe,
            cmds: rx,
            opened_before: false,
            failures: 0,
            failed_at: None,
            opened_at: None,
            first_seen: false,
            ended_at: None,
        };
        tokio::spawn(task.run());
        Self { cmds: tx }
    }

    /// Sends op `op`'s frame (`message`) and waits for what answers it.
    pub async fn call(&mut self, send: &WsSend, message: Bytes, timeout: Duration) -> Answer {
        let (opcode, want) = match (send.frame, &send.reply) {
            (WsFrame::Ping, _) => (Opcode::Ping, Want::Pong(message.clone())),
            (f, WsReply::None) => (opcode(f), Want::None),
            (f, WsReply::Next) => (opcode(f), Want::Next),
            (f, WsReply::Correlate(ptr)) => {
                let id = serde_json::from_slice::<serde_json::Value>(&message)
                    .ok()
                    .and_then(|v| v.pointer(ptr).cloned());
                let Some(id) = id else {
                    // The message carries no correlation id: no reply could match it.
                    return Answer::Failed(Outcome::VarMissing);
                };
                (opcode(f), Want::Correlate(ptr.clone(), id))
            }
        };
        let (done, answer) = oneshot::channel();
        let cmd = Cmd {
            opcode,
            payload: message,
            want,
            timeout,
            done,
        };
        if self.cmds.send(cmd).is_err() {
            return Answer::Failed(Outcome::Cancelled);
        }
        answer.await.unwrap_or(Answer::Failed(Outcome::Cancelled))
    }
}

fn opcode(f: WsFrame) -> Opcode {
    match f {
        WsFrame::Text => Opcode::Text,
        WsFrame::Binary => Opcode::Binary,
        WsFrame::Ping => Opcode::Ping,
    }
}

impl Session {
    /// The frame op `o` sends for this player: its body rendered (empty for a ping without
    /// one); `None` if a variable it reads is missing.
    pub(crate) fn ws_message(&self, o: &Op) -> Option<Bytes> {
        match &o.body {
            Some(t) => t.render(&self.vars).ok().map(Bytes::from),
            None => Some(Bytes::new()),
        }
    }

    /// Starts this player's socket if the target is a WebSocket one with a stream op (the
    /// pushes), which holds the socket open from the start.
    pub(crate) fn hold_socket(&mut self) -> bool {
        let shared = self.shared.clone();
        if self.ws.is_some() || !shared.scenario.ops.iter().any(|o| o.kind.is_background()) {
            return false;
        }
        self.ws = Some(Socket::start(
            shared,
            &self.vars,
            self.halt.clone(),
            self.retire.clone(),
        ));
        true
    }
}

/// Judges an op's answer: a reply by the op's code pointer, checks and captures (on its
/// JSON, or its bytes for sha256); returns the outcome, the reply's bytes and when it
/// arrived (the end of the op's latency).
pub(crate) fn judge_answer(
    op: &Op,
    answer: Answer,
    vars: &mut Vars,
) -> (Outcome, Bytes, Option<Instant>) {
    match answer {
        Answer::Reply { data, at } => {
            let json: Option<serde_json::Value> = if needs_json(op) {
                serde_json::from_slice(&data).ok()
            } else {
                None
            };
            let outcome = domain_code(op, json.as_ref())
                .unwrap_or_else(|| judge(op, json.as_ref(), &data, None, vars));
            (outcome, data, Some(at))
        }
        Answer::Sent { at } => (Outcome::Ok, Bytes::new(), Some(at)),
        Answer::Closed(code) => (Outcome::WsClose(code.0), Bytes::new(), None),
        Answer::Failed(o) => (o, Bytes::new(), None),
    }
}

/// The op waiting for its reply.
struct Pending {
    want: Want,
    done: oneshot::Sender<Answer>,
}

struct Task {
    shared: Arc<Shared>,
    /// The player's stop: a held socket is not reopened once it is stopping.
    halt: watch::Receiver<bool>,
    retire: Option<watch::Receiver<bool>>,
    path: String,
    headers: HeaderMap,
    /// The op counting pushes, which also holds the socket open.
    stream_op: Option<usize>,
    /// The stream op's body: sent as text each time the socket opens.
    subscribe: Option<Bytes>,
    cmds: mpsc::UnboundedReceiver<Cmd>,
    opened_before: bool,
    /// Consecutive failed opens, and when the last one failed.
    failures: u32,
    failed_at: Option<Instant>,
    /// When the open socket's upgrade was sent, and whether a push has come on it since.
    opened_at: Option<Instant>,
    first_seen: bool,
    /// When the socket last ended (closed, dropped, failed).
    ended_at: Option<Instant>,
}

type WsSocket = ws::Socket<Stream>;

impl Task {
    async fn run(mut self) {
        let mut sock: Option<WsSocket> = None;
        let mut pending: Option<Pending> = None;
        let mut halt = self.halt.clone();
        loop {
            // A held socket (a stream op's) reopens by itself, after the stream's reconnect
            // pause and the connect backoff, until the player is stopping; one only ops use
            // waits for the next op.
            let reopen = (sock.is_none() && self.stream_op.is_some() && !self.stopping())
                .then(|| self.reopen_at());
            // The player's end (its session dropped) ends the task: not the run's stop, under
            // which an op in flight still gets its reply within the grace.
            tokio::select! {
                cmd = self.cmds.recv() => {
                    let Some(cmd) = cmd else { break };
                    pending = self.command(&mut sock, cmd).await;
                }
                r = recv(&mut sock) => {
                    self.message(&mut sock, &mut pending, r);
                }
                () = sleep_until(reopen) => {
                    if let Ok(s) = self.open().await {
                        sock = Some(s);
                    }
                }
                // Only to look at `reopen` again.
                _ = halt.changed(), if reopen.is_some() => {}
            }
        }
        if let Some(mut s) = sock {
            let _ =
                tokio::time::timeout(CLOSE_WAIT, s.close(Close::new(CloseCode::GOING_AWAY, "")))
                    .await;
        }
    }

    fn stopping(&self) -> bool {
        *self.halt.borrow() || self.retire.as_ref().is_some_and(|r| *r.borrow())
    }

    /// When a held socket may reopen: after the stream op's reconnect pause since it ended,
    /// and after the connect backoff since the last failed open.
    fn reopen_at(&self) -> Instant {
        let now = Instant::now();
        let after_end = match (self.ended_at, self.stream_op) {
            (Some(at), Some(op)) => match &self.shared.scenario.ops[op].kind {
                OpKind::Stream { reconnect, .. } => at + reconnect.min,
                _ => at,
            },
            _ => now,
        };
        let after_failure = self.failed_at.map_or(now, |at| at + backoff(self.failures));
        after_end.max(after_failure)
    }

    /// Opens the socket: counted as a connect (a reconnect after the first), its failure
    /// as a connect error and, with a stream op, as that op's sample.
    async fn open(&mut self) -> Result<WsSocket, Outcome> {
        let counters = &self.shared.counters;
        let connector = self
            .shared
            .ws
            .as_ref()
            .expect("a WebSocket target's connector");
        // When the upgrade is sent: the first push's latency counts from here.
        let started = Instant::now();
        let mut masks = Masks::new();
        let target = self
            .shared
            .scenario
            .target
            .ws
            .as_ref()
            .expect("a WebSocket target");
        let r = async {
            let hs = Handshake::new(connector.authority(), &self.path, &mut masks)
                .and_then(|h| h.protocols(target.subprotocols.clone()))
                .map_err(ConnectError::Handshake)?
                .headers(self.headers.clone());
            connector.connect(&hs, masks, DEFAULT_MAX_MESSAGE).await
        }
        .await;
        use std::sync::atomic::Ordering::SeqCst;
        match r {
            Ok((mut sock, _)) => {
                counters.connects.fetch_add(1, SeqCst);
                if std::mem::replace(&mut self.opened_before, true) {
                    counters.reconnects.fetch_add(1, SeqCst);
                    if let Some(op) = self.stream_op {
                        self.shared.play.reconnect(op);
                    }
                }
                self.failures = 0;
                self.failed_at = None;
                self.opened_at = Some(started);
                self.first_seen = false;
                if let Some(op) = self.stream_op {
                    self.shared.play.opened(op);
                    if let Some(body) = &self.subscribe {
                        let text = String::from_utf8_lossy(body);
                        if let Err(e) = sock.send_text(&text).await {
                            let o = broken(&e);
                            self.shared.play.error(op, &o.name());
                            return Err(o);
                        }
                    }
                }
                Ok(sock)
            }
            Err(e) => {
                counters.connect_errors.fetch_add(1, SeqCst);
                self.failures = self.failures.saturating_add(1);
                self.failed_at = Some(Instant::now());
                let o = match &e {
                    ConnectError::Transport(t) => crate::transport::outcome(t),
                    ConnectError::Handshake(ws::Error::Refused { status, .. }) => {
                        crate::grpc::http_status_outcome(*status)
                    }
                    ConnectError::Handshake(_) => {
                        Outcome::TransportError(TransportErrorKind::Protocol)
                    }
                };
                if let Some(op) = self.stream_op {
                    self.shared.play.error(op, &o.name());
                }
                Err(o)
            }
        }
    }

    /// Sends an op's frame; returns the op if it waits for a reply.
    async fn command(&mut self, sock: &mut Option<WsSocket>, cmd: Cmd) -> Option<Pending> {
        if sock.is_none() {
            if let Some(at) = self.failed_at {
                tokio::time::sleep_until((at + backoff(self.failures)).into()).await;
            }
            match self.open().await {
                Ok(s) => *sock = Some(s),
                Err(o) => {
                    let _ = cmd.done.send(Answer::Failed(o));
                    return None;
                }
            }
        }
        let s = sock.as_mut().expect("opened above");
        // A send cannot be given up half-way (the frame would be cut): on its timeout the
        // socket goes.
        match tokio::time::timeout(cmd.timeout, s.send(cmd.opcode, &cmd.payload)).await {
            Err(_) => {
                *sock = None;
                self.ended(None);
                let _ = cmd.done.send(Answer::Failed(Outcome::Timeout));
                None
            }
            Ok(Err(e)) => {
                *sock = None;
                self.ended(None);
                let _ = cmd.done.send(Answer::Failed(broken(&e)));
                None
            }
            Ok(Ok(())) => match cmd.want {
                Want::None => {
                    let _ = cmd.done.send(Answer::Sent { at: Instant::now() });
                    None
                }
                want => Some(Pending {
                    want,
                    done: cmd.done,
                }),
            },
        }
    }

    /// What the socket read: a reply, a push, or its end.
    fn message(
        &mut self,
        sock: &mut Option<WsSocket>,
        pending: &mut Option<Pending>,
        r: Result<Message, ws::Error>,
    ) {
        if let Some(s) = sock.as_mut() {
            s.shrink();
        }
        // An op given up (its timeout) is waited for no more.
        if pending.as_ref().is_some_and(|p| p.done.is_closed()) {
            *pending = None;
        }
        let at = Instant::now();
        match r {
            Ok(Message::Text(t)) => self.data(pending, Bytes::from(t), at),
            Ok(Message::Binary(b)) => self.data(pending, b, at),
            Ok(Message::Ping(_)) => {} // answered by the socket
            Ok(Message::Pong(p)) => {
                if matches!(pending.as_ref().map(|p| &p.want), Some(Want::Pong(want)) if *want == p)
                {
                    let p = pending.take().expect("checked");
                    let _ = p.done.send(Answer::Reply {
                        data: Bytes::new(),
                        at,
                    });
                }
            }
            Ok(Message::Close(c)) => {
                *sock = None;
                match pending.take() {
                    Some(p) => {
                        self.ended(None);
                        let _ = p.done.send(Answer::Closed(c.code));
                    }
                    None => self.ended(Some(&Outcome::WsClose(c.code.0).name())),
                }
            }
            Err(e) => {
                *sock = None;
                let o = broken(&e);
                match pending.take() {
                    Some(p) => {
                        self.ended(None);
                        let _ = p.done.send(Answer::Failed(o));
                    }
                    None => self.ended(Some(&o.name())),
                }
            }
        }
    }

    /// A text or binary message: the pending op's reply if it answers it, else a push.
    fn data(&mut self, pending: &mut Option<Pending>, data: Bytes, at: Instant) {
        let answers = match pending.as_ref().map(|p| &p.want) {
            Some(Want::Next) => true,
            Some(Want::Correlate(ptr, id)) => serde_json::from_slice::<serde_json::Value>(&data)
                .ok()
                .is_some_and(|v| v.pointer(ptr) == Some(id)),
            _ => false,
        };
        if answers {
            let p = pending.take().expect("checked");
            let _ = p.done.send(Answer::Reply { data, at });
            return;
        }
        let Some(op) = self.stream_op else {
            return;
        };
        let play = &self.shared.play;
        if !self.first_seen
            && let Some(opened) = self.opened_at
        {
            self.first_seen = true;
            play.first_event(op, at.saturating_duration_since(opened).as_micros() as u64);
        }
        let event_type = match &self.shared.scenario.ops[op].kind {
            OpKind::Stream { event_type, .. } => event_type.as_deref(),
            _ => None,
        };
        match event_type {
            None => play.event(op, "message"),
            Some(ptr) => {
                let kind = serde_json::from_slice::<serde_json::Value>(&data)
                    .ok()
                    .and_then(|v| v.pointer(ptr).and_then(scalar));
                match kind {
                    Some(k) => play.event(op, &k),
                    None => play.error(op, "bad_event"),
                }
            }
        }
    }

    /// The socket ended. How (by outcome name), when no op was waiting on it to take that
    /// as its outcome: an error of the stream op's, if it holds the socket.
    fn ended(&mut self, class: Option<&str>) {
        self.opened_at = None;
        self.ended_at = Some(Instant::now());
        if let (Some(op), Some(class)) = (self.stream_op, class) {
            self.shared.play.error(op, class);
        }
    }
}

/// Sleeps until `at`; never without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// The next message of the open socket, read only once bytes are there (so a socket that
/// waits holds no read buffer); never, without a socket.
async fn recv(sock: &mut Option<WsSocket>) -> Result<Message, ws::Error> {
    let Some(s) = sock.as_mut() else {
        return std::future::pending().await;
    };
    if s.buffered() == 0 {
        s.get_ref()
            .readable()
            .await
            .map_err(|e| ws::Error::Io(e.to_string()))?;
    }
    s.recv().await
}

/// The outcome of a socket that broke: a connection that ended without a Close is a
/// reset, anything wrong in the server's bytes a protocol error.
fn broken(e: &ws::Error) -> Outcome {
    match e {
        ws::Error::Dropped | ws::Error::Io(_) | ws::Error::Closed => {
            Outcome::TransportError(TransportErrorKind::Reset)
        }
        _ => Outcome::TransportError(TransportErrorKind::Protocol),
    }
}

fn scalar(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}
