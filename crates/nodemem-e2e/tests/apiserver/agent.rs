//! The in-cluster agent: the real `nodemem agent` binary as a process for a simulated
//! node, with the agent's own token (deploy/agent RBAC and admission policy), pointed at
//! the node's temp cgroup tree the fake kubelet fills.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kube::Client;
use nodemem_api::convert::node_settings;
use nodemem_api::k8s::{
    node_allocatable_memory, node_capacity_memory, node_pod_from_k8s, node_status_facts,
};
use nodemem_api::{NodeMemoryConfig, NodeSettings};
use nodemem_model::node::{desired_node, NodeFacts, NodeInput};
use nodemem_model::values::cgroup::CgroupValue;
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_model::values::memory_qos::NodeMemoryFacts;
use nodemem_testkit::cgroup_tree::CgroupTree;
use nodemem_testkit::kubelet::FakeKubelet;
use nodemem_testkit::nodes::SimNode;
use nodemem_testkit::Identity;
use serde_json::{json, Value};

use crate::authority::apply_manifest;
use crate::common::{admin, cluster, condition, create_namespace, create_pod, eventually};

const NODE: &str = "agent-node-1";
const NS: &str = "agent-pods";

/// The agent process, killed when the test ends however it ends.
pub(crate) struct AgentProcess {
    child: Child,
    log: std::path::PathBuf,
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl AgentProcess {
    /// Starts `command` with its stderr in `log`.
    pub(crate) fn spawn(command: &mut Command, log: std::path::PathBuf) -> AgentProcess {
        AgentProcess {
            child: command
                .stderr(std::fs::File::create(&log).unwrap())
                .spawn()
                .expect("start the agent"),
            log,
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub(crate) fn child_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// GET a path from the agent's metrics endpoint: status code and body.
    fn get(&self, path: &str) -> Option<(u16, String)> {
        crate::common::get_logged_endpoint(&self.log(), path)
    }

    /// The value of one metric line (exact name and labels).
    pub(crate) fn metric(&self, series: &str) -> Option<f64> {
        let (_, body) = self.get("/metrics")?;
        crate::common::metric_in(&body, series)
    }
}

pub(crate) fn configs(client: Client) -> Api<DynamicObject> {
    Api::all_with(client, &ApiResource::erase::<NodeMemoryConfig>(&()))
}

fn config_spec(revision: &str, memory_qos: Value) -> Value {
    json!({"policy": "agent-test", "revision": revision, "memoryQoS": memory_qos})
}

async fn set_config(client: &Client, revision: &str, memory_qos: Value) {
    set_config_on(client, NODE, revision, memory_qos).await
}

pub(crate) async fn set_config_on(client: &Client, node: &str, revision: &str, memory_qos: Value) {
    apply_config(client, node, config_spec(revision, memory_qos)).await
}

/// Server-side applies a NodeMemoryConfig `spec` for `node`, as the controller would.
pub(crate) async fn apply_config(client: &Client, node: &str, spec: Value) {
    configs(client.clone())
        .patch(
            node,
            &PatchParams::apply("nodemem-controller-test").force(),
            &Patch::Apply(json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
                "metadata": {"name": node},
                "spec": spec,
            })),
        )
        .await
        .unwrap();
}

pub(crate) async fn wait_for<T>(
    what: &str,
    agent: &AgentProcess,
    check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let logs = || format!("agent log:\n{}", agent.log());
    eventually(what, Duration::from_secs(60), &logs, check).await
}

/// The config's status once it reports `revision` applied.
async fn applied(client: &Client, agent: &AgentProcess, revision: &str) -> Value {
    applied_on(client, NODE, agent, revision).await
}

pub(crate) async fn applied_on(
    client: &Client,
    node: &str,
    agent: &AgentProcess,
    revision: &str,
) -> Value {
    applied_with_logs(client, node, revision, &|| {
        format!("agent log:\n{}", agent.log())
    })
    .await
}

/// The node's config status once its agent reports `revision` applied; `logs` for the
/// failure message.
pub(crate) async fn applied_with_logs(
    client: &Client,
    node: &str,
    revision: &str,
    logs: &dyn Fn() -> String,
) -> Value {
    let what = format!("revision {revision} applied");
    eventually(&what, Duration::from_secs(60), logs, async || {
        let c = configs(client.clone()).get_status(node).await.ok()?;
        let status = c.data.get("status")?.clone();
        let applied = condition(&status, "Applied")?["status"] == "True";
        (status["observedRevision"] == revision && applied).then_some(status)
    })
    .await
}

/// What the node computation predicts for the pods on the API and these settings.
async fn expected(client: &Client, memory_qos: Value) -> BTreeMap<(String, String), String> {
    expected_on(client, NODE, CgroupDriver::Systemd, memory_qos).await
}

pub(crate) async fn expected_on(
    client: &Client,
    node_name: &str,
    driver: CgroupDriver,
    memory_qos: Value,
) -> BTreeMap<(String, String), String> {
    // Every pod bound to the node: the test's and the agent's own (the harness binds
    // the agent's token to a pod on the node, as a DaemonSet pod's is).
    let pods: Api<Pod> = Api::all(client.clone());
    let on_node = kube::api::ListParams::default().fields(&format!("spec.nodeName={node_name}"));
    let mut listed: Vec<Pod> = pods.list(&on_node).await.unwrap().items;
    listed.sort_by_key(|p| {
        (
            p.metadata
                .creation_timestamp
                .clone()
                .map(|t| t.0.to_string()),
            p.metadata.name.clone(),
        )
    });
    let node_pods: Vec<_> = listed
        .iter()
        .map(|p| node_pod_from_k8s(p, &Default::default()).unwrap())
        .collect();
    let node: Node = Api::<Node>::all(client.clone())
        .get(node_name)
        .await
        .unwrap();
    let settings: NodeSettings = serde_json::from_value(config_spec("x", memory_qos)).unwrap();
    let settings = node_settings(&settings).unwrap();
    let facts = NodeFacts {
        memory: NodeMemoryFacts {
            allocatable_memory: node_allocatable_memory(&node).unwrap(),
            capacity_memory: node_capacity_memory(&node).unwrap(),
            // No kubelet configuration on this node: the agent takes the kubelet's
            // default hard eviction threshold.
            hard_eviction_memory: Some(
                nodemem_model::cluster::policy::DEFAULT_EVICTION_HARD_MEMORY,
            ),
            // SAFETY: sysconf has no preconditions.
            page_size: unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as i64,
            kernel_version: Some("6.1.0-56-amd64".into()),
            // The rules of the kubelet version the simulated Node reports.
            kubelet_version: node_status_facts(&node).kubelet_version(),
            kubelet_float: node_status_facts(&node).kubelet_float(),
        },
        cgroup_driver: driver,
        ..NodeFacts::default()
    };
    let desired = desired_node(NodeInput {
        settings: &settings,
        facts: &facts,
        pods: &node_pods,
        memory_manager: None,
    })
    .unwrap();
    let mut out = BTreeMap::new();
    for c in desired.cgroups() {
        for (file, value) in c.managed() {
            let text = match value {
                CgroupValue::Bytes(b) => b.to_string(),
                CgroupValue::Text(t) => t.clone(),
            };
            out.insert((c.path.to_string(), file.to_string()), text);
        }
    }
    out
}

fn assert_tree(
    tree: &CgroupTree,
    expected: &BTreeMap<(String, String), String>,
    agent: &AgentProcess,
) {
    let wrong = tree_mismatches(tree, expected);
    assert!(wrong.is_empty(), "{wrong:#?}; agent log:\n{}", agent.log());
}

/// Each (cgroup, file) whose value in the tree is not the expected one, with both.
pub(crate) fn tree_mismatches(
    tree: &CgroupTree,
    expected: &BTreeMap<(String, String), String>,
) -> Vec<String> {
    expected
        .iter()
        .filter_map(|((path, file), want)| match tree.read(path, file) {
            Ok(have) if &have == want => None,
            Ok(have) => Some(format!("{path}/{file} is {have}, predicted {want}")),
            Err(e) => Some(format!("{path}/{file}: {e}")),
        })
        .collect()
}

/// The cgroup of container `app` of pod `name`, as the fake kubelet created it
/// (systemd driver), in the pod's QoS class.
pub(crate) async fn app_cgroup(pods: &Api<Pod>, name: &str) -> String {
    use nodemem_model::pod::qos::QosClass;
    use nodemem_model::values::cgroup_layout::{container_dir, ContainerId, ContainerRuntime};
    let p = pods.get(name).await.unwrap();
    let uid = p.metadata.uid.unwrap();
    let qos = match p.status.and_then(|s| s.qos_class).as_deref() {
        Some("BestEffort") => QosClass::BestEffort,
        Some("Guaranteed") => QosClass::Guaranteed,
        _ => QosClass::Burstable,
    };
    let id = ContainerId {
        runtime: ContainerRuntime::Containerd,
        id: nodemem_testkit::kubelet::container_id(&uid, "app"),
    };
    container_dir(CgroupDriver::Systemd, qos, &uid, &id)
}

/// A simulated node for one agent test: [`node_without_kubelet`] and the fake kubelet
/// running its pods.
pub(crate) async fn simulated_node(
    client: &kube::Client,
    node: &str,
    namespace: &str,
    driver: CgroupDriver,
) -> (Arc<CgroupTree>, FakeKubelet) {
    let tree = node_without_kubelet(client, node, namespace, driver, 2).await;
    let kubelet = FakeKubelet::start(
        client.clone(),
        BTreeMap::from([(node.to_string(), tree.clone())]),
    );
    (tree, kubelet)
}

/// The agent's RBAC and admission policy, a namespace for the test's pods, the Node
/// and its cgroup tree in `driver`'s layout with `numa_nodes`; nothing starts pods.
pub(crate) async fn node_without_kubelet(
    client: &kube::Client,
    node: &str,
    namespace: &str,
    driver: CgroupDriver,
    numa_nodes: usize,
) -> Arc<CgroupTree> {
    apply_manifest(client, "deploy/namespace.yaml").await;
    apply_manifest(client, "deploy/agent/rbac.yaml").await;
    apply_manifest(client, "deploy/agent/admission-policy.yaml").await;
    create_namespace(client, namespace).await;
    SimNode::new(node).register(client).await.unwrap();
    Arc::new(CgroupTree::new(driver, numa_nodes).unwrap())
}

/// The in-cluster agent as the real binary for a simulated node: its values match the
/// node computation for every QoS class, config changes acknowledged with
/// `observedRevision`/`Applied`, a refused write gives `Applied=False WriteFailed` and
/// an Event and is repaired with a hand-made drift on resync, metrics scraped by value,
/// a restart with the apiserver unreachable enforces from the state directory and
/// reports later without writing twice, a deleted pod is no error, disabling restores,
/// per-pod and per-container metric series.
#[tokio::test]
async fn the_agent_enforces_its_config_on_its_node_and_reports() {
    let cp = cluster();
    let client = admin().await;
    let (tree, _kubelet) = simulated_node(&client, NODE, NS, CgroupDriver::Systemd).await;

    // The config first (what the controller will write), then the pods.
    let tiered = json!({"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation"});
    set_config(&client, "rev-1", tiered.clone()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod = |name: &str, resources: Value| {
        json!({
            "metadata": {"name": name},
            "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "x", "resources": resources}]},
        })
    };
    for (name, resources) in [
        (
            "guaranteed",
            json!({"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}),
        ),
        (
            "burstable",
            json!({"requests": {"memory": "128Mi"}, "limits": {"memory": "512Mi"}}),
        ),
        ("besteffort", json!({})),
    ] {
        create_pod(&pods, pod(name, resources.clone())).await;
    }

    // The agent: the real binary, with its node's token.
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cp.kubeconfig(&Identity::Agent(NODE.into())).await.unwrap();
    let spawn = |kubeconfig: &std::path::Path, log: &str| {
        let per_container = [
            "--per-container-metrics",
            "--per-container-metrics-cap",
            "10",
        ];
        let per_container: Vec<std::ffi::OsString> = per_container.iter().map(Into::into).collect();
        spawn_agent_with(
            NODE,
            tree.root(),
            dir.path(),
            kubeconfig,
            log,
            &per_container,
        )
    };
    let mut agent = spawn(&kubeconfig, "agent.log");

    // Every pod's values, as the computation predicts, once the agent reports rev-1.
    let status = applied(&client, &agent, "rev-1").await;
    assert_eq!(
        status["managedPods"], 4,
        "three test pods and the agent's own: {status:#}"
    );
    assert_eq!(status["node"]["cgroupDriver"], "systemd");
    assert_eq!(status["node"]["kernelVersion"], "6.1.0-56-amd64");
    let kernel = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "KernelSupported")
        .unwrap();
    assert_eq!(kernel["status"], "True", "{kernel}");
    let want = wait_for("all three pods in the prediction", &agent, async || {
        let e = expected(&client, tiered.clone()).await;
        (e.keys().filter(|(p, _)| p.contains("kubepods-")).count() >= 5).then_some(e)
    })
    .await;
    let agent_ref = &agent;
    wait_for("the tree to match the prediction", agent_ref, async || {
        want.iter()
            .all(|((p, f), v)| tree.read(p, f).ok().as_deref() == Some(v))
            .then_some(())
    })
    .await;
    assert_tree(&tree, &want, &agent);
    assert_eq!(
        status["totals"]["memoryMinBytes"].as_i64().unwrap()
            + status["totals"]["memoryLowBytes"].as_i64().unwrap(),
        (256 + 128) << 20
    );

    // Healthy, until an OOM-kill burst lands in a managed pod's memory.events.
    let healthy = |status: &Value| {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Healthy")
            .cloned()
            .unwrap()
    };
    assert_eq!(healthy(&status)["status"], "True", "{status:#}");
    let g_uid = pods.get("guaranteed").await.unwrap().metadata.uid.unwrap();
    let g_dir = nodemem_model::values::cgroup_layout::pod_dir(
        CgroupDriver::Systemd,
        nodemem_model::pod::qos::QosClass::Guaranteed,
        &g_uid,
    );
    let events_file = tree.root().join(&g_dir).join("memory.events");
    let calm = std::fs::read_to_string(&events_file).unwrap();
    std::fs::write(
        &events_file,
        calm.replace("high 0", "high 12")
            .replace("oom_kill 0", "oom_kill 5"),
    )
    .unwrap();
    let sick = wait_for("Healthy=False after the OOM kills", &agent, async || {
        let c = configs(client.clone()).get_status(NODE).await.ok()?;
        let s = c.data.get("status")?.clone();
        (healthy(&s)["status"] == "False").then_some(s)
    })
    .await;
    assert_eq!(healthy(&sick)["reason"], "OOMKillBurst", "{sick:#}");
    assert_eq!(sick["sinceRevision"]["oomKills"], 5);
    assert_eq!(sick["sinceRevision"]["throttleEvents"], 12);
    assert_eq!(sick["sinceRevision"]["revision"], "rev-1");
    // The same signals in the metrics, per QoS class (counters).
    assert_eq!(
        agent.metric("nodemem_agent_oom_kills_total{qos=\"guaranteed\"}"),
        Some(5.0)
    );
    assert_eq!(
        agent.metric("nodemem_agent_memory_high_events_total{qos=\"guaranteed\"}"),
        Some(12.0)
    );
    assert_eq!(
        agent.metric("nodemem_agent_oom_kills_total{qos=\"burstable\"}"),
        Some(0.0)
    );
    // Per pod (by default) and per container (asked for, within the cap).
    let pod_series = |metric: &str, pod: &str, qos: &str| {
        agent.metric(&format!(
            "nodemem_agent_{metric}{{namespace=\"{NS}\",pod=\"{pod}\",qos=\"{qos}\"}}"
        ))
    };
    assert_eq!(
        pod_series("pod_oom_kills_total", "guaranteed", "guaranteed"),
        Some(5.0)
    );
    assert_eq!(
        pod_series("pod_memory_high_events_total", "guaranteed", "guaranteed"),
        Some(12.0)
    );
    assert_eq!(
        pod_series("pod_oom_kills_total", "burstable", "burstable"),
        Some(0.0)
    );
    assert_eq!(
        agent.metric(&format!(
            "nodemem_agent_container_oom_kills_total{{namespace=\"{NS}\",pod=\"burstable\",container=\"app\"}}"
        )),
        Some(0.0)
    );
    assert_eq!(
        agent.metric("nodemem_agent_containers_not_exported"),
        Some(0.0)
    );
    assert!(healthy(&sick)["message"].as_str().unwrap().starts_with(
        "5 OOM kill(s) in managed pods since revision rev-1 was applied (tolerated: 3)"
    ));
    std::fs::write(&events_file, calm).unwrap();
    wait_for("Healthy=True again", &agent, async || {
        let c = configs(client.clone()).get_status(NODE).await.ok()?;
        (healthy(c.data.get("status")?)["status"] == "True").then_some(())
    })
    .await;

    // A write the kernel refuses: Applied=False with the file and errno, an Event on the
    // config, and once the file takes writes again the next resync applies it.
    let low = tree.root().join("kubepods.slice/memory.low");
    let low_value = std::fs::read_to_string(&low).unwrap();
    std::fs::remove_file(&low).unwrap();
    std::fs::create_dir(&low).unwrap();
    std::fs::write(tree.root().join("kubepods.slice/memory.min"), "0").unwrap();
    let failed = wait_for("Applied=False WriteFailed", &agent, async || {
        let c = configs(client.clone()).get_status(NODE).await.ok()?;
        let applied = c.data["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Applied")?
            .clone();
        (applied["status"] == "False").then_some((applied, c.data["status"]["lastError"].clone()))
    })
    .await;
    assert_eq!(failed.0["reason"], "WriteFailed", "{failed:?}");
    let message = failed.0["message"].as_str().unwrap();
    assert!(
        message.contains("kubepods.slice/memory.low: Is a directory (os error 21) (errno 21)"),
        "{message}"
    );
    assert!(
        failed.1.as_str().unwrap().contains("memory.low"),
        "{failed:?}"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    wait_for("a WriteFailed event on the config", &agent, async || {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("WriteFailed")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(NODE)
                    && e.type_.as_deref() == Some("Warning")
            })
    })
    .await;
    std::fs::remove_dir(&low).unwrap();
    std::fs::write(&low, low_value).unwrap();
    wait_for("Applied=True again after the resync", &agent, async || {
        let c = configs(client.clone()).get_status(NODE).await.ok()?;
        let applied = c.data["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Applied")?
            .clone();
        (applied["status"] == "True").then_some(())
    })
    .await;
    assert_tree(&tree, &want, &agent);

    // Metrics, scraped and checked by value.
    assert_eq!(agent.get("/healthz").map(|r| r.0), Some(200));
    assert_eq!(agent.get("/readyz").map(|r| r.0), Some(200));
    assert_eq!(
        agent.metric("nodemem_agent_managed_pods"),
        Some(4.0),
        "{:?}",
        agent.get("/metrics")
    );
    assert_eq!(
        agent.metric("nodemem_agent_node_memory_min_bytes"),
        Some(256.0 * 1024.0 * 1024.0),
        "Guaranteed 256Mi under TieredReservation"
    );
    assert_eq!(
        agent.metric("nodemem_agent_node_memory_low_bytes"),
        Some(128.0 * 1024.0 * 1024.0)
    );
    assert!(
        agent
            .metric("nodemem_agent_writes_total{result=\"ok\"}")
            .unwrap_or(0.0)
            >= 10.0
    );
    assert!(
        agent
            .metric("nodemem_agent_write_errors_total{errno=\"EISDIR\"}")
            .unwrap_or(0.0)
            >= 1.0
    );
    assert!(
        agent
            .metric("nodemem_agent_drift_repairs_total")
            .unwrap_or(0.0)
            >= 1.0,
        "memory.min reset by hand, repaired on resync"
    );
    assert!(
        agent
            .metric("nodemem_agent_passes_total{trigger=\"resync\"}")
            .unwrap_or(0.0)
            >= 1.0
    );

    // A config change is applied and acknowledged.
    let hard = json!({"throttlingFactor": 0.8, "reservationPolicy": "HardReservation"});
    set_config(&client, "rev-2", hard.clone()).await;
    applied(&client, &agent, "rev-2").await;
    assert_tree(&tree, &expected(&client, hard.clone()).await, &agent);

    // Restarted while the apiserver is unreachable, the agent enforces the last known
    // config from its state directory at once (a value lost meanwhile comes back), and
    // reports when the apiserver is reachable again, applying nothing twice.
    drop(agent);
    let hard_kubepods_min = tree.read("kubepods.slice", "memory.min").unwrap();
    std::fs::write(tree.root().join("kubepods.slice/memory.min"), "0").unwrap();
    let unreachable = dir.path().join("unreachable.kubeconfig");
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let server = text
        .lines()
        .find(|l| l.trim_start().starts_with("server:"))
        .unwrap()
        .trim()
        .to_string();
    std::fs::write(
        &unreachable,
        text.replace(&server, "server: https://127.0.0.1:9"),
    )
    .unwrap();
    let offline = spawn(&unreachable, "offline.log");
    // The pass writes first and logs once it has held the values in systemd, so the
    // value can be back before the line is: wait for both (a CI run caught the gap).
    wait_for(
        "the offline agent to restore kubepods memory.min and say so",
        &offline,
        async || {
            let restored = tree.read("kubepods.slice", "memory.min").ok()? == hard_kubepods_min;
            let said = offline
                .log()
                .contains("enforced the last known config from the state directory");
            (restored && said).then_some(())
        },
    )
    .await;
    drop(offline);
    agent = spawn(&kubeconfig, "agent-again.log");
    // The restarted agent's first passes find everything in place: no write at all.
    wait_for("the restarted agent's first pass", &agent, async || {
        agent
            .metric("nodemem_agent_passes_total{trigger=\"event\"}")
            .filter(|n| *n >= 1.0)
    })
    .await;
    applied(&client, &agent, "rev-2").await;
    assert_eq!(
        agent.metric("nodemem_agent_writes_total{result=\"ok\"}"),
        None,
        "nothing applied twice:\n{}",
        agent.log()
    );

    // A pod deleted meanwhile is no error.
    pods.delete("burstable", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    wait_for(
        "the burstable pod gone from kubepods memory.min",
        &agent,
        async || {
            (tree.read("kubepods.slice", "memory.min").ok()? == (256u64 << 20).to_string())
                .then_some(())
        },
    )
    .await;
    let status = applied(&client, &agent, "rev-2").await;
    assert!(status.get("lastError").is_none(), "{status:#}");

    // Disabling Memory QoS gives back what the agent set.
    set_config(&client, "rev-3", json!({"enabled": false})).await;
    applied(&client, &agent, "rev-3").await;
    for (path, file) in want.keys() {
        let default = if file == "memory.high" { "max" } else { "0" };
        let now = tree.read(path, file).unwrap_or_default();
        // The deleted pod's cgroups are gone; the rest are back at the defaults.
        if !now.is_empty() {
            assert_eq!(now, default, "{path}/{file}; agent log:\n{}", agent.log());
        }
    }
}

/// A real agent per simulated node, each with its own node's token, its files under
/// `dir/<node>` and its log there as `agent.log`.
pub(crate) async fn spawn_agents(
    cp: &nodemem_testkit::ControlPlane,
    trees: &BTreeMap<String, Arc<CgroupTree>>,
    dir: &std::path::Path,
) -> BTreeMap<String, AgentProcess> {
    let mut agents = BTreeMap::new();
    for (node, tree) in trees {
        let kubeconfig = cp.kubeconfig(&Identity::Agent(node.clone())).await.unwrap();
        let node_dir = dir.join(node);
        std::fs::create_dir_all(&node_dir).unwrap();
        agents.insert(
            node.clone(),
            spawn_agent(node, tree.root(), &node_dir, &kubeconfig, "agent.log"),
        );
    }
    agents
}

pub(crate) fn spawn_agent(
    node: &str,
    cgroup_root: &std::path::Path,
    dir: &std::path::Path,
    kubeconfig: &std::path::Path,
    log: &str,
) -> AgentProcess {
    spawn_agent_with(node, cgroup_root, dir, kubeconfig, log, &[])
}

/// [`spawn_agent`] with more arguments.
pub(crate) fn spawn_agent_with(
    node: &str,
    cgroup_root: &std::path::Path,
    dir: &std::path::Path,
    kubeconfig: &std::path::Path,
    log: &str,
    extra: &[std::ffi::OsString],
) -> AgentProcess {
    AgentProcess::spawn(
        agent_command(node, cgroup_root, dir, kubeconfig).args(extra),
        dir.join(log),
    )
}

/// `nodemem agent` for a simulated node (procfs under `dir` names the kernel the
/// predictions assume, a resync every second), stdout discarded; the caller decides
/// where stderr goes.
pub(crate) fn agent_command(
    node: &str,
    cgroup_root: &std::path::Path,
    dir: &std::path::Path,
    kubeconfig: &std::path::Path,
) -> Command {
    agent_command_resync(node, cgroup_root, dir, kubeconfig, 1)
}

/// [`agent_command`] with a resync every `resync_seconds`.
pub(crate) fn agent_command_resync(
    node: &str,
    cgroup_root: &std::path::Path,
    dir: &std::path::Path,
    kubeconfig: &std::path::Path,
    resync_seconds: u64,
) -> Command {
    agent_command_from(
        dir,
        kubeconfig,
        nodemem_testkit::bed::agent_args(node, cgroup_root, dir, resync_seconds),
    )
}

/// The agent process with these arguments (`bed::agent_args`, perhaps changed).
pub(crate) fn agent_command_from(
    dir: &std::path::Path,
    kubeconfig: &std::path::Path,
    args: Vec<String>,
) -> Command {
    std::fs::create_dir_all(dir.join("proc/sys/kernel")).unwrap();
    std::fs::write(dir.join("proc/sys/kernel/osrelease"), "6.1.0-56-amd64\n").unwrap();
    let mut cmd = Command::new(nodemem_e2e::nodemem());
    cmd.args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdout(Stdio::null());
    cmd
}

/// A node the agent cannot enforce yet (no cgroup v2 at the root, as on a cgroup v1
/// host or before the kubelet set up kubepods): the agent says why on the config and
/// does not exit; once the node is right it proceeds.
#[tokio::test]
async fn the_agent_reports_a_node_it_cannot_enforce_and_waits() {
    const NODE2: &str = "agent-node-2";
    let cp = cluster();
    let client = admin().await;
    apply_manifest(&client, "deploy/namespace.yaml").await;
    apply_manifest(&client, "deploy/agent/rbac.yaml").await;
    apply_manifest(&client, "deploy/agent/admission-policy.yaml").await;
    SimNode::new(NODE2).register(&client).await.unwrap();
    let tree = CgroupTree::new(CgroupDriver::Systemd, 1).unwrap();
    let controllers = tree.root().join("cgroup.controllers");
    std::fs::rename(&controllers, tree.root().join("hidden")).unwrap();
    configs(client.clone())
        .patch(
            NODE2,
            &PatchParams::apply("nodemem-controller-test").force(),
            &Patch::Apply(json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
                "metadata": {"name": NODE2},
                "spec": config_spec("rev-1", json!({"reservationPolicy": "TieredReservation"})),
            })),
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cp.kubeconfig(&Identity::Agent(NODE2.into())).await.unwrap();
    let mut agent = spawn_agent(NODE2, tree.root(), dir.path(), &kubeconfig, "agent.log");
    let applied_condition = async || {
        let c = configs(client.clone()).get_status(NODE2).await.ok()?;
        c.data["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Applied")
            .cloned()
    };
    let not_yet = wait_for("Applied=False NodeNotSupported", &agent, async || {
        applied_condition().await.filter(|c| c["status"] == "False")
    })
    .await;
    assert_eq!(not_yet["reason"], "NodeNotSupported", "{not_yet}");
    assert!(
        not_yet["message"]
            .as_str()
            .unwrap()
            .contains("not a cgroup v2 hierarchy (no cgroup.controllers); nodemem needs cgroup v2"),
        "{not_yet}"
    );
    assert!(
        agent.child_running(),
        "the agent waits, it does not exit:\n{}",
        agent.log()
    );
    std::fs::rename(tree.root().join("hidden"), &controllers).unwrap();
    wait_for("Applied=True once the node is right", &agent, async || {
        applied_condition().await.filter(|c| c["status"] == "True")
    })
    .await;
}

/// A Static memory manager policy: a Guaranteed pod that fits is pinned, one larger
/// than the node's NUMA memory is refused with an Event on the Pod.
#[tokio::test]
async fn a_pod_the_memory_manager_refuses_gets_an_event() {
    const NODE3: &str = "agent-node-3";
    const NS3: &str = "agent-numa";
    let cp = cluster();
    let client = admin().await;
    let (tree, _kubelet) = simulated_node(&client, NODE3, NS3, CgroupDriver::Systemd).await;
    let dir = tempfile::tempdir().unwrap();
    for n in 0..2 {
        let node_dir = dir.path().join(format!("sys/devices/system/node/node{n}"));
        std::fs::create_dir_all(&node_dir).unwrap();
        std::fs::write(
            node_dir.join("meminfo"),
            format!("Node {n} MemTotal:       262144 kB\n"),
        )
        .unwrap();
    }
    configs(client.clone())
        .patch(
            NODE3,
            &PatchParams::apply("nodemem-controller-test").force(),
            &Patch::Apply(json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
                "metadata": {"name": NODE3},
                "spec": {"policy": "numa", "revision": "rev-1",
                    "memoryManager": {"policy": "Static", "reservedMemory": [
                        {"numaNode": 0, "limits": {"memory": "32Mi"}},
                        {"numaNode": 1, "limits": {"memory": "32Mi"}}]}},
            })),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS3);
    for (name, memory) in [("fits", "128Mi"), ("too-big", "600Mi")] {
        let pod = json!({
            "metadata": {"name": name},
            "spec": {"nodeName": NODE3, "containers": [{"name": "db", "image": "x",
                "resources": {"requests": {"cpu": "1", "memory": memory}, "limits": {"cpu": "1", "memory": memory}}}]},
        });
        create_pod(&pods, pod).await;
    }
    let kubeconfig = cp.kubeconfig(&Identity::Agent(NODE3.into())).await.unwrap();
    let agent = spawn_agent(NODE3, tree.root(), dir.path(), &kubeconfig, "agent.log");
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), NS3);
    let event = wait_for(
        "a NumaPinningRefused event on the big pod",
        &agent,
        async || {
            events
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("NumaPinningRefused")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("too-big")
                })
        },
    )
    .await;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains(
            "no NUMA node or group of NUMA nodes has enough free memory for memory=600Mi"
        ),
        "{note}"
    );
    // The pod that fits is pinned to one NUMA node.
    let fits_uid = pods.get("fits").await.unwrap().metadata.uid.unwrap();
    let fits_dir = nodemem_model::values::cgroup_layout::container_dir(
        CgroupDriver::Systemd,
        nodemem_model::pod::qos::QosClass::Guaranteed,
        &fits_uid,
        &nodemem_model::values::cgroup_layout::ContainerId::parse(&format!(
            "containerd://{}",
            nodemem_testkit::kubelet::container_id(&fits_uid, "db")
        ))
        .unwrap(),
    );
    wait_for("the fitting pod pinned", &agent, async || {
        (tree.read(&fits_dir, "cpuset.mems").ok()? == "0").then_some(())
    })
    .await;
    assert_eq!(
        agent.metric("nodemem_agent_memory_manager_pinning_errors"),
        Some(1.0)
    );
}

