//! Memory QoS on cgroup v2: the values of memory.min, memory.low and memory.high for
//! every container, pod, QoS-class cgroup and `kubepods` on a node.
//!
//! Parity target is the kubelet of the node's version (`QosRules`: v1.36 with the two
//! v1.37 fixes, or v1.37; checked against the v1.36.3 and v1.37.2 kubelets on the real
//! node), which wins over KEP prose where they differ. The places where they differ, and
//! what is done here:
//!
//! * **Which containers get memory.high.** `generateLinuxContainerResources` skips it
//!   only when the container's memory request equals its limit and is non-zero (v1.37
//!   fix: before it, request == limit == 0 also skipped it, so BestEffort containers
//!   got none). The test is per container, not per pod QoS class: a container with
//!   request == limit inside a Burstable pod gets no memory.high either.
//! * **KEP "Case III" (limit without request).** The apiserver defaults a missing
//!   request to the limit, so the kubelet sees request == limit and sets no
//!   memory.high. The KEP's `factor * limit` value only arises when the formula is
//!   called with request 0 (see `ThrottlingFactor::memory_high`).
//! * **The memory.high guard.** The KEP says "only if memory.high > memory.min"; the
//!   kubelet compares with the container's memory *request*. Under HardReservation they
//!   are the same number; under TieredReservation/None the request is used, as the
//!   kubelet does.
//! * **Pod-level limits.** The container's memory.high uses the container's own limit
//!   (or node allocatable), never the pod-level limit, as in the kubelet, where the
//!   pod-level limit only feeds the container's memory.max.
//! * **Which node allocatable.** For a container without a limit the kubelet's ceiling
//!   is `getNodeAllocatable`, the container manager's `GetNodeAllocatableAbsolute`:
//!   capacity minus kube-reserved and system-reserved, *without* the hard eviction
//!   threshold that the Node's `status.allocatable` also subtracts (KEP prose says
//!   "node allocatable memory"). Found on the real node (tests/real_node/main.rs): with
//!   `evictionHard: memory.available: 50Mi` the kubelet's memory.high was 0.9 x 50Mi
//!   above one computed from `status.allocatable`. [`NodeMemoryFacts::hard_eviction_memory`]
//!   adds the threshold back.
//! * **kubepods under TieredReservation** gets memory.min = sum of Guaranteed and
//!   Burstable pod requests, and (v1.37 fix) memory.low = sum of Burstable pod requests,
//!   so the burstable cgroup's memory.low is not capped to 0 by its parent.
//! * **Pod-level memory.high (v1.37 rules only).** From v1.37 the kubelet sets
//!   memory.high on the pod cgroup of a pod with pod-level resources whose memory
//!   limits are declared (`ApplyPodLevelMemoryHigh`: the same formula over the pod's
//!   request and limit), and none on its containers that have no memory limit when the
//!   pod has a pod-level memory limit (the pod's memory.high throttles them: the
//!   kernel walks the ancestors). Kubelets up to v1.36 set memory.high on containers
//!   only; the node's [`QosRules`] say which (`kubelet_version.rs`).
//! * **No throttling factor** (the v1.37 kubelet's default): no memory.high anywhere.
//! * **HardReservation** (the KEP's v1.27 behaviour, not in the v1.36 kubelet):
//!   memory.min = request for every container and pod with a memory request; the
//!   burstable cgroup's memory.min = sum of Burstable pod requests; kubepods' memory.min
//!   = sum of all pod requests.
//!
//! Pod requests are the effective pod requests (`PodRequests`): KEP-753 aggregation of
//! init and sidecar containers, KEP-2837 pod-level resources, plus overhead.

use crate::kubelet::version::{KubeletVersion, QosRules};
use crate::pod::profile::{ContainerMemory, PodMemoryProfile};
use crate::pod::qos::{qos_class, QosClass};
use crate::pod::{ordered_containers, ContainerKind, Pod};
use crate::values::cgroup::{
    memory_qos_reset, set_bytes, CgroupValues, MEMORY_HIGH, MEMORY_LOW, MEMORY_MAX, MEMORY_MIN,
};
use crate::values::factor::{KubeletFloat, ThrottlingFactor};
use crate::values::kernel::memory_qos_kernel_warnings;
use crate::warning::Warning;

