//! TESTING.md gives the control-plane and real-kernel tiers one test a line, named
//! `file::test` as cargo lists it: every test of `crates/nodemem-e2e/tests/apiserver/`,
//! `vm_kernel.rs` and `vm_agent.rs` is there, so a reader finds what a test checks and
//! a new test cannot land undescribed.

use std::collections::BTreeSet;

use nodemem_tidy::repo_root;

/// `file::test` for each test function of one test directory (an attribute line
/// `#[test]` or `#[tokio::test...]`, then the first `fn` after it).
fn tests_in(dir: &str) -> BTreeSet<String> {
    let files = std::fs::read_dir(repo_root().join(dir))
        .expect(dir)
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"));
    tests_of(files)
}

fn tests_of(files: impl Iterator<Item = std::path::PathBuf>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for path in files {
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

/// The tests of `tests` TESTING.md names no line for.
fn undescribed(tests: &BTreeSet<String>) -> Vec<&String> {
    let testing = std::fs::read_to_string(repo_root().join("TESTING.md")).expect("TESTING.md");
    tests
        .iter()
        .filter(|t| !testing.contains(&format!("`{t}`")))
        .collect()
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
    let tests = tests_in("crates/nodemem-e2e/tests/apiserver");
    assert!(tests.len() >= 40, "{tests:?}");
    let missing = undescribed(&tests);
    assert!(
        missing.is_empty(),
        "TESTING.md's control plane section names no line for {missing:?}"
    );
}

#[test]
fn every_real_kernel_test_has_its_line_in_testing_md() {
    let dir = repo_root().join("crates/nodemem-e2e/tests");
    let tests = tests_of(
        ["vm_kernel.rs", "vm_agent.rs"]
            .into_iter()
            .map(|f| dir.join(f)),
    );
    assert!(tests.len() >= 5, "{tests:?}");
    let missing = undescribed(&tests);
    assert!(
        missing.is_empty(),
        "TESTING.md's real kernel section names no line for {missing:?}"
    );
}

#[test]
fn the_reader_finds_test_functions_after_their_attribute_only() {
    let text = "// a #[tokio::test] in a comment\nfn helper() {}\n#[test]\nfn one() {}\n#[tokio::test(flavor = \"multi_thread\")]\n#[ignore]\nasync fn two_2() {}\n";
    assert_eq!(test_names(text), ["one", "two_2"]);
}
