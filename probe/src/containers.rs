//! Containers as the probe reports them: named cgroups, and `host` for everything else, so the
//! per-container numbers always add up to the host's.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use crate::{
    cgroup::{CgroupError, CgroupLayout, cgroup_id, walk},
    discover::{DockerNames, Kind, Owner, classify},
};

/// Name under which every cgroup that is not a named container is counted.
pub const HOST: &str = "host";

/// One named container.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Container {
    /// The name reports use.
    pub name: String,
    /// Its cgroup v2 directory, relative to the unified root.
    pub cgroup: PathBuf,
    /// Its cgroup v2 id.
    pub cgroup_id: u64,
    /// How it was found.
    pub kind: Kind,
    /// When herd saw its cgroup appear (monotonic ns, at the re-read that found it; the
    /// tree is re-read every interval); `None` for containers there when herd started.
    pub started_ns: Option<u64>,
    /// When its cgroup disappeared (monotonic ns), if it did.
    pub ended_ns: Option<u64>,
}

/// Why a `--container` could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    /// The argument is not `NAME=CGROUP_PATH`.
    #[error(
        "--container {0:?}: expected NAME=CGROUP_PATH, e.g. gateway=/system.slice/gateway.service"
    )]
    Syntax(String),
    /// The cgroup does not exist or cannot be read.
    // The cause sits inside the sentence, not as a source: a chain printer would append it
    // after the listing, where it read as if the last cgroup listed (`/docker`) were missing.
    #[error(
        "looking up the cgroup of --container {arg}: no cgroup v2 directory at {abs} ({cause}); \
         give the container's path under the cgroup v2 root {root}, as the `0::` line of \
         /proc/PID/cgroup of one of its processes shows it (for Docker: PID from `docker \
         inspect -f '{{{{.State.Pid}}}}' NAME`), or leave --container out and herd discovers \
         Docker, Kubernetes and systemd containers itself; {listing}"
    )]
    NotFound {
        /// The argument as given.
        arg: String,
        /// Absolute path tried.
        abs: String,
        /// The cgroup v2 root the path is relative to.
        root: String,
        /// Some existing cgroups, to help the user pick.
        listing: String,
        /// Why it could not be read.
        cause: std::io::Error,
    },
    /// Two containers have the same name.
    #[error("--container {0}: the name is used twice")]
    Duplicate(String),
}

/// Named containers and the mapping from cgroup ids to them. Containers are appended as they
/// appear; an ended one stays until the sampler retires it ([`Self::retire`]), so indices
/// are valid from one retirement to the next (one interval's attribution).
#[derive(Debug, Default)]
pub struct ContainerSet {
    containers: Vec<Container>,
    by_id: HashMap<u64, usize>,
    discover: bool,
    docker: Option<DockerNames>,
    /// The tree was read once: later discoveries are containers that started while herd ran.
    seen_tree: bool,
    /// Only the Docker containers of this probe's engine (see [`Self::only_this_engine`]).
    this_engine_only: bool,
    /// Cgroups of other engines' containers, left to `host` (asked once each).
    other_engines: std::collections::HashSet<u64>,
    /// Cgroup ids of retired containers the kernel still lists as created: never
    /// rediscovered as new containers.
    retired_ids: std::collections::HashSet<u64>,
    /// Names of retired containers: a later container with the same name still gets a
    /// suffix, so rows of a long run never merge two containers.
    retired_names: std::collections::HashSet<String>,
}

impl ContainerSet {
    /// Resolves `NAME=CGROUP_PATH` arguments against the unified hierarchy. A path may be
    /// absolute under the cgroup mount or relative to the unified root.
    pub fn from_args(layout: &CgroupLayout, args: &[String]) -> Result<Self, ContainerError> {
        let mut set = ContainerSet::default();
        for arg in args {
            let (name, path) = arg
                .split_once('=')
                .filter(|(n, p)| !n.is_empty() && !p.is_empty())
                .ok_or_else(|| ContainerError::Syntax(arg.clone()))?;
            let rel = Path::new(path)
                .strip_prefix(&layout.unified)
                .map(Path::to_owned)
                .unwrap_or_else(|_| PathBuf::from(path));
            let abs = layout.unified_path(&rel);
            let id = cgroup_id(&abs).map_err(|e| ContainerError::NotFound {
                arg: arg.clone(),
                abs: abs.display().to_string(),
                root: layout.unified.display().to_string(),
                listing: listing(&layout.unified),
                cause: match e {
                    CgroupError::Io { source, .. } => source,
                    other => std::io::Error::other(other.to_string()),
                },
            })?;
            set.add(Container {
                name: name.to_owned(),
                cgroup: Path::new("/").join(rel.strip_prefix("/").unwrap_or(&rel)),
                cgroup_id: id,
                kind: Kind::Explicit,
                started_ns: None,
                ended_ns: None,
            })?;
        }
        Ok(set)
    }

