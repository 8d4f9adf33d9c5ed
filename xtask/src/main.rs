//! Project tasks. `cargo xtask setup` installs what a fresh machine lacks; `cargo xtask ci`
//! runs every gate (the README's test command); `cargo xtask demo` runs herd's main job.
//!
//! Everything is idempotent: a second `setup` checks and returns in seconds.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Instant,
};

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};

mod bench;
mod bench_driver;
mod docker;
mod fuzz;
#[cfg(test)]
mod graph;
mod soak;
mod vm;

#[derive(Parser)]
#[command(about = "herd's project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install the pinned nightly with rust-src, bpf-linker (built against that nightly's LLVM,
    /// into target/tools), cargo-fuzz (into target/tools), the Debian packages the tests
    /// and benchmarks use, and the Python packages of xtask/requirements.txt (into a venv at
    /// target/py).
    Setup,
    /// Setup, then every gate: fmt, clippy (host and eBPF), unit tests, the privileged
    /// integration tests, the same tests on Debian's other kernels in QEMU, and a short run
    /// of every fuzz target.
    Ci,
    /// Build herd in release mode and measure the probe's overhead: throughput with the probe
    /// detached vs attached, interleaved, plus the probe's CPU, RSS and lost events (root).
    BenchProbe(bench::Args),
    /// Build herd in release mode and compare its driver with wrk (HTTP/1.1) and h2load (h2c)
    /// against one nginx, server and client pinned to separate cores: client CPU-seconds per
    /// 100 000 requests and requests/s. `--scale`: 10 000 h2c players held 60 s, the driver's
    /// RSS and CPU.
    BenchDriver(bench_driver::Args),
    /// Build herd in release mode and soak it: `herd run` for an hour (`--duration`) at 100 ms
    /// intervals, probe on, 4 ops against a local nginx; herd's RSS and the store's size
    /// every minute, then `herd report`'s time (root; docs/benchmarks.md, "Long runs").
    Soak(soak::Args),
    /// The privileged integration tests alone: `local` on this host's kernel (root), `vm` on
    /// Debian's other kernels booted in QEMU with pure cgroup v2.
    #[command(subcommand)]
    IntegrationTest(IntegrationTest),
    /// Build the fuzz targets in fuzz/ (cargo-fuzz on the pinned nightly) and run each for a
    /// bounded time; a crash or hang fails, naming the saved input.
    Fuzz(fuzz::Args),
    /// Setup, build herd in release mode, and run `herd demo` (needs root): the demo contour,
    /// driven and probed with the buggy and the fixed pool, reported and compared.
    Demo {
        /// Arguments passed to `herd demo`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand)]
enum IntegrationTest {
    /// On this host's kernel, as root.
    Local,
    /// In QEMU, on each kernel of the matrix in xtask/src/vm/mod.rs.
    Vm(vm::Args),
    /// Only the Docker tests (integration-test/tests/docker.rs), on the engine `cargo xtask
    /// ci` would use (a private dockerd under target/docker when none answers), as root.
    Docker,
    /// Only `herd launch swarm`'s tests: integration-test/tests/swarm.rs on that engine,
    /// which they make a one-node swarm and leave again, and tests/nodes.rs on a swarm of two
    /// engines it makes on this host (root).
    Swarm,
}

/// Debian packages the project needs at test or run time, with why.
const DEBIAN_PACKAGES: &[(&str, &str)] = &[
    ("iproute2", "`ip netns`/veth for herd's containers"),
    ("procps", "`ps`/`kill` used by tests"),
    (
        "postgresql",
        "a real PostgreSQL server that the store tests start and remove",
    ),
    (
        "nginx",
        "the server `cargo xtask bench-driver` starts (its own config, never the service)",
    ),
    (
        "docker-registry",
        "the reference registry seed 004's test fills and reads (herd/tests/seeds/registry.rs)",
    ),
    (
        "libnginx-mod-nchan",
        "nginx's pub/sub module, seed 003's long-poll chat server (herd/tests/seeds/chat.rs)",
    ),
    (
        "wrk",
        "the HTTP/1.1 reference client in `cargo xtask bench-driver`",
    ),
    (
        "nghttp2-client",
        "h2load, the h2c (and second HTTP/1.1) reference client in `cargo xtask bench-driver`",
    ),
    (
        "qemu-system-x86",
        "boots Debian's other kernels for `cargo xtask integration-test vm` (pure cgroup v2)",
    ),
    (
        "docker.io",
        "the real Docker engine the Docker tests run containers on (a private dockerd under \
         target/docker when none is running)",
    ),
    (
        "docker-compose",
        "runs the compose file `herd demo --docker` writes, in the Docker tests",
    ),
    (
        "busybox-static",
        "the shell and tools of that guest's initramfs (static: no libraries to copy)",
    ),
    (
        "python3-venv",
        "the venv at target/py for the Python test servers (grpcio, websockets; \
         xtask/requirements.txt)",
    ),
    (
        "prometheus",
        "the real Prometheus that scrapes `herd run --listen` and runs every query of docs/grafana/herd.json in herd/tests/prometheus.rs",
    ),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}

fn nightly() -> Result<String> {
    let f = root().join("probe-ebpf/nightly-toolchain");
    Ok(std::fs::read_to_string(&f)
        .with_context(|| format!("reading {}", f.display()))?
        .trim()
        .to_owned())
}

fn status(cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: {}", show(cmd));
    let st = cmd
        .status()
        .with_context(|| format!("starting {}", show(cmd)))?;
    if !st.success() {
        bail!("`{}` failed ({st})", show(cmd));
    }
    Ok(())
}

fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

fn is_root() -> bool {
    output(Command::new("id").arg("-u")).is_some_and(|s| s.trim() == "0")
}

fn setup() -> Result<()> {
    let started = Instant::now();
    let nightly = nightly()?;

    // 1. The pinned nightly with rust-src (for -Z build-std=core on bpfel-unknown-none) and
    //    clippy (the eBPF crate's lint gate). Adding a component never moves the pin.
    let installed = output(Command::new("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        &nightly,
    ]))
    .unwrap_or_default();
    let has = |c: &str| installed.lines().any(|l| l.starts_with(c));
    if installed.is_empty() {
        status(Command::new("rustup").args([
            "toolchain",
            "install",
            &nightly,
            "--profile",
            "minimal",
            "--component",
            "rust-src,clippy",
        ]))?;
    } else if !has("rust-src") || !has("clippy") {
        status(Command::new("rustup").args([
            "component",
            "add",
            "--toolchain",
            &nightly,
            "rust-src",
            "clippy",
        ]))?;
    }

    // 2. Stable's clippy and rustfmt for the gates.
    let have = |c: &str| output(Command::new("cargo").args([c, "--version"])).is_some();
    if !have("clippy") || !have("fmt") {
        status(Command::new("rustup").args(["component", "add", "clippy", "rustfmt"]))?;
    }

    // 3. bpf-linker, linked against the nightly's own LLVM so no system LLVM is needed. It
    //    loads that LLVM at run time, so the nightly must stay pinned (never updated in place).
    let tools = root().join("target/tools");
    let linker = tools.join("bin/bpf-linker");
    let linker_ok = output(Command::new(&linker).arg("--version")).is_some();
    if !linker_ok {
        let sysroot = output(
            Command::new("rustc")
                .arg(format!("+{nightly}"))
                .args(["--print", "sysroot"]),
        )
        .context("asking the pinned nightly for its sysroot")?;
        let lib = Path::new(sysroot.trim()).join("lib");
        let llvm = std::fs::read_dir(&lib)
            .with_context(|| format!("listing {}", lib.display()))?
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .find(|n| n.starts_with("libLLVM-") && n.ends_with(".so"))
            .with_context(|| format!("no libLLVM-*.so in {}", lib.display()))?;
        let llvm = llvm
            .trim_start_matches("lib")
            .trim_end_matches(".so")
            .to_owned();
        let major = llvm
            .strip_prefix("LLVM-")
            .and_then(|v| v.split(['-', '.']).next())
            .context("reading the LLVM major version")?
            .to_owned();
        let lib = lib.display().to_string();
        status(
            Command::new("cargo")
                .arg(format!("+{nightly}"))
                .args([
                    "install",
                    "bpf-linker",
                    "--version",
                    "=0.13.0",
                    "--locked",
                    "--root",
                ])
                .arg(&tools)
                .args(["--no-default-features", "--features"])
                .arg(format!("llvm-{major},no-llvm-linking"))
                .env("CARGO_TARGET_DIR", tools.join("build"))
                .env(
                    "RUSTFLAGS",
                    format!("-L native={lib} -l dylib={llvm} -C link-arg=-Wl,-rpath,{lib}"),
                ),
        )?;
    }

    // 4. cargo-fuzz, for `cargo xtask fuzz`; it drives the pinned nightly's cargo itself.
    let cargo_fuzz = tools.join("bin/cargo-fuzz");
    if output(Command::new(&cargo_fuzz).args(["fuzz", "--version"])).is_none() {
        status(
            Command::new("cargo")
                .args([
                    "install",
                    "cargo-fuzz",
                    "--version",
                    "=0.13.2",
                    "--locked",
                    "--root",
                ])
                .arg(&tools)
                .env("CARGO_TARGET_DIR", tools.join("build")),
        )?;
    }

    // 5. Debian packages.
    let missing: Vec<&str> = DEBIAN_PACKAGES
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| {
            !output(Command::new("dpkg-query").args(["-W", "-f=${Status}", p]))
                .is_some_and(|s| s.contains("install ok installed"))
        })
        .collect();
    if !missing.is_empty() {
        if !is_root() {
            bail!(
                "these Debian packages are missing: {} (needed for: {}); rerun as root so \
                 setup can apt-get install them",
                missing.join(" "),
                DEBIAN_PACKAGES
                    .iter()
                    .filter(|(p, _)| missing.contains(p))
                    .map(|(p, why)| format!("{p}: {why}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
        status(Command::new("apt-get").args(["update", "-q"]))?;
        status(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )?;
    }
    // 6. The Python packages the tests' real servers run on, into a venv under target/.
    python_venv()?;
    eprintln!(
        "xtask: setup complete in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The venv at target/py with xtask/requirements.txt installed. Idempotent: a venv whose
/// stamp matches the file is left as it is.
fn python_venv() -> Result<()> {
    let venv = root().join("target/py");
    let requirements = root().join("xtask/requirements.txt");
    let wanted = std::fs::read_to_string(&requirements)
        .with_context(|| format!("reading {}", requirements.display()))?;
    let stamp = venv.join("requirements.installed");
    let python = venv.join("bin/python");
    let works = output(Command::new(&python).args(["-c", "import sys"])).is_some();
    if works && std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        return Ok(());
    }
    if !works {
        // Debian's python3, which python3-venv serves; any python3 elsewhere.
        let system = if Path::new("/usr/bin/python3").exists() {
            "/usr/bin/python3"
        } else {
            "python3"
        };
        status(
            Command::new(system)
                .args(["-m", "venv", "--clear"])
                .arg(&venv),
        )?;
    }
    status(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--disable-pip-version-check", "-q", "-r"])
            .arg(&requirements),
    )?;
    std::fs::write(&stamp, wanted).with_context(|| format!("writing {}", stamp.display()))?;
    Ok(())
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(root());
    // Builds from xtask start from scratch (CI's clean clone) or run once (a benchmark):
    // incremental state only costs them time and gigabytes of disk.
    c.env("CARGO_INCREMENTAL", "0");
    c
}

/// CI's stages, each timed: the budget is 30 minutes on 2 cores, so every run says where its
/// time went.
struct Stages {
    started: Instant,
    took: Vec<(&'static str, f64)>,
}

impl Stages {
    fn run<T>(&mut self, name: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let t = Instant::now();
        let r = f();
        let secs = t.elapsed().as_secs_f64();
        self.took.push((name, secs));
        eprintln!(
            "xtask: stage `{name}` {} in {secs:.0}s ({:.0}s since the start)",
            if r.is_ok() { "passed" } else { "failed" },
            self.started.elapsed().as_secs_f64()
        );
        r
    }

    fn summary(&self) -> String {
        self.took
            .iter()
            .map(|(n, s)| format!("{n} {s:.0}s"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn ci() -> Result<()> {
    let mut st = Stages {
        started: Instant::now(),
        took: Vec::new(),
    };
    st.run("setup", setup)?;
    let nightly = nightly()?;
    st.run("fmt", || status(cargo().args(["fmt", "--all", "--check"])))?;
    // probe-ebpf only compiles for the BPF target; it gets its own clippy run below.
    st.run("clippy", || {
        status(cargo().args([
            "clippy",
            "--workspace",
            "--exclude",
            "probe-ebpf",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))
    })?;
    // The eBPF crate, with the toolchain and target it really builds for.
    st.run("clippy (eBPF)", || {
        status(
            Command::new("cargo")
                .current_dir(root().join("probe-ebpf"))
                .arg(format!("+{nightly}"))
                .args([
                    "clippy",
                    "--release",
                    "--target",
                    "bpfel-unknown-none",
                    "-Z",
                    "build-std=core",
                    "--target-dir",
                ])
                .arg(root().join("target/ebpf-clippy"))
                .args(["--", "-D", "warnings"])
                .env_remove("RUSTC")
                .env_remove("RUSTC_WORKSPACE_WRAPPER"),
        )
    })?;
    // A short run of every fuzz target: its seeds and what earlier runs found still pass.
    // Before the tests, so their summaries close the output.
    st.run("fuzz", || {
        fuzz::fuzz(
            &root(),
            &nightly,
            &fuzz::Args {
                seconds: 20,
                target: None,
            },
        )
    })?;
    if std::env::var_os("CI").is_some() && !is_root() {
        bail!("CI=true but not root: the privileged integration tests cannot run; run CI as root");
    }
    // Unit and in-process integration tests, then the privileged tests (real kernel, real
    // cgroups and netns), which fail loudly under CI=true when they cannot get root.
    st.run("tests", || {
        status(cargo().args([
            "test",
            "--workspace",
            "--all-targets",
            "--no-fail-fast",
            "--exclude",
            "integration-test",
            "--exclude",
            "probe-ebpf",
        ]))
    })?;
    st.run("privileged tests", privileged_tests)?;
    // The same tests on Debian's other kernels, pure cgroup v2, in QEMU (no root needed).
    st.run("VM kernels", || vm::run(&vm::Args::from_env()))?;
    eprintln!(
        "xtask: ci passed in {:.0}s ({})",
        st.started.elapsed().as_secs_f64(),
        st.summary()
    );
    Ok(())
}

/// Runs the privileged integration tests, streaming their output, and prints how many ran:
/// CI must show they executed, not that they were skipped.
fn privileged_tests() -> Result<()> {
    use std::io::BufRead as _;
    // Stopped (when xtask started it) once the tests are done, also when they fail.
    let engine = docker::ensure(&root(), is_root())?;
    let mut cmd = cargo();
    if let Some(e) = &engine {
        cmd.env("DOCKER_HOST", e.host());
    }
    // Every test file runs even when one fails, so one CI run names every failure.
    cmd.args([
        "test",
        "--package",
        "integration-test",
        "--no-fail-fast",
        "--",
        "--test-threads",
        "2",
    ]);
    eprintln!("xtask: {}", show(&cmd));
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("starting the privileged tests")?;
    let (mut passed, mut failed, mut docker_passed) = (0, 0, 0u32);
    for line in std::io::BufReader::new(child.stdout.take().context("test stdout")?).lines() {
        let line = line?;
        println!("{line}");
        if line.starts_with("test ") && line.ends_with(" ok") {
            passed += 1;
            // Every test on a real Docker engine (tests/docker.rs, swarm.rs, nodes.rs) is
            // named docker_….
            docker_passed += u32::from(line.starts_with("test docker_"));
        } else if line.starts_with("test ") && line.ends_with(" FAILED") {
            failed += 1;
        }
    }
    let st = child.wait()?;
    if is_root() {
        println!(
            "privileged: {passed} passed ({docker_passed} of them on the real Docker engine), \
             {failed} failed (as root, against the real kernel)"
        );
    } else {
        println!(
            "privileged: not root, so the tests that need root skipped themselves; {passed} \
             passed, {failed} failed"
        );
    }
    if !st.success() {
        bail!("the privileged integration tests failed ({st})");
    }
    if passed == 0 {
        bail!("no privileged test ran");
    }
    Ok(())
}

/// The Docker tests of integration-test/tests/`FILE`.rs for each of `files`, against the
/// engine [`docker::ensure`] picks (stopped after, when xtask started it).
fn docker_tests(files: &[&str]) -> Result<()> {
    let engine = docker::ensure(&root(), is_root())?;
    let mut cmd = cargo();
    cmd.args(["test", "--package", "integration-test"]);
    for f in files {
        cmd.args(["--test", f]);
    }
    cmd.args(["--", "--nocapture"]);
    if let Some(e) = &engine {
        cmd.env("DOCKER_HOST", e.host());
    }
    status(&mut cmd)
}

fn demo(args: &[String]) -> Result<()> {
    setup()?;
    status(cargo().args(["build", "--release", "--package", "herd"]))?;
    let herd = root().join("target/release/herd");
    let mut cmd = Command::new(&herd);
    cmd.arg("demo").args(args);
    if !is_root() {
        // The probe and the containers need root; say so instead of failing halfway.
        bail!(
            "herd demo needs root (it loads eBPF programs and creates cgroups and network namespaces); rerun as root, e.g. `sudo -E cargo xtask demo`"
        );
    }
    status(&mut cmd)
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Setup => setup(),
        Task::Ci => ci(),
        Task::Demo { args } => demo(&args),
        Task::IntegrationTest(which) => {
            setup()?;
            match which {
                IntegrationTest::Local => privileged_tests(),
                IntegrationTest::Vm(args) => vm::run(&args),
                IntegrationTest::Docker => docker_tests(&["docker"]),
                IntegrationTest::Swarm => docker_tests(&["swarm", "nodes"]),
            }
        }
        Task::BenchDriver(args) => {
            setup()?;
            status(cargo().args(["build", "--release", "--package", "herd"]))?;
            let table = if args.grpc_ws {
                bench_driver::bench_players(
                    &root(),
                    &bench_driver::Players {
                        reps: args.reps,
                        calls: args.calls,
                        concurrency: args.concurrency,
                        sockets: args.sockets,
                        hold: args.hold.min(20),
                    },
                )?
            } else if args.scale {
                bench_driver::bench_scale(&root(), &args)?
            } else {
                bench_driver::bench_driver(&root(), &args)?
            };
            println!("{table}");
            Ok(())
        }
        Task::Fuzz(args) => {
            setup()?;
            fuzz::fuzz(&root(), &nightly()?, &args)
        }
        Task::Soak(args) => {
            let herd = match &args.herd {
                Some(h) => std::path::absolute(h)?,
                None => {
                    status(cargo().args(["build", "--release", "--package", "herd"]))?;
                    root().join("target/release/herd")
                }
            };
            let table = soak::soak(&herd, &args)?;
            println!("{table}");
            Ok(())
        }
        Task::BenchProbe(args) => {
            setup()?;
            status(cargo().args(["build", "--release", "--package", "herd"]))?;
            status(cargo().args([
                "build",
                "--release",
                "--package",
                "integration-test",
                "--bin",
                "herd-workload",
            ]))?;
            let table = bench::bench_probe(&root(), &args)?;
            println!("{table}");
            Ok(())
        }
    }
}
