//! The set-up the README's two commands run on a fresh machine says clearly what is
//! missing when it cannot proceed (issue 18's first-run papercuts): the control-plane
//! build refuses a Go older than Kubernetes' go.mod names before it builds anything.

use std::path::PathBuf;
use std::process::Command;

use nodemem_tidy::repo_root as repo;

#[test]
fn the_control_plane_build_refuses_an_old_go_with_both_versions() {
    let real_go = which("go").expect("go on PATH (make prereqs installs it)");
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("bin");
    std::fs::create_dir_all(&fake).unwrap();
    // A Go that reports itself as 1.19 (Debian bookworm's golang-go) and otherwise is
    // the machine's, so the module download works as on a real machine.
    std::fs::write(
        fake.join("go"),
        format!(
            "#!/bin/bash\nif [[ \"$*\" == \"env GOVERSION\" ]]; then echo go1.19.8; exit 0; fi\nexec {} \"$@\"\n",
            real_go.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        fake.join("go"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let path = format!("{}:{}", fake.display(), std::env::var("PATH").unwrap());
    let out = Command::new("bash")
        .arg(repo().join("tests/scripts/build-control-plane.sh"))
        .env("NODEMEM_CACHE", &cache)
        .env("PATH", &path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: Go 1.19.8 is too old: k8s.io/kubernetes v1.37.2 needs Go 1.")
            && stderr.contains("put its bin directory first in PATH"),
        "{stderr}"
    );
    assert!(
        !stderr.contains(">> building"),
        "nothing was built: {stderr}"
    );

    // No Go at all: named, with where Debian's comes from.
    let no_go = dir.path().join("nogo");
    std::fs::create_dir_all(&no_go).unwrap();
    for tool in ["bash", "mkdir", "mktemp", "rm", "awk", "cat", "dirname"] {
        if let Ok(p) = which(tool) {
            std::os::unix::fs::symlink(p, no_go.join(tool)).unwrap();
        }
    }
    let out = Command::new("bash")
        .arg(repo().join("tests/scripts/build-control-plane.sh"))
        .env("NODEMEM_CACHE", dir.path().join("cache2"))
        .env("PATH", &no_go)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("error: go is not installed"), "{stderr}");
}

fn which(tool: &str) -> Result<PathBuf, ()> {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| PathBuf::from(d).join(tool))
        .find(|p| p.is_file())
        .ok_or(())
}
