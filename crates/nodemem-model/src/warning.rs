//! Typed warnings about a node's settings: each has a stable [`Warning::code`] (for
//! condition reasons, events and metrics labels) and a `Display` message for people.
//! Callers match on the variant, never on the text.

use std::fmt;

use crate::numa::Rejection;
use crate::quantity::format_bytes;

/// What the node computation found worth telling, beside the values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Warning {
    /// The node reports no kernel version.
    KernelVersionUnknown,
    /// The kernel version does not parse as `major.minor...`.
    KernelVersionUnparsable {
        /// The version as reported.
        text: String,
    },
    /// The kernel lacks the memory.high livelock fix (5.9).
    KernelBeforeLivelockFix {
        /// The version as reported.
        version: String,
    },
    /// Containers without a memory limit need node allocatable memory for memory.high.
    NoAllocatableMemory,
    /// kubepods' memory.min would exceed what the node can give pods.
    ProtectionExceedsAllocatable {
        /// memory.min summed, bytes.
        protected: i64,
        /// What the node can give pods, bytes.
        allocatable: i64,
    },
    /// A NUMA topology is known but the Memory Manager policy is None.
    TopologyWithoutStaticPolicy,
    /// The Static Memory Manager policy is asked for but no NUMA topology is known.
    StaticPolicyWithoutTopology,
    /// The Memory Manager refused a pod: it is neither pinned nor protected.
    PodRejected {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
        /// Why it was refused.
        rejection: Rejection,
    },
    /// Memory QoS is off: nodemem only restores what it set before.
    MemoryQosDisabled,
    /// A pod (or its namespace) names a class the node's settings do not have: the
    /// pool's own settings apply to it.
    UnknownClass {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
        /// The pod's UID (its Event names it).
        uid: String,
        /// The class it names.
        class: String,
        /// Where it names it (`ClassSource::as_str`: the warning sits below the
        /// classes, which compute with the values that warn).
        source: &'static str,
        /// The classes the settings have.
        known: Vec<String>,
    },
}

impl Warning {
    /// A stable CamelCase name.
    pub fn code(&self) -> &'static str {
        match self {
            Warning::KernelVersionUnknown => "KernelVersionUnknown",
            Warning::KernelVersionUnparsable { .. } => "KernelVersionUnparsable",
            Warning::KernelBeforeLivelockFix { .. } => "KernelBeforeLivelockFix",
            Warning::NoAllocatableMemory => "NoAllocatableMemory",
            Warning::ProtectionExceedsAllocatable { .. } => "ProtectionExceedsAllocatable",
            Warning::TopologyWithoutStaticPolicy => "TopologyWithoutStaticPolicy",
            Warning::StaticPolicyWithoutTopology => "StaticPolicyWithoutTopology",
            Warning::PodRejected { .. } => "PodRejectedByMemoryManager",
            Warning::MemoryQosDisabled => "MemoryQoSDisabled",
            Warning::UnknownClass { .. } => "UnknownClass",
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::KernelVersionUnknown => f.write_str(
                "node reports no kernel version (status.nodeInfo.kernelVersion); cannot check for the memory.high livelock fix in 5.9",
            ),
            Warning::KernelVersionUnparsable { text } => write!(
                f,
                "cannot parse kernel version {text:?}; cannot check for the memory.high livelock fix in 5.9"
            ),
            Warning::KernelBeforeLivelockFix { version } => write!(
                f,
                "kernel {version} is older than 5.9: workloads throttled at memory.high may livelock (kernel commit b3ff92916af3); consider throttlingFactor 1.0 or a newer kernel"
            ),
            Warning::NoAllocatableMemory => f.write_str(
                "node has no status.allocatable.memory: memory.high is not set for containers without a memory limit",
            ),
            Warning::ProtectionExceedsAllocatable {
                protected,
                allocatable,
            } => write!(
                f,
                "kubepods memory.min ({}) exceeds node allocatable memory ({}): the kernel will OOM-kill to honour it",
                format_bytes(*protected),
                format_bytes(*allocatable)
            ),
            Warning::TopologyWithoutStaticPolicy => f.write_str(
                "the node has a NUMA topology but the memoryManager policy is None; no pod is pinned to NUMA nodes",
            ),
            Warning::StaticPolicyWithoutTopology => f.write_str(
                "the Static memoryManager policy needs the node's NUMA topology; no pod is pinned",
            ),
            Warning::PodRejected {
                namespace,
                name,
                rejection,
            } => write!(
                f,
                "pod {namespace}/{name} is rejected by the Memory Manager ({rejection}); it does not run and is left out of the QoS sums"
            ),
            Warning::MemoryQosDisabled => f.write_str(
                "Memory QoS is disabled: nodemem sets no memory.min, memory.low or memory.high and restores those it set (memory.min and memory.low to 0, memory.high to max)",
            ),
            Warning::UnknownClass {
                namespace,
                name,
                uid: _,
                class,
                source,
                known,
            } => {
                let known = if known.is_empty() {
                    "the policy names no class".to_string()
                } else {
                    format!("the policy's classes are {}", known.join(", "))
                };
                write!(
                    f,
                    "pod {namespace}/{name} asks for class {class:?} (its {}) that the node's policy does not have: it gets the pool's settings; {known}",
                    source
                )
            }
        }
    }
}
