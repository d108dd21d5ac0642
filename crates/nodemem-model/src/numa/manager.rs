//! The Memory Manager's Static policy: NUMA affinity hints, allocation with disjoint
//! NUMA groups, init-container memory reuse, and release (KEP-1769, kubelet
//! `pkg/kubelet/cm/memorymanager/policy_static.go`).
//!
//! Choices where nodemem differs from, or pins down, the kubelet:
//! * A best hint that is not preferred (the request could fit on fewer NUMA nodes than
//!   are free for it, e.g. the "Reject Pod2" slide) is rejected, as the topology
//!   manager's `restricted` and `single-numa-node` policies do.
//! * Each block records how much it took from each NUMA node, so release returns
//!   exactly what was taken (the kubelet releases greedily in node order).
//! * A node's assignment count is the number of container allocations using it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::machine::{MachineState, NumaId};
use crate::pod::aggregate::pod_requests;
use crate::pod::qos::{qos_class, QosClass};
use crate::pod::{is_hugepages, ContainerKind, Pod, MEMORY};
use crate::quantity::format_bytes;

/// Topology manager scope: hints per container, or one hint for the whole pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scope {
    /// A hint per container (the kubelet's default).
    #[default]
    Container,
    /// One hint for the whole pod.
    Pod,
}

/// Memory a container holds on a set of NUMA nodes, for one memory type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Block {
    /// The NUMA nodes it may use.
    pub numa_affinity: Vec<NumaId>,
    /// The memory type (`memory`, `hugepages-<size>`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Bytes taken from each node of the affinity.
    pub per_node: BTreeMap<NumaId, i64>,
}

/// A NUMA affinity hint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hint {
    /// The NUMA nodes.
    pub nodes: Vec<NumaId>,
    /// Whether they are the fewest that could hold the request.
    pub preferred: bool,
}

/// What happened to one container at admission.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pinning {
    /// Not managed (not Guaranteed, or no memory requested): may use every NUMA node.
    Unpinned,
    /// Pinned to these NUMA nodes.
    Pinned(Vec<NumaId>),
    /// Refused, with the reason (boxed: rare, and it keeps every container's outcome
    /// small).
    Rejected(Box<Rejection>),
}

/// Why the Static policy found no NUMA nodes for a request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum RejectionReason {
    /// No node or group of nodes has the request free. `together_enough`: the nodes
    /// summed would hold it, but they are already separate groups.
    NoFit {
        /// What was asked, by memory type, bytes.
        requests: BTreeMap<String, i64>,
        /// Whether the nodes summed would hold it.
        together_enough: bool,
    },
    /// The best free nodes are more than the fewest that could physically hold the
    /// request ("Reject Pod2" in KEP-1769).
    NotPreferred {
        /// What was asked, by memory type, bytes.
        requests: BTreeMap<String, i64>,
        /// The best free nodes found.
        nodes: Vec<NumaId>,
    },
}

impl RejectionReason {
    /// A stable CamelCase name, for condition reasons and metrics labels.
    pub fn code(&self) -> &'static str {
        match self {
            RejectionReason::NoFit { .. } => "NoNumaNodeFits",
            RejectionReason::NotPreferred { .. } => "NumaGroupTooWide",
        }
    }
}

impl std::fmt::Display for RejectionReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RejectionReason::NoFit {
                requests,
                together_enough,
            } => {
                write!(
                    f,
                    "no NUMA node or group of NUMA nodes has enough free memory for {}",
                    describe(requests)
                )?;
                if *together_enough {
                    f.write_str("; the NUMA nodes together have enough, but they are already used as separate groups and groups never overlap")?;
                }
                Ok(())
            }
            RejectionReason::NotPreferred { requests, nodes } => write!(
                f,
                "{} fits on fewer NUMA nodes than are free for it (only NUMA nodes {} could hold it, and NUMA groups are inseparable)",
                describe(requests),
                cpuset_mems(nodes)
            ),
        }
    }
}

/// A refused pod: the kubelet refuses the whole pod, for its pod-scope request or for
/// one of its containers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "scope")]
pub enum Rejection {
    /// The pod's request (pod scope).
    Pod {
        /// Why it found no NUMA nodes.
        reason: RejectionReason,
    },
    /// One of its containers' requests (container scope).
    Container {
        /// The container.
        name: String,
        /// Why it found no NUMA nodes.
        reason: RejectionReason,
    },
}

