//! The demo end to end, shortened: the buggy gateway (2 idle backend connections) churns and
//! the report names the churn cliff; the fixed one (512) does not. And a run killed with
//! SIGKILL still reports every interval it recorded.

use std::{
    io::{BufRead as _, BufReader},
    process::Stdio,
    time::{Duration, Instant},
};

use herd_report::Report;
use herd_store::Store;
use herd_testkit::TempDir;
use integration_test::{herd_cmd, privileged};

/// Whole demos run one at a time: two at once share the 2 cores, and the churn they measure
/// depends on the load they get.
static DEMO: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn reports(out: &std::path::Path) -> Vec<Report> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = Store::open(&herd_store::default_url(out)).await.unwrap();
        let mut v = Vec::new();
        for meta in store.list().await.unwrap().into_iter().rev() {
            v.push(Report::build(&store.load_run(Some(meta.id)).await.unwrap()));
        }
        v
    })
}

#[test]
fn the_buggy_pool_churns_and_is_named_while_the_fixed_one_is_not() {
    if !privileged("the_buggy_pool_churns_and_is_named") {
        return;
    }
    let _one = DEMO.lock().unwrap_or_else(|e| e.into_inner());
    let out = TempDir::new("it-demo");
    let st = herd_cmd()
        .args([
            "demo",
            "--steps",
            "20,60,120",
            "--step-duration",
            "5s",
            "--out",
        ])
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "herd demo failed: {st}");
    let r = reports(&out);
    assert_eq!(r.len(), 2);
    let (bug, fix) = (&r[0], &r[1]);
    assert_eq!(
        (bug.run.name.as_str(), fix.run.name.as_str()),
        ("max-idle-2", "max-idle-512")
    );
    let hop = |rep: &Report| {
        rep.pairs
            .iter()
            .find(|p| p.container == "gateway" && p.remote_container == "backend")
            .cloned()
            .unwrap_or_else(|| panic!("no gateway → backend pair in run {}", rep.run.id))
    };
    let (b, f) = (hop(bug), hop(fix));
    let churn = |p: &herd_report::model::PairRow| p.churn_ratio.value().unwrap();
    // Measured here: 0.45 vs 0.01 (2 023 vs 54 connections for ~4 500 requests).
    assert!(churn(&b) >= 0.2, "buggy churn {}", churn(&b));
    assert!(churn(&f) <= 0.05, "fixed churn {}", churn(&f));
    assert!(
        b.time_wait_peak.value().unwrap() >= 200.0,
        "{:?}",
        b.time_wait_peak
    );
    assert!(
        f.time_wait_peak.value().unwrap() <= 10.0,
        "{:?}",
        f.time_wait_peak
    );
    let named = |rep: &Report| {
        rep.findings
            .iter()
            .any(|x| x.kind == "churn_cliff" && x.title.contains("gateway → backend"))
    };
    assert!(named(bug), "{:#?}", bug.findings);
    assert!(!named(fix), "{:#?}", fix.findings);
    // The churn comes first (findings in order of impact): the churn cliff itself, or the
    // causal chain that starts from it — no kernel-side wait ahead of it.
    let first = &bug.findings[0];
    assert!(
        first.kind == "churn_cliff"
            || (first.kind == "causal_chain" && first.title.contains("its churn")),
        "{:#?}",
        bug.findings
    );
    // Every table cell is filled, in the files as written.
    for id in [bug.run.id, fix.run.id] {
        let md = std::fs::read_to_string(out.join(format!("run-{id}.md"))).unwrap();
        for line in md.lines().filter(|l| l.starts_with('|')) {
            assert!(
                line.trim_matches('|')
                    .split('|')
                    .all(|c| !c.trim().is_empty()),
                "{line}"
            );
        }
        assert!(out.join(format!("run-{id}.html")).exists());
    }
    // Nothing left on the host.
    let leftovers: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let me = format!("herd-{}-", std::process::id());
    assert!(
        leftovers.iter().all(|n| !n.starts_with(&me)),
        "{leftovers:?}"
    );
}

