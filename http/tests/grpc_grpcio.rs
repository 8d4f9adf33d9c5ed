//! The gRPC layers against Python's grpcio, a server nobody here wrote: request headers and
//! framing out, response heads, messages (split across DATA frames, gzip-compressed),
//! trailers and Trailers-Only statuses in, and every message to and from JSON through the
//! `.proto` the server serves. The server counts per method what it received and sent and
//! how each call ended; each test compares those counts with what the layers read.
//!
//! The HTTP/2 under the calls is the `h2` crate's client, so the gRPC layers are checked
//! apart from herd's own HTTP/2 client; `grpc_herd_h2.rs` runs the same kinds of calls
//! (trailers, streamed request bodies) over herd's.

use std::time::{Duration, Instant};

use bytes::Bytes;
use herd_http::grpc::{
    self, Code, DEFAULT_MAX_MESSAGE, Decoder, Encoding, Head, JsonOptions, Method, Protos, Status,
};
use herd_testkit::{PyServer, py::arena_proto};
use http::HeaderMap;
use serde_json::{Value, json};
use tokio::net::TcpStream;

/// The server and an HTTP/2 connection to it.
struct Fixture {
    server: PyServer,
    h2: h2::client::SendRequest<Bytes>,
    protos: Protos,
}

async fn fixture() -> Fixture {
    let server = PyServer::grpc();
    let tcp = TcpStream::connect(server.addr()).await.unwrap();
    let (h2, conn) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let protos = Protos::compile(&[arena_proto()], &[]).unwrap();
    Fixture { server, h2, protos }
}

/// What one call read back.
#[derive(Debug)]
struct Called {
    head: Head,
    /// The response messages, as JSON.
    messages: Vec<Value>,
    /// The trailers' status, or the Trailers-Only one.
    status: Status,
    /// The response ended with its head: Trailers-Only.
    trailers_only: bool,
}

/// How a request's messages go out.
#[derive(Clone, Copy)]
enum Send {
    /// All at once, then the end of the stream.
    All,
    /// One at a time, each after the answer to the one before (bidi), then the end.
    Turns,
}

impl Fixture {
    fn method(&self, name: &str) -> Method {
        self.protos.method(name).unwrap()
    }

