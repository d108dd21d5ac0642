//! The incremental decision ([`Decider`]) against the model ([`decide`], which reads the
//! whole world): random runs of a small cluster (nodes joining, leaving and changing
//! pools, agents reporting well and badly with observations, drains, policies created,
//! edited, made invalid and deleted, time passing, the clock set back), each decision fed back as the
//! apiserver would. After every step both decide the same, and the index the
//! [`Decider`] kept equals one built from scratch.

use proptest::prelude::*;
use serde_json::json;

use super::index::Index;
use super::{decide, Decider};
use crate::tests::{agent_reports, apply, deleted, edit, mark, node, policy, T0};
use crate::world::World;

#[derive(Clone, Debug)]
enum Op {
    /// Node `n` joins, or moves to, pool `pool` (3: none; 4: the first pool, as a
    /// Windows node, where the agent cannot run).
    Label {
        n: u8,
        pool: u8,
    },
    RemoveNode(u8),
    /// The agent of node `n` reports its config (if any).
    Report {
        n: u8,
        healthy: bool,
        observed: bool,
    },
    /// A drain mark on node `n`: for its policy's spec revision or another, done or not.
    Drain {
        n: u8,
        for_target: bool,
        done: bool,
    },
    /// Policy `p` created or edited with variant `v` of its settings and rollout.
    Edit {
        p: u8,
        v: u8,
    },
    DeletePolicy(u8),
    Wait(u16),
    /// The controller's clock is set back.
    ClockBack(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..8u8, 0..5u8).prop_map(|(n, pool)| Op::Label { n, pool }),
        1 => (0..8u8).prop_map(Op::RemoveNode),
        6 => (0..8u8, any::<bool>(), any::<bool>()).prop_map(|(n, healthy, observed)| Op::Report {
            n,
            healthy: healthy || n % 3 != 0,
            observed
        }),
        1 => (0..8u8, any::<bool>(), any::<bool>()).prop_map(|(n, for_target, done)| Op::Drain {
            n,
            for_target,
            done
        }),
        2 => (0..3u8, 0..8u8).prop_map(|(p, v)| Op::Edit { p, v }),
        1 => (0..3u8).prop_map(Op::DeletePolicy),
        4 => (0..200u16).prop_map(Op::Wait),
        1 => (0..120u8).prop_map(Op::ClockBack),
    ]
}

const POOLS: [&str; 3] = ["a", "b", "c"];

/// Policy `p` (p0 and p2 both select pool a, at the same priority unless the variant
/// says otherwise) with one of eight variants of its settings and rollout.
fn policy_variant(p: u8, v: u8) -> nodemem_api::NodeMemoryPolicy {
    let pool = ["a", "b", "a"][p as usize];
    let factor = [0.9, 0.8, 0.7, 7.0][(v % 4) as usize];
    let rollout = match v / 2 {
        0 => json!({"maxUnavailable": 1, "minReadySeconds": 30}),
        1 => json!({"maxUnavailable": "50%", "failurePolicy": "Rollback", "maxFailures": 1,
            "progressDeadlineSeconds": 60}),
        2 => json!({"maxUnavailable": 2, "canary": 1, "health": {"maxOomKills": 3}}),
        _ => json!({"maxUnavailable": "100%", "paused": v % 2 == 1}),
    };
    let priority = if p == 2 && v >= 6 { 10 } else { 0 };
    let mut policy = policy(&format!("p{p}"), pool, priority, factor, rollout);
    // Policies created in order of their number (ties go to the oldest).
    policy.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(T0 - 1000 + i64::from(p)).unwrap(),
        ));
    policy
}

fn name(n: u8) -> String {
    format!("node-{n}")
}

