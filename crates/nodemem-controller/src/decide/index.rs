//! What the decision reads of the nodes, kept current as they change (issue 32: one
//! node's event costs the same whatever the cluster's size). For each node: the policy
//! that governs it, the policies that tie on it, the policy it would go to once valid,
//! the policy whose config it runs. From those: each policy's pool, the nodes no
//! policy governs, the nodes leaving a policy, configs whose node is gone, and each
//! rollout's nodes by phase ([`RolloutIndex`]).
//!
//! [`Index::build_with`] reads the whole world and is the model; [`Index::refresh`] reads
//! again only the nodes the world says changed (and everything, when the policies'
//! selectors, priorities or validity change), and the tests hold it to the model.

use std::collections::{BTreeMap, BTreeSet};

use nodemem_api::policy::RevisionRecord;
use nodemem_api::revision::revision;
use nodemem_model::cluster::resolve::{resolve_policy, PolicyCandidate};

use super::rollout_index::{RolloutIndex, RolloutKey};
use super::target::{choose_target, TargetChoice};
use super::view::PolicyView;
use crate::decide::handoff::Moving;
use crate::decide::settings::{released_settings, rollout_params};
use crate::decision::Decision;
use crate::world::{Changes, World};

/// Where one node stands between the policies.
#[derive(Clone, Debug, Default, PartialEq)]
struct NodeFacts {
    /// A Node of that name exists (a config may outlive it).
    exists: bool,
    governor: Option<String>,
    /// The policies tied on it (the governor first), when there is a tie.
    ties: Vec<String>,
    /// The never-accepted policy that would govern it once valid.
    would_take: Option<String>,
    /// The policy its config names.
    config_policy: Option<String>,
    /// The policy that would govern it and why nodemem's agent cannot run there: the
    /// node is then governed by none (`World::agent_excluded`).
    excluded: Option<(String, String)>,
}

/// What resolution reads of a policy: when any of it changes, every node is resolved
/// again.
#[derive(Clone, Debug, PartialEq)]
struct ResolutionKey {
    name: String,
    priority: i32,
    selector: nodemem_api::policy::NodeSelector,
    created: Option<i64>,
    governs: bool,
    never_accepted: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Index {
    /// The time the phases are reckoned at.
    at: i64,
    resolution: Vec<ResolutionKey>,
    facts: BTreeMap<String, NodeFacts>,
    pools: BTreeMap<String, BTreeSet<String>>,
    ties: BTreeMap<String, BTreeSet<String>>,
    would_take: BTreeMap<String, BTreeSet<String>>,
    unselected: BTreeSet<String>,
    /// Policy -> the nodes it would govern where the agent cannot run -> why.
    excluded: BTreeMap<String, BTreeMap<String, String>>,
    /// Policy -> the policy that governs now some nodes still on its config -> those
    /// nodes (grouped by where they go, as the status tells them).
    moving: BTreeMap<String, Moving>,
    /// Configs whose Node is gone.
    orphans: BTreeSet<String>,
    /// Policy -> how many configs name it.
    in_use: BTreeMap<String, usize>,
    /// A policy's pool moving to its target.
    rollouts: BTreeMap<String, RolloutIndex>,
    /// The nodes no policy governs, by the policy whose config they run.
    releases: BTreeMap<String, RolloutIndex>,
}

/// The policies as resolution sees them, read once per refresh.
struct Resolver<'a> {
    views: &'a [PolicyView<'a>],
    governing: Vec<PolicyCandidate<'a>>,
    never_accepted: Vec<PolicyCandidate<'a>>,
}

fn candidate<'a>(v: &'a PolicyView<'a>) -> PolicyCandidate<'a> {
    PolicyCandidate {
        name: v.name,
        priority: v.entry.spec.priority,
        selector: &v.selector,
        created: v.entry.created,
    }
}

