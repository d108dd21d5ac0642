//! The engine over a node in a temporary directory: values set at creation given back
//! after a restart, systemd's hand-off, writes under each enforcement mode, and a give-back
//! that settings the node cannot compute do not hold back.

use super::*;
use crate::kubelet::KubeletFiles;
use crate::node::NodeConfig;
use crate::units::{UnitProperty, UnitValue};
use nodemem_cgroup::Roots;
use nodemem_model::numa::Scope;
use nodemem_model::values::cgroup_layout::CgroupDriver;

/// A node of `driver` in a temporary directory: its cgroup tree (kubepods and its
/// QoS cgroups), the kernel's release, a kubelet configuration naming nothing, and
/// the applier's configuration for it.
fn temp_node(
    driver: CgroupDriver,
    systemd_units: bool,
) -> (
    tempfile::TempDir,
    nodemem_testkit::cgroup_tree::CgroupTree,
    NodeConfig,
) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("cgroup");
    std::fs::create_dir(&root).unwrap();
    let tree = nodemem_testkit::cgroup_tree::CgroupTree::at(&root, driver, 1).unwrap();
    let write = |path: std::path::PathBuf, text: &str| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write(dir.path().join("proc/sys/kernel/osrelease"), "6.1.0\n");
    write(
        dir.path().join("kubelet/config.yaml"),
        "kind: KubeletConfiguration\n",
    );
    let config = NodeConfig {
        roots: Roots {
            cgroup: root,
            sys: dir.path().join("sys"),
            proc: dir.path().join("proc"),
        },
        cgroup_driver: Some(driver),
        state_dir: dir.path().join("state"),
        topology_scope: Scope::Container,
        kubelet: KubeletFiles::given(dir.path().join("kubelet/config.yaml"), None),
        own_cgroup_mount: dir.path().join("own"),
        systemd_units,
    };
    (dir, tree, config)
}

/// Pod `web` (uid-web) of one container `app` started as `id`: request 64Mi, limit
/// 256Mi (memory.high 160Mi at factor 0.5).
fn burstable_web(id: &str) -> NodePod {
    use nodemem_model::pod::{Container, ContainerKind, Pod, PodSpec, Resources, MEMORY};
    use nodemem_model::quantity::Quantity;
    use nodemem_model::values::cgroup_layout::{ContainerId, ContainerRuntime};
    let memory = |q: &str| [(MEMORY.to_string(), Quantity::parse(q).unwrap())].into();
    let app = Container {
        name: "app".into(),
        kind: ContainerKind::App,
        resources: Resources {
            requests: memory("64Mi"),
            limits: memory("256Mi"),
        },
    };
    let pod = Pod {
        namespace: "shop".into(),
        name: "web".into(),
        uid: "uid-web".into(),
        spec: PodSpec {
            containers: vec![app],
            ..PodSpec::default()
        },
    };
    let id = ContainerId {
        runtime: ContainerRuntime::Containerd,
        id: id.into(),
    };
    NodePod::new(
        pod,
        [("app".to_string(), id)].into(),
        nodemem_model::class::ClassChoice::Pool,
    )
}

/// A temporary node (`temp_node`) running pod `web` (`burstable_web`).
fn node_with_web(
    driver: CgroupDriver,
    systemd_units: bool,
) -> (tempfile::TempDir, NodeConfig, [NodePod; 1]) {
    use nodemem_model::pod::qos::QosClass;
    let (dir, tree, config) = temp_node(driver, systemd_units);
    let id = "c1".repeat(32);
    tree.add_pod(QosClass::Burstable, "uid-web", std::slice::from_ref(&id))
        .unwrap();
    (dir, config, [burstable_web(&id)])
}

/// Factor 0.5, TieredReservation.
fn at_half() -> NodeSettings {
    let reservation = nodemem_model::values::memory_qos::ReservationPolicy::TieredReservation;
    use nodemem_model::values::factor::ThrottlingFactor;
    NodeSettings {
        memory_qos: nodemem_model::values::memory_qos::MemoryQosSettings {
            enabled: true,
            throttling_factor: Some(ThrottlingFactor::from_f64(0.5).unwrap()),
            reservation_policy: reservation,
        },
        ..NodeSettings::default()
    }
}

