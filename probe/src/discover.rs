//! Automatic container discovery: which cgroup v2 directories are containers, and their names.
//!
//! Recognised layouts (the cgroup path relative to the unified root):
//! - Docker, systemd driver: `…/docker-<64 hex>.scope`; cgroupfs driver: `/docker/<64 hex>`,
//!   or `<parent>/<64 hex>` under an engine's `--cgroup-parent`. Names come from the Docker
//!   Engine API socket when it answers, else `docker-<12 hex>`.
//! - Kubernetes pods: `…/kubepods…-pod<uid>.slice` (systemd driver) or `/kubepods/…/pod<uid>`
//!   (cgroupfs driver), named `pod-<uid prefix>`: a pod is the unit that owns a network
//!   namespace, which is what the socket gauges are per.
//! - systemd services: `/system.slice/<name>.service`, named `<name>.service`.
//! - herd's own containers (`herd_testbed::sandbox`): `/herd-<pid>-<n>-<name>`, named `<name>`.
//!
//! Everything else stays `host`.

use herd_model::{PublishedPort, Service};
use std::{
    collections::HashMap,
    io::{Read as _, Write as _},
    path::Path,
    time::Duration,
};

/// What kind of container a cgroup is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Named on the command line.
    Explicit,
    /// A Docker container.
    Docker,
    /// A Kubernetes pod.
    Kubernetes,
    /// A systemd service.
    Systemd,
    /// A container herd made itself.
    Herd,
}

/// A cgroup recognised as a container: its kind and a provisional name (Docker ids are
/// resolved to names later, through [`DockerNames`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Kind of container.
    pub kind: Kind,
    /// Name for reports.
    pub name: String,
    /// Docker container id, for name resolution.
    pub docker_id: Option<String>,
}

fn is_hex_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Classifies the cgroup at `rel` (relative to the unified root, leading `/`). Only the
/// container's own directory matches, not its descendants (they are attributed to it).
pub fn classify(rel: &Path) -> Option<Found> {
    let last = rel.file_name()?.to_str()?;
    let parent = rel
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|p| p.to_str());
    if let Some(id) = last
        .strip_prefix("docker-")
        .and_then(|s| s.strip_suffix(".scope"))
        && is_hex_id(id)
    {
        return Some(docker(id));
    }
    let in_kubepods = rel.components().any(|c| {
        c.as_os_str()
            .to_str()
            .is_some_and(|s| s.starts_with("kubepods"))
    });
    // The cgroupfs driver names a container's cgroup by its id under the engine's cgroup
    // parent: `/docker` unless `--cgroup-parent` (daemon.json `cgroup-parent`) says otherwise
    // (several engines on one kernel each take their own). A pod's containers are its own.
    if is_hex_id(last) && !in_kubepods {
        return Some(docker(last));
    }
    if in_kubepods {
        let uid = last
            .strip_suffix(".slice")
            .and_then(|s| s.rsplit_once("-pod"))
            .map(|(_, uid)| uid.replace('_', "-"))
            .or_else(|| last.strip_prefix("pod").map(str::to_owned));
        if let Some(uid) = uid.filter(|u| u.len() >= 8) {
            return Some(Found {
                kind: Kind::Kubernetes,
                name: format!("pod-{}", &uid[..8]),
                docker_id: None,
            });
        }
    }
    if parent == Some("system.slice")
        && let Some(svc) = last.strip_suffix(".service")
        && !svc.is_empty()
    {
        return Some(Found {
            kind: Kind::Systemd,
            name: last.to_owned(),
            docker_id: None,
        });
    }
    if rel.parent() == Some(Path::new("/"))
        && let Some(rest) = last.strip_prefix("herd-")
    {
        // herd-<pid>-<n>-<name>
        let mut parts = rest.splitn(3, '-');
        let (pid, n, name) = (parts.next()?, parts.next()?, parts.next()?);
        if pid.parse::<u32>().is_ok() && n.parse::<u32>().is_ok() && !name.is_empty() {
            return Some(Found {
                kind: Kind::Herd,
                name: name.to_owned(),
                docker_id: None,
            });
        }
    }
    None
}

fn docker(id: &str) -> Found {
    Found {
        kind: Kind::Docker,
        name: format!("docker-{}", &id[..12]),
        docker_id: Some(id.to_owned()),
    }
}

/// Whose a Docker container is, as [`DockerNames::owner`] tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// This engine's, with its name.
    This(String),
    /// The engine answered it has no such container: another engine's.
    Other,
    /// No engine answers (or it failed): nothing can be told.
    Unknown,
}

/// Resolves Docker container ids to names through the Engine API on a unix socket, caching
/// answers. Without a daemon every lookup fails fast and the short id stays the name.
#[derive(Debug)]
pub struct DockerNames {
    socket: std::path::PathBuf,
    cache: HashMap<String, Option<String>>,
    /// Names the engine announced as containers were created (see [`Self::watch`]).
    events: Option<crate::docker_events::DockerEvents>,
}

