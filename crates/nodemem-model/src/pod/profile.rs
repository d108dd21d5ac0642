//! What the memory rules read from a pod, reduced to numbers once: its QoS class,
//! effective memory request, informational memory.max, and each container's memory
//! request and limit. A pod's spec is fixed between its events, so the agent derives
//! this when a pod arrives and the node computation (run on every event) reads numbers
//! instead of walking resource maps.

use crate::kubelet::version::QosRules;
use crate::pod::aggregate::{pod_memory_limit, pod_memory_request};
use crate::pod::qos::{has_pod_level_resources, qos_class, QosClass};
use crate::pod::{ordered_containers, ContainerKind, PodSpec, MEMORY};

/// A container's memory request and limit, and its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContainerMemory {
    /// Init, sidecar or app.
    pub kind: ContainerKind,
    /// Bytes; 0 when not requested.
    pub request: i64,
    /// Bytes; 0 when unlimited.
    pub limit: i64,
}

/// What the memory rules need of a pod, derived once per pod event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodMemoryProfile {
    /// Its QoS class; None while it cannot be derived (no containers).
    pub qos: Option<QosClass>,
    /// The effective pod memory request (`PodRequests`).
    pub request: i64,
    /// The pod cgroup's memory.max as a v1.37 kubelet sets it, if it does (read it
    /// through [`PodMemoryProfile::memory_max_under`]).
    pub memory_max: Option<i64>,
    /// The same as kubelets up to v1.36 set it, whose rule for "every container
    /// declares a memory limit" differs (see `limits_declared_up_to_v1_36`).
    pub memory_max_up_to_v1_36: Option<i64>,
    /// KEP-2837: the pod-level memory limit standing in for a missing container limit.
    pub pod_level_limit: i64,
    /// `spec.resources` names CPU or memory (`IsPodLevelResourcesSet`).
    pub pod_level_resources: bool,
    /// In [`ordered_containers`] order: init and sidecars, then app containers.
    pub containers: Vec<ContainerMemory>,
}

impl PodMemoryProfile {
    /// Derives the profile of a defaulted pod spec.
    pub fn of(spec: &PodSpec) -> Self {
        let qos = qos_class(spec);
        // `ResourceConfigForPod` (`pkg/kubelet/cm/helpers_linux.go`): a Guaranteed pod's
        // cgroup gets its limit, a Burstable pod's only when its memory limits are
        // declared (a pod-level memory limit declares them), a BestEffort pod's never.
        let memory_max = |declared: fn(&PodSpec) -> bool| match qos {
            QosClass::Guaranteed => Some(pod_memory_limit(spec)).filter(|v| *v > 0),
            QosClass::Burstable
                if spec.resources.as_ref().is_some_and(|r| r.limit(MEMORY) > 0)
                    || declared(spec) =>
            {
                Some(pod_memory_limit(spec)).filter(|v| *v > 0)
            }
            _ => None,
        };
        let pod_level_resources = has_pod_level_resources(spec);
        let pod_level_limit = if pod_level_resources {
            spec.resources
                .as_ref()
                .map_or(0, |r| r.limit(MEMORY).value())
        } else {
            0
        };
        PodMemoryProfile {
            qos: Some(qos),
            request: pod_memory_request(spec),
            memory_max: memory_max(limits_declared),
            memory_max_up_to_v1_36: memory_max(limits_declared_up_to_v1_36),
            pod_level_limit,
            pod_level_resources,
            containers: ordered_containers(spec)
                .map(|c| ContainerMemory {
                    kind: c.kind,
                    request: c.resources.request(MEMORY).value(),
                    limit: c.resources.limit(MEMORY).value(),
                })
                .collect(),
        }
    }

    /// Its QoS class, BestEffort when none could be derived.
    pub fn qos(&self) -> QosClass {
        self.qos.unwrap_or(QosClass::BestEffort)
    }

    /// The pod cgroup's memory.max as a kubelet of `rules` sets it, if it does.
    pub fn memory_max_under(&self, rules: QosRules) -> Option<i64> {
        match rules {
            QosRules::UpToV1_36 => self.memory_max_up_to_v1_36,
            QosRules::V1_37 => self.memory_max,
        }
    }
}

/// v1.37's rule (v1.37.2 `pkg/kubelet/cm/helpers_linux.go` `ResourceConfigForPod`: a
/// loop over `podutil.ContainerIter` of init and app containers): every container,
/// init and sidecar alike, declares a memory limit of its own.
fn limits_declared(spec: &PodSpec) -> bool {
    spec.all_containers().all(|c| c.resources.limit(MEMORY) > 0)
}

/// The rule of kubelets up to v1.36 (v1.35.4 and v1.36.3 `ResourceConfigForPod`: the
/// `ContainerFn` it hands `resourcehelper.PodLimits`, which component-helpers v0.35.4
/// and v0.36.3 `AggregateContainerLimits` calls with what it aggregates, not with each
/// container's own limits): each app container's own limit; for a sidecar, the
/// sidecars' limits up to and including it; for an init container, its own limit plus
/// the limits of the sidecars before it. So an init container or a sidecar without a
/// limit after a sidecar with one still counts as declared, and the pod gets
/// memory.max (found by the kubelet's own code run as a library, issue 60).
fn limits_declared_up_to_v1_36(spec: &PodSpec) -> bool {
    if !spec
        .containers
        .iter()
        .all(|c| c.resources.limit(MEMORY) > 0)
    {
        return false;
    }
    let mut sidecars = 0i64;
    spec.init_containers.iter().all(|c| {
        let own = c.resources.limit(MEMORY).value();
        match c.kind {
            ContainerKind::Sidecar => {
                sidecars = sidecars.saturating_add(own);
                sidecars > 0
            }
            _ => own.saturating_add(sidecars) > 0,
        }
    })
}
