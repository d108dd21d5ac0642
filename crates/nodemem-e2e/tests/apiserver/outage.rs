//! Control-plane outages with the real controller and real agents (issue 18), on a
//! control plane of their own (its apiserver and etcd are stopped):
//! - the apiserver stopped for 60 s: agents keep enforcing for the pods they know
//!   (drift repaired while it is down), nobody exits, and once it is back the agents
//!   reconnect and report, the controller resumes, no config is rewritten and no value
//!   is written twice;
//! - etcd restarted under load (pod churn and policy edits running): the rollout ends
//!   on the last revision on every node with every pod's values.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_testkit::cgroup_tree::CgroupTree;
use nodemem_testkit::kubelet::FakeKubelet;
use nodemem_testkit::Identity;
use serde_json::json;

use crate::agent::{configs, expected_on, tree_mismatches, AgentProcess};
use crate::common::{
    condition, create_namespace, eventually, own_control_plane, policies, pool_nodes, reports_good,
    spawn_controller,
};

/// The longest wait of a watch retrying at kube-runtime's `DefaultBackoff` cap: 30 s,
/// with jitter of up to as much again.
const WATCH_RETRY_AT_CAP: Duration = Duration::from_secs(60);

const POOL: &str = "outage";
const NODES: [&str; 2] = ["outage-1", "outage-2"];
const NS: &str = "outage-pods";
const OUTAGE: Duration = Duration::from_secs(60);

/// The policy's revision once its rollout is complete on both nodes: Ready, and each
/// node's config carries that revision, applied and healthy.
async fn rolled_out(client: &Client) -> Option<String> {
    let p = policies(client.clone()).get_status(POOL).await.ok()?;
    let s = p.data.get("status")?;
    let revision = s["revision"].as_str()?.to_string();
    let ready = condition(s, "Ready").is_some_and(|c| c["status"] == "True");
    if !ready || s["readyNodes"] != NODES.len() {
        return None;
    }
    for node in NODES {
        let c = configs(client.clone()).get_status(node).await.ok()?;
        if c.data["spec"]["revision"] != revision.as_str() || !reports_good(&c) {
            return None;
        }
    }
    Some(revision)
}

/// Each node's tree holds what its config's settings predict for the pods on the API.
async fn trees_match(client: &Client, trees: &BTreeMap<String, Arc<CgroupTree>>) -> bool {
    for (node, tree) in trees {
        if !tree_mismatches(tree, &predicted(client, node).await).is_empty() {
            return false;
        }
    }
    true
}

/// Per config: its generation (moves only when the controller rewrites its spec).
async fn config_generations(client: &Client) -> BTreeMap<String, Option<i64>> {
    let list = configs(client.clone())
        .list(&Default::default())
        .await
        .unwrap();
    list.items
        .into_iter()
        .map(|c| (c.metadata.name.clone().unwrap(), c.metadata.generation))
        .collect()
}

/// What the node's config predicts for the pods on the API: (cgroup, file) -> value.
async fn predicted(client: &Client, node: &str) -> BTreeMap<(String, String), String> {
    let c = configs(client.clone()).get(node).await.unwrap();
    expected_on(
        client,
        node,
        CgroupDriver::Systemd,
        c.data["spec"]["memoryQoS"].clone(),
    )
    .await
}

fn pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "x",
            "resources": {"requests": {"memory": "32Mi"}, "limits": {"memory": "128Mi"}}}]},
    }))
    .unwrap()
}

async fn set_factor(client: &Client, factor: f64) -> Result<(), kube::Error> {
    policies(client.clone())
        .patch(
            POOL,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"memoryQoS": {"throttlingFactor": factor}}})),
        )
        .await
        .map(|_| ())
}

