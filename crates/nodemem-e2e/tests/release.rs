//! A release as image/release.sh makes it (`make image-check` makes one into
//! NODEMEM_RELEASE_DIR with a throwaway minisign key, NODEMEM_RELEASE_PUBLIC_KEY), checked
//! as a team would before installing it: its checksums and signatures verify with the
//! public key and refuse a changed file or another key; the plugin's archives install
//! with krew (built from its module) and run on Linux amd64, arm64 (qemu-user) and
//! Windows (Wine); the SBOMs list every crate cargo compiles into the binaries, each
//! one in Cargo.lock; the packaged chart (not the directory) installs on the test
//! control plane and rolls a policy out with the image's own binary as controller and
//! agents, the image pinned by the layout's digest, and its `helm test` pod's command
//! says whether the controller leads.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use nodemem_testkit::bed::{Bed, BedSpec, Install, PoolSpec};
use serde::Deserialize;
use serde_json::Value;

const VERSION: &str = env!("CARGO_PKG_VERSION");

fn release() -> PathBuf {
    PathBuf::from(
        std::env::var_os("NODEMEM_RELEASE_DIR")
            .expect("NODEMEM_RELEASE_DIR: run `make image-check` (it makes a release first)"),
    )
}

fn public_key() -> PathBuf {
    PathBuf::from(
        std::env::var_os("NODEMEM_RELEASE_PUBLIC_KEY")
            .expect("NODEMEM_RELEASE_PUBLIC_KEY: run `make image-check`"),
    )
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn verify(dir: &Path, key: &Path) -> Output {
    Command::new("bash")
        .arg(nodemem_e2e::repo_root().join("image/verify-release.sh"))
        .arg(dir)
        .arg(key)
        .output()
        .unwrap()
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// The image's digest, as the layout's index.json names it.
fn image_digest(release: &Path) -> String {
    let index: Value = serde_json::from_slice(
        &std::fs::read(release.join(format!("nodemem_v{VERSION}_oci/index.json"))).unwrap(),
    )
    .unwrap();
    index["manifests"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `image/verify-release.sh` verifies the release with the public key (signatures over
/// the checksums and over the image index, every file, every blob of the layout); one
/// byte changed in an archive fails naming the file, another key fails on the
/// checksums' signature; `checksums.txt` lists every file; the packaged chart pins the
/// layout's digest and carries its version and Artifact Hub's annotations.
#[test]
fn the_release_verifies_with_its_key_and_refuses_a_changed_file_or_another_key() {
    let release = release();
    let ok = verify(&release, &public_key());
    assert!(ok.status.success(), "{}", said(&ok));
    assert!(said(&ok).contains(&image_digest(&release)), "{}", said(&ok));

    // checksums.txt covers every file of the release but itself, the signatures and
    // the public key (the layout by its index.json).
    let sums = std::fs::read_to_string(release.join("checksums.txt")).unwrap();
    let listed: BTreeSet<String> = sums
        .lines()
        .map(|l| l.split_whitespace().nth(1).unwrap().to_string())
        .collect();
    let mut files: BTreeSet<String> = std::fs::read_dir(&release)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            !n.starts_with("checksums.txt") && !n.ends_with(".minisig") && n != "nodemem.pub"
        })
        .collect();
    files.insert(format!("nodemem_v{VERSION}_oci/index.json"));
    assert_eq!(listed, files);
    for must in [
        format!("nodemem-{VERSION}.tgz"),
        format!("kubectl-nodemem_v{VERSION}_linux_amd64.tar.gz"),
        format!("kubectl-nodemem_v{VERSION}_linux_arm64.tar.gz"),
        format!("kubectl-nodemem_v{VERSION}_windows_amd64.zip"),
        format!("nodemem_v{VERSION}_image.cdx.json"),
        "nodemem.yaml".to_string(),
    ] {
        assert!(files.contains(&must), "{must} missing from {files:?}");
    }

    // A copy with one byte of an archive changed: refused, naming the file.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("release");
    assert!(Command::new("cp")
        .arg("-a")
        .arg(&release)
        .arg(&copy)
        .status()
        .unwrap()
        .success());
    let archive = copy.join(format!("kubectl-nodemem_v{VERSION}_linux_amd64.tar.gz"));
    let mut bytes = std::fs::read(&archive).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0xff;
    std::fs::write(&archive, bytes).unwrap();
    let refused = verify(&copy, &public_key());
    assert!(!refused.status.success(), "a changed archive verified");
    assert!(
        said(&refused).contains("kubectl-nodemem_v") && said(&refused).contains("FAILED"),
        "{}",
        said(&refused)
    );

    // Another key: the checksums' signature does not verify.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let made = Command::new("minisign")
        .args(["-G", "-W", "-p"])
        .arg(other.join("other.pub"))
        .arg("-s")
        .arg(other.join("other.key"))
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", said(&made));
    let refused = verify(&release, &other.join("other.pub"));
    assert!(
        !refused.status.success(),
        "another key verified the release"
    );
    assert!(
        said(&refused).contains("checksums.txt: its signature does not verify"),
        "{}",
        said(&refused)
    );

    // The chart pins the image by the layout's digest and carries the release's
    // version and Artifact Hub's annotations.
    let chart = release.join(format!("nodemem-{VERSION}.tgz"));
    let read = |file: &str| -> String {
        let out = Command::new("tar")
            .arg("-xzOf")
            .arg(&chart)
            .arg(file)
            .output()
            .unwrap();
        assert!(out.status.success(), "{file}: {}", said(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let digest = image_digest(&release);
    assert!(
        read("nodemem/values.yaml").contains(&format!("digest: \"{digest}\"")),
        "the packaged chart's image.digest is not the layout's"
    );
    let chart_yaml = read("nodemem/Chart.yaml");
    for must in [
        format!("version: {VERSION}"),
        format!("appVersion: {VERSION}"),
        format!("image: ghcr.io/nodemem/nodemem:{VERSION}@{digest}"),
        "artifacthub.io/license: Apache-2.0".to_string(),
        "artifacthub.io/changes:".to_string(),
        "kind: NodeMemoryPolicy".to_string(),
    ] {
        assert!(chart_yaml.contains(&must), "{must} not in\n{chart_yaml}");
    }
}

/// Wine's prefix for this test, and the directory holding the ProcessPrng shim
/// (tests/wine/bcryptprimitives.c, built with mingw-w64) on Wine's search path.
fn wine(dir: &Path) -> (PathBuf, PathBuf) {
    let shim = dir.join("shim");
    std::fs::create_dir_all(&shim).unwrap();
    let source = nodemem_e2e::repo_root().join("crates/nodemem-e2e/tests/wine/bcryptprimitives.c");
    let built = Command::new("x86_64-w64-mingw32-gcc")
        .args(["-shared", "-O2", "-o"])
        .arg(shim.join("bcryptprimitives.dll"))
        .arg(&source)
        .arg("-ladvapi32")
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", said(&built));
    (dir.join("wineprefix"), shim)
}

fn run_windows(prefix: &Path, shim: &Path, exe: &Path, args: &[&str]) -> Output {
    Command::new("wine")
        .arg(exe)
        .args(args)
        .env("WINEPREFIX", prefix)
        .env("WINEPATH", shim)
        .env("WINEDEBUG", "-all")
        .output()
        .unwrap()
}

/// Krew (built from its module, `tests/scripts/build-krew.sh`) installs each archive
/// from the release's manifest (which names exactly the archives the release holds, by
/// sha256) with its LICENSE; `kubectl-nodemem version` says its version and platform on
/// linux/amd64, linux/arm64 (qemu-user) and windows/amd64 under Debian's Wine (with a
/// ProcessPrng shim, `tests/wine/bcryptprimitives.c`: Wine 8 lacks the DLL Rust's
/// standard library calls), which also prints `--help` and names a missing kubeconfig
/// with exit 1; a manifest whose sha256 is another archive's is refused.
#[test]
fn the_plugin_archives_install_with_krew_and_run_on_linux_and_windows() {
    let release = release();
    let repo = nodemem_e2e::repo_root();
    let krew = {
        let out = Command::new("bash")
            .arg(repo.join("tests/scripts/build-krew.sh"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", said(&out));
        PathBuf::from(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .unwrap()
                .trim(),
        )
    };
    let manifest = release.join("nodemem.yaml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    assert!(text.contains(&format!("version: v{VERSION}")), "{text}");
    assert!(!text.contains("SHA256_"), "{text}");
    // The manifest names exactly the archives the release holds (no darwin here: no
    // macOS SDK to link with), each by its sha256.
    let platforms = ["linux_amd64", "linux_arm64", "windows_amd64"];
    for p in platforms {
        let ext = if p.starts_with("windows") {
            "zip"
        } else {
            "tar.gz"
        };
        let archive = release.join(format!("kubectl-nodemem_v{VERSION}_{p}.{ext}"));
        assert!(
            text.contains(&format!("sha256: {}", sha256(&archive))),
            "{p}: {text}"
        );
    }
    assert_eq!(text.matches("sha256: ").count(), platforms.len(), "{text}");
    assert!(!text.contains("darwin"), "{text}");

    let dir = tempfile::tempdir().unwrap();
    let license = std::fs::read(repo.join("LICENSE")).unwrap();
    let install = |os: &str, arch: &str, manifest: &Path, root: &Path| {
        let ext = if os == "windows" { "zip" } else { "tar.gz" };
        let archive = release.join(format!("kubectl-nodemem_v{VERSION}_{os}_{arch}.{ext}"));
        Command::new(&krew)
            .args(["install", "--manifest"])
            .arg(manifest)
            .arg("--archive")
            .arg(&archive)
            .env("KREW_ROOT", root)
            .env("KREW_OS", os)
            .env("KREW_ARCH", arch)
            .env("KREW_NO_UPGRADE_CHECK", "1")
            .output()
            .unwrap()
    };
    let installed_license = |root: &Path| {
        std::fs::read(root.join(format!("store/nodemem/v{VERSION}/LICENSE")))
            .unwrap_or_else(|e| panic!("no LICENSE installed under {}: {e}", root.display()))
    };
    for arch in ["amd64", "arm64"] {
        let root = dir.path().join(format!("krew-linux-{arch}"));
        let done = install("linux", arch, &manifest, &root);
        assert!(
            done.status.success(),
            "krew install ({arch}): {}",
            said(&done)
        );
        assert_eq!(installed_license(&root), license, "{arch}");
        let plugin = root.join("bin/kubectl-nodemem");
        let mut run = if arch == "arm64" {
            let mut c = Command::new("qemu-aarch64-static");
            c.arg(&plugin);
            c
        } else {
            Command::new(&plugin)
        };
        let ran = run.arg("version").output().unwrap();
        assert!(ran.status.success(), "{arch}: {}", said(&ran));
        assert_eq!(
            String::from_utf8_lossy(&ran.stdout).trim(),
            format!("kubectl nodemem {VERSION} linux/{arch}")
        );
    }

    // Windows: krew installs kubectl-nodemem.exe; it runs under Wine and says what it is.
    let root = dir.path().join("krew-windows-amd64");
    let done = install("windows", "amd64", &manifest, &root);
    assert!(
        done.status.success(),
        "krew install (windows): {}",
        said(&done)
    );
    assert_eq!(installed_license(&root), license);
    let exe = root.join("bin/kubectl-nodemem.exe");
    assert_eq!(
        &std::fs::read(&exe).unwrap()[..2],
        b"MZ",
        "not a Windows executable"
    );
    let (prefix, shim) = wine(dir.path());
    let ran = run_windows(&prefix, &shim, &exe, &["version"]);
    assert!(ran.status.success(), "wine: {}", said(&ran));
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout).trim(),
        format!("kubectl nodemem {VERSION} windows/amd64")
    );
    let help = run_windows(&prefix, &shim, &exe, &["--help"]);
    assert!(help.status.success(), "wine: {}", said(&help));
    let help = String::from_utf8_lossy(&help.stdout);
    for command in ["status", "explain", "diff", "pause", "resume", "rollback"] {
        assert!(help.contains(command), "{help}");
    }
    // No cluster: a clear error naming the kubeconfig, exit 1, no panic.
    let missing = dir.path().join("no-such-kubeconfig");
    let failed = run_windows(
        &prefix,
        &shim,
        &exe,
        &["status", "--kubeconfig", missing.to_str().unwrap()],
    );
    assert_eq!(failed.status.code(), Some(1), "{}", said(&failed));
    let err = String::from_utf8_lossy(&failed.stderr);
    assert!(
        err.contains("no-such-kubeconfig") && !err.contains("panicked"),
        "{err}"
    );

    // A manifest naming another archive's checksum: refused.
    let sums: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("sha256: "))
        .collect();
    let swapped = dir.path().join("nodemem.yaml");
    std::fs::write(&swapped, text.replacen(sums[0], sums[1], 1)).unwrap();
    let refused = install("linux", "amd64", &swapped, &dir.path().join("krew-bad"));
    assert!(!refused.status.success(), "a wrong sha256 was accepted");
    assert!(
        said(&refused).contains("sha256") || said(&refused).contains("checksum"),
        "{}",
        said(&refused)
    );
}

/// name@version of every package in Cargo.lock.
fn locked() -> BTreeSet<String> {
    let lock = std::fs::read_to_string(nodemem_e2e::repo_root().join("Cargo.lock")).unwrap();
    let mut out = BTreeSet::new();
    let mut name = None;
    for line in lock.lines() {
        if let Some(n) = line.strip_prefix("name = ") {
            name = Some(n.trim_matches('"').to_string());
        } else if let Some(v) = line.strip_prefix("version = ") {
            if let Some(n) = name.take() {
                out.insert(format!("{n}@{}", v.trim_matches('"')));
            }
        }
    }
    out
}

/// name@version of every crates.io package cargo compiles for TRIPLE in a build (its
/// `compiler-artifact` messages whose files are the target's: what the binary can
/// link; proc-macros and build scripts run on the build machine and are left out),
/// the build run again as image/release.sh runs it, so that it is fresh and says
/// what it built.
fn compiled(triple: &str, args: &[&str], env: &[(&str, &str)]) -> BTreeSet<String> {
    let repo = nodemem_e2e::repo_root();
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .args(["build", "--release", "--locked", "--message-format=json"])
        .args(args)
        .args(["--target", triple])
        .current_dir(&repo);
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().into_owned();
        // What cargo set for this test process, which a build of its own must not see.
        if name.starts_with("CARGO_PKG_")
            || name.starts_with("CARGO_BIN_")
            || name.starts_with("CARGO_CRATE_")
            || name.starts_with("CARGO_MANIFEST_")
            || name.starts_with("CARGO_PRIMARY_")
            || name == "OUT_DIR"
        {
            cargo.env_remove(name);
        }
    }
    cargo.envs(env.iter().copied());
    let out = cargo.output().unwrap();
    assert!(out.status.success(), "cargo build {args:?}: {}", said(&out));
    let mut packages = BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(m) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if m["reason"] != "compiler-artifact" {
            continue;
        }
        let for_target = m["filenames"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .any(|f| f.contains(&format!("/{triple}/release/")));
        if !for_target {
            continue;
        }
        let id = m["package_id"].as_str().unwrap();
        // registry+https://github.com/rust-lang/crates.io-index#name@version
        if let Some(spec) = id.strip_prefix("registry+") {
            let spec = spec.split('#').nth(1).unwrap();
            packages.insert(spec.to_string());
        }
    }
    assert!(packages.len() > 50, "{packages:?}");
    packages
}

/// name@version of every component of a CycloneDX SBOM, each checked to be in
/// Cargo.lock; the SBOM's subject.
fn sbom(path: &Path) -> (BTreeSet<String>, Value) {
    let bom: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert_eq!(bom["bomFormat"], "CycloneDX", "{}", path.display());
    let locked = locked();
    let mut components = BTreeSet::new();
    for c in bom["components"].as_array().unwrap() {
        if c["type"] != "library" {
            continue;
        }
        let id = format!(
            "{}@{}",
            c["name"].as_str().unwrap(),
            c["version"].as_str().unwrap()
        );
        assert!(
            locked.contains(&id),
            "{}: {id} is not in Cargo.lock",
            path.display()
        );
        components.insert(id);
    }
    (components, bom["metadata"]["component"].clone())
}

/// The build is run again as the release runs it (fresh) and every crates.io package
/// cargo compiles for the target is in the binary's SBOM (nodemem amd64, the Windows
/// plugin), every SBOM component is in Cargo.lock, the image's SBOM names the image by
/// its digest; found on its first run: cargo-cyclonedx evaluates a proc-macro's
/// host-only dependencies for the target (not in the binary, so not required).
#[test]
fn the_sboms_list_every_crate_cargo_compiles_into_the_binaries() {
    let release = release();
    // The image's nodemem (amd64), as image/build-oci.sh builds it.
    let linux = compiled(
        "x86_64-unknown-linux-gnu",
        &["-p", "nodemem", "--no-default-features", "--bin", "nodemem"],
        &[
            ("RUSTFLAGS", "-C target-feature=+crt-static"),
            ("CARGO_PROFILE_RELEASE_STRIP", "symbols"),
        ],
    );
    let (listed, subject) = sbom(&release.join(format!("nodemem_v{VERSION}_linux_amd64.cdx.json")));
    let missing: Vec<_> = linux.difference(&listed).collect();
    assert!(missing.is_empty(), "nodemem's SBOM misses {missing:?}");
    assert_eq!(subject["name"], "nodemem");
    // The image's SBOM: the same crates, the image by its digest as its subject.
    let (image, subject) = sbom(&release.join(format!("nodemem_v{VERSION}_image.cdx.json")));
    assert_eq!(image, listed);
    let digest = image_digest(&release);
    assert_eq!(subject["type"], "container");
    assert_eq!(
        subject["hashes"][0]["content"],
        digest.strip_prefix("sha256:").unwrap()
    );

    // The Windows plugin, as image/release.sh builds it.
    let windows = compiled(
        "x86_64-pc-windows-gnu",
        &["-p", "nodemem-plugin", "--bin", "kubectl-nodemem"],
        &[
            (
                "CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER",
                "x86_64-w64-mingw32-gcc",
            ),
            ("CC_x86_64_pc_windows_gnu", "x86_64-w64-mingw32-gcc"),
            ("CARGO_PROFILE_RELEASE_STRIP", "symbols"),
        ],
    );
    let (listed, subject) =
        sbom(&release.join(format!("kubectl-nodemem_v{VERSION}_windows_amd64.cdx.json")));
    let missing: Vec<_> = windows.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "the Windows plugin's SBOM misses {missing:?}"
    );
    assert_eq!(subject["name"], "kubectl-nodemem");
    assert!(
        listed.iter().any(|c| c.starts_with("windows-sys@")),
        "{listed:?}"
    );
    // The Linux plugins' SBOMs: Linux's crates, not Windows'.
    for arch in ["amd64", "arm64"] {
        let (listed, _) =
            sbom(&release.join(format!("kubectl-nodemem_v{VERSION}_linux_{arch}.cdx.json")));
        assert!(
            listed.iter().any(|c| c.starts_with("kube-client@")),
            "{arch}"
        );
        assert!(
            !listed.iter().any(|c| c.starts_with("windows-sys@")),
            "{arch}: {listed:?}"
        );
    }
}

/// The controller's arguments in the packaged chart's Deployment, but those the bed
/// passes itself (the subcommand, its tick and its metrics address).
fn rendered_controller_args(helm: &Path, chart: &Path) -> Vec<String> {
    let out = Command::new(helm)
        .args(["template", "nodemem"])
        .arg(chart)
        .args(["--namespace", "nodemem-system"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", said(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let deployment = serde_yaml::Deserializer::from_str(&text)
        .filter_map(|d| Value::deserialize(d).ok())
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "nodemem-controller")
        .expect("the packaged chart renders the controller's Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let image = container["image"].as_str().unwrap().to_string();
    container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|a| {
            *a != "controller"
                && !a.starts_with("--tick-seconds")
                && !a.starts_with("--metrics-addr")
        })
        // As the kubelet expands the Deployment's $(POD_NAMESPACE) (its own namespace).
        .map(|a| a.replace("$(POD_NAMESPACE)", "nodemem-system"))
        // The bed's controller is a process, not the Deployment's pod it would read its
        // image from: given the image that pod's container names, as it would read it
        // (tests/apiserver/own_image.rs runs the reading against a real pod).
        .map(|a| {
            if a == "--agent-image-from-container=controller" {
                format!("--agent-image={image}")
            } else {
                a
            }
        })
        .collect()
}

/// A hook pod the packaged chart renders, by name.
fn rendered_hook(helm: &Path, chart: &Path, name: &str) -> Value {
    let out = Command::new(helm)
        .args(["template", "nodemem"])
        .arg(chart)
        .args(["--namespace", "nodemem-system"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", said(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let found = serde_yaml::Deserializer::from_str(&text)
        .filter_map(|d| Value::deserialize(d).ok())
        .find(|d| d["kind"] == "Pod" && d["metadata"]["name"] == name);
    found.unwrap_or_else(|| panic!("the packaged chart renders no pod {name}"))
}

/// The image's amd64 /nodemem, out of the layout.
fn image_binary(release: &Path, dir: &Path) -> PathBuf {
    let layout = release.join(format!("nodemem_v{VERSION}_oci"));
    let blob = |digest: &str| {
        layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"))
    };
    let read = |digest: &str| -> Value {
        serde_json::from_slice(&std::fs::read(blob(digest)).unwrap()).unwrap()
    };
    let index = read(&image_digest(release));
    let amd64 = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["platform"]["architecture"] == "amd64")
        .expect("an amd64 image");
    let manifest = read(amd64["digest"].as_str().unwrap());
    let layer = blob(manifest["layers"][0]["digest"].as_str().unwrap());
    let unpacked = Command::new("tar")
        .arg("-xzf")
        .arg(&layer)
        .arg("-C")
        .arg(dir)
        .arg("nodemem")
        .output()
        .unwrap();
    assert!(unpacked.status.success(), "{}", said(&unpacked));
    dir.join("nodemem")
}

/// `helm install` of the packaged `.tgz` on the test control plane; the controller and
/// the agents run as the image's amd64 `/nodemem` taken out of the layout, with the
/// arguments the packaged chart's Deployment passes; a policy rolls out to Ready on
/// both nodes; the Deployment's and the agents' DaemonSet's image is
/// `ghcr.io/nodemem/nodemem@` the layout's digest; the `helm test` pod's command as the
/// packaged chart renders it (the image's `nodemem check`, the controller's account)
/// says a ready pod of the Deployment holding a fresh Lease leads (exit 0), and that no
/// replica leads once the Lease is a minute old (exit 1).
#[tokio::test(flavor = "multi_thread")]
async fn the_packaged_chart_installs_and_rolls_out_with_the_images_own_binary() {
    let release = release();
    let dir = tempfile::tempdir().unwrap();
    let nodemem = image_binary(&release, dir.path());
    let chart = release.join(format!("nodemem-{VERSION}.tgz"));
    let helm = nodemem_testkit::binaries::control_plane_binaries()
        .expect("NODEMEM_CONTROL_PLANE_BIN: run `make image-check`")
        .helm;
    let spec = BedSpec {
        nodemem: nodemem.clone(),
        repo: nodemem_e2e::repo_root(),
        pools: vec![PoolSpec::new("release", 2)],
        agent_resync_seconds: 5,
        install: Install::Chart {
            release: "nodemem".into(),
            args: vec![],
            chart: Some(chart.clone()),
        },
        controller_args: rendered_controller_args(&helm, &chart),
        pod_security_default: None,
    };
    let mut bed = Bed::start(&spec, &|_| {})
        .await
        .expect("the bed starts with the packaged chart");
    let digest = image_digest(&release);
    let pinned = format!("ghcr.io/nodemem/nodemem@{digest}");
    let releases: Value = serde_json::from_str(
        &nodemem_testkit::clients::helm(
            bed.admin_kubeconfig(),
            &["list", "-n", "nodemem-system", "-o", "json"],
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(releases[0]["chart"], format!("nodemem-{VERSION}"));
    assert_eq!(releases[0]["app_version"], VERSION);
    let image = bed
        .kubectl(&[
            "get",
            "deployment",
            "nodemem-controller",
            "-n",
            "nodemem-system",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ])
        .unwrap();
    assert_eq!(image, pinned);

    let policy =
        std::fs::read_to_string(nodemem_e2e::repo_root().join("examples/general/policy.yaml"))
            .unwrap()
            .replace("nodemem.io/pool: general", "nodemem.io/pool: release")
            .replace("minReadySeconds: 60", "minReadySeconds: 1");
    let file = dir.path().join("policy.yaml");
    std::fs::write(&file, policy).unwrap();
    bed.kubectl(&["apply", "-f", file.to_str().unwrap()])
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(dead) = bed.exited() {
            panic!("{dead}");
        }
        let p: Value = serde_json::from_str(
            &bed.kubectl(&["get", "nmp", "general", "-o", "json"])
                .unwrap(),
        )
        .unwrap();
        let ready = p["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        if ready && p["status"]["readyNodes"] == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the image's binary did not roll out with the packaged chart: {p}\ncontroller:\n{}",
            nodemem_testkit::process::tail(bed.controller_log(), 30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // `helm test`'s pod asks the image's `nodemem check` whether the controller leads
    // and is ready. Pods run nothing here, so the bed's controller process (not one of
    // the Deployment's pods) is stopped and the Lease handed to a ready pod of the
    // Deployment, as a leading replica holds it; the pod's command is run as the
    // packaged chart renders it, with the controller's account, as the test pod has.
    let test_pod = rendered_hook(&helm, &chart, "nodemem-test-controller-leads");
    assert_eq!(test_pod["metadata"]["annotations"]["helm.sh/hook"], "test");
    assert_eq!(test_pod["spec"]["serviceAccountName"], "nodemem-controller");
    let args: Vec<String> = test_pod["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(args[0], "check");
    bed.stop_controller(Duration::from_secs(5));
    // The bed has no scheduler (its kubelet binds only pods aimed at one node, as a
    // DaemonSet's are): one controller pod is bound to a node as the scheduler would,
    // and the bed's kubelet runs it.
    {
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(bed.client.clone(), "nodemem-system");
        let listed = pods
            .list(
                &kube::api::ListParams::default()
                    .labels("app.kubernetes.io/name=nodemem-controller"),
            )
            .await
            .unwrap();
        let pod = listed.items.first().expect("a controller pod");
        let name = pod.metadata.name.clone().unwrap();
        let node = bed.nodes.keys().next().unwrap().clone();
        let binding = serde_json::json!({
            "apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": "nodemem-system"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        let bound: Result<Value, _> = pods
            .create_subresource(
                "binding",
                &name,
                &kube::api::PostParams::default(),
                &binding,
            )
            .await;
        bound.unwrap_or_else(|e| panic!("binding {name} to {node}: {e}"));
    }
    let leader = {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = bed
                .kubectl(&[
                    "get", "pods", "-n", "nodemem-system", "-l",
                    "app.kubernetes.io/name=nodemem-controller", "-o",
                    r#"jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}"#,
                ])
                .unwrap_or_default();
            if let Some(name) = ready
                .lines()
                .find(|l| l.ends_with(" True"))
                .map(|l| l.split(' ').next().unwrap().to_string())
            {
                break name;
            }
            assert!(
                Instant::now() < deadline,
                "no ready controller pod: {ready}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    let controller_kubeconfig = bed
        .cp
        .kubeconfig(&nodemem_testkit::Identity::Controller)
        .await
        .unwrap();
    let hand_lease = |renewed_seconds_ago: u64| {
        let at = Command::new("date")
            .args([
                "-u",
                "-d",
                &format!("-{renewed_seconds_ago} seconds"),
                "+%Y-%m-%dT%H:%M:%S.000000Z",
            ])
            .output()
            .unwrap();
        let at = String::from_utf8_lossy(&at.stdout).trim().to_string();
        bed.kubectl(&[
            "patch", "lease", "nodemem-controller", "-n", "nodemem-system", "--type=merge", "-p",
            &format!(r#"{{"spec":{{"holderIdentity":"{leader}","leaseDurationSeconds":15,"renewTime":"{at}"}}}}"#),
        ])
        .unwrap();
    };
    let check = || {
        Command::new(&nodemem)
            .args(&args)
            .arg("--timeout-seconds=3")
            .env("KUBECONFIG", &controller_kubeconfig)
            .output()
            .unwrap()
    };
    hand_lease(1);
    let led = check();
    assert!(led.status.success(), "nodemem check: {}", said(&led));
    assert!(
        String::from_utf8_lossy(&led.stdout).starts_with(&format!("{leader} leads")),
        "{}",
        said(&led)
    );
    // A Lease nobody renewed for a minute: no replica leads, and it says so.
    hand_lease(60);
    let lost = check();
    assert_eq!(lost.status.code(), Some(1), "{}", said(&lost));
    assert!(
        said(&lost).contains("past its 15 s: no replica leads"),
        "{}",
        said(&lost)
    );

    // The agents' DaemonSet runs the same image, by the same digest.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ds = bed.kubectl(&[
            "get",
            "daemonset",
            "nodemem-agent",
            "-n",
            "nodemem-system",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ]);
        match ds {
            Ok(image) => {
                assert_eq!(image, pinned);
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "no agent DaemonSet: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
