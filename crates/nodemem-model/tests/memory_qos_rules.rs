//! Table-driven checks of the Memory QoS rules against the worked examples of
//! KEP-2570 (seed 000), the v1.36 blog (seed 003) and KEP-2837 (seed 002).

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use nodemem_model::kubelet::version::KubeletVersion;
use nodemem_model::pod::defaulting::apply_defaults;
use nodemem_model::pod::qos::{qos_class, QosClass};
use nodemem_model::pod::validation::validate_pod_resources;
use nodemem_model::pod::{Container, ContainerKind, Pod, PodSpec, ResourceList, Resources};
use nodemem_model::values::cgroup::{
    CgroupValue, CgroupValues, MEMORY_HIGH, MEMORY_LOW, MEMORY_MAX, MEMORY_MIN,
};
use nodemem_model::values::factor::{KubeletFloat, ThrottlingFactor};
use nodemem_model::values::memory_qos::{
    container_memory_high, plan_node, MemoryQosSettings, NodeMemoryFacts, NodePlan,
    ReservationPolicy,
};
use nodemem_model::Quantity;

const KI: i64 = 1 << 10;
const MI: i64 = 1 << 20;
const GI: i64 = 1 << 30;

fn list(pairs: &[(&str, &str)]) -> ResourceList {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
        .collect()
}

fn res(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Resources {
    Resources {
        requests: list(requests),
        limits: list(limits),
    }
}

fn container(name: &str, kind: ContainerKind, resources: Resources) -> Container {
    Container {
        name: name.into(),
        kind,
        resources,
    }
}

fn app(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
    container(name, ContainerKind::App, res(requests, limits))
}

fn pod(name: &str, containers: Vec<Container>) -> Pod {
    let mut spec = PodSpec::default();
    for c in containers {
        match c.kind {
            ContainerKind::App => spec.containers.push(c),
            _ => spec.init_containers.push(c),
        }
    }
    Pod {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        spec,
    }
}

fn with_pod_resources(mut p: Pod, resources: Resources) -> Pod {
    p.spec.resources = Some(resources);
    p
}

fn defaulted(mut p: Pod) -> Pod {
    apply_defaults(&mut p.spec);
    p
}

fn settings(policy: ReservationPolicy, factor: f64) -> MemoryQosSettings {
    MemoryQosSettings {
        enabled: true,
        throttling_factor: Some(ThrottlingFactor::from_f64(factor).unwrap()),
        reservation_policy: policy,
    }
}

/// A node of the v1.36 kubelet, whose rules the seed tables below were written
/// against (and checked on the real node); the v1.37 rules have their own section.
fn node(allocatable: i64) -> NodeMemoryFacts {
    NodeMemoryFacts {
        allocatable_memory: Some(allocatable),
        page_size: 4096,
        kernel_version: Some("6.1.0-18-amd64".into()),
        kubelet_version: Some(KubeletVersion::parse("v1.36.3").unwrap()),
        ..NodeMemoryFacts::default()
    }
}

fn node_v137(allocatable: i64) -> NodeMemoryFacts {
    NodeMemoryFacts {
        kubelet_version: Some(KubeletVersion::parse("v1.37.2").unwrap()),
        ..node(allocatable)
    }
}

fn plan(policy: ReservationPolicy, pods: Vec<Pod>) -> NodePlan {
    let pods: Vec<Pod> = pods.into_iter().map(defaulted).collect();
    plan_node(&settings(policy, 0.9), &node(8 * GI), &pods)
}

fn get(values: &CgroupValues, file: &str) -> Option<i64> {
    values.get(file).and_then(CgroupValue::bytes)
}

fn container_values<'a>(plan: &'a NodePlan, pod: &str, container: &str) -> &'a CgroupValues {
    &plan
        .pods
        .iter()
        .find(|p| p.name == pod)
        .unwrap()
        .containers
        .iter()
        .find(|c| c.name == container)
        .unwrap()
        .cgroup
}

fn pod_values<'a>(plan: &'a NodePlan, pod: &str) -> &'a CgroupValues {
    &plan.pods.iter().find(|p| p.name == pod).unwrap().cgroup
}

// ---------------------------------------------------------------- seed 000 (KEP-2570)

#[test]
fn kep_v127_table_limit_1000_factor_09_page_1mi() {
    // "The table below runs over the examples with different values requests.memory and 1Mi pageSize"
    let factor = ThrottlingFactor::from_f64(0.9).unwrap();
    let table = [
        (0, 900),
        (100, 910),
        (200, 920),
        (300, 930),
        (400, 940),
        (500, 950),
        (600, 960),
        (700, 970),
        (800, 980),
        (900, 990),
        (1000, 1000),
    ];
    for (request, want) in table {
        assert_eq!(
            factor.memory_high(request * MI, 1000 * MI, MI, KubeletFloat::Separate),
            want * MI,
            "request {request}Mi"
        );
    }
}

#[test]
fn kep_v127_table_as_the_kubelet_applies_it() {
    // The kubelet writes the formula's value unless request == limit (then memory.high
    // stays unset, i.e. "max") or the value does not exceed the request.
    let factor = ThrottlingFactor::from_f64(0.9).unwrap();
    let node = NodeMemoryFacts {
        allocatable_memory: Some(8 * GI),
        page_size: MI,
        ..NodeMemoryFacts::default()
    };
    for request in (100..1000).step_by(100) {
        let want = Some((1000 - (1000 - request) / 10) * MI);
        assert_eq!(
            container_memory_high(factor, &node, request * MI, 1000 * MI),
            want,
            "request {request}Mi"
        );
    }
    assert_eq!(
        container_memory_high(factor, &node, 1000 * MI, 1000 * MI),
        None
    );
}

#[test]
fn kep_v122_vs_v127_comparison_table() {
    // "Some more examples to compare memory.high using Alpha v1.22 and Alpha v1.27"
    let node = NodeMemoryFacts {
        allocatable_memory: Some(8 * GI),
        page_size: MI,
        ..NodeMemoryFacts::default()
    };
    let table = [
        (500, 0.6, Some(800)),
        (800, 0.6, Some(920)),
        (1000, 0.6, None), // "max"
        (500, 0.8, Some(900)),
        (850, 0.8, Some(970)),
        (500, 0.4, Some(700)),
    ];
    for (request, factor, want) in table {
        let factor = ThrottlingFactor::from_f64(factor).unwrap();
        assert_eq!(
            container_memory_high(factor, &node, request * MI, 1000 * MI),
            want.map(|w| w * MI),
            "request {request}Mi factor {factor}"
        );
    }
}

