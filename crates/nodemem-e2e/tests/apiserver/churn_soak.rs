//! A churn soak on one node (issue 18): the real agent with its production resync
//! (300 s, so every value comes from its reaction to events, not from a resync), 250
//! pods present, 10 created and 10 deleted every second through the apiserver, the
//! fake kubelet making and removing their cgroups. A verifier reads every pod's and
//! container's cgroup against the prediction for the pods on the API, round after
//! round: no cgroup may stay without its values longer than the goal. After the churn
//! the whole tree (QoS and node level included) equals the prediction. The agent's
//! resident memory at the start and the end, and no ERROR line in its log. The status
//! writes the churn cost (the agent's own count, on its default refresh of 30 s): at
//! most 0.1 per pod start, since pods that start or stop move only counters
//! (NODEMEM_SOAK_STATUS_REFRESH=0 writes every status at once, for comparison).
//!
//! One minute in `make test`; `NODEMEM_SOAK_SECONDS=600` for the figures in
//! BENCHMARKS.md (`make soak`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_testkit::Identity;
use serde_json::json;

use crate::agent::{
    agent_command_from, expected_on, set_config_on, simulated_node, tree_mismatches, AgentProcess,
};
use crate::common::{admin, cluster, eventually};

const NODE: &str = "soak-1";
const NS: &str = "soak";
const PRESENT: usize = 250;
const PER_SECOND: usize = 10;
/// The longest a pod's or container's cgroup may be seen without its values. The
/// agent's reaction is milliseconds (BENCHMARKS.md); the rest is the fake kubelet's
/// status update and the watch, on two shared cores.
const GOAL: Duration = Duration::from_secs(2);
/// The agent's default `--status-refresh-seconds`.
const STATUS_REFRESH: &str = "30";
/// Status writes per pod start at most (issue 32: the apiserver's cost of churn).
const WRITES_PER_START: f64 = 0.1;

