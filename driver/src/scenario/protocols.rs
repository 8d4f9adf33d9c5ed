//! What gRPC and WebSocket targets add to a scenario: `[target]`'s `.proto` files,
//! compression and JSON field names (gRPC), subprotocols and handshake headers
//! (WebSocket), and each op's `call` and messages (gRPC) or frame and reply (WebSocket).
//! The `.proto` files compile when the scenario loads, so a mistake in them, an unknown
//! method or a request body that does not fit its message is an error at a line of the
//! file (exit 2), never a failure in the middle of a run.

use std::{collections::BTreeMap, time::Duration};

use bytes::Bytes;
use herd_http::grpc::{self, Encoding, JsonOptions, Method, Protos, Streaming};
use http::{HeaderName, HeaderValue};

use super::{Connections, Invalid, OpKind, Seg, TransportKind, at, key, pointer};
use crate::template::{Template, VarNames, Vars};

/// A gRPC target's `.proto` files and how messages travel.
#[derive(Debug, Clone)]
pub struct GrpcTarget {
    /// The compiled `.proto` files.
    pub protos: Protos,
    /// How request messages are compressed (`compression = "gzip"`); responses may be
    /// gzip-compressed whatever this says.
    pub compression: Encoding,
    /// How response messages read as JSON (`field_names`).
    pub json: JsonOptions,
}

/// A WebSocket target: what the upgrade asks for.
#[derive(Debug, Clone)]
pub struct WsTarget {
    /// The socket's path and query (from the URL; may read variables, e.g. `?player={player}`).
    pub path: Template,
    /// Subprotocols offered, in order of preference.
    pub subprotocols: Vec<String>,
    /// Headers of the upgrade request (`Origin`, `Authorization`); values are templates.
    pub headers: Vec<(HeaderName, Template)>,
}

/// What an op sends, by the target's protocol.
#[derive(Debug, Clone)]
pub enum Call {
    /// An HTTP request: the op's method, path, headers and body.
    Http,
    /// A gRPC call.
    Grpc(Box<GrpcCall>),
    /// A WebSocket message on the player's socket.
    Ws(WsSend),
}

/// One gRPC call: the method and the request messages it sends.
#[derive(Debug, Clone)]
pub struct GrpcCall {
    /// The method.
    pub method: Method,
    /// The request messages as JSON templates, in order: one for a unary or
    /// server-streaming call (`body`), any number for a client or bidi stream (`messages`).
    pub messages: Vec<Template>,
    /// Each message framed (and compressed) once when the scenario loads, where its
    /// template reads nothing that changes.
    pub fixed: Vec<Option<Bytes>>,
    /// Times the messages are sent over, in order (client and bidi streams).
    pub repeat: u32,
    /// Pause between two messages sent (client and bidi streams).
    pub interval: Duration,
    /// Bidi: each message waits for the server's answer to the one before.
    pub lockstep: bool,
}

impl GrpcCall {
    /// True when the request body goes out after the call's head, message by message: a
    /// paced or lock-step stream. Otherwise it is sent whole, as one request body.
    pub fn streams_body(&self) -> bool {
        self.lockstep || !self.interval.is_zero()
    }

    /// Messages sent in all.
    pub fn count(&self) -> usize {
        self.messages.len() * self.repeat as usize
    }
}

/// A WebSocket op: the frame it sends and the reply it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WsSend {
    /// The frame's type.
    pub frame: WsFrame,
    /// What answers it.
    pub reply: WsReply,
}

/// The type of frame a WebSocket op sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsFrame {
    /// A text message (the body, UTF-8).
    Text,
    /// A binary message (the body's bytes).
    Binary,
    /// A ping (the body as its payload, up to 125 bytes); its pong is the reply.
    Ping,
}

/// Which message answers a WebSocket op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsReply {
    /// The next message that arrives.
    Next,
    /// None: the op is done once its frame is written.
    None,
    /// The first message whose JSON value at this pointer equals the sent message's (a
    /// correlation id).
    Correlate(String),
}

