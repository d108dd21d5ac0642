//! A fake kubelet for simulated nodes (no kubelet or container runtime runs here). For
//! each node it owns it:
//! - binds pods that target the node by node affinity (DaemonSet pods; no scheduler
//!   runs in the harness),
//! - "runs" pods bound to the node: creates the pod and container cgroup directories
//!   in the node's [`CgroupTree`] and reports the pod Running with container IDs,
//! - finishes deletions: removes the cgroups and the pod object,
//! - renews the node's Lease so the node lifecycle controller keeps it Ready.
//!
//! Pods come from one watch whose events are handed to a few workers by node: a node's
//! pods in order, the nodes' writes beside each other.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::Client;
use nodemem_model::pod::qos::QosClass;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::cgroup_tree::CgroupTree;
use crate::nodes::now;
use crate::Error;

pub const FIELD_MANAGER: &str = "nodemem-fake-kubelet";

/// Runs until dropped.
pub struct FakeKubelet {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The container ID the fake runtime gives a container: 64 hex digits, stable for a
/// pod UID and container name.
pub fn container_id(pod_uid: &str, container: &str) -> String {
    (0u64..4)
        .map(|salt| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (salt, pod_uid, container).hash(&mut h);
            format!("{:016x}", h.finish())
        })
        .collect()
}

fn qos_of(pod: &Pod) -> QosClass {
    match pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) {
        Some("Guaranteed") => QosClass::Guaranteed,
        Some("BestEffort") => QosClass::BestEffort,
        _ => QosClass::Burstable,
    }
}

/// The node a pod's required node affinity pins it to (how DaemonSet pods target
/// their node).
pub fn affinity_node(pod: &Pod) -> Option<String> {
    let terms = &pod
        .spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms.iter().find_map(|t| {
        t.match_fields.as_ref()?.iter().find_map(|f| {
            (f.key == "metadata.name" && f.operator == "In")
                .then(|| f.values.as_ref()?.first().cloned())
                .flatten()
        })
    })
}

impl FakeKubelet {
    /// Starts serving `nodes` (name -> its cgroup tree). The Nodes must exist.
    pub fn start(client: Client, nodes: BTreeMap<String, Arc<CgroupTree>>) -> Self {
        let mut tasks = Vec::new();
        for name in nodes.keys() {
            tasks.push(tokio::spawn(renew_lease(client.clone(), name.clone())));
        }
        tasks.push(tokio::spawn(run_pods(client, nodes)));
        FakeKubelet { tasks }
    }
}

