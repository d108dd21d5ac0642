//! What the plugin reads from the cluster.

use k8s_openapi::api::core::v1 as core;
use kube::api::ListParams;
use kube::{Api, Client};
use nodemem_api::{NodeMemoryConfig, NodeMemoryPolicy};

pub use nodemem_plumbing::kubeclient::{api_error, client};
use nodemem_plumbing::CliError;

/// Policies, Nodes and NodeMemoryConfigs of the whole cluster.
pub struct Snapshot {
    pub policies: Vec<NodeMemoryPolicy>,
    pub nodes: Vec<core::Node>,
    pub configs: Vec<NodeMemoryConfig>,
}

impl Snapshot {
    pub async fn read(client: &Client) -> Result<Self, CliError> {
        let lp = ListParams::default();
        let policies = Api::<NodeMemoryPolicy>::all(client.clone())
            .list(&lp)
            .await
            .map_err(|e| api_error("listing NodeMemoryPolicies", e))?
            .items;
        let nodes = Api::<core::Node>::all(client.clone())
            .list(&lp)
            .await
            .map_err(|e| api_error("listing Nodes", e))?
            .items;
        let configs = Api::<NodeMemoryConfig>::all(client.clone())
            .list(&lp)
            .await
            .map_err(|e| api_error("listing NodeMemoryConfigs", e))?
            .items;
        Ok(Snapshot {
            policies,
            nodes,
            configs,
        })
    }

    pub fn config(&self, node: &str) -> Option<&NodeMemoryConfig> {
        self.configs
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(node))
    }

    pub fn policy(&self, name: &str) -> Option<&NodeMemoryPolicy> {
        self.policies
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
    }
}

/// The pods bound to `node` and every namespace (for the opt-out label).
pub async fn node_pods(
    client: &Client,
    node: &str,
) -> Result<(Vec<core::Pod>, Vec<core::Namespace>), CliError> {
    let pods = Api::<core::Pod>::all(client.clone())
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map_err(|e| api_error(&format!("listing the pods of node {node}"), e))?
        .items;
    let namespaces = namespaces(client).await?;
    Ok((pods, namespaces))
}

pub async fn namespaces(client: &Client) -> Result<Vec<core::Namespace>, CliError> {
    Ok(Api::<core::Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| api_error("listing Namespaces", e))?
        .items)
}

/// Past this many nodes one list of every pod costs the apiserver less than one list
/// per node.
const NODES_LISTED_ONE_BY_ONE: usize = 32;

/// The pods bound to `nodes`, by node name: a list per node (its field selector), or
/// every bound pod at once for many nodes.
pub async fn pods_of_nodes(
    client: &Client,
    nodes: &[String],
) -> Result<std::collections::BTreeMap<String, Vec<core::Pod>>, CliError> {
    if nodes.len() > NODES_LISTED_ONE_BY_ONE {
        let mut all = pods_by_node(client).await?;
        all.retain(|n, _| nodes.contains(n));
        return Ok(all);
    }
    let mut out = std::collections::BTreeMap::new();
    for node in nodes {
        let pods = Api::<core::Pod>::all(client.clone())
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await
            .map_err(|e| api_error(&format!("listing the pods of node {node}"), e))?
            .items;
        out.insert(node.clone(), pods);
    }
    Ok(out)
}

/// Every bound pod, by node name.
pub async fn pods_by_node(
    client: &Client,
) -> Result<std::collections::BTreeMap<String, Vec<core::Pod>>, CliError> {
    let pods = Api::<core::Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| api_error("listing Pods", e))?
        .items;
    let mut out: std::collections::BTreeMap<String, Vec<core::Pod>> = Default::default();
    for pod in pods {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
            out.entry(node).or_default().push(pod);
        }
    }
    Ok(out)
}
