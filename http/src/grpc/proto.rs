//! Messages from the `.proto` files a scenario names, with no code generation step: the
//! files are compiled when the scenario loads ([`Protos::compile`], with `protox`), a
//! method is looked up by `package.Service/Method` ([`Protos::method`]), and its messages
//! are built from JSON and read back into JSON with `prost-reflect` in the canonical proto3
//! JSON mapping — so a request body is templated JSON as for HTTP, and a response is read
//! by the same JSON pointers.
//!
//! Mistakes in the files, the method name or a request body are [`ProtoError`]s: the user's
//! to fix (bad usage, exit 2), each naming the file, line and column or the field. What the
//! server sent that does not decode is an [`Error`] (the peer's bytes).

use std::{
    fmt,
    path::{Path, PathBuf},
};

use miette::Diagnostic as _;
use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor, MethodDescriptor,
    SerializeOptions,
};

use super::Error;

/// A mistake in the `.proto` files, a method name or a request body: the scenario's, not
/// the server's.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProtoError {
    /// A `.proto` file would not compile (syntax, an unknown type, an import not found).
    #[error("{}: {cause}", location(file, *line, *column))]
    Compile {
        /// The file, as found under its include path (or as named, if not found).
        file: String,
        /// 1-based line, where the compiler points at one.
        line: Option<usize>,
        /// 1-based column.
        column: Option<usize>,
        /// What is wrong there, with the compiler's hint if it has one.
        cause: String,
    },
    /// The method name is not `package.Service/Method`.
    #[error("`{0}` is not a gRPC method: write it as `package.Service/Method`")]
    MethodName(String),
    /// No service of that name in the files.
    #[error(
        "no service `{service}` in the .proto files; they define: {}",
        list(known)
    )]
    UnknownService {
        /// The service asked for.
        service: String,
        /// The services the files define, by full name.
        known: Vec<String>,
    },
    /// The service has no method of that name.
    #[error(
        "service `{service}` has no method `{method}`; its methods: {}",
        list(known)
    )]
    UnknownMethod {
        /// The service, by full name.
        service: String,
        /// The method asked for.
        method: String,
        /// The service's methods.
        known: Vec<String>,
    },
    /// A request body (JSON) does not fit the method's input message.
    #[error("request body for `{message}`{}: {cause}", at_field(path))]
    Json {
        /// The message type, by full name.
        message: String,
        /// Where in the body, as a JSON path (`.profile.level`); empty for the top.
        path: String,
        /// What is wrong there.
        cause: String,
    },
}

fn location(file: &str, line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!("{file}:{l}:{c}"),
        (Some(l), None) => format!("{file}:{l}"),
        _ => file.to_owned(),
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

fn at_field(path: &str) -> String {
    if path.is_empty() || path == "." {
        String::new()
    } else {
        format!(" at `{path}`")
    }
}

/// How a method's messages flow (the `stream` keywords in its `rpc` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streaming {
    /// One request, one response.
    Unary,
    /// One request, a stream of responses.
    Server,
    /// A stream of requests, one response.
    Client,
    /// Streams both ways.
    Bidi,
}

impl Streaming {
    /// Its name: `unary`, `server_streaming`, `client_streaming`, `bidi_streaming`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Unary => "unary",
            Self::Server => "server_streaming",
            Self::Client => "client_streaming",
            Self::Bidi => "bidi_streaming",
        }
    }
}

/// How a response message is written as JSON.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonOptions {
    /// Field names as in the `.proto` (`player_id`) instead of proto3 JSON's lowerCamelCase
    /// (`playerId`).
    pub proto_field_names: bool,
}

/// The compiled `.proto` files: every message and service they define and import.
#[derive(Debug, Clone)]
pub struct Protos {
    pool: DescriptorPool,
}

