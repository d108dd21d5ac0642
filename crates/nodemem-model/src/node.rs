//! One pure call for a whole node: [`desired_node`] turns the node's settings, its
//! facts and its pods into every cgroup nodemem manages (a path relative to the cgroup
//! root and the files it sets there), what happened to each pod (managed, opted out,
//! pinned or refused by the Memory Manager), typed warnings and the totals.
//!
//! `nodemem simulate` renders this; the agent plans its writes from it. Nothing here
//! reads a file: the caller supplies the facts (discovered on the node, or given).

use std::collections::{BTreeMap, BTreeSet};

use crate::cgroup::{CgroupValue, CgroupValues, CPUSET_MEMS, MEMORY_HIGH, MEMORY_LOW, MEMORY_MIN};
use crate::cgroup_layout::{container_dir, kubepods, pod_dir, qos_dir, CgroupDriver, ContainerId};
use crate::memory_qos::{
    plan_pods, unprotected_pod_plan, ContainerPlan, MemoryTotals, NodeMemoryFacts, NodePlan,
};
use crate::numa::{
    cpuset_mems, MachineState, MemoryManager, NumaTopology, Pinning, Rejection, Scope,
};
use crate::pod::{ContainerKind, Pod};
use crate::policy::{MemoryManagerPolicy, PolicySettings};
use crate::problem::Problem;
use crate::qos::{qos_class, QosClass};
use crate::warning::Warning;

/// The pod annotation (and namespace label) that opts pods out of Memory QoS. This goes
/// beyond the kubelet, which has no such switch.
pub const MEMORY_QOS_OPT_OUT_KEY: &str = "nodemem.io/memory-qos";
/// The value of [`MEMORY_QOS_OPT_OUT_KEY`] that opts out.
pub const MEMORY_QOS_OPT_OUT_VALUE: &str = "disabled";

/// The files nodemem writes; memory.max is the runtime's and only shown.
pub const MANAGED_FILES: [&str; 4] = [MEMORY_MIN, MEMORY_LOW, MEMORY_HIGH, CPUSET_MEMS];

/// What the node is and how the kubelet lays it out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub memory: NodeMemoryFacts,
    pub cgroup_driver: CgroupDriver,
    /// NUMA nodes with their capacity per memory type, when known.
    pub topology: Option<NumaTopology>,
    /// The kubelet's topologyManagerScope.
    pub topology_scope: Scope,
}

/// A pod on the node with what the kubelet reported about its containers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodePod {
    /// Already defaulted as the apiserver does.
    pub pod: Pod,
    /// Container name -> runtime ID, for containers that have started.
    pub container_ids: BTreeMap<String, ContainerId>,
    /// `nodemem.io/memory-qos: disabled` on the pod or its namespace.
    pub memory_qos_opt_out: bool,
}

impl NodePod {
    pub fn new(pod: Pod) -> Self {
        NodePod {
            pod,
            ..NodePod::default()
        }
    }
}

/// Everything [`desired_node`] reads.
#[derive(Clone, Debug)]
pub struct NodeInput<'a> {
    pub settings: &'a PolicySettings,
    pub facts: &'a NodeFacts,
    pub pods: &'a [NodePod],
    /// The Memory Manager's state from the previous computation (Static policy), so
    /// pods keep their NUMA nodes; None starts from an empty node map.
    pub memory_manager: Option<MemoryManager>,
}

