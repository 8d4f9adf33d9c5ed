//! Container names as the Docker engine announces them: a thread that follows the Engine
//! API's event stream (`GET /events`, container events) and remembers each container's name.
//!
//! Asking `GET /containers/<id>/json` at the next sample is too late for a one-shot
//! container (`docker run --rm` of a CI job or a load driver): it is created, runs and is
//! removed between two samples, and a removed container's name is gone from the engine. Its
//! `create` event carries the name while it exists, so the name is known by the time the
//! kernel's cgroup_mkdir record brings its cgroup to the sampler.

use std::{
    collections::{HashMap, VecDeque},
    io::{Read as _, Write as _},
    os::unix::net::UnixStream,
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

/// Names kept at most: enough for hours of one-shot containers, bounded for days of them.
const KEEP: usize = 16_384;

/// Container events that carry the name a report should use (`rename` carries the new one).
const FILTERS: &str = r#"{"type":["container"],"event":["create","start","rename"]}"#;

/// Follows the engine's container events on a background thread while it lives; reconnects
/// every second when the engine goes away. Dropping it stops the thread.
#[derive(Debug)]
pub struct DockerEvents {
    names: Arc<Mutex<Names>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Names {
    by_id: HashMap<String, String>,
    order: VecDeque<String>,
}

impl Names {
    fn insert(&mut self, id: String, name: String) {
        if self.by_id.insert(id.clone(), name).is_none() {
            self.order.push_back(id);
            while self.order.len() > KEEP {
                if let Some(old) = self.order.pop_front() {
                    self.by_id.remove(&old);
                }
            }
        }
    }
}

impl DockerEvents {
    /// Starts following the events of the engine at `socket`.
    pub fn follow(socket: PathBuf) -> Self {
        let names = Arc::new(Mutex::new(Names::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (names, stop) = (names.clone(), stop.clone());
            std::thread::Builder::new()
                .name("herd-docker-events".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        // An engine that is not there (yet), restarts or errors: try again.
                        let _ = stream(&socket, &names, &stop);
                        for _ in 0..10 {
                            if stop.load(Ordering::Relaxed) {
                                return;
                            }
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                })
                .ok()
        };
        Self {
            names,
            stop,
            thread,
        }
    }

    /// The name the engine announced for container `id` (the full 64-hex id), if any.
    pub fn name(&self, id: &str) -> Option<String> {
        self.names.lock().ok()?.by_id.get(id).cloned()
    }
}

impl Drop for DockerEvents {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One connection's worth of events: returns when the engine closes it, on an error, or
/// when `stop` is set (checked every read timeout).
fn stream(socket: &PathBuf, names: &Mutex<Names>, stop: &AtomicBool) -> std::io::Result<()> {
    let mut s = UnixStream::connect(socket)?;
    s.set_read_timeout(Some(Duration::from_millis(250)))?;
    s.set_write_timeout(Some(Duration::from_millis(500)))?;
    // HTTP/1.0: the engine streams the events unchunked, one JSON object per line, until
    // the connection closes.
    s.write_all(
        format!(
            "GET /events?filters={} HTTP/1.0\r\nHost: docker\r\n\r\n",
            percent_encode(FILTERS)
        )
        .as_bytes(),
    )?;
    let mut buf = Vec::new();
    let mut body_at = None;
    let mut chunk = [0u8; 8192];
    while !stop.load(Ordering::Relaxed) {
        let n = match s.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => return Err(e),
        };
        buf.extend_from_slice(&chunk[..n]);
        if body_at.is_none() {
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&buf[..end]);
            if !head.starts_with("HTTP/1.") || head.split_whitespace().nth(1) != Some("200") {
                return Err(std::io::Error::other(format!("events: {head}")));
            }
            body_at = Some(end + 4);
        }
        let start = body_at.unwrap_or(0);
        let Some(last_nl) = buf[start..].iter().rposition(|&b| b == b'\n') else {
            continue;
        };
        let complete = start + last_nl + 1;
        if let Ok(mut names) = names.lock() {
            for line in buf[start..complete].split(|&b| b == b'\n') {
                if let Some((id, name)) = event_name(line) {
                    names.insert(id, name);
                }
            }
        }
        buf.drain(..complete);
        body_at = Some(0);
    }
    Ok(())
}

/// The container id and name an event line announces.
fn event_name(line: &[u8]) -> Option<(String, String)> {
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    let actor = v.get("Actor")?;
    let id = actor.get("ID")?.as_str()?;
    let name = actor.get("Attributes")?.get("name")?.as_str()?;
    Some((id.to_owned(), name.trim_start_matches('/').to_owned()))
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_line_gives_the_container_s_id_and_name() {
        let line = br#"{"status":"create","id":"3f1c","Type":"container","Action":"create","Actor":{"ID":"3f1c","Attributes":{"image":"herd-it","name":"ci-job-7"}},"scope":"local","time":1}"#;
        assert_eq!(
            event_name(line),
            Some(("3f1c".to_owned(), "ci-job-7".to_owned()))
        );
        assert_eq!(event_name(b"{\"Type\":\"network\"}"), None);
        assert_eq!(event_name(b"not json"), None);
    }

    #[test]
    fn names_are_bounded_oldest_first() {
        let mut n = Names::default();
        for i in 0..KEEP + 10 {
            n.insert(format!("id{i}"), format!("c{i}"));
        }
        assert_eq!(n.by_id.len(), KEEP);
        assert!(!n.by_id.contains_key("id0"));
        assert_eq!(
            n.by_id.get(&format!("id{}", KEEP + 9)).map(String::as_str),
            Some(&*format!("c{}", KEEP + 9))
        );
    }

    #[test]
    fn the_filter_is_url_encoded() {
        assert_eq!(
            percent_encode(r#"{"a":["b"]}"#),
            "%7B%22a%22%3A%5B%22b%22%5D%7D"
        );
    }
}
