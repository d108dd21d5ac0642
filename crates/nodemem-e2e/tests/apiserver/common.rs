//! Shared setup: the process-wide control plane with nodemem's CRDs installed.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::Client;
use nodemem_api::{NodeMemoryConfig, NodeMemoryPolicy};
use nodemem_testkit::{ControlPlane, Identity};

pub use nodemem_e2e::repo_root as repo;

/// The shared control plane, CRDs from `crds/` installed and Established.
pub fn cluster() -> &'static ControlPlane {
    static READY: OnceLock<Result<Vec<String>, String>> = OnceLock::new();
    let cp = ControlPlane::shared().expect("control plane");
    let installed = READY.get_or_init(|| {
        // A private runtime: every #[tokio::test] has its own, and clients must not
        // outlive the runtime they were made on.
        std::thread::spawn(move || {
            tokio::runtime::Runtime::new()
                .expect("runtime")
                .block_on(nodemem_testkit::crds::install_dir(cp, &repo().join("crds")))
                .map_err(|e| e.to_string())
        })
        .join()
        .expect("CRD install thread")
    });
    installed.as_ref().expect("CRDs install");
    cp
}

pub async fn admin() -> Client {
    cluster()
        .client(&Identity::Admin)
        .await
        .expect("admin client")
}

pub fn policies(client: Client) -> Api<DynamicObject> {
    dynamic::<NodeMemoryPolicy>(&client)
}

/// A DynamicObject from JSON.
pub fn object(value: serde_json::Value) -> DynamicObject {
    serde_json::from_value(value).expect("a Kubernetes object")
}

/// Creates NodeMemoryPolicy `name` with `spec`; a refusal fails the test.
pub async fn create_policy(policies: &Api<DynamicObject>, name: &str, spec: serde_json::Value) {
    policies
        .create(
            &kube::api::PostParams::default(),
            &object(serde_json::json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryPolicy",
                "metadata": {"name": name}, "spec": spec})),
        )
        .await
        .unwrap_or_else(|e| panic!("policy {name}: {e}"));
}

/// Creates a pod (see `nodemem_testkit::clients::create_pod`); a failure fails the test.
pub async fn create_pod(api: &Api<Pod>, pod: serde_json::Value) -> Pod {
    let pod: Pod = serde_json::from_value(pod).unwrap();
    nodemem_testkit::clients::create_pod(api, &pod)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A Burstable pod `app-<node>` on `node` with one container `app` (request and limit
/// of memory as given).
pub async fn create_app_pod(api: &Api<Pod>, node: &str, request: &str, limit: &str) -> Pod {
    create_pod(
        api,
        serde_json::json!({"metadata": {"name": format!("app-{node}")},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "x",
                "resources": {"requests": {"memory": request}, "limits": {"memory": limit}}}]}}),
    )
    .await
}

pub use nodemem_e2e::eventually;

/// A control plane of the test's own (for tests that govern every node, or stop the
/// apiserver), with nodemem's CRDs and the agent's and controller's RBAC installed.
pub async fn own_control_plane() -> ControlPlane {
    own_control_plane_with(nodemem_testkit::control_plane::Options::default()).await
}

