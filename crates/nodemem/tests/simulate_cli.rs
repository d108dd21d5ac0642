//! `nodemem simulate` end to end through the real binary: the examples, the stable JSON
//! shape, and clear one-line errors for bad input.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::path::{Path, PathBuf};

use serde_json::Value;

mod cli_common;

use cli_common::nodemem;

fn simulate_json(policy: &str, node: &str, pods: &str) -> Value {
    let (code, stdout, stderr) = nodemem(&[
        "simulate", "--policy", policy, "--node", node, "--pods", pods, "-o", "json",
    ]);
    assert_eq!(code, 0, "stderr: {stderr}");
    serde_json::from_str(&stdout).expect("JSON output")
}

fn example(pool: &str) -> Value {
    simulate_json(
        &format!("examples/{pool}/policy.yaml"),
        &format!("examples/{pool}/node.yaml"),
        &format!("examples/{pool}/pods.yaml"),
    )
}

fn pod<'a>(out: &'a Value, name: &str) -> &'a Value {
    out["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap()
}

fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    &pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()["cgroup"]
}

const MI: i64 = 1 << 20;

#[test]
fn general_pool_json_has_the_documented_shape_and_values() {
    let out = example("general");
    let keys: Vec<_> = out.as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        keys,
        [
            "kubeletRules",
            "kubepods",
            "node",
            "pods",
            "policy",
            "qos",
            "warnings"
        ]
    );
    assert_eq!(out["node"], "general-1");
    assert_eq!(
        out["kubeletRules"],
        "v1.36.0 (v1.36 rules: memory.high on containers only)"
    );
    assert_eq!(out["policy"], "general");
    assert_eq!(out["warnings"], serde_json::json!([]));
    // kubepods: memory.min = Guaranteed + Burstable requests, memory.low = Burstable.
    assert_eq!(
        out["kubepods"],
        serde_json::json!({"memory.min": 1088 * MI, "memory.low": 576 * MI})
    );
    assert_eq!(
        out["qos"]["burstable"],
        serde_json::json!({"memory.low": 576 * MI})
    );
    assert_eq!(out["qos"]["besteffort"], serde_json::json!({}));

    let api = pod(&out, "api");
    assert_eq!(api["namespace"], "shop");
    assert_eq!(api["uid"], "6a4f2e3b-1c9d-4a5e-8f7b-2d3e4f5a6b7c");
    assert_eq!(api["qosClass"], "Guaranteed");
    assert_eq!(
        api["cgroup"],
        serde_json::json!({"memory.min": 536870912, "memory.max": 536870912})
    );
    assert_eq!(
        container(api, "api"),
        &serde_json::json!({"memory.min": 536870912, "memory.max": 536870912})
    );

    let web = pod(&out, "web");
    assert_eq!(web["qosClass"], "Burstable");
    // max(web 512Mi + proxy 64Mi, migrate 256Mi)
    assert_eq!(web["cgroup"], serde_json::json!({"memory.low": 576 * MI}));
    let names: Vec<_> = web["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["migrate", "proxy", "web"]);
    // 512Mi + 0.9 * 512Mi = 972.8Mi, floored to 4 KiB pages.
    assert_eq!(
        container(web, "web")["memory.high"],
        (512 * MI * 19 / 10) / 4096 * 4096
    );
    assert_eq!(container(web, "web")["memory.max"], 1024 * MI);

    let debug = pod(&out, "debug");
    assert_eq!(debug["qosClass"], "BestEffort");
    assert_eq!(debug["cgroup"], serde_json::json!({}));
    // BestEffort containers are throttled at 0.9 * the kubelet's node allocatable:
    // the Node's 15Gi plus the default hard eviction threshold (100Mi) it subtracts
    // (no --kubelet-config), floored to 4 KiB pages.
    assert_eq!(
        container(debug, "shell"),
        &serde_json::json!({"memory.high": (15 * 1024 + 100) * MI * 9 / 10 / 4096 * 4096})
    );
}