/// `[target]`'s gRPC keys, as written.
pub(super) struct RawGrpcTarget {
    pub proto: Option<Vec<String>>,
    pub proto_path: Vec<String>,
    pub compression: Option<String>,
    pub field_names: Option<String>,
}

/// Compiles the `.proto` files of a gRPC target; `None` for other transports, whose file
/// may not name any.
pub(super) fn compile_grpc_target(
    file: &str,
    transport: TransportKind,
    raw: RawGrpcTarget,
) -> Result<Option<GrpcTarget>, Invalid> {
    let tp = |k: &str| vec![key("target"), key(k)];
    if transport != TransportKind::Grpc {
        for (set, k) in [
            (raw.proto.is_some(), "proto"),
            (!raw.proto_path.is_empty(), "proto_path"),
            (raw.compression.is_some(), "compression"),
            (raw.field_names.is_some(), "field_names"),
        ] {
            if set {
                return Err(at(
                    &tp(k),
                    format!(
                        "`{k}` is for gRPC targets (grpc:// or grpcs://); this one is {transport}"
                    ),
                ));
            }
        }
        return Ok(None);
    }
    let files: Vec<_> = raw
        .proto
        .unwrap_or_default()
        .iter()
        .map(|p| super::tls::relative_to(file, p))
        .collect();
    if files.is_empty() {
        return Err(at(
            &[key("target")],
            "a gRPC target needs its .proto files: proto = \"service.proto\" (or a list), beside the scenario or under proto_path",
        ));
    }
    let includes: Vec<_> = raw
        .proto_path
        .iter()
        .map(|p| super::tls::relative_to(file, p))
        .collect();
    let protos = Protos::compile(&files, &includes)
        .map_err(|e| at(&tp("proto"), format!("compiling the .proto files: {e}")))?;
    let compression = match raw.compression.as_deref() {
        None | Some("identity") | Some("none") => Encoding::Identity,
        Some("gzip") => Encoding::Gzip,
        Some(other) => {
            return Err(at(
                &tp("compression"),
                format!(
                    "`{other}`: herd compresses gRPC messages with \"gzip\" or not at all (\"identity\")"
                ),
            ));
        }
    };
    let proto_field_names = match raw.field_names.as_deref() {
        None | Some("json") => false,
        Some("proto") => true,
        Some(other) => {
            return Err(at(
                &tp("field_names"),
                format!(
                    "`{other}`: write \"json\" (proto3 JSON's lowerCamelCase, the default) or \"proto\" (the .proto's own names)"
                ),
            ));
        }
    };
    Ok(Some(GrpcTarget {
        protos,
        compression,
        json: JsonOptions { proto_field_names },
    }))
}

/// Checks `[target]`'s WebSocket keys; true when the target is a WebSocket's (its headers
/// are compiled once the file's variables are known).
pub(super) fn check_ws_target(
    transport: TransportKind,
    subprotocols: &[String],
    headers: Option<&BTreeMap<String, String>>,
    connections: Connections,
) -> Result<bool, Invalid> {
    let tp = |k: &str| vec![key("target"), key(k)];
    if transport != TransportKind::Ws {
        for (set, k) in [
            (!subprotocols.is_empty(), "subprotocols"),
            (headers.is_some(), "headers"),
        ] {
            if set {
                return Err(at(
                    &tp(k),
                    format!(
                        "`{k}` is for WebSocket targets (ws:// or wss://); this one is {transport}; an HTTP op sets its own headers"
                    ),
                ));
            }
        }
        return Ok(false);
    }
    if connections != Connections::PerPlayer {
        return Err(at(
            &tp("connections"),
            "each WebSocket player holds a socket of its own: leave connections out",
        ));
    }
    let token = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    if let Some(bad) = subprotocols.iter().find(|p| !token(p)) {
        return Err(at(
            &tp("subprotocols"),
            format!("`{bad}` is not a subprotocol name (an HTTP token: letters, digits, `.-_`)"),
        ));
    }
    Ok(true)
}

