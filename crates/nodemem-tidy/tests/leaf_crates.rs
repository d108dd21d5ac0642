//! Some crates are leaves on purpose: the model is pure rules, the D-Bus client knows
//! unit names and property types and nothing of what they mean (as youki's systemd
//! client), and the NRI protocol knows containers as NRI names them and nothing of
//! memory, so none depends on another nodemem crate. Dev-dependencies are free: tests
//! may use anything.

use nodemem_tidy::repo_root;

const LEAVES: [&str; 3] = ["nodemem-model", "nodemem-systemd", "nodemem-nri"];

/// The nodemem crates `[dependencies]` of a manifest names.
fn nodemem_dependencies(manifest: &str) -> Vec<String> {
    let mut in_dependencies = false;
    let mut out = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
            continue;
        }
        if in_dependencies && line.starts_with("nodemem-") {
            out.push(line.split([' ', '=']).next().unwrap_or(line).to_string());
        }
    }
    out
}

#[test]
fn the_model_the_dbus_client_and_the_nri_protocol_depend_on_no_nodemem_crate() {
    for leaf in LEAVES {
        let path = repo_root().join("crates").join(leaf).join("Cargo.toml");
        let manifest = std::fs::read_to_string(&path).expect("a manifest");
        let found = nodemem_dependencies(&manifest);
        assert!(found.is_empty(), "{leaf} depends on {found:?}");
    }
}

#[test]
fn the_reader_sees_dependencies_and_only_those() {
    let manifest = "[package]\nname = \"x\"\n[dependencies]\nnodemem-api = { workspace = true }\nserde = \"1\"\n[dev-dependencies]\nnodemem-testkit = { workspace = true }\n";
    assert_eq!(nodemem_dependencies(manifest), ["nodemem-api"]);
}
