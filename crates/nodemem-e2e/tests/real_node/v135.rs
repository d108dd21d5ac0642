//! The v1.35.4 kubelet (Memory QoS alpha, its gate off by default, no
//! `memoryReservationPolicy`: every memory request is memory.min): its own Memory QoS,
//! gate on, is the reference; then nodemem is installed as users install it and its
//! values are `nodemem simulate`'s and survive their owners (issue 42, item 2). On the
//! systemd node after its v1.36 phases, the kubelet swapped in place (issue 57).

use super::*;
use nodemem_model::node::kubelet_dropin::DROPIN_FILE;
use nodemem_testkit::real_node::KUBELET_CONFIG_DIR;

/// The reference policy in nodemem's words for what the v1.35 kubelet does: memory.min
/// for every request (HardReservation), memory.high at factor 0.9.
const POLICY_V135: &str = "apiVersion: nodemem.io/v1alpha1
kind: NodeMemoryPolicy
metadata:
  name: real
spec:
  nodeSelector:
    matchLabels:
      nodemem.io/pool: real
  memoryQoS:
    throttlingFactor: 0.9
    reservationPolicy: HardReservation
  enforcement: Agent
  rollout:
    minReadySeconds: 0
";

/// The v1.35 kubelet's Memory QoS: the alpha gate named, the factor; no reservation
/// policy (v1.35 has no such field).
fn kubelets_v135_memory_qos(on: bool) -> Value {
    json!({"featureGates": {"MemoryQoS": on}, "memoryThrottlingFactor": 0.9})
}

/// The v1.35 phases on the systemd node after its v1.36 ones (issue 57: one boot for two
/// kubelets of one driver, instead of a boot, a control plane and an image import of its
/// own): the helm phase's uninstall left nothing of nodemem's on the node, its pods are
/// gone, and the v1.35.4 kubelet takes the node's place (`swap_kubelet`) with its own
/// Memory QoS on. `phases` is in its own part: `v1.35.4 install` is what the phases
/// after it need; the swap needs `clean`, the phases that left the node clean.
pub(crate) async fn phases_after_a_kubelet_swap(
    phases: &mut Phases,
    mut node: &mut RealNode,
    bed: &Bed<'_>,
    spec: &mut RealNodeSpec,
    clean: &[&str],
) {
    let driver = bed.driver;
    let name = node.name.clone();
    let name = name.as_str();
    phases.part(KUBELET_V135);
    spec.kubelet = kubelets_v135_memory_qos(true);
    phase!(phases, node, bed, "kubelet-version", clean, || async {
        super::remove_pods(&bed.client, &ListParams::default())
            .await
            .unwrap_or_else(|left| panic!("the pods of default not gone: {left:?}"));
        swap_kubelet(&mut *node, spec, &bed.client, KUBELET_V135).await;
        reports_kubelet_version(bed, name, KUBELET_V135).await
    });
    phase!(
        phases,
        node,
        bed,
        "kubelet-reference",
        &["kubelet-version"],
        || {
            kubelet_reference::the_kubelets_memory_qos_is_nodemems_prediction(
                bed.cp,
                &mut *node,
                driver,
                &bed.client,
                kubelet_reference::Reference {
                    policy: POLICY_V135,
                    tag: "k",
                    // Its requests are memory.min everywhere (no kubepods memory.low to
                    // miss); containers without memory resources get no memory.high.
                    departures: &[kubelet_reference::V137_BESTEFFORT_HIGH],
                },
            )
        }
    );
    // nodemem enforces from here: the kubelet's own Memory QoS goes off.
    spec.kubelet = kubelets_v135_memory_qos(false);
    phase!(
        phases,
        node,
        bed,
        "kubelet-without-memory-qos",
        &["kubelet-version"],
        || async {
            restart_kubelet_with(&mut *node, spec, &bed.client).await;
            a_workload_runs(&mut *node, bed, name).await;
        }
    );
    let installed = phase!(
        phases,
        node,
        bed,
        "install",
        &["kubelet-without-memory-qos"],
        || {
            // No drop-in directory given: the agent finds the kubelet's own.
            install_nodemem(
                bed.cp,
                &mut *node,
                &bed.client,
                POLICY_V135,
                &["--agent-kubelet-restart-unit", "kubelet.service"],
            )
        }
    );
    phase!(phases, node, bed, "configz", &["install"], || {
        configz::nodemem_reads_what_the_kubelet_runs(&mut *node, bed, KUBELET_V135)
    });
    nodemem_as_predicted(
        phases,
        &mut *node,
        bed,
        installed.as_ref(),
        "v1.35.4 (v1.36 rules",
        &[],
        owners::Events::KubeletOnly,
    )
    .await;
    phase!(phases, node, bed, "kubelet-mode", &["install"], || async {
        kubelet_mode_on_v1_35(&mut *node, bed, installed.as_ref().expect("install passed")).await
    });
    // Last: the Static Memory Manager on the oldest kubelet (the v1.37 node runs it on
    // the newest; v1.36's Memory Manager is v1.35's: TESTING.md's matrix).
    phase!(phases, node, bed, "numa", &["install"], || {
        let installed = installed.as_ref().expect("install passed");
        numa::pins_after_kubelet_mode(&mut *node, bed, installed)
    });
}