#[test]
fn database_pool_uses_hard_reservation() {
    let out = example("database");
    assert_eq!(out["policy"], "database");
    let pg0 = pod(&out, "pg-0");
    assert_eq!(pg0["qosClass"], "Guaranteed");
    // 16Gi + 128Mi + 64Mi overhead
    assert_eq!(pg0["cgroup"]["memory.min"], (16 * 1024 + 192) * MI);
    let pg1 = pod(&out, "pg-1");
    assert_eq!(pg1["qosClass"], "Burstable");
    assert_eq!(pg1["cgroup"]["memory.min"], 8 * 1024 * MI);
    assert_eq!(pg1["cgroup"]["memory.max"], 12 * 1024 * MI);
    assert_eq!(
        container(pg1, "exporter")["memory.max"],
        12 * 1024 * MI,
        "pod-level limit stands in"
    );
    assert!(container(pg1, "exporter").get("memory.min").is_none());
    assert_eq!(
        out["qos"]["burstable"],
        serde_json::json!({"memory.min": 9 * 1024 * MI})
    );
    assert_eq!(
        out["kubepods"]["memory.min"],
        (16 * 1024 + 192 + 9 * 1024) * MI
    );
    assert!(out["kubepods"].get("memory.low").is_none());
}

#[test]
fn batch_pool_throttles_besteffort_and_warns_about_the_kernel() {
    let out = example("batch");
    assert_eq!(out["policy"], "batch");
    let warnings = out["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].as_str().unwrap().contains("older than 5.9"));
    assert_eq!(out["kubepods"], serde_json::json!({}));
    for name in ["etl-1", "etl-2"] {
        let p = pod(&out, name);
        assert_eq!(p["qosClass"], "BestEffort");
        for c in p["containers"].as_array().unwrap() {
            // 0.8 * the kubelet's node allocatable: the Node's 30Gi + the default
            // 100Mi hard eviction threshold, floored to 4 KiB pages.
            assert_eq!(
                c["cgroup"],
                serde_json::json!({"memory.high": (30 * 1024 + 100) * MI * 8 / 10 / 4096 * 4096})
            );
        }
    }
}

#[test]
fn a_policy_that_does_not_select_the_node_sets_nothing() {
    let out = simulate_json(
        "examples/database/policy.yaml",
        "examples/general/node.yaml",
        "examples/general/pods.yaml",
    );
    assert_eq!(out["policy"], Value::Null);
    assert_eq!(out["kubepods"], serde_json::json!({}));
    assert_eq!(
        out["qos"],
        serde_json::json!({"burstable": {}, "besteffort": {}})
    );
    for p in out["pods"].as_array().unwrap() {
        assert_eq!(p["cgroup"], serde_json::json!({}));
        assert!(p["containers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["cgroup"] == serde_json::json!({})));
    }
    assert_eq!(pod(&out, "api")["qosClass"], "Guaranteed");
}

#[test]
fn table_output_and_page_size() {
    let (code, stdout, stderr) = nodemem(&[
        "simulate",
        "--policy",
        "examples/general/policy.yaml",
        "--node",
        "examples/general/node.yaml",
        "--pods",
        "examples/general/pods.yaml",
        "--page-size",
        "65536",
    ]);
    assert_eq!(code, 0, "{stderr}");
    // The node's kubelet (examples/general/node.yaml: v1.36.0) chooses the rules.
    assert!(
        stdout.starts_with(
            "node general-1: policy general; kubelet v1.36.0 (v1.36 rules: memory.high on containers only)\nCGROUP"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("shop/api"));
    assert!(stdout.contains("512Mi"));
    let (code, _, stderr) = nodemem(&[
        "simulate",
        "--policy",
        "examples/general/policy.yaml",
        "--node",
        "examples/general/node.yaml",
        "--pods",
        "examples/general/pods.yaml",
        "--page-size",
        "1000",
    ]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("--page-size: must be a positive power of two"),
        "{stderr}"
    );
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nodemem-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs simulate on a policy body (under spec:) and pods text; returns exit code and stderr.
fn simulate_bad(tag: &str, policy_spec: &str, pods: &str) -> (i32, String) {
    let dir = tempdir(tag);
    let policy = write(
        &dir,
        "policy.yaml",
        &format!("apiVersion: nodemem.io/v1alpha1\nkind: NodeMemoryPolicy\nmetadata:\n  name: bad\nspec:\n{policy_spec}"),
    );
    let pods = write(&dir, "pods.yaml", pods);
    let (code, stdout, stderr) = nodemem(&[
        "simulate",
        "--policy",
        &policy,
        "--node",
        "examples/general/node.yaml",
        "--pods",
        &pods,
        "-o",
        "json",
    ]);
    assert!(stdout.is_empty(), "no partial output on failure: {stdout}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).ok();
    (code, stderr)
}

const GOOD_POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: x\n";

#[test]
fn invalid_input_fails_with_one_line_per_problem() {
    let cases: &[(&str, &str, &str, &[&str])] = &[
        ("factor0", "  memoryQoS:\n    throttlingFactor: 0\n", GOOD_POD, &["spec.memoryQoS.throttlingFactor: must be greater than 0"]),
        ("factor15", "  memoryQoS:\n    throttlingFactor: 1.5\n", GOOD_POD, &["spec.memoryQoS.throttlingFactor: must be greater than 0 and less than or equal to 1, found 1.5"]),
        ("enum", "  memoryQoS:\n    reservationPolicy: Soft\n", GOOD_POD, &["spec.memoryQoS.reservationPolicy: unknown variant `Soft`"]),
        ("typo", "  memoryQoS:\n    throttlingfactor: 0.5\n", GOOD_POD, &["spec.memoryQoS.throttlingfactor: unknown field"]),
        (
            "quantity",
            "  memoryQoS:\n    reservationPolicy: TieredReservation\n",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: n}\nspec:\n  containers:\n  - name: c\n    image: x\n    resources:\n      limits: {memory: 12X}\n      requests: {memory: 1Gi, cpu: lots}\n",
            &[
                "Pod n/p: spec.containers[0].resources.requests.cpu: invalid quantity \"lots\"",
                "Pod n/p: spec.containers[0].resources.limits.memory: invalid quantity \"12X\": unknown suffix \"X\"",
            ],
        ),
        (
            "several",
            "  memoryQoS:\n    throttlingFactor: 2\n  memoryManager:\n    policy: Static\n    reservedMemory:\n    - numaNode: 0\n      limits: {memory: 1Gi}\n    - numaNode: 0\n      limits: {memory: 1Gi}\n  nodeReserved:\n    kubeReserved: 1Gi\n",
            GOOD_POD,
            &[
                "spec.memoryQoS.throttlingFactor: must be greater than 0",
                "spec.memoryManager.reservedMemory[1].numaNode: duplicate NUMA node 0",
                "spec.memoryManager.reservedMemory: reserved memory of type memory sums to 2Gi",
            ],
        ),
        ("yaml", "  memoryQoS: [\n", GOOD_POD, &["invalid YAML"]),
        (
            "pod-level",
            "  memoryQoS:\n    reservationPolicy: None\n",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  resources:\n    limits: {memory: 100Gi}\n  containers:\n  - {name: a, image: x, resources: {limits: {memory: 60Gi}}}\n  - {name: b, image: x, resources: {limits: {memory: 60Gi}}}\n",
            &["Pod p: spec.resources.requests.memory: must be less than or equal to the memory limit"],
        ),
        ("selector", "  nodeSelector:\n    matchExpressions:\n    - {key: pool, operator: In}\n", GOOD_POD, &["spec.nodeSelector.matchExpressions[0].values: must be specified"]),
        ("operator", "  nodeSelector:\n    matchExpressions:\n    - {key: pool, operator: Near, values: [a]}\n", GOOD_POD, &["operator: unknown variant `Near`"]),
        (
            "classes",
            "  enforcement: Observe\n  classes:\n  - name: Batch\n    throttlingFactor: 1.5\n  - name: web\n    memoryManager: {policy: Static}\n    reclaim: {mode: Active}\n  - name: web\n    throttlingFactor: 0.5\n    memoryHigh: None\n",
            GOOD_POD,
            &[
                "spec.classes[0].name: class name \"Batch\" must be a DNS label",
                "spec.classes[0].throttlingFactor: must be greater than 0 and less than or equal to 1, found 1.5",
                "spec.classes[1].memoryManager: a class cannot change the Memory Manager",
                "spec.classes[1].reclaim.mode: reclaim mode Active writes memory.reclaim",
                "spec.classes[2].throttlingFactor: throttlingFactor is not used with memoryHigh: None",
                "spec.classes[2].name: class \"web\" is named twice",
            ],
        ),
        ("classes-kubelet", "  enforcement: Kubelet\n  classes:\n  - name: batch\n", GOOD_POD, &["spec.classes: classes need enforcement: Agent or Observe"]),
    ];
    for (tag, spec, pods, want) in cases {
        let (code, stderr) = simulate_bad(tag, spec, pods);
        assert_eq!(code, 1, "{tag}: {stderr}");
        let lines: Vec<_> = stderr.lines().collect();
        assert_eq!(
            lines.len(),
            want.len(),
            "{tag}: one line per problem:\n{stderr}"
        );
        for w in *want {
            assert!(
                lines
                    .iter()
                    .any(|l| l.starts_with("error: ") && l.contains(w)),
                "{tag}: missing {w:?} in\n{stderr}"
            );
        }
    }
}

#[test]
fn missing_files_and_wrong_kinds_are_reported() {
    let (code, _, stderr) = nodemem(&[
        "simulate",
        "--policy",
        "nope.yaml",
        "--node",
        "examples/general/node.yaml",
        "--pods",
        "examples/general/pods.yaml",
    ]);
    assert_eq!(code, 1);
    assert!(
        stderr.starts_with("error: nope.yaml: cannot read"),
        "{stderr}"
    );
    let (code, _, stderr) = nodemem(&[
        "simulate",
        "--policy",
        "examples/general/pods.yaml",
        "--node",
        "examples/general/node.yaml",
        "--pods",
        "examples/general/node.yaml",
    ]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("expected apiVersion nodemem.io/v1alpha1 and kind NodeMemoryPolicy"),
        "{stderr}"
    );
    assert!(stderr.contains("expected kind Pod, found Node"), "{stderr}");
}

#[test]
fn crds_command_prints_and_checks_for_drift() {
    let (code, stdout, _) = nodemem(&["crds"]);
    assert_eq!(code, 0);
    assert_eq!(stdout.matches("kind: CustomResourceDefinition").count(), 2);
    let (code, stdout, stderr) = nodemem(&["crds", "--check", "crds"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("up to date"));
    let dir = tempdir("drift");
    let (code, _, _) = nodemem(&["crds", "--output-dir", dir.to_str().unwrap()]);
    assert_eq!(code, 0);
    let file = dir.join("nodememorypolicies.nodemem.io.yaml");
    std::fs::write(
        &file,
        std::fs::read_to_string(&file).unwrap().replace("nmp", "np"),
    )
    .unwrap();
    let (code, _, stderr) = nodemem(&["crds", "--check", dir.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        stderr.contains("nodememorypolicies.nodemem.io.yaml: differs"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// `nodemem.io/memory-qos: disabled` (beyond the kubelet, which has no such switch):
/// the pod gets no memory.min/low/high, is shown as opted out, and its request leaves
/// the parents' sums.
#[test]
fn an_opted_out_pod_gets_nothing_and_leaves_the_sums() {
    let base = example("general");
    let text =
        std::fs::read_to_string(cli_common::repo().join("examples/general/pods.yaml")).unwrap();
    // Opt the Burstable web pod out.
    let opted = text.replacen(
        "  name: web\n  namespace: shop\n",
        "  name: web\n  namespace: shop\n  annotations: {nodemem.io/memory-qos: disabled}\n",
        1,
    );
    assert_ne!(opted, text, "the example still has the web pod");
    let dir = std::env::temp_dir().join(format!("nodemem-optout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pods = dir.join("pods.yaml");
    std::fs::write(&pods, opted).unwrap();
    let out = simulate_json(
        "examples/general/policy.yaml",
        "examples/general/node.yaml",
        pods.to_str().unwrap(),
    );
    let web = pod(&out, "web");
    assert_eq!(web["optedOut"], true);
    assert!(
        pod(&out, "api").get("optedOut").is_none(),
        "only opted-out pods carry the key"
    );
    for c in web["containers"].as_array().unwrap() {
        for file in ["memory.min", "memory.low", "memory.high"] {
            assert!(c["cgroup"].get(file).is_none(), "{c}");
        }
    }
    for file in ["memory.min", "memory.low", "memory.high"] {
        assert!(web["cgroup"].get(file).is_none(), "{web}");
    }
    // web requested max(256Mi + 64Mi sidecar, 512Mi + 64Mi) = 576Mi: gone from the sums.
    let before = base["kubepods"]["memory.min"].as_i64().unwrap();
    assert_eq!(
        out["kubepods"]["memory.min"].as_i64().unwrap(),
        before - 576 * MI
    );
    assert_eq!(
        out["qos"]["burstable"]["memory.low"].as_i64().unwrap(),
        base["qos"]["burstable"]["memory.low"].as_i64().unwrap() - 576 * MI
    );
    std::fs::remove_dir_all(dir).ok();
}

/// The kubelet's ceiling for a container without a limit adds its hard eviction
/// threshold back to the Node's allocatable: `--kubelet-config` says which threshold.
#[test]
fn the_kubelet_config_gives_the_hard_eviction_threshold_for_memory_high() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nevictionHard:\n  memory.available: 50Mi\n",
    )
    .unwrap();
    let batch_with = |kubelet_config: &Path, more: &[&str]| {
        let mut args = vec![
            "simulate",
            "--policy",
            "examples/batch/policy.yaml",
            "--node",
            "examples/batch/node.yaml",
            "--pods",
            "examples/batch/pods.yaml",
            "--kubelet-config",
            kubelet_config.to_str().unwrap(),
        ];
        args.extend_from_slice(more);
        nodemem(&args)
    };
    let (code, stdout, stderr) = batch_with(&config, &["-o", "json"]);
    assert_eq!(code, 0, "stderr: {stderr}");
    let out: Value = serde_json::from_str(&stdout).unwrap();
    let c = container(
        pod(&out, "etl-1"),
        pod(&out, "etl-1")["containers"][0]["name"]
            .as_str()
            .unwrap(),
    );
    assert_eq!(
        c["memory.high"],
        (30 * 1024 + 50) * MI * 8 / 10 / 4096 * 4096
    );
    let missing = dir.path().join("absent.yaml");
    let (code, _, stderr) = batch_with(&missing, &[]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("--kubelet-config")
            && stderr.contains("absent.yaml")
            && stderr.to_lowercase().contains("no such file"),
        "{stderr}"
    );
}

/// A v1.38 node keeps v1.37's rules (the kubelet's own code of v1.38.0-beta.0 shows no
/// difference: TESTING.md, kubelet-oracle), and simulate says which rules it used.
#[test]
fn the_kubelet_version_of_the_node_names_the_rules_applied() {
    let dir = tempfile::tempdir().unwrap();
    let node = std::fs::read_to_string("examples/general/node.yaml")
        .or_else(|_| std::fs::read_to_string("../../examples/general/node.yaml"))
        .unwrap();
    for (version, said) in [
        ("v1.38.0-beta.0", "v1.38.0 (v1.37 rules: memory.high on the pod cgroup of a pod with pod-level resources)"),
        ("v1.37.2", "v1.37.2 (v1.37 rules: memory.high on the pod cgroup of a pod with pod-level resources)"),
        ("not-a-version", "\"not-a-version\" is not a version: the newest rules (v1.37: memory.high on the pod cgroup of a pod with pod-level resources)"),
    ] {
        let path = dir.path().join(format!("{version}.yaml"));
        std::fs::write(&path, node.replace("kubeletVersion: v1.36.0", &format!("kubeletVersion: {version}"))).unwrap();
        let out = simulate_json(
            "examples/general/policy.yaml",
            path.to_str().unwrap(),
            "examples/general/pods.yaml",
        );
        assert_eq!(out["kubeletRules"], said, "{version}");
    }
}

/// Workload classes (issue 63): each pod's class and where it came from, its values
/// under its class's settings, the parents' sums without the unprotected class, and a
/// class the policy does not have named in a warning.
#[test]
fn each_pod_shows_its_class_and_where_it_came_from() {
    let out = example("classes");
    let class = |name: &str| {
        let p = pod(&out, name);
        (p["class"].as_str(), p["classFrom"].as_str().unwrap())
    };
    assert_eq!(class("checkout"), (Some("service"), "namespace label"));
    assert_eq!(class("nightly-etl"), (Some("batch"), "pod annotation"));
    assert_eq!(class("api"), (None, "pool"));
    assert_eq!(
        class("report"),
        (None, "pool"),
        "gold is not a class of the policy"
    );
    // service: protected as the pool, no memory.high.
    let checkout = container(pod(&out, "checkout"), "app");
    assert_eq!(checkout["memory.low"], 1024 * MI);
    assert!(checkout.get("memory.high").is_none(), "{checkout}");
    // batch: memory.high at 0.5 of the headroom (512Mi + 0.5 x 3584Mi), no protection.
    let etl = container(pod(&out, "nightly-etl"), "etl");
    assert_eq!(etl["memory.high"], 2304 * MI);
    assert!(etl.get("memory.low").is_none(), "{etl}");
    // the pool's: its factor 0.9 (256Mi + 0.9 x 768Mi, floored to the page).
    let api = container(pod(&out, "api"), "api");
    assert_eq!(
        api["memory.high"],
        (256 * MI + (0.9 * (768 * MI) as f64) as i64) / 4096 * 4096
    );
    // The parents protect the protected pods only: 1Gi + 256Mi + 128Mi.
    assert_eq!(out["qos"]["burstable"]["memory.low"], 1408 * MI);
    assert_eq!(out["kubepods"]["memory.min"], 1408 * MI);
    let warnings = out["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| {
            let w = w.as_str().unwrap();
            w.contains("web/report") && w.contains("\"gold\"") && w.contains("service, batch")
        }),
        "{warnings:?}"
    );
    // A node where no pod names a class reads as before: no classFrom.
    let general = example("general");
    assert!(general["pods"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p.get("classFrom").is_none() && p.get("class").is_none()));
    // The table's CLASS column.
    let (code, table, _) = nodemem(&[
        "simulate",
        "--policy",
        "examples/classes/policy.yaml",
        "--node",
        "examples/classes/node.yaml",
        "--pods",
        "examples/classes/pods.yaml",
    ]);
    assert_eq!(code, 0);
    assert!(table.contains("CLASS"), "{table}");
    assert!(table.contains("batch (pod annotation)"), "{table}");
    assert!(table.contains("service (namespace label)"), "{table}");
}
