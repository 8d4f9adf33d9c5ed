//! gRPC over herd's own HTTP/2 client (h2c to Python's grpcio), as far as it carries gRPC
//! before phase 2 adds trailers and request streams: a
//! unary call's message, a Trailers-Only status read from the response head, and a
//! server stream read message by message as its body arrives. What it cannot show yet —
//! the `grpc-status` of a call that sent messages, which comes in trailers the client
//! reads past — is what phase 2 adds (http/src/grpc/mod.rs).

use std::time::Duration;

use bytes::Bytes;
use herd_http::grpc::{
    self, Code, DEFAULT_MAX_MESSAGE, Decoder, Encoding, Head, JsonOptions, Method, Protos,
};
use herd_http::{Connection, Endpoint, Protocol, Request};
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

    let c = server.counters();
    assert_eq!(
        c["Join"],
        json!({"calls": 6, "received": 6, "sent": 5, "status": {"OK": 5, "RESOURCE_EXHAUSTED": 1}})
    );
    assert_eq!(c["Watch"]["sent"], 40);
}
