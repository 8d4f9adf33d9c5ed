//! herd's HTTP/2 client against the `h2` crate's server (the HTTP/2 under hyper), on one
//! h2c connection: what the client saw of each exchange (status, headers, body, or the
//! error) must be what the server recorded sending, and what the server received (method,
//! path, headers, body) what the client sent. The exchanges come from a fixed seed: every
//! method, header sets small and past 16 KiB (CONTINUATION both ways), bodies of every
//! size from none to past 4 MiB both ways, trailers, streams the server resets before and
//! after its head, more calls at once than the server's MAX_CONCURRENT_STREAMS, and last a
//! GOAWAY with calls in flight.

use std::{
    collections::BTreeMap,
    future::poll_fn,
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::Bytes;
use h2::{Reason, RecvStream, SendStream, server::SendResponse};
use herd_http::{Connection, Endpoint, ErrorKind, Protocol, Request, TransportError};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{Semaphore, mpsc, oneshot, watch},
};

const SEED: u64 = 0x6865_7264_6832; // "herdh2"
const EXCHANGES: usize = 64;
/// Tasks sharing the connection: more than the server lets run at once.
const TASKS: usize = 16;
const MAX_CONCURRENT_STREAMS: u32 = 5;
/// Calls held open by the server when it sends GOAWAY.
const HELD: usize = 3;
/// Long enough for anything here (the largest exchange moves 5 MiB on loopback); a hang
/// fails instead of stalling.
const PATIENCE: Duration = Duration::from_secs(20);

/// splitmix64: the same exchanges on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<T: Clone>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())].clone()
    }

    fn bytes(&mut self, len: usize) -> Bytes {
        (0..len).map(|_| b'a' + self.below(26) as u8).collect()
    }

    fn headers(&mut self, prefix: &str, big: bool) -> HeaderMap {
        let mut h = HeaderMap::new();
        for k in 0..self.below(6) {
            let len = 1 + self.below(40);
            let value = self.bytes(len);
            h.append(
                HeaderName::from_bytes(format!("{prefix}-{k}").as_bytes()).unwrap(),
                HeaderValue::from_maybe_shared(value).unwrap(),
            );
        }
        if big {
            // Past one 16 KiB frame however it is coded: HEADERS and CONTINUATION.
            let value = self.bytes(20_000);
            h.insert(
                HeaderName::from_bytes(format!("{prefix}-big").as_bytes()).unwrap(),
                HeaderValue::from_maybe_shared(value).unwrap(),
            );
        }
        h
    }
}

/// What the server does with a request.
#[derive(Debug, Clone)]
#[expect(clippy::large_enum_variant, reason = "a test's plan of 64, built once")]
enum Answer {
    Respond {
        status: u16,
        headers: HeaderMap,
        body: Bytes,
        trailers: Option<HeaderMap>,
    },
    /// RST_STREAM before any head.
    Reset(Reason),
    /// A head and part of the body, then RST_STREAM.
    ResetAfterHead(Reason),
}

#[derive(Debug, Clone)]
struct Exchange {
    method: Method,
    path: String,
    headers: HeaderMap,
    body: Bytes,
    /// The client reads the body as it arrives ([`Connection::open`]), not whole.
    streamed: bool,
    answer: Answer,
}

const SIZES: &[usize] = &[0, 0, 1, 100, 4096, 16_384, 16_385, 65_535, 70_000, 300_000];
/// Past the client's 4 MiB stream window and the server's, both ways.
const HUGE: usize = 5 << 20;

