//! nodemem's answers to the runtime. Every answer comes from the creation table the
//! last pass published; a pod not in it yet is waited for (its watch event is usually
//! milliseconds away: the kubelet and the agent learn of the pod at the same time),
//! never longer than [`LOOKUP_WAIT`], well inside the runtime's 2 s.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use nodemem_model::node::creation::{ContainerCreation, CreationTable};
use nodemem_model::values::cgroup_layout::{container_dir_under, ContainerId, ContainerRuntime};
use nodemem_nri::api::{
    ContainerAdjustment, ContainerUpdate, CreateContainerRequest, CreateContainerResponse, Event,
    LinuxContainerAdjustment, LinuxContainerUpdate, LinuxCpu, LinuxResources, StateChangeEvent,
    UpdateContainerRequest, UpdateContainerResponse,
};
use nodemem_nri::service::RuntimeInfo;
use nodemem_nri::{Events, Plugin};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::warn;

use super::NriNews;
use crate::metrics::Metrics;

/// The longest a request waits for its pod to reach the creation table.
pub const LOOKUP_WAIT: Duration = Duration::from_secs(1);
/// The longest a pod's first container waits for the pod cgroup's values.
pub const SANDBOX_WAIT: Duration = Duration::from_millis(700);
/// Sandboxes whose first container has not come yet, at most.
const MAX_SANDBOXES_WAITING: usize = 4096;

pub struct NodememPlugin {
    table: watch::Receiver<Arc<CreationTable>>,
    news: mpsc::UnboundedSender<NriNews>,
    metrics: Arc<Metrics>,
    runtime: Mutex<ContainerRuntime>,
    /// Pod cgroups being written since their sandbox ran, by pod UID.
    sandboxes: Mutex<HashMap<String, oneshot::Receiver<()>>>,
}

impl NodememPlugin {
    pub fn new(
        table: watch::Receiver<Arc<CreationTable>>,
        news: mpsc::UnboundedSender<NriNews>,
        metrics: Arc<Metrics>,
    ) -> Self {
        NodememPlugin {
            table,
            news,
            metrics,
            runtime: Mutex::new(ContainerRuntime::Containerd),
            sandboxes: Mutex::default(),
        }
    }

    /// `find` in the table, waiting up to [`LOOKUP_WAIT`] for a pass to add it.
    async fn lookup<T>(&self, find: impl Fn(&CreationTable) -> Option<T>) -> Option<T> {
        let mut table = self.table.clone();
        let deadline = tokio::time::Instant::now() + LOOKUP_WAIT;
        loop {
            let found = find(&table.borrow_and_update());
            if found.is_some() {
                return found;
            }
            match tokio::time::timeout_at(deadline, table.changed()).await {
                Ok(Ok(())) => continue,
                _ => return None,
            }
        }
    }

    /// A container has started: the runtime wrote the values of its spec.
    fn started(&self, pod_uid: &str, id: &str) {
        let table = self.table.borrow();
        let Some(pod) = table.pod(pod_uid) else {
            return;
        };
        let id = ContainerId {
            runtime: self.runtime(),
            id: id.to_string(),
        };
        let path = container_dir_under(&pod.path, table.cgroup_driver, &id);
        let _ = self.news.send(NriNews::Started { path });
    }

    fn runtime(&self) -> ContainerRuntime {
        *self.runtime.lock().expect("not poisoned")
    }

    /// Asks the loop to write the pod's cgroup, without holding the sandbox up: the
    /// pod's first container waits for it instead (its creation comes later).
    fn sandbox_running(&self, pod_uid: &str) {
        let path = self.table.borrow().pod(pod_uid).map(|p| p.path.clone());
        // Not known yet: the pass its watch event brings writes the pod's cgroup.
        let Some(path) = path else {
            return;
        };
        let (done, written) = oneshot::channel();
        if self
            .news
            .send(NriNews::SandboxRunning { path, done })
            .is_ok()
        {
            let mut waiting = self.sandboxes.lock().expect("not poisoned");
            // Sandboxes whose containers never came are not kept without end.
            if waiting.len() >= MAX_SANDBOXES_WAITING {
                waiting.clear();
            }
            waiting.insert(pod_uid.to_string(), written);
        }
    }