impl DockerNames {
    /// The engine `DOCKER_HOST` names (`unix:///path/docker.sock`, as the docker CLI reads
    /// it), else the default socket, `/var/run/docker.sock`.
    pub fn new() -> Self {
        Self::at(socket_from(std::env::var("DOCKER_HOST").ok().as_deref()))
    }

    /// A specific socket (tests use a fake daemon).
    pub fn at(socket: impl Into<std::path::PathBuf>) -> Self {
        Self {
            socket: socket.into(),
            cache: HashMap::new(),
            events: None,
        }
    }

    /// Also follows the engine's container events from now on, so that a container created
    /// and removed between two lookups (a one-shot `docker run --rm`) is still named.
    pub fn watch(mut self) -> Self {
        self.events = Some(crate::docker_events::DockerEvents::follow(
            self.socket.clone(),
        ));
        self
    }

    /// The socket this asks.
    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// True when an engine answers there (`GET /version`, same bounded timeouts).
    pub fn answers(&self) -> bool {
        self.get("/version").is_some()
    }

    /// Whether container `id` is this engine's: the engine announced it or knows it, or
    /// answered that it has no such container (another engine's, on the same kernel), or
    /// cannot be asked.
    pub fn owner(&mut self, id: &str) -> Owner {
        if let Some(Some(hit)) = self.cache.get(id) {
            return Owner::This(hit.clone());
        }
        if let Some(announced) = self.events.as_ref().and_then(|e| e.name(id)) {
            self.cache.insert(id.to_owned(), Some(announced.clone()));
            return Owner::This(announced);
        }
        let owner = self.lookup(id);
        if let Owner::This(name) = &owner {
            self.cache.insert(id.to_owned(), Some(name.clone()));
        }
        owner
    }

    /// The container's name without the leading `/`, or None.
    pub fn name(&mut self, id: &str) -> Option<String> {
        if let Some(Some(hit)) = self.cache.get(id) {
            return Some(hit.clone());
        }
        if let Some(announced) = self.events.as_ref().and_then(|e| e.name(id)) {
            self.cache.insert(id.to_owned(), Some(announced.clone()));
            return Some(announced);
        }
        if self.cache.contains_key(id) {
            return None;
        }
        let name = match self.lookup(id) {
            Owner::This(name) => Some(name),
            _ => None,
        };
        self.cache.insert(id.to_owned(), name.clone());
        name
    }

    /// `GET /containers/<id>/json`: its name, no such container, or no answer.
    fn lookup(&self, id: &str) -> Owner {
        match engine_request(
            &self.socket,
            "GET",
            &format!("/containers/{id}/json"),
            None,
            Duration::from_millis(500),
        ) {
            Ok((200, body)) => serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| Some(v.get("Name")?.as_str()?.trim_start_matches('/').to_owned()))
                .map_or(Owner::Unknown, Owner::This),
            Ok((404, _)) => Owner::Other,
            _ => Owner::Unknown,
        }
    }

    /// One Engine API GET, `None` on any failure (500 ms per read and write).
    fn get(&self, path: &str) -> Option<serde_json::Value> {
        let (status, body) =
            engine_request(&self.socket, "GET", path, None, Duration::from_millis(500)).ok()?;
        if !(200..300).contains(&status) {
            return None;
        }
        serde_json::from_slice(&body).ok()
    }

    /// How the running containers among `names` (Docker id → report name) are reached: their
    /// network addresses, DNS names (container name, Compose service, aliases) and published
    /// ports, from one `GET /containers/json`. `None` when the engine does not answer.
    pub fn services(&self, names: &HashMap<String, String>) -> Option<Vec<Service>> {
        let list = self.get("/containers/json")?;
        Some(services_of(&list, names))
    }
}