/// A WebSocket target's handshake headers and socket path, as templates.
pub(super) fn compile_ws_headers(
    target: &mut super::Target,
    headers: BTreeMap<String, String>,
    names: &mut VarNames,
) -> Result<(), Invalid> {
    let Some(ws) = target.ws.as_mut() else {
        return Ok(());
    };
    ws.path = Template::parse(&target.base_path, names)
        .map_err(|e| at(&[key("target"), key("url")], e.to_string()))?;
    for (k, v) in headers {
        let hp = [key("target"), key("headers"), key(&k)];
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| at(&hp, format!("`{k}` is not a valid header name")))?;
        if HeaderValue::from_str(&v).is_err() {
            return Err(at(&hp, "the value has characters a header cannot carry"));
        }
        let t = Template::parse(&v, names).map_err(|e| at(&hp, e.to_string()))?;
        ws.headers.push((name, t));
    }
    Ok(())
}

/// An op's protocol keys, as written.
pub(super) struct RawCall {
    pub method: Option<String>,
    pub path: Option<String>,
    pub call: Option<String>,
    pub messages: Option<Vec<String>>,
    pub repeat: Option<u32>,
    pub interval: Option<Duration>,
    pub lockstep: Option<bool>,
    pub frame: Option<String>,
    pub reply: Option<String>,
}

/// The keys of `raw` that are set, by name.
fn set_keys(raw: &RawCall, body: bool) -> Vec<(&'static str, bool)> {
    vec![
        ("method", raw.method.is_some()),
        ("path", raw.path.is_some()),
        ("call", raw.call.is_some()),
        ("messages", raw.messages.is_some()),
        ("repeat", raw.repeat.is_some()),
        ("interval", raw.interval.is_some()),
        ("lockstep", raw.lockstep.is_some()),
        ("frame", raw.frame.is_some()),
        ("reply", raw.reply.is_some()),
        ("body", body),
    ]
}

/// Refuses the keys in `not` that are set, saying what the target's ops use instead.
fn refuse(
    raw: &RawCall,
    not: &[&str],
    why: &str,
    here: &dyn Fn(&str) -> Vec<Seg>,
) -> Result<(), Invalid> {
    for (k, set) in set_keys(raw, false) {
        if set && not.contains(&k) {
            return Err(at(&here(k), format!("`{k}`: {why}")));
        }
    }
    Ok(())
}