impl Rejection {
    /// Why it found no NUMA nodes, whichever scope.
    pub fn reason(&self) -> &RejectionReason {
        match self {
            Rejection::Pod { reason } | Rejection::Container { reason, .. } => reason,
        }
    }
}

impl std::fmt::Display for Rejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rejection::Pod { reason } => write!(f, "pod rejected: {reason}"),
            Rejection::Container { name, reason } => write!(f, "container {name}: {reason}"),
        }
    }
}

/// `cpuset.mems` text for a node set: `0`, `0-1`, `0,2-3`.
pub fn cpuset_mems(nodes: &[NumaId]) -> String {
    let mut sorted: Vec<NumaId> = nodes.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

type Requests = BTreeMap<String, i64>;

/// The Static policy's state: node map, assignments per pod and container, metrics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryManager {
    /// Per container or per pod.
    pub scope: Scope,
    /// The node map.
    pub machine: MachineState,
    /// pod UID -> container name -> blocks.
    pub assignments: BTreeMap<String, BTreeMap<String, Vec<Block>>>,
    /// `memory_manager_pinning_requests_total`
    pub pinning_requests: u64,
    /// `memory_manager_pinning_errors_total`
    pub pinning_errors: u64,
    /// Pods refused, by key: the kubelet refuses a pod once and for good, so it is not
    /// admitted (or counted) again.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rejected: BTreeMap<String, Rejection>,
}

fn container_requests(resources: &crate::pod::Resources) -> Requests {
    resources
        .requests
        .iter()
        .filter(|(k, q)| (k.as_str() == MEMORY || is_hugepages(k)) && q.value() > 0)
        .map(|(k, q)| (k.clone(), q.value()))
        .collect()
}

fn describe(requests: &Requests) -> String {
    requests
        .iter()
        .map(|(k, v)| format!("{k}={}", format_bytes(*v)))
        .collect::<Vec<_>>()
        .join(", ")
}

impl MemoryManager {
    /// A manager over `machine` with nothing admitted.
    pub fn new(machine: MachineState, scope: Scope) -> Self {
        MemoryManager {
            scope,
            machine,
            assignments: BTreeMap::new(),
            pinning_requests: 0,
            pinning_errors: 0,
            rejected: BTreeMap::new(),
        }
    }

    /// Every hint for `requests`, most preferred first (`calculateHints`). `reusable`
    /// memory (from the pod's finished init containers) counts as free on its mask.
    pub fn hints(
        &self,
        requests: &Requests,
        reusable: &BTreeMap<(Vec<NumaId>, String), i64>,
    ) -> Vec<Hint> {
        let ids: Vec<NumaId> = self.machine.nodes.keys().copied().collect();
        let mut hints = Vec::new();
        let mut min_size = usize::MAX;
        for bits in 1u64..(1u64 << ids.len()) {
            let mask: Vec<NumaId> = ids
                .iter()
                .enumerate()
                .filter(|(i, _)| bits & (1 << i) != 0)
                .map(|(_, id)| *id)
                .collect();
            let single = mask.len() == 1;
            let mask_set: BTreeSet<NumaId> = mask.iter().copied().collect();
            let sum = |f: fn(&super::machine::MemoryTable) -> i64, kind: &str| -> i64 {
                mask.iter()
                    .filter_map(|id| self.machine.nodes[id].memory_map.get(kind))
                    .map(f)
                    .sum()
            };
            if requests
                .iter()
                .any(|(kind, size)| sum(|t| t.allocatable, kind) < *size)
            {
                continue;
            }
            // "Preferred" is about what could physically hold the request, not about
            // what is free or grouped now (KEP-1769, "Reject Pod2").
            min_size = min_size.min(mask.len());
            let usable = mask.iter().all(|id| {
                let node = &self.machine.nodes[id];
                if single {
                    // A node grouped with others cannot serve a single-node allocation.
                    node.group.len() == 1
                } else if node.assignments > 0 {
                    // A used node serves only its own group, never a different set.
                    node.group.len() > 1 && node.group == mask_set
                } else {
                    true
                }
            });
            if !usable {
                continue;
            }
            let fits = requests.iter().all(|(kind, size)| {
                let reuse = reusable
                    .get(&(mask.clone(), kind.clone()))
                    .copied()
                    .unwrap_or(0);
                sum(|t| t.free, kind) + reuse >= *size
            });
            if fits {
                hints.push(Hint {
                    nodes: mask,
                    preferred: false,
                });
            }
        }
        for h in &mut hints {
            h.preferred = h.nodes.len() == min_size;
        }
        // Preferred first, then narrower, then lower node ids.
        hints.sort_by(|a, b| {
            b.preferred
                .cmp(&a.preferred)
                .then(a.nodes.len().cmp(&b.nodes.len()))
                .then(a.nodes.cmp(&b.nodes))
        });
        hints
    }

