//! What the controller knows: policies, nodes (their labels) and NodeMemoryConfigs,
//! kept current from watch events. Pure and synchronous (tested with plain #[test]s);
//! each update says whether it changed something the decisions read.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use nodemem_api::report::{parse_time, ConfigEntry};
use nodemem_api::{
    NodeMemoryConfig, NodeMemoryPolicy, NodeMemoryPolicySpec, NodeMemoryPolicyStatus,
};

/// On a Node the controller cordoned to drain it before a Kubelet-mode Memory Manager
/// change: the revision it drains for, when the drain started, and the revision it
/// finished draining for.
pub const DRAIN_FOR: &str = "nodemem.io/drain-for";
pub const DRAIN_STARTED: &str = "nodemem.io/drain-started";
pub const DRAIN_DONE: &str = "nodemem.io/drain-done";

/// A drain the controller started on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainMark {
    pub revision: String,
    pub started_at: i64,
    pub done: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PolicyEntry {
    pub uid: Option<String>,
    pub generation: Option<i64>,
    pub spec: NodeMemoryPolicySpec,
    pub status: NodeMemoryPolicyStatus,
    /// The revision a user asked to roll back from ([`nodemem_api::ROLLBACK_ANNOTATION`]).
    pub rollback_request: Option<String>,
    /// When it was created (seconds): of policies tied on priority, the oldest claims
    /// the nodes that run none of them.
    pub created: Option<i64>,
}

#[derive(Clone, Debug, Default)]
pub struct World {
    pub policies: BTreeMap<String, PolicyEntry>,
    /// Node name -> labels.
    pub nodes: BTreeMap<String, BTreeMap<String, String>>,
    /// Nodes the controller cordoned to drain.
    pub drains: BTreeMap<String, DrainMark>,
    /// Node name -> its config.
    pub configs: BTreeMap<String, ConfigEntry>,
}

impl World {
    pub fn apply_policy(&mut self, p: &NodeMemoryPolicy) -> bool {
        let Some(name) = p.metadata.name.clone() else {
            return false;
        };
        let entry = PolicyEntry {
            uid: p.metadata.uid.clone(),
            generation: p.metadata.generation,
            spec: p.spec.clone(),
            status: p.status.clone().unwrap_or_default(),
            rollback_request: p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(nodemem_api::ROLLBACK_ANNOTATION))
                .cloned(),
            created: nodemem_api::convert::created_seconds(&p.metadata),
        };
        self.policies.insert(name, entry.clone()) != Some(entry)
    }

    pub fn delete_policy(&mut self, name: &str) -> bool {
        self.policies.remove(name).is_some()
    }

    /// A node's labels are all the controller reads of it.
    pub fn apply_node(&mut self, n: &Node) -> bool {
        self.apply_node_meta(&n.metadata)
    }

    /// The same from a metadata-only watch.
    pub fn apply_node_meta(&mut self, meta: &ObjectMeta) -> bool {
        let Some(name) = meta.name.clone() else {
            return false;
        };
        let labels = meta.labels.clone().unwrap_or_default();
        let annotation = |k: &str| meta.annotations.as_ref().and_then(|a| a.get(k));
        let mark = annotation(DRAIN_FOR).map(|revision| DrainMark {
            revision: revision.clone(),
            started_at: annotation(DRAIN_STARTED)
                .and_then(|t| parse_time(t))
                .unwrap_or(0),
            done: annotation(DRAIN_DONE) == Some(revision),
        });
        let drain_changed = match mark {
            Some(m) => self.drains.insert(name.clone(), m.clone()) != Some(m),
            None => self.drains.remove(&name).is_some(),
        };
        let labels_changed = self.nodes.insert(name, labels.clone()) != Some(labels);
        labels_changed || drain_changed
    }

    pub fn delete_node(&mut self, name: &str) -> bool {
        self.drains.remove(name);
        self.nodes.remove(name).is_some()
    }

    pub fn apply_config(&mut self, c: &NodeMemoryConfig) -> bool {
        let Some(name) = c.metadata.name.clone() else {
            return false;
        };
        let entry = ConfigEntry::from(c);
        self.configs.insert(name, entry.clone()) != Some(entry)
    }

    pub fn delete_config(&mut self, name: &str) -> bool {
        self.configs.remove(name).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemem_api::report::SPEC_CHANGED_AT;
    use serde_json::json;

    #[test]
    fn only_what_decisions_read_counts_as_a_change() {
        let mut w = World::default();
        let node = |labels: serde_json::Value, heartbeat: &str| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n1", "labels": labels},
                "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}]}}))
            .unwrap()
        };
        assert!(w.apply_node(&node(json!({"pool": "a"}), "2026-11-22T10:00:00Z")));
        assert!(
            !w.apply_node(&node(json!({"pool": "a"}), "2026-11-22T10:00:10Z")),
            "a heartbeat changes nothing"
        );
        assert!(w.apply_node(&node(json!({"pool": "b"}), "2026-11-22T10:00:20Z")));
        assert!(w.delete_node("n1") && !w.delete_node("n1"));

        let config: NodeMemoryConfig = serde_json::from_value(json!({
            "metadata": {"name": "n1", "generation": 2,
                "annotations": {SPEC_CHANGED_AT: "2026-11-22T10:00:00Z"}},
            "spec": {"policy": "p", "revision": "r1"}}))
        .unwrap();
        assert!(w.apply_config(&config));
        assert!(!w.apply_config(&config));
        assert_eq!(
            w.configs["n1"].spec_changed_at,
            Some(1_795_341_600),
            "2026-11-22T10:00:00Z"
        );
    }
}
