//! `--shard I/N`: three shards of one plan, run side by side against one server, send exactly
//! what one process sends, and their merged results are that process's counts.

use herd_driver::RunOptions;
use herd_model::Shard;
use herd_model::{RunResult, merge};

use crate::support::{Proto, TestServer, options, scenario};

/// Every phase with an exact count: a catalog route (31 requests at 4), players bounded by
/// `max_ops` (7 × 5, then a step that retires 3 of them), an open-model rate (100/s × 1 s).
const PLAN: &str = r#"
[target]
url = "{url}"
[player]
max_ops = 5
[[op]]
name = "ok"
path = "/ok"
[catalog]
requests = 31
concurrency = 4
[[step]]
players = 7
duration = "500ms"
arrival = "burst"
[[step]]
players = 4
duration = "200ms"
[[rate]]
rate = 100
duration = "1s"
"#;

async fn run_as(server: &TestServer, shard: Shard) -> RunResult {
    herd_driver::run(scenario(PLAN, server), RunOptions { shard, ..options() })
        .await
        .unwrap()
}

fn per_phase(r: &RunResult) -> Vec<(String, usize, u64)> {
    r.phases
        .iter()
        .map(|p| {
            (
                p.phase.clone(),
                p.players,
                p.ops.iter().map(|o| o.count).sum(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_shards_send_what_one_process_sends_and_merge_exactly() {
    let one_server = TestServer::start(Proto::H1).await;
    let one = run_as(&one_server, Shard::WHOLE).await;
    assert_eq!(one.requests, 31 + 35 + 100);
    assert_eq!(one.requests, one_server.requests());

    let server = TestServer::start(Proto::H1).await;
    let shards: Vec<Shard> = (0..3).map(|i| Shard::new(i, 3).unwrap()).collect();
    let parts = futures_join(&server, &shards).await;
    let sent: u64 = parts.iter().map(|r| r.requests).sum();
    assert_eq!(
        sent,
        server.requests(),
        "the shards' counts vs the server's"
    );
    assert_eq!(sent, one.requests, "3 shards vs 1 process");
    // Each shard ran its own part, not the whole plan.
    for r in &parts {
        assert!(r.requests < one.requests / 2, "{}", r.requests);
    }

    let merged = merge::runs(&parts).unwrap();
    assert_eq!(merged.requests, one.requests);
    assert_eq!(
        per_phase(&merged),
        per_phase(&one),
        "phases: players and ops add up"
    );
    // Merged histograms are the sum of the shards': every sample counted once.
    for p in &merged.phases {
        for op in &p.ops {
            let h = op.histogram().unwrap().unwrap();
            assert_eq!(h.len(), op.count, "{} {}", p.phase, op.op);
            let shard_sum: u64 = parts
                .iter()
                .flat_map(|r| &r.phases)
                .filter(|q| q.phase == p.phase)
                .flat_map(|q| &q.ops)
                .filter(|o| o.op == op.op)
                .map(|o| o.histogram().unwrap().unwrap().len())
                .sum();
            assert_eq!(h.len(), shard_sum);
        }
    }
    let open: Vec<_> = merged
        .phases
        .iter()
        .filter_map(|p| p.open.as_ref())
        .collect();
    assert_eq!((open[0].scheduled, open[0].sent), (100, 100));
    assert!(
        (open[0].rate - 100.0).abs() < 1e-9,
        "rates add: {}",
        open[0].rate
    );
    let interval_ops: u64 = merged
        .intervals
        .iter()
        .flat_map(|i| &i.ops)
        .map(|o| o.count)
        .sum();
    assert_eq!(
        interval_ops, merged.requests,
        "the merged timeline holds every op"
    );
}

async fn futures_join(server: &TestServer, shards: &[Shard]) -> Vec<RunResult> {
    let (a, b, c) = tokio::join!(
        run_as(server, shards[0]),
        run_as(server, shards[1]),
        run_as(server, shards[2])
    );
    vec![a, b, c]
}

/// `target.source_addrs`: connections come from each source address in turn (the server
/// sees their peers), and the kernel still picks their ports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_spread_over_the_source_addresses() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let peers = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = peers.clone();
    let server = tokio::spawn(async move {
        loop {
            let (mut s, peer) = listener.accept().await.unwrap();
            seen.lock().unwrap().push(peer);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut have = Vec::new();
                loop {
                    let Ok(n) = s.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    have.extend_from_slice(&buf[..n]);
                    while let Some(end) = have.windows(4).position(|w| w == b"\r\n\r\n") {
                        have.drain(..end + 4);
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if s.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    let src = format!(
        "[target]\nurl = \"http://127.0.0.1:{port}\"\nsource_addrs = [\"127.0.0.2\", \"127.0.0.3\", \"127.0.0.4\"]\n[player]\nmax_ops = 3\n[[op]]\nname = \"ok\"\npath = \"/\"\n[[step]]\nplayers = 9\nduration = \"300ms\"\narrival = \"burst\"\n"
    );
    let report = herd_driver::run(
        herd_driver::Scenario::parse("src.toml", &src, &[]).unwrap(),
        options(),
    )
    .await
    .unwrap();
    server.abort();
    assert_eq!(report.requests, 27);
    assert_eq!(report.outcome_count("ok", "ok"), 27);
    let peers = peers.lock().unwrap();
    assert_eq!(peers.len(), 9, "a connection per player");
    for ip in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        let n = peers.iter().filter(|p| p.ip().to_string() == ip).count();
        assert_eq!(n, 3, "{ip}: {peers:?}");
    }
    assert!(peers.iter().all(|p| p.port() != 0));

    let bad = src.replace("127.0.0.3", "not-an-ip");
    let e = herd_driver::Scenario::parse("src.toml", &bad, &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("source_addrs") && e.contains("`not-an-ip` is not an IP address"),
        "{e}"
    );
}
