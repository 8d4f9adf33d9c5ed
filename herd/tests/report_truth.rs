//! Ground truth for the report's latencies, and the exit codes of a crossed limit:
//! `herd run --no-probe` against a loopback server whose delays are known (rate 1: every
//! request 50 ms; rate 2: every 33rd request 600 ms, the rest 50 ms); the report's p50 and
//! p99, whole-run and per step, equal the percentiles of the server's own delays within the
//! histogram's precision plus loopback overhead; the whole-run histogram is the merge of the
//! interval histograms; a broken objective exits 99 and says which; `herd compare
//! --fail-on` exits 99 on a regression, 0 on a pass and 2 on a gate that does not parse;
//! `herd compact` leaves the report's per-phase and whole-run numbers as they were.

use std::{
    path::Path,
    process::{Command, Output, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
    time::Duration,
};

use herd_testkit::{Proto, Reply, Server, TempDir};

/// Arrivals per second: 100 requests in rate 1 (1 s), 200 in rate 2 (2 s), so that a p99 is
/// not the phase's maximum (the one request a busy host delayed most).
const RATE: u64 = 100;
/// rate 1 is 1 s, rate 2 is 2 s.
const FIRST: u64 = RATE;
const SECOND: u64 = 2 * RATE;

/// Loopback overhead allowed on top of a delay: connect (the first request of a slot), the
/// request's write and read, timers that fire on the next millisecond, and the driver's
/// scheduling on a 2-core machine that other builds share. Measured here: 3.4–6.3 ms over
/// the delays at p50 and p99 (p50 53.6 ms for 50 ms, p99 253.1 ms for 250 ms), up to 21 ms
/// for a phase's slowest request while two builds ran; the p50 check below is tighter.
const OVERHEAD_US: u64 = 25_000;
/// A p99 of 100 requests is their second slowest, so two requests the host stalled move it:
/// 119 ms for rate 1's 50 ms once, while two release builds shared the 2 cores. The wrong
/// answers this test is for are further off than this allowance: rate 2's 600 ms requests
/// counted into rate 1 (550 ms above), or a whole-run p99 that is a mean of the phases'
/// (325 ms, below the 600 ms floor).
const P99_OVERHEAD_US: u64 = 90_000;

/// The server: `/q` answers after the delay the test sets for the request's number on the
/// path (`fast_ms` for the first [`FIRST`], then 600 ms for every 33rd, `fast_ms` for the
/// rest), and keeps each delay it applied, in order, as its ground truth.
fn serve(fast_ms: Arc<AtomicU64>) -> (Server, Arc<Mutex<Vec<u64>>>) {
    let delays = Arc::new(Mutex::new(Vec::new()));
    let kept = delays.clone();
    let n = Arc::new(AtomicU64::new(0));
    let server = Server::http(Proto::H1)
        .route_fn("/q", move |_| {
            let i = n.fetch_add(1, SeqCst) + 1;
            let fast = fast_ms.load(SeqCst) * 1000;
            let d = if i > FIRST && (i - FIRST).is_multiple_of(33) {
                600_000
            } else {
                fast
            };
            kept.lock().unwrap().push(d);
            async move { Reply::ok().body("ok").after(Duration::from_micros(d)) }
        })
        .start_blocking();
    (server, delays)
}

/// The value at quantile `q` of `v` as HdrHistogram ranks it: the smallest value with at
/// least ceil(q × n) samples at or below it.
fn quantile(v: &[u64], q: f64) -> u64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    let rank = ((q * s.len() as f64).ceil() as usize).max(1);
    s[rank - 1]
}

