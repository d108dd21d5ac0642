//! `NodeMemoryPolicy`: which nodes, what Memory QoS and Memory Manager settings, how
//! to enforce them and how to roll them out. Cluster-scoped.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::int_or_percent::IntOrPercent;
use crate::quantity::QuantityString;

/// Desired node memory settings for the nodes a label selector picks (a node pool).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "nodemem.io",
    version = "v1alpha1",
    kind = "NodeMemoryPolicy",
    plural = "nodememorypolicies",
    singular = "nodememorypolicy",
    shortname = "nmp",
    category = "nodemem",
    doc = "NodeMemoryPolicy sets Memory QoS (cgroup v2 memory.min/low/high) and Memory Manager (NUMA) policy for the nodes its selector picks, and how changes roll out across them.",
    status = "NodeMemoryPolicyStatus",
    printcolumn = r#"{"name": "Factor", "type": "number", "description": "memory.high throttling factor", "jsonPath": ".spec.memoryQoS.throttlingFactor"}"#,
    printcolumn = r#"{"name": "Reservation", "type": "string", "description": "memory.min / memory.low reservation policy", "jsonPath": ".spec.memoryQoS.reservationPolicy"}"#,
    printcolumn = r#"{"name": "Manager", "type": "string", "description": "Memory Manager policy", "jsonPath": ".spec.memoryManager.policy"}"#,
    printcolumn = r#"{"name": "Enforcement", "type": "string", "description": "Agent writes cgroups; Kubelet renders a kubelet drop-in; Observe writes nothing", "jsonPath": ".spec.enforcement"}"#,
    printcolumn = r#"{"name": "Matched", "type": "integer", "description": "nodes this policy governs", "jsonPath": ".status.matchedNodes"}"#,
    printcolumn = r#"{"name": "Updated", "type": "integer", "description": "nodes on the current revision", "jsonPath": ".status.updatedNodes"}"#,
    printcolumn = r#"{"name": "Ready", "type": "integer", "description": "nodes applied and healthy on the current revision", "jsonPath": ".status.readyNodes"}"#,
    printcolumn = r#"{"name": "Rollout", "type": "string", "description": "what the rollout does or waits for (Updating, WaitingForCanary, Paused, MaxFailures, OneNodeFailed, RollingBack, RolledBack, Releasing, InvalidSpec, Complete)", "jsonPath": ".status.conditions[?(@.type==\"Progressing\")].reason"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Revision", "type": "string", "priority": 1, "description": "the spec's revision", "jsonPath": ".status.revision"}"#,
    printcolumn = r#"{"name": "Target", "type": "string", "priority": 1, "description": "the revision the pool runs or moves to (the previous one after a rollback, the last accepted one while the spec is invalid)", "jsonPath": ".status.targetRevision"}"#,
    printcolumn = r#"{"name": "Leaving", "type": "integer", "priority": 1, "description": "nodes that still run this policy's values while they move to their next policy or are released", "jsonPath": ".status.leavingNodes"}"#,
    printcolumn = r#"{"name": "MemoryHigh", "type": "string", "priority": 1, "description": "Throttle: memory.high from the factor; None: no memory.high (the factor is not used)", "jsonPath": ".spec.memoryQoS.memoryHigh"}"#,
    printcolumn = r#"{"name": "Excluded", "type": "integer", "priority": 1, "description": "selected nodes where nodemem's agent cannot run (Windows, kept off by the agent's nodeSelector or affinity): not governed, not waited for; empty when none", "jsonPath": ".status.excludedNodes"}"#,
    printcolumn = r#"{"name": "Reclaim", "type": "string", "priority": 1, "description": "proactive reclaim: Observe reports what it would take, Active takes it through memory.reclaim, Disabled or empty: none", "jsonPath": ".spec.reclaim.mode"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeMemoryPolicySpec {
    /// Nodes this policy applies to (a node pool). An empty selector selects every node.
    #[serde(default)]
    pub node_selector: NodeSelector,

    /// When several policies select a node, the one with the highest priority governs it.
    /// A tie never moves a node: among policies of equal top priority a node stays with
    /// the policy whose revision it runs, and a node that runs none of them goes to the
    /// oldest; the tie is reported as Conflicting on each of them. Only a strictly
    /// higher priority takes a node from its policy, through that policy's rollout.
    #[serde(default)]
    #[schemars(range(min = -1000000, max = 1000000))]
    pub priority: i32,

    /// The settings that reach the selected nodes (also the NodeMemoryConfig spec).
    #[serde(flatten)]
    pub settings: NodeSettings,

    /// How a new revision rolls out across the selected nodes.
    #[serde(default)]
    pub rollout: RolloutSpec,

    /// What `status.recommendation` aims for and how much evidence it needs (the
    /// controller's business: not part of the revision).
    #[serde(default)]
    pub recommendation: RecommendationSpec,
}

/// The throttling-factor recommendation's target and evidence thresholds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecommendationSpec {
    /// The share of containers, percent, that must stay under memory.high at the
    /// recommended factor.
    #[serde(default = "default_target_percent")]
    #[schemars(range(min = 50, max = 100))]
    pub target_percent: i32,
    /// Containers with room for a memory.high the pool must have been observed with.
    #[serde(default = "default_min_containers")]
    #[schemars(range(min = 1, max = 1000000))]
    pub min_containers: i32,
    /// Seconds of observation at least (a day by default: a daily peak must be in it).
    #[serde(default = "default_min_observation_seconds")]
    #[schemars(range(min = 1, max = 31536000))]
    pub min_observation_seconds: i32,
}

fn default_target_percent() -> i32 {
    99
}
fn default_min_containers() -> i32 {
    20
}
fn default_min_observation_seconds() -> i32 {
    86400
}