fn node_of_8gi() -> NodeStatusFacts {
    NodeStatusFacts {
        allocatable_memory: Some(8 << 30),
        capacity_memory: None,
        kubelet_version: None,
        architecture: None,
    }
}

/// An agent killed after answering CreateContainer and before the container
/// started: the restarted agent finds the runtime's value equal to its own and
/// writes nothing, yet leaving the policy gives the value back.
#[test]
fn values_set_at_creation_are_given_back_after_a_restart_before_the_start() {
    use nodemem_model::pod::qos::QosClass;
    use nodemem_model::values::cgroup_layout::{container_dir, ContainerId, ContainerRuntime};
    let driver = CgroupDriver::Cgroupfs;
    let (_dir, tree, config) = temp_node(driver, false);
    tree.add_pod(QosClass::Burstable, "uid-a", &[]).unwrap();
    let id = ContainerId {
        runtime: ContainerRuntime::Containerd,
        id: "c1".repeat(32),
    };
    let container = container_dir(driver, QosClass::Burstable, "uid-a", &id);

    let node = Node::discover(&config).unwrap();
    let mut applier = NodeApplier::open(&node).unwrap();
    applier
        .created_by_runtime(&node, &container, vec!["memory.high"])
        .unwrap();
    drop(applier);
    // runc creates the cgroup with the value from the container's spec.
    let cgroup = tree.create_cgroup(&container).unwrap();
    std::fs::write(cgroup.join("memory.high"), "167772160").unwrap();

    let node = Node::discover(&config).unwrap();
    let mut applier = NodeApplier::open(&node).unwrap();
    let (_, report) = applier
        .write_node(
            &node,
            &off(),
            &node_of_8gi(),
            &[],
            WriteMode::Write,
            Reach::Node,
        )
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(cgroup.join("memory.high")).unwrap(),
        "max",
        "{report:?}"
    );
}

/// On a systemd-driver node whose systemd the agent reaches, a pass leaves the files
/// it wrote and the values it holds in slices and scopes for systemd's record, once;
/// a dry run leaves nothing, and neither does a node without systemd's units.
#[test]
fn a_pass_leaves_its_unit_values_for_systemd_once() {
    let (_dir, config, pods) = node_with_web(CgroupDriver::Systemd, true);
    let settings = at_half();
    let node = Node::discover(&config).unwrap();
    let mut applier = NodeApplier::open(&node).unwrap();
    assert!(node.holds_units());
    let (desired, report) = applier
        .write_node(
            &node,
            &settings,
            &node_of_8gi(),
            &pods,
            WriteMode::DryRun,
            Reach::Node,
        )
        .unwrap();
    assert!(
        report.applied.is_empty() && !report.planned.is_empty(),
        "{report:?}"
    );
    assert_eq!(applier.take_unit_handoff(), None, "a dry run wrote nothing");

    let (_, report) = applier
        .write_node(
            &node,
            &settings,
            &node_of_8gi(),
            &pods,
            WriteMode::Write,
            Reach::Node,
        )
        .unwrap();
    let handoff = applier.take_unit_handoff().expect("the pass wrote");
    let written: Vec<(String, String)> = report
        .applied
        .iter()
        .map(|w| (w.cgroup.clone(), w.file.clone()))
        .collect();
    assert_eq!(handoff.rewritten, written);
    let container = desired.pods[0].containers[0].path.clone().unwrap();
    assert!(container.ends_with(".scope"), "{container}");
    let held = &handoff.held[&container];
    assert_eq!(
        held.get(&UnitProperty::MemoryHigh),
        Some(&UnitValue::Bytes(160 << 20)),
        "{held:?}"
    );
    let live = handoff
        .live
        .expect("a whole-node pass names the node's cgroups");
    assert!(live.contains(&container), "{live:?}");
    assert_eq!(applier.take_unit_handoff(), None, "taken once");

    // A second pass writes nothing: what it holds is still handed over, without
    // rewritten files.
    applier
        .write_node(
            &node,
            &settings,
            &node_of_8gi(),
            &pods,
            WriteMode::Write,
            Reach::Node,
        )
        .unwrap();
    let again = applier.take_unit_handoff().expect("held values");
    assert!(again.rewritten.is_empty(), "{again:?}");
    assert_eq!(again.held, handoff.held);

    let (_dir, _, files_only) = temp_node(CgroupDriver::Systemd, false);
    assert!(!Node::discover(&files_only).unwrap().holds_units());
    let (_dir, _, cgroupfs) = temp_node(CgroupDriver::Cgroupfs, true);
    assert!(!Node::discover(&cgroupfs).unwrap().holds_units());
}

