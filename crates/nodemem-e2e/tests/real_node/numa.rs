//! Item 5 of issue 17: NUMA on a real kubelet, the last phase of the v1.35 kubelet's
//! part of the systemd node and of the v1.37 cgroupfs node (two NUMA nodes each),
//! the oldest and the newest Memory Manager: the pool's policy becomes one
//! with the Static Memory Manager: first `enforcement: Agent`, where the agent pins
//! Guaranteed containers itself (cpuset.mems, and AllowedMemoryNodes for systemd), then
//! `enforcement: Kubelet`, where the controller drains the node and the agent brings the
//! real kubelet up with the Static Memory Manager (its drop-in, the
//! kubelet's state file removed, the kubelet restarted through systemd's D-Bus API
//! from the agent's pod). Both times the node's cpuset.mems, and the kubelet's own
//! `memory_manager_state`, must be what `nodemem simulate --numa` predicts.
//!
//! Where it runs and what it checks: the Memory Manager's code differs in each version:
//! v1.36 added pod-level resources to the Static policy (`AllocatePod`, the pod scope,
//! a new state validation), v1.37 gave `AllocatePod` and the hints the pod's lifecycle
//! operation, `pkg/kubelet/cm/memorymanager`; so on each: the last phase of the v1.35
//! kubelet and of the v1.37 node, after kubelet-mode, which the agent first leaves: its
//! drop-in removed, the kubelet restarted without it; on the v1.36 kubelet before the
//! token phase, from the installed Agent policy and back to it at the end (the agent
//! leaves Kubelet mode: its drop-in gone, the kubelet's `memory_manager_state` says
//! `None`); the pods of `default` removed first): the pool's policy becomes one with
//! the Static Memory Manager; under `enforcement: Agent` the agent pins three
//! Guaranteed pods sized to need both NUMA nodes: cpuset.mems and cpuset.mems.effective
//! of each container are what `nodemem simulate --numa` predicts for the topology the
//! agent reported, on the systemd driver also after `systemctl daemon-reload`
//! (AllowedMemoryNodes); then `enforcement: Kubelet`: the controller drains the node,
//! the agent writes its drop-in into the kubelet's `--config-dir`, removes
//! `memory_manager_state` and restarts `kubelet.service` through systemd's D-Bus API
//! from its pod, the node comes back uncordoned; three new Guaranteed pods: the
//! kubelet's own `memory_manager_state` (each container's NUMA affinity, and each NUMA
//! node's memory map: total, systemReserved, allocatable, reserved, free) and
//! cpuset.mems.effective equal simulate's prediction.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use kube::api::Api;
use nodemem_model::numa::cpuset_mems;
use nodemem_testkit::clients::kubectl;
use nodemem_testkit::real_node::{Driver, KUBELET_CONFIG_DIR};
use serde_json::{json, Value};

use nodemem_api::NodeMemoryConfig;
use nodemem_testkit::real_node::RealNode;

use super::{
    config_applied, container_dir, eventually, kubelet_invocation, kubelet_took_over,
    node_read_all, node_values_become, pod_dir, simulate_node, start_pods, Bed, Installed,
};

/// The pool's policy (the node's pool, `real`: this phase replaces the one before): the
/// Static Memory Manager with the kubelet's hard eviction
/// threshold (50Mi, the node's evictionHard) reserved on NUMA node 0, which is the
/// kubelet's sum rule (reservedMemory = kubeReserved + systemReserved + evictionHard).
/// `memory_qos`: the policy's memoryQoS block, if any (a v1.35 kubelet can express
/// Memory QoS only as HardReservation, so its pool leaves Memory QoS off).
fn numa_policy(enforcement: &str, memory_qos: &str) -> String {
    format!(
        "apiVersion: nodemem.io/v1alpha1
kind: NodeMemoryPolicy
metadata:
  name: real
spec:
  nodeSelector:
    matchLabels:
      nodemem.io/pool: real
{memory_qos}  memoryManager:
    policy: Static
    reservedMemory:
    - numaNode: 0
      limits:
        memory: 50Mi
  enforcement: {enforcement}
  rollout:
    minReadySeconds: 0
"
    )
}

/// Guaranteed pods, created one after the other (the kubelet and nodemem admit in
/// that order; their names sort the same way, which is simulate's order): the first
/// takes most of one NUMA node, so the second must go to the other, and the third fits
/// beside one of them.
fn guaranteed_pods(node: &str, tag: &str) -> Vec<core::Pod> {
    [("a", "512Mi"), ("b", "512Mi"), ("c", "256Mi")]
        .into_iter()
        .map(|(n, memory)| {
            serde_json::from_value(json!({
                "metadata": {"name": format!("numa-{tag}-{n}")},
                "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "w", "image": "nodemem.local/workload:1",
                        "imagePullPolicy": "Never", "args": ["-allocate", "8Mi"],
                        "resources": {"requests": {"memory": memory, "cpu": super::GUARANTEED_CPU},
                                      "limits": {"memory": memory, "cpu": super::GUARANTEED_CPU}}}]}
            }))
            .unwrap()
        })
        .collect()
}

