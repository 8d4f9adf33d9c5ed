//! `cargo xtask soak`: an hours-long `herd run` at 100 ms intervals with the probe on, 4 ops
//! against a local nginx at a modest rate, sampling herd's memory and the run store's size
//! every minute, then timing `herd report` on the result and projecting a day's store from the
//! run rolled up whole to 1 s and 10 s rows (docs/benchmarks.md, "Long runs").
//! Root (the probe); traffic on 127.0.0.1 only; nginx and herd are stopped on every exit.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

/// Options of `cargo xtask soak`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// How long herd drives, e.g. `1h`, `10m` (herd's duration syntax).
    #[arg(long, default_value = "1h")]
    pub duration: String,
    /// The timeline's interval.
    #[arg(long, default_value = "100ms")]
    pub interval: String,
    /// Players, each pausing `--think` between requests (20 × 50 ms ≈ 350 req/s).
    #[arg(long, default_value_t = 20)]
    pub players: usize,
    /// Pause after each request.
    #[arg(long, default_value = "50ms")]
    pub think: String,
    /// Where the run store, the report and the samples go.
    #[arg(long, default_value = "target/soak")]
    pub out: PathBuf,
    /// Soak this herd binary instead of building target/release/herd first.
    #[arg(long, value_name = "PATH")]
    pub herd: Option<PathBuf>,
}

const PORT: u16 = 18_490;