/// `memoryReservationPolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReservationPolicy {
    /// No memory.min or memory.low; throttling via memory.high only.
    #[default]
    None,
    /// Guaranteed: memory.min; Burstable: memory.low (the v1.36 kubelet).
    TieredReservation,
    /// memory.min for every container and pod with a memory request (KEP-2570, v1.27).
    HardReservation,
}

/// What a policy asks of Memory QoS on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemoryQosSettings {
    /// When false, nodemem rolls back what it set: memory.min/low to 0, memory.high to max.
    pub enabled: bool,
    /// None: no memory.high anywhere (the v1.37 kubelet's unset
    /// `memoryThrottlingFactor`).
    pub throttling_factor: Option<ThrottlingFactor>,
    /// Which pods memory.min or memory.low protect, and how.
    pub reservation_policy: ReservationPolicy,
}

impl Default for MemoryQosSettings {
    fn default() -> Self {
        MemoryQosSettings {
            enabled: true,
            throttling_factor: Some(ThrottlingFactor::DEFAULT),
            reservation_policy: ReservationPolicy::None,
        }
    }
}

/// Node facts the rules need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeMemoryFacts {
    /// `status.allocatable.memory` in bytes.
    pub allocatable_memory: Option<i64>,
    /// `status.capacity.memory` in bytes: no ceiling is above it.
    pub capacity_memory: Option<i64>,
    /// The kubelet's `memory.available` hard eviction threshold in bytes (its
    /// `evictionHard`, 100Mi by default; a percentage resolved against capacity,
    /// `MemoryEviction::bytes`), which `status.allocatable` subtracts and the
    /// kubelet's memory.high ceiling does not; None when unknown: the ceiling is then
    /// `status.allocatable`.
    pub hard_eviction_memory: Option<i64>,
    /// Base page size in bytes (4096 on x86_64); hugepages play no part.
    pub page_size: i64,
    /// `status.nodeInfo.kernelVersion`.
    pub kernel_version: Option<String>,
    /// `status.nodeInfo.kubeletVersion`, which decides the [`QosRules`]; None when not
    /// known (the newest rules).
    pub kubelet_version: Option<KubeletVersion>,
    /// How this node's kubelet rounds memory.high's float64 expression (by
    /// `status.nodeInfo.architecture`).
    pub kubelet_float: KubeletFloat,
}

impl NodeMemoryFacts {
    /// The kubelet's node allocatable for enforcement (`GetNodeAllocatableAbsolute`:
    /// capacity minus kube- and system-reserved): `status.allocatable` plus the hard
    /// eviction threshold, never above capacity (a threshold assumed where the node
    /// has none must not lift the ceiling past the machine); None without a positive
    /// allocatable.
    pub fn kubelet_allocatable(&self) -> Option<i64> {
        let allocatable = self.allocatable_memory.filter(|a| *a > 0)?;
        let ceiling = allocatable.saturating_add(self.hard_eviction_memory.unwrap_or(0).max(0));
        Some(match self.capacity_memory.filter(|c| *c > 0) {
            Some(capacity) => ceiling.min(capacity.max(allocatable)),
            None => ceiling,
        })
    }

    /// The rules of this node's kubelet.
    pub fn rules(&self) -> QosRules {
        QosRules::for_kubelet(self.kubelet_version)
    }
}

impl Default for NodeMemoryFacts {
    fn default() -> Self {
        NodeMemoryFacts {
            allocatable_memory: None,
            capacity_memory: None,
            hard_eviction_memory: None,
            page_size: 4096,
            kernel_version: None,
            kubelet_version: None,
            kubelet_float: KubeletFloat::Separate,
        }
    }
}

/// One container's values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerPlan {
    /// Its name.
    pub name: String,
    /// Init, sidecar or app.
    pub kind: ContainerKind,
    /// Its cgroup's values.
    pub cgroup: CgroupValues,
}

