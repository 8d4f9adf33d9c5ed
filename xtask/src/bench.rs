//! `cargo xtask bench-probe`: the probe's overhead, measured side by side in one run.
//!
//! A private network namespace holds a drain server and an echo server on 127.0.0.1 (nothing
//! leaves the namespace). Two loads run there, each several times, alternating probe detached
//! and probe attached (a separate `herd probe` process watching everything):
//! - a connection storm: one client connecting and closing first as fast as it can;
//! - keep-alive requests: 50 workers over 50 pooled connections, one byte each way;
//! - context switches: two threads of this process pinned to CPU 0 pass one byte back and
//!   forth over two pipes, so every message is a wakeup and a context switch, the scheduler
//!   program's (`tp_btf/sched_switch`) worst case.
//!
//! With `--raw`, a third configuration runs the probe with its fallback run-queue programs
//! (`HERD_PROBE_RUNQ=raw`). Reported per configuration: throughput, its ratio to probe off
//! (of the means, and the min–max of each repetition's ratio to the probe-off measurement next
//! to it), the load's CPU per operation, the probe process's CPU (share of one core) and peak
//! RSS, and events it lost (must be 0); then every repetition's numbers.

use std::{
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

const NS: &str = "herd-bench";

/// `cargo xtask bench-probe` options.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Repetitions of each configuration per load (the order rotates each repetition).
    #[arg(long, default_value_t = 4)]
    pub reps: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// The loads, comma-separated: `storm`, `keep-alive`, `ping-pong` (default: all).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "storm,keep-alive,ping-pong"
    )]
    pub loads: Vec<String>,
    /// Also measure the probe with its fallback run-queue programs (raw tracepoints on
    /// `sched_wakeup`/`sched_switch`, `HERD_PROBE_RUNQ=raw`), interleaved with the other two.
    #[arg(long)]
    pub raw: bool,
    /// Also measure the probe with `--runq-waits` (a program on every context switch times
    /// each run-queue wait), interleaved with the others.
    #[arg(long)]
    pub runq_waits: bool,
    /// Instead of the loads: N rounds of the ping-pong alone (`--seconds` each), the probe
    /// off, on, and on with `--runq-waits`, the probe pinned to CPU 1 away from the load on
    /// CPU 0 and started afresh each time; mean ± standard error per configuration and the
    /// median of each round's ratio. Short runs, many of them: the VM's drift over minutes
    /// is larger than a 2 % effect.
    #[arg(long, value_name = "N")]
    pub alternate: Option<usize>,
}

/// The probe's state during one measurement.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Probe {
    Off,
    On,
    /// On, with `--runq-waits` (the `sched_switch` program).
    Waits,
    /// On, with `--runq-waits` and the fallback run-queue programs.
    Raw,
}

impl Probe {
    fn name(self) -> &'static str {
        match self {
            Probe::Off => "off",
            Probe::On => "on",
            Probe::Waits => "on --runq-waits",
            Probe::Raw => "on --runq-waits (raw_tp)",
        }
    }
}

struct Netns;

impl Netns {
    fn create() -> Result<Self> {
        let _ = Command::new("ip").args(["netns", "del", NS]).output();
        run(Command::new("ip").args(["netns", "add", NS]))?;
        let ns = Netns;
        run(Command::new("ip").args(["-n", NS, "link", "set", "lo", "up"]))?;
        Ok(ns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", NS]).output();
    }
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn in_ns(bin: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", NS]).arg(bin).args(args);
    c
}

/// utime + stime of a process in seconds, and its peak RSS in KiB.
fn cpu_and_hwm(pid: u32) -> (f64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpu = (ticks(11) + ticks(12)) / hz; // utime, stime: fields 14, 15 of the full line
    let hwm = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    (cpu, hwm)
}

struct ProbeProc {
    child: Child,
    out: PathBuf,
}

impl ProbeProc {
    fn start(herd: &Path, out: PathBuf, config: Probe) -> Result<Self> {
        Self::start_on(herd, out, config, None)
    }

    /// [`Self::start`], pinned to `cpu` when given.
    fn start_on(herd: &Path, out: PathBuf, config: Probe, cpu: Option<usize>) -> Result<Self> {
        let mut cmd = match cpu {
            Some(c) => {
                let mut t = Command::new("taskset");
                t.args(["-c", &c.to_string()]).arg(herd);
                t
            }
            None => Command::new(herd),
        };
        if config == Probe::Raw {
            cmd.env("HERD_PROBE_RUNQ", "raw");
        }
        cmd.arg("probe");
        if matches!(config, Probe::Waits | Probe::Raw) {
            cmd.arg("--runq-waits");
        }
        let mut child = cmd
            .args(["--duration", "10m", "--interval", "1s", "--out"])
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting herd probe")?;
        let mut err = BufReader::new(child.stderr.take().context("stderr")?);
        // Warnings (no Docker engine, ...) may come first; the start line says `watching`.
        let mut said = String::new();
        for _ in 0..20 {
            let mut line = String::new();
            if err.read_line(&mut line)? == 0 {
                break;
            }
            if line.contains("watching") {
                return Ok(Self { child, out });
            }
            said.push_str(&line);
        }
        let _ = child.kill();
        let _ = child.wait();
        bail!("herd probe did not start: {said}");
    }

    fn stop(mut self) -> Result<u64> {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        self.child.wait()?;
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v.get("lost").and_then(|l| l.as_u64()))
            .sum())
    }
}

