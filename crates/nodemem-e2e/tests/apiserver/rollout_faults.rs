//! Faults in the middle of a rollout, with the real controller and real agents on a
//! control plane of their own (issue 18):
//! - one agent cut off from the apiserver (a TCP proxy the test cuts) while the rest of
//!   its pool rolls out: its node holds its slot (maxUnavailable), fails at
//!   progressDeadlineSeconds with a reason that says its agent is not reporting, and
//!   recovers once the way is back;
//! - a node deleted, a policy deleted, and a node whose labels move it to another pool,
//!   each while its rollout is under way;
//! - 100 policy edits in quick succession: every node ends on the last revision, no
//!   node is ever moved back to an older one, and the controller writes a node's config
//!   at most twice per revision (counted from a watch).
//!
//! The controller runs with a watch-event queue of 16 (`--event-queue`; the default
//! holds a 20,000-node fan-out's events): the edits and the rollouts fill it, and at
//! the cap nothing may be lost or reordered.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use nodemem_api::revision::revision;
use nodemem_api::NodeMemoryPolicy;
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_testkit::cgroup_tree::CgroupTree;
use nodemem_testkit::kubelet::FakeKubelet;
use nodemem_testkit::proxy::TcpProxy;
use nodemem_testkit::{ControlPlane, Identity};
use serde_json::{json, Value};

use crate::agent::{configs, expected_on, spawn_agent, tree_mismatches, AgentProcess};
use crate::common::{
    condition, controller_metrics, create_namespace, eventually, next_config, node_states,
    own_control_plane, policies, pool_nodes, reports_good, spawn_controller_with, watch_configs,
    ControllerProcess,
};

const NS: &str = "rollout-pods";
/// The controller's cap on queued watch events here: small enough that the tests fill it.
const EVENT_QUEUE: usize = 16;

/// Simulated nodes, one Burstable pod on each, an agent per node and the controller.
struct Bed {
    /// Stopped when the bed is dropped.
    _cp: ControlPlane,
    client: Client,
    dir: tempfile::TempDir,
    trees: BTreeMap<String, Arc<CgroupTree>>,
    agents: BTreeMap<String, AgentProcess>,
    /// The way to the apiserver of the agent started behind it.
    proxy: Option<TcpProxy>,
    _kubelet: FakeKubelet,
    _controller: ControllerProcess,
}

