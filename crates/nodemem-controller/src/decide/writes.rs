//! The configs a round writes or deletes: the target to the nodes that start, the
//! previous revision (or no config) to the nodes a rollback sends back, the revision
//! the pool runs to nodes that join it mid-rollout, and the policy's health settings,
//! which follow it without a new revision.

use std::collections::BTreeSet;

use nodemem_api::policy::RevisionRecord;
use nodemem_api::NodeMemoryConfigSpec;
use nodemem_model::cluster::rollout::RolloutState;

use super::drains::drains_a_new_node;
use super::rollout_index::Carries;
use super::round::Round;
use crate::decision::{ConfigWrite, Decision, PolicyEvent};

/// Joining nodes a `NodesJoined` Event names; it counts the rest.
const NAMED_JOINS: usize = 10;

pub(super) fn write_target(round: &Round<'_>, start: &[String], out: &mut Decision) {
    for node in start {
        out.writes
            .push(config_write(round, node, spec_for(round, &round.target)));
    }
}

/// On a rollback, nodes go back to the previous revision, or lose their config when
/// there was none before (their agents then give back what they set). Returns the
/// revision the status names as rolled back.
pub(super) fn write_rollback(
    round: &Round<'_>,
    rolled_back: Option<String>,
    out: &mut Decision,
) -> Option<String> {
    if round.step.state != RolloutState::RollingBack {
        return rolled_back;
    }
    for node in &round.step.revert {
        match &round.previous {
            Some(p) => out
                .writes
                .push(config_write(round, node, spec_for(round, p))),
            None => out.deletes.push(node.clone()),
        }
    }
    Some(round.policy.revision.clone())
}

/// A node new to nodemem (no config at all: an autoscaler's, a node added to the
/// pool's label) that joins while the pool moves to the target gets the revision the
/// pool runs at once, and the target later in its turn like every other node. Without
/// it, its pods run the kubelet's own values until its turn comes, and for as long as
/// the rollout is paused or stopped (Degraded, OneNodeFailed). Not a step of the
/// rollout: the node counts as waiting for the target, and maxUnavailable and the
/// canary count the target only. Nodes that start, drain or are repaired this round
/// are left to that.
pub(super) fn write_running_revision(
    round: &Round<'_>,
    started: &[String],
    repaired: &BTreeSet<String>,
    out: &mut Decision,
) {
    let Some(running) = running_revision(round) else {
        return;
    };
    let draining: BTreeSet<&str> = out.drains.iter().map(|d| d.node.as_str()).collect();
    let joined: Vec<&String> = round
        .pool
        .unconfigured()
        .iter()
        .filter(|n| {
            !started.contains(n)
                && !repaired.contains(*n)
                && !draining.contains(n.as_str())
                && !round.pool.drain_marked().contains(*n)
        })
        .collect();
    if joined.is_empty() {
        return;
    }
    for node in &joined {
        out.writes
            .push(config_write(round, node, spec_for(round, running)));
    }
    let named: Vec<&str> = joined
        .iter()
        .take(NAMED_JOINS)
        .map(|n| n.as_str())
        .collect();
    let more = joined.len() - named.len();
    out.events.push(PolicyEvent {
        policy: round.policy.name.to_string(),
        warning: false,
        reason: "NodesJoined",
        message: format!(
            "revision {} (the pool runs it) to {}{}, new to the pool while it moves to revision {}: they wait their turn for it",
            running.revision,
            named.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() },
            round.target.revision,
        ),
    });
}

/// The revision the pool runs while it moves to the target: the previous one (where a
/// rollback returns), while at least as many of its nodes carry it as carry an older
/// one, and never one no node carries (a revision that was paused from the start and
/// edited, never rolled out). None too where it would need a node that ran nothing to
/// be drained first (the kubelet's own Memory Manager): such a node waits its turn.
fn running_revision<'r>(round: &'r Round<'_>) -> Option<&'r RevisionRecord> {
    let previous = round
        .previous
        .as_ref()
        .filter(|p| p.revision != round.target.revision)?;
    let on_previous = round.pool.carrying(Carries::Previous);
    let runs = on_previous > 0 && on_previous >= round.pool.carrying(Carries::Older);
    (runs && !drains_a_new_node(&previous.settings)).then_some(previous)
}

