//! `kubectl nodemem diff -f POLICY.yaml`: which nodes a changed policy selects and, per
//! node and cgroup, which values change (pure; the cluster read is in `cluster`).
//!
//! Each side of a node is the node computed (`node_view::compute`, the agent's code)
//! for the settings that govern it: before, those of its NodeMemoryConfig (what its
//! agent enforces now); after, those of the policy that wins once the file's policies
//! replace the live ones of the same name. A file absent on a side is one nodemem does
//! not set there (its agent gives back what it set: memory.min/low 0, memory.high max).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use nodemem_api::revision::revision;
use nodemem_api::NodeMemoryPolicy;
use nodemem_model::node::DesiredNode;
use serde::Serialize;

use crate::cluster::Snapshot;
use crate::node_view;
use nodemem_api::convert::governing;

/// One side of a node: the governing policy, its revision and the computed node
/// (`None` for the node when the settings cannot be computed: `problems` say why).
pub struct Side<'a> {
    pub policy: String,
    pub revision: String,
    /// Agent, Kubelet or Observe: under Observe nodemem writes nothing, so that side's
    /// values are "not set by nodemem".
    pub enforcement: String,
    /// Proactive reclaim in a line (`reclaim_line`); None: off.
    pub reclaim: Option<String>,
    pub node: Option<&'a DesiredNode<'a>>,
    pub problems: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffReport {
    /// True when any node changes.
    pub changes: bool,
    /// A file policy the controller would not accept, or settings an agent would
    /// refuse: what the nodes run stays as it is (exit 2, as for an invalid file).
    pub refused: bool,
    /// The file's policies whose settings are invalid, with every problem.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub invalid_policies: Vec<String>,
    /// Changes of a file policy that move no value (not part of its revision): its
    /// rollout settings, priority, selector, recommendation settings.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policy_changes: Vec<String>,
    /// A file policy that would share nodes with another of the same priority: it
    /// reports `Conflicting`, and the tie moves none of them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
    /// The policies read from the file.
    pub policies: Vec<String>,
    pub nodes: Vec<NodeDiff>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeDiff {
    pub node: String,
    /// The node's kubelet version and the rules it chose, by which both sides'
    /// values are computed (`QosRules::applied`).
    pub kubelet_rules: String,
    pub policy: Change,
    pub revision: Change,
    /// How the values reach the node (Agent, Kubelet, Observe).
    pub enforcement: Change,
    /// Proactive reclaim: its mode and settings (None: off). It moves no value of its
    /// own (its writes to memory.reclaim are steps, not settings), but it is in the
    /// revision and changes what the node does.
    pub reclaim: Change,
    /// A handoff already under way, independent of the file: the node runs a policy
    /// it is leaving (`kubectl nodemem explain` says the same).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<String>,
    /// The settings cannot be computed for this node after the change (the agent would
    /// refuse them with these problems).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// Pods whose workload class changes (a class added to or taken from the policy
    /// their choice names, a node moving to a policy with other classes): their values
    /// follow another class's settings.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<ClassChange>,
    pub cgroups: Vec<ValueChange>,
}

/// A pod's workload class before and after; `None` is the pool's own settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClassChange {
    /// `NAMESPACE/POD`.
    pub pod: String,
    pub from: Option<String>,
    pub to: Option<String>,
    /// Where the pod's choice comes from (`pod annotation`, `namespace label`).
    pub chosen_by: String,
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
            || self.enforcement.changed()
            || self.reclaim.changed()
            || !self.cgroups.is_empty()
            || !self.classes.is_empty()
            || !self.problems.is_empty()
    }
}

/// The pods whose class differs between the two computed sides. Only pods that choose
/// a class can change one: a pod without a choice follows the pool on either side.
fn class_changes(
    before: Option<&DesiredNode<'_>>,
    after: Option<&DesiredNode<'_>>,
) -> Vec<ClassChange> {
    let classes =
        |d: Option<&DesiredNode<'_>>| -> BTreeMap<String, (Option<String>, &'static str)> {
            d.map(|d| {
                d.pods
                    .iter()
                    .filter(|p| p.names_a_class())
                    .map(|p| {
                        let key = format!("{}/{}", p.namespace, p.name);
                        (key, (p.class.map(str::to_string), p.class_source.as_str()))
                    })
                    .collect()
            })
            .unwrap_or_default()
        };
    let (b, a) = (classes(before), classes(after));
    let pods: std::collections::BTreeSet<&String> = b.keys().chain(a.keys()).collect();
    pods.into_iter()
        .filter_map(|pod| {
            let from = b.get(pod).and_then(|c| c.0.clone());
            let to = a.get(pod).and_then(|c| c.0.clone());
            let chosen_by = a.get(pod).or(b.get(pod))?.1.to_string();
            (from != to).then(|| ClassChange {
                pod: pod.clone(),
                from,
                to,
                chosen_by,
            })
        })
        .collect()
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

