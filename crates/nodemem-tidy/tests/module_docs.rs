//! Every Rust file says what it is for: its first line is a module doc (`//!`), in every
//! workspace crate's sources, tests, benches and build script. A reader opening any file
//! learns its job before its code. And one module style: a module with submodules is
//! `name.rs` beside its folder `name/`, never `name/mod.rs`, in every crate's sources (a
//! test's or bench's shared `common/mod.rs` is cargo's own idiom for a file that is not
//! a test of its own, and stays).

use std::path::{Path, PathBuf};

use nodemem_tidy::repo_root;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The files of `root`'s crates whose first line is not a module doc.
fn undocumented(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
    {
        for part in ["src", "tests", "benches", "build.rs"] {
            let p = krate.path().join(part);
            if p.is_file() {
                files.push(p);
            } else {
                rust_files(&p, &mut files);
            }
        }
    }
    let mut out: Vec<String> = files
        .iter()
        .filter(|f| {
            !std::fs::read_to_string(f)
                .unwrap_or_default()
                .starts_with("//!")
        })
        .map(|f| f.strip_prefix(root).unwrap_or(f).display().to_string())
        .collect();
    out.sort();
    out
}

#[test]
fn every_rust_file_opens_with_its_module_doc() {
    let found = undocumented(&repo_root());
    assert!(
        found.is_empty(),
        "no module doc (`//!` on the first line): {found:#?}"
    );
}

#[test]
fn a_file_without_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("crates/x/src");
    std::fs::create_dir_all(src.join("inner")).unwrap();
    std::fs::write(src.join("lib.rs"), "//! x.\npub mod inner;\n").unwrap();
    std::fs::write(
        src.join("inner/mod.rs"),
        "/// an item doc is not a module doc\npub fn f() {}\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("crates/x/build.rs"), "fn main() {}\n").unwrap();
    assert_eq!(
        undocumented(dir.path()),
        ["crates/x/build.rs", "crates/x/src/inner/mod.rs"]
    );
}

/// The `mod.rs` files under `root`'s crates' sources.
fn mod_rs_files(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for krate in std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
    {
        rust_files(&krate.path().join("src"), &mut files);
    }
    let mut out: Vec<String> = files
        .iter()
        .filter(|f| f.file_name().is_some_and(|n| n == "mod.rs"))
        .map(|f| f.strip_prefix(root).unwrap_or(f).display().to_string())
        .collect();
    out.sort();
    out
}

#[test]
fn every_module_with_submodules_is_a_file_beside_its_folder() {
    let found = mod_rs_files(&repo_root());
    assert!(
        found.is_empty(),
        "name/mod.rs where the workspace writes name.rs beside name/: {found:#?}"
    );
}

/// A crate with a `mod.rs` in its sources is named; one in its tests is not.
#[test]
fn a_mod_rs_in_a_crates_sources_is_named() {
    let root = tempfile::tempdir().unwrap();
    let write = |path: &str| {
        let path = root.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "//! a module\n").unwrap();
    };
    write("crates/a/src/lib.rs");
    write("crates/a/src/net/mod.rs");
    write("crates/a/tests/common/mod.rs");
    assert_eq!(mod_rs_files(root.path()), ["crates/a/src/net/mod.rs"]);
}
