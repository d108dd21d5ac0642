//! Effective pod requests and limits (`k8s.io/component-helpers/resource`:
//! `PodRequests`, `PodLimits`), following the KEP-753 formula:
//!
//! `max(sum(app) + sum(sidecars), max over init containers of (init + sidecars started before it))`
//!
//! then pod-level `spec.resources` (KEP-2837) override the aggregate for the resources
//! they name, and RuntimeClass overhead is added on top.

use crate::pod::{is_pod_level_resource, ContainerKind, PodSpec, ResourceList, MEMORY};
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

/// [`aggregate`] for one resource: the same formula without building resource maps
/// (the node computation runs it for every pod on every event). Exact, as the kubelet
/// adds Quantities: rounding to whole bytes happens once, on the pod's total.
fn aggregate_one(spec: &PodSpec, amount: impl Fn(&crate::pod::Resources) -> Quantity) -> Quantity {
    let mut total = Quantity::ZERO;
    for container in &spec.containers {
        total = total.saturating_add(amount(&container.resources));
    }
    let mut sidecars = Quantity::ZERO;
    let mut init_peak = Quantity::ZERO;
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

fn overhead(spec: &PodSpec, name: &str) -> Quantity {
    spec.overhead.get(name).copied().unwrap_or_default()
}

/// Effective memory request of the pod in bytes (`PodRequests(...)[memory].Value()`):
/// the containers' Quantities and the overhead added exactly, the sum rounded up to a
/// whole byte once (found on the real node: two containers requesting `10485759.5`
/// each got pod memory.low 20971519 bytes from the kubelet, before the kernel's page
/// rounding; rounding each container first gave 20971520).
pub fn pod_memory_request(spec: &PodSpec) -> i64 {
    let pod_level = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.get(MEMORY))
        .copied();
    pod_level
        .unwrap_or_else(|| aggregate_one(spec, |r| r.request(MEMORY)))
        .saturating_add(overhead(spec, MEMORY))
        .value()
}

/// Effective memory limit of the pod in bytes (`PodLimits(...)[memory].Value()`,
/// summed exactly like [`pod_memory_request`]); 0 when none is declared and there is
/// no overhead.
pub fn pod_memory_limit(spec: &PodSpec) -> i64 {
    let pod_level = spec
        .resources
        .as_ref()
        .and_then(|r| r.limits.get(MEMORY))
        .copied();
    pod_level
        .unwrap_or_else(|| aggregate_one(spec, |r| r.limit(MEMORY)))
        .saturating_add(overhead(spec, MEMORY))
        .value()
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

    /// The kubelet adds the containers' Quantities exactly and rounds the pod's sum
    /// once (`PodRequests(...)[memory].Value()`); rounding each container to whole
    /// bytes first gives a byte more per fractional container. Figures from the real
    /// node (kubelet v1.36.3, its own Memory QoS).
    #[test]
    fn fractional_quantities_are_summed_exactly_and_rounded_once() {
        let q = |text: &str| Quantity::parse(text).unwrap();
        let container = |name: &str, request: &str, limit: Option<&str>| {
            let mut r = Resources::default();
            r.requests.insert(MEMORY.into(), q(request));
            if let Some(limit) = limit {
                r.limits.insert(MEMORY.into(), q(limit));
            }
            Container {
                name: name.into(),
                kind: ContainerKind::App,
                resources: r,
            }
        };
        let burstable = PodSpec {
            containers: vec![
                container("a", "10485759.5", None),
                container("b", "10485759.5", None),
            ],
            ..PodSpec::default()
        };
        assert_eq!(pod_memory_request(&burstable), 20_971_519);
        let guaranteed = PodSpec {
            containers: vec![
                container("a", "20971519.5", Some("20971519.5")),
                container("b", "10485759.5", Some("10485759.5")),
            ],
            ..PodSpec::default()
        };
        assert_eq!(pod_memory_request(&guaranteed), 31_457_279);
        assert_eq!(pod_memory_limit(&guaranteed), 31_457_279);
        // The map-based aggregate agrees, and a lone half byte is still a byte.
        let want = |list: ResourceList| list.get(MEMORY).map_or(0, |q| q.value());
        assert_eq!(want(pod_limits(&guaranteed)), 31_457_279);
        let half = PodSpec {
            containers: vec![container("a", "500m", None)],
            ..PodSpec::default()
        };
        assert_eq!(pod_memory_request(&half), 1);
        // Overhead joins the exact sum before the rounding.
        let mut with_overhead = burstable.clone();
        with_overhead.overhead.insert(MEMORY.into(), q("0.5"));
        assert_eq!(pod_memory_request(&with_overhead), 20_971_520);
    }
}
