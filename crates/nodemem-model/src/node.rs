//! One pure call for a whole node: [`desired_node`] turns the node's settings, its
//! facts and its pods into every cgroup nodemem manages (a path relative to the cgroup
//! root and the files it sets there), what happened to each pod (managed, opted out,
//! pinned or refused by the Memory Manager), typed warnings and the totals.
//!
//! `nodemem simulate` renders this; the agent plans its writes from it. Nothing here
//! reads a file: the caller supplies the facts (discovered on the node, or given).
//!
//! Beside it, what reads the computed node or the node's settings whole: [`status`],
//! the values a new container is created with ([`creation`]), the kubelet's drop-in
//! ([`kubelet_dropin`]) and proactive reclaim's targets ([`reclaim_targets`]).

pub mod creation;
pub mod kubelet_dropin;
pub mod reclaim_targets;
pub mod status;

use std::collections::{BTreeMap, BTreeSet};

use crate::class::{ClassChoice, ClassSource, WorkloadClass};
use crate::cluster::policy::MemoryManagerPolicy;

use crate::numa::{
    cpuset_mems, MachineState, MemoryManager, NumaTopology, Pinning, Rejection, Scope,
};
use crate::pod::profile::{ContainerMemory, PodMemoryProfile};
use crate::pod::qos::QosClass;
use crate::pod::{ordered_containers, ContainerKind, Pod};
use crate::problem::Problem;
use crate::settings::NodeSettings;
use crate::values::cgroup::{
    CgroupValue, CgroupValues, CPUSET_MEMS, MEMORY_HIGH, MEMORY_LOW, MEMORY_MIN,
};
use crate::values::cgroup_layout::{
    container_dir_under, kubepods, pod_dir, qos_dir, CgroupDriver, ContainerId,
};
use crate::values::memory_qos::{
    unprotected_container, unprotected_pod_cgroup, MemoryTotals, NodeAccumulator, NodeLevel,
    NodeMemoryFacts,
};
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
    /// The Node's memory figures, the page size, the kubelet's version.
    pub memory: NodeMemoryFacts,
    /// How the kubelet names cgroups (its `cgroupDriver`).
    pub cgroup_driver: CgroupDriver,
    /// NUMA nodes with their capacity per memory type, when known.
    pub topology: Option<NumaTopology>,
    /// The kubelet's topologyManagerScope.
    pub topology_scope: Scope,
}

/// A pod on the node with what the kubelet reported about its containers. Built once
/// per pod event: its memory profile is derived here, not on every computation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePod {
    pod: Pod,
    container_ids: BTreeMap<String, ContainerId>,
    choice: ClassChoice,
    profile: PodMemoryProfile,
}

impl NodePod {
    /// `pod` must already carry the apiserver's defaults. `container_ids`: container
    /// name -> runtime ID, for containers that have started. `choice`: the class its
    /// annotations or its namespace's labels choose (`nodemem.io/class`), or the
    /// opt-out (`nodemem.io/memory-qos: disabled`).
    pub fn new(
        pod: Pod,
        container_ids: BTreeMap<String, ContainerId>,
        choice: ClassChoice,
    ) -> Self {
        let profile = PodMemoryProfile::of(&pod.spec);
        NodePod {
            pod,
            container_ids,
            choice,
            profile,
        }
    }

    /// The pod as its spec says.
    pub fn pod(&self) -> &Pod {
        &self.pod
    }

    /// Its containers' IDs by name, as reported or found.
    pub fn container_ids(&self) -> &BTreeMap<String, ContainerId> {
        &self.container_ids
    }

    /// The container `name` runs as `id`: known from the runtime's record before the
    /// kubelet reports it. False (and nothing changed) when the pod has no such
    /// container or already says so.
    pub fn set_container_id(&mut self, name: &str, id: &ContainerId) -> bool {
        if self.container_ids.get(name) == Some(id) || !self.has_container(name) {
            return false;
        }
        self.container_ids.insert(name.to_string(), id.clone());
        true
    }

    /// Whether the pod's spec has a container (init, sidecar or app) of this name.
    pub fn has_container(&self, name: &str) -> bool {
        ordered_containers(&self.pod.spec).any(|c| c.name == name)
    }

    /// Whether it, or its namespace, opted out of Memory QoS.
    pub fn memory_qos_opt_out(&self) -> bool {
        self.choice.opted_out()
    }

