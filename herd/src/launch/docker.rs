//! The Docker engine through the `docker` CLI, shared by `herd demo --docker` and `herd launch
//! swarm`: one way to run a command (its own process group, so a Ctrl-C meant for herd does
//! not cut a cleanup short), guards that remove what herd made, and herd's image built
//! `FROM scratch` from its own binary (no registry, nothing pulled).
//!
//! The CLI rather than the Engine API: `DOCKER_HOST` then means what it means to the CLI, and
//! what herd runs is what a user would type.

use std::{
    io::Write as _,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

/// `docker ARGS`, its stdout trimmed.
pub fn docker(args: &[&str]) -> Result<String> {
    docker_input(args, None)
}

/// `docker ARGS` with `input` on its stdin (`docker secret create NAME -`), its stdout
/// trimmed. The error names the command and the CLI's complaint; `input` is never shown.
pub fn docker_input(args: &[&str], input: Option<&[u8]>) -> Result<String> {
    let mut child = Command::new("docker")
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .with_context(|| {
            format!(
                "running `docker {}` (the docker CLI: Debian package docker.io)",
                args.join(" ")
            )
        })?;
    if let (Some(data), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(data)
            .with_context(|| format!("writing to `docker {}`", args.join(" ")))?;
    }
    let out = child
        .wait_with_output()
        .with_context(|| format!("waiting for `docker {}`", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "`docker {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Whether an engine answers `docker version` within 10 s; the CLI's complaint when not.
pub fn engine_answers() -> std::result::Result<(), String> {
    let mut child = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("the docker CLI does not run ({e}; Debian package docker.io)"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(_)) => {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return Err(err.trim().lines().last().unwrap_or("").to_owned());
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("no answer within 10 s".into());
            }
        }
    }
}

/// The engine's address as the CLI reads it, for messages.
pub fn engine_host() -> String {
    std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into())
}

/// Kinds of things herd makes on an engine, each removed its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `docker rm -f -v`.
    Container,
    /// `docker network rm`.
    Network,
    /// `docker rmi -f`.
    Image,
    /// `docker service rm`.
    Service,
    /// `docker config rm`.
    Config,
    /// `docker secret rm`.
    Secret,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Container => "container",
            Kind::Network => "network",
            Kind::Image => "image",
            Kind::Service => "service",
            Kind::Config => "config",
            Kind::Secret => "secret",
        }
    }

    fn remove(self) -> &'static [&'static str] {
        match self {
            Kind::Container => &["rm", "-f", "-v"],
            Kind::Network => &["network", "rm"],
            Kind::Image => &["rmi", "-f"],
            Kind::Service => &["service", "rm"],
            Kind::Config => &["config", "rm"],
            Kind::Secret => &["secret", "rm"],
        }
    }
}

/// Removes one thing herd made on drop; `who` names the command in the warning when it
/// cannot.
pub struct Made {
    /// What it is.
    pub kind: Kind,
    /// Its name (or id).
    pub name: String,
    /// The command that made it, for the warning.
    pub who: &'static str,
}

impl Made {
    /// A guard for `name`.
    pub fn new(kind: Kind, name: impl Into<String>, who: &'static str) -> Self {
        Self {
            kind,
            name: name.into(),
            who,
        }
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        let mut all = self.kind.remove().to_vec();
        all.push(&self.name);
        if let Err(e) = docker(&all) {
            tracing::warn!(
                "{}: could not remove the {} {}: {e:#}; remove it by hand",
                self.who,
                self.kind.word(),
                self.name
            );
        }
    }
}

/// A directory removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The files `ldd` says `exe` loads (absolute paths).
fn libraries(exe: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(exe)
        .output()
        .with_context(|| format!("running ldd {} (Debian package libc-bin)", exe.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        // A static binary needs nothing beside it.
        if text.contains("not a dynamic executable") || out.stderr.starts_with(b"\tnot a dynamic") {
            return Ok(Vec::new());
        }
        bail!(
            "ldd {} failed: {}",
            exe.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(text
        .lines()
        .filter_map(|line| {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)" or "/lib64/ld-linux-x86-64.so.2 (0x…)"
            match line.split_once("=>") {
                Some((_, rhs)) => rhs.split_whitespace().next(),
                None => line.split_whitespace().next(),
            }
            .filter(|p| p.starts_with('/'))
            .map(PathBuf::from)
        })
        .collect())
}

/// Builds `tag` FROM scratch: herd's own binary (debug info stripped when `strip` is there,
/// to keep the build context small) as the entrypoint, and its libraries. The guard removes
/// the image; `who` names the command in messages.
pub fn build_image(tag: &str, who: &'static str) -> Result<Made> {
    let exe = std::env::current_exe().context("locating the herd binary (/proc/self/exe)")?;
    let ctx = TempDir(std::env::temp_dir().join(format!(
        "herd-image-{}-{}",
        std::process::id(),
        tag.replace([':', '/'], "-")
    )));
    let root = ctx.0.join("rootfs");
    std::fs::create_dir_all(&root)
        .with_context(|| format!("creating the image's build context {}", root.display()))?;
    let stripped = Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(root.join("herd"))
        .arg(&exe)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !stripped {
        std::fs::copy(&exe, root.join("herd"))
            .with_context(|| format!("copying {} into the image", exe.display()))?;
    }
    for lib in libraries(&exe)? {
        let dest = root.join(lib.strip_prefix("/").unwrap_or(&lib));
        if let Some(dir) = dest.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        // Follows symlinks: the image gets the file itself under the name the loader asks for.
        std::fs::copy(&lib, &dest)
            .with_context(|| format!("copying {} into the image", lib.display()))?;
    }
    std::fs::write(ctx.0.join("Dockerfile"), DOCKERFILE)
        .with_context(|| format!("writing the Dockerfile in {}", ctx.0.display()))?;
    tracing::info!("{who}: building the image {tag} from {}", exe.display());
    // Guarded before the build: an interrupted build may still have tagged it.
    let made = Made::new(Kind::Image, tag, who);
    let ctx_path = ctx.0.to_string_lossy().into_owned();
    docker(&["build", "-q", "-t", tag, &ctx_path]).with_context(|| {
        format!("{who}: building herd's image {tag} (FROM scratch, nothing pulled)")
    })?;
    Ok(made)
}

/// The image's Dockerfile: herd and its libraries, nothing else.
pub const DOCKERFILE: &str = "FROM scratch\nCOPY rootfs/ /\nENTRYPOINT [\"/herd\"]\n";
