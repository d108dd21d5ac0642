//! The plugin protocol against NRI's own runtime side (containerd/nri's adaptation
//! package, as containerd runs it): registration, Configure, Synchronize over chunks,
//! CreateContainer's adjustment, RunPodSandbox, UpdateContainer, and the end of the
//! connection when the runtime goes away.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use nodemem_nri::api::{
    Container, ContainerAdjustment, ContainerUpdate, CreateContainerRequest,
    CreateContainerResponse, Event, LinuxContainerAdjustment, LinuxContainerUpdate, LinuxResources,
    PodSandbox, StateChangeEvent, UpdateContainerRequest, UpdateContainerResponse,
};
use nodemem_nri::{connect, Events, Plugin, Registration};
use nodemem_testkit::nri_runtime::NriRuntime as Runtime;
use serde_json::{json, Value};

/// Records what the runtime sent; answers with the container's name as memory.high.
#[derive(Default)]
struct Recorder {
    synced: Mutex<Vec<(usize, usize)>>,
    sandboxes: Mutex<Vec<String>>,
}

fn unified(pairs: &[(&str, &str)]) -> LinuxResources {
    LinuxResources {
        unified: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    }
}

#[async_trait]
impl Plugin for Recorder {
    fn events(&self) -> Events {
        Events::of(&[
            Event::RunPodSandbox,
            Event::CreateContainer,
            Event::UpdateContainer,
        ])
    }
    async fn synchronize(
        &self,
        pods: Vec<PodSandbox>,
        containers: Vec<Container>,
    ) -> Vec<ContainerUpdate> {
        self.synced
            .lock()
            .unwrap()
            .push((pods.len(), containers.len()));
        vec![ContainerUpdate {
            container_id: containers.first().map(|c| c.id.clone()).unwrap_or_default(),
            linux: Some(LinuxContainerUpdate {
                resources: Some(unified(&[("memory.low", "1048576")])),
            }),
            ignore_failure: false,
        }]
    }
    async fn create_container(&self, req: CreateContainerRequest) -> CreateContainerResponse {
        let name = req.container.map(|c| c.name).unwrap_or_default();
        CreateContainerResponse {
            adjust: Some(ContainerAdjustment {
                linux: Some(LinuxContainerAdjustment {
                    resources: Some(unified(&[(
                        "memory.high",
                        &format!("{}", name.len() * 4096),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
    async fn update_container(&self, req: UpdateContainerRequest) -> UpdateContainerResponse {
        let id = req.container.map(|c| c.id).unwrap_or_default();
        UpdateContainerResponse {
            update: vec![ContainerUpdate {
                container_id: id,
                linux: Some(LinuxContainerUpdate {
                    resources: Some(unified(&[("memory.high", "8192")])),
                }),
                ignore_failure: false,
            }],
            ..Default::default()
        }
    }
    async fn state_change(&self, event: StateChangeEvent) {
        if let Some(pod) = event.pod {
            self.sandboxes.lock().unwrap().push(pod.uid);
        }
    }
}

fn pod() -> Value {
    json!({"id": "sandbox-1", "uid": "uid-1", "name": "web", "namespace": "shop",
           "linux": {"cgroup_parent": "kubepods-burstable-poduid_1.slice"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_speaks_nri_with_its_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    // 3000 pods and containers of 2 KiB annotations each: over ttrpc's 4 MiB message,
    // so the runtime splits its Synchronize into chunks.
    let mut rt = tokio::task::block_in_place(|| Runtime::start(&socket, 3000));
    let plugin = Arc::new(Recorder::default());
    let session = connect(
        &socket,
        &Registration::new("nodemem", "90").unwrap(),
        plugin.clone(),
    )
    .await
    .expect("registered and configured");
    assert_eq!(session.runtime().name, "nri-runtime");
    assert_eq!(session.runtime().version, "v0.11.0");
    assert_eq!(session.runtime().request_timeout_ms, 2000);

    let synced = tokio::task::block_in_place(|| rt.line());
    assert_eq!(synced["event"], "synchronized", "{synced}");
    assert!(synced.get("error").is_none(), "{synced}");
    assert_eq!(synced["update"][0]["container_id"], "ctr-sync-00000");
    assert_eq!(
        synced["update"][0]["linux"]["resources"]["unified"]["memory.low"],
        "1048576"
    );
    assert_eq!(
        *plugin.synced.lock().unwrap(),
        vec![(3000, 3000)],
        "one synchronization of everything"
    );

    let ran = tokio::task::block_in_place(|| rt.relay(json!({"op": "run_pod", "pod": pod()})));
    assert!(ran.get("error").is_none(), "{ran}");
    assert_eq!(*plugin.sandboxes.lock().unwrap(), vec!["uid-1".to_string()]);

    let created = tokio::task::block_in_place(|| {
        rt.relay(json!({"op": "create", "pod": pod(),
                        "container": {"id": "c1", "pod_sandbox_id": "sandbox-1", "name": "server"}}))
    });
    assert!(created.get("error").is_none(), "{created}");
    assert_eq!(
        created["adjust"]["linux"]["resources"]["unified"]["memory.high"], "24576",
        "{created}"
    );

    let updated = tokio::task::block_in_place(|| {
        rt.relay(json!({"op": "update", "pod": pod(),
                        "container": {"id": "c1", "pod_sandbox_id": "sandbox-1", "name": "server"},
                        "resources": {"memory": {"limit": {"value": 1073741824}}}}))
    });
    assert!(updated.get("error").is_none(), "{updated}");
    let update = &updated["update"][0];
    assert_eq!(update["container_id"], "c1", "{updated}");
    assert_eq!(
        update["linux"]["resources"]["unified"]["memory.high"], "8192",
        "{updated}"
    );

    // The runtime goes away: the session ends, it does not hang.
    rt.child.kill().unwrap();
    rt.child.wait().unwrap();
    tokio::time::timeout(Duration::from_secs(10), session.closed())
        .await
        .expect("the session ends with the runtime");
}
