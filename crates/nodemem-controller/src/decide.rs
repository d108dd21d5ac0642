//! The controller's decisions (pure): for every node, which policy governs it; for
//! every policy, whether it is accepted, which revision its pool moves to and which
//! nodes move next (`nodemem_model::rollout`); which NodeMemoryConfigs to write or
//! delete; each policy's status. Inputs are the [`World`] and the time; nothing here
//! talks to the apiserver, so a restarted controller decides the same from the same
//! objects.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodemem_api::convert::{last_accepted, node_settings, takes_nodes, to_selector};
use nodemem_api::policy::RevisionRecord;
use nodemem_api::revision::revision;
use nodemem_api::{NodeMemoryConfigSpec, NodeMemoryPolicyStatus};
use nodemem_model::resolve::{resolve_policy, PolicyCandidate};
use nodemem_model::rollout::{plan, AgentReport, NodeProgress, OnFailure, RolloutState};
use nodemem_model::selector::LabelSelector;

use nodemem_api::report::report;

use crate::decision::{ConfigWrite, Decision, DrainOrder, PolicyEvent};
use crate::handoff::{decide_deleted_policy, finalizer_orders, release_unselected, Leaving};
use crate::node_failure::{failed_text, why_failed, NodeFailure};
use crate::policy_status::{condition, finish, pool_signals};
use crate::recommendation::recommendation;
pub use crate::settings::released_settings;
use crate::settings::rollout_params;
use crate::world::{PolicyEntry, World};

struct PolicyView<'a> {
    name: &'a str,
    entry: &'a PolicyEntry,
    selector: LabelSelector,
    problems: Vec<String>,
    /// The revision of the spec's settings.
    revision: String,
    /// While the spec is invalid: the last revision the policy accepted, which its
    /// nodes keep (None: it never accepted one, and governs no node).
    held: Option<RevisionRecord>,
}

impl PolicyView<'_> {
    /// Whether resolution gives it nodes: a deleted policy hands its nodes on, and a
    /// policy that never had a valid spec takes none.
    fn governs(&self) -> bool {
        takes_nodes(
            self.entry.deleting,
            self.problems.is_empty(),
            &self.entry.status,
        )
    }
}

fn policy_views(world: &World) -> Vec<PolicyView<'_>> {
    world
        .policies
        .iter()
        .map(|(name, entry)| {
            let problems: Vec<String> = node_settings(&entry.spec.settings)
                .err()
                .map(|ps| ps.iter().map(ToString::to_string).collect())
                .unwrap_or_default();
            let held = if problems.is_empty() {
                None
            } else {
                last_accepted(&entry.status).cloned()
            };
            PolicyView {
                name,
                entry,
                selector: to_selector(&entry.spec.node_selector),
                problems,
                revision: revision(&entry.spec.settings),
                held,
            }
        })
        .collect()
}

fn candidate<'a>(v: &'a PolicyView<'a>) -> PolicyCandidate<'a> {
    PolicyCandidate {
        name: v.name,
        priority: v.entry.spec.priority,
        selector: &v.selector,
        created: v.entry.created,
    }
}

/// Which policy governs each node.
#[derive(Default)]
struct Assignment<'a> {
    pools: BTreeMap<&'a str, Vec<&'a str>>,
    conflicts: BTreeMap<&'a str, Vec<&'a str>>,
    /// Nodes no policy governs.
    unselected: Vec<&'a str>,
    /// The nodes a policy that never had a valid spec would take once valid.
    would_take: BTreeMap<&'a str, Vec<&'a str>>,
}

