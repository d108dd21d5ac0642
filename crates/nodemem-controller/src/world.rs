//! What the controller knows: policies, nodes (their labels) and NodeMemoryConfigs,
//! kept current from watch events. Pure and synchronous (tested with plain #[test]s);
//! each update says whether it changed something the decisions read.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use nodemem_api::report::{parse_time, report, ConfigEntry};
use nodemem_api::resource_version::compare;
use nodemem_api::watch_index::WatchIndex;
use nodemem_api::{
    NodeMemoryConfig, NodeMemoryPolicy, NodeMemoryPolicySpec, NodeMemoryPolicyStatus,
};
use nodemem_model::cluster::rollout::AgentReport;

/// On a Node the controller cordoned to drain it before a Kubelet-mode Memory Manager
/// change: the revision it drains for, when the drain started, and the revision it
/// finished draining for.
pub const DRAIN_FOR: &str = "nodemem.io/drain-for";
pub const DRAIN_STARTED: &str = "nodemem.io/drain-started";
pub const DRAIN_DONE: &str = "nodemem.io/drain-done";

/// A drain the controller started on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainMark {
    pub revision: String,
    pub started_at: i64,
    pub done: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PolicyEntry {
    pub uid: Option<String>,
    pub generation: Option<i64>,
    pub spec: NodeMemoryPolicySpec,
    pub status: NodeMemoryPolicyStatus,
    /// The revision a user asked to roll back from ([`nodemem_api::ROLLBACK_ANNOTATION`]).
    pub rollback_request: Option<String>,
    /// When it was created (seconds): of policies tied on priority, the oldest claims
    /// the nodes that run none of them.
    pub created: Option<i64>,
    /// Deleted, held by [`nodemem_api::HANDOFF_FINALIZER`] while its nodes leave.
    pub deleting: bool,
    /// Carries [`nodemem_api::HANDOFF_FINALIZER`].
    pub held: bool,
}

/// The kinds of object the world holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Policy,
    Node,
    Config,
}

#[derive(Clone, Debug, Default)]
pub struct World {
    pub policies: BTreeMap<String, PolicyEntry>,
    /// Node name -> labels.
    pub nodes: BTreeMap<String, BTreeMap<String, String>>,
    /// Nodes the controller cordoned to drain.
    pub drains: BTreeMap<String, DrainMark>,
    /// Node name -> its config.
    pub configs: BTreeMap<String, ConfigEntry>,
    /// The newest resourceVersion seen of each object, kept after it is deleted. The
    /// world takes both the responses to the controller's own writes and what the
    /// watches deliver, and a watch may still deliver an older version of an object
    /// (found by 100 quick policy edits: a status write's response carried the newest
    /// spec, the policy watch then delivered each older edit, and the controller moved
    /// nodes back and forth between the newest and older revisions).
    versions: BTreeMap<(Kind, String), String>,
    /// What changed since the decisions last looked ([`World::take_changes`]).
    changes: Changes,
    /// Counts changes to what the agent DaemonSet's placement reads (policies, node
    /// labels, which nodes have a config), so that it is built again only after one.
    placement: u64,
    /// What keeps agents from starting, when this controller deploys them (None: the
    /// agents are deployed some other way, and nothing is known of their pods).
    pub agents: Option<crate::agents::blocked::AgentPods>,
    /// The fields the installed CRDs lack against this build's (`crate::crd_check`);
    /// None: not read (yet).
    pub crd_gaps: Option<BTreeMap<String, Vec<String>>>,
    /// When this replica began deciding, on its own clock (seconds since the epoch).
    /// Times other replicas wrote (a config's spec change) are not compared with this
    /// clock before it: their clocks may be behind or ahead of this one.
    pub leading_since: Option<i64>,
    /// The time learned reports are stamped with (`ConfigEntry::good_seen_at`); None:
    /// this process's clock now. Tests fix it.
    pub clock: Option<i64>,
    /// Nodes whose agent reports that memory pressure cannot be read on its current
    /// config (`nodemem_api::report::pressure_unavailable`): true where the node holds
    /// for it, false where it proceeds without it. Kept beside the configs so that a
    /// decision reads the few such nodes, not every config.
    pub pressure_unavailable: BTreeMap<String, bool>,
    /// Nodes whose agent reports that its kernel has no memory.reclaim while its
    /// config asks for reclaim (`status.reclaim.supported: false`), kept the same way.
    pub reclaim_unsupported: BTreeSet<String>,
    /// Configs deleted by someone else (a `kubectl delete`, a prune, a script), by node,
    /// with the spec they had: the controller writes them again at once at that
    /// revision (`decide::repair`), a repair rather than a rollout step. Forgotten when
    /// the node's config is there again or the node goes. The controller's own
    /// deletions ([`World::delete_own_config`]) are not remembered.
    pub vanished: BTreeMap<String, nodemem_api::NodeMemoryConfigSpec>,
    /// The enforcement modes the install deploys its agents for: a policy asking for
    /// another is refused (`crate::agents::modes`).
    pub installed_modes: crate::agents::modes::EnforcementModes,
    /// The agents' pod as this controller deploys it: a node its nodeSelector or
    /// required node affinity keeps it off is excluded from the policies' pools
    /// (`crate::agents::placement`). None (agents deployed some other way): every node
    /// counts. Set once at the start; it never changes while the controller runs.
    pub agent_pod: Option<crate::agents::pod::AgentPod>,
    /// Nodes whose config's [`nodemem_api::report::READY_SINCE`] stamp is not what
    /// this controller keeps as `good_seen_at` (a report it saw turn good, or saw good
    /// first without a stamp): to be stamped, so that a controller after it counts
    /// minReadySeconds from the same time ([`World::take_ready_stamps`]).
    ready_stamps_due: BTreeSet<String>,
}

