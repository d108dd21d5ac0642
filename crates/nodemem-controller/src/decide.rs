//! The controller's decisions (pure): for every node, which policy governs it; for
//! every policy, whether it is accepted, which revision its pool moves to and which
//! nodes move next (`nodemem_model::rollout`); which NodeMemoryConfigs to write or
//! delete; each policy's status. Inputs are the [`World`] and the time; nothing here
//! talks to the apiserver, so a restarted controller decides the same from the same
//! objects.

mod admission;
mod conditions;
mod drains;
mod round;
mod target;
mod view;
mod writes;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodemem_model::resolve::{resolve_policy, PolicyCandidate};

use crate::decision::Decision;
use crate::handoff::{decide_deleted_policy, finalizer_orders, release_unselected, Leaving};
use crate::policy_status::finish;
pub use crate::settings::released_settings;
use crate::world::World;
use admission::{admission_conditions, never_accepted_status, opening_status};
use conditions::{announce_updating, record_progress, rollout_conditions};
use drains::nodes_to_start;
use round::Round;
use target::{choose_target, kept_revisions, nothing_to_roll_out};
use view::{policy_views, PolicyView, Pool};
use writes::{write_health_settings, write_rollback, write_target};

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

/// One policy's decision, stage by stage: admission (Accepted, Conflicting), the
/// revision its pool moves to, the rollout step (which nodes fail, drain, start or go
/// back), the config writes, and the status that says so.
fn decide_policy(
    world: &World,
    v: &PolicyView<'_>,
    pool_of: &Pool<'_>,
    now: i64,
    now_time: &Time,
    out: &mut Decision,
) {
    let old = &v.entry.status;
    let mut status = opening_status(v, pool_of);
    let mut conditions = admission_conditions(v, pool_of, now_time);
    let Some(choice) = choose_target(v, old, out) else {
        never_accepted_status(v, pool_of, status, conditions, now_time, out);
        return;
    };
    status.revisions = kept_revisions(v, old);
    let Some(target) = choice.target.clone() else {
        nothing_to_roll_out(v, choice.rolled_back, status, conditions, now_time, out);
        return;
    };
    status.target_revision = Some(target.revision.clone());
    let round = Round::plan(world, v, pool_of.nodes, target, &choice, now);
    round.announce_failures(old, out);
    let start = nodes_to_start(&round, out);
    write_target(&round, &start, out);
    status.rolled_back_revision = write_rollback(&round, choice.rolled_back, out);
    write_health_settings(&round, out);
    record_progress(&round, &mut status);
    conditions.extend(rollout_conditions(
        &round,
        &status,
        pool_of.leaving,
        now_time,
    ));
    announce_updating(&round, out);
    finish(v.name, old, status, conditions, out);
}
