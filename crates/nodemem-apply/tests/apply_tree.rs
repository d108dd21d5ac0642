//! The apply engine on temp-dir cgroup trees shaped like the kernel's (the test
//! harness's `CgroupTree`), both cgroup drivers and both runtimes. The VM tier repeats
//! the important cases on a real kernel.

#![allow(clippy::unwrap_used)] // a test: a failed unwrap is the test failing

use std::collections::BTreeMap;

use nodemem_apply::execute::{execute, observe};
use nodemem_apply::plan::{files_to_observe, plan, update_ownership};
use nodemem_apply::{write_cgroups, ApplyOptions, Ownership, WriteKind};
use nodemem_cgroup::CgroupFs;
use nodemem_model::node::{desired_node, DesiredNode, NodeFacts, NodeInput, NodePod};
use nodemem_model::pod::defaulting::apply_defaults;
use nodemem_model::pod::qos::{qos_class, QosClass};
use nodemem_model::pod::{Container, ContainerKind, Pod, PodSpec, Resources};
use nodemem_model::settings::NodeSettings;
use nodemem_model::values::cgroup::{CgroupValue, MEMORY_HIGH, MEMORY_LOW, MEMORY_MIN};
use nodemem_model::values::cgroup_layout::{CgroupDriver, ContainerId, ContainerRuntime};
use nodemem_model::values::factor::ThrottlingFactor;
use nodemem_model::values::memory_qos::{MemoryQosSettings, NodeMemoryFacts, ReservationPolicy};
use nodemem_model::Quantity;
use nodemem_testkit::cgroup_tree::CgroupTree;

const GI: i64 = 1 << 30;
const MI: i64 = 1 << 20;

fn resources(req: Option<&str>, lim: Option<&str>) -> Resources {
    let mut r = Resources::default();
    if let Some(q) = req {
        r.requests
            .insert("memory".into(), Quantity::parse(q).unwrap());
    }
    if let Some(q) = lim {
        r.limits
            .insert("memory".into(), Quantity::parse(q).unwrap());
    }
    r
}

fn container(name: &str, kind: ContainerKind, req: Option<&str>, lim: Option<&str>) -> Container {
    Container {
        name: name.into(),
        kind,
        resources: resources(req, lim),
    }
}

/// requests == limits for cpu and memory: Guaranteed.
fn guaranteed(name: &str, kind: ContainerKind, memory: &str) -> Container {
    let mut c = container(name, kind, Some(memory), Some(memory));
    for list in [&mut c.resources.requests, &mut c.resources.limits] {
        list.insert("cpu".into(), Quantity::parse("500m").unwrap());
    }
    c
}

fn pod(
    name: &str,
    uid: &str,
    init: Vec<Container>,
    containers: Vec<Container>,
    runtime: ContainerRuntime,
) -> NodePod {
    let mut spec = PodSpec {
        init_containers: init,
        containers,
        ..PodSpec::default()
    };
    apply_defaults(&mut spec);
    let ids = spec
        .init_containers
        .iter()
        .chain(&spec.containers)
        .map(|c| {
            (
                c.name.clone(),
                ContainerId {
                    runtime,
                    id: format!("{uid}-{}", c.name),
                },
            )
        })
        .collect();
    NodePod::new(
        Pod {
            namespace: "shop".into(),
            name: name.into(),
            uid: uid.into(),
            spec,
        },
        ids,
        nodemem_model::class::ClassChoice::Pool,
    )
}

/// One pod of each QoS class, with an init container and a container without a limit.
fn pods(runtime: ContainerRuntime) -> Vec<NodePod> {
    vec![
        pod(
            "db",
            "6a4f2e3b-0000-4a5e-8f7b-000000000001",
            vec![guaranteed("migrate", ContainerKind::Init, "256Mi")],
            vec![guaranteed("postgres", ContainerKind::App, "1Gi")],
            runtime,
        ),
        pod(
            "api",
            "6a4f2e3b-0000-4a5e-8f7b-000000000002",
            vec![],
            vec![
                container("api", ContainerKind::App, Some("256Mi"), Some("512Mi")),
                container("sidecar", ContainerKind::App, Some("100M"), None),
            ],
            runtime,
        ),
        pod(
            "batch",
            "6a4f2e3b-0000-4a5e-8f7b-000000000003",
            vec![],
            vec![container("job", ContainerKind::App, None, None)],
            runtime,
        ),
    ]
}

