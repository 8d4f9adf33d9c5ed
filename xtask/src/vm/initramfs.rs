//! The guest's initramfs: busybox, `ip` and `ss`, the test binaries and their libraries, and `/init`.

use super::*;

/// A `newc` cpio archive (the format the kernel unpacks as initramfs), uncompressed: the
/// guest then spends no emulated time inflating it.
pub(super) struct Cpio {
    out: BufWriter<fs::File>,
    ino: u32,
    dirs: BTreeSet<String>,
}

impl Cpio {
    pub(super) fn create(path: &Path) -> Result<Self> {
        Ok(Self {
            out: BufWriter::new(
                fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
            ),
            ino: 0,
            dirs: BTreeSet::new(),
        })
    }

    pub(super) fn header(&mut self, name: &str, mode: u32, size: u64) -> Result<()> {
        self.ino += 1;
        let size = u32::try_from(size).context("a file over 4 GiB in the initramfs")?;
        let nlink = if mode & 0o170000 == 0o040000 { 2 } else { 1 };
        let fields = [
            self.ino,
            mode,
            0,
            0,
            nlink,
            0,
            size,
            0,
            0,
            0,
            0,
            name.len() as u32 + 1,
            0,
        ];
        let mut h = String::from("070701");
        for f in fields {
            h.push_str(&format!("{f:08x}"));
        }
        self.out.write_all(h.as_bytes())?;
        self.out.write_all(name.as_bytes())?;
        self.out.write_all(&[0])?;
        self.pad(110 + name.len() as u64 + 1)
    }

    pub(super) fn pad(&mut self, len: u64) -> Result<()> {
        let n = (4 - len % 4) % 4;
        self.out.write_all(&[0u8; 3][..n as usize])?;
        Ok(())
    }

    /// Creates `path` and its parents (absolute guest path).
    pub(super) fn dir(&mut self, path: &str) -> Result<()> {
        let rel = path.trim_start_matches('/');
        if rel.is_empty() || self.dirs.contains(rel) {
            return Ok(());
        }
        if let Some((parent, _)) = rel.rsplit_once('/') {
            self.dir(parent)?;
        }
        self.dirs.insert(rel.to_owned());
        self.header(rel, 0o040755, 0)
    }

    pub(super) fn parent(&mut self, path: &str) -> Result<()> {
        match path.trim_start_matches('/').rsplit_once('/') {
            Some((parent, _)) => self.dir(parent),
            None => Ok(()),
        }
    }

    pub(super) fn bytes(&mut self, path: &str, mode: u32, data: &[u8]) -> Result<()> {
        self.parent(path)?;
        self.header(
            path.trim_start_matches('/'),
            0o100000 | mode,
            data.len() as u64,
        )?;
        self.out.write_all(data)?;
        self.pad(data.len() as u64)
    }

    pub(super) fn file(&mut self, path: &str, mode: u32, src: &Path) -> Result<()> {
        let mut f = fs::File::open(src).with_context(|| format!("opening {}", src.display()))?;
        let len = f.metadata()?.len();
        self.parent(path)?;
        self.header(path.trim_start_matches('/'), 0o100000 | mode, len)?;
        let copied = std::io::copy(&mut (&mut f).take(len), &mut self.out)?;
        if copied != len {
            bail!("{} changed while it was copied", src.display());
        }
        self.pad(len)
    }

    pub(super) fn symlink(&mut self, path: &str, target: &str) -> Result<()> {
        self.parent(path)?;
        self.header(path.trim_start_matches('/'), 0o120777, target.len() as u64)?;
        self.out.write_all(target.as_bytes())?;
        self.pad(target.len() as u64)
    }

    pub(super) fn finish(mut self) -> Result<()> {
        self.header("TRAILER!!!", 0, 0)?;
        self.out.flush()?;
        Ok(())
    }
}

/// The shared libraries `ldd` lists for `exe`, by the absolute path the loader opens.
pub(super) fn libraries(exe: &Path) -> Result<Vec<String>> {
    let out = Command::new("ldd")
        .arg(exe)
        .output()
        .with_context(|| format!("running ldd {}", exe.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        // A static binary ("not a dynamic executable") needs nothing.
        return Ok(Vec::new());
    }
    Ok(text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, right)) => right.trim().split(' ').next()?,
                None => l.split(' ').next()?,
            };
            path.starts_with('/').then(|| path.to_owned())
        })
        .collect())
}