/// What changed in the world since the decisions last looked: the nodes whose labels,
/// drain mark or config changed (or went), and whether any policy did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub nodes: BTreeSet<String>,
    pub policies: bool,
}

impl World {
    /// What changed since the last call: an incremental decision reads only those
    /// nodes again (`crate::decide::Decider`).
    pub fn take_changes(&mut self) -> Changes {
        std::mem::take(&mut self.changes)
    }

    /// Records a change made to the public fields directly (tests, benches) rather
    /// than through `apply_*` and `delete_*`, which record their own.
    pub fn touch_node(&mut self, name: &str) {
        self.changes.nodes.insert(name.to_string());
        if self.configs.contains_key(name) {
            self.vanished.remove(name);
        }
        self.note_signals(name);
    }

    /// Keeps [`World::pressure_unavailable`] in step with `name`'s config.
    fn note_signals(&mut self, name: &str) {
        match self
            .configs
            .get(name)
            .and_then(nodemem_api::report::pressure_unavailable)
        {
            Some(holds) => self.pressure_unavailable.insert(name.to_string(), holds),
            None => self.pressure_unavailable.remove(name),
        };
        let unsupported = self.configs.get(name).is_some_and(|c| {
            c.status
                .reclaim
                .as_ref()
                .is_some_and(|r| !r.supported && r.revision == c.spec.revision)
        });
        if unsupported {
            self.reclaim_unsupported.insert(name.to_string());
        } else {
            self.reclaim_unsupported.remove(name);
        }
    }

    /// The same for a policy changed directly.
    pub fn touch_policies(&mut self) {
        self.changes.policies = true;
    }

    fn noted_node(&mut self, name: &str, changed: bool) -> bool {
        if changed {
            self.touch_node(name);
        }
        changed
    }

    fn noted_policy(&mut self, changed: bool) -> bool {
        self.changes.policies |= changed;
        self.placement += u64::from(changed);
        changed
    }

    /// Changes with every change to the policies, a node's labels, or which nodes
    /// have a config (`crate::agents::daemonset` reads nothing else of the world).
    pub fn placement(&self) -> u64 {
        self.placement
    }

