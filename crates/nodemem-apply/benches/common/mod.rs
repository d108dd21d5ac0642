//! The agent-core benchmarks, shared by the `node` bench (the allocator as the shipped
//! `nodemem` binary sets it up) and `node_mimalloc` (for comparison):
//!
//! 1. `desired_node` for 250 pods x 3 containers (goal: < 100 us).
//! 2. A full apply of that node on a tmpfs tree, against a tight loop doing exactly the
//!    same writes (open, write, close) in the same run (goal: <= 1.5x).
//! 3. A second apply with nothing changed (goal: zero writes).
//!
//! A plain harness (no criterion): each figure is the median of many runs, and the
//! ratio compares medians taken in alternation in the same process.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use nodemem_apply::{write_cgroups, ApplyOptions, Ownership};
use nodemem_cgroup::CgroupFs;
use nodemem_model::node::{desired_node, NodeFacts, NodeInput, NodePod};
use nodemem_model::pod::defaulting::apply_defaults;
use nodemem_model::pod::profile::PodMemoryProfile;
use nodemem_model::pod::qos::qos_class;
use nodemem_model::pod::{Container, ContainerKind, Pod, PodSpec, Resources};
use nodemem_model::settings::NodeSettings;
use nodemem_model::values::cgroup_layout::{CgroupDriver, ContainerId, ContainerRuntime};
use nodemem_model::values::factor::ThrottlingFactor;
use nodemem_model::values::memory_qos::{MemoryQosSettings, NodeMemoryFacts, ReservationPolicy};
use nodemem_model::Quantity;
use nodemem_testkit::cgroup_tree::CgroupTree;

const PODS: usize = 250;
const CONTAINERS: usize = 3;

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

/// 250 pods: a third Guaranteed, a third Burstable, a third BestEffort.
fn pods() -> Vec<NodePod> {
    (0..PODS)
        .map(|i| {
            let uid = format!("{i:08x}-0000-4000-8000-000000000000");
            let containers: Vec<Container> = (0..CONTAINERS)
                .map(|c| {
                    let mut r = Resources::default();
                    match i % 3 {
                        0 => {
                            for list in [&mut r.requests, &mut r.limits] {
                                list.insert("memory".into(), q("256Mi"));
                                list.insert("cpu".into(), q("250m"));
                            }
                        }
                        1 => {
                            r.requests.insert("memory".into(), q("128Mi"));
                            r.limits.insert("memory".into(), q("512Mi"));
                        }
                        _ => {}
                    }
                    Container {
                        name: format!("c{c}"),
                        kind: ContainerKind::App,
                        resources: r,
                    }
                })
                .collect();
            let mut spec = PodSpec {
                containers,
                ..PodSpec::default()
            };
            apply_defaults(&mut spec);
            let ids = spec
                .containers
                .iter()
                .map(|c| {
                    (
                        c.name.clone(),
                        ContainerId {
                            runtime: ContainerRuntime::Containerd,
                            id: format!("{i:032x}{}", c.name),
                        },
                    )
                })
                .collect();
            NodePod::new(
                Pod {
                    namespace: "bench".into(),
                    name: format!("pod-{i}"),
                    uid,
                    spec,
                },
                ids,
                nodemem_model::class::ClassChoice::Pool,
            )
        })
        .collect()
}