/// How a pod fared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// nodemem sets its values.
    Managed,
    /// Opted out of Memory QoS: nodemem sets nothing on its cgroups except NUMA pinning.
    OptedOut,
    /// Refused by the Memory Manager: no values, not in the sums.
    Rejected(Rejection),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerOutcome {
    pub name: String,
    pub kind: ContainerKind,
    /// Its cgroup, once the container has an ID.
    pub path: Option<String>,
    /// Values including the informational memory.max.
    pub values: CgroupValues,
    pub pinning: Pinning,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodOutcome {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub qos: QosClass,
    pub path: String,
    pub admission: Admission,
    /// Values including the informational memory.max.
    pub values: CgroupValues,
    /// Init and sidecar containers in spec order, then app containers.
    pub containers: Vec<ContainerOutcome>,
}

impl PodOutcome {
    /// The NUMA nodes its containers are pinned to, if any is pinned.
    pub fn pinned_nodes(&self) -> BTreeSet<i64> {
        self.containers
            .iter()
            .filter_map(|c| match &c.pinning {
                Pinning::Pinned(nodes) => Some(nodes.iter().copied()),
                _ => None,
            })
            .flatten()
            .collect()
    }
}

/// One cgroup nodemem writes and the files it sets there (never memory.max).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredCgroup {
    pub path: String,
    pub values: CgroupValues,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredNode {
    pub kubepods: CgroupValues,
    pub burstable: CgroupValues,
    pub besteffort: CgroupValues,
    /// In input order, refused pods included.
    pub pods: Vec<PodOutcome>,
    pub warnings: Vec<Warning>,
    pub totals: MemoryTotals,
    /// The Memory Manager after admitting the pods (Static policy with a topology).
    pub memory_manager: Option<MemoryManager>,
    /// Every cgroup with a value to set, parents before their children.
    pub cgroups: Vec<DesiredCgroup>,
}

impl DesiredNode {
    pub fn managed_pods(&self) -> usize {
        self.pods
            .iter()
            .filter(|p| p.admission == Admission::Managed)
            .count()
    }

    pub fn pinned_pods(&self) -> usize {
        self.pods
            .iter()
            .filter(|p| !p.pinned_nodes().is_empty())
            .count()
    }
}

/// Why a node's settings cannot be computed at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeError {
    /// reservedMemory does not fit the node's NUMA topology.
    #[error("reserved memory does not fit the NUMA topology: {}", join(.0))]
    ReservedMemory(Vec<Problem>),
}

