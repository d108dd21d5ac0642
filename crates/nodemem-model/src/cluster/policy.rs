//! The parts of a node's settings that are the cluster's (the Memory Manager's policy
//! and reserved memory, the node's reservations, the enforcement) and the rules that
//! span several fields (what OpenAPI schemas and CEL rules at admission cannot check);
//! the settings whole are [`crate::settings::NodeSettings`].

use std::collections::BTreeMap;

// Defined beside the NUMA machine that consumes it; part of the settings API here.
pub use crate::numa::machine::ReservedMemory;
use crate::pod::{is_hugepages, is_valid_hugepages_name, MEMORY};
use crate::problem::Problem;
use crate::quantity::{format_bytes, Quantity};

/// The kubelet's default hard eviction threshold for memory (`memory.available<100Mi`),
/// used in the KEP-1769 sum rule when no `evictionHard` is given.
pub const DEFAULT_EVICTION_HARD_MEMORY: i64 = 100 << 20;

/// The kubelet's `memoryManagerPolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MemoryManagerPolicy {
    /// No NUMA pinning: the kubelet's default.
    #[default]
    None,
    /// Guaranteed pods' memory pinned to NUMA nodes (KEP-1769).
    Static,
}

/// The Memory Manager a policy asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct MemoryManagerSettings {
    /// None or Static.
    pub policy: MemoryManagerPolicy,
    /// Memory reserved per NUMA node (`reservedMemory`), which Static needs.
    pub reserved_memory: Vec<ReservedMemory>,
}

/// The node's reservations that the KEP-1769 sum rule compares `reservedMemory` with.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeReserved {
    /// The kubelet's `kubeReserved` memory.
    pub kube_reserved: Option<Quantity>,
    /// The kubelet's `systemReserved` memory.
    pub system_reserved: Option<Quantity>,
    /// The kubelet's `evictionHard` `memory.available`.
    pub eviction_hard: Option<Quantity>,
}

/// Who carries out the settings on the node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Enforcement {
    /// The node agent writes cgroup files itself.
    #[default]
    Agent,
    /// The node agent renders a KubeletConfiguration drop-in instead.
    Kubelet,
    /// The node agent computes everything as under `Agent` and writes nothing: what
    /// enforcement would do is reported, what nodemem had set is given back.
    Observe,
}

pub(crate) fn validate_memory_manager(mm: &MemoryManagerSettings, problems: &mut Vec<Problem>) {
    const PATH: &str = "spec.memoryManager.reservedMemory";
    let mut seen = BTreeMap::new();
    for (i, entry) in mm.reserved_memory.iter().enumerate() {
        let p = format!("{PATH}[{i}]");
        if entry.numa_node < 0 {
            problems.push(Problem::new(
                format!("{p}.numaNode"),
                format!(
                    "must be greater than or equal to 0, found {}",
                    entry.numa_node
                ),
            ));
        }
        if let Some(first) = seen.insert(entry.numa_node, i) {
            problems.push(Problem::new(
                format!("{p}.numaNode"),
                format!(
                    "duplicate NUMA node {} (already listed at {PATH}[{first}])",
                    entry.numa_node
                ),
            ));
        }
        if entry.limits.is_empty() {
            problems.push(Problem::new(
                format!("{p}.limits"),
                "must name at least one memory type",
            ));
        }
        for (name, q) in &entry.limits {
            if name != MEMORY && !(is_hugepages(name) && is_valid_hugepages_name(name)) {
                problems.push(Problem::new(
                    format!("{p}.limits.{name}"),
                    "unknown memory type: use memory or hugepages-<size> such as hugepages-2Mi",
                ));
            }
            if q.is_negative() {
                problems.push(Problem::new(
                    format!("{p}.limits.{name}"),
                    format!("must not be negative, found {q}"),
                ));
            } else if q.is_zero() {
                // The kubelet's validateReservedMemoryConfiguration refuses to start.
                problems.push(Problem::new(
                    format!("{p}.limits.{name}"),
                    format!(
                        "reserved memory may not be zero for NUMA node {} and resource {name:?}",
                        entry.numa_node
                    ),
                ));
            }
        }
    }
    match mm.policy {
        MemoryManagerPolicy::Static => {
            let has_memory = mm
                .reserved_memory
                .iter()
                .any(|r| r.limits.get(MEMORY).is_some_and(|q| *q > 0));
            if !has_memory {
                problems.push(Problem::new(
                    PATH,
                    "the Static policy needs reserved memory of type memory on at least one NUMA node (the kubelet refuses to start without it)",
                ));
            }
        }
        MemoryManagerPolicy::None => {
            if !mm.reserved_memory.is_empty() {
                problems.push(Problem::new(PATH, "reserved memory is only used by the Static policy; remove it or set policy: Static"));
            }
        }
    }
}

