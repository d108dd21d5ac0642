//! A new container's values come from the container runtime's own record, not from
//! the pod status: the real `nodemem agent` with `--containerd-tasks-dir`, a pod whose
//! status reports no container yet (no kubelet runs on this node), and a container
//! cgroup that appears beside its containerd bundle. On the real node the kubelet
//! reported a container 7 to 15 s after its cgroup appeared (BENCHMARKS.md).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use nodemem_model::pod::qos::QosClass;
use nodemem_model::values::cgroup_layout::{container_dir, pod_dir, CgroupDriver, ContainerId};
use nodemem_testkit::Identity;
use serde_json::json;

use crate::agent::{
    applied_on, expected_on, node_without_kubelet, set_config_on, spawn_agent_with, wait_for,
};
use crate::common::{admin, cluster, create_pod};

const NODE: &str = "agent-node-runtime-record";
const NS: &str = "agent-runtime-record";

/// Writes the bundle containerd writes before runc creates the cgroup.
fn bundle(tasks: &std::path::Path, id: &str, annotations: serde_json::Value) {
    let dir = tasks.join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec(&json!({"ociVersion": "1.2.0", "annotations": annotations})).unwrap(),
    )
    .unwrap();
}

#[tokio::test]
async fn a_new_container_is_covered_from_its_runtime_record_before_the_kubelet_reports_it() {
    let cp = cluster();
    let client = admin().await;
    let driver = CgroupDriver::Systemd;
    let tree = node_without_kubelet(&client, NODE, NS, driver, 1).await;
    let tiered = json!({"throttlingFactor": 0.8, "reservationPolicy": "TieredReservation"});
    set_config_on(&client, NODE, "rev-1", tiered.clone()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let burstable = json!({"requests": {"memory": "128Mi"}, "limits": {"memory": "512Mi"}});
    let pod = create_pod(
        &pods,
        json!({
            "metadata": {"name": "web"},
            "spec": {"nodeName": NODE, "containers": [
                {"name": "app", "image": "x", "resources": burstable},
                {"name": "side", "image": "x", "resources": burstable}]},
        }),
    )
    .await;
    let uid = pod.metadata.uid.clone().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("k8s.io");
    std::fs::create_dir_all(&tasks).unwrap();
    let kubeconfig = cp.kubeconfig(&Identity::Agent(NODE.into())).await.unwrap();
    // Only the cgroup watch reads the record: no resync can name these containers.
    let extra: Vec<std::ffi::OsString> =
        vec!["--containerd-tasks-dir".into(), tasks.clone().into()];
    let agent = spawn_agent_with(
        NODE,
        tree.root(),
        dir.path(),
        &kubeconfig,
        "agent.log",
        &extra,
    );
    applied_on(&client, NODE, &agent, "rev-1").await;

    // The runtime starts the pod: its cgroup, the sandbox, a container without a
    // record (another runtime's, or one whose bundle is gone), then `app` with its
    // bundle written first, as containerd does.
    tree.create_cgroup(&pod_dir(driver, QosClass::Burstable, &uid))
        .unwrap();
    let path = |id: &str| {
        container_dir(
            driver,
            QosClass::Burstable,
            &uid,
            &ContainerId::containerd(id),
        )
    };
    bundle(
        &tasks,
        "5a4d",
        json!({"io.kubernetes.cri.container-type": "sandbox",
        "io.kubernetes.cri.sandbox-uid": uid}),
    );
    tree.create_cgroup(&path("5a4d")).unwrap();
    tree.create_cgroup(&path("0bad")).unwrap();
    bundle(
        &tasks,
        "a99",
        json!({"io.kubernetes.cri.container-type": "container",
        "io.kubernetes.cri.sandbox-uid": uid, "io.kubernetes.cri.container-name": "app"}),
    );
    tree.create_cgroup(&path("a99")).unwrap();

    let covered = wait_for("app's values from its runtime record", &agent, async || {
        let high = tree.read(&path("a99"), "memory.high").ok()?;
        (high != "max").then(|| {
            ["memory.min", "memory.low", "memory.high"]
                .map(|f| (f, tree.read(&path("a99"), f).unwrap()))
        })
    })
    .await;
    // Nothing for the sandbox or the container nobody named (processed before `app`).
    for id in ["5a4d", "0bad"] {
        assert_eq!(tree.read(&path(id), "memory.high").unwrap(), "max", "{id}");
        assert_eq!(tree.read(&path(id), "memory.min").unwrap(), "0", "{id}");
    }
    let status = pods.get_status("web").await.unwrap().status.unwrap();
    assert!(
        status.container_statuses.unwrap_or_default().is_empty(),
        "no kubelet reported the container"
    );

    // The kubelet reports the containers later: the values written from the record
    // are the ones the computation predicts for the reported pod.
    pods.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running", "containerStatuses": [
            {"name": "app", "containerID": "containerd://a99", "image": "x", "imageID": "",
             "ready": true, "restartCount": 0},
            {"name": "side", "containerID": "containerd://0bad", "image": "x", "imageID": "",
             "ready": true, "restartCount": 0}]}})),
    )
    .await
    .unwrap();
    let want = expected_on(&client, NODE, driver, tiered).await;
    let predicted: Vec<(&str, &String)> = want
        .iter()
        .filter(|((p, _), _)| *p == path("a99"))
        .map(|((_, f), v)| (f.as_str(), v))
        .collect();
    assert!(
        predicted.iter().any(|(f, _)| *f == "memory.high"),
        "{want:?}"
    );
    for (file, value) in predicted {
        let written = covered.iter().find(|(f, _)| *f == file).map(|(_, v)| v);
        assert_eq!(written, Some(value), "{file}; agent log:\n{}", agent.log());
    }
    // And the container the record did not name is covered from the status.
    let side_high = want[&(path("0bad"), "memory.high".to_string())].clone();
    wait_for("side's values from the pod status", &agent, async || {
        (tree.read(&path("0bad"), "memory.high").ok()? == side_high).then_some(())
    })
    .await;
}
