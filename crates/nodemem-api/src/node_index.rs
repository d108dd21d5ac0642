//! What the in-cluster agent knows about its node, fed by watch events: its
//! NodeMemoryConfig, its Node, the pods bound to it and the namespaces that opt out of
//! Memory QoS. Synchronous and without a client, so it is tested with plain `#[test]`s
//! (the way linkerd's policy controller feeds its index).
//!
//! Every update says whether anything the node computation reads changed: a pod
//! status heartbeat or an unrelated label changes nothing, so nothing is recomputed.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::NodeMemoryConfig;
use crate::convert::node_settings;
use crate::k8s::{node_pod_from_k8s, node_status_facts, NamespaceChoice};
use crate::policy::HealthSpec;
use crate::policy::NodeSettings;
use crate::watch_index::WatchIndex;
use k8s_openapi::api::core::v1 as core;
use kube::core::PartialObjectMeta;
use nodemem_model::node::status::NodeStatusFacts;
use nodemem_model::node::NodePod;
use nodemem_model::values::cgroup_layout::ContainerId;

/// The config as the computation needs it, or why it cannot be used.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexedConfig {
    /// The config's name (the node's).
    pub name: String,
    /// The policy the config is from (its pool).
    pub policy: String,
    /// The revision of the policy the config carries.
    pub revision: String,
    /// The config's `metadata.generation`, which the agent's report names.
    pub generation: Option<i64>,
    /// The config's uid: a config deleted and made again is another one.
    pub uid: Option<String>,
    /// The spec's settings as written (kept for the last-known record).
    pub spec: NodeSettings,
    /// When the node counts as healthy.
    pub health: HealthSpec,
    /// The settings the computation takes, or each reason they cannot be used.
    pub settings: Result<nodemem_model::settings::NodeSettings, Vec<String>>,
}

/// What the agent last enforced, kept in the state directory so a restart with the
/// apiserver unreachable enforces it again at once.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastKnown {
    /// The config's name.
    pub config: String,
    /// Empty in records written before it was kept.
    #[serde(default)]
    pub policy: String,
    /// The revision enforced.
    pub revision: String,
    /// The config's generation enforced.
    pub generation: Option<i64>,
    /// The settings enforced, as the spec wrote them.
    pub settings: NodeSettings,
    /// When the node counted as healthy.
    #[serde(default)]
    pub health: HealthSpec,
    /// The Node's figures (`allocatable` also in records written before the others).
    #[serde(flatten)]
    pub node: NodeStatusFacts,
    /// The pods, reduced to what the computation reads.
    pub pods: Vec<CompactPod>,
}

/// A pod reduced to what the computation reads, kept as its JSON: an agent holds
/// every pod of its node, and a `core::Pod` value is several KiB even when nearly
/// empty (its optional structs are inline), against a few hundred bytes of JSON.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct CompactPod(Box<serde_json::value::RawValue>);

impl CompactPod {
    fn new(pod: &core::Pod) -> Self {
        CompactPod(serde_json::value::to_raw_value(pod).expect("a Pod serializes"))
    }

    fn pod(&self) -> Result<core::Pod, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }
}

