//! The apiserver's resource validation of a (defaulted) Pod that matters to memory
//! rules: no negative quantities, requests within limits, and the KEP-2837 pod-level
//! rules (aggregated container requests within the pod request, no container limit
//! above the pod limit, pod request within pod limit).

use crate::pod::aggregate::aggregate_container_requests;
use crate::pod::{is_hugepages, is_pod_level_resource, ContainerKind, PodSpec, Resources};
use crate::problem::Problem;

/// Every problem with the pod's resources, with field paths relative to the Pod.
pub fn validate_pod_resources(spec: &PodSpec) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (i, c) in spec.containers.iter().enumerate() {
        check_resources(
            &format!("spec.containers[{i}].resources"),
            &c.resources,
            &mut problems,
        );
    }
    for (i, c) in spec.init_containers.iter().enumerate() {
        debug_assert!(c.kind != ContainerKind::App);
        check_resources(
            &format!("spec.initContainers[{i}].resources"),
            &c.resources,
            &mut problems,
        );
    }
    for (name, q) in &spec.overhead {
        if q.is_negative() {
            problems.push(Problem::new(
                format!("spec.overhead.{name}"),
                "must be greater than or equal to 0",
            ));
        }
    }
    let Some(pod) = &spec.resources else {
        return problems;
    };
    check_resources("spec.resources", pod, &mut problems);
    for name in pod.requests.keys().chain(pod.limits.keys()) {
        if !is_pod_level_resource(name) && !is_hugepages(name) {
            problems.push(Problem::new(
                format!("spec.resources.{name}"),
                "unsupported pod-level resource: only cpu, memory and hugepages-<size> may be set at pod level",
            ));
        }
    }
    let aggregated = aggregate_container_requests(spec);
    for (name, pod_request) in &pod.requests {
        if let Some(sum) = aggregated.get(name) {
            if sum > pod_request {
                problems.push(Problem::new(
                    format!("spec.resources.requests.{name}"),
                    format!(
                        "must be greater than or equal to the aggregated container requests ({sum}), found {pod_request}"
                    ),
                ));
            }
        }
    }
    for (name, pod_limit) in &pod.limits {
        for (path, c) in containers_with_paths(spec) {
            if let Some(limit) = c.limits.get(name) {
                if limit > pod_limit {
                    problems.push(Problem::new(
                        format!("{path}.limits.{name}"),
                        format!("must be less than or equal to the pod-level limit ({pod_limit}), found {limit}"),
                    ));
                }
            }
        }
    }
    problems
}

fn containers_with_paths(spec: &PodSpec) -> impl Iterator<Item = (String, &Resources)> {
    let app = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("spec.containers[{i}].resources"), &c.resources));
    let init = spec
        .init_containers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("spec.initContainers[{i}].resources"), &c.resources));
    app.chain(init)
}

fn check_resources(path: &str, resources: &Resources, problems: &mut Vec<Problem>) {
    for (kind, list) in [
        ("requests", &resources.requests),
        ("limits", &resources.limits),
    ] {
        for (name, q) in list {
            if q.is_negative() {
                problems.push(Problem::new(
                    format!("{path}.{kind}.{name}"),
                    "must be greater than or equal to 0",
                ));
            }
        }
    }
    for (name, request) in &resources.requests {
        if let Some(limit) = resources.limits.get(name) {
            if request > limit {
                problems.push(Problem::new(
                    format!("{path}.requests.{name}"),
                    format!(
                        "must be less than or equal to the {name} limit ({limit}), found {request}"
                    ),
                ));
            }
        }
    }
}
