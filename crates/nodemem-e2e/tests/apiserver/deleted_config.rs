//! A deleted NodeMemoryConfig (issue 58, the agent's grace against the controller's
//! write backoff): the real controller and a real agent on a control plane of their
//! own. A config deleted by hand while no controller writes it again keeps its values
//! on the node past the old 10 s grace (the controller, backing off, may take up to its
//! 60 s cap), and the controller back writes it again with no moment without values;
//! a pool rolled back to no config is marked before its config goes, and its agent
//! gives back at once, not after the grace.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use nodemem_api::{NodeMemoryConfig, NodeMemoryPolicy};
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_testkit::kubelet::FakeKubelet;
use nodemem_testkit::Identity;
use serde_json::json;

use crate::agent::{app_cgroup, spawn_agents};
use crate::common::{
    condition, create_app_pod, create_namespace, dynamic, eventually, longest_outside,
    own_control_plane, pool_nodes, reports_good, spawn_controller, Sampler,
};

const NODE: &str = "dc-1";

/// The real controller stopped and a real agent's config deleted by hand: its
/// memory.high, sampled every 20 ms, keeps nodemem's value for 20 s (the agent's grace,
/// 75 s, outlasts the controller's 60 s write backoff; it was 10 s) and through the
/// restarted controller's rewrite; then an OOM burst fails the first revision, the pool
/// is rolled back to no config, the config goes marked
/// (`nodemem.io/give-back-revision`) and the agent gives back at once (under a third of
/// the grace; measured below a second).
#[tokio::test]
async fn a_config_deleted_by_hand_keeps_its_values_and_one_rolled_back_gives_back_at_once() {
    let cp = own_control_plane().await;
    let client = cp.client(&Identity::Admin).await.unwrap();
    let trees = pool_nodes(&client, &[(NODE, "dc")]).await;
    let _kubelet = FakeKubelet::start(client.clone(), trees.clone());
    create_namespace(&client, "work").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "work");
    create_app_pod(&pods, NODE, "64Mi", "256Mi").await;
    let dir = tempfile::tempdir().unwrap();
    let agents = spawn_agents(&cp, &trees, dir.path()).await;
    let controller_kubeconfig = cp.kubeconfig(&Identity::Controller).await.unwrap();
    let controller_log = dir.path().join("controller.log");
    let start_controller = || {
        spawn_controller(
            &controller_kubeconfig,
            "controller-dc",
            "nodemem:test",
            &controller_log,
        )
    };
    let mut controller = start_controller();
    let logs = || {
        format!(
            "controller log:\n{}\nagent log:\n{}",
            std::fs::read_to_string(&controller_log).unwrap_or_default(),
            agents[NODE].log()
        )
    };
    let policies = dynamic::<NodeMemoryPolicy>(&client);
    let configs = dynamic::<NodeMemoryConfig>(&client);
    policies
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
                "metadata": {"name": "dc"},
                "spec": {"nodeSelector": {"matchLabels": {"nodemem.io/pool": "dc"}},
                    "memoryQoS": {"throttlingFactor": 0.8, "reservationPolicy": "TieredReservation"},
                    "rollout": {"maxUnavailable": 1, "minReadySeconds": 20,
                        "failurePolicy": "Rollback"}},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let cgroup = trees[NODE]
        .root()
        .join(app_cgroup(&pods, &format!("app-{NODE}")).await);
    let high_file = cgroup.join("memory.high");
    let high = |file: &Path| {
        std::fs::read_to_string(file)
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let applied = eventually(
        "the config applied",
        Duration::from_secs(60),
        &logs,
        async || {
            let c = configs.get_opt(NODE).await.ok()??;
            let value = high(&high_file);
            (reports_good(&c) && value != "max").then_some(value)
        },
    )
    .await;

    // 1. The controller stopped, the config deleted by hand: nothing writes it again
    //    for 20 s (twice the old grace). Its values stay; the controller back writes
    //    it again; sampled every 20 ms throughout, the node never runs without them.
    assert!(controller.terminate().success());
    let sampler = Sampler::start(vec![(NODE.to_string(), high_file.clone())]);
    configs
        .delete(NODE, &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        high(&high_file),
        applied,
        "given back within 20 s of a deletion nobody meant: {}",
        logs()
    );
    let _restarted = start_controller();
    eventually(
        "the config written again and reported",
        Duration::from_secs(60),
        &logs,
        async || {
            let c = configs.get_opt(NODE).await.ok()??;
            reports_good(&c).then_some(())
        },
    )
    .await;
    let samples = sampler.finish();
    let outside = longest_outside(&samples, |_, v| v == applied);
    assert!(samples.len() > 500, "{} samples", samples.len());
    assert!(
        outside.values().all(|d| d.is_zero()),
        "the node ran without nodemem's values while its config was gone: {outside:?}"
    );

    // 2. The first revision fails its health gate (an OOM burst before it is ready):
    //    the pool is rolled back to no config, the config goes marked, and the agent
    //    gives back at once, well within the grace.
    let pod = pods.get(&format!("app-{NODE}")).await.unwrap();
    let events = trees[NODE]
        .root()
        .join(nodemem_model::values::cgroup_layout::pod_dir(
            CgroupDriver::Systemd,
            nodemem_model::pod::qos::QosClass::Burstable,
            &pod.metadata.uid.unwrap(),
        ))
        .join("memory.events");
    let calm = std::fs::read_to_string(&events).unwrap();
    std::fs::write(&events, calm.replace("oom_kill 0", "oom_kill 9")).unwrap();
    eventually(
        "the pool rolled back to no config",
        Duration::from_secs(60),
        &logs,
        async || {
            let p = policies.get_opt("dc").await.ok()??;
            let s = &p.data["status"];
            (condition(s, "Degraded")?["reason"] == "RolledBack").then_some(())
        },
    )
    .await;
    let gone = eventually(
        "the config deleted",
        Duration::from_secs(30),
        &logs,
        async || {
            configs
                .get_opt(NODE)
                .await
                .ok()?
                .is_none()
                .then(Instant::now)
        },
    )
    .await;
    eventually(
        "the values given back",
        Duration::from_secs(30),
        &logs,
        async || (high(&high_file) == "max").then_some(()),
    )
    .await;
    let took = gone.elapsed();
    eprintln!("rolled back to no config: given back {took:?} after the config went");
    assert!(
        took < nodemem_api::DELETED_CONFIG_GRACE / 3,
        "given back {took:?} after the config went: the grace, not at once"
    );
}
