//! A workload class's change is a revision like any other (issue 63): the real
//! controller rolls it out canary first, and a failing health gate on the canary rolls
//! the pool back, each batch pod's memory.high with it, on real agents.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nodemem_api::NodeMemoryPolicy;
use nodemem_model::pod::qos::QosClass;
use nodemem_model::values::cgroup_layout::{
    container_dir, pod_dir, CgroupDriver, ContainerId, ContainerRuntime,
};
use nodemem_testkit::kubelet::{container_id, FakeKubelet};
use nodemem_testkit::Identity;
use serde_json::json;

use crate::agent::{spawn_agent, AgentProcess};
use crate::common::{
    condition, create_namespace, create_pod, dynamic, eventually, node_states, own_control_plane,
    pool_nodes, spawn_controller,
};

const NODES: [&str; 3] = ["cls-1", "cls-2", "cls-3"];
const MI: i64 = 1 << 20;
const PAGE: i64 = 4096;

/// memory.high of a 64Mi-request, 256Mi-limit container at `factor`: the kubelet's
/// formula, page-rounded down (exact in f64 for these sizes).
fn high_at(factor: f64) -> String {
    let bytes = (64 * MI) as f64 + factor * (192 * MI) as f64;
    ((bytes as i64) / PAGE * PAGE).to_string()
}

