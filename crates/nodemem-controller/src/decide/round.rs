//! A policy's rollout this round: its target, the parameters it rolls out with, where
//! each node of the pool stands, the planner's step and why nodes failed. The stages
//! after it (drains, writes, status) read it and change nothing in it.

use std::borrow::Cow;

use nodemem_api::policy::RevisionRecord;
use nodemem_model::cluster::rollout::{
    plan_phases, NodePhase, OnFailure, RolloutParams, RolloutPlan,
};

use super::rollout_index::RolloutIndex;
use super::target::TargetChoice;
use super::view::PolicyView;
use crate::decide::node_failure::{why_failed, NodeFailure};
use crate::decide::settings::rollout_params;
use crate::decision::{Decision, PolicyEvent};
use crate::world::World;
use nodemem_api::NodeMemoryPolicyStatus;

/// The status names at most this many failed nodes: beyond that a node cannot be told
/// from one already told, so the count says the rest.
pub(super) const NAMED_FAILURES: usize = 20;

pub(super) struct Round<'a> {
    pub(super) world: &'a World,
    pub(super) policy: &'a PolicyView<'a>,
    /// The pool's nodes by phase against the target, and its figures.
    pub(super) pool: Cow<'a, RolloutIndex>,
    pub(super) target: RevisionRecord,
    /// The revision before the spec's (a rollback's destination).
    pub(super) previous: Option<RevisionRecord>,
    pub(super) params: RolloutParams,
    pub(super) step: RolloutPlan,
    pub(super) failures: Vec<(String, NodeFailure)>,
}

impl<'a> Round<'a> {
    /// What the planner does next with the pool (classified against `target`).
    pub(super) fn plan(
        world: &'a World,
        policy: &'a PolicyView<'a>,
        pool: Cow<'a, RolloutIndex>,
        target: RevisionRecord,
        choice: &TargetChoice,
    ) -> Round<'a> {
        let params = target_params(policy, choice, pool.len());
        let step = plan_phases(&*pool, &params);
        let failures = step
            .failed
            .iter()
            .map(|node| {
                let config = world
                    .configs
                    .get(node)
                    .filter(|c| c.spec.policy == policy.name);
                (node.clone(), why_failed(config, &target.revision, &params))
            })
            .collect();
        Round {
            world,
            policy,
            pool,
            target,
            previous: choice.previous.clone(),
            params,
            step,
            failures,
        }
    }

    /// Whether `node` is ready on the target.
    pub(super) fn is_ready(&self, node: &str) -> bool {
        self.pool.phase_of(node) == Some(NodePhase::Ready)
    }

    /// One `NodeFailed` Event per node as it fails, while the status still names every
    /// failed node.
    pub(super) fn announce_failures(&self, old: &NodeMemoryPolicyStatus, out: &mut Decision) {
        if old.failed_node_names.len() >= NAMED_FAILURES {
            return;
        }
        for (node, f) in &self.failures {
            if !old.failed_node_names.contains(node) {
                out.events.push(PolicyEvent {
                    policy: self.policy.name.to_string(),
                    warning: true,
                    reason: "NodeFailed",
                    message: format!(
                        "{node} failed revision {}: {}: {}",
                        self.target.revision,
                        f.reason(),
                        f.message()
                    ),
                });
            }
        }
    }

    /// The config `node` has from this policy, if any.
    pub(super) fn config_of(&self, node: &str) -> Option<&'a nodemem_api::NodeMemoryConfigSpec> {
        self.world
            .configs
            .get(node)
            .map(|c| &c.spec)
            .filter(|spec| spec.policy == self.policy.name)
    }
}

#[cfg(test)]
impl<'a> Round<'a> {
    /// The round of `pool` against the spec's own revision, no rollback.
    pub(super) fn against_spec(
        world: &'a World,
        policy: &'a PolicyView<'a>,
        pool: &[&str],
        now: i64,
    ) -> Round<'a> {
        let choice = TargetChoice::spec_only();
        let target = policy.spec_record();
        let index = classify(world, policy, pool, &target, now);
        Round::plan(world, policy, Cow::Owned(index), target, &choice)
    }
}