impl Protos {
    /// Compiles `files`, resolving imports in `includes` (and the well-known
    /// `google/protobuf/*.proto`). Without include paths, each file's own directory is one.
    pub fn compile(files: &[PathBuf], includes: &[PathBuf]) -> Result<Self, ProtoError> {
        let mut includes = includes.to_vec();
        if includes.is_empty() {
            for f in files {
                let dir = f.parent().unwrap_or(Path::new("")).to_owned();
                let dir = if dir.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    dir
                };
                if !includes.contains(&dir) {
                    includes.push(dir);
                }
            }
        }
        let mut compiler =
            protox::Compiler::new(&includes).map_err(|e| compile_error(&e, &includes))?;
        compiler.include_imports(true);
        for f in files {
            // protox says a missing file is "not in any include path"; say what is wrong.
            if let Err(e) = std::fs::metadata(f) {
                return Err(ProtoError::Compile {
                    file: f.display().to_string(),
                    line: None,
                    column: None,
                    cause: format!("cannot read it: {e}"),
                });
            }
            compiler
                .open_file(f)
                .map_err(|e| compile_error(&e, &includes))?;
        }
        Ok(Self {
            pool: compiler.descriptor_pool(),
        })
    }

    /// The services the files define, by full name (`herd.arena.Arena`).
    pub fn services(&self) -> Vec<String> {
        self.pool
            .services()
            .map(|s| s.full_name().to_owned())
            .collect()
    }

    /// The method `package.Service/Method` (a leading `/` is taken too, as in a request
    /// path).
    pub fn method(&self, name: &str) -> Result<Method, ProtoError> {
        let bad = || ProtoError::MethodName(name.to_owned());
        let (service, method) = name
            .strip_prefix('/')
            .unwrap_or(name)
            .split_once('/')
            .ok_or_else(bad)?;
        if service.is_empty() || method.is_empty() || method.contains('/') {
            return Err(bad());
        }
        let Some(s) = self.pool.get_service_by_name(service) else {
            return Err(ProtoError::UnknownService {
                service: service.to_owned(),
                known: self.services(),
            });
        };
        let Some(m) = s.methods().find(|m| m.name() == method) else {
            return Err(ProtoError::UnknownMethod {
                service: s.full_name().to_owned(),
                method: method.to_owned(),
                known: s.methods().map(|m| m.name().to_owned()).collect(),
            });
        };
        Ok(Method { desc: m })
    }
}

/// The compiler's error with its file as found under the include paths, and its line and
/// column from the first span it points at.
fn compile_error(e: &protox::Error, includes: &[PathBuf]) -> ProtoError {
    let name = e.file().map(str::to_owned);
    let file = name
        .as_deref()
        .map(|n| {
            includes
                .iter()
                .map(|i| i.join(n))
                .find(|p| p.is_file())
                .map_or_else(|| n.to_owned(), |p| p.display().to_string())
        })
        .unwrap_or_else(|| "the .proto files".to_owned());
    let (mut line, mut column) = (None, None);
    if let (Some(src), Some(mut labels)) = (e.source_code(), e.labels())
        && let Some(label) = labels.next()
        && let Ok(at) = src.read_span(label.inner(), 0, 0)
    {
        line = Some(at.line() + 1);
        column = Some(at.column() + 1);
    }
    let mut cause = e.to_string();
    if let Some(source) = std::error::Error::source(e) {
        cause = format!("{cause}: {source}");
    }
    if let Some(help) = e.help() {
        cause = format!("{cause} ({help})");
    }
    ProtoError::Compile {
        file,
        line,
        column,
        cause,
    }
}

/// One method of a service: its path, how it streams, and its messages to and from JSON.
#[derive(Clone, PartialEq, Eq)]
pub struct Method {
    desc: MethodDescriptor,
}

impl fmt::Debug for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Method").field(&self.name()).finish()
    }
}

impl Method {
    /// `package.Service/Method`.
    pub fn name(&self) -> String {
        format!(
            "{}/{}",
            self.desc.parent_service().full_name(),
            self.desc.name()
        )
    }

    /// The request's `:path`: `/package.Service/Method`.
    pub fn path(&self) -> String {
        format!("/{}", self.name())
    }

    /// How its messages flow.
    pub fn streaming(&self) -> Streaming {
        match (
            self.desc.is_client_streaming(),
            self.desc.is_server_streaming(),
        ) {
            (false, false) => Streaming::Unary,
            (false, true) => Streaming::Server,
            (true, false) => Streaming::Client,
            (true, true) => Streaming::Bidi,
        }
    }

    /// The request message type, by full name.
    pub fn input(&self) -> String {
        self.desc.input().full_name().to_owned()
    }

    /// The response message type, by full name.
    pub fn output(&self) -> String {
        self.desc.output().full_name().to_owned()
    }

