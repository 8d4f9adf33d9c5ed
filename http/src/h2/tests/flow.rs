//! Flow control: a large request body within the server's windows, a long response
//! body given its windows back as it is read.

use super::*;

#[tokio::test]
async fn a_large_body_goes_out_in_frames_within_the_servers_windows() {
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let want = body.clone();
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[(0x4, 20_000)]).await;
        let (id, ..) = p.request().await;
        p.answer(id, "", b"").await;
        let f = p.next().await.unwrap();
        assert_eq!((f.kind, f.flags & END_STREAM), (HEADERS, 0));
        let id = f.id;
        let (mut got, mut window, mut stream_window) = (Vec::new(), 65_535i64, 20_000i64);
        loop {
            let d = p.next().await.unwrap();
            assert_eq!((d.kind, d.id), (DATA, id));
            assert!(d.payload.len() <= MAX_FRAME, "a frame over 16 KiB");
            window -= d.payload.len() as i64;
            stream_window -= d.payload.len() as i64;
            assert!(
                window >= 0 && stream_window >= 0,
                "the client overran a window"
            );
            got.extend_from_slice(&d.payload);
            if d.flags & END_STREAM != 0 {
                break;
            }
            if stream_window == 0 || window < 16_384 {
                // Give back what was read, in two steps, as a server reading slowly would.
                let n = 20_000 - stream_window;
                p.send(WINDOW_UPDATE, 0, id, &(n as u32).to_be_bytes())
                    .await;
                stream_window += n;
                let n = 65_535 - window;
                p.send(WINDOW_UPDATE, 0, 0, &(n as u32).to_be_bytes()).await;
                window += n;
            }
        }
        assert!(got == body, "the body arrived whole and in order");
        p.answer(id, "", b"").await;
        let _ = p.next().await;
    })
    .await;
    // One call first: the client has the server's SETTINGS from then on.
    within(c.send(get("first"))).await.unwrap();
    let mut req = get("big");
    req.method = Method::POST;
    req.body = want.into();
    let r = within(c.send(req)).await.unwrap();
    assert_eq!(r.status, 200);
    drop(c);
    within(server).await.unwrap();
}

#[tokio::test]
async fn a_long_stream_gets_its_windows_back_as_it_is_read() {
    const TOTAL: usize = 11 << 20;
    let (mut c, server) = pair(|l| async move {
        let mut p = Peer::accept(&l, &[]).await;
        let (id, ..) = p.request().await;
        p.send(HEADERS, END_HEADERS, id, &head_block(200, &[]))
            .await;
        let chunk = vec![b'x'; MAX_FRAME];
        let mut sent = 0;
        while sent < TOTAL {
            // Strictly within the windows the client gave: wait for more when they are
            // spent.
            let stream = p.windows.get(&id).copied().unwrap_or(p.initial_window);
            let n = chunk.len().min(TOTAL - sent);
            if stream < n as i64 || p.window < n as i64 {
                assert!(within(p.window_update()).await, "only window updates");
                continue;
            }
            let end = if sent + n == TOTAL { END_STREAM } else { 0 };
            p.send(DATA, end, id, &chunk[..n]).await;
            *p.windows.entry(id).or_insert(stream) -= n as i64;
            p.window -= n as i64;
            sent += n;
        }
        let _ = p.next().await;
    })
    .await;
    let mut s = within(c.open(get("long"))).await.unwrap();
    assert_eq!(s.status, 200);
    let mut read = 0;
    while let Some(chunk) = within(s.body.chunk()).await {
        read += chunk.unwrap().len();
    }
    assert_eq!(read, TOTAL);
    drop((s, c));
    within(server).await.unwrap();
}
