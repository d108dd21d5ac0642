//! What keeps an agent from starting on a node, from the objects Kubernetes keeps about
//! it: the agent pods' own status (an image the kubelet cannot pull, a container that
//! cannot be created or keeps crashing, a pod no node has room for) and the
//! DaemonSet's `FailedCreate` Events (a pod refused at admission, such as PodSecurity,
//! never exists, so only the DaemonSet controller's Event tells). Pure: the controller's
//! watches feed it ([`crate::world::World::agents`]) and the decision reads the nodes
//! of a pool from it (`AgentsBlocked`).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Event, Pod};

/// Waiting reasons of an agent's container that need a person (or at least say why
/// nothing runs): the kubelet's words.
const BLOCKING_WAITS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
];

/// A `FailedCreate` older than this no longer speaks for a node without a pod: the
/// DaemonSet controller retries a refused pod with a backoff of up to 1,000 s and
/// reports each refusal again, so a cause that still holds is seen again within it.
pub const REFUSAL_WINDOW_SECONDS: i64 = 1_200;

/// Why an agent does not run on a node, in Kubernetes' words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub reason: String,
    pub message: String,
}

/// The DaemonSet's newest refusal to create a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub block: Block,
    /// When it was last reported (seconds since the epoch).
    pub at: i64,
}

/// The agents' pods by node, and the DaemonSet's newest refusal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentPods {
    /// The agent DaemonSet's name (its Events are the ones read).
    daemonset: String,
    /// Pod name -> its node and what blocks it.
    pods: BTreeMap<String, (String, Option<Block>)>,
    /// Node -> its agent pods.
    by_node: BTreeMap<String, BTreeSet<String>>,
    refusal: Option<Refusal>,
    /// Both watches have listed: until then nothing is known (no pod is not "no pod").
    listed: bool,
    /// The DaemonSet as its own watch saw it, or `Some(None)` when there is none;
    /// `None` until that watch listed.
    daemonset_seen: Option<Option<SeenDaemonSet>>,
}

/// The agent DaemonSet as written: its uid and generation (the controller's apply
/// answers with them, its watch sees them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonSetVersion {
    pub uid: String,
    pub generation: i64,
}

/// The agent DaemonSet as its watch saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeenDaemonSet {
    pub version: DaemonSetVersion,
    /// Being deleted (it is created again once gone, not applied to while it goes).
    pub deleting: bool,
}

/// The node a DaemonSet pod is for: where it is bound, else the node its affinity
/// names (the DaemonSet controller pins each pod to its node by `metadata.name`).
fn node_of(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(node) = &spec.node_name {
        return Some(node.clone());
    }
    let required = spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?;
    required
        .node_selector_terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|f| f.key == "metadata.name" && f.operator == "In")
        .and_then(|f| f.values.as_ref()?.first().cloned())
}

/// What keeps `pod` from running, if anything does.
pub fn block_of(pod: &Pod) -> Option<Block> {
    let status = pod.status.as_ref()?;
    let waiting = status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
        .find(|w| {
            w.reason
                .as_deref()
                .is_some_and(|r| BLOCKING_WAITS.contains(&r))
        });
    if let Some(w) = waiting {
        return Some(Block {
            reason: w.reason.clone().unwrap_or_default(),
            message: w.message.clone().unwrap_or_default(),
        });
    }
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
        .map(|c| Block {
            reason: "Unschedulable".to_string(),
            message: c.message.clone().unwrap_or_default(),
        })
}

/// A `FailedCreate` of the agent DaemonSet, with when it was last reported.
pub fn refusal_of(event: &Event, daemonset: &str) -> Option<Refusal> {
    let about = &event.involved_object;
    if about.kind.as_deref() != Some("DaemonSet")
        || about.name.as_deref() != Some(daemonset)
        || event.reason.as_deref() != Some("FailedCreate")
    {
        return None;
    }
    let at = event
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0.as_second()))
        .or_else(|| event.last_timestamp.as_ref().map(|t| t.0.as_second()))
        .or_else(|| event.event_time.as_ref().map(|t| t.0.as_second()))
        .or_else(|| {
            event
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second())
        })?;
    Some(Refusal {
        block: Block {
            reason: "FailedCreate".to_string(),
            message: event.message.clone().unwrap_or_default(),
        },
        at,
    })
}

