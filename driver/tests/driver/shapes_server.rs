//! The routes for the load-shape tests on the testkit's loopback server, which counts
//! requests per path and keeps each path's last request time; `/stall` can stall once,
//! like a GC pause.
//!
//! Routes: `/stall` (answers at once, except that requests arriving within the stall
//! window wait until its end; the window opens `stall_after` after the first `/stall`
//! request and lasts `stall_for`); `/delay/{ms}`; `/status/{code}`; anything else: 200.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use herd_testkit::{Reply, Server};

use crate::support::Proto;

/// The server of this file, with the routes above.
pub type ShapeServer = Server;

/// A server whose `/stall` route stalls once for `length`, `after` its first request.
pub async fn start(proto: Proto, after: Duration, length: Duration) -> ShapeServer {
    let first_stall: Arc<Mutex<Option<Instant>>> = Arc::default();
    let empty = || Reply::ok().body("{}");
    Server::http(proto)
        .route_fn("/stall", move |_| {
            let now = Instant::now();
            let first = *first_stall.lock().unwrap().get_or_insert(now);
            let (from, to) = (first + after, first + after + length);
            let reply = if now >= from && now < to {
                empty().after(to - now)
            } else {
                empty()
            };
            async move { reply }
        })
        .route_fn("/delay/{ms}", move |req| async move {
            empty().after(Duration::from_millis(req.num("ms")))
        })
        .route_fn("/status/{code}", move |req| async move {
            empty().status(req.num("code") as u16)
        })
        .fallback(empty())
        .start()
        .await
}

/// A server that never stalls.
pub async fn plain(proto: Proto) -> ShapeServer {
    start(proto, Duration::ZERO, Duration::ZERO).await
}
