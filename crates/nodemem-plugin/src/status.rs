//! `kubectl nodemem status`: every policy and its pool, rollout progress, failing nodes
//! with reasons, and conflicts (pure, from a [`Snapshot`]).

use std::fmt::Write;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use nodemem_api::{NodeMemoryConfig, NodeMemoryPolicy};
use serde::Serialize;

use nodemem_model::cluster::rollout::AgentReport;

use crate::cluster::Snapshot;
use crate::render::table;
use nodemem_api::convert::governing;
use nodemem_api::report::{failure, report, waiting_on, ConfigEntry};

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub policies: Vec<PolicyRow>,
    /// Nodes no policy selects.
    pub unmanaged_nodes: Vec<String>,
    pub failing_nodes: Vec<FailingNode>,
    pub conflicts: Vec<Conflict>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRow {
    pub name: String,
    pub priority: i32,
    pub enforcement: String,
    /// The spec's revision.
    pub revision: Option<String>,
    /// The revision the pool runs or moves to: the spec's, the previous one after a
    /// rollback, the last accepted one while the spec is invalid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_revision: Option<String>,
    /// Nodes that still run its values while they leave it.
    pub leaving: i32,
    /// Deleted: held by the handoff finalizer until its nodes have left.
    pub deleting: bool,
    pub matched: i32,
    /// Selected nodes where the agent cannot run (not governed), with why.
    pub excluded: i32,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub excluded_nodes: Vec<nodemem_api::policy::ExcludedNode>,
    pub updated: i32,
    pub ready: i32,
    pub failed: i32,
    /// The Progressing condition's reason (Complete, Updating, WaitingForCanary, Paused,
    /// MaxFailures, RollingBack, RolledBack, Releasing, InvalidSpec) or Invalid /
    /// Unknown.
    pub state: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolled_back_revision: Option<String>,
    /// Its workload classes with the pods that run each over the pool (as the
    /// controller last summed its agents' reports).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<nodemem_api::policy::ClassPods>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FailingNode {
    pub node: String,
    pub policy: String,
    /// The condition that failed (Applied or Healthy) and its reason.
    pub condition: String,
    pub reason: String,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Conflict {
    pub node: String,
    /// The policy that governs (highest priority; a tie keeps the node where it is).
    pub governs: String,
    /// Policies of the same priority that also select the node.
    pub also: Vec<String>,
}

fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// The state of a policy the controller has not written a condition for yet.
pub const UNREPORTED: &str = "Unknown";

fn policy_row(p: &NodeMemoryPolicy) -> PolicyRow {
    let status = p.status.clone().unwrap_or_default();
    let accepted = find(&status.conditions, "Accepted");
    let progressing = find(&status.conditions, "Progressing");
    let (state, message) = match (accepted, progressing) {
        (Some(a), _) if a.status == "False" => (a.reason.clone(), a.message.clone()),
        (_, Some(c)) => (c.reason.clone(), c.message.clone()),
        _ => (
            UNREPORTED.into(),
            "the controller has not reported yet".into(),
        ),
    };
    PolicyRow {
        name: p.metadata.name.clone().unwrap_or_default(),
        priority: p.spec.priority,
        enforcement: format!("{:?}", p.spec.settings.enforcement),
        revision: status.revision.clone(),
        target_revision: target_revision(p),
        leaving: status.leaving_nodes,
        deleting: p.metadata.deletion_timestamp.is_some(),
        matched: status.matched_nodes,
        excluded: status.excluded_nodes,
        excluded_nodes: status.excluded_node_names.clone(),
        updated: status.updated_nodes,
        ready: status.ready_nodes,
        failed: status.failed_nodes,
        state,
        message,
        rolled_back_revision: status.rolled_back_revision.clone(),
        classes: status.pool.map(|p| p.classes).unwrap_or_default(),
    }
}

/// A node's agent reports a failure for its current config (the controller's own
/// judgement, `decide::failure`).
fn failing(c: &NodeMemoryConfig) -> Option<FailingNode> {
    let entry = ConfigEntry::from(c);
    let cond = failure(&entry)?;
    Some(FailingNode {
        node: c.metadata.name.clone().unwrap_or_default(),
        policy: c.spec.policy.clone(),
        condition: cond.type_.clone(),
        reason: cond.reason.clone(),
        message: cond.message.clone(),
    })
}

/// The revision a policy's pool moves to: its spec's, the one before it after a rollback,
/// the last accepted one while the spec is invalid (`status.targetRevision`; derived for
/// a status an older controller wrote).
pub fn target_revision(p: &NodeMemoryPolicy) -> Option<String> {
    let st = p.status.as_ref()?;
    if st.target_revision.is_some() {
        return st.target_revision.clone();
    }
    let current = st.revision.clone()?;
    if st.rolled_back_revision.as_deref() == Some(current.as_str()) {
        return st.revisions.get(1).map(|r| r.revision.clone());
    }
    Some(current)
}

/// A node's place in its rollout, from its config, in the rollout's own words (the
/// controller's planner, `nodemem_model::cluster::rollout::phase`): `Failed (Applied <reason>)`,
/// `Waiting` (its policy rolls out another revision), `Ready` (applied and healthy for
/// the policy's minReadySeconds), or `Updating`, with the seconds still to go once its
/// agent reports it applied and healthy: a node counts as ready exactly when its policy
/// counts it so.
pub fn node_state(
    c: &NodeMemoryConfig,
    policy_revision: Option<&str>,
    min_ready_seconds: u64,
    now: i64,
) -> String {
    let entry = ConfigEntry::from(c);
    if let Some(f) = failure(&entry) {
        return format!("Failed ({} {})", f.type_, f.reason);
    }
    if policy_revision.is_some_and(|r| r != c.spec.revision) {
        return "Waiting".into();
    }
    match report(&entry, now) {
        AgentReport::Good { for_seconds } if for_seconds >= min_ready_seconds => "Ready".into(),
        AgentReport::Good { for_seconds } => {
            format!("Updating (ready in {}s)", min_ready_seconds - for_seconds)
        }
        // A gate that cannot be evaluated (no PSI) holds the node: said, not "Updating".
        AgentReport::Pending => match waiting_on(&entry).filter(|w| w.status == "Unknown") {
            Some(w) => format!("Held ({} Unknown {})", w.type_, w.reason),
            None => "Updating".into(),
        },
        AgentReport::Bad => "Updating".into(),
    }
}

/// The policy's minReadySeconds (0 for a policy not found).
pub fn min_ready_seconds(p: Option<&NodeMemoryPolicy>) -> u64 {
    p.map_or(0, |p| p.spec.rollout.min_ready_seconds.max(0) as u64)
}

/// Now, in seconds, for how long agents' reports have been good.
pub fn now_seconds() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

pub fn build(s: &Snapshot) -> StatusReport {
    let mut policies: Vec<PolicyRow> = s.policies.iter().map(policy_row).collect();
    policies.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(&b.name)));
    let mut unmanaged_nodes = Vec::new();
    let mut conflicts = Vec::new();
    for node in &s.nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let current = s.config(&name).map(|c| c.spec.policy.as_str());
        let r = governing(&s.policies, &labels, current);
        match r.winner {
            None => unmanaged_nodes.push(name),
            Some(w) if !r.conflicting.is_empty() => conflicts.push(Conflict {
                node: name,
                governs: w,
                also: r.conflicting,
            }),
            Some(_) => {}
        }
    }
    let mut failing_nodes: Vec<FailingNode> = s.configs.iter().filter_map(failing).collect();
    failing_nodes.sort_by(|a, b| a.node.cmp(&b.node));
    StatusReport {
        policies,
        unmanaged_nodes,
        failing_nodes,
        conflicts,
    }
}

