//! `NodeMemoryConfig`: the resolved settings for one node (name = node name), written
//! by the controller and enforced by that node's agent, which reports back in status.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::policy::{ClassPods, HealthSpec, NodeSettings};

/// Resolved memory settings for one node.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "nodemem.io",
    version = "v1alpha1",
    kind = "NodeMemoryConfig",
    plural = "nodememoryconfigs",
    singular = "nodememoryconfig",
    shortname = "nmc",
    category = "nodemem",
    doc = "NodeMemoryConfig holds the resolved memory settings for one node (named after it), written by the nodemem controller; the node's agent enforces them and reports in status.",
    status = "NodeMemoryConfigStatus",
    printcolumn = r#"{"name": "Policy", "type": "string", "description": "the NodeMemoryPolicy governing this node", "jsonPath": ".spec.policy"}"#,
    printcolumn = r#"{"name": "Revision", "type": "string", "description": "the policy revision this node should run", "jsonPath": ".spec.revision"}"#,
    printcolumn = r#"{"name": "Applied", "type": "string", "description": "the agent applied the revision", "jsonPath": ".status.conditions[?(@.type==\"Applied\")].status"}"#,
    printcolumn = r#"{"name": "Healthy", "type": "string", "description": "no throttling storm or OOM burst", "jsonPath": ".status.conditions[?(@.type==\"Healthy\")].status"}"#,
    printcolumn = r#"{"name": "Kernel", "type": "string", "description": "the node's kernel", "jsonPath": ".status.node.kernelVersion"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Reclaim", "type": "string", "priority": 1, "description": "the proactive reclaim the node's agent runs on its revision (Observe, Active; empty: none)", "jsonPath": ".status.reclaim.mode"}"#,
    printcolumn = r#"{"name": "Reclaimed", "type": "integer", "priority": 1, "description": "Active: bytes the containers' memory.current lost to reclaim since the revision", "jsonPath": ".status.reclaim.reclaimedBytes"}"#,
    printcolumn = r#"{"name": "Reclaimable", "type": "integer", "priority": 1, "description": "bytes reclaim could take now (page cache, and anon with swap, above each container's request)", "jsonPath": ".status.reclaim.reclaimableBytes"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeMemoryConfigSpec {
    /// Name of the NodeMemoryPolicy these settings come from.
    #[schemars(length(min = 1, max = 253))]
    pub policy: String,
    /// Revision (settings hash) of that policy.
    #[schemars(length(min = 1, max = 64))]
    pub revision: String,
    /// The settings to enforce.
    #[serde(flatten)]
    pub settings: NodeSettings,
    /// When the agent reports this node Healthy (from the policy's rollout settings;
    /// not part of the revision).
    #[serde(default)]
    pub health: HealthSpec,
}

/// What the node agent reports.
// Its largest parts are boxed: the controller holds one per node and queues one per
// watch event, and an absent part then costs a pointer, not its whole size
// (`a_status_stays_small`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMemoryConfigStatus {
    /// The revision the agent last applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_revision: Option<String>,
    /// Applied, Healthy and KernelSupported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Facts the agent discovered about the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<Box<NodeFacts>>,
    /// Totals over the pods on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub totals: Option<MemoryTotals>,
    /// Pods whose cgroups the agent manages.
    #[serde(default)]
    pub managed_pods: i32,
    /// Of the managed pods, how many run each workload class (`nodemem.io/class`);
    /// classes without a pod here are left out, and the rest run the pool's settings.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub classes: Vec<ClassPods>,
    /// What the managed pods went through since `observedRevision` was applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_revision: Option<RevisionSignals>,
    /// The last error the agent hit, empty when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// What the managed containers' working sets did against memory.high (under
    /// `enforcement: Observe` the one that would be set), refreshed on whole-node
    /// passes; absent under `enforcement: Kubelet`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<Box<ObservationSummary>>,
    /// Relief for containers memory.high chokes (`memoryQoS.relief`), since the
    /// revision was applied; absent while relief is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relief: Option<ReliefSummary>,
    /// Proactive reclaim (`reclaim`) since the revision was applied: what it took (Active)
    /// or would take (Observe); absent while reclaim is off. Written when its mode,
    /// support or containers change, and at most every 30 s while its figures move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<Box<ReclaimSummary>>,
}

