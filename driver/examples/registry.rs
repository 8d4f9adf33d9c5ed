//! A player the scenario file cannot express: registry read load with integrity checks
//! (list a repository's tags, then for every tag fetch the manifest and check the config
//! and every layer blob against its digest).
//!
//! `cargo run -p herd-driver --example registry` starts a small registry on 127.0.0.1:0
//! (one repository with a corrupted layer, so the check has something to find), runs
//! `scenarios/registry.toml` against it for a few seconds and prints the table.

use std::{
    convert::Infallible,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering::SeqCst},
    },
    time::Duration,
};

use bytes::Bytes;
use herd_driver::{Player, RunOptions, Scenario, Session, Stopped, outcome::sha256_hex};
use herd_model::{Outcome, RunResult};
use http_body_util::Full;
use hyper::{Request, Response, server::conn::http1, service::service_fn};
use hyper_util::rt::TokioIo;

/// Repositories the registry holds; `library/broken` serves one layer that does not match
/// its digest.
pub const REPOS: [&str; 3] = ["library/app", "library/db", "library/broken"];
const TAGS: [&str; 3] = ["v1", "v2", "latest"];
const LAYERS: usize = 3;

/// The image validator: one turn validates every tag of one random repository.
pub struct Validator {
    /// Images whose manifest, config and layers all checked out.
    pub valid: Arc<AtomicU64>,
    /// Images with at least one op that did not end `ok`.
    pub invalid: Arc<AtomicU64>,
}

impl Player for Validator {
    async fn turn(&mut self, s: &mut Session) -> Result<(), Stopped> {
        let (tags_list, manifest_get, blob_get) =
            (op(s, "tags.list"), op(s, "manifest.get"), op(s, "blob.get"));
        let repo = REPOS[(s.random() % REPOS.len() as u64) as usize];
        s.set_var("repo", repo);
        let tags = s.call(tags_list).await?;
        let tags: Vec<String> = serde_json::from_slice::<serde_json::Value>(&tags.body)
            .ok()
            .and_then(|v| {
                v["tags"].as_array().map(|a| {
                    a.iter()
                        .filter_map(|t| t.as_str().map(String::from))
                        .collect()
                })
            })
            .unwrap_or_default();
        for tag in tags {
            s.set_var("tag", tag);
            let manifest = s.call(manifest_get).await?;
            let mut ok = manifest.outcome == Outcome::Ok;
            let layers: Vec<String> = serde_json::from_slice::<serde_json::Value>(&manifest.body)
                .ok()
                .and_then(|v| {
                    v["layers"].as_array().map(|a| {
                        a.iter()
                            .filter_map(|l| l["digest"].as_str().map(String::from))
                            .collect()
                    })
                })
                .unwrap_or_default();
            let config = s.var("config_digest").map(String::from);
            let mut stopped = None;
            for digest in config.into_iter().chain(layers) {
                s.set_var("digest", digest);
                match s.call(blob_get).await {
                    Ok(blob) => ok &= blob.outcome == Outcome::Ok,
                    Err(e) => {
                        stopped = Some(e);
                        break;
                    }
                }
            }
            // An image with a bad blob is invalid even if the run stops before its last
            // blob; an unfinished image with no bad blob so far counts as neither.
            if !ok {
                self.invalid.fetch_add(1, SeqCst);
            } else if stopped.is_none() {
                self.valid.fetch_add(1, SeqCst);
            }
            if let Some(e) = stopped {
                return Err(e);
            }
        }
        Ok(())
    }
}

fn op(s: &Session, name: &str) -> usize {
    s.op(name)
        .unwrap_or_else(|| panic!("registry.toml defines `{name}`"))
}

