//! Events (events.k8s.io/v1) that keep their words. kube-runtime's `Recorder` folds
//! every event of one reason and action about one object into one series and keeps the
//! first event's note: rollout steps of different revisions and batches read as
//! "NodesUpdating revision f8a4624b to general-1, count 8" with a later step's time.
//! This recorder has the same interface and counts a series only for the same note too,
//! so each revision and batch is a line of its own and a true repeat still counts up.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::Client;
use tokio::sync::Mutex;

/// A series stays open this long after its last event (as kube-runtime's).
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// What makes two events one series: the same object, type, reason, action and note.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    regarding: (
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
    ),
    type_: String,
    reason: String,
    action: String,
    note: Option<String>,
}

pub struct Recorder {
    client: Client,
    reporter: Reporter,
    series: Mutex<HashMap<SeriesKey, (K8sEvent, Instant)>>,
}

impl Recorder {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Recorder {
            client,
            reporter,
            series: Mutex::new(HashMap::new()),
        }
    }

    /// Creates the event, or counts it into the open series of the same words.
    pub async fn publish(
        &self,
        ev: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let key = key(ev, regarding);
        let now = Instant::now();
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let mut series = self.series.lock().await;
        series.retain(|_, (_, last)| now.duration_since(*last) < SERIES_TTL);
        let stamp = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let written = match series.get(&key) {
            Some((open, _)) => {
                let mut event = open.clone();
                event.series = Some(EventSeries {
                    count: event.series.as_ref().map_or(2, |s| s.count + 1),
                    last_observed_time: stamp,
                });
                let name = event.metadata.name.clone().unwrap_or_default();
                events
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&event))
                    .await?
            }
            None => {
                events
                    .create(&PostParams::default(), &self.event(ev, regarding, stamp))
                    .await?
            }
        };
        series.insert(key, (written, now));
        Ok(())
    }

    fn event(&self, ev: &Event, regarding: &ObjectReference, stamp: MicroTime) -> K8sEvent {
        let nanos = stamp.0.as_nanosecond();
        K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            event_time: Some(stamp),
            regarding: Some(regarding.clone()),
            related: ev.secondary.clone(),
            note: ev.note.clone(),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{nanos:x}",
                    regarding
                        .name
                        .as_deref()
                        .unwrap_or(&self.reporter.controller)
                )),
                ..ObjectMeta::default()
            },
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            type_: Some(type_name(ev.type_).to_string()),
            ..K8sEvent::default()
        }
    }
}

fn type_name(t: EventType) -> &'static str {
    match t {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

fn key(ev: &Event, regarding: &ObjectReference) -> SeriesKey {
    SeriesKey {
        regarding: (
            regarding.kind.clone(),
            regarding.namespace.clone(),
            regarding.name.clone(),
            regarding.uid.clone(),
        ),
        type_: type_name(ev.type_).to_string(),
        reason: ev.reason.clone(),
        action: ev.action.clone(),
        note: ev.note.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(note: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: "NodesUpdating".into(),
            note: Some(note.into()),
            action: "Rollout".into(),
            secondary: None,
        }
    }

    #[test]
    fn only_the_same_words_about_the_same_object_are_one_series() {
        let policy = ObjectReference {
            kind: Some("NodeMemoryPolicy".into()),
            name: Some("general".into()),
            uid: Some("u1".into()),
            ..ObjectReference::default()
        };
        let a = key(&event("revision f8a4624b to general-1"), &policy);
        assert_eq!(a, key(&event("revision f8a4624b to general-1"), &policy));
        assert_ne!(a, key(&event("revision f8a4624b to general-2"), &policy));
        assert_ne!(a, key(&event("revision 62c011d6 to general-1"), &policy));
        let other = ObjectReference {
            name: Some("batch".into()),
            ..policy.clone()
        };
        assert_ne!(a, key(&event("revision f8a4624b to general-1"), &other));
    }
}