pub(crate) fn validate_node_reserved(reserved: &NodeReserved, problems: &mut Vec<Problem>) {
    for (field, q) in [
        ("kubeReserved", reserved.kube_reserved),
        ("systemReserved", reserved.system_reserved),
        ("evictionHard", reserved.eviction_hard),
    ] {
        if let Some(q) = q {
            if q.is_negative() {
                problems.push(Problem::new(
                    format!("spec.nodeReserved.{field}"),
                    format!("must not be negative, found {q}"),
                ));
            }
        }
    }
}

/// KEP-1769: per memory type, the sum of reservedMemory over NUMA nodes must equal
/// kube-reserved + system-reserved + the hard eviction threshold. nodeReserved names
/// memory only, so the rule is checked for `memory`; hugepage reservations are checked
/// against each NUMA node's hugepage capacity by the NUMA model instead.
pub(crate) fn check_sum_rule(
    mm: &MemoryManagerSettings,
    reserved: &NodeReserved,
    problems: &mut Vec<Problem>,
) {
    if let Some(message) = sum_rule_problem(mm, reserved) {
        problems.push(Problem::new("spec.memoryManager.reservedMemory", message));
    }
}

/// The sum rule's complaint, if `reservedMemory` breaks it for these reservations.
pub fn sum_rule_problem(mm: &MemoryManagerSettings, reserved: &NodeReserved) -> Option<String> {
    let sum: i64 = mm
        .reserved_memory
        .iter()
        .filter_map(|r| r.limits.get(MEMORY))
        .map(|q| q.value())
        .fold(0i64, |a, b| a.saturating_add(b));
    let kube = reserved.kube_reserved.map_or(0, |q| q.value());
    let system = reserved.system_reserved.map_or(0, |q| q.value());
    let eviction = reserved
        .eviction_hard
        .map_or(DEFAULT_EVICTION_HARD_MEMORY, |q| q.value());
    let expected = kube.saturating_add(system).saturating_add(eviction);
    if sum == expected {
        return None;
    }
    let eviction_note = if reserved.eviction_hard.is_none() {
        " (kubelet default)"
    } else {
        ""
    };
    Some(format!(
        "reserved memory of type memory sums to {} over NUMA nodes but must equal kubeReserved + systemReserved + evictionHard = {} + {} + {}{} = {}",
        format_bytes(sum),
        format_bytes(kube),
        format_bytes(system),
        format_bytes(eviction),
        eviction_note,
        format_bytes(expected)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{validate_node_settings, NodeSettings};

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    fn reserved(numa: i64, pairs: &[(&str, &str)]) -> ReservedMemory {
        ReservedMemory {
            numa_node: numa,
            limits: pairs.iter().map(|(k, v)| (k.to_string(), q(v))).collect(),
        }
    }

    fn static_settings(entries: Vec<ReservedMemory>, node: Option<NodeReserved>) -> NodeSettings {
        NodeSettings {
            memory_manager: MemoryManagerSettings {
                policy: MemoryManagerPolicy::Static,
                reserved_memory: entries,
            },
            node_reserved: node,
            ..NodeSettings::default()
        }
    }

    #[test]
    fn sum_rule_holds_with_default_eviction_threshold() {
        // 500Mi + 300Mi + 100Mi default eviction = 900Mi = 450Mi + 450Mi.
        let node = NodeReserved {
            kube_reserved: Some(q("500Mi")),
            system_reserved: Some(q("300Mi")),
            eviction_hard: None,
        };
        let ok = static_settings(
            vec![
                reserved(0, &[("memory", "450Mi")]),
                reserved(1, &[("memory", "450Mi")]),
            ],
            Some(node.clone()),
        );
        assert_eq!(validate_node_settings(&ok), vec![]);
        let bad = static_settings(vec![reserved(0, &[("memory", "800Mi")])], Some(node));
        let problems = validate_node_settings(&bad);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].message.contains("800Mi"), "{}", problems[0]);
        assert!(problems[0].message.contains("900Mi"), "{}", problems[0]);
        assert!(
            problems[0].message.contains("kubelet default"),
            "{}",
            problems[0]
        );
    }

    #[test]
    fn sum_rule_uses_explicit_eviction_threshold() {
        let node = NodeReserved {
            kube_reserved: Some(q("1Gi")),
            system_reserved: None,
            eviction_hard: Some(q("500Mi")),
        };
        let ok = static_settings(vec![reserved(0, &[("memory", "1524Mi")])], Some(node));
        assert_eq!(validate_node_settings(&ok), vec![]);
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let settings = static_settings(
            vec![
                reserved(
                    0,
                    &[("memory", "-1Gi"), ("hugepages-3x", "1Gi"), ("cpu", "1")],
                ),
                reserved(0, &[]),
                reserved(-2, &[("memory", "1Gi")]),
            ],
            None,
        );
        let got: Vec<String> = validate_node_settings(&settings)
            .iter()
            .map(|p| p.to_string())
            .collect();
        let want = [
            "spec.memoryManager.reservedMemory[0].limits.cpu: unknown memory type",
            "spec.memoryManager.reservedMemory[0].limits.hugepages-3x: unknown memory type",
            "spec.memoryManager.reservedMemory[0].limits.memory: must not be negative",
            "spec.memoryManager.reservedMemory[1].numaNode: duplicate NUMA node 0",
            "spec.memoryManager.reservedMemory[1].limits: must name at least one memory type",
            "spec.memoryManager.reservedMemory[2].numaNode: must be greater than or equal to 0",
        ];
        for w in want {
            assert!(
                got.iter().any(|g| g.starts_with(w)),
                "missing {w:?} in {got:#?}"
            );
        }
        assert_eq!(got.len(), want.len(), "{got:#?}");
    }

    #[test]
    fn static_needs_memory_reservation_and_none_refuses_it() {
        let problems = validate_node_settings(&static_settings(vec![], None));
        assert_eq!(problems.len(), 1);
        assert!(problems[0]
            .message
            .contains("Static policy needs reserved memory"));
        let none = NodeSettings {
            memory_manager: MemoryManagerSettings {
                policy: MemoryManagerPolicy::None,
                reserved_memory: vec![reserved(0, &[("memory", "1Gi")])],
            },
            ..NodeSettings::default()
        };
        let problems = validate_node_settings(&none);
        assert_eq!(problems.len(), 1);
        assert!(problems[0]
            .message
            .contains("only used by the Static policy"));
    }

    #[test]
    fn a_zero_reservation_is_refused_as_the_kubelet_does() {
        let settings = static_settings(
            vec![
                reserved(0, &[("memory", "1Gi")]),
                reserved(1, &[("memory", "0"), ("hugepages-2Mi", "0Mi")]),
            ],
            None,
        );
        let got: Vec<String> = validate_node_settings(&settings)
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(
            got,
            vec![
                "spec.memoryManager.reservedMemory[1].limits.hugepages-2Mi: reserved memory may not be zero for NUMA node 1 and resource \"hugepages-2Mi\"",
                "spec.memoryManager.reservedMemory[1].limits.memory: reserved memory may not be zero for NUMA node 1 and resource \"memory\"",
            ]
        );
    }

    /// One pool may run kubelets of both kinds: each node refuses what its own kubelet
    /// cannot express.
    #[test]
    fn hard_reservation_under_the_kubelet_is_left_to_each_node() {
        let mut settings = NodeSettings {
            enforcement: Enforcement::Kubelet,
            ..NodeSettings::default()
        };
        settings.memory_qos.reservation_policy =
            crate::values::memory_qos::ReservationPolicy::HardReservation;
        assert!(validate_node_settings(&settings).is_empty());
        settings.memory_qos.reservation_policy =
            crate::values::memory_qos::ReservationPolicy::TieredReservation;
        assert!(validate_node_settings(&settings).is_empty());
    }

    #[test]
    fn hugepage_names() {
        assert!(is_valid_hugepages_name("hugepages-2Mi"));
        assert!(is_valid_hugepages_name("hugepages-1Gi"));
        assert!(!is_valid_hugepages_name("hugepages-"));
        assert!(!is_valid_hugepages_name("hugepages-0"));
        assert!(!is_valid_hugepages_name("hugepages-abc"));
    }
}
