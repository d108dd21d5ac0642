//! The crates are layers: each may use only the nodemem crates its row below names (so
//! the runtimes, the agent, the controller and the plugin, never use one another, and
//! the leaves stay leaves: the model is pure rules, the D-Bus client knows unit names
//! and property types, the NRI protocol knows containers as NRI names them), and the
//! rules and the node's engine may not reach, even through another crate, a Kubernetes
//! client or an async runtime. Read from `cargo metadata` (what cargo resolves, not
//! what a manifest seems to say); dev-dependencies are free: tests may use anything.

use std::collections::{BTreeMap, BTreeSet};

use nodemem_tidy::repo_root;
use serde_json::Value;

/// Each workspace crate and the nodemem crates it may depend on.
const LAYERS: [(&str, &[&str]); 15] = [
    ("nodemem-model", &[]),
    ("nodemem-systemd", &[]),
    ("nodemem-nri", &[]),
    ("nodemem-cgroup", &["nodemem-model"]),
    ("nodemem-api", &["nodemem-model"]),
    ("nodemem-apply", &["nodemem-model", "nodemem-cgroup"]),
    ("nodemem-plumbing", &["nodemem-model", "nodemem-api"]),
    (
        "nodemem-agent",
        &[
            "nodemem-model",
            "nodemem-api",
            "nodemem-cgroup",
            "nodemem-apply",
            "nodemem-plumbing",
            "nodemem-systemd",
            "nodemem-nri",
        ],
    ),
    (
        "nodemem-controller",
        &["nodemem-model", "nodemem-api", "nodemem-plumbing"],
    ),
    (
        "nodemem-plugin",
        &["nodemem-model", "nodemem-api", "nodemem-plumbing"],
    ),
    (
        "nodemem",
        &[
            "nodemem-model",
            "nodemem-api",
            "nodemem-apply",
            "nodemem-plumbing",
            "nodemem-agent",
            "nodemem-controller",
            "nodemem-plugin",
            // The sandbox runs the test bed.
            "nodemem-testkit",
        ],
    ),
    ("nodemem-testkit", &["nodemem-model", "nodemem-api"]),
    ("nodemem-e2e", &["nodemem-testkit"]),
    ("nodemem-fuzz", &["nodemem-model", "nodemem-cgroup"]),
    ("nodemem-tidy", &[]),
];

/// Crates some layers may not reach at all, directly or through any dependency.
const BANNED: [(&str, &[&str]); 5] = [
    (
        "nodemem-model",
        &["kube", "kube-client", "k8s-openapi", "tokio"],
    ),
    (
        "nodemem-cgroup",
        &["kube", "kube-client", "k8s-openapi", "tokio"],
    ),
    (
        "nodemem-apply",
        &["kube", "kube-client", "k8s-openapi", "tokio"],
    ),
    ("nodemem-systemd", &["kube", "kube-client", "k8s-openapi"]),
    ("nodemem-nri", &["kube", "kube-client", "k8s-openapi"]),
];

/// Each workspace crate's normal (not dev, not build) dependencies: direct, and all.
struct Graph {
    direct: BTreeMap<String, BTreeSet<String>>,
    all: BTreeMap<String, BTreeSet<String>>,
}

fn graph(metadata: &Value) -> Graph {
    let names: BTreeMap<&str, &str> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let normal: BTreeMap<&str, Vec<&str>> = metadata["resolve"]["nodes"]
        .as_array()
        .expect("a resolved graph")
        .iter()
        .map(|n| {
            let deps = n["deps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| {
                    d["dep_kinds"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|k| k["kind"].is_null())
                })
                .map(|d| d["pkg"].as_str().unwrap())
                .collect();
            (n["id"].as_str().unwrap(), deps)
        })
        .collect();
    let mut g = Graph {
        direct: BTreeMap::new(),
        all: BTreeMap::new(),
    };
    for member in metadata["workspace_members"].as_array().unwrap() {
        let id = member.as_str().unwrap();
        let name = names[id].to_string();
        let direct = normal[id].iter().map(|d| names[d].to_string()).collect();
        let mut seen = BTreeSet::new();
        let mut stack = vec![id];
        while let Some(at) = stack.pop() {
            for d in &normal[at] {
                if seen.insert(*d) {
                    stack.push(d);
                }
            }
        }
        g.direct.insert(name.clone(), direct);
        g.all
            .insert(name, seen.iter().map(|d| names[d].to_string()).collect());
    }
    g
}

fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .current_dir(repo_root())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON")
}

/// What breaks the table: a crate without a row, a nodemem dependency its row does
/// not name, a banned crate reached.
fn breaches(g: &Graph) -> Vec<String> {
    let layers: BTreeMap<&str, &[&str]> = LAYERS.into_iter().collect();
    let mut out = Vec::new();
    for (krate, direct) in &g.direct {
        let Some(allowed) = layers.get(krate.as_str()) else {
            out.push(format!("{krate} has no row in LAYERS"));
            continue;
        };
        for d in direct.iter().filter(|d| d.starts_with("nodemem")) {
            if !allowed.contains(&d.as_str()) {
                out.push(format!(
                    "{krate} depends on {d}, which its layer does not allow"
                ));
            }
        }
    }
    for (krate, banned) in BANNED {
        for b in banned {
            if g.all.get(krate).is_some_and(|all| all.contains(*b)) {
                out.push(format!("{krate} reaches {b}"));
            }
        }
    }
    out
}

#[test]
fn every_crate_uses_only_the_layers_below_it() {
    let g = graph(&metadata());
    assert_eq!(g.direct.len(), LAYERS.len(), "{:?}", g.direct.keys());
    let found = breaches(&g);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn a_crate_reaching_past_its_layer_is_named() {
    // A scripted metadata: the agent uses the controller, the model reaches tokio through
    // a dependency, and a new crate has no row.
    let pkg = |id: &str| serde_json::json!({"id": id, "name": id});
    let dep = |id: &str, kind: Value| serde_json::json!({"pkg": id, "dep_kinds": [{"kind": kind}]});
    let metadata = serde_json::json!({
        "packages": [pkg("nodemem-agent"), pkg("nodemem-controller"), pkg("nodemem-model"),
            pkg("bytes-helper"), pkg("tokio"), pkg("nodemem-new"), pkg("nodemem-testkit")],
        "workspace_members": ["nodemem-agent", "nodemem-model", "nodemem-new"],
        "resolve": {"nodes": [
            {"id": "nodemem-agent", "deps": [dep("nodemem-controller", Value::Null),
                dep("nodemem-testkit", serde_json::json!("dev"))]},
            {"id": "nodemem-controller", "deps": []},
            {"id": "nodemem-model", "deps": [dep("bytes-helper", Value::Null)]},
            {"id": "bytes-helper", "deps": [dep("tokio", Value::Null)]},
            {"id": "tokio", "deps": []},
            {"id": "nodemem-new", "deps": []},
            {"id": "nodemem-testkit", "deps": []},
        ]},
    });
    assert_eq!(
        breaches(&graph(&metadata)),
        [
            "nodemem-agent depends on nodemem-controller, which its layer does not allow",
            "nodemem-new has no row in LAYERS",
            "nodemem-model reaches tokio",
        ]
    );
}
