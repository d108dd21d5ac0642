//! A pod's life on a few nodes, as a kubelet-less cluster can give it: created bound to
//! its node, its status set Running (as its kubelet would), deleted. The watches it
//! reaches are what a pod start costs the agents (issue 64): the bound node's agent,
//! and no other.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::Client;
use serde_json::json;

/// The pods' life on `nodes`, one pod each, every step waited on long enough for its
/// events to reach the watches (a watch event is dispatched in milliseconds; the
/// pause covers a busy machine).
pub async fn pods_live_and_go(client: &Client, nodes: &[String]) {
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let name = |i: usize| format!("watched-pod-{i:05}");
    for (i, node) in nodes.iter().enumerate() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name(i)},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "w", "image": "nodemem.local/workload:1",
                    "resources": {"requests": {"memory": "64Mi"}, "limits": {"memory": "128Mi"}}}]}
        }))
        .unwrap();
        nodemem_testkit::clients::create_pod(&api, &pod)
            .await
            .unwrap();
    }
    settle().await;
    for i in 0..nodes.len() {
        let running = json!({"status": {"phase": "Running"}});
        api.patch_status(&name(i), &PatchParams::default(), &Patch::Merge(&running))
            .await
            .unwrap();
    }
    settle().await;
    for i in 0..nodes.len() {
        api.delete(&name(i), &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }
    settle().await;
}

async fn settle() {
    tokio::time::sleep(Duration::from_secs(3)).await;
}
