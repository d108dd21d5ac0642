//! The agent DaemonSet's upkeep, after each decision: built again when what it reads
//! changed (the pools and the nodes that still hold configs), and applied again when
//! someone else deleted or edited it; the namespace's PodSecurity labels before the
//! first write; the controller's Deployment as its owner once it can be read.

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use tracing::{info, warn};

use crate::agents::blocked::DaemonSetVersion;
use crate::agents::daemonset::{agent_daemonset, AgentDeploy};
use crate::metrics::Metrics;
use crate::world::World;
use crate::write::field_managers::FIELD_MANAGER;

pub(crate) struct AgentUpkeep {
    deploy: AgentDeploy,
    api: Api<DaemonSet>,
    /// The controller's own Deployment (the DaemonSet's owner), if it has one.
    deployment: Option<String>,
    /// The DaemonSet last applied, and what the apiserver answered: a newer
    /// generation, another uid or none seen by its watch is someone else's doing.
    applied: Option<(DaemonSet, DaemonSetVersion)>,
    /// The namespace's PodSecurity labels, once applied (or not asked for).
    labelled: bool,
    /// The world's placement count the DaemonSet was last built for.
    placed: Option<u64>,
}

impl AgentUpkeep {
    pub(crate) fn new(client: &Client, deploy: AgentDeploy, deployment: Option<String>) -> Self {
        AgentUpkeep {
            api: Api::namespaced(client.clone(), &deploy.namespace),
            labelled: !deploy.pod_security_labels,
            deploy,
            deployment,
            applied: None,
            placed: None,
        }
    }

    /// Applies the DaemonSet when the world asks for another one or someone else
    /// deleted or edited it; a failed write is tried again after the next decision.
    pub(crate) async fn keep(&mut self, client: &Client, metrics: &Metrics, world: &World) {
        let drifted = world.agents.as_ref().is_some_and(|a| {
            a.daemonset_drifted(self.applied.as_ref().map(|(_, version)| version))
        });
        if drifted && self.applied.is_some() {
            warn!(
                daemonset = crate::agents::daemonset::NAME,
                "the agent DaemonSet was deleted or changed by someone else; applying it again"
            );
            self.applied = None;
        }
        if self.placed == Some(world.placement()) && !drifted {
            return;
        }
        if self.deploy.owner.is_none() {
            self.deploy.owner = self.owner(client).await;
        }
        if !self.labelled {
            self.labelled = label_namespace(client, metrics, &self.deploy.namespace).await;
        }
        let wanted = agent_daemonset(&self.deploy, world);
        if self.applied.as_ref().map(|(ds, _)| ds) == Some(&wanted) {
            self.placed = Some(world.placement());
            return;
        }
        let apply = PatchParams::apply(FIELD_MANAGER).force();
        match self
            .api
            .patch(
                crate::agents::daemonset::NAME,
                &apply,
                &Patch::Apply(&wanted),
            )
            .await
        {
            Ok(written) => {
                metrics.write("daemonset", true);
                info!("agent DaemonSet updated");
                let version = DaemonSetVersion {
                    uid: written.metadata.uid.unwrap_or_default(),
                    generation: written.metadata.generation.unwrap_or(0),
                };
                self.applied = Some((wanted, version));
                self.placed = Some(world.placement());
            }
            Err(e) => {
                metrics.write("daemonset", false);
                warn!(error = %e, "agent DaemonSet not written; retried on the next reconcile");
            }
        }
    }

    /// The controller's Deployment as the DaemonSet's owner (name, uid), when it has
    /// one and it can be read (otherwise the DaemonSet has no owner).
    async fn owner(&self, client: &Client) -> Option<(String, String)> {
        let name = self.deployment.as_ref()?;
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(client.clone(), &self.deploy.namespace);
        match deployments.get_opt(name).await {
            Ok(d) => d
                .and_then(|d| d.metadata.uid)
                .map(|uid| (name.clone(), uid)),
            Err(e) => {
                warn!(deployment = %name, error = %e, "cannot read the controller's Deployment: the agent DaemonSet gets no owner");
                None
            }
        }
    }
}

/// Applies the PodSecurity labels the agents need to their namespace; whether it is
/// done (a failure is logged and tried again with the next DaemonSet write).
async fn label_namespace(client: &Client, metrics: &Metrics, namespace: &str) -> bool {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let labels = crate::agents::daemonset::pod_security_labels(namespace);
    match namespaces
        .patch(
            namespace,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&labels),
        )
        .await
    {
        Ok(_) => {
            metrics.write("namespace", true);
            info!(%namespace, "the agents' namespace is labelled privileged for PodSecurity");
            true
        }
        Err(e) => {
            metrics.write("namespace", false);
            warn!(%namespace, error = %e, "the agents' namespace is not labelled privileged for PodSecurity (a label someone else set stays); where the cluster's default level is baseline or restricted the agents' pods are refused");
            false
        }
    }
}
