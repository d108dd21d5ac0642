//! A whole nodemem installation on the test control plane, as `nodemem sandbox` shows
//! it and as end-to-end tests use it: nodemem's CRDs and manifests applied with the
//! real kubectl, simulated node pools (each node with its own cgroup v2 tree, NUMA
//! sysfs and fake kubelet), a real agent process per node with that node's own
//! identity, and the real controller with the controller's identity.
//!
//! Every process is a [`Process`]: killed with its group when the bed is dropped or
//! when this process dies; every file lives in one temporary directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kube::Client;
use nodemem_model::values::cgroup_layout::CgroupDriver;

use crate::cgroup_tree::CgroupTree;
use crate::kubelet::FakeKubelet;
use crate::nodes::{NumaNode, SimNode};
use crate::process::Process;
use crate::{ControlPlane, Error, Identity};

/// The label a pool's nodes carry (the examples' policies select on it).
pub const POOL_LABEL: &str = "nodemem.io/pool";

/// One node pool.
#[derive(Clone, Debug)]
pub struct PoolSpec {
    /// The value of [`POOL_LABEL`] on its nodes; nodes are named `<pool>-<i>`.
    pub pool: String,
    pub nodes: usize,
    /// NUMA nodes per node, each `memory_per_numa` bytes with `hugepages_2mi_per_numa`
    /// bytes of 2Mi hugepages.
    pub numa_nodes: usize,
    pub memory_per_numa: i64,
    pub hugepages_2mi_per_numa: i64,
    /// Bytes held back from pods (allocatable = capacity - reserved).
    pub reserved: i64,
}

impl PoolSpec {
    pub fn new(pool: &str, nodes: usize) -> Self {
        PoolSpec {
            pool: pool.to_string(),
            nodes,
            numa_nodes: 1,
            memory_per_numa: 16 << 30,
            hugepages_2mi_per_numa: 0,
            reserved: 1 << 30,
        }
    }

    pub fn numa(mut self, numa_nodes: usize, memory_per_numa: i64, hugepages_2mi: i64) -> Self {
        self.numa_nodes = numa_nodes;
        self.memory_per_numa = memory_per_numa;
        self.hugepages_2mi_per_numa = hugepages_2mi;
        self
    }

    pub fn reserved(mut self, bytes: i64) -> Self {
        self.reserved = bytes;
        self
    }
}

/// How nodemem's CRDs and RBAC get into the cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Install {
    /// `kubectl apply -f crds/ deploy/agent/ deploy/controller/`.
    Manifests,
    /// `helm install RELEASE CHART -n nodemem-system --create-namespace` with these
    /// extra arguments (CRDs, RBAC and the admission policy from the chart). CHART:
    /// the repository's `charts/nodemem` when None, else a packaged chart (`.tgz`).
    Chart {
        release: String,
        args: Vec<String>,
        chart: Option<PathBuf>,
    },
}

#[derive(Clone, Debug)]
pub struct BedSpec {
    /// The `nodemem` binary the agents and the controller run as.
    pub nodemem: PathBuf,
    /// The repository: `crds/`, `deploy/agent/`, `deploy/controller/` come from here.
    pub repo: PathBuf,
    pub pools: Vec<PoolSpec>,
    /// Seconds between the agents' full passes.
    pub agent_resync_seconds: u64,
    pub install: Install,
    /// More flags for the controller (e.g. `--agent-image`).
    pub controller_args: Vec<String>,
    /// The cluster's PodSecurity default for unlabelled namespaces (a hardened
    /// cluster's `baseline`); None: the apiserver's own (privileged).
    pub pod_security_default: Option<String>,
}

/// A node of the bed.
pub struct BedNode {
    pub pool: String,
    pub tree: Arc<CgroupTree>,
    /// Its sysfs, procfs and state directory, and its agent's log.
    pub dir: PathBuf,
    agent: Process,
}

impl BedNode {
    pub fn agent_log(&self) -> &Path {
        self.agent.log_path()
    }

    pub fn agent_pid(&self) -> u32 {
        self.agent.pid()
    }
}

/// Per process of a bed, how often it was started again and when it may be next.
#[derive(Debug, Default)]
pub struct Restarts(BTreeMap<String, (u32, std::time::Instant)>);

pub struct Bed {
    pub nodes: BTreeMap<String, BedNode>,
    pub client: Client,
    controller: Process,
    _kubelet: FakeKubelet,
    // Dropped last: the processes above are stopped before their files go.
    pub cp: ControlPlane,
    dir: tempfile::TempDir,
}

