//! herd on a real Docker engine: the demo contour's gateway and backend as Docker containers
//! (an image built from the host's herd binary, no registry), on a network the test creates
//! with an explicit subnet in 198.19.0.0/16, probed by herd's discovery. Every container,
//! network and image the test makes is removed by a guard, also when it fails.
//!
//! The engine is `DOCKER_HOST`'s (`cargo xtask ci` starts a private one under target/docker
//! and sets it) or the default socket's. Every test here is named `docker_…`: xtask counts them.

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    path::{Path, PathBuf},
    process::{Command, Output},
    time::{Duration, Instant},
};

use herd_model::Throttling;
use herd_model::{CpuCell, ProbeInterval, SocketCell};
use herd_probe::{
    cgroup::CgroupLayout, containers::ContainerSet, discover::Kind, sampler::Sampler,
};
use integration_test::{docker, docker_engine, load_probe, privileged};
use probe_common::Counter;

static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Removes what it names on drop: `docker rm -f`, `docker network rm`, `docker rmi -f`.
struct Removed(&'static str, String);

impl Drop for Removed {
    fn drop(&mut self) {
        let args: &[&str] = match self.0 {
            "container" => &["rm", "-f", "-v"],
            "network" => &["network", "rm"],
            _ => &["rmi", "-f"],
        };
        let out = Command::new("docker").args(args).arg(&self.1).output();
        if !out.as_ref().is_ok_and(|o| o.status.success()) {
            eprintln!("cleanup: docker {args:?} {} failed: {out:?}", self.1);
        }
    }
}

/// An image holding the host's herd binary (debug info stripped) and the libraries `ldd`
/// lists, FROM scratch: built from what the host has, no registry.
fn herd_image(tag: &str) -> Removed {
    let ctx = herd_testkit::TempDir::new("docker-image");
    let root = ctx.join("rootfs");
    std::fs::create_dir_all(&root).unwrap();
    let herd = Path::new(env!("CARGO_BIN_EXE_herd"));
    // herd-workload: the one-shot client (same libraries as herd: libc, libm, libgcc_s).
    let workload = Path::new(env!("CARGO_BIN_EXE_herd-workload"));
    for (bin, name) in [(herd, "herd"), (workload, "herd-workload")] {
        let stripped = Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(root.join(name))
            .arg(bin)
            .status()
            .is_ok_and(|s| s.success());
        if !stripped {
            std::fs::copy(bin, root.join(name)).unwrap();
        }
    }
    // busybox (static, from busybox-static): `timeout` and `sh` for a CPU-only container.
    std::fs::copy("/bin/busybox", root.join("busybox"))
        .expect("copying /bin/busybox (Debian package busybox-static; cargo xtask setup)");
    let ldd = Command::new("ldd").arg(herd).output().unwrap();
    assert!(ldd.status.success(), "ldd {}", herd.display());
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)"
        let lib = match line.split_once("=>") {
            Some((_, rhs)) => rhs.split_whitespace().next(),
            None => line
                .split_whitespace()
                .next()
                .filter(|p| p.starts_with('/')),
        };
        let Some(lib) = lib.filter(|l| l.starts_with('/')) else {
            continue;
        };
        let dest = root.join(lib.trim_start_matches('/'));
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        // Follows symlinks: the image gets the file itself under the name the loader asks for.
        std::fs::copy(lib, &dest).unwrap_or_else(|e| panic!("copying {lib}: {e}"));
    }
    std::fs::write(
        ctx.join("Dockerfile"),
        "FROM scratch\nCOPY rootfs/ /\nENTRYPOINT [\"/herd\"]\n",
    )
    .unwrap();
    docker(&["build", "-q", "-t", tag, ctx.path().to_str().unwrap()]);
    Removed("image", tag.to_owned())
}

/// A container of `image` named `name` on `net` at `ip`, with `cpus` cores and `publish`'s
/// `docker run` options, running `herd contour ARGS`; returns when it printed `ready`.
fn contour(
    name: &str,
    image: &str,
    (net, ip, cpus): (&str, &str, &str),
    publish: &[&str],
    args: &[&str],
) -> Removed {
    let mut run = vec![
        "run",
        "-d",
        "--name",
        name,
        "--network",
        net,
        "--ip",
        ip,
        "--cpus",
        cpus,
    ];
    run.extend_from_slice(publish);
    run.extend_from_slice(&[image, "contour"]);
    run.extend_from_slice(args);
    docker(&run);
    let guard = Removed("container", name.to_owned());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let logs = Command::new("docker")
            .args(["logs", name])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&logs.stdout).into_owned();
        if said.starts_with("ready") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{name} did not say ready in 20 s: {said:?} {}",
            String::from_utf8_lossy(&logs.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    guard
}

