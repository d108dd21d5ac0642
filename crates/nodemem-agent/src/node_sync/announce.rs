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

/// A pod the Memory Manager refused to pin, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub reason: String,
}

pub struct Announcer {
    /// None until the client exists (and in tests): nothing is published.
    pub recorder: Option<Recorder>,
    pub metrics: Arc<Metrics>,
    /// Pods already told they were refused NUMA pinning (uid).
    told_refused: BTreeSet<String>,
}

impl Announcer {
    pub fn new(recorder: Option<Recorder>, metrics: Arc<Metrics>) -> Self {
        Announcer {
            recorder,
            metrics,
            told_refused: BTreeSet::new(),
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

    /// An Event on each pod the Memory Manager newly refused.
    pub async fn refusal_events(&mut self, refused: Vec<Refusal>) {
        let now: BTreeSet<String> = refused.iter().map(|r| r.uid.clone()).collect();
        self.told_refused.retain(|uid| now.contains(uid));
        let new: Vec<Refusal> = refused
            .into_iter()
            .filter(|r| self.told_refused.insert(r.uid.clone()))
            .collect();
        for r in new {
            let reference = pod_reference(&r.namespace, &r.pod, &r.uid);
            self.publish(
                EventType::Warning,
                &reference,
                "NumaPinningRefused",
                &r.reason,
                "Pin",
            )
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
