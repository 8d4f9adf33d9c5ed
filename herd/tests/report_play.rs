//! `herd run --no-probe` on a scenario with a server-sent-events stream and an open-model
//! rate step, against a loopback server that counts what it saw: the run's Markdown and
//! JSON reports carry the stream row and the open-model row with exactly those counts.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// A directory removed with everything in it when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("herd-report-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What the server saw.
#[derive(Default)]
struct Seen {
    /// `/events` streams opened.
    streams: AtomicU64,
    /// Events written to them.
    events: AtomicU64,
    /// `/tick` requests (only the rate step sends them).
    ticks: AtomicU64,
    /// `/ping` requests (the players).
    pings: AtomicU64,
}

/// Events each stream gets: two `move`, one `chat`; then the stream stays open, silent.
const EVENTS: [&str; 3] = ["move", "chat", "move"];

/// An HTTP/1.1 server on 127.0.0.1: `/events` answers a chunked SSE stream of [`EVENTS`]
/// and holds it open; anything else answers `ok`, keep-alive.
fn serve(rt: &tokio::runtime::Runtime) -> (String, Arc<Seen>) {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Seen::default());
    let counts = seen.clone();
    rt.spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = counts.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // One request head (GETs: no body).
                    let end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match s.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end);
                    let path = head.split(' ').nth(1).unwrap_or("").to_owned();
                    if path == "/events" {
                        seen.streams.fetch_add(1, SeqCst);
                        let mut out = String::from(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                             transfer-encoding: chunked\r\n\r\n",
                        );
                        for e in EVENTS {
                            let ev = format!("event: {e}\ndata: {{}}\n\n");
                            out.push_str(&format!("{:x}\r\n{ev}\r\n", ev.len()));
                        }
                        if s.write_all(out.as_bytes()).await.is_err() {
                            return;
                        }
                        seen.events.fetch_add(EVENTS.len() as u64, SeqCst);
                        // Hold the stream until the player closes it.
                        while matches!(s.read(&mut chunk).await, Ok(n) if n > 0) {}
                        return;
                    }
                    match path.as_str() {
                        "/tick" => seen.ticks.fetch_add(1, SeqCst),
                        _ => seen.pings.fetch_add(1, SeqCst),
                    };
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if s.write_all(ok).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, seen)
}

#[test]
fn a_runs_report_shows_its_stream_and_open_model_rows_with_the_servers_counts() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (url, seen) = serve(&rt);
    let dir = TempDir::new("play");
    let file = dir.0.join("play.toml");
    // A catalog of one route (5 pings, 2 at a time); two players ping and hold one SSE
    // stream each for 800 ms; then 20 ticks/s for 1 s, open model (players leave when the
    // rate step begins).
    std::fs::write(
        &file,
        format!(
            "[target]\nurl = \"{url}\"\n[player]\nthink = \"50ms\"\n\
             [[op]]\nname = \"ping\"\npath = \"/ping\"\n\
             [[op]]\nname = \"tick\"\npath = \"/tick\"\nweight = 0\n\
             [[op]]\nname = \"events\"\npath = \"/events\"\nkind = \"stream\"\nformat = \"sse\"\n\
             [catalog]\nops = [\"ping\"]\nrequests = 5\nconcurrency = 2\n\
             [[step]]\nplayers = 2\nduration = \"800ms\"\narrival = \"burst\"\n\
             [[rate]]\nrate = 20\nduration = \"1s\"\nops = [\"tick\"]\n"
        ),
    )
    .unwrap();
    let out_dir = dir.0.join("out");
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["run", file.to_str().unwrap(), "--no-probe", "--quiet"])
        .args(["--interval", "200ms", "--grace", "1s"])
        .arg("--out")
        .arg(&out_dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (streams, events, ticks) = (
        seen.streams.load(SeqCst),
        seen.events.load(SeqCst),
        seen.ticks.load(SeqCst),
    );
    assert_eq!(streams, 2, "one stream per player");
    let pings = seen.pings.load(SeqCst);
    assert!(pings > 5, "{pings}");

    let md = std::fs::read_to_string(out_dir.join("run-1.md")).unwrap();
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("run-1.json")).unwrap()).unwrap();

    // The stream: every event the server wrote, by type, in step 1; two openings, no
    // reconnect, no error.
    let row: Vec<&str> = md
        .lines()
        .find(|l| l.starts_with("| step 1 | events | sse |"))
        .unwrap_or_else(|| panic!("no stream row in\n{md}"))
        .trim_matches('|')
        .split('|')
        .map(str::trim)
        .collect();
    assert_eq!(row[3], events.to_string(), "{md}");
    assert_eq!(
        row[5],
        format!("move {}, chat {}", events * 2 / 3, events / 3)
    );
    assert_eq!((row[6], row[7], row[8]), ("2", "0", "none"), "{md}");
    // Time to first event, p50 and p99: latencies (`850µs`, `4.2ms`), not `n/a`.
    let latency = |c: &str| {
        c.starts_with(|ch: char| ch.is_ascii_digit())
            && (c.ends_with("µs") || c.ends_with("ms") || c.ends_with('s'))
    };
    assert!(latency(row[9]) && latency(row[10]), "{md}");
    let s = &json["streams"][0];
    assert_eq!(s["events"].as_u64(), Some(events));
    assert_eq!(s["opened"].as_u64(), Some(streams));
    assert_eq!(s["by_type"]["chat"].as_u64(), Some(events / 3));

    // The rate step: 20 scheduled, every tick the server saw was sent, none lost between.
    let o = &json["open"][0];
    assert_eq!(o["step"], "rate 1");
    assert_eq!(o["scheduled"].as_u64(), Some(20));
    assert_eq!(o["sent"].as_u64(), Some(ticks), "{o}");
    assert_eq!(ticks + o["dropped_starts"].as_u64().unwrap(), 20, "{o}");
    let late = o["late_starts"].as_u64().unwrap();
    let dropped = 20 - ticks;
    assert!(
        md.contains(&format!(
            "| rate 1 | 20 | 1.0 s | 20 | {ticks} | {:.1} | {late} (> 10ms) | {dropped} | 20 |",
            o["sent_per_s"].as_f64().unwrap()
        )),
        "{md}"
    );
    assert_eq!(md.matches("intended send time").count(), 1, "{md}");
    // The per-step table names the rate phase and says what loaded it.
    assert!(
        md.contains(&format!(
            "| rate 1 | rate | 20 req/s open | tick | {ticks} |"
        )),
        "{md}"
    );
    assert!(
        md.contains(&format!(
            "| step 1 | step | 2 players | ping | {} |",
            pings - 5
        )),
        "{md}"
    );
    // The catalog: one table, one row per route, not repeated in the per-step table.
    assert!(md.contains("## Route catalog\n\n1 routes"), "{md}");
    assert!(md.contains("| ping | 2 | 5 | "), "{md}");
    assert!(!md.contains("| catalog ping | catalog |"), "{md}");
    let html = std::fs::read_to_string(out_dir.join("run-1.html")).unwrap();
    assert!(html.contains("Stream and long-poll events per second"));
    assert!(html.contains("Open-model starts behind schedule"));
    // Phase boundaries on the charts carry the phases' names (the catalog's 5 pings end
    // within the first interval, so no interval ends in it).
    for mark in [">step 1</text>", ">rate 1</text>"] {
        assert!(html.contains(mark), "{mark}");
    }
}
