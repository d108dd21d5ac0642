//! `kubectl nodemem diff -f POLICY.yaml`: which nodes a changed policy selects and, per
//! node and cgroup, which values change (pure; the cluster read is in `cluster`).
//!
//! Each side of a node is the node computed (`node_view::compute`, the agent's code)
//! for the settings that govern it: before, those of its NodeMemoryConfig (what its
//! agent enforces now); after, those of the policy that wins once the file's policies
//! replace the live ones of the same name. A file absent on a side is one nodemem does
//! not set there (its agent gives back what it set: memory.min/low 0, memory.high max).

use std::collections::BTreeMap;

use nodemem_model::node::DesiredNode;
use serde::Serialize;

/// One side of a node: the governing policy, its revision and the computed node
/// (`None` for the node when the settings cannot be computed: `problems` say why).
pub struct Side<'a> {
    pub policy: String,
    pub revision: String,
    pub node: Option<&'a DesiredNode<'a>>,
    pub problems: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffReport {
    /// True when any node changes.
    pub changes: bool,
    /// The policies read from the file.
    pub policies: Vec<String>,
    pub nodes: Vec<NodeDiff>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeDiff {
    pub node: String,
    pub policy: Change,
    pub revision: Change,
    /// The settings cannot be computed for this node after the change (the agent would
    /// refuse them with these problems).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    pub cgroups: Vec<ValueChange>,
}

/// A value before and after; `None` is "not set by nodemem".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Change {
    pub from: Option<String>,
    pub to: Option<String>,
}

impl Change {
    pub fn changed(&self) -> bool {
        self.from != self.to
    }
}

/// One file of one cgroup that changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ValueChange {
    /// The cgroup, relative to the cgroup root.
    pub path: String,
    /// `kubepods`, `burstable`, `besteffort`, `NAMESPACE/POD` or `NAMESPACE/POD/CONTAINER`.
    pub owner: String,
    pub file: String,
    pub from: Option<String>,
    pub to: Option<String>,
}

impl NodeDiff {
    pub fn changed(&self) -> bool {
        self.policy.changed()
            || self.revision.changed()
            || !self.cgroups.is_empty()
            || !self.problems.is_empty()
    }
}

/// Every managed file of every cgroup of a computed node, with its owner.
fn values(node: &DesiredNode<'_>) -> BTreeMap<(String, &'static str), (String, String)> {
    let mut owners: BTreeMap<&str, String> = BTreeMap::new();
    for pod in &node.pods {
        owners.insert(&pod.path, format!("{}/{}", pod.namespace, pod.name));
        for c in &pod.containers {
            if let Some(path) = &c.path {
                owners.insert(path, format!("{}/{}/{}", pod.namespace, pod.name, c.name));
            }
        }
    }
    let mut out = BTreeMap::new();
    for (i, cgroup) in node.cgroups().into_iter().enumerate() {
        let owner = owners.get(cgroup.path).cloned().unwrap_or_else(|| {
            match i {
                0 => "kubepods",
                1 => "burstable",
                _ => "besteffort",
            }
            .to_string()
        });
        for (file, value) in cgroup.managed() {
            out.insert(
                (cgroup.path.to_string(), file),
                (owner.clone(), value.render()),
            );
        }
    }
    out
}

/// The difference on one node.
pub fn diff_node(name: &str, before: Option<&Side<'_>>, after: Option<&Side<'_>>) -> NodeDiff {
    let empty = BTreeMap::new();
    let before_values = before.and_then(|s| s.node).map(values);
    let after_values = after.and_then(|s| s.node).map(values);
    let b = before_values.as_ref().unwrap_or(&empty);
    let a = after_values.as_ref().unwrap_or(&empty);
    let mut cgroups = Vec::new();
    let keys: std::collections::BTreeSet<&(String, &str)> = b.keys().chain(a.keys()).collect();
    for key in keys {
        let from = b.get(key);
        let to = a.get(key);
        if from.map(|v| &v.1) == to.map(|v| &v.1) {
            continue;
        }
        let owner = to.or(from).map(|v| v.0.clone()).unwrap_or_default();
        cgroups.push(ValueChange {
            path: key.0.clone(),
            owner,
            file: key.1.to_string(),
            from: from.map(|v| v.1.clone()),
            to: to.map(|v| v.1.clone()),
        });
    }
    NodeDiff {
        node: name.to_string(),
        policy: Change {
            from: before.map(|s| s.policy.clone()),
            to: after.map(|s| s.policy.clone()),
        },
        revision: Change {
            from: before.map(|s| s.revision.clone()),
            to: after.map(|s| s.revision.clone()),
        },
        problems: after.map(|s| s.problems.clone()).unwrap_or_default(),
        cgroups,
    }
}

