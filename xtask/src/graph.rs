//! The workspace's crate graph, read from `cargo metadata`, against the picture of it in
//! docs/architecture.md: a test fails when a crate or a dependency between crates changes
//! and the picture does not (`UPDATE_GRAPH=1 cargo test -p xtask crate_graph` redraws it),
//! and when a library crate depends on a crate above it in the order the data flows.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    process::Command,
};

use anyhow::{Context as _, Result, bail};

/// Crates of the workspace that are tooling, not part of herd: left out of the picture.
const TOOLING: &[&str] = &["xtask", "integration-test", "herd-testkit"];

/// Bottom to top, the order the data flows through: a crate may depend only on crates
/// before it.
pub const ORDER: &[&str] = &[
    "probe-common",
    "probe-ebpf",
    "herd-model",
    "herd-http",
    "herd-seed",
    "herd-driver",
    "herd-probe",
    "herd-contour",
    "herd-store",
    "herd-report",
    "herd-testbed",
    "herd",
];

/// Each crate of the workspace with the workspace crates it depends on (normal and build
/// dependencies; dev-dependencies never enter a library's graph), tooling left out.
pub fn crate_graph(root: &Path) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(root)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("reading cargo metadata's JSON")?;
    let packages = meta["packages"]
        .as_array()
        .context("cargo metadata lists no packages")?;
    let names: BTreeSet<String> = packages
        .iter()
        .filter_map(|p| p["name"].as_str())
        .filter(|n| !TOOLING.contains(n))
        .map(str::to_owned)
        .collect();
    let mut graph = BTreeMap::new();
    for p in packages {
        let Some(name) = p["name"].as_str().filter(|n| names.contains(*n)) else {
            continue;
        };
        let deps = p["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"].as_str() != Some("dev"))
            .filter_map(|d| d["name"].as_str())
            .filter(|d| names.contains(*d))
            .map(str::to_owned)
            .collect();
        graph.insert(name.to_owned(), deps);
    }
    Ok(graph)
}

/// Each crate's floor: 1 for a crate that depends on none of the others, else one above the
/// highest of its dependencies.
fn floors(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, usize> {
    fn floor(
        name: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        memo: &mut BTreeMap<String, usize>,
    ) -> usize {
        if let Some(f) = memo.get(name) {
            return *f;
        }
        let f = 1 + graph[name]
            .iter()
            .map(|d| floor(d, graph, memo))
            .max()
            .unwrap_or(0);
        memo.insert(name.to_owned(), f);
        f
    }
    let mut memo = BTreeMap::new();
    for name in graph.keys() {
        floor(name, graph, &mut memo);
    }
    memo
}

/// The picture: a Mermaid graph (GitHub draws it), top floor first, and the floors in words.
pub fn picture(graph: &BTreeMap<String, BTreeSet<String>>) -> String {
    let floors = floors(graph);
    let mut by_floor: Vec<(usize, &String)> = floors.iter().map(|(n, f)| (*f, n)).collect();
    by_floor.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let mut out = String::from("```mermaid\ngraph TD\n");
    for (_, name) in &by_floor {
        for dep in &graph[*name] {
            out.push_str(&format!("  {name} --> {dep}\n"));
        }
    }
    out.push_str("```\n\nFloors, top to bottom (every arrow points down): ");
    let top = by_floor.first().map_or(0, |f| f.0);
    let words: Vec<String> = (1..=top)
        .rev()
        .map(|f| {
            by_floor
                .iter()
                .filter(|(g, _)| *g == f)
                .map(|(_, n)| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .collect();
    out.push_str(&words.join(" · "));
    out.push_str(".\n");
    out
}

const START: &str = "<!-- crate-graph";
const END: &str = "<!-- end crate-graph -->";

/// The picture as docs/architecture.md has it: what stands between its markers.
pub fn drawn(doc: &str) -> Option<&str> {
    let start = doc.find(START)?;
    let body = start + doc[start..].find("-->")? + 3;
    let end = doc.find(END)?;
    Some(doc[body..end].trim_matches('\n'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("xtask lives in the workspace")
            .to_owned()
    }

    #[test]
    fn the_crate_graph_is_the_one_docs_draw() {
        let graph = crate_graph(&root()).unwrap();
        let now = picture(&graph);
        let path = root().join("docs/architecture.md");
        let doc = std::fs::read_to_string(&path).unwrap();
        let drawn = drawn(&doc).expect("docs/architecture.md has the crate-graph markers");
        if std::env::var_os("UPDATE_GRAPH").is_some() && drawn != now.trim_matches('\n') {
            let updated = doc.replacen(drawn, now.trim_matches('\n'), 1);
            std::fs::write(&path, updated).unwrap();
            return;
        }
        assert_eq!(
            drawn,
            now.trim_matches('\n'),
            "docs/architecture.md's crate graph is out of date; redraw it with UPDATE_GRAPH=1 \
             cargo test -p xtask crate_graph"
        );
    }

    #[test]
    fn no_crate_depends_on_a_crate_above_it() {
        let graph = crate_graph(&root()).unwrap();
        for name in graph.keys() {
            assert!(
                ORDER.contains(&name.as_str()),
                "{name} is not in graph::ORDER: place it where the data flows"
            );
        }
        let at = |n: &str| ORDER.iter().position(|o| *o == n).unwrap();
        for (name, deps) in &graph {
            for dep in deps {
                assert!(
                    at(dep) < at(name),
                    "{name} depends on {dep}, which stands above it"
                );
            }
        }
        // The record model is at the bottom: it depends on the kernel types alone, and the
        // report and the store read it without the engines that write it.
        assert_eq!(
            graph["herd-model"],
            BTreeSet::from(["probe-common".to_owned()])
        );
        for engine in ["herd-driver", "herd-probe"] {
            assert!(!graph["herd-report"].contains(engine));
            assert!(!graph["herd-store"].contains(engine));
        }
        assert!(!graph["herd-store"].contains("herd-report"));
    }

    /// The picture puts every arrow downward and the graph's floors in words.
    #[test]
    fn the_picture_is_drawn_top_down() {
        let graph = BTreeMap::from([
            (
                "a".to_owned(),
                BTreeSet::from(["b".to_owned(), "c".to_owned()]),
            ),
            ("b".to_owned(), BTreeSet::from(["c".to_owned()])),
            ("c".to_owned(), BTreeSet::new()),
        ]);
        assert_eq!(
            picture(&graph),
            "```mermaid\ngraph TD\n  a --> b\n  a --> c\n  b --> c\n```\n\nFloors, top to \
             bottom (every arrow points down): `a` · `b` · `c`.\n"
        );
    }
}