impl PartialEq for CompactPod {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

/// A pod reduced to what the node computation reads (the state record stays small).
fn reduced(pod: &core::Pod) -> core::Pod {
    let mut p = core::Pod::default();
    p.metadata.name = pod.metadata.name.clone();
    p.metadata.namespace = pod.metadata.namespace.clone();
    p.metadata.uid = pod.metadata.uid.clone();
    p.metadata.creation_timestamp = pod.metadata.creation_timestamp.clone();
    p.metadata.annotations = pod.metadata.annotations.clone().map(|a| {
        a.into_iter()
            .filter(|(k, _)| {
                k == nodemem_model::node::MEMORY_QOS_OPT_OUT_KEY
                    || k == nodemem_model::class::CLASS_KEY
            })
            .collect()
    });
    p.spec = pod.spec.as_ref().map(|s| core::PodSpec {
        node_name: s.node_name.clone(),
        containers: s.containers.iter().map(reduced_container).collect(),
        init_containers: s
            .init_containers
            .as_ref()
            .map(|c| c.iter().map(reduced_container).collect()),
        resources: s.resources.clone(),
        overhead: s.overhead.clone(),
        ..core::PodSpec::default()
    });
    let ids = |list: &Option<Vec<core::ContainerStatus>>| {
        list.as_ref().map(|l| {
            l.iter()
                .map(|c| core::ContainerStatus {
                    name: c.name.clone(),
                    container_id: c.container_id.clone(),
                    ..core::ContainerStatus::default()
                })
                .collect()
        })
    };
    p.status = pod.status.as_ref().map(|s| core::PodStatus {
        phase: s.phase.clone(),
        container_statuses: ids(&s.container_statuses),
        init_container_statuses: ids(&s.init_container_statuses),
        ..core::PodStatus::default()
    });
    p
}

fn reduced_container(c: &core::Container) -> core::Container {
    core::Container {
        name: c.name.clone(),
        resources: c.resources.clone(),
        restart_policy: c.restart_policy.clone(),
        ..core::Container::default()
    }
}

#[derive(Clone, Debug, PartialEq)]
struct IndexedPod {
    namespace: String,
    /// Admission order: creation time, then name.
    order: (String, String),
    name: String,
    raw: CompactPod,
    converted: Result<NodePod, Vec<String>>,
}

/// What an agent knows of its node from its watches: its config, the Node's figures and
/// its pods, each reduced to what the computation reads. Pure: fed by watch events.
#[derive(Debug, Default)]
pub struct NodeIndex {
    node_name: String,
    config: Option<IndexedConfig>,
    /// The config went on purpose with its values still on the node (it carried
    /// [`crate::GIVE_BACK_ANNOTATION`] naming its revision): give back at once.
    config_given_back: bool,
    /// The Node's memory figures and kubelet version.
    node: NodeStatusFacts,
    pods: BTreeMap<String, IndexedPod>,
    /// What namespaces' labels choose for their pods (opt-out, class): only those that
    /// choose anything.
    namespace_choices: BTreeMap<String, NamespaceChoice>,
    /// Pods whose conversion failed, for reporting.
    pod_problems: BTreeMap<String, Vec<String>>,
    /// Containers the runtime's record named when their cgroup appeared, before the
    /// kubelet reported them: (pod UID, container name) -> the latest ID. They take
    /// precedence over the pod status (a restarted container's new ID is known here
    /// first) until their cgroup goes away. As many as live new containers: a few
    /// hundred at most, so finding an ID by value is a short scan.
    runtime_named: BTreeMap<(String, String), ContainerId>,
}

/// A config marked by the controller (or `kubectl nodemem release --now`) before it
/// deleted it: [`crate::GIVE_BACK_ANNOTATION`] names the revision it carries.
fn given_back_on_purpose(config: &NodeMemoryConfig) -> bool {
    config
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::GIVE_BACK_ANNOTATION))
        .is_some_and(|r| *r == config.spec.revision)
}

