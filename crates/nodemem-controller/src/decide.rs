//! The controller's decisions (pure): for every node, which policy governs it; for
//! every policy, whether it is accepted, which revision its pool moves to and which
//! nodes move next (`nodemem_model::rollout`); which NodeMemoryConfigs to write or
//! delete; each policy's status. Inputs are the [`World`] and the time; nothing here
//! talks to the apiserver, so a restarted controller decides the same from the same
//! objects.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodemem_api::convert::{node_settings, to_selector};
use nodemem_api::policy::{
    FailurePolicy, MemoryManagerSpec, MemoryQosSpec, NodeSettings, RevisionRecord,
};
use nodemem_api::revision::revision;
use nodemem_api::{NodeMemoryConfigSpec, NodeMemoryPolicyStatus};
use nodemem_model::resolve::{resolve_policy, PolicyCandidate};
use nodemem_model::rollout::{
    plan, AgentReport, NodeProgress, OnFailure, RolloutParams, RolloutState,
};
use nodemem_model::selector::LabelSelector;

use nodemem_api::report::report;

use crate::decision::{ConfigWrite, Decision, DrainOrder, PolicyEvent};
use crate::node_failure::{failed_text, why_failed, NodeFailure};
use crate::policy_status::{condition, finish, pool_signals};
use crate::recommendation::recommendation;
use crate::world::{PolicyEntry, World};

/// The settings a node gets when no policy selects it any more: everything off, so its
/// agent gives back what it set; the config is deleted once the agent reports it.
pub fn released_settings() -> NodeSettings {
    NodeSettings {
        memory_qos: MemoryQosSpec {
            enabled: false,
            ..MemoryQosSpec::default()
        },
        memory_manager: MemoryManagerSpec::default(),
        node_reserved: None,
        enforcement: Default::default(),
    }
}

struct PolicyView<'a> {
    name: &'a str,
    entry: &'a PolicyEntry,
    selector: LabelSelector,
    problems: Vec<String>,
    /// The revision of the spec's settings.
    revision: String,
}

/// Everything the controller should do now.
pub fn decide(world: &World, now: i64) -> Decision {
    let now_time = Time(k8s_openapi::jiff::Timestamp::from_second(now).unwrap_or_default());
    let views: Vec<PolicyView<'_>> = world
        .policies
        .iter()
        .map(|(name, entry)| PolicyView {
            name,
            entry,
            selector: to_selector(&entry.spec.node_selector),
            problems: node_settings(&entry.spec.settings)
                .err()
                .map(|ps| ps.iter().map(ToString::to_string).collect())
                .unwrap_or_default(),
            revision: revision(&entry.spec.settings),
        })
        .collect();
    let candidates: Vec<PolicyCandidate<'_>> = views
        .iter()
        .map(|v| PolicyCandidate {
            name: v.name,
            priority: v.entry.spec.priority,
            selector: &v.selector,
            created: v.entry.created,
        })
        .collect();

    // Which pool each node is in, and the conflicts.
    let mut pools: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut conflicts: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut unselected: Vec<&str> = Vec::new();
    for (node, labels) in &world.nodes {
        // The policy whose revision the node runs: a tie never moves it.
        let current = world.configs.get(node).map(|c| c.spec.policy.as_str());
        let r = resolve_policy(&candidates, labels, current);
        let Some(winner) = r.winner else {
            unselected.push(node);
            continue;
        };
        let winner = views
            .iter()
            .find(|v| v.name == winner)
            .map_or("", |v| v.name);
        pools.entry(winner).or_default().push(node);
        if !r.conflicting.is_empty() {
            for name in std::iter::once(winner).chain(r.conflicting.iter().map(String::as_str)) {
                if let Some(v) = views.iter().find(|v| v.name == name) {
                    conflicts.entry(v.name).or_default().push(node);
                }
            }
        }
    }

    let mut out = Decision::default();
    for v in &views {
        let pool = pools.get(v.name).cloned().unwrap_or_default();
        decide_policy(
            world,
            v,
            &pool,
            conflicts.get(v.name),
            now,
            &now_time,
            &mut out,
        );
    }

    // Nodes no policy selects: released, then forgotten once the agent reports it.
    for node in unselected {
        if world.drains.contains_key(node) {
            out.uncordons.push(node.to_string());
        }
        let Some(c) = world.configs.get(node) else {
            continue;
        };
        let settings = released_settings();
        let rev = revision(&settings);
        if c.spec.revision == rev {
            let acked = c.status.observed_revision.as_deref() == Some(rev.as_str())
                && matches!(report(c, now), AgentReport::Good { .. });
            if acked {
                out.deletes.push(node.to_string());
            }
            continue;
        }
        out.writes.push(ConfigWrite {
            node: node.to_string(),
            policy_uid: world
                .policies
                .get(&c.spec.policy)
                .and_then(|p| p.uid.clone()),
            spec: NodeMemoryConfigSpec {
                policy: c.spec.policy.clone(),
                revision: rev,
                settings,
                health: c.spec.health.clone(),
            },
        });
    }
    // Configs of nodes that are gone.
    for node in world.configs.keys() {
        if !world.nodes.contains_key(node) {
            out.deletes.push(node.clone());
        }
    }
    out
}

