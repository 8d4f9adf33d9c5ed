//! A player's gRPC calls on herd's HTTP/2 client: the request built from the op (metadata
//! from its headers, `grpc-timeout` from its timeout, messages from its JSON templates), the
//! exchange on the player's connection (the body whole, or message by message after the
//! head for a paced or lock-step stream), and the answer judged: `grpc-status` from the
//! trailers or a Trailers-Only head, then the op's checks and captures on the response as
//! JSON.
//!
//! Outcomes: `ok`; `grpc_<code>` for any other status, but deadline exceeded, which is
//! `timeout` as the client's own deadline is; a non-200 without `grpc-status` (a proxy's
//! answer) by its HTTP status; a response that is not gRPC, or whose messages do not decode
//! as the method's output, `transport_error.protocol`; connection failures as for HTTP.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use herd_http::{
    Duplex, Request, Transport, TransportError,
    grpc::{self, Code, DEFAULT_MAX_MESSAGE, Decoder, Head, Streaming},
};
use herd_model::{Outcome, TransportErrorKind};
use http::{HeaderMap, HeaderValue};

use crate::{
    conns::Conns,
    measure::aggregator::Counters,
    outcome::{domain_code, judge, needs_json},
    scenario::{GrpcCall, GrpcTarget, Op},
    template::Vars,
};

/// How a call ended, as read from the wire: its messages and status, or what was wrong
/// with its response.
pub(crate) type Answer = Result<grpc::Reply, grpc::Error>;

/// The call's request messages for this player, framed; `None` if a variable is missing or
/// the rendered JSON does not make the message (nothing is sent: `var_missing`).
pub(crate) fn frames(call: &GrpcCall, target: &GrpcTarget, vars: &Vars) -> Option<Vec<Bytes>> {
    call.messages
        .iter()
        .zip(&call.fixed)
        .map(|(t, fixed)| match fixed {
            Some(f) => Some(f.clone()),
            None => {
                let json = t.render(vars).ok()?;
                crate::scenario::encode_message(&call.method, target.compression, &json).ok()
            }
        })
        .collect()
}

/// The call's request head: `POST /package.Service/Method`, gRPC's headers, the op's
/// headers as metadata, and `deadline` as `grpc-timeout`. `None` if a header reads a
/// variable the player lacks.
pub(crate) fn request(
    op: &Op,
    call: &GrpcCall,
    target: &GrpcTarget,
    vars: &Vars,
    deadline: Option<Duration>,
) -> Option<Request> {
    let mut metadata = HeaderMap::with_capacity(op.headers.len());
    for (name, t) in &op.headers {
        let v = t.render(vars).ok()?;
        metadata.insert(name.clone(), HeaderValue::from_str(&v).ok()?);
    }
    Some(Request {
        method: http::Method::POST,
        path: call.method.path(),
        headers: grpc::request_headers(deadline, target.compression, &metadata),
        body: Bytes::new(),
    })
}

/// Runs one call on the player's connection.
pub(crate) async fn exchange(
    conns: &mut Conns,
    transport: &dyn Transport,
    counters: &Counters,
    call: &GrpcCall,
    mut req: Request,
    frames: Vec<Bytes>,
) -> Result<Answer, TransportError> {
    if !call.streams_body() {
        let mut body = BytesMut::with_capacity(frames.iter().map(Bytes::len).sum::<usize>());
        for _ in 0..call.repeat {
            for f in &frames {
                body.extend_from_slice(f);
            }
        }
        req.body = body.freeze();
        let r = conns.send(transport, counters, req).await?;
        return Ok(grpc::read_response(
            r.status,
            &r.headers.as_map(),
            &r.body,
            r.trailers.as_ref(),
            DEFAULT_MAX_MESSAGE,
        ));
    }
    let duplex = conns.duplex(transport, counters, req).await?;
    let outgoing = (0..call.repeat).flat_map(|_| frames.iter().cloned());
    if call.lockstep {
        lockstep(duplex, outgoing, call.interval).await
    } else {
        paced(duplex, outgoing, call.interval).await
    }
}

/// A bidi call in lock step: each message goes out once the answers have caught up with
/// the messages sent (after `interval`), the body ends after the last one's answer.
async fn lockstep(
    duplex: Duplex,
    mut outgoing: impl Iterator<Item = Bytes>,
    interval: Duration,
) -> Result<Answer, TransportError> {
    let Duplex { mut send, response } = duplex;
    let mut sent = 0;
    match outgoing.next() {
        Some(f) => {
            // A failed send is the server ending the call: its status says why.
            if send.send(f).is_ok() {
                sent = 1;
            }
        }
        None => {
            let _ = send.finish();
        }
    }
    let mut done = sent == 0;
    let mut s = response.head().await?;
    let mut incoming = match Incoming::new(&s) {
        Ok(i) => i,
        Err(answer) => return Ok(answer),
    };
    while let Some(chunk) = s.body.chunk().await {
        incoming.decoder.push(&chunk?);
        loop {
            match incoming.decoder.next() {
                Ok(Some(m)) => incoming.messages.push(m),
                Ok(None) => break,
                Err(e) => return Ok(incoming.failed(e)),
            }
            if !done && incoming.messages.len() >= sent {
                match outgoing.next() {
                    Some(f) => {
                        if !interval.is_zero() {
                            tokio::time::sleep(interval).await;
                        }
                        if send.send(f).is_ok() {
                            sent += 1;
                        } else {
                            done = true;
                        }
                    }
                    None => {
                        let _ = send.finish();
                        done = true;
                    }
                }
            }
        }
    }
    Ok(incoming.end(s.body.trailers()))
}

