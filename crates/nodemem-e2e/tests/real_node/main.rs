//! The real-node tier: a qemu VM with Debian's kernel, systemd as PID 1, containerd,
//! runc and the kubelet v1.36.3, joined to a test control plane (TESTING.md). nodemem is
//! installed as users install it (CRDs, `deploy/`, the controller deploying its agent
//! DaemonSet from the project's image), and the node is the judge of what it does.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1 as core;
use kube::api::{Api, ListParams};
use nodemem_api::NodeMemoryConfig;
use nodemem_testkit::binaries::{control_plane_binaries, repo_root};
use nodemem_testkit::clients::kubectl;
use nodemem_testkit::process::Process;
use nodemem_testkit::real_node::{Driver, NodeImage, RealNode, RealNodeSpec};
use nodemem_testkit::{ControlPlane, Identity};
use serde_json::{json, Value};

/// The project's image as `image/build-oci.sh` wrote it (`make node` builds it first).
fn image_layout() -> PathBuf {
    PathBuf::from(
        std::env::var_os("NODEMEM_IMAGE_LAYOUT")
            .expect("NODEMEM_IMAGE_LAYOUT: run `make node` (it builds the image first)"),
    )
}

const POLICY: &str = "apiVersion: nodemem.io/v1alpha1
kind: NodeMemoryPolicy
metadata:
  name: real
spec:
  nodeSelector:
    matchLabels:
      nodemem.io/pool: real
  memoryQoS:
    throttlingFactor: 0.9
    reservationPolicy: TieredReservation
  enforcement: Agent
  rollout:
    minReadySeconds: 0
";

/// Where a pod's cgroup is on the node, written out for each driver as the kubelet lays
/// it out (not with nodemem's own layout code, which is what is being checked).
fn pod_dir(driver: Driver, qos: &str, uid: &str) -> String {
    let q = qos.to_lowercase();
    match (driver, qos) {
        (Driver::Systemd, "Guaranteed") => {
            format!(
                "/sys/fs/cgroup/kubepods.slice/kubepods-pod{}.slice",
                uid.replace('-', "_")
            )
        }
        (Driver::Systemd, _) => format!(
            "/sys/fs/cgroup/kubepods.slice/kubepods-{q}.slice/kubepods-{q}-pod{}.slice",
            uid.replace('-', "_")
        ),
        (Driver::Cgroupfs, "Guaranteed") => format!("/sys/fs/cgroup/kubepods/pod{uid}"),
        (Driver::Cgroupfs, _) => format!("/sys/fs/cgroup/kubepods/{q}/pod{uid}"),
    }
}

/// A container's cgroup in its pod's: containerd names it after the container ID.
fn container_dir(driver: Driver, pod_dir: &str, id: &str) -> String {
    match driver {
        Driver::Systemd => format!("{pod_dir}/cri-containerd-{id}.scope"),
        Driver::Cgroupfs => format!("{pod_dir}/{id}"),
    }
}

mod numa;

/// One real node at a time: two VMs under TCG on two cores slow each other past the
/// timeouts.
static ONE_NODE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_real_systemd_driver_node_runs_pods_and_nodemem_as_users_install_it() {
    real_node_runs_pods_and_nodemem(Driver::Systemd, "real-systemd");
}

#[test]
fn a_real_cgroupfs_driver_node_runs_pods_and_nodemem_as_users_install_it() {
    real_node_runs_pods_and_nodemem(Driver::Cgroupfs, "real-cgroupfs");
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Polls `check` every second (the node's checks read the VM) until it returns Some,
/// or None once `timeout` passed.
async fn within<T>(timeout: Duration, check: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    nodemem_e2e::within(timeout, Duration::from_secs(1), check).await
}

/// Polls `check` until it returns Some; fails the test once `timeout` passed.
async fn eventually<T>(what: &str, timeout: Duration, check: impl AsyncFnMut() -> Option<T>) -> T {
    within(timeout, check)
        .await
        .unwrap_or_else(|| panic!("{what}: not within {timeout:?}"))
}

fn real_node_runs_pods_and_nodemem(driver: Driver, name: &str) {
    let _one = ONE_NODE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut cp = ControlPlane::start().expect("control plane");
    cp.start_scheduler().expect("kube-scheduler");
    let bin = control_plane_binaries().expect("control plane binaries");
    let image = NodeImage::build(&bin.kubelet, Some(&image_layout())).expect("node image");
    let started = Instant::now();
    let mut spec = RealNodeSpec::new(name, driver).label("nodemem.io/pool", "real");
    spec.kubelet = kubelets_memory_qos(true);
    let mut node = RealNode::boot(&cp, &image, &spec).expect("node boots");
    let rt = runtime();
    rt.block_on(async {
        let client = cp.client(&Identity::Admin).await.unwrap();
        node_ready(&client, name).await;
        eprintln!("{name} Ready {:?} after qemu started", started.elapsed());

        the_kubelets_memory_qos_is_nodemems_prediction(&cp, &mut node, driver, &client).await;
        // From here on nodemem enforces: the kubelet's own Memory QoS goes off (with it
        // on, nodemem would leave those files to the kubelet: KubeletConflict).
        spec.kubelet = kubelets_memory_qos(false);
        restart_kubelet_with(&mut node, &spec, &client).await;

        let pods: Api<core::Pod> = Api::namespaced(client.clone(), "default");
        let pod: core::Pod = serde_json::from_value(json!({
            "metadata": {"name": "workload"},
            "spec": {
                "nodeName": name,
                "containers": [{
                    "name": "w", "image": "nodemem.local/workload:1", "imagePullPolicy": "Never",
                    "args": ["-allocate", "64Mi"],
                    "resources": {"requests": {"memory": "128Mi"}, "limits": {"memory": "256Mi"}}
                }]
            }
        }))
        .unwrap();
        nodemem_testkit::clients::create_pod(&pods, &pod).await.unwrap();
        let running = within(Duration::from_secs(180), || async {
            let p = pods.get("workload").await.ok()?;
            let status = p.status.as_ref()?;
            if status.phase.as_deref() != Some("Running") {
                return None;
            }
            let id = status.container_statuses.as_ref()?.first()?.container_id.clone()?;
            Some((p.metadata.uid.clone()?, id))
        })
        .await;
        let Some((uid, container_id)) = running else {
            let status = pods.get("workload").await.map(|p| p.status);
            let (journal, _) = node
                .run("journalctl -u kubelet -u containerd --no-pager | grep -iE 'error|fail|warn' | tail -40")
                .unwrap_or_default();
            panic!("pod workload not Running within 180s: {status:?}\nnode journal:\n{journal}");
        };
        let id = container_id
            .strip_prefix("containerd://")
            .expect("a containerd container ID");
        let dir = container_dir(driver, &pod_dir(driver, "Burstable", &uid), id);
        let (out, code) = node.run(&format!("cat {dir}/memory.current")).unwrap();
        assert_eq!(code, 0, "{out}");
        let current: u64 = out.trim().parse().expect(&out);
        assert!(current >= 64 << 20, "memory.current {current} holds the 64Mi the workload touched");

        install_nodemem_and_check_its_agent(&cp, &mut node, driver, &client).await;
    });
}

/// Waits for the Node to be Ready (boot and join included).
async fn node_ready(client: &kube::Client, name: &str) {
    let nodes: Api<core::Node> = Api::all(client.clone());
    eventually(
        &format!("node {name} Ready"),
        Duration::from_secs(300),
        || async {
            let n = nodes.get_opt(name).await.ok().flatten()?;
            let ready = n
                .status?
                .conditions?
                .into_iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then_some(())
        },
    )
    .await;
}

/// nodemem installed as users install it, its agent Ready on the node.
struct Installed {
    controller: Process,
    work: tempfile::TempDir,
    /// The policy as applied (a file in `work`).
    policy: PathBuf,
    image: String,
    agent_pod: String,
    agent_ip: String,
}

/// nodemem as users install it: CRDs, `deploy/agent` and `deploy/controller` by kubectl,
/// the real controller (on the host, with its service account's token and
/// `controller_args`) deploying its agent DaemonSet with the project's image, and
/// `policy` for the node's pool. Returns once the agent's pod is Ready on the node.
async fn install_nodemem(
    cp: &ControlPlane,
    node: &mut RealNode,
    client: &kube::Client,
    policy_yaml: &str,
    controller_args: &[&str],
) -> Installed {
    let repo = repo_root();
    let admin = cp.admin_kubeconfig();
    for manifests in ["crds", "deploy/agent", "deploy/controller"] {
        kubectl(
            admin,
            &["apply", "-f", repo.join(manifests).to_str().unwrap()],
        )
        .unwrap();
    }
    nodemem_testkit::crds::install_dir(cp, &repo.join("crds"))
        .await
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let controller_kubeconfig = cp.kubeconfig(&Identity::Controller).await.unwrap();
    let image = format!("nodemem.local/nodemem:{}", env!("CARGO_PKG_VERSION"));
    let mut args = vec![
        "controller".to_string(),
        "--kubeconfig".into(),
        controller_kubeconfig.display().to_string(),
        "--metrics-addr".into(),
        "127.0.0.1:0".into(),
        "--tick-seconds".into(),
        "1".into(),
        "--agent-image".into(),
        image.clone(),
    ];
    args.extend(controller_args.iter().map(|a| a.to_string()));
    let controller = Process::spawn(
        "controller",
        nodemem_e2e::nodemem(),
        &args,
        &work.path().join("controller.log"),
    )
    .unwrap();
    let policy = work.path().join("policy.yaml");
    std::fs::write(&policy, policy_yaml).unwrap();
    kubectl(admin, &["apply", "-f", policy.to_str().unwrap()]).unwrap();

    // The DaemonSet's pod on the node, Running and Ready (its /readyz answers after
    // the first pass).
    let pods: Api<core::Pod> = Api::namespaced(client.clone(), "nodemem-system");
    let listed = ListParams::default().labels("app.kubernetes.io/name=nodemem-agent");
    let ready = within(Duration::from_secs(240), || async {
        let list = pods.list(&listed).await.ok()?;
        let p = list.items.into_iter().find(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.name.as_str())
        })?;
        let status = p.status.as_ref()?;
        let is_ready = status
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        is_ready.then(|| {
            (
                p.metadata.name.clone().unwrap(),
                status.pod_ip.clone().unwrap_or_default(),
            )
        })
    })
    .await;
    let Some((agent_pod, agent_ip)) = ready else {
        let list = pods.list(&listed).await.map(|l| {
            l.items
                .into_iter()
                .map(|p| (p.metadata.name, p.status))
                .collect::<Vec<_>>()
        });
        let (log, _) = node
            .run("tail -n 30 /var/log/pods/nodemem-system_nodemem-agent-*/agent/*.log; journalctl -u kubelet --no-pager | grep -i nodemem-agent | tail -15")
            .unwrap_or_default();
        panic!(
            "the agent DaemonSet's pod is not Ready on {} within 240s: {list:?}\nnode:\n{log}\ncontroller:\n{}",
            node.name,
            controller.log_tail(20)
        );
    };
    Installed {
        controller,
        work,
        policy,
        image,
        agent_pod,
        agent_ip,
    }
}