#[test]
fn kep_burstable_cases_and_besteffort() {
    let f = ThrottlingFactor::from_f64(0.9).unwrap();
    let facts = node(10 * GI);
    // Case I: request and limit -> formula with the limit.
    assert_eq!(
        container_memory_high(f, &facts, GI, 2 * GI),
        Some(GI + 9 * GI / 10 / 4096 * 4096)
    );
    // Case II: request without limit -> node allocatable stands in for the limit.
    let want = (GI as i128 * 10 + 9 * (10 * GI as i128 - GI as i128)) / 10 / 4096 * 4096;
    assert_eq!(container_memory_high(f, &facts, GI, 0), Some(want as i64));
    // Case III in the formula: request 0 -> factor * limit, floored to the page.
    assert_eq!(
        f.memory_high(0, 1000 * MI, 4096, KubeletFloat::Separate),
        900 * MI
    );
    // ...but the apiserver defaults the request to the limit, so the kubelet sees
    // request == limit and sets no memory.high.
    let p = plan(
        ReservationPolicy::None,
        vec![pod("case3", vec![app("c", &[], &[("memory", "1000Mi")])])],
    );
    assert_eq!(get(container_values(&p, "case3", "c"), MEMORY_HIGH), None);
    assert_eq!(
        get(container_values(&p, "case3", "c"), MEMORY_MAX),
        Some(1000 * MI)
    );
    // BestEffort: floor(factor * allocatable / page) * page (v1.37 fix: it is set).
    let p = plan(
        ReservationPolicy::None,
        vec![pod("be", vec![app("c", &[], &[])])],
    );
    assert_eq!(p.pods[0].qos, QosClass::BestEffort);
    let want = (8 * GI as i128 * 9 / 10) / 4096 * 4096;
    assert_eq!(
        get(container_values(&p, "be", "c"), MEMORY_HIGH),
        Some(want as i64)
    );
}

#[test]
fn memory_high_is_floored_to_the_page_size() {
    let f = ThrottlingFactor::from_f64(0.9).unwrap();
    let facts = NodeMemoryFacts {
        allocatable_memory: Some(1_000_000_007),
        hard_eviction_memory: None,
        page_size: 4096,
        ..NodeMemoryFacts::default()
    };
    // 0.9 * 1000000007 = 900000006.3 -> 219726 pages of 4096 = 899997696
    assert_eq!(container_memory_high(f, &facts, 0, 0), Some(899_997_696));
    // 64 KiB pages (arm64)
    let arm = NodeMemoryFacts {
        page_size: 64 * KI,
        ..facts.clone()
    };
    assert_eq!(
        container_memory_high(f, &arm, 0, 0),
        Some(900_000_006 / (64 * KI) * (64 * KI))
    );
}

/// The kubelet's ceiling for a container without a limit is capacity minus the
/// reservations, not `status.allocatable`, which also subtracts the hard eviction
/// threshold (pkg/kubelet/cm GetNodeAllocatableAbsolute; seen on the real node).
#[test]
fn memory_high_without_a_limit_adds_the_hard_eviction_threshold_back() {
    let f = ThrottlingFactor::from_f64(0.9).unwrap();
    let status_allocatable = 2_013_015_608;
    let facts = NodeMemoryFacts {
        allocatable_memory: Some(status_allocatable),
        hard_eviction_memory: Some(50 * MI),
        ..NodeMemoryFacts::default()
    };
    assert_eq!(
        facts.kubelet_allocatable(),
        Some(status_allocatable + 50 * MI)
    );
    // The real node's figures: the kubelet wrote 1860575232 for a 16Mi request
    // without a limit, and 1862254592 for 32Mi.
    assert_eq!(
        container_memory_high(f, &facts, 16 * MI, 0),
        Some(1_860_575_232)
    );
    assert_eq!(
        container_memory_high(f, &facts, 32 * MI, 0),
        Some(1_862_254_592)
    );
    // A limit is the ceiling whatever the node's reservations.
    assert_eq!(
        container_memory_high(f, &facts, 0, 100 * MI),
        container_memory_high(f, &node(GI), 0, 100 * MI)
    );
    // Unknown threshold (a percentage): status.allocatable, as before.
    let unknown = NodeMemoryFacts {
        hard_eviction_memory: None,
        ..facts.clone()
    };
    assert_eq!(unknown.kubelet_allocatable(), Some(status_allocatable));
}

/// Where nodemem does not read the kubelet's configuration it assumes its default
/// threshold (100Mi); on a node that reserves nothing (allocatable == capacity) that
/// would put the ceiling above the machine. Capacity bounds it.
#[test]
fn the_ceiling_never_exceeds_capacity() {
    let f = ThrottlingFactor::from_f64(0.9).unwrap();
    let capacity = 4 * GI;
    let nothing_reserved = NodeMemoryFacts {
        allocatable_memory: Some(capacity),
        capacity_memory: Some(capacity),
        hard_eviction_memory: Some(100 * MI),
        ..NodeMemoryFacts::default()
    };
    assert_eq!(nothing_reserved.kubelet_allocatable(), Some(capacity));
    assert_eq!(
        container_memory_high(f, &nothing_reserved, 0, 0),
        Some(capacity / 10 * 9 / 4096 * 4096)
    );
    // 60Mi between allocatable and capacity: at most 60Mi goes back, not 100Mi.
    let little = NodeMemoryFacts {
        allocatable_memory: Some(capacity - 60 * MI),
        ..nothing_reserved.clone()
    };
    assert_eq!(little.kubelet_allocatable(), Some(capacity));
    // Room for the whole threshold: all of it goes back.
    let room = NodeMemoryFacts {
        allocatable_memory: Some(capacity - GI),
        ..nothing_reserved.clone()
    };
    assert_eq!(room.kubelet_allocatable(), Some(capacity - GI + 100 * MI));
    // A hand-written node whose allocatable exceeds its capacity keeps its allocatable.
    let odd = NodeMemoryFacts {
        allocatable_memory: Some(capacity + GI),
        ..nothing_reserved
    };
    assert_eq!(odd.kubelet_allocatable(), Some(capacity + GI));
}

#[test]
fn memory_high_only_when_it_exceeds_the_request() {
    let f = ThrottlingFactor::from_f64(0.9).unwrap();
    let facts = node(8 * GI);
    // 4097 + 0.9 floors to one page (4096), which is below the request.
    assert_eq!(container_memory_high(f, &facts, 4097, 4098), None);
    // Node allocatable below the request: no throttling.
    assert_eq!(container_memory_high(f, &node(GI), 2 * GI, 0), None);
    // No allocatable known and no limit: nothing to compute from.
    let unknown = NodeMemoryFacts {
        allocatable_memory: None,
        hard_eviction_memory: None,
        ..facts.clone()
    };
    assert_eq!(container_memory_high(f, &unknown, 0, 0), None);
    // Factor 1.0 disables early throttling: memory.high == limit.
    let one = ThrottlingFactor::from_f64(1.0).unwrap();
    assert_eq!(
        container_memory_high(one, &facts, 100 * MI, 200 * MI),
        Some(200 * MI)
    );
}