    /// The name of the class it chose, if it named one.
    pub fn named_class(&self) -> Option<&str> {
        match &self.choice {
            ClassChoice::Named { name, .. } => Some(name),
            _ => None,
        }
    }

    /// The class it chose, or its opt-out, and where that came from.
    pub fn class_choice(&self) -> &ClassChoice {
        &self.choice
    }

    /// Its memory requests and limits, QoS class and NUMA needs, derived once.
    pub fn profile(&self) -> &PodMemoryProfile {
        &self.profile
    }
}

/// Everything [`desired_node`] reads. The output borrows from the pods (`'p`) only.
#[derive(Clone, Debug)]
pub struct NodeInput<'s, 'p> {
    /// The settings the node runs.
    pub settings: &'s NodeSettings,
    /// What the node is.
    pub facts: &'s NodeFacts,
    /// Its pods, in admission order.
    pub pods: &'p [NodePod],
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

/// A container's outcome; names borrow from the input pods (the computation runs on
/// every event, so it copies nothing it does not have to).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerOutcome<'a> {
    /// The container's name.
    pub name: &'a str,
    /// Init, sidecar or app.
    pub kind: ContainerKind,
    /// Its cgroup, once the container has an ID.
    pub path: Option<String>,
    /// Values including the informational memory.max.
    pub values: CgroupValues,
    /// Its NUMA pinning (Static Memory Manager).
    pub pinning: Pinning,
    /// Its request and limit: what its memory.high is computed from (observation
    /// weighs other factors with them).
    pub memory: ContainerMemory,
}

/// A pod's outcome: its cgroup and values, and its containers'.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodOutcome<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its UID.
    pub uid: &'a str,
    /// Its QoS class.
    pub qos: QosClass,
    /// Its cgroup (relative to the cgroup root).
    pub path: String,
    /// Managed, opted out or refused.
    pub admission: Admission,
    /// The class its values follow (None: the pool's own settings, also for a pod
    /// naming a class the settings do not have).
    pub class: Option<&'a str>,
    /// Where its choice of class (or its opt-out) came from; the pool when none.
    pub class_source: ClassSource,
    /// Values including the informational memory.max.
    pub values: CgroupValues,
    /// Init and sidecar containers in spec order, then app containers.
    pub containers: Vec<ContainerOutcome<'a>>,
}

impl PodOutcome<'_> {
    /// Where the class its values follow came from: the pod's annotation, its
    /// namespace's label, or the pool (no choice, or a class the settings do not have:
    /// its values are the pool's). An opted-out pod's is where its opt-out came from.
    pub fn class_from(&self) -> ClassSource {
        match (self.class, &self.admission) {
            (Some(_), _) | (None, Admission::OptedOut) => self.class_source,
            (None, _) => ClassSource::Pool,
        }
    }

    /// Whether it chose a class by name (one its settings have or not).
    pub fn names_a_class(&self) -> bool {
        self.class_source != ClassSource::Pool && self.admission != Admission::OptedOut
    }

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

/// One cgroup nodemem writes, borrowed from a [`DesiredNode`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DesiredCgroup<'n> {
    /// The cgroup (relative to the cgroup root).
    pub path: &'n str,
    /// What nodemem sets in it.
    pub values: &'n CgroupValues,
}

impl<'n> DesiredCgroup<'n> {
    /// The files nodemem writes (never the informational memory.max).
    pub fn managed(&self) -> impl Iterator<Item = (&'static str, &'n CgroupValue)> + 'n {
        self.values
            .iter()
            .filter(|(file, _)| MANAGED_FILES.contains(file))
    }

    fn has_managed(&self) -> bool {
        self.managed().next().is_some()
    }
}

/// Everything a node should run, computed in one call ([`desired_node`]) from its
/// settings, its facts and its pods: the values of the QoS cgroups, of each pod and
/// container, the Memory Manager's assignments, and the warnings on the way. Pure: the
/// engine (`nodemem-apply`) plans the writes from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredNode<'a> {
    /// The cgroup driver the values are laid out for.
    pub cgroup_driver: CgroupDriver,
    /// The values of the `kubepods` cgroup (node allocatable's).
    pub kubepods: CgroupValues,
    /// The values of the Burstable QoS cgroup.
    pub burstable: CgroupValues,
    /// The values of the BestEffort QoS cgroup.
    pub besteffort: CgroupValues,
    /// In input order, refused pods included.
    pub pods: Vec<PodOutcome<'a>>,
    /// What the computation warns of (a kernel without a file, a pod nodemem leaves).
    pub warnings: Vec<Warning>,
    /// The sums over the node's pods that the QoS cgroups' values come from.
    pub totals: MemoryTotals,
    /// The Memory Manager after admitting the pods (Static policy with a topology).
    pub memory_manager: Option<MemoryManager>,
}