impl Bed {
    /// `nodes` are (name, pool); the agent of `proxied` reaches the apiserver through
    /// a proxy the test can cut.
    async fn start(nodes: &[(&str, &str)], proxied: Option<&str>) -> Bed {
        let cp = own_control_plane().await;
        let client = cp.client(&Identity::Admin).await.unwrap();
        let trees = pool_nodes(&client, nodes).await;
        let kubelet = FakeKubelet::start(client.clone(), trees.clone());
        create_namespace(&client, NS).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        for (node, _) in nodes {
            crate::common::create_app_pod(&pods, node, "32Mi", "128Mi").await;
        }
        let target: std::net::SocketAddr =
            cp.server.trim_start_matches("https://").parse().unwrap();
        let proxy = proxied.map(|_| TcpProxy::start(target).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let mut agents = BTreeMap::new();
        for (node, tree) in &trees {
            let mut kubeconfig = cp.kubeconfig(&Identity::Agent(node.clone())).await.unwrap();
            let node_dir = dir.path().join(node);
            std::fs::create_dir_all(&node_dir).unwrap();
            if let Some(proxy) = proxy.as_ref().filter(|_| proxied == Some(node.as_str())) {
                // The same identity, through the proxy (the serving certificate names
                // 127.0.0.1, where the proxy listens too).
                let text = std::fs::read_to_string(&kubeconfig).unwrap();
                assert!(text.contains(&cp.server), "{text}");
                kubeconfig = node_dir.join("proxied.kubeconfig");
                std::fs::write(&kubeconfig, text.replace(&cp.server, &proxy.https_url())).unwrap();
            }
            agents.insert(
                node.clone(),
                spawn_agent(node, tree.root(), &node_dir, &kubeconfig, "agent.log"),
            );
        }
        let controller = spawn_controller_with(
            &cp.kubeconfig(&Identity::Controller).await.unwrap(),
            "rollout-faults",
            "nodemem:test",
            &dir.path().join("controller.log"),
            &["--event-queue", &EVENT_QUEUE.to_string()],
        );
        Bed {
            _cp: cp,
            client,
            dir,
            trees,
            agents,
            proxy,
            _kubelet: kubelet,
            _controller: controller,
        }
    }

    /// The controller's log and the log of each of `agents`.
    fn logs(&self, agents: &[&str]) -> String {
        let mut out = format!(
            "controller log:\n{}",
            std::fs::read_to_string(self.dir.path().join("controller.log")).unwrap_or_default()
        );
        for node in agents {
            if let Some(a) = self.agents.get(*node) {
                out += &format!("\nagent {node} log:\n{}", a.log());
            }
        }
        out
    }

    async fn create_policy(&self, name: &str, factor: f64, rollout: Value) {
        policies(self.client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
                    "metadata": {"name": name},
                    "spec": {"nodeSelector": {"matchLabels": {"nodemem.io/pool": name}},
                        "memoryQoS": {"throttlingFactor": factor, "reservationPolicy": "TieredReservation"},
                        "rollout": crate::common::no_ready_wait(rollout)},
                }))
                .unwrap(),
            )
            .await
            .unwrap();
    }

    /// Sets the policy's throttling factor; the revision of its new settings.
    async fn set_factor(&self, name: &str, factor: f64) -> String {
        let p = Api::<NodeMemoryPolicy>::all(self.client.clone())
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"memoryQoS": {"throttlingFactor": factor}}})),
            )
            .await
            .unwrap();
        revision(&p.spec.settings)
    }

    /// The policy's status once it is Ready on `nodes` nodes with `revision` (any when
    /// None).
    async fn ready(&self, name: &str, nodes: usize, revision: Option<&str>) -> Option<Value> {
        let p = policies(self.client.clone()).get_status(name).await.ok()?;
        let s = p.data.get("status")?.clone();
        let ready = condition(&s, "Ready")?["status"] == "True"
            && s["matchedNodes"] == nodes
            && s["readyNodes"] == nodes
            && revision.is_none_or(|r| s["revision"] == r);
        ready.then_some(s)
    }

    /// Every node runs the agent DaemonSet's pod (the fake kubelet binds them). The
    /// controller places the DaemonSet on the nodes its policies select, so its pods
    /// come after the policy, and their 32Mi requests count in every node's sums: a
    /// prediction made before the pod was bound is 32Mi short of what the agent then
    /// writes, as happened once in CI (`kubepods.slice/memory.low is 67108864,
    /// predicted 33554432`).
    async fn agent_pods_running(&self) -> Option<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "nodemem-system");
        let listed = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=nodemem-agent"))
            .await
            .ok()?;
        let running = listed
            .items
            .iter()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some_and(|n| self.trees.contains_key(n))
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .count();
        (running == self.trees.len()).then_some(())
    }

    /// What `factor` predicts for the pods on `node`.
    async fn predicted(&self, node: &str, factor: f64) -> BTreeMap<(String, String), String> {
        expected_on(
            &self.client,
            node,
            CgroupDriver::Systemd,
            json!({"throttlingFactor": factor, "reservationPolicy": "TieredReservation"}),
        )
        .await
    }

    /// The spec revision of `node`'s config, if it has one.
    async fn spec_revision(&self, node: &str) -> Option<String> {
        let c = configs(self.client.clone()).get_opt(node).await.ok()??;
        Some(c.data["spec"]["revision"].as_str()?.to_string())
    }
}