fn exchanges() -> Vec<Exchange> {
    let mut rng = Rng(SEED);
    (0..EXCHANGES)
        .map(|i| {
            let method = rng.pick(&[
                Method::GET,
                Method::POST,
                Method::PUT,
                Method::DELETE,
                Method::PATCH,
                Method::OPTIONS,
            ]);
            let mut size = rng.pick(SIZES);
            if i == 7 {
                size = HUGE;
            }
            let body = if method == Method::GET {
                Bytes::new()
            } else {
                rng.bytes(size)
            };
            let headers = rng.headers("x-req", i % 11 == 3);
            let answer = match rng.below(10) {
                0 => Answer::Reset(rng.pick(&[
                    Reason::REFUSED_STREAM,
                    Reason::INTERNAL_ERROR,
                    Reason::PROTOCOL_ERROR,
                ])),
                1 => Answer::ResetAfterHead(rng.pick(&[Reason::CANCEL, Reason::INTERNAL_ERROR])),
                _ => {
                    let mut size = rng.pick(SIZES);
                    if i == 12 || i == 13 {
                        size = HUGE;
                    }
                    Answer::Respond {
                        status: rng.pick(&[200, 201, 202, 301, 404, 409, 500, 503]),
                        headers: rng.headers("x-resp", i % 13 == 5),
                        body: rng.bytes(size),
                        trailers: (rng.below(4) == 0).then(|| rng.headers("x-trailer", false)),
                    }
                }
            };
            Exchange {
                path: format!("/x/{i}?q={}", rng.below(1000)),
                method,
                headers,
                body,
                streamed: rng.below(3) == 0,
                answer,
            }
        })
        .collect()
}

/// What the server took in for one request.
#[derive(Debug, PartialEq)]
struct Received {
    method: Method,
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

/// What the server recorded: each request it received and what it sent back, by path.
#[derive(Default)]
struct Log {
    received: BTreeMap<String, Received>,
    sent: BTreeMap<String, Answer>,
    /// Requests taken and not yet answered.
    open: usize,
}

/// The h2 server on `l`: one connection, each request answered as its exchange says, but
/// none before MAX_CONCURRENT_STREAMS requests were open at once (so the client must have
/// queued the rest, and let none past the limit: h2 would refuse it); a `/held/…` request
/// is answered only once `release` gives it a permit. On `goaway` it shuts down gracefully
/// (GOAWAY, then the end once its streams are done).
async fn serve(
    l: TcpListener,
    plan: Arc<Vec<Exchange>>,
    log: Arc<Mutex<Log>>,
    held: mpsc::Sender<()>,
    release: Arc<Semaphore>,
    mut goaway: oneshot::Receiver<()>,
) {
    let (full, _) = watch::channel(false);
    let full = Arc::new(full);
    let (socket, _) = l.accept().await.unwrap();
    let mut conn = h2::server::Builder::new()
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .handshake::<TcpStream, Bytes>(socket)
        .await
        .unwrap();
    let mut shut = false;
    loop {
        let next = tokio::select! {
            r = conn.accept() => r,
            _ = &mut goaway, if !shut => {
                conn.graceful_shutdown();
                shut = true;
                continue;
            }
        };
        let Some(r) = next else { break };
        let (req, respond) = r.expect("the client spoke HTTP/2");
        let (plan, log, held, release) = (plan.clone(), log.clone(), held.clone(), release.clone());
        let full = full.clone();
        tokio::spawn(async move {
            let path = req.uri().path_and_query().unwrap().as_str().to_owned();
            {
                let mut log = log.lock().unwrap();
                log.open += 1;
                if log.open >= MAX_CONCURRENT_STREAMS as usize {
                    full.send_replace(true);
                }
            }
            if path.starts_with("/x/") {
                let mut wait = full.subscribe();
                tokio::time::timeout(PATIENCE, wait.wait_for(|full| *full))
                    .await
                    .expect("the client opened MAX_CONCURRENT_STREAMS streams at once")
                    .unwrap();
            }
            let (parts, body) = req.into_parts();
            let body = read(body).await;
            let received = Received {
                method: parts.method,
                path: path.clone(),
                headers: parts.headers,
                body,
            };
            let answer = if path == "/warm" {
                Answer::Respond {
                    status: 204,
                    headers: HeaderMap::new(),
                    body: Bytes::new(),
                    trailers: None,
                }
            } else if let Some(k) = path.strip_prefix("/held/") {
                held.send(()).await.unwrap();
                release.acquire().await.unwrap().forget();
                Answer::Respond {
                    status: 200,
                    headers: HeaderMap::new(),
                    body: Bytes::from(format!("held {k}")),
                    trailers: None,
                }
            } else {
                let i: usize = path[3..].split('?').next().unwrap().parse().unwrap();
                plan[i].answer.clone()
            };
            // Recorded before it goes: the client may have all of it before this task runs
            // again.
            {
                let mut log = log.lock().unwrap();
                log.received.insert(path.clone(), received);
                log.sent.insert(path, answer.clone());
            }
            answer_with(respond, &answer).await;
            log.lock().unwrap().open -= 1;
        });
    }
}

async fn read(mut body: RecvStream) -> Bytes {
    let mut got = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("the request body");
        body.flow_control().release_capacity(chunk.len()).unwrap();
        got.extend_from_slice(&chunk);
    }
    got.into()
}

