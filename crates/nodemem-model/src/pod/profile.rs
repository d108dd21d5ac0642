//! What the memory rules read from a pod, reduced to numbers once: its QoS class,
//! effective memory request, informational memory.max, and each container's memory
//! request and limit. A pod's spec is fixed between its events, so the agent derives
//! this when a pod arrives and the node computation (run on every event) reads numbers
//! instead of walking resource maps.

use crate::pod::aggregate::{pod_memory_limit, pod_memory_request};
use crate::pod::qos::{has_pod_level_resources, qos_class, QosClass};
use crate::pod::{ordered_containers, ContainerKind, PodSpec, MEMORY};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContainerMemory {
    pub kind: ContainerKind,
    /// Bytes; 0 when not requested.
    pub request: i64,
    /// Bytes; 0 when unlimited.
    pub limit: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodMemoryProfile {
    pub qos: Option<QosClass>,
    /// The effective pod memory request (`PodRequests`).
    pub request: i64,
    /// The pod cgroup's memory.max as the kubelet sets it, if it does.
    pub memory_max: Option<i64>,
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
        let declared = match qos {
            QosClass::Guaranteed => true,
            QosClass::Burstable => {
                spec.resources.as_ref().is_some_and(|r| r.limit(MEMORY) > 0)
                    || spec.all_containers().all(|c| c.resources.limit(MEMORY) > 0)
            }
            QosClass::BestEffort => false,
        };
        let memory_max = if declared {
            Some(pod_memory_limit(spec)).filter(|v| *v > 0)
        } else {
            None
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
            memory_max,
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

    pub fn qos(&self) -> QosClass {
        self.qos.unwrap_or(QosClass::BestEffort)
    }
}
