//! `SignalsUnavailable`: the pool's nodes on which a health gate cannot be evaluated
//! because its signal cannot be read (memory pressure without PSI), and what the
//! rollout does about it (`health.pressureUnavailable`). A missing signal is unknown,
//! never good: the policy says so, naming the gate and the nodes.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::world::World;
use nodemem_api::conditions::condition;

/// Nodes named in the message at most.
const NAMED: usize = 10;

/// The condition when some of `pool`'s nodes (on `policy`'s configs) cannot read
/// memory pressure; None when every node can.
pub(super) fn signals_unavailable(
    world: &World,
    policy: &str,
    pool: &BTreeSet<String>,
    g: Option<i64>,
    now_time: &Time,
) -> Option<Condition> {
    let (mut holding, mut proceeding) = (Vec::new(), Vec::new());
    for (node, holds) in &world.pressure_unavailable {
        if !in_pool_on(world, policy, pool, node) {
            continue;
        }
        if *holds {
            holding.push(node.as_str());
        } else {
            proceeding.push(node.as_str());
        }
    }
    let count = holding.len() + proceeding.len();
    if count == 0 {
        return None;
    }
    let mut parts = Vec::new();
    if !holding.is_empty() {
        parts.push(format!(
            "{} hold for it (health.pressureUnavailable: Hold): not counted ready, they fail at progressDeadlineSeconds as any node not ready ({})",
            holding.len(),
            named(&holding)
        ));
    }
    if !proceeding.is_empty() {
        parts.push(format!(
            "{} proceed on the other gates (health.pressureUnavailable: Proceed) ({})",
            proceeding.len(),
            named(&proceeding)
        ));
    }
    Some(condition(
        "SignalsUnavailable",
        true,
        "PressureUnavailable",
        format!(
            "memory pressure (PSI) cannot be read on {count} node(s) of the pool, so maxFullMemoryPressurePercent cannot be evaluated there: {}; boot their kernels with psi=1 to evaluate it",
            parts.join("; ")
        ),
        g,
        now_time,
    ))
}

/// `ReclaimUnsupported`: the pool's nodes on this policy whose kernel has no
/// memory.reclaim (before Linux 5.19) while the policy asks for reclaim; they report,
/// and reclaim nothing. None when there are none.
pub(super) fn reclaim_unsupported(
    world: &World,
    policy: &str,
    pool: &BTreeSet<String>,
    g: Option<i64>,
    now_time: &Time,
) -> Option<Condition> {
    let nodes: Vec<&str> = world
        .reclaim_unsupported
        .iter()
        .filter(|n| in_pool_on(world, policy, pool, n))
        .map(String::as_str)
        .collect();
    if nodes.is_empty() {
        return None;
    }
    Some(condition(
        "ReclaimUnsupported",
        true,
        "NoMemoryReclaim",
        format!(
            "{} node(s) of the pool have a kernel without memory.reclaim (Linux 5.19 and later) and cannot reclaim: {}",
            nodes.len(),
            named(&nodes)
        ),
        g,
        now_time,
    ))
}

/// Whether `node` is one of `pool`'s and its config is `policy`'s (a node moving to
/// another policy is that policy's to report).
fn in_pool_on(world: &World, policy: &str, pool: &BTreeSet<String>, node: &str) -> bool {
    pool.contains(node)
        && world
            .configs
            .get(node)
            .is_some_and(|c| c.spec.policy == policy)
}

/// The first nodes by name, then how many more.
fn named(nodes: &[&str]) -> String {
    let more = nodes.len().saturating_sub(NAMED);
    let shown = nodes[..nodes.len().min(NAMED)].join(", ");
    if more > 0 {
        format!("{shown} and {more} more")
    } else {
        shown
    }
}