/// The node's kubelet replaced by the one of `version` (the control plane build's,
/// through the share) on a node without pods, as a node's re-provisioning does it: the
/// old one stopped, the binary installed, the old kubelet's checkpoints removed (the
/// CPU, Memory and DRA managers' `*_state` and the device plugins': a kubelet refuses
/// to start on a checkpoint of another policy, and an older one may not read a newer
/// one's), `spec`'s configuration written, the new one started; waits for the Node
/// Ready under it. The Node object stays: the new kubelet registers with it as a
/// kubelet restarted on its node does.
async fn swap_kubelet(
    node: &mut RealNode,
    spec: &RealNodeSpec,
    client: &kube::Client,
    version: &str,
) {
    let bin = control_plane_binaries().expect("control plane binaries");
    let kubelet = bin
        .kubelet_of(version)
        .unwrap_or_else(|| panic!("no kubelet {version} in {:?}", bin.kubelets));
    std::fs::copy(kubelet, node.share().join("kubelet-next")).unwrap();
    let config =
        serde_json::to_string_pretty(&nodemem_testkit::real_node::kubelet_configuration(spec))
            .unwrap();
    std::fs::write(node.share().join("kubelet-config.yaml"), config).unwrap();
    let before = node_clock(node);
    let (out, code) = node
        .run_within(
            "systemctl stop kubelet && install -m 0755 /mnt/nodemem/kubelet-next /usr/local/bin/kubelet && rm -f /var/lib/kubelet/*_state /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint && cp /mnt/nodemem/kubelet-config.yaml /var/lib/kubelet/config.yaml && systemctl start kubelet && until systemctl is-active -q kubelet; do sleep 1; done",
            Duration::from_secs(120),
        )
        .unwrap();
    assert_eq!(code, 0, "{out}");
    std::fs::remove_file(node.share().join("kubelet-next")).unwrap();
    node_ready_after_restart(node, client, before).await;
}

