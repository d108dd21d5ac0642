//! Leaving a policy is as gradual as joining one (pure). A node leaves the policy whose
//! values it runs when that policy is deleted, stops selecting it (a selector that
//! shrinks, a node relabelled out of the pool) or is outranked:
//!
//! * when another policy now governs it, it keeps what it runs until that policy's
//!   rollout reaches it (canary, maxUnavailable, minReadySeconds, health gates), and
//!   its config then changes owner (`decide.rs`);
//! * when no policy governs it, it is released (everything off, so its agent gives
//!   back what it set) batch by batch with the rollout settings of the policy it leaves
//!   ([`release_unselected`]); the configs go once the whole batch of released nodes is
//!   ready.
//!
//! A deleted policy is held by [`nodemem_api::HANDOFF_FINALIZER`] until no config runs
//! its values ([`finalizer_orders`]); its status says who is still leaving
//! ([`decide_deleted_policy`]).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodemem_api::revision::revision;
use nodemem_api::{NodeMemoryConfigSpec, NodeMemoryPolicyStatus};
use nodemem_model::cluster::rollout::{plan_phases, OnFailure, RolloutState};

use crate::decide::health::deleted_conditions;
use crate::decide::policy_status::finish;
use crate::decide::rollout_index::RolloutIndex;
use crate::decide::settings::{released_settings, rollout_params};
use crate::decision::{ConfigWrite, Decision, FinalizerOrder, PolicyEvent};
use crate::world::{PolicyEntry, World};
use nodemem_api::conditions::condition;

/// How the release of the nodes no policy governs any more stands, per policy they leave.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Release {
    /// Nodes being released.
    pub count: usize,
    /// The first five of them, by name.
    pub shown: Vec<String>,
    /// Of those, released and reported by their agent.
    pub done: u32,
    /// Released at most this many at once.
    pub at_once: u32,
    pub state: Option<RolloutState>,
}

/// The nodes on one policy's config that other policies govern now: the policy that
/// governs them -> those nodes (each moves through that policy's rollout).
pub(crate) type Moving = BTreeMap<String, BTreeSet<String>>;

/// The nodes that still run a policy's values but are leaving it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Leaving<'a> {
    /// Those another policy governs now, by that policy: the index's own sets, read in
    /// place (they can be every node of a pool, and a decision is made per event).
    pub moving: Option<&'a Moving>,
    /// Nodes no policy governs: released with this policy's rollout settings.
    pub release: Release,
}

impl<'a> Leaving<'a> {
    /// The nodes leaving `policy`: those another policy governs now (`moving`), and its
    /// release.
    pub(crate) fn of(
        policy: &str,
        moving: Option<&'a Moving>,
        releases: &BTreeMap<String, Release>,
    ) -> Leaving<'a> {
        Leaving {
            moving,
            release: releases.get(policy).cloned().unwrap_or_default(),
        }
    }

    pub(crate) fn count(&self) -> usize {
        let moving: usize = self
            .moving
            .iter()
            .flat_map(|m| m.values())
            .map(BTreeSet::len)
            .sum();
        moving + self.release.count
    }

    /// In words, for the policy's conditions and `kubectl nodemem status`.
    pub(crate) fn text(&self) -> String {
        let mut parts = Vec::new();
        for (to, nodes) in self.moving.into_iter().flatten() {
            let shown: Vec<&str> = nodes.iter().map(String::as_str).take(5).collect();
            parts.push(format!(
                "{} move to {to} through its rollout ({})",
                nodes.len(),
                names(&shown, nodes.len())
            ));
        }
        let r = &self.release;
        if r.count > 0 {
            let shown: Vec<&str> = r.shown.iter().map(String::as_str).collect();
            parts.push(format!(
                "{} no policy selects are released at most {} at once, {} done ({})",
                r.count,
                r.at_once,
                r.done,
                names(&shown, r.count)
            ));
        }
        format!(
            "{} node(s) still run its values and are leaving: {}",
            self.count(),
            parts.join("; ")
        )
    }
}

