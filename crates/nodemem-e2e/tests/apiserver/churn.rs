//! Node churn as autoscalers make it (issue 64): nodes join (a Node, its pod at once,
//! its agent started) and leave (deleted, drained, or gone NotReady before the cloud's
//! node lifecycle deletes the Node) while a rollout runs, on the real controller and
//! real agents. At a size CI affords in `make test`; `NODEMEM_CHURN_*` sets the sizes
//! for the 500-node benchmark (BENCHMARKS.md, "Node churn").

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
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
    reports_good, spawn_controller_with, watch_configs,
};

/// The sizes of a run: `make test`'s by default, each settable by the environment.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    /// Nodes in the pool before the rollout (`NODEMEM_CHURN_INITIAL`).
    initial: usize,
    /// Nodes that join during it (`NODEMEM_CHURN_JOINING`).
    joining: usize,
    /// Nodes of the initial ones that leave during it (`NODEMEM_CHURN_LEAVING`).
    leaving: usize,
    /// The rollout's maxUnavailable (`NODEMEM_CHURN_MAX_UNAVAILABLE`).
    max_unavailable: usize,
    /// The seconds over which the joins (and, beside them, the leaves) are spread
    /// (`NODEMEM_CHURN_SPREAD_SECONDS`; 0: one after another, as fast as they go).
    spread_seconds: f64,
}

impl Sizes {
    fn from_env() -> Sizes {
        let read = |name: &str, default: usize| {
            std::env::var(name)
                .ok()
                .map(|v| {
                    v.parse()
                        .unwrap_or_else(|_| panic!("{name}={v}: not a count"))
                })
                .unwrap_or(default)
        };
        let sizes = Sizes {
            initial: read("NODEMEM_CHURN_INITIAL", 12),
            joining: read("NODEMEM_CHURN_JOINING", 8),
            leaving: read("NODEMEM_CHURN_LEAVING", 6),
            max_unavailable: read("NODEMEM_CHURN_MAX_UNAVAILABLE", 2),
            spread_seconds: read("NODEMEM_CHURN_SPREAD_SECONDS", 0) as f64,
        };
        assert!(
            sizes.leaving < sizes.initial && sizes.joining > 0 && sizes.max_unavailable > 0,
            "{sizes:?}: fewer leaving than initial, at least one joining, maxUnavailable > 0"
        );
        sizes.check_inotify_instances();
        sizes
    }

    /// Every agent holds an inotify instance (its watch on the cgroup tree), and the
    /// kernel allows a user `fs.inotify.max_user_instances` (often 128): past it, the
    /// next agents end with "Too many open files" (seen: 240 of 600 running). One agent
    /// per node never meets it; hundreds on one machine do, so the run says so first.
    fn check_inotify_instances(&self) {
        let path = "/proc/sys/fs/inotify/max_user_instances";
        let Some(limit) = std::fs::read_to_string(path)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
        else {
            return;
        };
        let wanted = self.initial + self.joining + 64;
        assert!(
            limit >= wanted,
            "{self:?} runs up to {} agents, each with an inotify instance, but {path} is {limit}: raise it (sysctl fs.inotify.max_user_instances={wanted})",
            self.initial + self.joining
        );
    }

    /// The nodes that stay or join: the pool at the end.
    fn end_pool(&self) -> usize {
        self.initial - self.leaving + self.joining
    }

    /// The rollout's batches over the pool at the end, maxUnavailable at a time.
    fn batches(&self) -> usize {
        self.end_pool().div_ceil(self.max_unavailable)
    }
}

/// How a node leaves, in turn: an autoscaler's scale-down (agent and Node deleted at
/// once), a drain first (cordoned, its pods deleted and gone, then the same), or an
/// instance that vanished (its agent gone, the Node marked NotReady as the node
/// lifecycle controller marks one that stopped reporting, and deleted 10 s later as
/// the cloud's node lifecycle deletes a Node whose instance is gone).
#[derive(Clone, Copy, Debug)]
enum Leave {
    Deleted,
    Drained,
    NotReady,
}

const LEAVES: [Leave; 3] = [Leave::Deleted, Leave::Drained, Leave::NotReady];

/// Each config event as the watch saw it: when, the node, and its revision and whether
/// its agent reports it good (None: the config was deleted).
type Event = (Instant, String, Option<(String, bool)>);
type Seen = Arc<Mutex<Vec<Event>>>;