fn terminated(pod: &core::Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

impl NodeIndex {
    /// An empty index for the node `node_name`.
    pub fn new(node_name: &str) -> Self {
        NodeIndex {
            node_name: node_name.to_string(),
            ..NodeIndex::default()
        }
    }

    /// The node's config, if one is known.
    pub fn config(&self) -> Option<&IndexedConfig> {
        self.config.as_ref()
    }

    /// The Node's allocatable memory in bytes, if reported.
    pub fn allocatable(&self) -> Option<i64> {
        self.node.allocatable_memory
    }

    /// `status.nodeInfo.kubeletVersion`: the rules, and what a Kubelet-mode drop-in
    /// may contain.
    pub fn kubelet_version(&self) -> Option<&str> {
        self.node.kubelet_version.as_deref()
    }

    /// What the rules read of the Node.
    pub fn node(&self) -> &NodeStatusFacts {
        &self.node
    }

    /// The config was created or changed; true when its settings or revision changed.
    pub fn apply_config(&mut self, config: &NodeMemoryConfig) -> bool {
        if config.metadata.name.as_deref() != Some(self.node_name.as_str()) {
            return false;
        }
        let indexed = IndexedConfig {
            name: self.node_name.clone(),
            policy: config.spec.policy.clone(),
            revision: config.spec.revision.clone(),
            generation: config.metadata.generation,
            uid: config.metadata.uid.clone(),
            spec: config.spec.settings.clone(),
            health: config.spec.health.clone(),
            settings: node_settings(&config.spec.settings)
                .map_err(|ps| ps.iter().map(|p| p.to_string()).collect()),
        };
        let changed = self.config.as_ref() != Some(&indexed);
        self.config = Some(indexed);
        self.config_given_back = false;
        changed
    }

    /// The config is gone (`last`: its last state, when the watch delivered it).
    pub fn delete_config(&mut self, last: Option<&NodeMemoryConfig>) -> bool {
        self.config_given_back = last.is_some_and(given_back_on_purpose);
        self.config.take().is_some()
    }

    /// Whether the config went on purpose with its values still on the node: its
    /// agent gives back at once rather than after its grace.
    pub fn config_given_back(&self) -> bool {
        self.config.is_none() && self.config_given_back
    }

    /// The Node changed; true when its memory figures or kubelet version did.
    pub fn apply_node(&mut self, node: &core::Node) -> bool {
        if node.metadata.name.as_deref() != Some(self.node_name.as_str()) {
            return false;
        }
        let facts = node_status_facts(node);
        let changed = facts != self.node;
        self.node = facts;
        changed
    }

    /// A namespace's labels changed; true when its opt-out or class changed a pod of
    /// this node.
    pub fn apply_namespace(
        &mut self,
        name: &str,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        let choice = NamespaceChoice::of(labels);
        let changed = if choice.is_empty() {
            self.namespace_choices.remove(name).is_some()
        } else {
            self.namespace_choices
                .insert(name.to_string(), choice.clone())
                != Some(choice)
        };
        if !changed {
            return false;
        }
        let uids: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| p.namespace == name)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in &uids {
            // Written by this index from a Pod, so it reads back.
            if let Ok(raw) = self.pods[uid].raw.pod() {
                self.convert(uid, raw);
            }
        }
        !uids.is_empty()
    }

    fn convert(&mut self, uid: &str, raw: core::Pod) {
        let namespace = raw.metadata.namespace.clone().unwrap_or_default();
        let choice = self
            .namespace_choices
            .get(&namespace)
            .cloned()
            .unwrap_or_default();
        let converted = node_pod_from_k8s(&raw, &choice)
            .map_err(|ps| ps.iter().map(|p| p.to_string()).collect::<Vec<_>>());
        match &converted {
            Ok(_) => {
                self.pod_problems.remove(uid);
            }
            Err(problems) => {
                self.pod_problems.insert(uid.to_string(), problems.clone());
            }
        }
        let order = (
            raw.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default(),
            raw.metadata.name.clone().unwrap_or_default(),
        );
        self.pods.insert(
            uid.to_string(),
            IndexedPod {
                namespace,
                order,
                name: raw.metadata.name.clone().unwrap_or_default(),
                raw: CompactPod::new(&raw),
                converted,
            },
        );
    }

    /// A pod was created or changed; true when what the computation reads changed
    /// (resources, container IDs, opt-out, termination), not on status heartbeats.
    pub fn apply_pod(&mut self, pod: &core::Pod) -> bool {
        let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let Some(uid) = pod.metadata.uid.clone() else {
            return false;
        };
        if bound != Some(self.node_name.as_str()) || terminated(pod) {
            return self.delete_pod_uid(&uid);
        }
        let before = self.pods.get(&uid).map(|p| p.converted.clone());
        // Only what the computation reads is kept: a full pod (managedFields, the
        // whole spec and status) is tens of KiB, and an agent holds every pod of its node.
        self.convert(&uid, reduced(pod));
        before.as_ref() != Some(&self.pods[&uid].converted)
    }

    /// Forgets a pod; whether the index knew it.
    pub fn delete_pod(&mut self, pod: &core::Pod) -> bool {
        pod.metadata
            .uid
            .as_deref()
            .is_some_and(|uid| self.delete_pod_uid(uid))
    }

    fn delete_pod_uid(&mut self, uid: &str) -> bool {
        self.pod_problems.remove(uid);
        self.runtime_named.retain(|(pod, _), _| pod != uid);
        self.pods.remove(uid).is_some()
    }

    /// A relist finished: pods not in it are gone. True when any was.
    pub fn retain_pods(&mut self, listed: &BTreeSet<String>) -> bool {
        let gone: Vec<String> = self
            .pods
            .keys()
            .filter(|uid| !listed.contains(*uid))
            .cloned()
            .collect();
        for uid in &gone {
            self.delete_pod_uid(uid);
        }
        !gone.is_empty()
    }

    /// The runtime's record named a new container cgroup (pod UID, container name,
    /// ID); true when that changes what a pod computes (its container's cgroup).
    pub fn learn_container(&mut self, pod_uid: &str, name: &str, id: &ContainerId) -> bool {
        if self.runtime_named.values().any(|known| known == id) {
            return false;
        }
        let pod = match self.pods.get(pod_uid).map(|p| &p.converted) {
            Some(Ok(pod)) => Some(pod),
            _ => None,
        };
        let before = self
            .runtime_named
            .insert((pod_uid.to_string(), name.to_string()), id.clone())
            .or_else(|| pod.and_then(|p| p.container_ids().get(name).cloned()));
        // A pod not known yet, or without that container: nothing it computes changed
        // (its list event computes with the learned ID).
        pod.is_some_and(|p| p.has_container(name)) && before.as_ref() != Some(id)
    }

    /// A container's cgroup went away: the pod status decides for it again. True when
    /// it had been learned.
    pub fn forget_container(&mut self, id: &ContainerId) -> bool {
        let before = self.runtime_named.len();
        self.runtime_named.retain(|_, known| known != id);
        self.runtime_named.len() != before
    }

    /// The pods to compute, in admission order (creation time, then name), with the
    /// container IDs the runtime named ahead of the pod status.
    pub fn node_pods(&self) -> Vec<NodePod> {
        let mut pods: Vec<&IndexedPod> =
            self.pods.values().filter(|p| p.converted.is_ok()).collect();
        pods.sort_by(|a, b| a.order.cmp(&b.order));
        pods.into_iter()
            .filter_map(|p| {
                let mut pod = p.converted.clone().ok()?;
                let uid = pod.pod().uid.clone();
                let named = self
                    .runtime_named
                    .range((uid.clone(), String::new())..)
                    .take_while(|((pod, _), _)| *pod == uid);
                for ((_, name), id) in named {
                    pod.set_container_id(name, id);
                }
                Some(pod)
            })
            .collect()
    }

    /// The record of what is enforced now, when a config is known.
    pub fn last_known(&self) -> Option<LastKnown> {
        let config = self.config.as_ref()?;
        let mut pods: Vec<&IndexedPod> = self.pods.values().collect();
        pods.sort_by(|a, b| a.order.cmp(&b.order));
        Some(LastKnown {
            config: config.name.clone(),
            policy: config.policy.clone(),
            revision: config.revision.clone(),
            generation: config.generation,
            settings: config.spec.clone(),
            health: config.health.clone(),
            node: self.node.clone(),
            pods: pods.into_iter().map(|p| p.raw.clone()).collect(),
        })
    }

    /// Restores what a previous run recorded (before any watch has listed).
    pub fn restore(&mut self, last: &LastKnown) {
        self.config = Some(IndexedConfig {
            name: last.config.clone(),
            policy: last.policy.clone(),
            revision: last.revision.clone(),
            generation: last.generation,
            uid: None,
            spec: last.settings.clone(),
            health: last.health.clone(),
            settings: node_settings(&last.settings)
                .map_err(|ps| ps.iter().map(|p| p.to_string()).collect()),
        });
        self.node = last.node.clone();
        for pod in last.pods.iter().filter_map(|p| p.pod().ok()) {
            self.apply_pod(&pod);
        }
    }

    /// Pods that could not be converted, with why (namespace/name: problem).
    pub fn pod_problems(&self) -> Vec<String> {
        self.pod_problems
            .iter()
            .filter_map(|(uid, problems)| {
                let p = self.pods.get(uid)?;
                Some(format!(
                    "pod {}/{}: {}",
                    p.namespace,
                    p.name,
                    problems.join("; ")
                ))
            })
            .collect()
    }
}