/// `enforcement: Kubelet` on the v1.35 node: HardReservation is what its gate does, so
/// the agent renders the gate and the factor (no memoryReservationPolicy, a field v1.35
/// does not have) into the kubelet's own --config-dir, found from its process, and
/// restarts it through systemd; the kubelet accepts it and writes memory.min for the
/// request and memory.high at the factor. TieredReservation, which v1.35 cannot express,
/// is refused with its message and the drop-in stays as it was.
async fn kubelet_mode_on_v1_35(node: &mut RealNode, bed: &Bed<'_>, installed: &Installed) {
    let name = node.name.clone();
    super::remove_pods(&bed.client, &ListParams::default())
        .await
        .unwrap_or_else(|left| panic!("the pods of default not gone: {left:?}"));
    let before = config_applied(
        &bed.client,
        bed.admin(),
        &name,
        None,
        Duration::from_secs(60),
    )
    .await
    .observed_revision;
    let kubelet_before = kubelet_invocation(node);
    let restart_from = node_clock(node);
    let policy = installed.work.path().join("policy-kubelet.yaml");
    let kubelet_policy = POLICY_V135.replace("enforcement: Agent", "enforcement: Kubelet");
    std::fs::write(&policy, &kubelet_policy).unwrap();
    kubectl(bed.admin(), &["apply", "-f", policy.to_str().unwrap()]).unwrap();
    let status = kubelet_took_over(node, bed, before.as_deref(), &kubelet_before).await;
    let (dropin, code) = node
        .run(&format!("cat {KUBELET_CONFIG_DIR}/{DROPIN_FILE}"))
        .unwrap();
    assert_eq!(code, 0, "{dropin}");
    assert!(dropin.contains("(kubelet v1.35.4)"), "{dropin}");
    assert!(dropin.contains("MemoryQoS: true"), "{dropin}");
    assert!(dropin.contains("memoryThrottlingFactor: 0.9"), "{dropin}");
    assert!(!dropin.contains("memoryReservationPolicy"), "{dropin}");
    node_ready_after_restart(node, &bed.client, restart_from).await;

    // What the kubelet writes under it: memory.min = the request, memory.high at 0.9.
    let pods: Api<core::Pod> = Api::namespaced(bed.client.clone(), "default");
    let pod: core::Pod = serde_json::from_value(json!({
        "metadata": {"name": "kubelet-made", "labels": {PHASE_POD: "true"}},
        "spec": {"nodeName": name, "containers": [{
            "name": "w", "image": "nodemem.local/workload:1", "imagePullPolicy": "Never",
            "args": ["-allocate", "16Mi"],
            "resources": {"requests": {"memory": "96Mi"}, "limits": {"memory": "192Mi"}}}]}}))
    .unwrap();
    nodemem_testkit::clients::create_pod(&pods, &pod)
        .await
        .unwrap();
    let id = eventually(
        "pod kubelet-made running",
        Duration::from_secs(180),
        || async { Some(container_id(&pods, "kubelet-made").await).filter(|id| !id.is_empty()) },
    )
    .await;
    let uid = pods
        .get("kubelet-made")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let dir = container_dir(bed.driver, &pod_dir(bed.driver, "Burstable", &uid), &id);
    let high = nodemem_model::values::factor::ThrottlingFactor::from_f64(0.9)
        .unwrap()
        .memory_high(
            96 << 20,
            192 << 20,
            4096,
            nodemem_model::values::factor::KubeletFloat::Separate,
        );
    let wanted = [
        (format!("{dir}/memory.min"), (96i64 << 20).to_string()),
        (format!("{dir}/memory.high"), high.to_string()),
    ];
    let wanted: Vec<(&String, &String)> = wanted.iter().map(|(p, v)| (p, v)).collect();
    node_values_become(
        node,
        &wanted,
        "the v1.35 kubelet under nodemem's drop-in does not write HardReservation's values",
    );

    // What v1.35 cannot express: refused on the node, nothing rewritten.
    let revision = status.observed_revision.clone();
    std::fs::write(
        &policy,
        kubelet_policy.replace("HardReservation", "TieredReservation"),
    )
    .unwrap();
    kubectl(bed.admin(), &["apply", "-f", policy.to_str().unwrap()]).unwrap();
    let configs: Api<NodeMemoryConfig> = Api::all(bed.client.clone());
    let refused = eventually(
        "TieredReservation refused on v1.35",
        Duration::from_secs(180),
        || async {
            let c = configs.get(&name).await.ok()?;
            let applied = c
                .status?
                .conditions
                .into_iter()
                .find(|x| x.type_ == "Applied")?;
            (c.spec.revision.as_str() != revision.as_deref().unwrap_or("")
                && applied.reason == "KubeletCannotExpress")
                .then_some(applied)
        },
    )
    .await;
    assert_eq!(refused.status, "False");
    assert!(
        refused.message.contains(
            "kubelet v1.35.4 cannot express memoryQoS with reservationPolicy TieredReservation"
        ),
        "{refused:?}"
    );
    let (after, _) = node
        .run(&format!("cat {KUBELET_CONFIG_DIR}/{DROPIN_FILE}"))
        .unwrap();
    assert_eq!(after, dropin, "the drop-in stays as it was");

    // nodemem's drop-in sorts after a site's and moves off its old name (issue 58:
    // `zz-site.conf` overrode `99-nodemem.conf`, its name until 2026-11-30). The
    // drop-in put back under its old name, as an agent from before left it, with a
    // site's drop-in between the two names that sets the factor again; then a revision
    // of factor 0.8: the agent writes its drop-in under the new name, removes the old
    // one and restarts the kubelet, which runs nodemem's 0.8, not the site's 0.6.
    let site = format!("{KUBELET_CONFIG_DIR}/zz-site.conf");
    let (out, code) = node
        .run(&format!(
            "printf 'apiVersion: kubelet.config.k8s.io/v1beta1\\nkind: KubeletConfiguration\\nmemoryThrottlingFactor: 0.6\\n' > {site} && mv {KUBELET_CONFIG_DIR}/{DROPIN_FILE} {KUBELET_CONFIG_DIR}/99-nodemem.conf"
        ))
        .unwrap();
    assert_eq!(code, 0, "{out}");
    // With a decoy kubelet beside it, started after the node's (issue 58).
    let decoy = decoy::start(node, bed).await;
    let kubelet_before = kubelet_invocation(node);
    let restart_from = node_clock(node);
    let revision = configs.get(&name).await.unwrap().spec.revision;
    std::fs::write(
        &policy,
        kubelet_policy.replace("throttlingFactor: 0.9", "throttlingFactor: 0.8"),
    )
    .unwrap();
    kubectl(bed.admin(), &["apply", "-f", policy.to_str().unwrap()]).unwrap();
    kubelet_took_over(node, bed, Some(&revision), &kubelet_before).await;
    let invocation = kubelet_invocation(node);
    node_ready_after_restart(node, &bed.client, restart_from).await;
    let (dropins, code) = node
        .run(&format!(
            "test ! -e {KUBELET_CONFIG_DIR}/99-nodemem.conf && cat {KUBELET_CONFIG_DIR}/{DROPIN_FILE}"
        ))
        .unwrap();
    assert_eq!(code, 0, "the drop-in under its old name is gone: {dropins}");
    assert!(dropins.contains("memoryThrottlingFactor: 0.8"), "{dropins}");
    let (configz, code) = node.run("/mnt/nodemem/tools/kubelet-configz").unwrap();
    assert_eq!(code, 0, "{configz}");
    let configz: Value = serde_json::from_str(&configz).unwrap();
    assert_eq!(
        configz["kubeletconfig"]["memoryThrottlingFactor"],
        json!(0.8),
        "nodemem's drop-in decides over the site's zz-site.conf: {configz}"
    );
    decoy::was_ignored(node, bed, &decoy, &invocation).await;
    let (out, code) = node.run(&format!("rm {site}")).unwrap();
    assert_eq!(code, 0, "{out}");
}