/// [`own_control_plane`] with `options` (a PodSecurity default, say).
pub async fn own_control_plane_with(
    options: nodemem_testkit::control_plane::Options,
) -> ControlPlane {
    let cp = tokio::task::spawn_blocking(move || ControlPlane::start_with(&options))
        .await
        .unwrap()
        .expect("control plane");
    nodemem_testkit::crds::install_dir(&cp, &repo().join("crds"))
        .await
        .unwrap();
    for dir in ["deploy/namespace.yaml", "deploy/agent", "deploy/controller"] {
        let path = repo().join(dir);
        nodemem_testkit::clients::kubectl(
            cp.admin_kubeconfig(),
            &["apply", "-f", path.to_str().unwrap()],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    cp
}

/// The controller binary, killed when the test ends however it ends.
pub struct ControllerProcess {
    pub child: std::process::Child,
}

impl ControllerProcess {
    /// Stops it as its pod is stopped (SIGTERM) and waits for it to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on the pid of a child this process started and has not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().expect("the controller exits")
    }
}

impl Drop for ControllerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The controller binary as its Deployment runs it (leader election with a 6 s Lease,
/// a reconcile tick of 1 s), stderr to `log`.
pub fn spawn_controller(
    kubeconfig: &std::path::Path,
    identity: &str,
    agent_image: &str,
    log: &std::path::Path,
) -> ControllerProcess {
    spawn_controller_with(kubeconfig, identity, agent_image, log, &[])
}

/// [`spawn_controller`] with more arguments.
pub fn spawn_controller_with(
    kubeconfig: &std::path::Path,
    identity: &str,
    agent_image: &str,
    log: &std::path::Path,
    extra: &[&str],
) -> ControllerProcess {
    let child = controller_command(
        std::process::Command::new(nodemem_e2e::nodemem()),
        kubeconfig,
        identity,
        agent_image,
        log,
    )
    .args(extra)
    .spawn()
    .expect("start the controller");
    ControllerProcess { child }
}

/// The controllers' Lease duration in these tests (`--lease-seconds`).
pub const CONTROLLER_LEASE_SECONDS: u64 = 6;

/// The controller's arguments as its Deployment gives them (a 6 s Lease, a 1 s tick),
/// added to `command` (the nodemem binary, or a wrapper that runs it), stderr appended
/// to `log`.
pub fn controller_command(
    mut command: std::process::Command,
    kubeconfig: &std::path::Path,
    identity: &str,
    agent_image: &str,
    log: &std::path::Path,
) -> std::process::Command {
    command
        .args([
            "controller",
            "--tick-seconds",
            "1",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .args(["--identity", identity])
        .args(["--lease-seconds", &CONTROLLER_LEASE_SECONDS.to_string()])
        .args(["--agent-image", agent_image])
        .env("KUBECONFIG", kubeconfig)
        .stdout(std::process::Stdio::null())
        // Appended: a restarted controller adds to its log.
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .unwrap(),
        );
    command
}

/// Who holds the controllers' Lease, if anyone (or it cannot be read).
pub async fn lease_holder(client: &Client) -> Option<String> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "nodemem-system");
    leases
        .get_opt(nodemem_controller::leadership::lease::LEASE)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
}

/// GET `path` from the endpoint a nodemem process's log says it serves on
/// (`bound=ADDR`): the status code and the body.
pub fn get_logged_endpoint(log: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let at = log.find("bound=")? + "bound=".len();
    let addr: String = log[at..]
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    let mut stream = std::net::TcpStream::connect(addr.trim()).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: nodemem\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((code, body))
}

/// The controller's /metrics, from the address its log (`log`) says it serves on.
pub fn controller_metrics(log: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    get_logged_endpoint(&text, "/metrics").map(|(_, body)| body)
}

/// The value of one series (exact name and labels) in a metrics text.
pub fn metric_in(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Any cluster-scoped nodemem kind through the dynamic API (status included as JSON).
pub fn dynamic<K: kube::Resource<DynamicType = ()>>(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &ApiResource::erase::<K>(&()))
}

/// The condition of `type_` in a status, if any.
pub fn condition<'a>(status: &'a serde_json::Value, type_: &str) -> Option<&'a serde_json::Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Whether a NodeMemoryConfig's agent reports the spec's revision applied and healthy.
pub fn reports_good(c: &DynamicObject) -> bool {
    let (spec, status) = (&c.data["spec"], &c.data["status"]);
    status["observedRevision"] == spec["revision"]
        && condition(status, "Applied").is_some_and(|c| c["status"] == "True")
        && condition(status, "Healthy").is_some_and(|c| c["status"] == "True")
}

/// Creates a namespace; a failure fails the test.
pub async fn create_namespace(client: &Client, name: &str) {
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap(),
        )
        .await
        .unwrap_or_else(|e| panic!("namespace {name}: {e}"));
}

/// A watch on every NodeMemoryConfig, as the controller's and agents' informers see
/// them: each change in order.
pub type ConfigWatch = std::pin::Pin<
    Box<
        dyn futures::Stream<
                Item = Result<
                    kube::runtime::watcher::Event<DynamicObject>,
                    kube::runtime::watcher::Error,
                >,
            > + Send,
    >,
>;