/// The services of a `GET /containers/json` answer, for the containers `names` knows.
pub fn services_of(list: &serde_json::Value, names: &HashMap<String, String>) -> Vec<Service> {
    let mut out = Vec::new();
    for c in list.as_array().into_iter().flatten() {
        let Some(name) = c
            .get("Id")
            .and_then(|i| i.as_str())
            .and_then(|i| names.get(i))
        else {
            continue;
        };
        let mut svc = Service {
            container: name.clone(),
            names: Vec::new(),
            addrs: Vec::new(),
            published: Vec::new(),
        };
        for n in c
            .get("Names")
            .and_then(|n| n.as_array())
            .into_iter()
            .flatten()
        {
            if let Some(n) = n.as_str() {
                svc.names.push(n.trim_start_matches('/').to_owned());
            }
        }
        if let Some(compose) = c
            .pointer("/Labels/com.docker.compose.service")
            .and_then(|v| v.as_str())
        {
            svc.names.push(compose.to_owned());
        }
        let networks = c
            .pointer("/NetworkSettings/Networks")
            .and_then(|n| n.as_object());
        for net in networks.into_iter().flat_map(|n| n.values()) {
            for key in ["IPAddress", "GlobalIPv6Address"] {
                if let Some(ip) = net
                    .get(key)
                    .and_then(|v| v.as_str())
                    .and_then(|v| v.parse().ok())
                {
                    svc.addrs.push(ip);
                }
            }
            for a in net
                .get("Aliases")
                .and_then(|a| a.as_array())
                .into_iter()
                .flatten()
            {
                if let Some(a) = a.as_str() {
                    svc.names.push(a.to_owned());
                }
            }
        }
        for p in c
            .get("Ports")
            .and_then(|p| p.as_array())
            .into_iter()
            .flatten()
        {
            let tcp = p.get("Type").and_then(|t| t.as_str()) == Some("tcp");
            let public = p.get("PublicPort").and_then(|v| v.as_u64());
            let private = p.get("PrivatePort").and_then(|v| v.as_u64());
            let ip = p
                .get("IP")
                .and_then(|v| v.as_str())
                .unwrap_or("0.0.0.0")
                .parse::<std::net::IpAddr>();
            if let (true, Some(public), Some(private), Ok(ip)) = (tcp, public, private, ip) {
                svc.published.push(PublishedPort {
                    host: std::net::SocketAddr::new(ip, public as u16),
                    container_port: private as u16,
                });
            }
        }
        svc.names.sort();
        svc.names.dedup();
        out.push(svc);
    }
    out.sort_by(|a, b| a.container.cmp(&b.container));
    out
}

/// One Engine API request on the unix socket `socket`: `method path` with an optional body
/// (its content type and bytes); the status and the body of the answer. `timeout` bounds
/// each read and write (a `POST /containers/ID/stop?t=10` needs more than 10 s).
pub fn engine_request(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<(&str, &[u8])>,
    timeout: Duration,
) -> std::io::Result<(u16, Vec<u8>)> {
    let mut s = std::os::unix::net::UnixStream::connect(socket)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    // HTTP/1.0: the daemon closes after the response, so reading to EOF is the framing.
    // One write: an engine (or a test's fake) may read the request in one go.
    let mut req = format!("{method} {path} HTTP/1.0\r\nHost: docker\r\n").into_bytes();
    if let Some((kind, data)) = body {
        req.extend_from_slice(
            format!("Content-Type: {kind}\r\nContent-Length: {}\r\n", data.len()).as_bytes(),
        );
        req.extend_from_slice(b"\r\n");
        req.extend_from_slice(data);
    } else {
        req.extend_from_slice(b"\r\n");
    }
    s.write_all(&req)?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer)?;
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| {
            std::io::Error::other(format!("{method} {path}: no HTTP head in the answer"))
        })?;
    let head = String::from_utf8_lossy(&answer[..end]);
    let status = head
        .starts_with("HTTP/1.")
        .then(|| head.split_whitespace().nth(1)?.parse::<u16>().ok())
        .flatten()
        .ok_or_else(|| std::io::Error::other(format!("{method} {path}: answered {head:?}")))?;
    Ok((status, answer[end + 4..].to_vec()))
}

/// The socket a `DOCKER_HOST` value names. Only unix sockets are spoken; any other value
/// (`tcp://`, `ssh://`) falls back to the default socket, and names stay `docker-<id>` when
/// nothing answers there.
pub fn socket_from(docker_host: Option<&str>) -> std::path::PathBuf {
    match docker_host.and_then(|h| h.strip_prefix("unix://")) {
        Some(path) if !path.is_empty() => path.into(),
        _ => "/var/run/docker.sock".into(),
    }
}

impl Default for DockerNames {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f1c2d4e5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d";

