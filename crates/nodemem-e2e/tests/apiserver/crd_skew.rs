//! A controller newer than the CRDs it finds (issue 41, item 2: Helm never upgrades
//! `crds/`): the installed policy CRD lacks a field this build uses, so the apiserver
//! prunes it. The controller names the field, in its log and as `CRDOutdated` on the
//! policy, instead of losing it silently; once this release's CRDs are applied
//! (`kubectl apply --server-side --force-conflicts -f crds/`, the documented upgrade
//! step) it says the CRDs are current. The older CRD also lacks the status fields that
//! name the nodes nodemem's agent cannot run on, and the pool has such a node: the
//! controller leaves those fields out of its status writes (server-side apply refuses
//! an undeclared field, and the whole status went unwritten with it) and writes them
//! once the CRDs are current.

use std::time::Duration;

use nodemem_testkit::Identity;
use serde_json::{json, Value};

use crate::common::{condition, eventually, own_control_plane, policies, repo};

/// A controller newer than its CRDs names the pruned field as `CRDOutdated` until the
/// CRDs are applied; with a Windows node in the pool and a CRD without `excludedNodes`
/// and `excludedNodeNames`, the status is still written, without them (with them in the
/// patch the controller's server-side apply of status failed, and this test with it:
/// checked 2026-11-29 by taking the fix out), and names the node once the current CRDs
/// are applied.
#[tokio::test]
async fn a_controller_newer_than_its_crds_names_the_fields_they_prune() {
    let cp = own_control_plane().await;
    let admin = cp.admin_kubeconfig().to_path_buf();
    let kubectl = |args: &[&str]| {
        nodemem_testkit::clients::kubectl(&admin, args).unwrap_or_else(|e| panic!("{e}"))
    };
    // The CRD of a release before maxReliefs: the current one without it.
    let current = repo().join("crds/nodememorypolicies.nodemem.io.yaml");
    let mut older: Value =
        serde_yaml::from_str(&std::fs::read_to_string(&current).unwrap()).unwrap();
    let schema = older
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema")
        .expect("the schema");
    assert!(
        forget(schema, "maxReliefs"),
        "maxReliefs in the current CRD"
    );
    // A release before excluded nodes were counted.
    for field in ["excludedNodes", "excludedNodeNames"] {
        assert!(forget(schema, field), "{field} in the current CRD");
    }
    let dir = tempfile::tempdir().unwrap();
    let older_file = dir.path().join("older.json");
    std::fs::write(&older_file, older.to_string()).unwrap();
    kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        older_file.to_str().unwrap(),
    ]);

    let client = cp.client(&Identity::Admin).await.unwrap();
    let policies = policies(client.clone());
    // A Windows node in the pool: nodemem's agent does not run there, the status
    // names it (once the CRD has the fields).
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    nodes
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": "skew-win", "labels":
                {"nodemem.io/pool": "skew", "kubernetes.io/os": "windows"}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    crate::common::create_policy(
        &policies,
        "skew",
        json!({"nodeSelector": {"matchLabels": {"nodemem.io/pool": "skew"}},
                    "memoryQoS": {"throttlingFactor": 0.8},
                    "rollout": {"health": {"maxReliefs": 3}}}),
    )
    .await;
    let stored = kubectl(&[
        "get",
        "nmp",
        "skew",
        "-o",
        "jsonpath={.spec.rollout.health}",
    ]);
    assert!(
        !stored.contains("maxReliefs"),
        "the older CRD prunes it: {stored}"
    );

    let log = dir.path().join("controller.log");
    let _controller = crate::common::spawn_controller(
        &cp.kubeconfig(&Identity::Controller).await.unwrap(),
        "crd-skew",
        "nodemem:test",
        &log,
    );
    let logs = || std::fs::read_to_string(&log).unwrap_or_default();
    let outdated = |truth: &'static str| {
        let policies = policies.clone();
        async move || {
            let s = policies
                .get_status("skew")
                .await
                .ok()?
                .data
                .get("status")?
                .clone();
            condition(&s, "CRDOutdated")
                .filter(|c| c["status"] == truth)
                .cloned()
        }
    };
    let said = eventually(
        "CRDOutdated=True",
        Duration::from_secs(30),
        &logs,
        outdated("True"),
    )
    .await;
    assert_eq!(said["reason"], "FieldsMissing", "{said}");
    let message = said["message"].as_str().unwrap();
    assert!(
        message.contains("nodememorypolicies.nodemem.io lacks spec.rollout.health.maxReliefs"),
        "{message}"
    );
    assert!(message.contains("status.excludedNodeNames"), "{message}");
    assert!(
        logs().contains("spec.rollout.health.maxReliefs"),
        "the log names the field:\n{}",
        logs()
    );
    let written: Value = serde_json::from_str(&kubectl(&[
        "get",
        "nmp",
        "skew",
        "-o",
        "jsonpath={.status}",
    ]))
    .unwrap();
    assert!(
        written.get("excludedNodes").is_none() && written.get("excludedNodeNames").is_none(),
        "nothing the older CRD lacks: {written}"
    );

    // This release's CRDs, as the upgrade notes say: the gap is gone within the
    // controller's next reading, and the field is kept from then on.
    kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        current.to_str().unwrap(),
    ]);
    let cleared = eventually(
        "CRDOutdated=False after the CRDs are applied",
        Duration::from_secs(75),
        &logs,
        outdated("False"),
    )
    .await;
    assert_eq!(cleared["reason"], "AsExpected", "{cleared}");
    let names = eventually(
        "the excluded node named in status once the CRD has the field",
        Duration::from_secs(30),
        &logs,
        async || {
            let s = policies
                .get_status("skew")
                .await
                .ok()?
                .data
                .get("status")?
                .clone();
            (s["excludedNodeNames"][0]["name"] == "skew-win").then_some(s)
        },
    )
    .await;
    assert_eq!(names["excludedNodes"], 1, "{names}");
    kubectl(&[
        "patch",
        "nmp",
        "skew",
        "--type=merge",
        "-p",
        r#"{"spec": {"rollout": {"health": {"maxReliefs": 3}}}}"#,
    ]);
    let stored = kubectl(&[
        "get",
        "nmp",
        "skew",
        "-o",
        "jsonpath={.spec.rollout.health.maxReliefs}",
    ]);
    assert_eq!(stored, "3");
}

/// Removes `field` everywhere in `schema`: its property, and its value in defaults
/// (the apiserver refuses a default with a field its schema does not have). True
/// when it was there.
fn forget(schema: &mut Value, field: &str) -> bool {
    match schema {
        Value::Object(map) => {
            let mut found = map.remove(field).is_some();
            for v in map.values_mut() {
                found |= forget(v, field);
            }
            found
        }
        Value::Array(items) => {
            let before = items.len();
            items.retain(|v| v != field);
            let mut found = items.len() != before;
            for v in items.iter_mut() {
                found |= forget(v, field);
            }
            found
        }
        _ => false,
    }
}
