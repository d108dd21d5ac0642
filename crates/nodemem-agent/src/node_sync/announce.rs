//! The agent's Events: on the config (a state record recovered, a pass that did not
//! apply), on pods (NUMA pinning refused, relief), each published once per change.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event as KubeEvent, EventType};
use nodemem_api::node_index::IndexedConfig;
use nodemem_api::NodeMemoryConfigStatus;
use nodemem_plumbing::events::Recorder;
use tracing::{info, warn};

use crate::metrics::Metrics;

/// What a pass refused a pod, and why: NUMA pinning the Memory Manager refused
/// (`NumaPinningRefused`), or the class it names that its policy does not have
/// (`UnknownClass`: it runs the pool's settings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    /// The Event's reason.
    pub event: &'static str,
    pub reason: String,
}

pub struct Announcer {
    /// None until the client exists (and in tests): nothing is published.
    pub recorder: Option<Recorder>,
    pub metrics: Arc<Metrics>,
    /// Pods already told what they were refused (uid, Event reason, note): told
    /// again only when that changes.
    told_refused: BTreeSet<(String, &'static str, String)>,
    /// Each pod's workload class as last computed (uid -> class, where it came from):
    /// a change is told on the pod.
    classes: std::collections::BTreeMap<String, ClassSeen>,
}

/// A pod's workload class as a pass computed it: its name (None: the pool's own
/// settings) and where the choice came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassSeen {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub class: Option<String>,
    pub from: &'static str,
}

impl Announcer {
    pub fn new(recorder: Option<Recorder>, metrics: Arc<Metrics>) -> Self {
        Announcer {
            recorder,
            metrics,
            told_refused: BTreeSet::new(),
            classes: std::collections::BTreeMap::new(),
        }
    }

    async fn publish(
        &self,
        type_: EventType,
        reference: &ObjectReference,
        reason: &str,
        note: &str,
        action: &str,
    ) {
        let Some(recorder) = &self.recorder else {
            return;
        };
        let event = KubeEvent {
            type_,
            reason: reason.to_string(),
            note: Some(note.chars().take(1000).collect()),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, reference).await {
            warn!(error = %e, "event not recorded");
        }
    }

    /// A recovered state record, and a pass that did not apply, are Warning Events on
    /// the config, once per change of their message.
    pub async fn status_events(
        &self,
        config: &IndexedConfig,
        new: &NodeMemoryConfigStatus,
        last: Option<&NodeMemoryConfigStatus>,
    ) {
        let reference = ObjectReference {
            api_version: Some("nodemem.io/v1alpha1".into()),
            kind: Some("NodeMemoryConfig".into()),
            name: Some(config.name.clone()),
            uid: config.uid.clone(),
            ..ObjectReference::default()
        };
        let recovered = |s: Option<&NodeMemoryConfigStatus>| {
            s.and_then(|s| s.conditions.iter().find(|c| c.type_ == "StateRecovered"))
                .map(|c| (c.reason.clone(), c.message.clone()))
        };
        if let Some((reason, message)) =
            recovered(Some(new)).filter(|(_, m)| Some(m) != recovered(last).map(|l| l.1).as_ref())
        {
            self.publish(EventType::Warning, &reference, &reason, &message, "Recover")
                .await;
        }
        // A process named like a kubelet that is not the host's: named once, when it
        // first shows in the status (a pod may run one on purpose to be read).
        let ignored = |s: Option<&NodeMemoryConfigStatus>| -> Vec<String> {
            s.and_then(|s| s.node.as_ref())
                .and_then(|n| n.kubelet.as_ref())
                .map(|k| k.ignored.clone())
                .unwrap_or_default()
        };
        let before = ignored(last);
        for other in ignored(Some(new)).iter().filter(|i| !before.contains(i)) {
            let note = format!("not the host's kubelet, so none of its files is read: {other}");
            self.publish(
                EventType::Warning,
                &reference,
                "KubeletIgnored",
                &note,
                "Read",
            )
            .await;
        }
        if let Some(failed) = new
            .conditions
            .iter()
            .find(|c| c.type_ == "Applied" && c.status == "False")
        {
            self.publish(
                EventType::Warning,
                &reference,
                &failed.reason,
                &failed.message,
                "Apply",
            )
            .await;
        }
    }

    /// A Normal Event `ClassChanged` on each pod whose workload class changed since the
    /// last pass (its annotation or its namespace's label edited, or its policy's
    /// classes); a pod seen for the first time is not told. Returns the pods told.
    pub async fn class_events(&mut self, now: Vec<ClassSeen>) -> usize {
        let mut told = 0;
        let mut seen = std::collections::BTreeMap::new();
        for c in now {
            let before = self.classes.get(&c.uid);
            if let Some(before) = before.filter(|b| (&b.class, b.from) != (&c.class, c.from)) {
                let name = |s: &ClassSeen| {
                    format!(
                        "{} ({})",
                        s.class.as_deref().unwrap_or("the pool's settings"),
                        s.from
                    )
                };
                let note = format!(
                    "workload class {} -> {}: its values follow at once",
                    name(before),
                    name(&c)
                );
                info!(pod = %format!("{}/{}", c.namespace, c.pod), "{note}");
                let reference = pod_reference(&c.namespace, &c.pod, &c.uid);
                self.publish(
                    EventType::Normal,
                    &reference,
                    "ClassChanged",
                    &note,
                    "Classify",
                )
                .await;
                told += 1;
            }
            seen.insert(c.uid.clone(), c);
        }
        self.classes = seen;
        told
    }