impl Default for RecommendationSpec {
    fn default() -> Self {
        RecommendationSpec {
            target_percent: default_target_percent(),
            min_containers: default_min_containers(),
            min_observation_seconds: default_min_observation_seconds(),
        }
    }
}

/// The settings that reach a node: shared by the NodeMemoryPolicy spec and the
/// NodeMemoryConfig spec (flattened into both, so their YAML has these fields at the
/// top of `spec`). The revision hashes exactly this.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
// Whether a kubelet can express the reservation policy depends on its version (before
// v1.36 its MemoryQoS gate is HardReservation and nothing else; from v1.36 its field
// takes None or TieredReservation only), so that is refused per node by the agent
// (`KubeletCannotExpress`), not here: one pool may run both.
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!(has(self.memoryQoS) && has(self.memoryQoS.relief)) || !has(self.enforcement) || self.enforcement == 'Agent'",
        "message": "memoryQoS.relief raises memory.high that the agent set: it needs enforcement: Agent",
        "fieldPath": ".memoryQoS.relief"
    },
    {
        "rule": "!has(self.reclaim) || !has(self.reclaim.mode) || self.reclaim.mode != 'Active' || !has(self.enforcement) || self.enforcement == 'Agent'",
        "message": "reclaim mode Active writes memory.reclaim, which only enforcement: Agent does (mode Observe reports what it would reclaim under any enforcement)",
        "fieldPath": ".reclaim.mode"
    },
    {
        "rule": "!has(self.classes) || size(self.classes) == 0 || !has(self.enforcement) || self.enforcement != 'Kubelet'",
        "message": "classes need enforcement: Agent or Observe: under Kubelet the kubelet sets one throttling factor and one reservation policy for every pod",
        "fieldPath": ".classes"
    },
    {
        "rule": "!has(self.classes) || !has(self.enforcement) || self.enforcement == 'Agent' || self.classes.all(c, !has(c.reclaim) || !has(c.reclaim.mode) || c.reclaim.mode != 'Active')",
        "message": "a class's reclaim mode Active writes memory.reclaim, which only enforcement: Agent does",
        "fieldPath": ".classes"
    }
]))]
pub struct NodeSettings {
    /// Memory QoS on cgroup v2 (KEP-2570): memory.high throttling and memory.min /
    /// memory.low reservation.
    #[serde(default, rename = "memoryQoS")]
    pub memory_qos: MemoryQosSpec,

    /// The kubelet Memory Manager (KEP-1769): NUMA pinning of Guaranteed pods.
    #[serde(default)]
    pub memory_manager: MemoryManagerSpec,

    /// The node's kube-reserved, system-reserved and hard eviction memory. When given,
    /// memoryManager.reservedMemory must sum to kubeReserved + systemReserved +
    /// evictionHard (KEP-1769).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_reserved: Option<NodeReservedSpec>,

    /// How settings reach the node: Agent (the node agent writes cgroup files),
    /// Kubelet (the node agent renders a KubeletConfiguration drop-in) or Observe (the
    /// node agent computes what Agent would write and writes nothing: a shadow run to
    /// see what enforcement would do before turning it on).
    #[serde(default)]
    pub enforcement: Enforcement,

    /// Proactive reclaim of cold memory (opt-in): the agent asks the kernel
    /// (`memory.reclaim`, Linux 5.19 and later) to take back a container's page cache
    /// in small steps while its memory pressure stays under a target, as Meta's Senpai
    /// does, never below what the container requested. Observe (the default) reports
    /// what it would reclaim and writes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<ReclaimSpec>,

    /// Workload classes: what a workload may choose differently from the pool (its
    /// memory.high, whether its request is protected, its proactive reclaim). A pod
    /// chooses one with the annotation `nodemem.io/class: <name>`, a namespace for its
    /// pods with the label of the same key (the pod's own annotation wins); no choice,
    /// or a name the list does not have (a Warning Event on the pod says so), is the
    /// pool's own settings. Part of the revision: a change rolls out as any other.
    /// Needs enforcement Agent or Observe.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub classes: Vec<WorkloadClassSpec>,
}

/// A workload class: each field left out follows the pool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.throttlingFactor) || !has(self.memoryHigh) || self.memoryHigh != 'None'",
        "message": "throttlingFactor is not used with memoryHigh: None",
        "fieldPath": ".throttlingFactor"
    },
    {
        "rule": "!has(self.memoryManager)",
        "message": "a class cannot change the Memory Manager: NUMA pinning and reserved memory are the node's (spec.memoryManager)",
        "fieldPath": ".memoryManager"
    },
    {
        "rule": "!has(self.nodeReserved)",
        "message": "a class cannot change the node's reservations (spec.nodeReserved)",
        "fieldPath": ".nodeReserved"
    },
    {
        "rule": "!has(self.enforcement)",
        "message": "a class cannot change the enforcement: the node's agent enforces every class (spec.enforcement)",
        "fieldPath": ".enforcement"
    },
    {
        "rule": "!has(self.reservationPolicy)",
        "message": "a class cannot change the reservation policy, which the QoS-class cgroups follow: it chooses protection Pool or None",
        "fieldPath": ".reservationPolicy"
    }
]))]
pub struct WorkloadClassSpec {
    /// The class's name, which pods and namespaces choose it by (a DNS label).
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,
    /// memory.high = floor((request + factor * (limit or node allocatable - request)) /
    /// pageSize) * pageSize for this class's containers, the kubelet's formula of each
    /// version. In (0, 1]. Left out: the pool's (memoryQoS.throttlingFactor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("minimum" = 0, "exclusiveMinimum" = true, "maximum" = 1))]
    pub throttling_factor: Option<f64>,
    /// Throttle: memory.high from the class's factor (or the pool's). None: no
    /// memory.high on this class's cgroups (a JVM whose heap must never meet it).
    /// Left out: as the pool (memoryQoS.memoryHigh), but a throttlingFactor given
    /// here throttles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "MemoryHighPolicy")]
    pub memory_high: Option<MemoryHighPolicy>,
    /// Pool (the default): the class's requests become memory.min / memory.low as the
    /// pool's reservationPolicy says. None: no memory.min or memory.low on its cgroups,
    /// and its requests are left out of the QoS-class cgroups' sums.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "ClassProtection")]
    pub protection: Option<ClassProtection>,
    /// The class's proactive reclaim. Left out: the pool's (reclaim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<ClassReclaimSpec>,
    /// Not in a class: the Memory Manager is the node's. Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_manager: Option<NotInAClass>,
    /// Not in a class: the node's reservations are the node's. Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_reserved: Option<NotInAClass>,
    /// Not in a class: the node's agent enforces every class. Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<String>,
    /// Not in a class: a class chooses protection Pool or None. Refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation_policy: Option<String>,
}