/// nodemem as users install it (`install_nodemem`). The agent must run as a real pod,
/// report through its NodeMemoryConfig, serve /metrics, stay confined to its node, and
/// write what `nodemem simulate` predicts.
async fn install_nodemem_and_check_its_agent(
    cp: &ControlPlane,
    node: &mut RealNode,
    driver: Driver,
    client: &kube::Client,
) {
    let admin = cp.admin_kubeconfig();
    let Installed {
        mut controller,
        work,
        policy,
        image,
        agent_pod,
        agent_ip,
    } = install_nodemem(cp, node, client, POLICY, &[]).await;
    let pods: Api<core::Pod> = Api::namespaced(client.clone(), "nodemem-system");
    let spec = pods.get(&agent_pod).await.unwrap().spec.unwrap();
    assert_eq!(spec.containers[0].image.as_deref(), Some(image.as_str()));

    // It reports through its NodeMemoryConfig: the revision applied, healthy, and the
    // facts of the real node.
    let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
    let name = node.name.clone();
    let reported = config_applied(client, admin, &name, None, Duration::from_secs(120)).await;
    let facts = reported.node.expect("node facts");
    let driver_name = match driver {
        Driver::Systemd => "systemd",
        Driver::Cgroupfs => "cgroupfs",
    };
    assert_eq!(
        facts.cgroup_driver.as_deref(),
        Some(driver_name),
        "{facts:?}"
    );
    assert_eq!(facts.cgroup_version, Some(2));
    assert_eq!(
        facts.numa_nodes.len(),
        2,
        "the VM's two NUMA nodes: {facts:?}"
    );
    let (uname, _) = node.run("uname -r").unwrap();
    assert_eq!(facts.kernel_version.as_deref(), Some(uname.trim()));

    // /metrics, from the node (the pod network is the node's).
    let metrics = agent_metrics(node, &agent_ip);
    assert!(metrics.contains("nodemem_agent_passes_total"), "{metrics}");

    // Pods of every QoS class (init containers, a restartable sidecar, pod-level
    // resources, one opted out) started by the real kubelet while nodemem runs: what
    // the agent wrote is what `nodemem simulate` predicts for the same Node, pods and
    // policy, at the QoS levels, pod slices and container scopes (memory.max is the
    // kubelet's), each where the kubelet put it.
    start_pods(client, &qos_pods(&name, "n", true)).await;
    let agent_container = format!("nodemem-system/{agent_pod}/agent");
    let expected = expected_files(
        client,
        admin,
        &policy,
        work.path(),
        driver,
        &name,
        &agent_container,
    )
    .await;
    let wanted: Vec<(&String, &String)> = expected.iter().map(|(p, (_, v))| (p, v)).collect();
    node_values_become(
        node,
        &wanted,
        "files that do not read what nodemem simulate predicts",
    );
    assert!(
        expected.len() >= 60,
        "only {} files checked",
        expected.len()
    );

    values_survive_their_owners(
        node,
        driver,
        client,
        admin,
        &policy,
        work.path(),
        &agent_container,
        expected,
    )
    .await;

    if driver == Driver::Systemd {
        reaction_to_real_container_starts(node, client, &agent_ip).await;
        observation_on_a_real_kernel(node, driver, client, admin).await;
        relief_on_a_real_kernel(node, driver, client, admin, &agent_ip).await;
    }

    assert!(
        controller.exited().is_none(),
        "the controller exited: {}",
        controller.log_tail(20)
    );
    // It would delete a config of a node that does not exist, which the next check needs.
    controller.stop(Duration::from_secs(5));

    // The admission policy still confines the real pod: its own token (the kubelet's
    // projected service-account token, bound to the pod and so to the node) may patch
    // this node's config status and no other node's.
    let agent_uid = pods.get(&agent_pod).await.unwrap().metadata.uid.unwrap();
    let (token, code) = node
        .run(&format!(
            "cat /var/lib/kubelet/pods/{agent_uid}/volumes/kubernetes.io~projected/kube-api-access-*/token"
        ))
        .unwrap();
    assert_eq!(code, 0, "{token}");
    let other: NodeMemoryConfig = serde_json::from_value(json!({
        "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
        "metadata": {"name": "another-node"},
        "spec": {"policy": "real", "revision": "r1"}
    }))
    .unwrap();
    configs.create(&Default::default(), &other).await.unwrap();
    let agent_kubeconfig = work.path().join("agent.kubeconfig");
    std::fs::write(
        &agent_kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: agent\n  user:\n    token: {}\ncontexts:\n- name: c\n  context: {{cluster: c, user: agent}}\ncurrent-context: c\n",
            cp.server,
            cp.dir().join("ca.crt").display(),
            token.trim()
        ),
    )
    .unwrap();
    let patch = |config: &str| {
        kubectl(
            &agent_kubeconfig,
            &[
                "patch",
                "nodememoryconfig",
                config,
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"lastError":"from the test"}}"#,
            ],
        )
    };
    patch(&name).expect("the agent's token patches its own node's config status");
    let denied = patch("another-node").expect_err("another node's config is not the agent's");
    assert!(
        denied.to_string().contains(&format!(
            "the nodemem agent may only change the NodeMemoryConfig of its own node ({name}), not another-node"
        )),
        "{denied}"
    );
}

