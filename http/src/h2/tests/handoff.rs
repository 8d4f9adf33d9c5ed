//! The socket's hand-off: dropped calls and bodies, the reader leaving while others wait,
//! timeouts in a crowd.

use super::*;

#[tokio::test]
async fn a_dropped_request_resets_its_stream_and_the_next_call_goes_through() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (slow, ..) = p.request().await;
        let rst = p.next().await.unwrap();
        assert_eq!((rst.kind, rst.id), (RST_STREAM, slow));
        assert_eq!(&rst.payload[..], CANCEL.to_be_bytes());
        // The late answer to the dropped request is read past.
        p.answer(slow, "late", b"late").await;
        let (id, test, _) = p.request().await;
        p.answer(id, &test, b"next").await;
        let _ = p.next().await;
    })
    .await;
    let timed_out = tokio::time::timeout(Duration::from_millis(50), c.send(get("slow"))).await;
    assert!(timed_out.is_err());
    let r = within(c.send(get("next"))).await.unwrap();
    assert_eq!(&r.body[..], b"next");
    assert!(!c.is_closed());
    drop(c);
    within(server).await.unwrap();
}

#[tokio::test]
async fn a_dropped_stream_body_resets_the_stream() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (id, ..) = p.request().await;
        p.send(HEADERS, END_HEADERS, id, &head_block(200, &[]))
            .await;
        p.send(DATA, 0, id, b"event 1\n").await;
        let rst = p.next().await.unwrap();
        assert_eq!((rst.kind, rst.id), (RST_STREAM, id));
        let (id, ..) = p.request().await;
        p.answer(id, "", b"after").await;
        let _ = p.next().await;
    })
    .await;
    let mut s = within(c.open(get("events"))).await.unwrap();
    assert_eq!(
        &within(s.body.chunk()).await.unwrap().unwrap()[..],
        b"event 1\n"
    );
    drop(s);
    let r = within(c.send(get("after"))).await.unwrap();
    assert_eq!(&r.body[..], b"after");
    drop(c);
    within(server).await.unwrap();
}

/// The task the socket would wake finishes first; the other, still waiting, must be woken
/// to read its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_when_the_reader_leaves() {
    let (c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (late, ..) = p.request().await;
        let (early, ..) = p.request().await;
        p.answer(early, "", b"early").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        p.answer(late, "", b"late").await;
        let _ = p.next().await;
    })
    .await;
    let mut late = c.share().unwrap();
    let late = tokio::spawn(async move { within(late.send(get("late"))).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut early = c.share().unwrap();
    let early = tokio::spawn(async move { within(early.send(get("early"))).await.unwrap() });
    assert_eq!(&early.await.unwrap().body[..], b"early");
    assert_eq!(&late.await.unwrap().body[..], b"late");
    drop(c);
    within(server).await.unwrap();
}

/// Many tasks on one connection, some of whose requests time out (their futures dropped
/// mid-flight, whichever task was reading at the time): nobody is left waiting, every
/// answer reaches its own request, and the connection stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timeouts_in_a_crowd_leave_nobody_hanging() {
    let (d, _server) = hyper_server(String::new()).await;
    let c = handshake(&d, d.tcp().await.unwrap(), false).await.unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|t| {
            let mut h = c.share().unwrap();
            tokio::spawn(async move {
                let mut answered = 0;
                for i in 0..40 {
                    // `x-test: ms/tag`: the server waits `ms` before answering `tag`.
                    let n = format!("{}/{t}-{i}", (t + i) % 4);
                    let call = tokio::time::timeout(Duration::from_millis(2), h.send(get(&n)));
                    if let Ok(r) = within(call).await {
                        assert_eq!(r.unwrap().body, n.as_bytes());
                        answered += 1;
                    }
                }
                answered
            })
        })
        .collect();
    let mut answered = 0;
    for t in tasks {
        answered += t.await.unwrap();
    }
    assert!(answered > 0, "some calls beat their timeout");
    assert!(!c.is_closed());
    let r = within(c.share().unwrap().send(get("0/last")))
        .await
        .unwrap();
    assert_eq!(&r.body[..], b"0/last");
}

/// A body's holder waits for a chunk last (so the socket would wake it), then gives up
/// (a timeout) and keeps the body: the call waiting beside it still gets its answer.
#[tokio::test]
async fn a_chunk_given_up_mid_wait_hands_the_socket_on() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (events, ..) = p.request().await;
        p.send(HEADERS, END_HEADERS, events, &head_block(200, &[]))
            .await;
        let (call, ..) = p.request().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        p.answer(call, "call", b"call").await;
        while p.next().await.is_some() {}
    })
    .await;
    let mut s = within(c.open(get("events"))).await.unwrap();
    let mut h = c.share().unwrap();
    let call = tokio::spawn(async move { h.send(get("call")).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let gave_up = tokio::time::timeout(Duration::from_millis(30), s.body.chunk()).await;
    assert!(gave_up.is_err(), "no chunk came");
    let r = tokio::time::timeout(Duration::from_secs(2), call)
        .await
        .expect("the other call was answered, not left asleep")
        .unwrap()
        .unwrap();
    assert_eq!(&r.body[..], b"call");
    drop((s, c));
    within(server).await.unwrap();
}