fn blob(repo: &str, tag: &str, i: usize) -> Vec<u8> {
    format!("{repo}:{tag}:layer {i}\n").repeat(64).into_bytes()
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

/// Every blob the registry serves, by digest.
fn blobs() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for repo in REPOS {
        for tag in TAGS {
            for i in 0..=LAYERS {
                let mut b = blob(repo, tag, i);
                let d = digest(&b);
                if repo == "library/broken" && i == 1 {
                    // Bit rot: the stored bytes no longer match the digest that names them.
                    b[0] ^= 1;
                }
                out.push((d, b));
            }
        }
    }
    out
}

fn manifest(repo: &str, tag: &str) -> String {
    let layers: Vec<serde_json::Value> = (1..=LAYERS)
        .map(|i| serde_json::json!({"digest": digest(&blob(repo, tag, i))}))
        .collect();
    serde_json::json!({"config": {"digest": digest(&blob(repo, tag, 0))}, "layers": layers})
        .to_string()
}

/// Starts the registry on 127.0.0.1:0; returns its URL and its request counter.
pub async fn start_registry() -> (String, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding 127.0.0.1:0");
    let url = format!("http://{}", listener.local_addr().expect("a bound address"));
    let served = Arc::new(AtomicU64::new(0));
    let blobs = Arc::new(blobs());
    let counter = served.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (blobs, counter) = (blobs.clone(), counter.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    counter.fetch_add(1, SeqCst);
                    let path = req.uri().path().trim_start_matches("/v2/").to_owned();
                    let blobs = blobs.clone();
                    async move {
                        let body = if let Some(repo) = path.strip_suffix("/tags/list") {
                            Some(
                                serde_json::json!({"name": repo, "tags": TAGS})
                                    .to_string()
                                    .into_bytes(),
                            )
                        } else if let Some((repo, tag)) = path.split_once("/manifests/") {
                            Some(manifest(repo, tag).into_bytes())
                        } else if let Some((_, d)) = path.split_once("/blobs/") {
                            blobs
                                .iter()
                                .find(|(digest, _)| digest == d)
                                .map(|(_, b)| b.clone())
                        } else {
                            None
                        };
                        let mut resp =
                            Response::new(Full::new(Bytes::from(body.clone().unwrap_or_default())));
                        if body.is_none() {
                            *resp.status_mut() = hyper::StatusCode::NOT_FOUND;
                        }
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (url, served)
}

/// What a demo run found.
pub struct Demo {
    /// The driver's report.
    pub report: RunResult,
    /// Requests the registry served.
    pub served: u64,
    /// Images validated.
    pub valid: u64,
    /// Images that failed validation.
    pub invalid: u64,
}

/// Runs `scenarios/registry.toml` against a fresh local registry, `steps` seconds long
/// each (the file's durations are overridden).
pub async fn demo(step: Duration) -> Result<Demo, Box<dyn std::error::Error>> {
    let (url, served) = start_registry().await;
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/scenarios/registry.toml"
    );
    let ms = step.as_millis();
    let sets = [
        format!("target.url={url}"),
        format!("step[0].duration={ms}ms"),
        format!("step[1].duration={ms}ms"),
        format!("step[1].ramp={}ms", ms / 4),
    ];
    let scenario = Scenario::load(file.as_ref(), &sets)?;
    let (valid, invalid) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (v, i) = (valid.clone(), invalid.clone());
    let opts = RunOptions {
        interval: Duration::from_millis(500),
        ..RunOptions::default()
    };
    let report = herd_driver::run_with(
        scenario,
        move |_| Validator {
            valid: v.clone(),
            invalid: i.clone(),
        },
        opts,
    )
    .await?;
    Ok(Demo {
        report,
        served: served.load(SeqCst),
        valid: valid.load(SeqCst),
        invalid: invalid.load(SeqCst),
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let d = demo(Duration::from_secs(2)).await?;
    print!("{}", herd_report::text::table(&d.report));
    println!(
        "\nimages validated: {} ok, {} failed; the registry served {} requests",
        d.valid, d.invalid, d.served
    );
    Ok(())
}
