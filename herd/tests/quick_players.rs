//! Quick mode's gRPC and WebSocket forms from the real binary, against Python's grpcio and
//! websockets servers, which count what they served: `herd drive grpc://…/pkg.Svc/Method
//! --proto FILE -d JSON -n N` makes exactly N calls; `herd drive ws://…/echo -d MSG -n N`
//! sends N messages and reads N echoes; `herd drive ws://…/push -z D` holds the sockets
//! and counts the pushes. A broken `.proto` and an unknown method exit 2 with the file and
//! line. One server of each kind for the file (~6 s).

use std::process::{Command, Output, Stdio};

use herd_testkit::{PyServer, TempDir, py::arena_proto};

fn herd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn ok(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::Value::Null
}

fn report(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn grpc_quick_mode_makes_exactly_the_calls_asked_and_bad_protos_exit_2() {
    let mut server = PyServer::grpc();
    let dir = TempDir::new("quick-grpc");
    let json = dir.join("run.json");
    let proto = arena_proto().display().to_string();
    let url = format!("grpc://127.0.0.1:{}/herd.arena.Arena/Join", server.port());
    ok(&herd(&[
        "drive",
        &url,
        "--proto",
        &proto,
        "-d",
        r#"{"player": "quick", "level": 2}"#,
        "-H",
        "authorization: Bearer q",
        "-c",
        "5",
        "-n",
        "500",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]));
    let c = server.counters();
    assert_eq!(c["Join"]["calls"], 500, "{c}");
    assert_eq!(c["Join"]["status"]["OK"], 500);
    let r = report(&json);
    assert_eq!(r["requests"], 500);
    assert_eq!(r["connects"], 5, "one connection per player");
    assert_eq!(r["transport"], "grpc");

    // ghz's form: the address alone, the method with --call in its dotted spelling.
    server.command("reset");
    let addr = format!("grpc://127.0.0.1:{}", server.port());
    ok(&herd(&[
        "drive",
        &addr,
        "--proto",
        &proto,
        "--call",
        "herd.arena.Arena.Join",
        "-n",
        "20",
        "-c",
        "2",
        "--quiet",
    ]));
    assert_eq!(server.counters()["Join"]["calls"], 20);

    // A method the .proto lacks, and a .proto that does not compile: exit 2, nothing sent.
    let out = herd(&[
        "drive",
        &addr,
        "--proto",
        &proto,
        "--call",
        "herd.arena.Arena/Leave",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("quick mode:") && err.contains("has no method `Leave`; its methods: Join"),
        "{err}"
    );
    let bad = dir.join("bad.proto");
    std::fs::write(
        &bad,
        "syntax = \"proto3\";\npackage p;\nmessage M {\n  strin name = 1;\n}\n",
    )
    .unwrap();
    let out = herd(&[
        "drive",
        &format!("{addr}/p.S/M"),
        "--proto",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:4:3:", bad.display())), "{err}");
    assert_eq!(
        server.counters()["Join"]["calls"],
        20,
        "nothing more was sent"
    );
}

#[test]
fn websocket_quick_mode_echoes_and_holds() {
    let mut server = PyServer::websocket();
    let dir = TempDir::new("quick-ws");
    let json = dir.join("run.json");
    let url = format!("ws://127.0.0.1:{}/echo", server.port());
    ok(&herd(&[
        "drive",
        &url,
        "-d",
        "hello {player}",
        "-c",
        "3",
        "-n",
        "300",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]));
    let c = server.counters();
    assert_eq!(c["echo"]["received"], 300, "{c}");
    assert_eq!(c["echo"]["connections"], 3);
    let r = report(&json);
    assert_eq!(r["requests"], 300);

    // Without -d: every player holds its socket for -z and counts what is pushed.
    server.command("reset");
    let url = format!("ws://127.0.0.1:{}/push?count=25&hold=1", server.port());
    ok(&herd(&[
        "drive",
        &url,
        "-c",
        "4",
        "-z",
        "1s",
        "--quiet",
        "--json",
        json.to_str().unwrap(),
    ]));
    let c = server.counters();
    assert_eq!(c["push"]["connections"], 4, "{c}");
    assert_eq!(c["push"]["sent"], 100);
    let r = report(&json);
    let pushes = r["streams"]
        .as_array()
        .unwrap_or_else(|| panic!("{r}"))
        .iter()
        .find(|s| s["op"] == "pushes")
        .unwrap_or_else(|| panic!("{}", r["streams"]));
    assert_eq!(pushes["events"], 100, "{pushes}");
    assert_eq!(pushes["by_type"]["message"], 100, "{pushes}");
    assert_eq!(pushes["kind"], "websocket");
}
