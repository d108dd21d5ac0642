//! Draining nodes for a Kubelet-mode Memory Manager change: the decision's drain orders
//! cordon a node and evict its pods through the Eviction API in the background (as
//! `kubectl drain` does), marking it drained when done; its uncordon orders give the
//! nodes back.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use serde_json::json;
use tracing::{info, warn};

use crate::decision::Decision;
use crate::metrics::Metrics;
use crate::world::{World, DRAIN_DONE, DRAIN_FOR, DRAIN_STARTED};

/// A time as RFC 3339, as the annotations carry it.
pub(crate) fn rfc3339(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .unwrap_or_default()
        .to_string()
}

/// What the decision's drains are carried out with: the client, the write metrics, and
/// the drains running in the background (node, revision), shared with them.
pub(crate) struct Drains<'a> {
    pub client: &'a Client,
    pub metrics: &'a Arc<Metrics>,
    pub running: &'a Arc<Mutex<BTreeSet<(String, String)>>>,
}

impl Drains<'_> {
    /// Cordons and drains the nodes a Kubelet-mode Memory Manager change needs drained
    /// (each drain runs in the background and marks the node done), and uncordons the
    /// nodes it gave back.
    pub(crate) async fn carry_out(&self, d: &Decision, world: &mut World, now: i64) {
        let client = self.client;
        let nodes: Api<Node> = Api::all(client.clone());
        for order in &d.drains {
            let marked = world
                .drains
                .get(&order.node)
                .is_some_and(|m| m.revision == order.revision);
            if !marked {
                let patch = json!({"spec": {"unschedulable": true}, "metadata": {"annotations": {
                    DRAIN_FOR: order.revision, DRAIN_STARTED: rfc3339(now), DRAIN_DONE: null}}});
                match nodes
                    .patch(&order.node, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(n) => {
                        self.metrics.write("node_cordon", true);
                        info!(node = %order.node, revision = %order.revision, "cordoned to drain before a Kubelet Memory Manager change");
                        world.apply_node_meta(&n.metadata);
                    }
                    Err(e) => {
                        self.metrics.write("node_cordon", false);
                        warn!(node = %order.node, error = %e, "not cordoned; retried on the next reconcile");
                        continue;
                    }
                }
            }
            let key = (order.node.clone(), order.revision.clone());
            if !self
                .running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key.clone())
            {
                continue;
            }
            let started = world.drains.get(&order.node).map_or(now, |m| m.started_at);
            let deadline = started + order.deadline_seconds as i64;
            let client = client.clone();
            let running = self.running.clone();
            let metrics = self.metrics.clone();
            tokio::spawn(async move {
                drain(&client, &key.0, &key.1, deadline, &metrics).await;
                running
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&key);
            });
        }
        for node in &d.uncordons {
            let patch = json!({"spec": {"unschedulable": null}, "metadata": {"annotations": {
                DRAIN_FOR: null, DRAIN_STARTED: null, DRAIN_DONE: null}}});
            match nodes
                .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(n) => {
                    self.metrics.write("node_uncordon", true);
                    info!(%node, "uncordoned");
                    world.apply_node_meta(&n.metadata);
                }
                Err(e) => {
                    self.metrics.write("node_uncordon", false);
                    warn!(%node, error = %e, "not uncordoned; retried on the next reconcile");
                }
            }
        }
    }
}

/// Evicts the node's pods through the Eviction API (PodDisruptionBudgets are the
/// apiserver's to enforce: a refused eviction is retried) until none is left to evict,
/// then marks the node drained for `revision`; gives up at `deadline` (the rollout
/// counts the node as failed). DaemonSet pods and mirror pods are not evicted, as with
/// `kubectl drain`.
async fn drain(client: &Client, node: &str, revision: &str, deadline: i64, metrics: &Metrics) {
    use k8s_openapi::api::core::v1::Pod;
    let pods: Api<Pod> = Api::all(client.clone());
    let on_node = kube::api::ListParams::default().fields(&format!("spec.nodeName={node}"));
    let nodes: Api<Node> = Api::all(client.clone());
    loop {
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        // A newer decision (another revision, or the node given back) ends this drain.
        let still_wanted = nodes.get(node).await.ok().is_some_and(|n| {
            n.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DRAIN_FOR))
                == Some(&revision.to_string())
        });
        if !still_wanted {
            info!(%node, %revision, "drain no longer wanted");
            return;
        }
        if now > deadline {
            warn!(%node, %revision, "drain did not finish before the deadline; the node counts as failed");
            return;
        }
        let listed = match pods.list(&on_node).await {
            Ok(l) => l.items,
            Err(e) => {
                warn!(%node, error = %e, "cannot list the node's pods; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
        };
        let evictable: Vec<&Pod> = listed.iter().filter(|p| evictable(p)).collect();
        if evictable.is_empty() {
            break;
        }
        for p in evictable {
            let (Some(ns), Some(name)) =
                (p.metadata.namespace.as_deref(), p.metadata.name.as_deref())
            else {
                continue;
            };
            let api: Api<Pod> = Api::namespaced(client.clone(), ns);
            match api.evict(name, &kube::api::EvictParams::default()).await {
                Ok(_) => {
                    metrics.write("eviction", true);
                    info!(%node, pod = %format!("{ns}/{name}"), "evicted");
                }
                Err(kube::Error::Api(s)) if s.code == 429 => {
                    info!(%node, pod = %format!("{ns}/{name}"), "eviction refused by a PodDisruptionBudget; retrying");
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    metrics.write("eviction", false);
                    warn!(%node, pod = %format!("{ns}/{name}"), error = %e, "eviction failed; retrying");
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let patch = json!({"metadata": {"annotations": {DRAIN_DONE: revision}}});
    match nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => info!(%node, %revision, "drained"),
        Err(e) => {
            warn!(%node, error = %e, "drained, but the mark was not written; the next reconcile drains again")
        }
    }
}

/// What `kubectl drain` evicts: not pods that belong to a DaemonSet (the agent's own
/// among them), not mirror (static) pods, not finished pods.
fn evictable(p: &k8s_openapi::api::core::v1::Pod) -> bool {
    let daemon = p
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet");
    let mirror = p
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    let finished = matches!(
        p.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    );
    !(daemon || mirror || finished)
}
