//! `enforcement: Observe` on a real agent (issue 19): the node computes what Agent
//! would write and writes nothing. A node switched from Agent to Observe gets back what
//! nodemem set, reports `Applied=True Observing` with the totals enforcement would
//! cover, and switched back it is enforced again.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::Client;
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_testkit::Identity;
use serde_json::{json, Value};

use crate::agent::{
    app_cgroup, apply_config, configs, expected_on, simulated_node, spawn_agent, tree_mismatches,
};
use crate::common::{admin, cluster, condition, create_pod, eventually};

const NODE: &str = "observe-1";
const NS: &str = "observe-pods";
const MI: i64 = 1 << 20;

async fn set(client: &Client, revision: &str, enforcement: &str, qos: &Value) {
    let spec = json!({"policy": "observe-test", "revision": revision,
        "memoryQoS": qos, "enforcement": enforcement});
    apply_config(client, NODE, spec).await
}

/// The config's status once the agent reports `revision` with `reason`.
async fn reported(
    client: &Client,
    revision: &str,
    reason: &str,
    logs: &dyn Fn() -> String,
) -> Value {
    eventually(
        &format!("{revision} reported {reason}"),
        Duration::from_secs(60),
        logs,
        async || {
            let c = configs(client.clone()).get_status(NODE).await.ok()?;
            let s = c.data.get("status")?.clone();
            let applied = condition(&s, "Applied")?;
            (s["observedRevision"] == revision
                && applied["reason"] == reason
                && applied["status"] == "True")
                .then_some(s)
        },
    )
    .await
}

