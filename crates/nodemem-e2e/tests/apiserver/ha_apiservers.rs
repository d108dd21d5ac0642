//! Two apiservers on one etcd behind one address, as a highly available control plane
//! runs them (issue 64): the agents, the controller and the fake kubelet reach them
//! through a proxy that stands for the load balancer. The first apiserver leaves as a
//! rolling upgrade takes it out; every agent's watches resume on the second from the
//! resource version they last saw, none lists again (the agents' own
//! `nodemem_agent_watch_lists_total`), and a policy change made after reaches every
//! node through them. Then the first comes back and the second leaves at once: the
//! first's watch cache begins at etcd's revision of its start, newer than what the
//! watches last saw, so they list again, and the same count says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::Client;
use nodemem_testkit::control_plane::client_from_kubeconfig;
use nodemem_testkit::kubelet::FakeKubelet;
use nodemem_testkit::proxy::TcpProxy;
use nodemem_testkit::second_apiserver::SecondApiserver;
use nodemem_testkit::Identity;
use serde_json::json;

use crate::agent::{spawn_agent, AgentProcess};
use crate::common::{
    create_app_pod, create_namespace, create_policy, node_states, own_control_plane, pool_nodes,
    spawn_controller,
};

const NODES: [&str; 3] = ["ha-1", "ha-2", "ha-3"];
const RESOURCES: [&str; 4] = ["config", "node", "pods", "namespaces"];

/// `kubeconfig` with its server replaced by the proxy's, written beside it.
fn via(kubeconfig: &Path, server: &str, proxy: &TcpProxy) -> PathBuf {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    assert!(text.contains(server), "{text}");
    let path = kubeconfig.with_extension("via-proxy");
    std::fs::write(&path, text.replace(server, &proxy.https_url())).unwrap();
    path
}

/// Each agent's lists begun so far, per resource.
fn lists(agents: &BTreeMap<String, AgentProcess>) -> BTreeMap<(String, &'static str), f64> {
    let mut out = BTreeMap::new();
    for (node, agent) in agents {
        for resource in RESOURCES {
            let series = format!("nodemem_agent_watch_lists_total{{resource=\"{resource}\"}}");
            out.insert(
                (node.clone(), resource),
                agent.metric(&series).unwrap_or(0.0),
            );
        }
    }
    out
}

fn policy_spec(factor: f64) -> serde_json::Value {
    json!({"nodeSelector": {"matchLabels": {"nodemem.io/pool": "ha"}},
        "memoryQoS": {"throttlingFactor": factor, "reservationPolicy": "TieredReservation"},
        "rollout": {"maxUnavailable": "100%"}})
}

