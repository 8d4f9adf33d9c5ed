//! Builds `probe-ebpf` for the BPF target with the pinned nightly and bpf-linker that
//! `cargo xtask setup` installs, and leaves the object in OUT_DIR for `include_bytes_aligned!`.
use std::path::Path;

use anyhow::{Context as _, bail};

fn main() -> anyhow::Result<()> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ebpf_dir = manifest.join("../probe-ebpf");
    let toolchain_file = ebpf_dir.join("nightly-toolchain");
    println!("cargo:rerun-if-changed={}", toolchain_file.display());
    let toolchain = std::fs::read_to_string(&toolchain_file)
        .with_context(|| format!("reading {}", toolchain_file.display()))?;
    let toolchain = toolchain.trim();

    let linker = manifest.join("../target/tools/bin/bpf-linker");
    println!("cargo:rerun-if-changed={}", linker.display());
    if !linker.exists() {
        bail!(
            "bpf-linker is not installed at {}; run `cargo xtask setup` once (it installs the \
             pinned nightly {toolchain}, bpf-linker and the test packages)",
            linker.display()
        );
    }
    let root_dir = ebpf_dir
        .canonicalize()
        .with_context(|| format!("resolving {}", ebpf_dir.display()))?;
    let root_dir = root_dir.to_str().context("non-UTF-8 path to probe-ebpf")?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "probe-ebpf",
            root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::Custom(toolchain),
    )
}