    /// A request message from its JSON (proto3 JSON mapping: lowerCamelCase or the
    /// `.proto`'s field names, 64-bit integers as numbers or strings, enums by name or
    /// number, bytes as base64). A field the message lacks is an error, as is a value of
    /// the wrong type; each names the field.
    pub fn encode_request(&self, json: &serde_json::Value) -> Result<Vec<u8>, ProtoError> {
        let desc = self.desc.input();
        let mut track = serde_path_to_error::Track::new();
        let de = serde_path_to_error::Deserializer::new(json, &mut track);
        let message = DynamicMessage::deserialize_with_options(
            desc.clone(),
            de,
            &DeserializeOptions::new().deny_unknown_fields(true),
        )
        .map_err(|e| {
            let path = track.path();
            let mut cause = e.to_string();
            if cause.starts_with("unrecognized field name") {
                let at = message_at(&desc, &path);
                cause = format!("{cause}; `{}` has {}", at.full_name(), field_list(&at));
            }
            ProtoError::Json {
                message: desc.full_name().to_owned(),
                path: path.to_string(),
                cause,
            }
        })?;
        Ok(message.encode_to_vec())
    }

    /// A response message as JSON: proto3 JSON mapping, scalar, repeated and map fields
    /// present at their defaults too (so a pointer to a field that is 0 or empty finds it;
    /// an unset message field is absent), 64-bit integers as numbers. Bytes that do not decode as the method's output type are the server's error.
    pub fn decode_response(
        &self,
        bytes: &[u8],
        options: JsonOptions,
    ) -> Result<serde_json::Value, Error> {
        to_json(&self.desc.output(), bytes, options)
    }

    /// Checks that `bytes` decode as the method's output type, without writing them out as
    /// JSON: what a call that reads nothing of its response still owes the numbers.
    pub fn check_response(&self, bytes: &[u8]) -> Result<(), Error> {
        let desc = self.desc.output();
        DynamicMessage::decode(desc.clone(), bytes)
            .map(drop)
            .map_err(|e| Error::Decode {
                message: desc.full_name().to_owned(),
                reason: e.to_string(),
            })
    }

    /// A request message read back as JSON (what a server would see): for tests and for
    /// showing the user what their body became.
    pub fn decode_request(
        &self,
        bytes: &[u8],
        options: JsonOptions,
    ) -> Result<serde_json::Value, Error> {
        to_json(&self.desc.input(), bytes, options)
    }
}

/// The message a JSON path leads into: as deep as the path names message fields.
fn message_at(top: &MessageDescriptor, path: &serde_path_to_error::Path) -> MessageDescriptor {
    use serde_path_to_error::Segment;
    let mut at = top.clone();
    let mut segments = path.iter();
    while let Some(Segment::Map { key }) = segments.next() {
        let Some(field) = at
            .get_field_by_json_name(key)
            .or_else(|| at.get_field_by_name(key))
        else {
            break;
        };
        let kind = if field.is_map() {
            segments.next(); // the map's key
            let Some(entry) = field.kind().as_message().cloned() else {
                break;
            };
            entry.map_entry_value_field().kind()
        } else {
            if field.is_list() {
                segments.next(); // the element's index
            }
            field.kind()
        };
        let Some(m) = kind.as_message() else {
            break;
        };
        at = m.clone();
    }
    at
}

/// A message's fields, as a request body may name them.
fn field_list(m: &MessageDescriptor) -> String {
    let names: Vec<String> = m
        .fields()
        .map(|f| {
            if f.json_name() == f.name() {
                f.name().to_owned()
            } else {
                format!("{} ({})", f.json_name(), f.name())
            }
        })
        .collect();
    if names.is_empty() {
        "no fields".to_owned()
    } else {
        format!("fields {}", names.join(", "))
    }
}