struct Load {
    /// Its `--loads` name.
    key: &'static str,
    name: &'static str,
    unit: &'static str,
    /// herd-workload's arguments; empty for the in-process ping-pong.
    args: Vec<String>,
    field: &'static str,
}

/// CPU seconds (user + system) of this process (`RUSAGE_SELF`) or of its waited-for
/// children (`RUSAGE_CHILDREN`).
fn rusage_cpu(who: i32) -> f64 {
    // SAFETY: getrusage fills the zeroed struct.
    let r = unsafe {
        let mut r: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut r);
        r
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(r.ru_utime) + secs(r.ru_stime)
}

/// Pins the calling thread to CPU 0.
fn pin_to_cpu0() {
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_setaffinity(0) is this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Round trips of one byte between two threads on CPU 0 over two pipes for `d`: each round
/// trip is two wakeups and two context switches.
fn ping_pong(d: Duration) -> Result<u64> {
    let pipe = || -> Result<(std::fs::File, std::fs::File)> {
        let mut fds = [0i32; 2];
        // SAFETY: pipe(2) fills two fds, owned by the Files below.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            bail!("pipe: {}", std::io::Error::last_os_error());
        }
        use std::os::fd::FromRawFd as _;
        // SAFETY: fresh fds from pipe(2), each owned once.
        Ok(unsafe {
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        })
    };
    let (mut a_rx, mut b_tx) = pipe()?;
    let (mut b_rx, mut a_tx) = pipe()?;
    let echo = std::thread::spawn(move || {
        use std::io::{Read as _, Write as _};
        pin_to_cpu0();
        let mut b = [0u8; 1];
        // Ends when the other side closes its end (read returns 0).
        while b_rx.read(&mut b).map(|n| n == 1).unwrap_or(false) {
            if b_tx.write_all(&b).is_err() {
                break;
            }
        }
    });
    use std::io::{Read as _, Write as _};
    pin_to_cpu0();
    let (start, mut trips, mut b) = (Instant::now(), 0u64, [0u8; 1]);
    while start.elapsed() < d {
        for _ in 0..1_000 {
            a_tx.write_all(&b)?;
            a_rx.read_exact(&mut b)?;
        }
        trips += 1_000;
    }
    drop(a_tx);
    let _ = echo.join();
    // Unpin this thread again (both CPUs).
    // SAFETY: as in pin_to_cpu0.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::CPU_SET(1, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set);
    }
    Ok(trips)
}

fn field(said: &str, name: &str) -> Result<u64> {
    let w: Vec<&str> = said.split_whitespace().collect();
    let i = w
        .iter()
        .position(|x| *x == name)
        .with_context(|| format!("{name} in {said:?}"))?;
    Ok(w[i + 1].parse()?)
}

/// A fresh namespace with the two servers in it: every measurement starts from the same
/// state (no TIME_WAIT left over from the previous one, which skews a storm by 5x).
struct Bench {
    _ns: Netns,
    servers: Vec<Child>,
}

impl Bench {
    fn start(workload: &Path) -> Result<Self> {
        let ns = Netns::create()?;
        let servers = [
            vec![
                "tcp-server",
                "--listen",
                "127.0.0.1:9300",
                "--deadline",
                "10m",
            ],
            vec![
                "tcp-server",
                "--listen",
                "127.0.0.1:9301",
                "--echo",
                "0s",
                "--deadline",
                "10m",
            ],
        ]
        .iter()
        .map(|a| in_ns(workload, a).stdout(Stdio::null()).spawn())
        .collect::<std::io::Result<_>>()?;
        std::thread::sleep(Duration::from_millis(300));
        Ok(Self { _ns: ns, servers })
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
    }
}

