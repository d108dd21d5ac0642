//! The controller's decisions on hand-built worlds (plain tests, no apiserver): a
//! rollout is driven step by step by feeding the decisions back as the apiserver and
//! the agents would.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodemem_api::config::{MemoryTotals, RevisionSignals};
use nodemem_api::{NodeMemoryConfigStatus, NodeMemoryPolicy};
use serde_json::json;

use crate::decide::{decide, released_settings};
use crate::decision::{Decision, PolicyEvent};
use crate::world::World;
use nodemem_api::report::ConfigEntry;

pub(crate) const T0: i64 = 1_795_341_600;

/// A policy of pool `pool`. Its rollout as given, with minReadySeconds 0 unless named:
/// these tests step through decisions ten seconds apart and judge the rollout's logic,
/// not its pace (the defaults have a test of their own,
/// `a_policy_without_a_rollout_section_starts_with_one_node_and_waits_a_minute`).
pub(crate) fn policy(
    name: &str,
    pool: &str,
    priority: i32,
    factor: f64,
    mut rollout: serde_json::Value,
) -> NodeMemoryPolicy {
    if let Some(r) = rollout.as_object_mut() {
        r.entry("minReadySeconds").or_insert(json!(0));
    }
    serde_json::from_value(json!({
        "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 1,
            // As the controller leaves every live policy (`finalizer_orders`).
            "finalizers": [nodemem_api::HANDOFF_FINALIZER]},
        "spec": {"nodeSelector": {"matchLabels": {"pool": pool}}, "priority": priority,
            "memoryQoS": {"throttlingFactor": factor, "reservationPolicy": "TieredReservation"},
            "rollout": rollout},
    }))
    .unwrap()
}

pub(crate) fn node(name: &str, pool: &str) -> k8s_openapi::api::core::v1::Node {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"pool": pool}}})).unwrap()
}

pub(crate) fn world(policies: &[NodeMemoryPolicy], nodes: &[(&str, &str)]) -> World {
    let mut w = World::default();
    for p in policies {
        w.apply_policy(p);
    }
    for (n, pool) in nodes {
        w.apply_node(&node(n, pool));
    }
    w
}

/// Applies a decision as the apiserver would (writes bump the generation and stamp
/// the change time; statuses land on the policies).
pub(crate) fn apply(w: &mut World, d: &Decision, now: i64) {
    for write in &d.writes {
        let generation = w
            .configs
            .get(&write.node)
            .and_then(|c| c.generation)
            .unwrap_or(0)
            + 1;
        let status = w
            .configs
            .get(&write.node)
            .map(|c| c.status.clone())
            .unwrap_or_default();
        let changed = w
            .configs
            .get(&write.node)
            .is_none_or(|c| c.spec.revision != write.spec.revision);
        let spec_changed_at = if changed {
            Some(now)
        } else {
            w.configs[&write.node].spec_changed_at
        };
        w.configs.insert(
            write.node.clone(),
            ConfigEntry {
                generation: Some(generation),
                spec: write.spec.clone(),
                status,
                spec_changed_at,
                good_seen_at: None,
            },
        );
    }
    for node in &d.deletes {
        w.configs.remove(node);
    }
    // The changes above bypass `apply_*`: the incremental decision is told of them.
    for node in d.writes.iter().map(|wr| &wr.node).chain(&d.deletes) {
        w.touch_node(node);
    }
    w.touch_policies();
    for (name, status) in &d.statuses {
        w.policies.get_mut(name).unwrap().status = status.clone();
    }
    for order in &d.finalizers {
        let p = w.policies.get_mut(&order.policy).unwrap();
        p.held = order.hold;
        // A deleted policy without finalizers is gone.
        if p.deleting && !p.held {
            w.policies.remove(&order.policy);
        }
    }
    for (name, named) in &d.spent_rollback_requests {
        let p = w.policies.get_mut(name).unwrap();
        if p.rollback_request.as_ref() == Some(named) {
            p.rollback_request = None;
        }
    }
}

fn cond(type_: &str, ok: bool, reason: &str, generation: Option<i64>, at: i64) -> Condition {
    Condition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: String::new(),
        observed_generation: generation,
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::from_second(at).unwrap()),
    }
}

/// The agent on `node` reports its config's revision applied and healthy (or not).
pub(crate) fn agent_reports(w: &mut World, node: &str, healthy: bool, at: i64) {
    let c = w.configs.get_mut(node).unwrap();
    c.status = NodeMemoryConfigStatus {
        observed_revision: Some(c.spec.revision.clone()),
        conditions: vec![
            cond("Applied", true, "Applied", c.generation, at),
            cond(
                "Healthy",
                healthy,
                if healthy { "Healthy" } else { "OOMKillBurst" },
                c.generation,
                at,
            ),
        ],
        totals: Some(MemoryTotals {
            memory_min_bytes: 1 << 20,
            memory_low_bytes: 2 << 20,
        }),
        since_revision: Some(RevisionSignals {
            revision: c.spec.revision.clone(),
            throttle_events: 1,
            oom_kills: if healthy { 0 } else { 7 },
            peak_full_memory_pressure: 0.0,
            peak_refaults_per_second: None,
        }),
        ..NodeMemoryConfigStatus::default()
    };
    w.touch_node(node);
}

/// `rounds` reconciles 10 s apart, every agent reporting its new spec healthy at once.
pub(crate) fn settle(w: &mut World, now: &mut i64, rounds: usize) {
    for _ in 0..rounds {
        let d = decide(w, *now);
        apply(w, &d, *now);
        for wr in &d.writes {
            agent_reports(w, &wr.node, true, *now);
        }
        *now += 10;
    }
}

/// Policy `p` of pool `p` edited to `factor` (generation 2), its status as the
/// decisions left it: a new revision to roll out.
fn edit_factor(w: &mut World, factor: f64, rollout: serde_json::Value) {
    let mut p2 = policy("p", "p", 0, factor, rollout);
    p2.metadata.generation = Some(2);
    p2.status = Some(w.policies["p"].status.clone());
    w.apply_policy(&p2);
}

/// Pool `p` of nodes a and b under `rollout`, after the first decision wrote a's config.
fn first_node_written(rollout: serde_json::Value) -> World {
    let mut w = world(
        &[policy("p", "p", 0, 0.9, rollout)],
        &[("a", "p"), ("b", "p")],
    );
    let d = decide(&w, T0);
    apply(&mut w, &d, T0);
    assert_eq!(written(&d), ["a"]);
    w
}

fn written(d: &Decision) -> Vec<&str> {
    d.writes.iter().map(|w| w.node.as_str()).collect()
}

fn condition<'a>(w: &'a World, policy: &str, type_: &str) -> &'a Condition {
    w.policies[policy]
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap()
}

#[test]
fn every_node_gets_its_pools_policy_and_ties_are_reported_on_both() {
    let w = world(
        &[
            policy(
                "general",
                "general",
                0,
                0.9,
                json!({"maxUnavailable": "100%"}),
            ),
            policy("batch", "batch", 0, 0.8, json!({"maxUnavailable": "100%"})),
            policy("db", "db", 100, 0.95, json!({"maxUnavailable": "100%"})),
            policy("db-twin", "db", 100, 0.7, json!({"maxUnavailable": "100%"})),
        ],
        &[
            ("g1", "general"),
            ("g2", "general"),
            ("b1", "batch"),
            ("d1", "db"),
            ("x1", "none"),
        ],
    );
    let d = decide(&w, T0);
    let by_node: Vec<(&str, &str)> = d
        .writes
        .iter()
        .map(|w| (w.node.as_str(), w.spec.policy.as_str()))
        .collect();
    assert_eq!(
        by_node,
        [
            ("b1", "batch"),
            ("d1", "db"),
            ("g1", "general"),
            ("g2", "general")
        ],
        "equal priority, no creation times, no node on either yet: the first by name governs; x1 matches nothing"
    );
    for name in ["db", "db-twin"] {
        let status = &d.statuses.iter().find(|s| s.0 == name).unwrap().1;
        assert_eq!(status.conflicting_nodes, 1, "{name}");
        let c = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Conflicting")
            .unwrap();
        assert!(c.message.ends_with(": d1"), "{}", c.message);
    }
    assert_eq!(d.writes[1].policy_uid.as_deref(), Some("uid-db"));
}

#[test]
fn an_invalid_policy_is_not_accepted_and_changes_no_node() {
    let mut bad = policy("bad", "p", 0, 0.9, json!({}));
    bad.spec.settings.memory_manager.policy = nodemem_api::policy::MemoryManagerPolicy::Static;
    let w = world(&[bad], &[("n1", "p")]);
    let d = decide(&w, T0);
    assert!(d.writes.is_empty() && d.deletes.is_empty());
    let status = &d.statuses[0].1;
    let accepted = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Accepted")
        .unwrap();
    assert_eq!(
        (accepted.status.as_str(), accepted.reason.as_str()),
        ("False", "Invalid")
    );
    assert!(
        accepted.message.contains("reservedMemory"),
        "{}",
        accepted.message
    );
    assert_eq!(d.events[0].reason, "PolicyInvalid");
}

