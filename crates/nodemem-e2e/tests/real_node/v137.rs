//! The v1.37.2 kubelet (Memory QoS beta, its gate on by default, no throttling factor
//! by default): its own Memory QoS is the reference with nothing left to differ, with
//! a factor and without one; then nodemem is installed beside it at its defaults, and
//! its conflict detection does not misfire. It runs the cgroupfs driver (the v1.35 and
//! v1.36 nodes run systemd's), and with it the phases that need a driver's files more
//! than a kubelet's version: the kubelet's float64, reclaim against the kubelet's
//! eviction manager, the give-back on cgroupfs.

use nodemem_testkit::real_node::KUBELET_CONFIG_DIR;

use super::*;

/// The reference policy without memory.high: the kubelet's unset factor in nodemem's
/// words.
const POLICY_NO_HIGH: &str = "apiVersion: nodemem.io/v1alpha1
kind: NodeMemoryPolicy
metadata:
  name: real
spec:
  nodeSelector:
    matchLabels:
      nodemem.io/pool: real
  memoryQoS:
    memoryHigh: None
    reservationPolicy: TieredReservation
  enforcement: Agent
  rollout:
    minReadySeconds: 0
";

/// What a v1.37 kubelet at its defaults writes over nodemem's values, and how long
/// nodemem may take to put them back: a kubelet restart is seen within 5 s (its procfs
/// start time) and followed by a whole-node pass; a resize is the pod's update, which
/// brings a pass over the pod.
const V137_REPAIRED: owners::Repaired = &[("kubelet restart", 10.0), ("pod resize", 5.0)];

/// The kubelet's Memory QoS at v1.37: the gate is not named (on by default); the
/// reservation policy, and the factor when given.
fn kubelets_v137_memory_qos(factor: Option<f64>) -> Value {
    let mut config = json!({"memoryReservationPolicy": "TieredReservation"});
    if let Some(f) = factor {
        config["memoryThrottlingFactor"] = json!(f);
    }
    config
}

