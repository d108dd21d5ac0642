//! The generated CRDs load back, match `crds/` byte for byte, and have structural
//! schemas the apiserver accepts: typed nodes everywhere, no `$ref`, a description on
//! every field, and the list-map and CEL markers the issue asks for.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use nodemem_api::crdgen::{crds, render};
use serde_json::Value;

/// Read at run time (cargo sets it for the test): a target directory shared by two
/// checkouts keeps a test built in the other one while its sources are unchanged.
fn crds_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .join("../../crds")
}

#[test]
fn checked_in_crds_match_the_rust_types() {
    for (file, crd) in crds() {
        let path = crds_dir().join(file);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(
            text,
            render(&crd),
            "{file} drifted: run `cargo run -p nodemem -- crds --output-dir crds`"
        );
        let loaded: CustomResourceDefinition =
            serde_yaml::from_str(&text).expect("valid apiextensions.k8s.io/v1 CRD");
        assert_eq!(loaded, crd);
    }
}

fn schema(crd: &CustomResourceDefinition) -> Value {
    let v = &crd.spec.versions[0];
    serde_json::to_value(
        v.schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

/// Walks a schema checking the structural rules the apiserver enforces.
fn check_structural(node: &Value, path: &str, problems: &mut Vec<String>) {
    let Some(obj) = node.as_object() else { return };
    if obj.contains_key("$ref") {
        problems.push(format!("{path}: $ref is not allowed"));
    }
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    // As the apiserver's structural check (apiextensions-apiserver
    // `validateStructuralCompleteness`): a node that preserves unknown fields may go
    // without a type (a class's refused fields, any value kept for their rule).
    let preserved = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if !int_or_string && !preserved && !obj.contains_key("type") && !path.is_empty() {
        problems.push(format!("{path}: missing type"));
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            let p = format!("{path}.{name}");
            let described = prop
                .get("description")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty());
            // The root's apiVersion/kind/metadata come from kube and need no text.
            if !described && !path.is_empty() {
                problems.push(format!("{p}: missing description"));
            }
            check_structural(prop, &p, problems);
        }
    }
    if let Some(items) = obj.get("items") {
        check_structural(items, &format!("{path}[]"), problems);
    }
    if let Some(ap) = obj.get("additionalProperties") {
        if ap.is_object() {
            check_structural(ap, &format!("{path}{{}}"), problems);
        }
    }
    for key in ["anyOf", "allOf", "oneOf"] {
        for branch in obj.get(key).and_then(Value::as_array).into_iter().flatten() {
            if branch.get("type").is_some() && !int_or_string {
                problems.push(format!("{path}: {key} branches must not set type"));
            }
        }
    }
}

#[test]
fn schemas_are_structural_and_documented() {
    for (file, crd) in crds() {
        let mut problems = Vec::new();
        check_structural(&schema(&crd), "", &mut problems);
        assert!(problems.is_empty(), "{file}: {problems:#?}");
    }
}

/// Scope, short name and status subresource shared by both CRDs; returns the
/// printer column names.
fn check_names(crd: &CustomResourceDefinition, short: &str) -> Vec<String> {
    assert_eq!(crd.spec.scope, "Cluster");
    assert_eq!(
        crd.spec.names.short_names.as_deref(),
        Some(&[short.to_string()][..])
    );
    let version = &crd.spec.versions[0];
    assert!(version.subresources.as_ref().unwrap().status.is_some());
    version
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.name.clone())
        .collect()
}

