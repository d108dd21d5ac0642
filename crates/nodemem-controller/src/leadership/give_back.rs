//! Before an uninstall (`nodemem stand-down --give-back`, the chart's pre-delete hook,
//! run once the controller is scaled to zero): every node gets back what its kubelet
//! writes, and then nothing nodemem made is left but Events and the user's policies.
//!
//! 1. Each NodeMemoryConfig gets the released settings (everything off: its agent gives
//!    back every value nodemem set, as when no policy selects the node any more).
//! 2. The agents' reports on them are awaited (Applied on the released revision), up
//!    to a deadline; a node whose agent does not report is named.
//! 3. The configs, the controller's Lease and the agent DaemonSet are deleted (its pods
//!    go with it).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::Client;
use nodemem_api::revision::revision;
use nodemem_api::{NodeMemoryConfig, NodeMemoryConfigSpec};
use tracing::{info, warn};

use crate::decide::settings::released_settings;
use crate::write::field_managers::FIELD_MANAGER;

/// What the give-back did.
#[derive(Debug, Default)]
pub struct GivenBack {
    /// Nodes whose agent reported the released settings applied.
    pub reported: usize,
    /// Nodes whose agent did not within the deadline (their values stay as they were).
    pub unreported: Vec<String>,
}

/// The released spec for a config that runs `spec`: same policy and health gates.
fn released(spec: &NodeMemoryConfigSpec) -> NodeMemoryConfigSpec {
    let settings = released_settings();
    NodeMemoryConfigSpec {
        policy: spec.policy.clone(),
        revision: revision(&settings),
        settings,
        health: spec.health.clone(),
    }
}

/// Whether the agent reports `c`'s released spec applied and healthy (the rule the
/// rollouts gate on, `nodemem_api::report`).
fn applied(c: &NodeMemoryConfig) -> bool {
    let entry = nodemem_api::report::ConfigEntry::from(c);
    matches!(
        nodemem_api::report::report(&entry, 0),
        nodemem_model::cluster::rollout::AgentReport::Good { .. }
    )
}

/// Gives every node back to its kubelet and removes what the controller made in
/// `namespace` (its Lease `lease`, the DaemonSet `daemonset`). Waits up to `timeout`
/// for the agents.
pub async fn give_back(
    client: &Client,
    namespace: &str,
    lease: &str,
    daemonset: &str,
    timeout: Duration,
) -> Result<GivenBack, String> {
    let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
    let listed = configs
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("listing the NodeMemoryConfigs: {e}"))?;
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let mut waiting = BTreeSet::new();
    for c in &listed.items {
        let Some(node) = c.metadata.name.clone() else {
            continue;
        };
        let patch = serde_json::json!({"apiVersion": "nodemem.io/v1alpha1",
            "kind": "NodeMemoryConfig", "metadata": {"name": node}, "spec": released(&c.spec)});
        configs
            .patch(&node, &apply, &Patch::Apply(&patch))
            .await
            .map_err(|e| format!("NodeMemoryConfig {node}: {e}"))?;
        waiting.insert(node);
    }
    info!(
        nodes = waiting.len(),
        "every node's config releases what nodemem set; waiting for the agents"
    );
    let mut done = GivenBack::default();
    let deadline = Instant::now() + timeout;
    while !waiting.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let Ok(now) = configs.list(&ListParams::default()).await else {
            continue;
        };
        for c in now.items.iter().filter(|c| applied(c)) {
            if let Some(node) = c.metadata.name.as_ref().filter(|n| waiting.remove(*n)) {
                info!(%node, "the agent gave back what nodemem set");
                done.reported += 1;
            }
        }
    }
    done.unreported = waiting.into_iter().collect();
    if !done.unreported.is_empty() {
        warn!(nodes = %done.unreported.join(", "), timeout_s = timeout.as_secs(), "these agents did not report the release in time: their nodes keep the values they had until the kubelet or a reboot changes them");
    }
    remove_everything(client, namespace, lease, daemonset).await?;
    Ok(done)
}

/// Deletes every NodeMemoryConfig, the Lease and the DaemonSet (each may be gone).
async fn remove_everything(
    client: &Client,
    namespace: &str,
    lease: &str,
    daemonset: &str,
) -> Result<(), String> {
    let gone = |r: Result<_, kube::Error>, what: &str| match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(format!("deleting {what}: {e}")),
    };
    // One by one: the controller's RBAC deletes configs, it does not delete collections.
    let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
    let listed = configs
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| format!("listing the NodeMemoryConfigs: {e}"))?;
    for name in listed.items.into_iter().filter_map(|c| c.metadata.name) {
        gone(
            configs
                .delete(&name, &DeleteParams::default())
                .await
                .map(|_| ()),
            &format!("NodeMemoryConfig {name}"),
        )?;
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    gone(
        leases
            .delete(lease, &DeleteParams::default())
            .await
            .map(|_| ()),
        &format!("Lease {namespace}/{lease}"),
    )?;
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), namespace);
    gone(
        daemonsets
            .delete(daemonset, &DeleteParams::foreground())
            .await
            .map(|_| ()),
        &format!("DaemonSet {namespace}/{daemonset}"),
    )?;
    wait_gone(&daemonsets, daemonset).await;
    info!("deleted every NodeMemoryConfig, the controller's Lease and the agent DaemonSet");
    release_pod_security_labels(client, namespace).await;
    Ok(())
}

/// Takes back the PodSecurity labels the controller put on its namespace for the
/// agents (`--agent-pod-security-labels`) and only those: an apply of the Namespace
/// that names no label, by the same field manager, removes the labels that manager
/// alone set and leaves any someone else set or also set (server-side apply's
/// ownership). A failure is logged: the labels stay, nothing else depends on it.
async fn release_pod_security_labels(client: &Client, namespace: &str) {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let nothing = serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": namespace}});
    match namespaces
        .patch(
            namespace,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&nothing),
        )
        .await
    {
        Ok(_) => info!(%namespace, "released the PodSecurity labels the controller had set"),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => {
            warn!(%namespace, error = %e, "the PodSecurity labels the controller set stay on its namespace")
        }
    }
}

/// Seconds the hook waits for the agent DaemonSet to be gone: a foreground deletion
/// waits for its pods, which their kubelets take down (their own grace period).
const DAEMONSET_GONE_SECONDS: u64 = 60;

/// Waits until the DaemonSet is gone (its pods with it), so that `helm uninstall`
/// returns with nothing of nodemem's left; warns with what is left after the wait.
async fn wait_gone(daemonsets: &Api<DaemonSet>, name: &str) {
    let deadline =
        tokio::time::Instant::now() + std::time::Duration::from_secs(DAEMONSET_GONE_SECONDS);
    loop {
        match daemonsets.get_opt(name).await {
            Ok(None) => return,
            Ok(Some(_)) if tokio::time::Instant::now() < deadline => {}
            Ok(Some(ds)) => {
                let pods = ds.status.map_or(0, |s| s.current_number_scheduled);
                warn!(daemonset = name, pods, "the agent DaemonSet is still being deleted (its pods are terminating); it goes once they are");
                return;
            }
            Err(e) => {
                warn!(daemonset = name, error = %e, "cannot read the agent DaemonSet while it is deleted");
                return;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
}