/// Item 6 of issue 17 (a benchmark; nothing here is timed against a goal): from the
/// moment containerd's cgroup for a new container appears to nodemem's values in it,
/// over NODEMEM_REACTION_PODS real pod starts (10 in `make node`; `make bench-node`
/// takes 60 for BENCHMARKS.md), in batches of 10 started together. The probe on the
/// node (tests/node/probe) is told of each cgroup by inotify and of each value by the
/// write's own IN_MODIFY; every container must get its values (a container it never
/// saw done fails the test). Prints median, p90, p99 and max.
/// The agent's /metrics, scraped from the node (the pod network is the node's).
fn agent_metrics(node: &mut RealNode, agent_ip: &str) -> String {
    let (metrics, code) = node
        .run(&format!(
            "exec 3<>/dev/tcp/{agent_ip}/9180 && printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3"
        ))
        .unwrap();
    assert_eq!(code, 0, "{metrics}");
    metrics
}

/// One series of the agent's /metrics (0 when absent).
fn agent_metric(node: &mut RealNode, agent_ip: &str, series: &str) -> f64 {
    agent_metrics(node, agent_ip)
        .lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

async fn reaction_to_real_container_starts(
    node: &mut RealNode,
    client: &kube::Client,
    agent_ip: &str,
) {
    let total: usize = std::env::var("NODEMEM_REACTION_PODS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10);
    const NAMED: &str = "nodemem_agent_runtime_records_total{result=\"named\"}";
    let named_before = agent_metric(node, agent_ip, NAMED);
    let root = qos_level_dir(Driver::Systemd, "kubepods");
    let (out, code) = node
        .run(&format!(
            "systemd-run --unit=nodemem-probe --property=StandardOutput=file:/run/nodemem-probe.log /mnt/nodemem/tools/reaction-probe -root {root} -prefix cri-containerd- && sleep 2"
        ))
        .unwrap();
    assert_eq!(code, 0, "{out}");
    let api: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    let mut containers: Vec<(String, String)> = Vec::new();
    let mut started = 0;
    while started < total {
        let batch: Vec<core::Pod> = (started..total.min(started + 10))
            .map(|i| {
                serde_json::from_value(json!({
                    "metadata": {"name": format!("reaction-{i}")},
                    "spec": {"nodeName": node.name, "terminationGracePeriodSeconds": 0,
                        "containers": [{"name": "r", "image": "nodemem.local/workload:1",
                            "imagePullPolicy": "Never", "args": ["-allocate", "1Mi"],
                            "resources": {"requests": {"memory": "16Mi", "cpu": "5m"},
                                          "limits": {"memory": "32Mi"}}}]}
                }))
                .unwrap()
            })
            .collect();
        started += batch.len();
        start_pods(client, &batch).await;
        for p in &batch {
            let name = p.metadata.name.clone().unwrap();
            containers.push((name.clone(), container_id(&api, &name).await));
            api.delete(&name, &Default::default()).await.unwrap();
        }
        for p in &batch {
            let name = p.metadata.name.clone().unwrap();
            eventually(
                &format!("{name} gone"),
                Duration::from_secs(120),
                || async { api.get_opt(&name).await.ok()?.is_none().then_some(()) },
            )
            .await;
        }
    }
    let (log, code) = node
        .run("systemctl stop nodemem-probe; cat /run/nodemem-probe.log")
        .unwrap();
    assert_eq!(code, 0, "{log}");
    let seen: std::collections::BTreeMap<String, f64> = log
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (dir, appeared, done) = (f.next()?, f.next()?, f.next()?);
            let id = dir
                .rsplit("cri-containerd-")
                .next()?
                .trim_end_matches(".scope");
            let ms = (done.parse::<i64>().ok()? - appeared.parse::<i64>().ok()?) as f64 / 1e6;
            Some((id.to_string(), ms))
        })
        .collect();
    let mut reactions = Vec::new();
    for (pod, id) in &containers {
        let ms = seen.get(id).unwrap_or_else(|| {
            panic!("{pod}'s container {id} never held nodemem's values (memory.low, memory.high) in the probe's record:\n{log}")
        });
        reactions.push(*ms);
    }
    // Every container was named from containerd's bundle the moment its cgroup
    // appeared, not later from the pod status (sandboxes are not counted).
    let named = agent_metric(node, agent_ip, NAMED) - named_before;
    assert!(
        named >= total as f64,
        "{named} of {total} new containers named from containerd's record (nodemem_agent_runtime_records_total)"
    );
    let unusable = agent_metric(
        node,
        agent_ip,
        "nodemem_agent_runtime_records_total{result=\"unusable\"}",
    );
    assert_eq!(unusable, 0.0, "records the agent could not use");
    reactions.sort_by(f64::total_cmp);
    let at = |q: f64| nodemem_testkit::stats::percentile(&reactions, q);
    eprintln!(
        "reaction to {} real container starts (cgroup created -> nodemem's memory.low and memory.high in it): median {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        reactions.len(),
        at(0.5),
        at(0.9),
        at(0.99),
        reactions[reactions.len() - 1]
    );
}

/// Waits for the node's NodeMemoryConfig to report its current revision applied
/// (`Applied=True`), that revision not being `superseded` (one the test moved away
/// from: the controller may not have written the next one yet); its status.
async fn config_applied(
    client: &kube::Client,
    admin: &Path,
    name: &str,
    superseded: Option<&str>,
    timeout: Duration,
) -> nodemem_api::config::NodeMemoryConfigStatus {
    let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
    within(timeout, || async {
        let c = configs.get_opt(name).await.ok().flatten()?;
        let status = c.status.clone()?;
        let applied = status
            .conditions
            .iter()
            .any(|x| x.type_ == "Applied" && x.status == "True");
        let current = Some(c.spec.revision.as_str());
        (status.observed_revision.as_deref() == current && current != superseded && applied)
            .then_some(status)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "NodeMemoryConfig {name} not applied within {timeout:?}: {:?}",
            kubectl(admin, &["get", "nodememoryconfig", name, "-o", "yaml"])
        )
    })
}

/// Where a QoS level's cgroup is on the node.
fn qos_level_dir(driver: Driver, level: &str) -> String {
    match (driver, level) {
        (Driver::Systemd, "kubepods") => "/sys/fs/cgroup/kubepods.slice".into(),
        (Driver::Systemd, q) => format!("/sys/fs/cgroup/kubepods.slice/kubepods-{q}.slice"),
        (Driver::Cgroupfs, "kubepods") => "/sys/fs/cgroup/kubepods".into(),
        (Driver::Cgroupfs, q) => format!("/sys/fs/cgroup/kubepods/{q}"),
    }
}