/// A pool of 5, maxUnavailable 2, minReadySeconds 60: two at a time, each pair ready
/// a minute after its agents report, then the next; nothing left to write at the end.
#[test]
fn a_rollout_moves_in_batches_and_a_converged_pool_writes_nothing() {
    let nodes: Vec<(String, &str)> = (1..=5).map(|i| (format!("n{i}"), "p")).collect();
    let refs: Vec<(&str, &str)> = nodes.iter().map(|(n, p)| (n.as_str(), *p)).collect();
    let mut w = world(
        &[policy(
            "p",
            "p",
            0,
            0.9,
            json!({"maxUnavailable": 2, "minReadySeconds": 60}),
        )],
        &refs,
    );
    let mut now = T0;
    let mut batches = Vec::new();
    for _ in 0..20 {
        let d = decide(&w, now);
        let started: Vec<String> = written(&d).iter().map(|s| s.to_string()).collect();
        apply(&mut w, &d, now);
        if !started.is_empty() {
            batches.push(started.clone());
        }
        let updating = w
            .configs
            .values()
            .filter(|c| !matches!(c.status.observed_revision.as_deref(), Some(r) if r == c.spec.revision))
            .count();
        assert!(updating <= 2, "at most maxUnavailable in flight");
        now += 30;
        for n in started {
            agent_reports(&mut w, &n, true, now);
        }
        now += 30;
    }
    assert_eq!(batches, [vec!["n1", "n2"], vec!["n3", "n4"], vec!["n5"]]);
    // The first step's status named its batch.
    let mut w1 = world(
        &[policy(
            "p",
            "p",
            0,
            0.9,
            json!({"maxUnavailable": 2, "minReadySeconds": 60}),
        )],
        &refs,
    );
    let d = decide(&w1, T0);
    apply(&mut w1, &d, T0);
    assert!(condition(&w1, "p", "Progressing")
        .message
        .ends_with("updating now (at most 2 at once): n1, n2"));
    assert_eq!(condition(&w, "p", "Ready").status, "True");
    let status = &w.policies["p"].status;
    assert_eq!((status.updated_nodes, status.ready_nodes), (5, 5));
    assert_eq!(status.pool.as_ref().unwrap().memory_min_bytes, 5 << 20);
    // Converged: a resync writes nothing, not even status.
    let d = decide(&w, now + 3600);
    assert_eq!(d, Decision::default());
}

#[test]
fn a_failing_node_pauses_the_rollout_or_rolls_the_pool_back() {
    for failure_policy in ["Pause", "Rollback"] {
        // The first node of each revision is its canary: its failure is the pool's.
        let rollout = json!({"maxUnavailable": 1, "canary": 1, "failurePolicy": failure_policy});
        let mut w = world(
            &[policy("p", "p", 0, 0.9, rollout.clone())],
            &[("a", "p"), ("b", "p"), ("c", "p")],
        );
        // Revision 1 everywhere.
        let mut now = T0;
        settle(&mut w, &mut now, 6);
        let first = w.policies["p"].status.revision.clone().unwrap();
        assert!(w.configs.values().all(|c| c.spec.revision == first));
        // Revision 2: the first node reports an OOM burst.
        edit_factor(&mut w, 0.7, rollout);
        let d = decide(&w, now);
        assert_eq!(written(&d), ["a"]);
        apply(&mut w, &d, now);
        agent_reports(&mut w, "a", false, now + 5);
        now += 10;
        let d = decide(&w, now);
        apply(&mut w, &d, now);
        let second = w.policies["p"].status.revision.clone().unwrap();
        assert_ne!(first, second);
        assert_eq!(w.policies["p"].status.failed_node_names, ["a"]);
        assert_eq!(
            w.policies["p"].status.pool.as_ref().unwrap().worst_nodes,
            ["a", "b", "c"],
            "most OOM kills first"
        );
        if failure_policy == "Pause" {
            assert!(d.writes.is_empty(), "nothing new starts");
            assert_eq!(condition(&w, "p", "Degraded").reason, "MaxFailures");
            assert_eq!(w.configs["a"].spec.revision, second);
            assert!(d.events.iter().any(|e| e.reason == "RolloutStopped"));
        } else {
            assert_eq!(written(&d), ["a"], "a goes back");
            assert_eq!(w.configs["a"].spec.revision, first);
            assert_eq!(
                w.policies["p"].status.rolled_back_revision.as_deref(),
                Some(second.as_str())
            );
            // The rollback is final until the spec changes, also after a restart (the
            // status carries the revisions): the pool settles on the first revision.
            agent_reports(&mut w, "a", true, now + 5);
            now += 10;
            let d = decide(&w, now);
            apply(&mut w, &d, now);
            assert!(d.writes.is_empty(), "{:?}", d.writes);
            assert!(w.configs.values().all(|c| c.spec.revision == first));
            assert_eq!(condition(&w, "p", "Degraded").reason, "RolledBack");
            assert_eq!(
                w.policies["p"].status.failed_node_names,
                ["a"],
                "still named after the rollback"
            );
            assert!(condition(&w, "p", "Degraded")
                .message
                .contains("after it failed on a;"));
            let d = decide(&w, now + 600);
            assert_eq!(d, Decision::default(), "settled");
        }
    }
}

#[test]
fn an_updating_node_past_its_deadline_counts_as_failed() {
    let mut w = first_node_written(json!({"progressDeadlineSeconds": 60, "maxFailures": 1}));
    let d = decide(&w, T0 + 61);
    apply(&mut w, &d, T0 + 61);
    assert_eq!(w.policies["p"].status.failed_node_names, ["a"]);
    assert!(d.writes.is_empty());
    // Its agent never reported on the revision: the condition and one Event say so.
    let degraded = w.policies["p"]
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap()
        .clone();
    assert_eq!(degraded.reason, "MaxFailures");
    assert!(
        degraded.message.ends_with(
            "stopped at maxFailures 1: a (AgentNotReporting: its agent reported nothing on this revision within progressDeadlineSeconds (60 s): it is cut off from the apiserver, not running, or not scheduled on the node)"
        ),
        "{}",
        degraded.message
    );
    let failed: Vec<&PolicyEvent> = d
        .events
        .iter()
        .filter(|e| e.reason == "NodeFailed")
        .collect();
    assert_eq!(failed.len(), 1, "{:?}", d.events);
    assert!(failed[0].warning && failed[0].message.starts_with("a failed revision "));
    // Told once: the next decision does not repeat it.
    let d = decide(&w, T0 + 62);
    assert!(
        d.events.iter().all(|e| e.reason != "NodeFailed"),
        "{:?}",
        d.events
    );
}

#[test]
fn paused_holds_and_unselected_nodes_are_released_then_forgotten() {
    let w = world(
        &[policy("p", "p", 0, 0.9, json!({"paused": true}))],
        &[("a", "p")],
    );
    let d = decide(&w, T0);
    assert!(d.writes.is_empty());
    assert_eq!(
        d.statuses[0]
            .1
            .conditions
            .iter()
            .find(|c| c.type_ == "Progressing")
            .unwrap()
            .reason,
        "Paused"
    );

    let mut w2 = world(
        &[policy("p", "p", 0, 0.9, json!({"maxUnavailable": "100%"}))],
        &[("a", "p"), ("gone", "p")],
    );
    let d = decide(&w2, T0);
    apply(&mut w2, &d, T0);
    agent_reports(&mut w2, "a", true, T0);
    // "a" leaves the pool; "gone" is deleted from the cluster.
    w2.apply_node(&node("a", "elsewhere"));
    w2.delete_node("gone", None);
    let d = decide(&w2, T0 + 10);
    assert_eq!(d.deletes, ["gone"]);
    assert_eq!(written(&d), ["a"]);
    assert_eq!(d.writes[0].spec.settings, released_settings());
    apply(&mut w2, &d, T0 + 10);
    let d = decide(&w2, T0 + 20);
    assert!(
        d.deletes.is_empty(),
        "not until its agent reports the release"
    );
    agent_reports(&mut w2, "a", true, T0 + 20);
    let d = decide(&w2, T0 + 30);
    assert_eq!(d.deletes, ["a"]);
}

#[test]
fn a_node_changing_pools_goes_through_the_new_pools_rollout() {
    let mut w = world(
        &[
            policy("one", "one", 0, 0.9, json!({"maxUnavailable": 1})),
            policy("two", "two", 0, 0.8, json!({"maxUnavailable": 1})),
        ],
        &[("a", "one"), ("b", "two"), ("c", "two")],
    );
    let mut now = T0;
    settle(&mut w, &mut now, 6);
    w.apply_node(&node("a", "two"));
    w.apply_node(&node("b", "one"));
    let d = decide(&w, now);
    // Pool two already has c... a joins it and waits for a slot like any node.
    let moves: Vec<(&str, &str)> = d
        .writes
        .iter()
        .map(|w| (w.node.as_str(), w.spec.policy.as_str()))
        .collect();
    assert_eq!(moves, [("b", "one"), ("a", "two")]);
}

fn created_at(mut p: NodeMemoryPolicy, at: i64) -> NodeMemoryPolicy {
    p.metadata.creation_timestamp =
        Some(Time(k8s_openapi::jiff::Timestamp::from_second(at).unwrap()));
    p
}