fn decide_policy(
    world: &World,
    v: &PolicyView<'_>,
    pool: &[&str],
    conflicts: Option<&Vec<&str>>,
    now: i64,
    now_time: &Time,
    out: &mut Decision,
) {
    let entry = v.entry;
    let g = entry.generation;
    let old = &entry.status;
    let mut status = NodeMemoryPolicyStatus {
        observed_generation: g,
        revision: Some(v.revision.clone()),
        matched_nodes: pool.len() as i32,
        conflicting_nodes: conflicts.map_or(0, |c| c.len() as i32),
        ..NodeMemoryPolicyStatus::default()
    };
    let mut conditions = Vec::new();
    if !v.problems.is_empty() {
        // An invalid policy changes no node.
        conditions.push(condition(
            "Accepted",
            false,
            "Invalid",
            v.problems.join("; "),
            g,
            now_time,
        ));
        status.revisions = old.revisions.clone();
        finish(v.name, old, status, conditions, out);
        return;
    }
    conditions.push(condition(
        "Accepted",
        true,
        "Valid",
        format!("revision {}", v.revision),
        g,
        now_time,
    ));
    if let Some(c) = conflicts {
        let mut names: Vec<&str> = c.iter().copied().take(10).collect();
        names.sort();
        conditions.push(condition(
            "Conflicting",
            true,
            "EqualPriority",
            format!(
                "{} node(s) are also selected by another policy of the same priority: a tie moves no node (each stays with the policy it runs; a new node goes to the oldest policy); give one policy a higher priority or narrow a selector: {}",
                c.len(),
                names.join(", ")
            ),
            g,
            now_time,
        ));
    }

    // Revision history: the spec's revision first, then the one before it.
    let current = RevisionRecord {
        revision: v.revision.clone(),
        settings: entry.spec.settings.clone(),
    };
    status.revisions = match old.revisions.first() {
        Some(first) if first.revision == current.revision => old.revisions.clone(),
        Some(first) => vec![current.clone(), first.clone()],
        None => vec![current.clone()],
    };
    let previous = status.revisions.get(1).cloned();
    // A user's rollback (`kubectl nodemem rollback`) counts while the spec still has the
    // revision it names and there is one to go back to.
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
        (Some(_), Some(p)) => p.clone(),
        (Some(bad), None) => {
            // The first revision failed and its nodes lost their configs: nothing to
            // roll out until the spec changes.
            status.rolled_back_revision = Some(bad.clone());
            status.failed_node_names = old.failed_node_names.clone();
            let message = format!(
                "revision {bad} was rolled back after it failed on {}; its nodes have no config: change the spec to roll out again",
                status.failed_node_names.join(", ")
            );
            for (type_, ok) in [("Progressing", false), ("Ready", false), ("Degraded", true)] {
                conditions.push(condition(
                    type_,
                    ok,
                    "RolledBack",
                    message.clone(),
                    g,
                    now_time,
                ));
            }
            finish(v.name, old, status, conditions, out);
            return;
        }
        (None, _) => current.clone(),
    };

    let rollout = &entry.spec.rollout;
    let matched = pool.len() as u32;
    let params = RolloutParams {
        max_unavailable: rollout.max_unavailable.resolve(matched).unwrap_or(1).max(1),
        canary: rollout
            .canary
            .as_ref()
            .and_then(|c| c.resolve(matched).ok())
            .unwrap_or(0),
        min_ready_seconds: rollout.min_ready_seconds.max(0) as u64,
        progress_deadline_seconds: rollout.progress_deadline_seconds.max(0) as u64,
        max_failures: rollout.max_failures.max(1) as u32,
        on_failure: match rollout.failure_policy {
            FailurePolicy::Pause => OnFailure::Pause,
            FailurePolicy::Rollback => OnFailure::Rollback,
        },
        paused: rollout.paused,
    };
    let progress: Vec<NodeProgress<'_>> = pool
        .iter()
        .map(|node| {
            let c = world.configs.get(*node).filter(|c| c.spec.policy == v.name);
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
                    .filter(|d| d.revision == target.revision)
                    .map(|d| (now - d.started_at).max(0) as u64),
            }
        })
        .collect();
    let step = plan(&progress, &target.revision, &params);
    let failures: Vec<(String, NodeFailure)> = step
        .failed
        .iter()
        .map(|node| {
            let config = world.configs.get(node).filter(|c| c.spec.policy == v.name);
            (node.clone(), why_failed(config, &target.revision, &params))
        })
        .collect();
    // One Event per node as it fails. The status names at most 20 failed nodes: beyond
    // that a node cannot be told from one already told, so the count says the rest.
    if old.failed_node_names.len() < 20 {
        for (node, f) in &failures {
            if !old.failed_node_names.contains(node) {
                out.events.push(PolicyEvent {
                    policy: v.name.to_string(),
                    warning: true,
                    reason: "NodeFailed",
                    message: format!(
                        "{node} failed revision {}: {}: {}",
                        target.revision,
                        f.reason(),
                        f.message()
                    ),
                });
            }
        }
    }
    // A change of the kubelet's own Memory Manager needs the node drained first
    // (KEP-1769: pinned pods lose their guarantees, and the kubelet's state is reset):
    // entering or leaving enforcement: Kubelet with the Static policy changes it as
    // much as a new policy or reservedMemory under it (found on the real node: the
    // same Static settings moving from Agent to Kubelet restarted the kubelet with
    // the Static Memory Manager under pods it had never admitted).
    let needs_drain = |node: &str| {
        let current = world
            .configs
            .get(node)
            .map(|c| kubelets_memory_manager(&c.spec.settings))
            .unwrap_or_default();
        current != kubelets_memory_manager(&target.settings)
    };
    let drained = |node: &str| {
        world
            .drains
            .get(node)
            .is_some_and(|d| d.revision == target.revision && d.done)
    };
    let mut start: Vec<String> = Vec::new();
    for node in &step.start {
        if needs_drain(node) && !drained(node) {
            out.drains.push(DrainOrder {
                node: node.clone(),
                revision: target.revision.clone(),
                deadline_seconds: params.progress_deadline_seconds,
            });
        } else {
            start.push(node.clone());
        }
    }
    for node in pool {
        let Some(mark) = world.drains.get(*node) else {
            continue;
        };
        let on_target = world
            .configs
            .get(*node)
            .is_some_and(|c| c.spec.policy == v.name && c.spec.revision == target.revision);
        if mark.revision != target.revision {
            // A drain for a revision that is no longer wanted (unless the node is drained
            // again, for the target, right now).
            if !out.drains.iter().any(|d| d.node == *node) {
                out.uncordons.push(node.to_string());
            }
        } else if !mark.done {
            // Still draining (again after a controller restart: the order is idempotent).
            if !out.drains.iter().any(|d| d.node == *node) {
                out.drains.push(DrainOrder {
                    node: node.to_string(),
                    revision: target.revision.clone(),
                    deadline_seconds: params.progress_deadline_seconds,
                });
            }
        } else if !on_target {
            start.push(node.to_string());
        } else if step.counts.ready > 0
            && progress.iter().any(|p| {
                p.node == *node
                    && matches!(
                        nodemem_model::rollout::phase(p, &target.revision, &params),
                        nodemem_model::rollout::NodePhase::Ready
                    )
            })
        {
            out.uncordons.push(node.to_string());
        }
    }
    start.sort();
    start.dedup();
    let spec_for = |record: &RevisionRecord| NodeMemoryConfigSpec {
        policy: v.name.to_string(),
        revision: record.revision.clone(),
        settings: record.settings.clone(),
        health: rollout.health.clone(),
    };
    for node in &start {
        out.writes.push(ConfigWrite {
            node: node.clone(),
            policy_uid: entry.uid.clone(),
            spec: spec_for(&target),
        });
    }
    // Rollback: nodes go back to the previous revision, or lose their config when
    // there was none before (their agents then give back what they set).
    if step.state == RolloutState::RollingBack {
        for node in &step.revert {
            match &previous {
                Some(p) => out.writes.push(ConfigWrite {
                    node: node.clone(),
                    policy_uid: entry.uid.clone(),
                    spec: spec_for(p),
                }),
                None => out.deletes.push(node.clone()),
            }
        }
        status.rolled_back_revision = Some(v.revision.clone());
    } else {
        status.rolled_back_revision = rolled_back;
    }
    // Health settings follow the policy without a new revision.
    for node in pool {
        if let Some(c) = world.configs.get(*node) {
            if c.spec.policy == v.name
                && c.spec.revision == target.revision
                && c.spec.health != rollout.health
                && !step.start.contains(&node.to_string())
            {
                out.writes.push(ConfigWrite {
                    node: node.to_string(),
                    policy_uid: entry.uid.clone(),
                    spec: NodeMemoryConfigSpec {
                        health: rollout.health.clone(),
                        ..c.spec.clone()
                    },
                });
            }
        }
    }

    let counts = step.counts;
    status.updated_nodes = counts.updated as i32;
    status.ready_nodes = counts.ready as i32;
    status.failed_nodes = counts.failed as i32;
    // After a rollback the pool is back on a revision it runs well; the nodes that
    // failed the rolled-back revision stay named until the spec changes.
    let settled_after_rollback =
        status.rolled_back_revision.is_some() && step.state != RolloutState::RollingBack;
    status.failed_node_names = if settled_after_rollback && step.failed.is_empty() {
        old.failed_node_names.clone()
    } else {
        step.failed.iter().take(20).cloned().collect()
    };
    status.pool = Some(pool_signals(world, v.name, pool));
    status.recommendation = recommendation(world, v.name, &v.revision, &entry.spec, pool);
    let summary = format!(
        "{}/{} nodes updated, {} ready, {} failed (revision {})",
        counts.updated, counts.matched, counts.ready, counts.failed, target.revision
    );
    let (progressing, reason, message) = match step.state {
        RolloutState::Complete => (false, "Complete", summary.clone()),
        RolloutState::Progressing => {
            // The current batch: nodes updating now (after this step), by name.
            let mut batch: Vec<&str> = progress
                .iter()
                .filter(|p| {
                    nodemem_model::rollout::phase(p, &target.revision, &params)
                        == nodemem_model::rollout::NodePhase::Updating
                })
                .map(|p| p.node)
                .chain(step.start.iter().map(String::as_str))
                .collect();
            batch.sort();
            batch.dedup();
            let shown: Vec<&str> = batch.iter().copied().take(5).collect();
            let more = batch.len().saturating_sub(5);
            let batch_text = if more > 0 {
                format!("{} and {more} more", shown.join(", "))
            } else {
                shown.join(", ")
            };
            (
                true,
                "Updating",
                format!(
                    "{summary}; updating now (at most {} at once): {batch_text}{}",
                    params.max_unavailable,
                    if failures.is_empty() {
                        String::new()
                    } else {
                        format!("; failed: {}", failed_text(&failures))
                    }
                ),
            )
        }
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
                failed_text(&failures)
            ),
        ),
        RolloutState::RollingBack => (
            true,
            "RollingBack",
            format!(
                "{summary}; maxFailures {} reached ({}): updated nodes return to {}",
                params.max_failures,
                failed_text(&failures),
                previous
                    .as_ref()
                    .map_or("no config".to_string(), |p| format!(
                        "revision {}",
                        p.revision
                    ))
            ),
        ),
    };
    conditions.push(condition(
        "Progressing",
        progressing,
        reason,
        message.clone(),
        g,
        now_time,
    ));
    let ready = step.state == RolloutState::Complete;
    conditions.push(condition(
        "Ready",
        ready,
        if ready { "AllNodesReady" } else { reason },
        summary,
        g,
        now_time,
    ));
    let degraded = matches!(
        step.state,
        RolloutState::Degraded | RolloutState::RollingBack
    ) || status.rolled_back_revision.is_some();
    conditions.push(condition(
        "Degraded",
        degraded,
        if settled_after_rollback {
            "RolledBack"
        } else if degraded {
            reason
        } else {
            "AsExpected"
        },
        if settled_after_rollback && status.failed_node_names.is_empty() && requested {
            format!(
                "revision {} was rolled back on request ({}); the pool returns to revision {}: change the spec to roll out again",
                v.revision,
                nodemem_api::ROLLBACK_ANNOTATION,
                target.revision
            )
        } else if settled_after_rollback {
            format!(
                "revision {} was rolled back after it failed on {}; the pool runs revision {}: change the spec to roll out again",
                v.revision,
                status.failed_node_names.join(", "),
                target.revision
            )
        } else {
            message
        },
        g,
        now_time,
    ));
    if !step.start.is_empty() {
        out.events.push(PolicyEvent {
            policy: v.name.to_string(),
            warning: false,
            reason: "NodesUpdating",
            message: format!("revision {} to {}", target.revision, step.start.join(", ")),
        });
    }
    finish(v.name, old, status, conditions, out);
}

/// The Memory Manager the kubelet itself runs with under `settings`: the policy's under
/// enforcement: Kubelet (nodemem's drop-in sets it); otherwise nodemem writes none and
/// the kubelet keeps its own, taken as the default (None).
fn kubelets_memory_manager(
    settings: &nodemem_api::policy::NodeSettings,
) -> nodemem_api::policy::MemoryManagerSpec {
    if settings.enforcement == nodemem_api::policy::Enforcement::Kubelet {
        settings.memory_manager.clone()
    } else {
        Default::default()
    }
}
