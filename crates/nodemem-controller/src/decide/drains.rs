//! Drains: a change of the kubelet's own Memory Manager needs the node drained first
//! (KEP-1769: pinned pods lose their guarantees, and the kubelet's state is reset).
//! Entering or leaving enforcement: Kubelet with the Static policy changes it as much
//! as a new policy or reservedMemory under it (found on the real node: the same Static
//! settings moving from Agent to Kubelet restarted the kubelet with the Static Memory
//! Manager under pods it had never admitted).

use super::round::Round;
use crate::decision::{Decision, DrainOrder};

/// The nodes whose config is written now: the planner's starts that need no drain or
/// are drained for the target, and drained nodes still waiting for it. Drain orders go
/// to the others; a node drained for another revision, or ready on the target, is
/// uncordoned.
pub(super) fn nodes_to_start(round: &Round<'_>, out: &mut Decision) -> Vec<String> {
    let mut start = gate_planned_starts(round, out);
    start.extend(follow_drain_marks(round, out));
    start.sort();
    start.dedup();
    start
}

/// The planner's starts, less those that must drain first (ordered here).
fn gate_planned_starts(round: &Round<'_>, out: &mut Decision) -> Vec<String> {
    let target = &round.target;
    let world = round.world;
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
    let mut start = Vec::new();
    for node in &round.step.start {
        if needs_drain(node) && !drained(node) {
            out.drains.push(drain_order(round, node));
        } else {
            start.push(node.clone());
        }
    }
    start
}

/// What each drain mark on the pool's nodes asks for now; returns the drained nodes
/// that still wait for the target's config.
fn follow_drain_marks(round: &Round<'_>, out: &mut Decision) -> Vec<String> {
    let target = &round.target;
    let mut start = Vec::new();
    for node in round.pool.drain_marked() {
        let node = node.as_str();
        let Some(mark) = round.world.drains.get(node) else {
            continue;
        };
        let on_target = round
            .config_of(node)
            .is_some_and(|spec| spec.revision == target.revision);
        let ordered = |out: &Decision| out.drains.iter().any(|d| d.node == node);
        if mark.revision != target.revision {
            // A drain for a revision that is no longer wanted (unless the node is drained
            // again, for the target, right now).
            if !ordered(out) {
                out.uncordons.push(node.to_string());
            }
        } else if !mark.done {
            // Still draining (again after a controller restart: the order is idempotent).
            if !ordered(out) {
                out.drains.push(drain_order(round, node));
            }
        } else if !on_target {
            start.push(node.to_string());
        } else if round.step.counts.ready > 0 && round.is_ready(node) {
            out.uncordons.push(node.to_string());
        }
    }
    start
}

fn drain_order(round: &Round<'_>, node: &str) -> DrainOrder {
    DrainOrder {
        node: node.to_string(),
        revision: round.target.revision.clone(),
        deadline_seconds: round.params.progress_deadline_seconds,
    }
}

/// Whether a node that ran no config must be drained before `settings` (the kubelet's
/// own Memory Manager changes from its default).
pub(super) fn drains_a_new_node(settings: &nodemem_api::policy::NodeSettings) -> bool {
    kubelets_memory_manager(settings) != Default::default()
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::decide::view::policy_views;
    use crate::tests::{mark, policy, settle, world, T0};

    fn static_kubelet(name: &str) -> nodemem_api::NodeMemoryPolicy {
        let mut p = policy(name, "a", 0, 0.8, json!({"maxUnavailable": 3}));
        p.spec.settings = serde_json::from_value(json!({
            "enforcement": "Kubelet",
            "memoryQoS": {"reservationPolicy": "TieredReservation"},
            "memoryManager": {"policy": "Static", "reservedMemory": [{"numaNode": 0, "limits": {"memory": "300Mi"}}]},
            "nodeReserved": {"kubeReserved": "100Mi", "systemReserved": "100Mi", "evictionHard": "100Mi"},
        }))
        .unwrap();
        p
    }

    #[test]
    fn a_start_that_changes_the_kubelets_memory_manager_drains_first() {
        let mut w = world(
            &[policy("p", "a", 0, 0.8, json!({"maxUnavailable": 3}))],
            &[("n1", "a"), ("n2", "a"), ("n3", "a")],
        );
        let mut now = T0;
        settle(&mut w, &mut now, 3);
        crate::tests::edit(&mut w, static_kubelet("p"));
        let revision = nodemem_api::revision::revision(&w.policies["p"].spec.settings);
        // n2 is drained for the target; n3 drains for a revision no longer wanted.
        mark(&mut w, "n2", &revision, now - 60, true);
        mark(&mut w, "n3", "older", now - 60, true);
        let views = policy_views(&w);
        let p = &views[0];
        let target = p.spec_record();
        assert_eq!(target.revision, revision);
        let pool = ["n1", "n2", "n3"];
        assert!(p.problems.is_empty(), "{:?}", p.problems);
        let round = Round::against_spec(&w, p, &pool, now);
        // n2's drain for the target counts as its update under way.
        assert_eq!(round.step.start, vec!["n1".to_string(), "n3".to_string()]);
        let mut out = Decision::default();
        let start = nodes_to_start(&round, &mut out);
        assert_eq!(start, vec!["n2".to_string()]);
        let drained: Vec<&str> = out.drains.iter().map(|d| d.node.as_str()).collect();
        assert_eq!(drained, vec!["n1", "n3"]);
        assert!(out.drains.iter().all(|d| d.revision == target.revision));
        // n3 is drained again for the target at once, so it is not uncordoned.
        assert!(out.uncordons.is_empty(), "{:?}", out.uncordons);
    }

    #[test]
    fn only_the_kubelets_own_memory_manager_counts() {
        let mut settings = static_kubelet("p").spec.settings;
        let kubelet = kubelets_memory_manager(&settings);
        assert_eq!(
            kubelet.policy,
            nodemem_api::policy::MemoryManagerPolicy::Static
        );
        settings.enforcement = nodemem_api::policy::Enforcement::Agent;
        assert_eq!(kubelets_memory_manager(&settings), Default::default());
    }
}
