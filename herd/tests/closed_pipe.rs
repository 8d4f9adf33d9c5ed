//! Every subcommand that prints, with its stdout a pipe whose reader is already gone (`herd
//! drive … | head -1` once head has exited): no panic, no backtrace, the exit code of a normal
//! run, and every file the command writes still written whole (issue #27).

use std::{
    path::Path,
    process::{Command, Output, Stdio},
};

use herd_testkit::{Proto, Reply, Server, TempDir};

/// A stdout whose reader is closed: the first write fails with EPIPE.
fn closed_stdout() -> Stdio {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    Stdio::from(writer)
}

fn herd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(args)
        .env_remove("HERD_STORE")
        .stdin(Stdio::null())
        .stdout(closed_stdout())
        .stderr(Stdio::piped())
        .output()
        .expect("herd runs")
}

/// `herd ARGS` with a closed stdout exits `code` and says nothing of a panic.
fn exits(args: &[&str], code: i32) {
    let o = herd(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "herd {args:?}: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace") && !err.contains("Broken pipe"),
        "herd {args:?}: {err}"
    );
}

fn nonempty(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.len() > 0)
}

#[test]
fn every_subcommand_that_prints_survives_a_closed_stdout() {
    let server = Server::http(Proto::H1)
        .fallback(Reply::ok().body("ok"))
        .start_blocking();
    let dir = TempDir::new("closed-pipe");
    let file = dir.write(
        "s.toml",
        format!(
            "[target]\nurl = \"{}\"\n[player]\nthink = \"20ms\"\n[[op]]\nname = \"ping\"\n\
             path = \"/\"\n[[step]]\nplayers = 2\nduration = \"300ms\"\narrival = \"burst\"\n",
            server.url()
        ),
    );
    let s = file.to_str().unwrap();
    let out = dir.join("out");
    let o = out.to_str().unwrap();
    let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();

    // drive, with the live view and the final table on the closed stdout: the JSON is whole.
    let (j0, j1) = (path("shard-0.json"), path("shard-1.json"));
    for (shard, json) in [("0/2", &j0), ("1/2", &j1)] {
        exits(
            &[
                "drive",
                s,
                "--json",
                json,
                "--grace",
                "1s",
                "--interval",
                "100ms",
                "--shard",
                shard,
            ],
            0,
        );
        let r: herd_model::RunResult =
            serde_json::from_slice(&std::fs::read(json).unwrap()).expect("a whole --json file");
        assert!(r.requests > 0, "{json}");
    }
    exits(&["merge", &j0, &j1, "--json", &path("merged.json")], 0);
    assert!(nonempty(&dir.join("merged.json")));

    // run: recorded, and its report files written.
    for _ in 0..2 {
        exits(&["run", s, "--no-probe", "--out", o, "--grace", "1s"], 0);
    }
    for f in ["run-1.md", "run-1.html", "run-1.json", "run-2.md"] {
        assert!(nonempty(&out.join(f)), "herd run wrote no {f}");
    }
    std::fs::remove_file(out.join("run-1.md")).unwrap();
    exits(&["report", "1", "--out", o], 0);
    assert!(
        nonempty(&out.join("run-1.md")),
        "herd report wrote its files"
    );
    exits(&["report", "--list", "--out", o], 0);
    exits(&["compare", "1", "2", "--out", o], 0);
    assert!(nonempty(&out.join("compare-1-2.md")));

    // import: a saved run (what `herd run` saves when its store is lost).
    let rt = tokio::runtime::Runtime::new().unwrap();
    let saved = dir.join("run-1-rows.json");
    rt.block_on(async {
        let store = herd_store::Store::open(&herd_store::default_url(&out))
            .await
            .unwrap();
        let meta = store.meta(Some(1)).await.unwrap();
        herd_store::Rows {
            meta,
            rows: Vec::new(),
            continues: None,
        }
        .save(&saved)
        .unwrap();
        store.close().await;
    });
    exits(&["import", saved.to_str().unwrap(), "--out", o], 0);

    // launch k8s: the manifests written.
    let k8s = dir.join("k8s");
    exits(
        &[
            "launch",
            "k8s",
            s,
            "--shards",
            "2",
            "--store-secret",
            "x",
            "--out",
            k8s.to_str().unwrap(),
        ],
        0,
    );
    assert_eq!(std::fs::read_dir(&k8s).unwrap().count(), 1, "one manifest");

    // seed: seeding, listing and cleanup, into a real SQLite database.
    let db = dir.join("target.db");
    rt.block_on(async {
        let url = format!("sqlite:{}?mode=rwc", db.display());
        let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
        sqlx::query("CREATE TABLE accounts (id INTEGER PRIMARY KEY)")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
    });
    dir.write("seed-url", format!("sqlite:{}\n", db.display()));
    let seeded = dir.write(
        "seeded.toml",
        "[target]\nurl = \"http://127.0.0.1:9/\"\n[[op]]\nname = \"a\"\npath = \"/\"\n\
         [[step]]\nplayers = 1\nduration = \"1s\"\n[seed]\nurl_file = \"seed-url\"\n\
         accounts = 3\naccount = \"INSERT INTO accounts (id) VALUES ({id})\"\n",
    );
    let seeded = seeded.to_str().unwrap();
    exits(&["seed", seeded], 0);
    exits(&["seed", seeded, "--list"], 0);
    exits(&["seed", seeded, "--cleanup"], 0);

    // Help and a usage error: clap's own output, and herd's `Error:` line on stderr.
    exits(&["--help"], 0);
    exits(&["report", "99", "--out", o], 2);
}
