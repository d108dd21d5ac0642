//! What the status says of a round: the counts, the nodes named as failed, the pool's
//! signals and recommendation, `Progressing` and `Degraded`, and the
//! `NodesUpdating` Event.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodemem_api::policy::PoolSignals;
use nodemem_api::NodeMemoryPolicyStatus;
use nodemem_model::cluster::rollout::{NodePhase, RolloutState};

use super::round::{Round, NAMED_FAILURES};
use super::target::rollback_cause;
use crate::decide::handoff::Leaving;
use crate::decide::node_failure::failed_text;
use crate::decide::recommendation::recommendation;
use crate::decision::{Decision, PolicyEvent};
use nodemem_api::conditions::condition;

/// After a rollback the pool is back on a revision it runs well (or on its way there
/// without going through the planner's rollback).
fn settled_after_rollback(round: &Round<'_>, status: &NodeMemoryPolicyStatus) -> bool {
    status.rolled_back_revision.is_some() && round.step.state != RolloutState::RollingBack
}

pub(super) fn record_progress(round: &Round<'_>, status: &mut NodeMemoryPolicyStatus) {
    let counts = &round.step.counts;
    status.updated_nodes = counts.updated as i32;
    status.ready_nodes = counts.ready as i32;
    status.failed_nodes = counts.failed as i32;
    // The nodes that failed the rolled-back revision stay named until the spec changes.
    let old = &round.policy.entry.status;
    status.failed_node_names =
        if settled_after_rollback(round, status) && round.step.failed.is_empty() {
            old.failed_node_names.clone()
        } else {
            round
                .step
                .failed
                .iter()
                .take(NAMED_FAILURES)
                .cloned()
                .collect()
        };
    let (sums, worst_nodes) = round.pool.signals();
    status.pool = Some(PoolSignals {
        memory_min_bytes: sums.memory_min_bytes,
        memory_low_bytes: sums.memory_low_bytes,
        throttle_events: sums.throttle_events,
        oom_kills: sums.oom_kills,
        worst_nodes,
        reclaim: (sums.reclaim.nodes > 0).then_some(nodemem_api::policy::PoolReclaim {
            nodes: sums.reclaim.nodes,
            unsupported_nodes: sums.reclaim.unsupported_nodes,
            reclaimed_bytes: sums.reclaim.reclaimed_bytes,
            headroom_gained_bytes: sums.reclaim.headroom_gained_bytes,
            would_reclaim_bytes: sums.reclaim.would_reclaim_bytes,
            reclaimable_bytes: sums.reclaim.reclaimable_bytes,
        }),
        // Every class of the spec, with no pod too: a class nobody chose shows as such.
        classes: round
            .policy
            .entry
            .spec
            .settings
            .classes
            .iter()
            .map(|c| nodemem_api::policy::ClassPods {
                name: c.name.clone(),
                pods: round.pool.class_pods().get(&c.name).copied().unwrap_or(0),
            })
            .collect(),
    });
    let quorum = crate::decide::recommendation::quorum(round.pool.len());
    let (tally, nodes, observed_seconds) = round.pool.observed(quorum);
    status.recommendation = recommendation(
        &round.policy.entry.spec,
        &tally,
        nodes,
        quorum,
        observed_seconds,
    )
    .map(|mut r| {
        r.classes = crate::decide::recommendation::class_recommendations(
            &round.policy.entry.spec,
            round.pool.observed_classes(),
            quorum,
            observed_seconds,
        );
        r
    });
}

/// `Progressing` and `Degraded` from the planner's state and what it does not know (a
/// rollback, an invalid spec, nodes still leaving); `Ready` and the kstatus conditions
/// follow from them (`crate::decide::health`).
pub(super) fn rollout_conditions(
    round: &Round<'_>,
    status: &NodeMemoryPolicyStatus,
    leaving: &Leaving<'_>,
    now_time: &Time,
) -> Vec<Condition> {
    let g = round.policy.entry.generation;
    let state = &round.step.state;
    let summary = summary(round);
    let settled = settled_after_rollback(round, status);
    let (progressing, reason, message) = settled_reason(
        planner_reason(round, &summary),
        state,
        SettledFacts {
            rolled_back: settled.then_some(round.policy.revision.as_str()),
            held: round.policy.held.as_ref().map(|h| h.revision.as_str()),
            leaving,
        },
    );
    let ready = *state == RolloutState::Complete;
    let degraded = matches!(
        state,
        RolloutState::Degraded | RolloutState::RollingBack | RolloutState::OneNodeFailed
    ) || status.rolled_back_revision.is_some();
    let (degraded_reason, degraded_message) = if settled {
        let message = format!(
            "revision {} was rolled back {}; the pool {} revision {}: change the spec to roll out again",
            round.policy.revision,
            rollback_cause(&status.failed_node_names),
            if ready { "runs" } else { "returns to" },
            round.target.revision
        );
        ("RolledBack", message)
    } else if degraded {
        (reason, message.clone())
    } else {
        ("AsExpected", message.clone())
    };
    vec![
        condition("Progressing", progressing, reason, message, g, now_time),
        condition(
            "Degraded",
            degraded,
            degraded_reason,
            degraded_message,
            g,
            now_time,
        ),
    ]
}