pub(crate) fn a_v1_37_node(driver: Driver, name: &str) {
    let _slot = super::side_by_side::slot();
    let mut spec = RealNodeSpec::new(name, driver).label("nodemem.io/pool", "real");
    spec.kubelet = kubelets_v137_memory_qos(Some(0.9));
    spec.rebootable = true;
    let (cp, mut node, started) = boot(&spec, KUBELET_V137);
    let rt = runtime();
    rt.block_on(async {
        let client = joined(&cp, &mut node, started).await;
        let bed = Bed {
            cp: &cp,
            driver,
            client,
        };
        let mut phases = Phases::new(name);
        phases.deadline(paced(V137_NODE_PHASES));
        phase!(phases, node, bed, "kubelet-version", &[], || {
            reports_kubelet_version(&bed, name, KUBELET_V137)
        });
        let with_factor = phase!(phases, node, bed, "kubelet-reference", &[], || {
            kubelet_reference::the_kubelets_memory_qos_is_nodemems_prediction(
                bed.cp,
                &mut node,
                driver,
                &bed.client,
                kubelet_reference::Reference {
                    policy: POLICY,
                    tag: "k",
                    departures: &[],
                },
            )
        });
        phase!(
            phases,
            node,
            bed,
            "pod-level-memory-high",
            &["kubelet-reference"],
            || async {
                // The v1.37 rule shows on this pod set: the pod-level pod's own cgroup
                // carries memory.high (every value was simulate's in the reference:
                // this says the rule was met). A drawn pod with pod-level resources
                // may carry one too, so at least one.
                let throttled = with_factor.as_ref().expect("kubelet-reference passed");
                let pod_level: Vec<&String> = throttled
                    .keys()
                    .filter(|p| p.ends_with("/memory.high") && in_a_pods_own_cgroup(p))
                    .collect();
                assert!(!pod_level.is_empty(), "{throttled:#?}");
            }
        );
        // The v1.37 default: no factor, no memory.high; a policy says the same.
        spec.kubelet = kubelets_v137_memory_qos(None);
        phase!(
            phases,
            node,
            bed,
            "kubelet-reference-without-factor",
            &[],
            || async {
                restart_kubelet_with(&mut node, &spec, &bed.client).await;
                let throttled = kubelet_reference::the_kubelets_memory_qos_is_nodemems_prediction(
                    bed.cp,
                    &mut node,
                    driver,
                    &bed.client,
                    kubelet_reference::Reference {
                        policy: POLICY_NO_HIGH,
                        tag: "u",
                        departures: &[],
                    },
                )
                .await;
                assert!(
                    throttled.is_empty(),
                    "memory.high without a factor: {throttled:#?}"
                );
            }
        );
        // The kubelet's float64 at factors 0.7 and 0.35 (its own Memory QoS, gate named).
        phase!(phases, node, bed, "kubelet-float", &[], || {
            kubelet_float::the_kubelet_writes_nodemems_pages(&mut node, &bed, &mut spec)
        });
        // The kubelet at its defaults: nothing of Memory QoS in its configuration.
        spec.kubelet = json!({});
        phase!(phases, node, bed, "kubelet-at-defaults", &[], || async {
            restart_kubelet_with(&mut node, &spec, &bed.client).await;
            a_workload_runs(&mut node, &bed, name).await;
        });
        let mut installed = phase!(
            phases,
            node,
            bed,
            "install",
            &["kubelet-at-defaults"],
            || install_v137(&bed, &mut node)
        );
        phase!(phases, node, bed, "reports", &["install"], || {
            let installed = installed.as_ref().expect("install passed");
            install::it_reports_through_its_config(&mut node, &bed, installed)
        });
        // The kubelet's /configz against what nodemem reads, layout by layout (issue 58).
        phase!(phases, node, bed, "configz", &["install"], || {
            configz::nodemem_reads_what_the_kubelet_runs(&mut node, &bed, KUBELET_V137)
        });
        phase!(
            phases,
            node,
            bed,
            "no-conflict-at-defaults",
            &["install"],
            || async {
                // The gate is on (v1.37's default) but the kubelet writes no values: not
                // a conflict, and nodemem writes.
                let status = config_applied(
                    &bed.client,
                    bed.admin(),
                    name,
                    None,
                    Duration::from_secs(120),
                )
                .await;
                let conflict = status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == "KubeletConflict")
                    .expect("a KubeletConflict condition");
                assert_eq!(
                    (conflict.status.as_str(), conflict.reason.as_str()),
                    ("False", "NoConflict"),
                    "{conflict:?}"
                );
            }
        );
        nodemem_as_predicted(
            &mut phases,
            &mut node,
            &bed,
            installed.as_ref(),
            "v1.37.2 (v1.37 rules",
            V137_REPAIRED,
            owners::Events::All,
        )
        .await;
        // The owners' pods are no later phase's.
        remove_pods_or_say(&bed, &ListParams::default()).await;
        // Reclaim against the kubelet's eviction manager (the kubelet restarts twice,
        // for its threshold and back).
        let agent_ip = installed.as_ref().map(|i| i.agent_ip.clone());
        phase!(phases, node, bed, "reclaim", &["install"], || async {
            let agent_ip = agent_ip.expect("install passed");
            reclaim::reclaim_on_a_real_kernel(&mut node, &bed, &mut spec, &agent_ip).await
        });
        // A reboot (issue 64): the node comes back under its config, and the give-back
        // after it finds what nodemem kept across the boot.
        phase!(phases, node, bed, "reboot", &["install"], || {
            let installed = installed.as_ref().expect("install passed");
            reboot::it_comes_back_under_its_config(&mut node, &bed, installed)
        });
        remove_pods_or_say(&bed, &ListParams::default()).await;
        // The give-back on cgroupfs: the kubelet at its defaults writes none of these
        // files, so every one must read what it leaves there.
        phase!(phases, node, bed, "give-back", &["install"], || {
            let installed = installed.as_mut().expect("install passed");
            give_back::an_uninstall_gives_the_node_back(&mut node, &bed, installed)
        });
        // On nodemem installed again (the give-back left nothing of it): the kubelet
        // then enforces.
        let reinstalled = phase!(phases, node, bed, "kubelet-mode", &["install"], || async {
            let installed = install_v137(&bed, &mut node).await;
            // The reinstall's `kubectl apply` keeps what the reclaim phase patched in
            // (the three-way merge leaves a field it never set), and Active reclaim is
            // refused at admission under any enforcement but Agent: reclaim off first,
            // whether that phase ended well or not.
            kubectl(
                bed.admin(),
                &[
                    "patch",
                    "nmp",
                    "real",
                    "--type=merge",
                    "-p",
                    r#"{"spec":{"reclaim":null}}"#,
                ],
            )
            .unwrap();
            kubelet_mode_on_v1_37(&mut node, &bed, &installed).await;
            installed
        });
        // Last: the Static Memory Manager on the newest kubelet, whose Memory Manager
        // takes each pod's lifecycle operation (in-place resize) where v1.35's and
        // v1.36's did not (TESTING.md's matrix); from Kubelet mode, as on v1.35.
        phase!(phases, node, bed, "numa", &["kubelet-mode"], || {
            let installed = reinstalled.as_ref().expect("kubelet-mode passed");
            numa::pins_after_kubelet_mode(&mut node, &bed, installed)
        });
        phases.finish();
    });
}

/// Whether `path` is a file of a pod's own cgroup (not a container's, not a QoS
/// level's), as the kubelet names a pod's cgroup on either driver:
/// `kubepods-burstable-pod<uid>.slice` (systemd) or `pod<uid>` (cgroupfs).
fn in_a_pods_own_cgroup(path: &str) -> bool {
    let dir = path.rsplit('/').nth(1).unwrap_or("");
    (dir.contains("-pod") && dir.ends_with(".slice")) || dir.starts_with("pod")
}