/// A class is changed (batch's factor 0.5 -> 0.3) on a pool of three nodes with
/// `canary: 1`, `minReadySeconds: 20`, `failurePolicy: Rollback`: the canary alone takes
/// the new revision first (its batch pod's memory.high at 0.3, its pool pod's
/// unchanged), the others wait; an OOM burst on the canary's batch pod fails the node
/// and the pool returns by itself (`rolledBackRevision`, `failedNodeNames`), the
/// canary's batch pod back at 0.5.
#[tokio::test]
async fn a_class_change_rolls_out_canary_first_and_back_on_a_failing_gate() {
    let cp = own_control_plane().await;
    let client = cp.client(&Identity::Admin).await.unwrap();
    let named: Vec<(&str, &str)> = NODES.iter().map(|n| (*n, "cls")).collect();
    let trees = pool_nodes(&client, &named).await;
    let _kubelet = FakeKubelet::start(client.clone(), trees.clone());
    create_namespace(&client, "work").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "work");
    let mut uids: BTreeMap<(String, &str), String> = BTreeMap::new();
    for node in NODES {
        for (kind, class) in [("batch", Some("batch")), ("pool", None)] {
            let annotations = class.map_or(json!({}), |c| json!({"nodemem.io/class": c}));
            let pod = create_pod(
                &pods,
                json!({"metadata": {"name": format!("{kind}-{node}"), "annotations": annotations},
                    "spec": {"nodeName": node, "containers": [{"name": "app", "image": "x",
                        "resources": {"requests": {"memory": "64Mi"}, "limits": {"memory": "256Mi"}}}]}}),
            )
            .await;
            uids.insert((node.to_string(), kind), pod.metadata.uid.unwrap());
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut agents: BTreeMap<String, AgentProcess> = BTreeMap::new();
    for (node, tree) in &trees {
        let kubeconfig = cp.kubeconfig(&Identity::Agent(node.clone())).await.unwrap();
        let node_dir = dir.path().join(node);
        std::fs::create_dir_all(&node_dir).unwrap();
        let agent = spawn_agent(node, tree.root(), &node_dir, &kubeconfig, "agent.log");
        agents.insert(node.clone(), agent);
    }
    let controller_kubeconfig = cp.kubeconfig(&Identity::Controller).await.unwrap();
    let controller_log = dir.path().join("controller.log");
    let _controller = spawn_controller(
        &controller_kubeconfig,
        "replica-a",
        "nodemem:test",
        &controller_log,
    );
    let logs = || {
        format!(
            "controller log:\n{}\nagent cls-1 log:\n{}",
            std::fs::read_to_string(&controller_log).unwrap_or_default(),
            agents["cls-1"].log()
        )
    };
    // The container's memory.high on `node` for its `kind` pod.
    let high = |node: &str, kind: &'static str| -> String {
        let uid = &uids[&(node.to_string(), kind)];
        let id = ContainerId {
            runtime: ContainerRuntime::Containerd,
            id: container_id(uid, "app"),
        };
        let path = container_dir(CgroupDriver::Systemd, QosClass::Burstable, uid, &id);
        trees[node]
            .read(&path, "memory.high")
            .unwrap_or_default()
            .trim()
            .to_string()
    };

    let policies = dynamic::<NodeMemoryPolicy>(&client);
    policies
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
                "metadata": {"name": "cls"},
                "spec": {"nodeSelector": {"matchLabels": {"nodemem.io/pool": "cls"}},
                    "memoryQoS": {"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation"},
                    "classes": [{"name": "batch", "throttlingFactor": 0.5, "protection": "None"}],
                    "rollout": {"maxUnavailable": 1, "canary": 1, "minReadySeconds": 20,
                        "failurePolicy": "Rollback"}}
            }))
            .unwrap(),
        )
        .await
        .unwrap();

    // 1. The pool converges: every batch pod at 0.5, every pool pod at 0.9.
    let first = eventually(
        "cls Ready, every pod at its class's value",
        Duration::from_secs(120),
        &logs,
        async || {
            let s = policies
                .get_status("cls")
                .await
                .ok()?
                .data
                .get("status")?
                .clone();
            let ready = condition(&s, "Ready")?["status"] == "True";
            let values = NODES
                .iter()
                .all(|n| high(n, "batch") == high_at(0.5) && high(n, "pool") == high_at(0.9));
            (ready && values).then(|| s["revision"].as_str().unwrap().to_string())
        },
    )
    .await;

    // 2. The class's factor changes: the canary alone first.
    policies
        .patch(
            "cls",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"classes": [
                {"name": "batch", "throttlingFactor": 0.3, "protection": "None"}]}})),
        )
        .await
        .unwrap();
    let (canary, second) = eventually(
        "the canary on the class's new revision, its batch pod at 0.3",
        Duration::from_secs(60),
        &logs,
        async || {
            let states = node_states(&client).await;
            let (node, (_, revision, _)) = states
                .iter()
                .find(|(_, (_, r, good))| *r != first && *good)?;
            (high(node, "batch") == high_at(0.3)).then(|| (node.clone(), revision.clone()))
        },
    )
    .await;
    assert_eq!(
        high(&canary, "pool"),
        high_at(0.9),
        "the pool's pod does not move"
    );
    let states = node_states(&client).await;
    let on_second: Vec<&String> = states
        .iter()
        .filter(|(_, (_, r, _))| *r == second)
        .map(|(n, _)| n)
        .collect();
    assert_eq!(on_second, [&canary], "the canary alone: {states:?}");
    for n in NODES.iter().filter(|n| **n != canary) {
        assert_eq!(high(n, "batch"), high_at(0.5), "{n} waits for the canary");
    }

    // 3. An OOM burst on the canary's batch pod, within minReadySeconds: the canary
    //    fails and the pool returns to the first revision by itself.
    let events = trees[&canary]
        .root()
        .join(pod_dir(
            CgroupDriver::Systemd,
            QosClass::Burstable,
            &uids[&(canary.clone(), "batch")],
        ))
        .join("memory.events");
    let calm = std::fs::read_to_string(&events).unwrap();
    std::fs::write(&events, calm.replace("oom_kill 0", "oom_kill 9")).unwrap();
    let rolled = eventually(
        "cls rolled back",
        Duration::from_secs(90),
        &logs,
        async || {
            let s = policies
                .get_status("cls")
                .await
                .ok()?
                .data
                .get("status")?
                .clone();
            (s["rolledBackRevision"] == second.as_str()).then_some(s)
        },
    )
    .await;
    assert_eq!(rolled["failedNodeNames"], json!([canary]), "{rolled:#}");
    eventually(
        "every node back on the first revision, the canary's batch pod at 0.5",
        Duration::from_secs(60),
        &logs,
        async || {
            let states = node_states(&client).await;
            let back = states.values().all(|(_, r, _)| *r == first);
            (back && high(&canary, "batch") == high_at(0.5)).then_some(())
        },
    )
    .await;
    for n in NODES.iter().filter(|n| **n != canary) {
        assert_eq!(high(n, "batch"), high_at(0.5), "{n} never moved");
    }
}