/// One pod's values and its containers'.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodPlan {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// Its QoS class.
    pub qos: QosClass,
    /// Annotated `nodemem.io/memory-qos: disabled`: no values, not in the sums.
    pub opted_out: bool,
    /// Its cgroup's values.
    pub cgroup: CgroupValues,
    /// Init and sidecar containers in spec order, then app containers.
    pub containers: Vec<ContainerPlan>,
}

/// Node totals, the equivalents of `kubelet_memory_qos_node_memory_{min,low}_bytes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryTotals {
    /// memory.min summed over the node's pods.
    pub memory_min_bytes: i64,
    /// memory.low summed over the node's pods.
    pub memory_low_bytes: i64,
}

/// A node's values: the node-level cgroups', each pod's, and the warnings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodePlan {
    /// The kubepods cgroup's.
    pub kubepods: CgroupValues,
    /// The Burstable QoS cgroup's.
    pub burstable: CgroupValues,
    /// The BestEffort QoS cgroup's.
    pub besteffort: CgroupValues,
    /// Each pod's, in the order given.
    pub pods: Vec<PodPlan>,
    /// What the node should know of them.
    pub warnings: Vec<Warning>,
    /// memory.min and memory.low summed.
    pub totals: MemoryTotals,
}

/// Computes the desired cgroup values of a node. Pods must already carry apiserver
/// defaults (see [`crate::pod::defaulting::apply_defaults`]).
pub fn plan_node(settings: &MemoryQosSettings, node: &NodeMemoryFacts, pods: &[Pod]) -> NodePlan {
    if !settings.enabled {
        return plan_rollback(pods);
    }
    plan_pods(settings, node, pods.iter().map(|p| (p, false)))
}

/// [`plan_node`] for Memory QoS enabled, where a pod paired with `true` has opted out
/// (`nodemem.io/memory-qos: disabled`): it gets no memory.min/low/high and its
/// request is left out of the QoS-class and kubepods sums, since nothing protects it.
/// memory.max stays in its values: it is the runtime's, shown for information.
pub fn plan_pods<'a>(
    settings: &MemoryQosSettings,
    node: &NodeMemoryFacts,
    pods: impl Iterator<Item = (&'a Pod, bool)>,
) -> NodePlan {
    let mut acc = NodeAccumulator::new(settings, node);
    let mut planned = Vec::new();
    for (pod, opted_out) in pods {
        let qos = qos_class(&pod.spec);
        if opted_out {
            planned.push(unprotected_pod_plan(pod, qos, true, node.rules()));
            continue;
        }
        let values = acc.add_pod(&PodMemoryProfile::of(&pod.spec));
        planned.push(pod_plan(pod, qos, false, values));
    }
    let level = acc.finish();
    NodePlan {
        kubepods: level.kubepods,
        burstable: level.burstable,
        besteffort: level.besteffort,
        pods: planned,
        warnings: level.warnings,
        totals: level.totals,
    }
}

/// One pod's values: its cgroup, and its containers' in [`ordered_containers`] order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodValues {
    /// The pod cgroup's.
    pub pod: CgroupValues,
    /// Its containers', in order.
    pub containers: Vec<CgroupValues>,
}

/// The node-level cgroups, warnings and totals once every pod is added.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeLevel {
    /// The kubepods cgroup's.
    pub kubepods: CgroupValues,
    /// The Burstable QoS cgroup's.
    pub burstable: CgroupValues,
    /// The BestEffort QoS cgroup's.
    pub besteffort: CgroupValues,
    /// What the node should know of them.
    pub warnings: Vec<Warning>,
    /// memory.min and memory.low summed.
    pub totals: MemoryTotals,
}

/// Walks a node's protected pods once: each pod's values as it is added, the QoS-class
/// and kubepods sums at the end. Memory QoS must be enabled.
pub struct NodeAccumulator<'s> {
    settings: &'s MemoryQosSettings,
    node: &'s NodeMemoryFacts,
    guaranteed_sum: i64,
    burstable_sum: i64,
    needs_allocatable: bool,
    totals: MemoryTotals,
}