fn settings(reservation: ReservationPolicy, factor: f64) -> NodeSettings {
    NodeSettings {
        memory_qos: MemoryQosSettings {
            enabled: true,
            throttling_factor: Some(ThrottlingFactor::from_f64(factor).unwrap()),
            reservation_policy: reservation,
        },
        ..NodeSettings::default()
    }
}

fn facts(driver: CgroupDriver) -> NodeFacts {
    NodeFacts {
        memory: NodeMemoryFacts {
            allocatable_memory: Some(8 * GI),
            page_size: 4096,
            kernel_version: Some("6.1.0-56-amd64".into()),
            ..NodeMemoryFacts::default()
        },
        cgroup_driver: driver,
        ..NodeFacts::default()
    }
}

fn tree_for(driver: CgroupDriver, pods: &[NodePod]) -> CgroupTree {
    let tree = CgroupTree::new(driver, 2).unwrap();
    for p in pods {
        let ids: Vec<ContainerId> = p.container_ids().values().cloned().collect();
        tree.add_pod_with_ids(qos_class(&p.pod().spec), &p.pod().uid, &ids)
            .unwrap();
    }
    tree
}

fn desired<'a>(
    settings: &NodeSettings,
    driver: CgroupDriver,
    pods: &'a [NodePod],
) -> DesiredNode<'a> {
    desired_node(NodeInput {
        settings,
        facts: &facts(driver),
        pods,
        memory_manager: None,
    })
    .unwrap()
}

fn options() -> ApplyOptions {
    ApplyOptions {
        dry_run: false,
        page_size: 4096,
        leave_alone: &[],
    }
}

/// What a plain file holds after the write (the kernel would also round memory.*
/// down to the page; the VM tier checks that).
fn expected_text(value: &CgroupValue) -> String {
    value.render()
}