/// `nodemem simulate -o json` for the node's Node and pods as the apiserver has them
/// now, its kubelet configuration and, with `numa`, its NUMA topology.
fn simulate_node(
    admin: &Path,
    policy: &Path,
    work: &Path,
    driver: Driver,
    node: &str,
    numa: Option<&Path>,
) -> Value {
    let node_yaml = work.join("node.yaml");
    let pods_yaml = work.join("pods.yaml");
    std::fs::write(
        &node_yaml,
        kubectl(admin, &["get", "node", node, "-o", "yaml"]).unwrap(),
    )
    .unwrap();
    let field = format!("spec.nodeName={node}");
    std::fs::write(
        &pods_yaml,
        kubectl(
            admin,
            &[
                "get",
                "pods",
                "-A",
                "--field-selector",
                &field,
                "-o",
                "yaml",
            ],
        )
        .unwrap(),
    )
    .unwrap();
    // The node's kubelet configuration (its evictionHard), as the agent reads it.
    let kubelet_config = work.join("kubelet-config.yaml");
    std::fs::write(
        &kubelet_config,
        serde_json::to_string_pretty(&nodemem_testkit::real_node::kubelet_configuration(
            &RealNodeSpec::new(node, driver),
        ))
        .unwrap(),
    )
    .unwrap();
    let sim = std::process::Command::new(nodemem_e2e::nodemem())
        .args(["simulate", "--policy"])
        .arg(policy)
        .arg("--kubelet-config")
        .arg(&kubelet_config)
        .arg("--node")
        .arg(&node_yaml)
        .arg("--pods")
        .arg(&pods_yaml)
        .args(numa.iter().flat_map(|t| [Path::new("--numa"), *t]))
        .args(["-o", "json"])
        .output()
        .unwrap();
    assert!(
        sim.status.success(),
        "{}",
        String::from_utf8_lossy(&sim.stderr)
    );
    serde_json::from_slice(&sim.stdout).unwrap()
}

/// `nodemem simulate` for the node's Node and pods as the apiserver has them now, and
/// the pods' container IDs: every memory file nodemem computes, where the kubelet put
/// its cgroup, with the value simulate predicts (path -> (owner, value)). The agent's
/// own container is the root of its cgroup namespace, which the kernel does not let
/// it write (nodemem_cgroup::own): it keeps the runtime's.
async fn expected_files(
    client: &kube::Client,
    admin: &Path,
    policy: &Path,
    work: &Path,
    driver: Driver,
    node: &str,
    agent_container: &str,
) -> std::collections::BTreeMap<String, (String, String)> {
    let sim = simulate_node(admin, policy, work, driver, node, None);
    let predicted = nodemem_testkit::simulate::predicted_values(&sim);
    let unset = |file: &str| {
        if file == "memory.high" || file == "memory.max" {
            "max".to_string()
        } else {
            "0".to_string()
        }
    };
    let mut out = std::collections::BTreeMap::new();
    for level in ["kubepods", "burstable", "besteffort"] {
        let dir = qos_level_dir(driver, level);
        // memory.max of the levels is the kubelet's (node allocatable on kubepods).
        for file in ["memory.min", "memory.low", "memory.high"] {
            let want = predicted
                .get(&(level.to_string(), file.to_string()))
                .cloned()
                .unwrap_or_else(|| unset(file));
            out.insert(format!("{dir}/{file}"), (level.to_string(), want));
        }
    }
    for pod in sim["pods"].as_array().unwrap() {
        let ns = pod["namespace"].as_str().unwrap();
        let pod_name = pod["name"].as_str().unwrap();
        let live = Api::<core::Pod>::namespaced(client.clone(), ns)
            .get(pod_name)
            .await
            .unwrap();
        let slice = pod_dir(
            driver,
            pod["qosClass"].as_str().unwrap(),
            pod["uid"].as_str().unwrap(),
        );
        let mut cgroups = vec![(format!("{ns}/{pod_name}"), slice.clone())];
        let status = live.status.unwrap();
        // Running containers: the app containers and restartable sidecars (an init
        // container that finished has no cgroup any more).
        let running = status
            .container_statuses
            .unwrap_or_default()
            .into_iter()
            .chain(status.init_container_statuses.unwrap_or_default())
            .filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
        for c in running {
            let id = c.container_id.unwrap_or_default();
            let id = id.trim_start_matches("containerd://");
            cgroups.push((
                format!("{ns}/{pod_name}/{}", c.name),
                container_dir(driver, &slice, id),
            ));
        }
        for (owner, dir) in cgroups {
            let own = owner == agent_container;
            for file in ["memory.min", "memory.low", "memory.high", "memory.max"] {
                let want = if own && file != "memory.max" {
                    unset(file)
                } else {
                    predicted
                        .get(&(owner.clone(), file.to_string()))
                        .cloned()
                        .unwrap_or_else(|| unset(file))
                };
                out.insert(format!("{dir}/{file}"), (owner.clone(), want));
            }
        }
    }
    out
}

/// Records every change of the watched files with the node's clock until
/// /run/nodemem-monitor/stop exists: `<epoch seconds> <path> <value>` (`gone` once
/// the cgroup is removed). Reads are bash builtins, so a round over ~60 files takes
/// milliseconds even under TCG.
const MONITOR: &str = r#"#!/bin/bash
declare -A last
while [ ! -e /run/nodemem-monitor/stop ]; do
  while read -r f; do
    v=gone
    read -r v < "$f" 2>/dev/null || v=gone
    if [ "${last[$f]-}" != "$v" ]; then
      echo "$EPOCHREALTIME $f $v"
      last[$f]=$v
    fi
  done < /run/nodemem-monitor/watch
  sleep 0.05
done
"#;

/// One owner's event on the node, with when it began (the node's clock).
struct OwnerEvent {
    what: &'static str,
    at: f64,
}

/// Runs `script` on the node and returns the node's time just before it ran.
fn owner_event(node: &mut RealNode, what: &'static str, script: &str) -> OwnerEvent {
    let (out, code) = node
        .run_within(
            &format!("echo $EPOCHREALTIME; {script}"),
            Duration::from_secs(120),
        )
        .unwrap();
    assert_eq!(code, 0, "{what}: {out}");
    let at = out.lines().next().unwrap().trim().parse().unwrap();
    OwnerEvent { what, at }
}