impl<'s> NodeAccumulator<'s> {
    /// An empty walk of a node under `settings`.
    pub fn new(settings: &'s MemoryQosSettings, node: &'s NodeMemoryFacts) -> Self {
        NodeAccumulator {
            settings,
            node,
            guaranteed_sum: 0,
            burstable_sum: 0,
            needs_allocatable: false,
            totals: MemoryTotals::default(),
        }
    }

    /// The values of a pod that nodemem protects, counted in the sums.
    pub fn add_pod(&mut self, profile: &PodMemoryProfile) -> PodValues {
        let pod = self.add_pod_cgroup(profile);
        let containers = profile
            .containers
            .iter()
            .map(|c| self.container(profile, c))
            .collect();
        PodValues { pod, containers }
    }

    /// The pod cgroup's values, counted in the sums; its containers' values come from
    /// [`NodeAccumulator::container`] (no intermediate list on the hot path).
    pub fn add_pod_cgroup(&mut self, profile: &PodMemoryProfile) -> CgroupValues {
        self.add_pod_cgroup_under(self.settings, profile)
    }

    /// [`NodeAccumulator::add_pod_cgroup`] for a pod computed under its own settings
    /// (its workload class's): its request counts in the QoS-class cgroups' sums only
    /// when it is protected as the node's reservation policy protects (a parent
    /// protects what its children ask, never less; a class without protection asks
    /// nothing).
    pub fn add_pod_cgroup_under(
        &mut self,
        settings: &MemoryQosSettings,
        profile: &PodMemoryProfile,
    ) -> CgroupValues {
        let qos = profile.qos();
        let request = profile.request;
        if settings.reservation_policy == self.settings.reservation_policy {
            match qos {
                QosClass::Guaranteed => {
                    self.guaranteed_sum = self.guaranteed_sum.saturating_add(request)
                }
                QosClass::Burstable => {
                    self.burstable_sum = self.burstable_sum.saturating_add(request)
                }
                QosClass::BestEffort => {}
            }
        }
        let pod = pod_values(settings, self.node, qos, profile, request);
        self.totals.memory_min_bytes += pod.get(MEMORY_MIN).and_then(|v| v.bytes()).unwrap_or(0);
        self.totals.memory_low_bytes += pod.get(MEMORY_LOW).and_then(|v| v.bytes()).unwrap_or(0);
        pod
    }

    /// One container's values of a pod added with [`NodeAccumulator::add_pod_cgroup`].
    pub fn container(&mut self, profile: &PodMemoryProfile, c: &ContainerMemory) -> CgroupValues {
        self.container_under(self.settings, profile, c)
    }

    /// One container's values of a pod added with
    /// [`NodeAccumulator::add_pod_cgroup_under`] under the same settings.
    pub fn container_under(
        &mut self,
        settings: &MemoryQosSettings,
        profile: &PodMemoryProfile,
        c: &ContainerMemory,
    ) -> CgroupValues {
        self.needs_allocatable |= c.limit == 0;
        container_values(settings, self.node, profile.qos(), profile, c)
    }

    /// The node-level values, warnings and totals of the pods added.
    pub fn finish(self) -> NodeLevel {
        let mut level = NodeLevel {
            warnings: memory_qos_kernel_warnings(self.node.kernel_version.as_deref()),
            totals: self.totals,
            ..NodeLevel::default()
        };
        let all_requests = self.guaranteed_sum.saturating_add(self.burstable_sum);
        match self.settings.reservation_policy {
            ReservationPolicy::None => {}
            ReservationPolicy::TieredReservation => {
                set_bytes(&mut level.kubepods, MEMORY_MIN, all_requests);
                set_bytes(&mut level.kubepods, MEMORY_LOW, self.burstable_sum);
                set_bytes(&mut level.burstable, MEMORY_LOW, self.burstable_sum);
            }
            ReservationPolicy::HardReservation => {
                set_bytes(&mut level.kubepods, MEMORY_MIN, all_requests);
                set_bytes(&mut level.burstable, MEMORY_MIN, self.burstable_sum);
            }
        }
        if self.needs_allocatable && self.node.allocatable_memory.is_none_or(|a| a <= 0) {
            level.warnings.push(Warning::NoAllocatableMemory);
        }
        if let Some(allocatable) = self.node.allocatable_memory {
            let protected = level
                .kubepods
                .get(MEMORY_MIN)
                .and_then(|v| v.bytes())
                .unwrap_or(0);
            if protected > allocatable {
                level.warnings.push(Warning::ProtectionExceedsAllocatable {
                    protected,
                    allocatable,
                });
            }
        }
        level
    }
}