    /// A Warning Event on each pod newly refused something (NUMA pinning, its class).
    pub async fn refusal_events(&mut self, refused: Vec<Refusal>) {
        let key = |r: &Refusal| (r.uid.clone(), r.event, r.reason.clone());
        let now: BTreeSet<_> = refused.iter().map(key).collect();
        self.told_refused.retain(|k| now.contains(k));
        let new: Vec<Refusal> = refused
            .into_iter()
            .filter(|r| self.told_refused.insert(key(r)))
            .collect();
        for r in new {
            let reference = pod_reference(&r.namespace, &r.pod, &r.uid);
            let action = if r.event == "UnknownClass" {
                "Classify"
            } else {
                "Pin"
            };
            self.publish(EventType::Warning, &reference, r.event, &r.reason, action)
                .await;
        }
    }

    /// A value of nodemem's that another NRI plugin or the runtime changed after
    /// nodemem's answer at creation (written back by the pass): a Warning Event on the
    /// pod, counted and warned.
    pub async fn overridden_event(&self, pod: (&str, &str, &str), note: &str) {
        let (namespace, name, uid) = pod;
        self.metrics.nri_request("overridden");
        warn!(pod = %format!("{namespace}/{name}"), %note, "NRI: a value set at creation was changed by someone else; written back");
        let reference = pod_reference(namespace, name, uid);
        self.publish(
            EventType::Warning,
            &reference,
            "NriValueOverridden",
            note,
            "Repair",
        )
        .await;
    }

    /// An Event on the pod of each relief decision, and its metric.
    pub async fn relief_events(&self, decisions: &[crate::relief::Decision]) {
        use nodemem_model::feedback::relief::Action;
        for d in decisions {
            let reference = pod_reference(&d.namespace, &d.pod, &d.uid);
            let (type_, reason, note) = match d.action {
                Action::Nothing => continue,
                Action::Relieve { to, until: _ } => (
                    EventType::Warning,
                    "MemoryHighRelieved",
                    format!(
                        "container {}: memory.high raised from {} to {} for the policy's relief period: PSI full avg10 {:.2}% with its working set at memory.high",
                        d.container,
                        d.memory_high,
                        to.map_or("max".to_string(), |b| b.to_string()),
                        d.full_avg10
                    ),
                ),
                Action::Restore { to } => (
                    EventType::Normal,
                    "MemoryHighRestored",
                    format!("container {}: memory.high back to {to} after its relief", d.container),
                ),
                Action::Report { last_relief_ended } => (
                    EventType::Warning,
                    "ReliefRefused",
                    format!(
                        "container {}: choking again (PSI full avg10 {:.2}% at memory.high {}) within the repeat window after its last relief (ended {} s into the agent's run): reported, not relieved; raise its memory limit or the policy's throttlingFactor",
                        d.container, d.full_avg10, d.memory_high, last_relief_ended
                    ),
                ),
            };
            self.metrics.relief(reason);
            info!(pod = %format!("{}/{}", d.namespace, d.pod), container = %d.container, reason, "{note}");
            self.publish(type_, &reference, reason, &note, "Relieve")
                .await;
        }
    }
}

fn pod_reference(namespace: &str, name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.to_string()),
        name: Some(name.to_string()),
        uid: Some(uid.to_string()),
        ..ObjectReference::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(uid: &str, class: Option<&str>, from: &'static str) -> ClassSeen {
        ClassSeen {
            namespace: "shop".into(),
            pod: format!("pod-{uid}"),
            uid: uid.into(),
            class: class.map(str::to_string),
            from,
        }
    }

    /// A pod's class change is told once, on that pod; a pod seen the first time, or
    /// unchanged, is not; a pod gone is forgotten.
    #[tokio::test]
    async fn a_pods_class_change_is_told_once_and_only_for_that_pod() {
        let mut a = Announcer::new(None, Arc::new(Metrics::new()));
        let first = vec![
            seen("1", Some("batch"), "pod annotation"),
            seen("2", None, "pool"),
        ];
        assert_eq!(a.class_events(first.clone()).await, 0, "first sight");
        assert_eq!(a.class_events(first).await, 0, "nothing changed");
        let moved = vec![
            seen("1", Some("service"), "pod annotation"),
            seen("2", None, "pool"),
        ];
        assert_eq!(a.class_events(moved.clone()).await, 1);
        assert_eq!(a.class_events(moved).await, 0, "told once");
        // Gone, then back in another class: first sight again.
        assert_eq!(a.class_events(vec![seen("2", None, "pool")]).await, 0);
        assert_eq!(
            a.class_events(vec![seen("1", Some("batch"), "namespace label")])
                .await,
            0
        );
        assert_eq!(
            a.class_events(vec![seen("1", None, "pool")]).await,
            1,
            "the label removed: back to the pool's"
        );
    }
}
