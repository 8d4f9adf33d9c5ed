//! What both contour services share: the bounded accept loop with graceful shutdown, JSON
//! responses, bounded body reads, the `ready` line, the stop signal and the runtime.

use std::{
    future::Future,
    io::Write as _,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::{
    rt::TokioIo,
    server::graceful::{GracefulShutdown, Watcher},
};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::Semaphore,
};

/// Pause after a failed `accept` (EMFILE, ENFILE, ECONNABORTED): the condition is transient
/// and retrying at once would spin a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Connection counts of one listener.
#[derive(Debug, Default)]
pub(crate) struct ConnCounters {
    /// Connections accepted since start.
    pub accepted: AtomicU64,
    /// Connections open now.
    pub open: AtomicU64,
    /// `accept` calls that failed.
    pub accept_errors: AtomicU64,
}

/// Accepts connections on `listener` until `shutdown` completes, at most `limit` open at
/// once (at the cap the loop stops accepting and the kernel's listen queue holds the rest).
/// `serve` turns each connection into a task, watched by the returned [`GracefulShutdown`],
/// which the caller drains with [`drain`] after its own shutdown steps.
pub(crate) async fn accept_until<S, F, Fut>(
    listener: TcpListener,
    limit: usize,
    counters: Arc<ConnCounters>,
    shutdown: S,
    mut serve: F,
) -> GracefulShutdown
where
    S: Future<Output = ()>,
    F: FnMut(TokioIo<TcpStream>, Watcher) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limit.max(1)));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            biased;
            () = &mut shutdown => break,
            p = slots.clone().acquire_owned() => p.expect("the semaphore is never closed"),
        };
        let stream = tokio::select! {
            biased;
            () = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(_) => {
                    counters.accept_errors.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        // Small JSON requests and responses: Nagle would add up to 40 ms per exchange.
        let _ = stream.set_nodelay(true);
        counters.accepted.fetch_add(1, Ordering::Relaxed);
        counters.open.fetch_add(1, Ordering::Relaxed);
        let task = serve(TokioIo::new(stream), graceful.watcher());
        let counters = counters.clone();
        tokio::spawn(async move {
            task.await;
            counters.open.fetch_sub(1, Ordering::Relaxed);
            drop(permit);
        });
    }
    graceful
}

/// Asks every watched connection to finish (HTTP/1.1: close once idle; HTTP/2: GOAWAY, then
/// finish open streams) and waits up to `grace`. Returns false if the grace ran out.
pub(crate) async fn drain(graceful: GracefulShutdown, grace: Duration) -> bool {
    tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_ok()
}

/// A JSON response.
pub(crate) fn json(status: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// `{"error":{"code":code,"message":message}}` with `status`.
pub(crate) fn error(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    json(
        status,
        &serde_json::json!({ "error": { "code": code, "message": message } }),
    )
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// Over the size limit.
    #[error("the body is larger than {0} bytes")]
    TooLarge(usize),
    /// The connection failed while reading.
    #[error("reading the body: {0}")]
    Read(String),
}

/// Reads a whole body, at most `max` bytes.
pub(crate) async fn read_body<B>(body: B, max: usize) -> Result<Bytes, BodyError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match Limited::new(body, max).collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge(max)),
        Err(e) => Err(BodyError::Read(e.to_string())),
    }
}

/// The session token of `Authorization: Bearer TOKEN`.
pub(crate) fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Prints `ready ADDR` on stdout, the line herd waits for. A reader that already went away is
/// not the service's failure.
pub(crate) fn say_ready(addr: SocketAddr) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready {addr}").and_then(|()| out.flush());
}

/// Binds `addr` for a service called `what`.
pub(crate) async fn bind(addr: SocketAddr, what: &str) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the {what} to {addr}"))
}

/// A future that completes on SIGTERM or SIGINT. Installed before the service says `ready`,
/// so a stop sent right after that line is not lost.
pub(crate) fn stop_signal() -> anyhow::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// A multi-threaded runtime with `workers` worker threads, named after the service.
pub(crate) fn runtime(workers: usize, name: &str) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers.max(1))
        .thread_name(format!("herd-{name}"))
        .enable_all()
        .build()
        .with_context(|| format!("starting the {name}'s runtime with {workers} workers"))
}

/// Parses a duration flag (`500ms`, `5s`, `1m`).
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (write e.g. 500ms, 5s, 1m)"))
}

/// Parses a byte size flag: a number with an optional `KiB`/`MiB` suffix (`64KiB`, `1MiB`).
pub(crate) fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&t[..i], t[i..].trim()),
        None => (t, ""),
    };
    let n: usize = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size (write e.g. 65536, 64KiB, 1MiB)"))?;
    let mult = match unit {
        "" | "B" => 1,
        "KiB" | "K" | "k" => 1024,
        "MiB" | "M" => 1024 * 1024,
        _ => return Err(format!("`{s}`: unknown unit `{unit}` (use KiB or MiB)")),
    };
    n.checked_mul(mult)
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("`{s}` must be between 1 byte and {} bytes", usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert!(parse_size("0").is_err());
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("KiB").is_err());
    }

    #[test]
    fn bearer_takes_the_token_after_the_scheme() {
        let mut h = http::HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer abc"),
        );
        assert_eq!(bearer(&h), Some("abc"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  xyz "),
        );
        assert_eq!(bearer(&h), Some("xyz"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer(&h), None);
    }
}