    /// Whether a version of an object is newer than every one seen (recording it when
    /// it is). A version that cannot be compared, or none, counts as newer: the last
    /// one wins, as in an informer's cache.
    fn newer(&mut self, kind: Kind, name: &str, version: Option<&str>) -> bool {
        let Some(version) = version else {
            return true;
        };
        let key = (kind, name.to_string());
        if let Some(held) = self.versions.get(&key) {
            if matches!(
                compare(version, held),
                Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)
            ) {
                return false;
            }
        }
        self.versions.insert(key, version.to_string());
        true
    }

    /// The newest resourceVersion seen of a policy: a precondition for the writes to
    /// its metadata, so that a policy that is gone is never created again by them.
    pub fn policy_version(&self, name: &str) -> Option<&str> {
        self.versions
            .get(&(Kind::Policy, name.to_string()))
            .map(String::as_str)
    }

    pub fn apply_policy(&mut self, p: &NodeMemoryPolicy) -> bool {
        let Some(name) = p.metadata.name.clone() else {
            return false;
        };
        if !self.newer(Kind::Policy, &name, p.metadata.resource_version.as_deref()) {
            return false;
        }
        let entry = PolicyEntry {
            uid: p.metadata.uid.clone(),
            generation: p.metadata.generation,
            spec: p.spec.clone(),
            status: p.status.clone().unwrap_or_default(),
            rollback_request: p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(nodemem_api::ROLLBACK_ANNOTATION))
                .cloned(),
            created: nodemem_api::convert::created_seconds(&p.metadata),
            deleting: p.metadata.deletion_timestamp.is_some(),
            held: p
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == nodemem_api::HANDOFF_FINALIZER),
        };
        let changed = self.policies.insert(name, entry.clone()) != Some(entry);
        self.noted_policy(changed)
    }

    /// Forgets a policy; `version` is the deleted object's (from a watch), None after
    /// the controller's own delete.
    pub fn delete_policy(&mut self, name: &str, version: Option<&str>) -> bool {
        let changed =
            self.newer(Kind::Policy, name, version) && self.policies.remove(name).is_some();
        self.noted_policy(changed)
    }

    /// Why nodemem's agent cannot run on `node` (its labels as the world has them);
    /// None: it can, or the node is unknown, or this controller does not deploy the
    /// agents. Taints are not read (the controller watches the Nodes' metadata only):
    /// the agent's default tolerations take every taint, and a narrower set is the
    /// team's to keep in step (docs/operations.md).
    pub fn agent_excluded(&self, node: &str) -> Option<String> {
        let agent = self.agent_pod.as_ref()?;
        let labels = self.nodes.get(node)?;
        crate::agents::placement::refused(
            agent,
            &crate::agents::placement::NodePlace {
                name: node,
                labels,
                taints: &[],
            },
        )
    }

    /// The stamps to write ([`nodemem_api::report::READY_SINCE`]), by node: the
    /// revision and the time this controller keeps for its report turning good. Only
    /// where the node's policy waits (minReadySeconds above 0): with none a good
    /// report is ready at once, and a fan-out of 20,000 nodes writes no stamp. Taken:
    /// a stamp whose write fails is due again when its config is next learned.
    pub fn take_ready_stamps(&mut self) -> Vec<(String, String)> {
        let due = std::mem::take(&mut self.ready_stamps_due);
        due.into_iter()
            .filter_map(|node| {
                let c = self.configs.get(&node)?;
                let waits = self
                    .policies
                    .get(&c.spec.policy)
                    .is_some_and(|p| p.spec.rollout.min_ready_seconds > 0);
                let at = c.good_seen_at.filter(|_| waits)?;
                let value = nodemem_api::report::ready_since_value(&c.spec.revision, at);
                Some((node, value))
            })
            .collect()
    }

    /// The revision to mark `node`'s config with before the controller deletes it
    /// ([`nodemem_api::GIVE_BACK_ANNOTATION`]), so that its agent gives back at once:
    /// the node exists and its config still carries values (not the released
    /// revision, whose values are given back already). None: no mark is needed.
    pub fn give_back_mark(&self, node: &str) -> Option<String> {
        let config = self.configs.get(node)?;
        let released = nodemem_api::revision::revision(&nodemem_api::NodeSettings::released());
        (self.nodes.contains_key(node) && config.spec.revision != released)
            .then(|| config.spec.revision.clone())
    }

    /// A node's labels are all the controller reads of it.
    pub fn apply_node(&mut self, n: &Node) -> bool {
        self.apply_node_meta(&n.metadata)
    }

    /// The same from a metadata-only watch.
    pub fn apply_node_meta(&mut self, meta: &ObjectMeta) -> bool {
        let Some(name) = meta.name.clone() else {
            return false;
        };
        if !self.newer(Kind::Node, &name, meta.resource_version.as_deref()) {
            return false;
        }
        let labels = meta.labels.clone().unwrap_or_default();
        let annotation = |k: &str| meta.annotations.as_ref().and_then(|a| a.get(k));
        let mark = annotation(DRAIN_FOR).map(|revision| DrainMark {
            revision: revision.clone(),
            started_at: annotation(DRAIN_STARTED)
                .and_then(|t| parse_time(t))
                .unwrap_or(0),
            done: annotation(DRAIN_DONE) == Some(revision),
        });
        let drain_changed = match mark {
            Some(m) => self.drains.insert(name.clone(), m.clone()) != Some(m),
            None => self.drains.remove(&name).is_some(),
        };
        let labels_changed = self.nodes.insert(name.clone(), labels.clone()) != Some(labels);
        self.placement += u64::from(labels_changed);
        self.noted_node(&name, labels_changed || drain_changed)
    }

    pub fn delete_node(&mut self, name: &str, version: Option<&str>) -> bool {
        if !self.newer(Kind::Node, name, version) {
            return false;
        }
        self.vanished.remove(name);
        let drained = self.drains.remove(name).is_some();
        let removed = self.nodes.remove(name).is_some();
        self.placement += u64::from(removed);
        let changed = removed || drained;
        self.noted_node(name, changed)
    }

    pub fn apply_config(&mut self, c: &NodeMemoryConfig) -> bool {
        let Some(name) = c.metadata.name.clone() else {
            return false;
        };
        if !self.newer(Kind::Config, &name, c.metadata.resource_version.as_deref()) {
            return false;
        }
        let mut entry = ConfigEntry::from(c);
        let now = self.clock.unwrap_or_else(seen_now);
        entry.good_seen_at = good_seen_at(self.configs.get(&name), &entry, now);
        let stamped = nodemem_api::report::ready_since(c);
        let keeps = entry
            .good_seen_at
            .map(|at| (entry.spec.revision.clone(), at));
        if keeps.is_some() && stamped != keeps {
            self.ready_stamps_due.insert(name.clone());
        } else {
            self.ready_stamps_due.remove(&name);
        }
        let held = self.configs.insert(name.clone(), entry.clone());
        self.placement += u64::from(held.is_none());
        let changed = held != Some(entry);
        self.vanished.remove(&name);
        self.note_signals(&name);
        self.noted_node(&name, changed)
    }

    /// A config the watches say is gone: remembered as vanished (see
    /// [`World::vanished`]).
    pub fn delete_config(&mut self, name: &str, version: Option<&str>) -> bool {
        let removed = if self.newer(Kind::Config, name, version) {
            self.configs.remove(name)
        } else {
            None
        };
        let changed = removed.is_some();
        self.ready_stamps_due.remove(name);
        if let Some(entry) = removed {
            self.vanished.insert(name.to_string(), entry.spec);
        }
        self.note_signals(name);
        self.placement += u64::from(changed);
        self.noted_node(name, changed)
    }

    /// A config the controller deleted itself (a release, a rollback to no config, a
    /// node that is gone): not a config to repair.
    pub fn delete_own_config(&mut self, name: &str) -> bool {
        let changed = self.delete_config(name, None);
        self.vanished.remove(name);
        changed
    }
}