/// What a policy that selects no node says (Ready's message, the Event): nothing is
/// wrong with it, and nothing runs it.
pub(super) const NO_NODES: &str = "selects no node: no node carries the labels of its nodeSelector (label a pool's nodes, or select a label your nodes have, such as eks.amazonaws.com/nodegroup, cloud.google.com/gke-nodepool or kubernetes.azure.com/agentpool)";

/// `NoNodesSelected`, a Warning, once per spec that selects no node: a policy that
/// reads Ready over no node would otherwise say nothing.
pub(super) fn announce_no_nodes(
    round: &Round<'_>,
    old: &NodeMemoryPolicyStatus,
    out: &mut Decision,
) {
    let said_for_this_spec = old.observed_generation == round.policy.entry.generation
        && old.observed_generation.is_some()
        && old.matched_nodes == 0;
    if round.step.counts.matched != 0 || said_for_this_spec {
        return;
    }
    out.events.push(PolicyEvent {
        policy: round.policy.name.to_string(),
        warning: true,
        reason: "NoNodesSelected",
        message: format!("policy {} {NO_NODES}", round.policy.name),
    });
}

/// `NodesUpdating`: the nodes whose config this round writes.
pub(super) fn announce_updating(round: &Round<'_>, out: &mut Decision) {
    if round.step.start.is_empty() {
        return;
    }
    out.events.push(PolicyEvent {
        policy: round.policy.name.to_string(),
        warning: false,
        reason: "NodesUpdating",
        message: format!(
            "revision {} to {}",
            round.target.revision,
            round.step.start.join(", ")
        ),
    });
}

fn summary(round: &Round<'_>) -> String {
    let counts = &round.step.counts;
    format!(
        "{}/{} nodes updated, {} ready, {} failed (revision {})",
        counts.updated, counts.matched, counts.ready, counts.failed, round.target.revision
    )
}

/// `Progressing` as the planner's state says it.
fn planner_reason(round: &Round<'_>, summary: &str) -> (bool, &'static str, String) {
    let params = &round.params;
    let failures = &round.failures;
    match round.step.state {
        RolloutState::Complete if round.step.counts.matched == 0 => {
            (false, "Complete", format!("{summary}; {NO_NODES}"))
        }
        RolloutState::Complete => (false, "Complete", summary.to_string()),
        RolloutState::Progressing => (
            true,
            "Updating",
            format!(
                "{summary}; updating now (at most {} at once): {}{}",
                params.max_unavailable,
                batch_text(round),
                if failures.is_empty() {
                    String::new()
                } else {
                    format!("; failed: {}", failed_text(failures))
                }
            ),
        ),
        RolloutState::WaitingForCanary => (
            true,
            "WaitingForCanary",
            format!(
                "{summary}; the rest waits until {} canary node(s) are ready",
                params.canary
            ),
        ),
        RolloutState::Paused => (
            false,
            "Paused",
            format!("{summary}; paused by spec.rollout.paused"),
        ),
        RolloutState::Degraded => (
            false,
            "MaxFailures",
            format!(
                "{summary}; stopped at maxFailures {}: {}",
                params.max_failures,
                failed_text(failures)
            ),
        ),
        RolloutState::OneNodeFailed => (
            false,
            "OneNodeFailed",
            format!(
                "{summary}; maxFailures {} reached by one node outside the canary: {}; the pool is not rolled back for one node's own report (a rollback needs a second failed node or a failed canary): it holds, nothing new starts. Fix or replace the node, or roll back by hand (kubectl nodemem rollback)",
                params.max_failures,
                failed_text(failures)
            ),
        ),
        RolloutState::RollingBack => (
            true,
            "RollingBack",
            format!(
                "{summary}; maxFailures {} reached ({}): updated nodes return to {}",
                params.max_failures,
                failed_text(failures),
                round
                    .previous
                    .as_ref()
                    .map_or("no config".to_string(), |p| format!(
                        "revision {}",
                        p.revision
                    ))
            ),
        ),
    }
}