/// The sandbox surprise (issue 18): a second policy of the same priority whose
/// selector overlaps a running pool moved the pool's nodes to it at once, because its
/// name sorted first.
#[test]
fn a_tie_moves_no_node_and_only_a_higher_priority_takes_nodes_through_its_rollout() {
    let general = created_at(
        policy("general", "general", 0, 0.9, json!({"maxUnavailable": 1})),
        T0 - 1000,
    );
    let mut w = world(
        &[general],
        &[("g1", "general"), ("g2", "general"), ("g3", "general")],
    );
    let mut now = T0;
    settle(&mut w, &mut now, 8);
    assert!(w.configs.values().all(|c| c.spec.policy == "general"));
    let general_revision = w.configs["g1"].spec.revision.clone();

    // bad3: created later, same priority, a selector that takes every node, a name
    // that sorts first. No node moves; it governs only the node nobody else claims.
    let mut bad3 = created_at(
        policy("bad3", "general", 0, 0.5, json!({"maxUnavailable": 1})),
        T0,
    );
    bad3.spec.node_selector = Default::default();
    w.apply_policy(&bad3);
    w.apply_node(&node("lonely", "batch"));
    for _ in 0..5 {
        let d = decide(&w, now);
        assert!(
            d.writes
                .iter()
                .all(|wr| wr.node == "lonely" && wr.spec.policy == "bad3"),
            "only the unclaimed node: {:?}",
            written(&d)
        );
        apply(&mut w, &d, now);
        for wr in &d.writes {
            agent_reports(&mut w, &wr.node, true, now);
        }
        now += 10;
    }
    for n in ["g1", "g2", "g3"] {
        assert_eq!(w.configs[n].spec.policy, "general", "{n}");
        assert_eq!(w.configs[n].spec.revision, general_revision, "{n}");
    }
    for name in ["general", "bad3"] {
        assert_eq!(w.policies[name].status.conflicting_nodes, 3, "{name}");
        let c = condition(&w, name, "Conflicting");
        assert!(
            c.message.contains("a tie moves no node") && c.message.ends_with("g1, g2, g3"),
            "{}",
            c.message
        );
    }
    assert_eq!(w.policies["general"].status.matched_nodes, 3);
    assert_eq!(w.policies["bad3"].status.matched_nodes, 1);

    // A new general node goes to the older policy.
    w.apply_node(&node("g4", "general"));
    let d = decide(&w, now);
    assert!(d
        .writes
        .iter()
        .any(|wr| wr.node == "g4" && wr.spec.policy == "general"));
    settle(&mut w, &mut now, 4);

    // bad3 gets a strictly higher priority: it takes the general nodes through its own
    // rollout (maxUnavailable 1: one node at a time, each after the one before is
    // Applied and Healthy), never the pool at once.
    let mut higher = bad3.clone();
    higher.spec.priority = 1;
    w.apply_policy(&higher);
    let d = decide(&w, now);
    let taken: Vec<&str> = d
        .writes
        .iter()
        .filter(|wr| wr.spec.policy == "bad3" && wr.node.starts_with('g'))
        .map(|wr| wr.node.as_str())
        .collect();
    assert_eq!(taken, ["g1"], "one node, never the pool at once");
    apply(&mut w, &d, now);
    // Until it reports Applied and Healthy, nothing else moves.
    now += 10;
    let d = decide(&w, now);
    assert!(
        d.writes
            .iter()
            .all(|wr| !wr.node.starts_with('g') || wr.node == "g1"),
        "{:?}",
        written(&d)
    );
    agent_reports(&mut w, "g1", true, now);
    settle(&mut w, &mut now, 6);
    for n in ["g1", "g2", "g3", "g4"] {
        assert_eq!(w.configs[n].spec.policy, "bad3", "{n}");
    }
    assert_eq!(w.policies["bad3"].status.conflicting_nodes, 0);
}

#[test]
fn a_failing_first_revision_is_rolled_back_to_no_config_and_stays_there() {
    let rollout = json!({"maxUnavailable": 1, "canary": 1, "failurePolicy": "Rollback"});
    let mut w = world(
        &[policy("p", "p", 0, 0.9, rollout)],
        &[("a", "p"), ("b", "p")],
    );
    let d = decide(&w, T0);
    apply(&mut w, &d, T0);
    agent_reports(&mut w, "a", false, T0 + 1);
    let d = decide(&w, T0 + 2);
    assert_eq!(d.deletes, ["a"], "no previous revision: the config goes");
    apply(&mut w, &d, T0 + 2);
    for t in [T0 + 3, T0 + 600] {
        let d = decide(&w, t);
        apply(&mut w, &d, t);
        assert!(
            d.writes.is_empty() && d.deletes.is_empty(),
            "no new attempt: {:?}",
            d.writes
        );
    }
    let degraded = condition(&w, "p", "Degraded");
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "RolledBack")
    );
    assert!(
        degraded.message.contains("after it failed on a;"),
        "{}",
        degraded.message
    );
    assert_eq!(condition(&w, "p", "Ready").status, "False");
}

pub(crate) fn mark(w: &mut World, node: &str, revision: &str, started_at: i64, done: bool) {
    w.touch_node(node);
    w.drains.insert(
        node.to_string(),
        crate::world::DrainMark {
            revision: revision.to_string(),
            started_at,
            done,
        },
    );
}

/// enforcement: Kubelet with a Memory Manager change: each node is drained before its
/// config changes, draining nodes count against maxUnavailable, a drain past the
/// deadline fails the node, and a ready node is given back to the scheduler.
#[test]
fn a_kubelet_memory_manager_change_drains_each_node_first() {
    let mut p = policy(
        "k",
        "k",
        0,
        0.9,
        json!({"maxUnavailable": 1, "progressDeadlineSeconds": 60}),
    );
    p.spec.settings = serde_json::from_value(json!({
        "enforcement": "Kubelet",
        "memoryQoS": {"reservationPolicy": "TieredReservation"},
        "memoryManager": {"policy": "Static", "reservedMemory": [{"numaNode": 0, "limits": {"memory": "300Mi"}}]},
        "nodeReserved": {"kubeReserved": "100Mi", "systemReserved": "100Mi", "evictionHard": "100Mi"},
    }))
    .unwrap();
    let mut w = world(&[p], &[("a", "k"), ("b", "k")]);
    let d = decide(&w, T0);
    assert!(d.writes.is_empty(), "no config before the drain");
    assert_eq!(
        d.drains.iter().map(|o| o.node.as_str()).collect::<Vec<_>>(),
        ["a"]
    );
    let revision = d.drains[0].revision.clone();
    assert_eq!(d.drains[0].deadline_seconds, 60);
    apply(&mut w, &d, T0);
    mark(&mut w, "a", &revision, T0, false);
    let d = decide(&w, T0 + 10);
    assert!(d.writes.is_empty());
    assert_eq!(d.drains.len(), 1, "a keeps draining; b waits for the slot");
    mark(&mut w, "a", &revision, T0, true);
    let d = decide(&w, T0 + 20);
    assert_eq!(written(&d), ["a"], "drained: now its config");
    apply(&mut w, &d, T0 + 20);
    agent_reports(&mut w, "a", true, T0 + 21);
    let d = decide(&w, T0 + 30);
    assert_eq!(d.uncordons, ["a"], "ready: back to the scheduler");
    assert_eq!(
        d.drains.iter().map(|o| o.node.as_str()).collect::<Vec<_>>(),
        ["b"]
    );
    apply(&mut w, &d, T0 + 30);
    w.drains.remove("a");
    // b's drain never finishes (a PodDisruptionBudget refuses): failed at the deadline.
    mark(&mut w, "b", &revision, T0 + 30, false);
    let d = decide(&w, T0 + 30 + 61);
    apply(&mut w, &d, T0 + 91);
    assert_eq!(w.policies["k"].status.failed_node_names, ["b"]);
    assert_eq!(condition(&w, "k", "Degraded").reason, "MaxFailures");
    assert!(d.writes.is_empty(), "b's config is not changed");
}

/// The same Static Memory Manager settings moving between enforcement: Agent and
/// Kubelet change the kubelet's own Memory Manager (None under Agent): drained both
/// ways. A change that leaves the kubelet's alone (a factor under Agent) is not.
#[test]
fn entering_or_leaving_kubelet_enforcement_with_the_static_policy_drains() {
    let settings = |enforcement: &str, factor: f64| {
        serde_json::from_value(json!({
            "enforcement": enforcement,
            "memoryQoS": {"throttlingFactor": factor},
            "memoryManager": {"policy": "Static", "reservedMemory": [{"numaNode": 0, "limits": {"memory": "100Mi"}}]},
        }))
        .unwrap()
    };
    let rollout = json!({"maxUnavailable": 1});
    let mut p = policy("k", "k", 0, 0.9, rollout.clone());
    p.spec.settings = settings("Agent", 0.9);
    let mut w = world(&[p.clone()], &[("a", "k")]);
    let mut now = T0;
    settle(&mut w, &mut now, 3);
    assert!(
        w.drains.is_empty(),
        "Agent over the kubelet's own None: no drain"
    );
    assert_eq!(
        w.configs["a"].spec.settings.enforcement,
        nodemem_api::policy::Enforcement::Agent
    );

    let change =
        |w: &mut World, generation: i64, s: nodemem_api::policy::NodeSettings, now: i64| {
            let mut next = p.clone();
            next.metadata.generation = Some(generation);
            next.spec.settings = s;
            next.status = Some(w.policies["k"].status.clone());
            w.apply_policy(&next);
            decide(w, now)
        };
    let d = change(&mut w, 2, settings("Agent", 0.8), now);
    assert!(d.drains.is_empty(), "a factor under Agent: no drain");
    assert_eq!(written(&d), ["a"]);
    apply(&mut w, &d, now);
    settle(&mut w, &mut now, 3);

    let d = change(&mut w, 3, settings("Kubelet", 0.8), now);
    assert!(d.writes.is_empty(), "no Kubelet config before the drain");
    assert_eq!(
        d.drains.iter().map(|o| o.node.as_str()).collect::<Vec<_>>(),
        ["a"]
    );
    let revision = d.drains[0].revision.clone();
    apply(&mut w, &d, now);
    mark(&mut w, "a", &revision, now, true);
    let d = decide(&w, now + 1);
    assert_eq!(written(&d), ["a"], "drained: now its config");
    apply(&mut w, &d, now + 1);
    agent_reports(&mut w, "a", true, now + 2);
    let d = decide(&w, now + 3);
    assert_eq!(d.uncordons, ["a"]);
    apply(&mut w, &d, now + 3);
    w.drains.remove("a");
    now += 10;

    let d = change(&mut w, 4, settings("Agent", 0.8), now);
    assert_eq!(
        d.drains.iter().map(|o| o.node.as_str()).collect::<Vec<_>>(),
        ["a"],
        "leaving Kubelet takes the kubelet's Static policy away: drained too"
    );
}

