//! Nodes that join a pool while it moves to a new revision (`writes::write_running_revision`):
//! the revision the pool runs at once, the target in their turn, and never a revision
//! the pool does not run.

use serde_json::json;

use super::decide;
use crate::decision::Decision;
use crate::tests::{agent_reports, apply, edit, node, policy, settle, world, T0};
use crate::world::World;

/// Pool `p` of a, b and c settled on the first revision (factor 0.9), then edited to
/// factor 0.7 under `rollout`: returns the two revisions and the time.
fn mid_rollout(rollout: serde_json::Value) -> (World, String, i64) {
    let mut w = world(
        &[policy("p", "p", 0, 0.9, json!({"maxUnavailable": 3}))],
        &[("a", "p"), ("b", "p"), ("c", "p")],
    );
    let mut now = T0;
    settle(&mut w, &mut now, 3);
    let first = w.policies["p"].status.revision.clone().unwrap();
    assert!(w.configs.values().all(|c| c.spec.revision == first));
    edit(&mut w, policy("p", "p", 0, 0.7, rollout));
    (w, first, now)
}

fn written(d: &Decision) -> Vec<(&str, &str)> {
    d.writes
        .iter()
        .map(|w| (w.node.as_str(), w.spec.revision.as_str()))
        .collect()
}

fn joined_events(d: &Decision) -> Vec<&str> {
    d.events
        .iter()
        .filter(|e| e.reason == "NodesJoined")
        .map(|e| e.message.as_str())
        .collect()
}

#[test]
fn a_node_joining_a_paused_rollout_gets_the_revision_the_pool_runs_at_once() {
    let (mut w, first, now) = mid_rollout(json!({"paused": true}));
    let d = decide(&w, now);
    apply(&mut w, &d, now);
    assert!(d.writes.is_empty(), "paused: nothing starts");
    let second = w.policies["p"].status.revision.clone().unwrap();
    assert_ne!(first, second);

    w.apply_node(&node("d", "p"));
    let d = decide(&w, now + 10);
    assert_eq!(written(&d), [("d", first.as_str())]);
    let events = joined_events(&d);
    assert_eq!(events.len(), 1, "{:?}", d.events);
    assert!(
        events[0].starts_with(&format!("revision {first} (the pool runs it) to d, new to the pool while it moves to revision {second}")),
        "{}",
        events[0]
    );
    apply(&mut w, &d, now + 10);
    agent_reports(&mut w, "d", true, now + 10);
    let status = &w.policies["p"].status;
    assert_eq!((status.matched_nodes, status.updated_nodes), (4, 0));
    // Written once: the next decisions write nothing while the rollout is paused.
    let d = decide(&w, now + 20);
    assert!(d.writes.is_empty(), "{:?}", d.writes);

    // Resumed, the pool (d too) moves to the second revision in its turn.
    edit(
        &mut w,
        policy("p", "p", 0, 0.7, json!({"maxUnavailable": 4})),
    );
    let mut at = now + 30;
    settle(&mut w, &mut at, 3);
    assert!(
        w.configs.values().all(|c| c.spec.revision == second),
        "{:?}",
        w.configs
    );
}

#[test]
fn a_node_joining_mid_rollout_waits_for_no_slot_and_takes_none() {
    // One node at a time: a updates first and holds the one slot.
    let (mut w, first, now) = mid_rollout(json!({"maxUnavailable": 1}));
    let d = decide(&w, now);
    apply(&mut w, &d, now);
    let second = w.policies["p"].status.revision.clone().unwrap();
    assert_eq!(written(&d), [("a", second.as_str())]);

    w.apply_node(&node("d", "p"));
    let d = decide(&w, now + 5);
    assert_eq!(
        written(&d),
        [("d", first.as_str())],
        "d runs the pool's revision at once; a still holds the slot"
    );
    apply(&mut w, &d, now + 5);
    let status = &w.policies["p"].status;
    assert_eq!(
        (status.matched_nodes, status.updated_nodes),
        (4, 1),
        "d counts as waiting for the target"
    );
}

#[test]
fn a_node_joining_a_pool_that_never_ran_the_previous_revision_waits_its_turn() {
    // The first revision was paused from the start: no node ever ran it.
    let mut w = world(
        &[policy("p", "p", 0, 0.9, json!({"paused": true}))],
        &[("a", "p"), ("b", "p")],
    );
    let mut now = T0;
    settle(&mut w, &mut now, 2);
    assert!(w.configs.is_empty());
    edit(&mut w, policy("p", "p", 0, 0.7, json!({"paused": true})));
    settle(&mut w, &mut now, 1);
    w.apply_node(&node("d", "p"));
    let d = decide(&w, now);
    assert!(d.writes.is_empty(), "{:?}", d.writes);
    assert!(joined_events(&d).is_empty());
}

#[test]
fn a_node_with_another_policys_config_is_a_handoff_not_a_join() {
    let (mut w, _, now) = mid_rollout(json!({"paused": true}));
    let d = decide(&w, now);
    apply(&mut w, &d, now);
    // d runs policy q's config and moves to p's pool.
    w.apply_policy(&policy("q", "q", 0, 0.8, json!({})));
    w.apply_node(&node("d", "q"));
    let mut at = now + 10;
    settle(&mut w, &mut at, 2);
    assert_eq!(w.configs["d"].spec.policy, "q");
    w.apply_node(&node("d", "p"));
    let d = decide(&w, at);
    assert!(joined_events(&d).is_empty(), "{:?}", d.events);
    assert!(
        d.writes.iter().all(|wr| wr.node != "d"),
        "the paused rollout moves d in its turn: {:?}",
        d.writes
    );
}

#[test]
fn a_running_revision_that_drains_a_new_node_is_not_given_at_once() {
    // The pool runs the kubelet's own Static Memory Manager: a node that ran nothing
    // would be drained for it, so it waits its turn.
    let mut p = policy("p", "p", 0, 0.8, json!({"maxUnavailable": 3}));
    p.spec.settings = serde_json::from_value(json!({
        "enforcement": "Kubelet",
        "memoryQoS": {"reservationPolicy": "TieredReservation"},
        "memoryManager": {"policy": "Static", "reservedMemory": [{"numaNode": 0, "limits": {"memory": "300Mi"}}]},
        "nodeReserved": {"kubeReserved": "100Mi", "systemReserved": "100Mi", "evictionHard": "100Mi"},
    }))
    .unwrap();
    let mut w = world(std::slice::from_ref(&p), &[("a", "p")]);
    let mut now = T0;
    // The first revision needs a drain: mark it done as the drain stage would.
    for _ in 0..6 {
        let d = decide(&w, now);
        apply(&mut w, &d, now);
        for order in &d.drains {
            crate::tests::mark(&mut w, &order.node, &order.revision, now, true);
        }
        for wr in &d.writes {
            agent_reports(&mut w, &wr.node, true, now);
        }
        now += 10;
    }
    let first = w.policies["p"].status.revision.clone().unwrap();
    assert_eq!(w.configs["a"].spec.revision, first);
    let mut paused = p.clone();
    paused.spec.rollout = serde_json::from_value(json!({"paused": true})).unwrap();
    paused.spec.settings.memory_qos.throttling_factor = 0.7;
    edit(&mut w, paused);
    settle(&mut w, &mut now, 1);
    w.apply_node(&node("d", "p"));
    let d = decide(&w, now);
    assert!(d.writes.iter().all(|wr| wr.node != "d"), "{:?}", d.writes);
    assert!(joined_events(&d).is_empty());
}