/// Carries out one step through the world's own updates (or the test helpers, which
/// tell the world what they changed).
fn step(w: &mut World, op: &Op, now: &mut i64) {
    match op {
        Op::Label { n, pool: 4 } => {
            let mut windows = node(&name(*n), POOLS[0]);
            let labels = windows.metadata.labels.get_or_insert_default();
            labels.insert("kubernetes.io/os".into(), "windows".into());
            w.apply_node(&windows);
        }
        Op::Label { n, pool } => {
            let pool = POOLS.get(*pool as usize).copied().unwrap_or("none");
            w.apply_node(&node(&name(*n), pool));
        }
        Op::RemoveNode(n) => {
            w.delete_node(&name(*n), None);
        }
        Op::Report {
            n,
            healthy,
            observed,
        } => {
            let node = name(*n);
            if w.configs.contains_key(&node) {
                agent_reports(w, &node, *healthy, *now);
                if *observed {
                    observe(w, &node, *n, *now);
                }
            }
        }
        Op::Drain {
            n,
            for_target,
            done,
        } => {
            let node = name(*n);
            let revision = w
                .configs
                .get(&node)
                .and_then(|c| w.policies.get(&c.spec.policy))
                .map(|p| nodemem_api::revision::revision(&p.spec.settings))
                .filter(|_| *for_target)
                .unwrap_or_else(|| "other".to_string());
            if w.nodes.contains_key(&node) {
                mark(w, &node, &revision, *now - 30, *done);
            }
        }
        Op::Edit { p, v } => {
            let edited = policy_variant(*p, *v);
            if w.policies.contains_key(&format!("p{p}")) {
                edit(w, edited);
            } else {
                w.apply_policy(&edited);
            }
        }
        Op::DeletePolicy(p) => {
            let name = format!("p{p}");
            if let Some(held) = w.policies.get(&name) {
                let mut gone = deleted(policy_variant(*p, 0));
                gone.spec = held.spec.clone();
                edit(w, gone);
            }
        }
        Op::Wait(s) => *now += i64::from(*s),
        Op::ClockBack(s) => *now -= i64::from(*s),
    }
}

/// An observation of the config's revision, as the agent reports it.
fn observe(w: &mut World, node: &str, n: u8, at: i64) {
    w.touch_node(node);
    let c = w.configs.get_mut(node).unwrap();
    c.status.observation = Some(
        serde_json::from_value(json!({
            "revision": c.spec.revision, "enforced": true,
            "since": k8s_openapi::jiff::Timestamp::from_second(at - 100).unwrap().to_string(),
            "observedSeconds": 100 + i64::from(n) * 50,
            "containers": 3 + i32::from(n), "throttledContainers": i32::from(n % 2),
            "fittingByFactor": [1, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3],
        }))
        .unwrap(),
    );
}

fn run(ops: &[Op]) {
    let mut w = World::default();
    // Kept off Windows nodes by its affinity (the test's other nodes carry no OS label).
    w.agent_pod = Some(
        crate::agents::pod::AgentPod::parse(
            r#"{"nodeSelector": {}, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/os", "operator": "NotIn", "values": ["windows"]}]}]}}}}"#,
        )
        .unwrap(),
    );
    let mut now = T0;
    let mut decider = Decider::default();
    for (i, op) in ops.iter().enumerate() {
        step(&mut w, op, &mut now);
        let fast = decider.decide(&mut w, now);
        let model = decide(&w, now);
        assert_eq!(fast, model, "step {i} ({op:?}): the decisions differ");
        let kept = decider.index.as_ref().unwrap();
        assert!(
            *kept == Index::build(&w, now),
            "step {i} ({op:?}): the kept index differs from one built now"
        );
        apply(&mut w, &model, now);
        now += 5;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn the_incremental_decision_is_the_models(ops in proptest::collection::vec(op(), 1..80)) {
        run(&ops);
    }
}

/// A rollout driven to its end the way the controller runs it: each decision's writes
/// acknowledged, time passing past minReadySeconds and deadlines.
#[test]
fn a_whole_rollout_and_a_rollback_decide_the_same() {
    let mut ops = vec![Op::Edit { p: 0, v: 0 }, Op::Edit { p: 1, v: 2 }];
    ops.extend((0..8).map(|n| Op::Label { n, pool: n % 2 }));
    for round in 0..30u8 {
        ops.extend((0..8).map(|n| Op::Report {
            n,
            healthy: round != 12 || n != 1,
            observed: n % 3 == 0,
        }));
        ops.push(Op::Wait(20));
        if round == 10 {
            ops.push(Op::Edit { p: 1, v: 3 });
            ops.push(Op::Edit { p: 0, v: 1 });
        }
        if round == 20 {
            ops.push(Op::DeletePolicy(1));
            ops.push(Op::Label { n: 2, pool: 3 });
        }
    }
    run(&ops);
}
