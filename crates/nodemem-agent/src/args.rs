//! The flags of `nodemem agent`.

use std::path::PathBuf;

use nodemem_model::values::cgroup_layout::CgroupDriver;
use nodemem_plumbing::flags::ScopeArg;
use nodemem_plumbing::logs::LogFormat;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DriverArg {
    Systemd,
    Cgroupfs,
}

impl From<DriverArg> for CgroupDriver {
    fn from(d: DriverArg) -> Self {
        match d {
            DriverArg::Systemd => CgroupDriver::Systemd,
            DriverArg::Cgroupfs => CgroupDriver::Cgroupfs,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnceFormat {
    Table,
    Json,
}

/// Arguments of `nodemem agent`.
#[derive(Clone, Debug, clap::Args)]
pub struct AgentArgs {
    /// Compute and apply the node once from files, then exit (no apiserver).
    #[arg(long)]
    pub once: bool,
    /// Print what the agent reads of the host's kubelet, then exit: the process it
    /// takes for the kubelet (and those it ignores), the files and flags read, and each
    /// field nodemem uses in the kubelet's own names, with the defaults of
    /// --kubelet-version where nothing names it (as the kubelet's /configz prints
    /// them). Writes nothing; needs no apiserver.
    #[arg(long, conflicts_with = "once")]
    pub print_kubelet: bool,
    /// With --print-kubelet: the kubelet's version (v1.36.3), whose defaults fill the
    /// fields its configuration leaves out. Default: the newest version nodemem is
    /// tested with.
    #[arg(long, requires = "print_kubelet")]
    pub kubelet_version: Option<String>,
    /// Run as the agent's kubelet reader (started by the agent itself; see
    /// docs/security.md): answer requests for the host kubelet's files on stdin.
    #[arg(long, hide = true, conflicts_with_all = ["once", "print_kubelet"])]
    pub kubelet_reader: bool,
    /// The agent may write the kubelet's files (nodemem's drop-in, the Memory Manager's
    /// state file) where `enforcement: Kubelet` asks it to; without it, they are only
    /// read. The controller's DaemonSet gives it where the install allows
    /// `enforcement: Kubelet` (`--agent-enforcement-modes`, every mode by default).
    #[arg(long)]
    pub kubelet_writes: bool,
    /// This node's name (default: the NODE_NAME environment variable).
    #[arg(long)]
    pub node_name: Option<String>,
    /// Seconds between full passes that read every file and repair drift.
    #[arg(long, default_value_t = 300)]
    pub resync_seconds: u64,
    /// How often each managed container's working set, memory.peak and memory.high
    /// events are sampled for the observation in status (0: never).
    #[arg(long, default_value_t = 10)]
    pub observe_seconds: u64,
    /// At most one status write per this many seconds when only figures or counters
    /// changed: the observation's figures, managedPods and the totals (conditions,
    /// revisions, the signals since a revision and errors are written at once).
    #[arg(long, default_value_t = 30)]
    pub status_refresh_seconds: u64,
    /// Logs on stderr: human text, or one JSON object per line.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// A kubeconfig to reach the apiserver with (default: KUBECONFIG, else the pod's
    /// service account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Where to serve /metrics, /healthz and /readyz (host:port, or off).
    #[arg(long, default_value = "0.0.0.0:9180")]
    pub metrics_addr: String,
    /// Also export memory.high events and OOM kills per container (one series each);
    /// by default they are per pod and per QoS class only.
    #[arg(long)]
    pub per_container_metrics: bool,
    /// The most containers given series of their own with --per-container-metrics;
    /// the rest are counted in nodemem_agent_containers_not_exported.
    #[arg(long, default_value_t = 500, requires = "per_container_metrics")]
    pub per_container_metrics_cap: usize,
    /// The NodeMemoryConfig to enforce (YAML).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// This node's core/v1 Node (allocatable memory; name).
    #[arg(long)]
    pub node: Option<PathBuf>,
    /// The pods on this node, as `kubectl get pods -A -o yaml --field-selector
    /// spec.nodeName=NODE` prints them (container IDs from status).
    #[arg(long)]
    pub pods: Option<PathBuf>,
    /// The cgroup v2 mount.
    #[arg(long, default_value = "/sys/fs/cgroup")]
    pub cgroup_root: PathBuf,
    /// Where sysfs is mounted (NUMA nodes).
    #[arg(long, default_value = "/sys")]
    pub sys_root: PathBuf,
    /// Where procfs is mounted (kernel version).
    #[arg(long, default_value = "/proc")]
    pub proc_root: PathBuf,
    /// The agent's state: what nodemem set and what it held before, NUMA assignments.
    #[arg(long, default_value = "/var/lib/nodemem")]
    pub state_dir: PathBuf,
    /// The kubelet's configuration file, for a node whose kubelet process the agent
    /// cannot see. Without it the agent finds the running kubelet under --proc-root
    /// (it needs the host's PID namespace) and reads what its command line names
    /// (--config, --config-dir, the flags over them; k3s's --kubelet-arg) through the
    /// kubelet's own root.
    #[arg(long)]
    pub kubelet_config: Option<PathBuf>,
    /// With --kubelet-config: the kubelet's --config-dir, whose *.conf drop-ins
    /// override the file. Without it: a mount of the kubelet's --config-dir (checked to
    /// be that directory) for the drop-in; by default the drop-in is written through
    /// the kubelet's root. Under enforcement: Kubelet the agent writes its drop-in
    /// (~nodemem.conf) there, so it must be writable then.
    #[arg(long)]
    pub kubelet_config_dir: Option<PathBuf>,
    /// The kubelet's Memory Manager state file, removed before a change of its
    /// memoryManagerPolicy or reservedMemory (the kubelet refuses to start on it). By
    /// default memory_manager_state under the kubelet's --root-dir
    /// (/var/lib/kubelet with --kubelet-config).
    #[arg(long)]
    pub kubelet_memory_manager_state: Option<PathBuf>,
    /// Restarts the kubelet's systemd unit (for example kubelet.service) after its
    /// drop-in changed, through systemd's D-Bus API at --systemd-run-dir (as `systemctl
    /// restart` does); the kubelet is back once a new kubelet process has stayed up for
    /// 5 s (needs hostPID) and its healthz answers, unless that is off.
    #[arg(
        long,
        conflicts_with = "kubelet_restart_command",
        requires = "systemd_run_dir"
    )]
    pub kubelet_restart_unit: Option<String>,
    /// Restarts the kubelet after its drop-in changed, run with `sh -c` (for example
    /// `nsenter -t 1 -m -- systemctl restart kubelet`). Without it or
    /// --kubelet-restart-unit the config reports KubeletRestartRequired until the
    /// kubelet is seen to restart.
    #[arg(long)]
    pub kubelet_restart_command: Option<String>,
    /// Answers 200 once the restarted kubelet is back (plain http); `off` where the
    /// kubelet's loopback is not reachable (a pod off the host network).
    #[arg(long, default_value = "http://127.0.0.1:10248/healthz")]
    pub kubelet_healthz_url: String,
    /// How long the restart and the kubelet's return may take.
    #[arg(long, default_value_t = 120)]
    pub kubelet_restart_timeout_seconds: u64,
    /// Where the host's /run is mounted: its D-Bus and systemd sockets
    /// (dbus/system_bus_socket, then systemd/private). On a systemd-driver node the
    /// in-cluster agent also sets the values it writes into slices and scopes as unit
    /// properties there, as runc does, so that systemd's reloads and re-applies keep
    /// them. Without it (and with --once) the cgroup files only.
    #[arg(long)]
    pub systemd_run_dir: Option<PathBuf>,
    /// containerd's task directory for Kubernetes containers (the host's
    /// /run/containerd/io.containerd.runtime.v2.task/k8s.io, read-only): a new
    /// container's cgroup is named from its bundle's spec the moment it appears, not
    /// seconds later when the kubelet reports the container's ID in the pod status.
    #[arg(long)]
    pub containerd_tasks_dir: Option<PathBuf>,
    /// CRI-O's container directory (the host's
    /// /run/containers/storage/overlay-containers, read-only), for the same.
    #[arg(long)]
    pub crio_containers_dir: Option<PathBuf>,
    /// New containers created with nodemem's values in their spec, through the
    /// container runtime's NRI socket (containerd 2.x and CRI-O have NRI on by
    /// default): auto where the socket answers, the reaction elsewhere; on: NRI only
    /// (the runtime's records above are not read); off: the reaction only.
    #[arg(long, value_enum, default_value_t = crate::nri::NriMode::Auto)]
    pub nri: crate::nri::NriMode,
    /// The runtime's NRI socket.
    #[arg(long, default_value = nodemem_nri::DEFAULT_SOCKET)]
    pub nri_socket: PathBuf,
    /// The plugin index: NRI calls plugins in index order, and of two plugins that set
    /// the same value the later one is refused. The default runs after resource-policy
    /// plugins (which place containers on CPUs and NUMA nodes first).
    #[arg(long, default_value = crate::nri::DEFAULT_INDEX)]
    pub nri_index: String,
    /// Override the cgroup driver detected from the tree.
    #[arg(long, value_enum)]
    pub cgroup_driver: Option<DriverArg>,
    /// The kubelet's topologyManagerScope.
    #[arg(long, value_enum, default_value_t = ScopeArg::Container)]
    pub topology_manager_scope: ScopeArg,
    /// Print the writes without performing them; the state is not changed.
    #[arg(long)]
    pub dry_run: bool,
    /// With --once: stay, and cover each cgroup the moment its directory appears.
    #[arg(long, requires = "once")]
    pub follow: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OnceFormat::Table)]
    pub output: OnceFormat,
}

impl AgentArgs {
    /// systemd's D-Bus addresses under `--systemd-run-dir`, none without it: the one
    /// place the agent learns whether it talks to systemd (values held in units, the
    /// kubelet restarted through its unit).
    pub fn systemd_buses(&self) -> Vec<nodemem_systemd::BusAddress> {
        self.systemd_run_dir
            .as_deref()
            .map(|run| nodemem_systemd::BusAddress::host(run).to_vec())
            .unwrap_or_default()
    }
}
