//! `nodemem simulate`: what nodemem would write on one node, computed from a policy,
//! a Node and its Pods, without a cluster. Users run it in CI before a rollout.

mod numa;
mod output;

use std::path::PathBuf;

use k8s_openapi::api::core::v1 as core;
use nodemem_api::convert::governing;
use nodemem_api::k8s::{
    node_allocatable_memory, node_capacity_memory, node_kernel_version, node_labels,
    node_pod_from_k8s, node_status_facts,
};
use nodemem_model::kubelet::eviction::MemoryEviction;
use nodemem_model::kubelet::version::QosRules;
use nodemem_model::node::{desired_node, NodeError, NodeFacts, NodeInput, NodePod};
use nodemem_model::numa::NumaTopology;
use nodemem_model::pod::Pod;
use nodemem_model::values::memory_qos::NodeMemoryFacts;
use nodemem_model::Warning;

use nodemem_plumbing::flags::ScopeArg;
use nodemem_plumbing::manifests::{read_documents, read_node_pods, read_policies, typed, Document};
use nodemem_plumbing::CliError;

pub use numa::{parse_topology, read_topology};
pub use output::{render_json, render_table, SimulateOutput};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Json,
    Table,
}

/// Arguments of `nodemem simulate`.
#[derive(Clone, Debug, clap::Args)]
pub struct SimulateArgs {
    /// NodeMemoryPolicy manifest(s); with several, the node's winning policy is used.
    #[arg(long)]
    pub policy: PathBuf,
    /// A core/v1 Node manifest.
    #[arg(long)]
    pub node: PathBuf,
    /// Pod manifests: a multi-document YAML stream or a v1 List.
    #[arg(long)]
    pub pods: PathBuf,
    /// NUMA topology (`numaNodes: [{id, memory: {memory: 16Gi, hugepages-2Mi: 1Gi}}]`):
    /// with a Static memoryManager policy, pods are admitted in file order and pinned.
    #[arg(long)]
    pub numa: Option<PathBuf>,
    /// The kubelet's topologyManagerScope the Memory Manager hints are computed for.
    #[arg(long, value_enum, default_value_t = ScopeArg::Container)]
    pub topology_manager_scope: ScopeArg,
    /// Base page size of the node in bytes.
    #[arg(long, default_value_t = 4096)]
    pub page_size: i64,
    /// The node's kubelet configuration file (KubeletConfiguration): its evictionHard
    /// `memory.available`, which the kubelet's memory.high ceiling for containers
    /// without a limit adds back to the Node's allocatable. Without it, the kubelet's
    /// default (100Mi).
    #[arg(long)]
    pub kubelet_config: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

/// Runs the simulation and renders it.
pub fn run(args: &SimulateArgs) -> Result<String, CliError> {
    let policies = read_documents(&args.policy)?;
    let nodes = read_documents(&args.node)?;
    let pods = read_documents(&args.pods)?;
    let topology = match &args.numa {
        Some(path) => Some((path.display().to_string(), read_topology(path)?)),
        None => None,
    };
    let numa = topology.as_ref().map(|(origin, topology)| NumaInput {
        origin: origin.clone(),
        topology,
        scope: args.topology_manager_scope.into(),
    });
    let result = simulate(
        &policies,
        &nodes,
        &pods,
        args.page_size,
        numa,
        kubelet_hard_eviction(args.kubelet_config.as_deref())?,
    )?;
    Ok(match args.output {
        OutputFormat::Json => render_json(&result),
        OutputFormat::Table => render_table(&result),
    })
}

/// `--numa`: the node's NUMA topology and the topology manager scope.
pub struct NumaInput<'a> {
    /// The topology file, for messages.
    pub origin: String,
    pub topology: &'a NumaTopology,
    pub scope: nodemem_model::numa::Scope,
}

/// The kubelet's `memory.available` hard eviction threshold from its configuration
/// file, or its default without one.
fn kubelet_hard_eviction(config: Option<&std::path::Path>) -> Result<MemoryEviction, CliError> {
    let Some(config) = config else {
        return Ok(nodemem_apply::kubelet::KubeletSettings::default().memory_eviction);
    };
    let files = nodemem_apply::kubelet::KubeletFiles::given(config.to_path_buf(), None);
    match files.read(nodemem_apply::kubelet::OwnDropIn::Without) {
        Ok(k) => Ok(k.memory_eviction),
        Err(e) => Err(CliError::one(format!("--kubelet-config {e}"))),
    }
}