impl DesiredNode<'_> {
    /// Every container of the pods nodemem manages that has a cgroup (an ID), with
    /// its pod and its cgroup path: what the observation and relief watch.
    pub fn managed_containers(
        &self,
    ) -> impl Iterator<Item = (&PodOutcome<'_>, &ContainerOutcome<'_>, &str)> {
        self.pods
            .iter()
            .filter(|p| p.admission == Admission::Managed)
            .flat_map(|p| {
                p.containers
                    .iter()
                    .filter_map(move |c| Some((p, c, c.path.as_deref()?)))
            })
    }

    /// Whether any pod names a workload class: then views show every pod's class.
    pub fn names_classes(&self) -> bool {
        self.pods.iter().any(PodOutcome::names_a_class)
    }

    /// How many pods nodemem manages.
    pub fn managed_pods(&self) -> usize {
        self.pods
            .iter()
            .filter(|p| p.admission == Admission::Managed)
            .count()
    }

    /// Of the pods nodemem manages, how many run each workload class, by name (the
    /// pool's own pods, in no class, are not counted).
    pub fn pods_per_class(&self) -> BTreeMap<&str, usize> {
        let mut counts = BTreeMap::new();
        for p in self
            .pods
            .iter()
            .filter(|p| p.admission == Admission::Managed)
        {
            if let Some(class) = p.class {
                *counts.entry(class).or_default() += 1;
            }
        }
        counts
    }

    /// How many pods are pinned to NUMA nodes.
    pub fn pinned_pods(&self) -> usize {
        self.pods
            .iter()
            .filter(|p| !p.pinned_nodes().is_empty())
            .count()
    }

    /// Every cgroup with a file to set, parents before their children: kubepods, the
    /// QoS classes, then each pod followed by its containers (those with an ID).
    pub fn cgroups(&self) -> Vec<DesiredCgroup<'_>> {
        let d = self.cgroup_driver;
        let mut out = Vec::with_capacity(3 + self.pods.len() * 4);
        for (path, values) in [
            (kubepods(d), &self.kubepods),
            (qos_dir(d, QosClass::Burstable), &self.burstable),
            (qos_dir(d, QosClass::BestEffort), &self.besteffort),
        ] {
            out.push(DesiredCgroup { path, values });
        }
        for pod in &self.pods {
            out.push(DesiredCgroup {
                path: &pod.path,
                values: &pod.values,
            });
            for c in &pod.containers {
                if let Some(path) = &c.path {
                    out.push(DesiredCgroup {
                        path,
                        values: &c.values,
                    });
                }
            }
        }
        out.retain(DesiredCgroup::has_managed);
        out
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
pub fn desired_node<'p>(input: NodeInput<'_, 'p>) -> Result<DesiredNode<'p>, NodeError> {
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

    let qos_enabled = settings.memory_qos.enabled;
    let mut acc = NodeAccumulator::new(&settings.memory_qos, &facts.memory);
    let driver = facts.cgroup_driver;
    let mut outcomes = Vec::with_capacity(pods.len());
    let mut rejected_warnings = Vec::new();
    for (node_pod, mut pinning) in pods.iter().zip(pinning) {
        let pod = &node_pod.pod;
        let profile = &node_pod.profile;
        let qos = profile.qos();
        let rejection = pinning.values().find_map(|p| match p {
            Pinning::Rejected(r) => Some((**r).clone()),
            _ => None,
        });
        // How each cgroup's values are made: a refused pod never runs under the
        // kubelet, so it gets nothing and is left out of the sums.
        #[derive(Clone, Copy, PartialEq)]
        enum Mode {
            Nothing,
            Unprotected,
            Protected,
        }
        let class = chosen_class(settings, node_pod, &mut rejected_warnings);
        let (admission, mode) = match rejection {
            Some(r) => {
                rejected_warnings.push(Warning::PodRejected {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    rejection: r.clone(),
                });
                (Admission::Rejected(r), Mode::Nothing)
            }
            None if node_pod.choice.opted_out() => (Admission::OptedOut, Mode::Unprotected),
            None if !qos_enabled => (Admission::Managed, Mode::Unprotected),
            None => (Admission::Managed, Mode::Protected),
        };
        // A class hands the kubelet's formulas other settings; the pool's otherwise.
        let class_qos = class.map(|c| c.memory_qos(&settings.memory_qos));
        let pod_qos = class_qos.as_ref().unwrap_or(&settings.memory_qos);
        let pod_values = match mode {
            Mode::Nothing => CgroupValues::new(),
            Mode::Unprotected => unprotected_pod_cgroup(profile, facts.memory.rules()),
            Mode::Protected => acc.add_pod_cgroup_under(pod_qos, profile),
        };
        let path = pod_dir(driver, qos, &pod.uid);
        let containers = ordered_containers(&pod.spec)
            .zip(&profile.containers)
            .map(|(c, memory)| {
                let mut values = match mode {
                    Mode::Nothing => CgroupValues::new(),
                    Mode::Unprotected => unprotected_container(memory),
                    Mode::Protected => acc.container_under(pod_qos, profile, memory),
                };
                let pin = pinning.remove(&c.name).unwrap_or(Pinning::Unpinned);
                if let Pinning::Pinned(nodes) = &pin {
                    values.insert(CPUSET_MEMS, CgroupValue::Text(cpuset_mems(nodes)));
                }
                ContainerOutcome {
                    name: &c.name,
                    kind: c.kind,
                    path: node_pod
                        .container_ids
                        .get(&c.name)
                        .map(|id| container_dir_under(&path, driver, id)),
                    values,
                    pinning: pin,
                    memory: *memory,
                }
            })
            .collect();
        outcomes.push(PodOutcome {
            namespace: &pod.namespace,
            name: &pod.name,
            uid: &pod.uid,
            qos,
            path,
            admission,
            class: class.and(node_pod.named_class()),
            class_source: node_pod.choice.source(),
            values: pod_values,
            containers,
        });
    }
    let level = if qos_enabled {
        acc.finish()
    } else {
        NodeLevel {
            warnings: vec![Warning::MemoryQosDisabled],
            ..NodeLevel::default()
        }
    };
    warnings.extend(level.warnings);
    warnings.extend(rejected_warnings);
    Ok(DesiredNode {
        cgroup_driver: driver,
        kubepods: level.kubepods,
        burstable: level.burstable,
        besteffort: level.besteffort,
        pods: outcomes,
        warnings,
        totals: level.totals,
        memory_manager: manager,
    })
}

