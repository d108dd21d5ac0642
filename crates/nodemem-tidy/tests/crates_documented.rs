//! Every workspace crate has its row in docs/architecture.md's crate table and in the
//! README's layout: a maintainer finds a crate's job where the others' are, and a new
//! crate cannot land unexplained.

use nodemem_tidy::repo_root;

/// The package names of the crates under crates/.
fn workspace_crates() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo_root().join("crates"))
        .expect("crates/")
        .filter_map(|e| {
            let manifest = std::fs::read_to_string(e.ok()?.path().join("Cargo.toml")).ok()?;
            package_name(&manifest)
        })
        .collect();
    names.sort();
    names
}

/// `[package]`'s name.
fn package_name(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
            continue;
        }
        if let Some(value) = line.strip_prefix("name").map(str::trim_start) {
            if in_package {
                return Some(
                    value
                        .strip_prefix('=')?
                        .trim()
                        .trim_matches('"')
                        .to_string(),
                );
            }
        }
    }
    None
}

/// The crates without a table row that starts with `cell(crate)`.
fn missing(document: &str, cell: impl Fn(&str) -> String) -> Vec<String> {
    let text = std::fs::read_to_string(repo_root().join(document)).expect(document);
    workspace_crates()
        .into_iter()
        .filter(|c| {
            let row = format!("| {} |", cell(c));
            !text.lines().any(|l| l.starts_with(&row))
        })
        .collect()
}

/// The longest a crate's row of the architecture document may be: one line, the job in
/// a phrase (what each crate holds is told below the table).
const ROW_CAP: usize = 200;

/// The architecture document's crate rows over [`ROW_CAP`].
fn long_rows(document: &str) -> Vec<String> {
    document
        .lines()
        .filter(|l| l.starts_with("| `nodemem") && l.chars().count() > ROW_CAP)
        .map(|l| l.chars().take(40).collect())
        .collect()
}

#[test]
fn every_crate_row_is_one_line_of_its_job() {
    let text = std::fs::read_to_string(repo_root().join("docs/architecture.md")).expect("docs");
    let long = long_rows(&text);
    assert!(
        long.is_empty(),
        "crate rows over {ROW_CAP} characters: {long:?}"
    );
    let sample = format!(
        "| `nodemem-x` | {} | y |\n| `nodemem-z` | short | y |\n",
        "j".repeat(200)
    );
    assert_eq!(
        long_rows(&sample),
        [format!("| `nodemem-x` | {}", "j".repeat(24))]
    );
}

#[test]
fn every_crate_has_its_row_in_the_architecture_document() {
    let missing = missing("docs/architecture.md", |c| format!("`{c}`"));
    assert!(
        missing.is_empty(),
        "docs/architecture.md's crate table lacks {missing:?}"
    );
}

#[test]
fn every_crate_has_its_row_in_the_readme_layout() {
    let missing = missing("README.md", |c| format!("`crates/{c}`"));
    assert!(missing.is_empty(), "README.md's layout lacks {missing:?}");
}

#[test]
fn the_reader_finds_the_package_name_and_only_it() {
    let manifest = "[package]\nname = \"nodemem-x\"\n[dependencies]\nname = \"other\"\n";
    assert_eq!(package_name(manifest).as_deref(), Some("nodemem-x"));
    assert_eq!(package_name("[dependencies]\nname = \"y\"\n"), None);
    assert!(workspace_crates().len() >= 15, "{:?}", workspace_crates());
}