/// `objcopy --strip-debug` into `dir`: the test binaries shrink several-fold and the guest
/// has nothing to symbolise with anyway (backtraces still name functions).
pub(super) fn stripped(src: &Path, dir: &Path) -> Result<PathBuf> {
    let dst = dir.join(src.file_name().context("a binary has a file name")?);
    crate::status(
        Command::new("objcopy")
            .arg("--strip-debug")
            .arg(src)
            .arg(&dst),
    )?;
    Ok(dst)
}

/// The guest's `/init`. Its output goes to ttyS1 (the host parses it); the kernel's console
/// is ttyS0 (kept in a file, shown when something fails).
pub(super) fn init_script(kernel: &Kernel, suite: &Suite) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root CI=true RUST_BACKTRACE=0
mount -t devtmpfs devtmpfs /dev
exec </dev/null >/dev/ttyS1 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
# Pure cgroup v2, as on a systemd host with the unified hierarchy: no v1 hierarchy at all.
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo '+cpu +memory' > /sys/fs/cgroup/cgroup.subtree_control
ip link set lo up
for m in {modules}; do
    insmod /lib/modules/herd/$m || echo "herd-vm: problem: insmod $m failed"
done
echo "herd-vm: booted $(uname -r), uptime $(cut -d' ' -f1 /proc/uptime) s, clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
cd {GUEST_DIR}
run() {{
    name=$1; shift
    echo "herd-vm: run $name"
    timeout -s KILL {BINARY_TIMEOUT_S} "$@"
    echo "herd-vm: exit $name $?"
}}
"#,
        modules = kernel.modules.join(" "),
    ));
    for run in suite {
        // Two at a time by default, as on the host: many tests wait (timeouts, settling).
        let mut args = vec![format!("{GUEST_DIR}/deps/{}", run.name)];
        if !run.args.iter().any(|a| a == "--test-threads") {
            args.extend(["--test-threads".into(), "2".into()]);
        }
        args.extend(["--color".into(), "never".into()]);
        args.extend(run.args.iter().cloned());
        s.push_str(&format!("run {} {}\n", run.name, args.join(" ")));
    }
    s.push_str("echo \"herd-vm: done\"\npoweroff -f\n");
    s
}

pub(super) fn write_initramfs(
    path: &Path,
    kernel: &Kernel,
    suite: &Suite,
    tests: &BTreeMap<String, PathBuf>,
    bins: &[PathBuf],
) -> Result<()> {
    let scratch = path.with_file_name("bin");
    fs::create_dir_all(&scratch)?;
    let mut cpio = Cpio::create(path)?;
    for d in [
        "/dev", "/proc", "/sys", "/tmp", "/run", "/root", "/etc", "/sbin",
    ] {
        cpio.dir(d)?;
    }
    cpio.file("/bin/busybox", 0o755, Path::new("/bin/busybox"))
        .context("busybox-static is missing (`cargo xtask setup` installs it)")?;
    // iproute2 keeps named network namespaces under /var/run/netns.
    cpio.symlink("/var/run", "/run")?;
    cpio.bytes("/init", 0o755, init_script(kernel, suite).as_bytes())?;

    let mut libs = BTreeSet::new();
    let mut binaries: Vec<(String, PathBuf)> = TOOLS
        .iter()
        .map(|t| (t.to_string(), PathBuf::from(t)))
        .collect();
    for bin in bins {
        let name = bin
            .file_name()
            .context("a binary's file name")?
            .to_string_lossy();
        binaries.push((format!("{GUEST_DIR}/{name}"), stripped(bin, &scratch)?));
    }
    for run in suite {
        let src = stripped(&tests[run.name], &scratch)?;
        binaries.push((format!("{GUEST_DIR}/deps/{}", run.name), src));
    }
    for (guest, host) in &binaries {
        libs.extend(libraries(host)?);
        cpio.file(guest, 0o755, host)?;
    }
    for lib in &libs {
        cpio.file(lib, 0o755, Path::new(lib))?;
    }
    cpio.file(
        &format!("/boot/config-{}", kernel.release),
        0o644,
        &kernel.dir.join("config"),
    )?;
    for m in &kernel.modules {
        cpio.file(
            &format!("/lib/modules/herd/{m}"),
            0o644,
            &kernel.dir.join("modules").join(m),
        )?;
    }
    cpio.finish()?;
    let _ = fs::remove_dir_all(&scratch);
    Ok(())
}
