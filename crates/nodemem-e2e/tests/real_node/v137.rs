//! The v1.37.2 kubelet (Memory QoS beta, its gate on by default, no throttling factor
//! by default): its own Memory QoS is the reference with nothing left to differ, with
//! a factor and without one; then nodemem is installed beside it at its defaults, and
//! its conflict detection does not misfire.

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
    let _one = ONE_NODE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cp = ControlPlane::start().expect("control plane");
    cp.start_scheduler().expect("kube-scheduler");
    let image = node_image(KUBELET_V137);
    let started = Instant::now();
    let mut spec = RealNodeSpec::new(name, driver).label("nodemem.io/pool", "real");
    spec.kubelet = kubelets_v137_memory_qos(Some(0.9));
    let mut node = RealNode::boot(&cp, &image, &spec).expect("node boots");
    let rt = runtime();
    rt.block_on(async {
        let client = cp.client(&Identity::Admin).await.unwrap();
        node_ready(&client, name).await;
        eprintln!("{name} Ready {:?} after qemu started", started.elapsed());
        let bed = Bed {
            cp: &cp,
            driver,
            client,
        };
        let mut phases = Phases::new(name);
        phases
            .run("kubelet-version", &[], || async {
                let nodes: Api<core::Node> = Api::all(bed.client.clone());
                let reported = nodes
                    .get(name)
                    .await
                    .unwrap()
                    .status
                    .unwrap()
                    .node_info
                    .unwrap();
                assert_eq!(reported.kubelet_version, KUBELET_V137);
            })
            .await;
        let with_factor = phases
            .run("kubelet-reference", &[], || {
                kubelet_reference::the_kubelets_memory_qos_is_nodemems_prediction(
                    bed.cp,
                    &mut node,
                    driver,
                    &bed.client,
                    kubelet_reference::Reference {
                        policy: POLICY,
                        tag: "k",
                        v136_departures: false,
                    },
                )
            })
            .await;
        phases
            .run("pod-level-memory-high", &["kubelet-reference"], || async {
                // The v1.37 rule shows on this pod set: the pod-level pod's own cgroup
                // carries memory.high, its containers without a limit none.
                let throttled = with_factor.as_ref().expect("kubelet-reference passed");
                let pod_level: Vec<&String> = throttled
                    .keys()
                    .filter(|p| p.contains("-pod") && p.ends_with(".slice/memory.high"))
                    .collect();
                assert_eq!(pod_level.len(), 1, "{throttled:#?}");
            })
            .await;
        // The v1.37 default: no factor, no memory.high; a policy says the same.
        spec.kubelet = kubelets_v137_memory_qos(None);
        phases
            .run("kubelet-reference-without-factor", &[], || async {
                restart_kubelet_with(&mut node, &spec, &bed.client).await;
                let throttled = kubelet_reference::the_kubelets_memory_qos_is_nodemems_prediction(
                    bed.cp,
                    &mut node,
                    driver,
                    &bed.client,
                    kubelet_reference::Reference {
                        policy: POLICY_NO_HIGH,
                        tag: "u",
                        v136_departures: false,
                    },
                )
                .await;
                assert!(
                    throttled.is_empty(),
                    "memory.high without a factor: {throttled:#?}"
                );
            })
            .await;
        // The kubelet at its defaults: nothing of Memory QoS in its configuration.
        spec.kubelet = json!({});
        phases
            .run("kubelet-at-defaults", &[], || async {
                restart_kubelet_with(&mut node, &spec, &bed.client).await;
                a_workload_runs(&mut node, &bed, name).await;
            })
            .await;
        let installed = phases
            .run("install", &["kubelet-at-defaults"], || {
                install_nodemem(bed.cp, &mut node, &bed.client, POLICY, &[])
            })
            .await;
        let installed_now = || installed.as_ref().expect("install passed");
        phases
            .run("no-conflict-at-defaults", &["install"], || async {
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
            })
            .await;
        let expected = phases
            .run("simulate-prediction", &["install"], || {
                install::it_writes_what_simulate_predicts(&mut node, &bed, installed_now())
            })
            .await;
        phases
            .run("explain", &["install"], || async {
                explain_names_the_rules(&bed, name, "v1.37.2 (v1.37 rules")
            })
            .await;
        phases
            .run("owners", &["simulate-prediction"], || {
                let expected = expected.expect("simulate-prediction passed");
                owners::values_survive_their_owners(
                    &mut node,
                    &bed,
                    installed_now(),
                    expected,
                    V137_REPAIRED,
                )
            })
            .await;
        phases.finish();
    });
}