/// The class a pod's values follow: the one it names, if the settings have it (a name
/// they do not have is warned of, and the pool's settings apply); none for a pod that
/// opted out or chose nothing.
fn chosen_class<'s>(
    settings: &'s NodeSettings,
    node_pod: &NodePod,
    warnings: &mut Vec<Warning>,
) -> Option<&'s WorkloadClass> {
    let ClassChoice::Named { name, source } = &node_pod.choice else {
        return None;
    };
    let class = settings.class(name);
    if class.is_none() {
        warnings.push(Warning::UnknownClass {
            namespace: node_pod.pod.namespace.clone(),
            name: node_pod.pod.name.clone(),
            uid: node_pod.pod.uid.clone(),
            class: name.clone(),
            source: source.as_str(),
            known: settings
                .class_names()
                .iter()
                .map(|n| n.to_string())
                .collect(),
        });
    }
    class
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
    manager.rejected.retain(|k, _| present.contains(k.as_str()));
    pods.iter()
        .zip(&keys)
        .map(|(p, key)| {
            if let Some(held) = manager.assignments.get(key) {
                return existing_pinning(&p.pod, held);
            }
            // Refused once, refused for good (as the kubelet fails the pod).
            if let Some(r) = manager.rejected.get(key) {
                return all_containers(&p.pod)
                    .map(|c| (c.name.clone(), Pinning::Rejected(Box::new(r.clone()))))
                    .collect();
            }
            let mut keyed = p.pod.clone();
            keyed.uid = key.clone();
            let outcome: BTreeMap<String, Pinning> =
                manager.admit_pod(&keyed).into_iter().collect();
            if let Some(r) = outcome.values().find_map(|p| match p {
                Pinning::Rejected(r) => Some((**r).clone()),
                _ => None,
            }) {
                manager.rejected.insert(key.clone(), r);
            }
            outcome
        })
        .collect()
}