    #[test]
    fn recognises_the_common_layouts() {
        let c = |p: &str| classify(Path::new(p));
        let d = c(&format!("/system.slice/docker-{ID}.scope")).unwrap();
        assert_eq!(
            (d.kind, d.name.as_str()),
            (Kind::Docker, "docker-3f1c2d4e5a6b")
        );
        assert_eq!(c(&format!("/docker/{ID}")).unwrap().kind, Kind::Docker);
        let k = c("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_5678_90ab_cdef_1234567890ab.slice").unwrap();
        assert_eq!(
            (k.kind, k.name.as_str()),
            (Kind::Kubernetes, "pod-1234abcd")
        );
        let k = c("/kubepods/besteffort/podaabbccdd-0000-1111-2222-333344445555").unwrap();
        assert_eq!(k.name, "pod-aabbccdd");
        let s = c("/system.slice/nginx.service").unwrap();
        assert_eq!((s.kind, s.name.as_str()), (Kind::Systemd, "nginx.service"));
        let h = c("/herd-4242-0-gateway").unwrap();
        assert_eq!((h.kind, h.name.as_str()), (Kind::Herd, "gateway"));
        // Under an engine's --cgroup-parent (several engines on one kernel).
        let p = c(&format!("/hn4242-2/{ID}")).unwrap();
        assert_eq!((p.kind, p.docker_id.as_deref()), (Kind::Docker, Some(ID)));
        // A pod's containers are the pod's.
        assert_eq!(
            c(&format!(
                "/kubepods/besteffort/podaabbccdd-0000-1111-2222-333344445555/{ID}"
            )),
            None
        );
        // Containers' children and unrelated cgroups are not containers themselves.
        assert_eq!(c(&format!("/docker/{ID}/child")), None);
        assert_eq!(c("/user.slice/user-0.slice/session-1.scope"), None);
        assert_eq!(c("/"), None);
        assert_eq!(c("/docker/short"), None);
    }

    #[test]
    fn services_come_from_the_container_list_and_serve_their_published_ports() {
        let list: serde_json::Value = serde_json::from_str(
            r#"[{"Id":"aa","Names":["/shop-gateway-1"],
                 "Labels":{"com.docker.compose.service":"gateway"},
                 "Ports":[{"IP":"127.0.0.1","PrivatePort":8081,"PublicPort":18081,"Type":"tcp"},
                          {"PrivatePort":9000,"Type":"tcp"},
                          {"IP":"0.0.0.0","PrivatePort":53,"PublicPort":5353,"Type":"udp"}],
                 "NetworkSettings":{"Networks":{"shop":{"IPAddress":"198.19.64.2",
                   "GlobalIPv6Address":"","Aliases":["gw"]}}}},
                {"Id":"bb","Names":["/unknown"]}]"#,
        )
        .unwrap();
        let names = HashMap::from([("aa".to_owned(), "shop-gateway-1".to_owned())]);
        let s = services_of(&list, &names);
        assert_eq!(s.len(), 1, "only containers herd knows");
        let g = &s[0];
        assert_eq!(g.names, ["gateway", "gw", "shop-gateway-1"]);
        assert_eq!(
            g.addrs,
            ["198.19.64.2".parse::<std::net::IpAddr>().unwrap()]
        );
        assert_eq!(
            g.published.len(),
            1,
            "tcp and published only: {:?}",
            g.published
        );
        assert_eq!(g.serves("127.0.0.1:18081"), Some(8081));
        assert_eq!(g.serves("localhost:18081"), Some(8081));
        assert_eq!(g.serves("198.19.64.2:8081"), Some(8081), "its own address");
        assert_eq!(
            g.serves("gateway:8081"),
            Some(8081),
            "its Compose service name"
        );
        assert_eq!(g.serves("10.1.2.3:18081"), None, "bound to 127.0.0.1 only");
        assert_eq!(g.serves("127.0.0.1:18082"), None);
        assert_eq!(g.serves("backend:8082"), None);
        assert_eq!(g.serves("no-port"), None);
    }

    #[test]
    fn docker_host_names_the_socket() {
        let s = |v| socket_from(v).display().to_string();
        assert_eq!(s(None), "/var/run/docker.sock");
        assert_eq!(
            s(Some("unix:///work/target/docker/docker.sock")),
            "/work/target/docker/docker.sock"
        );
        assert_eq!(s(Some("tcp://127.0.0.1:2375")), "/var/run/docker.sock");
        assert_eq!(s(Some("unix://")), "/var/run/docker.sock");
    }

    #[test]
    fn docker_names_come_from_the_engine_api() {
        let dir = herd_testkit::TempDir::new("docker");
        let sock = dir.join("docker.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let server = std::thread::spawn(move || {
            // One request, then a 404 for the second.
            for reply in [
                "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"Name\":\"/gateway\"}",
                "HTTP/1.0 404 Not Found\r\n\r\n{\"message\":\"no such container\"}",
            ] {
                let (mut s, _) = listener.accept().unwrap();
                let mut req = [0u8; 512];
                let n = s.read(&mut req).unwrap();
                assert!(String::from_utf8_lossy(&req[..n]).starts_with("GET /containers/"));
                s.write_all(reply.as_bytes()).unwrap();
            }
        });
        let mut names = DockerNames::at(&sock);
        assert_eq!(names.name(ID).as_deref(), Some("gateway"));
        assert_eq!(names.name(ID).as_deref(), Some("gateway"), "cached");
        assert_eq!(names.name("other"), None);
        server.join().unwrap();
        assert_eq!(DockerNames::at(dir.join("absent.sock")).name(ID), None);
    }
}