    /// Before a pod's first container is created, its cgroup's values are written
    /// (bounded: never more than [`SANDBOX_WAIT`]).
    async fn pod_cgroup_written(&self, pod_uid: &str) {
        let written = self.sandboxes.lock().expect("not poisoned").remove(pod_uid);
        if let Some(written) = written {
            match tokio::time::timeout(SANDBOX_WAIT, written).await {
                Ok(Ok(())) => self.metrics.nri_request("sandbox"),
                _ => self.metrics.nri_request("sandbox_late"),
            }
        }
    }
}

#[async_trait]
impl Plugin for NodememPlugin {
    fn events(&self) -> Events {
        Events::of(&[
            Event::RunPodSandbox,
            Event::CreateContainer,
            Event::PostStartContainer,
            Event::UpdateContainer,
        ])
    }

    async fn configured(&self, runtime: RuntimeInfo) {
        // CRI-O names its container cgroups crio-<id>; containerd cri-containerd-<id>.
        let kind = if runtime.name.contains("cri-o") || runtime.name.contains("crio") {
            ContainerRuntime::CriO
        } else {
            ContainerRuntime::Containerd
        };
        *self.runtime.lock().expect("not poisoned") = kind;
    }

    async fn synchronize(
        &self,
        _pods: Vec<nodemem_nri::api::PodSandbox>,
        _containers: Vec<nodemem_nri::api::Container>,
    ) -> Vec<ContainerUpdate> {
        // The whole-node pass reads every file and repairs what differs.
        let _ = self.news.send(NriNews::Resync);
        Vec::new()
    }

    async fn create_container(&self, req: CreateContainerRequest) -> CreateContainerResponse {
        let started = Instant::now();
        let (Some(pod), Some(container)) = (req.pod, req.container) else {
            return CreateContainerResponse::default();
        };
        self.pod_cgroup_written(&pod.uid).await;
        let found = self
            .lookup(|t| {
                let values = t.container(&pod.uid, &container.name)?;
                let pod_path = t.pod(&pod.uid)?.path.clone();
                Some((values, pod_path, t.cgroup_driver))
            })
            .await;
        let answer = match found {
            Some((values, pod_path, driver)) => {
                let id = ContainerId {
                    runtime: self.runtime(),
                    id: container.id.clone(),
                };
                let path = container_dir_under(&pod_path, driver, &id);
                let _ = self.news.send(NriNews::Created {
                    pod_uid: pod.uid.clone(),
                    name: container.name.clone(),
                    id,
                    path,
                    files: values.files(),
                });
                if values.is_empty() {
                    self.metrics.nri_request("nothing");
                    CreateContainerResponse::default()
                } else {
                    self.metrics.nri_request("adjusted");
                    CreateContainerResponse {
                        adjust: Some(adjustment(&values)),
                        ..Default::default()
                    }
                }
            }
            None => {
                self.metrics.nri_request("unknown_pod");
                warn!(pod = %format!("{}/{}", pod.namespace, pod.name), container = %container.name,
                      "NRI: the pod is not known yet; the container is created without nodemem's values, which are written once its cgroup appears");
                CreateContainerResponse::default()
            }
        };
        self.metrics
            .nri_answer("CreateContainer", started.elapsed().as_secs_f64());
        answer
    }

    async fn update_container(&self, req: UpdateContainerRequest) -> UpdateContainerResponse {
        let (Some(pod), Some(container), Some(update)) =
            (req.pod, req.container, req.linux_resources)
        else {
            return UpdateContainerResponse::default();
        };
        let ours = self.table.borrow().container(&pod.uid, &container.name);
        match ours.and_then(|ours| kept(&update, &ours)) {
            Some(resources) => {
                self.metrics.nri_request("kept");
                UpdateContainerResponse {
                    update: vec![ContainerUpdate {
                        container_id: container.id,
                        linux: Some(LinuxContainerUpdate {
                            resources: Some(resources),
                        }),
                        ignore_failure: true,
                    }],
                    ..Default::default()
                }
            }
            None => UpdateContainerResponse::default(),
        }
    }

