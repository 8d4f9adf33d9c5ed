//! Seed 004 against Debian's docker-registry (the reference distribution registry): the test
//! fills it through its HTTP API (blob uploads, manifests), corrupts one layer's data file on
//! disk, runs examples/seeds/registry.toml shortened, and checks that every request herd
//! counted is in the registry's access log, that every image was validated, and that the
//! corrupted layer is the report's integrity failure.

use std::process::Command;

use herd_driver::outcome::sha256_hex;
use herd_testkit::TempDir;

use super::support::{Proc, count, free_port, herd_run, outcome, report, request, say, seed_file};

const REPOS: [&str; 4] = ["seed/app", "seed/db", "seed/web", "seed/broken"];
const TAGS: [&str; 3] = ["v1", "v2", "latest"];
const LAYERS: usize = 3;

/// Deterministic bytes: a layer's content from its seed (xorshift64).
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn digest(b: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(b))
}

/// Uploads one blob monolithically: POST an upload, PUT its data with the digest.
fn push_blob(addr: &str, repo: &str, data: &[u8]) -> String {
    let d = digest(data);
    let start = request(
        addr,
        "POST",
        &format!("/v2/{repo}/blobs/uploads/"),
        &[],
        b"",
    )
    .unwrap();
    assert_eq!(
        start.status,
        202,
        "{}",
        String::from_utf8_lossy(&start.body)
    );
    let loc = start.header("location").expect("an upload location");
    // The registry answers with an absolute URL; the request needs its path.
    let loc = loc.strip_prefix(&format!("http://{addr}")).unwrap_or(loc);
    let sep = if loc.contains('?') { '&' } else { '?' };
    let put = request(
        addr,
        "PUT",
        &format!("{loc}{sep}digest={d}"),
        &[("content-type", "application/octet-stream")],
        data,
    )
    .unwrap();
    assert_eq!(put.status, 201, "{}", String::from_utf8_lossy(&put.body));
    d
}

/// Pushes one image (config + LAYERS layers); returns its layers' digests.
fn push_image(addr: &str, repo: &str, tag: &str, seed: u64) -> Vec<String> {
    let config = format!(
        r#"{{"architecture":"amd64","os":"linux","config":{{}},"rootfs":{{"type":"layers","diff_ids":[]}},"herd_seed":{seed}}}"#
    );
    let config_digest = push_blob(addr, repo, config.as_bytes());
    let mut layers = Vec::new();
    let mut entries = Vec::new();
    for l in 0..LAYERS {
        let data = bytes(seed * 16 + l as u64, 1024 + 512 * l);
        let d = push_blob(addr, repo, &data);
        entries.push(format!(
            r#"{{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","size":{},"digest":"{d}"}}"#,
            data.len()
        ));
        layers.push(d);
    }
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{{"mediaType":"application/vnd.docker.container.image.v1+json","size":{},"digest":"{config_digest}"}},"layers":[{}]}}"#,
        config.len(),
        entries.join(",")
    );
    let put = request(
        addr,
        "PUT",
        &format!("/v2/{repo}/manifests/{tag}"),
        &[(
            "content-type",
            "application/vnd.docker.distribution.manifest.v2+json",
        )],
        manifest.as_bytes(),
    )
    .unwrap();
    assert_eq!(put.status, 201, "{}", String::from_utf8_lossy(&put.body));
    layers
}

/// Lines the access log holds: one per request the registry answered.
fn access_lines(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter(|l| l.contains(" HTTP/1.1\" "))
        .map(String::from)
        .collect()
}