fn herd(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(args)
        .arg("--out")
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn say(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `truth` within the histogram's precision (3 significant digits: a value is reported as
/// the top of its bucket, at most 0.1 % above) plus [`OVERHEAD_US`] of `measured`, never
/// below it: the client cannot see a reply before the server sent it.
fn assert_close(what: &str, measured: u64, truth: u64) {
    assert_within(what, measured, truth, OVERHEAD_US);
}

/// [`assert_close`] for a p99, with [`P99_OVERHEAD_US`].
fn assert_close_p99(what: &str, measured: u64, truth: u64) {
    assert_within(what, measured, truth, P99_OVERHEAD_US);
}

fn assert_within(what: &str, measured: u64, truth: u64, overhead: u64) {
    eprintln!("{what}: report {measured} µs, server {truth} µs");
    assert!(
        measured + truth / 1000 >= truth && measured <= truth + truth / 1000 + overhead,
        "{what}: report {measured} µs, server's delays {truth} µs"
    );
}

#[test]
fn the_reports_percentiles_are_the_servers_delays_and_crossed_limits_exit_99() {
    let fast_ms = Arc::new(AtomicU64::new(50));
    let (server, delays) = serve(fast_ms.clone());
    let dir = TempDir::new("report-truth");
    let out = dir.join("out");
    let file = dir.write(
        "truth.toml",
        format!(
            "[target]\nurl = \"{}\"\n\
             [[op]]\nname = \"q\"\npath = \"/q\"\n\
             [slo]\nq = \"p99 < 500ms\"\n\
             [[rate]]\nrate = {RATE}\nduration = \"1s\"\n\
             [[rate]]\nrate = {RATE}\nduration = \"2s\"\n",
            server.url()
        ),
    );
    let file = file.to_str().unwrap();
    let run = |o: &Path, hdr: &Path| {
        herd(
            &[
                "run",
                file,
                "--no-probe",
                "--quiet",
                "--interval",
                "250ms",
                "--grace",
                "2s",
                "--hdr-log",
                hdr.to_str().unwrap(),
            ],
            o,
        )
    };

    // Run 1: rate 2's slow requests (600 ms) break `p99 < 500ms`, while rate 1's 50 ms ones keep
    // it with room for a host that stalls a request a few hundred ms: exit 99, and the objective named
    // with its phase, limit and measured value.
    let hdr = dir.join("hdr");
    let first = run(&out, &hdr);
    assert_eq!(first.status.code(), Some(99), "{}", say(&first));
    let stderr = String::from_utf8_lossy(&first.stderr);
    let line = stderr
        .lines()
        .find(|l| l.contains("q in rate 2: `p99 < 500ms` broken: measured "))
        .unwrap_or_else(|| panic!("{}", say(&first)));
    assert!(line.ends_with("limit 500ms"), "{line}");
    assert!(!stderr.contains("q in rate 1:"), "rate 1 kept it: {stderr}");
    assert!(stderr.contains("broke an SLO"), "{stderr}");

    let truth = delays.lock().unwrap().clone();
    assert_eq!(truth.len() as u64, FIRST + SECOND, "every arrival sent");
    let (t1, t2) = truth.split_at(FIRST as usize);
    assert_eq!(
        t2.iter().filter(|d| **d == 600_000).count(),
        6,
        "3 % of rate 2"
    );

    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("run-1.json")).unwrap()).unwrap();
    let total = json["totals"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["op"] == "q")
        .unwrap();
    assert_eq!(total["count"].as_u64(), Some(FIRST + SECOND), "{total}");
    let lat = &total["latency"];
    let us =
        |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"));
    // A 50 ms delay is the p50's floor; how far above it the host's load decides, so the
    // ceiling is the ground truth's plus the loopback overhead (assert_close).
    let p50 = us(lat, "p50_us");
    assert!(p50 >= 50_000 - 250, "p50 {p50} µs");
    assert_close("whole-run p50", p50, quantile(&truth, 0.5));
    assert_close_p99("whole-run p99", us(lat, "p99_us"), quantile(&truth, 0.99));
    // The max is the one request the host delayed most: only its floor is known.
    assert!(us(lat, "max_us") >= 600_000 - 250, "{lat}");
    for (phase, t) in [("rate 1", t1), ("rate 2", t2)] {
        let row = json["ops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["op"] == "q" && o["phase"] == phase)
            .unwrap_or_else(|| panic!("no q row in {phase}"));
        assert_eq!(row["count"].as_u64(), Some(t.len() as u64), "{phase}");
        assert_close(
            &format!("{phase} p50"),
            us(&row["latency"], "p50_us"),
            quantile(t, 0.5),
        );
        assert_close_p99(
            &format!("{phase} p99"),
            us(&row["latency"], "p99_us"),
            quantile(t, 0.99),
        );
    }

    // Merging: the whole-run histogram (merged from the phases') is the merge of the
    // interval histograms of the same op: both hold every request.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let data = rt.block_on(async {
        let store = herd_store::Store::open(&herd_store::default_url(&out))
            .await
            .unwrap();
        store.load_run(Some(1)).await.unwrap()
    });
    let intervals: Vec<_> = data
        .driver
        .iter()
        .flat_map(|i| i.ops.iter().filter(|o| o.op == "q"))
        .map(|o| {
            o.histogram
                .clone()
                .expect("intervals keep their histograms")
        })
        .collect();
    let merged = herd_model::LatencyHistogram::merge(&intervals).unwrap();
    assert_eq!(merged.len(), FIRST + SECOND);
    let from_intervals = herd_report::model::Latencies::of(&merged);
    // The report as herd built it (the JSON's floats read back within an ulp).
    let built = herd_report::Report::build(&data);
    let whole = built.totals.iter().find(|t| t.op == "q").unwrap();
    assert_eq!(Some(&from_intervals), whole.latency.value());
    assert_eq!(from_intervals.p99_us, us(lat, "p99_us"));

    // The exports: the HdrHistogram log has one histogram per interval that saw q; the CSV
    // row of rate 2 has the JSON's figures as plain numbers.
    let hlog = std::fs::read_to_string(hdr.join("run-1-q.hlog")).unwrap();
    let logged = hlog.lines().filter(|l| !l.starts_with(['#', '"'])).count();
    assert_eq!(logged, intervals.len(), "{hlog}");
    let csv = std::fs::read_to_string(out.join("run-1-ops.csv")).unwrap();
    let rate2 = json["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["phase"] == "rate 2")
        .unwrap();
    let row: Vec<f64> = csv
        .lines()
        .find_map(|l| l.strip_prefix("phase,rate 2,q,"))
        .unwrap_or_else(|| panic!("no rate 2 row in\n{csv}"))
        .split(',')
        .map(|v| v.parse().unwrap())
        .collect();
    let l = &rate2["latency"];
    let want = [
        SECOND as f64,
        SECOND as f64,
        0.0,
        0.0,
        0.0,
        rate2["rate"].as_f64().unwrap(),
        l["mean_us"].as_f64().unwrap(),
        l["p50_us"].as_f64().unwrap(),
        l["p90_us"].as_f64().unwrap(),
        l["p99_us"].as_f64().unwrap(),
        l["p999_us"].as_f64().unwrap(),
        l["max_us"].as_f64().unwrap(),
    ];
    assert_eq!(row.len(), want.len(), "{csv}");
    for (got, want) in row.iter().zip(want) {
        // serde_json reads a float to within an ulp of what was written.
        assert!(
            (got - want).abs() <= want.abs() * 1e-12,
            "{got} vs {want} in\n{csv}"
        );
    }
    let timeline = std::fs::read_to_string(out.join("run-1-timeline.csv")).unwrap();
    assert!(
        timeline.starts_with("start (s),duration (s),phase,"),
        "{timeline}"
    );

    // Run 2: every fast reply 100 ms instead of 50: p50 doubles, p99 stays at 600 ms. Its
    // --hdr-log names a path under a file: herd says so and exits 1, and the run is
    // recorded anyway (the comparison below reads it).
    fast_ms.store(100, SeqCst);
    let n0 = delays.lock().unwrap().len();
    let blocker = dir.write("not-a-dir", "x");
    let second = run(&out, &blocker.join("hdr"));
    assert_eq!(second.status.code(), Some(1), "{}", say(&second));
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains("writing the HdrHistogram logs of run 2 into")
            && err.contains("`herd report 2 --hdr-log DIR`"),
        "{err}"
    );
    assert!(out.join("run-2.json").exists());
    assert_eq!(delays.lock().unwrap().len() - n0, (FIRST + SECOND) as usize);
    drop(server);

    let compare = |gates: &[&str]| {
        let mut args = vec!["compare", "1", "2"];
        for g in gates {
            args.extend(["--fail-on", g]);
        }
        herd(&args, &out)
    };
    // A gate the comparison passes: exit 0, its verdict printed.
    let pass = compare(&["p99 +50%"]);
    assert_eq!(pass.status.code(), Some(0), "{}", say(&pass));
    assert!(
        String::from_utf8_lossy(&pass.stderr).contains("pass `p99 +50%` on q:"),
        "{}",
        say(&pass)
    );
    // A regression: exit 99, the failed gate and the passed one each on a line.
    let fail = compare(&["q p50 +10%", "p99 +50%"]);
    assert_eq!(fail.status.code(), Some(99), "{}", say(&fail));
    let err = String::from_utf8_lossy(&fail.stderr);
    assert!(err.contains("FAIL `q p50 +10%` on q:"), "{err}");
    assert!(err.contains("pass `p99 +50%` on q:"), "{err}");
    assert!(err.contains("1 of 2 --fail-on checks failed"), "{err}");
    // The JSON beside the Markdown and HTML holds the verdicts.
    let c: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("compare-1-2.json")).unwrap()).unwrap();
    assert_eq!(c["gates"].as_array().unwrap().len(), 2, "{c}");
    assert_eq!(c["gates"][0]["pass"], false);
    // A gate that does not parse: bad usage, exit 2, with the syntax.
    let bad = compare(&["p99 ten"]);
    assert_eq!(bad.status.code(), Some(2), "{}", say(&bad));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("METRIC CHANGE"),
        "{}",
        say(&bad)
    );

    // `herd compact`: run 1's 250 ms rows rolled up to 1 s; its report's per-phase and
    // whole-run numbers stay exactly what they were, its timeline has fewer rows.
    let before: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("run-1.json")).unwrap()).unwrap();
    let compact = herd(&["compact", "1", "--every", "1s"], &out);
    assert_eq!(compact.status.code(), Some(0), "{}", say(&compact));
    assert!(
        String::from_utf8_lossy(&compact.stdout).contains("run 1: "),
        "{}",
        say(&compact)
    );
    let again = herd(&["report", "1"], &out);
    assert_eq!(again.status.code(), Some(0), "{}", say(&again));
    let after: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("run-1.json")).unwrap()).unwrap();
    for k in ["ops", "totals"] {
        assert_eq!(before[k], after[k], "{k} changed by herd compact");
    }
    let rows = |v: &serde_json::Value| v["timeline"].as_array().map_or(0, Vec::len);
    assert!(
        rows(&after) < rows(&before),
        "{} → {} timeline rows",
        rows(&before),
        rows(&after)
    );
    // Bad usage: a resolution finer than a second, exit 2 with what to give.
    let fine = herd(&["compact", "1", "--every", "500ms"], &out);
    assert_eq!(fine.status.code(), Some(2), "{}", say(&fine));
    assert!(
        String::from_utf8_lossy(&fine.stderr).contains("whole seconds, 1s or more"),
        "{}",
        say(&fine)
    );
}
