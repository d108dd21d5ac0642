//! `reclaim` on a real agent against the real apiserver, what status says as the node
//! changes under it (the real kernel's side is in the real-node tier): swap turned on
//! and off while the agent runs (`/proc/swaps`) shows in `status.reclaim.swap` and in
//! what is reclaimable, without a restart; the pool's reclaim edited to Disabled takes
//! `status.reclaim` away (and with it what `kubectl get nmc -o wide` shows).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_testkit::Identity;
use serde_json::{json, Value};

use crate::agent::{app_cgroup, apply_config, configs, simulated_node, spawn_agent};
use crate::common::{admin, cluster, create_pod, eventually};

const NODE: &str = "reclaim-1";
const NS: &str = "reclaim-pods";
const MI: i64 = 1 << 20;

fn spec(revision: &str, mode: &str) -> Value {
    json!({"policy": "reclaim-test", "revision": revision,
        "memoryQoS": {"throttlingFactor": 0.9, "reservationPolicy": "None"},
        "reclaim": {"mode": mode}})
}

#[tokio::test]
async fn swap_turned_on_and_off_and_reclaim_disabled_show_in_status() {
    let cp = cluster();
    let client = admin().await;
    let (tree, _kubelet) = simulated_node(&client, NODE, NS, CgroupDriver::Systemd).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    create_pod(
        &pods,
        json!({"metadata": {"name": "cache"},
            "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "x",
                "resources": {"requests": {"memory": "64Mi"}, "limits": {"memory": "512Mi"}}}]}}),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cp.kubeconfig(&Identity::Agent(NODE.into())).await.unwrap();
    let mut agent = spawn_agent(NODE, tree.root(), dir.path(), &kubeconfig, "agent.log");
    let logs = || agent.log();
    let app = app_cgroup(&pods, "cache").await;
    eventually(
        "the container's cgroup",
        Duration::from_secs(60),
        &logs,
        async || tree.root().join(&app).is_dir().then_some(()),
    )
    .await;
    // 512Mi resident: 300Mi page cache, 212Mi anon; its request is 64Mi.
    tree.set_usage(&app, 512 * MI, 300 * MI).unwrap();
    apply_config(&client, NODE, spec("rev-1", "Observe")).await;
    let api = configs(client.clone());
    let reclaim_reads = async |what: &str, swap: bool, reclaimable: i64| {
        eventually(what, Duration::from_secs(60), &logs, async || {
            let r = api.get(NODE).await.ok()?.data["status"]["reclaim"].clone();
            (r["revision"] == "rev-1" && r["swap"] == swap && r["reclaimableBytes"] == reclaimable)
                .then_some(r)
        })
        .await
    };
    // No swap: the page cache alone.
    let r = reclaim_reads("Observe without swap", false, 300 * MI).await;
    assert_eq!(
        (&r["mode"], &r["supported"]),
        (&json!("Observe"), &json!(true)),
        "{r}"
    );

    // swapon: the anon above the request too (448Mi = 512 - 64), the same agent.
    let swaps = dir.path().join("proc/swaps");
    let header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";
    std::fs::write(
        &swaps,
        format!("{header}/swapfile\tfile\t\t1048572\t\t0\t\t-2\n"),
    )
    .unwrap();
    reclaim_reads("swap seen without a restart", true, 448 * MI).await;
    // swapoff: back to the page cache.
    std::fs::write(&swaps, header).unwrap();
    reclaim_reads("swapoff seen", false, 300 * MI).await;

    // Edited to Disabled: the node says nothing of reclaim any more.
    apply_config(&client, NODE, spec("rev-2", "Disabled")).await;
    eventually(
        "status.reclaim gone under Disabled",
        Duration::from_secs(60),
        &logs,
        async || {
            let s = api.get(NODE).await.ok()?.data["status"].clone();
            (s["observedRevision"] == "rev-2" && s.get("reclaim").is_none()).then_some(())
        },
    )
    .await;
    assert!(agent.child_running(), "the one agent process throughout");
}
