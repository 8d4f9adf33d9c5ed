//! gRPC over herd's own HTTP/2 client (h2c to Python's grpcio): a unary call's message and
//! the `grpc-status` in its trailers, a Trailers-Only status read from the response head, a
//! server stream read message by message as its body arrives and ended by its trailers, a
//! deadline the server enforces, and request bodies streamed after their head
//! ([`Connection::duplex`]): a client-streaming call and a bidi call in lock step. The
//! server counts per method what it received and sent and how each call ended; the test
//! compares those counts with what the client read. One server for the whole file (~2 s).

use std::time::Duration;

use bytes::Bytes;
use herd_http::grpc::{
    self, Code, DEFAULT_MAX_MESSAGE, Decoder, Encoding, Head, JsonOptions, Method, Protos,
};
use herd_http::{Connection, Endpoint, Protocol, Request, grpc::Status};
use herd_testkit::{PyServer, py::arena_proto};
use http::{HeaderMap, Method as HttpMethod};
use serde_json::{Value, json};

async fn connect(server: &PyServer) -> Box<dyn Connection> {
    let endpoint = Endpoint {
        host: "127.0.0.1".into(),
        port: server.port(),
        authority: format!("127.0.0.1:{}", server.port()),
        connect_timeout: Duration::from_secs(5),
        source_addrs: Vec::new(),
    };
    herd_http::connector(&endpoint, Protocol::H2c, None)
        .connect()
        .await
        .unwrap()
}

fn request(method: &Method, body: &Value) -> Request {
    Request {
        method: HttpMethod::POST,
        path: method.path(),
        headers: grpc::request_headers(None, Encoding::Identity, &HeaderMap::new()),
        body: grpc::encode_one(&method.encode_request(body).unwrap(), Encoding::Identity),
    }
}

