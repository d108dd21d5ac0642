//! The controller's I/O, a thin layer around [`decide`]: watches feed the [`World`];
//! after a change (and every tick, since rollout steps depend on time) the decision is
//! computed and carried out: NodeMemoryConfig specs by server-side apply (field manager
//! `nodemem-controller`, owned by their policy), deletions, policy status, Events. The
//! world learns each write from the apiserver's answer, so the next decision does not
//! repeat it.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use nodemem_api::{NodeMemoryConfig, NodeMemoryPolicy};
use serde_json::json;
use tracing::{info, warn};

use super::daemonset::{agent_daemonset, AgentDeploy};
use super::decide::{decide, Decision};
use super::metrics::{ErrorCategory, Metrics};
use super::world::{World, SPEC_CHANGED_AT};

/// The field manager of everything the controller writes.
pub const FIELD_MANAGER: &str = "nodemem-controller";

enum Update {
    Policy(Box<Event<NodeMemoryPolicy>>),
    Node(Box<Event<kube::core::PartialObjectMeta<Node>>>),
    Config(Box<Event<NodeMemoryConfig>>),
    Tick,
}

pub struct Controller {
    pub metrics: std::sync::Arc<Metrics>,
    /// How often time-based rollout steps (minReadySeconds, deadlines) are checked.
    pub tick: Duration,
    /// The agent DaemonSet to maintain, if the controller deploys the agents.
    pub agents: Option<AgentDeploy>,
}

fn rfc3339(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .unwrap_or_default()
        .to_string()
}

impl Controller {
    pub async fn run(&self, client: Client) -> Result<(), String> {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        let policies: Api<NodeMemoryPolicy> = Api::all(client.clone());
        let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
        let nodes: Api<kube::core::PartialObjectMeta<Node>> = Api::all(client.clone());
        let policy_events = watcher::watcher(policies.clone(), watcher::Config::default())
            .default_backoff()
            .map(|e| e.map(|e| Update::Policy(Box::new(e))));
        // Labels are all the controller reads of a node: metadata only.
        let node_events = watcher::watcher(nodes, watcher::Config::default())
            .default_backoff()
            .map(|e| e.map(|e| Update::Node(Box::new(e))));
        let config_events = watcher::watcher(configs.clone(), watcher::Config::default())
            .default_backoff()
            .map(|e| e.map(|e| Update::Config(Box::new(e))));
        let ticks = futures::stream::unfold(tokio::time::interval(self.tick), |mut t| async {
            t.tick().await;
            Some((Ok(Update::Tick), t))
        });
        let mut updates = futures::stream::select_all(vec![
            policy_events.boxed(),
            node_events.boxed(),
            config_events.boxed(),
            ticks.boxed(),
        ]);
        let daemonsets: Option<Api<k8s_openapi::api::apps::v1::DaemonSet>> = self
            .agents
            .as_ref()
            .map(|a| Api::namespaced(client.clone(), &a.namespace));
        let mut applied_daemonset = None;
        let mut world = World::default();
        let mut listed = [false; 3];
        let mut dirty = false;
        info!("watching NodeMemoryPolicies, Nodes and NodeMemoryConfigs");
        while let Some(update) = updates.next().await {
            let mut tick = false;
            match update {
                Err(e) => {
                    self.metrics.error(ErrorCategory::Watch);
                    warn!(error = %e, "watch failed; retrying with backoff");
                    continue;
                }
                Ok(Update::Policy(e)) => match *e {
                    Event::Apply(p) | Event::InitApply(p) => dirty |= world.apply_policy(&p),
                    Event::Delete(p) => {
                        dirty |= world.delete_policy(p.metadata.name.as_deref().unwrap_or(""))
                    }
                    Event::Init => {}
                    Event::InitDone => listed[0] = true,
                },
                Ok(Update::Node(e)) => match *e {
                    Event::Apply(n) | Event::InitApply(n) => {
                        dirty |= world.apply_node_meta(&n.metadata)
                    }
                    Event::Delete(n) => {
                        dirty |= world.delete_node(n.metadata.name.as_deref().unwrap_or(""))
                    }
                    Event::Init => {}
                    Event::InitDone => listed[1] = true,
                },
                Ok(Update::Config(e)) => match *e {
                    Event::Apply(c) | Event::InitApply(c) => dirty |= world.apply_config(&c),
                    Event::Delete(c) => {
                        dirty |= world.delete_config(c.metadata.name.as_deref().unwrap_or(""))
                    }
                    Event::Init => {}
                    Event::InitDone => listed[2] = true,
                },
                Ok(Update::Tick) => tick = true,
            }
            // Decide on whole lists only, and once per burst of events.
            if !listed.iter().all(|l| *l) || !(dirty || tick) {
                continue;
            }
            let started = std::time::Instant::now();
            let now = k8s_openapi::jiff::Timestamp::now().as_second();
            let decision = decide(&world, now);
            self.carry_out(&decision, &mut world, &policies, &configs, &recorder, now)
                .await;
            if let (Some(deploy), Some(api)) = (&self.agents, &daemonsets) {
                let wanted = agent_daemonset(deploy, &world);
                if applied_daemonset.as_ref() != Some(&wanted) {
                    let apply = PatchParams::apply(FIELD_MANAGER).force();
                    match api
                        .patch(super::daemonset::NAME, &apply, &Patch::Apply(&wanted))
                        .await
                    {
                        Ok(_) => {
                            self.metrics.write("daemonset", true);
                            info!("agent DaemonSet updated");
                            applied_daemonset = Some(wanted);
                        }
                        Err(e) => {
                            self.metrics.write("daemonset", false);
                            warn!(error = %e, "agent DaemonSet not written; retried on the next reconcile");
                        }
                    }
                }
            }
            self.metrics.policies(
                world
                    .policies
                    .iter()
                    .map(|(name, p)| (name.as_str(), &p.status)),
            );
            self.metrics.reconciled(started.elapsed().as_secs_f64());
            dirty = false;
        }
        Err("the watch streams ended".to_string())
    }

