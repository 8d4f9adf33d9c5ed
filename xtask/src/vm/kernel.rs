//! The guest kernel: its Debian package fetched by name and unpacked, with the modules the tests need.

use super::*;

/// Downloads and unpacks `package` once; later runs reuse `target/vm/kernels/<package>`.
pub(super) fn fetch_kernel(package: &str) -> Result<Kernel> {
    let dir = vm_dir().join("kernels").join(package);
    let done = dir.join("complete");
    if !done.exists() {
        let t = Instant::now();
        let staging = vm_dir()
            .join("kernels")
            .join(format!(".{package}.{}", std::process::id()));
        let _ = fs::remove_dir_all(&staging);
        let result = unpack_kernel(package, &staging);
        let _ = fs::remove_dir_all(staging.join("deb"));
        if let Err(e) = result {
            let _ = fs::remove_dir_all(&staging);
            return Err(e);
        }
        let _ = fs::remove_dir_all(&dir);
        fs::rename(&staging, &dir)
            .with_context(|| format!("moving {} to {}", staging.display(), dir.display()))?;
        eprintln!(
            "xtask: vm: {package} downloaded and unpacked in {:.1}s",
            t.elapsed().as_secs_f64()
        );
    }
    let read = |f: &str| {
        fs::read_to_string(dir.join(f))
            .with_context(|| format!("reading {}", dir.join(f).display()))
    };
    Ok(Kernel {
        package: package.to_owned(),
        release: read("release")?.trim().to_owned(),
        modules: read("modules.order")?.lines().map(str::to_owned).collect(),
        dir,
    })
}

pub(super) fn unpack_kernel(package: &str, staging: &Path) -> Result<()> {
    let deb_dir = staging.join("deb");
    fs::create_dir_all(&deb_dir)?;
    // Only Debian's archive, through the host's own apt sources. As root, apt would hand the
    // download to its unprivileged _apt user, who cannot write under target/.
    let download = || {
        Command::new("apt-get")
            .current_dir(&deb_dir)
            .args(["-q", "-o", "APT::Sandbox::User=root", "download", package])
            .stdin(Stdio::null())
            .output()
    };
    let mut out = download().context("running apt-get download")?;
    if !out.status.success() && crate::is_root() {
        // The lists may be older than the archive (an ABI bump removed the package).
        crate::status(Command::new("apt-get").args(["update", "-q"]))?;
        out = download().context("running apt-get download")?;
    }
    if !out.status.success() {
        bail!(
            "apt-get download {package} failed: {}; check the name with `apt-cache policy \
             {package}` (run `apt-get update` as root if the lists are old)",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let deb = fs::read_dir(&deb_dir)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .context("apt-get download left no .deb")?;
    let tree = deb_dir.join("tree");
    crate::status(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tree))?;
    let boot = tree.join("boot");
    let vmlinuz = fs::read_dir(&boot)
        .with_context(|| format!("{package} has no /boot"))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("vmlinuz-"))
        .with_context(|| format!("{package} has no /boot/vmlinuz-*"))?;
    let release = vmlinuz.trim_start_matches("vmlinuz-").to_owned();
    fs::copy(boot.join(&vmlinuz), staging.join("vmlinuz"))?;
    fs::copy(
        boot.join(format!("config-{release}")),
        staging.join("config"),
    )
    .with_context(|| format!("{package} has no /boot/config-{release}"))?;
    let config = fs::read_to_string(staging.join("config"))?;
    if !config.lines().any(|l| l == "CONFIG_DEBUG_INFO_BTF=y") {
        bail!("{package} is built without CONFIG_DEBUG_INFO_BTF: herd's probe needs kernel BTF");
    }

    // Module name → file, for the modules this kernel ships.
    let mut files = BTreeMap::new();
    let mut stack = vec![tree.join("lib/modules").join(&release)];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Some(name) = module_name(&p) {
                files.insert(name, p);
            }
        }
    }
    let mods = staging.join("modules");
    fs::create_dir_all(&mods)?;
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    let builtin = fs::read_to_string(
        tree.join("lib/modules")
            .join(&release)
            .join("modules.builtin"),
    )
    .unwrap_or_default();
    for m in MODULES {
        add_module(m, &files, &mods, &builtin, &mut seen, &mut order)
            .with_context(|| format!("{package}: module {m}"))?;
    }
    fs::write(staging.join("modules.order"), order.join("\n"))?;
    fs::write(staging.join("release"), &release)?;
    fs::write(staging.join("complete"), package)?;
    Ok(())
}

/// `veth` for `.../veth.ko`, `.ko.xz`, `.ko.zst`; module names treat `-` and `_` alike.
pub(super) fn module_name(p: &Path) -> Option<String> {
    let n = p.file_name()?.to_str()?;
    let stem = n
        .strip_suffix(".ko")
        .or_else(|| n.strip_suffix(".ko.xz"))
        .or_else(|| n.strip_suffix(".ko.zst"))?;
    Some(stem.replace('-', "_"))
}

/// Decompresses module `name` into `out` after its dependencies (the `depends=` entry of
/// its `.modinfo`), appending each file name to `order` once. A module built into this
/// kernel (listed in `modules.builtin`) needs nothing.
pub(super) fn add_module(
    name: &str,
    files: &BTreeMap<String, PathBuf>,
    out: &Path,
    builtin: &str,
    seen: &mut BTreeSet<String>,
    order: &mut Vec<String>,
) -> Result<()> {
    let name = name.replace('-', "_");
    if !seen.insert(name.clone()) {
        return Ok(());
    }
    let Some(src) = files.get(&name) else {
        let built_in = builtin
            .lines()
            .filter_map(|l| module_name(Path::new(l)))
            .any(|m| m == name);
        if built_in {
            return Ok(());
        }
        bail!("the kernel neither ships module {name} nor builds it in");
    };
    let bytes = match src.extension().and_then(|e| e.to_str()) {
        Some("ko") => fs::read(src)?,
        Some(ext @ ("xz" | "zst")) => {
            let tool: &[&str] = if ext == "xz" {
                &["busybox", "unxz", "-c"]
            } else {
                &["zstd", "-dc"]
            };
            let out = Command::new(tool[0])
                .args(&tool[1..])
                .arg(src)
                .output()
                .with_context(|| format!("running {} on {}", tool.join(" "), src.display()))?;
            if !out.status.success() {
                bail!("decompressing {} failed", src.display());
            }
            out.stdout
        }
        _ => bail!("unknown module format {}", src.display()),
    };
    for dep in modinfo_depends(&bytes) {
        add_module(&dep, files, out, builtin, seen, order)?;
    }
    let file = format!("{name}.ko");
    fs::write(out.join(&file), &bytes)?;
    order.push(file);
    Ok(())
}

/// The `depends=a,b` entry of a module's `.modinfo` section (NUL-separated `key=value`).
pub(super) fn modinfo_depends(ko: &[u8]) -> Vec<String> {
    let key = b"\0depends=";
    let Some(at) = ko.windows(key.len()).position(|w| w == key) else {
        return Vec::new();
    };
    let rest = &ko[at + key.len()..];
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end])
        .split(',')
        .filter(|d| !d.is_empty())
        .map(str::to_owned)
        .collect()
}
