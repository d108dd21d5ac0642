//! The Static Memory Manager model against KEP-1769's scenarios, plus invariants over
//! random topologies and request sequences.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::collections::BTreeMap;

use nodemem_model::cluster::policy::ReservedMemory;
use nodemem_model::numa::{
    cpuset_mems, MachineState, MemoryManager, MemoryManagerState, NumaTopology, Pinning,
    RejectionReason, Scope,
};
use nodemem_model::pod::{Container, ContainerKind, Pod, PodSpec, Resources};
use nodemem_model::Quantity;

const GI: i64 = 1 << 30;
const MI: i64 = 1 << 20;

fn topology(nodes: &[&[(&str, i64)]]) -> NumaTopology {
    NumaTopology {
        nodes: nodes
            .iter()
            .enumerate()
            .map(|(i, caps)| {
                (
                    i as i64,
                    caps.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
                )
            })
            .collect(),
    }
}

fn reserved(numa: i64, pairs: &[(&str, &str)]) -> ReservedMemory {
    ReservedMemory {
        numa_node: numa,
        limits: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
            .collect(),
    }
}

fn guaranteed(name: &str, kind: ContainerKind, pairs: &[(&str, i64)]) -> Container {
    let mut list: BTreeMap<String, Quantity> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), Quantity::from_units(*v)))
        .collect();
    list.insert("cpu".into(), Quantity::parse("1").unwrap());
    Container {
        name: name.into(),
        kind,
        resources: Resources {
            requests: list.clone(),
            limits: list,
        },
    }
}

fn pod(uid: &str, containers: Vec<Container>) -> Pod {
    let mut spec = PodSpec::default();
    for c in containers {
        if c.kind == ContainerKind::App {
            spec.containers.push(c)
        } else {
            spec.init_containers.push(c)
        }
    }
    Pod {
        namespace: "default".into(),
        name: uid.into(),
        uid: uid.into(),
        spec,
    }
}

fn two_nodes(mem: i64) -> MemoryManager {
    let topo = topology(&[&[("memory", mem)], &[("memory", mem)]]);
    let machine = MachineState::new(&topo, &[reserved(0, &[("memory", "1Gi")])]).unwrap();
    MemoryManager::new(machine, Scope::Container)
}

fn pinned(outcome: &[(String, Pinning)], name: &str) -> Pinning {
    outcome.iter().find(|(n, _)| n == name).unwrap().1.clone()
}

#[test]
fn single_numa_request_lands_on_the_first_fitting_node() {
    let mut mm = two_nodes(11 * GI);
    let out = mm.admit_pod(&pod(
        "a",
        vec![guaranteed("c", ContainerKind::App, &[("memory", 4 * GI)])],
    ));
    assert_eq!(pinned(&out, "c"), Pinning::Pinned(vec![0]));
    let t = mm.machine.nodes[&0].memory_map["memory"];
    assert_eq!(
        (
            t.total,
            t.system_reserved,
            t.allocatable,
            t.reserved,
            t.free
        ),
        (11 * GI, GI, 10 * GI, 4 * GI, 6 * GI)
    );
    // Node 0 has 6Gi left; a 7Gi request goes to node 1.
    let out = mm.admit_pod(&pod(
        "b",
        vec![guaranteed("c", ContainerKind::App, &[("memory", 7 * GI)])],
    ));
    assert_eq!(pinned(&out, "c"), Pinning::Pinned(vec![1]));
    assert_eq!(mm.pinning_requests, 2);
    assert_eq!(mm.pinning_errors, 0);
}

#[test]
fn multi_numa_request_forms_a_group_and_reject_pod2() {
    // The KEP's "Reject Pod2" slide: two 10G NUMA nodes; Pod1 needs 15G and takes both
    // as one group; Pod2 needs 5G, which one node could hold physically, but no single
    // node is free of the group: rejected.
    let topo = topology(&[&[("memory", 10 * GI)], &[("memory", 10 * GI)]]);
    let machine = MachineState::new(
        &topo,
        &[
            reserved(0, &[("memory", "0")]),
            reserved(1, &[("memory", "1")]),
        ],
    )
    .unwrap();
    let mut mm = MemoryManager::new(machine, Scope::Container);
    let out = mm.admit_pod(&pod(
        "pod1",
        vec![guaranteed("c", ContainerKind::App, &[("memory", 15 * GI)])],
    ));
    assert_eq!(pinned(&out, "c"), Pinning::Pinned(vec![0, 1]));
    assert_eq!(cpuset_mems(&[0, 1]), "0-1");
    assert_eq!(mm.machine.nodes[&0].group, [0, 1].into());
    assert_eq!(mm.machine.nodes[&1].group, [0, 1].into());
    let before = mm.machine.clone();
    let out = mm.admit_pod(&pod(
        "pod2",
        vec![guaranteed(
            "c",
            ContainerKind::App,
            &[("memory", 5 * GI - 1)],
        )],
    ));
    match pinned(&out, "c") {
        Pinning::Rejected(rejection) => {
            assert!(
                matches!(rejection.reason(), RejectionReason::NotPreferred { nodes, .. } if nodes == &vec![0, 1]),
                "{rejection:?}"
            );
            assert_eq!(rejection.reason().code(), "NumaGroupTooWide");
            assert!(
                rejection.to_string().starts_with("container c: "),
                "{rejection}"
            );
            assert!(
                rejection
                    .to_string()
                    .contains("NUMA groups are inseparable"),
                "{rejection}"
            )
        }
        other => panic!("pod2 must be rejected, got {other:?}"),
    }
    assert_eq!(mm.machine, before, "a rejection changes nothing");
    assert_eq!(mm.pinning_errors, 1);
    // Releasing Pod1 dissolves the group; Pod2 then fits on one node.
    mm.remove_pod("pod1");
    assert_eq!(mm.machine.nodes[&0].group, [0].into());
    let out = mm.admit_pod(&pod(
        "pod2",
        vec![guaranteed("c", ContainerKind::App, &[("memory", 5 * GI)])],
    ));
    assert_eq!(pinned(&out, "c"), Pinning::Pinned(vec![0]));
}