async fn answer_with(mut respond: SendResponse<Bytes>, answer: &Answer) {
    let (status, headers, body, trailers) = match answer {
        Answer::Reset(reason) => return respond.send_reset(*reason),
        Answer::ResetAfterHead(reason) => {
            let head = http::Response::builder().status(200).body(()).unwrap();
            let mut send = respond.send_response(head, false).unwrap();
            send_body(&mut send, Bytes::from_static(b"part of it"), false).await;
            return send.send_reset(*reason);
        }
        Answer::Respond {
            status,
            headers,
            body,
            trailers,
        } => (status, headers, body, trailers),
    };
    let mut head = http::Response::builder().status(*status).body(()).unwrap();
    *head.headers_mut() = headers.clone();
    let end = body.is_empty() && trailers.is_none();
    let mut send = respond.send_response(head, end).unwrap();
    if !body.is_empty() {
        send_body(&mut send, body.clone(), trailers.is_none()).await;
    }
    if let Some(t) = trailers {
        send.send_trailers(t.clone()).unwrap();
    }
}

/// `data` within the windows the client gives.
async fn send_body(send: &mut SendStream<Bytes>, mut data: Bytes, end: bool) {
    while !data.is_empty() {
        send.reserve_capacity(data.len());
        let n = poll_fn(|cx| send.poll_capacity(cx))
            .await
            .expect("the stream stays open")
            .unwrap();
        let chunk = data.split_to(n.min(data.len()));
        send.send_data(chunk, end && data.is_empty()).unwrap();
    }
}

/// What the client saw of one exchange.
#[derive(Debug, PartialEq)]
enum Seen {
    Response {
        status: u16,
        headers: HeaderMap,
        body: Body,
    },
    Failed(ErrorKind),
}

/// A body, shown by its length and first bytes: a mismatch of megabytes stays readable.
#[derive(PartialEq)]
struct Body(Bytes);

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let head = &self.0[..self.0.len().min(24)];
        write!(
            f,
            "{} bytes {:?}…",
            self.0.len(),
            String::from_utf8_lossy(head)
        )
    }
}

async fn call(c: &mut Box<dyn Connection>, e: &Exchange) -> (Seen, String) {
    let req = Request {
        method: e.method.clone(),
        path: e.path.clone(),
        headers: e.headers.clone(),
        body: e.body.clone(),
    };
    let failed = |err: TransportError| (Seen::Failed(err.kind()), err.to_string());
    let seen = if e.streamed {
        match tokio::time::timeout(PATIENCE, async {
            let s = c.open(req).await?;
            let body = s.body.collect().await?;
            Ok((s.status, s.headers, body))
        })
        .await
        .expect("the streamed call ended within the test's patience")
        {
            Ok((status, headers, body)) => Seen::Response {
                status,
                headers,
                body: Body(body),
            },
            Err(err) => return failed(err),
        }
    } else {
        match tokio::time::timeout(PATIENCE, c.send(req))
            .await
            .expect("the call ended within the test's patience")
        {
            Ok(r) => Seen::Response {
                status: r.status,
                headers: r.headers.to_map(),
                body: Body(r.body),
            },
            Err(err) => return failed(err),
        }
    };
    (seen, String::new())
}