/// The agent's four watches feed the index through one rule ([`crate::watch_index`]).
impl WatchIndex<NodeMemoryConfig> for NodeIndex {
    fn key(config: &NodeMemoryConfig) -> Option<String> {
        config.metadata.name.clone()
    }
    fn upsert(&mut self, config: &NodeMemoryConfig) -> bool {
        self.apply_config(config)
    }
    fn delete(&mut self, last: &NodeMemoryConfig) -> bool {
        // The watch selects this node's config by name: a deletion is of it.
        self.delete_config(Some(last))
    }
    fn relisted(&mut self, listed: &BTreeSet<String>) -> bool {
        // Gone while the watch was down: why is not known, the grace applies.
        !listed.contains(&self.node_name) && self.delete_config(None)
    }
}

impl WatchIndex<core::Pod> for NodeIndex {
    /// Pods by uid: a pod deleted and created again under its name is another pod.
    fn key(pod: &core::Pod) -> Option<String> {
        pod.metadata.uid.clone()
    }
    fn upsert(&mut self, pod: &core::Pod) -> bool {
        self.apply_pod(pod)
    }
    fn delete(&mut self, pod: &core::Pod) -> bool {
        self.delete_pod(pod)
    }
    fn relisted(&mut self, listed: &BTreeSet<String>) -> bool {
        self.retain_pods(listed)
    }
}

