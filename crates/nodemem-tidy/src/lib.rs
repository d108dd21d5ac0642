//! Repository-wide checks in one place (as rust-analyzer's `xtask` tidy): what no
//! single crate's tests can see. The checks are the integration tests of this crate
//! (`tests/`); this library holds what they share: where the repository is and how a
//! crate's product code is read.

pub mod functions;

use std::path::PathBuf;

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
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