/// What the client must have seen of `answer`: the response as sent (trailers are read
/// past), or a failure of the kind the reset's code means.
fn expected(answer: &Answer) -> Seen {
    match answer {
        Answer::Respond {
            status,
            headers,
            body,
            ..
        } => Seen::Response {
            status: *status,
            headers: headers.clone(),
            body: Body(body.clone()),
        },
        Answer::Reset(Reason::PROTOCOL_ERROR) => Seen::Failed(ErrorKind::Protocol),
        Answer::Reset(_) | Answer::ResetAfterHead(_) => Seen::Failed(ErrorKind::Reset),
    }
}

/// What the server must have received for `e`: the client's headers (`content-length`
/// added for a body), method, path and body.
fn sent_by_client(e: &Exchange) -> Received {
    let mut headers = e.headers.clone();
    if !e.body.is_empty() {
        headers.insert(http::header::CONTENT_LENGTH, e.body.len().into());
    }
    Received {
        method: e.method.clone(),
        path: e.path.clone(),
        headers,
        body: e.body.clone(),
    }
}

fn get(path: &str) -> Request {
    Request {
        method: Method::GET,
        path: path.into(),
        headers: HeaderMap::new(),
        body: Bytes::new(),
    }
}

/// herd's h2c transport to the server on `port`.
fn h2c(port: u16) -> std::sync::Arc<dyn herd_http::Transport> {
    let endpoint = Endpoint {
        host: "127.0.0.1".into(),
        port,
        authority: format!("127.0.0.1:{port}"),
        connect_timeout: Duration::from_secs(5),
        source_addrs: Vec::new(),
    };
    herd_http::connector(&endpoint, Protocol::H2c, None)
}