    async fn state_change(&self, event: StateChangeEvent) {
        if event.event == Event::PostStartContainer as i32 {
            if let (Some(pod), Some(container)) = (event.pod, event.container) {
                self.started(&pod.uid, &container.id);
            }
            return;
        }
        if event.event == Event::RunPodSandbox as i32 {
            if let Some(pod) = event.pod {
                let started = Instant::now();
                self.sandbox_running(&pod.uid);
                self.metrics
                    .nri_answer("RunPodSandbox", started.elapsed().as_secs_f64());
            }
        }
    }
}

/// A container's spec adjusted to nodemem's values: memory.min/low/high as unified
/// cgroup v2 values, a pinned container's NUMA nodes as its cpuset.mems.
pub fn adjustment(values: &ContainerCreation) -> ContainerAdjustment {
    ContainerAdjustment {
        linux: Some(LinuxContainerAdjustment {
            resources: Some(resources(
                values
                    .unified
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.clone())),
                values.mems.clone(),
            )),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn resources(
    unified: impl Iterator<Item = (String, String)>,
    mems: Option<String>,
) -> LinuxResources {
    LinuxResources {
        unified: unified.collect(),
        cpu: mems.map(|mems| LinuxCpu {
            mems,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// nodemem's values for the files a container update would replace with others (a
/// kubelet that writes Memory QoS values itself on a resize, or another plugin); None
/// when the update leaves nodemem's alone, as a plain resize does.
pub fn kept(update: &LinuxResources, ours: &ContainerCreation) -> Option<LinuxResources> {
    let unified: Vec<(String, String)> = ours
        .unified
        .iter()
        .filter(|(file, value)| update.unified.get(**file).is_some_and(|v| v != *value))
        .map(|(file, value)| (file.to_string(), value.clone()))
        .collect();
    let mems = ours.mems.clone().filter(|mems| {
        update
            .cpu
            .as_ref()
            .is_some_and(|cpu| !cpu.mems.is_empty() && cpu.mems != *mems)
    });
    (!unified.is_empty() || mems.is_some()).then(|| resources(unified.into_iter(), mems))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use nodemem_nri::api::{Container, PodSandbox};

    use super::*;

    fn plugin() -> (
        NodememPlugin,
        watch::Sender<Arc<CreationTable>>,
        mpsc::UnboundedReceiver<NriNews>,
        Arc<Metrics>,
    ) {
        let (table_out, table) = watch::channel(Arc::new(CreationTable::default()));
        let (news_out, news) = mpsc::unbounded_channel();
        let metrics = Arc::new(Metrics::new());
        (
            NodememPlugin::new(table, news_out, metrics.clone()),
            table_out,
            news,
            metrics,
        )
    }

    fn request(uid: &str, id: &str) -> CreateContainerRequest {
        CreateContainerRequest {
            pod: Some(PodSandbox {
                uid: uid.into(),
                name: "web".into(),
                namespace: "shop".into(),
                ..Default::default()
            }),
            container: Some(Container {
                id: id.into(),
                name: "app".into(),
                ..Default::default()
            }),
        }
    }

    /// The node's table with one Burstable pod `web` (not started yet).
    fn table() -> CreationTable {
        crate::test_node::web_creation_table()
    }

    #[tokio::test]
    async fn a_known_pods_container_is_created_with_its_values_and_named_for_its_runtime() {
        let (plugin, table_out, mut news, metrics) = plugin();
        table_out.send_replace(Arc::new(table()));
        // CRI-O's containers are crio-<id> scopes.
        plugin
            .configured(RuntimeInfo {
                name: "cri-o".into(),
                version: "1.34.0".into(),
                request_timeout_ms: 2000,
            })
            .await;
        let answer = plugin.create_container(request("uid-web", "abc")).await;
        let unified = answer
            .adjust
            .unwrap()
            .linux
            .unwrap()
            .resources
            .unwrap()
            .unified;
        // 160Mi at factor 0.5 (request 64Mi, limit 256Mi), as the kernel reads it.
        assert_eq!(unified["memory.high"], (160 << 20).to_string());
        assert!(unified.contains_key("memory.low"), "{unified:?}");
        match news.try_recv().unwrap() {
            NriNews::Created {
                pod_uid,
                name,
                path,
                files,
                ..
            } => {
                assert_eq!((pod_uid.as_str(), name.as_str()), ("uid-web", "app"));
                assert!(path.ends_with("/crio-abc.scope"), "{path}");
                assert!(files.contains(&"memory.high"), "{files:?}");
            }
            other => panic!("{other:?}"),
        }
        assert!(metrics
            .encode()
            .contains("nodemem_agent_nri_requests_total{result=\"adjusted\"} 1"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_sandbox_is_answered_at_once_and_its_first_container_waits_for_its_cgroup() {
        let (plugin, table_out, mut news, metrics) = plugin();
        table_out.send_replace(Arc::new(table()));
        let sandbox = StateChangeEvent {
            event: Event::RunPodSandbox as i32,
            pod: request("uid-web", "x").pod,
            container: None,
        };
        let started = tokio::time::Instant::now();
        plugin.state_change(sandbox).await;
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "the sandbox is not held up"
        );
        let NriNews::SandboxRunning { path, done } = news.try_recv().unwrap() else {
            panic!("no pod cgroup write asked for");
        };
        assert!(
            path.contains("uid_web") || path.contains("uid-web"),
            "{path}"
        );
        // The loop writes the pod's cgroup 50 ms later: the first container waits that
        // long, and no longer.
        let write = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            done.send(()).unwrap();
        };
        let (answer, ()) = tokio::join!(plugin.create_container(request("uid-web", "c1")), write);
        assert!(answer.adjust.is_some());
        assert_eq!(started.elapsed(), Duration::from_millis(50));
        assert!(metrics
            .encode()
            .contains("nodemem_agent_nri_requests_total{result=\"sandbox\"} 1"));
        // The pod's next container does not wait.
        let again = tokio::time::Instant::now();
        plugin.create_container(request("uid-web", "c2")).await;
        assert_eq!(again.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unknown_pod_waits_for_the_table_then_is_answered_without_values() {
        let (plugin, table_out, _news, metrics) = plugin();
        // Published while the request waits: answered with values.
        let publish = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            table_out.send_replace(Arc::new(table()));
        };
        let (answer, ()) = tokio::join!(plugin.create_container(request("uid-web", "a1")), publish);
        assert!(answer.adjust.is_some());
        // Never published: no adjustment after the wait, counted, the pod not held up.
        let started = tokio::time::Instant::now();
        let answer = plugin.create_container(request("uid-other", "a2")).await;
        assert!(answer.adjust.is_none());
        assert_eq!(started.elapsed(), LOOKUP_WAIT);
        assert!(metrics
            .encode()
            .contains("nodemem_agent_nri_requests_total{result=\"unknown_pod\"} 1"));
    }

    fn ours() -> ContainerCreation {
        ContainerCreation {
            unified: BTreeMap::from([
                ("memory.high", "268431360".to_string()),
                ("memory.min", "67108864".to_string()),
            ]),
            mems: Some("1".into()),
        }
    }

    #[test]
    fn the_adjustment_carries_unified_values_and_mems() {
        let a = adjustment(&ours());
        let r = a.linux.unwrap().resources.unwrap();
        assert_eq!(r.unified["memory.high"], "268431360");
        assert_eq!(r.unified["memory.min"], "67108864");
        assert_eq!(r.cpu.unwrap().mems, "1");
        let none = adjustment(&ContainerCreation::default());
        let r = none.linux.unwrap().resources.unwrap();
        assert!(r.unified.is_empty() && r.cpu.is_none());
    }

    #[test]
    fn an_update_keeps_only_the_values_it_would_replace() {
        // A resize that names only memory.max (the kubelet without its own Memory QoS):
        // nothing of nodemem's to keep.
        let resize = LinuxResources {
            unified: [("memory.max".to_string(), "1073741824".to_string())].into(),
            ..Default::default()
        };
        assert_eq!(kept(&resize, &ours()), None);
        // One that would set memory.high and other mems: nodemem's values stay.
        let update = LinuxResources {
            unified: [
                ("memory.high".to_string(), "max".to_string()),
                ("memory.min".to_string(), "67108864".to_string()),
            ]
            .into(),
            cpu: Some(LinuxCpu {
                mems: "0-1".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let k = kept(&update, &ours()).unwrap();
        assert_eq!(
            k.unified,
            [("memory.high".to_string(), "268431360".to_string())].into()
        );
        assert_eq!(k.cpu.unwrap().mems, "1");
    }
}