/// Values of a pod nodemem does not protect: only the informational memory.max.
pub fn unprotected_values(profile: &PodMemoryProfile, rules: QosRules) -> PodValues {
    PodValues {
        pod: unprotected_pod_cgroup(profile, rules),
        containers: profile
            .containers
            .iter()
            .map(unprotected_container)
            .collect(),
    }
}

/// The informational memory.max of an unprotected pod's cgroup, as the kubelet of
/// `rules` sets it.
pub fn unprotected_pod_cgroup(profile: &PodMemoryProfile, rules: QosRules) -> CgroupValues {
    let mut pod = CgroupValues::new();
    if let Some(limit) = profile.memory_max_under(rules) {
        set_bytes(&mut pod, MEMORY_MAX, limit);
    }
    pod
}

/// The informational memory.max of an unprotected container.
pub fn unprotected_container(c: &ContainerMemory) -> CgroupValues {
    let mut values = CgroupValues::new();
    if c.limit > 0 {
        set_bytes(&mut values, MEMORY_MAX, c.limit);
    }
    values
}

/// The values that undo Memory QoS on every cgroup nodemem manages for these pods.
pub fn plan_rollback(pods: &[Pod]) -> NodePlan {
    NodePlan {
        kubepods: memory_qos_reset(),
        burstable: memory_qos_reset(),
        besteffort: memory_qos_reset(),
        pods: pods
            .iter()
            .map(|pod| PodPlan {
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                uid: pod.uid.clone(),
                qos: qos_class(&pod.spec),
                opted_out: false,
                cgroup: memory_qos_reset(),
                containers: ordered_containers(&pod.spec)
                    .map(|c| ContainerPlan {
                        name: c.name.clone(),
                        kind: c.kind,
                        cgroup: memory_qos_reset(),
                    })
                    .collect(),
            })
            .collect(),
        warnings: Vec::new(),
        totals: MemoryTotals::default(),
    }
}

/// A pod nodemem protects nothing of (opted out, refused, or Memory QoS off): only
/// the informational memory.max.
pub fn unprotected_pod_plan(pod: &Pod, qos: QosClass, opted_out: bool, rules: QosRules) -> PodPlan {
    pod_plan(
        pod,
        qos,
        opted_out,
        unprotected_values(&PodMemoryProfile::of(&pod.spec), rules),
    )
}

/// A pod's plan from its values (containers in [`ordered_containers`] order).
fn pod_plan(pod: &Pod, qos: QosClass, opted_out: bool, values: PodValues) -> PodPlan {
    PodPlan {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
        qos,
        opted_out,
        cgroup: values.pod,
        containers: ordered_containers(&pod.spec)
            .zip(values.containers)
            .map(|(c, cgroup)| ContainerPlan {
                name: c.name.clone(),
                kind: c.kind,
                cgroup,
            })
            .collect(),
    }
}