/// Proactive reclaim's settings in a line, as `diff` prints them; None: off (no
/// section, or `mode: Disabled`).
pub fn reclaim_line(reclaim: Option<&nodemem_api::policy::ReclaimSpec>) -> Option<String> {
    use nodemem_api::policy::ReclaimModeSpec;
    let r = reclaim.filter(|r| r.mode != ReclaimModeSpec::Disabled)?;
    let classes: Vec<String> = r.qos_classes.iter().map(|c| format!("{c:?}")).collect();
    Some(format!(
        "{:?} (stall target {} us/s, steps up to {} permille every {} s, back-off over {} refaults/s, {})",
        r.mode,
        r.target_stall_microseconds_per_second,
        r.max_step_permille,
        r.interval_seconds,
        r.max_refaults_per_second,
        classes.join(", ")
    ))
}

/// The difference on one node.
pub fn diff_node(name: &str, before: Option<&Side<'_>>, after: Option<&Side<'_>>) -> NodeDiff {
    let empty = BTreeMap::new();
    // Observe computes values and writes none: they are not what the node runs.
    let written = |s: &&Side<'_>| s.enforcement != "Observe";
    let before_values = before.filter(written).and_then(|s| s.node).map(values);
    let after_values = after.filter(written).and_then(|s| s.node).map(values);
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
    // People read the owner: rows in its order (the paths carry pod UIDs, whose order
    // says nothing), so that the same change prints the same table every time.
    cgroups.sort_by(|x, y| (&x.owner, &x.file, &x.path).cmp(&(&y.owner, &y.file, &y.path)));
    NodeDiff {
        node: name.to_string(),
        // Filled by the caller, which has the Node.
        kubelet_rules: String::new(),
        policy: Change {
            from: before.map(|s| s.policy.clone()),
            to: after.map(|s| s.policy.clone()),
        },
        revision: Change {
            from: before.map(|s| s.revision.clone()),
            to: after.map(|s| s.revision.clone()),
        },
        enforcement: Change {
            from: before.map(|s| s.enforcement.clone()),
            to: after.map(|s| s.enforcement.clone()),
        },
        reclaim: Change {
            from: before.and_then(|s| s.reclaim.clone()),
            to: after.and_then(|s| s.reclaim.clone()),
        },
        pending: None,
        problems: after.map(|s| s.problems.clone()).unwrap_or_default(),
        classes: class_changes(before.and_then(|s| s.node), after.and_then(|s| s.node)),
        cgroups,
    }
}

/// The cluster's policies once the file's replace the live ones of the same name.
fn after_policies(snapshot: &Snapshot, file: &[NodeMemoryPolicy]) -> Vec<NodeMemoryPolicy> {
    let name_of = |p: &NodeMemoryPolicy| p.metadata.name.clone().unwrap_or_default();
    let file_names: Vec<String> = file.iter().map(name_of).collect();
    let mut after: Vec<NodeMemoryPolicy> = snapshot
        .policies
        .iter()
        .filter(|p| !file_names.contains(&name_of(p)))
        .cloned()
        .collect();
    // A policy the file changes keeps its creation time (ties go to the oldest), its
    // deletion and its status (an invalid edit of an accepted policy keeps its nodes on
    // the last accepted revision; one never accepted takes none).
    after.extend(file.iter().map(|p| {
        let mut p = p.clone();
        if let Some(live) = snapshot.policies.iter().find(|l| name_of(l) == name_of(&p)) {
            p.metadata.creation_timestamp = live.metadata.creation_timestamp.clone();
            p.metadata.deletion_timestamp = live.metadata.deletion_timestamp.clone();
            p.status = live.status.clone();
        }
        p
    }));
    after
}

/// Whether `node` is one a file changes: the policy that governs it after, the one
/// that governs it now or the one its config names is one of the file's.
fn involves(
    snapshot: &Snapshot,
    after: &[NodeMemoryPolicy],
    file_names: &[String],
    node: &core::Node,
) -> bool {
    let name = node.metadata.name.clone().unwrap_or_default();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let config = snapshot.config(&name);
    let current = config.map(|c| c.spec.policy.as_str());
    let winner_after = governing(after, &labels, current).winner;
    let winner_live = governing(&snapshot.policies, &labels, current).winner;
    let involved = [
        winner_after.as_deref(),
        winner_live.as_deref(),
        config.map(|c| c.spec.policy.as_str()),
    ]
    .into_iter()
    .flatten()
    .any(|p| file_names.iter().any(|f| f == p));
    involved
}

/// The nodes a file's policies change: the only ones whose pods `diff` needs.
pub fn involved_nodes(snapshot: &Snapshot, file: &[NodeMemoryPolicy]) -> Vec<String> {
    let after = after_policies(snapshot, file);
    let file_names: Vec<String> = file
        .iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect();
    snapshot
        .nodes
        .iter()
        .filter(|n| involves(snapshot, &after, &file_names, n))
        .map(|n| n.metadata.name.clone().unwrap_or_default())
        .collect()
}