impl AgentPods {
    /// Nothing known yet of the pods and Events of DaemonSet `daemonset`.
    pub fn of(daemonset: &str) -> Self {
        AgentPods {
            daemonset: daemonset.to_string(),
            ..AgentPods::default()
        }
    }

    /// Records whether the watches have listed; true when that changed.
    pub fn set_listed(&mut self, listed: bool) -> bool {
        let changed = self.listed != listed;
        self.listed = listed;
        changed
    }

    /// Whether the pods and Events are known (both watches listed).
    pub fn listed(&self) -> bool {
        self.listed
    }

    /// The DaemonSet was seen as `seen`; true when that changed.
    pub fn see_daemonset(&mut self, seen: SeenDaemonSet) -> bool {
        let seen = Some(Some(seen));
        let changed = self.daemonset_seen != seen;
        self.daemonset_seen = seen;
        changed
    }

    /// The DaemonSet with `uid` is gone (a relist without any: `None`); true when that
    /// changed. The deletion of another one (an older DaemonSet's, reported late) is
    /// not this one's.
    pub fn daemonset_gone(&mut self, uid: Option<&str>) -> bool {
        if let (Some(Some(seen)), Some(uid)) = (&self.daemonset_seen, uid) {
            if seen.version.uid != uid {
                return false;
            }
        }
        let changed = self.daemonset_seen != Some(None);
        self.daemonset_seen = Some(None);
        changed
    }

    /// Someone else deleted the DaemonSet (or deleted and created it), or changed its
    /// spec, since the controller's last apply (which answered `applied`): it must be
    /// applied again. Unknown (false) until the DaemonSet's watch listed, and while it
    /// is being deleted (created again once gone). An older generation is a late event
    /// of the controller's own earlier writes; the DaemonSet controller's status writes
    /// do not change the generation.
    pub fn daemonset_drifted(&self, applied: Option<&DaemonSetVersion>) -> bool {
        match (&self.daemonset_seen, applied) {
            (None, _) => false,
            (Some(None), _) => true,
            (Some(Some(seen)), _) if seen.deleting => false,
            (Some(Some(_)), None) => true,
            (Some(Some(seen)), Some(applied)) => {
                seen.version.uid != applied.uid || seen.version.generation > applied.generation
            }
        }
    }

    /// A pod was created or changed; true when what the decisions read changed.
    pub fn apply_pod(&mut self, pod: &Pod) -> bool {
        let Some(name) = pod.metadata.name.clone() else {
            return false;
        };
        let Some(node) = node_of(pod) else {
            return self.delete_pod(&name);
        };
        let entry = (node.clone(), block_of(pod));
        if self.pods.get(&name) == Some(&entry) {
            return false;
        }
        self.delete_pod(&name);
        self.by_node.entry(node).or_default().insert(name.clone());
        self.pods.insert(name, entry);
        true
    }

    /// A pod is gone; true when it was held.
    pub fn delete_pod(&mut self, name: &str) -> bool {
        let Some((node, _)) = self.pods.remove(name) else {
            return false;
        };
        if let Some(pods) = self.by_node.get_mut(&node) {
            pods.remove(name);
            if pods.is_empty() {
                self.by_node.remove(&node);
            }
        }
        true
    }

    /// The pods held, by name (a relist forgets the others).
    pub fn pod_names(&self) -> impl Iterator<Item = &String> {
        self.pods.keys()
    }

    /// An Event was reported; true when it is a newer refusal than the one held.
    pub fn apply_event(&mut self, event: &Event) -> bool {
        let Some(refusal) = refusal_of(event, &self.daemonset) else {
            return false;
        };
        if self.refusal.as_ref().is_some_and(|r| r.at > refusal.at)
            || self.refusal.as_ref() == Some(&refusal)
        {
            return false;
        }
        self.refusal = Some(refusal);
        true
    }

