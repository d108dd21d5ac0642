//! A batch of updates folded into the index and into what the next pass must do
//! (pure: the index is in memory, nothing here reads the node or the apiserver).
//!
//! Pod events change those pods and the node-level sums only; anything else changed
//! (the config, the Node, a relist) takes the whole node. New cgroups alone are a
//! reaction: only they are planned, read and written.

use std::collections::BTreeSet;
use std::time::Instant;

use k8s_openapi::api::core::v1 as core;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::Event;
use nodemem_api::node_index::NodeIndex;
use nodemem_api::watch_index::{Learned, Watched};
use nodemem_api::NodeMemoryConfig;

use crate::cgroup_events::CgroupChanges;
use crate::metrics::Trigger;
use crate::nri::NriNews;
use nodemem_apply::applier::Reach;

/// Watch events of the four kinds, new cgroups and timers, merged into one stream
/// (boxed: Kubernetes objects are large and of very different sizes).
pub enum Update {
    Config(Box<Event<NodeMemoryConfig>>),
    Pod(Box<Event<core::Pod>>),
    Node(Box<Event<core::Node>>),
    Namespace(Box<Event<PartialObjectMeta<core::Namespace>>>),
    /// Cgroup directories that appeared or went away under kubepods (inotify).
    Cgroups(CgroupChanges),
    Resync,
    /// Time to sample the managed containers.
    Sample,
    /// Time to look at proactive reclaim's containers.
    Reclaim,
    /// A container's PSI trigger fired (its cgroup).
    Pressure(String),
    /// The runtime's NRI requests.
    Nri(NriNews),
}

/// The four watches' progress.
#[derive(Default)]
pub struct Watches {
    config: Watched<NodeMemoryConfig>,
    pods: Watched<core::Pod>,
    node: Watched<core::Node>,
    namespaces: Watched<PartialObjectMeta<core::Namespace>>,
}

impl Watches {
    /// The first pass waits for the config, pods and Node lists: computing with no
    /// pods yet would take their protection away until the list arrives.
    pub fn listed(&self) -> bool {
        self.config.listed() && self.pods.listed() && self.node.listed()
    }
}

/// What a batch of updates asks of the next pass.
#[derive(Debug, Default)]
pub struct Batch {
    /// Something the computation reads changed.
    changed: bool,
    /// Pods whose own events changed them.
    touched: BTreeSet<String>,
    /// Something beyond single pods changed.
    node_wide: bool,
    /// A whole-node pass is due (resync, news from a sample, a relief decision).
    resync: bool,
    /// Container cgroups that appeared, and when the first of them did.
    appeared: BTreeSet<String>,
    reaction_since: Option<Instant>,
    /// Time to sample the managed containers.
    pub sample: bool,
    /// Time to look at proactive reclaim's containers.
    pub reclaim: bool,
    /// Containers whose PSI trigger fired (their cgroups).
    pub fired: Vec<String>,
    /// The runtime named or forgot containers: the pods compute again.
    pub renamed: bool,
    /// Containers the runtime's record named, and records that were not usable.
    pub runtime_named: usize,
    pub runtime_unusable: usize,
    /// Containers being created with nodemem's values (NRI) and the files set: the
    /// runtime writes them; reactions leave them to it until they start.
    pub created: Vec<(String, Vec<&'static str>)>,
    /// Such containers that started: their files are nodemem's now (claimed, so that
    /// leaving gives them back), and checked.
    pub started: Vec<String>,
    /// Pod sandboxes waiting for their cgroup's values (NRI's RunPodSandbox).
    pub sandboxes_waiting: Vec<tokio::sync::oneshot::Sender<()>>,
}

/// Why the next pass runs and what it covers.
#[derive(Debug)]
pub struct NextPass<'a> {
    pub trigger: Trigger,
    pub reach: Reach<'a>,
    /// The index changed: the pods to compute are rebuilt from it.
    pub index_changed: bool,
    /// When the new cgroups this pass reacts to appeared.
    pub reaction_since: Option<Instant>,
}

impl Batch {
    /// Folds one update into the index and into the batch.
    pub fn absorb(&mut self, update: Update, index: &mut NodeIndex, watches: &mut Watches) {
        let learned = match update {
            Update::Config(e) => node_wide(watches.config.learn(index, *e)),
            Update::Pod(e) => watches.pods.learn(index, *e),
            Update::Node(e) => node_wide(watches.node.learn(index, *e)),
            Update::Namespace(e) => node_wide(watches.namespaces.learn(index, *e)),
            Update::Cgroups(c) => {
                self.absorb_cgroups(c, index);
                Learned::Nothing
            }
            Update::Resync => {
                self.resync = true;
                Learned::Nothing
            }
            Update::Sample => {
                self.sample = true;
                Learned::Nothing
            }
            Update::Reclaim => {
                self.reclaim = true;
                Learned::Nothing
            }
            Update::Pressure(path) => {
                self.fired.push(path);
                Learned::Nothing
            }
            Update::Nri(news) => {
                self.absorb_nri(news, index);
                Learned::Nothing
            }
        };
        match learned {
            Learned::Nothing => {}
            Learned::Object(uid) => {
                self.changed = true;
                self.touched.insert(uid);
            }
            Learned::Whole => {
                self.changed = true;
                self.node_wide = true;
            }
        }
    }