fn policy_spec(factor: f64, max_unavailable: usize) -> serde_json::Value {
    json!({"nodeSelector": {"matchLabels": {"nodemem.io/pool": "churn"}},
        "memoryQoS": {"throttlingFactor": factor, "reservationPolicy": "TieredReservation"},
        "rollout": {"maxUnavailable": max_unavailable, "minReadySeconds": 3}})
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

/// The test bed's parts a joining node needs: the control plane (its agent's
/// identity), the nodes' cgroup trees and a directory for the agents' files.
struct Bed {
    cp: nodemem_testkit::ControlPlane,
    /// An admin client: the agents' identities are made with it.
    admin: kube::Client,
    trees: BTreeMap<String, Arc<CgroupTree>>,
    dir: tempfile::TempDir,
}

impl Bed {
    /// A control plane of the test's own; the initial nodes in the pool, each with its
    /// pod and its agent; the joining nodes' cgroup trees ready; the fake kubelet
    /// running every node's pods (whatever joins later). The nodes, pods and agents are
    /// made [`IN_FLIGHT`] at a time (each agent's identity is a few requests in turn).
    async fn set_up(
        initial: &[String],
        joining: &[String],
    ) -> (
        Bed,
        kube::Client,
        FakeKubelet,
        BTreeMap<String, AgentProcess>,
    ) {
        let began = Instant::now();
        let cp = own_control_plane().await;
        let client = cp.client(&Identity::Admin).await.unwrap();
        let mut trees = BTreeMap::new();
        for node in initial.iter().chain(joining) {
            let tree = CgroupTree::new(CgroupDriver::Systemd, 2).unwrap();
            trees.insert(node.clone(), Arc::new(tree));
        }
        side_by_side(initial, |node| register(&client, node)).await;
        let kubelet = FakeKubelet::start(client.clone(), trees.clone());
        create_namespace(&client, "churn").await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "churn");
        let pods = &pods;
        side_by_side(initial, |node| async move {
            create_app_pod(pods, node, "64Mi", "256Mi").await;
        })
        .await;
        let bed = Bed {
            cp,
            admin: client.clone(),
            trees,
            dir: tempfile::tempdir().unwrap(),
        };
        let starting = &bed;
        let agents = side_by_side(initial, |node| async move {
            (node.to_string(), starting.start_agent(node).await)
        })
        .await
        .into_iter()
        .collect();
        eprintln!(
            "churn: {} nodes, their pods and agents set up in {:.1} s",
            initial.len(),
            began.elapsed().as_secs_f64()
        );
        (bed, client, kubelet, agents)
    }

    /// Starts `node`'s agent with its own node's token, its files under the bed's
    /// directory.
    async fn start_agent(&self, node: &str) -> AgentProcess {
        let kubeconfig = self.cp.agent_kubeconfig(&self.admin, node).await.unwrap();
        let node_dir = self.dir.path().join(node);
        std::fs::create_dir_all(&node_dir).unwrap();
        spawn_agent(
            node,
            self.trees[node].root(),
            &node_dir,
            &kubeconfig,
            "agent.log",
        )
    }

    /// A node joins: its Node registered in the pool, its pod created at once (before
    /// its agent, as a scheduler binds pods to a node the moment it is Ready), its
    /// agent started. Returns the agent and when it started.
    async fn join(&self, client: &kube::Client, node: &str) -> (AgentProcess, Instant) {
        register(client, node).await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "churn");
        create_app_pod(&pods, node, "64Mi", "256Mi").await;
        let agent = self.start_agent(node).await;
        (agent, Instant::now())
    }
}

/// Joins, leaves and set-up steps under way at once: enough that a node's few requests
/// in turn (its Node, its pod, its agent's identity: a pod bound to it and a token)
/// keep up with 500 joins a minute.
const IN_FLIGHT: usize = 64;

/// `step` for each node, [`IN_FLIGHT`] at a time; the outputs in completion order.
async fn side_by_side<'a, F, T>(nodes: &'a [String], step: impl Fn(&'a str) -> F) -> Vec<T>
where
    F: std::future::Future<Output = T>,
{
    futures::stream::iter(nodes)
        .map(|node| step(node))
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await
}

/// Registers `node` as a Node of the churn pool.
async fn register(client: &kube::Client, node: &str) {
    SimNode::new(node)
        .label("nodemem.io/pool", "churn")
        .register(client)
        .await
        .unwrap();
}

/// The agents' resident memory (MiB, from /proc), sorted.
fn resident_mib<'a>(agents: impl Iterator<Item = &'a AgentProcess>) -> Vec<f64> {
    let mut rss: Vec<f64> = agents
        .filter_map(|a| {
            let status = std::fs::read_to_string(format!("/proc/{}/status", a.pid())).ok()?;
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib / 1024.0)
        })
        .collect();
    rss.sort_by(f64::total_cmp);
    rss
}