/// The table for people: one block per changed node.
pub fn render_table(report: &DiffReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if !report.changes {
        let _ = writeln!(
            out,
            "No changes: {} would change no node.",
            report.policies.join(", ")
        );
        return out;
    }
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    for n in report.nodes.iter().filter(|n| n.changed()) {
        let _ = writeln!(
            out,
            "node {}: policy {} -> {}, revision {} -> {}",
            n.node,
            dash(&n.policy.from),
            dash(&n.policy.to),
            dash(&n.revision.from),
            dash(&n.revision.to)
        );
        for p in &n.problems {
            let _ = writeln!(out, "  refused: {p}");
        }
        if !n.cgroups.is_empty() {
            // The cgroup paths are in -o json|yaml; people read the owner.
            let mut table = super::render::table(&["CGROUP OF", "FILE", "FROM", "TO"]);
            for c in &n.cgroups {
                table.add_row(vec![
                    c.owner.clone(),
                    c.file.clone(),
                    dash(&c.from),
                    dash(&c.to),
                ]);
            }
            let _ = writeln!(out, "{}", super::render::text(&table));
        }
    }
    let changed = report.nodes.iter().filter(|n| n.changed()).count();
    let values: usize = report.nodes.iter().map(|n| n.cgroups.len()).sum();
    let _ = writeln!(
        out,
        "{changed} node(s) change, {values} cgroup value(s) change (\"-\": not set by nodemem)."
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemem_model::memory_qos::MemoryQosSettings;
    use nodemem_model::node::{NodeFacts, NodePod};
    use nodemem_model::policy::PolicySettings;

    fn pods() -> Vec<NodePod> {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {
                "requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}}]},
            "status": {"containerStatuses": [{"name": "c", "containerID": "containerd://0123abcd",
                "image": "i", "imageID": "", "ready": true, "restartCount": 0}]}
        }))
        .unwrap();
        vec![nodemem_api::k8s::node_pod_from_k8s(&pod, false).unwrap()]
    }

    fn facts() -> NodeFacts {
        let mut f = NodeFacts::default();
        f.memory.allocatable_memory = Some(8 << 30);
        f.memory.kernel_version = Some("6.1.0".into());
        f
    }

    fn settings(factor: f64) -> PolicySettings {
        PolicySettings {
            memory_qos: MemoryQosSettings {
                enabled: true,
                throttling_factor: nodemem_model::factor::ThrottlingFactor::from_f64(factor)
                    .unwrap(),
                ..MemoryQosSettings::default()
            },
            ..PolicySettings::default()
        }
    }

    fn side<'a>(policy: &str, node: &'a DesiredNode<'a>) -> Side<'a> {
        Side {
            policy: policy.into(),
            revision: format!("r-{policy}"),
            node: Some(node),
            problems: vec![],
        }
    }

    #[test]
    fn the_same_settings_change_nothing_and_a_new_factor_changes_memory_high_only() {
        let pods = pods();
        let facts = facts();
        let a = super::super::node_view::compute(&settings(0.9), &facts, &pods).unwrap();
        let b = super::super::node_view::compute(&settings(0.9), &facts, &pods).unwrap();
        let same = diff_node("n1", Some(&side("p", &a)), Some(&side("p", &b)));
        assert!(!same.changed(), "{same:?}");

        let c = super::super::node_view::compute(&settings(0.8), &facts, &pods).unwrap();
        let d = diff_node("n1", Some(&side("p", &a)), Some(&side("p", &c)));
        assert!(d.changed());
        assert!(!d.cgroups.is_empty());
        assert!(d.cgroups.iter().all(|c| c.file == "memory.high"), "{d:?}");
        let pod_row = d
            .cgroups
            .iter()
            .find(|c| c.owner == "default/web/c")
            .unwrap();
        // A lower factor throttles earlier: the pod's memory.high goes down.
        let num = |v: &Option<String>| v.as_deref().unwrap().parse::<i64>().unwrap();
        assert!(num(&pod_row.from) > num(&pod_row.to), "{pod_row:?}");
        assert_eq!(num(&pod_row.from) % 4096, 0);
    }

    #[test]
    fn a_node_leaving_every_policy_gives_back_every_value() {
        let pods = pods();
        let facts = facts();
        let a = super::super::node_view::compute(&settings(0.9), &facts, &pods).unwrap();
        let d = diff_node("n1", Some(&side("p", &a)), None);
        assert_eq!(d.policy.to, None);
        assert!(!d.cgroups.is_empty());
        assert!(d.cgroups.iter().all(|c| c.from.is_some() && c.to.is_none()));
        let table = render_table(&DiffReport {
            changes: true,
            policies: vec!["p".into()],
            nodes: vec![d],
        });
        assert!(table.contains("node n1: policy p -> -"), "{table}");
    }
}