/// The simulation on already-read documents; every input problem is collected before
/// failing, so one run shows everything to fix.
pub fn simulate(
    policy_docs: &[Document],
    node_docs: &[Document],
    pod_docs: &[Document],
    page_size: i64,
    numa: Option<NumaInput<'_>>,
    eviction: MemoryEviction,
) -> Result<SimulateOutput, CliError> {
    let mut problems = Vec::new();
    if page_size <= 0 || (page_size & (page_size - 1)) != 0 {
        problems.push(format!(
            "--page-size: must be a positive power of two, found {page_size}"
        ));
    }

    let policies = read_policies(policy_docs, &mut problems);
    let node = read_node(node_docs, &mut problems);
    let pods = read_pods(pod_docs, &mut problems);
    if !problems.is_empty() {
        return Err(CliError::many(problems));
    }
    let (node_name, node, status) = node.expect("no problems means the node was read");

    // The node's current policy is not known from files: a tie goes to the oldest.
    let resolution = governing(policies.iter().map(|(p, _)| p), &node_labels(&node), None);
    let model_pods: Vec<Pod> = pods.iter().map(|p| p.pod().clone()).collect();
    let Some(winner) = resolution.winner.clone() else {
        return Ok(SimulateOutput::unmanaged(&node_name, &model_pods));
    };
    let (_, settings) = policies
        .iter()
        .find(|(p, _)| p.metadata.name.as_deref() == Some(winner.as_str()))
        .expect("the winner is one of the candidates");

    let facts = NodeFacts {
        memory: NodeMemoryFacts {
            allocatable_memory: status.allocatable_memory,
            capacity_memory: status.capacity_memory,
            // A percentage is a fraction of the node's capacity, as the kubelet counts it.
            hard_eviction_memory: eviction.bytes(status.capacity_memory),
            page_size,
            kernel_version: node_kernel_version(&node),
            kubelet_version: status.kubelet_version(),
            kubelet_float: status.kubelet_float(),
        },
        topology: numa.as_ref().map(|n| n.topology.clone()),
        topology_scope: numa.as_ref().map(|n| n.scope).unwrap_or_default(),
        ..NodeFacts::default()
    };
    let desired = desired_node(NodeInput {
        settings,
        facts: &facts,
        pods: &pods,
        memory_manager: None,
    })
    .map_err(|NodeError::ReservedMemory(problems)| {
        let origin = numa.as_ref().map(|n| n.origin.as_str()).unwrap_or("");
        CliError::many(
            problems
                .iter()
                .map(|p| format!("{origin} with policy {winner}: {p}"))
                .collect(),
        )
    })?;

    let mut warnings = Vec::new();
    if !resolution.conflicting.is_empty() {
        warnings.push(format!(
            "policies {} have the same priority as {winner} and also select this node; {winner} wins by name",
            resolution.conflicting.join(", ")
        ));
    }
    // Two warnings are worded for the command line: they name the file and the flag.
    warnings.extend(desired.warnings.iter().map(|w| match w {
        Warning::TopologyWithoutStaticPolicy => format!(
            "{}: policy {winner} has memoryManager policy None; no pod is pinned to NUMA nodes",
            numa.as_ref().map(|n| n.origin.as_str()).unwrap_or("--numa")
        ),
        Warning::StaticPolicyWithoutTopology => format!(
            "policy {winner} uses the Static memoryManager policy; pass --numa TOPOLOGY to see NUMA pinning"
        ),
        other => other.to_string(),
    }));
    let rules = QosRules::applied(status.kubelet_version.as_deref());
    Ok(SimulateOutput::from_desired(
        &node_name, &winner, rules, &desired, warnings,
    ))
}

/// The Node, its name and its allocatable memory (parsed once, here).
fn read_node(
    docs: &[Document],
    problems: &mut Vec<String>,
) -> Option<(
    String,
    core::Node,
    nodemem_model::node::status::NodeStatusFacts,
)> {
    let [doc] = docs else {
        problems.push(format!(
            "--node: expected exactly one Node, found {} objects",
            docs.len()
        ));
        return None;
    };
    if doc.kind() != Some("Node") {
        problems.push(format!(
            "{}: expected kind Node, found {}",
            doc.origin,
            doc.kind().unwrap_or("none")
        ));
        return None;
    }
    match typed::<core::Node>(doc) {
        Ok(node) => {
            let name = node.metadata.name.clone().unwrap_or_default();
            let unreadable: Vec<_> = [node_allocatable_memory(&node), node_capacity_memory(&node)]
                .into_iter()
                .filter_map(Result::err)
                .collect();
            if unreadable.is_empty() {
                let status = node_status_facts(&node);
                return Some((name, node, status));
            }
            for p in unreadable {
                problems.push(format!("{}: {}: {p}", doc.origin, doc.describe()));
            }
            None
        }
        Err(e) => {
            problems.extend(e.problems);
            None
        }
    }
}

fn read_pods(docs: &[Document], problems: &mut Vec<String>) -> Vec<NodePod> {
    let mut pods = Vec::new();
    for (doc, k8s_pod, namespace) in read_node_pods(docs, problems) {
        match node_pod_from_k8s(&k8s_pod, &namespace) {
            Ok(pod) => pods.push(pod),
            Err(ps) => problems.extend(
                ps.into_iter()
                    .map(|p| format!("{}: {}: {p}", doc.origin, doc.describe())),
            ),
        }
    }
    pods
}