/// Pod cgroup: memory.min / memory.low from the effective pod request
/// (`ResourceConfigForPod`), memory.high under the v1.37 rules for a pod with
/// pod-level resources (`ApplyPodLevelMemoryHigh`), memory.max from the effective pod
/// limit for information.
fn pod_values(
    settings: &MemoryQosSettings,
    node: &NodeMemoryFacts,
    qos: QosClass,
    profile: &PodMemoryProfile,
    request: i64,
) -> CgroupValues {
    let mut values = CgroupValues::new();
    // `ResourceConfigForPod` (v1.36.3 and v1.37.2 `pkg/kubelet/cm/helpers_linux.go`):
    // every pod whose effective request is above 0 and that is not Guaranteed gets
    // memory.low, a BestEffort pod with a RuntimeClass overhead too (its request is the
    // overhead; its QoS class comes from the containers alone). The KEP speaks of
    // Burstable pods; the code wins. v1.35's gate gives every such pod memory.min
    // (HardReservation here). The QoS-class cgroups' sums leave BestEffort pods out
    // (`getQoSMemoryRequests` buckets by class; `setMemoryQoS` reads two buckets).
    if request > 0 {
        match (settings.reservation_policy, qos) {
            (ReservationPolicy::HardReservation, _) => set_bytes(&mut values, MEMORY_MIN, request),
            (ReservationPolicy::TieredReservation, QosClass::Guaranteed) => {
                set_bytes(&mut values, MEMORY_MIN, request)
            }
            (ReservationPolicy::TieredReservation, QosClass::Burstable | QosClass::BestEffort) => {
                set_bytes(&mut values, MEMORY_LOW, request)
            }
            (ReservationPolicy::None, _) => {}
        }
    }
    if let Some(high) = pod_memory_high(settings, node, profile) {
        set_bytes(&mut values, MEMORY_HIGH, high);
    }
    if let Some(limit) = profile.memory_max_under(node.rules()) {
        set_bytes(&mut values, MEMORY_MAX, limit);
    }
    values
}

/// The pod cgroup's memory.high, or None when the kubelet of the node's rules would
/// not set it: only v1.37 rules, only a pod with pod-level resources whose memory
/// limits are declared (its memory.max), by `memoryHighForPod`'s guards.
pub fn pod_memory_high(
    settings: &MemoryQosSettings,
    node: &NodeMemoryFacts,
    profile: &PodMemoryProfile,
) -> Option<i64> {
    let factor = settings.throttling_factor?;
    if !node.rules().pod_level_memory_high() || !profile.pod_level_resources {
        return None;
    }
    let (request, limit) = (profile.request, profile.memory_max_under(node.rules())?);
    if request == limit && request != 0 {
        return None;
    }
    let high = factor.memory_high(request, limit, node.page_size, node.kubelet_float);
    (high > 0 && high > request).then_some(high)
}

fn container_values(
    settings: &MemoryQosSettings,
    node: &NodeMemoryFacts,
    qos: QosClass,
    profile: &PodMemoryProfile,
    container: &ContainerMemory,
) -> CgroupValues {
    let mut values = CgroupValues::new();
    let (request, limit) = (container.request, container.limit);
    if request > 0 {
        match (settings.reservation_policy, qos) {
            (ReservationPolicy::HardReservation, _) => set_bytes(&mut values, MEMORY_MIN, request),
            (ReservationPolicy::TieredReservation, QosClass::Guaranteed) => {
                set_bytes(&mut values, MEMORY_MIN, request)
            }
            (ReservationPolicy::TieredReservation, QosClass::Burstable) => {
                set_bytes(&mut values, MEMORY_LOW, request)
            }
            _ => {}
        }
    }
    // v1.37: the pod's own memory.high throttles a container without a limit of its
    // own once the pod has a pod-level memory limit.
    let throttled_by_pod =
        node.rules().pod_level_memory_high() && limit == 0 && profile.pod_level_limit > 0;
    let high = match settings.throttling_factor {
        Some(factor) if !throttled_by_pod => container_memory_high(factor, node, request, limit),
        _ => None,
    };
    if let Some(high) = high {
        set_bytes(&mut values, MEMORY_HIGH, high);
    }
    // KEP-2837: the pod-level limit stands in for a missing container limit.
    let max = if limit > 0 {
        limit
    } else {
        profile.pod_level_limit
    };
    if max > 0 {
        set_bytes(&mut values, MEMORY_MAX, max);
    }
    values
}

/// memory.high of one container, or None when the kubelet would not set it.
pub fn container_memory_high(
    factor: ThrottlingFactor,
    node: &NodeMemoryFacts,
    request: i64,
    limit: i64,
) -> Option<i64> {
    if request == limit && request != 0 {
        return None;
    }
    let ceiling = if limit != 0 {
        limit
    } else {
        node.kubelet_allocatable()?
    };
    let high = factor.memory_high(request, ceiling, node.page_size, node.kubelet_float);
    (high != 0 && high > request).then_some(high)
}
