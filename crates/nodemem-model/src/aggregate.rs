//! Effective pod requests and limits (`k8s.io/component-helpers/resource`:
//! `PodRequests`, `PodLimits`), following the KEP-753 formula:
//!
//! `max(sum(app) + sum(sidecars), max over init containers of (init + sidecars started before it))`
//!
//! then pod-level `spec.resources` (KEP-2837) override the aggregate for the resources
//! they name, and RuntimeClass overhead is added on top.

use crate::pod::{is_pod_level_resource, ContainerKind, PodSpec, ResourceList};
use crate::quantity::Quantity;

fn add(into: &mut ResourceList, from: &ResourceList) {
    for (name, q) in from {
        let entry = into.entry(name.clone()).or_default();
        *entry = entry.saturating_add(*q);
    }
}

fn max_into(into: &mut ResourceList, from: &ResourceList) {
    for (name, q) in from {
        let entry = into.entry(name.clone()).or_default();
        *entry = (*entry).max(*q);
    }
}

fn aggregate(
    spec: &PodSpec,
    pick: impl Fn(&crate::pod::Resources) -> &ResourceList,
) -> ResourceList {
    let mut total = ResourceList::new();
    for container in &spec.containers {
        add(&mut total, pick(&container.resources));
    }
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for container in &spec.init_containers {
        let own = pick(&container.resources);
        let running = if container.kind == ContainerKind::Sidecar {
            add(&mut total, own);
            add(&mut sidecars, own);
            sidecars.clone()
        } else {
            let mut with_sidecars = own.clone();
            add(&mut with_sidecars, &sidecars);
            with_sidecars
        };
        max_into(&mut init_peak, &running);
    }
    max_into(&mut total, &init_peak);
    total
}

/// Requests of all containers combined (`AggregateContainerRequests`).
pub fn aggregate_container_requests(spec: &PodSpec) -> ResourceList {
    aggregate(spec, |r| &r.requests)
}

/// Limits of all containers combined (`AggregateContainerLimits`).
pub fn aggregate_container_limits(spec: &PodSpec) -> ResourceList {
    aggregate(spec, |r| &r.limits)
}

/// Effective pod requests including pod-level resources and overhead (`PodRequests`).
pub fn pod_requests(spec: &PodSpec) -> ResourceList {
    let mut requests = aggregate_container_requests(spec);
    if let Some(pod) = &spec.resources {
        for (name, q) in &pod.requests {
            if is_pod_level_resource(name) {
                requests.insert(name.clone(), *q);
            }
        }
    }
    add(&mut requests, &spec.overhead);
    requests
}

/// Effective pod limits including pod-level resources and overhead (`PodLimits`).
pub fn pod_limits(spec: &PodSpec) -> ResourceList {
    let mut limits = aggregate_container_limits(spec);
    if let Some(pod) = &spec.resources {
        for (name, q) in &pod.limits {
            if is_pod_level_resource(name) {
                limits.insert(name.clone(), *q);
            }
        }
    }
    add(&mut limits, &spec.overhead);
    limits
}

/// Effective memory request of the pod in bytes.
pub fn pod_memory_request(spec: &PodSpec) -> i64 {
    pod_requests(spec)
        .get(crate::pod::MEMORY)
        .copied()
        .unwrap_or(Quantity::ZERO)
        .value()
}