/// What proactive reclaim did, or would do, on a node since its revision was applied.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimSummary {
    /// The revision these figures count from.
    pub revision: String,
    /// Observe (nothing written: the figures are what Active would do) or Active.
    pub mode: String,
    /// Whether the node's kernel has memory.reclaim (Linux 5.19 and later); false:
    /// reclaim cannot run on this node, whatever the policy says.
    pub supported: bool,
    /// Whether swap can take anonymous memory on this node (then anon is reclaimed
    /// too; without swap, only page cache).
    pub swap: bool,
    /// Containers reclaim acts on (the policy's QoS classes, managed pods).
    pub containers: i64,
    /// Steps taken (Active) or that would have been taken (Observe).
    pub steps: i64,
    /// Active: what the containers' memory.current lost at the steps, bytes (the kernel
    /// may take more than it is asked).
    pub reclaimed_bytes: i64,
    /// Active: of what memory.current lost, the page cache (memory.stat active and
    /// inactive file), bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reclaimed_file_bytes: i64,
    /// Active: of what memory.current lost, the anonymous memory (only with swap),
    /// bytes.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reclaimed_anon_bytes: i64,
    /// Whether this kernel's memory.reclaim takes the `swappiness=` key (Linux 6.11
    /// and later, and kernels it was backported to), which steers a step between page
    /// cache and anon; found out under Active by a write of "0 swappiness=60", which
    /// reclaims nothing. Absent: not found out (Observe writes nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swappiness_key: Option<bool>,
    /// Active: what the containers' working set lost at the steps, bytes: the eviction
    /// headroom gained (the kubelet's memory.available counts the working set,
    /// memory.current less inactive page cache).
    pub headroom_gained_bytes: i64,
    /// Observe: what the steps would have asked, bytes.
    pub would_reclaim_bytes: i64,
    /// What could be taken now: page cache (and anon with swap) above each container's
    /// request, bytes; what Active would take over time while pressure stays low.
    pub reclaimable_bytes: i64,
    /// The containers' memory.current when first read under this revision, bytes.
    pub resident_at_start_bytes: i64,
    /// The containers' memory.current at their last reading, bytes.
    pub resident_bytes: i64,
    /// Steps held back because a container's stall rose over the target.
    pub pressure_back_offs: i64,
    /// Steps held back because a container's refaults rose over their budget.
    pub refault_back_offs: i64,
    /// The highest stall (PSI some, microseconds per second) a container showed at its
    /// last reading.
    pub highest_stall_microseconds_per_second: i64,
    /// The policy's stall target (microseconds per second).
    pub target_stall_microseconds_per_second: i64,
    /// Refaults per second over all containers at their last readings.
    pub refaults_per_second: i64,
    /// memory.reclaim writes the kernel refused with something else than "less found".
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_writes: i64,
    /// Active: steps due but not taken because the container's last one was still
    /// being written (or the writer's queue was full): reclaim is behind the policy's
    /// interval on this node.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub writes_behind: i64,
    /// Active: the longest a step took from its queueing to its last part written
    /// (each step is written in parts off the agent's thread), milliseconds.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub longest_write_milliseconds: i64,
    /// Why reclaim stopped on this node until the next revision: the revision's
    /// refault gate failed here (what reclaim took was in use), whatever the policy's
    /// failure policy. Absent while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