/// The difference the policies of a file would make on the cluster in `snapshot`:
/// every node whose governing policy (live, after, or the one its config names) is one
/// of the file's, with the file's policies replacing the live ones of the same name.
pub fn build(
    snapshot: &Snapshot,
    file: &[NodeMemoryPolicy],
    pods_by_node: &BTreeMap<String, Vec<core::Pod>>,
    namespaces: &[core::Namespace],
) -> DiffReport {
    let name_of = |p: &NodeMemoryPolicy| p.metadata.name.clone().unwrap_or_default();
    let file_names: Vec<String> = file.iter().map(name_of).collect();
    let after = after_policies(snapshot, file);
    let invalid_policies: Vec<String> = file
        .iter()
        .filter_map(|p| {
            let problems = nodemem_api::convert::node_settings(&p.spec.settings).err()?;
            let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
            Some(format!("policy {}: {}", name_of(p), text.join("; ")))
        })
        .collect();

    let policy_changes = spec_changes(&snapshot.policies, file);
    let mut conflicts: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
    let no_pods = Vec::new();
    let mut nodes = Vec::new();
    for node in &snapshot.nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let config = snapshot.config(&name);
        let current = config.map(|c| c.spec.policy.as_str());
        let resolved_after = governing(&after, &labels, current);
        if let Some(w) = &resolved_after.winner {
            let tied = std::iter::once(w).chain(&resolved_after.conflicting);
            for p in tied.filter(|p| file_names.contains(p)) {
                if !resolved_after.conflicting.is_empty() {
                    let others: Vec<String> = std::iter::once(w.clone())
                        .chain(resolved_after.conflicting.iter().cloned())
                        .filter(|o| o != p)
                        .collect();
                    let e = conflicts.entry(p.clone()).or_default();
                    e.0.push(name.clone());
                    e.1.extend(others);
                }
            }
        }
        let winner_after = resolved_after.winner;
        let winner_live = governing(&snapshot.policies, &labels, current).winner;
        if !involves(snapshot, &after, &file_names, node) {
            continue;
        }
        let pods = pods_by_node.get(&name).unwrap_or(&no_pods);
        let node_pods = node_view::node_pods(node, pods, namespaces);
        let facts = node_view::node_facts(node, config);
        let before_node = match config.map(node_view::config_settings) {
            Some(Ok(s)) => node_view::compute(&s, &facts, &node_pods.pods).ok(),
            _ => None,
        };
        let after_policy = winner_after
            .as_deref()
            .and_then(|w| after.iter().find(|p| p.metadata.name.as_deref() == Some(w)));
        let (after_node, after_problems) = match after_policy.map(node_view::policy_settings) {
            Some(Ok(s)) => match node_view::compute(&s, &facts, &node_pods.pods) {
                Ok(d) => (Some(d), Vec::new()),
                Err(ps) => (None, ps),
            },
            Some(Err(ps)) => (None, ps),
            None => (None, Vec::new()),
        };
        // Refused settings change nothing: the agent keeps what it runs (and the
        // controller keeps an invalid policy's nodes on the last accepted revision).
        let refused = !after_problems.is_empty();
        let after_node = if refused { None } else { after_node };
        let before = config.map(|c| Side {
            policy: c.spec.policy.clone(),
            revision: c.spec.revision.clone(),
            enforcement: format!("{:?}", c.spec.settings.enforcement),
            reclaim: reclaim_line(c.spec.settings.reclaim.as_ref()),
            node: before_node.as_ref(),
            problems: Vec::new(),
        });
        let after_side = after_policy.map(|p| Side {
            policy: name_of(p),
            revision: revision(&p.spec.settings),
            enforcement: format!("{:?}", p.spec.settings.enforcement),
            reclaim: reclaim_line(p.spec.settings.reclaim.as_ref()),
            node: if refused {
                before_node.as_ref()
            } else {
                after_node.as_ref()
            },
            problems: after_problems.clone(),
        });
        let mut diff = diff_node(&name, before.as_ref(), after_side.as_ref());
        diff.kubelet_rules = crate::explain::kubelet_rules(node);
        diff.pending = config.and_then(|c| crate::explain::handoff(c, winner_live.as_deref()));
        nodes.push(diff);
    }
    let conflicts: Vec<String> = conflicts
        .into_iter()
        .map(|(p, (nodes, mut with))| {
            with.sort();
            with.dedup();
            format!(
                "policy {p} will report Conflicting: {} node(s) also selected by {} with the same priority (a tie moves none of them): {}",
                nodes.len(),
                with.join(", "),
                nodes.join(", ")
            )
        })
        .collect();
    DiffReport {
        changes: nodes.iter().any(NodeDiff::changed) || !policy_changes.is_empty(),
        policy_changes,
        conflicts,
        refused: !invalid_policies.is_empty() || nodes.iter().any(|n| !n.problems.is_empty()),
        invalid_policies,
        policies: file_names,
        nodes,
    }
}