#[test]
fn a_requested_rollback_returns_the_pool_to_the_previous_revision_until_the_spec_changes() {
    let rollout = json!({"maxUnavailable": 2});
    let mut w = world(
        &[policy("p", "p", 0, 0.9, rollout.clone())],
        &[("a", "p"), ("b", "p")],
    );
    let mut now = T0;
    settle(&mut w, &mut now, 4);
    let first = w.policies["p"].status.revision.clone().unwrap();
    let mut p2 = policy("p", "p", 0, 0.7, rollout.clone());
    p2.metadata.generation = Some(2);
    p2.status = Some(w.policies["p"].status.clone());
    w.apply_policy(&p2);
    settle(&mut w, &mut now, 4);
    let second = w.policies["p"].status.revision.clone().unwrap();
    assert!(w.configs.values().all(|c| c.spec.revision == second));

    // A request naming another revision moves nothing and is spent (removed).
    let mut stale = p2.clone();
    stale.status = Some(w.policies["p"].status.clone());
    stale.metadata.annotations =
        Some([(nodemem_api::ROLLBACK_ANNOTATION.to_string(), first.clone())].into());
    w.apply_policy(&stale);
    assert_eq!(
        decide(&w, now),
        Decision {
            spent_rollback_requests: vec![("p".into(), first.clone())],
            ..Decision::default()
        }
    );

    // `kubectl nodemem rollback p`: the annotation names the current revision.
    let mut asked = stale.clone();
    asked.metadata.annotations =
        Some([(nodemem_api::ROLLBACK_ANNOTATION.to_string(), second.clone())].into());
    w.apply_policy(&asked);
    let d = decide(&w, now);
    assert_eq!(written(&d), ["a", "b"]);
    assert!(d.events.iter().any(|e| e.reason == "RollbackRequested"));
    apply(&mut w, &d, now);
    assert!(w.configs.values().all(|c| c.spec.revision == first));
    assert_eq!(
        w.policies["p"].status.rolled_back_revision.as_deref(),
        Some(second.as_str())
    );
    for n in ["a", "b"] {
        agent_reports(&mut w, n, true, now);
    }
    settle(&mut w, &mut now, 4);
    let degraded = condition(&w, "p", "Degraded");
    assert_eq!(degraded.reason, "RolledBack");
    assert!(
        degraded.message.contains("on request"),
        "{}",
        degraded.message
    );
    // The pool runs the revision before the spec's: the spec does not run, and
    // nothing moves until a person changes it.
    let (ready, stalled) = (condition(&w, "p", "Ready"), condition(&w, "p", "Stalled"));
    assert_eq!(
        (
            ready.status.as_str(),
            stalled.status.as_str(),
            stalled.reason.as_str()
        ),
        ("False", "True", "RolledBack"),
        "{:?}",
        w.policies["p"].status.conditions
    );

    // A new spec ends the rollback (the annotation names an old revision now).
    let mut p3 = policy("p", "p", 0, 0.8, rollout.clone());
    p3.metadata.generation = Some(3);
    p3.metadata.annotations = asked.metadata.annotations.clone();
    p3.status = Some(w.policies["p"].status.clone());
    w.apply_policy(&p3);
    let d = decide(&w, now);
    assert_eq!(
        d.spent_rollback_requests,
        [("p".to_string(), second.clone())],
        "the request is spent once the spec moved on"
    );
    settle(&mut w, &mut now, 4);
    let third = w.policies["p"].status.revision.clone().unwrap();
    assert!(w.configs.values().all(|c| c.spec.revision == third));
    assert_eq!(condition(&w, "p", "Ready").status, "True");
    assert_eq!(condition(&w, "p", "Stalled").status, "False");
    assert_eq!(w.policies["p"].status.rolled_back_revision, None);
    assert_eq!(w.policies["p"].rollback_request, None);

    // The spec set back to the rolled-back revision is a new decision: it rolls out.
    let mut p4 = policy("p", "p", 0, 0.7, rollout);
    p4.metadata.generation = Some(4);
    p4.status = Some(w.policies["p"].status.clone());
    w.apply_policy(&p4);
    settle(&mut w, &mut now, 4);
    assert!(w.configs.values().all(|c| c.spec.revision == second));
    assert_eq!(w.policies["p"].status.rolled_back_revision, None);
    assert_eq!(condition(&w, "p", "Progressing").reason, "Complete");
}

/// A user's edit of a policy the world holds, as the apiserver stores it: the status the
/// controller wrote stays, the generation moves on.
pub(crate) fn edit(w: &mut World, mut p: NodeMemoryPolicy) {
    let name = p.metadata.name.clone().unwrap();
    let held = &w.policies[&name];
    p.metadata.generation = held.generation.map(|g| g + 1);
    p.status = Some(held.status.clone());
    w.apply_policy(&p);
}

/// The same policy, deleted (the finalizer holds it).
pub(crate) fn deleted(mut p: NodeMemoryPolicy) -> NodeMemoryPolicy {
    p.metadata.deletion_timestamp =
        Some(Time(k8s_openapi::jiff::Timestamp::from_second(T0).unwrap()));
    p
}

/// The policy each node's config runs, with its settings' revision: a node without a
/// config, or on the released settings, runs the values of no policy.
fn runs(w: &World) -> Vec<(String, Option<(String, String)>)> {
    let released = nodemem_api::revision::revision(&released_settings());
    w.nodes
        .keys()
        .map(|n| {
            let on = w
                .configs
                .get(n)
                .filter(|c| c.spec.revision != released)
                .map(|c| (c.spec.policy.clone(), c.spec.revision.clone()));
            (n.clone(), on)
        })
        .collect()
}

fn progressing(w: &World, policy: &str) -> String {
    condition(w, policy, "Progressing").reason.clone()
}

#[test]
fn a_live_policy_gets_the_handoff_finalizer_and_a_deleted_one_keeps_it_while_nodes_leave() {
    let mut bare = policy("p", "p", 0, 0.9, json!({}));
    bare.metadata.finalizers = None;
    let w = world(&[bare], &[("a", "p")]);
    let d = decide(&w, T0);
    assert_eq!(
        d.finalizers,
        [crate::decision::FinalizerOrder {
            policy: "p".into(),
            hold: true
        }]
    );
    // Deleted before it had any node: nothing to hand off, it goes at once.
    let w = world(&[deleted(policy("p", "nowhere", 0, 0.9, json!({})))], &[]);
    let d = decide(&w, T0);
    assert_eq!(
        d.finalizers,
        [crate::decision::FinalizerOrder {
            policy: "p".into(),
            hold: false
        }]
    );
    assert_eq!(
        d.statuses[0]
            .1
            .conditions
            .iter()
            .find(|c| c.type_ == "Progressing")
            .unwrap()
            .reason,
        "Released"
    );
}