    async fn carry_out(
        &self,
        d: &Decision,
        world: &mut World,
        policies: &Api<NodeMemoryPolicy>,
        configs: &Api<NodeMemoryConfig>,
        recorder: &Recorder,
        now: i64,
    ) {
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        for w in &d.writes {
            let existing = world.configs.get(&w.node);
            // The change time moves only with the revision.
            let changed_at = match existing {
                Some(c) if c.spec.revision == w.spec.revision => c.spec_changed_at.unwrap_or(now),
                _ => now,
            };
            let owner = w.policy_uid.as_ref().map(|uid| {
                json!([{"apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
                    "name": w.spec.policy, "uid": uid, "controller": true, "blockOwnerDeletion": false}])
            });
            let mut metadata =
                json!({"name": w.node, "annotations": {SPEC_CHANGED_AT: rfc3339(changed_at)}});
            if let Some(o) = owner {
                metadata["ownerReferences"] = o;
            }
            let patch = json!({"apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
                "metadata": metadata, "spec": w.spec});
            match configs.patch(&w.node, &apply, &Patch::Apply(&patch)).await {
                Ok(c) => {
                    self.metrics.write("config", true);
                    world.apply_config(&c);
                }
                Err(e) => {
                    self.metrics.write("config", false);
                    warn!(node = %w.node, error = %e, "NodeMemoryConfig not written; retried on the next reconcile");
                }
            }
        }
        for node in &d.deletes {
            match configs.delete(node, &DeleteParams::default()).await {
                Ok(_) => {
                    self.metrics.write("config_delete", true);
                    world.delete_config(node);
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    world.delete_config(node);
                }
                Err(e) => {
                    self.metrics.write("config_delete", false);
                    warn!(%node, error = %e, "NodeMemoryConfig not deleted; retried on the next reconcile");
                }
            }
        }
        for (name, status) in &d.statuses {
            let patch = json!({"apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
                "status": status});
            match policies
                .patch_status(name, &apply, &Patch::Apply(&patch))
                .await
            {
                Ok(p) => {
                    self.metrics.write("policy_status", true);
                    world.apply_policy(&p);
                }
                Err(e) => {
                    self.metrics.write("policy_status", false);
                    warn!(policy = %name, error = %e, "status not written; retried on the next reconcile");
                }
            }
        }
        for e in &d.events {
            let Some(p) = world.policies.get(&e.policy) else {
                continue;
            };
            let reference = ObjectReference {
                api_version: Some("nodemem.io/v1alpha1".into()),
                kind: Some("NodeMemoryPolicy".into()),
                name: Some(e.policy.clone()),
                uid: p.uid.clone(),
                ..ObjectReference::default()
            };
            info!(policy = %e.policy, reason = e.reason, message = %e.message, "rollout");
            let event = KubeEvent {
                type_: if e.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: e.reason.to_string(),
                note: Some(e.message.chars().take(1000).collect()),
                action: "Rollout".into(),
                secondary: None,
            };
            if let Err(err) = recorder.publish(&event, &reference).await {
                warn!(error = %err, "event not recorded");
            }
        }
    }
}