    fn best_hint(
        &self,
        requests: &Requests,
        reusable: &BTreeMap<(Vec<NumaId>, String), i64>,
    ) -> Result<Vec<NumaId>, RejectionReason> {
        let hints = self.hints(requests, reusable);
        match hints.first() {
            None => {
                let free_everywhere = |kind: &str| -> i64 {
                    self.machine
                        .nodes
                        .values()
                        .filter_map(|n| n.memory_map.get(kind))
                        .map(|t| t.free)
                        .sum()
                };
                Err(RejectionReason::NoFit {
                    requests: requests.clone(),
                    together_enough: requests.iter().all(|(k, size)| free_everywhere(k) >= *size),
                })
            }
            Some(h) if !h.preferred => Err(RejectionReason::NotPreferred {
                requests: requests.clone(),
                nodes: h.nodes.clone(),
            }),
            Some(h) => Ok(h.nodes.clone()),
        }
    }

    /// Takes `requests` from `mask`, reusable init-container memory first.
    fn allocate(
        &mut self,
        mask: &[NumaId],
        requests: &Requests,
        reusable: &mut BTreeMap<(Vec<NumaId>, String), i64>,
    ) -> Vec<Block> {
        let group: BTreeSet<NumaId> = mask.iter().copied().collect();
        for id in mask {
            let node = self.machine.nodes.get_mut(id).expect("hint nodes exist");
            node.assignments += 1;
            node.group = group.clone();
        }
        let mut blocks = Vec::new();
        for (kind, size) in requests {
            let mut remaining = *size;
            let mut per_node = BTreeMap::new();
            // Memory of a finished init container on the same mask is handed over, not
            // taken twice (its block shrinks by what is reused, in the caller).
            let mut reused = 0;
            if let Some(r) = reusable.get_mut(&(mask.to_vec(), kind.clone())) {
                reused = (*r).min(remaining);
                *r -= reused;
                remaining -= reused;
            }
            for id in mask {
                if remaining == 0 {
                    break;
                }
                let table = self
                    .machine
                    .nodes
                    .get_mut(id)
                    .expect("a mask names only this machine's NUMA nodes (chosen from them)")
                    .memory_map
                    .get_mut(kind);
                let Some(table) = table else { continue };
                let take = table.free.min(remaining);
                if take > 0 {
                    table.free -= take;
                    table.reserved += take;
                    remaining -= take;
                    *per_node.entry(*id).or_insert(0) += take;
                }
            }
            debug_assert_eq!(remaining, 0, "hints guarantee the request fits");
            blocks.push(Block {
                numa_affinity: mask.to_vec(),
                kind: kind.clone(),
                per_node,
            });
            if reused > 0 {
                blocks.push(Block {
                    numa_affinity: mask.to_vec(),
                    kind: kind.clone(),
                    per_node: BTreeMap::from([(REUSED, reused)]),
                });
            }
        }
        blocks
    }

    fn release_blocks(&mut self, blocks: &[Block], count_assignment: bool) {
        if count_assignment {
            if let Some(b) = blocks.first() {
                for id in &b.numa_affinity {
                    let node = self
                        .machine
                        .nodes
                        .get_mut(id)
                        .expect("assigned nodes exist");
                    node.assignments = node.assignments.saturating_sub(1);
                    if node.assignments == 0 {
                        node.group = BTreeSet::from([*id]);
                    }
                }
            }
        }
        for b in blocks {
            for (id, size) in &b.per_node {
                if *id == REUSED {
                    continue;
                }
                if let Some(t) = self
                    .machine
                    .nodes
                    .get_mut(id)
                    .and_then(|n| n.memory_map.get_mut(&b.kind))
                {
                    t.reserved -= size;
                    t.free += size;
                }
            }
        }
    }