fn pod(n: usize) -> serde_json::Value {
    // Mostly Burstable, some Guaranteed and BestEffort.
    let resources = match n % 7 {
        0 => json!({}),
        1 | 4 => {
            json!({"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "32Mi"}})
        }
        _ => json!({"requests": {"memory": "16Mi"}, "limits": {"memory": "64Mi"}}),
    };
    json!({"metadata": {"name": format!("churn-{n}")},
        "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "x", "resources": resources}]}})
}

/// Whether a cgroup is a pod's or a container's (not a QoS or node-level one, whose
/// sums move with every pod the churn adds).
fn per_pod(path: &str) -> bool {
    path.contains("-pod") || path.contains("/pod")
}

fn rss_kib(agent: &AgentProcess) -> u64 {
    nodemem_testkit::clients::cpu_ticks_and_rss_kib(agent.pid())
        .unwrap()
        .1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_churn_soak_keeps_every_pod_within_the_goal_and_the_agent_flat() {
    let seconds: u64 = std::env::var("NODEMEM_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let cp = cluster();
    let client = admin().await;
    let (tree, _kubelet) = simulated_node(&client, NODE, NS, CgroupDriver::Systemd).await;
    let qos = json!({"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation"});
    set_config_on(&client, NODE, "soak-1", qos.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cp.kubeconfig(&Identity::Agent(NODE.into())).await.unwrap();
    // The production resync (300 s): every value below comes from a reaction. The
    // production status refresh, so the writes counted are what a node costs.
    let mut args = nodemem_testkit::bed::agent_args(NODE, tree.root(), dir.path(), 300);
    let refresh = args
        .iter()
        .position(|a| a == "--status-refresh-seconds")
        .expect("the bed sets a refresh");
    // NODEMEM_SOAK_STATUS_REFRESH=0: every status written at once, as before counters
    // were coalesced (the figure BENCHMARKS.md compares with).
    let refresh_seconds =
        std::env::var("NODEMEM_SOAK_STATUS_REFRESH").unwrap_or_else(|_| STATUS_REFRESH.into());
    args[refresh + 1] = refresh_seconds.clone();
    let agent = AgentProcess::spawn(
        &mut agent_command_from(dir.path(), &kubeconfig, args),
        dir.path().join("agent.log"),
    );
    let status_writes = || {
        agent
            .metric("nodemem_agent_status_writes_total{result=\"ok\"}")
            .expect("the agent counts its status writes")
    };
    let logs = || agent.log();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for n in 0..PRESENT {
        crate::common::create_pod(&pods, pod(n)).await;
    }
    let predicted = async || expected_on(&client, NODE, CgroupDriver::Systemd, qos.clone()).await;
    eventually(
        "the 250 pods' values",
        Duration::from_secs(120),
        &logs,
        async || {
            let want = predicted().await;
            (want.len() > PRESENT && tree_mismatches(&tree, &want).is_empty()).then_some(())
        },
    )
    .await;
    let rss_start = rss_kib(&agent);
    let writes_start = status_writes();
    assert!(
        writes_start >= 1.0,
        "the 250 pods' status was written and counted"
    );

    // The churn: every second 10 new pods, and the 10 oldest deleted (the fake kubelet
    // removes their cgroups and confirms, as a kubelet does).
    let stop = Arc::new(AtomicBool::new(false));
    let created = Arc::new(AtomicUsize::new(PRESENT));
    let churn = tokio::spawn({
        let (pods, stop, created) = (pods.clone(), stop.clone(), created.clone());
        async move {
            let mut oldest = 0;
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            while !stop.load(Ordering::SeqCst) {
                tick.tick().await;
                for _ in 0..PER_SECOND {
                    let n = created.fetch_add(1, Ordering::SeqCst);
                    crate::common::create_pod(&pods, pod(n)).await;
                    pods.delete(&format!("churn-{oldest}"), &DeleteParams::default())
                        .await
                        .unwrap();
                    oldest += 1;
                }
            }
        }
    });

    // The verifier: per cgroup and file, since when it has been seen wrong.
    let mut wrong_since: BTreeMap<(String, String), Instant> = BTreeMap::new();
    let mut windows: Vec<Duration> = Vec::new();
    let mut rounds = 0;
    let mut late: Option<String> = None;
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(seconds) {
        let want: BTreeMap<_, _> = predicted()
            .await
            .into_iter()
            .filter(|((path, _), _)| per_pod(path))
            .collect();
        let now = Instant::now();
        let mut still_wrong = BTreeMap::new();
        for ((path, file), value) in &want {
            match tree.read(path, file) {
                Ok(have) if have == *value => {
                    if let Some(since) = wrong_since.get(&(path.clone(), file.clone())) {
                        windows.push(now - *since);
                    }
                }
                // Gone between the list and the read: deleted, nothing to hold.
                Err(_) => {}
                Ok(have) => {
                    let key = (path.clone(), file.clone());
                    let since = *wrong_since.get(&key).unwrap_or(&now);
                    if now - since > GOAL && late.is_none() {
                        late = Some(format!(
                            "{path}/{file} is {have}, predicted {value}, for {:?} ({:?} into the churn)",
                            now - since,
                            since - began
                        ));
                    }
                    still_wrong.insert(key, since);
                }
            }
        }
        wrong_since = still_wrong;
        rounds += 1;
        // A round a second: the verifier must not take the cores the agent, the fake
        // kubelet and the apiserver share with it.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!churn.is_finished(), "the churn stopped\n{}", logs());
    }
    stop.store(true, Ordering::SeqCst);
    churn.await.unwrap();
    let churned = created.load(Ordering::SeqCst) - PRESENT;
    let writes = status_writes() - writes_start;
    let per_start = writes / churned as f64;

    // Quiet: the whole tree, QoS and node level included, as predicted.
    eventually(
        "the whole tree as predicted after the churn",
        Duration::from_secs(60),
        &logs,
        async || {
            tree_mismatches(&tree, &predicted().await)
                .is_empty()
                .then_some(())
        },
    )
    .await;
    let rss_end = rss_kib(&agent);
    let log = logs();
    assert!(!log.contains(" ERROR "), "{log}");
    // Flat: what a running agent may grow by (allocator arenas settle after the first
    // minutes; a leak of a few hundred bytes per pod would show at ~10,000 pods).
    assert!(
        rss_end <= rss_start + rss_start / 4 + 4 * 1024,
        "resident memory {rss_start} KiB -> {rss_end} KiB"
    );
    windows.sort();
    let max = windows.last().copied().unwrap_or_default();
    let p = |q: f64| (!windows.is_empty()).then(|| nodemem_testkit::stats::percentile(&windows, q));
    eprintln!(
        "seen wrong then right: p50 {:?} p90 {:?} p99 {:?}",
        p(0.5),
        p(0.9),
        p(0.99)
    );
    if let Some(late) = late {
        if let Ok(keep) = std::env::var("NODEMEM_SOAK_LOG") {
            std::fs::write(keep, logs()).unwrap();
        }
        panic!("{late}\n{}", logs());
    }
    eprintln!(
        "soak {seconds} s: {churned} pods created and as many deleted, {rounds} verifier rounds, {} values seen wrong then right (longest {max:?}, goal {GOAL:?}), agent RSS {rss_start} KiB -> {rss_end} KiB, {writes} status writes = {per_start:.3} per pod start (goal <= {WRITES_PER_START})",
        windows.len()
    );
    if refresh_seconds == STATUS_REFRESH {
        assert!(
            per_start <= WRITES_PER_START,
            "{writes} status writes for {churned} pod starts"
        );
    }
}
