//! The revision a pool moves to: the spec's; the previous one after a rollback; the
//! last accepted one while the spec is invalid; and the status of a policy whose only
//! revision was rolled back, which has nothing to roll out.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodemem_api::policy::RevisionRecord;
use nodemem_api::NodeMemoryPolicyStatus;

use super::view::PolicyView;
use crate::decide::health::health_conditions;
use crate::decide::policy_status::finish;
use crate::decision::{Decision, PolicyEvent};
use nodemem_api::conditions::condition;

/// The revisions the status records: while the spec is invalid, the ones it had (the
/// invalid spec's revision is not one); otherwise the spec's and the one before it.
pub(super) fn kept_revisions(
    v: &PolicyView<'_>,
    old: &NodeMemoryPolicyStatus,
) -> Vec<RevisionRecord> {
    match &v.held {
        Some(_) => old.revisions.clone(),
        None => revision_history(v, old),
    }
}

/// The spec's revision first, then the one before it.
fn revision_history(v: &PolicyView<'_>, old: &NodeMemoryPolicyStatus) -> Vec<RevisionRecord> {
    let current = v.spec_record();
    match old.revisions.first() {
        Some(first) if first.revision == current.revision => old.revisions.clone(),
        Some(first) => vec![current, first.clone()],
        None => vec![current],
    }
}

/// The revision the pool moves to, and why.
pub(super) struct TargetChoice {
    /// None: the policy's first revision was rolled back; there is nothing to roll out.
    pub(super) target: Option<RevisionRecord>,
    /// The revision before the spec's (a rollback's destination).
    pub(super) previous: Option<RevisionRecord>,
    /// The spec's revision, when it is rolled back.
    pub(super) rolled_back: Option<String>,
}

#[cfg(test)]
impl TargetChoice {
    /// The spec's own revision, no rollback (what the stage tests plan against).
    pub(super) fn spec_only() -> Self {
        TargetChoice {
            target: None,
            previous: None,
            rolled_back: None,
        }
    }
}

/// Where the pool goes: the spec's revision; the previous one after a rollback (a
/// failure's, or a user's request, which applies once, to the revision it names); the
/// last accepted one while the spec is invalid. None: the spec was never valid.
pub(super) fn choose_target(
    v: &PolicyView<'_>,
    old: &NodeMemoryPolicyStatus,
    out: &mut Decision,
) -> Option<TargetChoice> {
    let entry = v.entry;
    // A request names the revision it rolls back; once the spec has moved on from it
    // the request is spent, so that a later spec equal to it is a new decision.
    if let Some(named) = &entry.rollback_request {
        if *named != v.revision {
            out.spent_rollback_requests
                .push((v.name.to_string(), named.clone()));
        }
    }
    if !v.problems.is_empty() {
        // An invalid spec starts nothing new: the pool keeps the last accepted revision.
        let held = v.held.clone()?;
        return Some(TargetChoice {
            target: Some(held),
            previous: None,
            rolled_back: old.rolled_back_revision.clone(),
        });
    }
    let history = revision_history(v, old);
    let current = history[0].clone();
    let previous = history.get(1).cloned();
    // A user's rollback counts while the spec still has the revision it names and there
    // is one to go back to.
    let requested =
        entry.rollback_request.as_deref() == Some(v.revision.as_str()) && previous.is_some();
    if requested && old.rolled_back_revision.as_deref() != Some(v.revision.as_str()) {
        out.events.push(PolicyEvent {
            policy: v.name.to_string(),
            warning: true,
            reason: "RollbackRequested",
            message: format!(
                "revision {} is rolled back on request ({}); the pool returns to revision {}",
                v.revision,
                nodemem_api::ROLLBACK_ANNOTATION,
                previous.as_ref().map_or("", |p| p.revision.as_str())
            ),
        });
    }
    // A rolled-back revision stays rolled back until the spec changes.
    let rolled_back = old
        .rolled_back_revision
        .clone()
        .filter(|r| *r == v.revision)
        .or_else(|| requested.then(|| v.revision.clone()));
    let target = match (&rolled_back, &previous) {
        (Some(_), Some(p)) => Some(p.clone()),
        (Some(_), None) => None,
        (None, _) => Some(current),
    };
    Some(TargetChoice {
        target,
        previous,
        rolled_back,
    })
}

