//! `cargo bench -p nodemem --bench agent_idle`: what the in-cluster agent costs while
//! nothing changes, on the real test control plane.
//!
//! A simulated node with 250 running pods (two containers each, Burstable, cgroups in a
//! tmpfs tree the fake kubelet fills), its NodeMemoryConfig, and the real `nodemem
//! agent` (release build) with its node-bound identity, installed the way a user would
//! (`kubectl apply` of the CRDs and deploy/agent). Once the agent reports every pod
//! applied and has settled, 60 s with nothing changing: the agent's CPU time and
//! resident memory from /proc, and from its own metrics how many passes it ran.
//!
//! The observation and relief run as they would (issue 19): every container has a
//! working set in its memory.stat, so every 10 s sample reads and parses all 500, and
//! relief is on; a tmpfs tree has no PSI triggers, so relief reads every container's
//! memory.pressure on each tick too: the upper bound of what a node pays (on a kernel
//! with PSI a calm container is never read for relief). NODEMEM_IDLE_OBSERVE=0 runs
//! the same without either (`--observe-seconds 0`, no relief), for what they cost.
//! NODEMEM_IDLE_RECLAIM=1 turns proactive reclaim on (`reclaim: {mode: Active}`, issue 46):
//! every 6 s each of the 500 containers is read (memory.current, memory.stat,
//! memory.pressure) and, as a tmpfs tree never gives memory back, stepped, written to
//! its memory.reclaim and read again: the most reclaim can cost at 250 pods.

#![allow(clippy::unwrap_used)] // a benchmark: a failed unwrap is the run failing

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use nodemem_api::NodeMemoryConfig;
use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_testkit::binaries::repo_root;
use nodemem_testkit::cgroup_tree::CgroupTree;
use nodemem_testkit::clients::kubectl;
use nodemem_testkit::kubelet::FakeKubelet;
use nodemem_testkit::nodes::SimNode;
use nodemem_testkit::{ControlPlane, Identity};
use serde_json::json;

const NODE: &str = "idle-node";
const NS: &str = "idle";
const SETTLE: Duration = Duration::from_secs(10);

/// NODEMEM_IDLE_PODS and NODEMEM_IDLE_SECONDS change the defaults (250, 60) when
/// investigating.
fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The most the process was resident since it started (VmHWM), KiB.
fn peak_resident_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

