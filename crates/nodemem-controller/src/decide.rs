//! The controller's decisions (pure): for every node, which policy governs it; for
//! every policy, whether it is accepted, which revision its pool moves to and which
//! nodes move next (`nodemem_model::cluster::rollout`); which NodeMemoryConfigs to write or
//! delete; each policy's status. Inputs are the [`World`] and the time; nothing here
//! talks to the apiserver, so a restarted controller decides the same from the same
//! objects.

mod admission;
// The pure helpers the stages share: leaving a policy, the health gate, a node's
// failure, the policy's status words, the recommendation, the rollout settings.
mod agent_blocks;
mod conditions;
mod crd_outdated;
mod drains;
pub(crate) mod handoff;
pub(crate) mod health;
#[cfg(test)]
mod incremental_tests;
pub(crate) mod index;
#[cfg(test)]
mod joining_tests;
pub mod node_failure;
pub(crate) mod policy_status;
pub(crate) mod recommendation;
mod repair;
pub(crate) mod rollout_index;
mod round;
pub(crate) mod settings;
mod signals;
mod target;
mod view;
mod writes;

use std::borrow::Cow;
use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::decide::handoff::{
    decide_deleted_policy, finalizer_orders, release_unselected, Leaving,
};
use crate::decide::health::health_conditions;
use crate::decide::policy_status::finish;
pub use crate::decide::settings::released_settings;
use crate::decision::Decision;
use crate::world::World;
use admission::{admission_conditions, never_accepted_status, opening_status};
use conditions::{announce_no_nodes, announce_updating, record_progress, rollout_conditions};
use drains::nodes_to_start;
use index::{rollout_key, Index};
use rollout_index::RolloutIndex;
use round::Round;
use target::{choose_target, kept_revisions, nothing_to_roll_out};
use view::{policy_views, PolicyView, Pool};
use writes::{write_health_settings, write_rollback, write_running_revision, write_target};

/// Everything the controller should do now, from the whole world (the model the
/// [`Decider`] keeps to).
pub fn decide(world: &World, now: i64) -> Decision {
    let views = policy_views(world);
    decide_with(world, &views, &Index::build_with(world, &views, now), now)
}

/// The controller's decisions one after another: what the decisions read of the nodes
/// is kept in an index that reads again only what changed since the last decision
/// (the world's [`crate::world::Changes`]), so one node's event costs the same whatever
/// the cluster's size. Decides exactly as [`decide`] does.
#[derive(Default)]
pub struct Decider {
    index: Option<Index>,
}

impl Decider {
    pub fn decide(&mut self, world: &mut World, now: i64) -> Decision {
        let changes = world.take_changes();
        let world = &*world;
        let views = policy_views(world);
        let index = match self.index.take() {
            Some(mut index) => {
                index.refresh(world, &views, &changes, now);
                index
            }
            None => Index::build_with(world, &views, now),
        };
        let decision = decide_with(world, &views, &index, now);
        self.index = Some(index);
        decision
    }
}

fn decide_with(world: &World, views: &[PolicyView<'_>], index: &Index, now: i64) -> Decision {
    let now_time = Time(k8s_openapi::jiff::Timestamp::from_second(now).unwrap_or_default());
    let mut out = Decision::default();
    // Nodes no policy governs leave the policy they run through its rollout settings.
    let releases = release_unselected(world, index.unselected(), index.releases(), &mut out);
    let repaired = repair::repair_vanished(world, index, &mut out);
    let no_nodes = BTreeSet::new();
    for v in views {
        let leaving = Leaving::of(v.name, index.moving_from(v.name), &releases);
        if v.entry.deleting {
            decide_deleted_policy(v.name, v.entry, &leaving, &now_time, &mut out);
            continue;
        }
        let pool = Pool {
            nodes: index.pool(v.name).unwrap_or(&no_nodes),
            conflicts: index.ties(v.name),
            would_take: index.would_take(v.name),
            leaving: &leaving,
            excluded: index.excluded(v.name),
        };
        decide_policy(
            world,
            v,
            &pool,
            index.rollout(v.name),
            &repaired,
            (now, &now_time),
            &mut out,
        );
    }
    // Configs of nodes that are gone.
    out.deletes.extend(index.orphans().iter().cloned());
    out.finalizers = finalizer_orders(world, |p| index.in_use(p));
    out
}

/// One policy's decision, stage by stage: admission (Accepted, Conflicting), the
/// revision its pool moves to, the rollout step (which nodes fail, drain, start or go
/// back), the config writes, and the status that says so.
fn decide_policy(
    world: &World,
    v: &PolicyView<'_>,
    pool_of: &Pool<'_>,
    rollout: Option<&RolloutIndex>,
    repaired: &BTreeSet<String>,
    (now, now_time): (i64, &Time),
    out: &mut Decision,
) {
    let old = &v.entry.status;
    let mut status = opening_status(v, pool_of);
    let mut conditions = admission_conditions(v, pool_of, now_time);
    conditions.extend(agent_blocks::agents_blocked(
        world,
        pool_of.nodes,
        now,
        v.entry.generation,
        now_time,
    ));
    conditions.extend(crd_outdated::crd_outdated(
        world,
        v.entry.generation,
        now_time,
    ));
    conditions.extend(signals::signals_unavailable(
        world,
        v.name,
        pool_of.nodes,
        v.entry.generation,
        now_time,
    ));
    conditions.extend(signals::reclaim_unsupported(
        world,
        v.name,
        pool_of.nodes,
        v.entry.generation,
        now_time,
    ));
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
    // The index keeps the pool's rollout to the target chosen here (the same choice);
    // should it not, the pool is classified from scratch.
    let key = rollout_key(v, &target, &choice);
    let rollout = match rollout.filter(|r| *r.key() == key) {
        Some(r) => Cow::Borrowed(r),
        None => Cow::Owned(RolloutIndex::build(
            world,
            key,
            pool_of.nodes.iter().map(String::as_str),
            now,
        )),
    };
    let mut round = Round::plan(world, v, rollout, target, &choice);
    // A node repaired in this decision gets back the spec it ran: the rollout neither
    // starts, drains, reverts nor announces it as well (it is planned again next time).
    round.step.start.retain(|n| !repaired.contains(n));
    round.step.revert.retain(|n| !repaired.contains(n));
    round.announce_failures(old, out);
    let start = nodes_to_start(&round, out);
    write_target(&round, &start, out);
    write_running_revision(&round, &start, repaired, out);
    status.rolled_back_revision = write_rollback(&round, choice.rolled_back, out);
    write_health_settings(&round, out);
    record_progress(&round, &mut status);
    conditions.extend(rollout_conditions(
        &round,
        &status,
        pool_of.leaving,
        now_time,
    ));
    conditions.extend(health_conditions(&conditions, v.entry.generation, now_time));
    announce_updating(&round, out);
    announce_no_nodes(&round, old, out);
    finish(v.name, old, status, conditions, out);
}