/// A client or bidi call whose messages go out `interval` apart while its answers are read.
async fn paced(
    duplex: Duplex,
    outgoing: impl Iterator<Item = Bytes>,
    interval: Duration,
) -> Result<Answer, TransportError> {
    let Duplex { mut send, response } = duplex;
    let sending = async move {
        for (k, f) in outgoing.enumerate() {
            if k > 0 {
                tokio::time::sleep(interval).await;
            }
            if send.send(f).is_err() {
                // The server ended the call: the answer says why; the body is dropped
                // unfinished, which resets what is left of the stream.
                return;
            }
        }
        let _ = send.finish();
    };
    let receiving = async move {
        let mut s = response.head().await?;
        let mut incoming = match Incoming::new(&s) {
            Ok(i) => i,
            Err(answer) => return Ok(answer),
        };
        while let Some(chunk) = s.body.chunk().await {
            incoming.decoder.push(&chunk?);
            loop {
                match incoming.decoder.next() {
                    Ok(Some(m)) => incoming.messages.push(m),
                    Ok(None) => break,
                    Err(e) => return Ok(incoming.failed(e)),
                }
            }
        }
        Ok(incoming.end(s.body.trailers()))
    };
    let ((), answer) = tokio::join!(sending, receiving);
    answer
}

/// A response being read message by message.
struct Incoming {
    decoder: Decoder,
    messages: Vec<Bytes>,
}

impl Incoming {
    /// Reads the head: messages follow, or the call is over (Trailers-Only, or not gRPC).
    fn new(s: &herd_http::Streaming) -> Result<Self, Answer> {
        match grpc::head(s.status, &s.headers) {
            Ok(Head::Messages(encoding)) => Ok(Self {
                decoder: Decoder::new(DEFAULT_MAX_MESSAGE, encoding),
                messages: Vec::new(),
            }),
            Ok(Head::TrailersOnly(status)) => Err(Ok(grpc::Reply {
                messages: Vec::new(),
                status,
            })),
            Err(e) => Err(Err(e)),
        }
    }

    fn failed(self, e: grpc::Error) -> Answer {
        Err(e)
    }

    fn end(self, trailers: Option<HeaderMap>) -> Answer {
        self.decoder.finish()?;
        let status = grpc::Status::from_trailers(trailers.as_ref().ok_or(grpc::Error::NoStatus)?)?;
        Ok(grpc::Reply {
            messages: self.messages,
            status,
        })
    }
}

/// The outcome of a call that ended with `status`, other than ok: deadline exceeded is a
/// timeout, whoever's clock ran out; every other code is `grpc_<code>`.
pub(crate) fn status_outcome(code: Code) -> Outcome {
    match code {
        Code::Ok => Outcome::Ok,
        Code::DeadlineExceeded => Outcome::Timeout,
        c => Outcome::Grpc(c.number() as u8),
    }
}

/// The outcome of a response that was not a gRPC call's answer: a proxy's HTTP status by
/// its class (a 429 is `rate_limited`), anything else the server's malformed bytes.
pub(crate) fn error_outcome(e: &grpc::Error) -> (Outcome, Option<u16>) {
    match e {
        grpc::Error::HttpStatus { status, .. } => (http_status_outcome(*status), Some(*status)),
        _ => (Outcome::TransportError(TransportErrorKind::Protocol), None),
    }
}

/// An HTTP status where a gRPC answer or a WebSocket upgrade was due: `rate_limited` for a
/// 429, else its class.
pub(crate) fn http_status_outcome(status: u16) -> Outcome {
    if status == 429 {
        Outcome::RateLimited
    } else {
        Outcome::Http((status / 100) as u8)
    }
}

/// Judges a call's answer for `op`: its status, then (for `ok`) the response read as JSON
/// by the op's code pointer, checks and captures. Returns the outcome, the HTTP status
/// worth recording (a proxy's), and the response as JSON text when `want_body` (a chain or
/// a group reads it).
pub(crate) fn judge_answer(
    op: &Op,
    call: &GrpcCall,
    target: &GrpcTarget,
    answer: Answer,
    vars: &mut Vars,
    want_body: bool,
) -> (Outcome, Option<u16>, Bytes) {
    let reply = match answer {
        Ok(r) => r,
        Err(e) => {
            let (o, status) = error_outcome(&e);
            return (o, status, Bytes::new());
        }
    };
    if reply.status.code != Code::Ok {
        return (status_outcome(reply.status.code), None, Bytes::new());
    }
    let protocol = || {
        (
            Outcome::TransportError(TransportErrorKind::Protocol),
            None,
            Bytes::new(),
        )
    };
    let one = matches!(
        call.method.streaming(),
        Streaming::Unary | Streaming::Client
    );
    if one && reply.messages.len() != 1 {
        // A unary answer is one message (grpc-go's "cardinality violation").
        return protocol();
    }
    if !needs_json(op) && !want_body {
        let valid = reply
            .messages
            .iter()
            .all(|m| call.method.check_response(m).is_ok());
        return if valid {
            (Outcome::Ok, None, Bytes::new())
        } else {
            protocol()
        };
    }
    let decoded: Result<Vec<serde_json::Value>, _> = reply
        .messages
        .iter()
        .map(|m| call.method.decode_response(m, target.json))
        .collect();
    let Ok(mut decoded) = decoded else {
        return protocol();
    };
    let json = if one {
        decoded.pop().expect("one message")
    } else {
        serde_json::Value::Array(decoded)
    };
    let outcome =
        domain_code(op, Some(&json)).unwrap_or_else(|| judge(op, Some(&json), &[], None, vars));
    let body = if want_body {
        Bytes::from(serde_json::to_vec(&json).expect("JSON values serialise"))
    } else {
        Bytes::new()
    };
    (outcome, None, body)
}
