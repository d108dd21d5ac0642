//! Configs deleted out of band (`kubectl delete nmc --all`, a prune, a script) are
//! written again at once at the revision their node ran: a repair, not a change, so it
//! is not a rollout step waiting for a slot and `minReadySeconds` (issue 44: through
//! the rollout, a pool of hundreds at production settings would run without nodemem's
//! values for hours). Only while the node is still in the pool of the policy that
//! config named and that policy is live; otherwise the rollout or the release decides.

use std::collections::BTreeSet;

use super::index::Index;
use crate::decision::{ConfigWrite, Decision};
use crate::world::World;

/// Writes the vanished configs to repair; returns their nodes (the rollouts of this
/// decision do not start them as well).
pub(super) fn repair_vanished(
    world: &World,
    index: &Index,
    out: &mut Decision,
) -> BTreeSet<String> {
    let mut repaired = BTreeSet::new();
    for (node, spec) in &world.vanished {
        let Some(policy) = world.policies.get(&spec.policy) else {
            continue;
        };
        let in_pool = index
            .pool(&spec.policy)
            .is_some_and(|pool| pool.contains(node));
        if policy.deleting || !in_pool || world.configs.contains_key(node) {
            continue;
        }
        out.writes.push(ConfigWrite {
            node: node.clone(),
            policy_uid: policy.uid.clone(),
            spec: spec.clone(),
        });
        repaired.insert(node.clone());
    }
    repaired
}
