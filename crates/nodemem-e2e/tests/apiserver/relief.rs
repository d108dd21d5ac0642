//! `memoryQoS.relief` on a real agent against the real apiserver (issue 19; the real
//! kernel's side is in the real-node tier): a container stalled on memory at its
//! memory.high gets its memory.high raised to its memory.max for the relief period,
//! then restored, with an Event on the pod each time, the node unhealthy for the
//! revision; choking again within the repeat window is reported, not relieved. A
//! container just as stalled whose memory is page cache is left alone. The simulated
//! tree has no PSI triggers, so the agent reads these containers on every tick: the
//! decisions are the same code as on a node.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::Api;
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_testkit::Identity;
use serde_json::json;

use crate::agent::{app_cgroup, apply_config, configs, simulated_node, spawn_agent};
use crate::common::{admin, cluster, condition, create_pod, eventually};

const NODE: &str = "relief-1";
const NS: &str = "relief-pods";
const MI: i64 = 1 << 20;

/// `full avg10` of a memory.pressure file as the kernel writes it.
fn pressure(full_avg10: f64) -> String {
    format!(
        "some avg10={full_avg10:.2} avg60=0.00 avg300=0.00 total=1000\nfull avg10={full_avg10:.2} avg60=0.00 avg300=0.00 total=1000\n"
    )
}

async fn pod_events(client: &kube::Client, pod: &str, reason: &str) -> Vec<Event> {
    nodemem_testkit::clients::events_about(client, NS, pod, reason).await
}