impl<'a> Resolver<'a> {
    fn new(views: &'a [PolicyView<'a>]) -> Self {
        Resolver {
            views,
            governing: views
                .iter()
                .filter(|v| v.governs())
                .map(candidate)
                .collect(),
            never_accepted: views
                .iter()
                .filter(|v| !v.entry.deleting && !v.governs())
                .map(candidate)
                .collect(),
        }
    }

    fn key(&self) -> Vec<ResolutionKey> {
        self.views
            .iter()
            .map(|v| ResolutionKey {
                name: v.name.to_string(),
                priority: v.entry.spec.priority,
                selector: v.entry.spec.node_selector.clone(),
                created: v.entry.created,
                governs: v.governs(),
                never_accepted: !v.entry.deleting && !v.governs(),
            })
            .collect()
    }

    /// Where `node` stands, as the world has it.
    fn facts(&self, world: &World, node: &str) -> NodeFacts {
        let config_policy = world.configs.get(node).map(|c| c.spec.policy.clone());
        let Some(labels) = world.nodes.get(node) else {
            return NodeFacts {
                config_policy,
                ..NodeFacts::default()
            };
        };
        // The policy whose revision the node runs: a tie never moves it.
        let current = config_policy.as_deref();
        let mut facts = NodeFacts {
            exists: true,
            config_policy: config_policy.clone(),
            ..NodeFacts::default()
        };
        if !self.never_accepted.is_empty() {
            let mut all = self.governing.clone();
            all.extend(self.never_accepted.iter().cloned());
            if let Some(w) = resolve_policy(&all, labels, current).winner {
                if self.never_accepted.iter().any(|c| c.name == w) {
                    facts.would_take = Some(w.to_string());
                }
            }
        }
        let r = resolve_policy(&self.governing, labels, current);
        let Some(winner) = r.winner else {
            return facts;
        };
        if let Some(reason) = world.agent_excluded(node) {
            // No agent will come: the node is counted apart, never waited for.
            return NodeFacts {
                excluded: Some((winner.to_string(), reason)),
                would_take: None,
                ..facts
            };
        }
        facts.governor = Some(winner.to_string());
        if !r.conflicting.is_empty() {
            facts.ties = std::iter::once(winner.to_string())
                .chain(r.conflicting.iter().cloned())
                .filter(|name| self.views.iter().any(|v| v.name == name))
                .collect();
        }
        facts
    }
}