#[test]
fn container_with_equal_request_and_limit_in_burstable_pod_gets_no_high() {
    // The kubelet tests request == limit per container, not the pod's class.
    let p = plan(
        ReservationPolicy::TieredReservation,
        vec![pod(
            "mixed",
            vec![
                app("eq", &[("memory", "256Mi")], &[("memory", "256Mi")]),
                app("burst", &[("memory", "128Mi")], &[]),
            ],
        )],
    );
    assert_eq!(p.pods[0].qos, QosClass::Burstable);
    assert_eq!(get(container_values(&p, "mixed", "eq"), MEMORY_HIGH), None);
    assert!(get(container_values(&p, "mixed", "burst"), MEMORY_HIGH).is_some());
    assert_eq!(
        get(container_values(&p, "mixed", "eq"), MEMORY_LOW),
        Some(256 * MI)
    );
}

#[test]
fn hard_reservation_sets_min_everywhere_with_a_request() {
    let p = plan(
        ReservationPolicy::HardReservation,
        vec![
            pod(
                "g",
                vec![app(
                    "c",
                    &[("memory", "1Gi"), ("cpu", "1")],
                    &[("memory", "1Gi"), ("cpu", "1")],
                )],
            ),
            pod(
                "b",
                vec![
                    app("c", &[("memory", "512Mi")], &[("memory", "1Gi")]),
                    app("d", &[], &[]),
                ],
            ),
            pod("be", vec![app("c", &[], &[])]),
        ],
    );
    assert_eq!(get(container_values(&p, "g", "c"), MEMORY_MIN), Some(GI));
    assert_eq!(
        get(container_values(&p, "b", "c"), MEMORY_MIN),
        Some(512 * MI)
    );
    assert_eq!(get(container_values(&p, "b", "d"), MEMORY_MIN), None);
    assert_eq!(get(pod_values(&p, "g"), MEMORY_MIN), Some(GI));
    assert_eq!(get(pod_values(&p, "b"), MEMORY_MIN), Some(512 * MI));
    assert_eq!(get(pod_values(&p, "be"), MEMORY_MIN), None);
    assert_eq!(get(&p.burstable, MEMORY_MIN), Some(512 * MI));
    assert_eq!(get(&p.kubepods, MEMORY_MIN), Some(GI + 512 * MI));
    assert_eq!(get(&p.kubepods, MEMORY_LOW), None);
    assert!(p.besteffort.is_empty());
    assert!(p
        .pods
        .iter()
        .flat_map(|p| &p.containers)
        .all(|c| !c.cgroup.contains_key(MEMORY_LOW)));
    assert_eq!(p.totals.memory_min_bytes, GI + 512 * MI);
    assert_eq!(p.totals.memory_low_bytes, 0);
}

#[test]
fn none_policy_writes_no_protection_but_still_throttles() {
    let p = plan(
        ReservationPolicy::None,
        vec![
            pod(
                "g",
                vec![app(
                    "c",
                    &[("memory", "1Gi"), ("cpu", "1")],
                    &[("memory", "1Gi"), ("cpu", "1")],
                )],
            ),
            pod(
                "b",
                vec![app("c", &[("memory", "512Mi")], &[("memory", "1Gi")])],
            ),
        ],
    );
    for values in [&p.kubepods, &p.burstable, &p.besteffort]
        .into_iter()
        .chain(p.pods.iter().map(|p| &p.cgroup))
        .chain(
            p.pods
                .iter()
                .flat_map(|p| p.containers.iter().map(|c| &c.cgroup)),
        )
    {
        assert!(
            !values.contains_key(MEMORY_MIN) && !values.contains_key(MEMORY_LOW),
            "{values:?}"
        );
    }
    // 512Mi + 0.9 * 512Mi = 972.8Mi -> floored to 4 KiB pages
    let want = (512 * MI as i128 * 10 + 9 * 512 * MI as i128) / 10 / 4096 * 4096;
    assert_eq!(
        get(container_values(&p, "b", "c"), MEMORY_HIGH),
        Some(want as i64)
    );
    assert_eq!(get(container_values(&p, "g", "c"), MEMORY_HIGH), None);
}

#[test]
fn disabling_resets_min_low_to_zero_and_high_to_max() {
    let pods = vec![defaulted(pod(
        "b",
        vec![app("c", &[("memory", "512Mi")], &[("memory", "1Gi")])],
    ))];
    let off = MemoryQosSettings {
        enabled: false,
        ..settings(ReservationPolicy::TieredReservation, 0.9)
    };
    let p = plan_node(&off, &node(8 * GI), &pods);
    let all = [
        &p.kubepods,
        &p.burstable,
        &p.besteffort,
        &p.pods[0].cgroup,
        &p.pods[0].containers[0].cgroup,
    ];
    for values in all {
        assert_eq!(get(values, MEMORY_MIN), Some(0));
        assert_eq!(get(values, MEMORY_LOW), Some(0));
        assert_eq!(values.get(MEMORY_HIGH), Some(&CgroupValue::max()));
        assert!(
            !values.contains_key(MEMORY_MAX),
            "memory.max belongs to the runtime"
        );
    }
}

#[test]
fn old_kernel_is_a_warning_not_a_failure() {
    let pods = vec![defaulted(pod(
        "b",
        vec![app("c", &[("memory", "512Mi")], &[("memory", "1Gi")])],
    ))];
    let facts = NodeMemoryFacts {
        kernel_version: Some("5.4.0-1103-aws".into()),
        ..node(8 * GI)
    };
    let p = plan_node(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        &facts,
        &pods,
    );
    assert_eq!(p.warnings.len(), 1);
    assert!(p.warnings[0].to_string().contains("older than 5.9"));
    assert!(get(container_values(&p, "b", "c"), MEMORY_HIGH).is_some());
}

