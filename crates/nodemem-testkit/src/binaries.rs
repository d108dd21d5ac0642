//! Where the control-plane binaries come from: `NODEMEM_CONTROL_PLANE_BIN` when set
//! (the Makefile builds them first), otherwise `tests/scripts/build-control-plane.sh`
//! is run once per process (a no-op on a warm cache).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use crate::Error;

#[derive(Clone, Debug)]
pub struct Binaries {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kube_controller_manager: PathBuf,
    /// Binds pods to nodes where no fake kubelet does (the real node).
    pub kube_scheduler: PathBuf,
    /// Its configuration validation checks the kubelet drop-ins nodemem renders.
    pub kubelet: PathBuf,
    /// Every supported kubelet by version (`v1.37.2`, `v1.36.3`), newest first, each
    /// built from its own module: the real node boots with any of them. (A cache the
    /// sandbox built holds the control plane's own only.)
    pub kubelets: Vec<(String, PathBuf)>,
    /// What users type; tests run it where a user would.
    pub kubectl: PathBuf,
    /// How users install nodemem (the chart).
    pub helm: PathBuf,
}

/// The repository root: two up from the package cargo runs (`CARGO_MANIFEST_DIR` at run
/// time, which `cargo test` and `cargo run` set; every workspace crate is
/// `crates/<name>`), else from where this crate was compiled. Read at run time because a
/// target directory shared by two checkouts (`~/.cache/nodemem/target`) keeps a library
/// built in the other one while its sources are unchanged, and with it that checkout's
/// path.
pub fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("../..")
        .canonicalize()
        .expect("the repository root exists")
}

pub fn control_plane_binaries() -> Result<Binaries, Error> {
    static BIN: OnceLock<Result<Binaries, String>> = OnceLock::new();
    BIN.get_or_init(|| locate().map_err(|e| e.to_string()))
        .clone()
        .map_err(Error::Setup)
}

fn locate() -> Result<Binaries, Error> {
    let dir = match std::env::var_os("NODEMEM_CONTROL_PLANE_BIN") {
        Some(d) => PathBuf::from(d),
        None => {
            let script = repo_root().join("tests/scripts/build-control-plane.sh");
            let out = Command::new("bash")
                .arg(&script)
                .output()
                .map_err(|e| Error::Setup(format!("cannot run {}: {e}", script.display())))?;
            if !out.status.success() {
                return Err(Error::Setup(format!(
                    "{} failed ({}):\n{}",
                    script.display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                )));
            }
            let stdout = String::from_utf8_lossy(&out.stdout);
            PathBuf::from(stdout.lines().last().unwrap_or("").trim())
        }
    };
    let b = Binaries {
        etcd: dir.join("etcd"),
        kube_apiserver: dir.join("kube-apiserver"),
        kube_controller_manager: dir.join("kube-controller-manager"),
        kube_scheduler: dir.join("kube-scheduler"),
        kubelet: dir.join("kubelet"),
        kubelets: kubelets(&dir.join("kubelets")),
        kubectl: dir.join("kubectl"),
        helm: dir.join("helm"),
    };
    for p in [
        &b.etcd,
        &b.kube_apiserver,
        &b.kube_controller_manager,
        &b.kube_scheduler,
        &b.kubelet,
        &b.kubectl,
        &b.helm,
    ]
    .into_iter()
    .chain(b.kubelets.iter().map(|(_, p)| p))
    {
        if !p.is_file() {
            return Err(Error::Setup(format!(
                "{} is missing; run tests/scripts/build-control-plane.sh",
                p.display()
            )));
        }
    }
    // After the binaries: a directory without them says which is missing first.
    if b.kubelets.is_empty() {
        return Err(Error::Setup(format!(
            "{} holds no kubelet; run tests/scripts/build-control-plane.sh",
            dir.join("kubelets").display(),
        )));
    }
    Ok(b)
}

/// The kubelets in `dir`, one per version (the file's name), newest first.
fn kubelets(dir: &std::path::Path) -> Vec<(String, PathBuf)> {
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
        .filter(|(name, _)| name.starts_with('v'))
        .collect();
    let key = |v: &str| -> Vec<u32> {
        v.trim_start_matches('v')
            .split('.')
            .map(|p| p.parse().unwrap_or(0))
            .collect()
    };
    found.sort_by_key(|(v, _)| std::cmp::Reverse(key(v)));
    found
}

impl Binaries {
    /// The kubelet of `version` (`v1.36.3`).
    pub fn kubelet_of(&self, version: &str) -> Option<&PathBuf> {
        self.kubelets
            .iter()
            .find(|(v, _)| v == version)
            .map(|(_, p)| p)
    }
}