/// `overlap` (priority 1) over the general pool is deleted: its nodes keep its values
/// until `general`'s rollout reaches each (one at a time, minReadySeconds 10), their
/// configs change owner instead of going, and the finalizer goes with the last one. At
/// no step does a node run the values of neither policy.
#[test]
fn a_deleted_policy_hands_each_node_to_the_next_policy_through_its_rollout() {
    let general = policy(
        "general",
        "general",
        0,
        0.9,
        json!({"maxUnavailable": 1, "minReadySeconds": 10}),
    );
    let overlap = policy("overlap", "general", 1, 0.8, json!({"maxUnavailable": 3}));
    let mut w = world(
        &[general, overlap.clone()],
        &[("g1", "general"), ("g2", "general"), ("g3", "general")],
    );
    let mut now = T0;
    settle(&mut w, &mut now, 4);
    assert!(runs(&w)
        .iter()
        .all(|(_, on)| on.as_ref().is_some_and(|(p, _)| p == "overlap")));

    edit(&mut w, deleted(overlap));
    let d = decide(&w, now);
    assert!(d.deletes.is_empty(), "no config goes: {:?}", d.deletes);
    assert_eq!(written(&d), ["g1"], "general's rollout: one at a time");
    assert_eq!(d.writes[0].spec.policy, "general");
    assert_eq!(d.writes[0].policy_uid.as_deref(), Some("uid-general"));
    assert!(d.finalizers.is_empty(), "held while nodes leave");
    assert!(d.events.iter().any(|e| e.reason == "HandoffStarted"));
    let overlap_status = &d.statuses.iter().find(|s| s.0 == "overlap").unwrap().1;
    assert_eq!(overlap_status.leaving_nodes, 3);
    assert_eq!(overlap_status.matched_nodes, 0);

    let mut moved = Vec::new();
    for _ in 0..20 {
        let d = decide(&w, now);
        apply(&mut w, &d, now);
        moved.extend(written(&d).iter().map(|n| n.to_string()));
        for (node, on) in runs(&w) {
            assert!(on.is_some(), "{node} runs the values of no policy");
        }
        if !w.policies.contains_key("overlap") {
            break;
        }
        assert_eq!(progressing(&w, "overlap"), "Releasing");
        // Agents report what they were given.
        for wr in &d.writes {
            agent_reports(&mut w, &wr.node, true, now);
        }
        now += 5;
    }
    assert_eq!(moved, ["g1", "g2", "g3"], "one after the other");
    assert!(
        !w.policies.contains_key("overlap"),
        "the finalizer went with the last node"
    );
    assert!(runs(&w)
        .iter()
        .all(|(_, on)| on.as_ref().is_some_and(|(p, _)| p == "general")));
}

/// A selector that shrinks to nothing, and a policy deleted with no other to take its
/// nodes: they are released batch by batch with the leaving policy's settings
/// (maxUnavailable 1, minReadySeconds 10), and their configs go once all are released.
#[test]
fn nodes_no_policy_selects_are_released_with_the_leaving_policys_rollout() {
    let rollout = json!({"maxUnavailable": 1, "minReadySeconds": 10});
    for how in ["selector", "deleted", "relabelled"] {
        let p = policy("p", "p", 0, 0.9, rollout.clone());
        let mut w = world(
            std::slice::from_ref(&p),
            &[("a", "p"), ("b", "p"), ("c", "p")],
        );
        let mut now = T0;
        settle(&mut w, &mut now, 8);
        match how {
            "selector" => {
                edit(&mut w, policy("p", "none", 0, 0.9, rollout.clone()));
            }
            "deleted" => {
                edit(&mut w, deleted(p));
            }
            _ => {
                for n in ["a", "b", "c"] {
                    w.apply_node(&node(n, "elsewhere"));
                }
            }
        }
        let mut released_order = Vec::new();
        let mut released_at_once = 0;
        let mut write_times = Vec::new();
        for _ in 0..30 {
            let d = decide(&w, now);
            if w.configs.len() == 3 {
                assert!(
                    d.deletes.is_empty() || d.deletes.len() == 3,
                    "{how}: configs go together at the end: {:?}",
                    d.deletes
                );
            }
            apply(&mut w, &d, now);
            released_order.extend(written(&d).iter().map(|n| n.to_string()));
            released_at_once = released_at_once.max(d.writes.len());
            if !d.writes.is_empty() {
                write_times.push(now);
            }
            if w.configs.is_empty() {
                break;
            }
            if let Some(p) = w.policies.get("p") {
                assert_eq!(progressing(&w, "p"), "Releasing", "{how}");
                assert!(p.status.leaving_nodes > 0, "{how}");
            }
            for wr in &d.writes {
                let c = w.configs.get_mut(&wr.node).unwrap();
                c.status = Default::default();
            }
            now += 5;
            for wr in &d.writes {
                agent_reports(&mut w, &wr.node, true, now);
            }
        }
        assert_eq!(released_order, ["a", "b", "c"], "{how}: one at a time");
        assert_eq!(released_at_once, 1, "{how}");
        assert!(
            write_times.windows(2).all(|t| t[1] - t[0] >= 10),
            "{how}: each waits for the one before to be ready for minReadySeconds: {write_times:?}"
        );
        assert!(w.configs.is_empty(), "{how}: released and forgotten");
        // The next decision (the deletions' watch events) reports on the policy.
        let d = decide(&w, now);
        apply(&mut w, &d, now);
        match how {
            "deleted" => assert!(!w.policies.contains_key("p"), "the finalizer went"),
            _ => {
                assert_eq!(progressing(&w, "p"), "Complete", "{how}");
                assert_eq!(w.policies["p"].status.leaving_nodes, 0);
            }
        }
    }
}

/// A policy whose spec was never valid governs no node: `numa-database`'s nodes stay
/// with it, a valid change to it rolls out, and `bad-sum` says what it would take.
#[test]
fn a_policy_never_accepted_governs_no_node_and_says_which_it_would_take() {
    let good = policy(
        "numa-database",
        "db",
        200,
        0.9,
        json!({"maxUnavailable": 2}),
    );
    let mut bad = policy("bad-sum", "db", 300, 0.9, json!({}));
    bad.spec.settings.memory_manager.policy = nodemem_api::policy::MemoryManagerPolicy::Static;
    let mut w = world(&[good, bad], &[("db-1", "db"), ("db-2", "db")]);
    let mut now = T0;
    settle(&mut w, &mut now, 4);
    assert!(runs(&w)
        .iter()
        .all(|(_, on)| on.as_ref().is_some_and(|(p, _)| p == "numa-database")));
    assert_eq!(w.policies["numa-database"].status.matched_nodes, 2);
    let bad_status = &w.policies["bad-sum"].status;
    assert_eq!(bad_status.matched_nodes, 0);
    assert_eq!(progressing(&w, "bad-sum"), "InvalidSpec");
    let message = &condition(&w, "bad-sum", "Progressing").message;
    assert!(
        message.contains("would take 2 node(s): db-1, db-2"),
        "{message}"
    );
    assert!(condition(&w, "bad-sum", "Accepted")
        .message
        .contains("it governs no node until the spec is valid"));

    edit(
        &mut w,
        policy(
            "numa-database",
            "db",
            200,
            0.7,
            json!({"maxUnavailable": 2}),
        ),
    );
    settle(&mut w, &mut now, 4);
    let revision = w.policies["numa-database"].status.revision.clone().unwrap();
    assert!(w.configs.values().all(|c| c.spec.revision == revision));
    assert_eq!(progressing(&w, "numa-database"), "Complete");
}

/// An edit that makes an accepted policy invalid holds its nodes on the last accepted
/// revision, and says so; a new node still gets that revision; a valid edit moves on.
#[test]
fn an_accepted_policy_made_invalid_holds_its_nodes_on_the_last_accepted_revision() {
    let rollout = json!({"maxUnavailable": 2});
    let mut w = world(
        &[policy("p", "p", 0, 0.9, rollout.clone())],
        &[("a", "p"), ("b", "p")],
    );
    let mut now = T0;
    settle(&mut w, &mut now, 4);
    let accepted = w.policies["p"].status.revision.clone().unwrap();
    let mut broken = policy("p", "p", 0, 0.8, rollout.clone());
    broken.spec.settings.memory_manager.policy = nodemem_api::policy::MemoryManagerPolicy::Static;
    edit(&mut w, broken);
    w.apply_node(&node("c", "p"));
    settle(&mut w, &mut now, 4);
    assert!(
        w.configs.values().all(|c| c.spec.revision == accepted),
        "every node, the new one too, runs the last accepted revision"
    );
    let status = &w.policies["p"].status;
    assert_eq!(status.matched_nodes, 3);
    assert_eq!(status.target_revision.as_deref(), Some(accepted.as_str()));
    assert_ne!(status.revision.as_deref(), Some(accepted.as_str()));
    assert_eq!(progressing(&w, "p"), "InvalidSpec");
    assert!(condition(&w, "p", "Accepted").message.contains(&format!(
        "its nodes keep revision {accepted}, the last accepted"
    )));

    edit(&mut w, policy("p", "p", 0, 0.8, rollout));
    settle(&mut w, &mut now, 4);
    let revision = w.policies["p"].status.revision.clone().unwrap();
    assert!(w.configs.values().all(|c| c.spec.revision == revision));
    assert_eq!(progressing(&w, "p"), "Complete");
}

/// Safe by default (issue 44, item 9): a policy without a rollout section starts with
/// one node (a canary) and lets each node be ready for a minute (the pressure gate's
/// PSI avg60 wholly under the new values) before the next starts; one node at a time.
#[test]
fn a_policy_without_a_rollout_section_starts_with_one_node_and_waits_a_minute() {
    let mut p = policy("p", "p", 0, 0.8, json!({}));
    let mut spec = serde_json::to_value(&p.spec).unwrap();
    spec.as_object_mut().unwrap().remove("rollout");
    p.spec = serde_json::from_value(spec).unwrap();
    assert_eq!(
        p.spec.rollout.canary,
        Some(nodemem_api::int_or_percent::IntOrPercent::Int(1))
    );
    assert_eq!(p.spec.rollout.min_ready_seconds, 60);
    let mut w = world(&[p], &[("a", "p"), ("b", "p"), ("c", "p")]);
    let mut started: Vec<(String, i64)> = Vec::new();
    let mut now = T0;
    while now <= T0 + 300 {
        let d = decide(&w, now);
        apply(&mut w, &d, now);
        for wr in &d.writes {
            if !started.iter().any(|(n, _)| n == &wr.node) {
                started.push((wr.node.clone(), now));
            }
            agent_reports(&mut w, &wr.node, true, now);
        }
        now += 10;
    }
    let at: Vec<i64> = started.iter().map(|(_, t)| t - T0).collect();
    assert_eq!(at.len(), 3, "{started:?}");
    assert_eq!(at[0], 0, "the canary starts at once: {started:?}");
    for pair in at.windows(2) {
        assert!(
            pair[1] - pair[0] >= 60,
            "each next node a minute after the last was ready: {started:?}"
        );
    }
    assert_eq!(progressing(&w, "p"), "Complete");
}