/// The pod cgroup's memory.max where an init container or a sidecar declares no memory
/// limit, by each kubelet's own rule (issue 60: found by running the kubelets' own
/// `ResourceConfigForPod` over random pods). v1.35.4 and v1.36.3 judge "every limit
/// declared" through the `ContainerFn` of `resourcehelper.PodLimits`, called with what
/// `AggregateContainerLimits` aggregates: a sidecar's limit carries over to the init
/// containers and sidecars after it. v1.37.2 asks every container for a limit of its
/// own. The limit written is `PodLimits`' either way.
#[test]
fn a_pods_memory_max_follows_each_kubelets_rule_for_declared_limits() {
    let limited = |name: &str, kind, mem: &str| {
        container(name, kind, res(&[("memory", "32Mi")], &[("memory", mem)]))
    };
    let unlimited = |name: &str, kind| container(name, kind, res(&[("memory", "32Mi")], &[]));
    let with_inits = |name: &str, inits: Vec<Container>| {
        let mut p = pod(name, vec![limited("a", ContainerKind::App, "256Mi")]);
        p.spec.init_containers = inits;
        defaulted(p)
    };
    let cases = [
        // A sidecar with a limit, then an init container without one: v1.36 counts the
        // sidecar's limit as the init container's (its ContainerFn sees 64Mi).
        (
            with_inits(
                "sidecar-then-init",
                vec![
                    limited("proxy", ContainerKind::Sidecar, "64Mi"),
                    unlimited("setup", ContainerKind::Init),
                ],
            ),
            Some(320 * MI),
            None,
        ),
        // A sidecar without a limit after one with a limit: the cumulative 64Mi.
        (
            with_inits(
                "sidecar-then-sidecar",
                vec![
                    limited("proxy", ContainerKind::Sidecar, "64Mi"),
                    unlimited("logs", ContainerKind::Sidecar),
                ],
            ),
            Some(320 * MI),
            None,
        ),
        // The init container before the sidecar: nothing carries back to it.
        (
            with_inits(
                "init-then-sidecar",
                vec![
                    unlimited("setup", ContainerKind::Init),
                    limited("proxy", ContainerKind::Sidecar, "64Mi"),
                ],
            ),
            None,
            None,
        ),
        // A sidecar without a limit first: none declared for it.
        (
            with_inits(
                "unlimited-sidecar-first",
                vec![
                    unlimited("logs", ContainerKind::Sidecar),
                    limited("proxy", ContainerKind::Sidecar, "64Mi"),
                ],
            ),
            None,
            None,
        ),
        // Every container limited: both set PodLimits' max(256 + 64, 512 + 64).
        (
            with_inits(
                "all-limited",
                vec![
                    limited("proxy", ContainerKind::Sidecar, "64Mi"),
                    limited("setup", ContainerKind::Init, "512Mi"),
                ],
            ),
            Some(576 * MI),
            Some(576 * MI),
        ),
    ];
    for (p, up_to_v136, v137) in cases {
        let name = p.name.clone();
        for (facts, want) in [(node(8 * GI), up_to_v136), (node_v137(8 * GI), v137)] {
            let planned = plan_node(
                &settings(ReservationPolicy::TieredReservation, 0.9),
                &facts,
                std::slice::from_ref(&p),
            );
            assert_eq!(
                get(pod_values(&planned, &name), MEMORY_MAX),
                want,
                "{name} under {:?}",
                facts.rules()
            );
            // The pod opted out (nothing protected): the same informational memory.max.
            let opted_out = nodemem_model::values::memory_qos::plan_pods(
                &settings(ReservationPolicy::TieredReservation, 0.9),
                &facts,
                std::iter::once((&p, true)),
            );
            assert_eq!(
                get(pod_values(&opted_out, &name), MEMORY_MAX),
                want,
                "{name} opted out under {:?}",
                facts.rules()
            );
        }
    }
}

#[test]
fn init_containers_are_not_summed_and_sidecars_are() {
    let init = |name: &str, mem: &str| {
        container(
            name,
            ContainerKind::Init,
            res(&[("memory", mem)], &[("memory", mem)]),
        )
    };
    let sidecar = |name: &str, mem: &str| {
        container(name, ContainerKind::Sidecar, res(&[("memory", mem)], &[]))
    };
    let mut p = pod(
        "init",
        vec![
            app("a", &[("memory", "256Mi")], &[]),
            app("b", &[("memory", "256Mi")], &[]),
        ],
    );
    p.spec.init_containers = vec![init("setup", "1Gi")];
    // max(256 + 256, 1024)
    let plan1 = plan(ReservationPolicy::HardReservation, vec![p]);
    assert_eq!(get(pod_values(&plan1, "init"), MEMORY_MIN), Some(GI));
    // Each init container still gets its own memory.min while it runs.
    assert_eq!(
        get(container_values(&plan1, "init", "setup"), MEMORY_MIN),
        Some(GI)
    );

    // Sidecar started before an init container runs alongside it:
    // max(256 app + 128 sidecar, 300 init + 128 sidecar) = 428Mi.
    let mut p = pod("side", vec![app("a", &[("memory", "256Mi")], &[])]);
    p.spec.init_containers = vec![sidecar("proxy", "128Mi"), init("migrate", "300Mi")];
    let plan2 = plan(ReservationPolicy::TieredReservation, vec![p]);
    assert_eq!(get(pod_values(&plan2, "side"), MEMORY_LOW), Some(428 * MI));
    assert_eq!(
        get(container_values(&plan2, "side", "proxy"), MEMORY_LOW),
        Some(128 * MI)
    );
    // An init container before the sidecar does not overlap it: max(384, 300) = 384Mi.
    let mut p = pod("side2", vec![app("a", &[("memory", "256Mi")], &[])]);
    p.spec.init_containers = vec![init("migrate", "300Mi"), sidecar("proxy", "128Mi")];
    let plan3 = plan(ReservationPolicy::TieredReservation, vec![p]);
    assert_eq!(get(pod_values(&plan3, "side2"), MEMORY_LOW), Some(384 * MI));
    // Containers are listed init/sidecar first, in spec order, then app containers.
    let names: Vec<_> = plan3.pods[0]
        .containers
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(names, ["migrate", "proxy", "a"]);
}

#[test]
fn pod_overhead_is_protected_at_the_pod_level() {
    let mut p = pod(
        "kata",
        vec![app(
            "c",
            &[("memory", "512Mi"), ("cpu", "1")],
            &[("memory", "512Mi"), ("cpu", "1")],
        )],
    );
    p.spec.overhead = list(&[("memory", "64Mi")]);
    let plan = plan(ReservationPolicy::TieredReservation, vec![p]);
    assert_eq!(get(pod_values(&plan, "kata"), MEMORY_MIN), Some(576 * MI));
    assert_eq!(get(pod_values(&plan, "kata"), MEMORY_MAX), Some(576 * MI));
    assert_eq!(
        get(container_values(&plan, "kata", "c"), MEMORY_MIN),
        Some(512 * MI)
    );
    assert_eq!(get(&plan.kubepods, MEMORY_MIN), Some(576 * MI));
}

