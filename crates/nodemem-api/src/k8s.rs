//! From core/v1 objects (and the topology document) to the model's types: one place
//! the CLI, the agent and the test harness share.

pub mod pod;
pub mod topology;

pub use pod::{
    class_choice, container_ids, node_allocatable_memory, node_capacity_memory,
    node_kernel_version, node_labels, node_pod_from_k8s, node_status_facts, opts_out, pod_from_k8s,
    NamespaceChoice,
};
pub use topology::{node_topology, parse_topology, TopologyDocument, NUMA_TOPOLOGY_ANNOTATION};