#[test]
fn every_qos_class_gets_what_the_node_computation_predicts_in_both_drivers_and_runtimes() {
    for driver in [CgroupDriver::Systemd, CgroupDriver::Cgroupfs] {
        for runtime in [ContainerRuntime::Containerd, ContainerRuntime::CriO] {
            let pods = pods(runtime);
            let tree = tree_for(driver, &pods);
            let fs = CgroupFs::new(tree.root());
            let node = desired(
                &settings(ReservationPolicy::TieredReservation, 0.9),
                driver,
                &pods,
            );
            let mut owned = Ownership::default();
            let report = write_cgroups(&fs, &node.cgroups(), &mut owned, options());
            assert!(report.ok(), "{report:#?}");
            assert!(report.missing.is_empty(), "{:?}", report.missing);
            // Every cgroup and file the computation names reads back as predicted, and
            // nothing else was written.
            let mut checked = 0;
            for c in &node.cgroups() {
                for (file, value) in c.managed() {
                    assert_eq!(
                        tree.read(c.path, file).unwrap(),
                        expected_text(value),
                        "{driver:?} {runtime:?} {}/{file}",
                        c.path
                    );
                    checked += 1;
                }
            }
            assert_eq!(
                report.applied.len(),
                checked,
                "one write per predicted value that differs from the default"
            );
            assert_eq!(owned.len(), checked);
            // Spot values: TieredReservation, factor 0.9, 8Gi allocatable.
            let db = &node.pods[0];
            assert_eq!(db.qos, QosClass::Guaranteed);
            assert_eq!(tree.read(&db.path, MEMORY_MIN).unwrap(), GI.to_string());
            let pg = db.containers[1].path.as_ref().unwrap();
            assert!(
                pg.ends_with(match (driver, runtime) {
                    (CgroupDriver::Systemd, ContainerRuntime::Containerd) =>
                        "/cri-containerd-6a4f2e3b-0000-4a5e-8f7b-000000000001-postgres.scope",
                    (CgroupDriver::Systemd, ContainerRuntime::CriO) =>
                        "/crio-6a4f2e3b-0000-4a5e-8f7b-000000000001-postgres.scope",
                    (CgroupDriver::Cgroupfs, ContainerRuntime::Containerd) =>
                        "/6a4f2e3b-0000-4a5e-8f7b-000000000001-postgres",
                    (CgroupDriver::Cgroupfs, ContainerRuntime::CriO) =>
                        "/crio-6a4f2e3b-0000-4a5e-8f7b-000000000001-postgres",
                }),
                "{pg}"
            );
            assert_eq!(tree.read(pg, MEMORY_MIN).unwrap(), GI.to_string());
            assert_eq!(
                tree.read(pg, MEMORY_HIGH).unwrap(),
                "max",
                "request == limit: no memory.high"
            );
            let api = &node.pods[1];
            assert_eq!(api.qos, QosClass::Burstable);
            assert_eq!(
                tree.read(&api.path, MEMORY_LOW).unwrap(),
                (256 * MI + 100_000_000).to_string()
            );
            let api_c = api.containers[0].path.as_ref().unwrap();
            // 256Mi + 0.9 * (512Mi - 256Mi) = 486.4Mi, rounded down to the page.
            assert_eq!(
                tree.read(api_c, MEMORY_HIGH).unwrap(),
                ((256 * MI + (256 * MI) * 9 / 10) / 4096 * 4096).to_string()
            );
            let batch = &node.pods[2];
            assert_eq!(batch.qos, QosClass::BestEffort);
            // BestEffort: memory.high from node allocatable (v1.37 fix), no protection.
            let job = batch.containers[0].path.as_ref().unwrap();
            assert_eq!(
                tree.read(job, MEMORY_HIGH).unwrap(),
                (8 * GI * 9 / 10 / 4096 * 4096).to_string()
            );
            assert_eq!(tree.read(job, MEMORY_MIN).unwrap(), "0");

            // A second pass changes nothing: zero writes.
            let again = write_cgroups(&fs, &node.cgroups(), &mut owned, options());
            assert_eq!(again.writes(), 0, "{again:#?}");
        }
    }
}

#[test]
fn protection_rises_parents_first_and_falls_children_first() {
    let driver = CgroupDriver::Systemd;
    let pods = pods(ContainerRuntime::Containerd);
    let tree = tree_for(driver, &pods);
    let fs = CgroupFs::new(tree.root());
    let mut owned = Ownership::default();
    let hard = desired(
        &settings(ReservationPolicy::HardReservation, 0.9),
        driver,
        &pods,
    );
    let up = write_cgroups(&fs, &hard.cgroups(), &mut owned, options());
    let depth = |p: &str| p.split('/').count();
    let min_depths: Vec<usize> = up
        .applied
        .iter()
        .filter(|w| w.file == MEMORY_MIN)
        .map(|w| depth(&w.cgroup))
        .collect();
    assert!(min_depths.len() > 4, "{min_depths:?}");
    assert!(
        min_depths.windows(2).all(|w| w[0] <= w[1]),
        "raise: parents first: {min_depths:?}"
    );

    // Halve every request: protection falls.
    let halved: Vec<NodePod> = pods
        .iter()
        .map(|p| {
            let mut pod = p.pod().clone();
            for c in pod
                .spec
                .containers
                .iter_mut()
                .chain(pod.spec.init_containers.iter_mut())
            {
                for list in [&mut c.resources.requests, &mut c.resources.limits] {
                    if let Some(q) = list.get_mut("memory") {
                        *q = Quantity::parse(&(q.value() / 2).to_string()).unwrap();
                    }
                }
            }
            NodePod::new(
                pod,
                p.container_ids().clone(),
                nodemem_model::class::ClassChoice::Pool,
            )
        })
        .collect();
    let lower = desired(
        &settings(ReservationPolicy::HardReservation, 0.9),
        driver,
        &halved,
    );
    let down = write_cgroups(&fs, &lower.cgroups(), &mut owned, options());
    let min_depths: Vec<usize> = down
        .applied
        .iter()
        .filter(|w| w.file == MEMORY_MIN)
        .map(|w| depth(&w.cgroup))
        .collect();
    assert!(min_depths.len() > 4, "{min_depths:?}");
    assert!(
        min_depths.windows(2).all(|w| w[0] >= w[1]),
        "lower: children first: {min_depths:?}"
    );
    // Ownership still remembers the kernel defaults, not the first values.
    assert_eq!(owned.files[hard.cgroups()[0].path][MEMORY_MIN], "0");
}