fn join(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Computes the node. Pure: the same input gives the same output.
pub fn desired_node(input: NodeInput<'_>) -> Result<DesiredNode, NodeError> {
    let NodeInput {
        settings,
        facts,
        pods,
        memory_manager,
    } = input;
    let mut warnings = Vec::new();

    let static_policy = settings.memory_manager.policy == MemoryManagerPolicy::Static;
    let mut manager = match (static_policy, &facts.topology) {
        (true, Some(topology)) => {
            let machine = MachineState::new(topology, &settings.memory_manager.reserved_memory)
                .map_err(NodeError::ReservedMemory)?;
            Some(match memory_manager {
                Some(saved) => saved,
                None => MemoryManager::new(machine, facts.topology_scope),
            })
        }
        (true, None) => {
            warnings.push(Warning::StaticPolicyWithoutTopology);
            None
        }
        (false, Some(_)) => {
            warnings.push(Warning::TopologyWithoutStaticPolicy);
            None
        }
        (false, None) => None,
    };
    let pinning = match &mut manager {
        Some(m) => admit(m, pods),
        None => vec![BTreeMap::new(); pods.len()],
    };
    let rejections: Vec<Option<Rejection>> = pinning
        .iter()
        .map(|p| {
            p.values().find_map(|p| match p {
                Pinning::Rejected(r) => Some(r.clone()),
                _ => None,
            })
        })
        .collect();

    // A refused pod never runs under the kubelet, so it is left out of the sums.
    let admitted = pods
        .iter()
        .zip(&rejections)
        .filter(|(_, r)| r.is_none())
        .map(|(p, _)| (&p.pod, p.memory_qos_opt_out));
    let mut plan: NodePlan = if settings.memory_qos.enabled {
        plan_pods(&settings.memory_qos, &facts.memory, admitted)
    } else {
        let mut plan = NodePlan {
            pods: admitted
                .map(|(pod, opted_out)| unprotected_pod_plan(pod, qos_class(&pod.spec), opted_out))
                .collect(),
            ..NodePlan::default()
        };
        plan.warnings.push(Warning::MemoryQosDisabled);
        plan
    };
    warnings.append(&mut plan.warnings);

    let driver = facts.cgroup_driver;
    let mut desired = DesiredNode {
        kubepods: plan.kubepods,
        burstable: plan.burstable,
        besteffort: plan.besteffort,
        pods: Vec::with_capacity(pods.len()),
        warnings,
        totals: plan.totals,
        memory_manager: None,
        cgroups: Vec::with_capacity(1 + pods.len() * 4),
    };
    push_cgroup(&mut desired.cgroups, kubepods(driver), &desired.kubepods);
    push_cgroup(
        &mut desired.cgroups,
        qos_dir(driver, QosClass::Burstable),
        &desired.burstable,
    );
    push_cgroup(
        &mut desired.cgroups,
        qos_dir(driver, QosClass::BestEffort),
        &desired.besteffort,
    );

    let mut planned = plan.pods.into_iter();
    for ((node_pod, pinning), rejection) in pods.iter().zip(pinning).zip(rejections) {
        let pod = &node_pod.pod;
        let qos = qos_class(&pod.spec);
        let (admission, pod_plan) = match rejection {
            Some(r) => {
                desired.warnings.push(Warning::PodRejected {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    rejection: r.clone(),
                });
                (
                    Admission::Rejected(r),
                    unprotected_pod_plan(pod, qos, false),
                )
            }
            None => {
                let p = planned
                    .next()
                    .expect("the plan has one entry per admitted pod, in order");
                let admission = if p.opted_out {
                    Admission::OptedOut
                } else {
                    Admission::Managed
                };
                (admission, p)
            }
        };
        let rejected = matches!(admission, Admission::Rejected(_));
        let path = pod_dir(driver, qos, &pod.uid);
        let pod_values = if rejected {
            CgroupValues::new()
        } else {
            pod_plan.cgroup
        };
        push_cgroup(&mut desired.cgroups, path.clone(), &pod_values);
        let mut containers = Vec::with_capacity(pod_plan.containers.len());
        for ContainerPlan { name, kind, cgroup } in pod_plan.containers {
            let pin = pinning.get(&name).cloned().unwrap_or(Pinning::Unpinned);
            let mut values = if rejected {
                CgroupValues::new()
            } else {
                cgroup
            };
            if let Pinning::Pinned(nodes) = &pin {
                values.insert(
                    CPUSET_MEMS.to_string(),
                    CgroupValue::Text(cpuset_mems(nodes)),
                );
            }
            let container_path = node_pod
                .container_ids
                .get(&name)
                .map(|id| container_dir(driver, qos, &pod.uid, id));
            if let Some(p) = &container_path {
                push_cgroup(&mut desired.cgroups, p.clone(), &values);
            }
            containers.push(ContainerOutcome {
                name,
                kind,
                path: container_path,
                values,
                pinning: pin,
            });
        }
        desired.pods.push(PodOutcome {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            qos,
            path,
            admission,
            values: pod_values,
            containers,
        });
    }
    desired.memory_manager = manager;
    Ok(desired)
}

/// Adds a cgroup when it has a file nodemem writes.
fn push_cgroup(cgroups: &mut Vec<DesiredCgroup>, path: String, values: &CgroupValues) {
    let managed: CgroupValues = values
        .iter()
        .filter(|(file, _)| MANAGED_FILES.contains(&file.as_str()))
        .map(|(f, v)| (f.clone(), v.clone()))
        .collect();
    if !managed.is_empty() {
        cgroups.push(DesiredCgroup {
            path,
            values: managed,
        });
    }
}

/// The key a pod's assignments are stored under: its UID, or its position when the
/// UID is missing or repeated (hand-written manifests).
fn assignment_key(index: usize, uid: &str, seen: &mut BTreeSet<String>) -> String {
    if !uid.is_empty() && seen.insert(uid.to_string()) {
        uid.to_string()
    } else {
        format!("{index}/{uid}")
    }
}

/// Pods keep what they were given before; pods gone from the node release their
/// memory; new pods are admitted in input order, as the kubelet admits them.
fn admit(manager: &mut MemoryManager, pods: &[NodePod]) -> Vec<BTreeMap<String, Pinning>> {
    let mut seen = BTreeSet::new();
    let keys: Vec<String> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| assignment_key(i, &p.pod.uid, &mut seen))
        .collect();
    let present: BTreeSet<&str> = keys.iter().map(String::as_str).collect();
    let gone: Vec<String> = manager
        .assignments
        .keys()
        .filter(|k| !present.contains(k.as_str()))
        .cloned()
        .collect();
    for key in gone {
        manager.remove_pod(&key);
    }
    pods.iter()
        .zip(&keys)
        .map(|(p, key)| match manager.assignments.get(key) {
            Some(held) => existing_pinning(&p.pod, held),
            None => {
                let mut keyed = p.pod.clone();
                keyed.uid = key.clone();
                manager.admit_pod(&keyed).into_iter().collect()
            }
        })
        .collect()
}

fn existing_pinning(
    pod: &Pod,
    held: &BTreeMap<String, Vec<crate::numa::manager::Block>>,
) -> BTreeMap<String, Pinning> {
    pod.spec
        .init_containers
        .iter()
        .chain(&pod.spec.containers)
        .map(|c| {
            let pin = match held.get(&c.name).and_then(|b| b.first()) {
                Some(block) => Pinning::Pinned(block.numa_affinity.clone()),
                None => Pinning::Unpinned,
            };
            (c.name.clone(), pin)
        })
        .collect()
}