#[test]
fn a_used_single_node_cannot_join_a_group() {
    let mut mm = two_nodes(11 * GI);
    mm.admit_pod(&pod(
        "small",
        vec![guaranteed("c", ContainerKind::App, &[("memory", GI)])],
    ));
    // 15Gi needs both nodes, but node 0 already serves a single-node allocation.
    let out = mm.admit_pod(&pod(
        "big",
        vec![guaranteed("c", ContainerKind::App, &[("memory", 15 * GI)])],
    ));
    assert!(
        matches!(pinned(&out, "c"), Pinning::Rejected(r) if matches!(r.reason(), RejectionReason::NoFit { together_enough: true, .. }) && r.to_string().contains("no NUMA node or group"))
    );
}

#[test]
fn hugepages_of_two_sizes_with_memory() {
    let topo = topology(&[
        &[
            ("memory", 8 * GI),
            ("hugepages-2Mi", 512 * MI),
            ("hugepages-1Gi", 0),
        ],
        &[
            ("memory", 8 * GI),
            ("hugepages-2Mi", 512 * MI),
            ("hugepages-1Gi", 2 * GI),
        ],
    ]);
    let machine = MachineState::new(
        &topo,
        &[
            reserved(0, &[("memory", "1Gi")]),
            reserved(1, &[("memory", "1Gi"), ("hugepages-2Mi", "0")]),
        ],
    )
    .unwrap();
    let mut mm = MemoryManager::new(machine, Scope::Container);
    // Only node 1 has 1Gi pages: memory and both page sizes go there together.
    let out = mm.admit_pod(&pod(
        "db",
        vec![guaranteed(
            "pg",
            ContainerKind::App,
            &[
                ("memory", 2 * GI),
                ("hugepages-2Mi", 256 * MI),
                ("hugepages-1Gi", GI),
            ],
        )],
    ));
    assert_eq!(pinned(&out, "pg"), Pinning::Pinned(vec![1]));
    let n1 = &mm.machine.nodes[&1].memory_map;
    assert_eq!(n1["hugepages-1Gi"].reserved, GI);
    assert_eq!(n1["hugepages-2Mi"].reserved, 256 * MI);
    assert_eq!(n1["memory"].reserved, 2 * GI);
    assert_eq!(mm.machine.nodes[&0].memory_map["memory"].reserved, 0);
}

#[test]
fn non_guaranteed_pods_are_not_pinned() {
    let mut mm = two_nodes(11 * GI);
    let mut p = pod(
        "b",
        vec![guaranteed("c", ContainerKind::App, &[("memory", GI)])],
    );
    p.spec.containers[0]
        .resources
        .limits
        .insert("memory".into(), Quantity::from_units(2 * GI));
    assert_eq!(mm.admit_pod(&p), vec![("c".to_string(), Pinning::Unpinned)]);
    assert_eq!(mm.pinning_requests, 0);
}

#[test]
fn init_container_memory_is_reused_by_app_containers() {
    let mut mm = two_nodes(11 * GI);
    let p = pod(
        "p",
        vec![
            guaranteed("init", ContainerKind::Init, &[("memory", 4 * GI)]),
            guaranteed("app", ContainerKind::App, &[("memory", 3 * GI)]),
        ],
    );
    let out = mm.admit_pod(&p);
    assert_eq!(pinned(&out, "init"), Pinning::Pinned(vec![0]));
    assert_eq!(pinned(&out, "app"), Pinning::Pinned(vec![0]));
    // The app's 3Gi come out of the init container's 4Gi, not on top of them.
    assert_eq!(mm.machine.nodes[&0].memory_map["memory"].reserved, 4 * GI);
    mm.remove_pod("p");
    assert_eq!(mm.machine.nodes[&0].memory_map["memory"].reserved, 0);
}

