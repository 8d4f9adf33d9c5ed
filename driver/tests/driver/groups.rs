//! Groups: players form groups of the right size through create/join, play with the
//! group's variables, and leave on the finish condition; the server's own counts of
//! creates and joins match the driver's group counts.

use herd_driver::{Player, Scenario, Session, Stopped};

use crate::{
    support::{self, Proto, run},
    support_stream::StreamServer,
};

fn scenario(server: &StreamServer, proto: Proto, body: &str) -> Scenario {
    let src = format!(
        "[target]\nurl = \"{}\"\ntransport = \"{}\"\n{body}",
        server.url(),
        proto.name()
    );
    Scenario::parse("groups.toml", &src, &[]).unwrap_or_else(|e| panic!("{e}"))
}

const PAIRS: &str = r#"
[player]
think = "10ms"

[group]
size = 2
create = "game.create"
join = "game.join"
finish = { op = "game.state", json = { "/state" = "finished" } }
rounds = 2

[[op]]
name = "game.create"
method = "POST"
path = "/game/create"
weight = 0
capture = { "group.game_id" = "/game/id" }

[[op]]
name = "game.join"
method = "POST"
path = "/game/{group.game_id}/join"
weight = 0

[[op]]
name = "game.state"
path = "/game/{group.game_id}/state"

[[step]]
players = 6
duration = "1500ms"
arrival = "burst"
"#;

async fn pairs_form_and_finish(proto: Proto) {
    let server = StreamServer::start(proto).await;
    let r = run(scenario(&server, proto, PAIRS)).await;
    let g = r.play.groups;
    // 6 players × 2 rounds = 12 seats = 6 games of 2, every one played to its end.
    assert_eq!(g.formed, 6, "{g:?}");
    assert_eq!(g.finished, 6, "{g:?}");
    assert_eq!((g.failed, g.abandoned), (0, 0), "{g:?}");
    assert_eq!(r.phases[0].play.groups, g);
    let creates = server
        .stats
        .creates
        .load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(creates, 6);
    let joins = server.stats.joins.lock().unwrap().clone();
    assert_eq!(joins.len(), 6, "{joins:?}");
    assert!(joins.values().all(|&j| j == 1), "{joins:?}");
    // The state calls used the group's id: every one reached a created game.
    let calls = server.stats.calls.lock().unwrap().clone();
    assert!(calls.keys().all(|id| joins.contains_key(id)), "{calls:?}");
    assert!(calls.values().all(|&c| c >= 3), "{calls:?}");
    assert_eq!(r.op_count("game.create"), 6);
    assert_eq!(r.op_count("game.join"), 6);
    assert_eq!(r.requests, server.requests());
    let table = herd_report::text::table(&r);
    assert!(
        table.contains("groups: 6 formed, 6 finished, 0 failed, 0 abandoned"),
        "{table}"
    );
}

#[tokio::test]
async fn pairs_form_play_and_leave_on_the_finish_condition_h1() {
    pairs_form_and_finish(Proto::H1).await;
}

#[tokio::test]
async fn pairs_form_play_and_leave_on_the_finish_condition_h2c() {
    pairs_form_and_finish(Proto::H2c).await;
}

