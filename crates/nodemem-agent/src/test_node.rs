//! A small node for the observation's and relief's unit tests: one-container pods in
//! `shop` with container IDs, settings at a factor, facts with 8Gi allocatable.

use nodemem_model::node::{desired_node, DesiredNode, NodeFacts, NodeInput, NodePod};
use nodemem_model::settings::NodeSettings;
use nodemem_model::values::factor::ThrottlingFactor;
use nodemem_model::values::memory_qos::{MemoryQosSettings, ReservationPolicy};
use serde_json::json;

pub const MI: i64 = 1 << 20;

/// A pod `name` with one container `app` of `resources`, started as `id`.
pub fn pod(name: &str, id: &str, resources: serde_json::Value) -> NodePod {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}")},
        "spec": {"nodeName": "n1", "containers": [{"name": "app", "resources": resources}]},
        "status": {"containerStatuses": [{"name": "app", "containerID": format!("containerd://{id}"),
            "image": "x", "imageID": "", "ready": true, "restartCount": 0}]}
    }))
    .unwrap();
    nodemem_api::k8s::node_pod_from_k8s(&pod, &Default::default()).unwrap()
}

/// Request 64Mi, limit 256Mi: memory.high 160Mi at factor 0.5.
pub fn burstable(name: &str, id: &str) -> NodePod {
    pod(
        name,
        id,
        json!({"requests": {"memory": "64Mi"}, "limits": {"memory": "256Mi"}}),
    )
}

/// `p` with its workload class chosen by its own annotation.
pub fn classed(p: NodePod, class: &str) -> NodePod {
    let choice = nodemem_model::class::ClassChoice::Named {
        name: class.into(),
        source: nodemem_model::class::ClassSource::PodAnnotation,
    };
    NodePod::new(p.pod().clone(), p.container_ids().clone(), choice)
}

pub fn settings(factor: f64, reservation: ReservationPolicy) -> NodeSettings {
    NodeSettings {
        memory_qos: MemoryQosSettings {
            enabled: true,
            throttling_factor: Some(ThrottlingFactor::from_f64(factor).unwrap()),
            reservation_policy: reservation,
        },
        ..NodeSettings::default()
    }
}

pub fn facts() -> NodeFacts {
    let mut facts = NodeFacts::default();
    facts.memory.allocatable_memory = Some(8 << 30);
    facts.memory.page_size = 4096;
    facts
}

pub fn desired<'p>(
    settings: &NodeSettings,
    facts: &NodeFacts,
    pods: &'p [NodePod],
) -> DesiredNode<'p> {
    desired_node(NodeInput {
        settings,
        facts,
        pods,
        memory_manager: None,
    })
    .unwrap()
}

/// The cgroup of pod `name`'s first container.
pub fn path_of(desired: &DesiredNode<'_>, name: &str) -> String {
    desired
        .pods
        .iter()
        .find(|p| p.name == name)
        .and_then(|p| p.containers[0].path.clone())
        .unwrap()
}

/// What new containers are created with on a node of one Burstable pod `web` (uid-web,
/// container `app`, not started yet) at factor 0.5: the NRI plugin's tests.
pub fn web_creation_table() -> nodemem_model::node::creation::CreationTable {
    let pods = [burstable("web", "ignored")];
    let s = settings(0.5, ReservationPolicy::TieredReservation);
    let f = facts();
    nodemem_model::node::creation::CreationTable::of(&desired(&s, &f, &pods), &[])
}
