//! One rollout's nodes, kept by phase as their agents report (issue 32: a node's
//! report costs the same whatever the pool's size). A rollout is a policy's pool moving
//! to its target revision, or the nodes no policy governs any more being released from
//! the policy they ran. For each node the index keeps its phase, the next time that
//! phase can change by time alone, and what the node adds to the pool's figures
//! (signals, the recommendation's tally, health settings to follow); the sets and sums
//! are updated by taking a node's old share out and putting its new one in.
//!
//! [`RolloutIndex::build`] from a list of nodes is the model; the controller keeps one
//! index per rollout current with [`RolloutIndex::update`] and [`RolloutIndex::tick`],
//! and `index::tests` holds the two to the same result.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use nodemem_api::policy::HealthSpec;
use nodemem_api::report::{report, ConfigEntry};
use nodemem_model::cluster::rollout::{phase, AgentReport, NodePhase, NodeProgress, PhaseSets};
use nodemem_model::feedback::recommend::Tally;

use crate::decide::recommendation::{observed_class_tallies, observed_tally};
use crate::world::World;

/// What a rollout's phases and figures depend on besides its nodes: when it changes,
/// the index is built again.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RolloutKey {
    /// Only configs of this policy count (a node may still run another's).
    pub(crate) policy: String,
    pub(crate) target: String,
    pub(crate) min_ready_seconds: u64,
    pub(crate) progress_deadline_seconds: u64,
    /// A drain for the target counts as the node's update under way (a policy's pool;
    /// a release drains nothing).
    pub(crate) drains: bool,
    /// The spec's revision, whose observations the recommendation sums (None: none).
    pub(crate) spec_revision: Option<String>,
    /// The revision before the target, which a rollback returns to and a node new to
    /// nodemem may get at once (`writes::write_running_revision`; None: none, or the
    /// target is it, or a release).
    pub(crate) previous: Option<String>,
    /// The health settings the nodes on the target follow (None: a release keeps each
    /// node's own).
    pub(crate) health: Option<HealthSpec>,
}

/// One node's place in the rollout and its share of the pool's figures.
#[derive(Clone, Debug)]
struct Member {
    phase: NodePhase,
    carries: Carries,
    /// No later than the first time its phase can change by time alone.
    next_check: Option<i64>,
    drain_marked: bool,
    stale_health: bool,
    signals: Signals,
    /// Its pods per workload class (`status.classes`), by name.
    classes: Vec<(String, i64)>,
    /// Boxed: most nodes have none, and the index holds a member per node.
    observed: Option<Box<(Tally, u64)>>,
    /// Its workload classes' tallies on the spec's revision (those whose memory.high
    /// is not the pool's), by name.
    class_observed: Vec<(String, Tally)>,
}

/// Two members are the same when everything but the time of their next check is
/// (that is only ever early, never late: see [`next_check`]).
impl PartialEq for Member {
    fn eq(&self, other: &Self) -> bool {
        self.phase == other.phase
            && self.carries == other.carries
            && self.drain_marked == other.drain_marked
            && self.stale_health == other.stale_health
            && self.signals == other.signals
            && self.classes == other.classes
            && self.observed == other.observed
            && self.class_observed == other.class_observed
    }
}

/// What a member's config carries, against the rollout's revisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carries {
    /// No config at all: a node new to nodemem (it joined the cluster or the pool).
    NoConfig,
    /// Another policy's config: a node handed over between policies.
    OtherPolicy,
    /// The target revision.
    Target,
    /// The revision before the target ([`RolloutKey::previous`]).
    Previous,
    /// An older revision of the policy.
    Older,
}

impl Carries {
    const COUNT: usize = 5;

    fn of(world: &World, key: &RolloutKey, node: &str) -> Carries {
        let Some(config) = world.configs.get(node) else {
            return Carries::NoConfig;
        };
        let revision = &config.spec.revision;
        if config.spec.policy != key.policy {
            Carries::OtherPolicy
        } else if *revision == key.target {
            Carries::Target
        } else if key.previous.as_ref() == Some(revision) {
            Carries::Previous
        } else {
            Carries::Older
        }
    }
}