/// Workload classes (issue 63): the same 250 pods, three in four choosing one of three
/// classes (a service without memory.high, a batch class with its own factor, no
/// protection and its own reclaim, one changing nothing), against the pass without
/// classes; medians taken in alternation, their ratio printed.
fn classes_against_none(settings: &NodeSettings, facts: &NodeFacts, plain: &[NodePod]) {
    use nodemem_model::class::{
        ClassChoice, ClassMemoryHigh, ClassReclaim, ClassSource, Protection, WorkloadClass,
    };
    use nodemem_model::feedback::reclaim::{ReclaimMode, ReclaimSettings};
    let classed_settings = NodeSettings {
        classes: vec![
            WorkloadClass {
                memory_high: ClassMemoryHigh::Unset,
                ..WorkloadClass::named("service")
            },
            WorkloadClass {
                memory_high: ClassMemoryHigh::Factor(ThrottlingFactor::from_f64(0.5).unwrap()),
                protection: Protection::Unprotected,
                reclaim: ClassReclaim::Own {
                    mode: ReclaimMode::Active,
                    settings: ReclaimSettings {
                        target_stall_us_per_s: 1000,
                        max_step_permille: 20,
                        interval_seconds: 6,
                        max_refaults_per_s: 100,
                    },
                },
                ..WorkloadClass::named("batch")
            },
            WorkloadClass::named("plain"),
        ],
        ..settings.clone()
    };
    let classed: Vec<NodePod> = plain
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let choice = match i % 4 {
                3 => ClassChoice::Pool,
                k => ClassChoice::Named {
                    name: ["service", "batch", "plain"][k].into(),
                    source: if k == 0 {
                        ClassSource::NamespaceLabel
                    } else {
                        ClassSource::PodAnnotation
                    },
                },
            };
            NodePod::new(p.pod().clone(), p.container_ids().clone(), choice)
        })
        .collect();
    let time = |settings: &NodeSettings, pods: &[NodePod]| {
        let t = Instant::now();
        std::hint::black_box(
            desired_node(NodeInput {
                settings,
                facts,
                pods,
                memory_manager: None,
            })
            .unwrap(),
        );
        t.elapsed()
    };
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        time(&classed_settings, &classed);
        time(settings, plain);
    }
    for _ in 0..2000 {
        with.push(time(&classed_settings, &classed));
        without.push(time(settings, plain));
    }
    let (with, without) = (median(with), median(without));
    println!(
        "desired_node with workload classes (3 classes, 3 pods in 4 choosing one): median {:.1} us against {:.1} us without classes: {:.2}x (goal: no measurable cost, <= 1.10x)",
        micros(with),
        micros(without),
        with.as_secs_f64() / without.as_secs_f64()
    );
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub fn run(allocator: &str) {
    println!("allocator: {allocator}");
    // As `nodemem agent` does at start.
    nodemem_cgroup::fs::raise_open_file_limit();
    let settings = NodeSettings {
        memory_qos: MemoryQosSettings {
            enabled: true,
            throttling_factor: Some(ThrottlingFactor::from_f64(0.9).unwrap()),
            reservation_policy: ReservationPolicy::TieredReservation,
        },
        ..NodeSettings::default()
    };
    let facts = NodeFacts {
        memory: NodeMemoryFacts {
            allocatable_memory: Some(512 << 30),
            page_size: 4096,
            kernel_version: Some("6.1.0".into()),
            ..NodeMemoryFacts::default()
        },
        cgroup_driver: CgroupDriver::Systemd,
        ..NodeFacts::default()
    };
    let pods = pods();
    let compute = || {
        desired_node(NodeInput {
            settings: &settings,
            facts: &facts,
            pods: &pods,
            memory_manager: None,
        })
        .unwrap()
    };

    // 1. desired_node.
    for _ in 0..200 {
        std::hint::black_box(compute());
    }
    let samples: Vec<Duration> = (0..2000)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(compute());
            t.elapsed()
        })
        .collect();
    let node = compute();
    let cgroups = node.cgroups();
    let files: usize = cgroups.iter().map(|c| c.managed().count()).sum();
    println!(
        "desired_node: {PODS} pods x {CONTAINERS} containers -> {} cgroups, {files} values: median {:.1} us (goal < 100 us)",
        cgroups.len(),
        micros(median(samples))
    );

    // What a cold start adds: deriving the memory profile of every pod (the agent does
    // it once per pod event, so the computation above reads numbers).
    let samples: Vec<Duration> = (0..500)
        .map(|_| {
            let t = Instant::now();
            for p in &pods {
                std::hint::black_box(PodMemoryProfile::of(&p.pod().spec));
            }
            t.elapsed()
        })
        .collect();
    println!(
        "pod memory profiles: {PODS} pods derived once per pod event: median {:.1} us for all of them",
        micros(median(samples))
    );

    classes_against_none(&settings, &facts, &pods);

    // NODEMEM_BENCH=desired stops here (for profiling the computation alone).
    if std::env::var("NODEMEM_BENCH").as_deref() == Ok("desired") {
        return;
    }

    // 2. A full apply on tmpfs against the same writes in a tight loop.
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = tempfile::Builder::new()
        .prefix("nodemem-bench-")
        .tempdir_in(&base)
        .unwrap();
    let tree = CgroupTree::at(dir.path(), CgroupDriver::Systemd, 2).unwrap();
    for p in &pods {
        let ids: Vec<ContainerId> = p.container_ids().values().cloned().collect();
        tree.add_pod_with_ids(qos_class(&p.pod().spec), &p.pod().uid, &ids)
            .unwrap();
    }
    let fs = CgroupFs::new(dir.path());
    let options = ApplyOptions {
        dry_run: false,
        page_size: 4096,
        leave_alone: &[],
    };
    // The exact writes a full apply makes, and the files' kernel defaults to reset to.
    let mut probe = Ownership::default();
    let planned = write_cgroups(
        &fs,
        &cgroups,
        &mut probe,
        ApplyOptions {
            dry_run: true,
            ..options
        },
    )
    .planned;
    let writes: Vec<(std::path::PathBuf, String, String)> = planned
        .iter()
        .map(|w| {
            (
                dir.path().join(&w.cgroup).join(&w.file),
                w.new.clone(),
                w.old.clone().unwrap_or_default(),
            )
        })
        .collect();
    let reset = || {
        for (path, _, old) in &writes {
            std::fs::write(path, old).unwrap();
        }
    };
    let tight = || {
        for (path, value, _) in &writes {
            let mut f = OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(path)
                .unwrap();
            f.write_all(value.as_bytes()).unwrap();
        }
    };
    // Two measurements of the same apply: the write path as it runs on cgroupfs, and as
    // the unit tests run it on regular files, where the executor also checks every
    // cgroup it wrote to for removal (the kernel answers ENODEV itself).
    let checked_fs = CgroupFs::new(dir.path()).with_removal_checks(true);
    let kernel_path_fs = CgroupFs::new(dir.path()).with_removal_checks(false);
    let (mut full, mut full_checked, mut ceiling) = (Vec::new(), Vec::new(), Vec::new());
    let mut last_report = None;
    for round in 0..60 {
        reset();
        let mut owned = Ownership::default();
        let t = Instant::now();
        let report = write_cgroups(&kernel_path_fs, &cgroups, &mut owned, options);
        let elapsed = t.elapsed();
        assert_eq!(report.applied.len(), writes.len());
        reset();
        let mut owned = Ownership::default();
        let t = Instant::now();
        let checked = write_cgroups(&checked_fs, &cgroups, &mut owned, options);
        let checked_elapsed = t.elapsed();
        assert_eq!(checked.applied.len(), writes.len());
        reset();
        let t = Instant::now();
        if std::env::var("NODEMEM_BENCH").as_deref() != Ok("apply") {
            tight();
        }
        let tight_elapsed = t.elapsed();
        if round >= 10 {
            full.push(elapsed);
            full_checked.push(checked_elapsed);
            ceiling.push(tight_elapsed);
        }
        last_report = Some(report);
    }
    let report = last_report.unwrap();
    let (full, full_checked, ceiling) = (median(full), median(full_checked), median(ceiling));
    println!(
        "full apply on tmpfs: {} writes ({} reads to plan): median {:.0} us; the same writes in a tight loop: {:.0} us; ratio {:.2}x (goal <= 1.5x)",
        report.applied.len(),
        report.reads,
        micros(full),
        micros(ceiling),
        full.as_secs_f64() / ceiling.as_secs_f64()
    );
    println!(
        "  with the regular-file removal checks the unit tests use: median {:.0} us; ratio {:.2}x",
        micros(full_checked),
        full_checked.as_secs_f64() / ceiling.as_secs_f64()
    );

    if std::env::var("NODEMEM_BENCH_PHASES").is_ok() {
        for _ in 0..5 {
            reset();
            let owned = Ownership::default();
            let t0 = Instant::now();
            let wanted = nodemem_apply::plan::files_to_observe(&cgroups, &owned);
            let t1 = Instant::now();
            let (observed, mut dirs) = nodemem_apply::execute::observe(&fs, &wanted);
            let t2 = Instant::now();
            let p = nodemem_apply::plan::plan(&cgroups, &observed, &owned, 4096);
            let t3 = Instant::now();
            let e = nodemem_apply::execute::execute(&fs, p.writes.clone(), &mut dirs);
            let t4 = Instant::now();
            drop(dirs);
            let t5 = Instant::now();
            reset();
            let t6 = Instant::now();
            tight();
            let t7 = Instant::now();
            println!("phases: wanted {:?} observe {:?} plan {:?} execute {:?} ({}) close {:?} | tight {:?}", t1-t0, t2-t1, t3-t2, t4-t3, e.applied.len(), t5-t4, t7-t6);
        }
    }

    // 3. Nothing changed: zero writes.
    let mut owned = Ownership::default();
    write_cgroups(&fs, &cgroups, &mut owned, options);
    let samples: Vec<Duration> = (0..50)
        .map(|_| {
            let t = Instant::now();
            let again = write_cgroups(&fs, &cgroups, &mut owned, options);
            let d = t.elapsed();
            assert_eq!(again.writes(), 0, "a second apply writes nothing");
            d
        })
        .collect();
    let again = write_cgroups(&fs, &cgroups, &mut owned, options);
    println!(
        "second apply, nothing changed: {} writes, {} reads: median {:.0} us (goal: zero writes)",
        again.applied.len(),
        again.reads,
        micros(median(samples))
    );
}