fn io(what: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::Setup(format!("{}: {e}", what.display()))
}

/// `<dir>/sys/devices/system/node/node<N>/{meminfo, hugepages/hugepages-2048kB/nr_hugepages}`
/// and `<dir>/proc/sys/kernel/osrelease`, as the agent reads them.
fn write_node_files(dir: &Path, node: &SimNode) -> Result<(), Error> {
    for n in &node.numa {
        let d = dir.join(format!("sys/devices/system/node/node{}", n.id));
        std::fs::create_dir_all(&d).map_err(io(&d))?;
        let meminfo = d.join("meminfo");
        std::fs::write(
            &meminfo,
            format!("Node {} MemTotal:       {} kB\n", n.id, n.memory / 1024),
        )
        .map_err(io(&meminfo))?;
        if let Some(bytes) = n.hugepages.get("hugepages-2Mi") {
            let h = d.join("hugepages/hugepages-2048kB");
            std::fs::create_dir_all(&h).map_err(io(&h))?;
            std::fs::write(h.join("nr_hugepages"), format!("{}\n", bytes / (2 << 20)))
                .map_err(io(&h))?;
        }
    }
    write_kubelet_process(dir)?;
    let kernel = dir.join("proc/sys/kernel");
    std::fs::create_dir_all(&kernel).map_err(io(&kernel))?;
    std::fs::write(
        kernel.join("osrelease"),
        format!("{}\n", node.kernel_version),
    )
    .map_err(io(&kernel))?;
    Ok(())
}

/// The simulated node's kubelet as the agent finds it: a process in its procfs
/// (`proc/4242`: comm, stat, cmdline, cgroup, mount namespace, and its root at
/// `kubelet-root`) whose command
/// line names its configuration file, which names nothing but what it is (the
/// kubelet's defaults, as the fake kubelet runs).
fn write_kubelet_process(dir: &Path) -> Result<(), Error> {
    let process = dir.join("proc/4242");
    let root = dir.join("kubelet-root");
    let config = root.join("var/lib/kubelet");
    for d in [&process, &config] {
        std::fs::create_dir_all(d).map_err(io(d))?;
    }
    let files = [
        (process.join("comm"), "kubelet\n".to_string()),
        (
            process.join("stat"),
            "4242 (kubelet) S 1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n".to_string(),
        ),
        (
            process.join("cmdline"),
            "/usr/bin/kubelet\0--config=/var/lib/kubelet/config.yaml\0--kubeconfig=/etc/kubernetes/kubelet.conf\0".to_string(),
        ),
        (
            process.join("cgroup"),
            "0::/system.slice/kubelet.service\n".to_string(),
        ),
        (
            config.join("config.yaml"),
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n".to_string(),
        ),
    ];
    for (path, text) in files {
        std::fs::write(&path, text).map_err(io(&path))?;
    }
    for link in ["root", "cwd"] {
        let at = process.join(link);
        if !at.exists() {
            std::os::unix::fs::symlink(&root, &at).map_err(io(&at))?;
        }
    }
    // The host's mount namespace, init's and the kubelet's: only a process in it is
    // taken for the host's kubelet.
    for ns in [dir.join("proc/1/ns"), process.join("ns")] {
        std::fs::create_dir_all(&ns).map_err(io(&ns))?;
        let at = ns.join("mnt");
        if std::fs::symlink_metadata(&at).is_err() {
            std::os::unix::fs::symlink("mnt:[4026531841]", &at).map_err(io(&at))?;
        }
    }
    Ok(())
}

/// `nodemem agent` flags for a simulated node: its name, its cgroup tree, and sysfs,
/// procfs and state directory under `node_dir`; metrics on a free loopback port.
pub fn agent_args(
    node: &str,
    cgroup_root: &Path,
    node_dir: &Path,
    resync_seconds: u64,
) -> Vec<String> {
    let dir = |sub: &str| node_dir.join(sub).display().to_string();
    vec![
        "agent".into(),
        "--node-name".into(),
        node.into(),
        "--resync-seconds".into(),
        resync_seconds.to_string(),
        // Observation samples as often as full passes run; a status with new figures
        // alone at most every third sample (the default minute would make tests and
        // the sandbox's tour wait).
        "--observe-seconds".into(),
        resync_seconds.to_string(),
        "--status-refresh-seconds".into(),
        (resync_seconds * 3).to_string(),
        "--metrics-addr".into(),
        "127.0.0.1:0".into(),
        "--cgroup-root".into(),
        cgroup_root.display().to_string(),
        "--sys-root".into(),
        dir("sys"),
        "--proc-root".into(),
        dir("proc"),
        "--state-dir".into(),
        dir("state"),
    ]
}

