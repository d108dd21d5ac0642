//! The image image/build-oci.sh writes (NODEMEM_IMAGE_LAYOUT, set by `make image-check`):
//! a valid OCI layout naming a multi-architecture image index (amd64 and arm64) whose
//! digests and sizes hold, whose configs have the Dockerfile's entrypoint and user, and
//! whose one layer each holds a statically linked /nodemem for its architecture that
//! runs here: amd64 natively, arm64 under qemu-user (Debian's qemu-aarch64-static),
//! where `simulate` on the README's example and `agent --once` on a temporary cgroup
//! tree say and write what the amd64 binary does.
//!
//! What it checks: the test checks the layout (the image index, each manifest, config
//! and layer digests and sizes, the layer's diff_id), the Dockerfile's entrypoint and
//! user in each config, the config's architecture against the binary's ELF machine, a
//! single executable `/nodemem` owned by root, no dynamic loader needed, and runs each
//! (`--version`, `crds --check`; no `sandbox` in the image): amd64 here, arm64 under
//! Debian's `qemu-aarch64-static`; the arm64 binary's `simulate` on the README's
//! example and `agent --once` on a temporary cgroup tree print and write exactly what
//! the amd64 binary's do.

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

/// The ELF machine of an ELF64 file (62: x86-64, 183: AArch64).
fn machine(elf: &[u8]) -> u16 {
    u16::from_le_bytes([elf[0x12], elf[0x13]])
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

/// One architecture's image in the layout: its config, and its /nodemem extracted into
/// `dir` (checked: one layer whose uncompressed digest is the config's diff_id, holding
/// /nodemem alone, executable, owned by root, statically linked).
fn image_of(layout: &Path, manifest: &Value, dir: &Path) -> (Value, PathBuf) {
    let manifest = json(&blob(layout, manifest));
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    let config = json(&blob(layout, &manifest["config"]));
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    let layer = blob(layout, &layers[0]);
    let tar = dir.join("layer.tar");
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
    let rootfs = dir.join("rootfs");
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
    (config, bin)
}

/// Runs an architecture's binary: amd64 here, arm64 under qemu-user.
fn run(arch: &str, bin: &Path, args: &[&str], cwd: &Path) -> std::process::Output {
    let mut cmd = match arch {
        "arm64" => {
            let mut c = Command::new("qemu-aarch64-static");
            c.arg(bin);
            c
        }
        _ => Command::new(bin),
    };
    cmd.args(args)
        .current_dir(cwd)
        .output()
        .unwrap_or_else(|e| panic!("{arch}: {e}"))
}

#[test]
fn the_image_is_a_multi_architecture_oci_layout_with_a_static_nodemem_that_runs() {
    let layout = layout();
    assert_eq!(
        json(&layout.join("oci-layout"))["imageLayoutVersion"],
        "1.0.0"
    );
    let index = json(&layout.join("index.json"));
    let top = index["manifests"].as_array().unwrap();
    assert_eq!(top.len(), 1);
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        top[0]["annotations"]["org.opencontainers.image.ref.name"],
        version
    );
    assert_eq!(
        top[0]["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    let image_index = json(&blob(&layout, &top[0]));
    let manifests = image_index["manifests"].as_array().unwrap();
    let arches: Vec<&str> = manifests
        .iter()
        .map(|m| m["platform"]["architecture"].as_str().unwrap())
        .collect();
    assert_eq!(arches, ["amd64", "arm64"]);

    let dockerfile = std::fs::read_to_string(nodemem_e2e::repo_root().join("Dockerfile")).unwrap();
    assert!(dockerfile.contains("ENTRYPOINT [\"/nodemem\"]"));
    assert!(dockerfile.contains("USER 65532:65532"));
    let dir = tempfile::tempdir().unwrap();
    let repo = nodemem_e2e::repo_root();
    for m in manifests {
        let arch = m["platform"]["architecture"].as_str().unwrap();
        assert_eq!(m["platform"]["os"], "linux");
        let at = dir.path().join(arch);
        std::fs::create_dir(&at).unwrap();
        let (config, bin) = image_of(&layout, m, &at);
        // The Dockerfile's entrypoint and user; the config's architecture is the
        // binary's.
        assert_eq!(
            config["config"]["Entrypoint"],
            serde_json::json!(["/nodemem"])
        );
        assert_eq!(config["config"]["User"], "65532:65532");
        assert_eq!(config["os"], "linux");
        assert_eq!(config["architecture"], arch);
        let elf = std::fs::read(&bin).unwrap();
        assert_eq!(
            machine(&elf),
            if arch == "arm64" { 183 } else { 62 },
            "{arch}"
        );

        // It runs: --version, and a real command (the CRDs it serves are the
        // repository's).
        let out = run(arch, &bin, &["--version"], &repo);
        assert!(
            out.status.success(),
            "{arch}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("nodemem {version}")
        );
        let check = run(arch, &bin, &["crds", "--check", "crds"], &repo);
        assert!(
            check.status.success(),
            "{arch}: {}",
            String::from_utf8_lossy(&check.stderr)
        );
        // The sandbox is not in the image.
        let sandbox = run(arch, &bin, &["sandbox"], &repo);
        assert!(!sandbox.status.success());
        assert!(String::from_utf8_lossy(&sandbox.stderr).contains("unrecognized subcommand"));
    }

    // The arm64 binary computes and writes what the amd64 one does.
    let bins = |arch: &str| dir.path().join(arch).join("rootfs/nodemem");
    let simulate = [
        "simulate",
        "--policy",
        "examples/general/policy.yaml",
        "--node",
        "examples/general/node.yaml",
        "--pods",
        "examples/general/pods.yaml",
        "-o",
        "json",
    ];
    let said: Vec<String> = ["amd64", "arm64"]
        .iter()
        .map(|arch| {
            let out = run(arch, &bins(arch), &simulate, &repo);
            assert!(
                out.status.success(),
                "{arch}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
        .collect();
    assert!(said[0].contains("memory.high"), "{}", said[0]);
    assert_eq!(said[0], said[1], "simulate: amd64 against arm64");
    let (amd64, amd64_files) = agent_once("amd64", &bins("amd64"), dir.path());
    let (arm64, arm64_files) = agent_once("arm64", &bins("arm64"), dir.path());
    assert!(
        amd64_files.values().any(|v| v != "max" && v != "0"),
        "{amd64_files:?}"
    );
    assert_eq!(amd64, arm64, "agent --once: amd64 against arm64");
    assert_eq!(amd64_files, arm64_files, "the files each wrote");
}

/// `agent --once` on the agent-once example, on a cgroup tree of its own: what it
/// printed (the tree's path replaced) and every memory file of the tree afterwards.
fn agent_once(
    arch: &str,
    bin: &Path,
    dir: &Path,
) -> (String, std::collections::BTreeMap<String, String>) {
    use nodemem_model::pod::qos::QosClass;
    use nodemem_model::values::cgroup_layout::CgroupDriver;
    let root = dir.join(format!("node-{arch}"));
    std::fs::create_dir_all(root.join("cgroup")).unwrap();
    let tree = nodemem_testkit::cgroup_tree::CgroupTree::at(
        &root.join("cgroup"),
        CgroupDriver::Systemd,
        2,
    )
    .unwrap();
    for (qos, uid, containers) in [
        (
            QosClass::Guaranteed,
            "6a4f2e3b-1c9d-4a5e-8f7b-2d3e4f5a6b7c",
            vec!["a1".repeat(32)],
        ),
        (
            QosClass::Burstable,
            "8b3c7d2e-4f5a-6b7c-9d1e-3f4a5b6c7d8e",
            vec!["b2".repeat(32), "c3".repeat(32)],
        ),
        (
            QosClass::BestEffort,
            "0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f",
            vec!["d4".repeat(32)],
        ),
        (
            QosClass::Burstable,
            "1d2e3f4a-5b6c-7d8e-9f0a-1b2c3d4e5f6a",
            vec!["e5".repeat(32)],
        ),
    ] {
        tree.add_pod(qos, uid, &containers).unwrap();
    }
    let write = |p: PathBuf, text: &str| {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(root.join("proc/sys/kernel/osrelease"), "6.1.0-56-amd64\n");
    for n in 0..2 {
        write(
            root.join(format!("sys/devices/system/node/node{n}/meminfo")),
            &format!("Node {n} MemTotal:       262144 kB\n"),
        );
    }
    let path = |p: &str| root.join(p).display().to_string();
    let (cgroup, sys, proc, state) = (path("cgroup"), path("sys"), path("proc"), path("state"));
    let args = [
        "agent",
        "--once",
        "-o",
        "json",
        "--config",
        "examples/agent-once/config.yaml",
        "--node",
        "examples/agent-once/node.yaml",
        "--pods",
        "examples/agent-once/pods.yaml",
        "--cgroup-root",
        &cgroup,
        "--sys-root",
        &sys,
        "--proc-root",
        &proc,
        "--state-dir",
        &state,
    ];
    let out = run(arch, bin, &args, &nodemem_e2e::repo_root());
    assert!(
        out.status.success(),
        "{arch}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout).replace(&root.display().to_string(), "<node>");
    let mut files = std::collections::BTreeMap::new();
    let mut stack = vec![root.join("cgroup")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("memory.")
            {
                let rel = p.strip_prefix(&root).unwrap().display().to_string();
                files.insert(rel, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    (said, files)
}
