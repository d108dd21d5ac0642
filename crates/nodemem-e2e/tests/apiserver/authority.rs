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

/// The controller's one DaemonSet (deploy/controller/admission-policy.yaml,
/// `nodemem-controller-agent-daemonset`, with the parameters deploy/install ships): its
/// own agent DaemonSet, as the controller builds and applies it for each set of modes,
/// is admitted; the same with another image, another container, a host path of its
/// own choosing, an added capability, a privileged container, no seccomp profile, the
/// host's network or
/// another name is refused with the policy's word, though RBAC lets the controller
/// create and patch it. A kubelet drop-in directory is admitted once the install names
/// it. And RBAC reaches no other DaemonSet of the namespace. On a control plane of its
/// own (the shared one's controller identity has no RBAC until a test grants it).
///
/// The controller's DaemonSets (`deploy/controller/admission-policy.yaml`
/// `nodemem-controller-agent-daemonset`, with the parameters
/// `deploy/install/controller.yaml` ships): its own agent DaemonSet as it builds and
/// applies it for each set of modes is admitted; another image, a second container, a
/// host path of its own, an added capability, a privileged container, an unconfined
/// seccomp profile, the host's network and another name are refused with the policy's
/// word, as are the kubelet's drop-in directory, an SELinux type
/// (`agent.seLinuxOptions`) and an extra host path (`agent.extraVolumes`) until the
/// install names them (the ConfigMap's `kubeletConfigDir`, `seLinuxType`,
/// `extraHostPaths`), and another SELinux type after; RBAC reaches no other DaemonSet
/// of the namespace (get, list, patch, delete: 403), its own by name and by a field
/// selector on its name (on a control plane of its own).
#[tokio::test]
async fn the_controller_writes_only_its_own_agent_daemonset() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use nodemem_controller::agents::daemonset::{agent_daemonset, AgentDeploy, AgentNri};
    let cp = crate::common::own_control_plane().await;
    let client = cp.client(&Identity::Admin).await.unwrap();
    apply_manifest(&client, "deploy/namespace.yaml").await;
    apply_manifest(&client, "deploy/controller/rbac.yaml").await;
    apply_manifest(&client, "deploy/controller/admission-policy.yaml").await;
    // The parameters as deploy/install/controller.yaml ships them beside the
    // controller's --agent-image.
    let install = std::fs::read_to_string(repo().join("deploy/install/controller.yaml")).unwrap();
    let params = crate::chart::documents(&install)
        .into_iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "nodemem-agent-admission")
        .expect("deploy/install/controller.yaml has the agents' admission parameters");
    let config_maps: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "nodemem-system",
        &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
    );
    let as_installer = PatchParams::apply("nodemem-install").force();
    config_maps
        .patch(
            "nodemem-agent-admission",
            &as_installer,
            &Patch::Apply(&params),
        )
        .await
        .unwrap();
    let image = params["data"]["image"].as_str().unwrap().to_string();
    let deploy = |modes: &str, kubelet_config_dir: Option<&str>| AgentDeploy {
        namespace: "nodemem-system".into(),
        image: image.clone(),
        image_pull_secrets: Vec::new(),
        pod_security_labels: false,
        owner: None,
        cgroup_driver: None,
        kubelet_config_dir: kubelet_config_dir.map(str::to_string),
        kubelet_restart_command: None,
        kubelet_restart_unit: Some("kubelet.service".into()),
        state_dir: params["data"]["stateDir"].as_str().unwrap().into(),
        nri: AgentNri::Auto,
        enforcement: modes.parse().unwrap(),
        pod: Default::default(),
    };
    let built = |d: &AgentDeploy| {
        serde_json::to_value(agent_daemonset(
            d,
            &nodemem_controller::world::World::default(),
        ))
        .unwrap()
    };
    let controller = cp.client(&Identity::Controller).await.unwrap();
    let daemonsets: Api<DaemonSet> = Api::namespaced(controller.clone(), "nodemem-system");
    let apply = PatchParams::apply("nodemem-controller").force();
    let write = |ds: serde_json::Value, dry_run: bool| {
        let daemonsets = daemonsets.clone();
        let params = if dry_run {
            apply.clone().dry_run()
        } else {
            apply.clone()
        };
        async move {
            let name = ds["metadata"]["name"].as_str().unwrap().to_string();
            daemonsets.patch(&name, &params, &Patch::Apply(&ds)).await
        }
    };
    // Its own, in each set of modes it is deployed for: admitted (once the policy and
    // its binding are in force, a first write may still pass before).
    let own = built(&deploy("Agent,Kubelet,Observe", None));
    let message = refused("another image", || {
        let mut ds = own.clone();
        ds["spec"]["template"]["spec"]["containers"][0]["image"] = json!("evil.example/x:1");
        write(ds, true)
    })
    .await;
    assert!(
        message.contains(&format!(
            "the agent DaemonSet runs one container of the install's image {image}"
        )),
        "{message}"
    );
    for modes in [
        "Agent",
        "Kubelet",
        "Observe",
        "Agent,Observe",
        "Agent,Kubelet,Observe",
    ] {
        write(built(&deploy(modes, None)), false)
            .await
            .unwrap_or_else(|e| panic!("the controller's own DaemonSet for {modes}: {e}"));
    }
    /// What is changed in the controller's own DaemonSet, and the policy's word.
    type Escalation = (
        &'static str,
        Box<dyn Fn(&mut serde_json::Value)>,
        &'static str,
    );
    let escalations: Vec<Escalation> = vec![
        (
            "a second container",
            Box::new(|ds| {
                let c = ds["spec"]["template"]["spec"]["containers"][0].clone();
                let mut other = c.clone();
                other["name"] = json!("other");
                ds["spec"]["template"]["spec"]["containers"] = json!([c, other]);
            }),
            "the agent DaemonSet runs one container",
        ),
        (
            "a host path of its own",
            Box::new(|ds| {
                let spec = &mut ds["spec"]["template"]["spec"];
                spec["volumes"].as_array_mut().unwrap().push(
                    json!({"name": "etc", "hostPath": {"path": "/etc", "type": "Directory"}}),
                );
                spec["containers"][0]["volumeMounts"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "etc", "mountPath": "/host/etc"}));
            }),
            "the agent's volumes are host paths from its own list",
        ),
        (
            "an added capability",
            Box::new(|ds| {
                ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
                    ["capabilities"]["add"] = json!(["SYS_PTRACE", "SYS_ADMIN"]);
            }),
            "the agent's container drops every capability but SYS_PTRACE",
        ),
        (
            "a privileged container",
            Box::new(|ds| {
                // (The API refuses privileged without escalation.)
                let security =
                    &mut ds["spec"]["template"]["spec"]["containers"][0]["securityContext"];
                security["privileged"] = json!(true);
                security["allowPrivilegeEscalation"] = json!(true);
            }),
            "the agent's container drops every capability but SYS_PTRACE",
        ),
        (
            "no seccomp profile",
            Box::new(|ds| {
                ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
                    ["seccompProfile"] = json!({"type": "Unconfined"});
            }),
            "runs under the runtime's default seccomp profile",
        ),
        (
            "the host's network",
            Box::new(|ds| ds["spec"]["template"]["spec"]["hostNetwork"] = json!(true)),
            "the agent's pod runs as nodemem-agent in the host's PID namespace only",
        ),
        (
            "another name",
            Box::new(|ds| ds["metadata"]["name"] = json!("nodemem-agent-2")),
            "the nodemem controller writes one DaemonSet, nodemem-agent",
        ),
        (
            "the kubelet's drop-in directory the install does not name",
            Box::new(|_| {}),
            "the agent's volumes are host paths from its own list",
        ),
        (
            "an SELinux type the install does not name",
            Box::new(|_| {}),
            "the agent's container takes the SELinux type the install names (none",
        ),
        (
            "an extra host path the install does not name",
            Box::new(|_| {}),
            "the agent's volumes are host paths from its own list",
        ),
    ];
    // The team's extras as the chart passes them (agent.seLinuxOptions,
    // agent.extraVolumes): admitted only where the install names them.
    let extras = |selinux: bool, volume: bool| {
        let mut pod = serde_json::Map::new();
        if selinux {
            pod.insert("seLinuxOptions".into(), json!({"type": "spc_t"}));
        }
        if volume {
            pod.insert(
                "extraVolumes".into(),
                json!([{"name": "kubelet-file", "hostPath": {"path": "/etc/kubelet.yaml", "type": "File"}}]),
            );
            pod.insert(
                "extraVolumeMounts".into(),
                json!([{"name": "kubelet-file", "mountPath": "/host/kubelet.yaml", "readOnly": true}]),
            );
        }
        AgentDeploy {
            pod: nodemem_controller::agents::pod::AgentPod::parse(
                &serde_json::Value::Object(pod).to_string(),
            )
            .unwrap(),
            ..deploy("Agent,Kubelet,Observe", None)
        }
    };
    let with_selinux = built(&extras(true, false));
    let with_volume = built(&extras(false, true));
    let with_dir = built(&deploy(
        "Agent,Kubelet,Observe",
        Some("/etc/kubernetes/kubelet.conf.d"),
    ));
    for (what, change, says) in &escalations {
        let base = if what.starts_with("the kubelet's drop-in") {
            &with_dir
        } else if what.starts_with("an SELinux type") {
            &with_selinux
        } else if what.starts_with("an extra host path") {
            &with_volume
        } else {
            &own
        };
        let mut ds = base.clone();
        change(&mut ds);
        // Another name is a create (RBAC narrows patch to the agent DaemonSet's name,
        // not create): the policy is what refuses it.
        let answer = if *what == "another name" {
            let dry = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            daemonsets
                .create(&dry, &serde_json::from_value(ds).unwrap())
                .await
        } else {
            write(ds, true).await
        };
        let message = match answer {
            Err(kube::Error::Api(s)) if s.code == 403 => s.message,
            other => panic!("{what}: not refused: {other:?}"),
        };
        assert!(message.contains(says), "{what}: {message}");
        assert!(
            message.contains("nodemem-controller-agent-daemonset"),
            "{what}: {message}"
        );
    }
    // The install names the kubelet's drop-in directory (the chart's
    // agent.kubeletConfigDir): the controller's DaemonSet with it is admitted.
    let mut named = params.clone();
    named["data"]["kubeletConfigDir"] = json!("/etc/kubernetes/kubelet.conf.d");
    config_maps
        .patch(
            "nodemem-agent-admission",
            &as_installer,
            &Patch::Apply(&named),
        )
        .await
        .unwrap();
    nodemem_e2e::eventually(
        "the DaemonSet with the named drop-in directory admitted",
        Duration::from_secs(30),
        &|| String::new(),
        async || write(with_dir.clone(), false).await.ok(),
    )
    .await;
    // And the chart's agent.seLinuxOptions and agent.extraVolumes, named by the
    // install (the chart's ConfigMap: seLinuxType, extraHostPaths): admitted, and
    // another SELinux type still refused.
    named["data"]["seLinuxType"] = json!("spc_t");
    named["data"]["extraHostPaths"] = json!("/etc/kubelet.yaml");
    config_maps
        .patch(
            "nodemem-agent-admission",
            &as_installer,
            &Patch::Apply(&named),
        )
        .await
        .unwrap();
    let both = built(&extras(true, true));
    nodemem_e2e::eventually(
        "the DaemonSet with the named SELinux type and host path admitted",
        Duration::from_secs(30),
        &|| String::new(),
        async || write(both.clone(), true).await.ok(),
    )
    .await;
    let mut other_type = both.clone();
    other_type["spec"]["template"]["spec"]["containers"][0]["securityContext"]["seLinuxOptions"] =
        json!({"type": "unconfined_t"});
    match write(other_type, true).await {
        Err(kube::Error::Api(s)) if s.code == 403 => assert!(
            s.message
                .contains("takes the SELinux type the install names (spc_t"),
            "{}",
            s.message
        ),
        other => panic!("another SELinux type: not refused: {other:?}"),
    }
    // RBAC: another DaemonSet of the namespace is not the controller's to read, change
    // or delete.
    let admin_ds: Api<DaemonSet> = Api::namespaced(client.clone(), "nodemem-system");
    let mut other = own.clone();
    other["metadata"]["name"] = json!("someone-elses");
    admin_ds
        .patch(
            "someone-elses",
            &PatchParams::apply("someone"),
            &Patch::Apply(&other),
        )
        .await
        .unwrap();
    let forbidden =
        |r: Result<(), kube::Error>| matches!(r, Err(kube::Error::Api(s)) if s.code == 403);
    assert!(forbidden(daemonsets.get("someone-elses").await.map(|_| ())));
    assert!(forbidden(
        daemonsets
            .patch(
                "someone-elses",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}}))
            )
            .await
            .map(|_| ())
    ));
    assert!(forbidden(
        daemonsets
            .delete("someone-elses", &Default::default())
            .await
            .map(|_| ())
    ));
    assert!(forbidden(
        daemonsets.list(&ListParams::default()).await.map(|_| ())
    ));
    // Its own, by name: read, and listed with a field selector on its name.
    daemonsets.get("nodemem-agent").await.unwrap();
    let listed = daemonsets
        .list(&ListParams::default().fields("metadata.name=nodemem-agent"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
}
