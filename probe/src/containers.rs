//! Containers as the probe reports them: named cgroups, and `host` for everything else, so the
//! per-container numbers always add up to the host's.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use crate::cgroup::{CgroupError, CgroupLayout, cgroup_id, walk};

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
    #[error("--container {arg}: no cgroup v2 directory at {abs} ({source}); {listing}")]
    NotFound {
        /// The argument as given.
        arg: String,
        /// Absolute path tried.
        abs: String,
        /// Some existing cgroups, to help the user pick.
        listing: String,
        /// The error.
        source: std::io::Error,
    },
    /// Two containers have the same name.
    #[error("--container {0}: the name is used twice")]
    Duplicate(String),
}

/// Named containers and the mapping from cgroup ids to them.
#[derive(Clone, Debug, Default)]
pub struct ContainerSet {
    containers: Vec<Container>,
    by_id: HashMap<u64, usize>,
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
                listing: listing(&layout.unified),
                source: match e {
                    CgroupError::Io { source, .. } => source,
                    other => std::io::Error::other(other.to_string()),
                },
            })?;
            set.add(Container {
                name: name.to_owned(),
                cgroup: Path::new("/").join(rel.strip_prefix("/").unwrap_or(&rel)),
                cgroup_id: id,
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

    /// The named containers, in the order given.
    pub fn containers(&self) -> &[Container] {
        &self.containers
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
            for (i, c) in self.containers.iter().enumerate() {
                if path.starts_with(&c.cgroup) {
                    return i;
                }
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
    format!("cgroups under {}:\n{}", root.display(), all.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> ContainerSet {
        let mut s = ContainerSet::default();
        s.add(Container {
            name: "gw".into(),
            cgroup: "/a/gw".into(),
            cgroup_id: 10,
        })
        .unwrap();
        s
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
        let mut s = set();
        assert!(
            s.add(Container {
                name: "host".into(),
                cgroup: "/h".into(),
                cgroup_id: 1
            })
            .is_err()
        );
    }
}
