//! The node agent's authority (deploy/agent): RBAC lets it read what it watches and
//! write NodeMemoryConfig status and Events, nothing else; the ValidatingAdmissionPolicy
//! narrows each agent to the NodeMemoryConfig of the node bound into its token.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
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
    let nodes: Api<Node> = Api::all(agent_client.clone());
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
    // Events: about its own node's config or a pod, reported as its own node.
    agent_events_are_scoped_to_its_node(&client, agent_client).await;

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

fn event(reporter: &str, kind: &str, name: &str) -> Event {
    let namespace = if kind == "Pod" {
        "kube-system"
    } else {
        "default"
    };
    serde_json::from_value(json!({
        "metadata": {"generateName": "nodemem-agent-", "namespace": namespace},
        "eventTime": "2026-11-27T10:00:00.000000Z",
        "reportingController": "nodemem-agent", "reportingInstance": reporter,
        "action": "Apply", "reason": "Applied", "note": "test", "type": "Normal",
        "regarding": {"apiVersion": if kind == "Pod" { "v1" } else { "nodemem.io/v1alpha1" },
            "kind": kind, "name": name, "namespace": if kind == "Pod" { Some(namespace) } else { None }},
    }))
    .unwrap()
}

fn dry_run_post() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

fn event_api(client: &Client, kind: &str) -> Api<Event> {
    Api::namespaced(
        client.clone(),
        if kind == "Pod" {
            "kube-system"
        } else {
            "default"
        },
    )
}

/// Waits out the policy's compilation (until then only RBAC answers), then returns the
/// admission policy's refusal; fails with the last answer when the write is still taken,
/// or refused by anything else, after 30 s. The writes are dry runs (admission runs,
/// nothing is kept): a write taken before the policy answers would make the next one no
/// change.
async fn refused<T, F, Fut>(what: &str, mut write: F) -> String
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
    T: std::fmt::Debug,
{
    let last = std::cell::RefCell::new(String::new());
    nodemem_e2e::eventually(
        &format!("the admission policy to refuse: {what}"),
        Duration::from_secs(30),
        &|| format!("the last answer: {}", last.borrow()),
        async || match write().await {
            Err(kube::Error::Api(s))
                if s.code == 403 && s.message.contains("ValidatingAdmissionPolicy") =>
            {
                Some(s.message)
            }
            other => {
                *last.borrow_mut() = format!("{other:?}");
                None
            }
        },
    )
    .await
}

/// The agent's Events (deploy/agent/admission-policy.yaml, nodemem-agent-event-scope):
/// reported as its own node, about its own node's config or a pod; counting up another
/// node's Event is refused; core/v1 Events are not its API at all (RBAC).
async fn agent_events_are_scoped_to_its_node(admin: &Client, agent: Client) {
    // Another node's config, another reporter, another kind: refused, each named.
    let own = |kind: &str, name: &str| event("authority-a", kind, name);
    let cases = [
        (event("authority-b", "NodeMemoryConfig", "authority-a"),
            "a nodemem agent's Event reports as its own node (authority-a), not as authority-b"),
        (own("NodeMemoryConfig", "authority-b"),
            "a nodemem agent's Event regards its own node's NodeMemoryConfig (authority-a) or a Pod, not NodeMemoryConfig authority-b"),
        (own("Node", "authority-b"),
            "or a Pod, not Node authority-b"),
        (own("Deployment", "web"),
            "or a Pod, not Deployment web"),
    ];
    for (ev, says) in cases {
        let kind = ev.regarding.as_ref().unwrap().kind.clone().unwrap();
        let api = event_api(&agent, &kind);
        let post = dry_run_post();
        let message = refused(says, || api.create(&post, &ev)).await;
        assert!(message.contains(says), "{message}");
        assert!(message.contains("nodemem-agent-event-scope"), "{message}");
    }
    // Its own config and a pod: taken, and counted up (a series is an update).
    for (kind, name) in [("NodeMemoryConfig", "authority-a"), ("Pod", "web-0")] {
        let api = event_api(&agent, kind);
        let created = api
            .create(&PostParams::default(), &own(kind, name))
            .await
            .unwrap_or_else(|e| panic!("the agent's event about {kind} {name}: {e}"));
        let name = created.metadata.name.clone().unwrap();
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"series": {"count": 2, "lastObservedTime": "2026-11-27T10:01:00.000000Z"}}),
            ),
        )
        .await
        .expect("counting up its own event");
    }
    // Another node's Event: not the agent's to count up.
    let theirs = event_api(admin, "NodeMemoryConfig")
        .create(
            &PostParams::default(),
            &event("authority-b", "NodeMemoryConfig", "authority-b"),
        )
        .await
        .unwrap();
    let api = event_api(&agent, "NodeMemoryConfig");
    let name = theirs.metadata.name.clone().unwrap();
    let params = PatchParams::default().dry_run();
    let count = Patch::Merge(
        json!({"series": {"count": 2, "lastObservedTime": "2026-11-27T10:01:00.000000Z"}}),
    );
    let message = refused("counting up another node's event", || {
        api.patch(&name, &params, &count)
    })
    .await;
    assert!(
        message.contains(
            "a nodemem agent's Event reports as its own node (authority-a), not as authority-b"
        ),
        "{message}"
    );
    // Nor made its own: the reporting instance is immutable (the apiserver's validation,
    // before admission), which the policy relies on.
    let taken = api
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"reportingInstance": "authority-a"})),
        )
        .await;
    assert!(
        matches!(&taken, Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains("reportingInstance")),
        "{taken:?}"
    );
    // core/v1 Events: RBAC grants only events.k8s.io, which the policy covers.
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(agent, "default");
    let created = core
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"generateName": "nodemem-agent-"},
                "involvedObject": {"kind": "NodeMemoryConfig", "name": "authority-a"},
                "reason": "Applied", "message": "test", "type": "Normal",
            }))
            .unwrap(),
        )
        .await;
    assert!(
        matches!(&created, Err(kube::Error::Api(s)) if s.code == 403),
        "{created:?}"
    );
}