impl WatchIndex<core::Node> for NodeIndex {
    fn key(node: &core::Node) -> Option<String> {
        node.metadata.name.clone()
    }
    fn upsert(&mut self, node: &core::Node) -> bool {
        self.apply_node(node)
    }
    /// The agent runs on its node: a deletion leaves what the node had (the kubelet
    /// registers it again).
    fn delete(&mut self, _: &core::Node) -> bool {
        false
    }
    fn relisted(&mut self, _: &BTreeSet<String>) -> bool {
        false
    }
}

impl WatchIndex<PartialObjectMeta<core::Namespace>> for NodeIndex {
    fn key(namespace: &PartialObjectMeta<core::Namespace>) -> Option<String> {
        namespace.metadata.name.clone()
    }
    fn upsert(&mut self, namespace: &PartialObjectMeta<core::Namespace>) -> bool {
        let name = namespace.metadata.name.clone().unwrap_or_default();
        self.apply_namespace(&name, namespace.metadata.labels.as_ref())
    }
    /// A namespace's deletion takes its pods with it: their own events say so.
    fn delete(&mut self, _: &PartialObjectMeta<core::Namespace>) -> bool {
        false
    }
    fn relisted(&mut self, _: &BTreeSet<String>) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, uid: &str, node: &str, memory: &str, id: Option<&str>) -> core::Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "shop", "uid": uid,
                         "creationTimestamp": format!("2026-11-22T10:00:0{}Z", &uid[uid.len() - 1..])},
            "spec": {"nodeName": node, "containers": [{"name": "app",
                "resources": {"requests": {"memory": memory}}}]},
            "status": {"phase": "Running", "containerStatuses": id.map(|i| vec![json!({
                "name": "app", "containerID": format!("containerd://{i}"), "image": "x", "imageID": "",
                "ready": true, "restartCount": 0})]).unwrap_or_default()},
        }))
        .unwrap()
    }

    fn config(name: &str, revision: &str, factor: f64) -> NodeMemoryConfig {
        serde_json::from_value(json!({
            "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
            "metadata": {"name": name, "generation": 1},
            "spec": {"policy": "p", "revision": revision, "memoryQoS": {"throttlingFactor": factor}},
        }))
        .unwrap()
    }

    #[test]
    fn only_changes_the_computation_reads_count() {
        let mut index = NodeIndex::new("n1");
        let p = pod("a", "uid-1", "n1", "64Mi", Some("c1"));
        assert!(index.apply_pod(&p));
        assert!(!index.apply_pod(&p), "the same pod again");
        let mut heartbeat = p.clone();
        heartbeat.metadata.resource_version = Some("99".into());
        heartbeat.status.as_mut().unwrap().start_time = None;
        assert!(!index.apply_pod(&heartbeat), "status noise");
        let restarted = pod("a", "uid-1", "n1", "64Mi", Some("c2"));
        assert!(index.apply_pod(&restarted), "a new container ID");
        assert_eq!(index.node_pods()[0].container_ids()["app"].id, "c2");
        // Another node's pod, and a finished pod, are not this node's.
        assert!(!index.apply_pod(&pod("b", "uid-2", "n2", "64Mi", None)));
        let mut done = restarted.clone();
        done.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert!(index.apply_pod(&done), "terminated: removed");
        assert!(index.node_pods().is_empty());
    }

    #[test]
    fn pods_come_out_in_admission_order_and_relists_drop_the_missing() {
        let mut index = NodeIndex::new("n1");
        index.apply_pod(&pod("late", "uid-3", "n1", "1Mi", None));
        index.apply_pod(&pod("early", "uid-1", "n1", "1Mi", None));
        index.apply_pod(&pod("middle", "uid-2", "n1", "1Mi", None));
        let names: Vec<String> = index
            .node_pods()
            .iter()
            .map(|p| p.pod().name.clone())
            .collect();
        assert_eq!(names, ["early", "middle", "late"]);
        assert!(index.retain_pods(&BTreeSet::from(["uid-1".to_string(), "uid-3".to_string()])));
        assert!(!index.retain_pods(&BTreeSet::from(["uid-1".to_string(), "uid-3".to_string()])));
        assert_eq!(index.node_pods().len(), 2);
    }

    #[test]
    fn config_node_and_namespace_changes() {
        let mut index = NodeIndex::new("n1");
        assert!(
            !index.apply_config(&config("n2", "r1", 0.9)),
            "another node's config"
        );
        assert!(index.apply_config(&config("n1", "r1", 0.9)));
        assert!(!index.apply_config(&config("n1", "r1", 0.9)));
        assert!(index.apply_config(&config("n1", "r2", 0.8)));
        assert_eq!(index.config().unwrap().revision, "r2");
        assert!(index.config().unwrap().settings.is_ok());
        let bad = config("n1", "r3", 1.5);
        assert!(index.apply_config(&bad));
        let problems = index.config().unwrap().settings.clone().unwrap_err();
        assert!(
            problems[0].starts_with("spec.memoryQoS.throttlingFactor"),
            "{problems:?}"
        );
        assert!(index.delete_config(Some(&bad)) && index.config().is_none());
        assert!(
            !index.config_given_back(),
            "deleted without a mark: the grace"
        );

        // Marked with its own revision before it went: given back at once; a mark
        // naming another revision (set before the config was written again) is not.
        let mark = |mut c: NodeMemoryConfig, revision: &str| {
            c.metadata.annotations = Some(
                [(
                    crate::GIVE_BACK_ANNOTATION.to_string(),
                    revision.to_string(),
                )]
                .into(),
            );
            c
        };
        let r4 = config("n1", "r4", 0.9);
        index.apply_config(&r4);
        assert!(index.delete_config(Some(&mark(r4.clone(), "r4"))));
        assert!(index.config_given_back());
        index.apply_config(&r4);
        assert!(!index.config_given_back(), "written again");
        assert!(index.delete_config(Some(&mark(r4.clone(), "r3"))));
        assert!(!index.config_given_back(), "an old mark");
        index.apply_config(&r4);
        assert!(index.delete_config(None), "gone while the watch was down");
        assert!(!index.config_given_back());

        let node: core::Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"}, "status": {"allocatable": {"memory": "8Gi"}}}))
        .unwrap();
        assert!(index.apply_node(&node));
        assert!(!index.apply_node(&node));
        assert_eq!(index.allocatable(), Some(8 << 30));
        assert_eq!(index.kubelet_version(), None);
        let upgraded: core::Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"}, "status": {"allocatable": {"memory": "8Gi"},
            "nodeInfo": {"kubeletVersion": "v1.36.3", "architecture": "", "bootID": "", "containerRuntimeVersion": "",
                "kernelVersion": "", "kubeProxyVersion": "", "machineID": "", "operatingSystem": "", "osImage": "", "systemUUID": ""}}}))
        .unwrap();
        assert!(
            index.apply_node(&upgraded),
            "a kubelet upgrade changes what may be rendered"
        );
        assert_eq!(index.kubelet_version(), Some("v1.36.3"));
        // An empty architecture is none reported: rounded as amd64 does.
        assert_eq!(index.node().architecture, None);
        assert_eq!(
            index.node().kubelet_float(),
            nodemem_model::values::factor::KubeletFloat::Separate
        );
        let mut arm = upgraded.clone();
        arm.status
            .as_mut()
            .unwrap()
            .node_info
            .as_mut()
            .unwrap()
            .architecture = "arm64".into();
        assert!(
            index.apply_node(&arm),
            "the architecture is a fact the rules read"
        );
        assert_eq!(
            index.node().kubelet_float(),
            nodemem_model::values::factor::KubeletFloat::Fused
        );
        assert!(index.apply_node(&upgraded));

        index.apply_pod(&pod("a", "uid-1", "n1", "64Mi", None));
        let labels =
            BTreeMap::from([("nodemem.io/memory-qos".to_string(), "disabled".to_string())]);
        assert!(index.apply_namespace("shop", Some(&labels)));
        assert!(index.node_pods()[0].memory_qos_opt_out());
        assert!(!index.apply_namespace("shop", Some(&labels)));
        assert!(index.apply_namespace("shop", None));
        assert!(!index.node_pods()[0].memory_qos_opt_out());
        assert!(
            !index.apply_namespace("other", Some(&labels)),
            "no pod of this node there"
        );
    }

    #[test]
    fn a_pods_class_comes_from_its_annotation_then_its_namespaces_label_and_survives_the_record() {
        use nodemem_model::class::{ClassChoice, ClassSource};
        let mut index = NodeIndex::new("n1");
        index.apply_config(&config("n1", "r1", 0.8));
        let mut own = pod("a", "uid-1", "n1", "64Mi", Some("c1"));
        own.metadata.annotations = Some(BTreeMap::from([
            ("nodemem.io/class".to_string(), "batch".to_string()),
            ("unrelated".to_string(), "x".to_string()),
        ]));
        index.apply_pod(&own);
        index.apply_pod(&pod("b", "uid-2", "n1", "64Mi", None));
        let choices = |index: &NodeIndex| -> Vec<ClassChoice> {
            index
                .node_pods()
                .iter()
                .map(|p| p.class_choice().clone())
                .collect()
        };
        let named = |name: &str, source| ClassChoice::Named {
            name: name.into(),
            source,
        };
        assert_eq!(
            choices(&index),
            [
                named("batch", ClassSource::PodAnnotation),
                ClassChoice::Pool
            ]
        );
        let labels = BTreeMap::from([("nodemem.io/class".to_string(), "web".to_string())]);
        assert!(index.apply_namespace("shop", Some(&labels)));
        assert!(!index.apply_namespace("shop", Some(&labels)), "unchanged");
        assert_eq!(
            choices(&index),
            [
                named("batch", ClassSource::PodAnnotation),
                named("web", ClassSource::NamespaceLabel)
            ]
        );
        // The record an agent restarts from keeps the annotation (and no other).
        let json = serde_json::to_string(&index.last_known().unwrap()).unwrap();
        assert!(
            json.contains("nodemem.io/class") && !json.contains("unrelated"),
            "{json}"
        );
        let edited = BTreeMap::from([("nodemem.io/class".to_string(), "batch".to_string())]);
        assert!(
            index.apply_namespace("shop", Some(&edited)),
            "a label edited"
        );
        assert_eq!(
            choices(&index)[1],
            named("batch", ClassSource::NamespaceLabel)
        );
        assert!(index.apply_namespace("shop", None));
        assert_eq!(choices(&index)[1], ClassChoice::Pool);
    }

    #[test]
    fn the_last_known_record_round_trips_without_status_noise() {
        let mut index = NodeIndex::new("n1");
        index.apply_config(&config("n1", "r1", 0.8));
        index.apply_pod(&pod("a", "uid-1", "n1", "64Mi", Some("c1")));
        let last = index.last_known().unwrap();
        let json = serde_json::to_string(&last).unwrap();
        assert!(!json.contains("\"x\""), "images are not kept: {json}");
        assert!(json.contains("containerd://c1"), "{json}");
        let back: LastKnown = serde_json::from_str(&json).unwrap();
        let mut restored = NodeIndex::new("n1");
        restored.restore(&back);
        assert_eq!(restored.config().unwrap().revision, "r1");
        assert_eq!(restored.node_pods(), index.node_pods());
        assert_eq!(
            restored.config().unwrap().settings,
            index.config().unwrap().settings
        );
    }

    fn cid(id: &str) -> ContainerId {
        ContainerId::parse(&format!("containerd://{id}")).unwrap()
    }

    fn app_id(index: &NodeIndex, uid: &str) -> Option<ContainerId> {
        index
            .node_pods()
            .into_iter()
            .find(|p| p.pod().uid == uid)
            .and_then(|p| p.container_ids().get("app").cloned())
    }

    #[test]
    fn the_runtime_names_a_container_before_the_kubelet_reports_it() {
        let mut index = NodeIndex::new("n1");
        index.apply_pod(&pod("web", "u1", "n1", "64Mi", None));
        assert_eq!(app_id(&index, "u1"), None);
        // Its cgroup appeared: the runtime's record named it.
        assert!(index.learn_container("u1", "app", &cid("c1")));
        assert_eq!(app_id(&index, "u1"), Some(cid("c1")));
        assert!(
            !index.learn_container("u1", "app", &cid("c1")),
            "known already"
        );
        // A name the pod does not have changes nothing it computes.
        assert!(!index.learn_container("u1", "other", &cid("c9")));
        // The kubelet then reports the same ID: nothing changes for the computation.
        assert!(index.apply_pod(&pod("web", "u1", "n1", "64Mi", Some("c1"))));
        assert_eq!(app_id(&index, "u1"), Some(cid("c1")));
        // The container restarts: its new cgroup is named before the status says so.
        assert!(index.forget_container(&cid("c1")));
        assert!(index.learn_container("u1", "app", &cid("c2")));
        assert_eq!(app_id(&index, "u1"), Some(cid("c2")));
        // The status reports it; the new ID was learned, the old one forgotten.
        index.apply_pod(&pod("web", "u1", "n1", "64Mi", Some("c2")));
        assert_eq!(app_id(&index, "u1"), Some(cid("c2")));
        // Learned back to what the status already says, after another learned ID: the
        // computation changes (it was using the other one).
        assert!(index.learn_container("u1", "app", &cid("c3")));
        assert!(index.learn_container("u1", "app", &cid("c2")));
        assert!(
            !index.forget_container(&cid("c3")),
            "replaced, so not learned any more"
        );
        assert_eq!(app_id(&index, "u1"), Some(cid("c2")));
    }

    #[test]
    fn what_the_runtime_named_goes_with_its_cgroup_or_its_pod() {
        let mut index = NodeIndex::new("n1");
        // Named before the pod's watch event arrived: used once the pod is known.
        assert!(!index.learn_container("u1", "app", &cid("c1")));
        index.apply_pod(&pod("web", "u1", "n1", "64Mi", Some("old")));
        assert_eq!(app_id(&index, "u1"), Some(cid("c1")));
        // Its cgroup went away: the status decides again.
        assert!(index.forget_container(&cid("c1")));
        assert!(!index.forget_container(&cid("c1")));
        assert_eq!(app_id(&index, "u1"), Some(cid("old")));
        // A deleted pod takes what was learned for it along.
        index.learn_container("u1", "app", &cid("c2"));
        assert!(index.delete_pod(&pod("web", "u1", "n1", "64Mi", None)));
        assert!(!index.forget_container(&cid("c2")));
        index.apply_pod(&pod("web", "u1", "n1", "64Mi", None));
        assert_eq!(app_id(&index, "u1"), None);
    }

    #[test]
    fn a_pod_that_does_not_convert_is_reported_not_computed() {
        let mut index = NodeIndex::new("n1");
        let mut bad = pod("bad", "uid-1", "n1", "64Mi", None);
        bad.spec.as_mut().unwrap().containers[0]
            .resources
            .as_mut()
            .unwrap()
            .requests
            .as_mut()
            .unwrap()
            .insert(
                "memory".into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("lots".into()),
            );
        assert!(index.apply_pod(&bad));
        assert!(index.node_pods().is_empty());
        let problems = index.pod_problems();
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0].starts_with("pod shop/bad: spec.containers[0].resources.requests.memory"),
            "{problems:?}"
        );
    }
}
