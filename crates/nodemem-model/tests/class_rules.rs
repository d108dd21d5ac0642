//! Workload classes against the kubelet's rules, exhaustively (issue 63): every class a
//! policy can write (memory.high from the pool, none, or a factor of its own; protection
//! from the pool or none) against every pool (each reservation policy, with and without
//! memory.high), every kubelet's rules (v1.35, v1.36, v1.37) and every pod shape the
//! reference phase draws (containers without resources, with a request, with a request
//! and a limit, Guaranteed; a sidecar; pod-level resources; a RuntimeClass overhead),
//! each pod on a node beside a Burstable and a Guaranteed pod of the pool's.
//!
//! What must hold, for each: the class's pod gets exactly what the kubelet's formulas
//! give under the class's settings (as on a pool whose settings are the class's); the
//! pool's pods get what they get without the class; the QoS-class cgroups and kubepods
//! protect exactly the pods that are protected as the pool protects (a class without
//! protection is left out of the sums, so a parent never protects less than its
//! children ask, nor more than the kubelet would for them); the totals are the pods'.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::collections::BTreeMap;

use nodemem_model::class::{ClassChoice, ClassMemoryHigh, ClassSource, Protection, WorkloadClass};
use nodemem_model::kubelet::version::KubeletVersion;
use nodemem_model::node::{desired_node, DesiredNode, NodeFacts, NodeInput, NodePod};
use nodemem_model::pod::defaulting::apply_defaults;
use nodemem_model::pod::validation::validate_pod_resources;
use nodemem_model::pod::{Container, ContainerKind, Pod, PodSpec, ResourceList, Resources};
use nodemem_model::settings::NodeSettings;
use nodemem_model::values::cgroup::{CgroupValues, MEMORY_LOW, MEMORY_MIN};
use nodemem_model::values::cgroup_layout::{ContainerId, ContainerRuntime};
use nodemem_model::values::factor::ThrottlingFactor;
use nodemem_model::values::memory_qos::{MemoryQosSettings, NodeMemoryFacts, ReservationPolicy};
use nodemem_model::{Quantity, Warning};

const GI: i64 = 1 << 30;

fn list(pairs: &[(&str, &str)]) -> ResourceList {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
        .collect()
}

/// A container's resources, as the reference phase varies them.
#[derive(Clone, Copy, Debug)]
enum Shape {
    Nothing,
    Request,
    RequestAndLimit,
    Guaranteed,
}

const SHAPES: [Shape; 4] = [
    Shape::Nothing,
    Shape::Request,
    Shape::RequestAndLimit,
    Shape::Guaranteed,
];

fn resources(shape: Shape, mib: u32) -> Resources {
    let memory = format!("{mib}Mi");
    let limit = format!("{}Mi", mib * 3);
    match shape {
        Shape::Nothing => Resources::default(),
        Shape::Request => Resources {
            requests: list(&[("memory", &memory)]),
            limits: ResourceList::new(),
        },
        Shape::RequestAndLimit => Resources {
            requests: list(&[("memory", &memory)]),
            limits: list(&[("memory", &limit)]),
        },
        Shape::Guaranteed => {
            let both = list(&[("memory", &memory), ("cpu", "100m")]);
            Resources {
                requests: both.clone(),
                limits: both,
            }
        }
    }
}

fn container(name: &str, kind: ContainerKind, resources: Resources) -> Container {
    Container {
        name: name.into(),
        kind,
        resources,
    }
}

/// Every pod shape: one or two app containers of each shape, with or without a
/// sidecar, pod-level resources, an overhead; those the apiserver would refuse left out.
fn pod_shapes() -> Vec<PodSpec> {
    let mut out = Vec::new();
    for first in SHAPES {
        for second in [None, Some(Shape::Nothing), Some(Shape::RequestAndLimit)] {
            for sidecar in [false, true] {
                for pod_level in [false, true] {
                    for overhead in [false, true] {
                        let mut spec = PodSpec::default();
                        spec.containers.push(container(
                            "app",
                            ContainerKind::App,
                            resources(first, 64),
                        ));
                        if let Some(shape) = second {
                            spec.containers.push(container(
                                "second",
                                ContainerKind::App,
                                resources(shape, 32),
                            ));
                        }
                        if sidecar {
                            spec.init_containers.push(container(
                                "sidecar",
                                ContainerKind::Sidecar,
                                resources(Shape::Request, 16),
                            ));
                        }
                        if pod_level {
                            spec.resources = Some(Resources {
                                requests: ResourceList::new(),
                                limits: list(&[("memory", "512Mi")]),
                            });
                        }
                        if overhead {
                            spec.overhead = list(&[("memory", "8Mi")]);
                        }
                        apply_defaults(&mut spec);
                        if validate_pod_resources(&spec).is_empty() {
                            out.push(spec);
                        }
                    }
                }
            }
        }
    }
    out
}