fn writes_ok(agent: &AgentProcess) -> f64 {
    agent
        .metric(r#"nodemem_agent_writes_total{result="ok"}"#)
        .unwrap_or_else(|| panic!("no write counter; agent log:\n{}", agent.log()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_outage_and_an_etcd_restart_lose_nothing_and_write_nothing_twice() {
    let mut cp = own_control_plane().await;
    let client = cp.client(&Identity::Admin).await.unwrap();
    let trees = pool_nodes(&client, &NODES.map(|n| (n, POOL))).await;
    let _kubelet = FakeKubelet::start(client.clone(), trees.clone());
    create_namespace(&client, NS).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for node in NODES {
        for i in 0..4 {
            nodemem_testkit::clients::create_pod(&pods, &pod(&format!("{node}-app-{i}"), node))
                .await
                .unwrap();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut agents = crate::agent::spawn_agents(&cp, &trees, dir.path()).await;
    let controller_kubeconfig = cp.kubeconfig(&Identity::Controller).await.unwrap();
    let controller_log = |n: usize| dir.path().join(format!("controller-{n}.log"));
    // As its Deployment runs it: leader election on (a 6 s Lease).
    let spawn_controller = |n: usize| {
        spawn_controller(
            &controller_kubeconfig,
            "outage",
            "nodemem:test",
            &controller_log(n),
        )
    };
    let mut controller = spawn_controller(0);
    let logs = || {
        let mut out = String::new();
        for n in 0..4 {
            let log = std::fs::read_to_string(controller_log(n));
            out += &format!("controller log {n}:\n{}\n", log.unwrap_or_default());
        }
        for node in NODES {
            let log = std::fs::read_to_string(dir.path().join(node).join("agent.log"));
            out += &format!("\nagent {node} log:\n{}", log.unwrap_or_default());
        }
        out
    };
    policies(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
                "metadata": {"name": POOL},
                "spec": {"nodeSelector": {"matchLabels": {"nodemem.io/pool": POOL}},
                    "memoryQoS": {"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation"},
                    "rollout": {"maxUnavailable": 1, "minReadySeconds": 0}},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let first = eventually(
        "the first rollout",
        Duration::from_secs(90),
        &logs,
        async || rolled_out(&client).await,
    )
    .await;
    eventually(
        "the values on both nodes",
        Duration::from_secs(30),
        &logs,
        async || trees_match(&client, &trees).await.then_some(()),
    )
    .await;

    // 1. The apiserver stopped for 60 s.
    let configs_before = config_generations(&client).await;
    let predicted_before = predicted(&client, NODES[1]).await;
    let managed_before = configs(client.clone())
        .get_status(NODES[1])
        .await
        .unwrap()
        .data["status"]["managedPods"]
        .as_i64()
        .unwrap();
    let writes_before: BTreeMap<String, f64> = agents
        .iter()
        .map(|(n, a)| (n.clone(), writes_ok(a)))
        .collect();
    tokio::task::block_in_place(|| cp.stop_apiserver());
    let down = Instant::now();
    // Drift on a known pod while the apiserver is down: repaired from what the agent
    // knows (its resync is 1 s here).
    let tree = &trees[NODES[0]];
    let pod0 = pods.get(&format!("{}-app-0", NODES[0])).await;
    assert!(pod0.is_err(), "the apiserver still answers");
    let drifted = std::fs::read_dir(tree.root().join("kubepods.slice/kubepods-burstable.slice"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .expect("a burstable pod cgroup");
    let held = std::fs::read_to_string(drifted.join("memory.low")).unwrap();
    assert_ne!(held.trim(), "0", "{}", drifted.display());
    std::fs::write(drifted.join("memory.low"), "0").unwrap();
    eventually(
        "the drift repaired while the apiserver is down",
        Duration::from_secs(20),
        &logs,
        async || (std::fs::read_to_string(drifted.join("memory.low")).ok()? == held).then_some(()),
    )
    .await;
    let repaired = down.elapsed();
    let mut restarts = 0;
    while down.elapsed() < OUTAGE {
        for (node, a) in agents.iter_mut() {
            assert!(
                a.child_running(),
                "agent {node} exited during the outage\n{}",
                logs()
            );
        }
        // A leader that cannot renew its Lease for its whole duration exits, so that
        // two replicas never write at once (client-go's leader election does the
        // same); its Deployment starts it again, and it waits for the Lease.
        if let Ok(Some(status)) = controller.child.try_wait() {
            assert!(
                restarts == 0
                    && !status.success()
                    && std::fs::read_to_string(controller_log(0))
                        .unwrap()
                        .contains("lost the leader Lease"),
                "the controller exited ({status}) during the outage\n{}",
                logs()
            );
            restarts += 1;
            controller = spawn_controller(restarts);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::task::block_in_place(|| cp.start_apiserver()).expect("the apiserver back");
    let back = Instant::now();
    eprintln!(
        "apiserver down {:.1} s; drift repaired {:.2} s into the outage; the controller \
         restarted {restarts} time(s)",
        down.elapsed().as_secs_f64(),
        repaired.as_secs_f64()
    );
    // Back: a new pod is covered (the agents' watches reconnected) and reported.
    let client = cp.client(&Identity::Admin).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    nodemem_testkit::clients::create_pod(&pods, &pod("after-outage", NODES[1]))
        .await
        .unwrap();
    // The agents' watches retry with client-go's backoff (0.8 s doubling to 30 s,
    // jittered, reset after 2 min quiet), and a watch resumed on the restarted
    // apiserver gets 410 Expired once before it lists again: kind to a struggling
    // apiserver, slow to come back (measured and documented in docs/reliability.md).
    eventually(
        "the new pod reported",
        Duration::from_secs(180),
        &logs,
        async || {
            let c = configs(client.clone()).get_status(NODES[1]).await.ok()?;
            (c.data["status"]["managedPods"].as_i64() == Some(managed_before + 1)).then_some(())
        },
    )
    .await;
    let reconnect = back.elapsed();
    // The pod is counted from its object; its container's values wait for the kubelet's
    // container ID, which a pod watch still in its backoff (the known slowness above)
    // delivers only after its next relist. kube-runtime's backoff (client-go's): 30 s at
    // its cap after a minute of failures, plus up to as much again of jitter (backon adds
    // delay x rand[0, 1)), so up to 60 s to the first retry after the outage, which gets
    // 410 Expired and waits up to 60 s more before it lists: the budget is those two
    // retries. (60 s in all once failed here with the watch's retries at 19 and 32 s.)
    eventually(
        "the values after the outage",
        2 * WATCH_RETRY_AT_CAP,
        &logs,
        async || trees_match(&client, &trees).await.then_some(()),
    )
    .await;
    assert_eq!(
        rolled_out(&client).await.as_deref(),
        Some(first.as_str()),
        "{}",
        logs()
    );
    // Nothing written twice: the configs' specs unchanged; the agents wrote the one
    // repair and the new pod's values, nothing again.
    let configs_after = config_generations(&client).await;
    assert_eq!(configs_after, configs_before, "{}", logs());
    // On the second node: every value the new pod changed (its own, its container's,
    // the burstable slice's sum), once.
    let changed = predicted(&client, NODES[1])
        .await
        .into_iter()
        .filter(|(k, v)| predicted_before.get(k) != Some(v))
        .count();
    assert!(changed >= 2, "the new pod changed {changed} values");
    let new_pod_writes = changed as f64;
    for (node, a) in &agents {
        let expected = writes_before[node]
            + if node == NODES[0] {
                1.0
            } else {
                new_pod_writes
            };
        assert_eq!(writes_ok(a), expected, "{node}\n{}", logs());
    }

    // 2. etcd restarted under load: pods created and deleted, the policy edited.
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let (pods, stop) = (pods.clone(), stop.clone());
        tokio::spawn(async move {
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let node = NODES[n % NODES.len()];
                let _ = pods
                    .create(&PostParams::default(), &pod(&format!("churn-{n}"), node))
                    .await;
                if n >= 4 {
                    let _ = pods
                        .delete(&format!("churn-{}", n - 4), &DeleteParams::default())
                        .await;
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            n
        })
    };
    let edits = {
        let (client, stop) = (client.clone(), stop.clone());
        tokio::spawn(async move {
            let mut k = 0;
            while !stop.load(Ordering::Relaxed) {
                let _ = set_factor(&client, 0.5 + 0.05 * f64::from(k % 8)).await;
                k += 1;
                tokio::time::sleep(Duration::from_millis(1500)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    tokio::task::block_in_place(|| cp.restart_etcd(Duration::from_secs(5))).expect("etcd back");
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::Relaxed);
    let churned = churn.await.unwrap();
    edits.await.unwrap();
    set_factor(&client, 0.95).await.unwrap();
    // etcd down for 5 s is longer than the leader's renew deadline (4 s): it may stop
    // leading, and its Deployment starts it again (here: the test).
    let mut log_n = restarts;
    let last = eventually(
        "the last revision everywhere",
        Duration::from_secs(120),
        &logs,
        async || {
            if let Ok(Some(status)) = controller.child.try_wait() {
                let text = std::fs::read_to_string(controller_log(log_n)).unwrap_or_default();
                assert!(
                    !status.success()
                        && log_n < 3
                        && text.contains("the Lease was not renewed within its renew deadline"),
                    "the controller exited ({status}) after the etcd restart:\n{text}"
                );
                log_n += 1;
                controller = spawn_controller(log_n);
                return None;
            }
            let p = policies(client.clone()).get_status(POOL).await.ok()?;
            if p.data["status"]["observedGeneration"] != p.metadata.generation? {
                return None;
            }
            rolled_out(&client).await
        },
    )
    .await;
    // Each node carries the last edit's settings, not one from the churn.
    for node in NODES {
        let c = configs(client.clone()).get(node).await.unwrap();
        let factor = &c.data["spec"]["memoryQoS"]["throttlingFactor"];
        assert_eq!(factor, 0.95, "{node}\n{}", logs());
    }
    eventually(
        "every pod's values after the etcd restart",
        Duration::from_secs(60),
        &logs,
        async || trees_match(&client, &trees).await.then_some(()),
    )
    .await;
    for (node, a) in agents.iter_mut() {
        assert!(a.child_running(), "agent {node} exited\n{}", logs());
    }
    eprintln!(
        "after the apiserver came back, a new pod was covered in {:.1} s; etcd restarted \
         under load: {churned} pods churned; every node on {last}",
        reconnect.as_secs_f64()
    );
}