/// A node's signals since its revision, as the pool sums them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Signals {
    pub(crate) memory_min_bytes: i64,
    pub(crate) memory_low_bytes: i64,
    pub(crate) throttle_events: i64,
    pub(crate) oom_kills: i64,
    pub(crate) reclaim: ReclaimSums,
}

/// A node's proactive reclaim figures (`status.reclaim`), as the pool sums them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReclaimSums {
    /// Nodes that report reclaim (on or observing), and of them the ones whose kernel
    /// has no memory.reclaim.
    pub(crate) nodes: i64,
    pub(crate) unsupported_nodes: i64,
    pub(crate) reclaimed_bytes: i64,
    pub(crate) headroom_gained_bytes: i64,
    pub(crate) would_reclaim_bytes: i64,
    pub(crate) reclaimable_bytes: i64,
}

impl ReclaimSums {
    fn add(&mut self, o: &ReclaimSums, sign: i64) {
        self.nodes += sign * o.nodes;
        self.unsupported_nodes += sign * o.unsupported_nodes;
        self.reclaimed_bytes += sign * o.reclaimed_bytes;
        self.headroom_gained_bytes += sign * o.headroom_gained_bytes;
        self.would_reclaim_bytes += sign * o.would_reclaim_bytes;
        self.reclaimable_bytes += sign * o.reclaimable_bytes;
    }
}

impl Signals {
    fn of(c: Option<&ConfigEntry>) -> Signals {
        let mut s = Signals::default();
        let Some(c) = c else { return s };
        if let Some(t) = &c.status.totals {
            s.memory_min_bytes = t.memory_min_bytes;
            s.memory_low_bytes = t.memory_low_bytes;
        }
        if let Some(r) = &c.status.since_revision {
            s.throttle_events = r.throttle_events;
            s.oom_kills = r.oom_kills;
        }
        if let Some(r) = &c.status.reclaim {
            s.reclaim = ReclaimSums {
                nodes: 1,
                unsupported_nodes: i64::from(!r.supported),
                reclaimed_bytes: r.reclaimed_bytes,
                headroom_gained_bytes: r.headroom_gained_bytes,
                would_reclaim_bytes: r.would_reclaim_bytes,
                reclaimable_bytes: r.reclaimable_bytes,
            };
        }
        s
    }

    fn add(&mut self, o: &Signals, sign: i64) {
        self.memory_min_bytes += sign * o.memory_min_bytes;
        self.memory_low_bytes += sign * o.memory_low_bytes;
        self.throttle_events += sign * o.throttle_events;
        self.oom_kills += sign * o.oom_kills;
        self.reclaim.add(&o.reclaim, sign);
    }

    /// Its place among the worst nodes: most OOM kills, then throttle events.
    fn worst_key(&self, node: &str) -> Option<(Reverse<i64>, Reverse<i64>, String)> {
        (self.oom_kills > 0 || self.throttle_events > 0).then(|| {
            (
                Reverse(self.oom_kills),
                Reverse(self.throttle_events),
                node.to_string(),
            )
        })
    }
}

#[derive(Clone, Debug)]
pub(crate) struct RolloutIndex {
    key: RolloutKey,
    members: BTreeMap<String, Member>,
    phases: [BTreeSet<String>; 4],
    /// (next check, node): the nodes whose phase may change by then.
    checks: BTreeSet<(i64, String)>,
    drain_marked: BTreeSet<String>,
    stale_health: BTreeSet<String>,
    /// Members per [`Carries`] (in its order).
    carrying: [usize; Carries::COUNT],
    /// Members with no config at all, kept only while the key has a previous revision
    /// (a first rollout, where every node has none, keeps no such set).
    unconfigured: BTreeSet<String>,
    signals: Signals,
    /// The members' pods per workload class, summed (a class no member runs is gone).
    class_pods: BTreeMap<String, i64>,
    worst: BTreeSet<(Reverse<i64>, Reverse<i64>, String)>,
    observed_nodes: usize,
    /// Observed seconds -> how many nodes report that many.
    observed_seconds: BTreeMap<u64, usize>,
    /// The pool's tallies as last computed: weighing each node against the others
    /// reads every node (a median), so they are computed once and kept until a
    /// member's tally changes, not at every decision.
    tallies: TallyCache,
}