/// Every node on a revision other than `old`, reported good: that revision.
async fn converged(client: &Client, old: Option<&str>, logs: &dyn Fn() -> String) -> String {
    crate::common::eventually(
        "every node on the policy's new revision, reported good",
        Duration::from_secs(120),
        logs,
        async || {
            let states = node_states(client).await;
            let first = states.values().next()?.1.clone();
            let all = states.len() == NODES.len()
                && states.values().all(|(_, r, good)| *r == first && *good)
                && old.is_none_or(|o| first != o);
            all.then_some(first)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_leaving_its_pair_costs_the_agents_no_list() {
    let mut cp = own_control_plane().await;
    let second = tokio::task::block_in_place(|| SecondApiserver::start(&cp)).unwrap();
    // An apiserver makes a custom resource's storage, and its watch cache, at the first
    // request for it (k8s.io/apiextensions-apiserver, `crdHandler`): one behind a
    // balancer has served the configs before. Without this read the second's config
    // cache would begin when the first leaves, after the watches' last version, and
    // they would list again (the bench measured it: 1,500 of 1,500).
    let on_second = client_from_kubeconfig(second.admin_kubeconfig())
        .await
        .unwrap();
    crate::common::dynamic::<nodemem_api::NodeMemoryConfig>(&on_second)
        .list(&kube::api::ListParams::default().limit(1))
        .await
        .unwrap();
    let first: std::net::SocketAddr = cp.server.trim_start_matches("https://").parse().unwrap();
    let proxy = TcpProxy::start(first).unwrap();
    let admin = via(cp.admin_kubeconfig(), &cp.server, &proxy);
    let client = client_from_kubeconfig(&admin).await.unwrap();
    let named: Vec<(&str, &str)> = NODES.iter().map(|n| (*n, "ha")).collect();
    let trees = pool_nodes(&client, &named).await;
    let _kubelet = FakeKubelet::start(client.clone(), trees.clone());
    create_namespace(&client, "ha").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ha");
    for node in NODES {
        create_app_pod(&pods, node, "64Mi", "256Mi").await;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut agents = BTreeMap::new();
    for (node, tree) in &trees {
        let own = cp.kubeconfig(&Identity::Agent(node.clone())).await.unwrap();
        let node_dir = dir.path().join(node);
        std::fs::create_dir_all(&node_dir).unwrap();
        let kubeconfig = via(&own, &cp.server, &proxy);
        agents.insert(
            node.clone(),
            spawn_agent(node, tree.root(), &node_dir, &kubeconfig, "agent.log"),
        );
    }
    let controller_log = dir.path().join("controller.log");
    let controller_kubeconfig = via(
        &cp.kubeconfig(&Identity::Controller).await.unwrap(),
        &cp.server,
        &proxy,
    );
    let _controller = spawn_controller(
        &controller_kubeconfig,
        "replica-a",
        "nodemem:test",
        &controller_log,
    );
    let logs = || {
        format!(
            "controller log:\n{}\nagent ha-1 log:\n{}",
            std::fs::read_to_string(&controller_log).unwrap_or_default(),
            agents["ha-1"].log()
        )
    };
    let policies = crate::common::policies(client.clone());
    create_policy(&policies, "ha", policy_spec(0.9)).await;
    let revision = converged(&client, None, &logs).await;
    let before = lists(&agents);
    assert!(
        before.values().all(|n| *n >= 1.0),
        "every watch listed once at its start: {before:?}"
    );

    // The first apiserver leaves: the balancer sends new connections to the second,
    // then the first stops and its watches end.
    proxy.retarget(second.addr());
    tokio::task::block_in_place(|| cp.stop_apiserver());
    // A new client: the old one's pooled connections went with the first apiserver.
    let client = client_from_kubeconfig(&admin).await.unwrap();
    let policies = crate::common::policies(client.clone());
    policies
        .patch(
            "ha",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": policy_spec(0.7)})),
        )
        .await
        .unwrap();
    let revision = converged(&client, Some(&revision), &logs).await;
    let after_roll = lists(&agents);
    assert_eq!(
        after_roll, before,
        "the agents' lists before and after the first apiserver left (each watch resumed on the second)"
    );

    // The first comes back and the second leaves at once: the first's watch cache
    // begins after what the watches last saw.
    tokio::task::block_in_place(|| cp.start_apiserver()).unwrap();
    proxy.retarget(first);
    drop(second);
    let client = client_from_kubeconfig(&admin).await.unwrap();
    let policies = crate::common::policies(client.clone());
    policies
        .patch(
            "ha",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": policy_spec(0.5)})),
        )
        .await
        .unwrap();
    converged(&client, Some(&revision), &logs).await;
    let after_return = lists(&agents);
    let listed_again: f64 = after_return
        .iter()
        .map(|(k, n)| n - after_roll[k])
        .sum::<f64>();
    eprintln!(
        "HA: the first apiserver left: 0 lists in {} watches; the second left right after the first came back: {listed_again} list(s) begun again",
        before.len()
    );
    assert!(
        listed_again >= 1.0,
        "no watch listed again on an apiserver whose watch cache began after them: {after_return:?}"
    );
}