fn to_json(
    desc: &MessageDescriptor,
    bytes: &[u8],
    options: JsonOptions,
) -> Result<serde_json::Value, Error> {
    let decode_error = |reason: String| Error::Decode {
        message: desc.full_name().to_owned(),
        reason,
    };
    let message =
        DynamicMessage::decode(desc.clone(), bytes).map_err(|e| decode_error(e.to_string()))?;
    let options = SerializeOptions::new()
        .stringify_64_bit_integers(false)
        .skip_default_fields(false)
        .use_proto_field_name(options.proto_field_names);
    message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|e| decode_error(e.to_string()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A directory with `files` written into it, removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new(files: &[(&str, &str)]) -> Self {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("herd-proto-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            for (name, text) in files {
                let p = dir.join(name);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(p, text).unwrap();
            }
            Self(dir)
        }

        fn path(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const GAME: &str = r#"syntax = "proto3";
package game.v1;

import "google/protobuf/timestamp.proto";
import "common.proto";

enum Team { TEAM_UNSPECIFIED = 0; RED = 1; BLUE = 2; }

message JoinRequest {
  string player_name = 1;
  int32 level = 2;
  Team team = 3;
  repeated string tags = 4;
  map<string, int64> scores = 5;
  common.Profile profile = 6;
  bytes token = 7;
  int64 big = 8;
  google.protobuf.Timestamp at = 9;
}

message JoinReply { string player_name = 1; int64 seat = 2; Team team = 3; bool full = 4; }

service Lobby {
  rpc Join(JoinRequest) returns (JoinReply);
  rpc Watch(JoinRequest) returns (stream JoinReply);
  rpc Upload(stream JoinRequest) returns (JoinReply);
  rpc Chat(stream JoinRequest) returns (stream JoinReply);
}
"#;

    const COMMON: &str = r#"syntax = "proto3";
package common;
message Profile { string country = 1; uint32 age = 2; }
"#;

    fn lobby() -> (Dir, Protos) {
        let dir = Dir::new(&[("game.proto", GAME), ("common.proto", COMMON)]);
        let protos = Protos::compile(&[dir.path("game.proto")], &[]).unwrap();
        (dir, protos)
    }

    #[test]
    fn methods_by_name_with_their_streaming() {
        let (_dir, p) = lobby();
        assert_eq!(p.services(), ["game.v1.Lobby"]);
        let join = p.method("game.v1.Lobby/Join").unwrap();
        assert_eq!(join.path(), "/game.v1.Lobby/Join");
        assert_eq!(join.input(), "game.v1.JoinRequest");
        assert_eq!(join.output(), "game.v1.JoinReply");
        let kinds: Vec<Streaming> = ["Join", "Watch", "Upload", "Chat"]
            .iter()
            .map(|m| {
                p.method(&format!("/game.v1.Lobby/{m}"))
                    .unwrap()
                    .streaming()
            })
            .collect();
        assert_eq!(
            kinds,
            [
                Streaming::Unary,
                Streaming::Server,
                Streaming::Client,
                Streaming::Bidi
            ]
        );
    }

    #[test]
    fn unknown_services_and_methods_list_the_known_ones() {
        let (_dir, p) = lobby();
        assert_eq!(
            p.method("Lobby/Join").unwrap_err().to_string(),
            "no service `Lobby` in the .proto files; they define: game.v1.Lobby"
        );
        assert_eq!(
            p.method("game.v1.Lobby/Leave").unwrap_err().to_string(),
            "service `game.v1.Lobby` has no method `Leave`; its methods: Join, Watch, Upload, Chat"
        );
        for bad in ["game.v1.Lobby", "/Join", "a/b/c", ""] {
            assert!(
                matches!(p.method(bad), Err(ProtoError::MethodName(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn json_to_message_and_back() {
        let (_dir, p) = lobby();
        let join = p.method("game.v1.Lobby/Join").unwrap();
        let body = json!({
            "playerName": "ana",
            "level": 7,
            "team": "BLUE",
            "tags": ["a", "b"],
            "scores": {"x": "12", "y": 3},
            "profile": {"country": "PT", "age": 30},
            "token": "AAEC",
            "big": 9007199254740993i64,
            "at": "2024-01-02T03:04:05Z",
        });
        let bytes = join.encode_request(&body).unwrap();
        let back = join.decode_request(&bytes, JsonOptions::default()).unwrap();
        assert_eq!(back["playerName"], "ana");
        assert_eq!(back["team"], "BLUE");
        assert_eq!(back["scores"]["x"], 12);
        assert_eq!(back["big"], 9007199254740993i64);
        assert_eq!(back["token"], "AAEC");
        assert_eq!(back["profile"]["age"], 30);
        assert_eq!(back["at"], "2024-01-02T03:04:05Z");
        // The .proto's own field names are taken too.
        let bytes = join.encode_request(&json!({"player_name": "bo"})).unwrap();
        let back = join
            .decode_request(
                &bytes,
                JsonOptions {
                    proto_field_names: true,
                },
            )
            .unwrap();
        assert_eq!(back["player_name"], "bo");
        // Defaults are written out, so a pointer finds a field left at 0.
        assert_eq!(back["level"], 0);
        assert_eq!(back["tags"], json!([]));
    }

    #[test]
    fn a_response_reads_as_json_with_defaults() {
        let (_dir, p) = lobby();
        let join = p.method("game.v1.Lobby/Join").unwrap();
        // JoinReply{player_name: "ana", seat: 3}: field 1 (LEN "ana"), field 2 (varint 3).
        let reply = [0x0a, 3, b'a', b'n', b'a', 0x10, 3];
        let v = join
            .decode_response(&reply, JsonOptions::default())
            .unwrap();
        assert_eq!(
            v,
            json!({"playerName": "ana", "seat": 3, "team": "TEAM_UNSPECIFIED", "full": false})
        );
        let e = join
            .decode_response(&[0x0a, 9, b'a'], JsonOptions::default())
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the server's message is not a valid `game.v1.JoinReply`: "),
            "{e}"
        );
    }

    #[test]
    fn json_errors_name_the_field() {
        let (_dir, p) = lobby();
        let join = p.method("game.v1.Lobby/Join").unwrap();
        let e = join.encode_request(&json!({"plyer": "x"})).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with("request body for `game.v1.JoinRequest`"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "unrecognized field name 'plyer'; `game.v1.JoinRequest` has fields playerName \
                 (player_name), level, team, tags, scores, profile, token, big, at"
            ),
            "{text}"
        );
        let e = join
            .encode_request(&json!({"profile": {"country": "PT", "town": "x"}}))
            .unwrap_err();
        assert!(
            e.to_string()
                .ends_with("`common.Profile` has fields country, age"),
            "{e}"
        );
        let e = join
            .encode_request(&json!({"profile": {"age": "old"}}))
            .unwrap_err();
        let ProtoError::Json { path, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(path, "profile.age", "{e}");
        let e = join.encode_request(&json!({"team": "GREEN"})).unwrap_err();
        assert!(e.to_string().contains("at `team`"), "{e}");
        let e = join.encode_request(&json!({"level": 1.5})).unwrap_err();
        assert!(e.to_string().contains("at `level`"), "{e}");
    }

    #[test]
    fn compile_errors_point_at_file_line_and_column() {
        let dir = Dir::new(&[(
            "bad.proto",
            "syntax = \"proto3\";\npackage p;\n\nmessage M {\n  strin name = 1;\n}\n",
        )]);
        let e = Protos::compile(&[dir.path("bad.proto")], &[]).unwrap_err();
        let ProtoError::Compile {
            file, line, column, ..
        } = &e
        else {
            panic!("{e:?}")
        };
        assert_eq!(file, &dir.path("bad.proto").display().to_string());
        assert_eq!((*line, *column), (Some(5), Some(3)), "{e}");
        assert!(e.to_string().contains("strin"), "{e}");

        let dir = Dir::new(&[(
            "syntax.proto",
            "syntax = \"proto3\";\nmessage M {\n  string name = ;\n}\n",
        )]);
        let e = Protos::compile(&[dir.path("syntax.proto")], &[]).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("{}:3:", dir.path("syntax.proto").display())),
            "{text}"
        );

        let dir = Dir::new(&[(
            "imports.proto",
            "syntax = \"proto3\";\nimport \"missing.proto\";\n",
        )]);
        let e = Protos::compile(&[dir.path("imports.proto")], &[]).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("{}:2:1:", dir.path("imports.proto").display())),
            "{text}"
        );
        assert!(text.contains("missing.proto"), "{text}");
    }

    #[test]
    fn a_missing_file_says_which() {
        let dir = Dir::new(&[]);
        let e = Protos::compile(&[dir.path("nowhere.proto")], &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: cannot read it: No such file or directory (os error 2)",
                dir.path("nowhere.proto").display()
            )
        );
    }
}