/// Takes `node` out of the cluster as `way` says; returns when its Node was deleted.
async fn leave(client: &kube::Client, node: &str, agent: AgentProcess, way: Leave) -> Instant {
    let nodes: Api<Node> = Api::all(client.clone());
    match way {
        Leave::Deleted => drop(agent),
        Leave::Drained => {
            let cordon = Patch::Merge(json!({"spec": {"unschedulable": true}}));
            nodes
                .patch(node, &PatchParams::default(), &cordon)
                .await
                .unwrap();
            let pods: Api<Pod> = Api::namespaced(client.clone(), "churn");
            let pod = format!("app-{node}");
            pods.delete(&pod, &DeleteParams::default()).await.unwrap();
            // What the pod was at the last look, for a failure message.
            let last = Mutex::new(String::from("not read"));
            // Looked at each half second: a tenth of a second, with 64 drains at once,
            // was 640 reads a second on the apiserver the agents share.
            let gone = nodemem_e2e::within(
                Duration::from_secs(120),
                Duration::from_millis(500),
                async || {
                    let now = pods.get_opt(&pod).await;
                    *last.lock().unwrap() = match &now {
                        Ok(Some(p)) => format!(
                            "deletionTimestamp {:?}, phase {:?}, node {:?}",
                            p.metadata.deletion_timestamp,
                            p.status.as_ref().and_then(|s| s.phase.clone()),
                            p.spec.as_ref().and_then(|s| s.node_name.clone())
                        ),
                        Ok(None) => "gone".into(),
                        Err(e) => format!("not read: {e}"),
                    };
                    now.ok()?.is_none().then_some(())
                },
            )
            .await;
            assert!(
                gone.is_some(),
                "timed out waiting for drained node {node}'s pod gone: at the last look {}",
                last.lock().unwrap()
            );
            drop(agent);
        }
        Leave::NotReady => {
            drop(agent);
            let now = nodemem_testkit::nodes::now();
            let unknown = Patch::Strategic(json!({"status": {"conditions": [{
                "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.",
                "lastHeartbeatTime": now, "lastTransitionTime": now}]}}));
            nodes
                .patch_status(node, &PatchParams::default(), &unknown)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    }
    let at = Instant::now();
    nodes.delete(node, &DeleteParams::default()).await.unwrap();
    at
}

/// Every config event from `watch` on, into `seen`, until aborted.
fn record_configs(
    mut watch: crate::common::ConfigWatch,
    seen: Seen,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        use kube::runtime::watcher::Event;
        while let Some(event) = watch.next().await {
            let (c, gone) = match event {
                Ok(Event::Apply(c) | Event::InitApply(c)) => (c, false),
                Ok(Event::Delete(c)) => (c, true),
                _ => continue,
            };
            let name = c.metadata.name.clone().unwrap_or_default();
            let state = (!gone).then(|| (revision_of(&c), reports_good(&c)));
            seen.lock().unwrap().push((Instant::now(), name, state));
        }
    })
}