    /// Admits a pod (already defaulted): pins every container of a Guaranteed pod or
    /// rejects the whole pod, leaving the node map as it was. Non-Guaranteed pods are
    /// not pinned, as in the kubelet.
    pub fn admit_pod(&mut self, pod: &Pod) -> Vec<(String, Pinning)> {
        let ordered: Vec<_> = pod
            .spec
            .init_containers
            .iter()
            .chain(&pod.spec.containers)
            .collect();
        if qos_class(&pod.spec) != QosClass::Guaranteed {
            return ordered
                .iter()
                .map(|c| (c.name.clone(), Pinning::Unpinned))
                .collect();
        }
        let pod_mask = if self.scope == Scope::Pod {
            let requests: Requests = pod_requests(&pod.spec)
                .into_iter()
                .filter(|(k, q)| (k == MEMORY || is_hugepages(k)) && q.value() > 0)
                .map(|(k, q)| (k, q.value()))
                .collect();
            if requests.is_empty() {
                None
            } else {
                self.pinning_requests += 1;
                match self.best_hint(&requests, &BTreeMap::new()) {
                    Ok(mask) => Some(mask),
                    Err(reason) => {
                        self.pinning_errors += 1;
                        let rejection = Rejection::Pod { reason };
                        return ordered
                            .iter()
                            .map(|c| {
                                (
                                    c.name.clone(),
                                    Pinning::Rejected(Box::new(rejection.clone())),
                                )
                            })
                            .collect();
                    }
                }
            }
        } else {
            None
        };
        let mut reusable: BTreeMap<(Vec<NumaId>, String), i64> = BTreeMap::new();
        let mut pod_blocks: BTreeMap<String, Vec<Block>> = BTreeMap::new();
        let mut outcome = Vec::new();
        for c in &ordered {
            let requests = container_requests(&c.resources);
            if requests.is_empty() {
                outcome.push((c.name.clone(), Pinning::Unpinned));
                continue;
            }
            if self.scope == Scope::Container {
                self.pinning_requests += 1;
            }
            let mask = match &pod_mask {
                Some(m) => Ok(m.clone()),
                None => self.best_hint(&requests, &reusable),
            };
            let mask = match mask {
                Ok(m) => m,
                Err(reason) => {
                    self.pinning_errors += 1;
                    // Atomic admission: undo this pod's earlier containers.
                    for blocks in pod_blocks.values() {
                        self.release_blocks(blocks, true);
                    }
                    let rejected = Rejection::Container {
                        name: c.name.clone(),
                        reason,
                    };
                    return ordered
                        .iter()
                        .map(|c| {
                            (
                                c.name.clone(),
                                Pinning::Rejected(Box::new(rejected.clone())),
                            )
                        })
                        .collect();
                }
            };
            let blocks = self.allocate(&mask, &requests, &mut reusable);
            if c.kind == ContainerKind::Init {
                // It finishes before the next container starts: later containers on
                // the same NUMA nodes reuse its memory.
                // Its whole footprint, including what it reused, becomes reusable again.
                for b in &blocks {
                    *reusable
                        .entry((b.numa_affinity.clone(), b.kind.clone()))
                        .or_insert(0) += b.per_node.values().sum::<i64>();
                }
            }
            pod_blocks.insert(c.name.clone(), blocks);
            outcome.push((c.name.clone(), Pinning::Pinned(mask)));
        }
        if !pod_blocks.is_empty() {
            self.assignments.insert(pod.uid.clone(), pod_blocks);
        }
        outcome
    }

    /// Releases everything a pod holds (`RemoveContainer` for each of its containers).
    pub fn remove_pod(&mut self, uid: &str) {
        if let Some(containers) = self.assignments.remove(uid) {
            for blocks in containers.values() {
                self.release_blocks(blocks, true);
            }
        }
    }
}

/// Marks the part of a block that was handed over from an init container rather than
/// taken from the node map (so it is not released twice).
pub const REUSED: NumaId = -1;