/// The first process of container `name`.
fn pid(name: &str) -> u32 {
    docker(&["inspect", "-f", "{{.State.Pid}}", name])
        .parse()
        .unwrap()
}

/// The cgroup directory of `pid` for `controller`: the v1 hierarchy that has it on a hybrid
/// host, else the unified one.
fn controller_dir(pid: u32, controller: &str) -> PathBuf {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let v1 = cgroups.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
        ctrl.split(',').any(|c| c == controller).then(|| {
            let dir = std::fs::read_dir("/sys/fs/cgroup")
                .ok()?
                .flatten()
                .map(|e| e.path())
                .find(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().split(',').any(|c| c == controller))
                        && p.is_dir()
                })?;
            Some(dir.join(path.trim_start_matches('/')))
        })?
    });
    v1.unwrap_or_else(|| {
        let path = cgroups
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .expect("a cgroup v2 line");
        CgroupLayout::detect()
            .unwrap()
            .unified_path(Path::new(path))
    })
}

/// `key` of a flat-keyed cgroup file.
fn stat_key(file: &Path, key: &str) -> u64 {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {}", file.display()))
}

fn nr_throttled(cpu_stat: &Path) -> u64 {
    std::fs::read_to_string(cpu_stat)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("nr_throttled "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no nr_throttled in {}", cpu_stat.display()))
}

/// `ss -Htan state time-wait FILTER` in the netns of `pid`: the count.
fn ss_time_wait(pid: u32, filter: &[&str]) -> u64 {
    let out = Command::new("nsenter")
        .args([
            "-t",
            &pid.to_string(),
            "-n",
            "ss",
            "-Htan",
            "state",
            "time-wait",
        ])
        .args(filter)
        .output()
        .unwrap();
    assert!(out.status.success(), "nsenter ss: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .count() as u64
}

/// One player request with `Connection: close`: the gateway makes one backend call for it.
fn call(gateway: SocketAddr) {
    let mut s = TcpStream::connect_timeout(&gateway, Duration::from_secs(2)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(
        b"POST /v1/call/session.get HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer t\r\n\
          Content-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 "), "{resp:?}");
}

fn row<'a>(iv: &'a ProbeInterval, name: &str) -> Option<&'a herd_model::ContainerInterval> {
    iv.containers.iter().find(|c| c.container == name)
}