/// This process's clock now as a report's stamp: the whole second at or after now.
/// Decisions count a report's age in whole seconds from a floored now; a stamp floored
/// too would count a report seen at 10.9 s ready for 2 s at 12.0 s, up to a second
/// short of minReadySeconds (the apiserver tier measured 1.4 s for 2 s). Rounded up,
/// `for_seconds` never exceeds the real time since the report was seen.
fn seen_now() -> i64 {
    ceil_second(k8s_openapi::jiff::Timestamp::now())
}

fn ceil_second(t: k8s_openapi::jiff::Timestamp) -> i64 {
    t.as_second() + i64::from(t.subsec_nanosecond() > 0)
}

/// When the agent's report on `entry`'s revision turned good, on a controller's clock:
/// kept while the report stays good on that revision, `now` when it turns good in
/// front of this controller. Good the first time this controller sees the config (a
/// start, a failover, a relist): the stamp a controller left on it
/// ([`nodemem_api::report::READY_SINCE`], in `entry.good_seen_at` as read), else
/// `now`, never the agent's own condition times (issue 58: an agent whose clock is
/// behind would pass minReadySeconds early). A ready node whose stamp is missing (the
/// stamp's write failed, a controller from before the stamps) waits minReadySeconds
/// once more.
fn good_seen_at(held: Option<&ConfigEntry>, entry: &ConfigEntry, now: i64) -> Option<i64> {
    let good = |c: &ConfigEntry| matches!(report(c, now), AgentReport::Good { .. });
    if !good(entry) {
        return None;
    }
    match held {
        Some(h) if h.spec.revision == entry.spec.revision && good(h) => h.good_seen_at,
        Some(_) => Some(now),
        None => entry.good_seen_at.or(Some(now)),
    }
}

/// The controller's three watches feed the world through one rule
/// ([`nodemem_api::watch_index`]); a relist forgets what was deleted meanwhile.
impl WatchIndex<NodeMemoryPolicy> for World {
    fn key(p: &NodeMemoryPolicy) -> Option<String> {
        p.metadata.name.clone()
    }
    fn upsert(&mut self, p: &NodeMemoryPolicy) -> bool {
        self.apply_policy(p)
    }
    fn delete(&mut self, p: &NodeMemoryPolicy) -> bool {
        let meta = &p.metadata;
        self.delete_policy(
            meta.name.as_deref().unwrap_or(""),
            meta.resource_version.as_deref(),
        )
    }
    fn relisted(&mut self, listed: &BTreeSet<String>) -> bool {
        let mut forgot = false;
        for name in unlisted(self.policies.keys(), listed) {
            forgot |= self.delete_policy(&name, None);
        }
        forgot
    }
}

impl WatchIndex<PartialObjectMeta<Node>> for World {
    fn key(n: &PartialObjectMeta<Node>) -> Option<String> {
        n.metadata.name.clone()
    }
    fn upsert(&mut self, n: &PartialObjectMeta<Node>) -> bool {
        self.apply_node_meta(&n.metadata)
    }
    fn delete(&mut self, n: &PartialObjectMeta<Node>) -> bool {
        let meta = &n.metadata;
        self.delete_node(
            meta.name.as_deref().unwrap_or(""),
            meta.resource_version.as_deref(),
        )
    }
    fn relisted(&mut self, listed: &BTreeSet<String>) -> bool {
        let mut forgot = false;
        for name in unlisted(self.nodes.keys(), listed) {
            forgot |= self.delete_node(&name, None);
        }
        forgot
    }
}

impl WatchIndex<NodeMemoryConfig> for World {
    fn key(c: &NodeMemoryConfig) -> Option<String> {
        c.metadata.name.clone()
    }
    fn upsert(&mut self, c: &NodeMemoryConfig) -> bool {
        self.apply_config(c)
    }
    fn delete(&mut self, c: &NodeMemoryConfig) -> bool {
        let meta = &c.metadata;
        self.delete_config(
            meta.name.as_deref().unwrap_or(""),
            meta.resource_version.as_deref(),
        )
    }
    fn relisted(&mut self, listed: &BTreeSet<String>) -> bool {
        let mut forgot = false;
        for name in unlisted(self.configs.keys(), listed) {
            forgot |= self.delete_config(&name, None);
        }
        forgot
    }
}