fn assign_nodes<'a>(world: &'a World, views: &'a [PolicyView<'a>]) -> Assignment<'a> {
    let governing: Vec<PolicyCandidate<'_>> = views
        .iter()
        .filter(|v| v.governs())
        .map(candidate)
        .collect();
    let never_accepted: Vec<&PolicyView<'_>> = views
        .iter()
        .filter(|v| !v.entry.deleting && !v.governs())
        .collect();
    let mut a = Assignment::default();
    for (node, labels) in &world.nodes {
        // The policy whose revision the node runs: a tie never moves it.
        let current = world.configs.get(node).map(|c| c.spec.policy.as_str());
        if !never_accepted.is_empty() {
            let mut all = governing.clone();
            all.extend(never_accepted.iter().map(|v| candidate(v)));
            if let Some(w) = resolve_policy(&all, labels, current).winner {
                if let Some(v) = never_accepted.iter().find(|v| v.name == w) {
                    a.would_take.entry(v.name).or_default().push(node);
                }
            }
        }
        let r = resolve_policy(&governing, labels, current);
        let Some(winner) = r.winner else {
            a.unselected.push(node);
            continue;
        };
        let Some(winner) = views.iter().find(|v| v.name == winner).map(|v| v.name) else {
            continue;
        };
        a.pools.entry(winner).or_default().push(node);
        if !r.conflicting.is_empty() {
            for name in std::iter::once(winner).chain(r.conflicting.iter().map(String::as_str)) {
                if let Some(v) = views.iter().find(|v| v.name == name) {
                    a.conflicts.entry(v.name).or_default().push(node);
                }
            }
        }
    }
    a
}

/// Everything the controller should do now.
pub fn decide(world: &World, now: i64) -> Decision {
    let now_time = Time(k8s_openapi::jiff::Timestamp::from_second(now).unwrap_or_default());
    let views = policy_views(world);
    let assignment = assign_nodes(world, &views);
    let mut out = Decision::default();
    // Nodes no policy governs leave the policy they run through its rollout settings.
    let releases = release_unselected(world, &assignment.unselected, now, &mut out);
    for v in &views {
        let leaving = Leaving::of(world, v.name, &assignment.pools, &releases);
        if v.entry.deleting {
            decide_deleted_policy(v.name, v.entry, &leaving, &now_time, &mut out);
            continue;
        }
        let pool = assignment.pools.get(v.name).cloned().unwrap_or_default();
        let pool = Pool {
            nodes: &pool,
            conflicts: assignment.conflicts.get(v.name),
            would_take: assignment.would_take.get(v.name),
            leaving: &leaving,
        };
        decide_policy(world, v, &pool, now, &now_time, &mut out);
    }
    // Configs of nodes that are gone.
    for node in world.configs.keys() {
        if !world.nodes.contains_key(node) {
            out.deletes.push(node.clone());
        }
    }
    out.finalizers = finalizer_orders(world);
    out
}

/// The nodes a policy governs, and what else the decision found about it.
struct Pool<'a> {
    nodes: &'a [&'a str],
    conflicts: Option<&'a Vec<&'a str>>,
    /// Never accepted: the nodes it would take once valid.
    would_take: Option<&'a Vec<&'a str>>,
    leaving: &'a Leaving,
}

