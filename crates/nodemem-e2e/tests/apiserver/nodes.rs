//! Simulated nodes: the fake kubelet runs pods bound to its nodes by creating their
//! cgroups (systemd and cgroupfs layouts), reports them Running with container IDs,
//! finishes deletions, and binds DaemonSet pods (the controller-manager creates them).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use nodemem_model::pod::qos::QosClass;
use nodemem_model::values::cgroup_layout::{container_dir, pod_dir, CgroupDriver, ContainerId};
use nodemem_testkit::cgroup_tree::CgroupTree;
use nodemem_testkit::kubelet::{container_id, FakeKubelet};
use nodemem_testkit::nodes::SimNode;
use serde_json::json;

use crate::common::{admin, cluster, create_pod};

const NS: &str = "fake-kubelet";

async fn namespace(client: &Client) {
    let api: Api<Namespace> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
    )
    .await
    .unwrap();
}

async fn wait_for<T>(what: &str, check: impl AsyncFnMut() -> Option<T>) -> T {
    nodemem_e2e::eventually(
        what,
        Duration::from_secs(60),
        &nodemem_e2e::no_context,
        check,
    )
    .await
}

async fn running(api: &Api<Pod>, name: &str) -> Pod {
    wait_for(&format!("pod {name} Running"), async || {
        let p = api.get(name).await.ok()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(p)
    })
    .await
}

#[tokio::test]
async fn fake_kubelet_runs_pods_and_daemonsets_on_simulated_nodes() {
    cluster();
    let client = admin().await;
    namespace(&client).await;
    let systemd = Arc::new(CgroupTree::new(CgroupDriver::Systemd, 2).unwrap());
    let cgroupfs = Arc::new(CgroupTree::new(CgroupDriver::Cgroupfs, 2).unwrap());
    SimNode::new("kubelet-systemd-1")
        .label("nodemem.io/test", "daemonset")
        .register(&client)
        .await
        .unwrap();
    SimNode::new("kubelet-cgroupfs-1")
        .register(&client)
        .await
        .unwrap();
    let nodes = BTreeMap::from([
        ("kubelet-systemd-1".to_string(), systemd.clone()),
        ("kubelet-cgroupfs-1".to_string(), cgroupfs.clone()),
    ]);
    let _kubelet = FakeKubelet::start(client.clone(), nodes);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);

    // A Burstable pod with an init container on the systemd node.
    let web = create_pod(&pods, json!({
        "metadata": {"name": "web"},
        "spec": {
            "nodeName": "kubelet-systemd-1",
            "initContainers": [{"name": "init", "image": "busybox", "resources": {"requests": {"memory": "64Mi"}}}],
            "containers": [{"name": "app", "image": "nginx", "resources": {"requests": {"memory": "128Mi"}, "limits": {"memory": "256Mi"}}}],
        },
    }))
    .await;
    let uid = web.metadata.uid.clone().unwrap();
    let web = running(&pods, "web").await;
    let statuses = web
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .clone()
        .unwrap();
    let app_id = container_id(&uid, "app");
    assert_eq!(
        statuses[0].container_id.as_deref(),
        Some(format!("containerd://{app_id}").as_str())
    );
    let app_dir = container_dir(
        CgroupDriver::Systemd,
        QosClass::Burstable,
        &uid,
        &containerd(&app_id),
    );
    assert!(app_dir.ends_with(&format!("cri-containerd-{app_id}.scope")));
    assert_eq!(systemd.read(&app_dir, "memory.high").unwrap(), "max");
    assert_eq!(systemd.read(&app_dir, "memory.min").unwrap(), "0");
    let init_dir = container_dir(
        CgroupDriver::Systemd,
        QosClass::Burstable,
        &uid,
        &containerd(&container_id(&uid, "init")),
    );
    assert!(systemd.root().join(&init_dir).is_dir());

    // A Guaranteed pod on the cgroupfs node.
    let db = create_pod(&pods, json!({
        "metadata": {"name": "db"},
        "spec": {
            "nodeName": "kubelet-cgroupfs-1",
            "containers": [{"name": "pg", "image": "postgres", "resources": {"limits": {"memory": "1Gi", "cpu": "1"}}}],
        },
    }))
    .await;
    let db_uid = db.metadata.uid.clone().unwrap();
    let db = running(&pods, "db").await;
    assert_eq!(db.status.unwrap().qos_class.as_deref(), Some("Guaranteed"));
    let pg_dir = format!("kubepods/pod{db_uid}/{}", container_id(&db_uid, "pg"));
    assert_eq!(
        cgroupfs.read(&pg_dir, "cpuset.mems.effective").unwrap(),
        "0-1"
    );

    // Deleting: the kubelet removes the cgroups and confirms the deletion.
    pods.delete("web", &Default::default()).await.unwrap();
    wait_for("pod web gone", async || {
        pods.get_opt("web").await.ok()?.is_none().then_some(())
    })
    .await;
    let web_pod_dir =
        systemd
            .root()
            .join(pod_dir(CgroupDriver::Systemd, QosClass::Burstable, &uid));
    wait_for("web cgroups removed", async || {
        (!web_pod_dir.exists()).then_some(())
    })
    .await;

    // A DaemonSet: the controller-manager creates a pod for the labelled node only,
    // the fake kubelet binds and runs it.
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    daemonsets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "agent"},
                "spec": {
                    "selector": {"matchLabels": {"app": "agent"}},
                    "template": {
                        "metadata": {"labels": {"app": "agent"}},
                        "spec": {
                            "nodeSelector": {"nodemem.io/test": "daemonset"},
                            "containers": [{"name": "agent", "image": "nodemem:test"}],
                        },
                    },
                },
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let ds_pod = wait_for("DaemonSet pod Running", async || {
        let list = pods
            .list(&ListParams::default().labels("app=agent"))
            .await
            .ok()?;
        list.items
            .into_iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    })
    .await;
    assert_eq!(
        ds_pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some("kubelet-systemd-1")
    );
    let ds_uid = ds_pod.metadata.uid.clone().unwrap();
    let ds_dir = container_dir(
        CgroupDriver::Systemd,
        QosClass::BestEffort,
        &ds_uid,
        &containerd(&container_id(&ds_uid, "agent")),
    );
    assert!(systemd.root().join(ds_dir).is_dir());
    let all = pods
        .list(&ListParams::default().labels("app=agent"))
        .await
        .unwrap();
    assert_eq!(
        all.items.len(),
        1,
        "one pod: only one node matches the selector"
    );
    // The controller-manager's DaemonSet status counts the pod the fake kubelet runs.
    wait_for("DaemonSet status", async || {
        let st = daemonsets.get("agent").await.ok()?.status?;
        (st.desired_number_scheduled == 1 && st.current_number_scheduled == 1).then_some(())
    })
    .await;
}

fn containerd(id: &str) -> ContainerId {
    ContainerId::parse(&format!("containerd://{id}")).expect("a containerd ID")
}