    /// Adds a container. Its descendants' sockets count as its own (see [`Self::attribute`]).
    pub fn add(&mut self, c: Container) -> Result<(), ContainerError> {
        if c.name == HOST || self.containers.iter().any(|x| x.name == c.name) {
            return Err(ContainerError::Duplicate(c.name));
        }
        self.by_id.insert(c.cgroup_id, self.containers.len());
        self.containers.push(c);
        Ok(())
    }

    /// The named containers, in the order they were added.
    pub fn containers(&self) -> &[Container] {
        &self.containers
    }

    /// Turns on automatic discovery (Docker, Kubernetes, systemd, herd's own containers) for
    /// [`Self::refresh`].
    pub fn with_discovery(mut self) -> Self {
        self.discover = true;
        self.docker = Some(DockerNames::new().watch());
        self
    }

    /// Brings the set up to date with the cgroup tree `paths` (id → path, from
    /// [`crate::cgroup::walk`]): discovers new containers and marks vanished ones ended at
    /// `now_ns`. Returns the names of containers that appeared and ended.
    pub fn refresh(
        &mut self,
        paths: &HashMap<u64, PathBuf>,
        now_ns: u64,
    ) -> (Vec<String>, Vec<String>) {
        let mut ended = Vec::new();
        for c in &mut self.containers {
            if c.ended_ns.is_none() && !paths.contains_key(&c.cgroup_id) {
                c.ended_ns = Some(now_ns);
                ended.push(c.name.clone());
            }
        }
        let mut appeared = Vec::new();
        if self.discover {
            let mut found: Vec<(&u64, &PathBuf)> = paths
                .iter()
                .filter(|(id, _)| {
                    !self.by_id.contains_key(id)
                        && !self.other_engines.contains(id)
                        && !self.retired_ids.contains(id)
                })
                .collect();
            // Stable order: by path.
            found.sort_by(|a, b| a.1.cmp(b.1));
            let mut new = Vec::new();
            for (id, path) in found {
                let Some(f) = classify(path) else { continue };
                let name = match (&f.docker_id, self.docker.as_mut()) {
                    (Some(docker_id), Some(d)) if self.this_engine_only => {
                        match d.owner(docker_id) {
                            Owner::This(name) => name,
                            Owner::Other => {
                                self.other_engines.insert(*id);
                                continue;
                            }
                            Owner::Unknown => f.name,
                        }
                    }
                    (Some(docker_id), Some(d)) => d.name(docker_id).unwrap_or(f.name),
                    _ => f.name,
                };
                new.push(Container {
                    name,
                    cgroup: path.clone(),
                    cgroup_id: *id,
                    kind: f.kind,
                    started_ns: self.seen_tree.then_some(now_ns),
                    ended_ns: None,
                });
            }
            for mut c in new {
                // A reused name (a restarted service) gets a suffix: rows never merge.
                let base = c.name.clone();
                let mut n = 2;
                while c.name == HOST
                    || self.retired_names.contains(&c.name)
                    || self.containers.iter().any(|x| x.name == c.name)
                {
                    c.name = format!("{base}#{n}");
                    n += 1;
                }
                appeared.push(c.name.clone());
                self.by_id.insert(c.cgroup_id, self.containers.len());
                self.containers.push(c);
            }
        }
        self.seen_tree = true;
        (appeared, ended)
    }

    /// With discovery: only the Docker containers of the engine this probe asks (`DOCKER_HOST`
    /// or the default socket) are containers; a Docker cgroup that engine says it has no
    /// container for belongs to another engine on the same kernel (several nodes of a test
    /// swarm on one host) and counts in `host`. When the engine cannot be asked, every
    /// Docker cgroup is a container, as without this.
    pub fn only_this_engine(mut self) -> Self {
        self.this_engine_only = true;
        self
    }