fn wait_long() -> Duration {
    Duration::from_secs(120)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_cut_off_holds_its_slot_fails_at_the_deadline_with_the_reason_and_recovers() {
    const CUT: &str = "cut-2";
    let nodes = [
        ("cut-1", "cut"),
        (CUT, "cut"),
        ("cut-3", "cut"),
        ("cut-4", "cut"),
    ];
    let bed = Bed::start(&nodes, Some(CUT)).await;
    let logs = || bed.logs(&[CUT, "cut-1"]);
    bed.create_policy(
        "cut",
        0.9,
        json!({"maxUnavailable": 2, "progressDeadlineSeconds": 20, "maxFailures": 1}),
    )
    .await;
    let first = eventually("the first rollout", wait_long(), &logs, async || {
        bed.ready("cut", 4, None).await
    })
    .await;
    let old = first["revision"].as_str().unwrap().to_string();
    eventually("every node's agent pod", wait_long(), &logs, async || {
        bed.agent_pods_running().await
    })
    .await;
    let old_values = bed.predicted(CUT, 0.9).await;
    // The cut node runs what it was told (its agent pod counted) before it is cut.
    eventually("the cut node's values", wait_long(), &logs, async || {
        tree_mismatches(&bed.trees[CUT], &old_values)
            .is_empty()
            .then_some(())
    })
    .await;

    // Every state the configs pass through, from a watch started before the change.
    let (mut watch, listed) = watch_configs(&bed.client).await;
    let mut states: BTreeMap<String, (String, bool)> = listed
        .iter()
        .map(|c| {
            let r = c.data["spec"]["revision"].as_str().unwrap().to_string();
            (c.metadata.name.clone().unwrap(), (r, reports_good(c)))
        })
        .collect();
    assert!(
        states.values().all(|(r, good)| *r == old && *good),
        "{states:?}"
    );
    let proxy = bed.proxy.as_ref().unwrap();
    proxy.cut();
    let new = bed.set_factor("cut", 0.7).await;

    let mut order = Vec::new();
    let mut max_in_flight = 0;
    let mut cut_spec_at = None;
    let started = Instant::now();
    let degraded = loop {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the pool did not stop at the cut node: {states:?}\n{}",
            logs()
        );
        if let Some(c) = next_config(&mut watch, Duration::from_millis(500)).await {
            let name = c.metadata.name.clone().unwrap();
            let r = c.data["spec"]["revision"].as_str().unwrap().to_string();
            if r == new && states.get(&name).is_some_and(|s| s.0 != new) {
                order.push(name.clone());
                if name == CUT {
                    cut_spec_at = Some(Instant::now());
                }
            }
            states.insert(name, (r, reports_good(&c)));
            let in_flight = states
                .values()
                .filter(|(r, good)| *r == new && !good)
                .count();
            max_in_flight = max_in_flight.max(in_flight);
        }
        let status = policies(bed.client.clone())
            .get_status("cut")
            .await
            .unwrap()
            .data["status"]
            .clone();
        if condition(&status, "Degraded").is_some_and(|d| d["status"] == "True") {
            break status;
        }
    };
    let failed_after = cut_spec_at
        .expect("the cut node got the revision")
        .elapsed();
    // The cut node was in the first batch and held its slot: the rest moved one at a
    // time beside it, and every other node finished. A batch's configs are written
    // side by side (`--write-concurrency`), so the first two arrive in either order.
    let mut first_batch = order.get(..2).unwrap_or_default().to_vec();
    first_batch.sort();
    assert_eq!(first_batch, ["cut-1", CUT], "{order:?}\n{}", logs());
    assert_eq!(
        order.get(2..).unwrap_or_default(),
        ["cut-3", "cut-4"],
        "{order:?}\n{}",
        logs()
    );
    assert_eq!(max_in_flight, 2, "maxUnavailable 2");
    for (node, (r, good)) in &states {
        assert_eq!(
            (r.as_str(), *good),
            (new.as_str(), node != CUT),
            "{node}: {states:?}"
        );
    }
    // It failed at progressDeadlineSeconds (the spec-change time has one-second
    // resolution, the controller a one-second tick), with the reason.
    assert!(
        failed_after >= Duration::from_secs(18) && failed_after <= Duration::from_secs(30),
        "failed {failed_after:?} after its spec changed"
    );
    assert_eq!(degraded["failedNodeNames"], json!([CUT]), "{degraded:#}");
    let d = condition(&degraded, "Degraded").unwrap();
    let message = d["message"].as_str().unwrap();
    assert_eq!(d["reason"], "MaxFailures");
    assert!(
        message.ends_with(&format!(
            "stopped at maxFailures 1: {CUT} (AgentNotReporting: its agent reported nothing on this revision within progressDeadlineSeconds (20 s); it last reported revision {old}: it is cut off from the apiserver, not running, or not scheduled on the node)"
        )),
        "{message}"
    );
    let events: Api<Event> = Api::all(bed.client.clone());
    let told = eventually("the NodeFailed Event", wait_long(), &logs, async || {
        let list = events.list(&Default::default()).await.ok()?;
        list.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("NodeFailed")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("cut")
        })
    })
    .await;
    assert_eq!(told.type_.as_deref(), Some("Warning"));
    assert!(
        told.note
            .as_deref()
            .unwrap_or_default()
            .starts_with(&format!("{CUT} failed revision {new}: AgentNotReporting: ")),
        "{told:?}"
    );
    // Meanwhile the cut agent runs on (it still serves its metrics) and holds what it
    // last knew.
    assert!(
        bed.agents[CUT]
            .metric(r#"nodemem_agent_writes_total{result="ok"}"#)
            .is_some(),
        "{}",
        logs()
    );
    assert!(
        tree_mismatches(&bed.trees[CUT], &old_values).is_empty(),
        "{:?}\n{}",
        tree_mismatches(&bed.trees[CUT], &old_values),
        logs()
    );

    // The way back: the agent reconnects, applies the revision, and the pool is Ready.
    let accepted = proxy.accepted();
    proxy.restore();
    let restored = Instant::now();
    eventually(
        "the pool Ready after the restore",
        wait_long(),
        &logs,
        async || {
            let s = bed.ready("cut", 4, Some(&new)).await?;
            condition(&s, "Degraded")
                .is_some_and(|d| d["status"] == "False")
                .then_some(())
        },
    )
    .await;
    // Within 2 s of Ready, as the churn soak allows a container that appears: once
    // (four tests at once) one container read max and 0 right at Ready, its pod's and
    // the other containers right, as a cgroup made anew reads before the agent's
    // reaction writes it.
    let new_values = bed.predicted(CUT, 0.7).await;
    let tree = &bed.trees[CUT];
    let settled = nodemem_e2e::within(
        Duration::from_secs(2),
        Duration::from_millis(50),
        async || tree_mismatches(tree, &new_values).is_empty().then_some(()),
    )
    .await;
    assert!(
        settled.is_some(),
        "{:?}",
        tree_mismatches(tree, &new_values)
    );
    assert!(
        proxy.accepted() > accepted,
        "the agent came back through the proxy"
    );
    eprintln!(
        "cut agent: failed {failed_after:?} after its spec changed; Ready {:?} after the way was restored",
        restored.elapsed()
    );
}