/// An object a class may not set (the pool's `memoryManager`, `nodeReserved`),
/// declared so that admission can name it: the apiserver prunes an undeclared field
/// before its rules see it, and its rules see only typed fields (CEL declares no
/// untyped one, apiserver `SchemaDeclType`): an object of any content, kept whole,
/// refused by the class's rules.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NotInAClass(pub serde_json::Value);

impl JsonSchema for NotInAClass {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NotInAClass".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
        })
    }
}

/// Whether a class's requests are protected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
// The variants are the CRD's enum values: a doc comment on one would make the schema
// a `oneOf` of described constants instead of an `enum` (schemars), so the type's doc
// and the fields' docs say what each means.
#[allow(missing_docs)]
pub enum ClassProtection {
    #[default]
    Pool,
    None,
}

/// A class's proactive reclaim: its mode, and its pace where it differs from the
/// pool's (interval, refault budget and QoS classes stay the pool's, or the defaults
/// without a pool reclaim).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassReclaimSpec {
    /// Disabled: none on this class, whatever the pool's. Observe: reports what it
    /// would reclaim. Active: writes memory.reclaim (enforcement: Agent only).
    pub mode: ReclaimModeSpec,
    /// The stall the class's containers may show (see reclaim); left out: the pool's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub target_stall_microseconds_per_second: Option<i32>,
    /// The largest step, per mille of memory.current; left out: the pool's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub max_step_permille: Option<i32>,
}

impl NodeSettings {
    /// What a node gets when no policy governs it any more: everything off, so its agent
    /// gives back what nodemem set (the controller then deletes the config).
    pub fn released() -> NodeSettings {
        NodeSettings {
            memory_qos: MemoryQosSpec {
                enabled: false,
                ..MemoryQosSpec::default()
            },
            memory_manager: MemoryManagerSpec::default(),
            node_reserved: None,
            enforcement: Enforcement::default(),
            reclaim: None,
            classes: Vec::new(),
        }
    }
}

/// A label selector over node labels (same shape as metav1.LabelSelector).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelector {
    /// Labels a node must carry with exactly these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "maxProperties" = 64,
        "additionalProperties" = {"type": "string", "maxLength": 63},
        "x-kubernetes-validations" = [{
            "rule": "self.all(k, self[k].matches('^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$'))",
            "message": "a label value is empty or at most 63 characters of alphanumerics, '-', '_' and '.', starting and ending with an alphanumeric (no node can carry any other)"
        }, {
            "rule": "self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && (!k.contains('/') || k.indexOf('/') <= 253))",
            "message": "a label key is a name of at most 63 characters (alphanumerics, '-', '_' and '.', starting and ending with an alphanumeric), optionally after a DNS subdomain of at most 253 characters and '/' (no node can carry any other)"
        }]
    ))]
    pub match_labels: BTreeMap<String, String>,

    /// Label requirements a node must meet; all must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub match_expressions: Vec<NodeSelectorRequirement>,
}

/// One label requirement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.operator in ['Exists', 'DoesNotExist'] ? (!has(self.values) || size(self.values) == 0) : (has(self.values) && size(self.values) > 0)",
        "message": "values must be non-empty for In and NotIn and empty for Exists and DoesNotExist"
    },
    {
        "rule": "!has(self.values) || self.values.all(v, v.matches('^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$'))",
        "message": "a label value is empty or at most 63 characters of alphanumerics, '-', '_' and '.', starting and ending with an alphanumeric (no node can carry any other)"
    },
    {
        "rule": "self.key.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && (!self.key.contains('/') || self.key.indexOf('/') <= 253)",
        "message": "a label key is a name of at most 63 characters (alphanumerics, '-', '_' and '.', starting and ending with an alphanumeric), optionally after a DNS subdomain of at most 253 characters and '/' (no node can carry any other)",
        "fieldPath": ".key"
    }
]))]
pub struct NodeSelectorRequirement {
    /// The label key.
    #[schemars(length(min = 1, max = 317))]
    pub key: String,
    /// How the key relates to the values.
    pub operator: SelectorOperator,
    /// Values for In and NotIn; must be empty for Exists and DoesNotExist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 63)))]
    pub values: Vec<String>,
}