/// The topology the agent reported (its NodeMemoryConfig's node facts), as
/// `simulate --numa` reads it.
fn topology_file(facts: &nodemem_api::config::NodeFacts, work: &Path) -> PathBuf {
    let mut text = String::from("numaNodes:\n");
    for n in &facts.numa_nodes {
        text.push_str(&format!("- id: {}\n  memory:\n", n.id));
        for (kind, m) in &n.memory {
            text.push_str(&format!("    {kind}: \"{}\"\n", m.capacity));
        }
    }
    let path = work.join("topology.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A pinned container as simulate predicts it and as it runs.
struct Pinned {
    pod: String,
    uid: String,
    /// The container's cgroup on the node.
    dir: String,
    /// simulate's cpuset.mems.
    mems: String,
}

/// The `tag` pods started one after the other (the order the kubelet and nodemem admit
/// them in), then `simulate --numa` for `policy` on the reported `topology`: its output
/// and its pinning of those pods' containers.
async fn pods_started_and_predicted(
    bed: &Bed<'_>,
    node: &str,
    policy: &Path,
    topology: &Path,
    tag: &str,
) -> (Value, Vec<Pinned>) {
    for p in guaranteed_pods(node, tag) {
        start_pods(&bed.client, &[p]).await;
    }
    let work = policy.parent().expect("the policy's directory");
    let sim = simulate_node(bed.admin(), policy, work, bed.driver, node, Some(topology));
    let pins = predicted_pins(&bed.client, bed.driver, &sim, tag).await;
    (sim, pins)
}

/// simulate's pinning of the `tag` pods' containers, with their cgroups on the node.
async fn predicted_pins(
    client: &kube::Client,
    driver: Driver,
    sim: &Value,
    tag: &str,
) -> Vec<Pinned> {
    let pods: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    let mut out = Vec::new();
    for pod in sim["pods"].as_array().unwrap() {
        let name = pod["name"].as_str().unwrap();
        if !name.starts_with(&format!("numa-{tag}-")) {
            continue;
        }
        let container = &pod["containers"][0];
        let mems = container["cgroup"]["cpuset.mems"]
            .as_str()
            .unwrap_or_else(|| panic!("simulate pins {name}: {container}"))
            .to_string();
        let uid = pod["uid"].as_str().unwrap().to_string();
        let id = super::container_id(&pods, name).await;
        assert!(!id.is_empty(), "{name} has a container");
        let dir = container_dir(driver, &pod_dir(driver, "Guaranteed", &uid), &id);
        out.push(Pinned {
            pod: name.to_string(),
            uid,
            dir,
            mems,
        });
    }
    assert_eq!(out.len(), 3, "three pinned pods");
    let nodes: std::collections::BTreeSet<&str> = out.iter().map(|p| p.mems.as_str()).collect();
    assert!(
        nodes.len() >= 2,
        "the pods are sized to need both NUMA nodes: {nodes:?}"
    );
    out
}

/// Phase `numa` on the v1.36 kubelet, from nodemem as installed (`enforcement: Agent`,
/// Memory QoS at the policy's defaults, no Memory Manager) and back to it, so that the
/// phases after it (the token, the give-back, helm, the v1.35 kubelet) find the node
/// as before: the pool's policy becomes the Static Memory Manager under Agent, then
/// Kubelet (the drop-in carrying Memory QoS and the Memory Manager together); then
/// the installed policy again: the agent leaves Kubelet mode, its drop-in removed, the
/// Memory Manager's state removed and the kubelet restarted through systemd, which
/// comes back with the None policy.
pub(crate) async fn pins_and_back_to_agent(
    node: &mut RealNode,
    bed: &Bed<'_>,
    installed: &Installed,
) {
    super::remove_pods(&bed.client, &Default::default())
        .await
        .unwrap_or_else(|left| panic!("the pods of default not gone: {left:?}"));
    let configs: Api<NodeMemoryConfig> = Api::all(bed.client.clone());
    let before = configs.get(&node.name).await.unwrap().spec.revision;
    pins_as_predicted(node, bed, installed, "", Some(&before)).await;

    // Back to the installed policy: Kubelet mode left.
    super::remove_pods(&bed.client, &Default::default())
        .await
        .unwrap_or_else(|left| panic!("the pinned pods not gone: {left:?}"));
    let numa_revision = configs.get(&node.name).await.unwrap().spec.revision;
    let kubelet_before = kubelet_invocation(node);
    let restart_from = super::node_clock(node);
    let (client, admin) = (&bed.client, bed.admin());
    kubectl(admin, &["apply", "-f", installed.policy.to_str().unwrap()]).unwrap();
    config_applied(
        client,
        admin,
        &node.name,
        Some(&numa_revision),
        Duration::from_secs(300),
    )
    .await;
    super::node_ready_after_restart(node, client, restart_from).await;
    assert_ne!(
        kubelet_invocation(node),
        kubelet_before,
        "leaving Kubelet mode did not restart the kubelet"
    );
    let (out, code) = node
        .run(&format!(
            "test ! -e {KUBELET_CONFIG_DIR}/~nodemem.conf && cat /var/lib/kubelet/memory_manager_state"
        ))
        .unwrap();
    assert_eq!(code, 0, "the drop-in is still there: {out}");
    let state: Value = serde_json::from_str(&out).expect(&out);
    assert_eq!(
        state["policyName"], "None",
        "the kubelet back without the Static Memory Manager: {state}"
    );
}

/// Phase `numa` on the v1.35 kubelet and on the v1.37 node, after `kubelet-mode`: the
/// pool's policy becomes the Static Memory Manager under `enforcement: Agent` (Memory
/// QoS off: v1.35 could express it only as HardReservation), so the agent first leaves
/// Kubelet mode (its drop-in removed, the kubelet restarted without it). The pods of
/// `default` go first: a Guaranteed one left there would take its NUMA node's memory.
pub(crate) async fn pins_after_kubelet_mode(
    node: &mut RealNode,
    bed: &Bed<'_>,
    installed: &Installed,
) {
    super::remove_pods(&bed.client, &Default::default())
        .await
        .unwrap_or_else(|left| panic!("the pods of default not gone: {left:?}"));
    let configs: Api<NodeMemoryConfig> = Api::all(bed.client.clone());
    let before = configs.get(&node.name).await.unwrap().spec.revision;
    pins_as_predicted(
        node,
        bed,
        installed,
        "  memoryQoS:\n    enabled: false\n",
        Some(&before),
    )
    .await;
}

/// The pool's policy with the Static Memory Manager, first under `enforcement: Agent`
/// (the agent pins), then under `enforcement: Kubelet` (the kubelet pins after the
/// controller's drain and the agent's restart); both times the node runs what
/// `simulate --numa` predicts. `superseded`: the config's revision before this phase.
async fn pins_as_predicted(
    node: &mut RealNode,
    bed: &Bed<'_>,
    installed: &Installed,
    memory_qos: &str,
    superseded: Option<&str>,
) {
    let name = node.name.clone();
    let name = name.as_str();
    let (client, admin) = (&bed.client, bed.admin());
    let work = installed.work.path();
    let agent_policy = work.join("policy-numa-agent.yaml");
    std::fs::write(&agent_policy, numa_policy("Agent", memory_qos)).unwrap();
    let applied = Instant::now();
    kubectl(admin, &["apply", "-f", agent_policy.to_str().unwrap()]).unwrap();
    // Leaving Kubelet mode (the v1.35 node) restarts the kubelet: 300 s as for every
    // switch that restarts it.
    let status = config_applied(client, admin, name, superseded, Duration::from_secs(300)).await;
    eprintln!(
        "the Agent revision applied {:?} after the policy",
        applied.elapsed()
    );
    super::node_ready(client, name).await;
    eprintln!("the node Ready {:?} after the policy", applied.elapsed());

    let agent_revision = status.observed_revision.clone();
    let topology = topology_file(&status.node.expect("node facts"), work);
    eprintln!("{}", std::fs::read_to_string(&topology).unwrap());

    // enforcement: Agent. The kubelet's Memory Manager is None; the agent pins.
    let (_, pins) = pods_started_and_predicted(bed, name, &agent_policy, &topology, "agent").await;
    let wanted: Vec<(String, String)> = pins
        .iter()
        .flat_map(|p| {
            ["cpuset.mems", "cpuset.mems.effective"]
                .map(|f| (format!("{}/{f}", p.dir), p.mems.clone()))
        })
        .collect();
    let pairs: Vec<(&String, &String)> = wanted.iter().map(|(p, v)| (p, v)).collect();
    node_values_become(node, &pairs, "the agent's pinning is not simulate's");
    eprintln!(
        "the agent's pins in place {:?} after the policy",
        applied.elapsed()
    );
    for p in &pins {
        eprintln!("agent pinned {} to NUMA node(s) {}", p.pod, p.mems);
    }
    // systemd's record holds the pinning (systemd driver): a reload re-applies
    // AllowedMemoryNodes, which must be the agent's. On cgroupfs no unit holds a pod.
    if bed.driver == Driver::Systemd {
        // Two minutes at the node's pace: once (2026-11-28, v1.35 node) the reload had
        // not returned after the minute a node request gets by default.
        let (out, code) = node
            .run_within(
                "systemctl daemon-reload && sleep 3",
                super::pace::paced(Duration::from_secs(120)),
            )
            .unwrap();
        assert_eq!(code, 0, "{out}");
        let paths: Vec<&str> = wanted.iter().map(|(p, _)| p.as_str()).collect();
        let read = node_read_all(node, &paths);
        for (path, want) in &wanted {
            assert_eq!(read.get(path), Some(want), "{path} after daemon-reload");
        }
    }

    // enforcement: Kubelet. The controller drains the node (the pinned pods lose
    // their guarantees when the Memory Manager changes), the agent writes its
    // drop-in, removes the kubelet's Memory Manager state and restarts the kubelet
    // through systemd; the node comes back uncordoned.
    let kubelet_policy = work.join("policy-numa-kubelet.yaml");
    std::fs::write(&kubelet_policy, numa_policy("Kubelet", memory_qos)).unwrap();
    let kubelet_before = kubelet_invocation(node);
    let switched = Instant::now();
    kubectl(admin, &["apply", "-f", kubelet_policy.to_str().unwrap()]).unwrap();
    let pods: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    eventually(
        "the node drained of its pinned pods",
        Duration::from_secs(240),
        || async {
            let left = pods.list(&Default::default()).await.ok()?.items;
            left.iter()
                .all(|p| {
                    !p.metadata
                        .name
                        .as_deref()
                        .unwrap_or_default()
                        .starts_with("numa-agent-")
                })
                .then_some(())
        },
    )
    .await;
    // The agent restarted the kubelet (its pass says so; a later pass, such as the
    // one the kubelet's new start brings, says the drop-in is in effect).
    kubelet_took_over(node, bed, agent_revision.as_deref(), &kubelet_before).await;
    let nodes: Api<core::Node> = Api::all(client.clone());
    eventually("the node uncordoned", Duration::from_secs(180), || async {
        let n = nodes.get(name).await.ok()?;
        (!n.spec?.unschedulable.unwrap_or(false)).then_some(())
    })
    .await;
    eprintln!(
        "drained, kubelet restarted with the Static Memory Manager, uncordoned {:?} after the switch",
        switched.elapsed()
    );
    let (dropin, code) = node
        .run(&format!("cat {KUBELET_CONFIG_DIR}/~nodemem.conf"))
        .unwrap();
    assert_eq!(code, 0, "{dropin}");
    assert!(dropin.contains("memoryManagerPolicy: Static"), "{dropin}");

    let (sim, pins) =
        pods_started_and_predicted(bed, name, &kubelet_policy, &topology, "kubelet").await;
    let (state, code) = node
        .run("cat /var/lib/kubelet/memory_manager_state")
        .unwrap();
    assert_eq!(code, 0, "{state}");
    let state: Value = serde_json::from_str(&state).expect(&state);
    assert_eq!(state["policyName"], "Static", "{state}");
    let effective: Vec<String> = pins
        .iter()
        .map(|p| format!("{}/cpuset.mems.effective", p.dir))
        .collect();
    let paths: Vec<&str> = effective.iter().map(String::as_str).collect();
    let read = node_read_all(node, &paths);
    for (p, path) in pins.iter().zip(&effective) {
        // The kubelet's own record of the container.
        let blocks = state["entries"][&p.uid]["w"]
            .as_array()
            .unwrap_or_else(|| panic!("no Memory Manager entry for {}: {state}", p.pod));
        let memory = blocks
            .iter()
            .find(|b| b["type"] == "memory")
            .unwrap_or_else(|| panic!("{}: {blocks:?}", p.pod));
        let affinity: Vec<i64> = memory["numaAffinity"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_i64().unwrap())
            .collect();
        assert_eq!(
            cpuset_mems(&affinity),
            p.mems,
            "{}: the kubelet's Memory Manager pinned it to {affinity:?}, simulate predicts {}",
            p.pod,
            p.mems
        );
        assert_eq!(
            read.get(path),
            Some(&p.mems),
            "{}: {path} on the node",
            p.pod
        );
        eprintln!("kubelet pinned {} to NUMA node(s) {}", p.pod, p.mems);
    }
    // The kubelet's memory map per NUMA node (total, systemReserved, allocatable,
    // reserved, free) is simulate's.
    let predicted: BTreeMap<String, Value> = sim["numa"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].to_string(), n["memoryMap"]["memory"].clone()))
        .collect();
    for (id, want) in &predicted {
        let got = &state["machineState"][id]["memoryMap"]["memory"];
        assert_eq!(
            got, want,
            "NUMA node {id}: the kubelet's memory map, simulate's"
        );
    }
    assert_eq!(predicted.len(), 2, "{predicted:?}");
}