/// The report of one policy: its row, its failing nodes and the conflicts it is in
/// (nodes no policy selects are not its); an error naming it when there is no such
/// policy.
pub fn only(r: StatusReport, policy: &str) -> Result<StatusReport, String> {
    if !r.policies.iter().any(|p| p.name == policy) {
        let known: Vec<&str> = r.policies.iter().map(|p| p.name.as_str()).collect();
        return Err(format!(
            "no NodeMemoryPolicy {policy:?} (the cluster has {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ));
    }
    Ok(StatusReport {
        policies: r
            .policies
            .into_iter()
            .filter(|p| p.name == policy)
            .collect(),
        unmanaged_nodes: Vec::new(),
        failing_nodes: r
            .failing_nodes
            .into_iter()
            .filter(|f| f.policy == policy)
            .collect(),
        conflicts: r
            .conflicts
            .into_iter()
            .filter(|c| c.governs == policy || c.also.iter().any(|a| a == policy))
            .collect(),
    })
}

pub fn render_table(r: &StatusReport) -> String {
    let mut out = String::new();
    if r.policies.is_empty() {
        out.push_str("No NodeMemoryPolicies.\n");
    } else {
        let mut t = table(&[
            "POLICY",
            "PRIORITY",
            "ENFORCEMENT",
            "REVISION",
            "TARGET",
            "NODES",
            "EXCLUDED",
            "UPDATED",
            "READY",
            "FAILED",
            "LEAVING",
            "ROLLOUT",
        ]);
        for p in &r.policies {
            t.add_row(vec![
                if p.deleting {
                    format!("{} (deleted)", p.name)
                } else {
                    p.name.clone()
                },
                p.priority.to_string(),
                p.enforcement.clone(),
                p.revision.clone().unwrap_or_else(|| "-".into()),
                p.target_revision.clone().unwrap_or_else(|| "-".into()),
                p.matched.to_string(),
                p.excluded.to_string(),
                p.updated.to_string(),
                p.ready.to_string(),
                p.failed.to_string(),
                p.leaving.to_string(),
                p.state.clone(),
            ]);
        }
        let _ = writeln!(out, "{}", crate::render::text(&t));
        for p in r.policies.iter().filter(|p| p.state != "Complete") {
            let _ = writeln!(out, "  {}: {}", p.name, p.message);
        }
        for p in r.policies.iter().filter(|p| !p.classes.is_empty()) {
            let counts: Vec<String> = p
                .classes
                .iter()
                .map(|c| format!("{} {}", c.name, c.pods))
                .collect();
            let _ = writeln!(
                out,
                "  {}: pods per class: {} (the others run the pool's settings)",
                p.name,
                counts.join(", ")
            );
        }
        for p in r.policies.iter().filter(|p| p.excluded > 0) {
            let named: Vec<String> = p
                .excluded_nodes
                .iter()
                .map(|e| format!("{} ({})", e.name, e.reason))
                .collect();
            let more = p.excluded as usize - named.len().min(p.excluded as usize);
            let _ = writeln!(
                out,
                "  {}: {} selected node(s) where nodemem's agent cannot run, not governed: {}{}",
                p.name,
                p.excluded,
                named.join("; "),
                if more > 0 {
                    format!("; and {more} more")
                } else {
                    String::new()
                }
            );
        }
    }
    if !r.failing_nodes.is_empty() {
        let _ = writeln!(out, "\nFailing nodes:");
        let mut t = table(&["NODE", "POLICY", "CONDITION", "REASON", "MESSAGE"]);
        for f in &r.failing_nodes {
            t.add_row(vec![
                f.node.clone(),
                f.policy.clone(),
                format!("{}=False", f.condition),
                f.reason.clone(),
                f.message.clone(),
            ]);
        }
        let _ = writeln!(out, "{}", crate::render::text(&t));
    }
    if !r.conflicts.is_empty() {
        let _ = writeln!(out, "\nConflicts (same priority; a tie moves no node):");
        for c in &r.conflicts {
            let _ = writeln!(
                out,
                "  {}: {} governs, also selected by {}",
                c.node,
                c.governs,
                c.also.join(", ")
            );
        }
    }
    if !r.unmanaged_nodes.is_empty() {
        let _ = writeln!(
            out,
            "\n{} node(s) not selected by any policy: {}",
            r.unmanaged_nodes.len(),
            r.unmanaged_nodes.join(", ")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(name: &str, pool: &str, priority: i32) -> NodeMemoryPolicy {
        serde_json::from_value(json!({
            "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"matchLabels": {"pool": pool}}, "priority": priority},
            "status": {"revision": "r2", "matchedNodes": 1, "conditions": [
                {"type": "Accepted", "status": "True", "reason": "Valid", "message": "",
                 "lastTransitionTime": "2026-11-22T10:00:00Z"},
                {"type": "Progressing", "status": "True", "reason": "Updating", "message": "0/1 nodes updated",
                 "lastTransitionTime": "2026-11-22T10:00:00Z"}]}
        }))
        .unwrap()
    }

    fn config(
        node: &str,
        revision: &str,
        applied: (&str, &str),
        generation: i64,
    ) -> NodeMemoryConfig {
        serde_json::from_value(json!({
            "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
            "metadata": {"name": node, "generation": generation},
            "spec": {"policy": "a", "revision": revision},
            "status": {"observedRevision": revision, "conditions": [
                {"type": "Applied", "status": applied.0, "reason": applied.1, "message": "m",
                 "observedGeneration": 2, "lastTransitionTime": "2026-11-22T10:00:00Z"},
                {"type": "Healthy", "status": "True", "reason": "Healthy", "message": "",
                 "observedGeneration": 2, "lastTransitionTime": "2026-11-22T10:00:00Z"}]}
        }))
        .unwrap()
    }

    fn node(name: &str, pool: &str) -> k8s_openapi::api::core::v1::Node {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"pool": pool}}}))
            .unwrap()
    }

    /// A policy with workload classes: its pods per class over the pool, from its status.
    #[test]
    fn a_policy_with_classes_counts_the_pods_of_each() {
        let mut p = policy("a", "x", 0);
        let mut status = p.status.clone().unwrap_or_default();
        status.pool = Some(nodemem_api::policy::PoolSignals {
            classes: vec![
                nodemem_api::policy::ClassPods {
                    name: "batch".into(),
                    pods: 5,
                },
                nodemem_api::policy::ClassPods {
                    name: "service".into(),
                    pods: 0,
                },
            ],
            ..Default::default()
        });
        p.status = Some(status);
        let s = Snapshot {
            policies: vec![p, policy("b", "y", 0)],
            nodes: vec![node("n1", "x")],
            configs: Vec::new(),
        };
        let r = build(&s);
        let out = render_table(&r);
        assert!(
            out.contains(
                "a: pods per class: batch 5, service 0 (the others run the pool's settings)"
            ),
            "{out}"
        );
        assert!(!out.contains("b: pods per class"), "{out}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["policies"][0]["classes"][0]["pods"], 5);
        assert!(json["policies"][1].get("classes").is_none());
    }

    /// `kubectl nodemem status POLICY`, as the alerts say it: that policy's row, its
    /// failing nodes and its conflicts; an unknown name is an error naming the known.
    #[test]
    fn one_policys_status_is_its_own_and_an_unknown_policy_is_an_error() {
        let s = Snapshot {
            policies: vec![
                policy("a", "x", 0),
                policy("b", "x", 0),
                policy("c", "y", 5),
            ],
            nodes: vec![node("n1", "x"), node("n2", "y"), node("n3", "z")],
            configs: vec![config("n1", "r2", ("False", "WriteFailed"), 2)],
        };
        let a = only(build(&s), "a").unwrap();
        assert_eq!(
            a.policies
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>(),
            ["a"]
        );
        assert_eq!(a.failing_nodes.len(), 1);
        assert_eq!(a.conflicts.len(), 1, "a ties with b on n1");
        assert!(a.unmanaged_nodes.is_empty());
        let b = only(build(&s), "b").unwrap();
        assert!(b.failing_nodes.is_empty(), "n1's config is a's");
        assert_eq!(b.conflicts.len(), 1);
        let c = only(build(&s), "c").unwrap();
        assert!(c.conflicts.is_empty() && c.failing_nodes.is_empty());
        assert_eq!(
            only(build(&s), "general").unwrap_err(),
            "no NodeMemoryPolicy \"general\" (the cluster has c, a, b)"
        );
    }

    #[test]
    fn failing_nodes_conflicts_and_unmanaged_nodes_are_reported() {
        let s = Snapshot {
            policies: vec![
                policy("a", "x", 0),
                policy("b", "x", 0),
                policy("c", "y", 5),
            ],
            nodes: vec![node("n1", "x"), node("n2", "y"), node("n3", "z")],
            configs: vec![
                config("n1", "r2", ("False", "WriteFailed"), 2),
                // A failure reported for an older generation is not current.
                config("n2", "r2", ("False", "WriteFailed"), 3),
            ],
        };
        let r = build(&s);
        assert_eq!(r.policies[0].name, "c", "highest priority first");
        assert_eq!(r.policies[1].state, "Updating");
        assert_eq!(r.failing_nodes.len(), 1);
        assert_eq!(
            (
                r.failing_nodes[0].node.as_str(),
                r.failing_nodes[0].reason.as_str()
            ),
            ("n1", "WriteFailed")
        );
        assert_eq!(r.conflicts.len(), 1);
        assert_eq!(
            (r.conflicts[0].governs.as_str(), r.conflicts[0].also.clone()),
            ("a", vec!["b".to_string()])
        );
        assert_eq!(r.unmanaged_nodes, ["n3"]);
        let table = render_table(&r);
        assert!(
            table.contains("Failing nodes:") && table.contains("n1: a governs, also selected by b"),
            "{table}"
        );

        // Reports from 2026-11-22T10:00:00Z, read an hour later.
        let now = 1_795_341_600 + 3600;
        assert_eq!(
            node_state(&s.configs[0], Some("r2"), 0, now),
            "Failed (Applied WriteFailed)"
        );
        assert_eq!(node_state(&s.configs[1], Some("r3"), 0, now), "Waiting");
        let ready = config("n4", "r2", ("True", "Applied"), 2);
        assert_eq!(node_state(&ready, Some("r2"), 60, now), "Ready");
        // Applied and healthy, but not yet for the policy's minReadySeconds: the policy
        // does not count it ready, nor does this.
        assert_eq!(
            node_state(&ready, Some("r2"), 3610, now),
            "Updating (ready in 10s)"
        );
        // After a rollback the pool's target is the revision before the rolled-back one.
        let mut p = policy("a", "x", 0);
        assert_eq!(target_revision(&p).as_deref(), Some("r2"));
        let st = p.status.as_mut().unwrap();
        st.rolled_back_revision = Some("r2".into());
        st.revisions = serde_json::from_value(json!([
            {"revision": "r2", "settings": {}}, {"revision": "r1", "settings": {}}
        ]))
        .unwrap();
        assert_eq!(target_revision(&p).as_deref(), Some("r1"));
        // The controller's rule: a kubelet restart still owed is not a failure.
        let restarting = config("n5", "r2", ("False", "KubeletRestartRequired"), 2);
        assert!(failing(&restarting).is_none());
        assert_eq!(node_state(&restarting, Some("r2"), 0, now), "Updating");
        // A node whose pressure gate cannot be evaluated (no PSI) is held, and says so.
        let mut held = config("n6", "r2", ("True", "Applied"), 2);
        let healthy = &mut held.status.as_mut().unwrap().conditions[1];
        healthy.status = "Unknown".into();
        healthy.reason = "PressureUnavailable".into();
        assert_eq!(
            node_state(&held, Some("r2"), 0, now),
            "Held (Healthy Unknown PressureUnavailable)"
        );
    }
}