/// Why a revision was rolled back, in the words of its status: the nodes it failed on,
/// or a user's request (no node failed).
pub(super) fn rollback_cause(failed: &[String]) -> String {
    if failed.is_empty() {
        format!("on request ({})", nodemem_api::ROLLBACK_ANNOTATION)
    } else {
        format!("after it failed on {}", failed.join(", "))
    }
}

/// The policy's first revision failed and its nodes lost their configs: nothing to
/// roll out until the spec changes.
pub(super) fn nothing_to_roll_out(
    v: &PolicyView<'_>,
    rolled_back: Option<String>,
    mut status: NodeMemoryPolicyStatus,
    mut conditions: Vec<Condition>,
    now_time: &Time,
    out: &mut Decision,
) {
    let old = &v.entry.status;
    let bad = rolled_back.clone().unwrap_or_default();
    status.rolled_back_revision = rolled_back;
    status.failed_node_names = old.failed_node_names.clone();
    let message = format!(
        "revision {bad} was rolled back {}; its nodes have no config: change the spec to roll out again",
        rollback_cause(&status.failed_node_names)
    );
    for (type_, ok) in [("Progressing", false), ("Degraded", true)] {
        conditions.push(condition(
            type_,
            ok,
            "RolledBack",
            message.clone(),
            v.entry.generation,
            now_time,
        ));
    }
    conditions.extend(health_conditions(&conditions, v.entry.generation, now_time));
    finish(v.name, old, status, conditions, out);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::decide::view::policy_views;
    use crate::tests::{policy, settle, world, T0};

    #[test]
    fn a_request_naming_another_revision_is_spent_and_one_naming_the_spec_goes_back() {
        let mut w = world(&[policy("p", "a", 0, 0.8, json!({}))], &[("n1", "a")]);
        let mut now = T0;
        settle(&mut w, &mut now, 3);
        crate::tests::edit(&mut w, policy("p", "a", 0, 0.7, json!({})));
        settle(&mut w, &mut now, 3);
        let first = w.policies["p"].status.revisions[1].revision.clone();
        w.policies.get_mut("p").unwrap().rollback_request = Some(first.clone());
        let views = policy_views(&w);
        let mut out = Decision::default();
        let choice = choose_target(&views[0], &views[0].entry.status, &mut out).unwrap();
        assert_eq!(out.spent_rollback_requests, vec![("p".to_string(), first)]);
        assert_eq!(choice.rolled_back, None);
        assert_eq!(choice.target.unwrap().revision, views[0].revision);

        let current = views[0].revision.clone();
        w.policies.get_mut("p").unwrap().rollback_request = Some(current.clone());
        let views = policy_views(&w);
        let mut out = Decision::default();
        let choice = choose_target(&views[0], &views[0].entry.status, &mut out).unwrap();
        assert_eq!(choice.rolled_back.as_deref(), Some(current.as_str()));
        assert_eq!(
            choice.target, choice.previous,
            "back to the revision before"
        );
        assert_eq!(out.events[0].reason, "RollbackRequested");
    }

    #[test]
    fn the_history_keeps_the_spec_and_the_one_before_but_not_an_invalid_specs() {
        let mut w = world(&[policy("p", "a", 0, 0.8, json!({}))], &[("n1", "a")]);
        let mut now = T0;
        settle(&mut w, &mut now, 3);
        crate::tests::edit(&mut w, policy("p", "a", 0, 0.7, json!({})));
        let views = policy_views(&w);
        let kept = kept_revisions(&views[0], &views[0].entry.status);
        assert_eq!(kept.len(), 2);
        assert_eq!(kept[0].revision, views[0].revision);
        assert_eq!(kept[1], views[0].entry.status.revisions[0]);

        crate::tests::edit(&mut w, policy("p", "a", 0, 7.0, json!({})));
        let views = policy_views(&w);
        assert!(views[0].held.is_some(), "a factor of 7 is invalid");
        let kept = kept_revisions(&views[0], &views[0].entry.status);
        assert_eq!(kept, views[0].entry.status.revisions);
    }
}
