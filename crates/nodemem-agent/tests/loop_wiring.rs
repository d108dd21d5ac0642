//! `NodeSync::run`'s wiring without a control plane (issue 62), as the controller's is
//! tested in `run_wiring`: the agent's real loop (its four watches, its batches, the
//! engine, the status writer) against a scripted API (`nodemem_testkit::scripted_api`)
//! over a cgroup tree in a temporary directory. Each event the watches bring is followed
//! by the pass it asks for, checked in the files and in the status the agent writes.
//! The agent on a real kernel and a real node is judged in the VM and real-node tiers.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::path::Path;
use std::time::{Duration, Instant};

use hyper::Method;
use nodemem_agent::kubelet_mode::{KubeletModeConfig, KubeletRestart};
use nodemem_agent::node_sync::NodeSync;
use nodemem_apply::kubelet::KubeletFiles;
use nodemem_apply::node::NodeConfig;
use nodemem_cgroup::Roots;
use nodemem_model::numa::Scope;
use nodemem_model::pod::qos::QosClass;
use nodemem_model::values::cgroup_layout::{
    container_dir, CgroupDriver, ContainerId, ContainerRuntime,
};
use nodemem_testkit::cgroup_tree::CgroupTree;
use nodemem_testkit::scripted_api::{Api, CONFIGS, NAMESPACES, NODES, PODS};
use serde_json::{json, Value};

const NODE: &str = "n1";
const DRIVER: CgroupDriver = CgroupDriver::Cgroupfs;

/// This node, with `allocatable` bytes of memory allocatable.
fn node(allocatable: i64) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
        "status": {"allocatable": {"memory": allocatable.to_string()},
            "capacity": {"memory": (allocatable + (512 << 20)).to_string()},
            "nodeInfo": {"kubeletVersion": "v1.36.3", "architecture": "amd64",
                "kernelVersion": "6.1.0", "machineID": "", "systemUUID": "", "bootID": "",
                "osImage": "", "containerRuntimeVersion": "containerd://2.0.0",
                "kubeProxyVersion": "", "operatingSystem": "linux"}}})
}

/// Namespace `shop`, with `labels`.
fn namespace(labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "shop", "labels": labels}})
}

/// A running Burstable pod of one container `app` (ID `id`) in `shop` on this node;
/// its limit None: no memory limit.
fn pod(name: &str, id: &str, request: &str, limit: Option<&str>) -> Value {
    let mut resources = json!({"requests": {"memory": request}});
    if let Some(limit) = limit {
        resources["limits"] = json!({"memory": limit});
    }
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"),
            "creationTimestamp": "2026-12-01T10:00:00Z"},
        "spec": {"nodeName": NODE, "containers": [{"name": "app", "resources": resources}]},
        "status": {"phase": "Running", "qosClass": "Burstable",
            "containerStatuses": [{"name": "app", "containerID": format!("containerd://{id}"),
                "image": "x", "imageID": "", "ready": true, "restartCount": 0}]}})
}

/// This node's config at `revision` with throttling factor `factor`, enforced by the
/// agent.
fn config(revision: &str, factor: f64) -> Value {
    json!({"apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
        "metadata": {"name": NODE, "generation": 1},
        "spec": {"policy": "web", "revision": revision, "enforcement": "Agent",
            "memoryQoS": {"throttlingFactor": factor}}})
}

/// A container ID of 64 hex digits from `seed`.
fn id(seed: &str) -> String {
    seed.repeat(64 / seed.len())
}

/// The node's files in `dir`: its cgroup tree, its kernel's release, a kubelet
/// configuration that names nothing.
fn node_files(dir: &Path) -> (CgroupTree, NodeConfig) {
    let root = dir.join("cgroup");
    std::fs::create_dir(&root).unwrap();
    let tree = CgroupTree::at(&root, DRIVER, 1).unwrap();
    std::fs::create_dir_all(dir.join("proc/sys/kernel")).unwrap();
    std::fs::write(dir.join("proc/sys/kernel/osrelease"), "6.1.0\n").unwrap();
    std::fs::create_dir_all(dir.join("kubelet")).unwrap();
    std::fs::write(
        dir.join("kubelet/config.yaml"),
        "kind: KubeletConfiguration\n",
    )
    .unwrap();
    let config = NodeConfig {
        roots: Roots {
            cgroup: root,
            sys: dir.join("sys"),
            proc: dir.join("proc"),
        },
        cgroup_driver: Some(DRIVER),
        state_dir: dir.join("state"),
        topology_scope: Scope::Container,
        kubelet: KubeletFiles::given(dir.join("kubelet/config.yaml"), None),
        own_cgroup_mount: dir.join("own"),
        systemd_units: false,
    };
    (tree, config)
}