fn node_pod(name: &str, spec: PodSpec, choice: ClassChoice) -> NodePod {
    let ids: BTreeMap<String, ContainerId> = spec
        .containers
        .iter()
        .chain(&spec.init_containers)
        .map(|c| {
            let id = ContainerId {
                runtime: ContainerRuntime::Containerd,
                id: format!("{name}{}", c.name),
            };
            (c.name.clone(), id)
        })
        .collect();
    NodePod::new(
        Pod {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            spec,
        },
        ids,
        choice,
    )
}

/// The pool's own pods beside the class's: a Burstable and a Guaranteed one.
fn neighbours() -> Vec<NodePod> {
    let mut burstable = PodSpec::default();
    burstable.containers.push(container(
        "b",
        ContainerKind::App,
        resources(Shape::Request, 100),
    ));
    let mut guaranteed = PodSpec::default();
    guaranteed.containers.push(container(
        "g",
        ContainerKind::App,
        resources(Shape::Guaranteed, 200),
    ));
    for spec in [&mut burstable, &mut guaranteed] {
        apply_defaults(spec);
    }
    vec![
        node_pod("burstable", burstable, ClassChoice::Pool),
        node_pod("guaranteed", guaranteed, ClassChoice::Pool),
    ]
}

fn facts(minor: u32) -> NodeFacts {
    NodeFacts {
        memory: NodeMemoryFacts {
            allocatable_memory: Some(8 * GI),
            capacity_memory: Some(10 * GI),
            hard_eviction_memory: Some(100 << 20),
            kernel_version: Some("6.1.0".into()),
            kubelet_version: Some(KubeletVersion::v1(minor)),
            ..NodeMemoryFacts::default()
        },
        ..NodeFacts::default()
    }
}

fn pools() -> Vec<MemoryQosSettings> {
    let mut out = Vec::new();
    for reservation_policy in [
        ReservationPolicy::None,
        ReservationPolicy::TieredReservation,
        ReservationPolicy::HardReservation,
    ] {
        for throttling_factor in [Some(ThrottlingFactor::from_f64(0.8).unwrap()), None] {
            out.push(MemoryQosSettings {
                enabled: true,
                throttling_factor,
                reservation_policy,
            });
        }
    }
    out
}

fn classes() -> Vec<WorkloadClass> {
    let mut out = Vec::new();
    for memory_high in [
        ClassMemoryHigh::Pool,
        ClassMemoryHigh::Unset,
        ClassMemoryHigh::Factor(ThrottlingFactor::from_f64(0.55).unwrap()),
    ] {
        for protection in [Protection::Pool, Protection::Unprotected] {
            out.push(WorkloadClass {
                memory_high,
                protection,
                ..WorkloadClass::named("c")
            });
        }
    }
    out
}

fn compute<'p>(settings: &NodeSettings, facts: &NodeFacts, pods: &'p [NodePod]) -> DesiredNode<'p> {
    desired_node(NodeInput {
        settings,
        facts,
        pods,
        memory_manager: None,
    })
    .unwrap()
}

/// A pod's values: its cgroup's, then its containers' by name.
fn values_of(node: &DesiredNode<'_>, name: &str) -> (CgroupValues, Vec<(String, CgroupValues)>) {
    let pod = node.pods.iter().find(|p| p.name == name).unwrap();
    let containers = pod
        .containers
        .iter()
        .map(|c| (c.name.to_string(), c.values.clone()))
        .collect();
    (pod.values.clone(), containers)
}

/// The node-level cgroups' values.
fn node_level(node: &DesiredNode<'_>) -> [CgroupValues; 3] {
    [
        node.kubepods.clone(),
        node.burstable.clone(),
        node.besteffort.clone(),
    ]
}

fn sum(node: &DesiredNode<'_>, file: &str) -> i64 {
    node.pods
        .iter()
        .filter_map(|p| p.values.get(file).and_then(|v| v.bytes()))
        .sum()
}