#[test]
fn a_cgroup_that_vanishes_before_its_write_is_skipped_and_counted() {
    let driver = CgroupDriver::Cgroupfs;
    let pods = pods(ContainerRuntime::Containerd);
    let tree = tree_for(driver, &pods);
    let fs = CgroupFs::new(tree.root());
    let node = desired(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        driver,
        &pods,
    );
    let mut owned = Ownership::default();
    let wanted = files_to_observe(&node.cgroups(), &owned);
    let (observed, mut held) = observe(&fs, &wanted);
    let planned = plan(&node.cgroups(), &observed, &owned, 4096);
    // The Burstable pod is deleted between planning and writing.
    tree.remove_pod(QosClass::Burstable, &pods[1].pod().uid)
        .unwrap();
    let done = execute(&fs, planned.writes.clone(), &mut held);
    assert!(done.failed.is_empty(), "{:#?}", done.failed);
    let gone: Vec<&str> = done.vanished.iter().map(|w| w.cgroup.as_str()).collect();
    assert_eq!(
        gone.len(),
        5,
        "pod memory.low, api and sidecar memory.low + memory.high: {gone:?}"
    );
    assert!(gone
        .iter()
        .all(|p| p.contains("pod6a4f2e3b-0000-4a5e-8f7b-000000000002")));
    update_ownership(
        &mut owned,
        &planned,
        &done.applied,
        &done.vanished,
        &[],
        &[],
    );
    assert!(owned.files.keys().all(|p| !p.contains("000000000002")));

    // A later pass with the pod gone (no longer desired) plans nothing for it.
    let rest: Vec<NodePod> = pods
        .iter()
        .filter(|p| p.pod().name != "api")
        .cloned()
        .collect();
    let node = desired(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        driver,
        &rest,
    );
    let report = write_cgroups(&fs, &node.cgroups(), &mut owned, options());
    assert!(
        report.ok()
            && report
                .all_writes()
                .all(|w| !w.cgroup.contains("000000000002")),
        "{report:#?}"
    );
}

