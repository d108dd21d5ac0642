//! Nodes nodemem's agent cannot run on (issue 58): a Windows node and one the agent's
//! own affinity keeps it off are counted and named apart, get no config, and the
//! rollout completes over the rest; relabelled, a node joins the pool.

use serde_json::json;

use crate::agents::pod::AgentPod;
use crate::decide::decide;
use crate::tests::{apply, policy, settle, T0};
use crate::world::World;

fn labelled(name: &str, labels: serde_json::Value) -> k8s_openapi::api::core::v1::Node {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
}

/// The default placement (Linux only) and a team's affinity that keeps the agent off
/// nodes labelled `team=gpu`.
fn agent() -> AgentPod {
    AgentPod::parse(
        &json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "team", "operator": "NotIn", "values": ["gpu"]}]}]}}}})
        .to_string(),
    )
    .unwrap()
}

fn mixed_pool() -> World {
    let mut w = World::default();
    w.agent_pod = Some(agent());
    w.apply_policy(&policy("p", "a", 0, 0.9, json!({"maxUnavailable": 1})));
    let linux = |name| labelled(name, json!({"pool": "a", "kubernetes.io/os": "linux"}));
    w.apply_node(&linux("l1"));
    w.apply_node(&linux("l2"));
    w.apply_node(&labelled(
        "w1",
        json!({"pool": "a", "kubernetes.io/os": "windows"}),
    ));
    w.apply_node(&labelled(
        "g1",
        json!({"pool": "a", "kubernetes.io/os": "linux", "team": "gpu"}),
    ));
    w
}

#[test]
fn nodes_the_agent_cannot_run_on_are_named_apart_and_the_rollout_completes_over_the_rest() {
    let mut w = mixed_pool();
    let mut now = T0;
    settle(&mut w, &mut now, 6);
    let mut configs: Vec<&str> = w.configs.keys().map(String::as_str).collect();
    configs.sort();
    assert_eq!(configs, ["l1", "l2"], "no config for the excluded nodes");
    let status = &w.policies["p"].status;
    assert_eq!(
        (
            status.matched_nodes,
            status.excluded_nodes,
            status.updated_nodes,
            status.ready_nodes
        ),
        (2, 2, 2, 2)
    );
    let named: Vec<(&str, &str)> = status
        .excluded_node_names
        .iter()
        .map(|e| (e.name.as_str(), e.reason.as_str()))
        .collect();
    assert_eq!(
        named,
        [
            (
                "g1",
                "no term of the agent's required node affinity matches the node"
            ),
            (
                "w1",
                "the agent's nodeSelector asks kubernetes.io/os=linux, the node has kubernetes.io/os=windows"
            ),
        ]
    );
    let progressing = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap();
    assert_eq!(progressing.reason, "Complete", "{progressing:?}");
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True", "{ready:?}");

    // The Windows node was a Linux node all along (its label fixed): it joins.
    w.apply_node(&labelled(
        "w1",
        json!({"pool": "a", "kubernetes.io/os": "linux"}),
    ));
    settle(&mut w, &mut now, 6);
    assert!(w.configs.contains_key("w1"));
    let status = &w.policies["p"].status;
    assert_eq!((status.matched_nodes, status.excluded_nodes), (3, 1));
    assert_eq!(status.ready_nodes, 3);
}

#[test]
fn without_the_agents_pod_every_selected_node_counts() {
    // Agents deployed some other way (no `--agent-pod`, no DaemonSet of the
    // controller's): nothing is known of their placement, every node is governed.
    let mut w = mixed_pool();
    w.agent_pod = None;
    w.touch_policies();
    let d = decide(&w, T0);
    apply(&mut w, &d, T0);
    let status = &w.policies["p"].status;
    assert_eq!((status.matched_nodes, status.excluded_nodes), (4, 0));
}