#[test]
fn pod_scope_pins_every_container_to_one_set() {
    let topo = topology(&[&[("memory", 6 * GI)], &[("memory", 6 * GI)]]);
    let machine = MachineState::new(&topo, &[reserved(0, &[("memory", "1Gi")])]).unwrap();
    let mut mm = MemoryManager::new(machine, Scope::Pod);
    // 3Gi + 3Gi fits node 1 (6Gi) as a pod; container scope would split them.
    let out = mm.admit_pod(&pod(
        "p",
        vec![
            guaranteed("a", ContainerKind::App, &[("memory", 3 * GI)]),
            guaranteed("b", ContainerKind::App, &[("memory", 3 * GI)]),
        ],
    ));
    assert_eq!(pinned(&out, "a"), Pinning::Pinned(vec![1]));
    assert_eq!(pinned(&out, "b"), Pinning::Pinned(vec![1]));
    assert_eq!(mm.pinning_requests, 1);
}

#[test]
fn reserved_memory_is_validated_against_the_topology() {
    let topo = topology(&[&[("memory", 4 * GI)], &[("memory", 4 * GI)]]);
    let problems = MachineState::new(
        &topo,
        &[
            reserved(0, &[("memory", "5Gi")]),
            reserved(3, &[("memory", "1Gi")]),
            reserved(1, &[("hugepages-2Mi", "2Mi")]),
        ],
    )
    .unwrap_err();
    let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    assert!(
        text[0]
            .contains("reservedMemory[0].limits.memory: reserves 5Gi but NUMA node 0 has only 4Gi"),
        "{text:?}"
    );
    assert!(
        text[1].contains("reservedMemory[1].numaNode: NUMA node 3 does not exist"),
        "{text:?}"
    );
    assert!(
        text[2].contains("NUMA node 1 has no hugepages-2Mi"),
        "{text:?}"
    );
    assert_eq!(text.len(), 3);
    let problems = MachineState::new(&topo, &[]).unwrap_err();
    assert!(problems[0]
        .message
        .contains("needs reserved memory of type memory"));
}

#[test]
fn state_round_trips_and_mismatches_are_reported() {
    let mut mm = two_nodes(11 * GI);
    mm.admit_pod(&pod(
        "a",
        vec![guaranteed("c", ContainerKind::App, &[("memory", 2 * GI)])],
    ));
    let json = serde_json::to_string(&MemoryManagerState::capture(&mm)).unwrap();
    let fresh = two_nodes(11 * GI).machine;
    let restored: MemoryManagerState = serde_json::from_str(&json).unwrap();
    assert_eq!(restored.restore(&fresh).unwrap(), mm);
    // Reserved memory changed since the state was written.
    let topo = topology(&[&[("memory", 11 * GI)], &[("memory", 11 * GI)]]);
    let changed = MachineState::new(&topo, &[reserved(0, &[("memory", "2Gi")])]).unwrap();
    let errs = serde_json::from_str::<MemoryManagerState>(&json)
        .unwrap()
        .restore(&changed)
        .unwrap_err();
    assert!(
        errs.iter().any(|e| e.contains("reserved memory changed")),
        "{errs:?}"
    );
    // A NUMA node disappeared.
    let one = MachineState::new(
        &topology(&[&[("memory", 11 * GI)]]),
        &[reserved(0, &[("memory", "1Gi")])],
    )
    .unwrap();
    let errs = serde_json::from_str::<MemoryManagerState>(&json)
        .unwrap()
        .restore(&one)
        .unwrap_err();
    assert!(
        errs.iter().any(|e| e.contains("no longer exists")),
        "{errs:?}"
    );
}

#[test]
fn cpuset_mems_ranges() {
    assert_eq!(cpuset_mems(&[0]), "0");
    assert_eq!(cpuset_mems(&[1, 0]), "0-1");
    assert_eq!(cpuset_mems(&[0, 2, 3]), "0,2-3");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]
    #[test]
    fn invariants_hold_over_random_request_sequences(
        caps in proptest::collection::vec(1i64..16, 1..5),
        requests in proptest::collection::vec((1i64..20, 0i64..3, proptest::bool::ANY), 1..25),
    ) {
        let topo = NumaTopology { nodes: caps.iter().enumerate().map(|(i, c)| (i as i64, BTreeMap::from([("memory".to_string(), c * GI), ("hugepages-2Mi".to_string(), 64 * MI)]))).collect() };
        let machine = MachineState::new(&topo, &[reserved(0, &[("memory", "512Mi")])]).unwrap();
        let initial = machine.clone();
        let mut mm = MemoryManager::new(machine, Scope::Container);
        let mut admitted = Vec::new();
        for (i, (gi, pages, remove)) in requests.iter().enumerate() {
            let uid = format!("p{i}");
            let mut req = vec![("memory", gi * GI / 2)];
            if *pages > 0 { req.push(("hugepages-2Mi", pages * 2 * MI)); }
            let out = mm.admit_pod(&pod(&uid, vec![guaranteed("c", ContainerKind::App, &req)]));
            if matches!(out[0].1, Pinning::Pinned(_)) { admitted.push(uid); }
            if *remove && !admitted.is_empty() { let u = admitted.remove(0); mm.remove_pod(&u); }
            let violations = mm.machine.invariant_violations();
            proptest::prop_assert!(violations.is_empty(), "{:?}", violations);
        }
        for uid in admitted { mm.remove_pod(&uid); }
        proptest::prop_assert_eq!(mm.machine, initial);
    }
}