/// Item 4 of issue 17: the programs that own the cgroups nodemem writes (systemd, the
/// kubelet, containerd) rewrite them on their own occasions. Every value nodemem
/// holds must read back as nodemem's through all of them; the monitor on the node
/// records each file's every change, and any moment a value was not nodemem's fails
/// the test with the file, the values and the event before it.
#[allow(clippy::too_many_arguments)]
async fn values_survive_their_owners(
    node: &mut RealNode,
    driver: Driver,
    client: &kube::Client,
    admin: &Path,
    policy: &Path,
    work: &Path,
    agent_container: &str,
    expected: std::collections::BTreeMap<String, (String, String)>,
) {
    // What simulate predicts for the node's pods as they are now.
    let expected_now = |node: &RealNode| {
        let name = node.name.clone();
        async move { expected_files(client, admin, policy, work, driver, &name, agent_container).await }
    };
    // memory.max is the kubelet's and changes on resize: not nodemem's to hold.
    let watched: Vec<&String> = expected
        .keys()
        .filter(|p| !p.ends_with("/memory.max"))
        .collect();
    std::fs::write(node.share().join("monitor.sh"), MONITOR).unwrap();
    let watch_list: String = watched.iter().map(|p| format!("{p}\n")).collect();
    std::fs::write(node.share().join("watch"), watch_list).unwrap();
    let (out, code) = node
        .run("mkdir -p /run/nodemem-monitor && cp /mnt/nodemem/watch /run/nodemem-monitor/watch && systemd-run --unit=nodemem-monitor --property=StandardOutput=file:/run/nodemem-monitor/log bash /mnt/nodemem/monitor.sh")
        .unwrap();
    assert_eq!(code, 0, "{out}");
    let started = owner_event(node, "monitor started", "sleep 2");
    let mut events = vec![started];
    let burstable_unit = match driver {
        Driver::Systemd => "kubepods-burstable.slice",
        Driver::Cgroupfs => "",
    };
    events.push(owner_event(
        node,
        "systemctl daemon-reload",
        "systemctl daemon-reload && sleep 3",
    ));
    if driver == Driver::Systemd {
        // What the kubelet's periodic QoS update does to a slice (a property change),
        // without waiting for it; the real one comes below.
        events.push(owner_event(
            node,
            "a property change on the burstable slice",
            &format!(
                "systemctl set-property --runtime {burstable_unit} TasksAccounting=yes && sleep 3"
            ),
        ));
    }
    events.push(owner_event(
        node,
        "containerd restart",
        "systemctl restart containerd && sleep 5",
    ));
    let kubelet_restart = owner_event(
        node,
        "kubelet restart",
        "systemctl restart kubelet && until systemctl is-active -q kubelet; do sleep 1; done; sleep 10",
    );
    let kubelet_restarted_at = kubelet_restart.at;
    events.push(kubelet_restart);

    // An in-place resize of the workload's memory limit: the kubelet writes the pod's
    // and the container's memory.max (through systemd on this driver, which re-applies
    // the rest from its record); nodemem's memory.high for the container follows.
    let resize_at = owner_event(node, "pod resize", "true");
    let resized_at = Instant::now();
    kubectl(
        admin,
        &[
            "patch",
            "pod",
            "workload",
            "-n",
            "default",
            "--subresource",
            "resize",
            "--type=merge",
            "-p",
            r#"{"spec":{"containers":[{"name":"w","resources":{"limits":{"memory":"320Mi"}}}]}}"#,
        ],
    )
    .unwrap();
    events.push(resize_at);
    let pods: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    eventually(
        "the resize applied by the kubelet",
        Duration::from_secs(120),
        || async {
            let p = pods.get("workload").await.ok()?;
            let limit = p
                .status?
                .container_statuses?
                .first()?
                .resources
                .clone()?
                .limits?
                .get("memory")?
                .0
                .clone();
            (limit == "320Mi").then_some(())
        },
    )
    .await;
    let after_resize = expected_now(node).await;
    let changed_by_resize: Vec<String> = after_resize
        .iter()
        .filter(|(p, (_, v))| {
            expected.get(*p).map(|(_, old)| old) != Some(v) && !p.ends_with("/memory.max")
        })
        .map(|(p, _)| p.clone())
        .collect();
    assert!(
        !changed_by_resize.is_empty(),
        "the resize changes nodemem's memory.high of the container"
    );
    let resized: Vec<(&String, &String)> = changed_by_resize
        .iter()
        .map(|p| (p, &after_resize[p].1))
        .collect();
    node_values_become(node, &resized, "not nodemem's after the resize");
    eprintln!(
        "{}: after an in-place resize nodemem's new values were in place {:?} after the patch",
        node.name,
        resized_at.elapsed()
    );

    // The container restarted (its process killed): a new container, a new cgroup.
    let old_id = container_id(&pods, "workload").await;
    let restart = owner_event(node, "container restart", "pkill -KILL -x workload");
    let killed_at = Instant::now();
    events.push(restart);
    let new_id = eventually(
        "the workload container restarted",
        Duration::from_secs(120),
        || async {
            let id = container_id(&pods, "workload").await;
            (id != old_id && !id.is_empty()).then_some(id)
        },
    )
    .await;
    let restarted = expected_now(node).await;
    let new_scope: Vec<(&String, &String)> = restarted
        .iter()
        .filter(|(p, _)| p.contains(&new_id) && !p.ends_with("/memory.max"))
        .map(|(p, (_, v))| (p, v))
        .collect();
    assert!(
        !new_scope.is_empty(),
        "the new container's cgroup among {:?}",
        restarted.keys()
    );
    node_values_become(
        node,
        &new_scope,
        "not nodemem's after the container restarted",
    );
    eprintln!(
        "{}: the restarted container's values were in place {:?} after the kill",
        node.name,
        killed_at.elapsed()
    );

    // The kubelet's periodic QoS update (every minute, pkg/kubelet/cm/qos_container_manager_linux.go)
    // has run at least once since it restarted.
    let (now, _) = node.run("echo $EPOCHREALTIME").unwrap();
    let since: f64 = now.trim().parse::<f64>().unwrap() - kubelet_restarted_at;
    if since < 65.0 {
        tokio::time::sleep(Duration::from_secs_f64(65.0 - since)).await;
    }
    let end = owner_event(
        node,
        "monitor stopped",
        "touch /run/nodemem-monitor/stop && sleep 1",
    );
    let (log, code) = node.run("cat /run/nodemem-monitor/log").unwrap();
    assert_eq!(code, 0, "{log}");

    // Each file's timeline against the value nodemem holds there (the resize's new
    // values from when they were in place; a removed cgroup holds nothing).
    let mut timelines: std::collections::BTreeMap<&str, Vec<(f64, &str)>> = Default::default();
    for line in log.lines() {
        let mut parts = line.splitn(3, ' ');
        let (Some(t), Some(path), Some(v)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let Ok(t) = t.parse::<f64>() else { continue };
        timelines.entry(path).or_default().push((t, v));
    }
    assert!(
        timelines.len() >= watched.len(),
        "every watched file read: {} of {}",
        timelines.len(),
        watched.len()
    );
    let mut wrong = Vec::new();
    let mut longest = 0.0f64;
    for (path, changes) in &timelines {
        let Some((owner, want)) = expected.get(*path) else {
            continue;
        };
        if changed_by_resize.iter().any(|p| p == path) {
            // Held at the old value until the resize, then at the new one: checked
            // above; before the resize it must hold the old.
            continue;
        }
        for (i, (t, v)) in changes.iter().enumerate() {
            if *v == want.as_str() || *v == "gone" {
                continue;
            }
            let until = changes.get(i + 1).map_or(end.at, |(t, _)| *t);
            let before = events
                .iter()
                .rev()
                .find(|e| e.at <= *t)
                .map_or("?", |e| e.what);
            longest = longest.max(until - t);
            wrong.push(format!(
                "{owner} {path}: {v} instead of {want} for {:.3}s, after {before}",
                until - t
            ));
        }
    }
    eprintln!(
        "{}: {} files watched through {}: longest window with a value not nodemem's: {:.3}s",
        node.name,
        timelines.len(),
        events
            .iter()
            .skip(1)
            .map(|e| e.what)
            .collect::<Vec<_>>()
            .join(", "),
        longest
    );
    assert!(
        wrong.is_empty(),
        "values nodemem holds were changed by their owners:\n{}",
        wrong.join("\n")
    );
}

/// Polls the files on the node (one request per round) until each reads its value;
/// fails the test with `what` and every file that still does not after a minute.
fn node_values_become(node: &mut RealNode, wanted: &[(&String, &String)], what: &str) {
    let started = Instant::now();
    loop {
        let paths: Vec<&str> = wanted.iter().map(|(p, _)| p.as_str()).collect();
        let read = node_read_all(node, &paths);
        let wrong: Vec<String> = wanted
            .iter()
            .filter_map(|(p, want)| {
                let got = read.get(p.as_str()).cloned().unwrap_or_default();
                (got != **want).then(|| format!("{p}: {got}, predicted {want}"))
            })
            .collect();
        if wrong.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what} (path: read, predicted):\n{}",
            wrong.join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Reads files on the node in one request: path -> its text, or `<unreadable>`.
fn node_read_all(
    node: &mut RealNode,
    paths: &[&str],
) -> std::collections::BTreeMap<String, String> {
    let mut script = String::new();
    for p in paths {
        script.push_str(&format!(
            "v=$(cat '{p}' 2>/dev/null) || v='<unreadable>'; printf '%s\\t%s\\n' '{p}' \"$v\"\n"
        ));
    }
    let (out, code) = node.run(&script).unwrap();
    assert_eq!(code, 0, "{out}");
    out.lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(p, v)| (p.to_string(), v.trim().to_string()))
        .collect()
}

async fn container_id(pods: &Api<core::Pod>, pod: &str) -> String {
    pods.get(pod)
        .await
        .ok()
        .and_then(|p| p.status?.container_statuses?.first()?.container_id.clone())
        .unwrap_or_default()
        .trim_start_matches("containerd://")
        .to_string()
}

/// The kubelet's own Memory QoS, as the reference: the `MemoryQoS` gate with
/// `memoryReservationPolicy: TieredReservation` and the policy's throttling factor.
fn kubelets_memory_qos(on: bool) -> Value {
    json!({
        "featureGates": {"MemoryQoS": on},
        "memoryThrottlingFactor": 0.9,
        "memoryReservationPolicy": if on { "TieredReservation" } else { "None" },
    })
}

/// Writes the node's kubelet configuration for `spec` and restarts the kubelet; waits
/// for the Node to be Ready again.
async fn restart_kubelet_with(node: &mut RealNode, spec: &RealNodeSpec, client: &kube::Client) {
    let config =
        serde_json::to_string_pretty(&nodemem_testkit::real_node::kubelet_configuration(spec))
            .unwrap();
    std::fs::write(node.share().join("kubelet-config.yaml"), config).unwrap();
    let (out, code) = node
        .run_within(
            "cp /mnt/nodemem/kubelet-config.yaml /var/lib/kubelet/config.yaml && systemctl restart kubelet && until systemctl is-active -q kubelet; do sleep 1; done",
            Duration::from_secs(120),
        )
        .unwrap();
    assert_eq!(code, 0, "{out}");
    let nodes: Api<core::Node> = Api::all(client.clone());
    let name = node.name.clone();
    // The restarted kubelet posts a new heartbeat; wait for Ready after it.
    let restarted = k8s_openapi::jiff::Timestamp::now();
    eventually(
        "the kubelet back and the node Ready",
        Duration::from_secs(180),
        || async {
            let n = nodes.get_opt(&name).await.ok().flatten()?;
            n.status?
                .conditions?
                .into_iter()
                .any(|c| {
                    c.type_ == "Ready"
                        && c.status == "True"
                        && c.last_heartbeat_time.is_some_and(|t| t.0 > restarted)
                })
                .then_some(())
        },
    )
    .await;
}

/// Pods of every QoS class for a node, named with `tag`: Guaranteed; Burstable with an
/// init container, a restartable sidecar and a container without a limit; BestEffort;
/// pod-level resources; and, with `opted_out`, a Burstable pod annotated
/// `nodemem.io/memory-qos: disabled` (nodemem's; the kubelet has no such thing).
fn qos_pods(node: &str, tag: &str, opted_out: bool) -> Vec<core::Pod> {
    let image = "nodemem.local/workload:1";
    let c = |name: &str, allocate: &str, resources: Value| {
        json!({"name": name, "image": image, "imagePullPolicy": "Never",
               "args": ["-allocate", allocate], "resources": resources})
    };
    let mem = |req: &str, lim: Option<&str>| match lim {
        Some(l) => json!({"requests": {"memory": req, "cpu": "10m"}, "limits": {"memory": l}}),
        None => json!({"requests": {"memory": req, "cpu": "10m"}}),
    };
    let mut pods = vec![
        json!({"metadata": {"name": format!("guaranteed-{tag}")}, "spec": {"nodeName": node,
            "containers": [c("g", "16Mi", json!({"requests": {"memory": "64Mi", "cpu": "20m"}, "limits": {"memory": "64Mi", "cpu": "20m"}}))]}}),
        json!({"metadata": {"name": format!("burstable-{tag}")}, "spec": {"nodeName": node,
            "initContainers": [
                {"name": "init", "image": image, "imagePullPolicy": "Never", "args": ["-allocate", "8Mi", "-exit"],
                 "resources": mem("24Mi", Some("48Mi"))},
                {"name": "sidecar", "image": image, "imagePullPolicy": "Never", "args": ["-allocate", "8Mi"],
                 "restartPolicy": "Always", "resources": mem("16Mi", Some("64Mi"))}
            ],
            "containers": [c("app", "32Mi", mem("32Mi", Some("128Mi"))), c("unlimited", "8Mi", mem("16Mi", None))]}}),
        json!({"metadata": {"name": format!("besteffort-{tag}")}, "spec": {"nodeName": node,
            "containers": [c("be", "8Mi", json!({}))]}}),
        json!({"metadata": {"name": format!("pod-level-{tag}")}, "spec": {"nodeName": node,
            "resources": {"requests": {"memory": "96Mi", "cpu": "20m"}, "limits": {"memory": "192Mi"}},
            "containers": [c("a", "16Mi", mem("32Mi", None)), c("b", "8Mi", json!({}))]}}),
    ];
    if opted_out {
        pods.push(json!({"metadata": {"name": format!("opted-out-{tag}"),
                "annotations": {"nodemem.io/memory-qos": "disabled"}},
            "spec": {"nodeName": node, "containers": [c("o", "8Mi", mem("32Mi", Some("96Mi")))]}}));
    }
    pods.into_iter()
        .map(|p| serde_json::from_value(p).unwrap())
        .collect()
}

/// Creates the pods in `default` and waits until each is Running with every container
/// started (init containers done, sidecars up).
async fn start_pods(client: &kube::Client, pods: &[core::Pod]) {
    let api: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    for p in pods {
        nodemem_testkit::clients::create_pod(&api, p).await.unwrap();
    }
    for p in pods {
        let name = p.metadata.name.clone().unwrap();
        let ready = within(Duration::from_secs(240), || async {
            let status = api.get(&name).await.ok()?.status?;
            let running =
                |s: &core::ContainerStatus| s.state.as_ref().is_some_and(|s| s.running.is_some());
            let all_running = status.container_statuses.as_ref()?.iter().all(running);
            (status.phase.as_deref() == Some("Running") && all_running).then_some(())
        })
        .await;
        if ready.is_none() {
            let status = api.get(&name).await.map(|p| p.status);
            panic!("pod {name} not Running with all its containers within 240s: {status:?}");
        }
    }
}

/// Item 3 of issue 17: the same pods on the same node with the kubelet's own Memory
/// QoS on and nodemem not installed. memory.min, memory.low and memory.high as the
/// kubelet wrote them must equal `nodemem simulate`'s prediction for every cgroup
/// (memory.max too, which is the kubelet's either way). The pods are deleted after.
async fn the_kubelets_memory_qos_is_nodemems_prediction(
    cp: &ControlPlane,
    node: &mut RealNode,
    driver: Driver,
    client: &kube::Client,
) {
    let pods = qos_pods(&node.name, "k", false);
    start_pods(client, &pods).await;
    let work = tempfile::tempdir().unwrap();
    let policy = work.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let admin = cp.admin_kubeconfig();
    let expected =
        expected_files(client, admin, &policy, work.path(), driver, &node.name, "").await;
    // Containers with neither a memory request nor a limit (BestEffort, and a
    // container without resources in a pod with pod-level ones).
    let api: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    let mut unrequested = std::collections::BTreeSet::new();
    for p in &pods {
        let name = p.metadata.name.clone().unwrap();
        for c in api.get(&name).await.unwrap().spec.unwrap().containers {
            let r = c.resources.unwrap_or_default();
            let has = |m: &Option<std::collections::BTreeMap<String, _>>| {
                m.as_ref().is_some_and(|m| m.contains_key("memory"))
            };
            if !has(&r.requests) && !has(&r.limits) {
                unrequested.insert(format!("default/{name}/{}", c.name));
            }
        }
    }
    let mut differences = Vec::new();
    let mut v137 = std::collections::BTreeMap::new();
    let paths: Vec<&str> = expected.keys().map(String::as_str).collect();
    let read = node_read_all(node, &paths);
    for (path, (owner, predicted)) in &expected {
        let kubelet = read.get(path).cloned().unwrap_or_default();
        assert_ne!(kubelet, "<unreadable>", "{path}");
        if kubelet == *predicted {
            continue;
        }
        match v137_fix(owner, path, &kubelet, &unrequested) {
            Some(fix) => *v137.entry(fix).or_insert(0) += 1,
            None => differences.push(format!(
                "{owner}: {path}: the kubelet wrote {kubelet}, nodemem predicts {predicted}"
            )),
        }
    }
    // Both fixes show on this pod set; a kubelet that has them fails here, and the
    // list below goes.
    assert_eq!(
        v137.keys()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        [V137_BESTEFFORT_HIGH, V137_KUBEPODS_LOW].into(),
        "the v1.36.3 kubelet's known differences: {v137:?}"
    );
    assert!(
        expected.len() >= 40,
        "only {} files compared",
        expected.len()
    );
    assert!(
        differences.is_empty(),
        "the kubelet's own Memory QoS ({driver:?} driver) differs from nodemem's prediction:\n{}",
        differences.join("\n")
    );
    eprintln!(
        "{}: the kubelet's own Memory QoS equals nodemem's prediction in {} files compared, except where nodemem follows the v1.37 fixes: {v137:?}",
        node.name,
        expected.len()
    );
    for p in &pods {
        let name = p.metadata.name.as_deref().unwrap();
        api.delete(name, &kube::api::DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }
    eventually(
        "the reference pods gone",
        Duration::from_secs(120),
        || async {
            let left = api.list(&ListParams::default()).await.ok()?.items.len();
            (left == 0).then_some(())
        },
    )
    .await;
}

const V137_BESTEFFORT_HIGH: &str = "memory.high for containers with neither request nor limit";
const V137_KUBEPODS_LOW: &str = "kubepods memory.low";

/// The places where the node's v1.36.3 kubelet differs from its own KEP and nodemem
/// follows the v1.37 fixes (crates/nodemem-model/src/memory_qos.rs, docs/reference.md):
/// the v1.36 kubelet skips memory.high when request == limit, 0 == 0 included, so
/// containers without memory resources get none (the KEP gives them
/// `factor x allocatable`); and it sets no memory.low on kubepods, which caps the
/// burstable slice's memory.low to 0 (memory.low is bounded by the parent's).
fn v137_fix(
    owner: &str,
    path: &str,
    kubelet: &str,
    unrequested: &std::collections::BTreeSet<String>,
) -> Option<&'static str> {
    if path.ends_with("/memory.high") && kubelet == "max" && unrequested.contains(owner) {
        return Some(V137_BESTEFFORT_HIGH);
    }
    if owner == "kubepods" && path.ends_with("/memory.low") && kubelet == "0" {
        return Some(V137_KUBEPODS_LOW);
    }
    None
}

/// Issue 19 on the real kernel: under `enforcement: Observe` (factor 0.25: memory.high
/// would be 64Mi + 0.25 x 192Mi = 112Mi) a container holding 200Mi is reported as one
/// memory.high would throttle, with its working set as the kernel counts it and the
/// kernel's memory.peak; a container that fills page cache up to its 96Mi limit beside
/// a small working set is charged for it past its would-be memory.high of 36Mi
/// (memory.current) and not reported; nothing is written.
async fn observation_on_a_real_kernel(
    node: &mut RealNode,
    driver: Driver,
    client: &kube::Client,
    admin: &Path,
) {
    const MI: i64 = 1 << 20;
    let name = node.name.clone();
    let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
    let status = repolicy(
        client,
        admin,
        &name,
        r#"{"spec":{"enforcement":"Observe","memoryQoS":{"throttlingFactor":0.25}}}"#,
    )
    .await;
    let applied = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Applied")
        .unwrap();
    assert_eq!(applied.reason, "Observing", "{applied:?}");
    let dirs = start_workloads(
        client,
        &name,
        driver,
        &[
            ("grows", &["-allocate", "200Mi"], "64Mi", "256Mi"),
            // memory.high would be 16Mi + 0.25 x 80Mi = 36Mi; its page cache fills
            // its 96Mi limit, its working set is the runtime and 4Mi.
            (
                "caches",
                &["-allocate", "4Mi", "-cache", "200Mi"],
                "16Mi",
                "96Mi",
            ),
        ],
    )
    .await;
    let (grows, caches) = (dirs[0].clone(), dirs[1].clone());
    let pods: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    // The page cache is real and charged to the container (as the file is written):
    // memory.current past the would-be memory.high, the working set well under it.
    let deadline = Instant::now() + Duration::from_secs(180);
    let current = loop {
        let (stat, _) = node
            .run(&format!(
                "cat {caches}/memory.current; grep -E '^(inactive_file|active_file) ' {caches}/memory.stat"
            ))
            .unwrap();
        let number = |prefix: &str| -> i64 {
            stat.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        let current: i64 = stat
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(0);
        let inactive = number("inactive_file ");
        if current > 36 * MI && inactive >= 32 * MI && current - inactive < 36 * MI {
            break current;
        }
        assert!(
            Instant::now() < deadline,
            "the cache is not charged past the would-be memory.high (or the working set is not under it) within 180 s: {stat}"
        );
        std::thread::sleep(Duration::from_secs(1));
    };

    let observed = eventually(
        "grows reported as throttled",
        Duration::from_secs(180),
        || async {
            let o = configs.get(&name).await.ok()?.status?.observation?;
            // Once it holds all it allocates (a sample may catch it on the way).
            o.worst
                .iter()
                .any(|w| w.pod == "default/grows" && w.peak_working_set >= 200 * MI)
                .then_some(o)
        },
    )
    .await;
    assert!(!observed.enforced, "{observed:?}");
    let w = observed
        .worst
        .iter()
        .find(|w| w.pod == "default/grows")
        .unwrap();
    let high = 64 * MI + 48 * MI;
    assert_eq!(w.memory_high, high, "{w:?}");
    // The working set the kernel counts: the 200Mi touched, plus the runtime's own.
    assert!(
        (200 * MI..240 * MI).contains(&w.peak_working_set),
        "peak working set {} MiB: {w:?}",
        w.peak_working_set >> 20
    );
    assert!(
        w.memory_peak.is_some_and(|p| p >= w.peak_working_set),
        "memory.peak (6.1 has it) is at least the working set: {w:?}"
    );
    assert_eq!(w.max_excess_bytes, w.peak_working_set - high, "{w:?}");
    assert!(
        observed.worst.iter().all(|w| w.pod != "default/caches"),
        "page cache is no working set: {observed:?}"
    );
    // Observe wrote nothing: the kernel's defaults.
    for c in [&grows, &caches] {
        let (high, _) = node.run(&format!("cat {c}/memory.high")).unwrap();
        assert_eq!(high.trim(), "max", "{c}");
    }
    eprintln!(
        "observed on the real kernel: grows {} MiB (memory.peak {} MiB) against a would-be memory.high of 112 MiB; caches {} MiB charged, not counted",
        w.peak_working_set >> 20,
        w.memory_peak.unwrap_or(0) >> 20,
        current >> 20
    );
    for p in ["grows", "caches"] {
        pods.delete(p, &Default::default()).await.unwrap();
    }
}

/// The notes of the Events of `reason` on pod `pod` in `default`.
async fn pod_events(client: &kube::Client, pod: &str, reason: &str) -> Vec<String> {
    nodemem_testkit::clients::events_about(client, "default", pod, reason)
        .await
        .into_iter()
        .map(|e| e.note.unwrap_or_default())
        .collect()
}

/// Issue 19's relief on the real kernel: a container that holds 150Mi and keeps mapping
/// and unmapping 32Mi more sits at its 160Mi memory.high and stalls (PSI `full`, as
/// the kernel throttles it); the agent, woken by the PSI trigger, raises its
/// memory.high to its memory.max (256Mi) within the configured time, puts it back after
/// the relief period, and reports it when it chokes again within the repeat window. A
/// container that only fills page cache beyond its memory.high is never relieved.
async fn relief_on_a_real_kernel(
    node: &mut RealNode,
    driver: Driver,
    client: &kube::Client,
    admin: &Path,
    agent_ip: &str,
) {
    const MI: i64 = 1 << 20;
    let name = node.name.clone();
    let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
    repolicy(
        client,
        admin,
        &name,
        r#"{"spec":{"enforcement":"Agent","memoryQoS":{"throttlingFactor":0.5,
            "relief":{"fullPressurePercent":10,"sustainedSeconds":10,"reliefSeconds":30,"repeatWindowSeconds":600}},
            "rollout":{"health":{"maxReliefs":5}}}}"#,
    )
    .await;
    let dirs = start_workloads(
        client,
        &name,
        driver,
        &[
            (
                "cache-only",
                &["-allocate", "16Mi", "-cache", "200Mi"],
                "64Mi",
                "256Mi",
            ),
            (
                "thrash",
                &["-allocate", "150Mi", "-churn", "32Mi"],
                "64Mi",
                "256Mi",
            ),
        ],
    )
    .await;
    let started = Instant::now();
    let (cache, thrash) = (dirs[0].clone(), dirs[1].clone());
    let pods: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    let high = (160 * MI).to_string();
    let raised = (256 * MI).to_string();
    let read = |node: &mut RealNode, file: &str| {
        node.run(&format!("cat {file}"))
            .map(|(out, _)| out.trim().to_string())
            .unwrap_or_default()
    };
    // Relieved: sustainedSeconds (10) after the stall is seen, a tick (10 s) to see it.
    let relieved_after = loop {
        if read(node, &format!("{thrash}/memory.high")) == raised {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "thrash not relieved within 120 s: memory.high {}, pressure {}",
            read(node, &format!("{thrash}/memory.high")),
            read(node, &format!("{thrash}/memory.pressure"))
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let relieved = eventually(
        "the MemoryHighRelieved event",
        Duration::from_secs(30),
        || async {
            pod_events(client, "thrash", "MemoryHighRelieved")
                .await
                .pop()
        },
    )
    .await;
    assert!(
        relieved.starts_with(&format!(
            "container w: memory.high raised from {high} to {raised}"
        )),
        "{relieved}"
    );
    // Back after the relief period (30 s), then reported when it chokes again.
    let restored_at = loop {
        if read(node, &format!("{thrash}/memory.high")) == high {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < relieved_after + Duration::from_secs(90),
            "memory.high not restored"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        restored_at >= relieved_after + Duration::from_secs(25),
        "restored {restored_at:?} after a relief at {relieved_after:?}: before the relief period"
    );
    let refused = eventually(
        "the ReliefRefused event",
        Duration::from_secs(120),
        || async { pod_events(client, "thrash", "ReliefRefused").await.pop() },
    )
    .await;
    assert!(refused.contains("reported, not relieved"), "{refused}");
    assert_eq!(
        read(node, &format!("{thrash}/memory.high")),
        high,
        "not relieved again"
    );
    // Page cache beyond memory.high: reclaimed, never relieved.
    assert_eq!(read(node, &format!("{cache}/memory.high")), high);
    assert!(pod_events(client, "cache-only", "MemoryHighRelieved")
        .await
        .is_empty());
    // The kernel armed a PSI trigger for every watched container (the agent's pod has
    // no capability: a 10 s window is a multiple of 2 s, which unprivileged triggers
    // need): none is read on every tick, and the relief began with one firing.
    let watched = agent_metric(node, agent_ip, "nodemem_agent_relief_watched_containers");
    let polled = agent_metric(node, agent_ip, "nodemem_agent_relief_polled_containers");
    let fired = agent_metric(node, agent_ip, "nodemem_agent_relief_triggers_fired_total");
    let (why, _) = node
        .run("grep -h 'PSI trigger' /var/log/pods/nodemem-system_*/agent/*.log | tail -n 3")
        .unwrap_or_default();
    assert!(watched >= 2.0, "{watched} containers watched");
    assert!(
        agent_metrics(node, agent_ip).contains("\nnodemem_agent_relief_polled_containers 0\n"),
        "the agent exports its polled containers"
    );
    assert_eq!(
        polled, 0.0,
        "{polled} of {watched} watched containers have no PSI trigger; the agent says: {why}"
    );
    assert!(fired >= 1.0, "no PSI trigger fired ({fired})");
    eprintln!("relief: {watched} containers watched, each with a PSI trigger; {fired} firings");
    let status = configs.get(&name).await.unwrap().status.unwrap();
    let relief = status.relief.expect("relief in status");
    assert_eq!((relief.reliefs, relief.refused), (1, 1), "{relief:?}");
    eprintln!(
        "relief on the real kernel: relieved {relieved_after:?} after start, restored at {restored_at:?}; {relieved}"
    );
    for p in ["thrash", "cache-only"] {
        pods.delete(p, &Default::default()).await.unwrap();
    }
}

/// Patches policy `real` with `patch` (merge JSON) and waits for the node to apply the
/// new revision; its status.
async fn repolicy(
    client: &kube::Client,
    admin: &Path,
    node: &str,
    patch: &str,
) -> nodemem_api::config::NodeMemoryConfigStatus {
    let configs: Api<NodeMemoryConfig> = Api::all(client.clone());
    let before = configs.get(node).await.unwrap().spec.revision;
    kubectl(
        admin,
        &["patch", "nmp", "real", "--type=merge", "-p", patch],
    )
    .unwrap();
    config_applied(client, admin, node, Some(&before), Duration::from_secs(180)).await
}

/// A workload pod: its name, its arguments, its memory request and limit.
type Workload<'a> = (&'a str, &'a [&'a str], &'a str, &'a str);

/// Starts workload pods in `default` (one container `w` each) and returns their
/// container cgroups, in order.
async fn start_workloads(
    client: &kube::Client,
    node: &str,
    driver: Driver,
    workloads: &[Workload<'_>],
) -> Vec<String> {
    let pods: Vec<core::Pod> = workloads
        .iter()
        .map(|(pod, args, request, limit)| {
            let resources = json!({"requests": {"memory": request, "cpu": "10m"},
                "limits": {"memory": limit}});
            serde_json::from_value(json!({"metadata": {"name": pod}, "spec": {"nodeName": node,
                "containers": [{"name": "w", "image": "nodemem.local/workload:1",
                    "imagePullPolicy": "Never", "args": args, "resources": resources}]}}))
            .unwrap()
        })
        .collect();
    start_pods(client, &pods).await;
    let api: Api<core::Pod> = Api::namespaced(client.clone(), "default");
    let mut dirs = Vec::new();
    for (pod, ..) in workloads {
        let uid = api.get(pod).await.unwrap().metadata.uid.unwrap();
        let id = container_id(&api, pod).await;
        dirs.push(container_dir(
            driver,
            &pod_dir(driver, "Burstable", &uid),
            &id,
        ));
    }
    dirs
}