fn decide_policy(
    world: &World,
    v: &PolicyView<'_>,
    pool_of: &Pool<'_>,
    now: i64,
    now_time: &Time,
    out: &mut Decision,
) {
    let pool = pool_of.nodes;
    let entry = v.entry;
    let g = entry.generation;
    let old = &entry.status;
    let mut status = NodeMemoryPolicyStatus {
        observed_generation: g,
        revision: Some(v.revision.clone()),
        matched_nodes: pool.len() as i32,
        conflicting_nodes: pool_of.conflicts.map_or(0, |c| c.len() as i32),
        leaving_nodes: pool_of.leaving.count() as i32,
        ..NodeMemoryPolicyStatus::default()
    };
    let mut conditions = vec![acceptance(v, g, now_time)];
    if let Some(c) = pool_of.conflicts {
        conditions.push(conflicting_condition(c, g, now_time));
    }
    let Some(choice) = choose_target(v, old, out) else {
        never_accepted_status(v, pool_of, status, conditions, now_time, out);
        return;
    };
    let TargetChoice {
        target,
        previous,
        rolled_back,
    } = choice;
    status.revisions = match &v.held {
        Some(_) => old.revisions.clone(),
        None => revision_history(v, old),
    };
    let Some(target) = target else {
        // The first revision failed and its nodes lost their configs: nothing to
        // roll out until the spec changes.
        let bad = rolled_back.clone().unwrap_or_default();
        status.rolled_back_revision = rolled_back;
        status.failed_node_names = old.failed_node_names.clone();
        let message = format!(
            "revision {bad} was rolled back {}; its nodes have no config: change the spec to roll out again",
            rollback_cause(&status.failed_node_names)
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
    };
    status.target_revision = Some(target.revision.clone());
    let rollout = &entry.spec.rollout;
    let mut params = rollout_params(rollout, pool.len() as u32);
    if v.held.is_some() {
        // While the spec is invalid there is no revision to roll back to.
        params.on_failure = OnFailure::Pause;
    }
    if rolled_back.is_some() {
        // Going back to a revision the pool ran well waits for no canary.
        params.canary = 0;
    }
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
    let (progressing, reason, message) = settled_reason(
        (progressing, reason, message),
        &step.state,
        SettledFacts {
            rolled_back: settled_after_rollback.then_some(v.revision.as_str()),
            held: v.held.as_ref().map(|h| h.revision.as_str()),
            leaving: pool_of.leaving,
        },
    );
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
        if settled_after_rollback {
            format!(
                "revision {} was rolled back {}; the pool {} revision {}: change the spec to roll out again",
                v.revision,
                rollback_cause(&status.failed_node_names),
                if ready { "runs" } else { "returns to" },
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

/// What the rollout column says beyond the planner's state.
struct SettledFacts<'a> {
    /// The spec's revision, rolled back (the pool runs or returns to the previous one).
    rolled_back: Option<&'a str>,
    /// The spec is invalid; the pool keeps this revision.
    held: Option<&'a str>,
    leaving: &'a Leaving,
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

fn conflicting_condition(nodes: &[&str], g: Option<i64>, now_time: &Time) -> Condition {
    let mut names: Vec<&str> = nodes.iter().copied().take(10).collect();
    names.sort();
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

/// The spec's revision first, then the one before it.
fn revision_history(v: &PolicyView<'_>, old: &NodeMemoryPolicyStatus) -> Vec<RevisionRecord> {
    let current = RevisionRecord {
        revision: v.revision.clone(),
        settings: v.entry.spec.settings.clone(),
    };
    match old.revisions.first() {
        Some(first) if first.revision == current.revision => old.revisions.clone(),
        Some(first) => vec![current, first.clone()],
        None => vec![current],
    }
}

/// The revision the pool moves to, and why.
struct TargetChoice {
    /// None: the policy's first revision was rolled back; there is nothing to roll out.
    target: Option<RevisionRecord>,
    /// The revision before the spec's (a rollback's destination).
    previous: Option<RevisionRecord>,
    /// The spec's revision, when it is rolled back.
    rolled_back: Option<String>,
}

/// Where the pool goes: the spec's revision; the previous one after a rollback (a
/// failure's, or a user's request, which applies once, to the revision it names); the
/// last accepted one while the spec is invalid. None: the spec was never valid.
fn choose_target(
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
fn rollback_cause(failed: &[String]) -> String {
    if failed.is_empty() {
        format!("on request ({})", nodemem_api::ROLLBACK_ANNOTATION)
    } else {
        format!("after it failed on {}", failed.join(", "))
    }
}

/// A policy whose spec was never valid governs no node: its status says so, and which
/// nodes it would take once valid (they stay with the policy that governs them now).
fn never_accepted_status(
    v: &PolicyView<'_>,
    pool: &Pool<'_>,
    mut status: NodeMemoryPolicyStatus,
    mut conditions: Vec<Condition>,
    now_time: &Time,
    out: &mut Decision,
) {
    let g = v.entry.generation;
    let would: Vec<&str> = pool.would_take.map(|w| w.to_vec()).unwrap_or_default();
    let shown: Vec<&str> = would.iter().copied().take(10).collect();
    let message = format!(
        "the spec is invalid: it governs no node; once valid it would take {} node(s){}{}",
        would.len(),
        if shown.is_empty() { "" } else { ": " },
        shown.join(", ")
    );
    status.revisions = v.entry.status.revisions.clone();
    for (type_, ok) in [("Progressing", false), ("Ready", false), ("Degraded", true)] {
        conditions.push(condition(
            type_,
            ok,
            "InvalidSpec",
            message.clone(),
            g,
            now_time,
        ));
    }
    finish(v.name, &v.entry.status, status, conditions, out);
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