/// Label selector operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
// The variants are the CRD's enum values: a doc comment on one would make the schema
// a `oneOf` of described constants instead of an `enum` (schemars), so the type's doc
// and the fields' docs say what each means.
#[allow(missing_docs)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// Memory QoS settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryQosSpec {
    /// Whether nodemem manages Memory QoS on the selected nodes. Setting false rolls
    /// back what nodemem set: memory.min and memory.low to 0, memory.high to max.
    #[serde(default = "default_true")]
    pub enabled: bool,

    /// memory.high = floor((request + factor * (limit or node allocatable - request)) / pageSize) * pageSize.
    /// Must be in (0, 1]; 1.0 disables early throttling. Not used with memoryHigh: None.
    #[serde(default = "default_factor")]
    #[schemars(extend("minimum" = 0, "exclusiveMinimum" = true, "maximum" = 1))]
    pub throttling_factor: f64,

    /// Throttle (the default): memory.high from throttlingFactor, as a kubelet with
    /// memoryThrottlingFactor set. None: no memory.high on any cgroup, as a v1.37
    /// kubelet whose memoryThrottlingFactor is unset (its default); protection
    /// (reservationPolicy) is unaffected.
    #[serde(default, skip_serializing_if = "MemoryHighPolicy::is_throttle")]
    #[schemars(extend("default" = "Throttle"))]
    pub memory_high: MemoryHighPolicy,

    /// None: no memory.min or memory.low. TieredReservation: memory.min for Guaranteed
    /// pods, memory.low for Burstable pods (kubelet v1.36). HardReservation: memory.min
    /// for every container and pod with a memory request (KEP-2570 v1.27 behaviour).
    #[serde(default)]
    pub reservation_policy: ReservationPolicy,

    /// Relief for a container memory.high chokes (opt-in; `enforcement: Agent` only):
    /// when its `full` memory pressure stays above a threshold while its working set
    /// sits at memory.high, the agent raises that container's memory.high to its
    /// memory.max (or max) for a while, then puts it back; a container that needs it
    /// again soon is reported, not relieved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relief: Option<ReliefSpec>,
}

/// When and for how long the agent relieves a choking container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReliefSpec {
    /// The container's PSI `full` memory pressure (avg10, percent of time all its
    /// tasks stalled on memory) above which it is choking.
    #[serde(default = "default_relief_pressure")]
    #[schemars(range(min = 1, max = 100))]
    pub full_pressure_percent: i32,
    /// How long it must choke before its memory.high is raised.
    #[serde(default = "default_relief_sustained")]
    #[schemars(range(min = 10, max = 3600))]
    pub sustained_seconds: i32,
    /// How long memory.high stays raised.
    #[serde(default = "default_relief_seconds")]
    #[schemars(range(min = 10, max = 86400))]
    pub relief_seconds: i32,
    /// A container that chokes again within this long after its relief ended is
    /// reported (Event, metric, status), not relieved again.
    #[serde(default = "default_relief_repeat")]
    #[schemars(range(min = 0, max = 604800))]
    pub repeat_window_seconds: i32,
}

fn default_relief_pressure() -> i32 {
    20
}
fn default_relief_sustained() -> i32 {
    30
}
fn default_relief_seconds() -> i32 {
    300
}
fn default_relief_repeat() -> i32 {
    3600
}

fn default_true() -> bool {
    true
}

fn default_factor() -> f64 {
    0.9
}

impl Default for MemoryQosSpec {
    fn default() -> Self {
        MemoryQosSpec {
            enabled: true,
            throttling_factor: default_factor(),
            memory_high: MemoryHighPolicy::Throttle,
            reservation_policy: ReservationPolicy::None,
            relief: None,
        }
    }
}

/// How the agent reclaims cold memory (`reclaim`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimSpec {
    /// Observe (default): every step is computed and reported as what would be
    /// reclaimed, nothing is written. Active: steps are written to memory.reclaim
    /// (enforcement: Agent only). Disabled: nothing, as without the section. (Not On
    /// and Off: YAML 1.1, which kubectl and Helm read, makes those booleans.)
    #[serde(default)]
    pub mode: ReclaimModeSpec,
    /// The memory pressure a container may show: PSI `some` stall, microseconds per
    /// second of time (1000 is 0.1 % of the time with a task waiting on memory). Over
    /// it, reclaim backs off for an interval; under it, steps grow as the stall falls.
    #[serde(default = "default_reclaim_stall")]
    #[schemars(range(min = 1, max = 100000))]
    pub target_stall_microseconds_per_second: i32,
    /// The largest step, per mille of the container's memory.current (10: 1 %, as
    /// Senpai), taken when its stall is a tenth of the target or less.
    #[serde(default = "default_reclaim_step")]
    #[schemars(range(min = 1, max = 100))]
    pub max_step_permille: i32,
    /// Seconds between steps on one container, and the pause after a back-off.
    #[serde(default = "default_reclaim_interval")]
    #[schemars(range(min = 2, max = 3600))]
    pub interval_seconds: i32,
    /// Refaults (reclaimed pages read back, memory.stat workingset_refault_*) per
    /// second a container may show: over it, reclaim backs off for an interval.
    #[serde(default = "default_reclaim_refaults")]
    #[schemars(range(min = 0, max = 1000000))]
    pub max_refaults_per_second: i32,
    /// The QoS classes of the containers it acts on (Burstable and BestEffort unless
    /// given). A Guaranteed container is only reclaimed from when named, and no
    /// container below its memory request.
    #[serde(default = "default_reclaim_classes")]
    #[schemars(length(min = 1, max = 3))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub qos_classes: Vec<QosClassName>,
}

fn default_reclaim_stall() -> i32 {
    1000
}
fn default_reclaim_step() -> i32 {
    10
}
fn default_reclaim_interval() -> i32 {
    6
}
fn default_reclaim_refaults() -> i32 {
    100
}
fn default_reclaim_classes() -> Vec<QosClassName> {
    vec![QosClassName::Burstable, QosClassName::BestEffort]
}