/// An install whose agents are deployed for Agent and Observe only refuses a policy
/// that asks for Kubelet by name (its agents could not carry it out): a new policy
/// governs no node, an edit of an accepted one holds its nodes on the last accepted
/// revision, as for any invalid spec.
#[test]
fn a_policy_asking_for_a_mode_the_install_lacks_is_refused_by_name() {
    let rollout = json!({"maxUnavailable": 2});
    let kubelet = |name: &str, pool: &str| {
        let mut p = policy(name, pool, 0, 0.8, rollout.clone());
        p.spec.settings.enforcement = nodemem_api::policy::Enforcement::Kubelet;
        p
    };
    let mut w = world(
        &[policy("p", "p", 0, 0.9, rollout.clone()), kubelet("k", "k")],
        &[("a", "p"), ("b", "k")],
    );
    w.installed_modes = "Agent,Observe".parse().unwrap();
    let mut now = T0;
    settle(&mut w, &mut now, 4);
    let accepted = w.policies["p"].status.revision.clone().unwrap();
    assert_eq!(w.configs["a"].spec.revision, accepted);
    assert!(
        !w.configs.contains_key("b"),
        "the Kubelet policy governs no node"
    );
    let refused = condition(&w, "k", "Accepted");
    assert_eq!(
        (refused.status.as_str(), refused.reason.as_str()),
        ("False", "Invalid")
    );
    assert!(
        refused.message.starts_with(
            "enforcement Kubelet is not installed: the agents are deployed for Agent,Observe only"
        ),
        "{}",
        refused.message
    );

    edit(&mut w, kubelet("p", "p"));
    settle(&mut w, &mut now, 4);
    assert_eq!(w.configs["a"].spec.revision, accepted);
    assert!(condition(&w, "p", "Accepted").message.contains(&format!(
        "its nodes keep revision {accepted}, the last accepted"
    )));
}

/// A rollback reads as one: `RollingBack` while the pool returns (no canary wait), then
/// `RolledBack` with the revision the nodes run beside the spec's.
#[test]
fn a_rollback_reads_as_rolling_back_then_rolled_back() {
    let rollout = json!({"maxUnavailable": 1, "canary": 1, "failurePolicy": "Rollback",
        "maxFailures": 1});
    let mut w = world(
        &[policy("p", "p", 0, 0.9, rollout.clone())],
        &[("a", "p"), ("b", "p"), ("c", "p")],
    );
    let mut now = T0;
    settle(&mut w, &mut now, 8);
    let good = w.policies["p"].status.revision.clone().unwrap();
    edit(&mut w, policy("p", "p", 0, 0.5, rollout));
    let d = decide(&w, now);
    apply(&mut w, &d, now);
    assert_eq!(written(&d), ["a"]);
    agent_reports(&mut w, "a", false, now);
    now += 5;
    let mut reasons = Vec::new();
    for _ in 0..8 {
        let d = decide(&w, now);
        apply(&mut w, &d, now);
        for wr in &d.writes {
            agent_reports(&mut w, &wr.node, true, now);
        }
        reasons.push(progressing(&w, "p"));
        now += 5;
    }
    reasons.dedup();
    assert_eq!(reasons, ["RollingBack", "RolledBack"]);
    let status = &w.policies["p"].status;
    assert_eq!(status.target_revision.as_deref(), Some(good.as_str()));
    assert_ne!(status.revision, status.target_revision);
    assert!(w.configs.values().all(|c| c.spec.revision == good));
    let degraded = condition(&w, "p", "Degraded");
    assert!(
        degraded.message.contains("after it failed on a") && degraded.message.contains("runs"),
        "{}",
        degraded.message
    );
}

/// `memoryQoS.enabled: false` is a revision like any other: the policy keeps governing
/// its nodes (that is how a pool is exempted from a lower-priority policy) and they
/// give back what nodemem set one batch after another, at the policy's own pace, never
/// at once.
#[test]
fn disabling_memory_qos_gives_back_one_batch_after_another() {
    let rollout = json!({"maxUnavailable": 1, "minReadySeconds": 10});
    let mut w = world(
        &[
            policy("general", "p", 0, 0.9, rollout.clone()),
            policy("exempt", "p", 10, 0.8, rollout.clone()),
        ],
        &[("a", "p"), ("b", "p"), ("c", "p")],
    );
    let mut now = T0;
    settle(&mut w, &mut now, 8);
    let mut off = policy("exempt", "p", 10, 0.8, rollout);
    off.spec.settings.memory_qos.enabled = false;
    edit(&mut w, off);
    let before = w.policies["exempt"].status.revision.clone();
    let mut written_at = Vec::new();
    for _ in 0..20 {
        let d = decide(&w, now);
        assert!(d.deletes.is_empty(), "no config goes");
        assert!(d.writes.len() <= 1, "one at a time: {:?}", written(&d));
        assert!(d.writes.iter().all(|wr| wr.spec.policy == "exempt"));
        if !d.writes.is_empty() {
            written_at.push(now);
        }
        apply(&mut w, &d, now);
        for wr in &d.writes {
            agent_reports(&mut w, &wr.node, true, now);
        }
        now += 5;
    }
    assert_eq!(written_at.len(), 3, "{written_at:?}");
    assert!(
        written_at.windows(2).all(|t| t[1] - t[0] >= 10),
        "{written_at:?}"
    );
    let disabled = w.policies["exempt"].status.revision.clone();
    assert_ne!(disabled, before, "a new revision");
    assert!(w
        .configs
        .values()
        .all(|c| c.spec.policy == "exempt" && !c.spec.settings.memory_qos.enabled));
}

/// The agent on `node` reports its config applied and memory pressure unreadable:
/// `Healthy=Unknown PressureUnavailable` (holds) or `True HealthyWithoutPressure`.
fn agent_reports_no_pressure(w: &mut World, node: &str, holds: bool, at: i64) {
    agent_reports(w, node, true, at);
    let c = w.configs.get_mut(node).unwrap();
    let healthy = c
        .status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == "Healthy")
        .unwrap();
    if holds {
        healthy.status = "Unknown".into();
        healthy.reason = nodemem_api::report::PRESSURE_UNAVAILABLE.into();
    } else {
        healthy.reason = nodemem_api::report::HEALTHY_WITHOUT_PRESSURE.into();
    }
    w.touch_node(node);
}

#[test]
fn a_node_without_psi_holds_its_pool_and_the_policy_names_the_gate_and_the_node() {
    let mut w = first_node_written(json!({"progressDeadlineSeconds": 60, "maxFailures": 1}));
    agent_reports_no_pressure(&mut w, "a", true, T0 + 1);
    let d = decide(&w, T0 + 2);
    apply(&mut w, &d, T0 + 2);
    assert!(
        d.writes.is_empty(),
        "the unknown node is not ready: b waits"
    );
    let c = condition(&w, "p", "SignalsUnavailable");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "PressureUnavailable")
    );
    assert_eq!(
        c.message,
        "memory pressure (PSI) cannot be read on 1 node(s) of the pool, so maxFullMemoryPressurePercent cannot be evaluated there: 1 hold for it (health.pressureUnavailable: Hold): not counted ready, they fail at progressDeadlineSeconds as any node not ready (a); boot their kernels with psi=1 to evaluate it"
    );
    let told: Vec<&PolicyEvent> = d
        .events
        .iter()
        .filter(|e| e.reason == "SignalsUnavailable")
        .collect();
    assert!(told.len() == 1 && told[0].warning, "{:?}", d.events);
    // Held, not good: at the deadline the node fails as one not ready, naming why.
    let d = decide(&w, T0 + 61);
    apply(&mut w, &d, T0 + 61);
    assert_eq!(w.policies["p"].status.failed_node_names, ["a"]);
    let degraded = condition(&w, "p", "Degraded");
    assert!(
        degraded
            .message
            .ends_with("; Healthy is PressureUnavailable)"),
        "{}",
        degraded.message
    );
}

#[test]
fn a_policy_that_proceeds_without_psi_moves_on_and_says_so() {
    let mut w = first_node_written(json!({}));
    agent_reports_no_pressure(&mut w, "a", false, T0 + 1);
    let d = decide(&w, T0 + 2);
    apply(&mut w, &d, T0 + 2);
    assert_eq!(written(&d), ["b"], "a counts as ready on the other gates");
    let c = condition(&w, "p", "SignalsUnavailable");
    assert!(
        c.message
            .contains(": 1 proceed on the other gates (health.pressureUnavailable: Proceed) (a)"),
        "{}",
        c.message
    );
    // Once every node reads pressure, the condition goes.
    agent_reports(&mut w, "a", true, T0 + 3);
    agent_reports(&mut w, "b", true, T0 + 3);
    let d = decide(&w, T0 + 4);
    apply(&mut w, &d, T0 + 4);
    assert!(
        w.policies["p"]
            .status
            .conditions
            .iter()
            .all(|c| c.type_ != "SignalsUnavailable"),
        "{:?}",
        w.policies["p"].status.conditions
    );
}

