//! Streams against hand-rolled and hyper servers: a head in pieces, resets, the stream
//! limit, header lists past our limit, stream errors, the dynamic table over the wire.

use super::*;

#[tokio::test]
async fn a_response_in_pieces_continuation_padding_interim_head_and_trailers() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (id, _, _) = p.request().await;
        // 103 Early Hints first, then the real head split over HEADERS (padded, with a
        // priority) and two CONTINUATIONs.
        p.send(
            HEADERS,
            END_HEADERS,
            id,
            &head_block(103, &[("link", "</a>")]),
        )
        .await;
        let block = head_block(
            200,
            &[
                ("x-one", "1"),
                ("x-two", "two"),
                ("content-type", "text/plain"),
            ],
        );
        let mut first = vec![3]; // pad length
        first.extend_from_slice(&[0x80, 0, 0, 0, 15]); // exclusive on 0, weight 15
        first.extend_from_slice(&block[..4]);
        first.extend_from_slice(&[0; 3]);
        p.send(HEADERS, PADDED | PRIORITY_FLAG, id, &first).await;
        p.send(CONTINUATION, 0, id, &block[4..10]).await;
        p.send(CONTINUATION, END_HEADERS, id, &block[10..]).await;
        let mut padded = vec![5];
        padded.extend_from_slice(b"hello, ");
        padded.extend_from_slice(&[0; 5]);
        p.send(DATA, PADDED, id, &padded).await;
        p.send(DATA, 0, id, b"world").await;
        let trailers = [0x00, 5, b'x', b'-', b'c', b'r', b'c', 1, b'7'];
        p.send(HEADERS, END_HEADERS | END_STREAM, id, &trailers)
            .await;
        assert!(p.next().await.is_none(), "the client sent nothing more");
    })
    .await;
    let r = within(c.send(get("pieces"))).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.headers.to_map()["x-one"], "1");
    assert_eq!(r.headers.to_map()["x-two"], "two");
    assert_eq!(r.headers.to_map()["content-type"], "text/plain");
    assert!(
        !r.headers.to_map().contains_key("link"),
        "the 103's headers are not the response's"
    );
    assert_eq!(&r.body[..], b"hello, world");
    drop(c);
    within(server).await.unwrap();
}

#[tokio::test]
async fn rst_stream_fails_that_stream_by_its_code_and_the_connection_goes_on() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (id, ..) = p.request().await;
        p.send(RST_STREAM, 0, id, &0x7u32.to_be_bytes()).await; // REFUSED_STREAM
        let (id, ..) = p.request().await;
        p.send(HEADERS, END_HEADERS, id, &head_block(200, &[]))
            .await;
        p.send(RST_STREAM, 0, id, &PROTOCOL_ERROR.to_be_bytes())
            .await;
        let (id, ..) = p.request().await;
        p.answer(id, "", b"fine").await;
        let _ = p.next().await;
    })
    .await;
    let e = within(c.send(get("1"))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Reset, "{e}");
    assert!(e.to_string().contains("REFUSED_STREAM"), "{e}");
    let e = within(c.send(get("2"))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    assert!(!c.is_closed(), "a reset ends one stream only");
    let r = within(c.send(get("3"))).await.unwrap();
    assert_eq!(&r.body[..], b"fine");
    drop(c);
    within(server).await.unwrap();
}

#[tokio::test]
async fn max_concurrent_streams_1_makes_requests_wait_their_turn() {
    let (c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[(0x3, 1)]).await;
        let (id, ..) = p.request().await;
        p.answer(id, "", b"").await;
        for _ in 0..3 {
            let (id, test, _) = p.request().await;
            // No other request may arrive while this one is open.
            let early = tokio::time::timeout(Duration::from_millis(50), p.next()).await;
            assert!(early.is_err(), "a second stream opened beside stream {id}");
            p.answer(id, &test, test.as_bytes()).await;
        }
    })
    .await;
    // One call first: the client has the server's SETTINGS from then on.
    within(c.share().unwrap().send(get("first"))).await.unwrap();
    let tasks: Vec<_> = (0..3)
        .map(|i| {
            let mut h = c.share().unwrap();
            tokio::spawn(async move { within(h.send(get(&i.to_string()))).await.unwrap() })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        let r = t.await.unwrap();
        assert_eq!(r.body, i.to_string().as_bytes());
    }
    within(server).await.unwrap();
}