#[test]
fn registry_read_load_counts_match_the_access_log_and_the_corrupted_layer_is_named() {
    let dir = TempDir::new("seed-registry");
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let data = dir.join("data");
    let config = dir.write(
        "config.yml",
        format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: false\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n\
             http:\n  addr: {addr}\n",
            data.display()
        ),
    );
    let log = dir.join("access.log");
    let mut registry = Proc::spawn(
        "docker-registry",
        Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(dir.join("error.log")).unwrap()),
    );
    registry.wait_ready(&addr, "/v2/", &dir.join("error.log"));

    let mut broken = String::new();
    for (r, repo) in REPOS.iter().enumerate() {
        for (t, tag) in TAGS.iter().enumerate() {
            let layers = push_image(&addr, repo, tag, (r * 10 + t) as u64 + 1);
            if *repo == "seed/broken" && *tag == "v2" {
                broken = layers[1].clone();
            }
        }
    }
    // Damage the layer's data on disk, keeping its length: what a bad disk or a partial
    // copy leaves; the registry serves it as it is.
    let hex = broken.strip_prefix("sha256:").unwrap();
    let file = data.join(format!(
        "docker/registry/v2/blobs/sha256/{}/{hex}/data",
        &hex[..2]
    ));
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(&file, bytes).unwrap();
    let before = access_lines(&log).len();

    let out = dir.join("out");
    let sets: Vec<String> = [
        format!("target.url=http://{addr}"),
        "step[0].duration=2s".into(),
        "step[0].ramp=500ms".into(),
        "step[1].duration=2s".into(),
        "step[1].ramp=500ms".into(),
        "step[2].duration=2s".into(),
        "step[2].players=12".into(),
        "step[2].ramp=500ms".into(),
        "stop.spread=1s".into(),
    ]
    .into();
    let run = herd_run(&seed_file("registry.toml"), &sets, &out);
    assert_eq!(run.status.code(), Some(0), "{}", say(&run));
    let r = report(&out);
    // The access log is written as each response ends; the run has ended, so every line
    // of its requests is there.
    let lines: Vec<String> = access_lines(&log).split_off(before);
    let requests = r["run"]["requests"].as_u64().unwrap();
    eprintln!(
        "registry access log: {} requests; herd: {requests}",
        lines.len()
    );
    assert!(requests > 100, "{}", say(&run));
    assert_eq!(lines.len() as u64, requests, "{}", say(&run));
    let blobs = lines
        .iter()
        .filter(|l| l.contains("/blobs/sha256:"))
        .count() as u64;
    let manifests = lines.iter().filter(|l| l.contains("/manifests/")).count() as u64;
    assert_eq!(blobs, count(&r, "config.get") + count(&r, "layer.get"));
    assert_eq!(manifests, count(&r, "manifest.get"));
    // Every image validated: a manifest, its config and its three layers; a player the
    // stop retired mid-image leaves at most that one image short.
    let (m, c, l) = (
        count(&r, "manifest.get"),
        count(&r, "config.get"),
        count(&r, "layer.get"),
    );
    let players = 18;
    assert!(c <= m && c + players >= m, "{m} manifests, {c} configs");
    let full = LAYERS as u64 * m;
    assert!(
        l <= full && l + LAYERS as u64 * players >= full,
        "{m} manifests, {l} layers"
    );
    assert_eq!(outcome(&r, "manifest.get", "ok"), count(&r, "manifest.get"));
    assert_eq!(outcome(&r, "config.get", "ok"), count(&r, "config.get"));
    assert_eq!(outcome(&r, "tags.list", "ok"), count(&r, "tags.list"));

    // The corrupted layer, and only it, failed its check, and the report names it.
    let failed = outcome(&r, "layer.get", "check_failed");
    assert!(
        failed >= 1,
        "seed/broken was picked at least once: {}",
        say(&run)
    );
    let f = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "integrity_failures")
        .unwrap_or_else(|| panic!("{:#}", r["findings"]));
    assert_eq!(f["numbers"]["check_failed"].as_f64(), Some(failed as f64));
    assert_eq!(f["numbers"]["resources"].as_f64(), Some(1.0), "{f:#}");
    let resource = format!("layer.get /v2/seed/broken/blobs/{broken}: {failed} failed");
    assert!(
        f["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == &*resource),
        "{resource} in {f:#}"
    );
    // The staggered stop is its own phase: players left one by one.
    assert!(
        r["ops"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["phase"] == "stop"),
        "a stop phase"
    );
}