#[tokio::test]
async fn unary_trailers_only_and_a_server_stream_over_herds_h2c() {
    let mut server = PyServer::grpc();
    let protos = Protos::compile(&[arena_proto()], &[]).unwrap();
    let join = protos.method("herd.arena.Arena/Join").unwrap();
    let watch = protos.method("herd.arena.Arena/Watch").unwrap();
    let mut conn = connect(&server).await;

    for seat in 1..=5 {
        let r = conn
            .send(request(&join, &json!({"player": "h2"})))
            .await
            .unwrap();
        let head = grpc::head(r.status, &r.headers.to_map()).unwrap();
        assert_eq!(head, Head::Messages(Encoding::Identity));
        let mut d = Decoder::new(DEFAULT_MAX_MESSAGE, Encoding::Identity);
        d.push(&r.body);
        let reply = join
            .decode_response(&d.next().unwrap().unwrap(), JsonOptions::default())
            .unwrap();
        assert_eq!(reply["player"], "h2");
        assert_eq!(reply["seat"], seat);
        d.finish().unwrap();
        let status = Status::from_trailers(r.trailers.as_ref().expect("trailers")).unwrap();
        assert_eq!(status.code, Code::Ok);
        let whole = grpc::read_response(
            r.status,
            &r.headers.as_map(),
            &r.body,
            r.trailers.as_ref(),
            DEFAULT_MAX_MESSAGE,
        )
        .unwrap();
        assert_eq!((whole.messages.len(), whole.status.code), (1, Code::Ok));
    }

    let r = conn
        .send(request(
            &join,
            &json!({"fail": "RESOURCE_EXHAUSTED", "fail_message": "full"}),
        ))
        .await
        .unwrap();
    assert!(r.body.is_empty());
    let Head::TrailersOnly(status) = grpc::head(r.status, &r.headers.to_map()).unwrap() else {
        panic!("not Trailers-Only")
    };
    assert_eq!(
        (status.code, status.message.as_str()),
        (Code::ResourceExhausted, "full")
    );

    // A stream read as it arrives: 40 events of 10 000 bytes, 5 ms apart.
    let mut s = conn
        .open(request(
            &watch,
            &json!({"count": 40, "interval_ms": 5, "pad_bytes": 10000}),
        ))
        .await
        .unwrap();
    assert_eq!(
        grpc::head(s.status, &s.headers).unwrap(),
        Head::Messages(Encoding::Identity)
    );
    let mut d = Decoder::new(DEFAULT_MAX_MESSAGE, Encoding::Identity);
    let mut seqs = Vec::new();
    let mut chunks = 0;
    while let Some(chunk) = s.body.chunk().await {
        let chunk: Bytes = chunk.unwrap();
        chunks += 1;
        d.push(&chunk);
        while let Some(m) = d.next().unwrap() {
            let event = watch.decode_response(&m, JsonOptions::default()).unwrap();
            seqs.push(event["seq"].as_u64().unwrap());
        }
    }
    d.finish().unwrap();
    assert_eq!(seqs, (1..=40).collect::<Vec<u64>>());
    assert!(chunks >= 40, "{chunks} chunks");
    let trailers = s.body.trailers().expect("a server stream ends in trailers");
    assert_eq!(Status::from_trailers(&trailers).unwrap().code, Code::Ok);

    // A stream that fails after 3 messages: its status in the trailers.
    let mut s = conn
        .open(request(
            &watch,
            &json!({"count": 10, "fail_after": 3, "fail": "UNAVAILABLE"}),
        ))
        .await
        .unwrap();
    let mut d = Decoder::new(DEFAULT_MAX_MESSAGE, Encoding::Identity);
    while let Some(chunk) = s.body.chunk().await {
        d.push(&chunk.unwrap());
    }
    let mut n = 0;
    while d.next().unwrap().is_some() {
        n += 1;
    }
    let status = Status::from_trailers(&s.body.trailers().unwrap()).unwrap();
    assert_eq!((n, status.code), (3, Code::Unavailable));

    // A deadline of 50 ms on a call that takes 2 s: the server ends it with code 4.
    let slow = protos.method("herd.arena.Arena/Slow").unwrap();
    let mut req = request(&slow, &json!({"delay_ms": 2000}));
    req.headers = grpc::request_headers(
        Some(Duration::from_millis(50)),
        Encoding::Identity,
        &HeaderMap::new(),
    );
    let started = std::time::Instant::now();
    let r = conn.send(req).await.unwrap();
    let whole = grpc::read_response(
        r.status,
        &r.headers.as_map(),
        &r.body,
        r.trailers.as_ref(),
        DEFAULT_MAX_MESSAGE,
    )
    .unwrap();
    assert_eq!(whole.status.code, Code::DeadlineExceeded);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );

    // Client streaming: 50 moves written one by one after the head, gzip-compressed.
    let submit = protos.method("herd.arena.Arena/Submit").unwrap();
    let mut req = request(&submit, &json!({}));
    req.body = Bytes::new();
    req.headers = grpc::request_headers(None, Encoding::Gzip, &HeaderMap::new());
    let mut call = conn.duplex(req).await.unwrap();
    for seq in 1..=50 {
        let m = submit.encode_request(&json!({"seq": seq})).unwrap();
        call.send
            .send(grpc::encode_one(&m, Encoding::Gzip))
            .unwrap();
    }
    call.send.finish().unwrap();
    let mut s = call.response.head().await.unwrap();
    let body = s.body.chunk().await.unwrap().unwrap();
    assert!(s.body.chunk().await.is_none());
    let whole = grpc::read_response(
        s.status,
        &s.headers,
        &body,
        s.body.trailers().as_ref(),
        DEFAULT_MAX_MESSAGE,
    )
    .unwrap();
    assert_eq!(whole.status.code, Code::Ok);
    let summary = submit
        .decode_response(&whole.messages[0], JsonOptions::default())
        .unwrap();
    assert_eq!(summary, json!({"moves": 50, "total": 1275}));

    // Bidi in lock step: each move sent once the answer to the one before is read.
    let play = protos.method("herd.arena.Arena/Play").unwrap();
    let mut req = request(&play, &json!({}));
    req.body = Bytes::new();
    let mut call = conn.duplex(req).await.unwrap();
    let first = play
        .encode_request(&json!({"seq": 1, "text": "a"}))
        .unwrap();
    call.send
        .send(grpc::encode_one(&first, Encoding::Identity))
        .unwrap();
    let mut s = call.response.head().await.unwrap();
    let mut d = Decoder::new(DEFAULT_MAX_MESSAGE, Encoding::Identity);
    let mut echoes = Vec::new();
    while let Some(chunk) = s.body.chunk().await {
        d.push(&chunk.unwrap());
        while let Some(m) = d.next().unwrap() {
            let echo = play.decode_response(&m, JsonOptions::default()).unwrap();
            echoes.push(echo["text"].as_str().unwrap().to_owned());
            let seq = echoes.len() + 1;
            if seq <= 20 {
                let m = play
                    .encode_request(&json!({"seq": seq, "text": format!("m{seq}")}))
                    .unwrap();
                call.send
                    .send(grpc::encode_one(&m, Encoding::Identity))
                    .unwrap();
            } else {
                call.send.finish().unwrap();
            }
        }
    }
    assert_eq!(echoes.len(), 20);
    assert_eq!(echoes[19], "echo m20");
    let status = Status::from_trailers(&s.body.trailers().unwrap()).unwrap();
    assert_eq!(status.code, Code::Ok);

    // A bidi call given up with its body open: the stream is reset, the server sees the
    // call cancelled, and the connection carries on.
    let mut req = request(&play, &json!({}));
    req.body = Bytes::new();
    let mut call = conn.duplex(req).await.unwrap();
    call.send
        .send(grpc::encode_one(&first, Encoding::Identity))
        .unwrap();
    drop(call);
    let r = conn
        .send(request(&join, &json!({"player": "after"})))
        .await
        .unwrap();
    assert_eq!(
        Status::from_trailers(r.trailers.as_ref().unwrap())
            .unwrap()
            .code,
        Code::Ok
    );

    let c = server.counters();
    assert_eq!(
        c["Join"],
        json!({"calls": 7, "received": 7, "sent": 6, "status": {"OK": 6, "RESOURCE_EXHAUSTED": 1}})
    );
    assert_eq!(c["Watch"]["sent"], 43);
    assert_eq!(c["Watch"]["status"]["UNAVAILABLE"], 1);
    assert_eq!(
        c["Submit"],
        json!({"calls": 1, "received": 50, "sent": 1, "status": {"OK": 1}})
    );
    assert_eq!(c["Slow"]["status"], json!({"DEADLINE_EXCEEDED": 1}));
    let play = &c["Play"];
    assert_eq!(play["calls"], 2);
    // The abandoned call's one move may or may not have been echoed before its reset.
    let sent = play["sent"].as_u64().unwrap();
    assert!((20..=21).contains(&sent), "{play}");
    assert_eq!(play["status"]["OK"], 1);
}