    /// How the running Docker containers are reached (addresses, DNS names, published
    /// ports), from the Engine API; empty without discovery or an answering engine.
    pub fn docker_services(&self) -> Vec<herd_model::Service> {
        let Some(d) = &self.docker else {
            return Vec::new();
        };
        let names: HashMap<String, String> = self
            .containers
            .iter()
            .filter(|c| c.kind == Kind::Docker && c.ended_ns.is_none())
            .filter_map(|c| Some((classify(&c.cgroup)?.docker_id?, c.name.clone())))
            .collect();
        if names.is_empty() {
            return Vec::new();
        }
        d.services(&names).unwrap_or_default()
    }

    /// Forgets the ended container `name` (its rows are over and its running totals folded):
    /// an hours-long run on a host where containers come and go keeps only the containers
    /// that are running or ended recently. Only its name stays, for the suffix rule. Returns
    /// whether it was in the set.
    pub fn retire(&mut self, name: &str) -> bool {
        let Some(i) = self
            .containers
            .iter()
            .position(|c| c.name == name && c.ended_ns.is_some())
        else {
            return false;
        };
        let c = self.containers.remove(i);
        self.retired_ids.insert(c.cgroup_id);
        self.retired_names.insert(c.name);
        self.by_id = (self.containers.iter().enumerate())
            .map(|(i, c)| (c.cgroup_id, i))
            .collect();
        true
    }

    /// Keeps the retired cgroup ids for which `listed` holds (those the kernel's record of
    /// created cgroups still has); the others cannot come back.
    pub fn prune_retired_ids(&mut self, listed: impl Fn(u64) -> bool) {
        self.retired_ids.retain(|id| listed(*id));
    }

    /// Report names: every container, then `host`.
    pub fn names(&self) -> Vec<&str> {
        self.containers
            .iter()
            .map(|c| c.name.as_str())
            .chain(std::iter::once(HOST))
            .collect()
    }

    /// Index into [`Self::names`] of the container owning cgroup `id`: the container itself or
    /// its nearest named ancestor (`paths` maps ids of unnamed cgroups to their paths), else
    /// `host`.
    pub fn attribute(&self, id: u64, paths: &HashMap<u64, PathBuf>) -> usize {
        if let Some(&i) = self.by_id.get(&id) {
            return i;
        }
        if let Some(path) = paths.get(&id) {
            // The deepest container whose directory contains the path.
            let mut best: Option<(usize, usize)> = None;
            for (i, c) in self.containers.iter().enumerate() {
                let depth = c.cgroup.components().count();
                if path.starts_with(&c.cgroup) && best.is_none_or(|(_, d)| depth > d) {
                    best = Some((i, depth));
                }
            }
            if let Some((i, _)) = best {
                return i;
            }
        }
        self.containers.len()
    }
}