/// The pool's tally and its classes', each computed on first use after a member's
/// tally (or class tallies) changed.
#[derive(Clone, Debug, Default)]
struct TallyCache {
    pool: std::sync::OnceLock<Tally>,
    classes: std::sync::OnceLock<BTreeMap<String, (Tally, usize)>>,
}

/// The same nodes in the same places with the same figures; the times of the next
/// checks may differ (see [`Member`]).
impl PartialEq for RolloutIndex {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
            && self.members == other.members
            && self.phases == other.phases
            && self.drain_marked == other.drain_marked
            && self.stale_health == other.stale_health
            && self.carrying == other.carrying
            && self.unconfigured == other.unconfigured
            && self.signals == other.signals
            && self.class_pods == other.class_pods
            && self.worst == other.worst
            && self.observed_nodes == other.observed_nodes
            && self.observed_seconds == other.observed_seconds
    }
}

impl RolloutIndex {
    pub(crate) fn empty(key: RolloutKey) -> RolloutIndex {
        RolloutIndex {
            key,
            members: BTreeMap::new(),
            phases: Default::default(),
            checks: BTreeSet::new(),
            drain_marked: BTreeSet::new(),
            stale_health: BTreeSet::new(),
            carrying: [0; Carries::COUNT],
            unconfigured: BTreeSet::new(),
            signals: Signals::default(),
            class_pods: BTreeMap::new(),
            worst: BTreeSet::new(),
            observed_nodes: 0,
            observed_seconds: BTreeMap::new(),
            tallies: TallyCache::default(),
        }
    }