    async fn call(
        &mut self,
        method: &str,
        requests: &[Value],
        meta: &[(&'static str, &str)],
        deadline: Option<Duration>,
        encoding: Encoding,
        send: Send,
    ) -> Called {
        let method = self.method(method);
        let mut metadata = HeaderMap::new();
        for (k, v) in meta {
            metadata.insert(*k, v.parse().unwrap());
        }
        let mut req = http::Request::builder()
            .method("POST")
            .uri(format!("http://{}{}", self.server.addr(), method.path()))
            .body(())
            .unwrap();
        *req.headers_mut() = grpc::request_headers(deadline, encoding, &metadata);
        let mut h2 = self.h2.clone().ready().await.unwrap();
        let (response, mut body_out) = h2.send_request(req, false).unwrap();
        let frames: Vec<Bytes> = requests
            .iter()
            .map(|r| grpc::encode_one(&method.encode_request(r).unwrap(), encoding))
            .collect();
        let mut decoder = Decoder::new(DEFAULT_MAX_MESSAGE, Encoding::Identity);
        let mut messages = Vec::new();
        let take = |decoder: &mut Decoder, messages: &mut Vec<Value>| {
            while let Some(m) = decoder.next().unwrap() {
                messages.push(method.decode_response(&m, JsonOptions::default()).unwrap());
            }
        };
        let send_turns = matches!(send, Send::Turns);
        if !send_turns {
            for f in &frames {
                body_out.send_data(f.clone(), false).unwrap();
            }
            body_out.send_data(Bytes::new(), true).unwrap();
        } else {
            body_out.send_data(frames[0].clone(), false).unwrap();
        }
        let response = response.await.unwrap();
        let (parts, mut body) = response.into_parts();
        let head = grpc::head(parts.status.as_u16(), &parts.headers).unwrap();
        let trailers_only = body.is_end_stream();
        if let Head::Messages(e) = head {
            decoder.set_encoding(e);
        }
        let mut sent = 1;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            body.flow_control().release_capacity(chunk.len()).unwrap();
            decoder.push(&chunk);
            take(&mut decoder, &mut messages);
            if send_turns && messages.len() == sent {
                if sent < frames.len() {
                    body_out.send_data(frames[sent].clone(), false).unwrap();
                    sent += 1;
                } else if sent == frames.len() {
                    body_out.send_data(Bytes::new(), true).unwrap();
                    sent += 1;
                }
            }
        }
        decoder.finish().unwrap();
        let status = match &head {
            Head::TrailersOnly(s) => s.clone(),
            Head::Messages(_) => {
                let trailers = body.trailers().await.unwrap().expect("trailers");
                Status::from_trailers(&trailers).unwrap()
            }
        };
        Called {
            head,
            messages,
            status,
            trailers_only,
        }
    }

    async fn unary(&mut self, method: &str, request: Value) -> Called {
        self.call(method, &[request], &[], None, Encoding::Identity, Send::All)
            .await
    }
}

#[tokio::test]
async fn unary_calls_read_back_as_json_and_counted_as_the_server_counts_them() {
    let mut f = fixture().await;
    let request = json!({
        "player": "ana",
        "level": 7,
        "team": "BLUE",
        "tags": ["a", "b"],
        "scores": {"x": 40, "y": "2"},
        "profile": {"country": "PT", "age": 30},
        "token": "AAEC",
    });
    for seat in 1..=20 {
        let c = f.unary("herd.arena.Arena/Join", request.clone()).await;
        assert_eq!(c.status, Status::new(Code::Ok, ""));
        assert!(!c.trailers_only);
        assert_eq!(c.head, Head::Messages(Encoding::Identity));
        assert_eq!(
            c.messages,
            [json!({
                "player": "ana",
                "seat": seat,
                "team": "BLUE",
                "tags": ["a", "b"],
                "profile": {"country": "PT", "age": 30},
                "level": 7,
                "token": "AAEC",
                "total": 42,
            })]
        );
    }
    let counters = f.server.counters();
    assert_eq!(
        counters["Join"],
        json!({"calls": 20, "received": 20, "sent": 20, "status": {"OK": 20}})
    );
}

#[tokio::test]
async fn a_status_before_any_message_comes_trailers_only_with_its_message_decoded() {
    let mut f = fixture().await;
    let c = f
        .unary(
            "herd.arena.Arena/Join",
            json!({"player": "x", "fail": "RESOURCE_EXHAUSTED", "fail_message": "quota — 100% used"}),
        )
        .await;
    assert!(c.trailers_only, "{c:?}");
    assert!(c.messages.is_empty());
    assert_eq!(c.status.code, Code::ResourceExhausted);
    assert_eq!(c.status.code.name(), "resource_exhausted");
    assert_eq!(c.status.message, "quota — 100% used");
    // The server decides: the next two calls fail with UNAVAILABLE, then they pass again.
    f.server.command("fail UNAVAILABLE 2");
    let mut codes = Vec::new();
    for _ in 0..4 {
        codes.push(
            f.unary("herd.arena.Arena/Join", json!({}))
                .await
                .status
                .code,
        );
    }
    assert_eq!(
        codes,
        [Code::Unavailable, Code::Unavailable, Code::Ok, Code::Ok]
    );
    let counters = f.server.counters();
    assert_eq!(
        counters["Join"]["status"],
        json!({"RESOURCE_EXHAUSTED": 1, "UNAVAILABLE": 2, "OK": 2})
    );
}

#[tokio::test]
async fn a_server_stream_split_across_data_frames_yields_every_message_the_server_sent() {
    let mut f = fixture().await;
    // 20 000-byte events: each spans DATA frames (16 KiB at most), and prefixes fall
    // anywhere in them.
    let c = f
        .unary(
            "herd.arena.Arena/Watch",
            json!({"count": 60, "kind": "tick", "pad_bytes": 20000}),
        )
        .await;
    assert_eq!(c.status.code, Code::Ok);
    assert_eq!(c.messages.len(), 60);
    for (i, m) in c.messages.iter().enumerate() {
        assert_eq!(m["seq"], i as u64 + 1);
        assert_eq!(m["kind"], "tick");
    }
    // A stream that fails part-way: its messages, then the status in the trailers.
    let c = f
        .unary(
            "herd.arena.Arena/Watch",
            json!({"count": 10, "fail_after": 4, "fail": "ABORTED"}),
        )
        .await;
    assert!(!c.trailers_only);
    assert_eq!(c.messages.len(), 4);
    assert_eq!(
        c.status,
        Status::new(Code::Aborted, "failed after 4 events")
    );
    let counters = f.server.counters();
    assert_eq!(counters["Watch"]["calls"], 2);
    assert_eq!(counters["Watch"]["sent"], 64);
    assert_eq!(counters["Watch"]["status"], json!({"OK": 1, "ABORTED": 1}));
}

#[tokio::test]
async fn bidi_turns_and_a_client_stream_count_as_the_server_counts() {
    let mut f = fixture().await;
    let moves: Vec<Value> = (1..=10)
        .map(|i| json!({"seq": i, "text": format!("m{i}")}))
        .collect();
    let c = f
        .call(
            "herd.arena.Arena/Play",
            &moves,
            &[],
            None,
            Encoding::Identity,
            Send::Turns,
        )
        .await;
    assert_eq!(c.status.code, Code::Ok);
    let echoes: Vec<String> = c
        .messages
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        echoes,
        (1..=10).map(|i| format!("echo m{i}")).collect::<Vec<_>>()
    );
    let c = f
        .call(
            "herd.arena.Arena/Submit",
            &moves[..5],
            &[],
            None,
            Encoding::Identity,
            Send::All,
        )
        .await;
    assert_eq!(c.messages, [json!({"moves": 5, "total": 15})]);
    let counters = f.server.counters();
    assert_eq!(
        counters["Play"],
        json!({"calls": 1, "received": 10, "sent": 10, "status": {"OK": 1}})
    );
    assert_eq!(
        counters["Submit"],
        json!({"calls": 1, "received": 5, "sent": 1, "status": {"OK": 1}})
    );
}