/// The agent's pass: under Observe nothing is written yet the status computes the
/// settings' values; under Agent they are written; under Kubelet they are given back
/// while still computed for the status.
#[test]
fn a_pass_writes_only_under_agent_and_computes_the_settings_under_every_mode() {
    use nodemem_model::values::cgroup::MEMORY_HIGH;
    let (_dir, config, pods) = node_with_web(CgroupDriver::Cgroupfs, false);
    let mut settings = at_half();
    let node = Node::discover(&config).unwrap();
    let mut applier = NodeApplier::open(&node).unwrap();
    let high = |desired: &DesiredNode<'_>| {
        desired.pods[0].containers[0]
            .values
            .get(MEMORY_HIGH)
            .map(|v| v.render())
    };
    let on_node = || {
        let path = config.roots.cgroup.join(tree_path(&pods[0]));
        std::fs::read_to_string(path.join(MEMORY_HIGH)).unwrap()
    };
    for (mode, written, file) in [
        (Enforcement::Observe, false, "max"),
        (Enforcement::Agent, true, "167772160"),
        (Enforcement::Kubelet, true, "max"),
    ] {
        settings.enforcement = mode;
        let (desired, report) = applier
            .enforce(&node, &settings, &node_of_8gi(), &pods, Reach::Node)
            .unwrap();
        assert_eq!(high(&desired).as_deref(), Some("167772160"), "{mode:?}");
        assert_eq!(!report.applied.is_empty(), written, "{mode:?}: {report:?}");
        assert_eq!(on_node(), file, "{mode:?}");
    }
}

/// Under Kubelet enforcement, settings the node cannot compute (reservedMemory on a
/// NUMA node it does not have) are refused, yet what nodemem set is given back
/// first: the refusal does not leave Agent's values on the node.
#[test]
fn settings_the_node_cannot_compute_do_not_hold_the_give_back_back() {
    use nodemem_model::cluster::policy::{MemoryManagerPolicy, ReservedMemory};
    use nodemem_model::values::cgroup::MEMORY_HIGH;
    let (dir, config, pods) = node_with_web(CgroupDriver::Cgroupfs, false);
    let numa = dir.path().join("sys/devices/system/node/node0");
    std::fs::create_dir_all(&numa).unwrap();
    std::fs::write(numa.join("meminfo"), "Node 0 MemTotal:       1048576 kB\n").unwrap();
    let high = config
        .roots
        .cgroup
        .join(tree_path(&pods[0]))
        .join(MEMORY_HIGH);
    let node = Node::discover(&config).unwrap();
    let mut applier = NodeApplier::open(&node).unwrap();
    let mut settings = at_half();
    applier
        .enforce(&node, &settings, &node_of_8gi(), &pods, Reach::Node)
        .unwrap();
    assert_eq!(std::fs::read_to_string(&high).unwrap(), "167772160");

    settings.enforcement = Enforcement::Kubelet;
    settings.memory_manager.policy = MemoryManagerPolicy::Static;
    settings.memory_manager.reserved_memory = vec![ReservedMemory {
        numa_node: 7,
        limits: [(
            "memory".to_string(),
            nodemem_model::quantity::Quantity::parse("16Mi").unwrap(),
        )]
        .into(),
    }];
    let refused = applier.enforce(&node, &settings, &node_of_8gi(), &pods, Reach::Node);
    assert!(
        format!("{refused:?}").contains("NUMA node 7 does not exist on this node"),
        "{refused:?}"
    );
    assert_eq!(std::fs::read_to_string(&high).unwrap(), "max");
}

/// Where pod `pod`'s first container is in a cgroupfs tree.
fn tree_path(pod: &NodePod) -> String {
    use nodemem_model::pod::qos::QosClass;
    use nodemem_model::values::cgroup_layout::container_dir;
    let id = &pod.container_ids()["app"];
    container_dir(
        CgroupDriver::Cgroupfs,
        QosClass::Burstable,
        &pod.pod().uid,
        id,
    )
}