    /// The nodes of `pool` whose agent is blocked now, by cause (reason, message):
    /// a pod's own block, or, for a node without any agent pod, the DaemonSet's refusal
    /// reported within [`REFUSAL_WINDOW_SECONDS`].
    pub fn blocked_in(
        &self,
        pool: &BTreeSet<String>,
        now: i64,
    ) -> BTreeMap<(String, String), BTreeSet<String>> {
        let mut out: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        for (node, block) in self.pods.values() {
            if let Some(b) = block.as_ref().filter(|_| pool.contains(node)) {
                out.entry((b.reason.clone(), b.message.clone()))
                    .or_default()
                    .insert(node.clone());
            }
        }
        let recent = self
            .refusal
            .as_ref()
            .filter(|r| now - r.at <= REFUSAL_WINDOW_SECONDS);
        if let Some(r) = recent {
            let without_pod = pool.iter().filter(|n| !self.by_node.contains_key(*n));
            for node in without_pod {
                out.entry((r.block.reason.clone(), r.block.message.clone()))
                    .or_default()
                    .insert(node.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(name: &str, value: serde_json::Value) -> Pod {
        let mut p: Pod = serde_json::from_value(value).unwrap();
        p.metadata.name = Some(name.to_string());
        p
    }

    /// A DaemonSet pod before scheduling: pinned to its node by affinity.
    fn pinned(node: &str) -> serde_json::Value {
        json!({"spec": {"containers": [], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}}})
    }

    fn set(nodes: &[&str]) -> BTreeSet<String> {
        nodes.iter().map(|n| n.to_string()).collect()
    }

    fn version(uid: &str, generation: i64) -> DaemonSetVersion {
        DaemonSetVersion {
            uid: uid.into(),
            generation,
        }
    }

    fn seen(uid: &str, generation: i64, deleting: bool) -> SeenDaemonSet {
        SeenDaemonSet {
            version: version(uid, generation),
            deleting,
        }
    }

    #[test]
    fn a_daemonset_deleted_or_changed_by_someone_else_has_drifted() {
        let mut agents = AgentPods::of("nodemem-agent");
        let applied = version("u1", 3);
        // Nothing known before its watch listed.
        assert!(!agents.daemonset_drifted(None));
        assert!(!agents.daemonset_drifted(Some(&applied)));
        assert!(agents.see_daemonset(seen("u1", 3, false)));
        assert!(!agents.see_daemonset(seen("u1", 3, false)), "seen again");
        assert!(!agents.daemonset_drifted(Some(&applied)), "as applied");
        assert!(
            agents.daemonset_drifted(None),
            "never applied by this controller"
        );
        // A late event of the controller's own earlier write.
        agents.see_daemonset(seen("u1", 2, false));
        assert!(!agents.daemonset_drifted(Some(&applied)));
        // An edit after the apply.
        agents.see_daemonset(seen("u1", 4, false));
        assert!(agents.daemonset_drifted(Some(&applied)));
        // Being deleted: nothing until it is gone.
        agents.see_daemonset(seen("u1", 5, true));
        assert!(!agents.daemonset_drifted(Some(&applied)));
        assert!(
            !agents.daemonset_gone(Some("u0")),
            "an older one's deletion"
        );
        assert!(agents.daemonset_gone(Some("u1")));
        assert!(agents.daemonset_drifted(Some(&applied)), "gone");
        // Created again by someone else: another uid.
        agents.see_daemonset(seen("u2", 1, false));
        assert!(agents.daemonset_drifted(Some(&applied)));
        assert!(!agents.daemonset_drifted(Some(&version("u2", 1))));
        assert!(agents.daemonset_gone(None), "a relist without it");
        assert!(agents.daemonset_drifted(Some(&version("u2", 1))));
    }

    #[test]
    fn a_pod_names_its_node_by_binding_or_by_its_affinity() {
        assert_eq!(node_of(&pod("a", pinned("n1"))), Some("n1".into()));
        let bound = pod("b", json!({"spec": {"nodeName": "n2", "containers": []}}));
        assert_eq!(node_of(&bound), Some("n2".into()));
        assert_eq!(
            node_of(&pod("c", json!({"spec": {"containers": []}}))),
            None
        );
    }

    #[test]
    fn a_pull_failure_a_crash_loop_and_no_room_block_and_creating_does_not() {
        let waiting = |reason: &str| {
            let mut p = pinned("n1");
            p["status"] = json!({"containerStatuses": [{"name": "agent", "image": "x", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": format!("{reason} because")}}}]});
            pod("p", p)
        };
        for reason in ["ImagePullBackOff", "ErrImagePull", "CrashLoopBackOff"] {
            assert_eq!(
                block_of(&waiting(reason)),
                Some(Block {
                    reason: reason.into(),
                    message: format!("{reason} because")
                })
            );
        }
        assert_eq!(block_of(&waiting("ContainerCreating")), None);
        let mut unschedulable = pinned("n1");
        unschedulable["status"] = json!({"conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/3 nodes are available: 1 Insufficient memory."}]});
        assert_eq!(
            block_of(&pod("u", unschedulable)).map(|b| b.reason),
            Some("Unschedulable".into())
        );
    }

    fn failed_create(at: &str, name: &str) -> Event {
        serde_json::from_value(json!({"metadata": {"name": "e"},
            "involvedObject": {"kind": "DaemonSet", "name": name, "namespace": "nodemem-system"},
            "reason": "FailedCreate", "message": "Error creating: pods \"a\" is forbidden: violates PodSecurity \"baseline:latest\"",
            "lastTimestamp": at}))
        .unwrap()
    }

    const T: i64 = 1_795_000_000;

    fn at(seconds: i64) -> String {
        k8s_openapi::jiff::Timestamp::from_second(seconds)
            .unwrap()
            .to_string()
    }

    #[test]
    fn a_recent_refusal_blocks_the_pool_nodes_without_a_pod_only() {
        let mut agents = AgentPods::of("nodemem-agent");
        assert!(agents.apply_pod(&pod("a1", pinned("n1"))));
        assert!(!agents.apply_pod(&pod("a1", pinned("n1"))), "unchanged");
        assert!(!agents.apply_event(&failed_create(&at(T), "other")));
        assert!(agents.apply_event(&failed_create(&at(T), "nodemem-agent")));
        assert!(
            !agents.apply_event(&failed_create(&at(T - 60), "nodemem-agent")),
            "an older refusal changes nothing"
        );
        let blocked = agents.blocked_in(&set(&["n1", "n2", "n3"]), T + 30);
        assert_eq!(blocked.len(), 1);
        let ((reason, message), nodes) = blocked.into_iter().next().unwrap();
        assert_eq!(reason, "FailedCreate");
        assert!(message.contains("violates PodSecurity"), "{message}");
        assert_eq!(nodes, set(&["n2", "n3"]));
        // Outside the window the refusal no longer speaks for a node.
        assert!(agents
            .blocked_in(&set(&["n2"]), T + REFUSAL_WINDOW_SECONDS + 1)
            .is_empty());
        // A node outside the pool is not the pool's.
        assert!(agents.blocked_in(&set(&["n1"]), T + 30).is_empty());
    }

    #[test]
    fn a_deleted_pod_leaves_its_node_without_a_pod() {
        let mut agents = AgentPods::of("nodemem-agent");
        agents.apply_pod(&pod("a1", pinned("n1")));
        agents.apply_event(&failed_create(&at(T), "nodemem-agent"));
        assert!(agents.blocked_in(&set(&["n1"]), T).is_empty());
        assert!(agents.delete_pod("a1"));
        assert!(!agents.delete_pod("a1"));
        assert_eq!(agents.blocked_in(&set(&["n1"]), T).len(), 1);
    }
}