/// The current batch: nodes updating now (after this round), by name, five at most.
fn batch_text(round: &Round<'_>) -> String {
    let updating = round.pool.phase_set(NodePhase::Updating);
    let starting = round.step.start.iter().filter(|s| !updating.contains(*s));
    let count = updating.len() + starting.clone().count();
    let mut shown: Vec<&str> = updating
        .iter()
        .take(5)
        .chain(starting)
        .map(String::as_str)
        .collect();
    shown.sort();
    shown.truncate(5);
    let more = count.saturating_sub(5);
    if more > 0 {
        format!("{} and {more} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

/// What the rollout column says beyond the planner's state.
struct SettledFacts<'a> {
    /// The spec's revision, rolled back (the pool runs or returns to the previous one).
    rolled_back: Option<&'a str>,
    /// The spec is invalid; the pool keeps this revision.
    held: Option<&'a str>,
    leaving: &'a Leaving<'a>,
}

/// The Progressing condition once the planner's word is in: a pool going back after a
/// rollback says `RollingBack` (not waiting for a canary) and, once there, `RolledBack`;
/// a pool held on the last accepted revision says `InvalidSpec`; a complete pool whose
/// former nodes are still leaving says `Releasing`.
fn settled_reason(
    (progressing, reason, message): (bool, &'static str, String),
    state: &RolloutState,
    facts: SettledFacts<'_>,
) -> (bool, &'static str, String) {
    let complete = *state == RolloutState::Complete;
    if let Some(bad) = facts.rolled_back {
        return if complete {
            (
                false,
                "RolledBack",
                format!("{message}; revision {bad} is rolled back"),
            )
        } else {
            (
                true,
                "RollingBack",
                format!("{message}; revision {bad} is rolled back"),
            )
        };
    }
    if let Some(held) = facts.held {
        if complete {
            return (
                false,
                "InvalidSpec",
                format!("{message}; the spec is invalid: the pool keeps revision {held}, the last accepted"),
            );
        }
    }
    if complete && facts.leaving.count() > 0 {
        return (
            true,
            "Releasing",
            format!("{message}; {}", facts.leaving.text()),
        );
    }
    (progressing, reason, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planner(reason: &'static str) -> (bool, &'static str, String) {
        (true, reason, "2/3 nodes updated".to_string())
    }

    fn facts<'a>(leaving: &'a Leaving<'a>) -> SettledFacts<'a> {
        SettledFacts {
            rolled_back: None,
            held: None,
            leaving,
        }
    }

    #[test]
    fn a_rolled_back_revision_reads_rolling_back_on_the_way_and_rolled_back_once_there() {
        let none = Leaving::default();
        let back = SettledFacts {
            rolled_back: Some("bad"),
            ..facts(&none)
        };
        let on_the_way = settled_reason(
            planner("WaitingForCanary"),
            &RolloutState::WaitingForCanary,
            back,
        );
        assert_eq!(
            on_the_way,
            (
                true,
                "RollingBack",
                "2/3 nodes updated; revision bad is rolled back".to_string()
            )
        );
        let back = SettledFacts {
            rolled_back: Some("bad"),
            ..facts(&none)
        };
        let (progressing, reason, _) =
            settled_reason(planner("Complete"), &RolloutState::Complete, back);
        assert_eq!((progressing, reason), (false, "RolledBack"));
    }

    #[test]
    fn a_held_pool_reads_invalid_spec_and_a_complete_pool_with_nodes_leaving_releasing() {
        let none = Leaving::default();
        let held = SettledFacts {
            held: Some("r1"),
            ..facts(&none)
        };
        let (progressing, reason, message) =
            settled_reason(planner("Complete"), &RolloutState::Complete, held);
        assert_eq!((progressing, reason), (false, "InvalidSpec"));
        assert!(message.ends_with("the pool keeps revision r1, the last accepted"));

        let moving = crate::decide::handoff::Moving::from([("other".into(), ["n9".into()].into())]);
        let leaving = Leaving {
            moving: Some(&moving),
            ..Leaving::default()
        };
        let (progressing, reason, _) = settled_reason(
            planner("Complete"),
            &RolloutState::Complete,
            facts(&leaving),
        );
        assert_eq!((progressing, reason), (true, "Releasing"));
        // Still rolling out: the planner's word stands.
        let (_, reason, _) = settled_reason(
            planner("Updating"),
            &RolloutState::Progressing,
            facts(&leaving),
        );
        assert_eq!(reason, "Updating");
    }
}