/// What relief did on a node since its revision was applied.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReliefSummary {
    /// Containers whose memory.high was raised.
    pub reliefs: i64,
    /// Containers that choked again within the repeat window: reported, not relieved.
    pub refused: i64,
    /// The containers whose memory.high is raised now (at most 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub relieved: Vec<RelievedContainer>,
    /// Containers relief cannot watch because their memory pressure cannot be read
    /// (PSI is off: boot the kernel with `psi=1`): relief cannot run for them, which
    /// is not the same as nothing choking.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub without_pressure: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// A container whose memory.high is raised now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RelievedContainer {
    /// namespace/name of the pod.
    pub pod: String,
    /// The container's name.
    pub container: String,
    /// The memory.high the policy gives it, bytes (restored when relief ends).
    pub memory_high: i64,
    /// What memory.high is raised to, bytes (its memory.max); absent: max.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raised_to: Option<i64>,
    /// When memory.high goes back.
    pub until: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
}

/// A node's observation of its managed containers since its revision was applied.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservationSummary {
    /// The revision observed against.
    pub revision: String,
    /// Whether memory.high was written (`enforcement: Agent`) or only computed
    /// (`Observe`): enforced, throttling is measured (memory.events `high`), observed,
    /// it is estimated from the working set.
    pub enforced: bool,
    /// When the first sample was taken.
    pub since: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    /// Seconds between the first and the last sample.
    pub observed_seconds: i64,
    /// Containers observed with room for a memory.high (Guaranteed ones have none),
    /// including those gone since.
    pub containers: i32,
    /// Of those, the ones the current memory.high throttled (or would have): the
    /// working set stood above it at a sample, or the kernel counted memory.high events.
    pub throttled_containers: i32,
    /// For the factors 0.05, 0.10, ... 1.00 (20 entries, in that order): how many of
    /// `containers` stayed at or under the memory.high that factor gives. The
    /// controller sums these over a pool into the policy's recommendation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub fitting_by_factor: Vec<i32>,
    /// The containers that stood above memory.high longest, then furthest (at most 5).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 5))]
    pub worst: Vec<ObservedContainer>,
    /// The containers of the workload classes whose memory.high does not follow the
    /// pool's factor (a class's own `throttlingFactor`, or `memoryHigh: None`), each
    /// class apart: they are left out of the counts above, which are the evidence for
    /// the pool's factor alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub classes: Vec<ClassObservation>,
}

/// One workload class's observation on a node: the evidence for its own factor.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassObservation {
    /// The class (one of the policy's `classes`).
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// Its containers observed with room for a memory.high, including those gone since.
    pub containers: i32,
    /// Of those, the ones its memory.high throttled (or would have); 0 for a class
    /// without memory.high.
    pub throttled_containers: i32,
    /// As the node's `fittingByFactor`, for this class's containers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub fitting_by_factor: Vec<i32>,
}

/// One container that memory.high throttled, or would have.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObservedContainer {
    /// namespace/name of the pod.
    pub pod: String,
    /// The container's name.
    pub container: String,
    /// The memory.high set (or that would be), bytes.
    pub memory_high: i64,
    /// The highest working set sampled (memory.current minus inactive file pages).
    pub peak_working_set: i64,
    /// The kernel's memory.peak (5.19+; counts page cache too), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_peak: Option<i64>,
    /// Seconds the working set stood above memory.high, between samples.
    pub seconds_above_high: i64,
    /// The most the working set stood above memory.high, bytes.
    pub max_excess_bytes: i64,
    /// memory.events `high` counted while observed (under enforcement).
    pub throttle_events: i64,
    /// The workload class its values follow; absent: the pool's own settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
}

/// Node facts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeFacts {
    /// uname -r
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_version: Option<String>,
    /// 1 or 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_version: Option<i32>,
    /// systemd or cgroupfs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_driver: Option<String>,
    /// Base page size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_size: Option<i64>,
    /// The kubelet's memory.available hard eviction threshold in bytes, from its
    /// configuration (its default when the agent cannot read it; a percentage resolved
    /// against capacity), which the memory.high ceiling of a container without a limit
    /// adds back to allocatable. Views use it instead of assuming the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_eviction_memory: Option<i64>,
    /// NUMA nodes with their memory per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["id"]))]
    pub numa_nodes: Vec<NumaNodeFacts>,
    /// How a new container gets nodemem's values on this node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_values: Option<ContainerValuesPath>,
    /// Where the agent read the kubelet's configuration, as the kubelet names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletFacts>,
}

