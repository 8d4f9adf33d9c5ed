//! Seeds 000/001 against the demo's contour (`herd contour backend` and `herd contour
//! gateway` as processes on loopback, as `herd demo` runs them): examples/seeds/game.toml
//! shortened, seeded into the backend's SQLite by `herd run`; the gateway's own counters
//! (`/v1/stats`: calls, rate_limited) equal herd's, and the hammer on the lobby list proves
//! the limiter (429s on it, none on the players' calls).

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
};

use herd_testkit::TempDir;

use super::support::{Proc, count, herd_run_env, outcome, report, request, say, seed_file};

/// Starts `herd contour <args>` and returns it with the address its `ready` line names.
fn contour(what: &'static str, args: &[&str], log: &std::path::Path) -> (Proc, String) {
    let mut p = Proc::spawn(
        what,
        Command::new(env!("CARGO_BIN_EXE_herd"))
            .arg("contour")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap()),
    );
    let mut line = String::new();
    BufReader::new(p.child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .strip_prefix("ready ")
        .unwrap_or_else(|| {
            panic!(
                "{what} said {line:?}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        })
        .trim()
        .to_owned();
    p.term_first = true;
    (p, addr)
}

#[test]
fn the_game_ramp_and_burst_against_the_contour_match_the_gateways_counters() {
    let dir = TempDir::new("seed-game");
    let db = format!("sqlite:{}?mode=rwc", dir.join("game.db").display());
    let (_backend, backend) = contour(
        "the contour's backend",
        &["backend", "--listen", "127.0.0.1:0", "--db", &db],
        &dir.join("backend.log"),
    );
    let (_gateway, gateway) = contour(
        "the contour's gateway",
        &["gateway", "--listen", "127.0.0.1:0", "--backend", &backend],
        &dir.join("gateway.log"),
    );
    let stats = || -> serde_json::Value {
        serde_json::from_slice(
            &request(&gateway, "GET", "/v1/stats", &[], b"")
                .unwrap()
                .body,
        )
        .unwrap()
    };
    let calls_before = stats()["calls"].as_u64().unwrap();

    let out = dir.join("out");
    let sets: Vec<String> = [
        format!("target.url=http://{gateway}"),
        "step[0].players=4".into(),
        "step[0].duration=1s".into(),
        "step[0].ramp=500ms".into(),
        "step[1].players=8".into(),
        "step[1].duration=1s".into(),
        "step[1].ramp=500ms".into(),
        "step[2].players=16".into(),
        "step[2].duration=1s".into(),
        "step[2].ramp=500ms".into(),
        "step[3].players=4".into(),
        "step[3].duration=1s".into(),
        "step[3].leave=500ms".into(),
        "step[4].players=16".into(),
        "step[4].duration=1s".into(),
        "hammer.workers=2".into(),
        "hammer.duration=2s".into(),
        "hammer.start=500ms".into(),
        "player.think=100ms".into(),
        "seed.accounts=90".into(),
        "seed.guests=10".into(),
        "player.accounts=100".into(),
    ]
    .into();
    let run = herd_run_env(
        &seed_file("game.toml"),
        &sets,
        &out,
        &[("HERD_SEED_URL", db.as_str())],
    );
    // 0, or 99 if this busy machine broke the state poll's 250 ms objective.
    assert!(matches!(run.status.code(), Some(0 | 99)), "{}", say(&run));
    let r = report(&out);
    let s = stats();
    let calls = s["calls"].as_u64().unwrap() - calls_before;
    let ops = [
        "game.join",
        "game.state",
        "game.move",
        "game.history",
        "games.list",
    ];
    let herd_calls: u64 = ops.iter().map(|o| count(&r, o)).sum();
    eprintln!(
        "gateway: {calls} calls, {} rate limited; herd: {herd_calls} calls, {} rate_limited",
        s["rate_limited"],
        outcome(&r, "games.list", "rate_limited")
    );
    assert_eq!(calls, herd_calls, "{}", say(&run));
    // The hammer proves the limiter: from one account it is cut to the limit, and the
    // gateway counted exactly the 429s herd did.
    let limited = outcome(&r, "games.list", "rate_limited");
    assert!(limited > 0, "{}", say(&run));
    assert_eq!(s["rate_limited"].as_u64(), Some(limited));
    for op in ["game.state", "game.move", "game.history"] {
        assert_eq!(outcome(&r, op, "rate_limited"), 0, "{op}");
    }
    assert!(
        outcome(&r, "game.join", "ok") >= 16,
        "every player joined a game"
    );
}