/// The pool a node's config is in and its revision, and whether its agent reports it.
async fn state_of(client: &Client, node: &str) -> Option<(String, String, bool)> {
    node_states(client).await.remove(node)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_and_policies_that_change_under_a_rollout_and_100_quick_edits() {
    let nodes = [
        ("del-1", "del"),
        ("del-2", "del"),
        ("del-3", "del"),
        ("gone-1", "gone"),
        ("gone-2", "gone"),
        ("mva-1", "mva"),
        ("mva-2", "mva"),
        ("mva-3", "mva"),
        ("mvb-1", "mvb"),
        ("edit-1", "edit"),
        ("edit-2", "edit"),
        ("edit-3", "edit"),
    ];
    let mut bed = Bed::start(&nodes, None).await;
    let client = bed.client.clone();
    // What the nodes of pool `gone` hold before nodemem sets anything: given back to
    // them when their policy goes.
    let mut untouched = BTreeMap::new();
    for node in ["gone-1", "gone-2"] {
        let files = bed.predicted(node, 0.9).await;
        let tree = &bed.trees[node];
        let before: BTreeMap<(String, String), String> = files
            .into_keys()
            .map(|(path, file)| {
                let v = tree.read(&path, &file).unwrap();
                ((path, file), v)
            })
            .collect();
        untouched.insert(node, before);
    }
    // A slow rollout (each node ready only after 3 s) so that the faults land in it.
    let slow = json!({"maxUnavailable": 1, "minReadySeconds": 3});
    for name in ["del", "gone", "mva"] {
        bed.create_policy(name, 0.9, slow.clone()).await;
    }
    bed.create_policy("mvb", 0.6, json!({"maxUnavailable": 1}))
        .await;
    bed.create_policy("edit", 0.9, json!({"maxUnavailable": 1}))
        .await;
    {
        let logs = || bed.logs(&[]);
        for (name, n) in [("del", 3), ("gone", 2), ("mva", 3), ("mvb", 1), ("edit", 3)] {
            eventually(&format!("{name} Ready"), wait_long(), &logs, async || {
                bed.ready(name, n, None).await
            })
            .await;
        }
    }

    // 1. A node deleted while it updates: its config goes, the rollout does not wait
    //    for it and finishes on the two nodes left.
    let new = bed.set_factor("del", 0.7).await;
    {
        let logs = || bed.logs(&["del-1"]);
        eventually("del-1 updating", wait_long(), &logs, async || {
            (bed.spec_revision("del-1").await? == new).then_some(())
        })
        .await;
    }
    Api::<Node>::all(client.clone())
        .delete("del-1", &Default::default())
        .await
        .unwrap();
    drop(bed.agents.remove("del-1"));
    {
        let logs = || bed.logs(&["del-2"]);
        let s = eventually("del Ready on two nodes", wait_long(), &logs, async || {
            bed.ready("del", 2, Some(&new)).await
        })
        .await;
        assert_eq!(s["failedNodes"], 0, "{s:#}");
        assert!(configs(client.clone())
            .get_opt("del-1")
            .await
            .unwrap()
            .is_none());
        for node in ["del-2", "del-3"] {
            assert_eq!(
                state_of(&client, node).await,
                Some(("del".into(), new.clone(), true))
            );
        }
    }

    // 2. A policy deleted while it rolls out: its nodes lose their configs and their
    //    agents give back what nodemem set.
    let new = bed.set_factor("gone", 0.7).await;
    {
        let logs = || bed.logs(&["gone-1", "gone-2"]);
        eventually("gone-1 updating", wait_long(), &logs, async || {
            (bed.spec_revision("gone-1").await? == new).then_some(())
        })
        .await;
        policies(client.clone())
            .delete("gone", &Default::default())
            .await
            .unwrap();
        for node in ["gone-1", "gone-2"] {
            eventually(
                &format!("{node} given back"),
                wait_long(),
                &logs,
                async || {
                    let config = configs(client.clone()).get_opt(node).await.ok()?;
                    let back = tree_mismatches(&bed.trees[node], &untouched[node]).is_empty();
                    (config.is_none() && back).then_some(())
                },
            )
            .await;
        }
    }

    // 3. A node relabelled into another pool while its pool rolls out: it goes through
    //    the other pool's rollout, and its old pool finishes without it.
    let new_a = bed.set_factor("mva", 0.7).await;
    let b_revision = bed.ready("mvb", 1, None).await.unwrap()["revision"]
        .as_str()
        .unwrap()
        .to_string();
    {
        let logs = || bed.logs(&["mva-2"]);
        eventually("mva-2 updating", wait_long(), &logs, async || {
            (bed.spec_revision("mva-2").await? == new_a).then_some(())
        })
        .await;
        Api::<Node>::all(client.clone())
            .patch(
                "mva-2",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"nodemem.io/pool": "mvb"}}})),
            )
            .await
            .unwrap();
        eventually("mva Ready on two nodes", wait_long(), &logs, async || {
            bed.ready("mva", 2, Some(&new_a)).await
        })
        .await;
        eventually("mvb Ready on two nodes", wait_long(), &logs, async || {
            bed.ready("mvb", 2, Some(&b_revision)).await
        })
        .await;
        assert_eq!(
            state_of(&client, "mva-2").await,
            Some(("mvb".into(), b_revision.clone(), true))
        );
        let want = bed.predicted("mva-2", 0.6).await;
        eventually("mva-2 holds mvb's values", wait_long(), &logs, async || {
            tree_mismatches(&bed.trees["mva-2"], &want)
                .is_empty()
                .then_some(())
        })
        .await;
    }

    // 4. 100 edits in quick succession, every write to the pool's configs seen by a
    //    watch started before them.
    let logs = || bed.logs(&["edit-1"]);
    let (mut watch, listed) = watch_configs(&client).await;
    // What only the controller changes on a config: its spec (the generation), its
    // annotations, labels and owner. The agents write only the status.
    let written = |c: &kube::api::DynamicObject| {
        serde_json::to_string(&(
            &c.metadata.generation,
            &c.metadata.annotations,
            &c.metadata.labels,
            &c.metadata.owner_references,
        ))
        .unwrap()
    };
    let mut seen: BTreeMap<String, String> = listed
        .iter()
        .map(|c| (c.metadata.name.clone().unwrap(), written(c)))
        .collect();
    let first = bed.ready("edit", 3, None).await.unwrap()["revision"]
        .as_str()
        .unwrap()
        .to_string();
    let mut edits = vec![first];
    let began = Instant::now();
    for i in 0..100 {
        let factor = f64::from(500 + 4 * i) / 1000.0;
        edits.push(bed.set_factor("edit", factor).await);
    }
    let editing = began.elapsed();
    let last = edits.last().unwrap().clone();
    {
        let mut distinct = edits.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 101, "every edit is a new revision");
    }
    let index = |r: &str| edits.iter().position(|e| e == r);
    // (node, edit index) of every controller write, in the order etcd took them.
    let mut writes: Vec<(String, usize)> = Vec::new();
    let mut done: BTreeMap<String, bool> = BTreeMap::new();
    let deadline = Instant::now() + wait_long();
    while done.len() < 3 || !done.values().all(|d| *d) {
        assert!(
            Instant::now() < deadline,
            "the edits did not settle: {done:?}\n{}",
            logs()
        );
        let Some(c) = next_config(&mut watch, Duration::from_secs(1)).await else {
            continue;
        };
        let name = c.metadata.name.clone().unwrap();
        if !name.starts_with("edit-") {
            continue;
        }
        let r = c.data["spec"]["revision"].as_str().unwrap().to_string();
        let now = written(&c);
        if seen.get(&name) != Some(&now) {
            seen.insert(name.clone(), now);
            let i = index(&r).unwrap_or_else(|| panic!("{name} got revision {r}, never a spec"));
            writes.push((name.clone(), i));
        }
        done.insert(name, r == last && reports_good(&c));
    }
    eventually(
        "edit Ready on the last revision",
        wait_long(),
        &logs,
        async || bed.ready("edit", 3, Some(&last)).await,
    )
    .await;
    // Never back to an older revision, on any node: the controller picks from a view
    // that only moves forward.
    for pair in writes.windows(2) {
        assert!(
            pair[1].1 >= pair[0].1,
            "{} got edit {} after {} got edit {}: {writes:?}",
            pair[1].0,
            pair[1].1,
            pair[0].0,
            pair[0].1
        );
    }
    let mut per_revision: BTreeMap<(&str, usize), usize> = BTreeMap::new();
    for (node, i) in &writes {
        *per_revision.entry((node, *i)).or_default() += 1;
    }
    assert!(
        per_revision.values().all(|n| *n <= 2),
        "more than 2 writes of one revision to a node: {per_revision:?}"
    );
    for node in ["edit-1", "edit-2", "edit-3"] {
        assert_eq!(
            state_of(&client, node).await,
            Some(("edit".into(), last.clone(), true))
        );
    }
    let distinct_per_node: BTreeMap<&str, usize> =
        per_revision.keys().fold(BTreeMap::new(), |mut m, (n, _)| {
            *m.entry(*n).or_default() += 1;
            m
        });
    let metrics = controller_metrics(&bed.dir.path().join("controller.log")).unwrap();
    let series = |name: &str| crate::common::metric_in(&metrics, name).unwrap_or(0.0);
    eprintln!(
        "100 edits in {editing:?}: {} controller writes to the pool's configs, revisions per node {distinct_per_node:?}; the controller took {} watch events into {} decisions (queue cap {EVENT_QUEUE})",
        writes.len(),
        series("nodemem_controller_watch_events_total"),
        series("nodemem_controller_reconciles_total"),
    );
}