/// The kubelet the agent read: its process, and the files and flags that decide what
/// nodemem computes, in the kubelet's order (the file, its drop-ins, then the flags).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeletFacts {
    /// The Node's kubelet version (status.nodeInfo.kubeletVersion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The process read (`kubelet (pid 812)`, `k3s agent (pid 90)`); absent when the
    /// files were given to the agent instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
    /// `--config`; absent when the kubelet runs without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// The `--config-dir` drop-ins read, in the kubelet's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub drop_ins: Vec<String>,
    /// The command-line flags that set what nodemem reads, as given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub flags: Vec<String>,
    /// Processes named like a kubelet that are not the host's, and why (another mount
    /// namespace than the host's, a pod's cgroup, below a container runtime's shim):
    /// none of their files was read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub ignored: Vec<String>,
    /// Feature gates the kubelet's configuration or flags name that a later kubelet
    /// removed, each with that version (`NodeSwap (removed in v1.38)`): a kubelet of
    /// that version refuses to start with them, so they come out before the upgrade.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub removed_gates: Vec<String>,
}

/// How a new container gets nodemem's values: `NRI`, in its spec at creation (the
/// agent is the runtime's NRI plugin: no moment without them), or `Reaction`, written
/// once its cgroup appears (milliseconds later).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerValuesPath {
    /// NRI or Reaction.
    pub path: String,
    /// The runtime the NRI plugin is registered with (name and version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// Why not NRI: `Off` (--nri=off), or why registering failed (NoSocket,
    /// NotListening, Refused, NotConfigured, ConnectFailed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One NUMA node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NumaNodeFacts {
    /// NUMA node id.
    pub id: i32,
    /// Per memory type (`memory`, `hugepages-2Mi`, ...).
    #[serde(default)]
    pub memory: BTreeMap<String, NumaMemory>,
}

/// Capacity, reservation and allocatable bytes of one memory type on a NUMA node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NumaMemory {
    /// Total bytes.
    pub capacity: i64,
    /// Bytes reserved for the system.
    pub reserved: i64,
    /// capacity - reserved.
    pub allocatable: i64,
}

/// Sums over pods (the kubelet_memory_qos_node_memory_{min,low}_bytes equivalents).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryTotals {
    /// Sum of pod memory.min bytes.
    pub memory_min_bytes: i64,
    /// Sum of pod memory.low bytes.
    pub memory_low_bytes: i64,
}

/// Memory signals of the managed pods since the revision was applied, so `kubectl get
/// nmc -o yaml` answers "is this node worse since the change?" without Prometheus.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionSignals {
    /// The revision these count from.
    pub revision: String,
    /// memory.high crossings (memory.events `high`), summed over managed pods.
    pub throttle_events: i64,
    /// OOM kills (memory.events `oom_kill`), summed over managed pods.
    #[serde(rename = "oomKills")]
    pub oom_kills: i64,
    /// The highest `full` memory pressure (PSI avg60, percent) seen on a managed pod.
    pub peak_full_memory_pressure: f64,
    /// The highest refault rate (pages read back a second, between health readings)
    /// measured on a managed pod; absent before one is measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_refaults_per_second: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The controller holds a status per node (`report::ConfigEntry`) and queues one per
    /// watch event: its inline size is paid 20,000 times over whether its parts are
    /// there or not. Boxing the node's facts, the observation and reclaim took it from
    /// 952 to 264 bytes, and the controller's peak at 20,000 nodes back under its goal
    /// (BENCHMARKS.md). A new part that is large belongs in a box too.
    #[test]
    fn a_status_stays_small() {
        let size = std::mem::size_of::<NodeMemoryConfigStatus>();
        assert!(size <= 320, "NodeMemoryConfigStatus is {size} bytes inline");
        let entry = std::mem::size_of::<crate::report::ConfigEntry>();
        assert!(entry <= 640, "ConfigEntry is {entry} bytes inline");
    }
}