/// A child process stopped (SIGTERM, then waited for) on drop.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn nginx_config(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "# Written by cargo xtask soak.
daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    keepalive_requests 1000000000;
    keepalive_timeout 300s;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    server {{
        listen 127.0.0.1:{PORT};
        location /a {{ return 200 \"a\"; }}
        location /b {{ return 200 \"bb\"; }}
        location /c {{ return 201 \"ccc\"; }}
        location /d {{ return 404 \"no\"; }}
    }}
}}
"
    )
}

fn scenario(args: &Args) -> String {
    let ops: String = ["a", "b", "c", "d"]
        .iter()
        .map(|o| format!("[[op]]\nname = \"{o}\"\npath = \"/{o}\"\n\n"))
        .collect();
    format!(
        "# Written by cargo xtask soak.
[target]
url = \"http://127.0.0.1:{PORT}\"

[player]
think = \"{}\"

{ops}[outcome]
expected = [\"http_4xx\"]

[[step]]
players = {}
duration = \"{}\"
",
        args.think, args.players, args.duration
    )
}

/// A `/proc/PID/status` field in kB: `VmRSS:` (what the table and the goal use), or
/// `RssAnon:` (the process's own memory, without the pages of its executable and libraries
/// it has touched so far).
fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

/// Runs the soak with `herd` (a release build); returns the table of what it measured.
pub fn soak(herd: &Path, args: &Args) -> Result<String> {
    if unsafe { libc::geteuid() } != 0 {
        bail!("cargo xtask soak needs root: herd run attaches the kernel probe");
    }
    let dir = std::path::absolute(&args.out)?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .with_context(|| format!("clearing the soak's directory {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("nginx.conf"), nginx_config(&dir))?;
    std::fs::write(dir.join("soak.toml"), scenario(args))?;
    let _nginx = Guard(
        Command::new("nginx")
            .args(["-c", &dir.join("nginx.conf").display().to_string()])
            .args(["-p", &dir.display().to_string()])
            .stdout(Stdio::null())
            .spawn()
            .context("starting nginx (cargo xtask setup installs it)")?,
    );
    std::thread::sleep(Duration::from_millis(500));
    let log = std::fs::File::create(dir.join("herd-run.log"))?;
    let started = Instant::now();
    // The live view on (its memory is part of what is measured), drawn into /dev/null.
    let mut herd_run = Guard(
        Command::new(herd)
            .args([
                "run",
                "soak.toml",
                "--interval",
                &args.interval,
                "--out",
                ".",
            ])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting herd run")?,
    );
    let pid = herd_run.0.id();
    let db = dir.join("runs.db");
    let wal = dir.join("runs.db-wal");
    let mut samples = String::from("t_s,rss_kib,rss_anon_kib,store_bytes\n");
    let mut rows: Vec<(u64, u64, u64)> = Vec::new();
    let mut next = Instant::now();
    let status = loop {
        if let Some(s) = herd_run.0.try_wait()? {
            break s;
        }
        if Instant::now() >= next {
            let t = started.elapsed().as_secs();
            let rss = status_kib(pid, "VmRSS:").unwrap_or(0);
            let anon = status_kib(pid, "RssAnon:").unwrap_or(0);
            let store = file_len(&db) + file_len(&wal);
            writeln!(samples, "{t},{rss},{anon},{store}")?;
            std::fs::write(dir.join("samples.csv"), &samples)?;
            rows.push((t, rss, store));
            next += Duration::from_secs(60);
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let ran = started.elapsed();
    if !status.success() {
        bail!(
            "herd run exited with {status}: see {}",
            dir.join("herd-run.log").display()
        );
    }
    let store_end = file_len(&db);
    let t0 = Instant::now();
    let report = Command::new(herd)
        .args(["report", "--out", "."])
        .current_dir(&dir)
        .output()
        .context("running herd report")?;
    let report_s = t0.elapsed().as_secs_f64();
    if !report.status.success() {
        bail!(
            "herd report failed: {}",
            String::from_utf8_lossy(&report.stderr)
        );
    }
    let tiers = tier_sizes(herd, &dir)?;
    let mut out = table(&rows, ran, store_end, report_s);
    out.push_str(&projection(ran, store_end, tiers));
    Ok(out)
}

/// The run's store rolled up whole to 1 s and to 10 s rows (`herd compact` on copies,
/// vacuumed): (bytes at 1 s, bytes at 10 s).
fn tier_sizes(herd: &Path, dir: &Path) -> Result<(u64, u64)> {
    let mut sizes = [0u64; 2];
    for (i, every) in ["1s", "10s"].iter().enumerate() {
        let copy = dir.join(format!("runs-{every}.db"));
        std::fs::copy(dir.join("runs.db"), &copy).context("copying the run store")?;
        let out = Command::new(herd)
            .args(["compact", "--every", every, "--store"])
            .arg(format!("sqlite:{}", copy.display()))
            .output()
            .context("running herd compact")?;
        if !out.status.success() {
            bail!(
                "herd compact --every {every} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        sizes[i] = file_len(&copy);
        std::fs::remove_file(&copy)?;
    }
    Ok((sizes[0], sizes[1]))
}

/// The 24-hour store under herd's roll-up policy (the last 10 minutes at full resolution,
/// 1 s rows up to 2 hours back, 10 s rows before), from this run's measured sizes: the store
/// as it is, plus the 1 s rows it would still gain up to 2 hours, plus 22 hours of 10 s
/// rows, each at the bytes per hour this run takes at that resolution (`tiers`, from
/// [`tier_sizes`]; their fixed part, the run's header and final rows, is counted in every
/// hour, so the projection leans high).
fn projection(ran: Duration, store_end: u64, (at_1s, at_10s): (u64, u64)) -> String {
    let mib = |b: f64| b / (1 << 20) as f64;
    let hours = ran.as_secs_f64() / 3600.0;
    if hours <= 0.0 {
        return String::new();
    }
    let (d1, d10) = (at_1s as f64 / hours, at_10s as f64 / hours);
    // Hours of 1 s rows the store holds now, and at 24 h.
    let now_1s = (hours - 1.0 / 6.0).max(0.0);
    let day_1s = 2.0 - 1.0 / 6.0;
    let day = store_end as f64 + d1 * (day_1s - now_1s).max(0.0) + d10 * (24.0 - 2.0);
    format!(
        "rolled up whole: {:.1} MiB at 1 s ({:.1} MiB/h), {:.1} MiB at 10 s ({:.2} MiB/h); \
         24 h under the roll-up policy: {:.0} MiB (the store now + {:.1} h more of 1 s rows + \
         22 h of 10 s rows)\n",
        mib(at_1s as f64),
        mib(d1),
        mib(at_10s as f64),
        mib(d10),
        mib(day),
        (day_1s - now_1s).max(0.0)
    )
}

fn table(rows: &[(u64, u64, u64)], ran: Duration, store_end: u64, report_s: f64) -> String {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut out = String::new();
    let _ = writeln!(out, "| t (min) | herd run RSS (MiB) | store (MiB) |");
    let _ = writeln!(out, "|---|---|---|");
    for (t, rss, store) in rows
        .iter()
        .filter(|r| r.0 % 600 < 60 || r.0 == rows[1.min(rows.len() - 1)].0)
    {
        let _ = writeln!(
            out,
            "| {} | {:.1} | {:.1} |",
            t / 60,
            *rss as f64 / 1024.0,
            mib(*store)
        );
    }
    // Growth after the warm-up (the first 10 minutes: full resolution fills, the allocator
    // settles) to the end.
    let warm = rows.iter().find(|r| r.0 >= 600).or(rows.first());
    let last = rows.last();
    if let (Some(w), Some(l)) = (warm, last) {
        let growth = (l.1 as f64 - w.1 as f64) / w.1.max(1) as f64 * 100.0;
        let _ = writeln!(
            out,
            "\nRSS {:.1} MiB at {} min → {:.1} MiB at {} min: {growth:+.1} %",
            w.1 as f64 / 1024.0,
            w.0 / 60,
            l.1 as f64 / 1024.0,
            l.0 / 60
        );
        // The trim thread hands memory back once a minute, so one sample can sit anywhere in
        // a ±2 MiB sawtooth, and the last one is taken while the run writes its result: a
        // trend is the mean of whole windows and the slope through every sample in between.
        let steady: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.0 >= w.0 && r.0 < l.0)
            .map(|r| (r.0 as f64 / 3600.0, r.1 as f64 / 1024.0))
            .collect();
        let mean = |lo: f64, hi: f64| {
            let v: Vec<f64> = steady
                .iter()
                .filter(|(h, _)| *h >= lo && *h < hi)
                .map(|(_, m)| *m)
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let (first_h, end_h) = (w.0 as f64 / 3600.0, l.0 as f64 / 3600.0);
        if let (Some(a), Some(b)) = (
            mean(first_h, first_h + 1.0 / 6.0),
            mean(end_h - 1.0 / 6.0, end_h),
        ) && steady.len() > 2
        {
            let n = steady.len() as f64;
            let (sx, sy) = steady
                .iter()
                .fold((0.0, 0.0), |(x, y), (h, m)| (x + h, y + m));
            let (mx, my) = (sx / n, sy / n);
            let (num, den) = steady.iter().fold((0.0, 0.0), |(u, v), (h, m)| {
                (u + (h - mx) * (m - my), v + (h - mx) * (h - mx))
            });
            let _ = writeln!(
                out,
                "RSS mean of the 10 minutes from minute {} {a:.1} MiB, of the last 10 before the \
                 end {b:.1} MiB: {:+.1} %; slope through the samples between: {:+.2} MiB/h",
                w.0 / 60,
                (b / a - 1.0) * 100.0,
                if den > 0.0 { num / den } else { 0.0 }
            );
        }
        let hours = (l.0 - w.0) as f64 / 3600.0;
        if hours > 0.0 {
            let per_h = (l.2 as f64 - w.2 as f64) / hours;
            let _ = writeln!(
                out,
                "store growth after {} min: {:.1} MiB/h; linear 24 h projection, as if the 1 s rows were kept all day: {:.0} MiB",
                w.0 / 60,
                mib(per_h.max(0.0) as u64),
                mib(l.2) + mib(per_h.max(0.0) as u64) * (24.0 - l.0 as f64 / 3600.0)
            );
        }
    }
    let _ = writeln!(
        out,
        "ran {:.1} min; store at the end {:.1} MiB; herd report {:.2} s",
        ran.as_secs_f64() / 60.0,
        mib(store_end),
        report_s
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An hour's run: 73 MiB as stored, 60 MiB rolled up to 1 s, 6 MiB to 10 s → 73 + 1 h
    /// of 1 s rows + 22 h of 10 s rows.
    #[test]
    fn the_day_is_the_store_plus_the_tiers_it_has_yet_to_fill() {
        let m = |v: u64| v << 20;
        let p = projection(Duration::from_secs(3600), m(73), (m(60), m(6)));
        assert!(p.contains("24 h under the roll-up policy: 265 MiB"), "{p}");
        assert!(p.contains("+ 1.0 h more of 1 s rows"), "{p}");
    }

    /// A flat sawtooth (the minute's trim) with a high last sample: the endpoints say +10 %,
    /// the windows and the slope say flat.
    #[test]
    fn a_flat_sawtooth_is_flat_and_a_rise_is_a_rise() {
        let kib = |mib: f64| (mib * 1024.0) as u64;
        let saw = |t: u64| {
            if (t / 60).is_multiple_of(2) {
                34.0
            } else {
                36.0
            }
        };
        let mut rows: Vec<(u64, u64, u64)> =
            (0..60).map(|m| (m * 60, kib(saw(m * 60)), 0)).collect();
        rows.push((3600, kib(37.4), 0));
        let t = table(&rows, Duration::from_secs(3600), 0, 1.0);
        assert!(
            t.contains("34.0 MiB at 10 min → 37.4 MiB at 60 min: +10.0 %"),
            "{t}"
        );
        assert!(
            t.contains(": +0.0 %; slope through the samples between: +0.14 MiB/h"),
            "{t}"
        );
        // 1 MiB more every 10 minutes.
        let rows: Vec<(u64, u64, u64)> = (0..=60)
            .map(|m| (m * 60, kib(30.0 + m as f64 / 10.0), 0))
            .collect();
        let t = table(&rows, Duration::from_secs(3600), 0, 1.0);
        assert!(
            t.contains("slope through the samples between: +6.00 MiB/h"),
            "{t}"
        );
    }
}
