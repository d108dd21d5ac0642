//! Node churn as autoscalers make it (issue 64), at a size CI affords: nodes join (a
//! Node, its pods at once, its agent started) and leave (the agent gone, the Node
//! deleted) while a rollout runs, on the real controller and real agents.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_testkit::cgroup_tree::CgroupTree;
use nodemem_testkit::kubelet::FakeKubelet;
use nodemem_testkit::nodes::SimNode;
use nodemem_testkit::Identity;
use serde_json::json;

use crate::agent::{spawn_agent, AgentProcess};
use crate::common::{
    condition, create_app_pod, create_namespace, create_policy, node_states, own_control_plane,
    pool_nodes, reports_good, spawn_controller, watch_configs,
};

const INITIAL: usize = 12;
const JOINING: usize = 8;
const LEAVING: usize = 6;
const MAX_UNAVAILABLE: usize = 2;

/// Each config event as the watch saw it: when, the node, and its revision and whether
/// its agent reports it good (None: the config was deleted).
type Event = (Instant, String, Option<(String, bool)>);
type Seen = Arc<Mutex<Vec<Event>>>;

fn policy_spec(factor: f64) -> serde_json::Value {
    json!({"nodeSelector": {"matchLabels": {"nodemem.io/pool": "churn"}},
        "memoryQoS": {"throttlingFactor": factor, "reservationPolicy": "TieredReservation"},
        "rollout": {"maxUnavailable": MAX_UNAVAILABLE, "minReadySeconds": 3}})
}

/// The most nodes on `target` not reported good at once, replaying `seen` (the state
/// before the first event: `start`). A node counts until its Node is deleted
/// (`left_at`): from then on it is no node of the pool, whenever its config goes.
fn most_updating(
    start: &BTreeMap<String, (String, bool)>,
    seen: &[Event],
    target: &str,
    left_at: &BTreeMap<String, Instant>,
) -> usize {
    let mut state = start.clone();
    let mut most = 0;
    for (at, node, now) in seen {
        match now {
            Some(s) => state.insert(node.clone(), s.clone()),
            None => state.remove(node),
        };
        let updating = state
            .iter()
            .filter(|(n, (r, good))| r == target && !good && left_at.get(*n).is_none_or(|t| at < t))
            .count();
        most = most.max(updating);
    }
    most
}

