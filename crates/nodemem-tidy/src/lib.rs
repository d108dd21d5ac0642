//! Repository-wide checks in one place (as rust-analyzer's `xtask` tidy): what no
//! single crate's tests can see. The checks are the integration tests of this crate
//! (`tests/`); this library holds what they share: where the repository is and how a
//! crate's product code is read.

pub mod functions;

use std::path::PathBuf;

/// The repository root: two up from the package cargo runs (`CARGO_MANIFEST_DIR` at run
/// time, which `cargo test` and `cargo run` set; every workspace crate is
/// `crates/<name>`), else from where this crate was compiled. Read at run time because a
/// target directory shared by two checkouts (`~/.cache/nodemem/target`) keeps a library
/// built in the other one while its sources are unchanged, and with it that checkout's
/// path.
/// (The same rule as the test kit's, which these checks do not depend on.)
pub fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("../..")
        .canonicalize()
        .expect("the repository root exists")
}

/// The crates whose code ships in the binaries: every workspace member but the test
/// harness, the fuzz targets, the end-to-end tests and these checks.
pub fn product_crates() -> Vec<String> {
    let manifest = std::fs::read_to_string(repo_root().join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("Cargo.toml lists its workspace members");
    members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter_map(|m| m.strip_prefix("crates/"))
        .filter(|name| !NOT_PRODUCT.contains(name))
        .map(str::to_string)
        .collect()
}

const NOT_PRODUCT: [&str; 4] = [
    "nodemem-testkit",
    "nodemem-fuzz",
    "nodemem-e2e",
    "nodemem-tidy",
];