#[test]
fn turning_memory_qos_off_restores_exactly_the_owned_files() {
    let driver = CgroupDriver::Systemd;
    let pods = pods(ContainerRuntime::Containerd);
    let tree = tree_for(driver, &pods);
    let fs = CgroupFs::new(tree.root());
    // Someone else (the kubelet, an admin) set a container's memory.high before us,
    // and a pod's memory.low already holds what nodemem would write (claimed).
    let batch_job = desired(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        driver,
        &pods,
    )
    .pods[2]
        .containers[0]
        .path
        .clone()
        .unwrap();
    let api_pod = desired(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        driver,
        &pods,
    )
    .pods[1]
        .path
        .clone();
    std::fs::write(
        tree.root().join(&api_pod).join(MEMORY_LOW),
        (256 * MI + 100_000_000).to_string(),
    )
    .unwrap();
    let mut owned = Ownership::default();
    let on = desired(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        driver,
        &pods,
    );
    let first = write_cgroups(&fs, &on.cgroups(), &mut owned, options());
    assert!(first.ok());
    // Already right: not written, but claimed (an agent killed before it saved its
    // record may have written it), so that giving back covers it.
    assert!(first
        .applied
        .iter()
        .all(|w| !(w.cgroup == api_pod && w.file == MEMORY_LOW)));
    assert!(owned.owns(&api_pod, MEMORY_LOW));
    assert!(owned.owns(&batch_job, MEMORY_HIGH));

    let mut off_settings = settings(ReservationPolicy::TieredReservation, 0.9);
    off_settings.memory_qos.enabled = false;
    let off = desired(&off_settings, driver, &pods);
    assert!(
        off.cgroups().is_empty(),
        "nothing is desired: {:?}",
        off.cgroups()
    );
    let report = write_cgroups(&fs, &off.cgroups(), &mut owned, options());
    assert!(report.ok(), "{report:#?}");
    assert!(report.applied.iter().all(|w| w.kind == WriteKind::Restore));
    assert_eq!(
        report.applied.len(),
        first.applied.len() + 1,
        "every owned file (the claimed one too), nothing else"
    );
    assert!(owned.is_empty(), "{owned:?}");
    for w in &first.applied {
        let want = if w.file == MEMORY_HIGH { "max" } else { "0" };
        assert_eq!(
            tree.read(&w.cgroup, &w.file).unwrap(),
            want,
            "{}/{}",
            w.cgroup,
            w.file
        );
    }
    assert_eq!(tree.read(&api_pod, MEMORY_LOW).unwrap(), "0");
    // Nothing more to restore.
    assert_eq!(
        write_cgroups(&fs, &off.cgroups(), &mut owned, options()).writes(),
        0
    );
}

#[test]
fn a_failed_write_names_the_file_value_and_errno_and_the_rest_still_runs() {
    let driver = CgroupDriver::Systemd;
    let pods = pods(ContainerRuntime::Containerd);
    let tree = tree_for(driver, &pods);
    let fs = CgroupFs::new(tree.root());
    let node = desired(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        driver,
        &pods,
    );
    // The kubepods cgroup's memory.min cannot be written (a directory stands in for a
    // file the kernel refuses).
    let kp = tree.root().join("kubepods.slice/memory.min");
    std::fs::remove_file(&kp).unwrap();
    std::fs::create_dir(&kp).unwrap();
    let mut owned = Ownership::default();
    let report = write_cgroups(&fs, &node.cgroups(), &mut owned, options());
    assert_eq!(report.failed.len(), 1, "{:#?}", report.failed);
    let f = &report.failed[0];
    assert_eq!(
        (f.write.cgroup.as_str(), f.write.file.as_str()),
        ("kubepods.slice", MEMORY_MIN)
    );
    assert_eq!(f.errno, Some(libc::EISDIR));
    assert!(
        f.error
            .starts_with(&format!("write \"{}\" to ", f.write.new)),
        "{}",
        f.error
    );
    assert!(
        f.error
            .ends_with("kubepods.slice/memory.min: Is a directory (os error 21) (errno 21)"),
        "{}",
        f.error
    );
    assert!(report.applied.len() > 5, "the rest of the plan ran");
    assert!(
        !owned.owns("kubepods.slice", MEMORY_MIN),
        "a failed write is not owned"
    );
}

#[test]
fn hostile_identifiers_are_refused_and_nothing_outside_is_touched() {
    let driver = CgroupDriver::Cgroupfs;
    let mut pods = pods(ContainerRuntime::Containerd);
    let mut hostile = pods[1].pod().clone();
    hostile.uid = "../../../../outside".into();
    pods[1] = NodePod::new(
        hostile,
        pods[1].container_ids().clone(),
        nodemem_model::class::ClassChoice::Pool,
    );
    let mut ids = pods[2].container_ids().clone();
    ids.insert(
        "job".into(),
        ContainerId {
            runtime: ContainerRuntime::Containerd,
            id: "..".into(),
        },
    );
    pods[2] = NodePod::new(
        pods[2].pod().clone(),
        ids,
        nodemem_model::class::ClassChoice::Pool,
    );
    let tree = tree_for(driver, &pods[..1]);
    let fs = CgroupFs::new(tree.root());
    let outside = tree.root().parent().unwrap().join("outside");
    let node = desired(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        driver,
        &pods,
    );
    let mut owned = Ownership::default();
    let report = write_cgroups(&fs, &node.cgroups(), &mut owned, options());
    assert!(!report.refused.is_empty());
    assert!(
        report
            .refused
            .iter()
            .any(|r| r.contains("\"kubepods/burstable/pod../../../../outside\" is . or ..")),
        "{:?}",
        report.refused
    );
    assert!(
        report.refused.iter().any(|r| r
            .ends_with("/..\" is . or ..: refused, nothing outside the cgroup root is touched")),
        "{:?}",
        report.refused
    );
    assert!(!outside.exists());
    assert!(report.applied.iter().all(|w| !w.cgroup.contains("..")));
}