#[test]
fn docker_contour_is_discovered_named_paired_and_its_time_wait_and_throttling_match_the_kernel() {
    const TEST: &str = "docker_contour_is_discovered";
    if !privileged(TEST) || !docker_engine(TEST) {
        return;
    }
    // One contour at a time: on 2 cores the other's load changes the churn and throttling
    // each measures.
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    const N: u64 = 200;
    let id = std::process::id();
    let tag = format!("herd-test-{id}:latest");
    let net = format!("herd-test-{id}");
    // One /24 per test process, in 198.19.32.0/19: clear of the private engine's pool
    // (198.19.16.0/20) and of herd's sandbox (198.18.0.0/16 between containers, /30s in
    // 198.19.64.0–198.19.253.255 toward the host), which other tests may run meanwhile.
    let octet = 32 + id % 32;
    let subnet = format!("198.19.{octet}.0/24");
    let (gw_ip, be_ip) = (format!("198.19.{octet}.2"), format!("198.19.{octet}.3"));

    let _image = herd_image(&tag);
    docker(&[
        "network", "create", "--driver", "bridge", "--subnet", &subnet, &net,
    ]);
    let _net = Removed("network", net.clone());
    assert_eq!(
        docker(&[
            "network",
            "inspect",
            "-f",
            "{{range .IPAM.Config}}{{.Subnet}}{{end}}",
            &net
        ]),
        subnet,
        "the network has the subnet the test asked for, nothing of Docker's default pools"
    );

    // herd's discovery, as `herd probe` runs it, started before the containers exist.
    let layout = CgroupLayout::detect().unwrap();
    let mut sampler = Sampler::new(
        load_probe(),
        ContainerSet::default().with_discovery(),
        layout,
    )
    .unwrap();

    let (gw_name, be_name) = (
        format!("herd-test-{id}-gateway"),
        format!("herd-test-{id}-backend"),
    );
    let be_listen = format!("{be_ip}:8082");
    let _backend = contour(
        &be_name,
        &tag,
        (&net, &be_ip, "1"),
        &[],
        &[
            "backend",
            "--listen",
            &be_listen,
            "--db",
            "sqlite:/backend.db?mode=rwc",
            "--workers",
            "1",
            "--service-time",
            "1ms",
        ],
    );
    let gw_listen = format!("{gw_ip}:8081");
    // A tenth of a core: the burst of calls below is throttled.
    // Published on a loopback port, as compose users reach their gateway: the driver's
    // target is 127.0.0.1:PORT, docker-proxy connects to the container.
    let published_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let publish = format!("127.0.0.1:{published_port}:8081");
    let _gateway = contour(
        &gw_name,
        &tag,
        (&net, &gw_ip, "0.1"),
        &["-p", &publish],
        &[
            "gateway",
            "--listen",
            &gw_listen,
            "--backend",
            &be_listen,
            "--backend-max-idle",
            "0",
            "--workers",
            "2",
        ],
    );
    let (gw_pid, be_pid) = (pid(&gw_name), pid(&be_name));
    let gw_cpu_stat = controller_dir(gw_pid, "cpu").join("cpu.stat");
    let gw_memory = controller_dir(gw_pid, "memory");

    // Idle containers (no TCP event yet) are found within one interval by the rescan of the
    // cgroup tree, named through the Engine API, with the time they appeared.
    let first = sampler.sample().unwrap();
    for name in [&gw_name, &be_name] {
        let c = sampler
            .containers()
            .containers()
            .iter()
            .find(|c| &c.name == name)
            .unwrap_or_else(|| {
                panic!(
                    "{name} not discovered: {:?}",
                    sampler.containers().containers()
                )
            });
        assert_eq!(c.kind, Kind::Docker, "{c:?}");
        let r = row(&first, name).expect("a row in the first interval");
        assert!(
            r.started_ns.is_some_and(|t| t <= first.at_ns) && r.ended_ns.is_none(),
            "{name}: started {:?} ended {:?}",
            r.started_ns,
            r.ended_ns
        );
    }
    // Idle: nothing runnable, so nr_throttled does not move until the load.
    let throttled_before = nr_throttled(&gw_cpu_stat);

    let gateway: SocketAddr = format!("127.0.0.1:{published_port}").parse().unwrap();
    let mut intervals = Vec::new();
    for _ in 0..N {
        call(gateway);
    }
    // The last FINs settle (a timewait socket is FIN-WAIT-2 until the peer's FIN), then the
    // interval closes with nothing runnable in the gateway.
    std::thread::sleep(Duration::from_millis(500));
    let ss_gw_before = ss_time_wait(gw_pid, &[]);
    let ss_be_before = ss_time_wait(be_pid, &[]);
    intervals.push(sampler.sample().unwrap());
    let ss_gw = ss_time_wait(gw_pid, &[]);
    let ss_be = ss_time_wait(be_pid, &[]);
    let ss_gw_8081 = ss_time_wait(gw_pid, &["sport", "=", ":8081"]);
    let throttled_after = nr_throttled(&gw_cpu_stat);
    let (v1, usage_file) = match gw_memory.join("memory.usage_in_bytes") {
        f if f.exists() => (true, f),
        _ => (false, gw_memory.join("memory.current")),
    };
    let usage = std::fs::read_to_string(&usage_file)
        .unwrap()
        .trim()
        .parse::<u64>()
        .unwrap();
    let inactive = stat_key(
        &gw_memory.join("memory.stat"),
        if v1 {
            "total_inactive_file"
        } else {
            "inactive_file"
        },
    );
    let last = intervals.last().unwrap();

    // The pair gateway → backend, labelled with the backend's name, one connect per call
    // (the gateway keeps no idle backend connection).
    let connects: u64 = intervals
        .iter()
        .flat_map(|iv| &iv.pairs)
        .filter(|p| p.container == gw_name && p.remote == be_listen.parse().unwrap())
        .map(|p| p.connects)
        .sum();
    assert_eq!(connects, N, "gateway → backend connects");
    // The published port is followed to the gateway: the probe records which container
    // serves 127.0.0.1:PORT, and docker-proxy's N connections arrive at its own address.
    let target = format!("127.0.0.1:{published_port}");
    let svc = last
        .services
        .iter()
        .find(|s| s.container == gw_name)
        .unwrap_or_else(|| panic!("no service for the gateway: {:?}", last.services));
    assert_eq!(svc.serves(&target), Some(8081), "{svc:?}");
    assert_eq!(svc.addrs, [gw_ip.parse::<std::net::IpAddr>().unwrap()]);
    assert!(svc.names.contains(&gw_name), "{svc:?}");
    let to_gateway: u64 = intervals
        .iter()
        .flat_map(|iv| &iv.pairs)
        .filter(|p| p.remote.to_string() == gw_listen)
        .map(|p| p.connects)
        .sum();
    assert_eq!(
        to_gateway, N,
        "docker-proxy's connections toward the gateway"
    );
    let pair = last
        .pairs
        .iter()
        .find(|p| p.container == gw_name && p.remote.to_string() == be_listen)
        .expect("the gateway → backend pair");
    assert_eq!(pair.remote_container.as_deref(), Some(be_name.as_str()));
    let gw_row = row(last, &gw_name).expect("the gateway's row");
    assert_eq!(
        gw_row.counts.get(Counter::Accepts),
        N,
        "the gateway accepted every call"
    );
    assert_eq!(
        row(last, &be_name)
            .expect("the backend's row")
            .counts
            .get(Counter::Accepts),
        N
    );

    // TIME_WAIT as `ss` counts it inside each container's netns (ss before and after equal).
    assert_eq!(ss_gw_before, ss_gw, "gateway TIME_WAIT moved while sampled");
    assert_eq!(ss_be_before, ss_be, "backend TIME_WAIT moved while sampled");
    let measured = |name: &str| match &row(last, name).unwrap().sockets {
        SocketCell::Measured {
            time_wait,
            time_wait_baseline,
            inbound,
            ..
        } => (*time_wait, *time_wait_baseline, inbound.clone()),
        SocketCell::Unavailable { reason } => panic!("{name}: no socket gauges: {reason}"),
    };
    let (gw_tw, gw_base, gw_inbound) = measured(&gw_name);
    let (be_tw, be_base, _) = measured(&be_name);
    assert_eq!(
        (gw_tw, be_tw),
        (ss_gw, ss_be),
        "herd's TIME_WAIT = ss's, per container"
    );
    assert!(
        gw_tw + be_tw >= N,
        "{N} calls leave TIME_WAIT somewhere: {gw_tw} + {be_tw}"
    );
    assert_eq!((gw_base, be_base), (0, 0), "every socket is this run's");
    // The gateway closed its players' connections first: their TIME_WAIT is one row for
    // port 8081, not one per client port.
    let on_8081 = gw_inbound.iter().find(|i| i.local_port == 8081);
    assert_eq!(
        on_8081.map_or(0, |i| i.time_wait),
        ss_gw_8081,
        "{gw_inbound:?}"
    );
    assert!(
        ss_gw_8081 > 0,
        "the gateway closes first with Connection: close"
    );
    let gw_tw_pair = pair.gauges.as_ref().map_or(0, |g| g.time_wait);
    assert_eq!(
        gw_tw_pair,
        ss_time_wait(gw_pid, &["dst", &be_listen]),
        "the pair's TIME_WAIT = ss toward the backend"
    );

    // Memory against the cgroup's own files, read just after the sample (the gateway is idle:
    // a page or two may still move), the working set as `docker stats` computes it.
    let CpuCell::Measured(ci) = &gw_row.cpu else {
        panic!("no CPU cell for the gateway")
    };
    let herd_model::Memory::Measured {
        current_bytes,
        working_set_bytes: Some(ws),
        ..
    } = ci.memory
    else {
        panic!("no memory working set: {:?}", ci.memory)
    };
    let near = |a: u64, b: u64| a.abs_diff(b) <= 1 << 20;
    assert!(
        near(current_bytes, usage),
        "herd {current_bytes} vs {}: {usage}",
        usage_file.display()
    );
    assert!(
        near(ws, usage.saturating_sub(inactive)) && ws <= current_bytes,
        "working set {ws} vs usage {usage} - inactive file {inactive}"
    );
    eprintln!(
        "docker: gateway memory {current_bytes} B, working set {ws} B ({} = {usage} − {inactive})",
        usage_file.display()
    );

    // Throttling: herd's periods = the cgroup's cpu.stat over the same span.
    let herd_throttled: u64 = intervals
        .iter()
        .filter_map(|iv| row(iv, &gw_name))
        .map(|c| match &c.cpu {
            CpuCell::Measured(ci) => match &ci.throttle {
                Throttling::Measured { nr_throttled, .. } => *nr_throttled,
                Throttling::Unavailable { reason } => panic!("no throttling: {reason}"),
            },
            CpuCell::Unavailable { reason } => panic!("no CPU cell: {reason}"),
        })
        .sum();
    eprintln!(
        "docker: {N} calls; TIME_WAIT gateway {gw_tw} (on :8081 {ss_gw_8081}, toward the \
         backend {gw_tw_pair}) backend {be_tw} = ss; nr_throttled {herd_throttled} = cpu.stat \
         {throttled_before} → {throttled_after}"
    );
    assert!(
        herd_throttled > 0,
        "a tenth of a core is exceeded by the burst"
    );
    assert_eq!(herd_throttled, throttled_after - throttled_before);

    // A one-shot container (docker run --rm, gone before the next sample) gets its own row
    // from the kernel's cgroup_mkdir record, not host's: 30 connects to the backend, under
    // the name the engine announced when it was created.
    let one_shot_ip = format!("198.19.{octet}.9");
    let one_shot_name = format!("herd-test-{id}-oneshot");
    let _one_shot = Removed("container", one_shot_name.clone());
    let _ = sampler.sample().unwrap();
    docker(&[
        "run",
        "--rm",
        "--name",
        &one_shot_name,
        "--network",
        &net,
        "--ip",
        &one_shot_ip,
        "--entrypoint",
        "/herd-workload",
        &tag,
        "tcp-client",
        "--target",
        &be_listen,
        "--count",
        "30",
    ]);
    let after_one_shot = sampler.sample().unwrap();
    let known = [gw_name.as_str(), be_name.as_str()];
    let one_shot: Vec<_> = sampler
        .containers()
        .containers()
        .iter()
        .filter(|c| c.kind == Kind::Docker && !known.contains(&c.name.as_str()))
        .cloned()
        .collect();
    assert_eq!(one_shot.len(), 1, "{:?}", sampler.containers().containers());
    let os = &one_shot[0];
    assert!(os.ended_ns.is_some(), "it is gone: {os:?}");
    assert_eq!(
        os.name, one_shot_name,
        "named from the engine's create event"
    );
    let os_row = row(&after_one_shot, &os.name).expect("the one-shot container's row");
    assert_eq!(os_row.counts.get(Counter::Connects), 30, "{os:?}");
    let toward_backend = |iv: &ProbeInterval, who: &str| -> u64 {
        iv.pairs
            .iter()
            .filter(|p| p.container == who && p.remote.to_string() == be_listen)
            .map(|p| p.connects)
            .sum()
    };
    assert_eq!(toward_backend(&after_one_shot, &os.name), 30);
    assert_eq!(
        toward_backend(&after_one_shot, "host"),
        0,
        "nothing of it in host's row"
    );
    eprintln!(
        "docker: one-shot container {} (ended): 30 connects",
        os.name
    );

    // A stopped container is marked ended at the next interval, its row kept.
    docker(&["stop", "-t", "1", &be_name]);
    let after = sampler.sample().unwrap();
    let r = row(&after, &be_name).expect("the stopped backend keeps its row");
    assert!(
        r.ended_ns.is_some_and(|t| t <= after.at_ns),
        "backend ended_ns {:?}",
        r.ended_ns
    );
    assert!(row(&after, &gw_name).unwrap().ended_ns.is_none());

    // Started again it has a new cgroup: a new row `<name>#2` with its start time, the old
    // one still ended (and out of the rows unless the kernel still counts for it).
    docker(&["start", &be_name]);
    let restarted = sampler.sample().unwrap();
    let again = format!("{be_name}#2");
    let r2 = row(&restarted, &again).unwrap_or_else(|| {
        panic!(
            "no {again} row after docker start: {:?}",
            sampler.containers().containers()
        )
    });
    assert!(
        r2.started_ns.is_some_and(|t| t <= restarted.at_ns) && r2.ended_ns.is_none(),
        "{again}: started {:?} ended {:?}",
        r2.started_ns,
        r2.ended_ns
    );
    assert!(row(&restarted, &be_name).is_none_or(|r| r.ended_ns.is_some()));
    assert!(
        sampler
            .containers()
            .containers()
            .iter()
            .any(|c| c.name == be_name && c.ended_ns.is_some())
    );

    // A CPU-only container (no TCP event at all) at 0.2 cores: found by the next sample,
    // named, and its throttled periods equal its cpu.stat. Bounded by busybox's timeout.
    let burner = format!("herd-test-{id}-burner");
    let _burner = Removed("container", burner.clone());
    docker(&[
        "run",
        "-d",
        "--name",
        &burner,
        "--network",
        "none",
        "--cpus",
        "0.2",
        "--entrypoint",
        "/busybox",
        &tag,
        "timeout",
        "8",
        "sh",
        "-c",
        "while :; do :; done",
    ]);
    let seen = sampler.sample().unwrap();
    let b0 = row(&seen, &burner).unwrap_or_else(|| {
        panic!(
            "the CPU-only {burner} not discovered within one interval: {:?}",
            sampler.containers().containers()
        )
    });
    assert!(b0.started_ns.is_some(), "{b0:?}");
    let burner_stat = controller_dir(pid(&burner), "cpu").join("cpu.stat");
    let stat_before = nr_throttled(&burner_stat);
    std::thread::sleep(Duration::from_millis(1500));
    let busy = sampler.sample().unwrap();
    let stat_after = nr_throttled(&burner_stat);
    let throttled = match &row(&busy, &burner).expect("the burner's row").cpu {
        CpuCell::Measured(ci) => match &ci.throttle {
            Throttling::Measured { nr_throttled, .. } => *nr_throttled,
            Throttling::Unavailable { reason } => panic!("no throttling: {reason}"),
        },
        CpuCell::Unavailable { reason } => panic!("no CPU cell: {reason}"),
    };
    eprintln!(
        "docker: CPU-only {burner} found in the first interval; throttled {throttled} periods, \
         cpu.stat {stat_before} → {stat_after}"
    );
    // Each cpu.stat read follows its sample by a moment: a period may end in either gap.
    assert!(
        throttled > 5,
        "a busy loop over 0.2 cores is throttled: {throttled}"
    );
    assert!(
        throttled.abs_diff(stat_after - stat_before) <= 2,
        "herd {throttled} vs cpu.stat {stat_before} → {stat_after}"
    );
}