/// Starts the contour backend on loopback and returns it with its address.
fn backend(out: &std::path::Path) -> (std::process::Child, String) {
    let db = format!("sqlite:{}?mode=rwc", out.join("backend.db").display());
    let mut backend = herd_cmd()
        .args(["contour", "backend", "--listen", "127.0.0.1:0", "--db", &db])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(backend.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("ready ")
        .expect("ready line")
        .to_owned();
    (backend, addr)
}

#[test]
fn a_broken_objective_fails_the_run_and_is_reported_per_step() {
    if !privileged("a_broken_objective_fails_the_run") {
        return;
    }
    let out = TempDir::new("it-slo");
    let (mut be, addr) = backend(&out);
    let scenario = |limit: &str| {
        let f = out.join(format!("slo-{}.toml", limit.replace(' ', "")));
        std::fs::write(
            &f,
            format!(
                "[target]\nurl = \"http://{addr}\"\ntransport = \"h1\"\n\n[slo]\nhealth = \"p99 < {limit}\"\n\n\
                 [[op]]\nname = \"health\"\npath = \"/healthz\"\n\n[[step]]\nplayers = 2\nduration = \"2s\"\n"
            ),
        )
        .unwrap();
        f
    };
    let run = |f: &std::path::Path| {
        herd_cmd()
            .args(["run", "--quiet", "--no-probe", "--out"])
            .arg(&out)
            .arg(f)
            .output()
            .unwrap()
    };
    // 1 µs cannot be met: the run fails with the code of a crossed limit, and says why.
    let failed = run(&scenario("1us"));
    assert_eq!(
        failed.status.code(),
        Some(99),
        "{}",
        String::from_utf8_lossy(&failed.stderr)
    );
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains("broke an SLO"), "{stderr}");
    assert!(
        stderr.contains("health in step 1: `p99 < 1us` broken: measured "),
        "{stderr}"
    );
    let passed = run(&scenario("10s"));
    assert!(
        passed.status.success(),
        "{}",
        String::from_utf8_lossy(&passed.stderr)
    );
    let _ = be.kill();
    let _ = be.wait();
    let r = reports(&out);
    assert!(
        !r[0].slo[0].pass && r[0].slo[0].objective == "p99 < 1us",
        "{:?}",
        r[0].slo
    );
    assert!(r[1].slo.iter().all(|s| s.pass), "{:?}", r[1].slo);
    // 0 errors while the latency objective broke: the silent-degradation finding.
    assert!(
        r[0].findings
            .iter()
            .any(|f| f.kind == "slo_breach_without_errors"),
        "{:#?}",
        r[0].findings
    );
    let md = std::fs::read_to_string(out.join(format!("run-{}.md", r[0].run.id))).unwrap();
    assert!(md.contains("**FAIL**"), "{md}");
    // Without the probe every probe cell says why.
    assert!(md.contains("--no-probe"), "{md}");
}