#[test]
fn dry_run_plans_without_writing() {
    let driver = CgroupDriver::Systemd;
    let pods = pods(ContainerRuntime::CriO);
    let tree = tree_for(driver, &pods);
    let fs = CgroupFs::new(tree.root());
    let node = desired(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        driver,
        &pods,
    );
    let mut owned = Ownership::default();
    let report = write_cgroups(
        &fs,
        &node.cgroups(),
        &mut owned,
        ApplyOptions {
            dry_run: true,
            page_size: 4096,
            leave_alone: &[],
        },
    );
    assert!(!report.planned.is_empty() && report.applied.is_empty());
    assert!(owned.is_empty());
    assert_eq!(tree.read("kubepods.slice", MEMORY_MIN).unwrap(), "0");
    let by_file: BTreeMap<&str, usize> = report.planned.iter().fold(BTreeMap::new(), |mut m, w| {
        *m.entry(w.file.as_str()).or_default() += 1;
        m
    });
    assert_eq!(by_file[MEMORY_HIGH], 3, "api, sidecar, job");
}

#[test]
fn a_file_that_keeps_failing_is_retried_with_backoff_not_every_pass() {
    use nodemem_apply::{write_cgroups_within, WriteBackoff};
    use std::time::Duration;
    let driver = CgroupDriver::Systemd;
    let pods = pods(ContainerRuntime::Containerd);
    let tree = tree_for(driver, &pods);
    let fs = CgroupFs::new(tree.root());
    let node = desired(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        driver,
        &pods,
    );
    let kp = tree.root().join("kubepods.slice/memory.min");
    std::fs::remove_file(&kp).unwrap();
    std::fs::create_dir(&kp).unwrap();
    let mut owned = Ownership::default();
    let mut backoff = WriteBackoff::new(Duration::from_secs(1), Duration::from_secs(60));
    let at = |s: u64| Duration::from_secs(s);
    let pass = |owned: &mut Ownership, backoff: &mut WriteBackoff, now| {
        write_cgroups_within(
            &fs,
            &node.cgroups(),
            owned,
            options(),
            Some((backoff, now)),
            None,
            &mut nodemem_apply::writes::in_memory,
        )
        .unwrap()
    };
    let first = pass(&mut owned, &mut backoff, at(0));
    assert_eq!(first.failed.len(), 1);
    // Passes before the delay do not touch the file; they report it deferred.
    let early = pass(&mut owned, &mut backoff, at(0));
    assert!(
        early.failed.is_empty() && early.applied.is_empty(),
        "{early:#?}"
    );
    assert_eq!(early.deferred.len(), 1);
    assert_eq!(early.deferred[0].file, MEMORY_MIN);
    assert!(
        early.deferred[0].error.contains("Is a directory"),
        "{:?}",
        early.deferred
    );
    assert!(!early.ok());
    // Due after 1 s: tried and failed again, next in 2 s.
    let second = pass(&mut owned, &mut backoff, at(1));
    assert_eq!(second.failed.len(), 1);
    assert_eq!(
        pass(&mut owned, &mut backoff, at(2)).deferred[0].retry_in_seconds,
        1
    );
    // The file takes writes again: the next due attempt succeeds and clears it.
    std::fs::remove_dir(&kp).unwrap();
    std::fs::write(&kp, "0").unwrap();
    let fixed = pass(&mut owned, &mut backoff, at(3));
    assert!(fixed.ok(), "{fixed:#?}");
    assert_eq!(fixed.applied.len(), 1);
    assert!(backoff.is_empty());
}