/// The runs in the store under `out`, oldest first, as reports.
fn demo_reports(out: &Path) -> Vec<herd_report::Report> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let store = herd_store::Store::open(&herd_store::default_url(out))
                .await
                .unwrap();
            let mut v = Vec::new();
            for meta in store.list().await.unwrap().into_iter().rev() {
                v.push(herd_report::Report::build(
                    &store.load_run(Some(meta.id)).await.unwrap(),
                ));
            }
            v
        })
}

#[test]
fn docker_demo_runs_the_contour_as_containers_reports_both_runs_and_removes_everything() {
    const TEST: &str = "docker_demo_runs_the_contour_as_containers";
    if !privileged(TEST) || !docker_engine(TEST) {
        return;
    }
    // One contour at a time: on 2 cores the other's load changes the churn and throttling
    // each measures.
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let out = herd_testkit::TempDir::new("it-docker-demo");
    let run = integration_test::herd_cmd()
        .args([
            "demo",
            "--docker",
            "--steps",
            "20,60",
            "--step-duration",
            "4s",
            "--out",
        ])
        .arg(out.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "herd demo --docker: {stderr}");
    let pid = run_pid_tag(&stderr);

    let r = demo_reports(out.path());
    assert_eq!(r.len(), 2, "{stderr}");
    let (bug, fix) = (&r[0], &r[1]);
    assert_eq!(
        (bug.run.name.as_str(), fix.run.name.as_str()),
        ("max-idle-2", "max-idle-512")
    );
    for rep in [bug, fix] {
        assert!(out.join(format!("run-{}.md", rep.run.id)).exists());
        assert!(out.join(format!("run-{}.html", rep.run.id)).exists());
    }
    // The players reached the gateway through a published loopback port (docker-proxy):
    // everything below holds through it.
    assert!(stderr.contains("published on 127.0.0.1:"), "{stderr}");
    // The hop under the Docker names the Engine API gave.
    let hop = |rep: &herd_report::Report| {
        rep.pairs
            .iter()
            .find(|p| {
                p.container == "herd-demo-gateway" && p.remote_container == "herd-demo-backend"
            })
            .cloned()
            .unwrap_or_else(|| {
                panic!(
                    "no herd-demo-gateway → herd-demo-backend pair in run {}: {:?}",
                    rep.run.id,
                    rep.pairs
                        .iter()
                        .map(|p| (&p.container, &p.remote_container))
                        .collect::<Vec<_>>()
                )
            })
    };
    let churn = |p: &herd_report::model::PairRow| p.churn_ratio.value().unwrap();
    let (b, f) = (churn(&hop(bug)), churn(&hop(fix)));
    eprintln!("{TEST}: churn ratio run 1 (max-idle 2) {b:.3}, run 2 (max-idle 512) {f:.3}");
    assert!(
        b >= 0.2 && b >= 4.0 * f,
        "churn ratio: run 1 (max-idle 2) {b}, run 2 (max-idle 512) {f}"
    );

    // The buggy run names the churn cliff on the hop, the fixed one does not.
    let named = |rep: &herd_report::Report| {
        rep.findings.iter().any(|x| {
            x.kind == "churn_cliff" && x.title.contains("herd-demo-gateway → herd-demo-backend")
        })
    };
    assert!(named(bug), "{:#?}", bug.findings);
    assert!(!named(fix), "{:#?}", fix.findings);
    assert!(
        out.join(format!("compare-{}-{}.md", bug.run.id, fix.run.id))
            .exists()
    );

    let compose = std::fs::read_to_string(out.join("docker-compose.yml")).unwrap();
    let subnet = compose
        .lines()
        .find_map(|l| l.trim().strip_prefix("- subnet: "))
        .unwrap_or_else(|| panic!("no subnet in the compose file:\n{compose}"));
    assert!(
        subnet.starts_with("198.19.") && subnet.ends_with(".0/24"),
        "{subnet}"
    );
    let third: u8 = subnet.split('.').nth(2).unwrap().parse().unwrap();
    assert!(
        (32..64).contains(&third),
        "{subnet} is outside 198.19.32.0/19"
    );
    for want in [
        "cpus: 0.5",
        "cpus: 1",
        "\"contour\", \"gateway\"",
        "\"contour\", \"backend\"",
        "${BACKEND_MAX_IDLE:-2}",
    ] {
        assert!(compose.contains(want), "{want} not in:\n{compose}");
    }
    assert!(
        stderr.contains(&format!("network herd-demo {subnet}")),
        "{stderr}"
    );

    // Nothing herd made is left: containers, network, image.
    assert_eq!(
        docker(&["ps", "-a", "-q", "--filter", "name=^herd-demo-"]),
        "",
        "containers left"
    );
    assert_eq!(
        docker(&["network", "ls", "-q", "--filter", "name=^herd-demo$"]),
        "",
        "network left"
    );
    assert_eq!(
        docker(&["images", "-q", &format!("herd-demo:{pid}")]),
        "",
        "image left"
    );

    // The compose file runs as its comment says: the image rebuilt as `herd-demo`,
    // `docker-compose up`, then the demo's first scenario against it (seeding the backend's
    // database through the bind mount), every request answered.
    let _image = herd_image("herd-demo:latest");
    let project = format!("herd-it-compose-{}", std::process::id());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _up = ComposeUp::start(out.path(), &project, port);
    let gateway = format!("127.0.0.1:{port}");
    wait_for_listen(&gateway, Duration::from_secs(20));
    let again = out.join("compose");
    let run = integration_test::herd_cmd()
        .current_dir(out.path())
        .args([
            "run",
            "demo-max-idle-2.toml",
            "--no-probe",
            "--quiet",
            "--set",
            &format!("target.url=http://{gateway}"),
            "--out",
        ])
        .arg(&again)
        .output()
        .unwrap();
    // 99: the bug's contour may break the scenario's p99 objective; that is a verdict on
    // the contour, not a failure of the run.
    assert!(
        matches!(run.status.code(), Some(0 | 99)),
        "herd run against the compose contour: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let r = demo_reports(&again);
    let (ok, errors): (u64, u64) = r[0]
        .totals
        .iter()
        .fold((0, 0), |(o, e), t| (o + t.split.ok, e + t.split.errors));
    eprintln!("{TEST}: docker-compose contour answered {ok} ok, {errors} errors");
    assert!(ok > 0 && errors == 0, "{:#?}", r[0].totals);
}

/// Waits until something accepts TCP connections at `addr`, at most `within`.
fn wait_for_listen(addr: &str, within: Duration) {
    let addr: SocketAddr = addr.parse().unwrap();
    let deadline = Instant::now() + within;
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nothing listens at {addr} after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `docker-compose -p PROJECT up -d` in `dir` (its docker-compose.yml); `down` on drop,
/// also when the test fails.
struct ComposeUp {
    dir: PathBuf,
    project: String,
    port: u16,
}

impl ComposeUp {
    /// The gateway published on 127.0.0.1:`port` (the file's `GATEWAY_PORT`).
    fn start(dir: &Path, project: &str, port: u16) -> Self {
        let up = Self {
            dir: dir.to_owned(),
            project: project.to_owned(),
            port,
        };
        up.compose(&["up", "-d"]);
        up
    }

    fn compose(&self, args: &[&str]) -> Output {
        let out = Command::new("docker-compose")
            .current_dir(&self.dir)
            .env("GATEWAY_PORT", self.port.to_string())
            .args(["-p", &self.project])
            .args(args)
            .output()
            .expect("running docker-compose (Debian package docker-compose; cargo xtask setup)");
        assert!(
            out.status.success() || std::thread::panicking(),
            "docker-compose {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

impl Drop for ComposeUp {
    fn drop(&mut self) {
        self.compose(&["down", "-v", "--remove-orphans", "-t", "1"]);
    }
}

/// The image tag herd named in its log (`building the image herd-demo:PID`): its PID.
fn run_pid_tag(stderr: &str) -> String {
    stderr
        .split("building the image herd-demo:")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("herd did not say which image it built: {stderr}"))
        .to_owned()
}

#[test]
fn docker_demo_without_an_engine_exits_2_and_says_how_to_start_one() {
    const TEST: &str = "docker_demo_without_an_engine_exits_2";
    if !privileged(TEST) {
        return;
    }
    let out = herd_testkit::TempDir::new("it-docker-demo-none");
    let run = integration_test::herd_cmd()
        .args(["demo", "--docker", "--steps", "5", "--out"])
        .arg(out.path())
        .env(
            "DOCKER_HOST",
            format!("unix://{}", out.join("absent.sock").display()),
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no Docker engine answers at unix://"),
        "{stderr}"
    );
    assert!(stderr.contains("cargo xtask"), "{stderr}");
}

#[test]
fn docker_discovery_without_an_engine_says_containers_are_named_by_id() {
    const TEST: &str = "docker_discovery_without_an_engine_says";
    if !privileged(TEST) {
        return;
    }
    let dir = herd_testkit::TempDir::new("it-docker-none");
    let run = integration_test::herd_cmd()
        .args(["probe", "--duration", "1s", "--interval", "500ms"])
        .env(
            "DOCKER_HOST",
            format!("unix://{}", dir.join("absent.sock").display()),
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let notes: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("no Docker engine answers"))
        .collect();
    assert_eq!(notes.len(), 1, "{stderr}");
    assert!(
        notes[0].contains("absent.sock") && notes[0].contains("named docker-<"),
        "{stderr}"
    );
}

#[test]
fn docker_demo_interrupted_mid_run_removes_its_containers_network_and_image() {
    const TEST: &str = "docker_demo_interrupted_mid_run";
    if !privileged(TEST) || !docker_engine(TEST) {
        return;
    }
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let out = herd_testkit::TempDir::new("it-docker-demo-int");
    let mut demo = integration_test::herd_cmd()
        .args([
            "demo",
            "--docker",
            "--steps",
            "10,20",
            "--step-duration",
            "30s",
            "--out",
        ])
        .arg(out.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(out.join("stderr")).unwrap())
        .spawn()
        .unwrap();
    let pid = demo.id();
    // Interrupt once the gateway container runs and the run is recording, as a user would.
    let deadline = Instant::now() + Duration::from_secs(90);
    while docker(&["ps", "-q", "--filter", "name=^herd-demo-gateway$"]).is_empty()
        || !out.join("runs.db").exists()
    {
        assert!(
            Instant::now() < deadline,
            "the demo never started its containers: {}",
            std::fs::read_to_string(out.join("stderr")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(3));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let st = demo.wait().unwrap();
    let stderr = std::fs::read_to_string(out.join("stderr")).unwrap();
    assert!(!st.success(), "an interrupted demo says so: {stderr}");
    assert_eq!(
        docker(&["ps", "-a", "-q", "--filter", "name=^herd-demo-"]),
        "",
        "containers left: {stderr}"
    );
    assert_eq!(
        docker(&["network", "ls", "-q", "--filter", "name=^herd-demo$"]),
        "",
        "network left: {stderr}"
    );
    assert_eq!(
        docker(&["images", "-q", &format!("herd-demo:{pid}")]),
        "",
        "image left: {stderr}"
    );
    assert!(out.join("docker-compose.yml").exists());
}