#[tokio::test]
async fn grpc_timeout_ends_a_slow_call_as_deadline_exceeded() {
    let mut f = fixture().await;
    let started = Instant::now();
    let c = f
        .call(
            "herd.arena.Arena/Slow",
            &[json!({"delay_ms": 5000})],
            &[],
            Some(Duration::from_millis(200)),
            Encoding::Identity,
            Send::All,
        )
        .await;
    let took = started.elapsed();
    assert_eq!(c.status.code, Code::DeadlineExceeded, "{c:?}");
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(3),
        "{took:?}"
    );
    // Within its deadline the same call passes.
    let c = f
        .call(
            "herd.arena.Arena/Slow",
            &[json!({"delay_ms": 10})],
            &[],
            Some(Duration::from_secs(5)),
            Encoding::Identity,
            Send::All,
        )
        .await;
    assert_eq!(c.status.code, Code::Ok);
    assert_eq!(c.messages[0]["player"], "slow");
    // The server's handler saw its deadline pass too, within the test's few seconds.
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let counters = f.server.counters();
        if counters["Slow"]["status"]["DEADLINE_EXCEEDED"] == 1 {
            assert_eq!(counters["Slow"]["status"]["OK"], 1);
            break;
        }
        assert!(Instant::now() < until, "{counters}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn gzip_both_ways() {
    let mut f = fixture().await;
    let tags: Vec<String> = (0..200).map(|i| format!("tag-{}", i % 7)).collect();
    let c = f
        .call(
            "herd.arena.Arena/Join",
            &[json!({"player": "gz", "tags": tags})],
            &[("herd-compress", "gzip")],
            None,
            Encoding::Gzip,
            Send::All,
        )
        .await;
    assert_eq!(c.head, Head::Messages(Encoding::Gzip));
    assert_eq!(c.status.code, Code::Ok);
    assert_eq!(c.messages[0]["tags"].as_array().unwrap().len(), 200);
    assert_eq!(c.messages[0]["player"], "gz");
}

#[tokio::test]
async fn an_unknown_method_is_the_servers_unimplemented() {
    let mut f = fixture().await;
    // A method the server does not serve, under a name the .proto does have a type for.
    let mut req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{}/herd.arena.Arena/Leave", f.server.addr()))
        .body(())
        .unwrap();
    *req.headers_mut() = grpc::request_headers(None, Encoding::Identity, &HeaderMap::new());
    let mut h2 = f.h2.clone().ready().await.unwrap();
    let (response, mut out) = h2.send_request(req, false).unwrap();
    out.send_data(grpc::encode_one(b"", Encoding::Identity), true)
        .unwrap();
    let response = response.await.unwrap();
    let head = grpc::head(response.status().as_u16(), response.headers()).unwrap();
    let Head::TrailersOnly(status) = head else {
        panic!("{head:?}")
    };
    assert_eq!(status.code, Code::Unimplemented);
    assert_eq!(status.code.name(), "unimplemented");
    assert!(f.server.counters().get("Leave").is_none());
}
