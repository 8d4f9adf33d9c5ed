//! docs/architecture.md is the map a newcomer reads first: every path it names must exist.

use std::path::Path;

#[test]
fn every_path_the_architecture_page_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let page = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    // Paths from the repository's root: they start with a top-level directory.
    let tops: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| !n.starts_with('.') && n != "target")
        .collect();
    let mut checked = 0;
    let mut missing = Vec::new();
    for word in page.split(|c: char| c.is_whitespace() || "`()[],;:*".contains(c)) {
        let word = word.trim_end_matches(['.', '\'']);
        let Some((top, _)) = word.split_once('/') else {
            continue;
        };
        if !tops.iter().any(|t| t == top) || word.contains("::") || word.contains('<') {
            continue;
        }
        checked += 1;
        if !root.join(word).exists() {
            missing.push(word.to_owned());
        }
    }
    assert!(checked > 40, "only {checked} paths found in the page");
    assert!(
        missing.is_empty(),
        "docs/architecture.md names paths that do not exist: {missing:?}"
    );
}