/// nodemem installed as users install it, the agent told where the kubelet's drop-ins
/// go and which unit to restart (Kubelet mode).
async fn install_v137(bed: &Bed<'_>, node: &mut RealNode) -> Installed {
    install_nodemem(
        bed.cp,
        node,
        &bed.client,
        POLICY,
        &[
            "--agent-kubelet-config-dir",
            KUBELET_CONFIG_DIR,
            "--agent-kubelet-restart-unit",
            "kubelet.service",
        ],
    )
    .await
}

/// `enforcement: Kubelet` on the v1.37 node: the agent renders its drop-in for v1.37
/// (the kubelet's own fields), the kubelet accepts it on a real restart the agent
/// makes through systemd, and what the kubelet then writes for new pods of every QoS
/// class (and at the QoS levels) is what `nodemem simulate` predicted.
/// The node's config at a revision past `superseded`, applied as Observe applies it
/// (`Applied=True`, `Observing`), by an agent started for that mode.
async fn observed(
    bed: &Bed<'_>,
    name: &str,
    superseded: Option<&str>,
) -> nodemem_api::config::NodeMemoryConfigStatus {
    let status = config_applied(
        &bed.client,
        bed.admin(),
        name,
        superseded,
        Duration::from_secs(300),
    )
    .await;
    let applied = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Applied")
        .expect("an Applied condition");
    assert_eq!(applied.reason, "Observing", "{applied:?}");
    status
}

/// One agent on the node: the process the confinement check reads is the one that
/// applied the revision (the DaemonSet is the install's, for every mode it allows, so
/// a change of a policy's mode rolls no pod).
async fn one_agent(node: &mut RealNode) {
    eventually(
        "one agent on the node",
        Duration::from_secs(120),
        async || {
            let (count, _) = node
                .run("pgrep -c -f '^/nodemem agent --kubelet-reader'")
                .ok()?;
            (count.trim() == "1").then_some(())
        },
    )
    .await;
}

async fn kubelet_mode_on_v1_37(node: &mut RealNode, bed: &Bed<'_>, installed: &Installed) {
    let name = node.name.clone();
    super::remove_pods(&bed.client, &ListParams::default())
        .await
        .unwrap_or_else(|left| panic!("the pods of default not gone: {left:?}"));
    let status = config_applied(
        &bed.client,
        bed.admin(),
        &name,
        None,
        Duration::from_secs(60),
    )
    .await;
    // First Observe (issue 59): the agent applying that mode, confined as in every
    // mode.
    let observe = installed.work.path().join("policy-observe.yaml");
    std::fs::write(
        &observe,
        POLICY.replace("enforcement: Agent", "enforcement: Observe"),
    )
    .unwrap();
    kubectl(bed.admin(), &["apply", "-f", observe.to_str().unwrap()]).unwrap();
    let status = observed(bed, &name, status.observed_revision.as_deref()).await;
    one_agent(node).await;
    install::the_agent_runs_confined(node, "enforcement: Observe");
    let before = status.observed_revision.clone();
    let kubelet_before = kubelet_invocation(node);
    let policy = installed.work.path().join("policy-kubelet.yaml");
    std::fs::write(
        &policy,
        POLICY.replace("enforcement: Agent", "enforcement: Kubelet"),
    )
    .unwrap();
    kubectl(bed.admin(), &["apply", "-f", policy.to_str().unwrap()]).unwrap();
    kubelet_took_over(node, bed, before.as_deref(), &kubelet_before).await;
    let (dropin, code) = node
        .run(&format!("cat {KUBELET_CONFIG_DIR}/~nodemem.conf"))
        .unwrap();
    assert_eq!(code, 0, "{dropin}");
    assert!(dropin.contains("(kubelet v1.37.2)"), "{dropin}");
    assert!(
        dropin
            .contains("memoryThrottlingFactor: 0.9\nmemoryReservationPolicy: TieredReservation\n"),
        "{dropin}"
    );
    let nodes: Api<core::Node> = Api::all(bed.client.clone());
    eventually(
        "the node Ready after the kubelet's restart",
        Duration::from_secs(180),
        || async {
            let n = nodes.get(&name).await.ok()?;
            n.status?
                .conditions?
                .into_iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
                .then_some(())
        },
    )
    .await;
    start_pods(&bed.client, &qos_pods(&name, "m", false)).await;
    let expected = expected_files(
        &bed.client,
        bed.admin(),
        &policy,
        installed.work.path(),
        bed.driver,
        &name,
        &installed.agent_container(),
    )
    .await;
    // The new pods and the QoS levels: the agent's own pod predates the drop-in.
    let wanted: Vec<(&String, &String)> = expected
        .iter()
        .filter(|(_, (owner, _))| {
            owner.starts_with("default/")
                || ["kubepods", "burstable", "besteffort"].contains(&owner.as_str())
        })
        .map(|(p, (_, v))| (p, v))
        .collect();
    assert!(wanted.len() >= 40, "only {} files", wanted.len());
    node_values_become(
        node,
        &wanted,
        "what the kubelet wrote under the drop-in is not simulate's prediction",
    );
    eprintln!(
        "{name}: under enforcement: Kubelet the v1.37.2 kubelet wrote simulate's prediction in {} files",
        wanted.len()
    );
}