#[test]
fn a_run_killed_with_sigkill_still_reports_every_recorded_interval() {
    if !privileged("a_run_killed_with_sigkill_still_reports") {
        return;
    }
    let out = TempDir::new("it-kill");
    // A real HTTP/1.1 server on loopback: the contour's backend, with its own database.
    let (mut backend, addr) = backend(&out);
    let scenario = out.join("kill.toml");
    std::fs::write(
        &scenario,
        format!(
            "[target]\nurl = \"http://{addr}\"\ntransport = \"h1\"\n\n[player]\nthink = \"20ms\"\n\n\
             [[op]]\nname = \"health\"\npath = \"/healthz\"\n\n[[step]]\nplayers = 5\nduration = \"60s\"\n"
        ),
    )
    .unwrap();
    let mut run = herd_cmd()
        .args(["run", "--quiet", "--out"])
        .arg(&out)
        .arg(&scenario)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Let at least three 1 s intervals of both timelines be recorded, then kill it outright.
    let t = Instant::now();
    std::thread::sleep(Duration::from_millis(4_500));
    // SAFETY: killing our own child.
    unsafe { libc::kill(run.id() as i32, libc::SIGKILL) };
    run.wait().unwrap();
    let _ = backend.kill();
    let _ = backend.wait();
    assert!(t.elapsed() < Duration::from_secs(30));

    let st = herd_cmd()
        .args(["report", "--out"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success());
    let r = &reports(&out)[0];
    // The store still says `running`; with no live process behind it, herd reads it as
    // `interrupted` (docs/reliability.md, cell 5).
    assert_eq!(
        r.run.status, "interrupted",
        "a killed run reads interrupted"
    );
    assert!(
        r.timeline.len() >= 3,
        "driver intervals: {}",
        r.timeline.len()
    );
    assert!(
        r.run.probe_intervals >= 3,
        "probe intervals: {}",
        r.run.probe_intervals
    );
    assert!(r.run.requests > 0);
    assert!(
        r.notes.iter().any(|n| n.contains("did not finish")),
        "{:?}",
        r.notes
    );
    let md = std::fs::read_to_string(out.join(format!("run-{}.md", r.run.id))).unwrap();
    assert!(md.contains("status **interrupted**"), "{md}");
}

#[test]
fn ctrl_c_during_the_demo_removes_every_container_and_keeps_what_was_recorded() {
    if !privileged("ctrl_c_during_the_demo_removes_every_container") {
        return;
    }
    let _one = DEMO.lock().unwrap_or_else(|e| e.into_inner());
    let out = TempDir::new("it-demo-int");
    let mut demo = herd_cmd()
        .args([
            "demo",
            "--steps",
            "20,40",
            "--step-duration",
            "30s",
            "--out",
        ])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(out.join("stderr")).unwrap())
        .spawn()
        .unwrap();
    let pid = demo.id();
    // Wait until the run is recording, then interrupt it like a user would.
    let deadline = Instant::now() + Duration::from_secs(60);
    let prefix = format!("herd-{pid}-");
    let mine = |p: &str| p.starts_with(&prefix);
    loop {
        let running = std::fs::read_dir("/run/netns")
            .map(|d| d.flatten().any(|e| mine(&e.file_name().to_string_lossy())))
            .unwrap_or(false);
        if running && out.join("runs.db").exists() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the demo never started its contour"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(4));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let st = demo.wait().unwrap();
    assert!(
        !st.success(),
        "an interrupted demo says so in its exit code"
    );
    let netns: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(netns.iter().all(|n| !mine(n)), "left behind: {netns:?}");
    for root in [
        "/sys/fs/cgroup/unified",
        "/sys/fs/cgroup/cpu",
        "/sys/fs/cgroup/memory",
    ] {
        let left: Vec<String> = std::fs::read_dir(root)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            left.iter().all(|n| !mine(n)),
            "left behind in {root}: {left:?}"
        );
    }
    // The interrupted run's intervals are in the store and its report was written.
    let r = reports(&out);
    assert_eq!(r[0].run.status, "stopped");
    assert!(r[0].timeline.len() >= 3, "{}", r[0].timeline.len());
    assert!(out.join(format!("run-{}.md", r[0].run.id)).exists());
    // The accounts and sessions herd seeded for the run were removed on the way out.
    let stderr = std::fs::read_to_string(out.join("stderr")).unwrap();
    assert!(
        stderr.contains("herd run: seeding 1: 36 accounts + 4 guests, 80 rows"),
        "{stderr}"
    );
    let (accounts, sessions, tracking) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let db = format!("sqlite:{}", out.join("contour-max-idle-2.db").display());
            let pool = sqlx::SqlitePool::connect(&db).await.unwrap();
            let count = |sql: &'static str| {
                let pool = pool.clone();
                async move {
                    let (n,): (i64,) = sqlx::query_as(sql).fetch_one(&pool).await.unwrap();
                    n
                }
            };
            let r = (
                count("SELECT COUNT(*) FROM accounts").await,
                count("SELECT COUNT(*) FROM sessions").await,
                count("SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'herd_seed%'").await,
            );
            pool.close().await;
            r
        });
    assert_eq!((accounts, sessions, tracking), (0, 0, 0));
}