fn unlisted<'a>(held: impl Iterator<Item = &'a String>, listed: &BTreeSet<String>) -> Vec<String> {
    held.filter(|k| !listed.contains(*k)).cloned().collect()
}

/// The agent DaemonSet's pods (watched in its namespace when the controller deploys
/// the agents), keyed by name.
impl WatchIndex<k8s_openapi::api::core::v1::Pod> for World {
    fn key(p: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
        p.metadata.name.clone()
    }
    fn upsert(&mut self, p: &k8s_openapi::api::core::v1::Pod) -> bool {
        self.agents.as_mut().is_some_and(|a| a.apply_pod(p))
    }
    fn delete(&mut self, p: &k8s_openapi::api::core::v1::Pod) -> bool {
        let name = p.metadata.name.as_deref().unwrap_or("");
        self.agents.as_mut().is_some_and(|a| a.delete_pod(name))
    }
    fn relisted(&mut self, listed: &BTreeSet<String>) -> bool {
        let Some(agents) = self.agents.as_mut() else {
            return false;
        };
        let mut forgot = false;
        for name in unlisted(agents.pod_names(), listed) {
            forgot |= agents.delete_pod(&name);
        }
        forgot
    }
}

/// The agent DaemonSet itself (watched by name): its uid and generation, whether it is
/// being deleted, or that it is gone.
impl WatchIndex<k8s_openapi::api::apps::v1::DaemonSet> for World {
    fn key(d: &k8s_openapi::api::apps::v1::DaemonSet) -> Option<String> {
        d.metadata.name.clone()
    }
    fn upsert(&mut self, d: &k8s_openapi::api::apps::v1::DaemonSet) -> bool {
        let seen = crate::agents::blocked::SeenDaemonSet {
            version: crate::agents::blocked::DaemonSetVersion {
                uid: d.metadata.uid.clone().unwrap_or_default(),
                generation: d.metadata.generation.unwrap_or(0),
            },
            deleting: d.metadata.deletion_timestamp.is_some(),
        };
        self.agents.as_mut().is_some_and(|a| a.see_daemonset(seen))
    }
    fn delete(&mut self, d: &k8s_openapi::api::apps::v1::DaemonSet) -> bool {
        let uid = d.metadata.uid.as_deref();
        self.agents.as_mut().is_some_and(|a| a.daemonset_gone(uid))
    }
    fn relisted(&mut self, listed: &BTreeSet<String>) -> bool {
        match self.agents.as_mut() {
            Some(a) if listed.is_empty() => a.daemonset_gone(None),
            _ => false,
        }
    }
}

/// The agent DaemonSet's Events: its newest `FailedCreate` is kept (a deleted Event
/// changes nothing: the refusal ages out of its window).
impl WatchIndex<k8s_openapi::api::core::v1::Event> for World {
    fn key(e: &k8s_openapi::api::core::v1::Event) -> Option<String> {
        e.metadata.name.clone()
    }
    fn upsert(&mut self, e: &k8s_openapi::api::core::v1::Event) -> bool {
        self.agents.as_mut().is_some_and(|a| a.apply_event(e))
    }
    fn delete(&mut self, _: &k8s_openapi::api::core::v1::Event) -> bool {
        false
    }
    fn relisted(&mut self, _: &BTreeSet<String>) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodemem_api::report::SPEC_CHANGED_AT;
    use serde_json::json;

