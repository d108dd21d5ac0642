//! `nodemem agent`: the node agent. `--once` computes and applies one node from files
//! (no apiserver); the in-cluster mode builds on the same engine.

pub mod cluster;
pub mod engine;
pub mod health;
pub mod index;
pub mod kubelet_mode;
pub mod metrics;
pub mod once;
mod output;
pub mod status;

use std::path::PathBuf;

use nodemem_model::cgroup_layout::CgroupDriver;

use crate::error::CliError;
use crate::simulate::ScopeArg;
use crate::Outcome;

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
pub enum LogFormat {
    Text,
    Json,
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
    /// This node's name (default: the NODE_NAME environment variable).
    #[arg(long)]
    pub node_name: Option<String>,
    /// Seconds between full passes that read every file and repair drift.
    #[arg(long, default_value_t = 300)]
    pub resync_seconds: u64,
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
    /// The kubelet's configuration file (a read-only host mount): files it enforces
    /// itself are left to it.
    #[arg(long, default_value = "/var/lib/kubelet/config.yaml")]
    pub kubelet_config: PathBuf,
    /// The kubelet's --config-dir, whose *.conf drop-ins override the file. Under
    /// enforcement: Kubelet the agent writes its drop-in (99-nodemem.conf) here, so
    /// this mount must be writable then.
    #[arg(long)]
    pub kubelet_config_dir: Option<PathBuf>,
    /// The kubelet's Memory Manager state file, removed before a change of its
    /// memoryManagerPolicy or reservedMemory (the kubelet refuses to start on it).
    #[arg(long, default_value = "/var/lib/kubelet/memory_manager_state")]
    pub kubelet_memory_manager_state: PathBuf,
    /// Restarts the kubelet after its drop-in changed, run with `sh -c` (for example
    /// `nsenter -t 1 -m -- systemctl restart kubelet`). Without it the config reports
    /// KubeletRestartRequired until the kubelet is seen to restart.
    #[arg(long)]
    pub kubelet_restart_command: Option<String>,
    /// Answers 200 once the restarted kubelet is back (plain http).
    #[arg(long, default_value = "http://127.0.0.1:10248/healthz")]
    pub kubelet_healthz_url: String,
    /// How long the restart command and the kubelet's return may take.
    #[arg(long, default_value_t = 120)]
    pub kubelet_restart_timeout_seconds: u64,
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

/// Logs on stderr (text, colored on a terminal, or JSON), filtered by RUST_LOG (info
/// by default).
pub fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Text => logs.try_init(),
        LogFormat::Json => logs.json().try_init(),
    };
}

pub fn run(args: &AgentArgs) -> Result<Outcome, CliError> {
    if args.once {
        return once::run(args);
    }
    let node_name = args
        .node_name
        .clone()
        .or_else(|| std::env::var("NODE_NAME").ok())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            CliError::one("the agent needs its node's name: --node-name or NODE_NAME (the downward API's spec.nodeName)")
        })?;
    init_logs(args.log_format);
    let engine = once::engine_config(args);
    let kubelet = kubelet_mode::KubeletModeConfig {
        files: engine.kubelet.clone(),
        memory_manager_state: args.kubelet_memory_manager_state.clone(),
        proc_root: args.proc_root.clone(),
        restart: kubelet_mode::KubeletRestart {
            command: args
                .kubelet_restart_command
                .clone()
                .filter(|c| !c.trim().is_empty()),
            healthz: Some(args.kubelet_healthz_url.clone()).filter(|u| !u.is_empty() && u != "off"),
            timeout: std::time::Duration::from_secs(args.kubelet_restart_timeout_seconds.max(1)),
        },
    };
    let mut agent = cluster::ClusterAgent::new(
        node_name,
        engine,
        kubelet,
        std::time::Duration::from_secs(args.resync_seconds.max(1)),
    );
    if args.per_container_metrics {
        agent.metrics = std::sync::Arc::new(metrics::Metrics::with_container_series(
            args.per_container_metrics_cap,
        ));
    }
    agent.metrics_addr = match args.metrics_addr.as_str() {
        "" | "off" => None,
        a => Some(a.parse().map_err(|e| {
            CliError::one(format!(
                "--metrics-addr {a:?}: {e}; give host:port such as 0.0.0.0:9180, or off"
            ))
        })?),
    };
    // One thread: the agent waits on the network and the kernel nearly all the time
    // (a worker pool would add threads and per-thread allocator arenas that idle
    // agents on every node pay for). The inotify reader has a thread of its own.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::one(format!("cannot start the async runtime: {e}")))?;
    let kubeconfig = args.kubeconfig.clone();
    runtime.block_on(async move {
        let client = crate::kubeclient::client(kubeconfig.as_deref(), None).await?;
        agent.run(client).await.map_err(CliError::one)
    })?;
    Ok(Outcome::default())
}