/// Where pod `name`'s container `id` is in the tree.
fn container(name: &str, id: &str) -> String {
    let id = ContainerId {
        runtime: ContainerRuntime::Containerd,
        id: id.to_string(),
    };
    container_dir(DRIVER, QosClass::Burstable, &format!("uid-{name}"), &id)
}

/// Waits (20 s at most) until `check` returns Some, and returns it; fails naming
/// `what` and the last value seen.
async fn eventually<T>(what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match check() {
            Ok(found) => return found,
            Err(seen) if Instant::now() > deadline => panic!("{what}: still {seen}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// memory.high of pod `name`'s container `id` becomes `want`.
async fn memory_high_becomes(tree: &CgroupTree, name: &str, id: &str, want: &str) {
    let path = container(name, id);
    eventually(&format!("{name}'s memory.high {want}"), || {
        let found = tree.read(&path, "memory.high").unwrap();
        if found.trim() == want {
            Ok(())
        } else {
            Err(found)
        }
    })
    .await
}

/// The agent's status for this node's config says `revision` is applied.
async fn status_says_applied(api: &Api, revision: &str) {
    eventually(&format!("the status of {revision}"), || {
        let status = api
            .object(CONFIGS, NODE)
            .map(|c| c["status"].clone())
            .unwrap_or_default();
        let applied = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Applied" && c["status"] == "True");
        if status["observedRevision"] == revision && applied {
            Ok(())
        } else {
            Err(status.to_string())
        }
    })
    .await
}

/// The loop's watches each serve a pass: the config's arrival and change, a new pod, the
/// Node's allocatable and the namespace's opt-out each change what the agent writes, as
/// its status says; the watches ask only for this node's objects; every status write is
/// a server-side apply of the status alone under the agent's field manager.
#[tokio::test]
async fn each_watched_event_is_followed_by_its_pass() {
    // The agent runs on one thread, as its binary runs it (its loop is not Send).
    tokio::task::LocalSet::new()
        .run_until(each_watched_event_is_followed_by_its_pass_locally())
        .await
}

async fn each_watched_event_is_followed_by_its_pass_locally() {
    let dir = tempfile::tempdir().unwrap();
    let (tree, node_config) = node_files(dir.path());
    let web = id("a1");
    tree.add_pod(QosClass::Burstable, "uid-web", std::slice::from_ref(&web))
        .unwrap();
    let api = Api::new(
        vec![
            (NODES, node(8 << 30)),
            (NAMESPACES, namespace(json!({}))),
            (PODS, pod("web", &web, "64Mi", Some("256Mi"))),
            // Another node's pod: not this agent's.
            (PODS, {
                let mut other = pod("elsewhere", &id("b2"), "64Mi", Some("256Mi"));
                other["spec"]["nodeName"] = json!("n2");
                other
            }),
        ],
        &[],
        &[NAMESPACES],
    );
    let kubelet = KubeletModeConfig {
        files: node_config.kubelet.clone(),
        proc_root: node_config.roots.proc.clone(),
        restart: KubeletRestart::default(),
    };
    let mut agent = NodeSync::new(NODE.into(), node_config, kubelet, Duration::from_secs(300));
    agent.observe_every = None;
    agent.reclaim_every = None;
    let running = tokio::task::spawn_local(agent.run(api.client()));

    // No config yet: the watches are open and nothing is written.
    eventually("the four watches open", || {
        let open = [CONFIGS, PODS, NODES, NAMESPACES].map(|r| api.watching(r));
        if open.iter().all(|o| *o) {
            Ok(())
        } else {
            Err(format!("{open:?}"))
        }
    })
    .await;
    assert_eq!(
        tree.read(&container("web", &web), "memory.high")
            .unwrap()
            .trim(),
        "max"
    );

    // The config arrives: 64Mi + 0.5 x (256Mi - 64Mi) = 160Mi.
    api.put(CONFIGS, config("r1", 0.5));
    memory_high_becomes(&tree, "web", &web, &(160u64 << 20).to_string()).await;
    status_says_applied(&api, "r1").await;

    // The config changes: 64Mi + 0.75 x 192Mi = 208Mi.
    let mut changed = config("r2", 0.75);
    changed["metadata"]["generation"] = json!(2);
    changed["status"] = api.object(CONFIGS, NODE).unwrap()["status"].clone();
    api.put(CONFIGS, changed);
    memory_high_becomes(&tree, "web", &web, &(208u64 << 20).to_string()).await;
    status_says_applied(&api, "r2").await;

    // A pod without a limit arrives (its cgroup first, as the runtime makes it): its
    // memory.high is set under the node's allocatable.
    let batch = id("c3");
    tree.add_pod(
        QosClass::Burstable,
        "uid-batch",
        std::slice::from_ref(&batch),
    )
    .unwrap();
    api.put(PODS, pod("batch", &batch, "1Gi", None));
    let batch_path = container("batch", &batch);
    let under_8gi = eventually("batch's memory.high", || {
        let found = tree.read(&batch_path, "memory.high").unwrap();
        match found.trim().parse::<u64>() {
            Ok(bytes) => Ok(bytes),
            Err(_) => Err(found),
        }
    })
    .await;
    assert!(under_8gi > 1 << 30 && under_8gi < 9 << 30, "{under_8gi}");

    // The Node's allocatable grows: the limitless pod's memory.high follows, the limited
    // one's stays.
    api.put(NODES, node(16 << 30));
    let under_16gi = eventually("batch's memory.high after the Node changed", || {
        let found = tree.read(&batch_path, "memory.high").unwrap();
        match found.trim().parse::<u64>() {
            Ok(bytes) if bytes > under_8gi => Ok(bytes),
            _ => Err(found),
        }
    })
    .await;
    assert!(under_16gi < 17 << 30, "{under_16gi}");
    assert_eq!(
        tree.read(&container("web", &web), "memory.high")
            .unwrap()
            .trim(),
        (208u64 << 20).to_string()
    );

    // The namespace opts out: both pods' values are given back.
    let opted_out = json!({nodemem_model::node::MEMORY_QOS_OPT_OUT_KEY.to_string(): "disabled"});
    api.put(NAMESPACES, namespace(opted_out));
    memory_high_becomes(&tree, "web", &web, "max").await;
    memory_high_becomes(&tree, "batch", &batch, "max").await;

    assert!(!running.is_finished(), "the loop still runs");
    running.abort();

    let requests = api.requests();
    // The watches asked for this node's config, Node and pods only.
    let selectors: Vec<(String, String)> = requests
        .iter()
        .filter(|r| r.method == Method::GET)
        .filter_map(|r| {
            let resource = r.path.rsplit('/').next().unwrap_or_default().to_string();
            Some((resource, r.query.get("fieldSelector")?.replace("%3D", "=")))
        })
        .collect();
    for (resource, want) in [
        (CONFIGS, "metadata.name=n1"),
        (NODES, "metadata.name=n1"),
        (PODS, "spec.nodeName=n1"),
    ] {
        assert!(
            selectors.iter().all(|(r, s)| r != resource || s == want),
            "{resource}: {selectors:?}"
        );
        assert!(
            selectors.iter().any(|(r, _)| r == resource),
            "{resource}: {selectors:?}"
        );
    }
    // Every write to the config is its status, applied under the agent's manager.
    let writes: Vec<_> = requests
        .iter()
        .filter(|r| r.method != Method::GET && r.path.contains(CONFIGS))
        .collect();
    assert!(!writes.is_empty());
    for w in writes {
        assert!(
            w.path.ends_with(&format!("{CONFIGS}/{NODE}/status")),
            "{}",
            w.path
        );
        assert_eq!(w.content_type, "application/apply-patch+yaml", "{}", w.path);
        assert_eq!(
            w.query.get("fieldManager").map(String::as_str),
            Some(nodemem_agent::node_sync::FIELD_MANAGER)
        );
    }
}
