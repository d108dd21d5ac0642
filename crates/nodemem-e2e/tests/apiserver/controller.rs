//! The controller as the real binary on a control plane of its own (it governs every
//! node and config in the cluster, so it cannot share one with other tests), with a
//! real agent process per simulated node: three pools converge, a spec change rolls
//! out with at most maxUnavailable nodes in flight, and an OOM burst on an updated node
//! rolls its pool back by itself.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use nodemem_api::report::READY_SINCE;
use nodemem_api::{NodeMemoryConfig, NodeMemoryPolicy};
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_testkit::kubelet::FakeKubelet;
use nodemem_testkit::nodes::SimNode;
use nodemem_testkit::{ControlPlane, Identity};
use serde_json::{json, Value};

use crate::agent::{spawn_agent, AgentProcess};
use crate::common::{
    condition, create_namespace, create_pod, dynamic, eventually, node_states, own_control_plane,
    placements, pool_nodes, reports_good, spawn_controller, unwell,
};

fn kubectl(cp: &ControlPlane, args: &[&str]) -> String {
    nodemem_testkit::clients::kubectl(cp.admin_kubeconfig(), args).unwrap_or_else(|e| panic!("{e}"))
}

async fn wait<T>(
    what: &str,
    logs: &dyn Fn() -> String,
    check: impl AsyncFnMut() -> Option<T>,
) -> T {
    eventually(what, Duration::from_secs(90), logs, check).await
}

/// Every node's agent reports its revision good, within the wait; a node that was
/// not good when asked is named with its conditions on standard error (the report a
/// failure would need).
async fn all_good_again(client: &kube::Client, logs: &dyn Fn() -> String) {
    let first = unwell(client).await;
    if !first.is_empty() {
        eprintln!("not good when asked (waiting for them): {first:#?}");
    }
    wait("every node good again", logs, async || {
        unwell(client).await.is_empty().then_some(())
    })
    .await;
}

fn policy(name: &str, factor: f64, rollout: Value) -> Value {
    json!({
        "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {"nodemem.io/pool": name}},
            "memoryQoS": {"throttlingFactor": factor, "reservationPolicy": "TieredReservation"},
            "rollout": crate::common::no_ready_wait(rollout)},
    })
}