/// Nodes on the target whose health settings differ from the policy's get them now
/// (unless their config is written this round anyway).
pub(super) fn write_health_settings(round: &Round<'_>, out: &mut Decision) {
    let health = &round.policy.entry.spec.rollout.health;
    for node in round.pool.stale_health() {
        let Some(spec) = round.config_of(node) else {
            continue;
        };
        if spec.revision == round.target.revision
            && spec.health != *health
            && !round.step.start.contains(node)
        {
            let spec = NodeMemoryConfigSpec {
                health: health.clone(),
                ..spec.clone()
            };
            out.writes.push(config_write(round, node, spec));
        }
    }
}

fn spec_for(round: &Round<'_>, record: &RevisionRecord) -> NodeMemoryConfigSpec {
    NodeMemoryConfigSpec {
        policy: round.policy.name.to_string(),
        revision: record.revision.clone(),
        settings: record.settings.clone(),
        health: round.policy.entry.spec.rollout.health.clone(),
    }
}

fn config_write(round: &Round<'_>, node: &str, spec: NodeMemoryConfigSpec) -> ConfigWrite {
    ConfigWrite {
        node: node.to_string(),
        policy_uid: round.policy.entry.uid.clone(),
        spec,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::decide::view::policy_views;
    use crate::tests::{policy, settle, world, T0};

    #[test]
    fn health_settings_follow_the_policy_to_nodes_on_the_target_only() {
        let mut w = world(
            &[policy("p", "a", 0, 0.8, json!({"maxUnavailable": 1}))],
            &[("n1", "a"), ("n2", "a")],
        );
        let mut now = T0;
        settle(&mut w, &mut now, 4);
        let mut edited = policy("p", "a", 0, 0.8, json!({"maxUnavailable": 1}));
        edited.spec.rollout.health.max_oom_kills = 9;
        crate::tests::edit(&mut w, edited);
        // n2 runs an older revision: its next config carries the health settings.
        w.configs.get_mut("n2").unwrap().spec.revision = "older".into();
        let views = policy_views(&w);
        let p = &views[0];
        let pool = ["n1", "n2"];
        let round = Round::against_spec(&w, p, &pool, now);
        let mut out = Decision::default();
        write_health_settings(&round, &mut out);
        let written: Vec<(&str, i32)> = out
            .writes
            .iter()
            .map(|wr| (wr.node.as_str(), wr.spec.health.max_oom_kills))
            .collect();
        assert_eq!(written, vec![("n1", 9)]);
        assert_eq!(out.writes[0].spec.revision, p.revision, "the same revision");
    }

    #[test]
    fn a_rollback_with_no_revision_before_deletes_the_configs() {
        let rollout = json!({"maxUnavailable": 2, "failurePolicy": "Rollback", "maxFailures": 1});
        let mut w = world(
            &[policy("p", "a", 0, 0.8, rollout)],
            &[("n1", "a"), ("n2", "a")],
        );
        let d = crate::decide::decide(&w, T0);
        crate::tests::apply(&mut w, &d, T0);
        // Both nodes fail: a rollback of the whole pool (one alone would hold it).
        crate::tests::agent_reports(&mut w, "n1", false, T0 + 1);
        crate::tests::agent_reports(&mut w, "n2", false, T0 + 1);
        let views = policy_views(&w);
        let p = &views[0];
        let pool = ["n1", "n2"];
        let round = Round::against_spec(&w, p, &pool, T0 + 10);
        assert_eq!(round.step.state, RolloutState::RollingBack);
        let mut out = Decision::default();
        let named = write_rollback(&round, None, &mut out);
        assert_eq!(named.as_deref(), Some(p.revision.as_str()));
        assert!(out.writes.is_empty());
        assert_eq!(out.deletes, vec!["n1".to_string(), "n2".to_string()]);
    }
}