impl Bed {
    /// Starts the control plane (building it first if needed), applies CRDs and RBAC,
    /// registers the pools' nodes, and starts the agents and the controller. `step`
    /// hears each stage as it begins.
    pub async fn start(spec: &BedSpec, step: &dyn Fn(&str)) -> Result<Bed, Error> {
        step("starting etcd, kube-apiserver and kube-controller-manager");
        let options = crate::control_plane::Options {
            pod_security_default: spec.pod_security_default.clone(),
            ..Default::default()
        };
        let cp = tokio::task::spawn_blocking(move || ControlPlane::start_with(&options))
            .await
            .map_err(|e| Error::Setup(format!("control plane start: {e}")))??;
        let dir = tempfile::Builder::new()
            .prefix("nodemem-bed-")
            .tempdir()
            .map_err(|e| Error::Setup(format!("temporary directory: {e}")))?;
        let kubeconfig = cp.admin_kubeconfig().to_path_buf();
        match &spec.install {
            Install::Manifests => {
                step("installing the CRDs and nodemem's RBAC and admission policy (kubectl apply)");
                for manifests in [
                    "crds",
                    "deploy/namespace.yaml",
                    "deploy/agent",
                    "deploy/controller",
                ] {
                    let path = spec.repo.join(manifests);
                    crate::clients::kubectl(
                        &kubeconfig,
                        &["apply", "-f", path.to_str().unwrap_or_default()],
                    )?;
                }
                // What deploy/install/controller.yaml writes beside the controller's
                // flags, for the controller this bed runs.
                crate::admission::write_agent_admission(
                    &kubeconfig,
                    crate::control_plane::SYSTEM_NAMESPACE,
                    &spec.controller_args,
                )?;
            }
            Install::Chart {
                release,
                args,
                chart,
            } => {
                step("installing nodemem with its Helm chart (helm install)");
                let chart = chart
                    .clone()
                    .unwrap_or_else(|| spec.repo.join("charts/nodemem"));
                let mut all: Vec<&str> = vec![
                    "install",
                    release,
                    chart.to_str().unwrap_or_default(),
                    "--namespace",
                    crate::control_plane::SYSTEM_NAMESPACE,
                    "--create-namespace",
                ];
                all.extend(args.iter().map(String::as_str));
                crate::clients::helm(&kubeconfig, &all)?;
            }
        }
        // Established before anything uses them.
        crate::crds::install_dir(&cp, &spec.repo.join("crds")).await?;
        let client = cp.client(&Identity::Admin).await?;

        step("registering the simulated nodes");
        let mut sims = Vec::new();
        for pool in &spec.pools {
            for i in 1..=pool.nodes {
                let numa = (0..pool.numa_nodes as i64)
                    .map(|id| NumaNode {
                        id,
                        memory: pool.memory_per_numa,
                        hugepages: if pool.hugepages_2mi_per_numa > 0 {
                            BTreeMap::from([(
                                "hugepages-2Mi".to_string(),
                                pool.hugepages_2mi_per_numa,
                            )])
                        } else {
                            BTreeMap::new()
                        },
                    })
                    .collect();
                let mut sim = SimNode::new(&format!("{}-{i}", pool.pool))
                    .label(POOL_LABEL, &pool.pool)
                    .numa(numa);
                sim.reserved = pool.reserved;
                sim.register(&client).await?;
                sims.push((pool.pool.clone(), sim));
            }
        }
        let mut trees = BTreeMap::new();
        for (_, sim) in &sims {
            trees.insert(
                sim.name.clone(),
                Arc::new(CgroupTree::new(CgroupDriver::Systemd, sim.numa.len())?),
            );
        }
        let kubelet = FakeKubelet::start(client.clone(), trees.clone());

        step("starting a node agent per node");
        let mut nodes = BTreeMap::new();
        for (pool, sim) in &sims {
            let node_dir = dir.path().join(&sim.name);
            write_node_files(&node_dir, sim)?;
            let agent_kubeconfig = cp.kubeconfig(&Identity::Agent(sim.name.clone())).await?;
            let tree = trees[&sim.name].clone();
            let mut args = agent_args(&sim.name, tree.root(), &node_dir, spec.agent_resync_seconds);
            args.extend([
                "--kubeconfig".into(),
                agent_kubeconfig.display().to_string(),
            ]);
            let agent = Process::spawn(
                &format!("agent {}", sim.name),
                &spec.nodemem,
                &args,
                &node_dir.join("agent.log"),
            )?;
            nodes.insert(
                sim.name.clone(),
                BedNode {
                    pool: pool.clone(),
                    tree,
                    dir: node_dir,
                    agent,
                },
            );
        }

        step("starting the controller");
        let controller_kubeconfig = cp.kubeconfig(&Identity::Controller).await?;
        let controller = Process::spawn(
            "controller",
            &spec.nodemem,
            &[
                "controller".into(),
                "--tick-seconds".into(),
                "1".into(),
                "--metrics-addr".into(),
                "127.0.0.1:0".into(),
                "--kubeconfig".into(),
                controller_kubeconfig.display().to_string(),
            ]
            .into_iter()
            .chain(spec.controller_args.iter().cloned())
            .collect::<Vec<String>>(),
            &dir.path().join("controller.log"),
        )?;
        Ok(Bed {
            nodes,
            client,
            controller,
            _kubelet: kubelet,
            cp,
            dir,
        })
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn admin_kubeconfig(&self) -> &Path {
        self.cp.admin_kubeconfig()
    }

    /// The controller's kubeconfig (its service account's token).
    pub async fn controller_kubeconfig(&self) -> Result<PathBuf, Error> {
        self.cp.kubeconfig(&Identity::Controller).await
    }

    /// A node agent's kubeconfig (the agent service account, bound to that node).
    pub async fn agent_kubeconfig(&self, node: &str) -> Result<PathBuf, Error> {
        self.cp.kubeconfig(&Identity::Agent(node.to_string())).await
    }

    pub fn controller_log(&self) -> &Path {
        self.controller.log_path()
    }

    /// The real kubectl as the cluster admin.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, Error> {
        crate::clients::kubectl(self.cp.admin_kubeconfig(), args)
    }