/// A BestEffort pod with a RuntimeClass overhead (issue 58, found on the real v1.37.2
/// node: 494 of 495 files equal, this one apart). `ResourceConfigForPod` gives every
/// pod that is not Guaranteed and whose effective request (the overhead here) is above
/// 0 memory.low under TieredReservation; the QoS class stays BestEffort (containers
/// alone decide it), so the QoS-class sums leave it out. Under HardReservation (the
/// v1.35 gate) it is memory.min, and under None nothing.
#[test]
fn a_besteffort_pods_overhead_is_protected_at_the_pod_level_as_the_kubelet_does() {
    let besteffort = || {
        let mut p = pod("be", vec![app("c", &[], &[])]);
        p.spec.overhead = list(&[("memory", "7Mi")]);
        p
    };
    let tiered = plan(ReservationPolicy::TieredReservation, vec![besteffort()]);
    assert_eq!(get(pod_values(&tiered, "be"), MEMORY_LOW), Some(7 * MI));
    assert_eq!(get(pod_values(&tiered, "be"), MEMORY_MIN), None);
    assert_eq!(get(container_values(&tiered, "be", "c"), MEMORY_LOW), None);
    assert_eq!(
        get(&tiered.kubepods, MEMORY_MIN).unwrap_or(0),
        0,
        "kubepods' sums count Guaranteed and Burstable pods only"
    );
    let hard = plan(ReservationPolicy::HardReservation, vec![besteffort()]);
    assert_eq!(get(pod_values(&hard, "be"), MEMORY_MIN), Some(7 * MI));
    let none = plan(ReservationPolicy::None, vec![besteffort()]);
    assert_eq!(get(pod_values(&none, "be"), MEMORY_LOW), None);
    assert_eq!(get(pod_values(&none, "be"), MEMORY_MIN), None);
}

// ---------------------------------------------------------------- seed 003 (v1.36 blog)

#[test]
fn blog_512mi_guaranteed_and_burstable() {
    let guaranteed = pod(
        "g",
        vec![app(
            "c",
            &[("memory", "512Mi"), ("cpu", "500m")],
            &[("memory", "512Mi"), ("cpu", "500m")],
        )],
    );
    let burstable = pod(
        "b",
        vec![app("c", &[("memory", "512Mi")], &[("memory", "1Gi")])],
    );
    let besteffort = pod("be", vec![app("c", &[], &[])]);
    let p = plan(
        ReservationPolicy::TieredReservation,
        vec![guaranteed, burstable, besteffort],
    );
    // "$ cat .../kubepods-pod<uid>.slice/memory.min -> 536870912"
    assert_eq!(get(pod_values(&p, "g"), MEMORY_MIN), Some(536_870_912));
    assert_eq!(get(pod_values(&p, "g"), MEMORY_LOW), None);
    assert_eq!(
        get(container_values(&p, "g", "c"), MEMORY_MIN),
        Some(536_870_912)
    );
    assert_eq!(
        get(container_values(&p, "g", "c"), MEMORY_HIGH),
        None,
        "Guaranteed: not set"
    );
    assert_eq!(
        get(container_values(&p, "g", "c"), MEMORY_MAX),
        Some(536_870_912)
    );
    // "$ cat .../kubepods-burstable-pod<uid>.slice/memory.low -> 536870912"
    assert_eq!(get(pod_values(&p, "b"), MEMORY_LOW), Some(536_870_912));
    assert_eq!(get(pod_values(&p, "b"), MEMORY_MIN), None);
    assert_eq!(
        get(container_values(&p, "b", "c"), MEMORY_LOW),
        Some(536_870_912)
    );
    assert!(get(container_values(&p, "b", "c"), MEMORY_HIGH).is_some());
    // BestEffort: neither min nor low; memory.high from allocatable; no memory.max.
    let be = container_values(&p, "be", "c");
    assert!(
        !be.contains_key(MEMORY_MIN)
            && !be.contains_key(MEMORY_LOW)
            && !be.contains_key(MEMORY_MAX)
    );
    assert!(be.contains_key(MEMORY_HIGH));
    assert!(pod_values(&p, "be").is_empty());
    // Parents: kubepods memory.min = G + B, memory.low = B; burstable memory.low = B.
    assert_eq!(get(&p.kubepods, MEMORY_MIN), Some(GI));
    assert_eq!(get(&p.kubepods, MEMORY_LOW), Some(512 * MI));
    assert_eq!(get(&p.burstable, MEMORY_LOW), Some(512 * MI));
    assert_eq!(get(&p.burstable, MEMORY_MIN), None);
    assert!(p.besteffort.is_empty());
    // The two node metrics.
    assert_eq!(p.totals.memory_min_bytes, 536_870_912);
    assert_eq!(p.totals.memory_low_bytes, 536_870_912);
}

#[test]
fn blog_8gi_node_with_7gi_of_burstable_requests() {
    let pods: Vec<Pod> = (0..7)
        .map(|i| {
            pod(
                &format!("b{i}"),
                vec![app("c", &[("memory", "1Gi")], &[("memory", "2Gi")])],
            )
        })
        .collect();
    // v1.27 (HardReservation): the 7 GiB is locked as memory.min.
    let hard = plan(ReservationPolicy::HardReservation, pods.clone());
    assert_eq!(hard.totals.memory_min_bytes, 7 * GI);
    assert_eq!(get(&hard.burstable, MEMORY_MIN), Some(7 * GI));
    assert!(hard
        .pods
        .iter()
        .all(|p| get(&p.cgroup, MEMORY_MIN) == Some(GI)));
    // v1.36 (TieredReservation): the same requests become memory.low.
    let tiered = plan(ReservationPolicy::TieredReservation, pods);
    assert_eq!(tiered.totals.memory_min_bytes, 0);
    assert_eq!(tiered.totals.memory_low_bytes, 7 * GI);
    assert!(tiered
        .pods
        .iter()
        .all(|p| get(&p.cgroup, MEMORY_MIN).is_none()));
    assert!(tiered
        .pods
        .iter()
        .all(|p| get(&p.cgroup, MEMORY_LOW) == Some(GI)));
    assert_eq!(get(&tiered.burstable, MEMORY_LOW), Some(7 * GI));
    assert_eq!(get(&tiered.kubepods, MEMORY_LOW), Some(7 * GI));
    assert!(tiered.warnings.is_empty(), "{:?}", tiered.warnings);
}

#[test]
fn protection_above_allocatable_is_warned_about() {
    let pods: Vec<Pod> = (0..3)
        .map(|i| {
            defaulted(pod(
                &format!("g{i}"),
                vec![app(
                    "c",
                    &[("memory", "3Gi"), ("cpu", "1")],
                    &[("memory", "3Gi"), ("cpu", "1")],
                )],
            ))
        })
        .collect();
    let p = plan_node(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        &node(8 * GI),
        &pods,
    );
    assert!(
        p.warnings
            .iter()
            .any(|w| matches!(w, nodemem_model::Warning::ProtectionExceedsAllocatable { allocatable, .. } if *allocatable == 8 * GI)
                && w.to_string().contains("exceeds node allocatable")),
        "{:?}",
        p.warnings
    );
}

// ---------------------------------------------------------------- QoS classes

