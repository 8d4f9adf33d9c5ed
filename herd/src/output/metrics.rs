//! The `--listen` endpoint: serves the latest Prometheus exposition
//! ([`herd_report::export::prometheus`]) at `/metrics` from a background thread. The
//! sampling loop publishes a fresh rendering each interval; scrapes never touch the kernel
//! maps. [`RunEndpoint`] is a run's: the driver's totals, then the probe's series.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::{Context as _, Result};
use herd_driver::Scenario;
use herd_model::DriverInterval;
use herd_report::export::prometheus::DriverTotals;

/// A running endpoint. The thread ends with the process.
pub struct MetricsServer {
    body: Arc<Mutex<String>>,
    addr: SocketAddr,
    scrapes: Arc<AtomicU64>,
}

impl MetricsServer {
    /// Binds `addr` (port 0 picks a free port) and starts serving.
    pub fn start(addr: SocketAddr) -> Result<Self> {
        // A port in use is the user's to fix (exit 2), like any other bad argument.
        let listener = TcpListener::bind(addr).map_err(|e| {
            crate::environment(anyhow::Error::new(e).context(format!(
                "binding the metrics endpoint --listen {addr}: pick a free port (e.g. --listen \
                 127.0.0.1:9464) or stop what listens on port {}",
                addr.port()
            )))
        })?;
        let addr = listener.local_addr()?;
        let body = Arc::new(Mutex::new(String::new()));
        let shared = body.clone();
        let scrapes = Arc::new(AtomicU64::new(0));
        let counted = scrapes.clone();
        std::thread::Builder::new()
            .name("herd-metrics".into())
            .spawn(move || {
                for conn in listener.incoming().flatten() {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                    let _ = conn.set_write_timeout(Some(Duration::from_secs(2)));
                    if serve(conn, &shared) {
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
            .context("starting the metrics thread")?;
        Ok(Self {
            body,
            addr,
            scrapes,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `/metrics` requests answered so far.
    pub fn scrapes(&self) -> u64 {
        self.scrapes.load(Ordering::SeqCst)
    }

    /// Replaces what `/metrics` returns.
    pub fn publish(&self, text: String) {
        if let Ok(mut b) = self.body.lock() {
            *b = text;
        }
    }
}

/// Answers one request; true when it was a scrape of `/metrics`.
fn serve(mut conn: std::net::TcpStream, body: &Mutex<String>) -> bool {
    let mut req = [0u8; 2048];
    let n = conn.read(&mut req).unwrap_or(0);
    let line = String::from_utf8_lossy(&req[..n]);
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let scrape = line.starts_with("GET ") && (path == "/metrics" || path.starts_with("/metrics?"));
    let (status, ctype, text) = if scrape {
        let b = body.lock().map(|b| b.clone()).unwrap_or_default();
        ("200 OK", "text/plain; version=0.0.4; charset=utf-8", b)
    } else {
        (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "herd serves /metrics\n".to_owned(),
        )
    };
    let sent = write!(
        conn,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
    sent.is_ok() && scrape
}

/// The `--listen` endpoint of a run: the driver's totals, then the probe's latest
/// exposition when a probe runs.
pub struct RunEndpoint {
    server: MetricsServer,
    driver: DriverTotals,
    probe: String,
}

impl RunEndpoint {
    /// Binds `addr` before any load starts: a port in use is a usage error (exit 2) that
    /// names it.
    pub fn bind(addr: SocketAddr, scenario: &Scenario) -> Result<Self> {
        let server = MetricsServer::start(addr).context("before any load (nothing was sent)")?;
        tracing::info!("serving metrics on http://{}/metrics", server.addr());
        let driver = DriverTotals::new(
            scenario.expected_outcomes(),
            scenario.planned_secs(),
            scenario.plan().into_iter().map(|p| p.name).collect(),
        );
        server.publish(driver.render());
        Ok(Self {
            server,
            driver,
            probe: String::new(),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Adds a driver interval and republishes.
    pub fn driver_interval(&mut self, iv: &DriverInterval) {
        self.driver.add(iv);
        self.publish();
    }

    /// Replaces the probe's part and republishes.
    pub fn probe(&mut self, text: String) {
        self.probe = text;
        self.publish();
    }

    /// After the last interval: waits (at most `max`) for one more scrape, so a Prometheus
    /// scraping every few seconds still records the run's final counts.
    pub async fn finish(self, max: std::time::Duration) {
        let seen = self.server.scrapes();
        if seen == 0 {
            // Nothing scraped during the run: nobody is waiting for the final counts.
            return;
        }
        let until = tokio::time::Instant::now() + max;
        tracing::info!(
            "waiting up to {} for a last scrape of http://{}/metrics",
            humantime::format_duration(max),
            self.addr()
        );
        while self.server.scrapes() == seen && tokio::time::Instant::now() < until {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    fn publish(&self) {
        let mut body = self.driver.render();
        body.push_str(&self.probe);
        self.server.publish(body);
    }
}