/// At most five names of `count`, then how many more.
fn names(nodes: &[&str], count: usize) -> String {
    let shown: Vec<&str> = nodes.iter().copied().take(5).collect();
    match count.saturating_sub(shown.len()) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// Nodes no policy governs leave the policy whose values they run batch by batch with
/// that policy's rollout settings (its defaults when the policy is gone): each gets the
/// released settings in its turn, and once every one of them is released and reported
/// for minReadySeconds their configs are deleted. A release never rolls back (there is
/// nothing to go back to): failures pause it. Nodes the controller cordoned are given
/// back to the scheduler.
pub(crate) fn release_unselected(
    world: &World,
    unselected: &BTreeSet<String>,
    groups: &BTreeMap<String, RolloutIndex>,
    out: &mut Decision,
) -> BTreeMap<String, Release> {
    for node in world.drains.keys() {
        if unselected.contains(node) {
            out.uncordons.push(node.clone());
        }
    }
    let settings = released_settings();
    let released = revision(&settings);
    let mut releases = BTreeMap::new();
    for (policy, group) in groups {
        let entry = world.policies.get(policy);
        let rollout = entry.map(|e| e.spec.rollout.clone()).unwrap_or_default();
        let mut params = rollout_params(&rollout, group.len() as u32);
        params.on_failure = OnFailure::Pause;
        let step = plan_phases(group, &params);
        for node in &step.start {
            let Some(c) = world.configs.get(node) else {
                continue;
            };
            out.writes.push(ConfigWrite {
                node: node.clone(),
                policy_uid: entry.and_then(|e| e.uid.clone()),
                spec: NodeMemoryConfigSpec {
                    policy: policy.to_string(),
                    revision: released.clone(),
                    settings: settings.clone(),
                    health: c.spec.health.clone(),
                },
            });
        }
        if !step.start.is_empty() && entry.is_some() {
            out.events.push(PolicyEvent {
                policy: policy.to_string(),
                warning: false,
                reason: "NodesReleasing",
                message: format!(
                    "no policy selects {}: released (its agent gives back what nodemem set)",
                    step.start.join(", ")
                ),
            });
        }
        if step.state == RolloutState::Complete {
            out.deletes.extend(group.nodes().map(str::to_string));
        }
        releases.insert(
            policy.to_string(),
            Release {
                count: group.len(),
                shown: group.nodes().take(5).map(str::to_string).collect(),
                done: step.counts.ready,
                at_once: params.max_unavailable,
                state: Some(step.state),
            },
        );
    }
    releases
}

/// The status of a deleted policy (held by the finalizer): who is still leaving it.
pub(crate) fn decide_deleted_policy(
    name: &str,
    entry: &PolicyEntry,
    leaving: &Leaving<'_>,
    now_time: &Time,
    out: &mut Decision,
) {
    let old = &entry.status;
    let g = entry.generation;
    let status = NodeMemoryPolicyStatus {
        observed_generation: g,
        revision: old.revision.clone(),
        leaving_nodes: leaving.count() as i32,
        revisions: old.revisions.clone(),
        ..NodeMemoryPolicyStatus::default()
    };
    let (progressing, reason, message) = if leaving.count() > 0 {
        (
            true,
            "Releasing",
            format!(
                "deleted: {}; the policy goes when the last has left (kubectl nodemem release {name} --now releases them all at once)",
                leaving.text()
            ),
        )
    } else {
        (
            false,
            "Released",
            "deleted: every node has left; the policy goes now".to_string(),
        )
    };
    let was_leaving = old
        .conditions
        .iter()
        .any(|c| c.type_ == "Progressing" && matches!(c.reason.as_str(), "Releasing" | "Released"));
    if !was_leaving {
        out.events.push(PolicyEvent {
            policy: name.to_string(),
            warning: false,
            reason: "HandoffStarted",
            message: message.clone(),
        });
    }
    let mut conditions: Vec<_> = old
        .conditions
        .iter()
        .filter(|c| c.type_ == "Accepted")
        .cloned()
        .collect();
    conditions.push(condition(
        "Progressing",
        progressing,
        reason,
        message.clone(),
        g,
        now_time,
    ));
    conditions.push(condition(
        "Degraded",
        false,
        "AsExpected",
        "deleted".to_string(),
        g,
        now_time,
    ));
    conditions.extend(deleted_conditions(reason, message, g, now_time));
    finish(name, old, status, conditions, out);
}

/// Every live policy holds the handoff finalizer; a deleted one loses it once no config
/// runs its values (`in_use`).
pub(crate) fn finalizer_orders(
    world: &World,
    in_use: impl Fn(&str) -> bool,
) -> Vec<FinalizerOrder> {
    world
        .policies
        .iter()
        .filter_map(|(name, p)| {
            let hold = if !p.deleting && !p.held {
                true
            } else if p.deleting && p.held && !in_use(name) {
                false
            } else {
                return None;
            };
            Some(FinalizerOrder {
                policy: name.clone(),
                hold,
            })
        })
        .collect()
}