/// The op's call on the target: for gRPC the method and its messages (the body for one),
/// for WebSocket the frame and reply; the HTTP method and path come back for HTTP ops, and
/// gRPC's POST to `/package.Service/Method` for gRPC.
pub(super) fn compile_call(
    target: &super::Target,
    raw: RawCall,
    body: Option<Template>,
    kind: &OpKind,
    names: &mut VarNames,
    here: &dyn Fn(&str) -> Vec<Seg>,
) -> Result<(Call, http::Method, Template, Option<Template>), Invalid> {
    match target.transport {
        TransportKind::Grpc => {
            let grpc = target.grpc.as_ref().expect("a gRPC target has its protos");
            refuse(
                &raw,
                &["method", "path", "frame", "reply"],
                "a gRPC op names its method with call = \"package.Service/Method\" and sends messages, not paths or frames",
                here,
            )?;
            let name = raw.call.clone().ok_or_else(|| {
                at(
                    &here("call"),
                    format!(
                        "a gRPC op needs call = \"package.Service/Method\"; the .proto files define {}",
                        grpc.protos.services().join(", ")
                    ),
                )
            })?;
            let method = grpc
                .protos
                .method(&name)
                .map_err(|e| at(&here("call"), e.to_string()))?;
            let streaming = method.streaming();
            let many = matches!(streaming, Streaming::Client | Streaming::Bidi);
            if !many {
                refuse(
                    &raw,
                    &["messages", "repeat", "interval", "lockstep"],
                    &format!(
                        "`{}` is a {} call: it sends one message, its body",
                        method.name(),
                        streaming.name().replace('_', "-")
                    ),
                    here,
                )?;
            }
            if raw.lockstep.is_some() && streaming != Streaming::Bidi {
                return Err(at(
                    &here("lockstep"),
                    "lockstep waits for each answer before the next message: a bidi call's",
                ));
            }
            let messages = match (raw.messages, body) {
                (Some(_), Some(_)) => {
                    return Err(at(
                        &here("messages"),
                        "set messages (a list) or body (one message), not both",
                    ));
                }
                (Some(list), None) => list
                    .iter()
                    .enumerate()
                    .map(|(k, m)| {
                        let mut path = here("messages");
                        path.push(Seg::Index(k));
                        Template::parse(m, names).map_err(|e| at(&path, e.to_string()))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                (None, Some(b)) => vec![b],
                (None, None) => vec![Template::literal("{}")],
            };
            match kind {
                OpKind::Request => {}
                OpKind::Stream { .. }
                    if matches!(streaming, Streaming::Server | Streaming::Bidi) => {}
                OpKind::Stream { .. } => {
                    return Err(at(
                        &here("kind"),
                        format!(
                            "`{}` is a {} call: a stream op needs one whose server streams (server-streaming or bidi)",
                            method.name(),
                            streaming.name().replace('_', "-")
                        ),
                    ));
                }
                OpKind::LongPoll { .. } => {
                    return Err(at(
                        &here("kind"),
                        "a gRPC call is a request or a stream, not a long poll",
                    ));
                }
            }
            let repeat = raw.repeat.unwrap_or(1);
            if repeat == 0 {
                return Err(at(&here("repeat"), "must be at least 1"));
            }
            let fixed = messages
                .iter()
                .enumerate()
                .map(|(k, t)| {
                    if !t.is_constant() {
                        return Ok(None);
                    }
                    let json = t.render(&Vars::default()).expect("a constant template");
                    let path = if messages.len() > 1 || many {
                        let mut p = here("messages");
                        p.push(Seg::Index(k));
                        p
                    } else {
                        here("body")
                    };
                    encode(&method, grpc.compression, &json)
                        .map(Some)
                        .map_err(|m| at(&path, m))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let path = Template::literal(&method.path());
            let call = GrpcCall {
                method,
                messages,
                fixed,
                repeat,
                interval: raw.interval.unwrap_or_default(),
                lockstep: raw.lockstep.unwrap_or(false),
            };
            Ok((Call::Grpc(Box::new(call)), http::Method::POST, path, None))
        }
        TransportKind::Ws => {
            refuse(
                &raw,
                &[
                    "method", "path", "call", "messages", "repeat", "interval", "lockstep",
                ],
                "a WebSocket op sends a frame (its body) on the player's socket, whose path is the target URL's",
                here,
            )?;
            let frame = match raw.frame.as_deref() {
                None | Some("text") => WsFrame::Text,
                Some("binary") => WsFrame::Binary,
                Some("ping") => WsFrame::Ping,
                Some(other) => {
                    return Err(at(
                        &here("frame"),
                        format!("`{other}`: a WebSocket op sends \"text\", \"binary\" or \"ping\""),
                    ));
                }
            };
            if kind.is_background() {
                for (k, set) in [
                    ("frame", raw.frame.is_some()),
                    ("reply", raw.reply.is_some()),
                ] {
                    if set {
                        return Err(at(
                            &here(k),
                            "a WebSocket stream counts what the server pushes; its body (if any) is sent as text when the socket opens",
                        ));
                    }
                }
                if matches!(kind, OpKind::LongPoll { .. }) {
                    return Err(at(
                        &here("kind"),
                        "a WebSocket op is a request or a stream (the pushes), not a long poll",
                    ));
                }
            }
            let reply = match raw.reply.as_deref() {
                None | Some("next") => WsReply::Next,
                Some("none") => WsReply::None,
                Some(p) if p.starts_with('/') => {
                    if frame == WsFrame::Ping {
                        return Err(at(
                            &here("reply"),
                            "a ping's reply is its pong: leave reply out",
                        ));
                    }
                    WsReply::Correlate(pointer(p, &here("reply"))?)
                }
                Some(other) => {
                    return Err(at(
                        &here("reply"),
                        format!(
                            "`{other}`: write \"next\" (the next message), \"none\", or a JSON pointer such as \"/id\" (the message whose /id is the sent one's)"
                        ),
                    ));
                }
            };
            let body = match body {
                Some(b) => Some(b),
                None if frame == WsFrame::Ping || kind.is_background() => None,
                None => {
                    return Err(at(
                        &here("body"),
                        "a WebSocket op sends its body as a message: body = '{\"type\": \"ping\"}'",
                    ));
                }
            };
            Ok((
                Call::Ws(WsSend { frame, reply }),
                http::Method::GET,
                Template::literal(""),
                body,
            ))
        }
        TransportKind::H1 | TransportKind::H2c | TransportKind::H2 => {
            refuse(
                &raw,
                &[
                    "call", "messages", "repeat", "interval", "lockstep", "frame", "reply",
                ],
                &format!(
                    "this target is {} (HTTP); the key is for grpc:// and ws:// targets",
                    target.transport
                ),
                here,
            )?;
            let method = raw.method.unwrap_or_else(|| "GET".to_owned());
            let method = http::Method::from_bytes(method.as_bytes()).map_err(|_| {
                at(
                    &here("method"),
                    format!("`{method}` is not an HTTP method (e.g. GET, POST, PUT)"),
                )
            })?;
            let Some(p) = raw.path else {
                return Err(at(&here("path"), "an HTTP op needs path = \"/…\""));
            };
            if !p.starts_with('/') {
                return Err(at(&here("path"), format!("`{p}` must start with `/`")));
            }
            if let Some(why) = super::request_target::refusal(&p) {
                return Err(at(&here("path"), why));
            }
            let path = Template::parse(&p, names).map_err(|e| at(&here("path"), e.to_string()))?;
            Ok((Call::Http, method, path, body))
        }
    }
}

/// A request message from its JSON text, framed for the wire: what is wrong says which
/// field.
pub(crate) fn encode(method: &Method, compression: Encoding, json: &str) -> Result<Bytes, String> {
    let value: serde_json::Value = serde_json::from_str(json)
        .map_err(|e| format!("the message is not JSON ({e}): `{json}`"))?;
    let bytes = method.encode_request(&value).map_err(|e| e.to_string())?;
    Ok(grpc::encode_one(&bytes, compression))
}

/// Checks a gRPC op's templated messages and a correlated WebSocket op's body when the file
/// loads: each rendered with every variable at its `[vars]` default, or `0` without one,
/// must make a message (gRPC) or JSON holding the correlation pointer (WebSocket).
pub(super) fn check_templates(
    op: &super::Op,
    i: usize,
    target: &super::Target,
    defaults: &[Option<String>],
) -> Result<(), Invalid> {
    let mut vars = Vars::new(0, 0, defaults);
    let slots: Vec<usize> = super::reads(op);
    for s in slots {
        if vars.get(s).is_none() {
            vars.set(s, "0".to_owned());
        }
    }
    let here = |k: &str| vec![key("op"), Seg::Index(i), key(k)];
    let note = "(rendered with each variable at its [vars] default, or 0 without one)";
    match &op.call {
        Call::Grpc(call) => {
            let grpc = target.grpc.as_ref().expect("a gRPC target has its protos");
            for (k, t) in call.messages.iter().enumerate() {
                if t.is_constant() {
                    continue;
                }
                let json = t.render(&vars).expect("every slot set");
                if let Err(m) = encode(&call.method, grpc.compression, &json) {
                    let mut path = here(if op.body.is_some() {
                        "body"
                    } else {
                        "messages"
                    });
                    if op.body.is_none() {
                        path.push(Seg::Index(k));
                    }
                    return Err(at(&path, format!("{m} {note}")));
                }
            }
        }
        Call::Ws(WsSend {
            reply: WsReply::Correlate(ptr),
            ..
        }) => {
            let body = op.body.as_ref().expect("a correlated op has a body");
            let text = body.render(&vars).expect("every slot set");
            let found = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v.pointer(ptr).cloned());
            if found.is_none() {
                return Err(at(
                    &here("reply"),
                    format!(
                        "the body `{text}` {note} holds nothing at `{ptr}`, so no reply can ever match it: put the correlation id there, e.g. body = '{{\"id\": \"{{player}}-{{now_us}}\"}}' with reply = \"/id\""
                    ),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}
