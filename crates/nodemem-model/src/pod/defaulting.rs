//! The apiserver's Pod defaulting that changes resources, so manifests read from files
//! (`nodemem simulate`) see what the kubelet would see after admission.
//!
//! Mirrors `SetDefaults_Pod` in `pkg/apis/core/v1/defaults.go`:
//! 1. a container limit without a request defaults the request to the limit;
//! 2. then (KEP-2837) when pod-level limits are set, a missing pod-level request
//!    defaults to the aggregated container requests for that resource, or to the
//!    pod-level limit when no container requests it.

use crate::pod::aggregate::aggregate_container_requests;
use crate::pod::{is_pod_level_resource, PodSpec, Resources};

/// Applies apiserver defaulting in place. Idempotent.
pub fn apply_defaults(spec: &mut PodSpec) {
    for container in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut())
    {
        default_requests_from_limits(&mut container.resources);
    }
    default_pod_requests(spec);
}

fn default_requests_from_limits(resources: &mut Resources) {
    for (name, limit) in &resources.limits {
        resources.requests.entry(name.clone()).or_insert(*limit);
    }
}

fn default_pod_requests(spec: &mut PodSpec) {
    let Some(pod_resources) = spec.resources.as_ref() else {
        return;
    };
    // Defaults are only filled in when pod-level limits are partly given already.
    if pod_resources.limits.is_empty() {
        return;
    }
    let aggregated = aggregate_container_requests(spec);
    let pod_resources = spec.resources.as_mut().expect("checked above");
    for (name, quantity) in aggregated {
        if is_pod_level_resource(&name) {
            pod_resources.requests.entry(name).or_insert(quantity);
        }
    }
    let limits: Vec<_> = pod_resources
        .limits
        .iter()
        .map(|(n, q)| (n.clone(), *q))
        .collect();
    for (name, limit) in limits {
        if is_pod_level_resource(&name) {
            pod_resources.requests.entry(name).or_insert(limit);
        }
    }
}