/// What a file changes in its policies' specs beyond their settings (which the nodes'
/// values show): rollout, priority, selector, recommendation; one line per field.
fn spec_changes(live: &[NodeMemoryPolicy], file: &[NodeMemoryPolicy]) -> Vec<String> {
    let mut out = Vec::new();
    for p in file {
        let name = p.metadata.name.clone().unwrap_or_default();
        let Some(old) = live
            .iter()
            .find(|l| l.metadata.name.as_deref() == Some(name.as_str()))
        else {
            continue;
        };
        let (before, after) = (
            serde_json::to_value(&old.spec).unwrap_or_default(),
            serde_json::to_value(&p.spec).unwrap_or_default(),
        );
        // The settings are the revision: their effect is said per node (values,
        // enforcement, reclaim). Their keys are those the settings serialize to (the
        // spec flattens them), on either side.
        let settings: Vec<serde_json::Value> = [&old.spec.settings, &p.spec.settings]
            .into_iter()
            .map(|s| serde_json::to_value(s).unwrap_or_default())
            .collect();
        let is_setting = |k: &str| settings.iter().any(|s| s.get(k).is_some());
        let keys: std::collections::BTreeSet<&String> = before
            .as_object()
            .into_iter()
            .chain(after.as_object())
            .flat_map(|o| o.keys())
            .filter(|k| !is_setting(k))
            .collect();
        for key in keys {
            let (b, a) = (&before[key.as_str()], &after[key.as_str()]);
            if b == a {
                continue;
            }
            match (b.as_object(), a.as_object()) {
                (Some(bo), Some(ao)) if key == "rollout" => {
                    let fields: std::collections::BTreeSet<&String> =
                        bo.keys().chain(ao.keys()).collect();
                    for f in fields {
                        let (bf, af) = (&b[f.as_str()], &a[f.as_str()]);
                        if bf != af {
                            out.push(format!("policy {name}: spec.{key}.{f} {bf} -> {af}"));
                        }
                    }
                }
                _ => out.push(format!("policy {name}: spec.{key} {b} -> {a}")),
            }
        }
    }
    out
}