/// `--alternate N`: the ping-pong alone, probe off / on / on `--runq-waits` in turn.
fn alternate(herd: &Path, rounds: usize, secs: u64) -> Result<String> {
    let configs = [Probe::Off, Probe::On, Probe::Waits];
    let tmp = std::env::temp_dir().join(format!("herd-alt-{}.jsonl", std::process::id()));
    // µs per round trip, per configuration, per round.
    let mut us: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for round in 0..rounds {
        for (c, config) in configs.iter().enumerate() {
            let probe = (*config != Probe::Off)
                .then(|| ProbeProc::start_on(herd, tmp.clone(), *config, Some(1)))
                .transpose()?;
            let trips = ping_pong(Duration::from_secs(secs))?;
            if let Some(p) = probe {
                p.stop()?;
            }
            let v = secs as f64 * 1e6 / trips.max(1) as f64;
            eprintln!(
                "xtask bench: round {round} probe {}: {v:.3} µs per round trip",
                config.name()
            );
            us[c].push(v);
        }
    }
    let _ = std::fs::remove_file(&tmp);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let se = |v: &[f64]| {
        let m = mean(v);
        (v.iter().map(|x| (x - m) * (x - m)).sum::<f64>()
            / (v.len() as f64 * (v.len() as f64 - 1.0).max(1.0)))
        .sqrt()
    };
    let mut out = format!(
        "{rounds} rounds of the pipe ping-pong ({secs} s each, 2 threads on CPU 0; the probe on CPU 1):\n\n\
         | probe | µs per round trip (mean ± s.e.) | against off, per round: median (mean) |\n|---|---:|---:|\n"
    );
    for (c, config) in configs.iter().enumerate() {
        let ratio = if c == 0 {
            "—".to_owned()
        } else {
            let mut r: Vec<f64> = us[c].iter().zip(&us[0]).map(|(a, b)| a / b).collect();
            r.sort_by(f64::total_cmp);
            let n = r.len();
            let median = if n.is_multiple_of(2) {
                (r[n / 2 - 1] + r[n / 2]) / 2.0
            } else {
                r[n / 2]
            };
            format!("{median:.3} ({:.3})", mean(&r))
        };
        out.push_str(&format!(
            "| {} | {:.3} ± {:.3} | {ratio} |\n",
            config.name(),
            mean(&us[c]),
            se(&us[c])
        ));
    }
    Ok(out)
}