#[test]
fn an_write_cgroups_within_reach_reads_and_writes_only_its_cgroups() {
    use nodemem_apply::write_cgroups_within;
    use std::collections::BTreeSet;
    let driver = CgroupDriver::Systemd;
    let pods = pods(ContainerRuntime::Containerd);
    let tree = tree_for(driver, &pods);
    let fs = CgroupFs::new(tree.root());
    let node = desired(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        driver,
        &pods,
    );
    let mut owned = Ownership::default();
    let api_container = node.pods[1].containers[0].path.clone().unwrap();
    let reach = BTreeSet::from([api_container.clone()]);
    let report = write_cgroups_within(
        &fs,
        &node.cgroups(),
        &mut owned,
        options(),
        None,
        Some(&reach),
        &mut nodemem_apply::writes::in_memory,
    )
    .unwrap();
    assert!(report.ok());
    assert!(
        report.applied.iter().all(|w| w.cgroup == api_container),
        "{:#?}",
        report.applied
    );
    assert_eq!(report.applied.len(), 2, "memory.low and memory.high");
    assert_eq!(report.reads, 2, "nothing outside the reach is read");
    assert_eq!(
        tree.read("kubepods.slice", MEMORY_MIN).unwrap(),
        "0",
        "not within reach"
    );
    // Owned files outside the reach are not restored by such a pass either.
    let mut off = settings(ReservationPolicy::TieredReservation, 0.9);
    off.memory_qos.enabled = false;
    let nothing = desired(&off, driver, &pods);
    let other = BTreeSet::from(["kubepods.slice".to_string()]);
    let report = write_cgroups_within(
        &fs,
        &nothing.cgroups(),
        &mut owned,
        options(),
        None,
        Some(&other),
        &mut nodemem_apply::writes::in_memory,
    )
    .unwrap();
    assert_eq!(report.writes(), 0);
    assert!(owned.owns(&api_container, MEMORY_HIGH));
}

#[test]
fn a_pass_whose_record_cannot_be_saved_writes_nothing() {
    use nodemem_apply::write_cgroups_within;
    let driver = CgroupDriver::Systemd;
    let pods = pods(ContainerRuntime::Containerd);
    let tree = tree_for(driver, &pods);
    let fs = CgroupFs::new(tree.root());
    let node = desired(
        &settings(ReservationPolicy::TieredReservation, 0.9),
        driver,
        &pods,
    );
    let before = tree.files().unwrap();
    let mut owned = Ownership::default();
    let mut saved = Vec::new();
    let refused = write_cgroups_within(
        &fs,
        &node.cgroups(),
        &mut owned,
        options(),
        None,
        None,
        &mut |o: &Ownership| {
            saved.push(o.len());
            Err("No space left on device")
        },
    );
    assert_eq!(refused.unwrap_err(), "No space left on device");
    assert_eq!(saved.len(), 1, "one save, before the first write");
    assert!(saved[0] > 0);
    assert_eq!(tree.files().unwrap(), before, "nothing written");
    assert!(owned.is_empty(), "the record is as it was");
    // Saved: the record names every file before the pass writes it.
    let mut at_save = Ownership::default();
    let report = write_cgroups_within(
        &fs,
        &node.cgroups(),
        &mut owned,
        options(),
        None,
        None,
        &mut |o: &Ownership| {
            at_save = o.clone();
            Ok::<(), ()>(())
        },
    )
    .unwrap();
    assert!(report.ok() && !report.applied.is_empty());
    for w in &report.applied {
        assert!(
            at_save.owns(&w.cgroup, &w.file),
            "{w:?} not recorded before"
        );
    }
    assert_eq!(at_save, owned);
}