    /// Containers the runtime named before the kubelet reported them: their pods
    /// compute with the new IDs, and the pass writes only the new cgroups (no pod
    /// event happened).
    fn absorb_cgroups(&mut self, c: CgroupChanges, index: &mut NodeIndex) {
        self.runtime_named += c.named.len();
        self.runtime_unusable += c.unusable;
        for named in &c.named {
            self.renamed |= index.learn_container(&named.pod_uid, &named.name, &named.id);
        }
        for id in &c.gone {
            self.renamed |= index.forget_container(id);
        }
        if !c.appeared.is_empty() {
            self.appeared.extend(c.appeared);
            self.reaction_since.get_or_insert(c.at);
        }
    }

    /// What the runtime said through NRI: a container's ID before the kubelet reports
    /// it (the pod computes again) and the files set at creation; a sandbox whose
    /// cgroup is written as a new cgroup; a new registration that wants a whole pass.
    fn absorb_nri(&mut self, news: NriNews, index: &mut NodeIndex) {
        match news {
            NriNews::Created {
                pod_uid,
                name,
                id,
                path,
                files,
            } => {
                self.renamed |= index.learn_container(&pod_uid, &name, &id);
                if !files.is_empty() {
                    self.created.push((path, files));
                }
            }
            NriNews::SandboxRunning { path, done } => {
                self.appeared.insert(path);
                self.reaction_since.get_or_insert_with(Instant::now);
                self.sandboxes_waiting.push(done);
            }
            NriNews::Started { path } => {
                self.appeared.insert(path.clone());
                self.reaction_since.get_or_insert_with(Instant::now);
                self.started.push(path);
            }
            NriNews::Resync => self.resync = true,
        }
    }

    /// A whole-node pass is due (a sample brought news, relief decided).
    pub fn whole_node(&mut self) {
        self.resync = true;
    }

    /// The pass this batch asks for; None: nothing to do, or the lists are not in.
    pub fn next_pass(&self, watches: &Watches) -> Option<NextPass<'_>> {
        let wanted = self.changed || self.resync || !self.appeared.is_empty();
        if !wanted || !watches.listed() {
            return None;
        }
        let trigger = match (self.reaction_since, self.changed) {
            (_, true) => Trigger::Event,
            (Some(_), false) => Trigger::Cgroup,
            (None, false) => Trigger::Resync,
        };
        let reach = match trigger {
            Trigger::Cgroup => Reach::Cgroups(&self.appeared),
            Trigger::Event if !self.node_wide && !self.resync && self.appeared.is_empty() => {
                Reach::Pods(&self.touched)
            }
            _ => Reach::Node,
        };
        Some(NextPass {
            trigger,
            reach,
            index_changed: self.changed,
            reaction_since: self.reaction_since,
        })
    }
}