pub fn bench_probe(root: &Path, opts: &Args) -> Result<String> {
    let herd = root.join("target/release/herd");
    if let Some(rounds) = opts.alternate {
        return alternate(&herd, rounds.max(2), opts.seconds);
    }
    // The test workloads' binary (integration-test builds it beside herd).
    let workload = root.join("target/release/herd-workload");
    let secs = format!("{}s", opts.seconds);
    let loads = [
        Load {
            key: "storm",
            name: "connection storm (client closes first)",
            unit: "connects/s",
            args: [
                "tcp-client",
                "--target",
                "127.0.0.1:9300",
                "--count",
                "1000000",
                "--deadline",
                &secs,
            ]
            .map(String::from)
            .to_vec(),
            field: "connected",
        },
        Load {
            key: "keep-alive",
            name: "keep-alive requests (50 pooled connections)",
            unit: "requests/s",
            args: [
                "tcp-pool-client",
                "--target",
                "127.0.0.1:9301",
                "--requests",
                "1000000",
                "--concurrency",
                "50",
                "--max-idle",
                "50",
                "--deadline",
                &secs,
            ]
            .map(String::from)
            .to_vec(),
            field: "requests",
        },
        Load {
            key: "ping-pong",
            name: "context switches (pipe ping-pong, 2 threads on CPU 0)",
            unit: "round trips/s",
            args: Vec::new(),
            field: "",
        },
    ];
    for l in &opts.loads {
        if !loads.iter().any(|x| x.key == l) {
            bail!("--loads: no load {l:?} (storm, keep-alive, ping-pong)");
        }
    }
    let mut configs = vec![Probe::Off, Probe::On];
    if opts.runq_waits {
        configs.push(Probe::Waits);
    }
    if opts.raw {
        configs.push(Probe::Raw);
    }
    let (mut report, mut details) = (String::new(), String::new());
    report.push_str("| load | probe | throughput (mean of reps) | on/off (mean) | on/off per rep: min–max | load CPU per op | probe CPU (share of a core) | probe peak RSS | lost events |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    let tmp = std::env::temp_dir().join(format!("herd-bench-{}.jsonl", std::process::id()));
    let reps = opts.reps.max(1);
    for load in loads
        .iter()
        .filter(|l| opts.loads.iter().any(|k| k == l.key))
    {
        // Per configuration: throughput and CPU per op of each repetition.
        let n = configs.len();
        let (mut rate, mut op_cpu) = (vec![Vec::new(); n], vec![Vec::new(); n]);
        let (mut probe_cpu, mut hwm, mut lost) = (vec![0.0; n], vec![0u64; n], vec![0u64; n]);
        let args: Vec<&str> = load.args.iter().map(String::as_str).collect();
        for rep in 0..reps {
            // Rotate which goes first, so drift over the run does not favour one side.
            for k in 0..n {
                let c = (rep + k) % n;
                let config = configs[c];
                let _bench = Bench::start(&workload)?;
                let probe = (config != Probe::Off)
                    .then(|| ProbeProc::start(&herd, tmp.clone(), config))
                    .transpose()?;
                let before = probe.as_ref().map(|p| cpu_and_hwm(p.child.id()));
                let t = Instant::now();
                // The load's own CPU time per operation: the client process (a child, waited
                // for) or this process for the ping-pong. On a machine others share it moves
                // far less than throughput does, and the programs' cost lands in it (they
                // run in the context of the task that switches or wakes).
                let who = if args.is_empty() {
                    libc::RUSAGE_SELF
                } else {
                    libc::RUSAGE_CHILDREN
                };
                let cpu0 = rusage_cpu(who);
                let done = if args.is_empty() {
                    ping_pong(Duration::from_secs(opts.seconds))?
                } else {
                    field(&run(&mut in_ns(&workload, &args))?, load.field)?
                };
                let op_ns = (rusage_cpu(who) - cpu0) * 1e9 / done.max(1) as f64;
                let r = done as f64 / t.elapsed().as_secs_f64();
                if let Some(p) = probe {
                    let (c1, h) = cpu_and_hwm(p.child.id());
                    probe_cpu[c] += (c1 - before.map_or(0.0, |b| b.0)) / t.elapsed().as_secs_f64();
                    hwm[c] = hwm[c].max(h);
                    lost[c] += p.stop()?;
                }
                rate[c].push(r);
                op_cpu[c].push(op_ns);
                eprintln!(
                    "xtask bench: {} rep {rep} probe {}: {r:.0} {}, {op_ns:.0} ns CPU per op",
                    load.name,
                    config.name(),
                    load.unit
                );
            }
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        for (c, config) in configs.iter().enumerate() {
            // Each repetition's ratio against the probe-off measurement of the same
            // repetition (taken next to it in time).
            let ratios: Vec<f64> = rate[c].iter().zip(&rate[0]).map(|(a, b)| a / b).collect();
            let (lo, hi) = ratios
                .iter()
                .fold((f64::MAX, f64::MIN), |(l, h), &r| (l.min(r), h.max(r)));
            let on = *config != Probe::Off;
            report.push_str(&format!(
                "| {} | {} | {:.0} {} | {} | {} | {:.0} ns{} | {} | {} | {} |\n",
                load.name,
                config.name(),
                mean(&rate[c]),
                load.unit,
                if on {
                    format!("{:.3}", mean(&rate[c]) / mean(&rate[0]))
                } else {
                    "—".into()
                },
                if on {
                    format!("{lo:.3}–{hi:.3}")
                } else {
                    "—".into()
                },
                mean(&op_cpu[c]),
                if on {
                    format!(
                        " ({:+.1} %)",
                        100.0 * (mean(&op_cpu[c]) / mean(&op_cpu[0]) - 1.0)
                    )
                } else {
                    String::new()
                },
                if on {
                    format!("{:.1} %", 100.0 * probe_cpu[c] / reps as f64)
                } else {
                    "—".into()
                },
                if on {
                    format!("{:.1} MiB", hwm[c] as f64 / 1024.0)
                } else {
                    "—".into()
                },
                if on {
                    lost[c].to_string()
                } else {
                    "—".into()
                },
            ));
        }
        // Every repetition, for the spread.
        for (c, config) in configs.iter().enumerate() {
            let list = |v: &[f64]| {
                v.iter()
                    .map(|x| format!("{x:.0}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            details.push_str(&format!(
                "\n- {} probe {}: {} {} per rep; CPU per op {} ns",
                load.key,
                config.name(),
                list(&rate[c]),
                load.unit,
                list(&op_cpu[c])
            ));
        }
    }
    report.push_str(&details);
    let _ = std::fs::remove_file(&tmp);
    Ok(report)
}