fn all_containers(pod: &Pod) -> impl Iterator<Item = &crate::pod::Container> {
    pod.spec.init_containers.iter().chain(&pod.spec.containers)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::policy::{MemoryManagerSettings, ReservedMemory};
    use crate::pod::{Container, PodSpec, Resources};
    use crate::quantity::Quantity;
    use crate::values::cgroup_layout::ContainerRuntime;
    use crate::values::factor::ThrottlingFactor;
    use crate::values::memory_qos::{MemoryQosSettings, ReservationPolicy};

    const MI: i64 = 1 << 20;

    fn guaranteed(name: &str, uid: &str, memory: &str, with_id: bool) -> NodePod {
        let mut r = Resources::default();
        for list in [&mut r.requests, &mut r.limits] {
            list.insert("memory".into(), Quantity::parse(memory).unwrap());
            list.insert("cpu".into(), Quantity::parse("1").unwrap());
        }
        let pod = Pod {
            namespace: "db".into(),
            name: name.into(),
            uid: uid.into(),
            spec: PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    kind: ContainerKind::App,
                    resources: r,
                }],
                ..PodSpec::default()
            },
        };
        let ids = if with_id {
            BTreeMap::from([(
                "c".to_string(),
                ContainerId {
                    runtime: ContainerRuntime::CriO,
                    id: format!("{uid}c"),
                },
            )])
        } else {
            BTreeMap::new()
        };
        NodePod::new(pod, ids, ClassChoice::Pool)
    }

    #[test]
    fn a_container_id_from_the_runtime_names_only_a_container_of_the_pod() {
        let mut pod = guaranteed("db-0", "u1", "64Mi", false);
        let id = ContainerId {
            runtime: ContainerRuntime::Containerd,
            id: "abc".into(),
        };
        assert!(!pod.set_container_id("not-in-spec", &id));
        assert!(pod.container_ids().is_empty());
        assert!(pod.set_container_id("c", &id));
        assert_eq!(pod.container_ids().get("c"), Some(&id));
        // Saying it again changes nothing; the profile is the spec's either way.
        assert!(!pod.set_container_id("c", &id));
        assert_eq!(
            pod.profile(),
            guaranteed("db-0", "u1", "64Mi", true).profile()
        );
    }

    fn static_settings() -> NodeSettings {
        NodeSettings {
            memory_qos: MemoryQosSettings {
                enabled: true,
                throttling_factor: Some(ThrottlingFactor::DEFAULT),
                reservation_policy: ReservationPolicy::TieredReservation,
            },
            memory_manager: MemoryManagerSettings {
                policy: MemoryManagerPolicy::Static,
                reserved_memory: vec![ReservedMemory {
                    numa_node: 0,
                    limits: BTreeMap::from([(
                        "memory".to_string(),
                        Quantity::parse("16Mi").unwrap(),
                    )]),
                }],
            },
            ..NodeSettings::default()
        }
    }

    fn two_nodes() -> NodeFacts {
        NodeFacts {
            memory: NodeMemoryFacts {
                allocatable_memory: Some(1 << 30),
                hard_eviction_memory: None,
                page_size: 4096,
                kernel_version: Some("6.1.0".into()),
                ..NodeMemoryFacts::default()
            },
            topology: Some(NumaTopology {
                nodes: BTreeMap::from([
                    (0, BTreeMap::from([("memory".to_string(), 256 * MI)])),
                    (1, BTreeMap::from([("memory".to_string(), 256 * MI)])),
                ]),
            }),
            ..NodeFacts::default()
        }
    }

    #[test]
    fn pins_refuses_and_keeps_pins_across_computations() {
        let settings = static_settings();
        let facts = two_nodes();
        let pods = vec![
            guaranteed("a", "uid-a", "200Mi", true),
            guaranteed("b", "uid-b", "200Mi", false),
            guaranteed("huge", "uid-huge", "600Mi", true),
        ];
        let first = desired_node(NodeInput {
            settings: &settings,
            facts: &facts,
            pods: &pods,
            memory_manager: None,
        })
        .unwrap();
        let pins: Vec<BTreeSet<i64>> = first.pods.iter().map(PodOutcome::pinned_nodes).collect();
        assert_eq!(
            pins[0],
            BTreeSet::from([0]),
            "node 0 holds 240Mi after the 16Mi reservation"
        );
        assert_eq!(pins[1], BTreeSet::from([1]));
        assert!(matches!(first.pods[2].admission, Admission::Rejected(_)));
        // Computed again with the same pods, the refused pod stays refused and is not
        // counted twice (the kubelet refuses a pod once).
        let again = desired_node(NodeInput {
            settings: &settings,
            facts: &facts,
            pods: &pods,
            memory_manager: first.memory_manager.clone(),
        })
        .unwrap();
        assert!(matches!(again.pods[2].admission, Admission::Rejected(_)));
        let m = again.memory_manager.as_ref().unwrap();
        assert_eq!((m.pinning_errors, m.pinning_requests), (1, 3));
        assert!(first.pods[2].values.is_empty() && first.pods[2].containers[0].values.is_empty());
        assert!(
            matches!(first.warnings.last(), Some(Warning::PodRejected { name, .. }) if name == "huge")
        );
        // A container without an ID has its values but no cgroup yet; the pod has one.
        assert_eq!(first.pods[1].containers[0].path, None);
        assert!(first.pods[1].containers[0].values.contains_key(CPUSET_MEMS));
        let cgroups = first.cgroups();
        assert!(cgroups
            .iter()
            .any(|c| c.path.ends_with("/crio-uid-ac.scope")));
        assert!(
            cgroups.iter().all(|c| !c.path.contains("uid-huge")),
            "a refused pod gets nothing"
        );
        // The refused pod is not in the sums: kubepods memory.min = 200Mi + 200Mi.
        assert_eq!(
            first.kubepods.get(MEMORY_MIN),
            Some(&CgroupValue::Bytes(400 * MI))
        );

        // Next event: pod a is gone, a new pod arrives; b keeps node 1 and the newcomer
        // gets a's node back.
        let saved = first.memory_manager.clone();
        let pods = vec![
            guaranteed("b", "uid-b", "200Mi", true),
            guaranteed("c", "uid-c", "100Mi", true),
        ];
        let next = desired_node(NodeInput {
            settings: &settings,
            facts: &facts,
            pods: &pods,
            memory_manager: saved,
        })
        .unwrap();
        assert_eq!(next.pods[0].pinned_nodes(), BTreeSet::from([1]));
        assert_eq!(next.pods[1].pinned_nodes(), BTreeSet::from([0]));
        let manager = next.memory_manager.clone().unwrap();
        assert!(!manager.assignments.contains_key("uid-a"), "released");
        assert!(manager.rejected.is_empty(), "the refused pod is gone");
        assert_eq!(manager.pinning_errors, 1);
        assert_eq!(
            manager.machine.nodes[&0].memory_map["memory"].reserved,
            100 * MI
        );
    }

    #[test]
    fn policy_none_with_a_topology_and_static_without_one_warn() {
        let mut settings = static_settings();
        let pods = vec![guaranteed("a", "uid-a", "100Mi", true)];
        let no_topology = NodeFacts {
            topology: None,
            ..two_nodes()
        };
        let d = desired_node(NodeInput {
            settings: &settings,
            facts: &no_topology,
            pods: &pods,
            memory_manager: None,
        })
        .unwrap();
        assert_eq!(d.warnings[0], Warning::StaticPolicyWithoutTopology);
        assert!(d.memory_manager.is_none() && d.pinned_pods() == 0);
        settings.memory_manager = MemoryManagerSettings::default();
        let d = desired_node(NodeInput {
            settings: &settings,
            facts: &two_nodes(),
            pods: &pods,
            memory_manager: None,
        })
        .unwrap();
        assert_eq!(d.warnings[0], Warning::TopologyWithoutStaticPolicy);
        assert_eq!(d.warnings[0].code(), "TopologyWithoutStaticPolicy");
    }

    #[test]
    fn reserved_memory_on_a_missing_numa_node_is_an_error() {
        let mut settings = static_settings();
        settings.memory_manager.reserved_memory[0].numa_node = 5;
        let pods = vec![];
        let err = desired_node(NodeInput {
            settings: &settings,
            facts: &two_nodes(),
            pods: &pods,
            memory_manager: None,
        })
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("NUMA node 5 does not exist on this node (NUMA nodes: 0, 1)"),
            "{err}"
        );
    }
}
