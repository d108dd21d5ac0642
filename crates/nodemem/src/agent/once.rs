//! `nodemem agent --once`: one node by hand, no apiserver. Discovery, the node
//! computation, the apply engine and the state directory, exactly as the in-cluster
//! agent will use them.
//!
//! Exit codes: 0 applied (or nothing to do), 1 bad input or a configuration this node
//! cannot satisfy (nothing written), 3 partial failure (some writes failed; the rest
//! were applied and are recorded).

use std::path::Path;

use k8s_openapi::api::core::v1 as core;
use nodemem_agent::numa_state;
use nodemem_agent::state::StateDir;
use nodemem_agent::{apply, ApplyOptions, ApplyReport, Ownership};
use nodemem_api::convert::node_settings;
use nodemem_api::k8s::{node_allocatable_memory, node_pod_from_k8s};
use nodemem_api::NodeMemoryConfig;
use nodemem_cgroup::discover::{discover, Discovery};
use nodemem_cgroup::{check_identifier, CgroupFs, Roots};
use nodemem_model::memory_qos::NodeMemoryFacts;
use nodemem_model::node::{desired_node, DesiredNode, NodeError, NodeFacts, NodeInput, NodePod};
use nodemem_model::numa::MachineState;
use nodemem_model::policy::{MemoryManagerPolicy, PolicySettings};
use nodemem_model::Warning;

use super::output::{render, OnceOutput};
use super::{AgentArgs, DriverArg};
use crate::error::CliError;
use crate::manifests::{check_settings, read_documents, typed, Document};
use crate::Outcome;

const OWNERSHIP_FILE: &str = "ownership.json";
const OWNERSHIP_KIND: &str = "ownership";

/// Exit code of a run where some writes failed.
pub const PARTIAL_FAILURE: u8 = 3;

struct Inputs {
    config_name: String,
    revision: String,
    settings: PolicySettings,
    node_name: String,
    allocatable: Option<i64>,
    pods: Vec<NodePod>,
}

pub fn run(args: &AgentArgs) -> Result<Outcome, CliError> {
    let (Some(config), Some(node), Some(pods)) = (&args.config, &args.node, &args.pods) else {
        return Err(CliError::one(
            "--once needs --config NMC.yaml, --node NODE.yaml and --pods PODS.yaml",
        ));
    };
    let inputs = read_inputs(config, node, pods)?;
    nodemem_cgroup::fs::raise_open_file_limit();
    let roots = Roots {
        cgroup: args.cgroup_root.clone(),
        sys: args.sys_root.clone(),
        proc: args.proc_root.clone(),
    };
    let discovery = discover(&roots, args.cgroup_driver.map(DriverArg::into))
        .map_err(|e| CliError::one(format!("discovery: {e}")))?;
    check_node_can_satisfy(&inputs.settings, &discovery)?;

    let state = StateDir::open(&args.state_dir).map_err(|e| CliError::one(e.to_string()))?;
    let mut owned: Ownership = state
        .load(OWNERSHIP_FILE, OWNERSHIP_KIND)
        .map_err(|e| CliError::one(e.to_string()))?
        .unwrap_or_default();

    let facts = NodeFacts {
        memory: NodeMemoryFacts {
            allocatable_memory: inputs.allocatable,
            page_size: discovery.page_size,
            kernel_version: Some(discovery.kernel_version.clone()),
        },
        cgroup_driver: discovery.cgroup_driver,
        topology: discovery.topology.clone(),
        topology_scope: args.topology_manager_scope.into(),
    };
    let static_policy = inputs.settings.memory_manager.policy == MemoryManagerPolicy::Static;
    let saved_manager = if static_policy {
        load_memory_manager(&state, &inputs.settings, &facts)?
    } else {
        None
    };
    let desired = desired_node(NodeInput {
        settings: &inputs.settings,
        facts: &facts,
        pods: &inputs.pods,
        memory_manager: saved_manager,
    })
    .map_err(|NodeError::ReservedMemory(problems)| {
        CliError::many(
            problems
                .iter()
                .map(|p| format!("{}: this node cannot satisfy it: {p}", inputs.config_name))
                .collect(),
        )
    })?;

    let fs = CgroupFs::new(&roots.cgroup);
    let report = apply(
        &fs,
        &desired.cgroups(),
        &mut owned,
        ApplyOptions {
            dry_run: args.dry_run,
            page_size: discovery.page_size,
        },
    );
    if !args.dry_run {
        save_state(&state, &owned, &desired, static_policy)?;
    }
    let output = OnceOutput::new(
        &inputs.node_name,
        &inputs.config_name,
        &inputs.revision,
        args.dry_run,
        &desired,
        &report,
    );
    Ok(Outcome {
        stdout: render(&output, args.output),
        stderr: problems_of(&report),
        code: if report.ok() { 0 } else { PARTIAL_FAILURE },
    })
}

