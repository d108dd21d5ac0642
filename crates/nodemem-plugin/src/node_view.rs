//! One node as the plugin sees it (pure): which policy governs it and why, and the
//! cgroup values nodemem sets there for its pods, computed by the agent's own code (the
//! agent's pod index for conversion and admission order, `desired_node` for values)
//! from the live Node, its pods and what its agent reported about the node.

use k8s_openapi::api::core::v1 as core;
use nodemem_api::convert::node_settings;
use nodemem_api::{NodeMemoryConfig, NodeMemoryPolicy};
use nodemem_model::node::{desired_node, DesiredNode, NodeFacts, NodeInput, NodePod};
use nodemem_model::numa::NumaTopology;
use nodemem_model::settings::NodeSettings;
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_model::values::memory_qos::NodeMemoryFacts;

use nodemem_api::node_index::NodeIndex;

/// The pods of a node in the agent's admission order, converted as the agent converts
/// them (namespace opt-outs included), and the pods that do not convert.
pub struct NodePods {
    pub pods: Vec<NodePod>,
    pub problems: Vec<String>,
}

pub fn node_pods(
    node: &core::Node,
    pods: &[core::Pod],
    namespaces: &[core::Namespace],
) -> NodePods {
    let name = node.metadata.name.as_deref().unwrap_or("");
    let mut index = NodeIndex::new(name);
    for ns in namespaces {
        index.apply_namespace(
            ns.metadata.name.as_deref().unwrap_or(""),
            ns.metadata.labels.as_ref(),
        );
    }
    for pod in pods {
        index.apply_pod(pod);
    }
    NodePods {
        pods: index.node_pods(),
        problems: index.pod_problems(),
    }
}

/// What the node computation needs to know of the node: its allocatable memory and
/// kernel from the Node; page size, cgroup driver and NUMA topology as its agent
/// discovered and reported them (defaults when no agent reported yet).
pub fn node_facts(node: &core::Node, config: Option<&NodeMemoryConfig>) -> NodeFacts {
    let reported = config
        .and_then(|c| c.status.as_ref())
        .and_then(|s| s.node.as_ref());
    let kernel = reported
        .and_then(|r| r.kernel_version.clone())
        .or_else(|| nodemem_api::k8s::node_kernel_version(node));
    let topology = reported
        .filter(|r| !r.numa_nodes.is_empty())
        .map(|r| NumaTopology {
            nodes: r
                .numa_nodes
                .iter()
                .map(|n| {
                    (
                        n.id as i64,
                        n.memory
                            .iter()
                            .map(|(k, m)| (k.clone(), m.capacity))
                            .collect(),
                    )
                })
                .collect(),
        });
    let status = nodemem_api::k8s::node_status_facts(node);
    NodeFacts {
        memory: NodeMemoryFacts {
            allocatable_memory: status.allocatable_memory,
            capacity_memory: status.capacity_memory,
            // The threshold the node's agent read from its kubelet's configuration;
            // until it reports, the kubelet's default evictionHard (as `nodemem
            // simulate` without --kubelet-config), bounded by capacity.
            hard_eviction_memory: reported.and_then(|r| r.hard_eviction_memory).or(Some(
                nodemem_model::cluster::policy::DEFAULT_EVICTION_HARD_MEMORY,
            )),
            page_size: reported
                .and_then(|r| r.page_size)
                .unwrap_or(NodeMemoryFacts::default().page_size),
            kernel_version: kernel,
            kubelet_version: status.kubelet_version(),
            kubelet_float: status.kubelet_float(),
        },
        cgroup_driver: match reported.and_then(|r| r.cgroup_driver.as_deref()) {
            Some("cgroupfs") => CgroupDriver::Cgroupfs,
            _ => CgroupDriver::Systemd,
        },
        topology,
        ..NodeFacts::default()
    }
}

/// The node computed for `settings`, or why it cannot be (the agent refuses the same).
pub fn compute<'p>(
    settings: &NodeSettings,
    facts: &NodeFacts,
    pods: &'p [NodePod],
) -> Result<DesiredNode<'p>, Vec<String>> {
    desired_node(NodeInput {
        settings,
        facts,
        pods,
        memory_manager: None,
    })
    .map_err(|nodemem_model::node::NodeError::ReservedMemory(ps)| {
        ps.iter().map(ToString::to_string).collect()
    })
}

/// The model settings of a policy (invalid ones name their problems).
pub fn policy_settings(p: &NodeMemoryPolicy) -> Result<NodeSettings, Vec<String>> {
    node_settings(&p.spec.settings).map_err(|ps| ps.iter().map(ToString::to_string).collect())
}

/// The model settings a node's config carries (what its agent enforces now).
pub fn config_settings(c: &NodeMemoryConfig) -> Result<NodeSettings, Vec<String>> {
    node_settings(&c.spec.settings).map_err(|ps| ps.iter().map(ToString::to_string).collect())
}
