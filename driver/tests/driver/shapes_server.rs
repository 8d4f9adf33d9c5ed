//! A second loopback server for the load-shape tests: it counts requests per path, keeps
//! each path's last request time, and can stall once, like a GC pause.
//!
//! Routes: `/stall` (answers at once, except that requests arriving within the stall
//! window wait until its end; the window opens `stall_after` after the first `/stall`
//! request and lasts `stall_for`); `/delay/{ms}`; `/status/{code}`; anything else: 200.

use std::{
    collections::HashMap,
    convert::Infallible,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response};

use crate::support::{Proto, Server, serve};

/// What the server saw besides [`Counts`](crate::support::Counts).
#[derive(Default)]
pub struct Seen {
    /// Per path: count and last arrival.
    pub paths: Mutex<HashMap<String, (u64, Instant)>>,
    first_stall: Mutex<Option<Instant>>,
}

/// The server of this file, with the routes above.
pub type ShapeServer = Server<Seen>;

#[derive(Clone, Copy)]
struct Stall {
    after: Duration,
    length: Duration,
}

impl Server<Seen> {
    /// A server whose `/stall` route stalls once for `length`, `after` its first request.
    pub async fn start(proto: Proto, after: Duration, length: Duration) -> Self {
        let seen = Arc::new(Seen::default());
        let stall = Stall { after, length };
        let s = seen.clone();
        Server::listen("http", seen, None, move |stream, counts| {
            let s = s.clone();
            serve(stream, proto, counts.clone(), move |req| {
                handle(req, s.clone(), stall)
            })
        })
        .await
    }

    /// A server that never stalls.
    pub async fn plain(proto: Proto) -> Self {
        Self::start(proto, Duration::ZERO, Duration::ZERO).await
    }

    /// Requests to `path`.
    pub fn count(&self, path: &str) -> u64 {
        self.stats
            .paths
            .lock()
            .unwrap()
            .get(path)
            .map_or(0, |p| p.0)
    }

    /// When `path` was last requested.
    pub fn last(&self, path: &str) -> Option<Instant> {
        self.stats.paths.lock().unwrap().get(path).map(|p| p.1)
    }
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    seen: Arc<Seen>,
    stall: Stall,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let now = Instant::now();
    let path = req.uri().path().to_owned();
    {
        let mut paths = seen.paths.lock().unwrap();
        let e = paths.entry(path.clone()).or_insert((0, now));
        e.0 += 1;
        e.1 = now;
    }
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let mut status = 200;
    match segs.as_slice() {
        ["stall"] => {
            let first = *seen.first_stall.lock().unwrap().get_or_insert(now);
            let (from, to) = (first + stall.after, first + stall.after + stall.length);
            if now >= from && now < to {
                tokio::time::sleep_until(to.into()).await;
            }
        }
        ["delay", ms] => tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await,
        ["status", code] => status = code.parse().unwrap(),
        _ => {}
    }
    let mut r = Response::new(Full::new(Bytes::from_static(b"{}")));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
    Ok(r)
}