/// A node whose kernel has no memory.reclaim is named on its policy (and a warning
/// Event says so once); the condition goes when its agent reports it can.
#[test]
fn a_node_that_cannot_reclaim_is_named_on_its_policy() {
    let mut w = first_node_written(json!({}));
    agent_reports(&mut w, "a", true, T0 + 1);
    let report = |w: &mut World, supported: bool| {
        let c = w.configs.get_mut("a").unwrap();
        c.status.reclaim = Some(Box::new(nodemem_api::config::ReclaimSummary {
            revision: c.spec.revision.clone(),
            mode: "Observe".into(),
            supported,
            ..Default::default()
        }));
        w.touch_node("a");
    };
    report(&mut w, false);
    let d = decide(&w, T0 + 2);
    apply(&mut w, &d, T0 + 2);
    let c = condition(&w, "p", "ReclaimUnsupported");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
        ("True", "NoMemoryReclaim", "1 node(s) of the pool have a kernel without memory.reclaim (Linux 5.19 and later) and cannot reclaim: a")
    );
    assert_eq!(
        d.events
            .iter()
            .filter(|e| e.reason == "ReclaimUnsupported")
            .count(),
        1,
        "{:?}",
        d.events
    );
    report(&mut w, true);
    let d = decide(&w, T0 + 3);
    apply(&mut w, &d, T0 + 3);
    assert!(w.policies["p"]
        .status
        .conditions
        .iter()
        .all(|c| c.type_ != "ReclaimUnsupported"));
}

#[test]
fn one_node_failing_outside_the_canary_holds_the_pool_and_rolls_nothing_back() {
    let rollout = json!({"maxUnavailable": 1, "failurePolicy": "Rollback"});
    let mut w = world(
        &[policy("p", "p", 0, 0.9, rollout.clone())],
        &[("a", "p"), ("b", "p"), ("c", "p")],
    );
    let mut now = T0;
    settle(&mut w, &mut now, 6);
    let first = w.policies["p"].status.revision.clone().unwrap();
    edit_factor(&mut w, 0.7, rollout);
    let d = decide(&w, now);
    assert_eq!(written(&d), ["a"]);
    apply(&mut w, &d, now);
    let second = w.configs["a"].spec.revision.clone();
    // One agent says its node failed (a broken or hostile one would say the same).
    agent_reports(&mut w, "a", false, now + 5);
    now += 10;
    let d = decide(&w, now);
    apply(&mut w, &d, now);
    assert!(
        d.writes.is_empty() && d.deletes.is_empty(),
        "nothing goes back, nothing new starts: {:?}",
        d.writes
    );
    assert_eq!(
        w.configs["a"].spec.revision, second,
        "the failed node keeps its revision"
    );
    assert_eq!(w.configs["b"].spec.revision, first);
    assert_eq!(w.policies["p"].status.rolled_back_revision, None);
    assert_eq!(w.policies["p"].status.failed_node_names, ["a"]);
    let degraded = condition(&w, "p", "Degraded");
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "OneNodeFailed")
    );
    assert!(
        degraded.message.contains(
            "maxFailures 1 reached by one node outside the canary: a (AgentReportedFailure: "
        ) && degraded
            .message
            .contains("a rollback needs a second failed node or a failed canary"),
        "{}",
        degraded.message
    );
    assert!(
        d.events
            .iter()
            .any(|e| e.reason == "NodeFailed" && e.message.starts_with("a failed")),
        "{:?}",
        d.events
    );
    // Held until a person acts: later decisions move nothing either.
    let d = decide(&w, now + 600);
    assert!(d.writes.is_empty() && d.deletes.is_empty());
}

/// The agent on `node` reports an observation of its revision: `containers` with room
/// for a memory.high, `fitting` of them under it at every factor, for `seconds`.
fn observe(w: &mut World, node: &str, containers: i32, fitting: i32, seconds: i64) {
    let c = w.configs.get_mut(node).unwrap();
    c.status.observation = Some(
        serde_json::from_value(json!({
            "revision": c.spec.revision, "enforced": true,
            "since": "2026-11-22T10:00:00Z", "observedSeconds": seconds,
            "containers": containers, "throttledContainers": containers - fitting,
            "fittingByFactor": vec![fitting; 20],
        }))
        .unwrap(),
    );
    w.touch_node(node);
}

#[test]
fn one_node_cannot_steer_its_pools_recommendation() {
    let mut p = policy("p", "p", 0, 0.9, json!({"maxUnavailable": "100%"}));
    p.spec.recommendation.min_containers = 10;
    p.spec.recommendation.min_observation_seconds = 3600;
    let mut w = world(&[p], &[("a", "p"), ("b", "p"), ("c", "p"), ("d", "p")]);
    let mut now = T0;
    settle(&mut w, &mut now, 2);
    let recommendation = |w: &World| w.policies["p"].status.recommendation.clone().unwrap();
    // One node observed for a week, reporting a million containers none of which fit:
    // alone it is no quorum of a four-node pool.
    observe(&mut w, "a", 1_000_000, 0, 7 * 86_400);
    let d = decide(&w, now);
    apply(&mut w, &d, now);
    let r = recommendation(&w);
    assert_eq!(
        r.reason,
        nodemem_api::policy::RecommendationReason::TooLittleEvidence
    );
    assert!(
        r.message
            .contains("on at least 2 node(s) (half the pool), each observed for 3600 s")
            && r.message
                .ends_with("so far 1000000 container(s) on 1 node(s), 1 of them for 0 s"),
        "{}",
        r.message
    );
    // Three honest nodes join it, 20 containers each, all fitting: the pool's answer is
    // theirs (the loud node weighs as two median nodes, not as a million containers).
    for n in ["b", "c", "d"] {
        observe(&mut w, n, 20, 20, 7200);
    }
    let d = decide(&w, now + 1);
    apply(&mut w, &d, now + 1);
    let r = recommendation(&w);
    assert_eq!(
        r.reason,
        nodemem_api::policy::RecommendationReason::NoFactorSuffices,
        "{}",
        r.message
    );
    assert_eq!(
        r.containers, 100,
        "60 + 40: the loud node capped at twice the median"
    );
    // Honest figures from the loud node too: a recommendation.
    observe(&mut w, "a", 20, 20, 7200);
    let d = decide(&w, now + 2);
    apply(&mut w, &d, now + 2);
    let r = recommendation(&w);
    assert_eq!(
        r.reason,
        nodemem_api::policy::RecommendationReason::Recommended,
        "{}",
        r.message
    );
    assert_eq!((r.containers, r.nodes, r.observed_seconds), (80, 4, 7200));
}

/// Workload classes (issue 63): a class with a factor of its own gets its own
/// recommendation from its containers alone, with the pool's quorum; a class without
/// memory.high too (its current factor absent); a class on the pool's factor has none
/// (its containers are the pool's evidence), and the pool's recommendation is the
/// pool's tally's.
#[test]
fn each_class_with_its_own_memory_high_gets_its_own_recommendation() {
    use nodemem_api::policy::RecommendationReason;
    use nodemem_api::policy::RecommendationReason::{Recommended, TooLittleEvidence};
    let mut p = policy("p", "p", 0, 0.9, json!({"maxUnavailable": "100%"}));
    p.spec.recommendation.min_containers = 10;
    p.spec.recommendation.min_observation_seconds = 3600;
    p.spec.settings.classes = serde_json::from_value(json!([
        {"name": "batch", "throttlingFactor": 0.5},
        {"name": "service", "memoryHigh": "None"},
        {"name": "loose", "protection": "None"}]))
    .unwrap();
    let mut w = world(&[p], &[("a", "p"), ("b", "p")]);
    let mut now = T0;
    settle(&mut w, &mut now, 2);
    // The pool's containers fit every factor; batch's only from 0.70 on (the 14th
    // step); service has reported nothing.
    let batch_fitting: Vec<i32> = (1..=20).map(|k| if k >= 14 { 8 } else { 0 }).collect();
    for n in ["a", "b"] {
        observe(&mut w, n, 20, 20, 7200);
        let o = w
            .configs
            .get_mut(n)
            .unwrap()
            .status
            .observation
            .as_mut()
            .unwrap();
        o.classes = vec![nodemem_api::config::ClassObservation {
            name: "batch".into(),
            containers: 8,
            throttled_containers: 8,
            fitting_by_factor: batch_fitting.clone(),
        }];
        w.touch_node(n);
    }
    let d = decide(&w, now);
    apply(&mut w, &d, now);
    let r = w.policies["p"].status.recommendation.clone().unwrap();
    assert_eq!(r.containers, 40, "the pool's own containers alone");
    assert_eq!(r.throttling_factor, Some(0.05), "{}", r.message);
    type Row<'a> = (&'a str, RecommendationReason, Option<f64>, Option<f64>, i32);
    let classes: Vec<Row<'_>> = r
        .classes
        .iter()
        .map(|c| {
            (
                c.name.as_str(),
                c.reason,
                c.throttling_factor,
                c.current_factor,
                c.containers,
            )
        })
        .collect();
    assert_eq!(
        classes,
        [
            ("batch", Recommended, Some(0.7), Some(0.5), 16),
            ("service", TooLittleEvidence, None, None, 0),
        ],
        "{:?}",
        r.classes
    );
    assert!(
        r.classes[0]
            .message
            .contains("the current 0.5 throttles 100%"),
        "{}",
        r.classes[0].message
    );
    // One node alone reporting a class is no quorum of a two-node pool.
    let o = w
        .configs
        .get_mut("b")
        .unwrap()
        .status
        .observation
        .as_mut()
        .unwrap();
    o.classes.clear();
    w.touch_node("b");
    let d = decide(&w, now + 1);
    apply(&mut w, &d, now + 1);
    let r = w.policies["p"].status.recommendation.clone().unwrap();
    assert_eq!(
        r.classes[0].reason, TooLittleEvidence,
        "{}",
        r.classes[0].message
    );
}