/// Starts a watch on the configs and returns it with the configs it listed first.
pub async fn watch_configs(client: &Client) -> (ConfigWatch, Vec<DynamicObject>) {
    use kube::runtime::watcher::{watcher, Event};
    let mut stream: ConfigWatch = Box::pin(watcher(
        dynamic::<nodemem_api::NodeMemoryConfig>(client),
        Default::default(),
    ));
    let mut listed = Vec::new();
    loop {
        match futures::StreamExt::next(&mut stream).await {
            Some(Ok(Event::InitDone)) => return (stream, listed),
            Some(Ok(Event::InitApply(c))) => listed.push(c),
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("watching configs: {e}"),
            None => panic!("the config watch ended"),
        }
    }
}

/// The next config the watch shows changed or (re)listed, or None after `wait` with
/// nothing (deletions are skipped).
pub async fn next_config(
    stream: &mut ConfigWatch,
    wait: std::time::Duration,
) -> Option<DynamicObject> {
    use kube::runtime::watcher::Event;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, futures::StreamExt::next(stream)).await {
            Ok(Some(Ok(Event::Apply(c) | Event::InitApply(c)))) => return Some(c),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return None,
        }
    }
}

/// Per node: the spec's policy, its revision and whether its agent reports it applied and healthy.
pub async fn node_states(client: &Client) -> BTreeMap<String, (String, String, bool)> {
    let list = dynamic::<NodeMemoryConfig>(client)
        .list(&Default::default())
        .await
        .unwrap();
    list.items
        .into_iter()
        .map(|c| {
            let name = c.metadata.name.clone().unwrap();
            let spec = &c.data["spec"];
            let good = reports_good(&c);
            (
                name,
                (
                    spec["policy"].as_str().unwrap_or("").to_string(),
                    spec["revision"].as_str().unwrap_or("").to_string(),
                    good,
                ),
            )
        })
        .collect()
}

/// Where each node is placed: node -> (policy, revision) of its config. What "a node
/// moved" means; health is a report on top of it (`unwell` says why one is not good).
pub async fn placements(client: &Client) -> BTreeMap<String, (String, String)> {
    node_states(client)
        .await
        .into_iter()
        .map(|(node, (policy, revision, _))| (node, (policy, revision)))
        .collect()
}

/// Each config its agent does not report good, with the status that says why
/// (observedRevision, Applied and Healthy): empty when every node is good.
pub async fn unwell(client: &Client) -> Vec<String> {
    let list = dynamic::<NodeMemoryConfig>(client)
        .list(&Default::default())
        .await
        .unwrap();
    list.items
        .iter()
        .filter(|c| !reports_good(c))
        .map(|c| {
            let status = &c.data["status"];
            format!(
                "{}: observedRevision {} of {}, Applied {}, Healthy {}",
                c.metadata.name.as_deref().unwrap_or(""),
                status["observedRevision"],
                c.data["spec"]["revision"],
                condition(status, "Applied").cloned().unwrap_or_default(),
                condition(status, "Healthy").cloned().unwrap_or_default(),
            )
        })
        .collect()
}

/// Registers simulated nodes, each labelled into its pool (`nodemem.io/pool`), with a
/// systemd-layout cgroup tree of two NUMA nodes each: node name -> tree.
pub async fn pool_nodes(
    client: &Client,
    nodes: &[(&str, &str)],
) -> BTreeMap<String, std::sync::Arc<nodemem_testkit::cgroup_tree::CgroupTree>> {
    let mut trees = BTreeMap::new();
    for (node, pool) in nodes {
        nodemem_testkit::nodes::SimNode::new(node)
            .label("nodemem.io/pool", pool)
            .register(client)
            .await
            .unwrap();
        trees.insert(
            node.to_string(),
            std::sync::Arc::new(
                nodemem_testkit::cgroup_tree::CgroupTree::new(
                    nodemem_model::values::cgroup_layout::CgroupDriver::Systemd,
                    2,
                )
                .unwrap(),
            ),
        );
    }
    trees
}

