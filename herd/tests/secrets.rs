//! A planted password, unencoded (`#`, `/`, `?`) and percent-encoded, in every URL herd takes
//! (`--store`, `HERD_STORE`, a `[seed]` url_file): no command — seed, run, report, import,
//! compare — prints it, in any form, on stdout,
//! stderr or in a file it writes.

use std::process::{Command, Stdio};

use herd_testkit::TempDir;

const PLANTED: [&str; 2] = [
    "postgres://herd:Pl#nt3d/pw?x@127.0.0.1:1/herd",
    "postgres://herd:Pl%23nt3d%2Fpw%3Fx@127.0.0.1:1/herd",
];
const FRAGMENTS: [&str; 5] = ["Pl#nt3d", "nt3d/pw", "pw?x", "Pl%23nt3d", "nt3d%2F"];

#[test]
fn no_command_prints_a_planted_password() {
    let dir = TempDir::new("secrets-sweep");
    let file = dir.write(
        "s.toml",
        "[target]\nurl = \"http://127.0.0.1:9/\"\n[[op]]\nname = \"a\"\npath = \"/\"\n\
         [[step]]\nplayers = 1\nduration = \"300ms\"\n[seed]\nurl_file = \"seed-url\"\n\
         accounts = 1\naccount = \"INSERT INTO accounts (id) VALUES ({id})\"\n",
    );
    let out = dir.join("out");
    let (scenario, out_dir) = (file.to_str().unwrap(), out.to_str().unwrap());
    for url in PLANTED {
        dir.write("seed-url", format!("{url}\n"));
        let runs: Vec<(Vec<&str>, Option<&str>)> = vec![
            (vec!["seed", scenario], None),
            (vec!["seed", scenario, "--list"], None),
            (
                vec![
                    "run",
                    scenario,
                    "--no-probe",
                    "--out",
                    out_dir,
                    "--store",
                    url,
                ],
                None,
            ),
            (
                vec!["run", scenario, "--no-probe", "--out", out_dir],
                Some(url),
            ),
            (vec!["report", "--out", out_dir, "--store", url], None),
            (vec!["report", "--list", "--out", out_dir], Some(url)),
            (vec!["import", scenario, "--store", url], None),
            (
                vec!["compare", "1", "2", "--out", out_dir, "--store", url],
                None,
            ),
            (
                vec![
                    "compare",
                    "1",
                    "2",
                    "--out",
                    out_dir,
                    "--fail-on",
                    "p99 +10%",
                ],
                Some(url),
            ),
        ];
        for (args, env) in runs {
            let mut c = Command::new(env!("CARGO_BIN_EXE_herd"));
            c.args(&args).stdin(Stdio::null()).env_remove("HERD_STORE");
            if let Some(e) = env {
                c.env("HERD_STORE", e);
            }
            let o = c.output().unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            assert!(
                !o.status.success(),
                "herd {args:?} cannot succeed here: {text}"
            );
            for f in FRAGMENTS {
                assert!(!text.contains(f), "herd {args:?} printed {f}: {text}");
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir(&out) {
        for e in entries.flatten() {
            let body = String::from_utf8_lossy(&std::fs::read(e.path()).unwrap()).into_owned();
            for f in FRAGMENTS {
                assert!(!body.contains(f), "{} holds {f}", e.path().display());
            }
        }
    }
}