/// The controller's Node patch (deploy/controller/admission-policy.yaml): cordon,
/// uncordon and its drain annotations are taken; a label, a taint, another annotation
/// are refused, though RBAC grants `patch` on Nodes. On a control plane of its own: the
/// shared one's controller identity has no RBAC until a test grants it
/// (`identities.rs`).
#[tokio::test]
async fn the_controller_patches_a_node_only_to_drain_it() {
    let cp = crate::common::own_control_plane().await;
    let client = cp.client(&Identity::Admin).await.unwrap();
    apply_manifest(&client, "deploy/namespace.yaml").await;
    apply_manifest(&client, "deploy/controller/rbac.yaml").await;
    apply_manifest(&client, "deploy/controller/admission-policy.yaml").await;
    let node = "authority-drained";
    SimNode::new(node).register(&client).await.unwrap();
    let nodes: Api<Node> = Api::all(cp.client(&Identity::Controller).await.unwrap());
    let merge_with = |params: PatchParams, patch: serde_json::Value| {
        let nodes = nodes.clone();
        async move { nodes.patch(node, &params, &Patch::Merge(patch)).await }
    };
    let merge = |patch| merge_with(PatchParams::default(), patch);
    let cases = [
        (
            json!({"metadata": {"labels": {"pool": "mine"}}}),
            "the nodemem controller changes no label, finalizer or owner of a Node",
        ),
        (
            json!({"metadata": {"annotations": {"team": "mine"}}}),
            "the nodemem controller changes only its own drain annotations on a Node",
        ),
        (
            json!({"spec": {"taints": [{"key": "nodemem.io/x", "effect": "NoSchedule"}]}}),
            "the nodemem controller changes only spec.unschedulable of a Node",
        ),
        (
            json!({"spec": {"unschedulable": true, "providerID": "aws:///x"}}),
            "the nodemem controller changes only spec.unschedulable of a Node",
        ),
    ];
    for (patch, says) in cases {
        let message = refused(says, || {
            merge_with(PatchParams::default().dry_run(), patch.clone())
        })
        .await;
        assert!(message.contains(says), "{message}");
        assert!(
            message.contains("nodemem-controller-node-scope"),
            "{message}"
        );
    }
    let plain: Api<Node> = Api::all(client.clone());
    let after = plain.get(node).await.unwrap();
    assert!(after.spec.as_ref().and_then(|s| s.unschedulable).is_none());
    assert!(!after
        .metadata
        .labels
        .unwrap_or_default()
        .contains_key("pool"));
    // What a drain sends (crates/nodemem-controller/src/drain.rs): taken.
    let cordon = json!({"spec": {"unschedulable": true}, "metadata": {"annotations": {
        "nodemem.io/drain-for": "r1", "nodemem.io/drain-started": "2026-11-27T10:00:00Z",
        "nodemem.io/drain-done": null}}});
    let cordoned = merge(cordon)
        .await
        .expect("cordon with the drain annotations");
    assert_eq!(cordoned.spec.and_then(|s| s.unschedulable), Some(true));
    merge(json!({"metadata": {"annotations": {"nodemem.io/drain-done": "r1"}}}))
        .await
        .expect("the drain marked done");
    let uncordon = json!({"spec": {"unschedulable": null}, "metadata": {"annotations": {
        "nodemem.io/drain-for": null, "nodemem.io/drain-started": null, "nodemem.io/drain-done": null}}});
    merge(uncordon).await.expect("uncordon");
    let after = plain.get(node).await.unwrap();
    assert!(after.spec.as_ref().and_then(|s| s.unschedulable).is_none());
    assert!(after
        .metadata
        .annotations
        .unwrap_or_default()
        .keys()
        .all(|k| !k.starts_with("nodemem.io/drain-")));
}