#[test]
fn every_class_on_every_pool_gives_the_kubelets_values_and_the_parents_protect_the_protected() {
    let shapes = pod_shapes();
    assert!(shapes.len() >= 60, "{} shapes", shapes.len());
    let mut checked = 0;
    for minor in [35, 36, 37] {
        let facts = facts(minor);
        for pool in pools() {
            for class in classes() {
                let settings = NodeSettings {
                    memory_qos: pool,
                    classes: vec![class.clone()],
                    ..NodeSettings::default()
                };
                // The class's settings as a pool of their own: what the kubelet gives.
                let as_pool = NodeSettings {
                    memory_qos: class.memory_qos(&pool),
                    ..NodeSettings::default()
                };
                for spec in &shapes {
                    let chosen = ClassChoice::Named {
                        name: "c".into(),
                        source: ClassSource::PodAnnotation,
                    };
                    let mut pods = neighbours();
                    pods.push(node_pod("classed", spec.clone(), chosen));
                    let node = compute(&settings, &facts, &pods);
                    let alone = [node_pod("classed", spec.clone(), ClassChoice::Pool)];
                    let kubelet = compute(&as_pool, &facts, &alone);
                    let case = format!("v1.{minor} {pool:?} {class:?} {spec:?}");
                    assert_eq!(
                        values_of(&node, "classed"),
                        values_of(&kubelet, "classed"),
                        "the class's pod: {case}"
                    );
                    let classed = node.pods.iter().find(|p| p.name == "classed").unwrap();
                    assert_eq!(classed.class, Some("c"), "{case}");
                    assert_eq!(classed.class_source, ClassSource::PodAnnotation);

                    // The pool's pods, and the parents: as a pool that has the class's
                    // pod only when it protects as the pool does.
                    let protected = class.protection == Protection::Pool
                        || pool.reservation_policy == ReservationPolicy::None;
                    let mut reference = neighbours();
                    if protected {
                        reference.push(node_pod("classed", spec.clone(), ClassChoice::Pool));
                    }
                    let pool_only = NodeSettings {
                        memory_qos: pool,
                        ..NodeSettings::default()
                    };
                    let reference = compute(&pool_only, &facts, &reference);
                    for neighbour in ["burstable", "guaranteed"] {
                        assert_eq!(
                            values_of(&node, neighbour),
                            values_of(&reference, neighbour),
                            "{neighbour}: {case}"
                        );
                    }
                    assert_eq!(node_level(&node), node_level(&reference), "parents: {case}");
                    assert_eq!(
                        node.totals.memory_min_bytes,
                        sum(&node, MEMORY_MIN),
                        "{case}"
                    );
                    assert_eq!(
                        node.totals.memory_low_bytes,
                        sum(&node, MEMORY_LOW),
                        "{case}"
                    );
                    assert!(node.warnings.iter().all(|w| w.code() != "UnknownClass"));
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 3 * 6 * 6 * shapes.len());
}

#[test]
fn a_class_the_settings_do_not_have_gets_the_pools_values_and_a_warning_naming_the_classes() {
    let facts = facts(37);
    let pool = pools()[2]; // TieredReservation with memory.high
    let settings = NodeSettings {
        memory_qos: pool,
        classes: vec![WorkloadClass::named("web"), WorkloadClass::named("batch")],
        ..NodeSettings::default()
    };
    for spec in pod_shapes() {
        let unknown = ClassChoice::Named {
            name: "gold".into(),
            source: ClassSource::NamespaceLabel,
        };
        let pods = [node_pod("p", spec.clone(), unknown)];
        let node = compute(&settings, &facts, &pods);
        let plain = [node_pod("p", spec, ClassChoice::Pool)];
        let pool_node = compute(&settings, &facts, &plain);
        assert_eq!(values_of(&node, "p"), values_of(&pool_node, "p"));
        assert_eq!(node_level(&node), node_level(&pool_node));
        assert_eq!(node.pods[0].class, None);
        assert_eq!(node.pods[0].class_source, ClassSource::NamespaceLabel);
        let warning = node
            .warnings
            .iter()
            .find(|w| matches!(w, Warning::UnknownClass { .. }))
            .unwrap();
        let text = warning.to_string();
        assert!(
            text.contains("\"gold\"")
                && text.contains("web, batch")
                && text.contains("namespace label"),
            "{text}"
        );
    }
}

#[test]
fn an_opted_out_pod_stays_opted_out_whatever_the_classes() {
    let facts = facts(36);
    let settings = NodeSettings {
        memory_qos: pools()[4], // HardReservation with memory.high
        classes: classes(),
        ..NodeSettings::default()
    };
    for spec in pod_shapes() {
        let pods = [node_pod(
            "p",
            spec,
            ClassChoice::OptedOut(ClassSource::NamespaceLabel),
        )];
        let node = compute(&settings, &facts, &pods);
        let (pod, containers) = values_of(&node, "p");
        for values in std::iter::once(&pod).chain(containers.iter().map(|(_, v)| v)) {
            assert!(
                values.iter().all(|(file, _)| file == "memory.max"),
                "{values:?}"
            );
        }
        assert_eq!(node.totals.memory_min_bytes, 0);
    }
}
