//! Why a pass under Kubelet or Observe enforcement computes the node once
//! (`NodeApplier::give_back_and_predict`): the settings that give back ([`off`]) manage
//! no cgroup, so there is nothing of theirs to compute, and a pass over some pods reaches
//! the same cgroups whatever the settings, so the prediction's pods say what the
//! give-back reaches. Both over random nodes.

use std::collections::BTreeSet;

use nodemem_model::node::{desired_node, NodeFacts, NodeInput, NodePod};
use nodemem_model::pod::{Container, ContainerKind, Pod, PodSpec, Resources, CPU, MEMORY};
use nodemem_model::quantity::Quantity;
use nodemem_model::settings::NodeSettings;
use nodemem_model::values::cgroup_layout::{CgroupDriver, ContainerId, ContainerRuntime};
use nodemem_model::values::factor::ThrottlingFactor;
use nodemem_model::values::memory_qos::{MemoryQosSettings, ReservationPolicy};
use proptest::prelude::*;

use super::{off, Reach};

/// A container's memory (and, when request equals limit, CPU as well: Guaranteed).
fn container(i: usize, shape: u8) -> Container {
    let list = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity::parse(v).unwrap()))
            .collect()
    };
    let (requests, limits) = match shape % 4 {
        0 => (list(&[]), list(&[])),
        1 => (list(&[(MEMORY, "64Mi")]), list(&[])),
        2 => (list(&[(MEMORY, "64Mi")]), list(&[(MEMORY, "256Mi")])),
        _ => {
            let both = [(MEMORY, "128Mi"), (CPU, "100m")];
            (list(&both), list(&both))
        }
    };
    Container {
        name: format!("c{i}"),
        kind: ContainerKind::App,
        resources: Resources { requests, limits },
    }
}

/// A pod of containers shaped by `shapes`, those in `started` with a container ID.
fn pod(uid: usize, shapes: &[u8], started: &[bool], opted_out: bool) -> NodePod {
    let containers: Vec<Container> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| container(i, *s))
        .collect();
    let ids = containers
        .iter()
        .zip(started)
        .filter(|(_, s)| **s)
        .map(|(c, _)| {
            let id = ContainerId {
                runtime: ContainerRuntime::Containerd,
                id: format!("{uid:02}{}", c.name).repeat(8),
            };
            (c.name.clone(), id)
        })
        .collect();
    let pod = Pod {
        namespace: "ns".into(),
        name: format!("p{uid}"),
        uid: format!("uid-{uid}"),
        spec: PodSpec {
            containers,
            ..PodSpec::default()
        },
    };
    NodePod::new(
        pod,
        ids,
        nodemem_model::class::ClassChoice::from_opt_out(opted_out),
    )
}

fn settings() -> impl Strategy<Value = NodeSettings> {
    (any::<bool>(), 0..3usize, 0..3usize).prop_map(|(enabled, factor, reservation)| NodeSettings {
        memory_qos: MemoryQosSettings {
            enabled,
            throttling_factor: [None, Some(0.5), Some(0.9)][factor]
                .map(|f| ThrottlingFactor::from_f64(f).unwrap()),
            reservation_policy: [
                ReservationPolicy::None,
                ReservationPolicy::TieredReservation,
                ReservationPolicy::HardReservation,
            ][reservation],
        },
        ..NodeSettings::default()
    })
}

fn pods() -> impl Strategy<Value = Vec<NodePod>> {
    prop::collection::vec(
        (
            prop::collection::vec((any::<u8>(), any::<bool>()), 1..4),
            any::<bool>(),
        ),
        1..6,
    )
    .prop_map(|pods| {
        pods.into_iter()
            .enumerate()
            .map(|(uid, (containers, opted_out))| {
                let (shapes, started): (Vec<u8>, Vec<bool>) = containers.into_iter().unzip();
                pod(uid, &shapes, &started, opted_out)
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn giving_back_needs_no_computation_of_its_own(
        settings in settings(),
        pods in pods(),
        systemd in any::<bool>(),
        reached in prop::collection::btree_set(0..6usize, 0..4),
    ) {
        let facts = NodeFacts {
            cgroup_driver: if systemd { CgroupDriver::Systemd } else { CgroupDriver::Cgroupfs },
            ..NodeFacts::default()
        };
        let compute = |settings: &NodeSettings| {
            desired_node(NodeInput { settings, facts: &facts, pods: &pods, memory_manager: None })
                .unwrap()
        };
        let off = off();
        let given_back = compute(&off);
        let predicted = compute(&settings);
        prop_assert!(given_back.cgroups().is_empty(), "off manages {:?}", given_back.cgroups());
        let uids: BTreeSet<String> = reached.iter().map(|u| format!("uid-{u}")).collect();
        let reach = Reach::Pods(&uids);
        prop_assert_eq!(reach.cgroups(&given_back), reach.cgroups(&predicted));
    }
}
