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

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodemem_api::report::report;
use nodemem_api::revision::revision;
use nodemem_api::{NodeMemoryConfigSpec, NodeMemoryPolicyStatus};
use nodemem_model::rollout::{plan, NodeProgress, OnFailure, RolloutState};

use crate::decision::{ConfigWrite, Decision, FinalizerOrder, PolicyEvent};
use crate::policy_status::{condition, finish};
use crate::settings::{released_settings, rollout_params};
use crate::world::{PolicyEntry, World};

/// How the release of the nodes no policy governs any more stands, per policy they leave.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Release {
    /// Nodes being released.
    pub nodes: Vec<String>,
    /// Of those, released and reported by their agent.
    pub done: u32,
    /// Released at most this many at once.
    pub at_once: u32,
    pub state: Option<RolloutState>,
}

/// The nodes that still run a policy's values but are leaving it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Leaving {
    /// Node -> the policy that governs it now (it moves through that policy's rollout).
    pub moving: BTreeMap<String, String>,
    /// Nodes no policy governs: released with this policy's rollout settings.
    pub release: Release,
}

impl Leaving {
    /// The nodes leaving `policy`.
    pub(crate) fn of(
        world: &World,
        policy: &str,
        pools: &BTreeMap<&str, Vec<&str>>,
        releases: &BTreeMap<String, Release>,
    ) -> Leaving {
        let mut moving = BTreeMap::new();
        for (governor, nodes) in pools {
            if *governor == policy {
                continue;
            }
            for node in nodes {
                if world
                    .configs
                    .get(*node)
                    .is_some_and(|c| c.spec.policy == policy)
                {
                    moving.insert(node.to_string(), governor.to_string());
                }
            }
        }
        Leaving {
            moving,
            release: releases.get(policy).cloned().unwrap_or_default(),
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.moving.len() + self.release.nodes.len()
    }

    /// In words, for the policy's conditions and `kubectl nodemem status`.
    pub(crate) fn text(&self) -> String {
        let mut parts = Vec::new();
        let mut by_policy: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (node, to) in &self.moving {
            by_policy.entry(to).or_default().push(node);
        }
        for (to, nodes) in by_policy {
            parts.push(format!(
                "{} move to {to} through its rollout ({})",
                nodes.len(),
                names(&nodes)
            ));
        }
        let r = &self.release;
        if !r.nodes.is_empty() {
            let nodes: Vec<&str> = r.nodes.iter().map(String::as_str).collect();
            parts.push(format!(
                "{} no policy selects are released at most {} at once, {} done ({})",
                nodes.len(),
                r.at_once,
                r.done,
                names(&nodes)
            ));
        }
        format!(
            "{} node(s) still run its values and are leaving: {}",
            self.count(),
            parts.join("; ")
        )
    }
}

/// At most five names, then how many more.
fn names(nodes: &[&str]) -> String {
    let shown: Vec<&str> = nodes.iter().copied().take(5).collect();
    match nodes.len().saturating_sub(5) {
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
    unselected: &[&str],
    now: i64,
    out: &mut Decision,
) -> BTreeMap<String, Release> {
    let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for node in unselected {
        if world.drains.contains_key(*node) {
            out.uncordons.push(node.to_string());
        }
        if let Some(c) = world.configs.get(*node) {
            groups.entry(c.spec.policy.as_str()).or_default().push(node);
        }
    }
    let settings = released_settings();
    let released = revision(&settings);
    let mut releases = BTreeMap::new();
    for (policy, nodes) in groups {
        let entry = world.policies.get(policy);
        let rollout = entry.map(|e| e.spec.rollout.clone()).unwrap_or_default();
        let mut params = rollout_params(&rollout, nodes.len() as u32);
        params.on_failure = OnFailure::Pause;
        let progress: Vec<NodeProgress<'_>> = nodes
            .iter()
            .map(|node| {
                let c = &world.configs[*node];
                NodeProgress {
                    node,
                    spec_revision: Some(c.spec.revision.as_str()),
                    report: report(c, now),
                    since_spec_change: c.spec_changed_at.map_or(0, |t| (now - t).max(0) as u64),
                    draining_for: None,
                }
            })
            .collect();
        let step = plan(&progress, &released, &params);
        for node in &step.start {
            let c = &world.configs[node.as_str()];
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
            out.deletes.extend(nodes.iter().map(|n| n.to_string()));
        }
        releases.insert(
            policy.to_string(),
            Release {
                nodes: nodes.iter().map(|n| n.to_string()).collect(),
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
    leaving: &Leaving,
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
    conditions.push(condition("Ready", false, "Deleted", message, g, now_time));
    conditions.push(condition(
        "Degraded",
        false,
        "AsExpected",
        "deleted".to_string(),
        g,
        now_time,
    ));
    finish(name, old, status, conditions, out);
}

/// Every live policy holds the handoff finalizer; a deleted one loses it once no config
/// runs its values.
pub(crate) fn finalizer_orders(world: &World) -> Vec<FinalizerOrder> {
    let in_use: std::collections::BTreeSet<&str> = world
        .configs
        .values()
        .map(|c| c.spec.policy.as_str())
        .collect();
    world
        .policies
        .iter()
        .filter_map(|(name, p)| {
            let hold = if !p.deleting && !p.held {
                true
            } else if p.deleting && p.held && !in_use.contains(name.as_str()) {
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