/// The cgroupfs driver (`kubepods/burstable/pod<uid>/<id>`): every QoS class gets what
/// the node computation predicts for that layout.
#[tokio::test]
async fn the_agent_enforces_a_cgroupfs_node() {
    const NODE4: &str = "agent-node-cgroupfs";
    const NS4: &str = "agent-cgroupfs";
    let cp = cluster();
    let client = admin().await;
    let (tree, _kubelet) = simulated_node(&client, NODE4, NS4, CgroupDriver::Cgroupfs).await;
    let tiered = json!({"throttlingFactor": 0.8, "reservationPolicy": "TieredReservation"});
    set_config_on(&client, NODE4, "rev-1", tiered.clone()).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS4);
    for (name, resources) in [
        (
            "guaranteed",
            json!({"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}),
        ),
        (
            "burstable",
            json!({"requests": {"memory": "128Mi"}, "limits": {"memory": "512Mi"}}),
        ),
        ("besteffort", json!({})),
    ] {
        create_pod(
            &pods,
            json!({
                "metadata": {"name": name},
                "spec": {"nodeName": NODE4, "containers": [{"name": "app", "image": "x", "resources": resources}]},
            }),
        )
        .await;
    }
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cp.kubeconfig(&Identity::Agent(NODE4.into())).await.unwrap();
    let agent = spawn_agent(NODE4, tree.root(), dir.path(), &kubeconfig, "agent.log");
    let status = applied_on(&client, NODE4, &agent, "rev-1").await;
    assert_eq!(status["node"]["cgroupDriver"], "cgroupfs", "{status:#}");
    let want = wait_for("all three pods in the prediction", &agent, async || {
        let e = expected_on(&client, NODE4, CgroupDriver::Cgroupfs, tiered.clone()).await;
        (e.keys().filter(|(p, _)| p.contains("/pod")).count() >= 5).then_some(e)
    })
    .await;
    assert!(
        want.keys().all(|(p, _)| p.starts_with("kubepods"))
            && !want.keys().any(|(p, _)| p.contains(".slice")),
        "cgroupfs paths: {want:?}"
    );
    let agent_ref = &agent;
    wait_for("the tree to match the prediction", agent_ref, async || {
        want.iter()
            .all(|((p, f), v)| tree.read(p, f).ok().as_deref() == Some(v))
            .then_some(())
    })
    .await;
    assert_tree(&tree, &want, &agent);
}

/// Only the host's kubelet is read (issue 58), by the real agent against the real
/// apiserver: the node's procfs holds the host's kubelet (threshold 300Mi in its file)
/// and, started later, a process named `kubelet` in a container's mount namespace whose
/// own root says Memory QoS on and 1Gi. The config reports the host's kubelet, names the
/// other in `status.node.kubelet.ignored` and in one `KubeletIgnored` Warning Event, and
/// nothing of the decoy's files is read.
#[tokio::test]
async fn the_agent_reads_the_hosts_kubelet_and_names_a_decoy() {
    const NODE5: &str = "agent-node-decoy";
    const NS5: &str = "agent-decoy";
    let cp = cluster();
    let client = admin().await;
    let (tree, _kubelet) = simulated_node(&client, NODE5, NS5, CgroupDriver::Systemd).await;
    set_config_on(
        &client,
        NODE5,
        "rev-1",
        json!({"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation"}),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let proc = dir.path().join("proc");
    let header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    // A process: comm, stat (started `start` ticks after boot), cmdline, cgroup, its
    // mount namespace and its root.
    let process = |pid: u32, mnt: &str, cgroup: &str, start: u64, root: &std::path::Path| {
        let d = proc.join(pid.to_string());
        std::fs::create_dir_all(d.join("ns")).unwrap();
        std::fs::write(d.join("comm"), "kubelet\n").unwrap();
        std::fs::write(
            d.join("stat"),
            format!("{pid} (kubelet) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0\n"),
        )
        .unwrap();
        std::fs::write(
            d.join("cmdline"),
            "/usr/bin/kubelet\0--config=/var/lib/kubelet/config.yaml\0",
        )
        .unwrap();
        std::fs::write(d.join("cgroup"), format!("0::{cgroup}\n")).unwrap();
        std::os::unix::fs::symlink(mnt, d.join("ns/mnt")).unwrap();
        std::os::unix::fs::symlink(root, d.join("root")).unwrap();
        std::os::unix::fs::symlink(root, d.join("cwd")).unwrap();
    };
    let host_mnt = "mnt:[4026531841]";
    std::fs::create_dir_all(proc.join("1/ns")).unwrap();
    std::os::unix::fs::symlink(host_mnt, proc.join("1/ns/mnt")).unwrap();
    let (host_root, decoy_root) = (dir.path().join("host"), dir.path().join("decoy"));
    for (root, text) in [
        (&host_root, format!("{header}evictionHard:\n  memory.available: 300Mi\n")),
        (
            &decoy_root,
            format!("{header}featureGates:\n  MemoryQoS: true\nevictionHard:\n  memory.available: 1Gi\n"),
        ),
    ] {
        std::fs::create_dir_all(root.join("var/lib/kubelet")).unwrap();
        std::fs::write(root.join("var/lib/kubelet/config.yaml"), text).unwrap();
    }
    process(
        4242,
        host_mnt,
        "/system.slice/kubelet.service",
        100,
        &host_root,
    );
    process(
        5151,
        "mnt:[4026532999]",
        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podd.slice/cri-containerd-d.scope",
        900,
        &decoy_root,
    );
    let kubeconfig = cp.kubeconfig(&Identity::Agent(NODE5.into())).await.unwrap();
    let agent = spawn_agent(NODE5, tree.root(), dir.path(), &kubeconfig, "agent.log");
    let status = applied_on(&client, NODE5, &agent, "rev-1").await;
    let kubelet = &status["node"]["kubelet"];
    assert_eq!(kubelet["process"], "kubelet (pid 4242)", "{status:#}");
    assert_eq!(kubelet["config"], "/var/lib/kubelet/config.yaml");
    let ignored = kubelet["ignored"].as_array().cloned().unwrap_or_default();
    assert_eq!(ignored.len(), 1, "{kubelet:#}");
    assert!(
        ignored[0]
            .as_str()
            .unwrap()
            .starts_with("kubelet (pid 5151): runs in another mount namespace (mnt:[4026532999])"),
        "{kubelet:#}"
    );
    let read = condition(&status, "KubeletConfigRead").unwrap();
    assert_eq!(read["status"], "True", "{read:#}");
    // The decoy's gate is not read: no KubeletConflict (the host's kubelet runs no
    // Memory QoS of its own).
    let conflict = condition(&status, "KubeletConflict");
    assert!(
        conflict.is_none_or(|c| c["status"] != "True"),
        "{conflict:#?}"
    );
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let event = wait_for("a KubeletIgnored event on the config", &agent, async || {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some("KubeletIgnored")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(NODE5)
                    && e.type_.as_deref() == Some("Warning")
            })
    })
    .await;
    assert!(
        event
            .note
            .as_deref()
            .unwrap_or("")
            .contains("kubelet (pid 5151): runs in another mount namespace"),
        "{event:?}"
    );
}