/// Config, Node and namespace changes reach every pod of the node.
fn node_wide(learned: Learned) -> Learned {
    match learned {
        Learned::Object(_) => Learned::Whole,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(uid: &str, memory: &str) -> core::Pod {
        serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "shop", "uid": uid,
                         "creationTimestamp": "2026-11-22T10:00:00Z"},
            "spec": {"nodeName": "n1", "containers": [{"name": "app",
                "resources": {"requests": {"memory": memory}}}]},
            "status": {"phase": "Running"},
        }))
        .unwrap()
    }

    fn config(factor: f64) -> NodeMemoryConfig {
        serde_json::from_value(json!({
            "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
            "metadata": {"name": "n1", "generation": 1},
            "spec": {"policy": "p", "revision": "r1", "memoryQoS": {"throttlingFactor": factor}},
        }))
        .unwrap()
    }

    fn node() -> core::Node {
        serde_json::from_value(json!({"metadata": {"name": "n1"},
            "status": {"allocatable": {"memory": "8Gi"}}}))
        .unwrap()
    }

    fn cgroups(appeared: &[&str]) -> CgroupChanges {
        CgroupChanges {
            appeared: appeared.iter().map(|a| a.to_string()).collect(),
            named: vec![],
            unusable: 1,
            gone: vec![],
            at: Instant::now(),
        }
    }

    /// An index and watches with the three lists in: config, one pod, the Node.
    fn listed() -> (NodeIndex, Watches) {
        let mut index = NodeIndex::new("n1");
        let mut watches = Watches::default();
        let mut batch = Batch::default();
        for update in [
            Update::Config(Box::new(Event::InitApply(config(0.8)))),
            Update::Config(Box::new(Event::InitDone)),
            Update::Pod(Box::new(Event::Init)),
            Update::Pod(Box::new(Event::InitApply(pod("u1", "64Mi")))),
            Update::Pod(Box::new(Event::InitDone)),
        ] {
            batch.absorb(update, &mut index, &mut watches);
        }
        assert!(
            batch.next_pass(&watches).is_none(),
            "the Node is not listed yet"
        );
        batch.absorb(
            Update::Node(Box::new(Event::InitApply(node()))),
            &mut index,
            &mut watches,
        );
        batch.absorb(
            Update::Node(Box::new(Event::InitDone)),
            &mut index,
            &mut watches,
        );
        let first = batch.next_pass(&watches).expect("the first pass");
        assert_eq!(first.trigger, Trigger::Event);
        assert!(matches!(first.reach, Reach::Node));
        (index, watches)
    }

    fn pass_of(updates: Vec<Update>) -> Option<(Trigger, String, bool)> {
        let (mut index, mut watches) = listed();
        let mut batch = Batch::default();
        for update in updates {
            batch.absorb(update, &mut index, &mut watches);
        }
        batch.next_pass(&watches).map(|next| {
            let reach = match next.reach {
                Reach::Node => "node".to_string(),
                Reach::Pods(uids) => format!("pods {uids:?}"),
                Reach::Cgroups(paths) => format!("cgroups {paths:?}"),
            };
            (next.trigger, reach, next.index_changed)
        })
    }

    #[test]
    fn a_pods_own_event_passes_over_that_pod_and_a_heartbeat_over_nothing() {
        let changed = pass_of(vec![Update::Pod(Box::new(Event::Apply(pod(
            "u1", "128Mi",
        ))))]);
        assert_eq!(
            changed,
            Some((Trigger::Event, "pods {\"u1\"}".into(), true))
        );
        let new = pass_of(vec![
            Update::Pod(Box::new(Event::Apply(pod("u2", "64Mi")))),
            Update::Pod(Box::new(Event::Delete(pod("u1", "64Mi")))),
        ]);
        assert_eq!(
            new,
            Some((Trigger::Event, "pods {\"u1\", \"u2\"}".into(), true))
        );
        let heartbeat = pass_of(vec![Update::Pod(Box::new(Event::Apply(pod("u1", "64Mi"))))]);
        assert_eq!(heartbeat, None);
    }

    #[test]
    fn a_config_or_node_change_or_a_relist_passes_over_the_whole_node() {
        for update in [
            Update::Config(Box::new(Event::Apply(config(0.7)))),
            Update::Config(Box::new(Event::Delete(config(0.8)))),
            Update::Pod(Box::new(Event::InitDone)),
        ] {
            assert_eq!(
                pass_of(vec![update]),
                Some((Trigger::Event, "node".into(), true))
            );
        }
        // A pod event with a resync in the same batch: the whole node.
        let both = pass_of(vec![
            Update::Pod(Box::new(Event::Apply(pod("u1", "128Mi")))),
            Update::Resync,
        ]);
        assert_eq!(both, Some((Trigger::Event, "node".into(), true)));
    }

    #[test]
    fn new_cgroups_alone_are_a_reaction_over_those_cgroups() {
        let (mut index, mut watches) = listed();
        let mut batch = Batch::default();
        batch.absorb(Update::Cgroups(cgroups(&["a/b"])), &mut index, &mut watches);
        batch.absorb(Update::Cgroups(cgroups(&["a/c"])), &mut index, &mut watches);
        assert_eq!((batch.runtime_named, batch.runtime_unusable), (0, 2));
        let next = batch.next_pass(&watches).unwrap();
        assert_eq!(next.trigger, Trigger::Cgroup);
        assert!(matches!(next.reach, Reach::Cgroups(c) if c.len() == 2));
        assert!(next.reaction_since.is_some() && !next.index_changed);
        // New cgroups with a pod event: the whole node, timed as a reaction.
        let mixed = pass_of(vec![
            Update::Cgroups(cgroups(&["a/b"])),
            Update::Pod(Box::new(Event::Apply(pod("u1", "128Mi")))),
        ]);
        assert_eq!(mixed, Some((Trigger::Event, "node".into(), true)));
    }

    #[test]
    fn timers_pass_only_when_due_and_a_relist_holds_passes_until_it_is_done() {
        assert_eq!(
            pass_of(vec![Update::Resync]),
            Some((Trigger::Resync, "node".into(), false))
        );
        let (mut index, mut watches) = listed();
        let mut batch = Batch::default();
        batch.absorb(Update::Sample, &mut index, &mut watches);
        batch.absorb(Update::Pressure("a/b".into()), &mut index, &mut watches);
        assert!(batch.sample && batch.fired == ["a/b"]);
        assert!(
            batch.next_pass(&watches).is_none(),
            "a sample alone writes nothing"
        );
        batch.whole_node();
        assert_eq!(batch.next_pass(&watches).unwrap().trigger, Trigger::Resync);

        let mut batch = Batch::default();
        batch.absorb(Update::Pod(Box::new(Event::Init)), &mut index, &mut watches);
        batch.absorb(Update::Resync, &mut index, &mut watches);
        assert!(
            batch.next_pass(&watches).is_none(),
            "the pods are relisting"
        );
    }
}
