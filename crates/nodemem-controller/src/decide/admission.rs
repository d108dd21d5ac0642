//! Admission: the status a policy opens with (what it matches, conflicts on, is
//! leaving), `Accepted` and `Conflicting`, and the whole status of a policy whose spec
//! was never valid.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodemem_api::policy::ExcludedNode;
use nodemem_api::NodeMemoryPolicyStatus;

use super::view::{PolicyView, Pool};
use crate::decide::health::health_conditions;
use crate::decide::policy_status::finish;
use crate::decision::Decision;
use nodemem_api::conditions::condition;

/// The figures every status has, whatever the rollout does.
pub(super) fn opening_status(v: &PolicyView<'_>, pool: &Pool<'_>) -> NodeMemoryPolicyStatus {
    NodeMemoryPolicyStatus {
        observed_generation: v.entry.generation,
        revision: Some(v.revision.clone()),
        matched_nodes: pool.nodes.len() as i32,
        conflicting_nodes: pool.conflicts.map_or(0, |c| c.len() as i32),
        leaving_nodes: pool.leaving.count() as i32,
        excluded_nodes: pool.excluded.map_or(0, |e| e.len() as i32),
        excluded_node_names: pool
            .excluded
            .into_iter()
            .flatten()
            .take(NAMED_EXCLUSIONS)
            .map(|(name, reason)| ExcludedNode {
                name: name.clone(),
                reason: reason.clone(),
            })
            .collect(),
        ..NodeMemoryPolicyStatus::default()
    }
}

/// How many excluded nodes status names (the CRD's bound).
const NAMED_EXCLUSIONS: usize = 20;

/// `Accepted`, and `Conflicting` when another policy of the same priority selects
/// some of the pool's nodes.
pub(super) fn admission_conditions(
    v: &PolicyView<'_>,
    pool: &Pool<'_>,
    now_time: &Time,
) -> Vec<Condition> {
    let g = v.entry.generation;
    let mut conditions = vec![acceptance(v, g, now_time)];
    if let Some(c) = pool.conflicts {
        conditions.push(conflicting_condition(c, g, now_time));
    }
    conditions
}

/// `Accepted`: the spec is valid, or why not (and, when it was valid before, that its
/// nodes keep the last accepted revision).
fn acceptance(v: &PolicyView<'_>, g: Option<i64>, now_time: &Time) -> Condition {
    if v.problems.is_empty() {
        return condition(
            "Accepted",
            true,
            "Valid",
            format!("revision {}", v.revision),
            g,
            now_time,
        );
    }
    let held = match &v.held {
        Some(h) => format!(
            "; its nodes keep revision {}, the last accepted, until the spec is valid",
            h.revision
        ),
        None => "; it governs no node until the spec is valid".to_string(),
    };
    condition(
        "Accepted",
        false,
        "Invalid",
        format!("{}{held}", v.problems.join("; ")),
        g,
        now_time,
    )
}

/// Names the first ten tied nodes (by name) and counts them all.
fn conflicting_condition(nodes: &BTreeSet<String>, g: Option<i64>, now_time: &Time) -> Condition {
    let names: Vec<&str> = nodes.iter().map(String::as_str).take(10).collect();
    condition(
        "Conflicting",
        true,
        "EqualPriority",
        format!(
            "{} node(s) are also selected by another policy of the same priority: a tie moves no node (each stays with the policy it runs; a new node goes to the oldest policy); give one policy a higher priority or narrow a selector: {}",
            nodes.len(),
            names.join(", ")
        ),
        g,
        now_time,
    )
}

/// A policy whose spec was never valid governs no node: its status says so, and which
/// nodes it would take once valid (they stay with the policy that governs them now).
pub(super) fn never_accepted_status(
    v: &PolicyView<'_>,
    pool: &Pool<'_>,
    mut status: NodeMemoryPolicyStatus,
    mut conditions: Vec<Condition>,
    now_time: &Time,
    out: &mut Decision,
) {
    let g = v.entry.generation;
    let would = pool.would_take.map_or(0, BTreeSet::len);
    let shown: Vec<&str> = pool
        .would_take
        .into_iter()
        .flatten()
        .map(String::as_str)
        .take(10)
        .collect();
    let message = format!(
        "the spec is invalid: it governs no node; once valid it would take {} node(s){}{}",
        would,
        if shown.is_empty() { "" } else { ": " },
        shown.join(", ")
    );
    status.revisions = v.entry.status.revisions.clone();
    for (type_, ok) in [("Progressing", false), ("Degraded", true)] {
        conditions.push(condition(
            type_,
            ok,
            "InvalidSpec",
            message.clone(),
            g,
            now_time,
        ));
    }
    conditions.extend(health_conditions(&conditions, g, now_time));
    finish(v.name, &v.entry.status, status, conditions, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conflict_names_ten_nodes_sorted_and_counts_them_all() {
        let nodes: BTreeSet<String> = (0..12).rev().map(|i| format!("n{i:02}")).collect();
        let c = conflicting_condition(&nodes, Some(3), &Time(Default::default()));
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "EqualPriority")
        );
        assert!(c.message.starts_with("12 node(s) are also selected"));
        assert!(
            c.message
                .ends_with(": n00, n01, n02, n03, n04, n05, n06, n07, n08, n09"),
            "{}",
            c.message
        );
        assert_eq!(c.observed_generation, Some(3));
    }
}