impl Default for ReclaimSpec {
    fn default() -> Self {
        ReclaimSpec {
            mode: ReclaimModeSpec::default(),
            target_stall_microseconds_per_second: default_reclaim_stall(),
            max_step_permille: default_reclaim_step(),
            interval_seconds: default_reclaim_interval(),
            max_refaults_per_second: default_reclaim_refaults(),
            qos_classes: default_reclaim_classes(),
        }
    }
}

/// Whether reclaim reports, writes or does nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
// The variants are the CRD's enum values: a doc comment on one would make the schema
// a `oneOf` of described constants instead of an `enum` (schemars), so the type's doc
// and the fields' docs say what each means.
#[allow(missing_docs)]
pub enum ReclaimModeSpec {
    Disabled,
    #[default]
    Observe,
    Active,
}

/// A pod QoS class.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
// The variants are the CRD's enum values: a doc comment on one would make the schema
// a `oneOf` of described constants instead of an `enum` (schemars), so the type's doc
// and the fields' docs say what each means.
#[allow(missing_docs)]
pub enum QosClassName {
    Guaranteed,
    Burstable,
    BestEffort,
}

/// Whether memory.high is written (`memoryQoS.memoryHigh`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
// The variants are the CRD's enum values: a doc comment on one would make the schema
// a `oneOf` of described constants instead of an `enum` (schemars), so the type's doc
// and the fields' docs say what each means.
#[allow(missing_docs)]
pub enum MemoryHighPolicy {
    #[default]
    Throttle,
    None,
}

impl MemoryHighPolicy {
    /// The default, left out of serialized specs so that the revision of a policy
    /// written before the field existed does not change.
    pub fn is_throttle(&self) -> bool {
        *self == MemoryHighPolicy::Throttle
    }
}

/// memory.min / memory.low reservation policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
// The variants are the CRD's enum values: a doc comment on one would make the schema
// a `oneOf` of described constants instead of an `enum` (schemars), so the type's doc
// and the fields' docs say what each means.
#[allow(missing_docs)]
pub enum ReservationPolicy {
    #[default]
    None,
    TieredReservation,
    HardReservation,
}

/// Memory Manager settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.policy != 'Static' || (has(self.reservedMemory) && self.reservedMemory.exists(r, 'memory' in r.limits))",
        "message": "the Static policy needs reservedMemory with a memory entry on at least one NUMA node",
        "fieldPath": ".reservedMemory"
    },
    {
        "rule": "self.policy == 'Static' || !has(self.reservedMemory) || size(self.reservedMemory) == 0",
        "message": "reservedMemory is only used by the Static policy",
        "fieldPath": ".reservedMemory"
    }
]))]
pub struct MemoryManagerSpec {
    /// None: no NUMA pinning. Static: Guaranteed pods are pinned to the smallest set of
    /// NUMA nodes that can hold their memory and hugepages.
    #[serde(default)]
    pub policy: MemoryManagerPolicy,

    /// Memory held back from pods per NUMA node and memory type (kubelet `reservedMemory`).
    /// At most 8 entries: the topology manager supports at most 8 NUMA nodes.
    // The bound also keeps the CEL cost estimate of the per-entry rules within budget.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["numaNode"]))]
    pub reserved_memory: Vec<ReservedMemory>,
}

/// Memory Manager policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
// The variants are the CRD's enum values: a doc comment on one would make the schema
// a `oneOf` of described constants instead of an `enum` (schemars), so the type's doc
// and the fields' docs say what each means.
#[allow(missing_docs)]
pub enum MemoryManagerPolicy {
    #[default]
    None,
    Static,
}

/// Reserved memory on one NUMA node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
// The kubelet refuses to start with a zero reservation
// (validateReservedMemoryConfiguration); so does admission. Quantities that do not parse
// are left to the quantity pattern's own message, negative ones to the quantity's
// "must not be negative".
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "self.limits.all(k, type(self.limits[k]) == int ? self.limits[k] != 0 : (!isQuantity(string(self.limits[k])) || quantity(string(self.limits[k])).isGreaterThan(quantity('0')) || quantity(string(self.limits[k])).isLessThan(quantity('0'))))",
        "message": "reserved memory may not be zero (the kubelet refuses to start with a zero reservation)"
    }
]))]
pub struct ReservedMemory {
    // The doc comment is the CRD's description (kept as users have read it): `<id>`
    // is text, not HTML.
    #[allow(rustdoc::invalid_html_tags)]
    /// NUMA node id as in /sys/devices/system/node/node<id>.
    #[schemars(range(min = 0, max = 1023))]
    pub numa_node: i32,

    /// Amount per memory type: `memory` or `hugepages-<size>` (for example hugepages-2Mi).
    #[schemars(extend(
        "minProperties" = 1,
        "maxProperties" = 8,
        "x-kubernetes-validations" = [{
            "rule": "self.all(k, k == 'memory' || k.matches('^hugepages-[0-9]+(Ki|Mi|Gi|Ti)$'))",
            "message": "memory types must be memory or hugepages-<size> such as hugepages-2Mi or hugepages-1Gi"
        }]
    ))]
    pub limits: BTreeMap<String, QuantityString>,
}

/// The node's memory reservations (kubelet kubeReserved, systemReserved, evictionHard).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeReservedSpec {
    /// kube-reserved memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_reserved: Option<QuantityString>,
    /// system-reserved memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_reserved: Option<QuantityString>,
    /// The memory.available hard eviction threshold; the kubelet default is 100Mi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_hard: Option<QuantityString>,
}