fn problems_of(report: &ApplyReport) -> Vec<String> {
    report
        .refused
        .iter()
        .cloned()
        .chain(report.failed.iter().map(|f| f.error.clone()))
        .collect()
}

fn save_state(
    state: &StateDir,
    owned: &Ownership,
    desired: &DesiredNode,
    static_policy: bool,
) -> Result<(), CliError> {
    let err = |e: nodemem_agent::StateError| CliError::one(e.to_string());
    state
        .save(OWNERSHIP_FILE, OWNERSHIP_KIND, owned)
        .map_err(err)?;
    match (&desired.memory_manager, static_policy) {
        (Some(manager), _) => numa_state::save(state, manager).map_err(err),
        (None, false) => numa_state::clear(state).map_err(err),
        (None, true) => Ok(()),
    }
}

/// The saved Memory Manager state, checked against this node's topology and the
/// configuration's reservedMemory. A mismatch stops the run: nothing is written.
fn load_memory_manager(
    state: &StateDir,
    settings: &PolicySettings,
    facts: &NodeFacts,
) -> Result<Option<nodemem_model::numa::MemoryManager>, CliError> {
    let Some(topology) = &facts.topology else {
        return Ok(None);
    };
    // A reservedMemory that does not fit is reported by the node computation.
    let Ok(fresh) = MachineState::new(topology, &settings.memory_manager.reserved_memory) else {
        return Ok(None);
    };
    numa_state::load(state, &fresh, facts.topology_scope).map_err(|e| CliError::one(e.to_string()))
}

/// Settings this node cannot carry out are refused before anything is written.
fn check_node_can_satisfy(settings: &PolicySettings, d: &Discovery) -> Result<(), CliError> {
    let mut problems = Vec::new();
    if settings.memory_qos.enabled && !d.has_controller("memory") {
        problems.push("the memory controller is not available at kubepods (cgroup.controllers); Memory QoS cannot be applied".to_string());
    }
    if settings.memory_manager.policy == MemoryManagerPolicy::Static {
        if !d.has_controller("cpuset") {
            problems.push("the Static memoryManager policy needs the cpuset controller at kubepods (cgroup.controllers), which this node does not offer".to_string());
        }
        if d.topology.is_none() {
            problems.push("the Static memoryManager policy needs NUMA nodes in sysfs (devices/system/node), and this node shows none".to_string());
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CliError::many(problems))
    }
}