fn revision_of(c: &kube::api::DynamicObject) -> String {
    c.data["spec"]["revision"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// The joins and the leaves, side by side, each spread over the run's seconds: the
/// joined nodes' agents and when each started, and when each leaving Node was deleted.
async fn churn(
    bed: &Bed,
    client: &kube::Client,
    sizes: Sizes,
    joining: &[String],
    leaving: Vec<(String, AgentProcess)>,
) -> (
    BTreeMap<String, (AgentProcess, Instant)>,
    BTreeMap<String, Instant>,
) {
    let began = tokio::time::Instant::now();
    let at = |i: usize, of: usize| {
        began + Duration::from_secs_f64(sizes.spread_seconds * i as f64 / of as f64)
    };
    let joins = futures::stream::iter(joining.iter().enumerate())
        .map(|(i, node)| async move {
            tokio::time::sleep_until(at(i, joining.len())).await;
            (node.clone(), bed.join(client, node).await)
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<BTreeMap<_, _>>();
    let count = leaving.len();
    let leaves = futures::stream::iter(leaving.into_iter().enumerate())
        .map(|(i, (node, agent))| async move {
            tokio::time::sleep_until(at(i, count)).await;
            let left = leave(client, &node, agent, LEAVES[i % LEAVES.len()]).await;
            (node, left)
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<BTreeMap<_, _>>();
    tokio::join!(joins, leaves)
}

/// When `node`'s config was first seen reported good, on `revision` or (None) any.
fn good_at(seen: &[Event], node: &str, revision: Option<&str>) -> Option<Instant> {
    seen.iter()
        .find(|(_, n, s)| {
            n == node
                && s.as_ref()
                    .is_some_and(|(r, good)| *good && revision.is_none_or(|want| r == want))
        })
        .map(|(at, ..)| *at)
}

/// The seconds from each joining node's agent start to `good` (sorted).
fn waits(
    joined: &BTreeMap<String, (AgentProcess, Instant)>,
    good: impl Fn(&str) -> Option<Instant>,
) -> Vec<f64> {
    let mut waits: Vec<f64> = joined
        .iter()
        .map(|(n, (_, started))| {
            let at = good(n).unwrap_or_else(|| panic!("{n} never seen good"));
            at.saturating_duration_since(*started).as_secs_f64()
        })
        .collect();
    waits.sort_by(f64::total_cmp);
    waits
}

/// The controller's `nodemem_controller_nodes` for the policy: matched, updated, ready,
/// failed.
fn counted_nodes(metrics: &str) -> [Option<f64>; 4] {
    ["matched", "updated", "ready", "failed"].map(|state| {
        let series = format!("nodemem_controller_nodes{{policy=\"churn\",state=\"{state}\"}}");
        crate::common::metric_in(metrics, &series)
    })
}

/// A rollout (maxUnavailable 2, minReadySeconds 3) over 12 nodes while 8 nodes join,
/// each with a pod landing at once and its agent started, and 6 leave (in turn deleted,
/// drained, gone NotReady): every node that stays or joins ends on the new revision,
/// reported good; each joining node runs the revision the pool ran within seconds of
/// its agent starting, and the new one within the rollout's own pace (both printed);
/// no config is left
/// for a node that is gone, and the controller counts none; at no moment are more than
/// maxUnavailable nodes on the new revision without a good report; and the leaving
/// nodes fail nothing (no failed node, no rollback, the policy Ready).
#[tokio::test]
async fn nodes_joining_and_leaving_mid_rollout_neither_exceed_its_pace_nor_fail_it() {
    let sizes = Sizes::from_env();
    let names: Vec<String> = (1..=sizes.initial + sizes.joining)
        .map(|i| format!("churn-{i:04}"))
        .collect();
    let (initial, joining) = names.split_at(sizes.initial);
    let (bed, client, _kubelet, mut agents) = Bed::set_up(initial, joining).await;
    let controller_log = bed.dir.path().join("controller.log");
    // One replica, without leader election: the tests' 6 s Lease was lost to an
    // apiserver slow to answer while 600 agents started on two cores (the controller
    // then exits for its Deployment to start it again, and no Deployment runs here).
    let _controller = spawn_controller_with(
        &bed.cp.kubeconfig(&Identity::Controller).await.unwrap(),
        "replica-a",
        "nodemem:test",
        &controller_log,
        &["--leader-elect", "false"],
    );
    let logs = || std::fs::read_to_string(&controller_log).unwrap_or_default();
    let policies = crate::common::policies(client.clone());
    create_policy(&policies, "churn", policy_spec(0.9, sizes.max_unavailable)).await;
    let first = crate::common::eventually(
        "the pool on its first revision",
        Duration::from_secs(120 + sizes.initial as u64 / 2),
        &logs,
        async || {
            let states = node_states(&client).await;
            let r = states.values().next()?.1.clone();
            let all = states.len() == sizes.initial
                && states.values().all(|(_, rev, good)| *rev == r && *good);
            all.then_some(r)
        },
    )
    .await;

    // Every config event from here on.
    let (watch, listed) = watch_configs(&client).await;
    let start: BTreeMap<String, (String, bool)> = listed
        .iter()
        .map(|c| {
            (
                c.metadata.name.clone().unwrap(),
                (revision_of(c), reports_good(c)),
            )
        })
        .collect();
    let seen: Seen = Arc::default();
    let watching = record_configs(watch, seen.clone());

    // The rollout starts; nodes join and leave while it runs.
    let rollout = Patch::Merge(json!({"spec": policy_spec(0.8, sizes.max_unavailable)}));
    policies
        .patch("churn", &PatchParams::default(), &rollout)
        .await
        .unwrap();
    let churn_began = Instant::now();
    let leaving: Vec<(String, AgentProcess)> = initial[..sizes.leaving]
        .iter()
        .map(|n| (n.clone(), agents.remove(n).unwrap()))
        .collect();
    let (joined, left_at) = churn(&bed, &client, sizes, joining, leaving).await;
    let churned = churn_began.elapsed().as_secs_f64();
    let since_churn = |last: Option<&Instant>| {
        last.map_or(0.0, |t| {
            t.saturating_duration_since(churn_began).as_secs_f64()
        })
    };
    let joins_took = since_churn(joined.values().map(|(_, t)| t).max());
    let leaves_took = since_churn(left_at.values().max());
    let staying: Vec<&String> = initial[sizes.leaving..].iter().chain(joining).collect();
    let second = crate::common::eventually(
        "every staying and joining node on the new revision, reported good, no config for a node that left",
        Duration::from_secs(120 + 10 * sizes.batches() as u64),
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
    // The controller counts the pool at the end, none of the nodes that left, and no
    // node failed.
    let end = Some(staying.len() as f64);
    crate::common::eventually(
        "the controller counting the pool at the end",
        Duration::from_secs(30),
        &logs,
        async || {
            crate::common::controller_metrics(&controller_log)
                .filter(|m| counted_nodes(m) == [end, end, end, Some(0.0)])
        },
    )
    .await;
    watching.abort();
    let seen = seen.lock().unwrap().clone();
    let most = most_updating(&start, &seen, &second, &left_at);
    let first_values = waits(&joined, |n| good_at(&seen, n, None));
    // Joining nodes whose first values were the pool's running revision, not the
    // rollout's target (given at once, the target in their turn).
    let ran_first = joined
        .keys()
        .filter(|n| good_at(&seen, n, Some(&first)) == good_at(&seen, n, None))
        .count();
    let on_second = waits(&joined, |n| good_at(&seen, n, Some(&second)));
    let median = |w: &[f64]| w[w.len() / 2];
    let last = |w: &[f64]| w[w.len() - 1];
    let rss = resident_mib(agents.values().chain(joined.values().map(|(a, _)| a)));
    eprintln!(
        "churn: the {} agents at the end: resident {:.1} MiB (median) to {:.1} MiB (largest), {:.0} MiB in all",
        rss.len(),
        median(&rss),
        last(&rss),
        rss.iter().sum::<f64>()
    );
    eprintln!(
        "churn: {} nodes joined and {} left (deleted, drained, NotReady in turn) in {churned:.1} s (the last agent started at {joins_took:.1} s, the last Node deleted at {leaves_took:.1} s), during a rollout of {} (maxUnavailable {}, minReadySeconds 3): joining nodes' first values reported good {:.1} s (median) to {:.1} s (last) after their agents started ({ran_first} of them on the revision the pool ran), on the new revision {:.1} s to {:.1} s; at most {most} node(s) on the new revision without a good report at once",
        sizes.joining,
        sizes.leaving,
        sizes.initial,
        sizes.max_unavailable,
        median(&first_values),
        last(&first_values),
        median(&on_second),
        last(&on_second),
    );
    assert!(most <= sizes.max_unavailable, "{most} updating at once");
    assert!(
        status["failedNodeNames"]
            .as_array()
            .is_none_or(|a| a.is_empty()),
        "{status:#}"
    );
    assert!(status["rolledBackRevision"].is_null(), "{status:#}");
    // A joining node runs the pool's revision at once, however far the rollout is
    // from its turn: its first values within seconds of its agent (0.3 s at make
    // test's size, where the rollout's pace is 29 s; the bound leaves room for a
    // loaded machine, and for 500 agents starting in a minute beside 600 on two cores:
    // 52.8 s for the last of them).
    let first_bound = 15.0 + sizes.joining as f64 / 10.0;
    assert!(
        last(&first_values) < first_bound,
        "joining nodes' first values {first_values:?}"
    );
    assert!(
        ran_first > 0,
        "no joining node ran the pool's revision first"
    );
    // And the target in its turn: at most the rollout's batches in front of it
    // (maxUnavailable at a time, each ready after 3 s) on the test bed's two cores:
    // 90 s for make test's 14 nodes, 2 at a time.
    let bound = 20.0 + 10.0 * sizes.batches() as f64;
    assert!(
        last(&on_second) < bound,
        "joining nodes waited {on_second:?}"
    );
}
