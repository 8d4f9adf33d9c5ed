//! `herd probe --via-engine`: the probe service's task, which starts the real probe in a
//! container of its node's engine and relays it.

use super::*;

/// What `herd probe --via-engine` starts: the probe in a container of `image`.
#[derive(Debug, Clone)]
pub struct Sidecar {
    /// The image the probe runs in (herd's own).
    pub image: String,
    /// The run store's URL, copied into the container as a file.
    pub store: String,
    /// The run key the probe finds its run by.
    pub key: String,
    /// This node's name, which its rows carry.
    pub node: String,
    /// The engine's socket as the probe container mounts it, for its container names.
    pub engine_socket: String,
    /// How long the probe runs at most.
    pub duration: Duration,
}

/// `herd probe --via-engine`: the probe service's task. Starts the real probe in a container
/// of `image` on this node's engine — eBPF's capabilities, the host's PID, network and cgroup
/// namespaces, cgroupfs and BTF mounted, the store URL copied in as a file — waits for it,
/// relays its output, and removes it when it exits or this task is stopped (SIGTERM).
pub fn probe_via_engine(s: &Sidecar) -> Result<()> {
    let Sidecar {
        image,
        store,
        key,
        node,
        engine_socket,
        duration,
    } = s;
    let sock = Path::new("/var/run/docker.sock");
    let spec = probe_container(image, key, node, engine_socket, *duration);
    let name = format!("{key}-probe-{node}");
    let (status, body) = api(
        sock,
        "POST",
        &format!("/containers/create?name={name}"),
        Some(("application/json", spec.to_string().as_bytes())),
    )?;
    if status != 201 {
        return Err(crate::environment(anyhow!(
            "herd probe --via-engine: the engine refused to create the probe container {name} \
             ({status}: {})",
            String::from_utf8_lossy(&body).trim()
        )));
    }
    let id = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["Id"].as_str().map(str::to_owned))
        .context("the engine's answer to create names no container id")?;
    let guard = Child {
        sock: sock.to_owned(),
        id: id.clone(),
    };
    // The URL goes in as a file of the container's own layer: not in its command line or
    // environment, which `docker inspect` shows.
    let tar = tar_one("herd-store", store.as_bytes());
    expect_2xx(
        api(
            sock,
            "PUT",
            &format!("/containers/{id}/archive?path=/"),
            Some(("application/x-tar", &tar)),
        )?,
        "copying the store URL into the probe container",
    )?;
    expect_2xx(
        api(sock, "POST", &format!("/containers/{id}/start"), None)?,
        "starting the probe container",
    )?;
    errln!(
        "herd probe --via-engine: probe container {name} ({}) started",
        &id[..12.min(id.len())]
    );
    let mut announced = false;
    let code = loop {
        if !announced && logs(sock, &id).contains(crate::cmd::probe::ATTACHED) {
            // The launcher starts the shards once every node's sidecar has said so.
            errln!("{PROBE_ATTACHED}{node}");
            announced = true;
        }
        let (st, body) = api(sock, "GET", &format!("/containers/{id}/json"), None)?;
        if st == 200 {
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            if v["State"]["Status"].as_str() == Some("exited") {
                break v["State"]["ExitCode"].as_i64().unwrap_or(1);
            }
        } else {
            bail!("herd probe --via-engine: the probe container {name} is gone ({st})");
        }
        if signals::stop_requested() {
            // The probe ends its interval and closes its store rows on SIGTERM.
            let _ = engine(
                sock,
                "POST",
                &format!("/containers/{id}/stop?t=10"),
                None,
                20,
            );
            break -1;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    err!("{}", logs(sock, &id));
    drop(guard);
    match code {
        0 | -1 => Ok(()),
        c => bail!("herd probe --via-engine: the probe container {name} exited with {c}"),
    }
}

/// The Engine API body that creates the probe's container.
pub fn probe_container(
    image: &str,
    key: &str,
    node: &str,
    socket: &str,
    duration: Duration,
) -> Value {
    json!({
        "Image": image,
        "Cmd": [
            "probe", "--store-file", "/herd-store", "--run-key", key, "--node", node,
            "--duration", humantime::format_duration(duration).to_string(),
            // Several engines may share the kernel (nodes of a test swarm on one host): the
            // node's probe reports its engine's containers, no other's.
            "--engine-only",
        ],
        "Labels": {"herd.run": key, "herd.role": "probe"},
        "HostConfig": {
            // Loading eBPF programs and reading every process's namespaces and cgroups:
            // CAP_SYS_ADMIN (bpf(2) and perf_event_open(2), which the kernel still accepts
            // it for in place of CAP_BPF + CAP_PERFMON — names Docker 20.10 does not know;
            // setns into a container's network namespace; mounting tracefs), CAP_NET_ADMIN
            // (sock_diag), CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH (/proc/PID/ns/net of other
            // processes). Named, not `Privileged`: that asks for every capability, and an
            // engine whose own bounding set lacks one (CAP_SYS_RESOURCE on the hosts herd is
            // developed on) then fails to start the container ("unable to apply caps").
            "CapAdd": ["SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "DAC_READ_SEARCH"],
            // The default seccomp profile refuses bpf(2) and perf_event_open(2) to a
            // container without CAP_SYS_ADMIN in 20.10; the default AppArmor profile refuses
            // mount(2) (tracefs). Masked /proc paths would hide what the probe reads.
            "SecurityOpt": ["seccomp=unconfined", "apparmor=unconfined"],
            "MaskedPaths": [],
            "ReadonlyPaths": [],
            "PidMode": "host",
            "NetworkMode": "host",
            "CgroupnsMode": "host",
            "Binds": [
                "/sys/fs/cgroup:/sys/fs/cgroup:ro",
                "/sys/kernel/btf:/sys/kernel/btf:ro",
                // Container names from the engine.
                format!("{socket}:/var/run/docker.sock"),
            ],
        },
    })
}

/// Removes the probe container on drop (also when the sidecar fails or is interrupted).
pub(super) struct Child {
    pub(super) sock: PathBuf,
    pub(super) id: String,
}

impl Drop for Child {
    fn drop(&mut self) {
        if let Err(e) = engine(
            &self.sock,
            "DELETE",
            &format!("/containers/{}?force=true&v=true", self.id),
            None,
            20,
        ) {
            errln!(
                "herd probe --via-engine: could not remove the probe container {}: {e}; \
                 `docker rm -f {0}`",
                self.id
            );
        }
    }
}

pub(super) fn engine(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<(&str, &[u8])>,
    secs: u64,
) -> std::io::Result<(u16, Vec<u8>)> {
    herd_probe::discover::engine_request(sock, method, path, body, Duration::from_secs(secs))
}

pub(super) fn api(
    sock: &Path,
    method: &str,
    path: &str,
    body: Option<(&str, &[u8])>,
) -> Result<(u16, Vec<u8>)> {
    engine(sock, method, path, body, 10).with_context(|| {
        format!(
            "herd probe --via-engine: {method} {path} on the engine's socket {} (mount the \
             node's Docker socket there)",
            sock.display()
        )
    })
}

pub(super) fn expect_2xx((status, body): (u16, Vec<u8>), what: &str) -> Result<()> {
    if !(200..300).contains(&status) {
        bail!(
            "herd probe --via-engine: {what}: the engine answered {status}: {}",
            String::from_utf8_lossy(&body).trim()
        );
    }
    Ok(())
}

/// The probe's output, from the engine's multiplexed log stream (8-byte frame headers).
pub(super) fn logs(sock: &Path, id: &str) -> String {
    let Ok((200, body)) = engine(
        sock,
        "GET",
        &format!("/containers/{id}/logs?stdout=1&stderr=1"),
        None,
        10,
    ) else {
        return String::new();
    };
    let mut out = String::new();
    let mut rest = &body[..];
    while rest.len() >= 8 {
        let n = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]) as usize;
        let end = (8 + n).min(rest.len());
        out.push_str(&String::from_utf8_lossy(&rest[8..end]));
        rest = &rest[end..];
    }
    out
}

/// A tar archive of one file `name` (mode 0400, root's) holding `data`.
pub(super) fn tar_one(name: &str, data: &[u8]) -> Vec<u8> {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    let octal = |h: &mut [u8; 512], at: usize, len: usize, v: u64| {
        let s = format!("{v:0w$o}\0", w = len - 1);
        h[at..at + len].copy_from_slice(s.as_bytes());
    };
    octal(&mut h, 100, 8, 0o400);
    octal(&mut h, 108, 8, 0);
    octal(&mut h, 116, 8, 0);
    octal(&mut h, 124, 12, data.len() as u64);
    octal(&mut h, 136, 12, 0);
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    // The checksum is the header's byte sum with its own field as spaces.
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out.extend_from_slice(&[0u8; 1024]);
    out
}