/// The rollout of each policy that has a revision to roll out (`decide_policy` plans
/// the same target).
fn rollout_keys(views: &[PolicyView<'_>]) -> BTreeMap<String, RolloutKey> {
    let mut keys = BTreeMap::new();
    for v in views.iter().filter(|v| !v.entry.deleting) {
        let mut scratch = Decision::default();
        let Some(choice) = choose_target(v, &v.entry.status, &mut scratch) else {
            continue;
        };
        let Some(target) = &choice.target else {
            continue;
        };
        keys.insert(v.name.to_string(), rollout_key(v, target, &choice));
    }
    keys
}

/// What a policy's pool moving to `target` (`choice`'s) depends on.
pub(super) fn rollout_key(
    v: &PolicyView<'_>,
    target: &RevisionRecord,
    choice: &TargetChoice,
) -> RolloutKey {
    let params = rollout_params(&v.entry.spec.rollout, 0);
    RolloutKey {
        policy: v.name.to_string(),
        target: target.revision.clone(),
        previous: choice
            .previous
            .as_ref()
            .map(|p| p.revision.clone())
            .filter(|p| *p != target.revision),
        min_ready_seconds: params.min_ready_seconds,
        progress_deadline_seconds: params.progress_deadline_seconds,
        drains: true,
        spec_revision: Some(v.revision.clone()),
        health: Some(v.entry.spec.rollout.health.clone()),
    }
}

/// The release of the nodes leaving `policy` for no policy: its rollout settings (the
/// defaults once it is gone) to the released settings.
fn release_key(world: &World, policy: &str) -> RolloutKey {
    let rollout = world
        .policies
        .get(policy)
        .map(|e| e.spec.rollout.clone())
        .unwrap_or_default();
    let params = rollout_params(&rollout, 0);
    RolloutKey {
        policy: policy.to_string(),
        target: revision(&released_settings()),
        min_ready_seconds: params.min_ready_seconds,
        progress_deadline_seconds: params.progress_deadline_seconds,
        drains: false,
        spec_revision: None,
        previous: None,
        health: None,
    }
}

impl Index {
    /// The index of the whole world at `now`, reading the policies itself (the tests'
    /// model; the decisions read the policies once and use [`Index::build_with`]).
    #[cfg(test)]
    pub(crate) fn build(world: &World, now: i64) -> Index {
        Index::build_with(world, &super::view::policy_views(world), now)
    }

    /// The tests' `Index::build` with the policies already read.
    pub(super) fn build_with(world: &World, views: &[PolicyView<'_>], now: i64) -> Index {
        let resolver = Resolver::new(views);
        let mut index = Index {
            at: now,
            resolution: resolver.key(),
            rollouts: rollout_keys(views)
                .into_iter()
                .map(|(p, key)| (p, RolloutIndex::empty(key)))
                .collect(),
            ..Index::default()
        };
        let names: BTreeSet<&str> = world
            .nodes
            .keys()
            .chain(world.configs.keys())
            .map(String::as_str)
            .collect();
        for node in names {
            index.read_node(world, &resolver, node, now);
        }
        index
    }

    /// Brings the index to the world at `now`, reading again what `changes` names.
    /// `views` are the world's policies (read once per decision).
    pub(super) fn refresh(
        &mut self,
        world: &World,
        views: &[PolicyView<'_>],
        changes: &Changes,
        now: i64,
    ) {
        let resolver = Resolver::new(views);
        // A clock that went back: phases reckoned later may not hold earlier.
        if now < self.at {
            *self = Index::build_with(world, views, now);
            return;
        }
        self.at = now;
        if changes.policies {
            if resolver.key() != self.resolution {
                *self = Index::build_with(world, views, now);
                return;
            }
            self.rekey_rollouts(world, views, now);
        }
        for node in &changes.nodes {
            self.read_node(world, &resolver, node, now);
        }
        for r in self.rollouts.values_mut().chain(self.releases.values_mut()) {
            r.tick(world, now);
        }
    }

    /// Builds again the rollouts whose target or settings changed.
    fn rekey_rollouts(&mut self, world: &World, views: &[PolicyView<'_>], now: i64) {
        let wanted = rollout_keys(views);
        self.rollouts.retain(|p, _| wanted.contains_key(p));
        for (policy, key) in wanted {
            if self.rollouts.get(&policy).map(RolloutIndex::key) == Some(&key) {
                continue;
            }
            let pool = self.pools.get(&policy).into_iter().flatten();
            let rebuilt = RolloutIndex::build(world, key, pool.map(String::as_str), now);
            self.rollouts.insert(policy, rebuilt);
        }
        for (policy, release) in &mut self.releases {
            let key = release_key(world, policy);
            if *release.key() != key {
                let nodes: Vec<String> = release.nodes().map(str::to_string).collect();
                *release = RolloutIndex::build(world, key, nodes.iter().map(String::as_str), now);
            }
        }
    }

    /// Takes `node` out of everything and puts it back as the world has it now.
    fn read_node(&mut self, world: &World, resolver: &Resolver<'_>, node: &str, now: i64) {
        let facts = resolver.facts(world, node);
        if self.facts.get(node) == Some(&facts) {
            // Still in the same places: only its rollout reads it again.
            self.read_member(world, node, &facts, now);
            return;
        }
        if let Some(old) = self.facts.remove(node) {
            self.take_out(node, &old);
        }
        if facts.exists || facts.config_policy.is_some() {
            self.put_in(world, node, &facts, now);
            self.facts.insert(node.to_string(), facts);
        }
    }

    /// Reads `node` again in the rollout it belongs to (its governor's, or the release
    /// from the policy its config names).
    fn read_member(&mut self, world: &World, node: &str, f: &NodeFacts, now: i64) {
        let rollout = match (&f.governor, &f.config_policy) {
            (Some(g), _) => self.rollouts.get_mut(g),
            (None, Some(c)) if f.exists => self.releases.get_mut(c),
            _ => None,
        };
        if let Some(r) = rollout {
            r.update(world, node, now);
        }
    }

    fn take_out(&mut self, node: &str, f: &NodeFacts) {
        if let Some(g) = &f.governor {
            remove_from(&mut self.pools, g, node);
            if let Some(r) = self.rollouts.get_mut(g) {
                r.remove(node);
            }
        }
        for p in &f.ties {
            remove_from(&mut self.ties, p, node);
        }
        if let Some(p) = &f.would_take {
            remove_from(&mut self.would_take, p, node);
        }
        if f.exists && f.governor.is_none() {
            self.unselected.remove(node);
        }
        if let Some((p, _)) = &f.excluded {
            if let Some(nodes) = self.excluded.get_mut(p) {
                nodes.remove(node);
                if nodes.is_empty() {
                    self.excluded.remove(p);
                }
            }
        }
        if let Some(c) = &f.config_policy {
            if let Some(n) = self.in_use.get_mut(c) {
                *n -= 1;
                if *n == 0 {
                    self.in_use.remove(c);
                }
            }
            if !f.exists {
                self.orphans.remove(node);
            }
            match &f.governor {
                Some(g) if g != c => {
                    if let Some(m) = self.moving.get_mut(c) {
                        remove_from(m, g, node);
                        if m.is_empty() {
                            self.moving.remove(c);
                        }
                    }
                }
                Some(_) => {}
                None if f.exists => {
                    if let Some(r) = self.releases.get_mut(c) {
                        r.remove(node);
                        if r.len() == 0 {
                            self.releases.remove(c);
                        }
                    }
                }
                None => {}
            }
        }
    }

    fn put_in(&mut self, world: &World, node: &str, f: &NodeFacts, now: i64) {
        if let Some(g) = &f.governor {
            insert_into(&mut self.pools, g, node);
            if let Some(r) = self.rollouts.get_mut(g) {
                r.update(world, node, now);
            }
        }
        for p in &f.ties {
            insert_into(&mut self.ties, p, node);
        }
        if let Some(p) = &f.would_take {
            insert_into(&mut self.would_take, p, node);
        }
        if f.exists && f.governor.is_none() {
            self.unselected.insert(node.to_string());
        }
        if let Some((p, why)) = &f.excluded {
            self.excluded
                .entry(p.clone())
                .or_default()
                .insert(node.to_string(), why.clone());
        }
        if let Some(c) = &f.config_policy {
            *self.in_use.entry(c.clone()).or_default() += 1;
            if !f.exists {
                self.orphans.insert(node.to_string());
            }
            match &f.governor {
                Some(g) if g != c => {
                    insert_into(self.moving.entry(c.clone()).or_default(), g, node);
                }
                Some(_) => {}
                None if f.exists => self
                    .releases
                    .entry(c.clone())
                    .or_insert_with(|| RolloutIndex::empty(release_key(world, c)))
                    .update(world, node, now),
                None => {}
            }
        }
    }

    /// The nodes `policy` would govern where the agent cannot run, with why.
    pub(crate) fn excluded(&self, policy: &str) -> Option<&BTreeMap<String, String>> {
        self.excluded.get(policy)
    }

    /// The nodes `policy` governs, by name.
    pub(crate) fn pool(&self, policy: &str) -> Option<&BTreeSet<String>> {
        self.pools.get(policy)
    }

    /// The nodes of `policy`'s pool other policies of its priority also select.
    pub(crate) fn ties(&self, policy: &str) -> Option<&BTreeSet<String>> {
        self.ties.get(policy)
    }

    pub(crate) fn would_take(&self, policy: &str) -> Option<&BTreeSet<String>> {
        self.would_take.get(policy)
    }

    pub(crate) fn unselected(&self) -> &BTreeSet<String> {
        &self.unselected
    }

    /// The nodes on `policy`'s config that another policy governs, by that policy.
    pub(crate) fn moving_from(&self, policy: &str) -> Option<&Moving> {
        self.moving.get(policy)
    }

    pub(crate) fn orphans(&self) -> &BTreeSet<String> {
        &self.orphans
    }

    pub(crate) fn in_use(&self, policy: &str) -> bool {
        self.in_use.contains_key(policy)
    }

    pub(crate) fn rollout(&self, policy: &str) -> Option<&RolloutIndex> {
        self.rollouts.get(policy)
    }

    pub(crate) fn releases(&self) -> &BTreeMap<String, RolloutIndex> {
        &self.releases
    }
}

fn insert_into(sets: &mut BTreeMap<String, BTreeSet<String>>, key: &str, node: &str) {
    sets.entry(key.to_string())
        .or_default()
        .insert(node.to_string());
}

fn remove_from(sets: &mut BTreeMap<String, BTreeSet<String>>, key: &str, node: &str) {
    if let Some(set) = sets.get_mut(key) {
        set.remove(node);
        if set.is_empty() {
            sets.remove(key);
        }
    }
}
