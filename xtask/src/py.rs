//! The Python tools the tests run, from PyPI: a venv under `target/py` with the pinned
//! packages of `xtask/requirements.txt` (Debian's python3 and python3-venv), installed once
//! and again only when the file changes.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result};

/// The venv.
pub fn dir(root: &Path) -> PathBuf {
    root.join("target/py")
}

/// Makes the venv and installs the requirements when they changed since the last install.
pub fn ensure(root: &Path) -> Result<()> {
    let venv = dir(root);
    let req = root.join("xtask/requirements.txt");
    let wanted =
        std::fs::read_to_string(&req).with_context(|| format!("reading {}", req.display()))?;
    // What was installed, as the requirements file said then.
    let stamp = venv.join("installed-requirements.txt");
    let python = venv.join("bin/python");
    if python.exists() && std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        return Ok(());
    }
    if !python.exists() {
        crate::status(
            Command::new("/usr/bin/python3")
                .args(["-m", "venv"])
                .arg(&venv),
        )
        .context("making the venv target/py (Debian packages python3 and python3-venv)")?;
    }
    crate::status(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(&req),
    )
    .with_context(|| format!("installing {} into target/py", req.display()))?;
    std::fs::write(&stamp, wanted).with_context(|| format!("writing {}", stamp.display()))?;
    Ok(())
}
