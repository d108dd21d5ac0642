//! Safe rollout defaults (issue 44, item 9) as the apiserver applies them: a policy
//! without a rollout section gets a canary of one node and minReadySeconds 60; a
//! rollout section that names neither gets minReadySeconds 60 and no canary; a policy
//! stored under the previous release's CRDs keeps what was stored with it
//! (minReadySeconds 0, no canary) after this release's CRDs are applied, since the
//! apiserver fills in only what is absent.

use nodemem_testkit::Identity;
use serde_json::{json, Value};

use crate::common::{own_control_plane, policies, repo};

#[tokio::test]
async fn new_policies_roll_out_gradually_and_stored_ones_keep_their_values() {
    let cp = own_control_plane().await;
    let admin = cp.admin_kubeconfig().to_path_buf();
    let kubectl = |args: &[&str]| {
        nodemem_testkit::clients::kubectl(&admin, args).unwrap_or_else(|e| panic!("{e}"))
    };
    let apply = |dir: &str| {
        let path = repo().join(dir).join("nodememorypolicies.nodemem.io.yaml");
        kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            path.to_str().unwrap(),
        ]);
        kubectl(&[
            "wait",
            "--for=condition=Established",
            "crd/nodememorypolicies.nodemem.io",
        ]);
    };
    let client = cp.client(&Identity::Admin).await.unwrap();
    let policies = policies(client);
    let create = |name: &'static str, rollout: Option<Value>| {
        let policies = policies.clone();
        async move {
            let mut spec = json!({"nodeSelector": {"matchLabels": {"nodemem.io/pool": name}},
                "memoryQoS": {"throttlingFactor": 0.8}});
            if let Some(r) = rollout {
                spec["rollout"] = r;
            }
            crate::common::create_policy(&policies, name, spec).await;
        }
    };
    let rollout = |name: &str| -> Value {
        let text = kubectl(&["get", "nmp", name, "-o", "jsonpath={.spec.rollout}"]);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}: {text}"))
    };

    // The previous release's CRDs: its defaults are stored with the object.
    apply("tests/fixtures/chart-previous/crds");
    create("stored", None).await;
    let stored = rollout("stored");
    assert_eq!(stored["minReadySeconds"], 0, "{stored}");
    assert!(stored.get("canary").is_none(), "{stored}");

    // This release's CRDs.
    apply("crds");
    let kept = rollout("stored");
    assert_eq!(kept, stored, "a stored policy keeps its rollout");
    create("fresh", None).await;
    let fresh = rollout("fresh");
    assert_eq!(fresh["canary"], 1, "{fresh}");
    assert_eq!(fresh["minReadySeconds"], 60, "{fresh}");
    assert_eq!(fresh["maxUnavailable"], 1, "{fresh}");
    create("partial", Some(json!({"maxUnavailable": "25%"}))).await;
    let partial = rollout("partial");
    assert_eq!(partial["minReadySeconds"], 60, "{partial}");
    assert!(partial.get("canary").is_none(), "{partial}");
    // And as the controller reads them: the same values, nothing filled in twice.
    for (name, canary, ready) in [
        ("stored", None, 0),
        ("fresh", Some(1), 60),
        ("partial", None, 60),
    ] {
        let text = kubectl(&["get", "nmp", name, "-o", "json"]);
        let p: nodemem_api::NodeMemoryPolicy = serde_json::from_str(&text).unwrap();
        assert_eq!(
            p.spec.rollout.canary,
            canary.map(nodemem_api::int_or_percent::IntOrPercent::Int),
            "{name}"
        );
        assert_eq!(p.spec.rollout.min_ready_seconds, ready, "{name}");
    }
}
