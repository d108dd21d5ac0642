//! What every end-to-end tier shares: where the repository is, the `nodemem` binary the
//! tests run (built as it ships, the binary's own crate), and one way to wait for
//! something to become true.
//!
//! The tiers are this crate's integration tests, each behind its feature
//! (`apiserver-tests`, `image-tests`, `vm-tests`, `node-tests`); how to start a bed is
//! `nodemem_testkit`'s.

pub mod phases;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The repository's root directory (the test kit's rule).
pub use nodemem_testkit::binaries::repo_root;

/// The `nodemem` binary, built once per test process from the workspace as it is now
/// (a no-op when `make` built it already), so a tier never runs a stale binary; or the
/// one `NODEMEM_E2E_BINARY` names (`make churn`: the image's release binary, whose
/// agents take a third of a debug one's memory, so that hundreds fit beside the
/// control plane).
pub fn nodemem() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| match std::env::var_os("NODEMEM_E2E_BINARY") {
        Some(path) => given_binary(PathBuf::from(path)),
        None => build_nodemem(),
    })
}

/// The binary `NODEMEM_E2E_BINARY` names, which must be there.
fn given_binary(path: PathBuf) -> PathBuf {
    assert!(
        path.is_file(),
        "NODEMEM_E2E_BINARY={}: no such file (build it first, as `make churn` does)",
        path.display()
    );
    path
}

fn build_nodemem() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // The whole workspace, as `make build` builds it: the binary then has the
    // dependencies' features the other tiers' builds use, and nothing is built twice.
    let mut build = std::process::Command::new(cargo);
    build
        .args(["build", "--workspace", "--bins", "--locked"])
        .current_dir(repo_root());
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_for_this_test) {
            build.env_remove(name);
        }
    }
    let status = build.status().expect("cargo runs");
    assert!(status.success(), "cargo build of the nodemem binary failed");
    // The test executable is target/<profile>/deps/<name>: the binary is two up.
    let exe = std::env::current_exe().expect("the test executable's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let binary = profile_dir.join("nodemem");
    assert!(binary.exists(), "{} after the build", binary.display());
    binary
}

/// Whether `name` is a variable cargo sets for the test process it runs (the package's
/// name, version and manifest). Build scripts watch some of them (ring's, through the
/// `cc` crate, reruns when `CARGO_PKG_NAME` or `CARGO_MANIFEST_DIR` changes), so a
/// nested build that inherits them rebuilt ring and everything above it (rustls,
/// kube-client, every nodemem crate), and the next `make` target rebuilt them back:
/// about a minute each way per tier.
fn set_by_cargo_for_this_test(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_CRATE_",
        "CARGO_BIN_",
    ];
    const NAMES: &[&str] = &["CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR", "OUT_DIR"];
    PREFIXES.iter().any(|p| name.starts_with(p)) || NAMES.contains(&name)
}

/// Polls `check` every `every` until it gives a value; None once `timeout` passed.
pub async fn within<T>(
    timeout: Duration,
    every: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}

/// Polls `check` every 100 ms until it gives a value; after `timeout` the test fails
/// with `what` and what `context` says (a process's log, say).
pub async fn eventually<T>(
    what: &str,
    timeout: Duration,
    context: &dyn Fn() -> String,
    check: impl AsyncFnMut() -> Option<T>,
) -> T {
    match within(timeout, Duration::from_millis(100), check).await {
        Some(v) => v,
        None => panic!("timed out waiting for {what}\n{}", context()),
    }
}

/// No context for a failure message.
pub fn no_context() -> String {
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn within_gives_the_first_value_or_none_after_the_timeout() {
        let mut calls = 0;
        let got = within(
            Duration::from_secs(5),
            Duration::from_millis(1),
            async || {
                calls += 1;
                (calls == 3).then_some(calls)
            },
        )
        .await;
        assert_eq!(got, Some(3));
        let never = within(
            Duration::from_millis(20),
            Duration::from_millis(5),
            async || None::<()>,
        )
        .await;
        assert_eq!(never, None);
    }

    #[tokio::test]
    #[should_panic(expected = "timed out waiting for the answer\nthe log says 42")]
    async fn eventually_fails_with_what_and_its_context() {
        let context = || "the log says 42".to_string();
        eventually(
            "the answer",
            Duration::from_millis(10),
            &context,
            async || None::<u32>,
        )
        .await;
    }

    #[test]
    fn the_nested_build_drops_what_cargo_set_for_this_test_and_keeps_the_rest() {
        // cargo sets these for this very process, as for every tier's.
        for name in [
            "CARGO_PKG_NAME",
            "CARGO_MANIFEST_DIR",
            "CARGO_PKG_VERSION_MAJOR",
        ] {
            assert!(std::env::var_os(name).is_some(), "{name} under cargo test");
            assert!(set_by_cargo_for_this_test(name), "{name}");
        }
        for kept in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_JOBS",
            "CARGO_NET_OFFLINE",
            "PATH",
        ] {
            assert!(!set_by_cargo_for_this_test(kept), "{kept}");
        }
    }

    #[test]
    fn the_repository_root_holds_the_workspace() {
        assert!(repo_root().join("Cargo.toml").exists());
        assert!(repo_root().join("crates/nodemem-e2e").exists());
    }
}