fn read_inputs(config: &Path, node: &Path, pods: &Path) -> Result<Inputs, CliError> {
    let mut problems = Vec::new();
    let config_docs = read_documents(config)?;
    let node_docs = read_documents(node)?;
    let pod_docs = read_documents(pods)?;

    let config = match one_of(&config_docs, "--config", "NodeMemoryConfig", &mut problems) {
        Some(doc) if doc.api_version() != Some("nodemem.io/v1alpha1") => {
            problems.push(format!(
                "{}: expected apiVersion nodemem.io/v1alpha1",
                doc.origin
            ));
            None
        }
        Some(doc) => match check_settings(doc).and_then(|()| typed::<NodeMemoryConfig>(doc)) {
            Ok(c) => Some((doc.origin.clone(), c)),
            Err(e) => {
                problems.extend(e.problems);
                None
            }
        },
        None => None,
    };
    let settings = config.as_ref().and_then(|(origin, c)| {
        node_settings(&c.spec.settings)
            .map_err(|ps| problems.extend(ps.iter().map(|p| format!("{origin}: {p}"))))
            .ok()
    });
    let node = one_of(&node_docs, "--node", "Node", &mut problems).and_then(|doc| {
        typed::<core::Node>(doc)
            .map_err(|e| problems.extend(e.problems))
            .ok()
            .map(|n| (doc.origin.clone(), n))
    });
    let node_name = node
        .as_ref()
        .and_then(|(_, n)| n.metadata.name.clone())
        .unwrap_or_default();
    let allocatable = node.as_ref().and_then(|(origin, n)| {
        node_allocatable_memory(n)
            .map_err(|p| problems.push(format!("{origin}: {p}")))
            .ok()
            .flatten()
    });
    let pods = read_pods(&pod_docs, &node_name, &mut problems);
    if !problems.is_empty() {
        return Err(CliError::many(problems));
    }
    let (config_origin, config) = config.expect("no problems means the config was read");
    let config_name = config.metadata.name.clone().unwrap_or(config_origin);
    Ok(Inputs {
        config_name,
        revision: config.spec.revision.clone(),
        settings: settings.expect("no problems means the settings converted"),
        node_name,
        allocatable,
        pods,
    })
}

fn one_of<'a>(
    docs: &'a [Document],
    flag: &str,
    kind: &str,
    problems: &mut Vec<String>,
) -> Option<&'a Document> {
    match docs {
        [doc] if doc.kind() == Some(kind) => Some(doc),
        [doc] => {
            problems.push(format!(
                "{}: expected kind {kind}, found {}",
                doc.origin,
                doc.kind().unwrap_or("none")
            ));
            None
        }
        _ => {
            problems.push(format!(
                "{flag}: expected exactly one {kind}, found {} objects",
                docs.len()
            ));
            None
        }
    }
}

/// The pods the kubelet runs on this node: terminated pods (Succeeded, Failed) have no
/// cgroups left and are not counted, as in the kubelet's active-pod sums.
fn read_pods(docs: &[Document], node_name: &str, problems: &mut Vec<String>) -> Vec<NodePod> {
    let mut out = Vec::new();
    for doc in docs {
        if doc.kind() != Some("Pod") {
            problems.push(format!(
                "{}: expected kind Pod, found {}",
                doc.origin,
                doc.kind().unwrap_or("none")
            ));
            continue;
        }
        let pod: core::Pod = match typed(doc) {
            Ok(p) => p,
            Err(e) => {
                problems.extend(e.problems);
                continue;
            }
        };
        let at = format!("{}: {}", doc.origin, doc.describe());
        let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        if let Some(bound) = bound.filter(|b| !node_name.is_empty() && *b != node_name) {
            problems.push(format!(
                "{at}: spec.nodeName is {bound}, not this node ({node_name})"
            ));
            continue;
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded") | Some("Failed")) {
            continue;
        }
        match node_pod_from_k8s(&pod, false) {
            Ok(p) => {
                let mut bad = Vec::new();
                if let Err(e) = check_identifier("pod UID", &p.pod().uid) {
                    bad.push(e.to_string());
                }
                for id in p.container_ids().values() {
                    if let Err(e) = check_identifier("container ID", &id.id) {
                        bad.push(e.to_string());
                    }
                }
                if bad.is_empty() {
                    out.push(p);
                } else {
                    problems.extend(bad.into_iter().map(|b| format!("{at}: {b}")));
                }
            }
            Err(ps) => problems.extend(ps.iter().map(|p| format!("{at}: {p}"))),
        }
    }
    out
}

/// Warnings as people read them.
pub fn warning_texts(desired: &DesiredNode) -> Vec<String> {
    desired.warnings.iter().map(Warning::to_string).collect()
}