async fn renew_lease(client: Client, node: String) {
    let leases: Api<Lease> = Api::namespaced(client, "kube-node-lease");
    loop {
        let lease = Lease {
            metadata: kube::api::ObjectMeta {
                name: Some(node.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(node.clone()),
                lease_duration_seconds: Some(40),
                renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
                ..Default::default()
            }),
        };
        let _ = leases
            .patch(
                &node,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&lease),
            )
            .await;
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// The workers the nodes' pods are spread over: a pod's events stay in order on its
/// node's worker, while workers write beside each other (one worker for all, with
/// 1,100 nodes joining and leaving, held a drained pod's deletion behind minutes of
/// other pods' status writes).
const WORKERS: usize = 16;

/// One pod watch for all nodes; each event handed to the worker of the pod's node.
async fn run_pods(client: Client, nodes: BTreeMap<String, Arc<CgroupTree>>) {
    let pods: Api<Pod> = Api::all(client);
    let nodes = Arc::new(nodes);
    let worker_of: BTreeMap<String, usize> = nodes
        .keys()
        .enumerate()
        .map(|(i, n)| (n.clone(), i % WORKERS))
        .collect();
    let senders: Vec<_> = (0..WORKERS.min(nodes.len().max(1)))
        .map(|_| {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            // Ends when `run_pods` (its sender's owner) is aborted.
            tokio::spawn(run_worker(pods.clone(), nodes.clone(), rx));
            tx
        })
        .collect();
    let mut stream = watcher(pods.clone(), watcher::Config::default()).boxed();
    while let Some(event) = stream.next().await {
        let Ok(event) = event else {
            // The watcher retries by itself; back off a little on errors.
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let pod = match &event {
            watcher::Event::Apply(pod)
            | watcher::Event::InitApply(pod)
            | watcher::Event::Delete(pod) => pod,
            watcher::Event::Init | watcher::Event::InitDone => continue,
        };
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .or_else(|| affinity_node(pod));
        if let Some(&worker) = node.as_ref().and_then(|n| worker_of.get(n)) {
            let _ = senders[worker % senders.len()].send(event);
        }
    }
}

/// Runs the pods of its nodes, one event after another.
async fn run_worker(
    pods: Api<Pod>,
    nodes: Arc<BTreeMap<String, Arc<CgroupTree>>>,
    mut events: tokio::sync::mpsc::UnboundedReceiver<watcher::Event<Pod>>,
) {
    // Pods seen running, to clean up on deletion: uid -> (node, qos).
    let mut running: BTreeMap<String, (String, QosClass)> = BTreeMap::new();
    while let Some(event) = events.recv().await {
        match event {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                if let Err(e) = handle_pod(&pods, &nodes, &mut running, &pod).await {
                    eprintln!("fake kubelet: {e}");
                }
            }
            watcher::Event::Delete(pod) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                if let Some((node, qos)) = running.remove(&uid) {
                    let _ = nodes[&node].remove_pod(qos, &uid);
                }
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }
}

/// Confirms a deletion as the kubelet does once the containers are gone (grace 0),
/// again after a failure: the pod's next event may never come.
async fn confirm_deletion(api: &Api<Pod>, name: &str) -> Result<(), Error> {
    let mut last = None;
    for attempt in 0..5u32 {
        match api
            .delete(name, &DeleteParams::default().grace_period(0))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
    }
    Err(Error::Api(format!(
        "confirming the deletion of pod {name}: {}",
        last.map(|e| e.to_string()).unwrap_or_default()
    )))
}

async fn handle_pod(
    pods: &Api<Pod>,
    nodes: &BTreeMap<String, Arc<CgroupTree>>,
    running: &mut BTreeMap<String, (String, QosClass)>,
    pod: &Pod,
) -> Result<(), Error> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(pods.clone().into_client(), &ns);
    let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone());

    let Some(node) = node_name else {
        // Unscheduled: bind it if it targets one of our nodes.
        if let Some(target) = affinity_node(pod).filter(|n| nodes.contains_key(n)) {
            let binding = json!({
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name, "namespace": ns},
                "target": {"apiVersion": "v1", "kind": "Node", "name": target},
            });
            let _: Result<serde_json::Value, _> = api
                .create_subresource("binding", &name, &PostParams::default(), &binding)
                .await;
        }
        return Ok(());
    };
    let Some(tree) = nodes.get(&node) else {
        return Ok(());
    };

    if pod.metadata.deletion_timestamp.is_some() {
        let qos = qos_of(pod);
        tree.remove_pod(qos, &uid)?;
        running.remove(&uid);
        return confirm_deletion(&api, &name).await;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase == Some("Running") || running.contains_key(&uid) {
        return Ok(());
    }

    let Some(spec) = pod.spec.as_ref() else {
        return Err(Error::Api(format!("pod {ns}/{name} has no spec")));
    };
    let qos = qos_of(pod);
    let init: Vec<_> = spec.init_containers.iter().flatten().collect();
    let app: Vec<_> = spec.containers.iter().collect();
    let ids: Vec<String> = init
        .iter()
        .chain(&app)
        .map(|c| container_id(&uid, &c.name))
        .collect();
    tree.add_pod(qos, &uid, &ids)?;
    running.insert(uid.clone(), (node.clone(), qos));

    let started = now();
    let status_of = |c: &k8s_openapi::api::core::v1::Container, done: bool| {
        let state = if done {
            json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": started, "finishedAt": started, "containerID": format!("containerd://{}", container_id(&uid, &c.name))}})
        } else {
            json!({"running": {"startedAt": started}})
        };
        json!({
            "name": c.name,
            "image": c.image.clone().unwrap_or_default(),
            "imageID": "",
            "containerID": format!("containerd://{}", container_id(&uid, &c.name)),
            "ready": !done, "started": !done, "restartCount": 0,
            "state": state,
        })
    };
    let condition = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": started});
    let status = json!({"status": {
        "phase": "Running",
        "hostIP": "127.0.0.1",
        "podIP": "10.244.0.10",
        "startTime": started,
        "conditions": [condition("PodScheduled"), condition("Initialized"), condition("ContainersReady"), condition("Ready")],
        "initContainerStatuses": init.iter().map(|c| status_of(c, true)).collect::<Vec<_>>(),
        "containerStatuses": app.iter().map(|c| status_of(c, false)).collect::<Vec<_>>(),
    }});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(|e| Error::Api(format!("status of pod {ns}/{name}: {e}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_are_stable_and_distinct() {
        let a = container_id("uid-1", "app");
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(a, container_id("uid-1", "app"));
        assert_ne!(a, container_id("uid-1", "sidecar"));
        assert_ne!(a, container_id("uid-2", "app"));
    }
}