/// Resident memory by kind (anonymous: heap and stacks; file: the binary's pages), KiB.
fn resident_kinds(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .filter(|l| {
            l.starts_with("RssAnon:") || l.starts_with("RssFile:") || l.starts_with("Threads:")
        })
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Sum of a counter family in the agent's /metrics.
fn metric_sum(addr: &str, name: &str) -> f64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn main() {
    let pods_wanted = setting("NODEMEM_IDLE_PODS", 250) as usize;
    let idle = Duration::from_secs(setting("NODEMEM_IDLE_SECONDS", 60));
    let observe = setting("NODEMEM_IDLE_OBSERVE", 1) != 0;
    let reclaim = setting("NODEMEM_IDLE_RECLAIM", 0) != 0;
    let memory_qos = if observe {
        json!({"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation", "relief": {}})
    } else {
        json!({"throttlingFactor": 0.9, "reservationPolicy": "TieredReservation"})
    };
    let repo = repo_root();
    let cp = ControlPlane::start().expect("control plane");
    let admin_kubeconfig = cp.admin_kubeconfig().to_path_buf();
    kubectl(
        &admin_kubeconfig,
        &["apply", "-f", repo.join("crds").to_str().unwrap()],
    )
    .unwrap();
    kubectl(
        &admin_kubeconfig,
        &[
            "wait",
            "--for=condition=Established",
            "crd/nodememoryconfigs.nodemem.io",
        ],
    )
    .unwrap();
    kubectl(
        &admin_kubeconfig,
        &[
            "apply",
            "-f",
            repo.join("deploy/namespace.yaml").to_str().unwrap(),
            "-f",
            repo.join("deploy/agent").to_str().unwrap(),
        ],
    )
    .unwrap();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let base = if Path::new("/dev/shm").is_dir() {
        Path::new("/dev/shm").to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = tempfile::Builder::new()
        .prefix("nodemem-idle-")
        .tempdir_in(base)
        .unwrap();
    std::fs::create_dir_all(dir.path().join("cgroup")).unwrap();
    let tree =
        Arc::new(CgroupTree::at(&dir.path().join("cgroup"), CgroupDriver::Systemd, 2).unwrap());
    std::fs::create_dir_all(dir.path().join("proc/sys/kernel")).unwrap();
    std::fs::write(
        dir.path().join("proc/sys/kernel/osrelease"),
        "6.1.0-56-amd64\n",
    )
    .unwrap();

    let (client, _kubelet) = runtime.block_on(async {
        let client = cp.client(&Identity::Admin).await.unwrap();
        SimNode::new(NODE).register(&client).await.unwrap();
        let kubelet = FakeKubelet::start(
            client.clone(),
            BTreeMap::from([(NODE.to_string(), tree.clone())]),
        );
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
            )
            .await
            .unwrap();
        Api::<DynamicObject>::all_with(
            client.clone(),
            &ApiResource::erase::<NodeMemoryConfig>(&()),
        )
        .patch(
            NODE,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(json!({
                "apiVersion": "nodemem.io/v1alpha1", "kind": "NodeMemoryConfig",
                "metadata": {"name": NODE},
                "spec": if reclaim {
                    json!({"policy": "bench", "revision": "rev-1", "memoryQoS": memory_qos,
                        "reclaim": {"mode": "Active"}})
                } else {
                    json!({"policy": "bench", "revision": "rev-1", "memoryQoS": memory_qos})
                },
            })),
        )
        .await
        .unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        let deadline = Instant::now() + Duration::from_secs(30);
        for i in 0..pods_wanted {
            let container = |name: &str| {
                json!({"name": name, "image": "x",
                    "resources": {"requests": {"memory": "32Mi"}, "limits": {"memory": "128Mi"}}})
            };
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("pod-{i}")},
                "spec": {"nodeName": NODE, "containers": [container("app"), container("sidecar")]},
            }))
            .unwrap();
            // The namespace's default ServiceAccount appears just after the namespace.
            while let Err(e) = pods.create(&PostParams::default(), &pod).await {
                assert!(Instant::now() < deadline, "create pod: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        (client, kubelet)
    });

    let kubeconfig = runtime
        .block_on(cp.kubeconfig(&Identity::Agent(NODE.into())))
        .unwrap();
    let log = dir.path().join("agent.log");
    let mut agent = Command::new(env!("CARGO_BIN_EXE_nodemem"))
        .args([
            "agent",
            "--node-name",
            NODE,
            "--metrics-addr",
            "127.0.0.1:0",
            "--observe-seconds",
            if observe { "10" } else { "0" },
        ])
        .arg("--cgroup-root")
        .arg(dir.path().join("cgroup"))
        .arg("--sys-root")
        .arg(dir.path().join("sys"))
        .arg("--proc-root")
        .arg(dir.path().join("proc"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .env("KUBECONFIG", &kubeconfig)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let configs: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<NodeMemoryConfig>(&()));
    let started = Instant::now();
    let managed = runtime.block_on(async {
        loop {
            let status = configs
                .get_status(NODE)
                .await
                .ok()
                .and_then(|c| c.data.get("status").cloned());
            let managed = status
                .as_ref()
                .and_then(|s| s["managedPods"].as_u64())
                .unwrap_or(0);
            let applied = status
                .as_ref()
                .is_some_and(|s| s["observedRevision"] == "rev-1");
            // Every test pod plus the agent's own.
            if applied && managed >= pods_wanted as u64 {
                return managed;
            }
            assert!(
                started.elapsed() < Duration::from_secs(180),
                "the agent did not report {pods_wanted} pods applied; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
    let converged = started.elapsed();
    // Working sets for every container (60Mi used, 20Mi of it inactive page cache).
    runtime.block_on(async {
        use nodemem_model::values::cgroup_layout::{container_dir, ContainerId, ContainerRuntime};
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        for p in pods.list(&Default::default()).await.unwrap() {
            let uid = p.metadata.uid.unwrap();
            for c in ["app", "sidecar"] {
                let id = ContainerId {
                    runtime: ContainerRuntime::Containerd,
                    id: nodemem_testkit::kubelet::container_id(&uid, c),
                };
                let path = container_dir(
                    CgroupDriver::Systemd,
                    nodemem_model::pod::qos::QosClass::Burstable,
                    &uid,
                    &id,
                );
                // The agent counts its own pod too: the last test pod's cgroup may be
                // a moment behind the count that let this run on.
                let deadline = Instant::now() + Duration::from_secs(30);
                while let Err(e) = tree.set_usage(&path, 60 << 20, 20 << 20) {
                    assert!(Instant::now() < deadline, "{e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    });
    std::thread::sleep(SETTLE);
    let text = std::fs::read_to_string(&log).unwrap();
    let at = text
        .find("bound=")
        .expect("the agent logs its metrics address")
        + "bound=".len();
    let addr: String = text[at..]
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    let passes_before = metric_sum(&addr, "nodemem_agent_passes_total");
    let samples_before = metric_sum(&addr, "nodemem_agent_observation_sample_seconds_count");
    let sample_time_before = metric_sum(&addr, "nodemem_agent_observation_sample_seconds_sum");
    let writes_before = metric_sum(&addr, "nodemem_agent_writes_total");
    let pid = agent.id();
    let (ticks_before, _) = nodemem_testkit::clients::cpu_ticks_and_rss_kib(pid).unwrap();
    let t0 = Instant::now();
    std::thread::sleep(idle);
    let (ticks_after, rss_kib) = nodemem_testkit::clients::cpu_ticks_and_rss_kib(pid).unwrap();
    let elapsed = t0.elapsed().as_secs_f64();
    let passes = metric_sum(&addr, "nodemem_agent_passes_total") - passes_before;
    let writes = metric_sum(&addr, "nodemem_agent_writes_total") - writes_before;
    let samples =
        metric_sum(&addr, "nodemem_agent_observation_sample_seconds_count") - samples_before;
    let sample_time =
        metric_sum(&addr, "nodemem_agent_observation_sample_seconds_sum") - sample_time_before;
    let observed = metric_sum(&addr, "nodemem_agent_observed_containers");
    let polled = metric_sum(&addr, "nodemem_agent_relief_polled_containers");
    let reclaim_steps = metric_sum(&addr, "nodemem_agent_reclaim_steps_total");
    let reclaim_targets = metric_sum(&addr, "nodemem_agent_reclaim_containers");
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpu_percent = (ticks_after - ticks_before) as f64 / hz / elapsed * 100.0;
    let kinds = resident_kinds(pid);
    let peak_kib = peak_resident_kib(pid);
    let _ = agent.kill();
    let _ = agent.wait();
    println!(
        "agent_idle: {managed} managed pods ({} containers), applied {:.1} s after start",
        pods_wanted * 2,
        converged.as_secs_f64()
    );
    println!(
        "agent_idle: idle {elapsed:.0} s: CPU {cpu_percent:.3}% of one core ({} ticks at {hz} Hz; goal < 0.5%), resident {:.1} MiB (goal < 30 MiB), {passes} passes, {writes} writes",
        ticks_after - ticks_before,
        rss_kib as f64 / 1024.0
    );
    println!("agent_idle: resident by kind: {kinds}");
    // What a memory limit must hold: the most the agent was resident at any time since
    // it started (its first list of pods and first pass included), against the chart's
    // default limit.
    let limit_mib: f64 = nodemem_controller::agents::pod::DEFAULT_MEMORY_LIMIT
        .trim_end_matches("Mi")
        .parse()
        .expect("the default limit in Mi");
    println!(
        "agent_idle: peak resident (VmHWM) {:.1} MiB, {:.2}x of the default limit {limit_mib} MiB",
        peak_kib as f64 / 1024.0,
        peak_kib as f64 / 1024.0 / limit_mib
    );
    println!(
        "agent_idle: observation: {samples} samples of {observed} containers, {:.2} ms each on average; relief reads {polled} containers on every tick (no PSI triggers on tmpfs)",
        if samples > 0.0 { sample_time / samples * 1000.0 } else { 0.0 }
    );
    println!(
        "agent_idle: reclaim {}: {reclaim_targets} containers, {reclaim_steps} steps since start",
        if reclaim { "on" } else { "off" }
    );
}
