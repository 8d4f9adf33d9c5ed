//! What a user reads before and around a run: every subcommand's `--help` has examples and
//! no project jargon, a typo gets a tip only when it is one, and reading a store that does
//! not exist creates nothing and says how to make a run.

use std::process::{Command, Output};

use herd_testkit::TempDir;

fn herd(args: &[&str], dir: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(args)
        .current_dir(dir)
        .env_remove("HERD_STORE")
        .output()
        .expect("running herd")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

const SUBCOMMANDS: &[&str] = &[
    "compare", "demo", "drive", "import", "launch", "merge", "probe", "report", "run", "seed",
];

#[test]
fn every_subcommand_s_help_has_examples_defaults_and_no_jargon() {
    let dir = TempDir::new("herd-help");
    for sub in SUBCOMMANDS {
        let o = herd(&[sub, "--help"], dir.path());
        assert!(o.status.success(), "herd {sub} --help: {}", text(&o));
        let help = text(&o);
        assert!(
            help.contains("Examples:"),
            "herd {sub} --help has no examples:\n{help}"
        );
        assert!(
            help.contains(&format!("herd {sub}")),
            "herd {sub} --help: no example runs `herd {sub}`:\n{help}"
        );
        for jargon in ["the seeds'", "seeds' table", "2-idle-connection pool"] {
            assert!(
                !help.contains(jargon),
                "herd {sub} --help says {jargon:?}:\n{help}"
            );
        }
    }
    let top = text(&herd(&["--help"], dir.path()));
    assert!(!top.contains("the seeds'"), "{top}");
    let demo = text(&herd(&["demo", "--help"], dir.path()));
    let demo = demo.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        demo.contains("[default: 15s]") && demo.contains("[default: 50,200,400]"),
        "{demo}"
    );
    assert!(
        dir.path().read_dir().unwrap().next().is_none(),
        "--help wrote files"
    );
}

#[test]
fn a_typo_gets_a_tip_and_a_different_word_gets_none() {
    let dir = TempDir::new("herd-typo");
    let o = herd(&["run", "lobby.toml", "--steps", "10,20"], dir.path());
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let said = text(&o);
    assert!(said.contains("unexpected argument '--steps'"), "{said}");
    assert!(
        !said.contains("'--set'"),
        "--steps is not a typo of --set:\n{said}"
    );
    let o = herd(&["probe", "--intreval", "1s"], dir.path());
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("similar argument exists: '--interval'"),
        "{}",
        text(&o)
    );
}

#[test]
fn reading_a_store_that_is_not_there_creates_nothing_and_says_how_to_make_a_run() {
    let dir = TempDir::new("herd-empty-store");
    for args in [
        &["report"][..],
        &["report", "--list"],
        &["report", "99", "--out", "results"],
        &["compare", "1", "2"],
    ] {
        let o = herd(args, dir.path());
        let said = text(&o);
        assert_eq!(o.status.code(), Some(2), "herd {args:?}: {said}");
        assert!(said.contains("no run store at"), "herd {args:?}: {said}");
        assert!(said.contains("herd run SCENARIO"), "herd {args:?}: {said}");
        let left: Vec<_> = dir
            .path()
            .read_dir()
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "herd {args:?} created {left:?}");
    }
}

/// A store URL holds a password: every command that takes `--store` also takes
/// `--store-file`, every example keeps the URL off the command line, `herd launch swarm
/// --help` says why (`ps`), and `herd --help` names both launchers (issue #27).
#[test]
fn store_urls_come_from_a_file_everywhere_and_the_examples_say_so() {
    let dir = TempDir::new("herd-store-file");
    let out = dir.join("out");
    let url = format!("sqlite:{}", out.join("kept.db").display());
    let file = dir.write("store-url", format!("{url}\n"));
    let f = file.to_str().unwrap();
    // A run recorded in that store, saved as `herd run` saves one whose store was lost.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let saved = dir.join("run-1-rows.json");
    rt.block_on(async {
        let s = herd_store::Store::open(&url).await.unwrap();
        let m = s.begin("kept", "kept.toml", 0).await.unwrap();
        s.finish(m.id, "finished").await.unwrap();
        let meta = s.meta(Some(m.id)).await.unwrap();
        herd_store::Rows {
            meta,
            rows: Vec::new(),
            continues: None,
        }
        .save(&saved)
        .unwrap();
        s.close().await;
    });
    let o = herd(
        &["import", saved.to_str().unwrap(), "--store-file", f],
        dir.path(),
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = herd(&["report", "--list", "--store-file", f], dir.path());
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(text(&o).matches("kept.toml").count(), 2, "{}", text(&o));
    // Read from the file: the missing run is named in that store.
    for args in [
        &["report", "99", "--store-file", f][..],
        &["compare", "1", "99", "--store-file", f],
    ] {
        let o = herd(args, dir.path());
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(
            text(&o).contains(&format!("run 99 is not in {url}")),
            "{}",
            text(&o)
        );
    }
    // launch swarm reads it too, and checks it before it touches an engine.
    let scenario = dir.write(
        "s.toml",
        "[target]\nurl = \"http://127.0.0.1:9/\"\n[[op]]\nname = \"a\"\npath = \"/\"\n\
         [[step]]\nplayers = 1\nduration = \"1s\"\n",
    );
    let o = herd(
        &[
            "launch",
            "swarm",
            scenario.to_str().unwrap(),
            "--shards",
            "2",
            "--store-file",
            f,
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("is not PostgreSQL"), "{}", text(&o));

    let help = text(&herd(&["launch", "swarm", "--help"], dir.path()));
    assert!(
        help.contains("`ps`") && help.contains("--store-file"),
        "{help}"
    );
    for sub in [
        &["launch", "--help"][..],
        &["launch", "swarm", "--help"],
        &["launch", "k8s", "--help"],
    ] {
        let help = text(&herd(sub, dir.path()));
        let examples = help.split("Examples:").nth(1).unwrap_or_default();
        assert!(
            !examples.contains("--store postgres") && !examples.contains("--from-literal"),
            "herd {sub:?}: an example puts the store URL on a command line:\n{help}"
        );
    }
    let help = text(&herd(&["--help"], dir.path()));
    let launch = help
        .lines()
        .find(|l| l.trim_start().starts_with("launch"))
        .unwrap();
    assert!(launch.contains("k8s") && help.contains("swarm"), "{help}");
}