/// hyper's server codes header values with Huffman: every printable byte round-trips, and
/// many streams at once on shared handles all get their own answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn huffman_headers_and_many_streams_against_hyper() {
    let printable: String = (0x20u8..0x7f).map(char::from).collect();
    let (d, _server) = hyper_server(printable.clone()).await;
    let c = handshake(&d, d.tcp().await.unwrap(), false).await.unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|t| {
            let mut h = c.share().unwrap();
            let printable = printable.clone();
            tokio::spawn(async move {
                for i in 0..50 {
                    let n = format!("{t}-{i}");
                    let r = within(h.send(get(&n))).await.unwrap();
                    assert_eq!(r.body, n.as_bytes());
                    assert_eq!(r.headers.to_map()["x-printable"], printable.as_str());
                    assert_eq!(r.headers.to_map()["x-utf8"].as_bytes(), [0xc3, 0xa9]);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert!(!c.is_closed());
}

/// RFC 7541 C.6's three responses (Huffman-coded, through the dynamic table) as the heads of
/// three streams; then a table size update above our SETTINGS_HEADER_TABLE_SIZE, which the
/// server has acknowledged: a compression error, fatal to the connection.
#[tokio::test]
async fn the_dynamic_table_and_huffman_over_the_wire() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        for block in [
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            "4883 640e ffc1 c0bf",
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            "3fe1 1f 88",
        ] {
            let (id, ..) = p.request().await;
            p.send(HEADERS, END_HEADERS | END_STREAM, id, &hex(block)).await;
        }
        let goaway = p.next().await.unwrap();
        assert_eq!(&goaway.payload[4..8], COMPRESSION_ERROR.to_be_bytes());
    })
    .await;
    let r = within(c.send(get("1"))).await.unwrap();
    assert_eq!(r.status, 302);
    assert_eq!(r.headers.to_map()["location"], "https://www.example.com");
    let r = within(c.send(get("2"))).await.unwrap();
    assert_eq!(r.status, 307);
    assert_eq!(r.headers.to_map()["date"], "Mon, 21 Oct 2013 20:13:21 GMT");
    let r = within(c.send(get("3"))).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        r.headers.to_map()["set-cookie"],
        "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"
    );
    assert_eq!(r.headers.to_map()["content-encoding"], "gzip");
    assert_eq!(r.headers.to_map()["cache-control"], "private");
    let e = within(c.send(get("4"))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    assert!(e.to_string().contains("HPACK"), "{e}");
    assert!(c.is_closed());
    within(server).await.unwrap();
}

/// Requests past the 100 streams allowed before the server's SETTINGS wait; SETTINGS that
/// set no MAX_CONCURRENT_STREAMS lift the limit, and every one of them goes at once, not
/// one per stream that ends.
#[tokio::test]
async fn settings_without_a_stream_limit_release_every_queued_request() {
    const CALLS: usize = STREAMS_BEFORE_SETTINGS + 3;
    let (c, server) = pair(|l| async move {
        let mut p = Peer::preface(&l).await;
        let mut ids = Vec::new();
        for _ in 0..STREAMS_BEFORE_SETTINGS {
            ids.push(p.request().await);
        }
        let early = tokio::time::timeout(Duration::from_millis(50), p.next()).await;
        assert!(early.is_err(), "a stream past the limit before SETTINGS");
        p.settings(&[]).await;
        for _ in 0..CALLS - STREAMS_BEFORE_SETTINGS {
            let next = tokio::time::timeout(Duration::from_secs(2), p.request()).await;
            ids.push(next.expect("the queued requests go once the limit is lifted"));
        }
        for (id, test, _) in ids {
            p.answer(id, &test, test.as_bytes()).await;
        }
        while p.next().await.is_some() {}
    })
    .await;
    let tasks: Vec<_> = (0..CALLS)
        .map(|i| {
            let mut h = c.share().unwrap();
            tokio::spawn(async move { within(h.send(get(&i.to_string()))).await.unwrap() })
        })
        .collect();
    for (i, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap().body, i.to_string().as_bytes());
    }
    drop(c);
    within(server).await.unwrap();
}