/// The plan holds every case the header promises.
fn covers(plan: &[Exchange]) {
    let answers = |f: fn(&Answer) -> bool| plan.iter().filter(|e| f(&e.answer)).count();
    let big = |h: &HeaderMap| h.iter().any(|(n, _)| n.as_str().ends_with("-big"));
    for (what, n) in [
        (
            "a request body past 4 MiB",
            plan.iter().filter(|e| e.body.len() == HUGE).count(),
        ),
        (
            "a request body past the first window",
            plan.iter().filter(|e| e.body.len() > 65_535).count(),
        ),
        (
            "request headers past 16 KiB",
            plan.iter().filter(|e| big(&e.headers)).count(),
        ),
        (
            "a streamed call",
            plan.iter().filter(|e| e.streamed).count(),
        ),
        (
            "a response body past 4 MiB",
            answers(|a| matches!(a, Answer::Respond { body, .. } if body.len() == HUGE)),
        ),
        (
            "response headers past 16 KiB",
            answers(
                |a| matches!(a, Answer::Respond { headers, .. } if headers.iter().any(|(n, _)| n.as_str().ends_with("-big"))),
            ),
        ),
        (
            "trailers",
            answers(|a| {
                matches!(
                    a,
                    Answer::Respond {
                        trailers: Some(_),
                        ..
                    }
                )
            }),
        ),
        (
            "a reset before the head",
            answers(|a| matches!(a, Answer::Reset(_))),
        ),
        (
            "a reset after the head",
            answers(|a| matches!(a, Answer::ResetAfterHead(_))),
        ),
    ] {
        assert!(n > 0, "the plan has no exchange with {what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_sees_what_the_h2_server_sent_and_sends_what_it_received() {
    let plan = Arc::new(exchanges());
    covers(&plan);
    let log = Arc::new(Mutex::new(Log::default()));
    let (held_tx, mut held_rx) = mpsc::channel(HELD);
    let release = Arc::new(Semaphore::new(0));
    let (goaway_tx, goaway_rx) = oneshot::channel();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let server = tokio::spawn(serve(
        l,
        plan.clone(),
        log.clone(),
        held_tx,
        release.clone(),
        goaway_rx,
    ));
    let conn = h2c(port).connect().await.unwrap();

    // One call first, so the client has the server's SETTINGS. Before them it may open up
    // to 100 streams (RFC 9113 §6.5.2's least); those past the server's limit are refused
    // (REFUSED_STREAM, unprocessed) by h2 itself, not by the server's application.
    let mut first = conn.share().unwrap();
    let warm = first.send(get("/warm"));
    let warm = tokio::time::timeout(PATIENCE, warm).await.unwrap().unwrap();
    assert_eq!(warm.status, 204);

    // Every exchange, TASKS at once on shared handles, each task taking every TASKS-th.
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let mut h = conn.share().unwrap();
            let plan = plan.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                for i in (t..plan.len()).step_by(TASKS) {
                    seen.push((i, call(&mut h, &plan[i]).await));
                }
                seen
            })
        })
        .collect();
    let mut seen = BTreeMap::new();
    for t in tasks {
        seen.extend(t.await.unwrap());
    }
    {
        let log = log.lock().unwrap();
        let (mut ok, mut failed) = (0, 0);
        for (i, e) in plan.iter().enumerate() {
            let (got, why) = &seen[&i];
            let Some(sent) = log.sent.get(&e.path) else {
                panic!(
                    "exchange {i} ({}): the server never answered; the client saw {got:?}: {why}",
                    e.path
                );
            };
            assert_eq!(*got, expected(sent), "exchange {i} ({}): {why}", e.path);
            if let Answer::Reset(r) | Answer::ResetAfterHead(r) = sent {
                assert!(why.contains(&format!("{r:?}")), "exchange {i}: {why}");
                failed += 1;
            } else {
                ok += 1;
            }
            assert!(
                log.received[&e.path] == sent_by_client(e),
                "exchange {i} ({}): the server received another request than the client sent",
                e.path
            );
        }
        assert!(
            ok > 40 && failed > 3,
            "{ok} answered, {failed} reset: a weak plan"
        );
    }
    assert!(!conn.is_closed());

    // GOAWAY with calls in flight: they are answered; a new call is refused.
    let held: Vec<_> = (0..HELD)
        .map(|k| {
            let mut h = conn.share().unwrap();
            tokio::spawn(async move {
                let r = h.send(get(&format!("/held/{k}")));
                tokio::time::timeout(PATIENCE, r).await.unwrap()
            })
        })
        .collect();
    for _ in 0..HELD {
        tokio::time::timeout(PATIENCE, held_rx.recv())
            .await
            .unwrap()
            .unwrap();
    }
    goaway_tx.send(()).unwrap();
    tokio::time::timeout(PATIENCE, async {
        while !conn.is_closed() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the client noticed the GOAWAY");
    let mut late = conn.share().unwrap();
    let refused = late.send(get("/after"));
    let e = tokio::time::timeout(PATIENCE, refused)
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Reset, "{e}");
    assert!(e.to_string().contains("GOAWAY"), "{e}");
    release.add_permits(HELD);
    for (k, h) in held.into_iter().enumerate() {
        let r = h
            .await
            .unwrap()
            .expect("a call in flight at the GOAWAY is answered");
        assert_eq!(
            (r.status, &r.body[..]),
            (200, format!("held {k}").as_bytes())
        );
    }
    drop(conn);
    tokio::time::timeout(PATIENCE, server)
        .await
        .expect("the server's connection ended")
        .unwrap();
    let log = log.lock().unwrap();
    assert!(
        !log.received.contains_key("/after"),
        "a refused call reached the server"
    );
    for k in 0..HELD {
        assert!(log.received.contains_key(&format!("/held/{k}")));
    }
}