    /// The rollout of `nodes` from scratch.
    pub(crate) fn build<'n>(
        world: &World,
        key: RolloutKey,
        nodes: impl IntoIterator<Item = &'n str>,
        now: i64,
    ) -> RolloutIndex {
        let mut index = RolloutIndex::empty(key);
        for node in nodes {
            index.update(world, node, now);
        }
        index
    }

    pub(crate) fn key(&self) -> &RolloutKey {
        &self.key
    }

    /// Puts `node` in (again) as the world has it at `now`.
    pub(crate) fn update(&mut self, world: &World, node: &str, now: i64) {
        let new = member_of(world, &self.key, node, now);
        let old = match self.members.get_mut(node) {
            Some(held) => Some(std::mem::replace(held, new.clone())),
            None => self.members.insert(node.to_string(), new.clone()),
        };
        self.shift(node, old.as_ref(), Some(&new));
    }

    /// Takes `node` and its share out.
    pub(crate) fn remove(&mut self, node: &str) {
        if let Some(old) = self.members.remove(node) {
            self.shift(node, Some(&old), None);
        }
    }

    /// Checks again the nodes whose phase may have changed by `now`.
    pub(crate) fn tick(&mut self, world: &World, now: i64) {
        while let Some((at, node)) = self.checks.first().cloned() {
            if at > now {
                break;
            }
            self.update(world, &node, now);
        }
    }

    /// Moves `node`'s share from `old` to `new` (None: not a member), touching only the
    /// sets and sums where they differ: a report that changes one figure costs one
    /// change.
    fn shift(&mut self, node: &str, old: Option<&Member>, new: Option<&Member>) {
        let phase = |m: Option<&Member>| m.map(|m| m.phase.index());
        if phase(old) != phase(new) {
            move_between(&mut self.phases, node, phase(old), phase(new));
        }
        let check = |m: Option<&Member>| m.and_then(|m| m.next_check);
        if check(old) != check(new) {
            if let Some(at) = check(old) {
                self.checks.remove(&(at, node.to_string()));
            }
            if let Some(at) = check(new) {
                self.checks.insert((at, node.to_string()));
            }
        }
        let flag = |m: Option<&Member>, f: fn(&Member) -> bool| m.is_some_and(f);
        set_flag(
            &mut self.drain_marked,
            node,
            flag(old, |m| m.drain_marked),
            flag(new, |m| m.drain_marked),
        );
        set_flag(
            &mut self.stale_health,
            node,
            flag(old, |m| m.stale_health),
            flag(new, |m| m.stale_health),
        );
        let carries = |m: Option<&Member>| m.map(|m| m.carries);
        if carries(old) != carries(new) {
            if let Some(c) = carries(old) {
                self.carrying[c as usize] -= 1;
            }
            if let Some(c) = carries(new) {
                self.carrying[c as usize] += 1;
            }
            let unconfigured =
                |m| self.key.previous.is_some() && carries(m) == Some(Carries::NoConfig);
            let (was, is) = (unconfigured(old), unconfigured(new));
            set_flag(&mut self.unconfigured, node, was, is);
        }
        let signals = |m: Option<&Member>| m.map(|m| m.signals).unwrap_or_default();
        let (was, is) = (signals(old), signals(new));
        if was != is {
            self.signals.add(&was, -1);
            self.signals.add(&is, 1);
            if let Some(k) = was.worst_key(node) {
                self.worst.remove(&k);
            }
            if let Some(k) = is.worst_key(node) {
                self.worst.insert(k);
            }
        }
        let classes = |m: Option<&Member>| m.map(|m| m.classes.clone()).unwrap_or_default();
        let (was, is) = (classes(old), classes(new));
        if was != is {
            for (sign, list) in [(-1, was), (1, is)] {
                for (name, pods) in list {
                    let sum = self.class_pods.entry(name).or_default();
                    *sum += sign * pods;
                }
            }
            self.class_pods.retain(|_, pods| *pods != 0);
        }
        let tally = |m: Option<&Member>| m.and_then(|m| m.observed.as_deref().map(|(t, _)| *t));
        if tally(old) != tally(new) {
            self.tallies.pool = Default::default();
        }
        let class_tallies = |m: Option<&Member>| m.map(|m| m.class_observed.clone());
        if class_tallies(old) != class_tallies(new) {
            self.tallies.classes = Default::default();
        }
        let observed = |m: Option<&Member>| m.and_then(|m| m.observed.as_deref().copied());
        if observed(old) != observed(new) {
            if let Some((_, seconds)) = observed(old) {
                self.observed_nodes -= 1;
                if let Some(n) = self.observed_seconds.get_mut(&seconds) {
                    *n -= 1;
                    if *n == 0 {
                        self.observed_seconds.remove(&seconds);
                    }
                }
            }
            if let Some((_, seconds)) = observed(new) {
                self.observed_nodes += 1;
                *self.observed_seconds.entry(seconds).or_default() += 1;
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    pub(crate) fn nodes(&self) -> impl Iterator<Item = &str> {
        self.members.keys().map(String::as_str)
    }

    pub(crate) fn phase_of(&self, node: &str) -> Option<NodePhase> {
        self.members.get(node).map(|m| m.phase)
    }

    /// The nodes in `phase`, by name.
    pub(crate) fn phase_set(&self, phase: NodePhase) -> &BTreeSet<String> {
        &self.phases[phase.index()]
    }

    /// Members with a drain mark (for any revision).
    pub(crate) fn drain_marked(&self) -> &BTreeSet<String> {
        &self.drain_marked
    }

    /// How many members' configs carry `what`.
    pub(crate) fn carrying(&self, what: Carries) -> usize {
        self.carrying[what as usize]
    }

    /// Members with no config at all, by name (none kept while the key has no previous
    /// revision).
    pub(crate) fn unconfigured(&self) -> &BTreeSet<String> {
        &self.unconfigured
    }

    /// Members on the target whose config's health settings differ from the policy's.
    pub(crate) fn stale_health(&self) -> &BTreeSet<String> {
        &self.stale_health
    }

    /// The pool's pods per workload class, by name, as its nodes last reported.
    pub(crate) fn class_pods(&self) -> &BTreeMap<String, i64> {
        &self.class_pods
    }

    /// The pool's signals: the sums, and the five worst nodes.
    pub(crate) fn signals(&self) -> (Signals, Vec<String>) {
        let worst = self.worst.iter().take(5).map(|k| k.2.clone()).collect();
        (self.signals, worst)
    }

    /// The observations on the spec's revision: their tally with each node's weight
    /// weighed against the others (`recommendation::pool_tally`), how many nodes, and how long at least
    /// `quorum` of them have observed (0 while fewer observe): one node cannot meet
    /// the observation minimum for its pool.
    pub(crate) fn observed(&self, quorum: usize) -> (Tally, usize, u64) {
        let tally = *self.tallies.pool.get_or_init(|| {
            let tallies: Vec<&Tally> = self
                .members
                .values()
                .filter_map(|m| m.observed.as_deref().map(|(t, _)| t))
                .collect();
            crate::decide::recommendation::pool_tally(&tallies)
        });
        let mut counted = 0;
        let mut seconds = 0;
        for (s, n) in self.observed_seconds.iter().rev() {
            counted += n;
            if counted >= quorum.max(1) {
                seconds = *s;
                break;
            }
        }
        (tally, self.observed_nodes, seconds)
    }

    /// Each workload class's tally over the nodes that report it, weighed as the
    /// pool's is, and how many nodes report it.
    pub(crate) fn observed_classes(&self) -> &BTreeMap<String, (Tally, usize)> {
        self.tallies.classes.get_or_init(|| {
            let mut by_class: BTreeMap<&str, Vec<&Tally>> = BTreeMap::new();
            for m in self.members.values() {
                for (name, t) in &m.class_observed {
                    by_class.entry(name).or_default().push(t);
                }
            }
            by_class
                .into_iter()
                .map(|(name, tallies)| {
                    let tally = crate::decide::recommendation::pool_tally(&tallies);
                    (name.to_string(), (tally, tallies.len()))
                })
                .collect()
        })
    }
}

impl PhaseSets for RolloutIndex {
    fn count(&self, phase: NodePhase) -> u32 {
        self.phases[phase.index()].len() as u32
    }
    fn in_phase(&self, phase: NodePhase) -> Box<dyn Iterator<Item = &str> + '_> {
        Box::new(self.phases[phase.index()].iter().map(String::as_str))
    }
}

fn move_between(sets: &mut [BTreeSet<String>], node: &str, from: Option<usize>, to: Option<usize>) {
    if let Some(i) = from {
        sets[i].remove(node);
    }
    if let Some(i) = to {
        sets[i].insert(node.to_string());
    }
}

fn set_flag(set: &mut BTreeSet<String>, node: &str, was: bool, is: bool) {
    match (was, is) {
        (true, false) => {
            set.remove(node);
        }
        (false, true) => {
            set.insert(node.to_string());
        }
        _ => {}
    }
}

/// Where `node` stands in the rollout `key` describes, as the world has it at `now`.
fn member_of(world: &World, key: &RolloutKey, node: &str, now: i64) -> Member {
    let config = world
        .configs
        .get(node)
        .filter(|c| c.spec.policy == key.policy);
    let progress = NodeProgress {
        node,
        spec_revision: config.map(|c| c.spec.revision.as_str()),
        report: config.map_or(AgentReport::Pending, |c| report(c, now)),
        since_spec_change: config
            .and_then(|c| c.spec_changed_at)
            .map_or(0, |t| (now - trusted(t, world, now)) as u64),
        draining_for: world
            .drains
            .get(node)
            .filter(|d| key.drains && d.revision == key.target)
            .map(|d| (now - trusted(d.started_at, world, now)) as u64),
    };
    let params = phase_params(key);
    let on_target = config.filter(|c| c.spec.revision == key.target);
    Member {
        phase: phase(&progress, &key.target, &params),
        carries: Carries::of(world, key, node),
        next_check: next_check(&progress, key, now),
        drain_marked: key.drains && world.drains.contains_key(node),
        stale_health: key
            .health
            .as_ref()
            .is_some_and(|h| on_target.is_some_and(|c| c.spec.health != *h)),
        signals: Signals::of(config),
        classes: config.map_or_else(Vec::new, |c| {
            c.status
                .classes
                .iter()
                .map(|k| (k.name.clone(), k.pods))
                .collect()
        }),
        observed: key
            .spec_revision
            .as_deref()
            .and_then(|r| config.and_then(|c| observed_tally(c, r)))
            .map(Box::new),
        class_observed: key
            .spec_revision
            .as_deref()
            .and_then(|r| config.map(|c| observed_class_tallies(c, r)))
            .unwrap_or_default(),
    }
}

/// A time another replica may have written (a config's spec change), as this
/// replica's deadlines may count from it: never before this replica began deciding (the
/// writer's clock may be behind: a deadline would pass at once), never after now (it
/// may be ahead). A skewed clock makes a deadline later, never earlier; a failover
/// starts the deadlines of nodes still updating again.
fn trusted(t: i64, world: &World, now: i64) -> i64 {
    t.max(world.leading_since.unwrap_or(i64::MIN)).min(now)
}

/// The parameters [`phase`] reads; the others do not classify a node.
fn phase_params(key: &RolloutKey) -> nodemem_model::cluster::rollout::RolloutParams {
    nodemem_model::cluster::rollout::RolloutParams {
        max_unavailable: 1,
        canary: 0,
        min_ready_seconds: key.min_ready_seconds,
        progress_deadline_seconds: key.progress_deadline_seconds,
        max_failures: 1,
        on_failure: nodemem_model::cluster::rollout::OnFailure::Pause,
        paused: false,
    }
}

/// No later than the first time after `now` at which [`phase`] can give another answer
/// for this node with nothing but the time changed: when a report turns ready
/// (minReadySeconds), when an update or a drain runs out of time (the deadline). Each
/// is reckoned from the seconds the progress counts, so a time it cannot know (a spec
/// change never recorded) comes early, never late: an early check finds the same
/// phase and sets the next one.
fn next_check(p: &NodeProgress<'_>, key: &RolloutKey, now: i64) -> Option<i64> {
    let after = |seconds: u64, limit: u64| now - seconds as i64 + limit as i64;
    let mut times = Vec::new();
    if p.spec_revision == Some(key.target.as_str()) {
        match p.report {
            AgentReport::Bad => {}
            // Ready stays ready: only time passes.
            AgentReport::Good { for_seconds } if for_seconds >= key.min_ready_seconds => {}
            // Good and waiting out minReadySeconds: the deadline no longer applies.
            AgentReport::Good { for_seconds } => {
                times.push(after(for_seconds, key.min_ready_seconds));
            }
            AgentReport::Pending => {
                times.push(after(p.since_spec_change, key.progress_deadline_seconds) + 1)
            }
        }
    } else if let Some(drained) = p.draining_for {
        times.push(after(drained, key.progress_deadline_seconds) + 1);
    }
    times.into_iter().filter(|t| *t > now).min()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tests::{agent_reports, apply, policy, world, T0};

    fn key(policy: &str, target: &str) -> RolloutKey {
        RolloutKey {
            policy: policy.to_string(),
            target: target.to_string(),
            min_ready_seconds: 30,
            progress_deadline_seconds: 600,
            drains: true,
            spec_revision: Some(target.to_string()),
            previous: None,
            health: Some(HealthSpec::default()),
        }
    }

    fn signals(w: &mut World, node: &str, throttle: i64, oom: i64) {
        w.touch_node(node);
        let r = w
            .configs
            .get_mut(node)
            .unwrap()
            .status
            .since_revision
            .as_mut();
        let r = r.unwrap();
        r.throttle_events = throttle;
        r.oom_kills = oom;
    }

    fn observe(w: &mut World, node: &str, containers: i32, seconds: i64) {
        let c = w.configs.get_mut(node).unwrap();
        c.status.observation = Some(
            serde_json::from_value(json!({
                "revision": c.spec.revision, "enforced": true,
                "since": "2026-11-22T10:00:00Z", "observedSeconds": seconds,
                "containers": containers, "throttledContainers": 1,
                "fittingByFactor": vec![containers; 12],
            }))
            .unwrap(),
        );
    }

    /// A replica whose clock is an hour ahead of the one that changed the specs takes
    /// over: the nodes still updating get their whole progressDeadlineSeconds from
    /// when it began deciding, not none.
    #[test]
    fn deadlines_written_by_another_replica_count_from_this_ones_start_at_the_earliest() {
        let nodes = [("n1", "a"), ("n2", "a")];
        let mut w = world(
            &[policy("p", "a", 0, 0.8, json!({"maxUnavailable": 2}))],
            &nodes,
        );
        let d = crate::decide::decide(&w, T0);
        apply(&mut w, &d, T0);
        let target = w.configs["n1"].spec.revision.clone();
        let names = nodes.map(|(n, _)| n);
        let ahead = T0 + 3600;
        // Without a start known, the written time counts (one replica all along).
        let index = RolloutIndex::build(&w, key("p", &target), names, ahead);
        assert_eq!(index.phase_set(NodePhase::Failed).len(), 2);
        w.leading_since = Some(ahead);
        let index = RolloutIndex::build(&w, key("p", &target), names, ahead + 600);
        assert_eq!(index.phase_set(NodePhase::Updating).len(), 2);
        let index = RolloutIndex::build(&w, key("p", &target), names, ahead + 601);
        assert_eq!(index.phase_set(NodePhase::Failed).len(), 2);
        // A spec change written ahead of this clock counts from now, not from then.
        w.leading_since = Some(T0 - 7200);
        let index = RolloutIndex::build(&w, key("p", &target), names, T0 - 3600);
        assert_eq!(index.phase_set(NodePhase::Updating).len(), 2);
    }

    /// The sums, the worst nodes and the observations, hand-counted; then one node's
    /// figures change and another leaves, and only their share moves.
    #[test]
    fn the_pools_figures_are_the_sum_of_its_nodes_shares() {
        let nodes = [("n1", "a"), ("n2", "a"), ("n3", "a"), ("n4", "a")];
        let rollout = json!({"maxUnavailable": "100%"});
        let mut w = world(&[policy("p", "a", 0, 0.8, rollout)], &nodes);
        let d = crate::decide::decide(&w, T0);
        apply(&mut w, &d, T0);
        let target = w.configs["n1"].spec.revision.clone();
        for (n, _) in nodes {
            agent_reports(&mut w, n, true, T0);
        }
        signals(&mut w, "n1", 5, 0);
        signals(&mut w, "n2", 9, 1);
        signals(&mut w, "n3", 2, 1);
        signals(&mut w, "n4", 0, 0);
        observe(&mut w, "n1", 4, 100);
        observe(&mut w, "n3", 6, 300);
        let names = nodes.map(|(n, _)| n);
        let mut index = RolloutIndex::build(&w, key("p", &target), names, T0 + 10);

        let (sums, worst) = index.signals();
        assert_eq!((sums.throttle_events, sums.oom_kills), (16, 2));
        assert_eq!(sums.memory_min_bytes, 4 << 20, "four nodes' totals");
        assert_eq!(worst, ["n2", "n3", "n1"], "OOM kills first, then throttles");
        let (tally, observed, longest) = index.observed(1);
        assert_eq!(
            (tally.containers, tally.fitting[0], tally.throttled),
            (10, 10, 2)
        );
        assert_eq!((observed, longest), (2, 300));
        assert_eq!(index.observed(2).2, 100, "two nodes have observed 100 s");
        assert_eq!(index.observed(3).2, 0, "three have not");
        assert_eq!(
            index.phase_set(NodePhase::Updating).len(),
            4,
            "not ready for 30 s"
        );
        assert_eq!(index.checks.len(), 4, "each checked when it turns ready");

        // n3 observes no longer and its OOM kill is gone; n2 leaves the pool.
        signals(&mut w, "n3", 2, 0);
        w.configs.get_mut("n3").unwrap().status.observation = None;
        index.update(&w, "n3", T0 + 40);
        index.remove("n2");
        let (sums, worst) = index.signals();
        assert_eq!((sums.throttle_events, sums.oom_kills), (7, 0));
        assert_eq!(worst, ["n1", "n3"]);
        let (tally, observed, longest) = index.observed(1);
        assert_eq!((tally.containers, observed, longest), (4, 1, 100));
        assert_eq!(
            index.phase_of("n3"),
            Some(NodePhase::Ready),
            "read at T0 + 40"
        );
        index.tick(&w, T0 + 40);
        assert_eq!(index.phase_set(NodePhase::Ready).len(), 3);
        assert!(index.checks.is_empty());
    }

    /// The pool's tally is weighed once and kept while reports change only other
    /// figures (a decision after such a report reads no other node); a node's tally
    /// changing, or a node leaving, weighs it again, and the kept and the new tally are
    /// what weighing the whole pool gives.
    #[test]
    fn the_pools_tally_is_weighed_again_only_when_a_tally_changes() {
        let nodes = [("n1", "a"), ("n2", "a"), ("n3", "a")];
        let mut w = world(
            &[policy("p", "a", 0, 0.8, json!({"maxUnavailable": "100%"}))],
            &nodes,
        );
        let d = crate::decide::decide(&w, T0);
        apply(&mut w, &d, T0);
        let target = w.configs["n1"].spec.revision.clone();
        for (n, _) in nodes {
            agent_reports(&mut w, n, true, T0);
            observe(&mut w, n, 4, 100);
        }
        let names = nodes.map(|(n, _)| n);
        let mut index = RolloutIndex::build(&w, key("p", &target), names, T0 + 10);
        let weighed = |i: &RolloutIndex| i.tallies.pool.get().is_some();
        assert!(!weighed(&index), "nothing weighed before it is asked for");
        let first = index.observed(1).0;
        assert!(weighed(&index));

        // Signals and observed seconds change: the tally is kept.
        signals(&mut w, "n1", 7, 1);
        observe(&mut w, "n2", 4, 500);
        index.update(&w, "n1", T0 + 20);
        index.update(&w, "n2", T0 + 20);
        assert!(weighed(&index), "no tally changed");
        assert_eq!(index.observed(1).0, first);
        assert_eq!(index.observed(3).2, 100, "the seconds are still read fresh");

        // A node's tally changes: weighed again, as a new index weighs it.
        observe(&mut w, "n3", 9, 100);
        index.update(&w, "n3", T0 + 30);
        assert!(!weighed(&index));
        let fresh = RolloutIndex::build(&w, key("p", &target), names, T0 + 30);
        assert_eq!(index.observed(1).0, fresh.observed(1).0);
        assert_ne!(index.observed(1).0, first);

        // A node leaves: weighed again without it.
        index.remove("n3");
        assert!(!weighed(&index));
        let without = RolloutIndex::build(&w, key("p", &target), ["n1", "n2"], T0 + 30);
        assert_eq!(index.observed(1).0, without.observed(1).0);
    }

    /// Reclaim's figures: summed over the nodes that report them, unsupported
    /// kernels counted; a node that stops reporting takes its share away.
    #[test]
    fn the_pools_reclaim_is_the_sum_of_its_nodes_reports() {
        let nodes = [("n1", "a"), ("n2", "a"), ("n3", "a")];
        let mut w = world(
            &[policy("p", "a", 0, 0.8, json!({"maxUnavailable": "100%"}))],
            &nodes,
        );
        let d = crate::decide::decide(&w, T0);
        apply(&mut w, &d, T0);
        let target = w.configs["n1"].spec.revision.clone();
        let report = |w: &mut World, node: &str, supported: bool, reclaimed: i64| {
            w.touch_node(node);
            w.configs.get_mut(node).unwrap().status.reclaim =
                Some(Box::new(nodemem_api::config::ReclaimSummary {
                    mode: "Active".into(),
                    supported,
                    reclaimed_bytes: reclaimed,
                    headroom_gained_bytes: reclaimed / 2,
                    reclaimable_bytes: 100,
                    ..Default::default()
                }));
        };
        report(&mut w, "n1", true, 1000);
        report(&mut w, "n2", false, 0);
        let names = nodes.map(|(n, _)| n);
        let mut index = RolloutIndex::build(&w, key("p", &target), names, T0 + 10);
        let r = index.signals().0.reclaim;
        assert_eq!((r.nodes, r.unsupported_nodes), (2, 1));
        assert_eq!(
            (
                r.reclaimed_bytes,
                r.headroom_gained_bytes,
                r.reclaimable_bytes
            ),
            (1000, 500, 200)
        );
        w.configs.get_mut("n1").unwrap().status.reclaim = None;
        index.update(&w, "n1", T0 + 20);
        let r = index.signals().0.reclaim;
        assert_eq!((r.nodes, r.unsupported_nodes, r.reclaimed_bytes), (1, 1, 0));
    }
}
