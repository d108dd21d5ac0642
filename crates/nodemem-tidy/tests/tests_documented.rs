//! TESTING.md gives the control-plane and real-kernel tiers one test a line, named
//! `file::test` as cargo lists it: every test of `crates/nodemem-e2e/tests/apiserver/`,
//! `vm_kernel.rs` and `vm_agent.rs` is there, so a reader finds what a test checks and
//! a new test cannot land undescribed. Each list line is a summary of at most
//! [`LINE_CAP`] characters: the detail lives in the test's own doc comment, where it
//! changes with the test.

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

/// Every one of `tests` (at least `least` of them, so that a reader that finds none
/// fails) has its line in TESTING.md's `section`.
fn all_described(tests: BTreeSet<String>, least: usize, section: &str) {
    assert!(tests.len() >= least, "{tests:?}");
    let testing = std::fs::read_to_string(repo_root().join("TESTING.md")).expect("TESTING.md");
    let missing: Vec<&String> = tests
        .iter()
        .filter(|t| !testing.contains(&format!("`{t}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "TESTING.md's {section} section names no line for {missing:?}"
    );
}

/// The longest a list line of TESTING.md may be.
const LINE_CAP: usize = 400;

/// TESTING.md's list lines (`- ...`) over the cap, by line number.
fn over_cap(text: &str) -> Vec<String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.starts_with("- ") && l.chars().count() > LINE_CAP)
        .map(|(i, l)| format!("line {}: {} characters", i + 1, l.chars().count()))
        .collect()
}

#[test]
fn every_line_of_testing_md_is_a_summary_under_the_cap() {
    let testing = std::fs::read_to_string(repo_root().join("TESTING.md")).expect("TESTING.md");
    let found = over_cap(&testing);
    assert!(
        found.is_empty(),
        "over {LINE_CAP} characters (move the detail into the test's doc comment): {found:#?}"
    );
    let long = format!(
        "- `x::y`: {}\n- short\nprose {}\n",
        "a".repeat(400),
        "b".repeat(500)
    );
    assert_eq!(over_cap(&long), ["line 1: 410 characters"]);
}

#[test]
fn every_control_plane_test_has_its_line_in_testing_md() {
    all_described(
        tests_in("crates/nodemem-e2e/tests/apiserver"),
        40,
        "control plane",
    );
}

#[test]
fn every_real_kernel_test_has_its_line_in_testing_md() {
    let dir = repo_root().join("crates/nodemem-e2e/tests");
    let files = ["vm_kernel.rs", "vm_agent.rs"].map(|f| dir.join(f));
    all_described(tests_of(files.into_iter()), 5, "real kernel");
}

#[test]
fn the_reader_finds_test_functions_after_their_attribute_only() {
    let text = "// a #[tokio::test] in a comment\nfn helper() {}\n#[test]\nfn one() {}\n#[tokio::test(flavor = \"multi_thread\")]\n#[ignore]\nasync fn two_2() {}\n";
    assert_eq!(test_names(text), ["one", "two_2"]);
}