/// Cgroup files read every 20 ms on a thread of their own, as (when, node, value): a
/// moment a node holds a value it should not is seen even when it lasts milliseconds.
pub struct Sampler {
    samples: std::sync::Arc<std::sync::Mutex<Vec<(std::time::Instant, String, String)>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    /// Samples each (node, file).
    pub fn start(files: Vec<(String, std::path::PathBuf)>) -> Sampler {
        use std::sync::atomic::Ordering;
        let samples = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, st) = (samples.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                for (node, file) in &files {
                    let value = std::fs::read_to_string(file)
                        .map(|v| v.trim().to_string())
                        .unwrap_or_default();
                    s.lock()
                        .unwrap()
                        .push((std::time::Instant::now(), node.clone(), value));
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
        Sampler {
            samples,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sampling; every sample in order.
    pub fn finish(mut self) -> Vec<(std::time::Instant, String, String)> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        std::mem::take(&mut *self.samples.lock().unwrap())
    }
}

/// Per node, the longest time its file held a value `allowed(node, value)` refuses (from
/// the first such sample to the next allowed one, or the last sample).
pub fn longest_outside(
    samples: &[(std::time::Instant, String, String)],
    allowed: impl Fn(&str, &str) -> bool,
) -> BTreeMap<String, std::time::Duration> {
    let mut longest: BTreeMap<String, std::time::Duration> = BTreeMap::new();
    let mut since: BTreeMap<String, std::time::Instant> = BTreeMap::new();
    for (at, node, value) in samples {
        let entry = longest.entry(node.clone()).or_default();
        if allowed(node, value) {
            if let Some(start) = since.remove(node) {
                *entry = (*entry).max(*at - start);
            }
        } else {
            since.entry(node.clone()).or_insert(*at);
        }
    }
    let end = samples.last().map(|s| s.0);
    for (node, start) in since {
        let e = longest.entry(node).or_default();
        *e = (*e).max(end.unwrap_or(start) - start);
    }
    longest
}

#[test]
fn longest_outside_measures_each_stretch_of_refused_values() {
    let t0 = std::time::Instant::now();
    let at = |ms: u64| t0 + std::time::Duration::from_millis(ms);
    let samples = vec![
        (at(0), "a".to_string(), "1".to_string()),
        (at(20), "a".to_string(), "max".to_string()),
        (at(40), "a".to_string(), "max".to_string()),
        (at(60), "a".to_string(), "2".to_string()),
        (at(80), "b".to_string(), "max".to_string()),
        (at(100), "b".to_string(), "max".to_string()),
    ];
    let out = longest_outside(&samples, |_, v| v != "max");
    assert_eq!(out["a"], std::time::Duration::from_millis(40));
    assert_eq!(
        out["b"],
        std::time::Duration::from_millis(20),
        "open at the end"
    );
}

/// What a command printed and how it exited.
pub struct Ran {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// `kubectl ARGS` as a user's shell runs it: `kubeconfig`, and `kubectl nodemem` on
/// the PATH from `plugin_dir` (where the binary is linked as `kubectl-nodemem`).
pub fn kubectl_with_plugin(kubeconfig: &Path, plugin_dir: &Path, args: &[&str]) -> Ran {
    let bin = nodemem_testkit::binaries::control_plane_binaries().unwrap();
    let out = std::process::Command::new(&bin.kubectl)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env(
            "PATH",
            format!(
                "{}:{}",
                plugin_dir.display(),
                std::env::var("PATH").unwrap()
            ),
        )
        .output()
        .unwrap();
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `count` kubelet-less Node objects `<prefix>-<i, zero-padded to width>` labelled
/// `nodemem.io/pool: <pool>` (and `kubernetes.io/os: linux`), `at_once` created at a time (the fan-out tests' pools).
pub async fn create_pool_nodes(
    client: &Client,
    prefix: &str,
    width: usize,
    pool: &str,
    count: usize,
    at_once: usize,
) {
    use futures::StreamExt;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    futures::stream::iter(0..count)
        .map(|i| {
            let nodes = nodes.clone();
            // The OS label every kubelet sets on its Node (nodemem's agent runs on
            // Linux nodes only, and the controller counts others apart).
            let node = serde_json::from_value(serde_json::json!({"metadata": {
                "name": format!("{prefix}-{i:0width$}"),
                "labels": {"nodemem.io/pool": pool, "kubernetes.io/os": "linux"}}}))
            .unwrap();
            async move {
                nodes
                    .create(&kube::api::PostParams::default(), &node)
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(at_once)
        .collect::<Vec<_>>()
        .await;
}

/// A rollout section as these tests write it: minReadySeconds 0 unless named, so that a
/// ready node counts at once. The tests judge the rollout's logic, not its pace; the
/// defaults (a canary, 60 s) have `defaults.rs` and the controller's unit tests.
pub fn no_ready_wait(mut rollout: serde_json::Value) -> serde_json::Value {
    if let Some(r) = rollout.as_object_mut() {
        r.entry("minReadySeconds").or_insert(serde_json::json!(0));
    }
    rollout
}
