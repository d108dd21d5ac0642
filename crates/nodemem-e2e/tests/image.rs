//! The image image/build-oci.sh writes (NODEMEM_IMAGE_LAYOUT, set by `make image-check`):
//! a valid OCI layout whose digests and sizes hold, whose config has the Dockerfile's
//! entrypoint and user, and whose one layer holds a statically linked /nodemem that
//! runs here (the host is the runtime: a static binary needs nothing from the image).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn layout() -> PathBuf {
    PathBuf::from(
        std::env::var_os("NODEMEM_IMAGE_LAYOUT")
            .expect("NODEMEM_IMAGE_LAYOUT: run `make image-check` (it builds the image first)"),
    )
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// A blob by descriptor, checked against the descriptor's digest and size.
fn blob(layout: &Path, descriptor: &Value) -> PathBuf {
    let digest = descriptor["digest"].as_str().unwrap();
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    let path = layout.join("blobs/sha256").join(hex);
    assert_eq!(
        sha256(&path),
        hex,
        "{} does not match its digest",
        path.display()
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        descriptor["size"].as_u64().unwrap(),
        "{digest}: size"
    );
    path
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Whether an ELF64 file has a PT_INTERP program header (needs a dynamic loader).
fn has_interpreter(elf: &[u8]) -> bool {
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(elf[4], 2, "not ELF64");
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    (0..phnum).any(|i| {
        let at = phoff + i * phentsize;
        u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) == 3
    })
}

#[test]
fn the_image_is_a_valid_oci_layout_with_a_static_nodemem_that_runs() {
    let layout = layout();
    assert_eq!(
        json(&layout.join("oci-layout"))["imageLayoutVersion"],
        "1.0.0"
    );
    let index = json(&layout.join("index.json"));
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1);
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        manifests[0]["annotations"]["org.opencontainers.image.ref.name"],
        version
    );
    let manifest = json(&blob(&layout, &manifests[0]));
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    let config = json(&blob(&layout, &manifest["config"]));

    // The Dockerfile's entrypoint and user.
    let dockerfile = std::fs::read_to_string(nodemem_e2e::repo_root().join("Dockerfile")).unwrap();
    assert!(dockerfile.contains("ENTRYPOINT [\"/nodemem\"]"));
    assert!(dockerfile.contains("USER 65532:65532"));
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/nodemem"])
    );
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");

    // One layer: /nodemem, executable, owned by root, and nothing else.
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    let layer = blob(&layout, &layers[0]);
    let dir = tempfile::tempdir().unwrap();
    let tar = dir.path().join("layer.tar");
    let gunzip = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "gzip -dc '{}' > '{}'",
            layer.display(),
            tar.display()
        ))
        .status()
        .unwrap();
    assert!(gunzip.success());
    // The uncompressed layer is the config's diff_id.
    assert_eq!(
        config["rootfs"]["diff_ids"][0].as_str().unwrap(),
        format!("sha256:{}", sha256(&tar))
    );
    let listing = Command::new("tar").arg("-tvf").arg(&tar).output().unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    let entries: Vec<&str> = listing.lines().collect();
    assert_eq!(entries.len(), 1, "{listing}");
    assert!(entries[0].starts_with("-rwxr-xr-x 0/0"), "{listing}");
    assert!(entries[0].ends_with(" nodemem"), "{listing}");
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir(&rootfs).unwrap();
    assert!(Command::new("tar")
        .arg("-xf")
        .arg(&tar)
        .arg("-C")
        .arg(&rootfs)
        .status()
        .unwrap()
        .success());
    let bin = rootfs.join("nodemem");
    assert!(
        !has_interpreter(&std::fs::read(&bin).unwrap()),
        "/nodemem needs a dynamic loader, which the empty base image does not have"
    );

    // It runs: --version, and a real command (the CRDs it serves are the repository's).
    let out = Command::new(&bin).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("nodemem {version}")
    );
    let crds = nodemem_e2e::repo_root().join("crds");
    let check = Command::new(&bin)
        .args(["crds", "--check"])
        .arg(&crds)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // The sandbox is not in the image.
    let sandbox = Command::new(&bin).arg("sandbox").output().unwrap();
    assert!(!sandbox.status.success());
    assert!(String::from_utf8_lossy(&sandbox.stderr).contains("unrecognized subcommand"));
}