/// How settings reach the node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
// The variants are the CRD's enum values: a doc comment on one would make the schema
// a `oneOf` of described constants instead of an `enum` (schemars), so the type's doc
// and the fields' docs say what each means.
#[allow(missing_docs)]
pub enum Enforcement {
    #[default]
    Agent,
    Kubelet,
    Observe,
}

/// When a node counts as healthy on a revision: the agent's `Healthy` condition, which
/// the rollout gates on. Counted over the pods nodemem manages, since the revision was
/// applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthSpec {
    /// OOM kills (memory.events oom_kill) tolerated before the node is unhealthy.
    #[serde(default = "default_max_oom_kills", rename = "maxOOMKills")]
    #[schemars(range(min = 0, max = 1000000))]
    pub max_oom_kills: i32,
    /// The highest `full` memory pressure (PSI, avg60, percent of time) any managed pod
    /// may show: above it, work is stalled on memory for a sustained period.
    #[serde(default = "default_max_full_pressure")]
    #[schemars(range(min = 1, max = 100))]
    pub max_full_memory_pressure_percent: i32,
    /// Reliefs (`memoryQoS.relief`) tolerated since the revision was applied: a
    /// revision that makes containers need relief is not healthy.
    #[serde(default)]
    #[schemars(range(min = 0, max = 1000000))]
    pub max_reliefs: i32,
    /// What a node does when its memory pressure cannot be read (PSI is off: kernels
    /// booted with `psi=0`, or RHEL-family kernels without `psi=1`), so that
    /// `maxFullMemoryPressurePercent` cannot be evaluated. `Hold` (default): its agent
    /// reports `Healthy=Unknown` (`PressureUnavailable`), the node is not counted ready
    /// and the rollout does not pass it; at `progressDeadlineSeconds` it fails as any
    /// node not ready (`failurePolicy`). `Proceed`: the node is judged on the other
    /// gates alone (`Healthy=True`, `HealthyWithoutPressure`).
    // Hold is not written: a controller newer than its CRDs writes configs the old
    // schema accepts (the apiserver refuses a field it does not declare, 500).
    #[serde(default, skip_serializing_if = "PressureUnavailable::is_hold")]
    pub pressure_unavailable: PressureUnavailable,
    /// The highest refault rate (memory.stat `workingset_refault_anon` +
    /// `workingset_refault_file`: pages evicted and read back soon after, per second)
    /// any managed pod may show, measured between the agent's health readings (at
    /// least 10 s apart). Above it, a pod is losing memory it still uses: a revision
    /// whose reclaim (or memory.high) takes what pods read back is not healthy. Unset:
    /// 1000 where the revision's reclaim is Active, not gated otherwise. Until a rate
    /// is measured (one reading gives none; the agent reads again 10 s after a
    /// revision is applied) the node reports `Healthy=Unknown` (`RefaultsUnknown`) and
    /// is not counted ready.
    // Not written when unset: a controller newer than its CRDs writes configs the old
    // schema accepts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000000))]
    pub max_refaults_per_second: Option<i32>,
}

/// The refault gate where the policy names none and its reclaim is Active: ten times
/// reclaim's own default budget (`reclaim.maxRefaultsPerSecond`, 100), 4 MiB a second
/// of 4 KiB pages read back per pod: reclaim's back-off keeps a pod far under it, a
/// revision that takes what pods use does not.
pub const DEFAULT_ACTIVE_RECLAIM_MAX_REFAULTS: i32 = 1000;

impl HealthSpec {
    /// The refault gate a revision is judged by (pages a second per pod), given
    /// whether its reclaim is Active; None: not gated.
    pub fn refault_gate(&self, reclaim_active: bool) -> Option<i32> {
        self.max_refaults_per_second
            .or(reclaim_active.then_some(DEFAULT_ACTIVE_RECLAIM_MAX_REFAULTS))
    }
}

/// See [`HealthSpec::pressure_unavailable`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
// The variants are the CRD's enum values: a doc comment on one would make the schema
// a `oneOf` of described constants instead of an `enum` (schemars), so the type's doc
// and the fields' docs say what each means.
#[allow(missing_docs)]
pub enum PressureUnavailable {
    #[default]
    Hold,
    Proceed,
}

impl PressureUnavailable {
    fn is_hold(&self) -> bool {
        *self == PressureUnavailable::Hold
    }
}

fn default_max_oom_kills() -> i32 {
    3
}

fn default_max_full_pressure() -> i32 {
    20
}

impl Default for HealthSpec {
    fn default() -> Self {
        HealthSpec {
            max_oom_kills: default_max_oom_kills(),
            max_full_memory_pressure_percent: default_max_full_pressure(),
            max_reliefs: 0,
            pressure_unavailable: PressureUnavailable::Hold,
            max_refaults_per_second: None,
        }
    }
}

/// Rollout of a new revision across the selected nodes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
// As Deployment validation refuses maxUnavailable 0 with maxSurge 0: a rollout that may
// take no node out of service and has no canary could never move one.
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.maxUnavailable) || (type(self.maxUnavailable) == int ? self.maxUnavailable != 0 : self.maxUnavailable != '0%') || (has(self.canary) && (type(self.canary) == int ? self.canary != 0 : self.canary != '0%'))",
        "message": "maxUnavailable 0 with no canary would never move a node: set maxUnavailable to at least 1 (or 1%)",
        "fieldPath": ".maxUnavailable"
    },
    // As Deployment validation: a node must be ready for minReadySeconds and fails at
    // progressDeadlineSeconds, so every healthy node would fail first.
    {
        "rule": "!has(self.minReadySeconds) || !has(self.progressDeadlineSeconds) || self.minReadySeconds < self.progressDeadlineSeconds",
        "message": "minReadySeconds (60 unless given) must be less than progressDeadlineSeconds: a node must be ready that long, and fails at the deadline first",
        "fieldPath": ".minReadySeconds"
    }
]))]
pub struct RolloutSpec {
    /// When an updated node counts as healthy.
    #[serde(default)]
    pub health: HealthSpec,

