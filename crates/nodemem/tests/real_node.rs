//! The real-node tier: a qemu VM with Debian's kernel, systemd as PID 1, containerd,
//! runc and the kubelet v1.36.3, joined to a test control plane (TESTING.md).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use kube::api::Api;
use nodemem_testkit::binaries::control_plane_binaries;
use nodemem_testkit::real_node::{Driver, NodeImage, RealNode, RealNodeSpec};
use nodemem_testkit::{ControlPlane, Identity};
use serde_json::json;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Polls `check` until it returns Some, or None once `timeout` passed.
async fn within<T, F, Fut>(timeout: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if started.elapsed() > timeout {
            return None;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Polls `check` until it returns Some or `timeout` passes.
async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            started.elapsed() < timeout,
            "{what}: not within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[test]
fn a_real_node_joins_and_runs_a_pod_in_a_systemd_cgroup() {
    let cp = ControlPlane::start().expect("control plane");
    let bin = control_plane_binaries().expect("control plane binaries");
    let image = NodeImage::build(&bin.kubelet, None).expect("node image");
    let started = Instant::now();
    let mut node = RealNode::boot(&cp, &image, &RealNodeSpec::new("real-1", Driver::Systemd))
        .expect("node boots");
    let rt = runtime();
    rt.block_on(async {
        let client = cp.client(&Identity::Admin).await.unwrap();
        let nodes: Api<core::Node> = Api::all(client.clone());
        eventually("node real-1 Ready", Duration::from_secs(300), || async {
            let n = nodes.get_opt("real-1").await.ok().flatten()?;
            let ready = n
                .status?
                .conditions?
                .into_iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then_some(())
        })
        .await;
        eprintln!("real-1 Ready {:?} after qemu started", started.elapsed());

        let pods: Api<core::Pod> = Api::namespaced(client.clone(), "default");
        let pod: core::Pod = serde_json::from_value(json!({
            "metadata": {"name": "workload"},
            "spec": {
                "nodeName": "real-1",
                "containers": [{
                    "name": "w", "image": "nodemem.local/workload:1", "imagePullPolicy": "Never",
                    "args": ["-allocate", "64Mi"],
                    "resources": {"requests": {"memory": "128Mi"}, "limits": {"memory": "256Mi"}}
                }]
            }
        }))
        .unwrap();
        nodemem_testkit::clients::create_pod(&pods, &pod).await.unwrap();
        let running = within(Duration::from_secs(180), || async {
            let p = pods.get("workload").await.ok()?;
            let status = p.status.as_ref()?;
            if status.phase.as_deref() != Some("Running") {
                return None;
            }
            let id = status.container_statuses.as_ref()?.first()?.container_id.clone()?;
            Some((p.metadata.uid.clone()?, id))
        })
        .await;
        let Some((uid, container_id)) = running else {
            let status = pods.get("workload").await.map(|p| p.status);
            let (journal, _) = node
                .run("journalctl -u kubelet -u containerd --no-pager | grep -iE 'error|fail|warn' | tail -40")
                .unwrap_or_default();
            panic!("pod workload not Running within 180s: {status:?}\nnode journal:\n{journal}");
        };
        let slice = format!(
            "/sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice",
            uid.replace('-', "_")
        );
        let id = container_id
            .strip_prefix("containerd://")
            .expect("a containerd container ID");
        let (out, code) = node
            .run(&format!("cat {slice}/cri-containerd-{id}.scope/memory.current"))
            .unwrap();
        assert_eq!(code, 0, "{out}");
        let current: u64 = out.trim().parse().expect(&out);
        assert!(current >= 64 << 20, "memory.current {current} holds the 64Mi the workload touched");
    });
}