/// A rollout (maxUnavailable 2, minReadySeconds 3) over 12 nodes while 8 nodes join,
/// each with a pod landing at once and its agent started, and 6 leave (agent gone, Node
/// deleted): every node that stays or joins ends on the new revision, reported good;
/// each joining node within the rollout's own pace of its agent starting (printed); no
/// config is left for a node that is gone; at no moment are more than maxUnavailable
/// nodes on the new revision without a good report; and the leaving nodes fail nothing
/// (no failed node, no rollback, the policy Ready).
#[tokio::test]
async fn nodes_joining_and_leaving_mid_rollout_neither_exceed_its_pace_nor_fail_it() {
    let cp = own_control_plane().await;
    let client = cp.client(&Identity::Admin).await.unwrap();
    let names: Vec<String> = (1..=INITIAL + JOINING)
        .map(|i| format!("churn-{i:02}"))
        .collect();
    let (initial, joining) = names.split_at(INITIAL);
    let named: Vec<(&str, &str)> = initial.iter().map(|n| (n.as_str(), "churn")).collect();
    let mut trees = pool_nodes(&client, &named).await;
    for node in joining {
        let tree = CgroupTree::new(CgroupDriver::Systemd, 2).unwrap();
        trees.insert(node.clone(), Arc::new(tree));
    }
    let _kubelet = FakeKubelet::start(client.clone(), trees.clone());
    create_namespace(&client, "churn").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "churn");
    for node in initial {
        create_app_pod(&pods, node, "64Mi", "256Mi").await;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut agents: BTreeMap<String, AgentProcess> = BTreeMap::new();
    let start_agent = async |node: &str| {
        let kubeconfig = cp
            .kubeconfig(&Identity::Agent(node.to_string()))
            .await
            .unwrap();
        let node_dir = dir.path().join(node);
        std::fs::create_dir_all(&node_dir).unwrap();
        spawn_agent(
            node,
            trees[node].root(),
            &node_dir,
            &kubeconfig,
            "agent.log",
        )
    };
    for node in initial {
        agents.insert(node.clone(), start_agent(node).await);
    }
    let controller_log = dir.path().join("controller.log");
    let _controller = spawn_controller(
        &cp.kubeconfig(&Identity::Controller).await.unwrap(),
        "replica-a",
        "nodemem:test",
        &controller_log,
    );
    let logs = || std::fs::read_to_string(&controller_log).unwrap_or_default();
    let policies = crate::common::policies(client.clone());
    create_policy(&policies, "churn", policy_spec(0.9)).await;
    let first = crate::common::eventually(
        "the pool on its first revision",
        Duration::from_secs(120),
        &logs,
        async || {
            let states = node_states(&client).await;
            let r = states.values().next()?.1.clone();
            (states.len() == INITIAL && states.values().all(|(_, rev, good)| *rev == r && *good))
                .then_some(r)
        },
    )
    .await;

    // Every config event from here on.
    let (mut watch, listed) = watch_configs(&client).await;
    let start: BTreeMap<String, (String, bool)> = listed
        .iter()
        .map(|c| {
            let r = c.data["spec"]["revision"]
                .as_str()
                .unwrap_or("")
                .to_string();
            (c.metadata.name.clone().unwrap(), (r, reports_good(c)))
        })
        .collect();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let watching = tokio::spawn(async move {
        use kube::runtime::watcher::Event;
        while let Some(event) = futures::StreamExt::next(&mut watch).await {
            let (c, gone) = match event {
                Ok(Event::Apply(c) | Event::InitApply(c)) => (c, false),
                Ok(Event::Delete(c)) => (c, true),
                _ => continue,
            };
            let name = c.metadata.name.clone().unwrap_or_default();
            let state = (!gone).then(|| {
                let r = c.data["spec"]["revision"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                (r, reports_good(&c))
            });
            log.lock().unwrap().push((Instant::now(), name, state));
        }
    });

    // The rollout starts; nodes join and leave while it runs.
    policies
        .patch(
            "churn",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": policy_spec(0.8)})),
        )
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let mut joined_at: BTreeMap<String, Instant> = BTreeMap::new();
    let mut left_at: BTreeMap<String, Instant> = BTreeMap::new();
    for (i, node) in joining.iter().enumerate() {
        SimNode::new(node)
            .label("nodemem.io/pool", "churn")
            .register(&client)
            .await
            .unwrap();
        create_app_pod(&pods, node, "64Mi", "256Mi").await;
        agents.insert(node.clone(), start_agent(node).await);
        joined_at.insert(node.clone(), Instant::now());
        if let Some(leaving) = initial.get(i).filter(|_| i < LEAVING) {
            // An autoscaler's scale-down: the node's agent goes with it, then the Node.
            agents.remove(leaving);
            left_at.insert(leaving.clone(), Instant::now());
            nodes
                .delete(leaving, &DeleteParams::default())
                .await
                .unwrap();
        }
    }
    let staying: Vec<&String> = initial[LEAVING..].iter().chain(joining).collect();
    let second = crate::common::eventually(
        "every staying and joining node on the new revision, reported good, no config for a node that left",
        Duration::from_secs(180),
        &logs,
        async || {
            let states = node_states(&client).await;
            let r = states.get(staying[0].as_str())?.1.clone();
            let all = r != first
                && states.len() == staying.len()
                && staying
                    .iter()
                    .all(|n| states.get(n.as_str()).is_some_and(|(_, rev, good)| *rev == r && *good));
            all.then_some(r)
        },
    )
    .await;
    let status = crate::common::eventually(
        "the policy Ready on the new revision",
        Duration::from_secs(60),
        &logs,
        async || {
            let p = policies.get_status("churn").await.ok()?;
            let s = p.data.get("status")?.clone();
            (s["revision"] == second.as_str() && condition(&s, "Ready")?["status"] == "True")
                .then_some(s)
        },
    )
    .await;
    watching.abort();
    let seen = seen.lock().unwrap().clone();
    let most = most_updating(&start, &seen, &second, &left_at);
    let good_at = |node: &str| {
        seen.iter()
            .find(|(_, n, s)| {
                n == node && s.as_ref().is_some_and(|(r, good)| *r == second && *good)
            })
            .map(|(at, ..)| *at)
    };
    let mut waits: Vec<f64> = joining
        .iter()
        .map(|n| {
            let good = good_at(n).unwrap_or_else(|| panic!("{n} never seen good"));
            (good - joined_at[n]).as_secs_f64()
        })
        .collect();
    waits.sort_by(f64::total_cmp);
    eprintln!(
        "churn: {JOINING} nodes joined and {LEAVING} left during a rollout of {INITIAL} (maxUnavailable {MAX_UNAVAILABLE}, minReadySeconds 3): joining nodes good {:.1} s (median) to {:.1} s (last) after their agents started; at most {most} node(s) on the new revision without a good report at once",
        waits[waits.len() / 2],
        waits[waits.len() - 1]
    );
    assert!(most <= MAX_UNAVAILABLE, "{most} updating at once");
    assert!(
        status["failedNodeNames"]
            .as_array()
            .is_none_or(|a| a.is_empty()),
        "{status:#}"
    );
    assert!(status["rolledBackRevision"].is_null(), "{status:#}");
    // A joining node waits at most for the rollout's batches in front of it: 14 nodes,
    // 2 at a time, each ready after 3 s, on the test bed's two cores.
    assert!(
        waits[waits.len() - 1] < 90.0,
        "joining nodes waited {waits:?}"
    );
}