/// `pool` classified against `target` from scratch.
#[cfg(test)]
fn classify(
    world: &World,
    policy: &PolicyView<'_>,
    pool: &[&str],
    target: &RevisionRecord,
    now: i64,
) -> RolloutIndex {
    let key = super::index::rollout_key(policy, target, &TargetChoice::spec_only());
    RolloutIndex::build(world, key, pool.iter().copied(), now)
}

/// The spec's rollout settings, with two exceptions: while the spec is invalid there is
/// no revision to roll back to (a failure pauses), and going back to a revision the
/// pool ran well waits for no canary.
fn target_params(
    policy: &PolicyView<'_>,
    choice: &TargetChoice,
    pool_size: usize,
) -> RolloutParams {
    let mut params = rollout_params(&policy.entry.spec.rollout, pool_size as u32);
    if policy.held.is_some() {
        params.on_failure = OnFailure::Pause;
    }
    if choice.rolled_back.is_some() {
        params.canary = 0;
    }
    params
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::decide::view::policy_views;
    use crate::tests::{mark, policy, settle, world, T0};

    #[test]
    fn the_way_back_waits_for_no_canary_and_an_invalid_spec_pauses_on_failure() {
        let rollout = json!({"canary": 1, "failurePolicy": "Rollback"});
        let w = world(&[policy("p", "a", 0, 0.8, rollout)], &[("n1", "a")]);
        let views = policy_views(&w);
        let params = target_params(&views[0], &TargetChoice::spec_only(), 1);
        assert_eq!((params.canary, params.on_failure), (1, OnFailure::Rollback));
        let back = TargetChoice {
            rolled_back: Some("bad".into()),
            ..TargetChoice::spec_only()
        };
        assert_eq!(target_params(&views[0], &back, 1).canary, 0);

        let mut held = policy_views(&w).remove(0);
        held.held = Some(RevisionRecord {
            revision: "r0".into(),
            settings: held.entry.spec.settings.clone(),
        });
        assert_eq!(
            target_params(&held, &TargetChoice::spec_only(), 1).on_failure,
            OnFailure::Pause
        );
    }

    #[test]
    fn a_node_counts_only_its_own_policys_config_and_a_drain_for_the_target() {
        // n1 and n2 run q's revision; n2 then moves to p's pool and drains for
        // another revision than p's target.
        let mut w = world(
            &[
                policy("p", "a", 0, 0.8, json!({})),
                policy("q", "b", 0, 0.7, json!({})),
            ],
            &[("n1", "a"), ("n2", "b")],
        );
        let mut now = T0;
        settle(&mut w, &mut now, 4);
        w.apply_node(&crate::tests::node("n2", "a"));
        mark(&mut w, "n2", "other", now - 30, false);
        let mut drained = w.clone();
        let views = policy_views(&w);
        let p = views.iter().find(|v| v.name == "p").unwrap();
        let pool = ["n1", "n2"];
        let target = p.spec_record();
        let round = Round::plan(
            &w,
            p,
            Cow::Owned(classify(&w, p, &pool, &target, now)),
            target.clone(),
            &TargetChoice::spec_only(),
        );
        assert_eq!(round.pool.phase_of("n1"), Some(NodePhase::Ready));
        assert_eq!(
            round.pool.phase_of("n2"),
            Some(NodePhase::Waiting),
            "q's config, and a drain for another revision, do not count"
        );
        mark(&mut drained, "n2", &target.revision, now - 30, false);
        let index = classify(&drained, p, &pool, &target, now);
        assert_eq!(
            index.phase_of("n2"),
            Some(NodePhase::Updating),
            "a drain for the target is the update under way"
        );
        let round = Round::plan(
            &drained,
            p,
            Cow::Owned(index),
            target,
            &TargetChoice::spec_only(),
        );
        assert!(round.config_of("n2").is_none(), "n2 runs q's config");
    }
}