#[test]
fn policy_crd_has_the_promised_shape() {
    let (_, crd) = &crds()[0];
    let columns = check_names(crd, "nmp");
    assert_eq!(
        columns,
        [
            "Factor",
            "Reservation",
            "Manager",
            "Enforcement",
            "Matched",
            "Updated",
            "Ready",
            "Rollout",
            "Age",
            // -o wide: the spec's revision beside the one the pool runs or moves to,
            // the nodes still leaving the policy, and whether memory.high is written
            // (with None the Factor column is not used), the selected nodes the
            // agent cannot run on, and the reclaim asked for.
            "Revision",
            "Target",
            "Leaving",
            "MemoryHigh",
            "Excluded",
            "Reclaim"
        ]
    );
    let wide: Vec<i32> = crd.spec.versions[0]
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .filter(|c| {
            [
                "Revision",
                "Target",
                "Leaving",
                "MemoryHigh",
                "Excluded",
                "Reclaim",
            ]
            .contains(&c.name.as_str())
        })
        .map(|c| c.priority.unwrap_or(0))
        .collect();
    assert_eq!(wide, [1, 1, 1, 1, 1, 1], "shown with -o wide only");
    assert_eq!(
        schema(crd)["properties"]["spec"]["properties"]["memoryQoS"]["properties"]["memoryHigh"],
        serde_json::json!({
            "description": "Throttle (the default): memory.high from throttlingFactor, as a kubelet with\nmemoryThrottlingFactor set. None: no memory.high on any cgroup, as a v1.37\nkubelet whose memoryThrottlingFactor is unset (its default); protection\n(reservationPolicy) is unaffected.",
            "type": "string",
            "enum": ["Throttle", "None"],
            "default": "Throttle"
        })
    );
    let s = schema(crd);
    let spec = &s["properties"]["spec"]["properties"];
    assert_eq!(
        spec["memoryQoS"]["properties"]["throttlingFactor"]["exclusiveMinimum"],
        Value::Bool(true)
    );
    assert_eq!(
        spec["memoryQoS"]["properties"]["throttlingFactor"]["maximum"],
        serde_json::json!(1.0)
    );
    assert_eq!(
        spec["memoryQoS"]["properties"]["throttlingFactor"]["default"],
        serde_json::json!(0.9)
    );
    assert_eq!(
        spec["memoryQoS"]["properties"]["reservationPolicy"]["enum"],
        serde_json::json!(["None", "TieredReservation", "HardReservation"])
    );
    let reserved = &spec["memoryManager"]["properties"]["reservedMemory"];
    assert_eq!(reserved["x-kubernetes-list-type"], "map");
    assert_eq!(
        reserved["x-kubernetes-list-map-keys"],
        serde_json::json!(["numaNode"])
    );
    assert_eq!(
        reserved["items"]["properties"]["numaNode"]["minimum"],
        serde_json::json!(0.0)
    );
    let limits = &reserved["items"]["properties"]["limits"];
    assert!(limits["x-kubernetes-validations"][0]["rule"]
        .as_str()
        .unwrap()
        .contains("hugepages-"));
    assert!(
        spec["memoryManager"]["x-kubernetes-validations"]
            .as_array()
            .unwrap()
            .len()
            >= 2
    );
    assert_eq!(
        spec["rollout"]["properties"]["maxUnavailable"]["x-kubernetes-int-or-string"],
        Value::Bool(true)
    );
    let status = &s["properties"]["status"]["properties"];
    for field in [
        "observedGeneration",
        "revision",
        "matchedNodes",
        "updatedNodes",
        "readyNodes",
        "failedNodes",
        "conflictingNodes",
        "conditions",
    ] {
        assert!(status.get(field).is_some(), "status.{field}");
    }
}

#[test]
fn config_crd_has_the_promised_shape() {
    let (_, crd) = &crds()[1];
    let columns = check_names(crd, "nmc");
    assert_eq!(
        columns,
        [
            "Policy",
            "Revision",
            "Applied",
            "Healthy",
            "Kernel",
            "Age",
            // -o wide: the reclaim the node runs, as its agent reports it.
            "Reclaim",
            "Reclaimed",
            "Reclaimable"
        ]
    );
    let wide: Vec<i32> = crd.spec.versions[0]
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .filter(|c| c.name.starts_with("Reclaim"))
        .map(|c| c.priority.unwrap_or(0))
        .collect();
    assert_eq!(wide, [1, 1, 1], "shown with -o wide only");
    let s = schema(crd);
    let status = &s["properties"]["status"]["properties"];
    for field in [
        "observedRevision",
        "conditions",
        "node",
        "totals",
        "managedPods",
        "lastError",
    ] {
        assert!(status.get(field).is_some(), "status.{field}");
    }
    let node = &status["node"]["properties"];
    for field in [
        "kernelVersion",
        "cgroupVersion",
        "cgroupDriver",
        "pageSize",
        "numaNodes",
    ] {
        assert!(node.get(field).is_some(), "status.node.{field}");
    }
}

/// kubectl and Helm read YAML as 1.1 does, where an unquoted on, off, yes, no, y or n
/// is a boolean: an enum value or default spelt so would reach the apiserver as
/// `true` from a user's `mode: On` (found: reclaim's modes were On and Off, and Helm's
/// install of the CRDs turned them into booleans). No such string in either schema.
#[test]
fn no_enum_value_or_default_is_a_yaml_1_1_boolean() {
    fn walk(at: &str, v: &Value, found: &mut Vec<String>) {
        const BOOLEANS: [&str; 10] = [
            "y", "yes", "n", "no", "on", "off", "true", "false", "~", "null",
        ];
        let bad = |s: &Value| {
            s.as_str()
                .is_some_and(|s| BOOLEANS.contains(&s.to_ascii_lowercase().as_str()))
        };
        match v {
            Value::Object(m) => {
                for (k, child) in m {
                    let path = format!("{at}.{k}");
                    if k == "enum" || k == "default" {
                        let values = child
                            .as_array()
                            .cloned()
                            .unwrap_or_else(|| vec![child.clone()]);
                        found.extend(
                            values
                                .iter()
                                .filter(|s| bad(s))
                                .map(|s| format!("{path}: {s}")),
                        );
                    }
                    walk(&path, child, found);
                }
            }
            Value::Array(a) => a.iter().for_each(|c| walk(at, c, found)),
            _ => {}
        }
    }
    for (file, crd) in crds() {
        let mut found = Vec::new();
        walk("", &schema(&crd), &mut found);
        assert!(found.is_empty(), "{file}: {found:?}");
    }
}