    /// Nodes updated at the same time (count or percent of matched nodes); default 1.
    #[serde(default)]
    pub max_unavailable: IntOrPercent,

    /// Seconds a node must report Applied and Healthy before it counts as ready; default
    /// 60, so that the pressure gate's PSI average (full avg60) is made wholly of time
    /// under the new values and a minute of the workload can show its OOM kills.
    #[serde(default = "default_min_ready")]
    #[schemars(range(min = 0, max = 86400))]
    pub min_ready_seconds: i32,

    /// Stops starting new node updates; nodes already updating finish.
    #[serde(default)]
    pub paused: bool,

    /// Nodes (count or percent) updated first; the rest waits until they are ready.
    /// None in a rollout section that names none; a policy without a rollout section
    /// gets one node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<IntOrPercent>,

    /// What to do when maxFailures nodes fail: Pause the rollout or Rollback to the
    /// previous revision.
    #[serde(default)]
    pub failure_policy: FailurePolicy,

    /// Failed nodes tolerated before failurePolicy is applied.
    #[serde(default = "default_max_failures")]
    #[schemars(range(min = 1, max = 10000))]
    pub max_failures: i32,

    /// Seconds an updating node may take to report Applied and Healthy before it counts
    /// as failed.
    #[serde(default = "default_progress_deadline")]
    #[schemars(range(min = 10, max = 86400))]
    pub progress_deadline_seconds: i32,
}

fn default_max_failures() -> i32 {
    1
}

/// A minute: PSI's 60-second average, which the pressure gate reads, then covers only
/// time under the new values.
pub const DEFAULT_MIN_READY_SECONDS: i32 = 60;

fn default_min_ready() -> i32 {
    DEFAULT_MIN_READY_SECONDS
}

fn default_progress_deadline() -> i32 {
    600
}

impl Default for RolloutSpec {
    /// A policy without a rollout section: one node first (a canary), each node ready a
    /// minute before the next starts, one at a time. Gradual enough for the health gates
    /// to see a bad revision on one node before it reaches the pool. (Objects stored
    /// before these defaults keep what was stored with them: minReadySeconds 0 and no
    /// canary; the apiserver fills in only what is absent.)
    fn default() -> Self {
        RolloutSpec {
            max_unavailable: IntOrPercent::default(),
            min_ready_seconds: DEFAULT_MIN_READY_SECONDS,
            paused: false,
            canary: Some(IntOrPercent::Int(1)),
            failure_policy: FailurePolicy::Pause,
            max_failures: default_max_failures(),
            progress_deadline_seconds: default_progress_deadline(),
            health: HealthSpec::default(),
        }
    }
}

/// Reaction to failed nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
// The variants are the CRD's enum values: a doc comment on one would make the schema
// a `oneOf` of described constants instead of an `enum` (schemars), so the type's doc
// and the fields' docs say what each means.
#[allow(missing_docs)]
pub enum FailurePolicy {
    #[default]
    Pause,
    Rollback,
}

/// Observed state of a policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMemoryPolicyStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Hash of the effective node settings; changes start a rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The revision the pool runs or moves to: the spec's; the previous one after a
    /// rollback; the last accepted one while the spec is invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_revision: Option<String>,
    /// Nodes that still run this policy's values but are leaving it (the policy is
    /// deleted, or no longer selects them): each keeps its values until its turn.
    #[serde(default)]
    pub leaving_nodes: i32,
    /// Nodes this policy governs.
    #[serde(default)]
    pub matched_nodes: i32,
    /// Governed nodes whose NodeMemoryConfig carries the current revision.
    #[serde(default)]
    pub updated_nodes: i32,
    /// Updated nodes applied and healthy for minReadySeconds.
    #[serde(default)]
    pub ready_nodes: i32,
    /// Updated nodes whose agent reports a failure.
    #[serde(default)]
    pub failed_nodes: i32,
    /// Selected nodes where another policy has the same top priority.
    #[serde(default)]
    pub conflicting_nodes: i32,
    /// Nodes the policy would govern where nodemem's agent cannot run (its nodeSelector
    /// or required node affinity keeps it off: Windows nodes, nodes a team keeps it
    /// away from). Not governed: no config is written for them and no rollout waits
    /// for them. Absent when none: a controller newer than its CRDs (Helm never
    /// upgrades them) then writes nothing an older schema lacks.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub excluded_nodes: i32,
    /// The first excluded nodes by name, each with why the agent cannot run there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub excluded_node_names: Vec<ExcludedNode>,
    /// Accepted, Conflicting (a tie), Progressing (the rollout's state) and Degraded;
    /// Ready, Reconciling and Stalled as GitOps tools read them (kstatus): Ready only
    /// when the spec's revision runs on every node the policy governs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The settings of the current and the previous revision, newest first: a
    /// rollback returns nodes to the previous one, also after a controller restart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2))]
    pub revisions: Vec<RevisionRecord>,
    /// A revision that failed and was rolled back; the pool stays on the previous
    /// revision until the spec changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back_revision: Option<String>,
    /// Nodes that failed on the current revision (at most 20 named).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub failed_node_names: Vec<String>,
    /// The pool's signals, summed from its nodes' status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolSignals>,
    /// The throttling factor the pool's workloads tolerate, from the observation of
    /// the nodes on the current revision (`kubectl nodemem recommend`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommendation: Option<RecommendationStatus>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// A node a policy selects where nodemem's agent cannot run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExcludedNode {
    /// The Node's name.
    pub name: String,
    /// Why the agent's pod cannot run there, as the scheduler would judge it.
    pub reason: String,
}