#[tokio::test]
async fn ranged_groups_finish_on_a_domain_code_with_a_stream_each() {
    let server = StreamServer::start(Proto::H2c).await;
    let body = r#"
[outcome]
code = "/error/code"

[player]
think = "10ms"

[group]
size = "2-4"
create = "game.create"
join = "game.join"
finish = { code = "game_finished" }
rounds = 1

[[op]]
name = "game.create"
method = "POST"
path = "/game/create"
weight = 0
capture = { "group.game_id" = "/game/id" }

[[op]]
name = "game.join"
method = "POST"
path = "/game/{group.game_id}/join"
weight = 0

[[op]]
name = "game.play"
method = "POST"
path = "/game/{group.game_id}/play"

[[op]]
name = "subscribe"
path = "/sse/{player}/3/0"
kind = "stream"

[[step]]
players = 9
duration = "1500ms"
arrival = "burst"
"#;
    let r = run(scenario(&server, Proto::H2c, body)).await;
    let g = r.play.groups;
    let creates = server
        .stats
        .creates
        .load(std::sync::atomic::Ordering::SeqCst);
    let joins = server.stats.joins.lock().unwrap().clone();
    let join_total: u64 = joins.values().sum();
    // Every player took one seat and ran its create or join.
    assert_eq!(creates + join_total, 9, "{creates} creates, {joins:?}");
    assert_eq!(g.formed, g.finished, "{g:?}");
    assert_eq!(g.failed, 0, "{g:?}");
    // The last group may have been left short of its size when the run ended.
    assert!(g.abandoned <= 1, "{g:?}");
    assert_eq!(g.finished + g.abandoned, creates, "{g:?}");
    assert!(g.finished >= 2, "{g:?}");
    assert!(joins.values().all(|&j| (1..=3).contains(&j)), "{joins:?}");
    assert!(r.outcome_count("game.play", "game_finished") >= g.finished);
    // The stream is per player: it opens once the player sits in a playing group (it
    // reads no group variable, so it stays open after the group finished). A member whose
    // group finished before its next turn never gets to open it, so the count is checked
    // against the server's openings, at most one per player; an opening still waiting for
    // its head at the end is one the stop cut short (seen on a loaded host: 5 + 2).
    let s = r.play.stream("subscribe").expect("stream stats");
    let opens = server.stats.opens.lock().unwrap().clone();
    assert!(opens.values().all(|&n| n == 1), "{opens:?}");
    assert_eq!(
        s.opened + s.cut_by_stop,
        opens.len() as u64,
        "{s:?} {opens:?}"
    );
    assert!(s.opened >= 2, "{s:?}");
    assert_eq!(s.events, 3 * s.opened);
    assert_eq!(s.reconnects, 0);
}

#[tokio::test]
async fn a_failed_create_fails_the_group_and_its_players_regroup() {
    let server = StreamServer::start(Proto::H1).await;
    let body = PAIRS
        .replace("/game/create\"", "/game/create-flaky\"")
        .replace("players = 6", "players = 4");
    let r = run(scenario(&server, Proto::H1, &body)).await;
    let g = r.play.groups;
    let failed = server
        .stats
        .failed_creates
        .load(std::sync::atomic::Ordering::SeqCst);
    assert!(failed > 0);
    assert_eq!(g.failed, failed, "{g:?}");
    // 4 players × 2 rounds in games of 2, failures not counted as rounds.
    assert_eq!((g.formed, g.finished, g.abandoned), (4, 4, 0), "{g:?}");
    assert_eq!(r.outcome_count("game.create", "http_5xx"), failed);
}

