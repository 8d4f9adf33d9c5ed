//! The connection as a whole: GOAWAY, PING, connection errors, servers that do not speak
//! HTTP/2 or close.

use super::*;

#[tokio::test]
async fn goaway_fails_the_streams_it_did_not_take_and_closes_the_connection() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (first, ..) = p.request().await;
        let (second, ..) = p.request().await;
        let mut goaway = first.to_be_bytes().to_vec();
        goaway.extend_from_slice(&NO_ERROR.to_be_bytes());
        goaway.extend_from_slice(b"shutting down");
        p.send(GOAWAY, 0, 0, &goaway).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        p.answer(first, "1", b"one").await;
        assert!(second > first);
        // The connection ends once its last stream has.
        tokio::time::sleep(Duration::from_millis(20)).await;
    })
    .await;
    let mut other = c.share().unwrap();
    let a = tokio::spawn(async move { within(c.send(get("a"))).await.map(|r| r.body) });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let b = within(other.send(get("b"))).await.unwrap_err();
    assert_eq!(b.kind(), ErrorKind::Reset, "{b}");
    assert!(
        b.to_string().contains("GOAWAY (NO_ERROR: shutting down)"),
        "{b}"
    );
    assert_eq!(&a.await.unwrap().unwrap()[..], b"one");
    assert!(other.is_closed());
    let e = within(other.send(get("c"))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Reset, "{e}");
    within(server).await.unwrap();
}

#[tokio::test]
async fn pings_are_answered_and_a_connection_error_fails_every_handle() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (id, ..) = p.request().await;
        p.send(PING, 0, 0, b"12345678").await;
        let pong = p.next().await.unwrap();
        assert_eq!(
            (pong.kind, pong.flags, &pong.payload[..]),
            (PING, ACK, &b"12345678"[..])
        );
        p.answer(id, "", b"ok").await;
        let (id, ..) = p.request().await;
        p.send(DATA, 0, 0, b"on stream 0").await;
        let goaway = p.next().await.unwrap();
        assert_eq!(goaway.kind, GOAWAY);
        assert_eq!(&goaway.payload[4..8], PROTOCOL_ERROR.to_be_bytes());
        let _ = id;
    })
    .await;
    let r = within(c.send(get("ping"))).await.unwrap();
    assert_eq!(&r.body[..], b"ok");
    let other = c.share().unwrap();
    let e = within(c.send(get("broken"))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    assert!(other.is_closed() && c.is_closed());
    within(server).await.unwrap();
}

#[tokio::test]
async fn an_http_1_server_is_a_protocol_error_whether_it_answers_or_hangs_up() {
    for answer in [
        &b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"[..],
        b"",
    ] {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut c = client(&l).await;
        let (mut s, _) = l.accept().await.unwrap();
        s.read_exact(&mut [0; PREFACE.len()]).await.unwrap();
        s.write_all(answer).await.unwrap();
        drop(s);
        let e = within(c.send(get("h1"))).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
        assert!(e.to_string().contains("HTTP/1.1 server?"), "{e}");
        assert!(c.is_closed());
    }
}

/// Over TLS, ALPN has already chosen h2: a server that hangs up unheard is a reset, not a
/// suspected HTTP/1.1 server. (The socket is plain TCP here: TLS changes nothing else.)
#[tokio::test]
async fn over_tls_a_server_that_hangs_up_unheard_is_a_reset() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let d = dial(&l);
    let mut c = handshake(&d, d.tcp().await.unwrap(), true).await.unwrap();
    let (mut s, _) = l.accept().await.unwrap();
    s.read_exact(&mut [0; PREFACE.len()]).await.unwrap();
    drop(s);
    let e = within(c.send(get("h2"))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Reset, "{e}");
    assert!(!e.to_string().contains("HTTP/1.1"), "{e}");
    assert!(c.is_closed());
}

#[tokio::test]
async fn a_server_that_closes_after_speaking_http2_is_a_reset() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let _ = p.request().await;
    })
    .await;
    let e = within(c.send(get("x"))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Reset, "{e}");
    within(server).await.unwrap();
}

/// A GOAWAY that arrives while nobody uses the connection is seen by `is_closed`, so the
/// owner reconnects instead of sending into a closing connection.
#[tokio::test]
async fn an_idle_connection_notices_a_goaway() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (id, ..) = p.request().await;
        p.answer(id, "", b"ok").await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut goaway = id.to_be_bytes().to_vec();
        goaway.extend_from_slice(&NO_ERROR.to_be_bytes());
        p.send(GOAWAY, 0, 0, &goaway).await;
        let _ = p.next().await;
    })
    .await;
    within(c.send(get("1"))).await.unwrap();
    assert!(!c.is_closed());
    within(async {
        while !c.is_closed() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    drop(c);
    within(server).await.unwrap();
}

/// MAX_CONCURRENT_STREAMS 1: one call in flight, one queued for a stream and reading for
/// both when the GOAWAY arrives. The queued call fails, refused; the one in flight still
/// gets its answer when it comes, not at its timeout: the leaver hands the socket on.
#[tokio::test]
async fn after_a_goaway_the_queued_call_fails_and_the_one_in_flight_is_answered() {
    let (c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[(0x3, 1)]).await;
        let (id, ..) = p.request().await;
        p.answer(id, "", b"").await;
        let (a, ..) = p.request().await;
        // By now the second call waits for a stream, and reads for both.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut goaway = a.to_be_bytes().to_vec();
        goaway.extend_from_slice(&NO_ERROR.to_be_bytes());
        p.send(GOAWAY, 0, 0, &goaway).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        p.answer(a, "a", b"a").await;
        let _ = p.next().await;
    })
    .await;
    // One call first: the client has the server's SETTINGS from then on.
    within(c.share().unwrap().send(get("first"))).await.unwrap();
    let mut h = c.share().unwrap();
    let a = tokio::spawn(async move { h.send(get("a")).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut h = c.share().unwrap();
    let b = tokio::spawn(async move { h.send(get("b")).await });
    let e = within(b).await.unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Reset, "{e}");
    assert!(e.to_string().contains("GOAWAY"), "{e}");
    let r = tokio::time::timeout(Duration::from_secs(2), a)
        .await
        .expect("the call in flight was answered, not left asleep")
        .unwrap()
        .unwrap();
    assert_eq!(&r.body[..], b"a");
    drop(c);
    within(server).await.unwrap();
}

/// A connection error while a request body waits for window: the GOAWAY is the last
/// thing the client sends, though the same read opened the window.
#[tokio::test]
async fn no_data_follows_our_goaway() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let f = p.next().await.unwrap();
        assert_eq!((f.kind, f.flags & END_STREAM), (HEADERS, 0));
        let mut sent = 0;
        while sent < 65_535 {
            let d = p.next().await.unwrap();
            assert_eq!(d.kind, DATA);
            sent += d.payload.len();
        }
        let more = 65_535u32.to_be_bytes();
        p.send_all(&[
            (WINDOW_UPDATE, 0, f.id, &more),
            (WINDOW_UPDATE, 0, 0, &more),
            (PING, 0, f.id, b"12345678"),
        ])
        .await;
        let goaway = p.next().await.unwrap();
        assert_eq!(goaway.kind, GOAWAY, "nothing before the GOAWAY");
        assert!(p.next().await.is_none(), "nothing after the GOAWAY");
    })
    .await;
    let mut req = get("big");
    req.method = Method::POST;
    req.body = vec![b'x'; 100_000].into();
    let e = within(c.send(req)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    drop(c);
    within(server).await.unwrap();
}
