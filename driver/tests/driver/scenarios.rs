//! The example scenarios and every full scenario in docs/scenario.md parse; errors in a
//! file on disk name it.

use std::path::{Path, PathBuf};

use herd_driver::{Scenario, scenario::Connections};
use herd_testkit::TempDir;

fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_example_scenario_parses() {
    let files = examples();
    let names: Vec<_> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec![
            "catalog.toml",
            "game.toml",
            "hammer.toml",
            "lobby.toml",
            "rate.toml",
            "registry.toml",
            "soak.toml"
        ]
    );
    for f in &files {
        Scenario::load(f, &[]).unwrap_or_else(|e| panic!("{e}"));
    }
    // The seeds' scenarios (examples/seeds/, run against real servers by herd/tests/seeds/).
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/seeds");
    let mut n = 0;
    for e in std::fs::read_dir(seeds).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            Scenario::load(&p, &[]).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 1, "examples/seeds/ has its scenarios");
}

#[test]
fn the_game_examples_ab_toggles_apply() {
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/scenarios/game.toml");
    let s = Scenario::load(&f, &[]).unwrap();
    assert_eq!(
        s.steps.iter().map(|st| st.players).collect::<Vec<_>>(),
        vec![50, 200, 500]
    );
    assert_eq!(s.target.connections, Connections::PerPlayer);
    let sets = [
        "target.connections=pool".to_owned(),
        "target.pool_size=1".to_owned(),
        "op[game.evaluate].weight=0".to_owned(),
    ];
    let s = Scenario::load(&f, &sets).unwrap();
    assert_eq!(s.target.connections, Connections::Pool(1));
    assert_eq!(s.ops[s.op("game.evaluate").unwrap()].weight, 0);
}

#[test]
fn every_full_scenario_in_the_docs_parses() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/scenario.md"))
            .unwrap();
    let mut blocks = 0;
    // Named as if beside the test servers' files, so the gRPC examples' `arena.proto` is
    // found (driver/tests/players.rs runs those against the servers).
    let py = herd_testkit::py::py_dir();
    for (i, block) in doc.split("```toml\n").skip(1).enumerate() {
        let block = block.split("```").next().unwrap();
        if block.contains("[target]") {
            let name = py.join(format!("docs-scenario-md-block-{i}.toml"));
            Scenario::parse(&name.display().to_string(), block, &[])
                .unwrap_or_else(|e| panic!("{e}"));
            blocks += 1;
        }
    }
    assert!(blocks >= 2, "only {blocks} full scenarios in the docs");
}

#[test]
fn an_error_in_a_file_names_the_file_line_column_and_valid_keys() {
    let dir = TempDir::new("driver-scenarios");
    let f = dir.write(
        "bad.toml",
        "[target]\nurl = \"http://127.0.0.1:1\"\n\n[[op]]\nname = \"a\"\npath = \"/a\"\nwieght = 2\n",
    );
    let e = Scenario::load(&f, &[]).unwrap_err();
    let d = e.diagnostic().expect("a located error");
    assert_eq!((d.line, d.column, d.key.as_str()), (7, 1, "op[0].wieght"));
    let shown = e.to_string();
    assert!(
        shown.starts_with(&format!(
            "{}:7:1: op[0].wieght: unknown key `wieght`, valid keys are `name`, `method`, `path`",
            f.display()
        )),
        "{shown}"
    );
    assert!(shown.contains("`weight`"), "{shown}");
    let missing = Scenario::load(&dir.join("nope.toml"), &[])
        .unwrap_err()
        .to_string();
    assert!(
        missing.starts_with("reading scenario ") && missing.contains("nope.toml"),
        "{missing}"
    );
}
