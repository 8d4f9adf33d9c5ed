//! `herd launch k8s`'s manifests against the real Kubernetes API schemas: PyPI's
//! `kubernetes-validate` (its bundled JSON schemas, generated from each release's OpenAPI
//! spec; offline), strict (a field the API does not define fails), for every Kubernetes
//! version it bundles from 1.25 on. `cargo xtask setup` installs it into target/py
//! (xtask/requirements.txt). No cluster applies them: none runs here (docs/scale-out.md).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use herd_testkit::TempDir;

/// The Kubernetes versions the manifests are validated for: every one kubernetes-validate
/// 1.37.0 bundles (1.25 … 1.37). Indexed Jobs are GA since 1.24.
const VERSIONS: [&str; 13] = [
    "1.25.0", "1.26.0", "1.27.0", "1.28.0", "1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0",
    "1.34.0", "1.35.0", "1.36.0", "1.37.0",
];

fn validator() -> PathBuf {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/py/bin/kubernetes-validate");
    assert!(
        bin.exists(),
        "{} is missing: `cargo xtask setup` installs it (xtask/requirements.txt, into the venv \
         target/py)",
        bin.display()
    );
    bin
}

/// `kubernetes-validate --strict -k VERSION FILE…`: its success and output.
fn validate(files: &[&Path], version: &str) -> (bool, String) {
    let out = Command::new(validator())
        .args(["--strict", "-k", version])
        .args(files)
        .output()
        .expect("running kubernetes-validate");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `herd launch k8s` of a small scenario with `extra` arguments; the manifest file it wrote.
fn manifests(dir: &TempDir, name: &str, extra: &[&str]) -> PathBuf {
    let scenario = dir.write(
        "game.toml",
        "[target]\nurl = \"http://gateway:8080\"\n[[op]]\nname = \"a\"\npath = \"/\"\n\
         [[step]]\nplayers = 3\nduration = \"5s\"\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_herd"))
        .args(["launch", "k8s"])
        .arg(&scenario)
        .args([
            "--shards",
            "3",
            "--store-secret",
            "herd-store",
            "--name",
            name,
        ])
        .args(["--namespace", "load", "--out"])
        .arg(dir.join("out"))
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("out").join(format!("{name}.yaml"))
}

#[test]
fn the_k8s_manifests_pass_the_kubernetes_schemas_of_1_25_to_1_37() {
    let dir = TempDir::new("k8s-schema");
    let with_probe = manifests(&dir, "game-1", &[]);
    let without = manifests(&dir, "game-2", &["--no-probe"]);
    for v in VERSIONS {
        let (ok, out) = validate(&[&with_probe, &without], v);
        assert!(ok, "Kubernetes {v}:\n{out}");
        let short = v.trim_end_matches(".0");
        for resource in [
            "configmap/game-1-scenario",
            "job/game-1",
            "daemonset/game-1-probe",
        ] {
            assert!(
                out.contains(&format!(
                    "passed for resource {resource} against version {short}"
                )),
                "Kubernetes {v}: {resource}:\n{out}"
            );
        }
        // --no-probe: the ConfigMap and the Job only.
        assert!(out.contains("passed for resource job/game-2"), "{out}");
        assert!(!out.contains("game-2-probe"), "{out}");
    }

    // The validator does reject what the API does not define: one misspelt field of the Job.
    let text = std::fs::read_to_string(&with_probe).unwrap();
    assert!(text.contains("completionMode: Indexed"), "{text}");
    let bad = dir.write(
        "bad.yaml",
        text.replace("completionMode: Indexed", "completionsMode: Indexed"),
    );
    let (ok, out) = validate(&[&bad], "1.37.0");
    assert!(
        !ok && out.contains("completionsMode"),
        "a misspelt field passed:\n{out}"
    );
}