/// The controller as the real binary on a control plane of its own with a real agent
/// per simulated node: three pools converge; a new policy of the same priority over two
/// running pools takes no node, reports `Conflicting` with the nodes and governs
/// nothing, and nothing has moved after it is deleted; the agent DaemonSet's pods are
/// created by the controller-manager on the selected nodes only; a spec change rolls
/// out one node at a time, recorded from the watch; an OOM burst written into an
/// updated node's `memory.events` rolls its pool back by itself, with
/// `rolledBackRevision`, `Degraded=RolledBack` and Events; `kubectl get nmp` rows; a
/// second replica with newer agent settings waits for the Lease, takes over when the
/// leader is killed mid-rollout, resumes without moving a node early (every ready
/// config carries the leader's `nodemem.io/ready-since` stamp of its revision), updates
/// the DaemonSet and serves its metrics; under `enforcement: Kubelet` a Memory Manager
/// change cordons the node, a PodDisruptionBudget holds the drain until the node fails,
/// and without it the pod is evicted, the kubelet configured and the node uncordoned.
#[tokio::test]
async fn pools_converge_roll_out_in_batches_and_roll_back_on_an_oom_burst() {
    let cp = own_control_plane().await;
    let client = cp.client(&Identity::Admin).await.unwrap();

    // Three pools: a (3 nodes), b (2 nodes, with a pod each), c (1 node); and k (1
    // node, enforcement: Kubelet), whose policy comes last.
    let pools = [("ctl-a", 3), ("ctl-b", 2), ("ctl-c", 1), ("ctl-k", 1)];
    let names: Vec<(String, &str)> = pools
        .iter()
        .flat_map(|(pool, n)| (1..=*n).map(move |i| (format!("{pool}-{i}"), *pool)))
        .collect();
    let named: Vec<(&str, &str)> = names.iter().map(|(n, p)| (n.as_str(), *p)).collect();
    let trees = pool_nodes(&client, &named).await;
    // A node no policy selects: no config, no agent.
    SimNode::new("ctl-none-1").register(&client).await.unwrap();
    let _kubelet = FakeKubelet::start(client.clone(), trees.clone());
    create_namespace(&client, "work").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "work");
    for node in ["ctl-b-1", "ctl-b-2"] {
        crate::common::create_app_pod(&pods, node, "64Mi", "256Mi").await;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut agents: BTreeMap<String, AgentProcess> = BTreeMap::new();
    for (node, tree) in &trees {
        let kubeconfig = cp.kubeconfig(&Identity::Agent(node.clone())).await.unwrap();
        let node_dir = dir.path().join(node);
        std::fs::create_dir_all(&node_dir).unwrap();
        let agent = if node == "ctl-k-1" {
            // A kubelet to configure: its drop-in directory, a restart that succeeds,
            // one NUMA node.
            let numa = node_dir.join("sys/devices/system/node/node0");
            std::fs::create_dir_all(&numa).unwrap();
            std::fs::write(numa.join("meminfo"), "Node 0 MemTotal:       8388608 kB\n").unwrap();
            std::fs::create_dir_all(node_dir.join("kubelet/conf.d")).unwrap();
            // The agent reads the configuration it is given; one it cannot read
            // refuses Kubelet enforcement (KubeletConfigRead).
            std::fs::write(
                node_dir.join("kubelet/config.yaml"),
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
            )
            .unwrap();
            let args: Vec<std::ffi::OsString> = vec![
                "--kubelet-config".into(),
                node_dir.join("kubelet/config.yaml").into(),
                "--kubelet-config-dir".into(),
                node_dir.join("kubelet/conf.d").into(),
                "--kubelet-memory-manager-state".into(),
                node_dir.join("kubelet/memory_manager_state").into(),
                "--kubelet-restart-command".into(),
                "true".into(),
                "--kubelet-healthz-url".into(),
                "off".into(),
            ];
            crate::agent::spawn_agent_with(
                node,
                tree.root(),
                &node_dir,
                &kubeconfig,
                "agent.log",
                &args,
            )
        } else {
            spawn_agent(node, tree.root(), &node_dir, &kubeconfig, "agent.log")
        };
        agents.insert(node.clone(), agent);
    }
    let controller_kubeconfig = cp.kubeconfig(&Identity::Controller).await.unwrap();
    let spawn_controller = |identity: &str, image: &str| {
        spawn_controller(
            &controller_kubeconfig,
            identity,
            image,
            &dir.path().join(format!("{identity}.log")),
        )
    };
    let controller_log = dir.path().join("replica-a.log");
    let replica_a = spawn_controller("replica-a", "nodemem:test");
    let b_log_path = dir.path().join("replica-b.log");
    let logs = || {
        format!(
            "controller log:\n{}\nreplica b log:\n{}\nagent ctl-b-1 log:\n{}\nagent ctl-k-1 log:\n{}",
            std::fs::read_to_string(&controller_log).unwrap_or_default(),
            std::fs::read_to_string(&b_log_path).unwrap_or_default(),
            agents["ctl-b-1"].log(),
            agents["ctl-k-1"].log()
        )
    };

    let policies = dynamic::<NodeMemoryPolicy>(&client);
    let create = |p: Value| {
        let policies = policies.clone();
        async move {
            policies
                .create(&PostParams::default(), &serde_json::from_value(p).unwrap())
                .await
                .unwrap()
        }
    };
    create(policy("ctl-a", 0.9, json!({"maxUnavailable": 1}))).await;
    create(policy(
        "ctl-b",
        0.9,
        // The first node of each revision is the canary: its failure rolls the pool
        // back (one node's failure outside the canary would only hold it).
        json!({"maxUnavailable": 1, "canary": 1, "minReadySeconds": 20, "failurePolicy": "Rollback"}),
    ))
    .await;
    create(policy("ctl-c", 0.8, json!({}))).await;

    // 1. Every pool converges: each node's config carries its pool's policy and its
    //    agent reports it; each policy is Ready.
    let ready = |name: &'static str| {
        let policies = policies.clone();
        async move {
            let p = policies.get_status(name).await.ok()?;
            let s = p.data.get("status")?.clone();
            (condition(&s, "Ready")?["status"] == "True").then_some(s)
        }
    };
    for name in ["ctl-a", "ctl-c"] {
        let s = wait(&format!("{name} Ready"), &logs, async || ready(name).await).await;
        assert_eq!(s["matchedNodes"], s["readyNodes"], "{s:#}");
    }
    let b1 = wait("ctl-b Ready", &logs, async || ready("ctl-b").await).await;
    let states = node_states(&client).await;
    for (node, (policy, _, good)) in &states {
        assert!(
            node.starts_with(policy.as_str()) && *good,
            "{node}: {states:?}"
        );
    }
    assert_eq!(states.len(), 6, "no config for ctl-none-1 nor ctl-k-1 yet");
    // What a user sees with kubectl: progress per pool at a glance.
    let table = kubectl(&cp, &["get", "nmp"]);
    let row = |name: &str| -> Vec<String> {
        table
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no row for {name} in\n{table}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "FACTOR",
            "RESERVATION",
            "MANAGER",
            "ENFORCEMENT",
            "MATCHED",
            "UPDATED",
            "READY",
            "ROLLOUT",
            "AGE"
        ]
    );
    assert_eq!(&row("ctl-a")[5..9], ["3", "3", "3", "Complete"], "{table}");
    assert_eq!(&row("ctl-c")[5..9], ["1", "1", "1", "Complete"], "{table}");
    // The agent DaemonSet: the controller-manager creates its pods on the six selected
    // nodes only.
    let agent_pods: Api<Pod> = Api::namespaced(client.clone(), "nodemem-system");
    let targets = wait("agent pods on the selected nodes", &logs, async || {
        let list = agent_pods
            .list(&kube::api::ListParams::default().labels("app.kubernetes.io/name=nodemem-agent"))
            .await
            .ok()?;
        let mut nodes: Vec<String> = list
            .items
            .iter()
            .filter_map(nodemem_testkit::kubelet::affinity_node)
            .collect();
        nodes.sort();
        (nodes.len() >= 6).then_some(nodes)
    })
    .await;
    assert_eq!(
        targets,
        ["ctl-a-1", "ctl-a-2", "ctl-a-3", "ctl-b-1", "ctl-b-2", "ctl-c-1"]
    );
    let b_first = b1["revision"].as_str().unwrap().to_string();

    // 1b. A tie moves no node (issue 18: in the sandbox a second policy of the same
    //     priority took a running pool at once because its name sorted first): a new
    //     policy over pools a and c with the same priority and a name that sorts first
    //     governs nothing and says why; deleted, nothing has moved.
    let policy_status = |name: &'static str| {
        let policies = policies.clone();
        async move {
            policies
                .get_status(name)
                .await
                .ok()?
                .data
                .get("status")
                .cloned()
        }
    };
    // What "moved" means: a node's policy and revision. Its agent's health is
    // checked after (good again within the wait), with the reason when it was not.
    let before = placements(&client).await;
    let mut tie = policy("aaa-tie", 0.5, json!({"maxUnavailable": "100%"}));
    tie["spec"]["nodeSelector"] = json!({"matchExpressions": [
        {"key": "nodemem.io/pool", "operator": "In", "values": ["ctl-a", "ctl-c"]}]});
    create(tie).await;
    let tie_status = wait("aaa-tie reports the tie", &logs, async || {
        let s = policy_status("aaa-tie").await?;
        (s["conflictingNodes"] == 4).then_some(s)
    })
    .await;
    assert_eq!(tie_status["matchedNodes"], 0, "{tie_status:#}");
    let c = condition(&tie_status, "Conflicting").unwrap();
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("a tie moves no node")
            && c["message"]
                .as_str()
                .unwrap()
                .ends_with("ctl-a-1, ctl-a-2, ctl-a-3, ctl-c-1"),
        "{c}"
    );
    let a_status = wait("ctl-a reports the tie", &logs, async || {
        let s = policy_status("ctl-a").await?;
        (s["conflictingNodes"] == 3).then_some(s)
    })
    .await;
    assert_eq!(a_status["matchedNodes"], 3, "{a_status:#}");
    // Several reconciles later (one a second), every node still runs what it ran.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(placements(&client).await, before, "{}", logs());
    all_good_again(&client, &logs).await;
    policies
        .delete("aaa-tie", &Default::default())
        .await
        .unwrap();
    wait("the tie resolved on ctl-a", &logs, async || {
        let s = policy_status("ctl-a").await?;
        (s["conflictingNodes"] == 0 && condition(&s, "Conflicting").is_none()).then_some(())
    })
    .await;
    assert_eq!(placements(&client).await, before, "{}", logs());
    all_good_again(&client, &logs).await;

    // 2. A spec change in pool a: at most one node in flight at any time, all end on it.
    let patch = |name: &'static str, factor: f64| {
        let policies = policies.clone();
        async move {
            policies
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"memoryQoS": {"throttlingFactor": factor}}})),
                )
                .await
                .unwrap()
        }
    };
    let old_a = ready("ctl-a").await.unwrap()["revision"]
        .as_str()
        .unwrap()
        .to_string();
    // Every state the configs of pool a pass through, as the watch delivers them (the
    // watch starts before the change: the agents apply within milliseconds).
    let mut stream = Box::pin(kube::runtime::watcher::watcher(
        dynamic::<NodeMemoryConfig>(&client),
        Default::default(),
    ));
    let mut states: BTreeMap<String, (String, bool)> = BTreeMap::new();
    loop {
        match futures::StreamExt::next(&mut stream).await {
            Some(Ok(kube::runtime::watcher::Event::InitDone)) => break,
            Some(Ok(kube::runtime::watcher::Event::InitApply(c))) => {
                let name = c.metadata.name.clone().unwrap();
                if name.starts_with("ctl-a") {
                    let r = c.data["spec"]["revision"].as_str().unwrap().to_string();
                    states.insert(name, (r, true));
                }
            }
            _ => {}
        }
    }
    assert!(states.values().all(|(r, _)| *r == old_a));
    patch("ctl-a", 0.7).await;
    let new_a = wait("ctl-a's new revision", &logs, async || {
        let p = policies.get_status("ctl-a").await.ok()?;
        let r = p.data["status"]["revision"].as_str()?.to_string();
        (r != old_a).then_some(r)
    })
    .await;
    let mut max_in_flight = 0;
    let mut updated_order = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    while !states.values().all(|(r, good)| *r == new_a && *good) {
        assert!(
            Instant::now() < deadline,
            "ctl-a did not roll out\n{}",
            logs()
        );
        let Ok(Some(Ok(event))) = tokio::time::timeout(
            Duration::from_secs(5),
            futures::StreamExt::next(&mut stream),
        )
        .await
        else {
            continue;
        };
        let (kube::runtime::watcher::Event::Apply(c) | kube::runtime::watcher::Event::InitApply(c)) =
            event
        else {
            continue;
        };
        let name = c.metadata.name.clone().unwrap();
        if !name.starts_with("ctl-a") {
            continue;
        }
        let spec = &c.data["spec"];
        let good = reports_good(&c);
        let revision = spec["revision"].as_str().unwrap().to_string();
        if revision == new_a && states.get(&name).is_none_or(|s| s.0 != new_a) {
            updated_order.push(name.clone());
        }
        states.insert(name, (revision, good));
        let in_flight = states
            .values()
            .filter(|(r, good)| *r == new_a && !good)
            .count();
        max_in_flight = max_in_flight.max(in_flight);
    }
    assert_eq!(max_in_flight, 1, "one node at a time (maxUnavailable 1)");
    assert_eq!(updated_order, ["ctl-a-1", "ctl-a-2", "ctl-a-3"]);

    // 3. Pool b (Rollback, canary 1, minReadySeconds 20): its first updated node, the
    //    canary, has an OOM burst before it counts as ready; the pool returns to the
    //    first revision by itself.
    patch("ctl-b", 0.6).await;
    let (first_updated, second_rev) = wait(
        "a pool-b node on the new revision, applied",
        &logs,
        async || {
            let states = node_states(&client).await;
            states
                .iter()
                .find(|(n, (_, r, good))| n.starts_with("ctl-b") && *r != b_first && *good)
                .map(|(n, (_, r, _))| (n.clone(), r.clone()))
        },
    )
    .await;
    let pod = pods.get(&format!("app-{first_updated}")).await.unwrap();
    let uid = pod.metadata.uid.unwrap();
    let events = trees[&first_updated]
        .root()
        .join(nodemem_model::values::cgroup_layout::pod_dir(
            CgroupDriver::Systemd,
            nodemem_model::pod::qos::QosClass::Burstable,
            &uid,
        ))
        .join("memory.events");
    let calm = std::fs::read_to_string(&events).unwrap();
    std::fs::write(&events, calm.replace("oom_kill 0", "oom_kill 9")).unwrap();
    let rolled = wait("ctl-b rolled back", &logs, async || {
        let p = policies.get_status("ctl-b").await.ok()?;
        let s = p.data.get("status")?.clone();
        (s["rolledBackRevision"] == second_rev.as_str()).then_some(s)
    })
    .await;
    assert_eq!(
        rolled["failedNodeNames"],
        json!([first_updated]),
        "{rolled:#}"
    );
    wait(
        "every pool-b node back on the first revision",
        &logs,
        async || {
            let states = node_states(&client).await;
            states
                .iter()
                .filter(|(n, _)| n.starts_with("ctl-b"))
                .all(|(_, (_, r, _))| *r == b_first)
                .then_some(())
        },
    )
    .await;
    let degraded = wait("Degraded=True RolledBack", &logs, async || {
        let p = policies.get_status("ctl-b").await.ok()?;
        let s = p.data.get("status")?.clone();
        let d = condition(&s, "Degraded")?.clone();
        (d["reason"] == "RolledBack").then_some(d)
    })
    .await;
    assert_eq!(degraded["status"], "True");
    // The rollout's steps are Events on the policy.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::all(client.clone());
    let reasons: Vec<String> = events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("ctl-b"))
        .filter_map(|e| e.reason)
        .collect();
    assert!(reasons.iter().any(|r| r == "RollingBack"), "{reasons:?}");
    assert!(reasons.iter().any(|r| r == "NodesUpdating"), "{reasons:?}");

    // 4. A second replica waits for the Lease; when the leader dies it takes over and
    //    carries on (a change to pool c is rolled out by it).
    let holder = async || crate::common::lease_holder(&client).await;
    assert_eq!(holder().await.as_deref(), Some("replica-a"));
    // Replica b runs with newer agent settings (a new image): once it leads, it updates
    // the DaemonSet.
    let _replica_b = spawn_controller("replica-b", "nodemem:test-2");
    let b_log = dir.path().join("replica-b.log");
    wait("replica b to wait for the Lease", &logs, async || {
        std::fs::read_to_string(&b_log)
            .ok()?
            .contains("another replica leads")
            .then_some(())
    })
    .await;
    // The leader is killed in the middle of a rollout (pool a, one node at a time, each
    // ready only after 4 s): the new leader resumes from the API objects, never moves a
    // second node before the first is ready, and finishes.
    let old_a = ready("ctl-a").await.unwrap()["revision"]
        .as_str()
        .unwrap()
        .to_string();
    let mut stream = Box::pin(kube::runtime::watcher::watcher(
        dynamic::<NodeMemoryConfig>(&client),
        Default::default(),
    ));
    loop {
        if let Some(Ok(kube::runtime::watcher::Event::InitDone)) =
            futures::StreamExt::next(&mut stream).await
        {
            break;
        }
    }
    policies
        .patch(
            "ctl-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"memoryQoS": {"throttlingFactor": 0.65}, "rollout": {"minReadySeconds": 4}}})),
        )
        .await
        .unwrap();
    let mut spec_at: BTreeMap<String, Instant> = BTreeMap::new();
    let mut good_at: BTreeMap<String, Instant> = BTreeMap::new();
    let mut killed = None;
    let mut replica_a = Some(replica_a);
    let deadline = Instant::now() + Duration::from_secs(120);
    while good_at.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "pool a did not finish after the handover\n{}",
            logs()
        );
        let Ok(Some(Ok(event))) = tokio::time::timeout(
            Duration::from_secs(2),
            futures::StreamExt::next(&mut stream),
        )
        .await
        else {
            continue;
        };
        let kube::runtime::watcher::Event::Apply(c) = event else {
            continue;
        };
        let name = c.metadata.name.clone().unwrap();
        let spec = &c.data["spec"];
        if !name.starts_with("ctl-a") || spec["revision"] == old_a.as_str() {
            continue;
        }
        spec_at.entry(name.clone()).or_insert_with(Instant::now);
        let good = reports_good(&c);
        if good {
            good_at.entry(name.clone()).or_insert_with(Instant::now);
        }
        if killed.is_none() && spec_at.len() == 1 {
            drop(replica_a.take());
            killed = Some(Instant::now());
        }
    }
    let order: Vec<&String> = {
        let mut v: Vec<_> = spec_at.iter().collect();
        v.sort_by_key(|(_, t)| **t);
        v.into_iter().map(|(n, _)| n).collect()
    };
    assert_eq!(order, ["ctl-a-1", "ctl-a-2", "ctl-a-3"]);
    for pair in order.windows(2) {
        let waited = spec_at[pair[1]].duration_since(good_at[pair[0]]);
        // Condition times have one-second resolution.
        assert!(
            waited >= Duration::from_secs(3),
            "{} moved {waited:?} after {} was good",
            pair[1],
            pair[0]
        );
    }
    assert_eq!(
        holder().await.as_deref(),
        Some("replica-b"),
        "the new leader finished it"
    );
    assert!(std::fs::read_to_string(&b_log).unwrap().contains("leading"));
    // Its metrics say so too.
    let metrics = wait("the new leader's metrics", &logs, async || {
        crate::common::controller_metrics(&b_log).filter(|body| {
            body.contains("nodemem_controller_nodes{policy=\"ctl-a\",state=\"ready\"} 3")
        })
    })
    .await;
    assert!(
        metrics.contains("nodemem_controller_policies 3"),
        "{metrics}"
    );
    // Each ready node's config carries, for the leader after this one, when this one
    // saw its report turn good on its revision (issue 58: a controller that takes over
    // counts minReadySeconds from it, not from the agent's clock).
    let configs = dynamic::<NodeMemoryConfig>(&client);
    for node in ["ctl-a-1", "ctl-a-2", "ctl-a-3"] {
        let stamp = wait("the ready stamp on each config", &logs, async || {
            let c = configs.get(node).await.ok()?;
            let revision = c.data["spec"]["revision"].as_str()?.to_string();
            let stamp = c.metadata.annotations?.get(READY_SINCE)?.clone();
            stamp
                .strip_prefix(&format!("{revision} "))
                .and_then(nodemem_api::report::parse_time)
        })
        .await;
        let now = k8s_openapi::jiff::Timestamp::now().as_second();
        assert!(
            (now - 120..=now).contains(&stamp),
            "{node}: stamped at {stamp}, now {now}"
        );
    }

    // 5. enforcement: Kubelet with a Memory Manager change: the node is cordoned and
    //    drained through the Eviction API before its config changes. A
    //    PodDisruptionBudget that allows no disruption holds the drain until the
    //    deadline fails the node; without it the pod is evicted, the config written,
    //    the kubelet configured and the node given back to the scheduler.
    create_pod(
        &pods,
        json!({"metadata": {"name": "victim", "labels": {"app": "victim"}},
            "spec": {"nodeName": "ctl-k-1", "containers": [{"name": "app", "image": "x"}]}}),
    )
    .await;
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(client.clone(), "work");
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "victim"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "victim"}}}}))
        .unwrap(),
    )
    .await
    .unwrap();
    let kubelet_policy = |factor: f64| {
        json!({
            "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
            "metadata": {"name": "ctl-k"},
            "spec": {"nodeSelector": {"matchLabels": {"nodemem.io/pool": "ctl-k"}},
                "enforcement": "Kubelet",
                "memoryQoS": {"throttlingFactor": factor, "reservationPolicy": "TieredReservation"},
                "memoryManager": {"policy": "Static", "reservedMemory": [{"numaNode": 0, "limits": {"memory": "300Mi"}}]},
                "nodeReserved": {"kubeReserved": "100Mi", "systemReserved": "100Mi", "evictionHard": "100Mi"},
                "rollout": {"progressDeadlineSeconds": 15, "minReadySeconds": 0}},
        })
    };
    create(kubelet_policy(0.9)).await;
    let node_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let cordoned = async || {
        let n = node_api.get("ctl-k-1").await.ok()?;
        Some(n.spec?.unschedulable.unwrap_or(false))
    };
    wait("ctl-k-1 cordoned", &logs, async || {
        cordoned().await.filter(|c| *c).map(|_| ())
    })
    .await;
    let stopped = wait(
        "the drain held by the PDB fails the node",
        &logs,
        async || {
            let p = policies.get_status("ctl-k").await.ok()?;
            let s = p.data.get("status")?.clone();
            (condition(&s, "Degraded")?["reason"] == "MaxFailures").then_some(s)
        },
    )
    .await;
    assert_eq!(
        stopped["failedNodeNames"],
        json!(["ctl-k-1"]),
        "{stopped:#}"
    );
    assert!(
        pods.get_opt("victim").await.unwrap().is_some(),
        "the PDB kept the pod"
    );
    assert!(
        dynamic::<NodeMemoryConfig>(&client)
            .get_opt("ctl-k-1")
            .await
            .unwrap()
            .is_none(),
        "no config change before the drain"
    );
    // Without the PDB, a new revision drains, configures and uncordons.
    pdbs.delete("victim", &Default::default()).await.unwrap();
    patch("ctl-k", 0.85).await;
    wait("ctl-k Ready after the drain", &logs, async || {
        ready("ctl-k").await.map(|_| ())
    })
    .await;
    assert!(pods.get_opt("victim").await.unwrap().is_none(), "evicted");
    wait("ctl-k-1 uncordoned", &logs, async || {
        cordoned().await.filter(|c| !*c).map(|_| ())
    })
    .await;
    let n = node_api.get("ctl-k-1").await.unwrap();
    assert!(
        !n.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("nodemem.io/drain-for"),
        "the drain marks are gone"
    );
    let config = dynamic::<NodeMemoryConfig>(&client)
        .get("ctl-k-1")
        .await
        .unwrap();
    assert_eq!(config.data["spec"]["enforcement"], "Kubelet");
    assert!(
        std::fs::read_to_string(dir.path().join("ctl-k-1/kubelet/conf.d/~nodemem.conf"))
            .unwrap()
            .contains("memoryManagerPolicy: Static"),
        "the agent configured the kubelet"
    );
}
