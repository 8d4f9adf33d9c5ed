//! Rebuild the eBPF object when bpf-linker changes: the linker is part of the toolchain that
//! produces it, and cargo does not track it otherwise (same as aya-template).
fn main() {
    if let Ok(linker) = which::which("bpf-linker") {
        println!("cargo:rerun-if-changed={}", linker.display());
    }
}