#[tokio::test]
async fn group_keys_are_checked() {
    let ops = "[[op]]\nname = \"c\"\nmethod = \"POST\"\npath = \"/c\"\nweight = 0\ncapture = { \"group.id\" = \"/id\" }\n[[op]]\nname = \"j\"\npath = \"/j/{group.id}\"\nweight = 0\n[[op]]\nname = \"p\"\npath = \"/p/{group.id}\"\n";
    let ops2 = ops.replace(
        "path = \"/p/{group.id}\"",
        "path = \"/p\"\ncapture = { \"group.x\" = \"/x\" }",
    );
    let bad = [
        (
            "[group]\nsize = 2\ncreate = \"c\"\njoin = \"p\"\n",
            ops,
            "`p` runs once per group, not in the loop: give it weight = 0",
        ),
        (
            "[group]\nsize = \"4-2\"\ncreate = \"c\"\njoin = \"j\"\n",
            ops,
            "must not be reversed",
        ),
        (
            "[group]\nsize = \"two\"\ncreate = \"c\"\njoin = \"j\"\n",
            ops,
            "or a range (size = \"2-4\")",
        ),
        (
            "[group]\nsize = 2\ncreate = \"c\"\njoin = \"nope\"\n",
            ops,
            "no op named `nope`",
        ),
        (
            "[group]\nsize = 2\ncreate = \"c\"\njoin = \"j\"\nfinish = { code = \"x\", json = { \"/a\" = 1 } }\n",
            ops,
            "not both",
        ),
        ("", ops, "add a [group] whose create op captures it"),
        (
            "[group]\nsize = 2\ncreate = \"j\"\njoin = \"c\"\n",
            ops,
            "captures nothing for the group",
        ),
        (
            "[group]\nsize = 2\ncreate = \"c\"\njoin = \"j\"\n[[group.role]]\nname = \"a\"\nops = [\"p\"]\nseats = 2\n[[group.role]]\nname = \"b\"\nops = [\"p\"]\n",
            ops,
            "no member takes role `b`",
        ),
    ];
    // Any op may capture a group variable: the members share it.
    let src = format!(
        "[target]\nurl = \"http://127.0.0.1:1\"\n[group]\nsize = 2\ncreate = \"c\"\njoin = \"j\"\n{ops2}[[step]]\nplayers = 1\nduration = \"1s\"\n"
    );
    let s = Scenario::parse("ok.toml", &src, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert!(s.group.unwrap().shared);
    for (group, ops, want) in bad {
        let src = format!(
            "[target]\nurl = \"http://127.0.0.1:1\"\n{group}{ops}[[step]]\nplayers = 1\nduration = \"1s\"\n"
        );
        let e = Scenario::parse("bad.toml", &src, &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{want:?} not in: {e}");
    }
}

#[tokio::test]
async fn the_lobby_example_runs_with_every_players_traffic_on_its_own_connection() {
    let server = StreamServer::start(Proto::H2c).await;
    let f = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/scenarios/lobby.toml");
    let sets: Vec<String> = [
        format!("target.url={}", server.url()),
        "player.think=20ms".into(),
        "group.rounds=3".into(),
        "step[0].players=6".into(),
        "step[0].duration=1500ms".into(),
        "step[0].ramp=100ms".into(),
        "step[1].players=6".into(),
        "step[1].duration=300ms".into(),
        "step[1].ramp=100ms".into(),
    ]
    .into();
    let s = Scenario::load(&f, &sets).unwrap_or_else(|e| panic!("{e}"));
    let r = run(s).await;
    let g = r.play.groups;
    assert!(g.finished >= 2, "{g:?}");
    assert_eq!(g.failed, 0, "{g:?}");
    assert_eq!(r.op_count("session.login"), 6);
    let creates = server
        .stats
        .creates
        .load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(r.op_count("game.create"), creates);
    let sub = r.play.stream("events.subscribe").expect("stream stats");
    // One subscription per player, each greeted once, then turns.
    assert_eq!(sub.opened, 6);
    assert_eq!(sub.by_type.get("hello"), Some(&6));
    assert!(sub.by_type.get("turn").is_some_and(|&n| n > 0), "{sub:?}");
    assert!(sub.events <= server.stats.sent("hello") + server.stats.sent("turn"));
    let wait = r.play.stream("lobby.wait").expect("long poll stats");
    assert!(
        wait.by_type.get("no_news").is_some_and(|&n| n > 0),
        "{wait:?}"
    );
    assert!(wait.errors.is_empty(), "{wait:?}");
    // Login, calls, the subscription and the long poll all ride the player's one h2c
    // connection.
    assert_eq!(server.connections(), 6);
    assert_eq!(r.connects, 6);
}

/// A Rust player using the same groups and streams as the file's player.
struct Pair;

impl Player for Pair {
    async fn turn(&mut self, s: &mut Session) -> Result<(), Stopped> {
        if !s.in_group() {
            s.close_streams(true);
            if !s.join_group().await? {
                return Ok(());
            }
            s.open_streams();
        }
        let state = s.op("game.state").expect("the scenario has game.state");
        let reply = s.call(state).await?;
        if s.finishes_group(state, &reply) {
            s.finish_group();
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_rust_player_forms_groups_and_opens_streams_through_its_session() {
    let server = StreamServer::start(Proto::H2c).await;
    let body = PAIRS.replace("players = 6", "players = 4").replace(
        "[[step]]",
        "[[op]]\nname = \"sub\"\npath = \"/sse/{player}/3/0\"\nkind = \"stream\"\n\n[[step]]",
    );
    let s = scenario(&server, Proto::H2c, &body);
    let r = herd_driver::run_with(s, |_| Pair, support::options())
        .await
        .unwrap();
    let g = r.play.groups;
    assert_eq!(
        (g.formed, g.finished, g.failed, g.abandoned),
        (4, 4, 0, 0),
        "{g:?}"
    );
    let joins = server.stats.joins.lock().unwrap().clone();
    assert_eq!(joins.len(), 4, "{joins:?}");
    // The stream reads no group variable: each player opens it once and keeps it.
    let sub = r.play.stream("sub").expect("stream stats");
    assert_eq!((sub.opened, sub.events, sub.reconnects), (4, 12, 0));
    assert_eq!(server.connections(), 4);
}