/// A config deleted while its node waits for the rollout is repaired at the revision
/// the node ran, once: the same decision's rollout neither writes it the target too nor
/// names it in its NodesUpdating Event; the free slot goes to another node.
#[test]
fn a_node_repaired_mid_rollout_is_not_also_started_or_announced() {
    let rollout = json!({"maxUnavailable": 2});
    let mut w = world(
        &[policy("p", "p", 0, 0.9, rollout.clone())],
        &[("a", "p"), ("b", "p"), ("c", "p"), ("d", "p")],
    );
    let mut now = T0;
    settle(&mut w, &mut now, 4);
    let r1 = w.policies["p"].status.revision.clone().unwrap();
    edit_factor(&mut w, 0.7, rollout);
    let d = decide(&w, now);
    apply(&mut w, &d, now);
    let first: Vec<&str> = d.writes.iter().map(|wr| wr.node.as_str()).collect();
    assert_eq!(first, ["a", "b"], "two slots");
    for n in ["a", "b"] {
        agent_reports(&mut w, n, true, now);
    }
    // c still runs r1; its config is deleted by hand as a and b become ready.
    assert_eq!(w.configs["c"].spec.revision, r1);
    let c_ran = w.configs["c"].spec.clone();
    assert!(w.delete_config("c", None));
    now += 10;
    let d = decide(&w, now);
    let to_c: Vec<_> = d.writes.iter().filter(|wr| wr.node == "c").collect();
    assert_eq!(to_c.len(), 1, "{:?}", d.writes);
    assert_eq!(to_c[0].spec, c_ran, "c gets back what it ran");
    assert!(d.writes.iter().any(|wr| wr.node == "d"), "{:?}", d.writes);
    let updating: Vec<&str> = d
        .events
        .iter()
        .filter(|e| e.reason == "NodesUpdating")
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(updating.len(), 1, "{updating:?}");
    assert!(updating[0].ends_with(" to d"), "{updating:?}");
}

#[test]
fn configs_deleted_by_hand_are_repaired_at_once_at_their_revision_not_rolled_out() {
    let rollout = json!({"maxUnavailable": 1, "minReadySeconds": 300});
    let mut w = world(
        &[policy("p", "p", 0, 0.9, rollout)],
        &[("a", "p"), ("b", "p"), ("c", "p"), ("d", "q")],
    );
    let mut now = T0;
    for _ in 0..12 {
        settle(&mut w, &mut now, 1);
        now += 300;
    }
    let r1 = w.policies["p"].status.revision.clone().unwrap();
    assert_eq!(w.configs.len(), 3);
    assert!(w.configs.values().all(|c| c.spec.revision == r1));
    // `kubectl delete nmc --all`, as the watch reports it.
    let before: Vec<_> = w
        .configs
        .iter()
        .map(|(n, c)| (n.clone(), c.spec.clone()))
        .collect();
    for n in ["a", "b", "c"] {
        assert!(w.delete_config(n, None));
    }
    let d = decide(&w, now);
    let mut written: Vec<_> = d
        .writes
        .iter()
        .map(|wr| (wr.node.clone(), wr.spec.clone()))
        .collect();
    written.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        written, before,
        "every node at once, each with the spec it ran"
    );
    assert!(d
        .writes
        .iter()
        .all(|wr| wr.policy_uid.as_deref() == Some("uid-p")));
    apply(&mut w, &d, now);
    assert!(w.vanished.is_empty(), "forgotten once written");
    // A repair is not a change: nothing more is written.
    for n in ["a", "b", "c"] {
        agent_reports(&mut w, n, true, now);
    }
    let d = decide(&w, now + 1);
    assert!(d.writes.is_empty(), "{:?}", d.writes);
    // A config the controller deleted itself (a node released) is not repaired, and a
    // vanished config of a node that left the pool is the release's business.
    assert!(w.delete_own_config("c"));
    assert!(w.vanished.is_empty());
    let mut relabelled = node("b", "q");
    relabelled.metadata.resource_version = Some("9".into());
    w.apply_node(&relabelled);
    assert!(w.delete_config("b", None));
    let d = decide(&w, now + 2);
    assert!(
        d.writes.iter().all(|wr| wr.node != "b"),
        "b left the pool: {:?}",
        d.writes
    );
}

/// A policy whose selector matches no node is Ready over nothing, and says so: Ready's
/// message and one Warning Event per spec (not one per decision), gone once a node
/// carries its labels.
#[test]
fn a_policy_that_selects_no_node_says_so_once_per_spec() {
    let no_nodes = |d: &Decision| {
        d.events
            .iter()
            .filter(|e| e.reason == "NoNodesSelected" && e.warning)
            .count()
    };
    let mut w = world(&[policy("p", "p", 0, 0.9, json!({}))], &[("a", "q")]);
    let d = decide(&w, T0);
    assert_eq!(no_nodes(&d), 1, "{:?}", d.events);
    apply(&mut w, &d, T0);
    let ready = condition(&w, "p", "Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", "AllNodesReady")
    );
    assert!(
        ready.message.contains("selects no node"),
        "{}",
        ready.message
    );
    let d = decide(&w, T0 + 10);
    assert_eq!(no_nodes(&d), 0, "said once for this spec");
    apply(&mut w, &d, T0 + 10);
    // A new spec that still selects nothing says it again.
    edit_factor(&mut w, 0.8, json!({}));
    let d = decide(&w, T0 + 20);
    assert_eq!(no_nodes(&d), 1);
    apply(&mut w, &d, T0 + 20);
    // A node of the pool: nothing to say.
    w.apply_node(&node("b", "p"));
    let mut now = T0 + 30;
    settle(&mut w, &mut now, 6);
    let ready = condition(&w, "p", "Ready");
    assert!(
        !ready.message.contains("selects no node"),
        "{}",
        ready.message
    );
    assert_eq!(no_nodes(&decide(&w, now)), 0);
}

/// Workload classes (issue 63): a class's change is a new revision that moves through
/// the pool as any change (canary first), and the policy counts each class's pods over
/// the pool from what its agents report, a class no pod runs at 0.
#[test]
fn a_classs_change_rolls_out_as_a_revision_and_the_pool_counts_its_pods() {
    let with_classes = |factor: f64, generation: i64| {
        let mut p = policy("p", "p", 0, 0.9, json!({"canary": 1, "maxUnavailable": 2}));
        p.metadata.generation = Some(generation);
        p.spec.settings.classes = serde_json::from_value(json!([
            {"name": "batch", "throttlingFactor": factor, "protection": "None"},
            {"name": "service", "memoryHigh": "None"},
        ]))
        .unwrap();
        p
    };
    let mut w = world(
        &[with_classes(0.5, 1)],
        &[("a", "p"), ("b", "p"), ("c", "p")],
    );
    let mut now = T0;
    settle(&mut w, &mut now, 8);
    let first = w.policies["p"].status.revision.clone().unwrap();
    assert!(w.configs.values().all(|c| c.spec.revision == first));
    assert_eq!(w.configs["a"].spec.settings.classes.len(), 2);
    // The agents report their pods per class; the policy sums them per spec class.
    for (node, batch) in [("a", 2), ("b", 3)] {
        let c = w.configs.get_mut(node).unwrap();
        c.status.classes = vec![nodemem_api::policy::ClassPods {
            name: "batch".into(),
            pods: batch,
        }];
        w.touch_node(node);
    }
    let d = decide(&w, now);
    apply(&mut w, &d, now);
    let pool = w.policies["p"].status.pool.clone().unwrap();
    let counts: Vec<(&str, i64)> = pool
        .classes
        .iter()
        .map(|c| (c.name.as_str(), c.pods))
        .collect();
    assert_eq!(counts, [("batch", 5), ("service", 0)]);
    // A class's factor edited: a new revision, the canary node first.
    let mut edited = with_classes(0.6, 2);
    edited.status = Some(w.policies["p"].status.clone());
    w.apply_policy(&edited);
    let d = decide(&w, now);
    apply(&mut w, &d, now);
    let second = w.policies["p"].status.revision.clone().unwrap();
    assert_ne!(second, first);
    assert_eq!(written(&d).len(), 1, "the canary alone: {:?}", written(&d));
    agent_reports(&mut w, written(&d)[0], true, now);
    now += 10;
    settle(&mut w, &mut now, 10);
    assert!(w.configs.values().all(|c| c.spec.revision == second));
    let batch = &w.configs["c"].spec.settings.classes[0];
    assert_eq!(batch.throttling_factor, Some(0.6));
}