/// `enforcement: Observe` on a real agent writes nothing, gives back what Agent set and
/// reports `Applied=True Observing` with what Agent would write; its observation names
/// the container whose working set (memory.current minus inactive page cache) stands
/// above the would-be memory.high, with the kernel's memory.peak beside it, and not the
/// one whose memory is page cache; an observed node writes its status at most once per
/// `--status-refresh-seconds` when only figures change.
#[tokio::test]
async fn observe_writes_nothing_gives_back_and_reports_what_agent_would_write() {
    let cp = cluster();
    let client = admin().await;
    let (tree, _kubelet) = simulated_node(&client, NODE, NS, CgroupDriver::Systemd).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for (name, resources) in [
        (
            "burstable-a",
            json!({"requests": {"memory": "64Mi"}, "limits": {"memory": "256Mi"}}),
        ),
        ("burstable-b", json!({"requests": {"memory": "32Mi"}})),
        ("besteffort", json!({})),
    ] {
        create_pod(
            &pods,
            json!({"metadata": {"name": name},
                "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "x", "resources": resources}]}}),
        )
        .await;
    }
    let qos = json!({"throttlingFactor": 0.8, "reservationPolicy": "TieredReservation"});
    let predicted = expected_on(&client, NODE, CgroupDriver::Systemd, qos.clone()).await;
    let no_logs = || String::new();
    let untouched: BTreeMap<(String, String), String> = eventually(
        "the pods' cgroups",
        Duration::from_secs(60),
        &no_logs,
        async || {
            predicted
                .keys()
                .map(|(path, file)| {
                    tree.read(path, file)
                        .ok()
                        .map(|v| ((path.clone(), file.clone()), v))
                })
                .collect()
        },
    )
    .await;
    assert_ne!(untouched, predicted);

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cp.kubeconfig(&Identity::Agent(NODE.into())).await.unwrap();
    let agent = spawn_agent(NODE, tree.root(), dir.path(), &kubeconfig, "agent.log");
    let logs = || agent.log();

    // Agent: enforced.
    set(&client, "rev-1", "Agent", &qos).await;
    let enforced = reported(&client, "rev-1", "Applied", &logs).await;
    eventually("the values", Duration::from_secs(30), &logs, async || {
        tree_mismatches(&tree, &predicted).is_empty().then_some(())
    })
    .await;

    // Observe: everything given back, and the status says what Agent would write.
    set(&client, "rev-2", "Observe", &qos).await;
    let observed = reported(&client, "rev-2", "Observing", &logs).await;
    eventually(
        "every value given back",
        Duration::from_secs(30),
        &logs,
        async || tree_mismatches(&tree, &untouched).is_empty().then_some(()),
    )
    .await;
    assert_eq!(observed["totals"], enforced["totals"], "{observed:#}");
    assert_ne!(observed["totals"]["memoryLowBytes"], 0, "{observed:#}");
    assert_eq!(observed["managedPods"], enforced["managedPods"]);
    let message = condition(&observed, "Applied").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.starts_with("revision rev-2 is observed on the node's pods (managedPods counts them): enforcement: Observe"),
        "{message}"
    );

    // What the containers do: burstable-a's working set (240Mi) stands above the
    // 0.8 memory.high it would get (64Mi + 0.8 x 192Mi); burstable-b fills 160Mi of
    // page cache beside a 40Mi working set, which is no throttling; besteffort is small.
    let (a, b, be) = (
        app_cgroup(&pods, "burstable-a").await,
        app_cgroup(&pods, "burstable-b").await,
        app_cgroup(&pods, "besteffort").await,
    );
    tree.set_usage(&a, 250 * MI, 10 * MI).unwrap();
    tree.set_usage(&b, 200 * MI, 160 * MI).unwrap();
    tree.set_usage(&be, 10 * MI, 0).unwrap();
    let would_be_high = nodemem_model::values::factor::ThrottlingFactor::from_f64(0.8)
        .unwrap()
        .memory_high(
            64 * MI,
            256 * MI,
            4096,
            nodemem_model::values::factor::KubeletFloat::Separate,
        );
    let observation = eventually(
        "the observation in status",
        Duration::from_secs(60),
        &logs,
        async || {
            let c = configs(client.clone()).get_status(NODE).await.ok()?;
            let o = c.data["status"].get("observation")?.clone();
            (o["containers"] == 3
                && o["throttledContainers"] == 1
                && o["observedSeconds"].as_i64()? >= 2)
                .then_some(o)
        },
    )
    .await;
    assert_eq!(observation["revision"], "rev-2", "{observation:#}");
    assert_eq!(observation["enforced"], false);
    let worst = &observation["worst"];
    assert_eq!(worst.as_array().unwrap().len(), 1, "{observation:#}");
    assert_eq!(worst[0]["pod"], format!("{NS}/burstable-a"));
    assert_eq!(worst[0]["container"], "app");
    assert_eq!(worst[0]["memoryHigh"], would_be_high);
    assert_eq!(worst[0]["peakWorkingSet"], 240 * MI);
    assert_eq!(
        worst[0]["memoryPeak"],
        250 * MI,
        "the kernel's, page cache and all"
    );
    assert_eq!(worst[0]["maxExcessBytes"], 240 * MI - would_be_high);
    // burstable-a needs (240 - 64) / 192 = 0.92: it fits 0.95 and 1.00 only.
    let fitting: Vec<i64> = observation["fittingByFactor"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_i64().unwrap())
        .collect();
    assert_eq!(fitting.len(), 20);
    assert_eq!(&fitting[18..], [3, 3], "{observation:#}");
    assert_eq!(fitting[17], 2, "{observation:#}");
    assert_eq!(
        agent.metric("nodemem_agent_throttled_containers"),
        Some(1.0)
    );
    assert_eq!(agent.metric("nodemem_agent_observed_containers"), Some(3.0));
    // Observing wrote nothing, whatever it measured.
    assert!(tree_mismatches(&tree, &untouched).is_empty());
    // A resync later nothing has been written.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(tree_mismatches(&tree, &untouched).is_empty());

    // An observed node does not rewrite its status at every sample: figures alone are
    // written at most once per --status-refresh-seconds (3 s here; a sample a second,
    // whose observedSeconds grows every time).
    let (mut watch, _) = crate::common::watch_configs(&client).await;
    let window = std::time::Instant::now() + Duration::from_secs(12);
    let mut writes = 0;
    while let Some(c) = crate::common::next_config(
        &mut watch,
        window.saturating_duration_since(std::time::Instant::now()),
    )
    .await
    {
        if c.metadata.name.as_deref() == Some(NODE) {
            writes += 1;
        }
    }
    eprintln!("an observed node wrote its status {writes} time(s) in 12 s (a sample a second)");
    assert!(
        (2..=5).contains(&writes),
        "{writes} status writes in 12 s: figures refresh, at most every 3 s"
    );

    // Agent again: enforced again.
    set(&client, "rev-3", "Agent", &qos).await;
    reported(&client, "rev-3", "Applied", &logs).await;
    eventually(
        "the values again",
        Duration::from_secs(30),
        &logs,
        async || tree_mismatches(&tree, &predicted).is_empty().then_some(()),
    )
    .await;
}
