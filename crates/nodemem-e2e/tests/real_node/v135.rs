//! The v1.35.4 kubelet (Memory QoS alpha, its gate off by default, no
//! `memoryReservationPolicy`: every memory request is memory.min): its own Memory QoS,
//! gate on, is the reference; then nodemem is installed as users install it and its
//! values are `nodemem simulate`'s and survive their owners (issue 42, item 2).

use super::*;

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

pub(crate) fn a_v1_35_node(driver: Driver, name: &str) {
    let _slot = super::side_by_side::slot();
    let mut spec = RealNodeSpec::new(name, driver).label("nodemem.io/pool", "real");
    spec.kubelet = kubelets_v135_memory_qos(true);
    let (cp, mut node, started) = boot(&spec, KUBELET_V135);
    let rt = runtime();
    rt.block_on(async {
        let client = joined(&cp, &mut node, started).await;
        let bed = Bed {
            cp: &cp,
            driver,
            client,
        };
        let mut phases = Phases::new(name);
        phase!(phases, node, bed, "kubelet-version", &[], || {
            reports_kubelet_version(&bed, name, KUBELET_V135)
        });
        phase!(phases, node, bed, "kubelet-reference", &[], || {
            kubelet_reference::the_kubelets_memory_qos_is_nodemems_prediction(
                bed.cp,
                &mut node,
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
        });
        // nodemem enforces from here: the kubelet's own Memory QoS goes off.
        spec.kubelet = kubelets_v135_memory_qos(false);
        phase!(
            phases,
            node,
            bed,
            "kubelet-without-memory-qos",
            &[],
            || async {
                restart_kubelet_with(&mut node, &spec, &bed.client).await;
                a_workload_runs(&mut node, &bed, name).await;
            }
        );
        let installed = phase!(
            phases,
            node,
            bed,
            "install",
            &["kubelet-without-memory-qos"],
            || { install_nodemem(bed.cp, &mut node, &bed.client, POLICY_V135, &[]) }
        );
        nodemem_as_predicted(
            &mut phases,
            &mut node,
            &bed,
            installed.as_ref(),
            "v1.35.4 (v1.36 rules",
            &[],
        )
        .await;
        phases.finish();
    });
}