/// Up to 20 cgroup directories near the top of `root`, for error messages.
fn listing(root: &Path) -> String {
    let mut all: Vec<String> = walk(root)
        .into_values()
        .filter(|p| p.components().count() <= 3)
        .map(|p| format!("  {}", p.display()))
        .collect();
    all.sort();
    all.truncate(20);
    format!(
        "the cgroups under {} (up to 20, two levels deep):\n{}",
        root.display(),
        all.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(name: &str, cgroup: &str, cgroup_id: u64) -> Container {
        Container {
            name: name.into(),
            cgroup: cgroup.into(),
            cgroup_id,
            kind: Kind::Explicit,
            started_ns: None,
            ended_ns: None,
        }
    }

    fn set() -> ContainerSet {
        let mut s = ContainerSet::default();
        s.add(container("gw", "/a/gw", 10)).unwrap();
        s
    }

    #[test]
    fn discovery_adds_new_containers_and_marks_vanished_ones_ended() {
        let mut s = set().with_discovery();
        let mut paths = HashMap::from([
            (10, PathBuf::from("/a/gw")),
            (20, PathBuf::from("/system.slice/nginx.service")),
            (21, PathBuf::from("/system.slice/nginx.service/worker")),
            (30, PathBuf::from("/user.slice")),
        ]);
        let (appeared, ended) = s.refresh(&paths, 5);
        assert_eq!(
            (appeared, ended),
            (vec!["nginx.service".to_owned()], vec![])
        );
        assert_eq!(
            s.attribute(21, &paths),
            1,
            "a service's child cgroup is the service"
        );
        assert_eq!(s.attribute(30, &paths), 2, "host");
        paths.remove(&20);
        paths.remove(&21);
        paths.insert(40, PathBuf::from("/system.slice/nginx.service"));
        let (appeared, ended) = s.refresh(&paths, 9);
        assert_eq!(ended, vec!["nginx.service".to_owned()]);
        assert_eq!(appeared, vec!["nginx.service#2".to_owned()]);
        assert_eq!(s.containers()[1].ended_ns, Some(9));
        assert_eq!(
            s.names(),
            vec!["gw", "nginx.service", "nginx.service#2", "host"]
        );
    }

    /// A Docker engine on a unix socket that knows container `ours` (named `shard-1`) and no
    /// other; returns how many lookups it answered once `n` have come.
    fn engine(sock: &Path, ours: &'static str, n: usize) -> std::thread::JoinHandle<usize> {
        use std::io::{Read as _, Write as _};
        let listener = std::os::unix::net::UnixListener::bind(sock).unwrap();
        std::thread::spawn(move || {
            for _ in 0..n {
                let (mut s, _) = listener.accept().unwrap();
                let mut req = [0u8; 512];
                let got = s.read(&mut req).unwrap();
                let req = String::from_utf8_lossy(&req[..got]);
                let reply = if req.starts_with(&format!("GET /containers/{ours}/json ")) {
                    "HTTP/1.0 200 OK\r\n\r\n{\"Name\":\"/shard-1\"}"
                } else {
                    "HTTP/1.0 404 Not Found\r\n\r\n{\"message\":\"No such container\"}"
                };
                s.write_all(reply.as_bytes()).unwrap();
            }
            n
        })
    }

    #[test]
    fn a_probe_of_one_engine_leaves_other_engines_containers_to_host() {
        const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
        let dir = herd_testkit::TempDir::new("containers-engines");
        let paths = HashMap::from([
            (1, PathBuf::from("/")),
            (2, PathBuf::from("/hn1-1")),
            (3, PathBuf::from(format!("/hn1-1/{A}"))),
            (4, PathBuf::from("/hn1-2")),
            (5, PathBuf::from(format!("/hn1-2/{B}"))),
        ]);
        // Two engines on one kernel, each under its --cgroup-parent: this probe asks the
        // engine of node 1, which knows A and answers 404 for B.
        let sock = dir.join("one.sock");
        let server = engine(&sock, A, 2);
        let mut s = ContainerSet {
            discover: true,
            docker: Some(DockerNames::at(&sock)),
            ..ContainerSet::default()
        }
        .only_this_engine();
        let (appeared, _) = s.refresh(&paths, 1);
        assert_eq!(appeared, ["shard-1"]);
        assert_eq!(s.attribute(5, &paths), 1, "B's sockets are host's");
        // B is not asked about again.
        let (appeared, _) = s.refresh(&paths, 2);
        assert!(appeared.is_empty());
        assert_eq!(server.join().unwrap(), 2);

        // Without it, every engine's containers are discovered; B is named by its id.
        let sock = dir.join("all.sock");
        let server = engine(&sock, A, 2);
        let mut s = ContainerSet {
            discover: true,
            docker: Some(DockerNames::at(&sock)),
            ..ContainerSet::default()
        };
        let (appeared, _) = s.refresh(&paths, 1);
        assert_eq!(appeared, ["shard-1", "docker-bbbbbbbbbbbb"]);
        server.join().unwrap();
    }

    #[test]
    fn descendants_belong_to_their_container_and_the_rest_to_host() {
        let s = set();
        let paths = HashMap::from([
            (11, PathBuf::from("/a/gw/child")),
            (12, PathBuf::from("/b")),
        ]);
        assert_eq!(s.attribute(10, &paths), 0);
        assert_eq!(s.attribute(11, &paths), 0);
        assert_eq!(s.attribute(12, &paths), 1);
        assert_eq!(s.attribute(99, &paths), 1);
        assert_eq!(s.names(), vec!["gw", "host"]);
    }

    #[test]
    fn bad_arguments_say_what_is_expected() {
        let layout = CgroupLayout::detect().unwrap();
        let e = ContainerSet::from_args(&layout, &["nonsense".into()]).unwrap_err();
        assert!(e.to_string().contains("NAME=CGROUP_PATH"), "{e}");
        let e = ContainerSet::from_args(&layout, &["x=/no/such/herd/cgroup".into()]).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("/no/such/herd/cgroup") && msg.contains("cgroups under"),
            "{msg}"
        );
        assert!(
            std::error::Error::source(&e).is_none(),
            "the cause is in the sentence, not appended after the listing"
        );
        let mut s = set();
        assert!(s.add(container("host", "/h", 1)).is_err());
    }
}
