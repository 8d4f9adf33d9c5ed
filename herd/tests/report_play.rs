//! `herd run --no-probe` on a scenario with a server-sent-events stream and an open-model
//! rate step, against a loopback server that counts what it saw: the run's Markdown and
//! JSON reports carry the stream row and the open-model row with exactly those counts.

use std::{
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
};

use herd_testkit::{Proto, Reply, Server, TempDir};

/// Events each stream gets: two `move`, one `chat`; then the stream stays open, silent.
const EVENTS: [&str; 3] = ["move", "chat", "move"];

/// An HTTP/1.1 server on 127.0.0.1: `/events` answers a chunked SSE stream of [`EVENTS`]
/// and holds it open; anything else answers `ok`, keep-alive. It counts `/events` streams
/// opened, `/tick` (only the rate step sends them) and `/ping` requests (the players) by
/// path; the returned counter, the events written to the streams.
fn serve() -> (Server, Arc<AtomicU64>) {
    let events = Arc::new(AtomicU64::new(0));
    let written = events.clone();
    let sse = Reply::ok()
        .header("content-type", "text/event-stream")
        .stream(move |c| {
            let written = written.clone();
            async move {
                for e in EVENTS {
                    if !c.send(format!("event: {e}\ndata: {{}}\n\n")).await {
                        return;
                    }
                }
                written.fetch_add(EVENTS.len() as u64, SeqCst);
                // Hold the stream until the player closes it.
                c.closed().await;
            }
        });
    let server = Server::http(Proto::H1)
        .route("/events", sse)
        .fallback(Reply::ok().body("ok"))
        .start_blocking();
    (server, events)
}

#[test]
fn a_runs_report_shows_its_stream_and_open_model_rows_with_the_servers_counts() {
    let (server, events) = serve();
    let url = server.url();
    let dir = TempDir::new("report-play");
    // A catalog of one route (5 pings, 2 at a time); two players ping and hold one SSE
    // stream each for 800 ms; then 20 ticks/s for 1 s, open model (players leave when the
    // rate step begins).
    let file = dir.write(
        "play.toml",
        format!(
            "[target]\nurl = \"{url}\"\n[player]\nthink = \"50ms\"\n\
             [[op]]\nname = \"ping\"\npath = \"/ping\"\n\
             [[op]]\nname = \"tick\"\npath = \"/tick\"\nweight = 0\n\
             [[op]]\nname = \"events\"\npath = \"/events\"\nkind = \"stream\"\nformat = \"sse\"\n\
             [catalog]\nops = [\"ping\"]\nrequests = 5\nconcurrency = 2\n\
             [[step]]\nplayers = 2\nduration = \"800ms\"\narrival = \"burst\"\n\
             [[rate]]\nrate = 20\nduration = \"1s\"\nops = [\"tick\"]\n"
        ),
    );
    let out_dir = dir.join("out");
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
        server.path_count("/events"),
        events.load(SeqCst),
        server.path_count("/tick"),
    );
    assert_eq!(streams, 2, "one stream per player");
    let pings = server.path_count("/ping");
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
    assert_eq!(o["phase"], "rate 1");
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
    assert!(md.contains("## Route catalog\n\n1 route, "), "{md}");
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
