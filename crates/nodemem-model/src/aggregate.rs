//! Effective pod requests and limits (`k8s.io/component-helpers/resource`:
//! `PodRequests`, `PodLimits`), following the KEP-753 formula:
//!
//! `max(sum(app) + sum(sidecars), max over init containers of (init + sidecars started before it))`
//!
//! then pod-level `spec.resources` (KEP-2837) override the aggregate for the resources
//! they name, and RuntimeClass overhead is added on top.

use crate::pod::{is_pod_level_resource, ContainerKind, PodSpec, ResourceList, MEMORY};

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

/// [`aggregate`] for one resource, as plain bytes: the same formula without building
/// resource maps (the node computation runs it for every pod on every event).
fn aggregate_one(spec: &PodSpec, amount: impl Fn(&crate::pod::Resources) -> i64) -> i64 {
    let mut total: i64 = 0;
    for container in &spec.containers {
        total = total.saturating_add(amount(&container.resources));
    }
    let mut sidecars: i64 = 0;
    let mut init_peak: i64 = 0;
    for container in &spec.init_containers {
        let own = amount(&container.resources);
        let running = if container.kind == ContainerKind::Sidecar {
            total = total.saturating_add(own);
            sidecars = sidecars.saturating_add(own);
            sidecars
        } else {
            own.saturating_add(sidecars)
        };
        init_peak = init_peak.max(running);
    }
    total.max(init_peak)
}

fn overhead(spec: &PodSpec, name: &str) -> i64 {
    spec.overhead.get(name).map_or(0, |q| q.value())
}

/// Effective memory request of the pod in bytes (`PodRequests(...)[memory]`).
pub fn pod_memory_request(spec: &PodSpec) -> i64 {
    let pod_level = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.get(MEMORY))
        .map(|q| q.value());
    pod_level
        .unwrap_or_else(|| aggregate_one(spec, |r| r.request(MEMORY).value()))
        .saturating_add(overhead(spec, MEMORY))
}

/// Effective memory limit of the pod in bytes (`PodLimits(...)[memory]`); 0 when none
/// is declared and there is no overhead.
pub fn pod_memory_limit(spec: &PodSpec) -> i64 {
    let pod_level = spec
        .resources
        .as_ref()
        .and_then(|r| r.limits.get(MEMORY))
        .map(|q| q.value());
    pod_level
        .unwrap_or_else(|| aggregate_one(spec, |r| r.limit(MEMORY).value()))
        .saturating_add(overhead(spec, MEMORY))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::{Container, Resources};
    use crate::quantity::Quantity;

    fn c(kind: ContainerKind, req: i64, lim: i64) -> Container {
        let mut r = Resources::default();
        if req > 0 {
            r.requests.insert(MEMORY.into(), Quantity::from_units(req));
        }
        if lim > 0 {
            r.limits.insert(MEMORY.into(), Quantity::from_units(lim));
        }
        Container {
            name: format!("c{req}-{lim}"),
            kind,
            resources: r,
        }
    }

    /// The scalar path the node computation uses equals the map-based one.
    #[test]
    fn memory_scalars_match_the_resource_maps() {
        use ContainerKind::*;
        let mut specs = vec![
            PodSpec::default(),
            PodSpec {
                containers: vec![c(App, 100, 200), c(App, 0, 0)],
                ..PodSpec::default()
            },
            PodSpec {
                init_containers: vec![c(Init, 500, 500), c(Sidecar, 50, 0), c(Init, 400, 900)],
                containers: vec![c(App, 100, 200)],
                ..PodSpec::default()
            },
        ];
        let mut with_pod_level = specs[2].clone();
        let mut pod = Resources::default();
        pod.requests
            .insert(MEMORY.into(), Quantity::from_units(1000));
        pod.limits.insert("cpu".into(), Quantity::from_units(2));
        with_pod_level.resources = Some(pod);
        with_pod_level
            .overhead
            .insert(MEMORY.into(), Quantity::from_units(7));
        specs.push(with_pod_level);
        for spec in &specs {
            let want = |list: ResourceList| list.get(MEMORY).map_or(0, |q| q.value());
            assert_eq!(
                pod_memory_request(spec),
                want(pod_requests(spec)),
                "{spec:?}"
            );
            assert_eq!(pod_memory_limit(spec), want(pod_limits(spec)), "{spec:?}");
        }
        assert_eq!(
            pod_memory_request(&specs[2]),
            500,
            "max(100 + 50, 500 (before the sidecar starts), 400 + 50)"
        );
        assert_eq!(pod_memory_request(&specs[3]), 1007);
    }
}