/// The table for people: one block per changed node.
pub fn render_table(report: &DiffReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for p in &report.invalid_policies {
        let _ = writeln!(out, "not accepted: {p}");
    }
    for c in &report.conflicts {
        let _ = writeln!(out, "warning: {c}");
    }
    for c in &report.policy_changes {
        let _ = writeln!(out, "{c}");
    }
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
        if !n.kubelet_rules.is_empty() {
            let _ = writeln!(out, "  kubelet {}", n.kubelet_rules);
        }
        if let Some(p) = &n.pending {
            let _ = writeln!(out, "  pending handoff: {p}");
        }
        if n.enforcement.changed() {
            let _ = writeln!(
                out,
                "  enforcement {} -> {} (\"-\" on an Observe side: computed, never written)",
                dash(&n.enforcement.from),
                dash(&n.enforcement.to)
            );
        }
        if n.reclaim.changed() {
            let _ = writeln!(
                out,
                "  reclaim {} -> {} (\"-\": off)",
                dash(&n.reclaim.from),
                dash(&n.reclaim.to)
            );
        }
        for p in &n.problems {
            let _ = writeln!(out, "  refused: {p}");
        }
        if !n.problems.is_empty() {
            let _ = writeln!(
                out,
                "  nothing changes on this node: its agent keeps the values it runs"
            );
        }
        for c in &n.classes {
            let class = |v: &Option<String>| v.clone().unwrap_or_else(|| "pool".into());
            let _ = writeln!(
                out,
                "  pod {}: class {} -> {} (chosen by {}; \"pool\": the pool's own settings)",
                c.pod,
                class(&c.from),
                class(&c.to),
                c.chosen_by
            );
        }
        if !n.cgroups.is_empty() {
            // The cgroup paths are in -o json|yaml; people read the owner.
            let mut table = crate::render::table(&["CGROUP OF", "FILE", "FROM", "TO"]);
            for c in &n.cgroups {
                // Memory values in binary units; cpuset.mems is a list of NUMA nodes.
                let shown = |v: &Option<String>| match v {
                    Some(v) if c.file.starts_with("memory.") => crate::render::memory(v),
                    _ => dash(v),
                };
                table.add_row(vec![
                    c.owner.clone(),
                    c.file.clone(),
                    shown(&c.from),
                    shown(&c.to),
                ]);
            }
            let _ = writeln!(out, "{}", crate::render::text(&table));
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
    use nodemem_model::class::CLASS_KEY as CLASS;
    use nodemem_model::node::{NodeFacts, NodePod};
    use nodemem_model::settings::NodeSettings;
    use nodemem_model::values::memory_qos::MemoryQosSettings;

    fn pods() -> Vec<NodePod> {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {
                "requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}}]},
            "status": {"containerStatuses": [{"name": "c", "containerID": "containerd://0123abcd",
                "image": "i", "imageID": "", "ready": true, "restartCount": 0}]}
        }))
        .unwrap();
        vec![nodemem_api::k8s::node_pod_from_k8s(&pod, &Default::default()).unwrap()]
    }

    fn facts() -> NodeFacts {
        let mut f = NodeFacts::default();
        f.memory.allocatable_memory = Some(8 << 30);
        f.memory.kernel_version = Some("6.1.0".into());
        f
    }

    fn settings(factor: f64) -> NodeSettings {
        NodeSettings {
            memory_qos: MemoryQosSettings {
                enabled: true,
                throttling_factor: Some(
                    nodemem_model::values::factor::ThrottlingFactor::from_f64(factor).unwrap(),
                ),
                ..MemoryQosSettings::default()
            },
            ..NodeSettings::default()
        }
    }

    fn side<'a>(policy: &str, node: &'a DesiredNode<'a>) -> Side<'a> {
        Side {
            policy: policy.into(),
            revision: format!("r-{policy}"),
            enforcement: "Agent".into(),
            reclaim: None,
            node: Some(node),
            problems: vec![],
        }
    }

    #[test]
    fn the_same_settings_change_nothing_and_a_new_factor_changes_memory_high_only() {
        let pods = pods();
        let facts = facts();
        let a = crate::node_view::compute(&settings(0.9), &facts, &pods).unwrap();
        let b = crate::node_view::compute(&settings(0.9), &facts, &pods).unwrap();
        let same = diff_node("n1", Some(&side("p", &a)), Some(&side("p", &b)));
        assert!(!same.changed(), "{same:?}");

        let c = crate::node_view::compute(&settings(0.8), &facts, &pods).unwrap();
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

    /// A live policy the controller accepted (its revision recorded in its status).
    fn policy(name: &str, pool: &str, priority: i32, factor: f64) -> NodeMemoryPolicy {
        let mut p: NodeMemoryPolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"matchLabels": {"pool": pool}}, "priority": priority,
                "memoryQoS": {"throttlingFactor": factor, "reservationPolicy": "TieredReservation"}}
        }))
        .unwrap();
        p.status = Some(nodemem_api::NodeMemoryPolicyStatus {
            revisions: vec![nodemem_api::policy::RevisionRecord {
                revision: revision(&p.spec.settings),
                settings: p.spec.settings.clone(),
            }],
            ..Default::default()
        });
        p
    }

    fn node(name: &str, pool: &str) -> core::Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"pool": pool}},
            "status": {"allocatable": {"memory": "8Gi"}, "nodeInfo": {"kernelVersion": "6.1.0",
                "architecture": "", "bootID": "", "containerRuntimeVersion": "", "kubeProxyVersion": "",
                "kubeletVersion": "", "machineID": "", "operatingSystem": "", "osImage": "", "systemUUID": ""}}
        }))
        .unwrap()
    }

    /// The config the controller writes for `p` on `node`.
    fn config(node: &str, p: &NodeMemoryPolicy) -> nodemem_api::NodeMemoryConfig {
        nodemem_api::NodeMemoryConfig {
            metadata: kube::api::ObjectMeta {
                name: Some(node.into()),
                ..Default::default()
            },
            spec: nodemem_api::NodeMemoryConfigSpec {
                policy: p.metadata.name.clone().unwrap(),
                revision: revision(&p.spec.settings),
                settings: p.spec.settings.clone(),
                health: Default::default(),
            },
            status: None,
        }
    }

    fn pod_on(node: &str, uid: &str) -> core::Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("web-{uid}"), "namespace": "default", "uid": uid},
            "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
                "requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}}]},
            "status": {"containerStatuses": [{"name": "c", "containerID": format!("containerd://{uid}"),
                "image": "i", "imageID": "", "ready": true, "restartCount": 0}]}
        }))
        .unwrap()
    }

    #[test]
    fn only_nodes_the_file_touches_are_listed_with_their_moves_between_policies() {
        let (a, b, c) = (
            policy("a", "a", 0, 0.9),
            policy("b", "b", 0, 0.9),
            policy("c", "c", 0, 0.9),
        );
        let snapshot = Snapshot {
            policies: vec![a.clone(), b.clone(), c.clone()],
            nodes: vec![node("n1", "a"), node("n2", "b"), node("n3", "c")],
            configs: vec![config("n1", &a), config("n2", &b), config("n3", &c)],
        };
        let pods: BTreeMap<String, Vec<core::Pod>> = ["n1", "n2", "n3"]
            .iter()
            .map(|n| (n.to_string(), vec![pod_on(n, &format!("{n}-uid"))]))
            .collect();

        // Unchanged: nothing changes, and the untouched pools are not listed.
        let same = build(&snapshot, std::slice::from_ref(&a), &pods, &[]);
        assert!(!same.changes);
        assert_eq!(
            same.nodes
                .iter()
                .map(|n| n.node.as_str())
                .collect::<Vec<_>>(),
            ["n1"]
        );

        // Policy a now selects pool b with a higher priority: n1 is released (every
        // value given back), n2 moves from b to a with a's factor, n3 is not listed.
        let moved = policy("a", "b", 10, 0.5);
        let r = build(&snapshot, std::slice::from_ref(&moved), &pods, &[]);
        assert!(r.changes);
        let listed: Vec<&str> = r.nodes.iter().map(|n| n.node.as_str()).collect();
        assert_eq!(listed, ["n1", "n2"]);
        let n1 = &r.nodes[0];
        assert_eq!(
            (n1.policy.from.as_deref(), n1.policy.to.as_deref()),
            (Some("a"), None)
        );
        assert!(n1.cgroups.iter().all(|c| c.to.is_none()) && !n1.cgroups.is_empty());
        let n2 = &r.nodes[1];
        assert_eq!(
            (n2.policy.from.as_deref(), n2.policy.to.as_deref()),
            (Some("b"), Some("a"))
        );
        assert_eq!(n2.revision.to, Some(revision(&moved.spec.settings)));
        let high = n2
            .cgroups
            .iter()
            .find(|c| c.owner == "default/web-n2-uid/c")
            .unwrap();
        assert_eq!(high.file, "memory.high");
        // 1Gi request, 2Gi limit: 1Gi + 0.5 x 1Gi, a whole number of pages.
        assert_eq!(high.to.as_deref(), Some("1610612736"));

        // Invalid settings: not accepted; the node is listed with the problems and no
        // value changes (the pool keeps the last accepted revision); refused (exit 2).
        let mut bad = policy("a", "a", 0, 0.9);
        bad.spec.settings.memory_manager.policy = nodemem_api::policy::MemoryManagerPolicy::Static;
        bad.status = None;
        let r = build(&snapshot, &[bad], &pods, &[]);
        assert!(r.refused && r.changes);
        assert!(!r.nodes[0].problems.is_empty(), "{:?}", r.nodes[0]);
        assert!(r.nodes[0].cgroups.is_empty(), "{:?}", r.nodes[0]);
        assert_eq!(r.invalid_policies.len(), 1);
        assert!(
            r.invalid_policies[0].starts_with("policy a: "),
            "{:?}",
            r.invalid_policies
        );
        let table = render_table(&r);
        assert!(table.contains("nothing changes on this node"), "{table}");
        // A new policy that was never valid takes no node: nothing moves.
        let mut never = policy("z", "a", 50, 0.5);
        never.spec.settings.memory_manager.policy =
            nodemem_api::policy::MemoryManagerPolicy::Static;
        never.status = None;
        let r = build(&snapshot, &[never], &pods, &[]);
        assert!(r.refused);
        assert!(
            r.nodes.iter().all(|n| n.cgroups.is_empty()),
            "{:?}",
            r.nodes
        );
    }

    #[test]
    fn a_node_leaving_every_policy_gives_back_every_value() {
        let pods = pods();
        let facts = facts();
        let a = crate::node_view::compute(&settings(0.9), &facts, &pods).unwrap();
        let d = diff_node("n1", Some(&side("p", &a)), None);
        assert_eq!(d.policy.to, None);
        assert!(!d.cgroups.is_empty());
        assert!(d.cgroups.iter().all(|c| c.from.is_some() && c.to.is_none()));
        let table = render_table(&DiffReport {
            changes: true,
            refused: false,
            invalid_policies: Vec::new(),
            policy_changes: Vec::new(),
            conflicts: Vec::new(),
            policies: vec!["p".into()],
            nodes: vec![d],
        });
        assert!(table.contains("node n1: policy p -> -"), "{table}");
    }

    /// One node `n1` of pool `a`, its config from `p`, and one pod on it.
    fn one_node(p: &NodeMemoryPolicy) -> (Snapshot, BTreeMap<String, Vec<core::Pod>>) {
        let snapshot = Snapshot {
            policies: vec![p.clone()],
            nodes: vec![node("n1", "a")],
            configs: vec![config("n1", p)],
        };
        let pods = [("n1".to_string(), vec![pod_on("n1", "n1-uid")])].into();
        (snapshot, pods)
    }

    /// Classes added to a policy: a pod whose annotation names one, and a pod whose
    /// namespace's label does, move from the pool's settings to their class's, said per
    /// pod with where the choice came from; a pod without a choice does not move.
    #[test]
    fn classes_added_to_a_policy_move_the_pods_that_choose_them() {
        let a = policy("a", "a", 0, 0.9);
        let (snapshot, mut pods) = one_node(&a);
        let mut batch = pod_on("n1", "b-uid");
        batch.metadata.annotations = Some([(CLASS.into(), "batch".into())].into());
        let mut shop = pod_on("n1", "s-uid");
        shop.metadata.namespace = Some("shop".into());
        pods.get_mut("n1").unwrap().extend([batch, shop]);
        let namespace: core::Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "shop", "labels": {CLASS: "service"}}}))
        .unwrap();
        let mut classed = a.clone();
        classed.spec.settings.classes = serde_json::from_value(serde_json::json!([
            {"name": "service", "memoryHigh": "None"},
            {"name": "batch", "throttlingFactor": 0.5, "protection": "None"}]))
        .unwrap();
        let r = build(
            &snapshot,
            std::slice::from_ref(&classed),
            &pods,
            &[namespace],
        );
        let n1 = &r.nodes[0];
        let moved: Vec<(&str, Option<&str>, Option<&str>, &str)> = n1
            .classes
            .iter()
            .map(|c| {
                (
                    c.pod.as_str(),
                    c.from.as_deref(),
                    c.to.as_deref(),
                    c.chosen_by.as_str(),
                )
            })
            .collect();
        assert_eq!(
            moved,
            [
                ("default/web-b-uid", None, Some("batch"), "pod annotation"),
                ("shop/web-s-uid", None, Some("service"), "namespace label"),
            ]
        );
        let high = |owner: &str| {
            n1.cgroups
                .iter()
                .find(|c| c.owner == owner && c.file == "memory.high")
        };
        assert!(high("default/web-n1-uid/c").is_none(), "{:?}", n1.cgroups);
        let batch_high = high("default/web-b-uid/c").unwrap();
        let num = |v: &Option<String>| v.as_deref().unwrap().parse::<i64>().unwrap();
        assert!(
            num(&batch_high.from) > num(&batch_high.to),
            "{batch_high:?}"
        );
        assert_eq!(high("shop/web-s-uid/c").unwrap().to, None, "no memory.high");
        let table = render_table(&r);
        assert!(
            table.contains(
                "  pod default/web-b-uid: class pool -> batch (chosen by pod annotation;"
            ),
            "{table}"
        );
        // Taken away again: the same pods move back.
        let (snapshot, _) = one_node(&classed);
        let back = build(&snapshot, std::slice::from_ref(&a), &pods, &[]);
        let back: Vec<(Option<&str>, Option<&str>)> = back.nodes[0]
            .classes
            .iter()
            .map(|c| (c.from.as_deref(), c.to.as_deref()))
            .collect();
        assert_eq!(
            back,
            [(Some("batch"), None)],
            "the namespace is not given: one pod"
        );
    }

    #[test]
    fn reclaim_turned_on_is_a_change_of_the_node_without_a_value() {
        let a = policy("a", "a", 0, 0.9);
        let (snapshot, pods) = one_node(&a);
        let mut on = a.clone();
        on.spec.settings.reclaim = Some(nodemem_api::policy::ReclaimSpec {
            mode: nodemem_api::policy::ReclaimModeSpec::Active,
            ..Default::default()
        });
        let r = build(&snapshot, std::slice::from_ref(&on), &pods, &[]);
        assert!(r.changes, "reclaim is in the revision: the node changes");
        assert!(
            r.policy_changes.is_empty(),
            "said per node: {:?}",
            r.policy_changes
        );
        let n1 = &r.nodes[0];
        assert!(n1.cgroups.is_empty(), "it moves no value: {:?}", n1.cgroups);
        assert_ne!(n1.revision.from, n1.revision.to);
        assert_eq!(n1.reclaim.from, None);
        let table = render_table(&r);
        assert!(
            table.contains("  reclaim - -> Active (stall target 1000 us/s, steps up to 10 permille every 6 s, back-off over 100 refaults/s, Burstable, BestEffort) (\"-\": off)"),
            "{table}"
        );
        assert!(
            table.contains("1 node(s) change, 0 cgroup value(s) change"),
            "{table}"
        );
        // Disabled reads as off: from Active to Disabled is a change to "-", and
        // Disabled to no section none.
        let mut disabled = on.clone();
        disabled.spec.settings.reclaim.as_mut().unwrap().mode =
            nodemem_api::policy::ReclaimModeSpec::Disabled;
        assert_eq!(reclaim_line(disabled.spec.settings.reclaim.as_ref()), None);
        let (snapshot_on, _) = one_node(&on);
        let r = build(&snapshot_on, std::slice::from_ref(&disabled), &pods, &[]);
        assert!(r.nodes[0].reclaim.changed() && r.nodes[0].reclaim.to.is_none());
    }

    /// `diff` reads the pods of the nodes a file changes and no others: those its
    /// policies govern now, would govern, or whose configs name them.
    #[test]
    fn only_the_nodes_a_file_changes_are_involved() {
        let a = policy("a", "a", 0, 0.9);
        let b = policy("b", "b", 0, 0.9);
        let snapshot = Snapshot {
            policies: vec![a.clone(), b.clone()],
            nodes: vec![
                node("a1", "a"),
                node("a2", "a"),
                node("b1", "b"),
                node("c1", "c"),
            ],
            configs: vec![config("a1", &a), config("a2", &a), config("b1", &b)],
        };
        assert_eq!(
            involved_nodes(&snapshot, &[policy("a", "a", 0, 0.8)]),
            ["a1", "a2"]
        );
        assert_eq!(
            involved_nodes(&snapshot, &[policy("b", "b", 0, 0.8)]),
            ["b1"]
        );
        // A new policy for pool c, and a's moved to select c: c1 joins, a's nodes stay
        // involved (they leave a).
        assert_eq!(
            involved_nodes(&snapshot, &[policy("new", "c", 0, 0.8)]),
            ["c1"]
        );
        assert_eq!(
            involved_nodes(&snapshot, &[policy("a", "c", 0, 0.8)]),
            ["a1", "a2", "c1"]
        );
        assert!(involved_nodes(&snapshot, &[policy("other", "z", 0, 0.8)]).is_empty());
    }

    /// Both sides of a node are computed by the rules its kubelet's version chooses:
    /// the diff names them (a v1.38 kubelet keeps v1.37's, as its own code shows).
    #[test]
    fn the_kubelet_rules_of_each_node_are_named() {
        let a = policy("a", "a", 0, 0.9);
        let (mut snapshot, pods) = one_node(&a);
        for (version, said) in [
            ("v1.38.0-beta.0", "  kubelet v1.38.0 (v1.37 rules: memory.high on the pod cgroup of a pod with pod-level resources)"),
            ("v1.36.3", "  kubelet v1.36.3 (v1.36 rules: memory.high on containers only)"),
        ] {
            snapshot.nodes[0].status.as_mut().unwrap().node_info.as_mut().unwrap().kubelet_version =
                version.into();
            let r = build(&snapshot, &[policy("a", "a", 0, 0.8)], &pods, &[]);
            assert_eq!(r.nodes[0].kubelet_rules, said.trim_start().trim_start_matches("kubelet "));
            let table = render_table(&r);
            assert!(table.contains(&format!("{said}\n")), "{table}");
        }
    }

    /// What a diff must not hide: enforcement going from Observe (whose values were never
    /// written) to Agent, a rollout setting that changes no value, and a new policy
    /// that would tie with a live one.
    #[test]
    fn enforcement_rollout_settings_and_ties_are_said() {
        let mut a = policy("a", "a", 0, 0.9);
        a.spec.settings.enforcement = nodemem_api::policy::Enforcement::Observe;
        a.spec.rollout.min_ready_seconds = 60;
        let (snapshot, pods) = one_node(&a);

        let mut enforced = a.clone();
        enforced.spec.settings.enforcement = nodemem_api::policy::Enforcement::Agent;
        let r = build(&snapshot, std::slice::from_ref(&enforced), &pods, &[]);
        let n1 = &r.nodes[0];
        assert_eq!(
            (n1.enforcement.from.as_deref(), n1.enforcement.to.as_deref()),
            (Some("Observe"), Some("Agent"))
        );
        assert!(!n1.cgroups.is_empty());
        assert!(
            n1.cgroups
                .iter()
                .all(|c| c.from.is_none() && c.to.is_some()),
            "Observe wrote nothing: {:?}",
            n1.cgroups
        );
        assert!(render_table(&r).contains("enforcement Observe -> Agent"));

        let mut slower = a.clone();
        slower.spec.rollout.min_ready_seconds = 10;
        let r = build(&snapshot, std::slice::from_ref(&slower), &pods, &[]);
        assert!(r.changes, "a rollout setting is a change");
        assert_eq!(
            r.policy_changes,
            ["policy a: spec.rollout.minReadySeconds 60 -> 10"]
        );
        assert!(r.nodes.iter().all(|n| n.cgroups.is_empty()));

        let tie = policy("z", "a", 0, 0.5);
        let r = build(&snapshot, std::slice::from_ref(&tie), &pods, &[]);
        assert!(!r.changes, "a tie moves no node");
        assert_eq!(r.conflicts.len(), 1, "{:?}", r.conflicts);
        assert!(
            r.conflicts[0]
                .starts_with("policy z will report Conflicting: 1 node(s) also selected by a"),
            "{:?}",
            r.conflicts
        );
        let table = render_table(&r);
        assert!(
            table.contains("warning: policy z will report Conflicting")
                && table.contains("No changes"),
            "{table}"
        );
    }
}