/// `memoryQoS.relief` on a real agent: a container stalled at its memory.high is raised
/// to its memory.max no sooner than sustainedSeconds, with a `MemoryHighRelieved`
/// Event, `status.relief` and `Healthy=False ReliefNeeded`, kept over resyncs, restored
/// after the period, then `ReliefRefused` when it chokes again; the page-cache
/// container is never touched.
#[tokio::test]
async fn a_choking_container_is_relieved_then_restored_then_reported() {
    let cp = cluster();
    let client = admin().await;
    let (tree, _kubelet) = simulated_node(&client, NODE, NS, CgroupDriver::Systemd).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for name in ["thrash", "cache"] {
        create_pod(
            &pods,
            json!({"metadata": {"name": name},
                "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "x",
                    "resources": {"requests": {"memory": "64Mi"}, "limits": {"memory": "256Mi"}}}]}}),
        )
        .await;
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cp.kubeconfig(&Identity::Agent(NODE.into())).await.unwrap();
    let agent = spawn_agent(NODE, tree.root(), dir.path(), &kubeconfig, "agent.log");
    let logs = || agent.log();
    let (thrash, cache) = (
        app_cgroup(&pods, "thrash").await,
        app_cgroup(&pods, "cache").await,
    );
    eventually(
        "the containers' cgroups",
        Duration::from_secs(60),
        &logs,
        async || {
            (tree.root().join(&thrash).is_dir() && tree.root().join(&cache).is_dir()).then_some(())
        },
    )
    .await;
    // memory.high = 64Mi + 0.5 x 192Mi = 160Mi.
    apply_config(
        &client,
        NODE,
        json!({"policy": "relief-test", "revision": "rev-1",
            "memoryQoS": {"throttlingFactor": 0.5, "reservationPolicy": "None",
                "relief": {"fullPressurePercent": 10, "sustainedSeconds": 10,
                    "reliefSeconds": 10, "repeatWindowSeconds": 600}}}),
    )
    .await;
    let high = (160 * MI).to_string();
    eventually(
        "memory.high written",
        Duration::from_secs(60),
        &logs,
        async || (tree.read(&thrash, "memory.high").ok()? == high).then_some(()),
    )
    .await;
    assert_eq!(tree.read(&cache, "memory.high").unwrap(), high);

    // thrash: at memory.high, stalled half the time; cache: as stalled, but its 200Mi
    // are page cache beside a 20Mi working set.
    tree.set_usage(&thrash, 160 * MI, 0).unwrap();
    tree.set_usage(&cache, 220 * MI, 200 * MI).unwrap();
    for c in [&thrash, &cache] {
        std::fs::write(tree.root().join(c).join("memory.pressure"), pressure(50.0)).unwrap();
    }
    let started = std::time::Instant::now();
    let raised = (256 * MI).to_string();
    eventually(
        "thrash relieved",
        Duration::from_secs(60),
        &logs,
        async || (tree.read(&thrash, "memory.high").ok()? == raised).then_some(()),
    )
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(9),
        "relieved after {:?}: sooner than sustainedSeconds",
        started.elapsed()
    );
    let relieved = eventually(
        "the MemoryHighRelieved event",
        Duration::from_secs(30),
        &logs,
        async || {
            pod_events(&client, "thrash", "MemoryHighRelieved")
                .await
                .pop()
        },
    )
    .await;
    let note = relieved.note.unwrap_or_default();
    assert!(
        note.starts_with(&format!(
            "container app: memory.high raised from {high} to {raised}"
        )),
        "{note}"
    );
    assert_eq!(relieved.type_.as_deref(), Some("Warning"));
    let status = eventually(
        "relief in status",
        Duration::from_secs(30),
        &logs,
        async || {
            let s = configs(client.clone()).get_status(NODE).await.ok()?.data["status"].clone();
            (s["relief"]["relieved"][0]["pod"] == format!("{NS}/thrash")).then_some(s)
        },
    )
    .await;
    assert_eq!(status["relief"]["reliefs"], 1, "{status:#}");
    assert_eq!(status["relief"]["relieved"][0]["memoryHigh"], 160 * MI);
    assert_eq!(status["relief"]["relieved"][0]["raisedTo"], 256 * MI);
    // A revision that needs relief is not healthy (maxReliefs: 0 by default).
    let healthy = condition(&status, "Healthy").unwrap();
    assert_eq!(
        (healthy["status"].as_str(), healthy["reason"].as_str()),
        (Some("False"), Some("ReliefNeeded")),
        "{status:#}"
    );
    assert_eq!(agent.metric("nodemem_agent_relieved_containers"), Some(1.0));
    // The next resync repairs drift, but not relief: it stays raised.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(tree.read(&thrash, "memory.high").unwrap(), raised);

    // Ten seconds later it goes back, and still choking it is reported, not relieved.
    eventually(
        "memory.high restored",
        Duration::from_secs(60),
        &logs,
        async || (tree.read(&thrash, "memory.high").ok()? == high).then_some(()),
    )
    .await;
    eventually(
        "the MemoryHighRestored event",
        Duration::from_secs(30),
        &logs,
        async || {
            pod_events(&client, "thrash", "MemoryHighRestored")
                .await
                .pop()
        },
    )
    .await;
    let refused = eventually(
        "the ReliefRefused event",
        Duration::from_secs(60),
        &logs,
        async || pod_events(&client, "thrash", "ReliefRefused").await.pop(),
    )
    .await;
    assert!(
        refused
            .note
            .unwrap_or_default()
            .contains("reported, not relieved"),
        "{:?}",
        refused.reason
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        tree.read(&thrash, "memory.high").unwrap(),
        high,
        "not relieved again"
    );
    let status = configs(client.clone()).get_status(NODE).await.unwrap().data["status"].clone();
    assert_eq!(status["relief"]["refused"], 1, "{status:#}");
    assert_eq!(
        agent.metric("nodemem_agent_relief_decisions_total{reason=\"ReliefRefused\"}"),
        Some(1.0)
    );

    // Observed under enforcement too: the kernel's memory.high events say thrash was
    // throttled (its working set shows the line, not its need).
    let events_file = tree.root().join(&thrash).join("memory.events");
    std::fs::write(
        &events_file,
        "low 0\nhigh 5\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    std::fs::write(
        &events_file,
        "low 0\nhigh 12\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
    )
    .unwrap();
    let observation = eventually(
        "throttling measured",
        Duration::from_secs(30),
        &logs,
        async || {
            let s = configs(client.clone()).get_status(NODE).await.ok()?.data["status"].clone();
            let o = s.get("observation")?.clone();
            (o["worst"][0]["throttleEvents"].as_i64()? > 0).then_some(o)
        },
    )
    .await;
    assert_eq!(observation["enforced"], true, "{observation:#}");
    assert_eq!(observation["worst"][0]["pod"], format!("{NS}/thrash"));
    assert_eq!(observation["throttledContainers"], 1, "{observation:#}");

    // The page-cache container: stalled all along, never touched.
    assert_eq!(tree.read(&cache, "memory.high").unwrap(), high);
    for reason in ["MemoryHighRelieved", "ReliefRefused"] {
        assert!(
            pod_events(&client, "cache", reason).await.is_empty(),
            "{reason} on cache"
        );
    }
}