#[test]
fn qos_class_table() {
    let g = &[("memory", "1Gi"), ("cpu", "1")];
    let cases: Vec<(&str, Pod, QosClass)> = vec![
        (
            "no resources",
            pod("p", vec![app("a", &[], &[])]),
            QosClass::BestEffort,
        ),
        (
            "limits only default requests",
            pod("p", vec![app("a", &[], g)]),
            QosClass::Guaranteed,
        ),
        (
            "all containers equal",
            pod("p", vec![app("a", g, g), app("b", g, g)]),
            QosClass::Guaranteed,
        ),
        (
            "one container without limits",
            pod("p", vec![app("a", g, g), app("b", &[], &[])]),
            QosClass::Burstable,
        ),
        (
            "memory only",
            pod(
                "p",
                vec![app("a", &[("memory", "1Gi")], &[("memory", "1Gi")])],
            ),
            QosClass::Burstable,
        ),
        (
            "request below limit",
            pod(
                "p",
                vec![app(
                    "a",
                    &[("memory", "1Gi"), ("cpu", "1")],
                    &[("memory", "2Gi"), ("cpu", "1")],
                )],
            ),
            QosClass::Burstable,
        ),
        (
            "zero limits count as unset",
            pod("p", vec![app("a", &[], &[("memory", "0"), ("cpu", "0")])]),
            QosClass::BestEffort,
        ),
        (
            "hugepages do not decide",
            pod("p", vec![app("a", &[], &[("hugepages-2Mi", "1Gi")])]),
            QosClass::BestEffort,
        ),
        (
            "equal values in other units",
            pod(
                "p",
                vec![app(
                    "a",
                    &[("memory", "1024Mi"), ("cpu", "1000m")],
                    &[("memory", "1Gi"), ("cpu", "1")],
                )],
            ),
            QosClass::Guaranteed,
        ),
        (
            // Every container, init ones included, must set cpu and memory limits.
            "init container without limits",
            {
                let mut p = pod("p", vec![app("a", g, g)]);
                p.spec
                    .init_containers
                    .push(container("i", ContainerKind::Init, res(&[], &[])));
                p
            },
            QosClass::Burstable,
        ),
        (
            "guaranteed init container",
            {
                let mut p = pod("p", vec![app("a", g, g)]);
                p.spec
                    .init_containers
                    .push(container("i", ContainerKind::Init, res(g, g)));
                p
            },
            QosClass::Guaranteed,
        ),
        (
            "init container with requests only",
            {
                let mut p = pod("p", vec![app("a", g, g)]);
                p.spec.init_containers.push(container(
                    "i",
                    ContainerKind::Init,
                    res(&[("memory", "1Mi")], &[]),
                ));
                p
            },
            QosClass::Burstable,
        ),
        (
            "pod-level requests equal limits",
            with_pod_resources(
                pod("p", vec![app("a", &[], &[]), app("b", &[], &[])]),
                res(g, g),
            ),
            QosClass::Guaranteed,
        ),
        (
            "pod-level limits without cpu override guaranteed containers",
            with_pod_resources(
                pod("p", vec![app("a", g, g)]),
                res(&[("memory", "1Gi")], &[("memory", "1Gi")]),
            ),
            QosClass::Burstable,
        ),
        (
            "pod-level requests only",
            with_pod_resources(
                pod("p", vec![app("a", &[], &[])]),
                res(&[("memory", "1Gi")], &[]),
            ),
            QosClass::Burstable,
        ),
    ];
    for (name, p, want) in cases {
        let p = defaulted(p);
        assert_eq!(qos_class(&p.spec), want, "{name}");
    }
}

// ---------------------------------------------------------------- seed 002 (KEP-2837)

fn pod_level(
    limits: &[(&str, &str)],
    requests: &[(&str, &str)],
    containers: Vec<Container>,
) -> Pod {
    with_pod_resources(pod("p", containers), res(requests, limits))
}

#[test]
fn kep2837_example1_row5_pod_limit_only() {
    // Pod limits, no pod requests, no container specs: pod request defaults to the
    // limit; containers' memory.max is the pod limit.
    let p = defaulted(pod_level(
        &[("memory", "100Gi"), ("cpu", "10")],
        &[],
        vec![app("c1", &[], &[]), app("c2", &[], &[])],
    ));
    assert_eq!(
        p.spec.resources.as_ref().unwrap().request("memory"),
        Quantity::parse("100Gi").unwrap()
    );
    assert_eq!(qos_class(&p.spec), QosClass::Guaranteed);
    assert!(validate_pod_resources(&p.spec).is_empty());
    let plan = plan_node(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        &node(200 * GI),
        &[p],
    );
    assert_eq!(get(pod_values(&plan, "p"), MEMORY_MIN), Some(100 * GI));
    assert_eq!(get(pod_values(&plan, "p"), MEMORY_MAX), Some(100 * GI));
    for c in ["c1", "c2"] {
        let v = container_values(&plan, "p", c);
        assert_eq!(get(v, MEMORY_MAX), Some(100 * GI));
        assert_eq!(get(v, MEMORY_MIN), None, "no container request");
        // Container request == limit == 0: the kubelet sets memory.high from allocatable.
        assert_eq!(get(v, MEMORY_HIGH), Some(180 * GI));
    }
}

#[test]
fn kep2837_example2_row6_aggregated_requests_above_pod_limit_is_invalid() {
    let p = defaulted(pod_level(
        &[("memory", "100Gi")],
        &[],
        vec![
            app("c1", &[], &[("memory", "60Gi")]),
            app("c2", &[], &[("memory", "60Gi")]),
        ],
    ));
    // Container requests default to 60Gi each; pod request derives to 120Gi > 100Gi.
    assert_eq!(
        p.spec.resources.as_ref().unwrap().request("memory"),
        Quantity::parse("120Gi").unwrap()
    );
    let problems = validate_pod_resources(&p.spec);
    assert!(
        problems
            .iter()
            .any(|pr| pr.path == "spec.resources.requests.memory" && pr.message.contains("limit")),
        "{problems:?}"
    );
}

#[test]
fn kep2837_example3_row7_pod_limit_and_container_requests() {
    let p = defaulted(pod_level(
        &[("memory", "100Gi")],
        &[],
        vec![
            app("c1", &[("memory", "50Gi")], &[]),
            app("c2", &[("memory", "50Gi")], &[]),
        ],
    ));
    assert_eq!(
        p.spec.resources.as_ref().unwrap().request("memory"),
        Quantity::parse("100Gi").unwrap()
    );
    assert!(validate_pod_resources(&p.spec).is_empty());
    assert_eq!(
        qos_class(&p.spec),
        QosClass::Burstable,
        "no pod-level cpu limit"
    );
    let plan = plan_node(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        &node(200 * GI),
        &[p],
    );
    assert_eq!(get(pod_values(&plan, "p"), MEMORY_LOW), Some(100 * GI));
    assert_eq!(get(pod_values(&plan, "p"), MEMORY_MAX), Some(100 * GI));
    for c in ["c1", "c2"] {
        let v = container_values(&plan, "p", c);
        assert_eq!(
            get(v, MEMORY_MAX),
            Some(100 * GI),
            "implied from the pod limit"
        );
        assert_eq!(get(v, MEMORY_LOW), Some(50 * GI));
    }
}