/// A head of 30 000 one-byte indexed fields (then one added to the dynamic table): that
/// stream fails as a protocol error, with no panic and no 30 000-entry map, and the
/// connection goes on: the block was read through, so the next response's reference to
/// the entry it added still decodes. The client states its limit in its SETTINGS.
#[tokio::test]
async fn a_header_list_past_our_limit_fails_its_stream_only() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (id, ..) = p.request().await;
        let limit = p.settings.get(&0x6).copied();
        assert_eq!(limit, Some(hpack::MAX_LIST_SIZE as u32));
        let mut block = vec![0x88]; // :status 200
        block.resize(1 + 30_000, 0x90); // accept-encoding: gzip, deflate
        block.extend_from_slice(b"\x40\x06x-kept\x03yes"); // indexed
        let mut pieces = block.chunks(MAX_FRAME).peekable();
        let (mut kind, mut flags) = (HEADERS, END_STREAM);
        while let Some(piece) = pieces.next() {
            if pieces.peek().is_none() {
                flags |= END_HEADERS;
            }
            p.send(kind, flags, id, piece).await;
            (kind, flags) = (CONTINUATION, 0);
        }
        let rst = p.next().await.unwrap();
        assert_eq!((rst.kind, rst.id), (RST_STREAM, id));
        assert_eq!(&rst.payload[..], PROTOCOL_ERROR.to_be_bytes());
        let (id, ..) = p.request().await;
        p.send(HEADERS, END_HEADERS | END_STREAM, id, &[0x88, 0xbe])
            .await;
        let _ = p.next().await;
    })
    .await;
    let e = within(c.send(get("huge"))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    assert!(
        e.to_string().contains("SETTINGS_MAX_HEADER_LIST_SIZE"),
        "{e}"
    );
    let r = within(c.send(get("next"))).await.unwrap();
    assert_eq!(r.headers.to_map()["x-kept"], "yes");
    assert!(!c.is_closed());
    drop(c);
    within(server).await.unwrap();
}

/// Stream errors of the server's: DATA after a whole response leaves that response whole
/// (and resets its stream with STREAM_CLOSED);
/// a WINDOW_UPDATE past 2^31-1 resets its stream with FLOW_CONTROL_ERROR; PING on a stream
/// is a connection error, PROTOCOL_ERROR.
#[tokio::test]
async fn stream_errors_keep_a_whole_response_and_carry_their_own_codes() {
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (id, ..) = p.request().await;
        let head = head_block(200, &[]);
        p.send_all(&[
            (HEADERS, END_HEADERS, id, &head),
            (DATA, END_STREAM, id, b"whole"),
            (DATA, 0, id, b"more"),
        ])
        .await;
        // DATA after END_STREAM: STREAM_CLOSED (RFC 9113 §5.1), unless the client had
        // already released the stream when it read the frame, which it then ignores.
        let mut f = p.next().await.unwrap();
        if f.kind == RST_STREAM {
            assert_eq!(
                (f.id, &f.payload[..]),
                (id, &STREAM_CLOSED.to_be_bytes()[..])
            );
            f = p.next().await.unwrap();
        }
        assert_eq!(f.kind, HEADERS);
        let id = f.id;
        p.send(HEADERS, END_HEADERS, id, &head).await;
        p.send(WINDOW_UPDATE, 0, id, &MAX_STREAM_ID.to_be_bytes())
            .await;
        let rst = p.next().await.unwrap();
        assert_eq!((rst.kind, rst.id), (RST_STREAM, id));
        assert_eq!(&rst.payload[..], FLOW_CONTROL_ERROR.to_be_bytes());
        let (id, ..) = p.request().await;
        p.send(PING, 0, id, b"12345678").await;
        let goaway = p.next().await.unwrap();
        assert_eq!(goaway.kind, GOAWAY);
        assert_eq!(&goaway.payload[4..8], PROTOCOL_ERROR.to_be_bytes());
    })
    .await;
    let r = within(c.send(get("whole"))).await.unwrap();
    assert_eq!(&r.body[..], b"whole");
    let e = within(c.send(get("window"))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    assert!(e.to_string().contains("past 2^31-1"), "{e}");
    assert!(!c.is_closed());
    let e = within(c.send(get("ping"))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    assert!(e.to_string().contains("PING on stream"), "{e}");
    assert!(c.is_closed());
    within(server).await.unwrap();
}
