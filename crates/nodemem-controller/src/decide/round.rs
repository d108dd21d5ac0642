//! A policy's rollout this round: its target, the parameters it rolls out with, where
//! each node of the pool stands, the planner's step and why nodes failed. The stages
//! after it (drains, writes, status) read it and change nothing in it.

use nodemem_api::policy::RevisionRecord;
use nodemem_api::report::report;
use nodemem_model::rollout::{
    plan, AgentReport, NodeProgress, OnFailure, RolloutParams, RolloutPlan,
};

use super::target::TargetChoice;
use super::view::PolicyView;
use crate::decision::{Decision, PolicyEvent};
use crate::node_failure::{why_failed, NodeFailure};
use crate::settings::rollout_params;
use crate::world::World;
use nodemem_api::NodeMemoryPolicyStatus;

/// The status names at most this many failed nodes: beyond that a node cannot be told
/// from one already told, so the count says the rest.
pub(super) const NAMED_FAILURES: usize = 20;

pub(super) struct Round<'a> {
    pub(super) world: &'a World,
    pub(super) policy: &'a PolicyView<'a>,
    pub(super) pool: &'a [&'a str],
    pub(super) target: RevisionRecord,
    /// The revision before the spec's (a rollback's destination).
    pub(super) previous: Option<RevisionRecord>,
    pub(super) params: RolloutParams,
    pub(super) progress: Vec<NodeProgress<'a>>,
    pub(super) step: RolloutPlan,
    pub(super) failures: Vec<(String, NodeFailure)>,
}

impl<'a> Round<'a> {
    /// Where the pool stands against `target` and what the planner does next.
    pub(super) fn plan(
        world: &'a World,
        policy: &'a PolicyView<'a>,
        pool: &'a [&'a str],
        target: RevisionRecord,
        choice: &TargetChoice,
        now: i64,
    ) -> Round<'a> {
        let params = target_params(policy, choice, pool.len());
        let progress = node_progress(world, policy.name, pool, &target.revision, now);
        let step = plan(&progress, &target.revision, &params);
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
            progress,
            step,
            failures,
        }
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
    /// The round against the spec's own revision, no rollback.
    pub(super) fn against_spec(
        world: &'a World,
        policy: &'a PolicyView<'a>,
        pool: &'a [&'a str],
        now: i64,
    ) -> Round<'a> {
        let choice = TargetChoice::spec_only();
        Round::plan(world, policy, pool, policy.spec_record(), &choice, now)
    }
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

/// Each node of the pool against the target: the revision it has from this policy,
/// what its agent reports, how long since its spec changed, how long it has drained.
fn node_progress<'a>(
    world: &'a World,
    policy: &str,
    pool: &'a [&'a str],
    target: &str,
    now: i64,
) -> Vec<NodeProgress<'a>> {
    pool.iter()
        .map(|node| {
            let c = world.configs.get(*node).filter(|c| c.spec.policy == policy);
            NodeProgress {
                node,
                spec_revision: c.map(|c| c.spec.revision.as_str()),
                report: c.map_or(AgentReport::Pending, |c| report(c, now)),
                since_spec_change: c
                    .and_then(|c| c.spec_changed_at)
                    .map_or(0, |t| (now - t).max(0) as u64),
                draining_for: world
                    .drains
                    .get(*node)
                    .filter(|d| d.revision == target)
                    .map(|d| (now - d.started_at).max(0) as u64),
            }
        })
        .collect()
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
            &pool,
            target.clone(),
            &TargetChoice::spec_only(),
            now,
        );
        let n1 = &round.progress[0];
        let n2 = &round.progress[1];
        assert_eq!(n1.spec_revision, Some(p.revision.as_str()));
        assert_eq!((n2.spec_revision, n2.report), (None, AgentReport::Pending));
        assert_eq!(n2.draining_for, None, "a drain for another revision");
        mark(&mut drained, "n2", &target.revision, now - 30, false);
        let round = Round::plan(&drained, p, &pool, target, &TargetChoice::spec_only(), now);
        assert_eq!(round.progress[1].draining_for, Some(30));
        assert!(round.config_of("n2").is_none(), "n2 runs q's config");
    }
}