    /// Stops the controller as the kubelet stops its pod (SIGTERM, then SIGKILL after
    /// `grace`): a test that uninstalls or scales the controller away.
    pub fn stop_controller(&mut self, grace: std::time::Duration) {
        self.controller.stop(grace);
    }

    /// Starts every agent and the controller that exited again, as their DaemonSet and
    /// Deployment would; each line says who exited, how, and that it runs again. The
    /// kubelet's crash-loop backoff is kept (10 s doubling to 5 min between restarts of
    /// one process), so `restarts` remembers when each may start next.
    pub fn restart_exited(&mut self, restarts: &mut Restarts) -> Vec<String> {
        let now = std::time::Instant::now();
        let mut procs: Vec<&mut Process> = vec![&mut self.controller];
        procs.extend(self.nodes.values_mut().map(|n| &mut n.agent));
        let mut lines = Vec::new();
        for p in procs {
            let Some(status) = p.exited() else {
                continue;
            };
            let name = p.name().to_string();
            let entry = restarts.0.entry(name.clone()).or_insert((0, now));
            if now < entry.1 {
                continue;
            }
            match p.start_again() {
                Ok(()) => {
                    entry.0 += 1;
                    // 10 s after the first restart, doubling to 5 min.
                    let backoff = std::time::Duration::from_secs(10 * (1 << (entry.0 - 1).min(5)))
                        .min(std::time::Duration::from_secs(300));
                    entry.1 = now + backoff;
                    lines.push(format!(
                        "{name} exited ({status}); started again, as its {} would (restart {})",
                        if name == "controller" {
                            "Deployment"
                        } else {
                            "DaemonSet"
                        },
                        entry.0
                    ));
                }
                Err(e) => lines.push(format!("{name} exited ({status}) and cannot start: {e}")),
            }
        }
        lines
    }

    /// A process of the bed that exited, with its log's end (a healthy bed has none).
    pub fn exited(&mut self) -> Option<String> {
        let mut procs: Vec<&mut Process> = vec![&mut self.controller];
        procs.extend(self.nodes.values_mut().map(|n| &mut n.agent));
        procs.into_iter().find_map(|p| {
            p.exited()
                .map(|s| format!("{} exited ({s}):\n{}", p.name(), p.log_tail(20)))
        })
    }

    /// Every process of the bed (control plane, agents, controller), for checks that
    /// nothing is left behind.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = self.cp.pids();
        pids.push(self.controller.pid());
        pids.extend(self.nodes.values().map(|n| n.agent.pid()));
        pids
    }
}
