//! Nodes nodemem cannot manage (issue 58): a policy whose selector also matches a
//! Windows node and a node the agent's own affinity keeps it off (`--agent-pod`, as
//! the chart passes `agent.affinity`) neither waits for their agents nor fails its
//! rollout on them. The real controller and a real agent per Linux node, on a control
//! plane of their own: the rollout completes over the rest, the two are counted and
//! named apart in status, `kubectl get nmp`, `kubectl nodemem status` and `explain`;
//! relabelled so the agent may run there, a node joins the pool and its rollout.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams, PostParams};
use nodemem_api::{NodeMemoryConfig, NodeMemoryPolicy};
use nodemem_testkit::kubelet::FakeKubelet;
use nodemem_testkit::Identity;
use serde_json::{json, Value};

use crate::agent::spawn_agents;
use crate::common::{
    condition, dynamic, eventually, kubectl_with_plugin, own_control_plane, pool_nodes,
    spawn_controller_with,
};

const POOL: &str = "ex";
const WINDOWS: &str = "ex-win";
const GPU: &str = "ex-gpu";

/// The agent kept off nodes labelled `team=gpu` (on top of its Linux-only default).
const AGENT_POD: &str = r#"{"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["gpu"]}]}]}}}}"#;

async fn label(client: &kube::Client, node: &str, labels: Value) {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await
        .unwrap();
}

/// The real controller with `--agent-pod` (an affinity that keeps the agent off
/// `team=gpu`) and real agents on two Linux nodes; a Windows-labelled node and a
/// `team=gpu` node in the same pool get no config, the rollout completes (`Ready=True`)
/// over the two, `excludedNodes: 2` with each named and its reason, `kubectl get nmp -o
/// wide` shows `EXCLUDED 2`, `kubectl nodemem status` names them, `kubectl nodemem
/// explain` says `Excluded` and why; the GPU node relabelled joins the pool and the
/// rollout completes over three.
#[tokio::test]
async fn a_rollout_completes_over_the_nodes_the_agent_can_run_on() {
    let cp = own_control_plane().await;
    let client = cp.client(&Identity::Admin).await.unwrap();
    let linux = ["ex-1", "ex-2"];
    let named: Vec<(&str, &str)> = linux
        .iter()
        .chain(&[WINDOWS, GPU])
        .map(|n| (*n, POOL))
        .collect();
    let mut trees = pool_nodes(&client, &named).await;
    label(&client, WINDOWS, json!({"kubernetes.io/os": "windows"})).await;
    label(&client, GPU, json!({"team": "gpu"})).await;
    let _kubelet = FakeKubelet::start(client.clone(), trees.clone());
    let dir = tempfile::tempdir().unwrap();
    // Agents where nodemem's agent may run; the GPU node's comes once it may.
    let gpu_tree = trees.remove(GPU).unwrap();
    trees.remove(WINDOWS);
    let _agents = spawn_agents(&cp, &trees, dir.path()).await;
    let controller_log = dir.path().join("controller.log");
    let _controller = spawn_controller_with(
        &cp.kubeconfig(&Identity::Controller).await.unwrap(),
        "controller-ex",
        "nodemem:test",
        &controller_log,
        &["--agent-pod", AGENT_POD],
    );
    let logs = || std::fs::read_to_string(&controller_log).unwrap_or_default();
    let policies = dynamic::<NodeMemoryPolicy>(&client);
    policies
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
                "metadata": {"name": POOL},
                "spec": {"nodeSelector": {"matchLabels": {"nodemem.io/pool": POOL}},
                    "memoryQoS": {"throttlingFactor": 0.8, "reservationPolicy": "TieredReservation"},
                    "rollout": {"maxUnavailable": 1, "minReadySeconds": 0,
                        "progressDeadlineSeconds": 60}},
            }))
            .unwrap(),
        )
        .await
        .unwrap();

    // Complete over the two Linux nodes, the other two counted and named apart.
    let complete = |matched: i64, excluded: i64| {
        let policies = policies.clone();
        async move || {
            let p = policies.get(POOL).await.ok()?;
            let s = &p.data["status"];
            let done = s["matchedNodes"] == matched
                && s["readyNodes"] == matched
                && s["excludedNodes"] == excluded
                && condition(s, "Progressing")?["reason"] == "Complete"
                && condition(s, "Ready")?["status"] == "True";
            done.then(|| s.clone())
        }
    };
    let status = eventually(
        "the rollout complete over the Linux nodes",
        Duration::from_secs(90),
        &logs,
        complete(2, 2),
    )
    .await;
    assert_eq!(
        status["excludedNodeNames"],
        json!([
            {"name": GPU, "reason": "no term of the agent's required node affinity matches the node"},
            {"name": WINDOWS, "reason": "the agent's nodeSelector asks kubernetes.io/os=linux, the node has kubernetes.io/os=windows"},
        ]),
        "{status:#}"
    );
    let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
    let mut written: Vec<String> = configs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    written.sort();
    assert_eq!(written, linux, "configs only where the agent runs");

    // What a user reads: `kubectl get nmp`, `kubectl nodemem status` and `explain`.
    let plugin_dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        nodemem_e2e::nodemem(),
        plugin_dir.path().join("kubectl-nodemem"),
    )
    .unwrap();
    let user = |args: &[&str]| {
        let ran = kubectl_with_plugin(cp.admin_kubeconfig(), plugin_dir.path(), args);
        assert_eq!(
            ran.code, 0,
            "kubectl {args:?}: {}{}",
            ran.stdout, ran.stderr
        );
        ran.stdout
    };
    let table = user(&["get", "nmp", POOL, "-o", "wide"]);
    let column = |table: &str, header: &str| -> String {
        let mut lines = table.lines();
        let head = lines.next().unwrap();
        let at = head.find(header).unwrap_or_else(|| panic!("{table}"));
        let row = lines.next().unwrap();
        row[at..].split_whitespace().next().unwrap().to_string()
    };
    assert_eq!(column(&table, "EXCLUDED"), "2", "{table}");
    assert_eq!(column(&table, "MATCHED"), "2", "{table}");
    let said = user(&["nodemem", "status"]);
    assert!(
        said.contains("EXCLUDED")
            && said.contains(&format!(
                "{POOL}: 2 selected node(s) where nodemem's agent cannot run, not governed: {GPU} ("
            )),
        "{said}"
    );
    let explained: Value =
        serde_json::from_str(&user(&["nodemem", "explain", WINDOWS, "-o", "json"])).unwrap();
    assert_eq!(explained["rolloutState"], "Excluded", "{explained:#}");
    assert_eq!(explained["policy"], Value::Null, "{explained:#}");
    let why = explained["why"].as_str().unwrap();
    assert!(
        why.contains("nodemem's agent cannot run on it")
            && why.contains("kubernetes.io/os=windows"),
        "{why}"
    );

    // The team lets the agent onto the GPU node: it joins the pool, its agent comes,
    // and the rollout completes over three nodes.
    label(&client, GPU, json!({"team": "ml"})).await;
    let mut gpu = std::collections::BTreeMap::new();
    gpu.insert(GPU.to_string(), gpu_tree);
    let _gpu_agent = spawn_agents(&cp, &gpu, dir.path()).await;
    let status = eventually(
        "the GPU node in the pool",
        Duration::from_secs(90),
        &logs,
        complete(3, 1),
    )
    .await;
    assert_eq!(
        status["excludedNodeNames"][0]["name"], WINDOWS,
        "{status:#}"
    );
}