#[test]
fn kep2837_example4_pod_request_only_leaves_memory_max_unset() {
    let p = defaulted(pod_level(
        &[],
        &[("memory", "100Gi")],
        vec![app("c1", &[], &[("memory", "50Gi")]), app("c2", &[], &[])],
    ));
    assert!(validate_pod_resources(&p.spec).is_empty());
    let plan = plan_node(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        &node(200 * GI),
        &[p],
    );
    let pv = pod_values(&plan, "p");
    assert_eq!(get(pv, MEMORY_LOW), Some(100 * GI));
    assert_eq!(get(pv, MEMORY_MAX), None, "memory.max=max at the pod level");
    assert_eq!(get(container_values(&plan, "p", "c2"), MEMORY_MAX), None);
}

#[test]
fn kep2837_example5_row10_pod_request_below_container_limits_is_invalid() {
    let p = defaulted(pod_level(
        &[],
        &[("memory", "100Gi")],
        vec![
            app("c1", &[], &[("memory", "60Gi")]),
            app("c2", &[], &[("memory", "60Gi")]),
        ],
    ));
    let problems = validate_pod_resources(&p.spec);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, "spec.resources.requests.memory");
    assert!(
        problems[0]
            .message
            .contains("aggregated container requests"),
        "{}",
        problems[0]
    );
}

#[test]
fn kep2837_example6_pod_limit_one_container_specified() {
    let p = defaulted(pod_level(
        &[("memory", "100Gi")],
        &[],
        vec![
            app("c1", &[("memory", "50Gi")], &[("memory", "50Gi")]),
            app("c2", &[], &[]),
        ],
    ));
    assert_eq!(
        p.spec.resources.as_ref().unwrap().request("memory"),
        Quantity::parse("50Gi").unwrap()
    );
    let plan = plan_node(
        &settings(ReservationPolicy::HardReservation, 0.9),
        &node(200 * GI),
        &[p],
    );
    assert_eq!(get(pod_values(&plan, "p"), MEMORY_MIN), Some(50 * GI));
    assert_eq!(
        get(container_values(&plan, "p", "c1"), MEMORY_MAX),
        Some(50 * GI)
    );
    assert_eq!(
        get(container_values(&plan, "p", "c2"), MEMORY_MAX),
        Some(100 * GI)
    );
    assert_eq!(
        get(container_values(&plan, "p", "c1"), MEMORY_HIGH),
        None,
        "request == limit"
    );
}

#[test]
fn kep2837_example7_pod_request_one_container_limit() {
    let p = defaulted(pod_level(
        &[],
        &[("memory", "100Gi")],
        vec![app("c1", &[], &[("memory", "50Gi")]), app("c2", &[], &[])],
    ));
    assert_eq!(
        p.spec.containers[0].resources.request("memory"),
        Quantity::parse("50Gi").unwrap()
    );
    let plan = plan_node(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        &node(200 * GI),
        &[p],
    );
    assert_eq!(
        get(pod_values(&plan, "p"), MEMORY_MAX),
        None,
        "not every container has a limit"
    );
    assert_eq!(get(pod_values(&plan, "p"), MEMORY_LOW), Some(100 * GI));
}

#[test]
fn kep2837_example8_pod_request_no_container_spec() {
    let p = defaulted(pod_level(
        &[],
        &[("memory", "100Gi")],
        vec![app("c1", &[], &[]), app("c2", &[], &[])],
    ));
    assert_eq!(qos_class(&p.spec), QosClass::Burstable);
    let plan = plan_node(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        &node(200 * GI),
        &[p],
    );
    assert_eq!(get(pod_values(&plan, "p"), MEMORY_LOW), Some(100 * GI));
    assert_eq!(get(pod_values(&plan, "p"), MEMORY_MAX), None);
    assert_eq!(get(container_values(&plan, "p", "c1"), MEMORY_LOW), None);
    assert_eq!(
        get(container_values(&plan, "p", "c1"), MEMORY_HIGH),
        Some(180 * GI)
    );
}

#[test]
fn kep2837_example9_pod_limit_container_requests_sum() {
    let p = defaulted(pod_level(
        &[("memory", "100Gi")],
        &[],
        vec![
            app("c1", &[("memory", "10Gi")], &[]),
            app("c2", &[("memory", "20Gi")], &[]),
            app("c3", &[("memory", "20Gi")], &[]),
        ],
    ));
    assert_eq!(
        p.spec.resources.as_ref().unwrap().request("memory"),
        Quantity::parse("50Gi").unwrap()
    );
    assert!(validate_pod_resources(&p.spec).is_empty());
    let plan = plan_node(
        &settings(ReservationPolicy::HardReservation, 0.9),
        &node(200 * GI),
        &[p],
    );
    assert_eq!(get(pod_values(&plan, "p"), MEMORY_MIN), Some(50 * GI));
    for c in ["c1", "c2", "c3"] {
        assert_eq!(
            get(container_values(&plan, "p", c), MEMORY_MAX),
            Some(100 * GI)
        );
    }
    assert_eq!(get(&plan.kubepods, MEMORY_MIN), Some(50 * GI));
}

#[test]
fn container_limit_above_pod_limit_is_invalid() {
    let p = defaulted(pod_level(
        &[("memory", "1Gi")],
        &[("memory", "512Mi")],
        vec![app("c1", &[("memory", "256Mi")], &[("memory", "2Gi")])],
    ));
    let problems = validate_pod_resources(&p.spec);
    assert!(
        problems
            .iter()
            .any(|pr| pr.path == "spec.containers[0].resources.limits.memory"),
        "{problems:?}"
    );
}

#[test]
fn negative_and_inverted_container_resources_are_invalid() {
    let p = pod(
        "p",
        vec![
            app("c", &[("memory", "2Gi")], &[("memory", "1Gi")]),
            app("d", &[("memory", "-1")], &[]),
        ],
    );
    let problems = validate_pod_resources(&p.spec);
    let paths: Vec<_> = problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "spec.containers[0].resources.requests.memory",
            "spec.containers[1].resources.requests.memory"
        ]
    );
}

// ---------------------------------------------------------------- v1.37 rules

