//! The Memory Manager's node map (KEP-1769 "Node Map" / "Memory Maps"): per NUMA node
//! and memory type, total, systemReserved, allocatable, reserved and free bytes, plus
//! the NUMA group each node currently belongs to.
//!
//! Invariants: `allocatable = total - systemReserved`, `free + reserved = allocatable`,
//! no value negative, and groups are disjoint (every node of a group names the same
//! group).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::pod::{is_valid_hugepages_name, MEMORY};
use crate::problem::Problem;
use crate::quantity::{format_bytes, Quantity};

/// A NUMA node's number, as sysfs and the kubelet number them.
pub type NumaId = i64;

/// `reservedMemory[]`: memory held back from pods on one NUMA node, per memory type.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReservedMemory {
    /// The NUMA node.
    pub numa_node: i64,
    /// `memory` or `hugepages-<size>` -> amount.
    pub limits: BTreeMap<String, Quantity>,
}

/// NUMA nodes with their capacity per memory type (`memory`, `hugepages-<size>`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NumaTopology {
    /// NUMA node -> memory type -> bytes.
    pub nodes: BTreeMap<NumaId, BTreeMap<String, i64>>,
}

/// One memory type on one NUMA node, as the kubelet's Memory Manager counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryTable {
    /// Capacity, bytes.
    pub total: i64,
    /// Held back by `reservedMemory`.
    pub system_reserved: i64,
    /// What pods may take: total less system_reserved.
    pub allocatable: i64,
    /// Taken by admitted containers.
    pub reserved: i64,
    /// Still free: allocatable less reserved.
    pub free: i64,
}

/// One NUMA node in the Memory Manager's map.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeState {
    /// Per memory type (`memory`, `hugepages-<size>`).
    pub memory_map: BTreeMap<String, MemoryTable>,
    /// Container allocations currently using this node.
    pub assignments: u32,
    /// The NUMA group this node is part of; just itself when unused.
    pub group: BTreeSet<NumaId>,
}

/// The Memory Manager's node map (the kubelet's `machineState`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineState {
    /// By NUMA node.
    pub nodes: BTreeMap<NumaId, NodeState>,
}

impl MachineState {
    /// The empty node map for a topology and `reservedMemory`, or every problem with
    /// the reservations: unknown NUMA nodes or memory types, reservations above
    /// capacity, and (Static policy) no `memory` reservation at all.
    pub fn new(topology: &NumaTopology, reserved: &[ReservedMemory]) -> Result<Self, Vec<Problem>> {
        let mut problems = Vec::new();
        if topology.nodes.is_empty() {
            problems.push(Problem::new("numaNodes", "the topology has no NUMA nodes"));
        }
        // The topology manager computes hints over NUMA node subsets and refuses more
        // than 8 nodes; so does this model.
        if topology.nodes.len() > 8 {
            problems.push(Problem::new(
                "numaNodes",
                format!(
                    "{} NUMA nodes: at most 8 are supported",
                    topology.nodes.len()
                ),
            ));
        }
        let mut system_reserved: BTreeMap<(NumaId, &str), i64> = BTreeMap::new();
        for (i, entry) in reserved.iter().enumerate() {
            let path = format!("spec.memoryManager.reservedMemory[{i}]");
            let Some(capacity) = topology.nodes.get(&entry.numa_node) else {
                let known: Vec<String> = topology.nodes.keys().map(|k| k.to_string()).collect();
                problems.push(Problem::new(
                    format!("{path}.numaNode"),
                    format!(
                        "NUMA node {} does not exist on this node (NUMA nodes: {})",
                        entry.numa_node,
                        known.join(", ")
                    ),
                ));
                continue;
            };
            for (kind, q) in &entry.limits {
                let p = format!("{path}.limits.{kind}");
                if kind != MEMORY && !is_valid_hugepages_name(kind) {
                    problems.push(Problem::new(
                        p,
                        "unknown memory type: use memory or hugepages-<size>",
                    ));
                    continue;
                }
                let amount = q.value();
                if amount < 0 {
                    problems.push(Problem::new(p, "must not be negative"));
                    continue;
                }
                let cap = capacity.get(kind.as_str()).copied().unwrap_or(0);
                if !capacity.contains_key(kind.as_str()) && amount > 0 {
                    problems.push(Problem::new(
                        p,
                        format!("NUMA node {} has no {kind}", entry.numa_node),
                    ));
                } else if amount > cap {
                    problems.push(Problem::new(
                        p,
                        format!(
                            "reserves {} but NUMA node {} has only {} of {kind}",
                            format_bytes(amount),
                            entry.numa_node,
                            format_bytes(cap)
                        ),
                    ));
                } else {
                    system_reserved.insert((entry.numa_node, kind.as_str()), amount);
                }
            }
        }
        if !reserved
            .iter()
            .any(|r| r.limits.get(MEMORY).is_some_and(|q| q.value() > 0))
        {
            problems.push(Problem::new(
                "spec.memoryManager.reservedMemory",
                "the Static policy needs reserved memory of type memory on at least one NUMA node",
            ));
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let nodes = topology
            .nodes
            .iter()
            .map(|(id, capacity)| {
                let memory_map = capacity
                    .iter()
                    .map(|(kind, total)| {
                        let sr = system_reserved
                            .get(&(*id, kind.as_str()))
                            .copied()
                            .unwrap_or(0);
                        let allocatable = total - sr;
                        (
                            kind.clone(),
                            MemoryTable {
                                total: *total,
                                system_reserved: sr,
                                allocatable,
                                reserved: 0,
                                free: allocatable,
                            },
                        )
                    })
                    .collect();
                (
                    *id,
                    NodeState {
                        memory_map,
                        assignments: 0,
                        group: BTreeSet::from([*id]),
                    },
                )
            })
            .collect();
        Ok(MachineState { nodes })
    }

    /// Every violated invariant, for state checks and property tests.
    pub fn invariant_violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (id, node) in &self.nodes {
            for (kind, t) in &node.memory_map {
                if t.allocatable != t.total - t.system_reserved {
                    out.push(format!(
                        "node {id} {kind}: allocatable != total - systemReserved"
                    ));
                }
                if t.free + t.reserved != t.allocatable {
                    out.push(format!("node {id} {kind}: free + reserved != allocatable"));
                }
                if t.free < 0 || t.reserved < 0 || t.allocatable < 0 {
                    out.push(format!("node {id} {kind}: negative value {t:?}"));
                }
            }
            if !node.group.contains(id) {
                out.push(format!(
                    "node {id}: its group {:?} does not contain it",
                    node.group
                ));
            }
            for member in &node.group {
                if self.nodes.get(member).map(|m| &m.group) != Some(&node.group) {
                    out.push(format!(
                        "node {id}: group {:?} overlaps another group",
                        node.group
                    ));
                }
            }
            if node.assignments == 0 && node.group.len() > 1 {
                out.push(format!("node {id}: unused but still grouped"));
            }
        }
        out
    }
}