/// What the pool's observation says about the throttling factor.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecommendationStatus {
    /// Recommended (`throttlingFactor` is set), NoFactorSuffices (even 1.0 throttles
    /// more than the target allows: those containers outgrow their limits) or
    /// TooLittleEvidence (`message` says what is missing).
    pub reason: RecommendationReason,
    /// What the recommendation says, in words.
    pub message: String,
    /// The lowest factor (in steps of 0.05) from which on upwards at least the target
    /// share of containers stays under memory.high.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttling_factor: Option<f64>,
    /// The share, percent, that the target asks for.
    pub target_percent: i32,
    /// The share, percent, of containers under memory.high at the recommended factor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fitting_percent: Option<f64>,
    /// The policy's factor now.
    pub current_factor: f64,
    /// The share, percent, of containers the current factor throttles (or would).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_throttled_percent: Option<f64>,
    /// Containers observed with room for a memory.high.
    pub containers: i32,
    /// Nodes on the current revision whose observation counts.
    pub nodes: i32,
    /// How long at least a quorum of those nodes (half the pool, two in a pool of two
    /// or more) has observed, seconds: one node cannot meet the minimum for its pool.
    pub observed_seconds: i64,
    /// Per factor 0.05 ... 1.00: the share, percent, of containers that stay under
    /// its memory.high (empty without enough evidence).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub distribution: Vec<FactorShare>,
    /// The same for each workload class whose memory.high does not follow the pool's
    /// factor, from its own containers alone (those are left out of the figures above,
    /// which recommend the pool's factor).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub classes: Vec<ClassRecommendation>,
}

/// A workload class's own throttling-factor recommendation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassRecommendation {
    /// The class.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// As the pool's `reason`, for this class's containers.
    pub reason: RecommendationReason,
    /// What it says, in words.
    pub message: String,
    /// The factor recommended for the class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttling_factor: Option<f64>,
    /// The share, percent, of its containers under memory.high at that factor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fitting_percent: Option<f64>,
    /// The class's factor now; absent: the class sets no memory.high.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_factor: Option<f64>,
    /// Its containers observed with room for a memory.high.
    pub containers: i32,
}

/// How a recommendation came out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
// The variants are the CRD's enum values: a doc comment on one would make the schema
// a `oneOf` of described constants instead of an `enum` (schemars), so the type's doc
// and the fields' docs say what each means.
#[allow(missing_docs)]
pub enum RecommendationReason {
    Recommended,
    NoFactorSuffices,
    #[default]
    TooLittleEvidence,
}

/// One factor and the share of containers it keeps under memory.high.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FactorShare {
    /// A throttling factor.
    pub factor: f64,
    /// Percent.
    pub fitting_percent: f64,
}

/// One revision's settings, kept for rollback.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionRecord {
    /// The revision (settings hash).
    pub revision: String,
    /// Its settings.
    pub settings: NodeSettings,
}

/// A pool's signals from its nodes' NodeMemoryConfig status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolSignals {
    /// Sum of the nodes' memory.min totals.
    pub memory_min_bytes: i64,
    /// Sum of the nodes' memory.low totals.
    pub memory_low_bytes: i64,
    /// memory.high crossings since each node's revision was applied.
    pub throttle_events: i64,
    /// OOM kills since each node's revision was applied.
    #[serde(rename = "oomKills")]
    pub oom_kills: i64,
    /// The nodes with the most OOM kills, then throttle events (at most 5).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub worst_nodes: Vec<String>,
    /// Proactive reclaim summed over the nodes that report it (`reclaim`); absent
    /// when none does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<PoolReclaim>,
    /// Each workload class of the spec with the pods that run it on the pool's nodes
    /// (as their agents last reported); absent without classes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub classes: Vec<ClassPods>,
}

/// How many pods run a workload class.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassPods {
    /// The class.
    pub name: String,
    /// Its pods.
    pub pods: i64,
}

/// A pool's proactive reclaim: the sums of its nodes' `status.reclaim`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolReclaim {
    /// Nodes reporting reclaim (active or observing).
    pub nodes: i64,
    /// Of them, nodes whose kernel has no memory.reclaim (before Linux 5.19): they
    /// cannot reclaim; their configs' `status.reclaim.supported` is false.
    pub unsupported_nodes: i64,
    /// Active: what the containers' memory.current lost at the steps, bytes.
    pub reclaimed_bytes: i64,
    /// Active: what the containers' working set lost at the steps (memory.available
    /// gained), bytes.
    pub headroom_gained_bytes: i64,
    /// Observe: what the steps would have asked, bytes.
    pub would_reclaim_bytes: i64,
    /// Page cache (and anon where swap takes it) above the requests now, bytes.
    pub reclaimable_bytes: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A controller writes configs to CRDs that may predate `pressureUnavailable` (Helm
    /// does not upgrade CRDs): its default is not written, so such a write is accepted.
    #[test]
    fn the_default_pressure_rule_is_not_written_and_proceed_is() {
        let default = serde_json::to_value(HealthSpec::default()).unwrap();
        assert!(default.get("pressureUnavailable").is_none(), "{default}");
        let proceed = HealthSpec {
            pressure_unavailable: PressureUnavailable::Proceed,
            ..HealthSpec::default()
        };
        let text = serde_json::to_value(&proceed).unwrap();
        assert_eq!(text["pressureUnavailable"], "Proceed");
        let back: HealthSpec = serde_json::from_value(text).unwrap();
        assert_eq!(back, proceed);
        let old: HealthSpec = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(old.pressure_unavailable, PressureUnavailable::Hold);
    }
}
