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