    /// A report seen good at 10.9 s is not ready for 2 s at 12.0 s: the stamp is the
    /// next whole second, so the whole-second age never exceeds the real one.
    #[test]
    fn a_reports_stamp_rounds_up_so_min_ready_seconds_is_never_short() {
        let at = |s: &str| s.parse::<k8s_openapi::jiff::Timestamp>().unwrap();
        let whole = at("2026-11-22T09:00:10Z");
        assert_eq!(ceil_second(whole), whole.as_second());
        let late = at("2026-11-22T09:00:10.9Z");
        assert_eq!(ceil_second(late), whole.as_second() + 1);
        let early = at("2026-11-22T09:00:10.000000001Z");
        assert_eq!(ceil_second(early), whole.as_second() + 1);
        // Every fraction of a second: the age counted at any later real time, floored
        // as decisions floor it, is at most the real age.
        for tenth in 0..10 {
            let seen = at(&format!("2026-11-22T09:00:10.{tenth}Z"));
            for later_tenths in 0..40_i64 {
                let now = seen
                    .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(
                        later_tenths * 100,
                    ))
                    .unwrap();
                let counted = (now.as_second() - ceil_second(seen)).max(0);
                assert!(
                    counted * 10 <= later_tenths,
                    "seen {seen}, now {now}: counted {counted} s of {later_tenths}/10 s"
                );
            }
        }
    }

    /// An agent's report as the apiserver has it: Applied and Healthy at `status`, set
    /// at `at` by the agent's clock, on revision `revision` (generation 2).
    fn reported(revision: &str, status: &str, at: &str, version: &str) -> NodeMemoryConfig {
        let cond = |t: &str| {
            json!({"type": t, "status": status, "reason": t, "message": "", "observedGeneration": 2,
                "lastTransitionTime": at})
        };
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "generation": 2, "resourceVersion": version,
                "annotations": {SPEC_CHANGED_AT: "2026-11-22T10:00:00Z"}},
            "spec": {"policy": "p", "revision": revision},
            "status": {"observedRevision": revision,
                "conditions": [cond("Applied"), cond("Healthy")]}}))
        .unwrap()
    }

    #[test]
    fn readiness_is_stamped_on_the_controllers_clock_when_it_sees_it_turn_good() {
        let t0 = 1_795_341_600; // 2026-11-22T10:00:00Z, the spec change
        let ready_for = |w: &World, now: i64| match report(&w.configs["n1"], now) {
            AgentReport::Good { for_seconds } => Some(for_seconds),
            _ => None,
        };
        // The agent's clock is an hour behind: it says it turned good an hour before
        // the spec even changed.
        let mut w = World {
            clock: Some(t0 + 10),
            ..World::default()
        };
        w.apply_config(&reported("r1", "False", "2026-11-22T09:00:05Z", "1"));
        assert_eq!(ready_for(&w, t0 + 10), None);
        w.clock = Some(t0 + 20);
        w.apply_config(&reported("r1", "True", "2026-11-22T09:00:15Z", "2"));
        assert_eq!(w.configs["n1"].good_seen_at, Some(t0 + 20));
        assert_eq!(ready_for(&w, t0 + 50), Some(30), "from when it was seen");
        // Still good (a later status write): the stamp stays.
        w.clock = Some(t0 + 40);
        w.apply_config(&reported("r1", "True", "2026-11-22T09:00:15Z", "3"));
        assert_eq!(w.configs["n1"].good_seen_at, Some(t0 + 20));
        // A new revision good when it arrives: stamped then.
        w.clock = Some(t0 + 60);
        w.apply_config(&reported("r2", "True", "2026-11-22T09:00:55Z", "4"));
        assert_eq!(w.configs["n1"].good_seen_at, Some(t0 + 60));
        // Good the first time this controller sees it (a start, a failover) without
        // a stamp: from then on this controller's clock, not from the report's own
        // times (the agent says 70 s).
        let mut fresh = World {
            clock: Some(t0 + 100),
            ..World::default()
        };
        fresh.apply_config(&reported("r1", "True", "2026-11-22T10:00:30Z", "5"));
        assert_eq!(fresh.configs["n1"].good_seen_at, Some(t0 + 100));
        assert_eq!(ready_for(&fresh, t0 + 100), Some(0));
        assert_eq!(ready_for(&fresh, t0 + 130), Some(30));
    }

    /// A config with the stamp a controller left (`nodemem.io/ready-since`).
    fn stamped(revision: &str, stamp: &str, version: &str) -> NodeMemoryConfig {
        let mut c = reported(revision, "True", "2026-11-22T09:00:00Z", version);
        c.metadata
            .annotations
            .get_or_insert_default()
            .insert(nodemem_api::report::READY_SINCE.into(), stamp.into());
        c
    }

    fn waiting_policy(min_ready: i64) -> nodemem_api::NodeMemoryPolicy {
        serde_json::from_value(json!({
            "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
            "metadata": {"name": "p", "uid": "uid-p", "generation": 1},
            "spec": {"nodeSelector": {"matchLabels": {"pool": "a"}},
                "memoryQoS": {"throttlingFactor": 0.8},
                "rollout": {"minReadySeconds": min_ready}}}))
        .unwrap()
    }

    #[test]
    fn a_controller_that_takes_over_counts_from_the_stamp_its_predecessor_left() {
        let t0 = 1_795_341_600; // 2026-11-22T10:00:00Z
        let ready_for = |w: &World, now: i64| match report(&w.configs["n1"], now) {
            AgentReport::Good { for_seconds } => Some(for_seconds),
            _ => None,
        };
        let mut leader = World {
            clock: Some(t0 + 20),
            ..World::default()
        };
        leader.apply_policy(&waiting_policy(60));
        leader.apply_config(&reported("r1", "True", "2026-11-22T09:00:15Z", "1"));
        // Seen good first here, without a stamp: stamped with this controller's time.
        assert_eq!(
            leader.take_ready_stamps(),
            [("n1".to_string(), "r1 2026-11-22T10:00:20Z".to_string())]
        );
        assert!(leader.take_ready_stamps().is_empty(), "taken once");
        // The stamp's write comes back: nothing more is due.
        leader.apply_config(&stamped("r1", "r1 2026-11-22T10:00:20Z", "2"));
        assert!(leader.take_ready_stamps().is_empty());
        assert_eq!(leader.configs["n1"].good_seen_at, Some(t0 + 20));

        // The next leader, 30 s later, reads the stamp: 30 s ready, not 0, not the
        // agent's hour.
        let mut next = World {
            clock: Some(t0 + 50),
            ..World::default()
        };
        next.apply_policy(&waiting_policy(60));
        next.apply_config(&stamped("r1", "r1 2026-11-22T10:00:20Z", "2"));
        assert_eq!(ready_for(&next, t0 + 50), Some(30));
        assert!(next.take_ready_stamps().is_empty(), "its stamp is kept");
        // A stamp of another revision (the spec moved on since) counts for nothing:
        // from when this controller sees the new revision good, stamped anew.
        let mut moved = World {
            clock: Some(t0 + 50),
            ..World::default()
        };
        moved.apply_policy(&waiting_policy(60));
        moved.apply_config(&stamped("r2", "r1 2026-11-22T10:00:20Z", "3"));
        assert_eq!(moved.configs["n1"].good_seen_at, Some(t0 + 50));
        assert_eq!(
            moved.take_ready_stamps(),
            [("n1".to_string(), "r2 2026-11-22T10:00:50Z".to_string())]
        );
        // A stamp that does not read as one is no stamp.
        let mut odd = World {
            clock: Some(t0 + 50),
            ..World::default()
        };
        odd.apply_config(&stamped("r1", "r1 yesterday", "4"));
        assert_eq!(odd.configs["n1"].good_seen_at, Some(t0 + 50));
        // A policy without a wait stamps nothing (a fan-out of 20,000 nodes writes none).
        let mut quick = World {
            clock: Some(t0 + 50),
            ..World::default()
        };
        quick.apply_policy(&waiting_policy(0));
        quick.apply_config(&reported("r1", "True", "2026-11-22T09:00:15Z", "5"));
        assert!(quick.take_ready_stamps().is_empty());
        // A report that is not good is not stamped, and loses a stamp due.
        let mut pending = World {
            clock: Some(t0 + 50),
            ..World::default()
        };
        pending.apply_policy(&waiting_policy(60));
        pending.apply_config(&reported("r1", "True", "2026-11-22T09:00:15Z", "6"));
        pending.apply_config(&reported("r1", "False", "2026-11-22T09:00:55Z", "7"));
        assert!(pending.take_ready_stamps().is_empty());
    }

    #[test]
    fn a_config_whose_values_are_on_its_node_is_marked_before_it_goes() {
        let mut w = World::default();
        let config = |node: &str, revision: &str| -> NodeMemoryConfig {
            serde_json::from_value(json!({"metadata": {"name": node},
                "spec": {"policy": "p", "revision": revision}}))
            .unwrap()
        };
        let node = |name: &str| ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        };
        let released = nodemem_api::revision::revision(&nodemem_api::NodeSettings::released());
        w.apply_node_meta(&node("runs"));
        w.apply_node_meta(&node("released"));
        w.apply_config(&config("runs", "r1"));
        w.apply_config(&config("released", &released));
        w.apply_config(&config("gone", "r1"));
        assert_eq!(w.give_back_mark("runs").as_deref(), Some("r1"));
        assert_eq!(
            w.give_back_mark("released"),
            None,
            "its values are given back already"
        );
        assert_eq!(w.give_back_mark("gone"), None, "no node, no agent");
        assert_eq!(w.give_back_mark("unknown"), None);
    }

    #[test]
    fn only_what_decisions_read_counts_as_a_change() {
        let mut w = World::default();
        let node = |labels: serde_json::Value, heartbeat: &str| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n1", "labels": labels},
                "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}]}}))
            .unwrap()
        };
        assert!(w.apply_node(&node(json!({"pool": "a"}), "2026-11-22T10:00:00Z")));
        assert!(
            !w.apply_node(&node(json!({"pool": "a"}), "2026-11-22T10:00:10Z")),
            "a heartbeat changes nothing"
        );
        assert!(w.apply_node(&node(json!({"pool": "b"}), "2026-11-22T10:00:20Z")));
        assert!(w.delete_node("n1", None) && !w.delete_node("n1", None));

        let config: NodeMemoryConfig = serde_json::from_value(json!({
            "metadata": {"name": "n1", "generation": 2,
                "annotations": {SPEC_CHANGED_AT: "2026-11-22T10:00:00Z"}},
            "spec": {"policy": "p", "revision": "r1"}}))
        .unwrap();
        assert!(w.apply_config(&config));
        assert!(!w.apply_config(&config));
        assert_eq!(
            w.configs["n1"].spec_changed_at,
            Some(1_795_341_600),
            "2026-11-22T10:00:00Z"
        );
    }

    #[test]
    fn the_journal_names_what_changed_and_placement_moves_only_with_what_the_daemonset_reads() {
        let mut w = World::default();
        let config = |status: serde_json::Value| -> NodeMemoryConfig {
            serde_json::from_value(json!({"metadata": {"name": "n1"},
                "spec": {"policy": "p", "revision": "r1"}, "status": status}))
            .unwrap()
        };
        let node = |pool: &str| ObjectMeta {
            name: Some("n1".into()),
            labels: Some([("pool".to_string(), pool.to_string())].into()),
            ..ObjectMeta::default()
        };
        w.apply_node_meta(&node("a"));
        w.apply_config(&config(json!({})));
        let placed = w.placement();
        assert_eq!(
            w.take_changes(),
            Changes {
                nodes: ["n1".to_string()].into(),
                policies: false
            }
        );
        assert_eq!(w.take_changes(), Changes::default(), "taken");
        // An agent's report: a change for the decisions, not for the placement.
        w.apply_config(&config(json!({"observedRevision": "r1"})));
        assert_eq!(w.placement(), placed);
        assert_eq!(w.take_changes().nodes.len(), 1);
        w.apply_node_meta(&node("b"));
        assert_eq!(w.placement(), placed + 1, "a label");
        w.delete_config("n1", None);
        assert_eq!(w.placement(), placed + 2, "a config gone");
        assert!(w.apply_policy(&policy("7", 0.8)));
        assert!(w.take_changes().policies);
        assert_eq!(w.placement(), placed + 3, "a policy");
    }

    #[test]
    fn a_relist_forgets_what_was_deleted_while_the_watches_were_away() {
        use kube::runtime::watcher::Event;
        use nodemem_api::watch_index::{Learned, Watched};
        let mut w = World::default();
        let meta = |name: &str| -> PartialObjectMeta<Node> {
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "resourceVersion": "5", "labels": {"pool": "a"}}}))
            .unwrap()
        };
        let mut nodes = Watched::default();
        for event in [
            Event::Init,
            Event::InitApply(meta("n1")),
            Event::InitApply(meta("n2")),
            Event::InitDone,
        ] {
            nodes.learn(&mut w, event);
        }
        assert!(nodes.listed());
        assert_eq!(w.nodes.len(), 2);
        // n2 went while the watch was away: the relist lists n1 only.
        nodes.learn(&mut w, Event::Init);
        nodes.learn(&mut w, Event::InitApply(meta("n1")));
        assert_eq!(nodes.learn(&mut w, Event::InitDone), Learned::Whole);
        assert_eq!(w.nodes.keys().collect::<Vec<_>>(), ["n1"]);

        let mut policies = Watched::default();
        let p = policy("7", 0.8);
        policies.learn(&mut w, Event::InitApply(p.clone()));
        policies.learn(&mut w, Event::InitDone);
        assert_eq!(w.policies.len(), 1);
        policies.learn(&mut w, Event::Init);
        policies.learn(&mut w, Event::InitDone);
        assert!(w.policies.is_empty(), "deleted while the watch was away");
        assert_eq!(
            policies.learn(&mut w, Event::Apply(p)),
            Learned::Nothing,
            "an older version than one seen"
        );
    }

    fn policy(version: &str, factor: f64) -> NodeMemoryPolicy {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "resourceVersion": version},
            "spec": {"nodeSelector": {}, "memoryQoS": {"throttlingFactor": factor}}}))
        .unwrap()
    }

    #[test]
    fn a_late_watch_event_does_not_take_the_world_back() {
        let mut w = World::default();
        // The response to the controller's own status write carries edit 3 ...
        assert!(w.apply_policy(&policy("130", 0.7)));
        // ... while the watch still delivers edits 1 and 2, and then 3 itself.
        for late in [policy("110", 0.9), policy("120", 0.8), policy("130", 0.7)] {
            assert!(!w.apply_policy(&late));
            assert_eq!(
                w.policies["p"].spec.settings.memory_qos.throttling_factor,
                0.7
            );
        }
        assert!(w.apply_policy(&policy("140", 0.6)));
        assert_eq!(
            w.policies["p"].spec.settings.memory_qos.throttling_factor,
            0.6
        );
    }

    #[test]
    fn a_deleted_object_stays_deleted_until_a_newer_one_comes() {
        let mut w = World::default();
        let config = |version: &str| -> NodeMemoryConfig {
            serde_json::from_value(json!({
                "metadata": {"name": "n1", "resourceVersion": version},
                "spec": {"policy": "p", "revision": format!("r{version}")}}))
            .unwrap()
        };
        assert!(w.apply_config(&config("20")));
        // Deleted (the watch's event carries the deletion's version); an older version
        // delivered late does not bring it back, a stale delete does not remove a newer
        // one, and an object created again (newer) is taken.
        assert!(w.delete_config("n1", Some("25")));
        assert!(!w.apply_config(&config("20")) && !w.configs.contains_key("n1"));
        assert!(w.apply_config(&config("30")));
        assert!(!w.delete_config("n1", Some("25")));
        assert_eq!(w.configs["n1"].spec.revision, "r30");
        // The controller's own delete has no version: the object goes.
        assert!(w.delete_config("n1", None) && w.configs.is_empty());
        // Versions another apiserver may print cannot be compared: the last one wins.
        assert!(w.apply_policy(&policy("b", 0.5)));
        assert!(w.apply_policy(&policy("a", 0.4)));
        assert_eq!(
            w.policies["p"].spec.settings.memory_qos.throttling_factor,
            0.4
        );
        // A node's metadata the same way.
        let meta = |version: &str, pool: &str| ObjectMeta {
            name: Some("n1".into()),
            resource_version: Some(version.into()),
            labels: Some([("pool".to_string(), pool.to_string())].into()),
            ..ObjectMeta::default()
        };
        assert!(w.apply_node_meta(&meta("50", "a")));
        assert!(!w.apply_node_meta(&meta("40", "b")));
        assert_eq!(w.nodes["n1"]["pool"], "a");
    }
}
