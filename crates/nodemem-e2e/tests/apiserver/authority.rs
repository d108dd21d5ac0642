//! The node agent's authority (deploy/agent): RBAC lets it read what it watches and
//! write NodeMemoryConfig status and Events, nothing else; the ValidatingAdmissionPolicy
//! narrows each agent to the NodeMemoryConfig of the node bound into its token.

use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::Client;
use nodemem_api::NodeMemoryConfig;
use nodemem_testkit::nodes::SimNode;
use nodemem_testkit::Identity;
use serde_json::json;

use crate::common::{admin, cluster, object, repo};

/// Applies every object of a manifest file (server-side apply, as the chart will).
pub async fn apply_manifest(client: &Client, path: &str) {
    let text = std::fs::read_to_string(repo().join(path)).unwrap();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        if value.is_null() {
            continue;
        }
        let obj: DynamicObject = serde_json::from_value(value.clone()).unwrap();
        let types = obj.types.clone().expect("apiVersion and kind");
        let gvk = GroupVersionKind::try_from(&types).unwrap();
        let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
        let api: Api<DynamicObject> = match (&caps.scope, obj.metadata.namespace.as_deref()) {
            (kube::discovery::Scope::Namespaced, Some(ns)) => {
                Api::namespaced_with(client.clone(), ns, &resource)
            }
            _ => Api::all_with(client.clone(), &resource),
        };
        let name = obj.metadata.name.clone().unwrap();
        api.patch(
            &name,
            &PatchParams::apply("nodemem-test").force(),
            &Patch::Apply(&value),
        )
        .await
        .unwrap_or_else(|e| panic!("{path}: {name}: {e}"));
    }
}

fn configs(client: Client) -> Api<DynamicObject> {
    Api::all_with(client, &ApiResource::erase::<NodeMemoryConfig>(&()))
}

fn config(name: &str) -> DynamicObject {
    object(json!({
        "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
        "metadata": {"name": name},
        "spec": {"policy": "authority", "revision": "f46c4865d690dda5"},
    }))
}

fn status_patch(revision: &str) -> serde_json::Value {
    json!({
        "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
        "status": {"observedRevision": revision, "managedPods": 1},
    })
}

fn denied(result: &Result<DynamicObject, kube::Error>) -> Option<String> {
    match result {
        Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => Some(s.message.clone()),
        _ => None,
    }
}

#[tokio::test]
async fn each_agent_writes_only_its_own_nodes_config_status() {
    let cp = cluster();
    let client = admin().await;
    apply_manifest(&client, "deploy/namespace.yaml").await;
    apply_manifest(&client, "deploy/agent/rbac.yaml").await;
    apply_manifest(&client, "deploy/agent/admission-policy.yaml").await;
    for node in ["authority-a", "authority-b"] {
        SimNode::new(node).register(&client).await.unwrap();
        configs(client.clone())
            .create(&PostParams::default(), &config(node))
            .await
            .unwrap();
    }
    let agent_a = configs(
        cp.client(&Identity::Agent("authority-a".into()))
            .await
            .unwrap(),
    );
    let ssa = PatchParams::apply("nodemem-agent");

    // Its own status: allowed.
    let own = agent_a
        .patch_status("authority-a", &ssa, &Patch::Apply(status_patch("r1")))
        .await;
    assert!(own.is_ok(), "{own:?}");
    // Another node's status: denied by the admission policy, with a message that says
    // why. The policy is compiled asynchronously; until then only RBAC answers.
    let deadline = Instant::now() + Duration::from_secs(30);
    let message = loop {
        let other = agent_a
            .patch_status("authority-b", &ssa, &Patch::Apply(status_patch("r1")))
            .await;
        match denied(&other) {
            Some(m) => break m,
            None if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(250)).await
            }
            None => panic!("node A's agent wrote node B's status: {other:?}"),
        }
    };
    assert!(
        message.contains(
            "the nodemem agent may only change the NodeMemoryConfig of its own node (authority-a), not authority-b"
        ),
        "{message}"
    );
    assert!(message.contains("nodemem-agent-node-scope"), "{message}");
    let b = configs(client.clone())
        .get_status("authority-b")
        .await
        .unwrap();
    assert!(
        b.data
            .get("status")
            .is_none_or(|s| s.get("observedRevision").is_none()),
        "{b:?}"
    );

    // Its own status still works after the policy is active; the write landed.
    agent_a
        .patch_status("authority-a", &ssa, &Patch::Apply(status_patch("r2")))
        .await
        .unwrap();
    let a = configs(client.clone())
        .get_status("authority-a")
        .await
        .unwrap();
    assert_eq!(a.data["status"]["observedRevision"], "r2");

    // RBAC: read what it watches; never create configs, change specs or delete.
    agent_a
        .get("authority-b")
        .await
        .expect("reading any config is allowed");
    let agent_client = cp
        .client(&Identity::Agent("authority-a".into()))
        .await
        .unwrap();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::all(agent_client.clone());
    pods.list(&ListParams::default().fields("spec.nodeName=authority-a"))
        .await
        .expect("listing its node's pods");
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(agent_client.clone());
    nodes.get("authority-a").await.expect("reading its node");
    let created = agent_a
        .create(&PostParams::default(), &config("authority-c"))
        .await;
    assert!(
        matches!(&created, Err(kube::Error::Api(s)) if s.code == 403),
        "{created:?}"
    );
    let spec = agent_a
        .patch(
            "authority-a",
            &ssa,
            &Patch::Apply(json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
                "spec": {"policy": "mine", "revision": "x"},
            })),
        )
        .await;
    assert!(
        matches!(&spec, Err(kube::Error::Api(s)) if s.code == 403),
        "{spec:?}"
    );
    let deleted = agent_a.delete("authority-a", &Default::default()).await;
    assert!(
        matches!(&deleted, Err(kube::Error::Api(s)) if s.code == 403),
        "{deleted:?}"
    );
    let node_patch = nodes
        .patch(
            "authority-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await;
    assert!(
        matches!(&node_patch, Err(kube::Error::Api(s)) if s.code == 403),
        "{node_patch:?}"
    );
    // Events: allowed.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(agent_client, "default");
    events
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"generateName": "nodemem-agent-"},
                "involvedObject": {"apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig", "name": "authority-a"},
                "reason": "Applied", "message": "test", "type": "Normal",
            }))
            .unwrap(),
        )
        .await
        .expect("the agent creates events");

    // A service-account token bound to no node changes nothing.
    let unbound_identity = Identity::User {
        name: "system:serviceaccount:nodemem-system:nodemem-agent".into(),
        groups: vec![
            "system:serviceaccounts".into(),
            "system:authenticated".into(),
        ],
    };
    let unbound = configs(cp.client(&unbound_identity).await.unwrap());
    let denied_unbound = unbound
        .patch_status("authority-a", &ssa, &Patch::Apply(status_patch("r3")))
        .await;
    let message = denied(&denied_unbound).unwrap_or_else(|| panic!("{denied_unbound:?}"));
    assert!(
        message.contains("(its token is bound to no node), not authority-a"),
        "{message}"
    );
}