/// A pod with pod-level memory limit 4Gi and request 2Gi, one container with a limit
/// of its own (1Gi of 2Gi) and one without.
fn pod_level_burstable() -> Pod {
    defaulted(pod_level(
        &[("memory", "4Gi")],
        &[("memory", "2Gi")],
        vec![
            app("limited", &[("memory", "1Gi")], &[("memory", "2Gi")]),
            app("open", &[("memory", "1Gi")], &[]),
        ],
    ))
}

/// v1.37 `ApplyPodLevelMemoryHigh`: the pod cgroup of a pod with pod-level resources
/// gets memory.high = floor((request + factor * (limit - request)) / page) * page;
/// its container without a limit gets none (the pod's throttles it), the one with a
/// limit keeps its own. The v1.36 rules set nothing on the pod and throttle the open
/// container against node allocatable.
#[test]
fn v1_37_pod_level_memory_high_replaces_the_open_containers() {
    let settings = settings(ReservationPolicy::TieredReservation, 0.9);
    let p = pod_level_burstable();
    assert_eq!(qos_class(&p.spec), QosClass::Burstable);

    let v137 = plan_node(&settings, &node_v137(8 * GI), std::slice::from_ref(&p));
    let pod_high = (2 * GI + (2 * GI) / 10 * 9) / 4096 * 4096;
    assert_eq!(get(pod_values(&v137, "p"), MEMORY_HIGH), Some(pod_high));
    assert_eq!(get(pod_values(&v137, "p"), MEMORY_MAX), Some(4 * GI));
    assert_eq!(get(container_values(&v137, "p", "open"), MEMORY_HIGH), None);
    let limited_high = (GI + GI / 10 * 9) / 4096 * 4096;
    assert_eq!(
        get(container_values(&v137, "p", "limited"), MEMORY_HIGH),
        Some(limited_high)
    );

    let v136 = plan_node(&settings, &node(8 * GI), &[p]);
    assert_eq!(get(pod_values(&v136, "p"), MEMORY_HIGH), None);
    assert_eq!(
        get(container_values(&v136, "p", "open"), MEMORY_HIGH),
        Some((GI + (8 * GI - GI) / 10 * 9) / 4096 * 4096)
    );
    assert_eq!(
        get(container_values(&v136, "p", "limited"), MEMORY_HIGH),
        Some(limited_high)
    );
}

/// `memoryLimitsDeclared`: pod-level CPU alone makes pod-level resources set, and when
/// every container has a memory limit the pod's limit is their sum; a pod whose
/// memory request equals its limit, or that declares no memory limit, gets none.
#[test]
fn v1_37_pod_level_memory_high_needs_declared_limits_and_room() {
    let settings = settings(ReservationPolicy::None, 0.9);
    let cpu_only = defaulted(pod_level(
        &[("cpu", "2")],
        &[("cpu", "1")],
        vec![
            app("a", &[("memory", "1Gi")], &[("memory", "2Gi")]),
            app("b", &[("memory", "1Gi")], &[("memory", "2Gi")]),
        ],
    ));
    let plan = plan_node(&settings, &node_v137(8 * GI), &[cpu_only]);
    assert_eq!(
        get(pod_values(&plan, "p"), MEMORY_HIGH),
        Some((2 * GI + (2 * GI) / 10 * 9) / 4096 * 4096)
    );
    assert!(
        get(container_values(&plan, "p", "a"), MEMORY_HIGH).is_some(),
        "a container with its own limit keeps its memory.high"
    );

    let undeclared = defaulted(pod_level(
        &[("cpu", "2")],
        &[("cpu", "1")],
        vec![
            app("a", &[("memory", "1Gi")], &[("memory", "2Gi")]),
            app("b", &[("memory", "1Gi")], &[]),
        ],
    ));
    let plan = plan_node(&settings, &node_v137(8 * GI), &[undeclared]);
    assert_eq!(get(pod_values(&plan, "p"), MEMORY_HIGH), None);
    assert!(
        get(container_values(&plan, "p", "b"), MEMORY_HIGH).is_some(),
        "no pod-level memory limit: the open container is throttled on its own"
    );

    let guaranteed = defaulted(pod_level(
        &[("memory", "1Gi"), ("cpu", "1")],
        &[],
        vec![app("a", &[], &[])],
    ));
    let plan = plan_node(&settings, &node_v137(8 * GI), &[guaranteed]);
    assert_eq!(
        get(pod_values(&plan, "p"), MEMORY_HIGH),
        None,
        "request == limit"
    );
    assert_eq!(get(container_values(&plan, "p", "a"), MEMORY_HIGH), None);
}

/// A pod without pod-level resources is throttled the same way under both rules.
#[test]
fn v1_37_rules_change_nothing_without_pod_level_resources() {
    let settings = settings(ReservationPolicy::TieredReservation, 0.8);
    let pods: Vec<Pod> = [
        pod(
            "burstable",
            vec![app("c", &[("memory", "1Gi")], &[("memory", "2Gi")])],
        ),
        pod("open", vec![app("c", &[("memory", "1Gi")], &[])]),
        pod("besteffort", vec![app("c", &[], &[])]),
        pod(
            "guaranteed",
            vec![app(
                "c",
                &[("memory", "1Gi"), ("cpu", "1")],
                &[("memory", "1Gi"), ("cpu", "1")],
            )],
        ),
    ]
    .into_iter()
    .map(defaulted)
    .collect();
    assert_eq!(
        plan_node(&settings, &node_v137(8 * GI), &pods),
        plan_node(&settings, &node(8 * GI), &pods)
    );
}

/// No factor (the v1.37 kubelet's default): no memory.high anywhere, protection as
/// the reservation policy says.
#[test]
fn no_factor_sets_no_memory_high_anywhere() {
    let settings = MemoryQosSettings {
        throttling_factor: None,
        ..settings(ReservationPolicy::TieredReservation, 0.9)
    };
    let pods: Vec<Pod> = [
        pod(
            "burstable",
            vec![app("c", &[("memory", "1Gi")], &[("memory", "2Gi")])],
        ),
        pod("besteffort", vec![app("c", &[], &[])]),
        pod_level_burstable(),
    ]
    .into_iter()
    .map(defaulted)
    .collect();
    for facts in [node(8 * GI), node_v137(8 * GI)] {
        let plan = plan_node(&settings, &facts, &pods);
        for p in &plan.pods {
            assert_eq!(get(&p.cgroup, MEMORY_HIGH), None, "{}", p.name);
            for c in &p.containers {
                assert_eq!(get(&c.cgroup, MEMORY_HIGH), None, "{}/{}", p.name, c.name);
            }
        }
        assert_eq!(
            get(container_values(&plan, "burstable", "c"), MEMORY_LOW),
            Some(GI)
        );
        assert_eq!(get(&plan.kubepods, MEMORY_LOW), Some(GI + 2 * GI));
    }
}
