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

/// A password in the target's URL, unencoded (`#`, `/`, `?`) and percent-encoded, written in
/// the scenario, given with `--set target.url=…` and as quick mode's URL: refused (exit 2)
/// with a way to send credentials, and never printed, written into `--json`, a report or the
/// store, nor sent to the target — a raw socket records every byte it is sent.
#[test]
fn a_password_in_the_target_url_is_refused_and_goes_nowhere() {
    use std::{
        io::{Read as _, Write as _},
        sync::{Arc, Mutex},
        time::{Duration, Instant},
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let received = Arc::new(Mutex::new(Vec::<u8>::new()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let server = {
        let (received, done) = (received.clone(), done.clone());
        std::thread::spawn(move || {
            // Bounded: until the test is done, and 60 s at most.
            let deadline = Instant::now() + Duration::from_secs(60);
            while !done.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < deadline {
                let Ok((mut c, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                c.set_nonblocking(false).unwrap();
                c.set_read_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = c.read(&mut buf) {
                    received.lock().unwrap().extend_from_slice(&buf[..n]);
                    let _ = c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
                }
            }
        })
    };

    let dir = TempDir::new("secrets-target-url");
    let out = dir.join("out");
    let json = dir.join("run.json");
    let (o, j) = (out.to_str().unwrap(), json.to_str().unwrap());
    let plain = format!("http://127.0.0.1:{port}/pre");
    let fragments = ["nt3d", "alice"];
    for pw in ["Pl4nt3d", "Pl#nt3d/pw?x", "Pl%23nt3d%2Fpw%3Fx"] {
        let url = format!("http://alice:{pw}@127.0.0.1:{port}/pre");
        let body = |u: &str| {
            format!(
                "[target]\nurl = \"{u}\"\n[[op]]\nname = \"a\"\npath = \"/x\"\n\
                 [[step]]\nplayers = 1\nduration = \"200ms\"\n"
            )
        };
        let with = dir.write("with.toml", body(&url));
        let without = dir.write("without.toml", body(&plain));
        let (with, without) = (with.to_str().unwrap(), without.to_str().unwrap());
        let set = format!("target.url={url}");
        let runs: Vec<Vec<&str>> = vec![
            vec!["drive", with, "--json", j],
            vec!["drive", without, "--set", &set, "--json", j],
            vec!["run", with, "--no-probe", "--out", o],
            vec!["run", without, "--set", &set, "--no-probe", "--out", o],
            vec!["drive", &url, "-n", "3", "--json", j],
            vec!["run", &url, "-n", "3", "--no-probe", "--out", o],
            vec!["drive", &url, "--print-scenario"],
            vec!["run", &url, "--print-scenario"],
        ];
        for args in runs {
            let o = Command::new(env!("CARGO_BIN_EXE_herd"))
                .args(&args)
                .args(
                    ["--grace", "1s"]
                        .iter()
                        .filter(|_| args[1].ends_with(".toml")),
                )
                .env_remove("HERD_STORE")
                .stdin(Stdio::null())
                .output()
                .unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            assert_eq!(o.status.code(), Some(2), "herd {args:?}: {text}");
            assert!(
                text.contains("user name or password") && text.contains("authorization"),
                "herd {args:?} says how to send credentials: {text}"
            );
            for f in fragments {
                assert!(!text.contains(f), "herd {args:?} printed {f}: {text}");
            }
        }
    }
    // Every file written (the --json, reports, the run store), and what the target was sent.
    let mut files = vec![json.clone()];
    if let Ok(entries) = std::fs::read_dir(&out) {
        files.extend(entries.flatten().map(|e| e.path()));
    }
    for f in files.iter().filter(|f| f.exists()) {
        let body = String::from_utf8_lossy(&std::fs::read(f).unwrap()).into_owned();
        for frag in fragments {
            assert!(!body.contains(frag), "{} holds {frag}", f.display());
        }
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    server.join().unwrap();
    let sent = String::from_utf8_lossy(&received.lock().unwrap()).into_owned();
    for frag in fragments {
        assert!(!sent.contains(frag), "the target was sent {frag}: {sent}");
    }
}
