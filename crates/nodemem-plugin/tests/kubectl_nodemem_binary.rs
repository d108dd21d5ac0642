//! The plugin's own binary, `kubectl-nodemem`, as kubectl runs it: it answers `--help`
//! and `--version` without a cluster, names a missing kubeconfig clearly, and copied as
//! `kubectl_complete-nodemem` it completes `kubectl nodemem` (kubectl 1.26+).

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::process::Command;

fn plugin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubectl-nodemem"))
}

#[test]
fn it_runs_without_a_cluster_and_says_what_it_is() {
    let out = plugin().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("kubectl nodemem {}", env!("CARGO_PKG_VERSION"))
    );
    let out = plugin().arg("version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!(
            "kubectl nodemem {} linux/{}",
            env!("CARGO_PKG_VERSION"),
            if cfg!(target_arch = "aarch64") {
                "arm64"
            } else {
                "amd64"
            }
        )
    );
    let out = plugin().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for command in ["status", "explain", "diff", "pause", "resume", "rollback"] {
        assert!(help.contains(command), "{help}");
    }
    // No cluster to talk to: an error naming the kubeconfig, exit 1, no panic.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-kubeconfig");
    let out = plugin()
        .args(["status", "--kubeconfig", missing.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains("no-such-kubeconfig"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn named_kubectl_complete_nodemem_it_completes_the_plugins_words() {
    let dir = tempfile::tempdir().unwrap();
    let completer = dir.path().join("kubectl_complete-nodemem");
    std::fs::copy(env!("CARGO_BIN_EXE_kubectl-nodemem"), &completer).unwrap();
    let out = Command::new(&completer).args(["st"]).output().unwrap();
    assert!(out.status.success());
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.lines().any(|l| l.starts_with("status")), "{said}");
}
