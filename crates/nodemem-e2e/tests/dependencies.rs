//! The dependencies' licences, bans and sources, by cargo-deny (`deny.toml`): every
//! crate in the graph under a licence the project allows, no OpenSSL (TLS is rustls),
//! crates.io and nothing else. cargo-deny is built from crates.io at a pinned version by
//! `tests/scripts/build-cargo-deny.sh` (cached); `image/release.sh` runs the same check
//! before it builds, so this tier (image-check) holds what a release ships. Advisories
//! are not checked here: their database is a git repository this CI cannot fetch
//! (deny.toml says where they are).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nodemem_e2e::repo_root;

fn cargo_deny() -> PathBuf {
    let out = Command::new("bash")
        .arg(repo_root().join("tests/scripts/build-cargo-deny.sh"))
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "build-cargo-deny.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(said.lines().last().expect("the binary's path").trim())
}

/// Whether the check passed, and what it said (its summary is on standard output, each
/// finding on standard error).
fn check(config: &Path) -> (bool, String) {
    let out = Command::new(cargo_deny())
        .args(["--frozen", "--workspace", "--color", "never", "--config"])
        .arg(config)
        .args(["check", "licenses", "bans", "sources"])
        .current_dir(repo_root())
        .output()
        .expect("cargo-deny runs");
    (out.status.success(), said(&out))
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn every_dependency_has_an_allowed_licence_and_source_and_none_is_banned() {
    let (ok, said) = check(&repo_root().join("deny.toml"));
    assert!(ok, "cargo deny check: {said}");
    assert!(said.contains("bans ok, licenses ok, sources ok"), "{said}");
}

/// The check fails where it should: MIT taken off the allowed licences (most of the
/// graph is MIT-only or MIT-or-Apache and some crates have no other), and `ring`, which
/// kube's TLS uses, banned.
#[test]
fn a_licence_not_allowed_or_a_banned_crate_fails_by_name() {
    let config = std::fs::read_to_string(repo_root().join("deny.toml")).expect("deny.toml");
    let dir = tempfile::tempdir().unwrap();
    let no_mit = dir.path().join("no-mit.toml");
    std::fs::write(&no_mit, config.replace("    \"MIT\",\n", "")).unwrap();
    let (ok, said) = check(&no_mit);
    assert!(!ok, "{said}");
    assert!(said.contains("licenses FAILED"), "{said}");
    assert!(said.contains("rejected") && said.contains("MIT"), "{said}");
    let ring = dir.path().join("ring.toml");
    std::fs::write(
        &ring,
        config.replace(
            "deny = [\n",
            "deny = [\n    { crate = \"ring\", reason = \"a test\" },\n",
        ),
    )
    .unwrap();
    let (ok, said) = check(&ring);
    assert!(!ok, "{said}");
    assert!(
        said.contains("bans FAILED") && said.contains("ring"),
        "{said}"
    );
}
