//! TESTING.md gives the control-plane tier one test a line, named `file::test` as
//! cargo lists it: every test of `crates/nodemem-e2e/tests/apiserver/` is there, so a
//! reader finds what a test checks and a new test cannot land undescribed.

use std::collections::BTreeSet;

use nodemem_tidy::repo_root;

/// `file::test` for each test function of one test directory (an attribute line
/// `#[test]` or `#[tokio::test...]`, then the first `fn` after it).
fn tests_in(dir: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(repo_root().join(dir)).expect(dir) {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let file = path.file_stem().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).expect("a test file");
        found.extend(
            test_names(&text)
                .into_iter()
                .map(|t| format!("{file}::{t}")),
        );
    }
    found
}

fn test_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut after_attribute = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with("#[test]") || line.starts_with("#[tokio::test") {
            after_attribute = true;
        } else if after_attribute {
            if let Some(rest) = line.split("fn ").nth(1).filter(|_| line.contains("fn ")) {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                names.push(name);
                after_attribute = false;
            }
        }
    }
    names
}

#[test]
fn every_control_plane_test_has_its_line_in_testing_md() {
    let testing = std::fs::read_to_string(repo_root().join("TESTING.md")).expect("TESTING.md");
    let tests = tests_in("crates/nodemem-e2e/tests/apiserver");
    assert!(tests.len() >= 40, "{tests:?}");
    let missing: Vec<&String> = tests
        .iter()
        .filter(|t| !testing.contains(&format!("`{t}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "TESTING.md's control plane section names no line for {missing:?}"
    );
}

#[test]
fn the_reader_finds_test_functions_after_their_attribute_only() {
    let text = "// a #[tokio::test] in a comment\nfn helper() {}\n#[test]\nfn one() {}\n#[tokio::test(flavor = \"multi_thread\")]\n#[ignore]\nasync fn two_2() {}\n";
    assert_eq!(test_names(text), ["one", "two_2"]);
}
